"""Races against someone else who writes to the folders novelfind writes to (docs/security.md).

The attacker owns the photo folder and the picks folder (uid 1000 in the attack this reproduces), and
novelfind runs as root from cron. An attacker thread watches the folder (inotify on Linux, else a tight
polling loop) and, when novelfind creates a file there, swaps a name under it: a symbolic link to a
private file over the temporary file, links to that file over the photos being copied, a link in place
of the picks folder. Each race is run a bounded number of times and asserts that the attack never wins:
the private file keeps its bytes, mode and owner, and nothing of it reaches the shared folder.

So that a race is decided by the code under test rather than by the scheduler, the victim's first sync
of a file in each try waits (up to a few seconds) until the attacker has made its move: the swap then
always lands in the window between the creation of the temporary file and its mode, owner and rename,
the window these attacks need. The tests check that the attacker did move in every try.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import stat
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from common import make_photo
from PIL import Image

from novelfind.base import atomic
from novelfind.cli.group import cli
from novelfind.errors import OutputError
from novelfind.outputs import write as outputs
from novelfind.outputs import xmp
from novelfind.outputs.placement import MANIFEST_NAME, place_picks
from novelfind.picks import Pick

TRIES = 40
SECRET = b"db password hunter2\n"
ATTACKER_UID = 1000  # the owner of the shared folders when the tests run as root (as in CI)

_IN_CREATE = 0x100
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = 0o2000000


def _inotify():
    """libc's inotify calls, or None where there are none (then the attacker polls)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    if not hasattr(libc, "inotify_init1"):
        return None
    return libc


class Attacker(threading.Thread):
    """Watches ``folder``; for each name created there, once, calls ``act(name)``, which returns True
    when it made its move. ``moved`` is set after each move (the victim's first sync waits for it),
    ``moves`` counts them."""

    def __init__(self, folder: Path, act: Callable[[str], bool]):
        super().__init__(daemon=True)
        self.folder, self.act = folder, act
        self.moved = threading.Event()
        self.moves = 0
        self.errors: list[BaseException] = []
        self._halt = threading.Event()
        self._libc = _inotify()
        self._fd = -1
        if self._libc is not None:
            self._fd = self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
            if self._fd < 0 or self._libc.inotify_add_watch(self._fd, os.fsencode(folder), _IN_CREATE) < 0:
                raise OSError(ctypes.get_errno(), "inotify")

    def _names(self) -> list[str]:
        if self._fd < 0:  # polling: every name there now
            try:
                return os.listdir(self.folder)
            except OSError:
                return []
        ready, _, _ = select.select([self._fd], [], [], 0.02)
        if not ready:
            return []
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return []
        names, offset = [], 0
        while offset + 16 <= len(data):
            _, _, _, length = struct.unpack_from("iIII", data, offset)
            names.append(os.fsdecode(data[offset + 16 : offset + 16 + length].rstrip(b"\0")))
            offset += 16 + length
        return names

    def run(self) -> None:
        try:
            seen: set[str] = set()
            while not self._halt.is_set():
                for name in self._names():
                    if name in seen:  # polling sees a name again; a temporary name is never reused
                        continue
                    seen.add(name)
                    if self.act(name):
                        self.moves += 1
                        self.moved.set()
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.errors.append(e)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        if self._fd >= 0:
            os.close(self._fd)
        assert not self.errors, self.errors


@pytest.fixture
def first_sync_waits(monkeypatch):
    """``arm(attacker, skip=0)``: the next sync of a regular file but ``skip`` waits until ``attacker``
    has moved."""
    real = os.fsync
    armed: list[Attacker] = []
    to_skip = [0]

    def fsync(fd: int) -> None:
        if armed and stat.S_ISREG(os.fstat(fd).st_mode):
            if to_skip[0] > 0:
                to_skip[0] -= 1
            else:
                armed.pop().moved.wait(5)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)

    def arm(attacker: Attacker, skip: int = 0) -> None:
        attacker.moved.clear()
        to_skip[0] = skip
        armed[:] = [attacker]

    return arm


