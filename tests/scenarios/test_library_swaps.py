"""Attacks on the files novelfind reads from a library someone else can write (docs/security.md, "The
doors"), each run end to end and asserting that it now fails.

The setting: novelfind runs as root from cron over a library that uid 1000 can write. Between the walk
and a read, that user renames symbolic links to root's private files over the photos, plants FIFOs
where a sidecar or a photo is read, or rewrites a photo. Every read of a library file goes through the
library door (``novelfind.base.door``): no link followed below a scanned folder, no FIFO waited on, a
bound on what is read, and the file checked to be the one the walk listed or the ranking saw.

Each swap is made at a fixed point of the run (when the walk is done, after the ranking, after a
decode), so an attack is decided by the code under test rather than by the scheduler. What could hang
runs in a thread or a process with a time limit: a regression fails instead of blocking the suite.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from common import child_env, make_photo
from PIL import Image

import novelfind
from novelfind import run as run_module
from novelfind.base import door
from novelfind.cli.group import cli
from novelfind.extract import stage
from novelfind.media import dates, decode
from novelfind.media.sidecars import sidecar_candidates
from novelfind.outputs import write as outputs

ROOT = Path(__file__).resolve().parents[2]
FAKE_CLI = ROOT / "tests" / "support" / "fake_cli.py"
ATTACKER_UID = 1000  # the owner of the library when the tests run as root (as in CI)
PRIVATE_COLOUR = (255, 0, 255)  # root's private photo: solid magenta, a colour no library photo has
PHOTOS = 6
HANG_LIMIT_S = 120  # a hang detector, not a speed bound: the scan or read must not block at all


@pytest.fixture
def library(tmp_path) -> Path:
    """Six small bluish photos without EXIF, in a folder the attacker owns (when run as root)."""
    root = tmp_path / "library"
    for i in range(PHOTOS):
        make_photo(root / f"IMG_{i:04d}.jpg", (40 + 20 * i, 90, 200 - 20 * i), seed=i, size=(64, 48))
    if os.geteuid() == 0:
        for path in (root, *root.iterdir()):
            os.chown(path, ATTACKER_UID, ATTACKER_UID)
    return root


@pytest.fixture
def private(tmp_path) -> Path:
    """root's private photo: mode 0600 in a 0700 folder."""
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    secret = folder / "secret.jpg"
    Image.new("RGB", (64, 48), PRIVATE_COLOUR).save(secret, quality=95)
    secret.chmod(0o600)
    return secret


def _link_over(path: Path, target: Path | str) -> None:
    """Rename a fresh symbolic link to ``target`` over ``path`` (atomic, as the attacker does)."""
    bait = path.with_name(f".bait-{os.urandom(4).hex()}")
    os.symlink(target, bait)
    os.rename(bait, path)


def _links_over_photos(library: Path, secret: Path, count: int = PHOTOS) -> list[Path]:
    photos = sorted(library.glob("IMG_*.jpg"))[:count]
    for photo in photos:
        _link_over(photo, secret)
    return photos


def _private_share(img: Image.Image) -> float:
    """The share of the picture's pixels that are the private photo's colour."""
    px = np.asarray(img.convert("RGB"), dtype=int)
    return float((np.abs(px - np.array(PRIVATE_COLOUR)).max(axis=-1) <= 40).mean())


def _report_thumbnails(report: Path) -> list[Image.Image]:
    """Every thumbnail the report holds (its data: URIs), decoded."""
    html = report.read_text(encoding="utf-8")
    found = re.findall(r"data:image/[a-z]+;base64,([A-Za-z0-9+/=]+)", html)
    return [Image.open(io.BytesIO(base64.b64decode(uri))) for uri in found]


def _nothing_private_in(report: Path, sheet: Path, secret: Path) -> list[Image.Image]:
    """Assert that neither the report nor the contact sheet shows the private photo (nor holds its
    bytes); the report's thumbnails."""
    with Image.open(secret) as original:
        assert _private_share(original) == 1.0  # what a leak would look like
    thumbs = _report_thumbnails(report)
    assert all(_private_share(t) == 0.0 for t in thumbs)
    assert secret.read_bytes() not in report.read_bytes()
    with Image.open(sheet) as img:
        assert _private_share(img) == 0.0
    return thumbs


def _scan_cli(*args: str | Path):
    return CliRunner().invoke(cli, ["scan", *map(str, args)])


