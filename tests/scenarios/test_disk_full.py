"""A real full file system under the feature cache or the outputs: a tiny tmpfs in a mount namespace.

``unshare --user --map-root-user --mount`` (or, for root, ``unshare --mount``) gives the test its
own mounts without touching the machine's, and they vanish with it: the cache (or the results file,
the report and the --copy-to folder) lives on a tmpfs of a few hundred KB that fills up part-way
through a scan, then is remounted larger for the next run. Everything else is on the ordinary disk.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from common import child_env, make_photo, missing_prerequisite

ROOT = Path(__file__).resolve().parents[2]
FAKE_CLI = ROOT / "tests" / "support" / "fake_cli.py"
SUMMARY = re.compile(
    r"(\d+) photos \(\d+ files\) found, (\d+) read from cache, (\d+) extracted, (\d+) failed"
)
PHOTOS = 300

# Runs inside the namespace: mount, scan, inspect, remount, scan again. Writes what it saw as JSON.
_DRIVER = r"""
import json, os, shutil, sqlite3, subprocess, sys
fake_cli, library, work, mnt, size, grown, prefill, small = sys.argv[1:9]
cache = os.path.join(work if small == "outputs" else mnt, "features.sqlite")
out = mnt if small == "outputs" else work
# mode 0700: a tmpfs is 1777 by default, a folder anyone can write, where novelfind keeps no cache
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", mnt], check=True)
if prefill != "0":  # the file system is full before the scan starts
    with open(os.path.join(mnt, "filler"), "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass

def scan(name):
    args = [sys.executable, fake_cli, "scan", library, "--k", "5", "--dedup", "0", "--format", "json",
            "--batch-size", "16", "--workers", "1", "-o", os.path.join(out, name + ".json"),
            "--report", os.path.join(out, name + ".html"), "--cache", cache]
    if small == "outputs":
        args += ["--copy-to", os.path.join(out, name + "-picks")]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    return {"code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

def inspect():
    if not os.path.exists(cache):
        return {"exists": False}
    conn = sqlite3.connect(cache, timeout=30)
    try:
        found = {"exists": True, "integrity": conn.execute("PRAGMA integrity_check").fetchone()[0]}
        if conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'files'").fetchone()[0]:
            found["rows"] = conn.execute(
                "SELECT count(*) FROM files f JOIN vectors v ON v.digest = f.digest").fetchone()[0]
        return found
    finally:
        conn.close()

def snapshot(tag):  # a copy of what the small disk holds (but the filler): the mount goes with the namespace
    shutil.copytree(mnt, os.path.join(work, "disk-" + tag), ignore=lambda d, names: ["filler"])

report = {"first": scan("first")}
report["after_first"] = inspect()
snapshot("first")
if prefill != "0":
    os.unlink(os.path.join(mnt, "filler"))
subprocess.run(["mount", "-o", f"remount,size={grown}", mnt], check=True)
report["second"] = scan("second")
report["after_second"] = inspect()
snapshot("second")
print(json.dumps(report))
"""


def namespace_runner() -> list[str]:
    """A command prefix that runs its command with mounts of its own: a user namespace where those are
    allowed (no root needed), else, for root, a plain mount namespace."""
    unshare = shutil.which("unshare")
    if unshare is None:
        missing_prerequisite("unshare (util-linux) is needed to mount a small tmpfs")
    candidates = [[unshare, "--user", "--map-root-user", "--mount"]]
    if os.geteuid() == 0:
        candidates.append([unshare, "--mount"])
    errors = []
    for prefix in candidates:
        probe = subprocess.run(
            [*prefix, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt && umount /mnt"], capture_output=True
        )
        if probe.returncode == 0:
            return prefix
        errors.append(probe.stderr.decode(errors="replace").strip())
    missing_prerequisite(f"cannot mount a tmpfs in a namespace of its own: {'; '.join(errors)}")
    raise AssertionError("unreachable")


def make_library(tmp_path: Path, n: int = PHOTOS, size: tuple[int, int] = (48, 36)) -> Path:
    library = tmp_path / "photos"
    for i in range(n):
        make_photo(
            library / f"d{i % 3}" / f"IMG_{i:04d}.jpg",
            ((i * 37) % 255, (i * 91) % 255, 120),
            seed=i,
            size=size,
        )
    return library


def run_driver(tmp_path: Path, size: str, prefill: bool, small: str = "cache") -> dict:
    """Scan twice with ``small`` ("cache" or "outputs") on a tmpfs of ``size``, full from the start when
    ``prefill``, grown to 64 MB between the scans."""
    library = tmp_path / "photos"
    if not library.exists():
        make_library(tmp_path)
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    work = tmp_path / "out"
    work.mkdir()
    env = child_env(tmp_path, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [
            *namespace_runner(),
            sys.executable,
            "-c",
            _DRIVER,
            str(FAKE_CLI),
            str(library),
            str(work),
            str(mnt),
            size,
            "64m",
            "1" if prefill else "0",
            small,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.splitlines()[-1])
    report["work"] = work
    report["cache"] = (work if small == "outputs" else mnt) / "features.sqlite"
    return report


def summary(stderr: str) -> tuple[int, int, int, int]:
    match = SUMMARY.search(stderr)
    assert match, stderr
    return tuple(map(int, match.groups()))


def check_outputs_complete(work: Path, name: str, stdout: str) -> list[str]:
    assert stdout == ""  # results went to -o
    picks = [p["path"] for p in json.loads((work / f"{name}.json").read_text())["picks"]]
    assert len(picks) == 5
    html = (work / f"{name}.html").read_text()
    assert html.rstrip().endswith("</html>")
    assert sorted(p.name for p in work.iterdir() if p.name.startswith(name)) == [
        f"{name}.html",
        f"{name}.json",
    ]
    return picks


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning:")]


@pytest.mark.slow
def test_cache_disk_fills_mid_scan_then_the_next_run_resumes(tmp_path):
    report = run_driver(tmp_path, "256k", prefill=False)
    first, second = report["first"], report["second"]
    cache = report["cache"]

    # The scan finishes (the results never depended on the cache) and says once, naming the cache
    # and the cause, that it went on without caching.
    assert first["code"] == 0, first["stderr"]
    assert "Traceback" not in first["stderr"]
    [warning] = warnings_of(first["stderr"])
    assert str(cache) in warning and "full" in warning and "going on without caching" in warning, warning
    picks = check_outputs_complete(report["work"], "first", first["stdout"])

    # What was committed before the disk filled is sound and whole.
    committed = report["after_first"]["rows"]
    assert report["after_first"]["integrity"] == "ok"
    assert 0 < committed < PHOTOS, committed
    assert committed % 16 == 0  # whole batches only

    # With space again, the next run reads exactly that back and extracts the rest once.
    assert second["code"] == 0, second["stderr"]
    assert warnings_of(second["stderr"]) == []
    assert summary(second["stderr"]) == (PHOTOS, committed, PHOTOS - committed, 0)
    assert report["after_second"] == {"exists": True, "integrity": "ok", "rows": PHOTOS}
    assert check_outputs_complete(report["work"], "second", second["stdout"]) == picks


@pytest.mark.slow
def test_cache_disk_full_before_the_scan_runs_without_a_cache_then_creates_it(tmp_path):
    report = run_driver(tmp_path, "256k", prefill=True)
    first, second = report["first"], report["second"]
    assert first["code"] == 0, first["stderr"]
    [warning] = warnings_of(first["stderr"])
    assert str(report["cache"]) in warning and "full" in warning, warning
    picks = check_outputs_complete(report["work"], "first", first["stdout"])
    assert report["after_first"].get("integrity", "ok") == "ok"
    assert report["after_first"].get("rows", 0) == 0
    assert second["code"] == 0, second["stderr"]
    assert warnings_of(second["stderr"]) == []
    assert summary(second["stderr"])[1] == 0  # nothing could be cached the first time
    assert report["after_second"] == {"exists": True, "integrity": "ok", "rows": PHOTOS}
    assert check_outputs_complete(report["work"], "second", second["stdout"]) == picks


# --------------------------------------------------------------------------- the outputs' file system

OUTPUT_PHOTOS = 40
PAGE = 4096


def _pages(n: int) -> int:
    return -(-n // PAGE) * PAGE


def errors_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def check_all_outputs(disk: Path, name: str) -> list[str]:
    """The results file, the report and the picks folder of scan ``name`` are there and whole."""
    picks = [p["path"] for p in json.loads((disk / f"{name}.json").read_text())["picks"]]
    assert len(picks) == 5
    assert (disk / f"{name}.html").read_text().rstrip().endswith("</html>")
    placed = sorted(p.name for p in (disk / f"{name}-picks").iterdir() if not p.name.startswith("."))
    assert [n.split("_", 1)[1] for n in placed] == [Path(p).name for p in picks]
    for n, p in zip(placed, picks, strict=True):
        assert (disk / f"{name}-picks" / n).read_bytes() == Path(p).read_bytes()
    return picks


@pytest.mark.slow
@pytest.mark.parametrize("fills", ["before the scan", "while copying the picks"])
def test_output_disk_full_is_one_error_with_each_output_whole_or_absent(tmp_path, fills):
    library = make_library(tmp_path, OUTPUT_PHOTOS, size=(640, 480))
    biggest = max(_pages(p.stat().st_size) for p in library.rglob("*.jpg"))
    # Full from the start, or room for the results file and two and a half photos: the third copy fails.
    size = "256k" if fills == "before the scan" else str(PAGE + 2 * biggest + biggest // 2)
    report = run_driver(tmp_path, size, prefill=fills == "before the scan", small="outputs")
    first, second, work = report["first"], report["second"], report["work"]

    # One clear error naming the output and the cause; the documented exit code (1: output not writable).
    assert first["code"] == 1, first["stderr"]
    assert "Traceback" not in first["stderr"] and warnings_of(first["stderr"]) == []
    [error] = errors_of(first["stderr"])
    assert "No space left on device" in error and str(tmp_path / "small-disk") in error, error
    assert first["stdout"] == ""

    # Each output is whole or absent: no half file, no temp file, no partial set of picks.
    left = sorted(str(p.relative_to(work / "disk-first")) for p in (work / "disk-first").rglob("*"))
    if fills == "before the scan":
        assert left == []
    else:
        assert "first-picks" in error  # the copies filled the disk
        assert left == ["first-picks", "first-picks/.novelfind-picks.json", "first.json"]
        assert len(json.loads((work / "disk-first" / "first.json").read_text())["picks"]) == 5
        manifest = json.loads((work / "disk-first" / "first-picks" / ".novelfind-picks.json").read_text())
        assert manifest["files"] == {}

    # The cache (on another disk) holds every vector, soundly; with space, the next run needs no model.
    assert report["after_first"] == {"exists": True, "integrity": "ok", "rows": OUTPUT_PHOTOS}
    assert second["code"] == 0, second["stderr"]
    assert errors_of(second["stderr"]) == warnings_of(second["stderr"]) == []
    assert summary(second["stderr"]) == (OUTPUT_PHOTOS, OUTPUT_PHOTOS, 0, 0)
    check_all_outputs(work / "disk-second", "second")