def _private_file(tmp_path: Path) -> Path:
    """root's file in a 0700 folder, mode 0600: what the attacker wants to read or to own."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    secret = private / "secret"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    return secret


def _as_attacker(*paths: Path) -> None:
    """Give the shared folders and their files to the attacker's uid when running as root."""
    if os.geteuid() == 0:
        for path in paths:
            os.chown(path, ATTACKER_UID, ATTACKER_UID, follow_symlinks=False)


def _unchanged(secret: Path, before: os.stat_result) -> None:
    after = os.lstat(secret)
    assert secret.read_bytes() == SECRET
    assert stat.S_IMODE(after.st_mode) == stat.S_IMODE(before.st_mode) == 0o600
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
    assert after.st_ino == before.st_ino


def _swap_in_link(folder: Path, name: str, to: Path) -> None:
    """Rename a fresh symbolic link to ``to`` over ``folder/name`` (atomic, as an attacker would)."""
    bait = folder / f"bait-{threading.get_ident()}-{os.urandom(4).hex()}"
    os.symlink(to, bait)
    try:
        os.rename(bait, folder / name)
    except OSError:
        os.unlink(bait)
        raise


def _photos(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"IMG_{i:04d}.jpg"
        Image.new("RGB", (24, 16), (40 * i, 90, 200)).save(path)
        paths.append(path)
    return paths


def _picks(paths: list[Path]) -> list[Pick]:
    return [
        Pick(
            rank=i + 1,
            score=1.0 - i / 10,
            path=p,
            size=p.stat().st_size,
            mtime_ns=p.stat().st_mtime_ns,
            neighbour=None,
            distance=None,
        )
        for i, p in enumerate(paths)
    ]


# --- 1. the temporary file swapped for a link between its write and its chmod / chown ------------------


def test_a_sidecars_temporary_file_swapped_for_a_link_never_hands_over_a_private_file(
    tmp_path, first_sync_waits
):
    """``--xmp`` as root: the attacker renames a link to root's 0600 file over the new sidecar's
    temporary file. Before, the file it pointed to became the photo owner's, mode 644 (3 races of 3)."""
    pytest.importorskip("exiv2")
    secret = _private_file(tmp_path)
    before = os.lstat(secret)
    library = tmp_path / "library"
    (photo,) = _photos(library, 1)
    _as_attacker(library, photo)

    def act(name: str) -> bool:
        if not name.endswith(".tmp"):
            return False
        try:
            _swap_in_link(library, name, secret)
        except FileNotFoundError:
            return False
        return True

    attacker = Attacker(library, act)
    attacker.start()
    outcomes = []
    try:
        for _ in range(TRIES):
            for leftover in library.glob("*.xmp"):
                leftover.unlink()
            first_sync_waits(attacker)
            try:
                outcomes.append(xmp.tag(photo, rank=1, score=0.5, root=library).action)
            except xmp.SidecarError as e:
                outcomes.append(e.reason)
            _unchanged(secret, before)
    finally:
        attacker.stop()
    assert attacker.moves == TRIES  # the attacker made its move in every try
    assert all("changed by someone else" in outcome for outcome in outcomes), set(outcomes)


def test_a_planted_setuid_manifest_lends_its_mode_to_nothing(tmp_path, first_sync_waits):
    """``--copy-to`` as root over a picks folder holding a regular ``.novelfind-picks.json`` of mode 6777,
    with the manifest's temporary file swapped for a link to root's file. Before, the new manifest
    copied the planted mode, and with the swap root's file became ``-rwsrwsrwx``."""
    secret = _private_file(tmp_path)
    before = os.lstat(secret)
    paths = _photos(tmp_path / "library", 2)
    picks_folder = tmp_path / "picks"
    picks_folder.mkdir()
    planted = picks_folder / MANIFEST_NAME
    planted.write_text('{"schema": "novelfind/picks-manifest", "version": 1, "files": {}}')
    planted.chmod(0o6777)
    _as_attacker(picks_folder, planted)

    place_picks(_picks(paths), picks_folder)  # no race: the mode of the new manifest is novelfind's
    manifest = os.lstat(picks_folder / MANIFEST_NAME)
    assert stat.S_IMODE(manifest.st_mode) == atomic.new_file_mode(0o644)
    assert not manifest.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX)

    def act(name: str) -> bool:  # the manifest's temporary file
        if not (name.startswith("." + MANIFEST_NAME) and name.endswith(".tmp")):
            return False
        try:
            _swap_in_link(picks_folder, name, secret)
        except FileNotFoundError:
            return False
        return True

    attacker = Attacker(picks_folder, act)
    attacker.start()
    try:
        for _ in range(TRIES // 4):
            for entry in picks_folder.iterdir():
                entry.unlink()
            planted.write_text('{"schema": "novelfind/picks-manifest", "version": 1, "files": {}}')
            planted.chmod(0o6777)
            first_sync_waits(attacker, skip=len(paths))  # the copies' syncs come first
            with pytest.raises(OutputError, match="changed by someone else"):
                place_picks(_picks(paths), picks_folder)
            _unchanged(secret, before)
            for entry in picks_folder.iterdir():  # nothing of root's file reached the shared folder
                if not entry.is_symlink():
                    assert SECRET not in entry.read_bytes()
    finally:
        attacker.stop()
    assert attacker.moves >= TRIES // 4


# --- 2. the photos to copy swapped for links to a private file, or for a FIFO --------------------------


def test_photos_swapped_for_links_while_the_picks_are_copied_are_skipped(tmp_path, first_sync_waits):
    """When the first copy appears in the picks folder, the attacker renames links to root's file over
    every photo still to copy. Before, "db password hunter2" was copied into the shared folder, exit 0."""
    secret = _private_file(tmp_path)
    library = tmp_path / "library"
    picks_folder = tmp_path / "picks"
    picks_folder.mkdir()
    _as_attacker(picks_folder)
    state = {"armed": False}

    def act(name: str) -> bool:
        if not state["armed"] or not name.startswith(".novelfind-tmp-"):
            return False
        state["armed"] = False
        for photo in sorted(library.iterdir())[1:]:
            _swap_in_link(library, photo.name, secret)
        return True

    attacker = Attacker(picks_folder, act)
    attacker.start()
    try:
        for _ in range(TRIES // 4):
            for entry in library.glob("*") if library.exists() else []:
                entry.unlink()
            paths = _photos(library, 4)
            originals = [p.read_bytes() for p in paths]
            picks = _picks(paths)
            warnings: list[str] = []
            state["armed"] = True
            first_sync_waits(attacker)
            placed = place_picks(
                picks, picks_folder, on_skipped=lambda p, r, said=warnings: said.append(f"{p}: {r}")
            )
            assert [p.name for p in placed] == ["001_IMG_0000.jpg"]
            assert placed[0].read_bytes() == originals[0]
            assert len(warnings) == 3 and all("symbolic link" in w for w in warnings), warnings
            for entry in picks_folder.iterdir():
                assert SECRET not in entry.read_bytes()
    finally:
        attacker.stop()
    assert attacker.moves == TRIES // 4


def test_photos_swapped_before_the_copy_are_skipped_with_one_warning_each(tmp_path):
    """A link, a FIFO (which blocked the copy for ever) and a photo of another size in place of what
    was ranked: each is skipped with one warning line, the others are copied."""
    secret = _private_file(tmp_path)
    library = tmp_path / "library"
    paths = _photos(library, 4)
    picks = _picks(paths)
    paths[1].unlink()
    paths[1].symlink_to(secret)
    paths[2].unlink()
    os.mkfifo(paths[2])
    paths[3].write_bytes(SECRET)
    warnings: list[str] = []
    done: list[list[Path]] = []
    worker = threading.Thread(
        target=lambda: done.append(
            place_picks(picks, tmp_path / "picks", on_skipped=lambda p, r: warnings.append(f"{p}: {r}"))
        ),
        daemon=True,
    )
    worker.start()
    worker.join(60)  # a hang detector, not a speed bound: the FIFO must not block the copy
    assert not worker.is_alive(), "the copy blocked on a FIFO"
    assert [p.name for p in done[0]] == ["001_IMG_0000.jpg"]
    assert len(warnings) == 3
    assert "IMG_0001.jpg" in warnings[0] and "symbolic link" in warnings[0]
    assert "IMG_0002.jpg" in warnings[1] and "not a regular file" in warnings[1]
    assert "IMG_0003.jpg" in warnings[2] and "changed since it was ranked" in warnings[2]
    assert all("\n" not in w for w in warnings)
    for entry in (tmp_path / "picks").iterdir():
        assert SECRET not in entry.read_bytes()


def test_a_folder_of_the_library_swapped_for_a_link_leads_no_copy_elsewhere(tmp_path):
    """Below a scanned folder, a photo is opened one folder at a time without following a link: the
    photo's folder swapped for a link to a folder holding a file of the same name, size and time (a
    private one of root's) is not copied."""
    library = tmp_path / "library"
    (photo,) = _photos(library / "2019", 1)
    picks = _picks([photo])
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    twin = private / photo.name
    twin.write_bytes(photo.read_bytes())
    os.utime(twin, ns=(photo.stat().st_atime_ns, photo.stat().st_mtime_ns))
    os.rename(library / "2019", tmp_path / "moved")
    (library / "2019").symlink_to(private)
    skipped: list[tuple[Path, str]] = []
    placed = place_picks(
        picks, tmp_path / "picks", roots=[library], on_skipped=lambda p, r: skipped.append((p, r))
    )
    assert placed == [] and len(skipped) == 1 and "symbolic link" in skipped[0][1]


def test_a_hardlink_pick_swapped_for_a_link_is_not_linked(tmp_path):
    secret = _private_file(tmp_path)
    paths = _photos(tmp_path / "library", 2)
    picks = _picks(paths)
    paths[1].unlink()
    paths[1].symlink_to(secret)
    warnings: list[str] = []
    placed = place_picks(
        picks, tmp_path / "picks", mode="hardlink", on_skipped=lambda p, r: warnings.append(f"{p}: {r}")
    )
    assert [p.name for p in placed] == ["001_IMG_0000.jpg"]
    assert len(warnings) == 1 and "IMG_0001.jpg" in warnings[0]
    assert os.lstat(secret).st_nlink == 1


# --- 3. the picks folder swapped for a link during the run ---------------------------------------------


def test_the_picks_folder_swapped_for_a_link_mid_run_redirects_nothing(tmp_path, first_sync_waits):
    """The owner of the picks folder's parent renames the picks folder away and puts a link to another
    folder in its place when the first copy appears. Before, root then deleted a file in that folder
    (an earlier pick's name) and wrote the manifest there."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    keep = private / "002_IMG_0001.jpg"
    keep.write_bytes(SECRET)
    shared = tmp_path / "shared"
    shared.mkdir()
    paths = _photos(tmp_path / "library", 3)
    _as_attacker(shared)
    picks_folder = shared / "picks"
    state = {"armed": False, "n": 0}

    def act(name: str) -> bool:
        if not state["armed"] or not name.startswith(".novelfind-tmp-"):
            return False
        state["armed"] = False
        state["n"] += 1
        os.rename(picks_folder, shared / f"moved-{state['n']}")
        picks_folder.symlink_to(private)
        return True

    for n in range(1, TRIES // 4 + 1):
        if picks_folder.is_symlink():
            picks_folder.unlink()
        picks_folder.mkdir()
        place_picks(_picks(paths), picks_folder)  # an earlier run: three picks of novelfind's
        attacker = Attacker(picks_folder, act)
        attacker.start()
        try:
            state["armed"] = True
            first_sync_waits(attacker)
            placed = place_picks(_picks(paths[:1]), picks_folder)  # two earlier picks to remove
        finally:
            attacker.stop()
        assert attacker.moves == 1
        assert sorted(os.listdir(private)) == ["002_IMG_0001.jpg"] and keep.read_bytes() == SECRET
        moved = shared / f"moved-{n}"  # everything happened in the folder that was opened
        assert sorted(os.listdir(moved)) == [MANIFEST_NAME, "001_IMG_0000.jpg"]
        assert [p.name for p in placed] == ["001_IMG_0000.jpg"]


def test_a_picks_folder_that_is_a_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "picks"
    link.symlink_to(elsewhere)
    with pytest.raises(OutputError, match="symbolic link"):
        place_picks(_picks(_photos(tmp_path / "library", 1)), link)
    assert os.listdir(elsewhere) == []


def test_a_folder_of_the_library_swapped_for_a_link_is_not_entered_for_a_sidecar(tmp_path):
    """Below a scanned folder, each folder is opened without following a link: a folder swapped for a
    link to another (``/etc``) gets no sidecar there."""
    pytest.importorskip("exiv2")
    library = tmp_path / "library"
    (photo,) = _photos(library / "2019", 1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / photo.name).write_bytes(photo.read_bytes())
    os.rename(library / "2019", tmp_path / "moved")
    (library / "2019").symlink_to(elsewhere)
    with pytest.raises(xmp.SidecarError) as err:
        xmp.tag(photo, rank=1, score=0.5, root=library)
    assert "symbolic link" in err.value.reason
    assert sorted(os.listdir(elsewhere)) == [photo.name]


def test_without_descriptor_calls_nothing_is_written(tmp_path, monkeypatch):
    """Where the system lacks a call the safe writes need, novelfind refuses rather than fall back."""
    monkeypatch.setattr(atomic, "_checked", False)
    monkeypatch.setattr(atomic, "_NOFOLLOW", 0)
    with pytest.raises(OutputError) as err:
        atomic.write_atomic(tmp_path / "out.tsv", "x")
    assert "O_NOFOLLOW" in str(err.value)
    assert os.listdir(tmp_path) == []


# --- the same through a scan: held for the whole run, said even with -q -------------------------------


def _scan_with_swap(tmp_path, monkeypatch, swap: Callable[[list[Pick]], None]):
    library = tmp_path / "library"
    for i in range(4):
        make_photo(library / f"IMG_{i:04d}.jpg", (40 + 50 * i, 90, 200 - 40 * i), seed=i, size=(64, 48))
    picks_folder = tmp_path / "shared" / "picks"
    picks_folder.mkdir(parents=True)
    real = outputs.place_picks

    def swapped_then_placed(picks, *args, **kwargs):  # after ranking, before the copies
        swap(picks)
        return real(picks, *args, **kwargs)

    monkeypatch.setattr(outputs, "place_picks", swapped_then_placed)
    result = CliRunner().invoke(
        cli,
        [
            "scan",
            str(library),
            "--k",
            "3",
            "--dedup",
            "0",
            "--copy-to",
            str(picks_folder),
            "-q",
            "--cache",
            str(tmp_path / "c.sqlite"),
        ],
    )
    return result, picks_folder


def test_a_scan_names_the_pick_it_did_not_copy_even_with_q(fake_extractor, tmp_path, monkeypatch):
    secret = _private_file(tmp_path)

    def swap(picks: list[Pick]) -> None:
        picks[1].path.unlink()
        picks[1].path.symlink_to(secret)

    result, picks_folder = _scan_with_swap(tmp_path, monkeypatch, swap)
    assert result.exit_code == 3, result.stderr  # done, one file not copied
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "symbolic link" in lines[0] and "not placed in the picks folder" in lines[0]
    placed = [p for p in picks_folder.iterdir() if not p.name.startswith(".")]
    assert len(placed) == 2 and all(SECRET not in p.read_bytes() for p in placed)


def test_a_scan_keeps_the_picks_folder_it_opened_when_it_is_swapped_before_the_copies(
    fake_extractor, tmp_path, monkeypatch
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def swap(picks: list[Pick]) -> None:
        shared = tmp_path / "shared"
        os.rename(shared / "picks", shared / "moved")
        (shared / "picks").symlink_to(elsewhere)

    result, _ = _scan_with_swap(tmp_path, monkeypatch, swap)
    assert result.exit_code == 0, result.stderr
    assert os.listdir(elsewhere) == []
    moved = tmp_path / "shared" / "moved"
    assert len([p for p in moved.iterdir() if not p.name.startswith(".")]) == 3
    assert (moved / MANIFEST_NAME).is_file()