def _warned(stderr: str, photos: list[Path], what: str) -> None:
    """One warning line naming each photo, saying why and what it is missing from."""
    for photo in photos:
        lines = [line for line in stderr.splitlines() if str(photo) in line and what in line]
        assert len(lines) == 1, (photo, stderr)
        assert lines[0].startswith("warning:") and "symbolic link" in lines[0], lines[0]


# --- 1. a private photo swapped in for the library's photos: never in the report or the contact sheet --


def test_links_swapped_in_after_the_walk_show_nothing_private(
    fake_extractor, library, private, tmp_path, monkeypatch
):
    """A cached library (nothing is decoded again), the photos swapped for links to root's photo when the
    walk is done. Before, the run exited 0 without a word, and the report held six thumbnails of the
    private photo, the contact sheet showed it."""
    cache = tmp_path / "c.sqlite"
    first = _scan_cli(library, "--k", PHOTOS, "--dedup", 0, "--cache", cache)
    assert first.exit_code == 0, first.stderr
    real = run_module.find_photos

    def walked_then_swapped(*args, **kwargs):
        found = real(*args, **kwargs)
        _links_over_photos(library, private)
        return found

    monkeypatch.setattr(run_module, "find_photos", walked_then_swapped)
    report, sheet = tmp_path / "report.html", tmp_path / "sheet.png"
    result = _scan_cli(
        library, "--k", PHOTOS, "--dedup", 0, "--cache", cache, "--report", report, "--contact-sheet", sheet
    )
    assert _nothing_private_in(report, sheet, private) == []  # every photo shown is now a link
    assert result.exit_code == 3, result.stderr  # finished, files not read: each named on stderr
    photos = sorted(library.glob("IMG_*.jpg"))
    _warned(result.stderr, photos, "not shown in the report")
    _warned(result.stderr, photos, "not shown in the contact sheet")


