#!/usr/bin/env python3
"""Show that a change leaves what users see as it was: every output of ``novelfind scan``, normalised.

    python scripts/compare_outputs.py snapshot DIR            # scan the sets, write their outputs to DIR
    python scripts/compare_outputs.py compare BEFORE AFTER    # exit 1 and list what differs

``snapshot`` builds two libraries once (under ``bench-results/compare/``): the README's example set (80
photos) and a 5,000-photo library (campus crops and 16 unrelated photos, ``photosets.domain_set``), then runs
the installed ``novelfind`` (``python -m novelfind``, so ``PYTHONPATH`` picks the checkout) in a fresh
process per scan, with an empty home folder and a fresh cache, so extraction, the cache, ranking and every
writer run as a user runs them. Per library it keeps:

- the results in every format (tsv, csv, json, jsonl, paths0), with what changes from run to run taken out
  (the run's seconds and the version);
- the ``--copy-to`` folder: file names and the sha256 of each file's bytes, and the manifest's entries;
- the HTML report: its markup with each embedded image replaced by the sha256 of its bytes and the run's
  seconds taken out (so the structure, the picks, the neighbours, the map and the counts are compared);
- the contact sheet: the sha256 of its decoded pixels;
- the tsv of ``--method knn`` and ``--method ads-paper``;
- stderr's summary line without its seconds, and the exit codes.

Run ``snapshot`` with the code before a change and after it, then ``compare``: identical outputs print
``same`` for every file and exit 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

HERE = Path(__file__).resolve().parent
DEFAULT_SETS = HERE.parent / "bench-results" / "compare"
LIBRARIES = {"example": 5, "library-5000": 20}  # name -> K


def build(where: Path) -> dict[str, Path]:
    """The libraries, written once (JPEG files in a folder each)."""
    sys.path.insert(0, str(HERE))
    from photosets import domain_set, example_set, load_sources, write_set

    folders = {}
    src = None
    for name in LIBRARIES:
        folder = where / name
        folders[name] = folder
        if folder.is_dir() and any(folder.iterdir()):
            continue
        src = src or load_sources()
        if name == "example":
            s = example_set(seed=0, src=src)
        else:
            s = domain_set(seed=0, n_normal=4984, k=16, src=src)
        write_set(s, folder)
    return folders


def scan(args: list[str], home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOVELFIND_", "XDG_"))}
    env.update(HOME=str(home), NOVELFIND_CACHE=str(home / "features.sqlite"), TZ="UTC")
    return subprocess.run([sys.executable, "-m", "novelfind", "scan", *args], env=env, capture_output=True)


def relative(text: str, root: Path) -> str:
    return text.replace(str(root.resolve()), "LIB").replace(str(root), "LIB")


def normalise_run(obj: dict) -> dict:
    obj = dict(obj)
    obj.pop("seconds", None)
    obj.pop("version", None)
    return obj


def normalise_json(text: str) -> str:
    doc = json.loads(text)
    doc["run"] = normalise_run(doc["run"])
    return json.dumps(doc, indent=1, sort_keys=True)


def normalise_jsonl(text: str) -> str:
    lines = []
    for line in text.splitlines():
        obj = json.loads(line)
        if obj.get("type") == "run" or "run" in obj:
            obj = normalise_run(obj.get("run", obj)) if "run" in obj else normalise_run(obj)
        lines.append(json.dumps(obj, sort_keys=True))
    return "\n".join(lines)


DATA_URI = re.compile(r"data:image/[a-z]+;base64,([A-Za-z0-9+/=]+)")


def normalise_report(text: str) -> str:
    def digest(match: re.Match) -> str:
        return "IMAGE:" + hashlib.sha256(match.group(1).encode()).hexdigest()[:16]

    text = DATA_URI.sub(digest, text)
    text = re.sub(r"(seconds</t[dh]>\s*<td[^>]*>)[^<]*", r"\1S", text)
    text = re.sub(r"\b\d+\.\d+ s\b", "S s", text)
    text = re.sub(r"(version</t[dh]>\s*<td[^>]*>)[^<]*", r"\1V", text)
    return text.replace("><", ">\n<")


def pixels(path: Path) -> str:
    with Image.open(path) as im:
        return hashlib.sha256(im.convert("RGB").tobytes()).hexdigest()


def copies(folder: Path) -> str:
    lines = []
    for p in sorted(folder.iterdir()):
        if p.is_file() and not p.name.startswith("."):
            lines.append(f"{p.name}\t{hashlib.sha256(p.read_bytes()).hexdigest()[:16]}")
        elif p.name.startswith("."):
            lines.append(f"{p.name}\t(manifest or hidden file)")
    return "\n".join(lines)


def snapshot(out: Path, sets: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    folders = build(sets)
    for name, folder in folders.items():
        k = LIBRARIES[name]
        with tempfile.TemporaryDirectory(prefix="novelfind-compare-") as tmp:
            home = Path(tmp)
            results = {}
            outputs = home / "out"
            outputs.mkdir()
            full = scan(
                [
                    str(folder),
                    "--k",
                    str(k),
                    "--format",
                    "json",
                    "-o",
                    str(outputs / "picks.json"),
                    "--copy-to",
                    str(outputs / "picks"),
                    "--report",
                    str(outputs / "report.html"),
                    "--contact-sheet",
                    str(outputs / "sheet.png"),
                ],
                home,
            )
            summary = re.sub(r", [0-9.]+ s$", ", S s", full.stderr.decode().strip().splitlines()[-1])
            results["exit-codes"] = f"full {full.returncode}"
            results["summary"] = summary
            results["json"] = normalise_json((outputs / "picks.json").read_text())
            results["copies"] = copies(outputs / "picks")
            results["report"] = normalise_report((outputs / "report.html").read_text())
            results["sheet"] = pixels(outputs / "sheet.png")
            for fmt in ("tsv", "csv", "jsonl", "paths0"):
                done = scan([str(folder), "--k", str(k), "--format", fmt], home)
                text = done.stdout.decode("utf-8", "surrogateescape")
                results[fmt] = normalise_jsonl(text) if fmt == "jsonl" else text
                results["exit-codes"] += f" {fmt} {done.returncode}"
            for method in ("knn", "ads-paper"):
                done = scan([str(folder), "--k", str(k), "--method", method], home)
                results[f"tsv-{method}"] = done.stdout.decode()
                results["exit-codes"] += f" {method} {done.returncode}"
            for key, text in results.items():
                text = relative(text, folder).replace(str(home), "HOME")
                (out / f"{name}.{key}.txt").write_text(text + "\n")
        print(f"{name}: {len(results)} outputs written to {out}", file=sys.stderr)
    return 0


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.glob("*.txt")} | {p.name for p in after.glob("*.txt")})
    differ = 0
    for name in names:
        a, b = before / name, after / name
        if not a.exists() or not b.exists():
            print(f"{name}\tmissing in {'before' if not a.exists() else 'after'}")
            differ += 1
        elif a.read_text() != b.read_text():
            print(f"{name}\tDIFFERS")
            differ += 1
        else:
            print(f"{name}\tsame")
    print(f"{len(names) - differ} of {len(names)} outputs the same", file=sys.stderr)
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("snapshot", help="scan the sets and write their normalised outputs to DIR")
    s.add_argument("dir", type=Path)
    s.add_argument("--sets", type=Path, default=DEFAULT_SETS, help="where the libraries are built")
    c = sub.add_parser("compare", help="compare two snapshots")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    a = ap.parse_args()
    if a.command == "snapshot":
        return snapshot(a.dir, a.sets)
    return compare(a.before, a.after)


if __name__ == "__main__":
    sys.exit(main())
