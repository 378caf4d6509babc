#!/usr/bin/env python3
"""Regenerate the sample outputs shown in the README, so that they cannot go stale.

    python scripts/make_docs_samples.py           # rewrite the samples in place
    python scripts/make_docs_samples.py --check   # exit 1 when a sample differs from what the tool prints

Each sample sits between ``<!-- sample: NAME -->`` and ``<!-- /sample -->`` in a Markdown file, as a
fenced block. ``quickstart`` is the README's quick start run as written, from a new cache, with the real
model: the example set (``scripts/make_example.py``) ranked by ``novelfind scan example-photos --k 5``;
stdout, then the summary line from stderr. The folder it ran in is shown as ``/home/you``. The seconds
in the summary vary from run to run and machine to machine, so ``--check`` compares everything else
(``tests/project/test_docs.py`` runs the check). ``cache-upgrade`` is what ``novelfind cache info`` adds
for a cache 0.1.0 wrote (``docs/cache.md``): a small one made here, in 0.1.0's layout, with made-up vectors.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOWN_HOME = "/home/you"
_BLOCK = re.compile(r"(<!-- sample: (?P<name>[\w-]+) -->\n```\n)(?P<body>.*?)(```\n<!-- /sample -->)", re.S)
_SECONDS = re.compile(r", \d+(\.\d+)? s$", re.M)


def quickstart() -> str:
    """What the quick start's two commands print, run in a new folder with a new cache."""
    with tempfile.TemporaryDirectory(prefix="novelfind-sample-") as folder:
        env = {**os.environ, "NOVELFIND_CACHE": str(Path(folder) / "features.sqlite")}
        for name in ("NOVELFIND_CONFIG", "NOVELFIND_METHOD", "NOVELFIND_K", "NOVELFIND_FEATURE"):
            env.pop(name, None)
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "make_example.py"), "example-photos"],
            cwd=folder,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        done = subprocess.run(
            [sys.executable, "-m", "novelfind", "scan", "example-photos", "--k", "5"],
            cwd=folder,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        summary = done.stderr.strip().splitlines()[-1]
        text = done.stdout + summary + "\n"
        return text.replace(str(Path(folder).resolve()), SHOWN_HOME).replace(folder, SHOWN_HOME)


def cache_upgrade() -> str:
    """``cache info``'s lines (stdout, then the note on stderr) for a cache in 0.1.0's layout: 5 photos
    with the classifier output only (one a byte-identical copy), 2 also with the pooled vector."""
    import shutil

    import numpy as np
    from PIL import Image

    from novelfind.cache import FeatureCache
    from novelfind.media.decode import file_digest
    from novelfind.media.walk import ImageFile
    from novelfind.model import weights

    (logits,), (pooled,) = weights.former_keys().other, weights.former_keys().same
    with tempfile.TemporaryDirectory(prefix="novelfind-sample-") as folder:
        files = []
        for i in range(4):
            path = Path(folder) / f"IMG_{i:04d}.jpg"
            Image.new("RGB", (32, 24), (40 * i, 90, 200)).save(path)
            files.append(path)
        shutil.copy2(files[0], Path(folder) / "copy.jpg")
        files.append(Path(folder) / "copy.jpg")
        records = [
            (ImageFile(p, p.stat().st_size, p.stat().st_mtime_ns), file_digest(p.read_bytes())) for p in files
        ]
        cache = Path(folder) / "features.sqlite"
        with FeatureCache(cache, logits) as old:
            old.put_many([(f, d, np.zeros(1000, np.float32)) for f, d in records])
        with FeatureCache(cache, pooled) as old:
            old.put_many([(f, d, np.zeros(1280, np.float32)) for f, d in records[1:3]])
        done = subprocess.run(
            [sys.executable, "-m", "novelfind", "cache", "info", "--cache", str(cache)],
            check=True,
            capture_output=True,
            text=True,
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("upgrade\t", "stale\t"))]
    return "\n".join(lines) + "\n" + done.stderr


SAMPLES: dict[str, Callable[[], str]] = {"quickstart": quickstart, "cache-upgrade": cache_upgrade}
FILES = (ROOT / "README.md", ROOT / "docs" / "cache.md")


def comparable(text: str) -> str:
    """The sample without what varies between runs of the same version (the summary's seconds)."""
    return _SECONDS.sub(", N s", text)


def stale(made: dict[str, str], files=FILES) -> list[str]:
    """``FILE: NAME`` for every sample in ``files`` that differs from ``made`` (seconds aside)."""
    out = []
    for path in files:
        for m in _BLOCK.finditer(path.read_text()):
            if comparable(m["body"]) != comparable(made[m["name"]]):
                out.append(f"{path.relative_to(ROOT)}: {m['name']}")
    return out


def rewrite(made: dict[str, str], files=FILES) -> None:
    for path in files:
        text = path.read_text()
        new = _BLOCK.sub(lambda m: m[1] + made[m["name"]] + m[4], text)
        if new != text:
            path.write_text(new)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check; exit 1 when a sample is stale")
    a = ap.parse_args()
    made = {name: make() for name, make in SAMPLES.items()}
    if a.check:
        for line in stale(made):
            print(f"stale sample: {line}", file=sys.stderr)
        return 1 if stale(made) else 0
    rewrite(made)
    return 0


if __name__ == "__main__":
    sys.exit(main())