def test_links_swapped_in_before_the_first_decode_are_not_read(library, private, tmp_path, fake_extractor):
    """The same swap of half the photos through ``novelfind.scan``, from its progress callback when the
    walk is done, on a first scan: the linked photos fail their decode; the others are ranked and shown."""
    swapped: list[Path] = []

    def on_progress(event) -> None:
        if event.stage == "walk" and not swapped:
            swapped.extend(_links_over_photos(library, private, PHOTOS // 2))

    failed: list[tuple[Path, str]] = []
    report, sheet = tmp_path / "report.html", tmp_path / "sheet.png"
    result = novelfind.scan(
        library,
        PHOTOS,
        dedup=0,
        cache=tmp_path / "c.sqlite",
        report=report,
        contact_sheet=sheet,
        on_progress=on_progress,
        on_failure=lambda path, reason: failed.append((path, reason)),
    )
    assert len(swapped) == PHOTOS // 2
    assert sorted(path for path, _ in failed) == swapped
    assert all("symbolic link" in reason for _, reason in failed)
    assert {p.path for p in result.picks} == set(library.glob("IMG_*.jpg")) - set(swapped)
    assert len(_nothing_private_in(report, sheet, private)) >= len(result.picks)  # each pick is shown


def test_links_swapped_in_after_the_ranking_show_nothing_private(
    fake_extractor, library, private, tmp_path, monkeypatch
):
    """The photos swapped for links after the ranking, just before the report is written; an earlier
    report kept thumbnails of the photos, made while they were still photos."""
    cache = tmp_path / "c.sqlite"
    report, sheet = tmp_path / "report.html", tmp_path / "sheet.png"
    args = ("--k", PHOTOS, "--dedup", 0, "--cache", cache, "--report", report, "--contact-sheet", sheet)
    first = _scan_cli(library, *args)
    assert first.exit_code == 0, first.stderr
    assert len(_nothing_private_in(report, sheet, private)) >= PHOTOS  # the kept thumbnails
    real = outputs.write_html_report

    def swapped_then_written(*a, **kw):
        _links_over_photos(library, private)
        return real(*a, **kw)

    monkeypatch.setattr(outputs, "write_html_report", swapped_then_written)
    result = _scan_cli(library, *args)
    assert _nothing_private_in(report, sheet, private) == []  # neither made again nor taken from the kept
    assert result.exit_code == 3, result.stderr
    photos = sorted(library.glob("IMG_*.jpg"))
    _warned(result.stderr, photos, "not shown in the report")
    _warned(result.stderr, photos, "not shown in the contact sheet")


# --- 2. FIFOs where a sidecar or a photo is read: never waited on ---------------------------------------


def test_a_fifo_planted_as_a_sidecar_does_not_hang_the_scan(library, tmp_path):
    """``IMG_0003.jpg.xmp`` a FIFO beside a photo without EXIF (its sidecar is read for the date), and
    ``IMG_0004.xmp`` another. Before, the scan blocked in ``open()`` for ever."""
    os.mkfifo(library / "IMG_0003.jpg.xmp")
    os.mkfifo(library / "IMG_0004.xmp")
    args = ["scan", str(library), "--k", str(PHOTOS), "--dedup", "0", "--format", "json"]
    proc = subprocess.run(
        [sys.executable, str(FAKE_CLI), *args, "--cache", str(tmp_path / "c.sqlite")],
        capture_output=True,
        env=child_env(tmp_path),
        timeout=HANG_LIMIT_S,
    )
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    picks = {Path(p["path"]).name: p for p in json.loads(proc.stdout)["picks"]}
    assert len(picks) == PHOTOS
    assert picks["IMG_0003.jpg"]["taken_source"] != "xmp" and picks["IMG_0004.jpg"]["taken_source"] != "xmp"


def _in_thread(fn: Callable[[], object]) -> object:
    """``fn()`` in a thread, bounded: what it returned; the test fails when it blocked."""
    out: dict[str, object] = {}

    def go() -> None:
        try:
            out["value"] = fn()
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            out["error"] = err

    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    worker.join(HANG_LIMIT_S)
    assert not worker.is_alive(), "the read blocked on a FIFO"
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["value"]


def test_a_photo_swapped_for_a_fifo_after_its_decode_is_not_waited_on(library, monkeypatch):
    """The photo is replaced by a FIFO between its decode and the read of its capture date (what a decode
    process does for each file). Before, ``dates.image_date`` blocked in ``Image.open(path)``."""
    photo = library / "IMG_0003.jpg"
    listed = (photo.stat().st_size, photo.stat().st_mtime_ns)
    real = decode.read_for_model

    def decoded_then_swapped(path, known=frozenset()):
        got = real(path, known)
        os.unlink(path)
        os.mkfifo(path)
        return got

    monkeypatch.setattr(decode, "read_for_model", decoded_then_swapped)
    with door.scanning([library]):
        decoded = _in_thread(lambda: stage.decode_file(str(photo)))
    assert stat.S_ISFIFO(os.lstat(photo).st_mode)  # the swap happened
    assert decoded.digest is not None and decoded.taken.source == "none"  # no date read from the FIFO
    assert decoded.seen == listed  # the bytes decoded are the photo's


# --- 3. a pick swapped for a link to /dev/zero before it goes on the ignore list -------------------------


# The scan in a process of its own, limited to a few GB of address space (a read of the device without
# end fails there rather than take the machine's memory), with the swap made when the picks are about to
# go on the ignore list; it records which pick it swapped and how many bytes it read from a device.
_IGNORE_SWAP = """
import atexit, os, runpy, stat, sys
from novelfind.media.ignore import IgnoreList
record, device_bytes = sys.argv[1], [0]
real_add, real_read = IgnoreList.add_picks, os.read
def swapped_then_added(self, files, **kwargs):
    pick = os.fspath(files[0].path)
    bait = pick + ".bait"
    os.symlink("/dev/zero", bait)
    os.rename(bait, pick)
    with open(record, "w") as out:
        out.write(pick)
    return real_add(self, files, **kwargs)
def counted_read(fd, n):
    data = real_read(fd, n)
    if stat.S_ISCHR(os.fstat(fd).st_mode):
        device_bytes[0] += len(data)
    return data
IgnoreList.add_picks, os.read = swapped_then_added, counted_read
atexit.register(lambda: open(record + ".read", "w").write(str(device_bytes[0])))
sys.argv = [sys.argv[2], *sys.argv[3:]]
sys.path.insert(0, os.path.dirname(sys.argv[0]))
runpy.run_path(sys.argv[0], run_name="__main__")
"""
ADDRESS_SPACE = 4 << 30


def _limited() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.parametrize("follow", [False, True], ids=["links-not-followed", "follow-symlinks"])
def test_a_pick_swapped_for_a_device_is_not_read_for_the_ignore_list(library, tmp_path, follow):
    """``--ignore-picks`` without a cache (each pick's digest is read): the best pick is swapped for a link
    to ``/dev/zero`` after its decode. Before, ``add_picks`` read it whole (memory until killed)."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero on this system")
    record, ignored = tmp_path / "swapped.txt", tmp_path / "ignored.json"
    args = ["scan", str(library), "--k", "2", "--dedup", "0", "--no-cache", "--ignore-picks"]
    args += ["--ignore-file", str(ignored), *(["--follow-symlinks"] if follow else [])]
    proc = subprocess.run(
        [sys.executable, "-c", _IGNORE_SWAP, str(record), str(FAKE_CLI), *args],
        capture_output=True,
        env=child_env(tmp_path),
        timeout=HANG_LIMIT_S,
        preexec_fn=_limited,
    )
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0, stderr
    swapped = record.read_text()
    assert os.path.islink(swapped)  # the swap happened
    assert int(Path(f"{record}.read").read_text()) == 0  # not a byte of the device was read
    refused = [line for line in stderr.splitlines() if "cannot add" in line]
    assert len(refused) == 1 and swapped in refused[0]
    assert ("not a regular file" if follow else "symbolic link") in refused[0]
    listed = {e["path"] for e in json.loads(ignored.read_text())["ignored"].values()}
    assert swapped not in listed and len(listed) >= 1  # the other pick is on the list


# --- 4. a sidecar that is a link to root's file: its date is not read -----------------------------------


def _xmp(when: str) -> bytes:
    return (
        b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-'
        b'ns#"><rdf:Description xmlns:photoshop="http://ns.adobe.com/photoshop/1.0/" photoshop:DateCreated="'
        + when.encode()
        + b'"/></rdf:RDF></x:xmpmeta>'
    )


def test_a_sidecar_linked_to_a_private_file_is_not_read(fake_extractor, library, tmp_path):
    """``IMG_0002.jpg.xmp`` a link to root's sidecar: before, its date appeared in root's JSON output."""
    folder = tmp_path / "root-only"
    folder.mkdir(mode=0o700)
    secret = folder / "diary.xmp"
    secret.write_bytes(_xmp("2011-11-11T11:11:11"))
    secret.chmod(0o600)
    (library / "IMG_0002.jpg.xmp").symlink_to(secret)
    (library / "IMG_0001.jpg.xmp").write_bytes(_xmp("2001-02-03T04:05:06"))  # the library's own: read
    result = _scan_cli(
        library, "--k", PHOTOS, "--dedup", 0, "--format", "json", "--cache", tmp_path / "c.sqlite"
    )
    assert result.exit_code == 0, result.stderr
    assert "2011-11-11" not in result.stdout
    picks = {Path(p["path"]).name: p for p in json.loads(result.stdout)["picks"]}
    assert (
        picks["IMG_0001.jpg"]["taken"].startswith("2001-02-03")
        and picks["IMG_0001.jpg"]["taken_source"] == "xmp"
    )
    assert picks["IMG_0002.jpg"]["taken_source"] != "xmp"
    with door.scanning([library]):  # the reader itself: the link is refused, not followed
        taken = dates.sidecar_date([library / "IMG_0002.jpg"], sidecar_candidates)
    assert taken.source == "none"


# --- 5. a photo rewritten between the walk and its decode ----------------------------------------------


def test_a_photo_rewritten_after_the_walk_is_reported_and_not_cached(library, tmp_path, fake_extractor):
    """Its bytes are not those of the file the walk listed: it is reported as changed, and nothing is
    cached under the walk's size and time (where a later scan would take it for the file listed then);
    the next scan reads it as it is."""
    photo = library / "IMG_0002.jpg"
    listed = (photo.stat().st_size, photo.stat().st_mtime_ns)

    def on_progress(event) -> None:
        if event.stage == "walk" and photo.stat().st_size == listed[0]:
            make_photo(photo, (220, 30, 30), seed=99, size=(96, 64))  # another picture, another size

    cache = tmp_path / "c.sqlite"
    failed: list[tuple[Path, str]] = []
    first = novelfind.scan(
        library,
        PHOTOS,
        dedup=0,
        cache=cache,
        on_progress=on_progress,
        on_failure=lambda path, reason: failed.append((path, reason)),
    )
    assert photo.stat().st_size != listed[0]  # the rewrite happened
    assert failed == [(photo, "it changed while it was read (another size or modification time)")]
    assert photo not in {p.path for p in first.picks}
    with sqlite3.connect(cache) as conn:
        rows = conn.execute(
            "SELECT size, mtime_ns FROM files WHERE path = ?", (os.fsencode(photo),)
        ).fetchall()
    assert listed not in [tuple(r) for r in rows] and rows == []
    again = novelfind.scan(library, PHOTOS, dedup=0, cache=cache)
    assert again.failures == [] and again.counts.extracted == 1
    assert photo in {p.path for p in again.picks}
