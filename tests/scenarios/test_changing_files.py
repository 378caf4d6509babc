"""Photos that change between the walk and the decode: rewritten, truncated, deleted, swapped for
something that is not a file. Nothing crashes, each is decoded as it is now or reported, and the
next scan agrees with the disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from common import child_env, make_photo, rank_all_as_json

from novelfind.base import door
from novelfind.cli.group import cli
from novelfind.errors import DecodeError
from novelfind.media.decode import file_digest, read_for_model

ROOT = Path(__file__).resolve().parents[2]
FAKE_CLI = ROOT / "tests" / "support" / "fake_cli.py"


# --------------------------------------------------------------------------- one file, at decode time


def test_deleted_after_the_walk_is_a_reason(tmp_path):
    photo = make_photo(tmp_path / "a.jpg", (200, 30, 30), seed=1)
    photo.unlink()
    with pytest.raises(DecodeError, match="^No such file or directory$"):
        read_for_model(photo)


@pytest.mark.parametrize("suffix", [".jpg", ".png", ".webp", ".gif", ".tif"])
def test_truncated_after_the_walk_is_a_reason_never_half_an_image(tmp_path, suffix):
    photo = make_photo(tmp_path / f"a{suffix}", (200, 30, 30), seed=1, size=(300, 200))
    data = photo.read_bytes()
    for keep in (0, 7, len(data) // 3):
        photo.write_bytes(data[:keep])
        with pytest.raises(DecodeError) as info:
            read_for_model(photo)
        reason = str(info.value)
        assert reason.strip() and "\n" not in reason, reason


def test_rewritten_after_the_walk_gives_the_bytes_read(tmp_path):
    photo = make_photo(tmp_path / "a.png", (200, 30, 30), seed=1)
    make_photo(tmp_path / "b.png", (30, 30, 200), seed=2).replace(photo)  # another picture, same name
    digest, px = read_for_model(photo)
    assert digest == file_digest(photo.read_bytes())
    assert px[112, 112, 2] > 150 and px[112, 112, 0] < 100  # the blue one


def test_swapped_for_a_fifo_a_device_or_a_folder_is_refused_without_reading(tmp_path):
    photo = make_photo(tmp_path / "a.jpg", (200, 30, 30), seed=1)
    photo.unlink()
    os.mkfifo(photo)
    # Should the decoder open the FIFO and block, a writer comes after a minute and the read
    # ends with no bytes, which fails the test instead of hanging it.
    done = threading.Event()

    def unblock() -> None:
        if not done.wait(60):
            with open(photo, "wb"):
                pass

    guard = threading.Thread(target=unblock)
    guard.start()
    try:
        with pytest.raises(DecodeError, match="^not a regular file$"):
            read_for_model(photo)
    finally:
        done.set()
        guard.join()
    photo.unlink()
    photo.symlink_to("/dev/null")  # reads as empty; /dev/zero or a disk device would never end
    with pytest.raises(DecodeError, match="symbolic link novelfind did not create"):
        read_for_model(photo)  # a link is not followed
    with (
        door.scanning([tmp_path], follow_links=True),
        pytest.raises(DecodeError, match="^not a regular file$"),
    ):
        read_for_model(photo)  # followed when the user asks, and the device refused
    photo.unlink()
    photo.mkdir()
    with pytest.raises(DecodeError, match="^not a regular file$"):
        read_for_model(photo)


# --------------------------------------------------------------------------- a scan while files change


def _scan(args: list, env: dict, timeout: float = 300) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [sys.executable, str(FAKE_CLI), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr


@pytest.mark.slow
def test_files_changed_during_a_scan_then_the_next_scan_agrees_with_the_disk(tmp_path):
    """A slow scan runs while the last folder's photos are rewritten, truncated, deleted and replaced
    by a FIFO. Whatever the scan saw of them, it finishes (0 or 3), and a second scan on the same cache
    gives exactly what a scan without a cache gives: nothing stale came out of the cache."""
    library = tmp_path / "photos"
    for i in range(40):
        make_photo(library / "a-early" / f"IMG_{i:04d}.jpg", (40 + i, 60, 200), seed=i, size=(64, 48))
    late = [
        make_photo(library / "z-late" / f"IMG_{i:04d}.png", (200, 40 + i, 30), seed=100 + i, size=(64, 48))
        for i in range(12)
    ]
    cache = tmp_path / "cache.sqlite"
    env = child_env(tmp_path)
    args = rank_all_as_json(library, "--batch-size", "4", "--workers", "1", "--cache", cache)
    slow = subprocess.Popen(
        [sys.executable, str(FAKE_CLI), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "NOVELFIND_TEST_DELAY": "0.3"},
    )
    deadline = time.monotonic() + 120
    while not cache.exists() and slow.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the walk is over once the cache is open; the late folder is decoded last
    for i, photo in enumerate(late):
        kind = i % 4
        if kind == 0:  # rewritten with another picture (a later mtime and other bytes)
            make_photo(tmp_path / "new.png", (20, 220, 20), seed=500 + i, size=(64, 48)).replace(photo)
        elif kind == 1:
            photo.write_bytes(photo.read_bytes()[:50])
        elif kind == 2:
            photo.unlink()
        else:
            photo.unlink()
            os.mkfifo(photo)
    out, err = slow.communicate(timeout=600)
    assert slow.returncode in (0, 3), err
    assert "Traceback" not in err
    first = json.loads(out)
    seen = {p["path"] for p in first["picks"]} | {f["path"] for f in first["failures"]}
    assert len(seen) == len(first["picks"]) + len(first["failures"])  # each once
    assert {str(p) for p in (library / "a-early").iterdir()} <= seen

    code, again, _ = _scan(args, env)
    code_ref, reference, _ = _scan([*args[:-2], "--no-cache"], env)
    # 3 for the files the first scan saw whole and this one finds truncated; 0 when the first scan
    # already reported them all (known unreadable files do not count again)
    assert code in (0, 3) and code_ref == 3
    assert [(p["path"], p["score"]) for p in again["picks"]] == [
        (p["path"], p["score"]) for p in reference["picks"]
    ]
    assert {f["path"] for f in again["failures"]} == {f["path"] for f in reference["failures"]}
    # the walk skips the FIFOs and no longer finds the deleted photos; the truncated ones are unreadable
    assert {f["path"] for f in reference["failures"]} == {str(late[i]) for i in range(1, 12, 4)}
    assert len(reference["picks"]) == 40 + 3  # the early photos and the rewritten late ones
    assert again["run"]["from_cache"] >= 40


def test_a_folder_removed_mid_walk_is_reported_and_the_next_scan_agrees_with_the_disk(
    tmp_path, fake_extractor, monkeypatch
):
    """While the walk lists folder b, folders b and c go: c is reported, the rest is ranked; the next
    scan on the same cache ranks what is left, as a scan without a cache does."""
    import novelfind.media.walk

    library = tmp_path / "photos"
    for folder in "abcd":
        for i in range(4):
            make_photo(library / folder / f"IMG_{i}.jpg", (40 + 40 * i, 60, 200), seed=ord(folder) * 10 + i)
    real_scandir = os.scandir

    class ListingRemovesFolders:
        """os.scandir that lists folder b, then removes b and c (an rm -r running beside the scan)."""

        def __init__(self, path):
            self.path, self.it = path, real_scandir(path)

        def __enter__(self):
            entries = list(self.it)
            if isinstance(self.path, str) and os.path.basename(self.path) == "b":
                subprocess.run(["rm", "-r", str(library / "b"), str(library / "c")], check=True)
            return iter(entries)

        def __exit__(self, *exc):
            self.it.close()

    cache = tmp_path / "cache.sqlite"
    args = ["scan", library, "--k", "100", "--dedup", "0", "--format", "json", "--workers", "0"]
    with monkeypatch.context() as m:
        m.setattr(novelfind.media.walk.os, "scandir", ListingRemovesFolders)
        first = CliRunner().invoke(cli, [*map(str, args), "--cache", str(cache)])
    assert first.exit_code == 3, first.output  # finished, some photos unreadable
    assert "Traceback" not in first.stderr
    # c is reported; b's photos, gone before the walk looked at them, are simply not there
    warned = [line for line in first.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [f"warning: cannot read {library / 'c'}: folder removed during the walk"], first.stderr
    ranked = {p["path"] for p in json.loads(first.stdout)["picks"]}
    assert ranked == {str(library / f / f"IMG_{i}.jpg") for f in "ad" for i in range(4)}

    again = CliRunner().invoke(cli, [*map(str, args), "--cache", str(cache)])
    reference = CliRunner().invoke(cli, [*map(str, args), "--no-cache"])
    assert again.exit_code == reference.exit_code == 0, again.output
    assert json.loads(again.stdout)["picks"] == json.loads(reference.stdout)["picks"]
    assert {p["path"] for p in json.loads(again.stdout)["picks"]} == ranked
