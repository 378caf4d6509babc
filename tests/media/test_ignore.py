"""The ignore list: keyed by content, user data that survives the cache, safe under concurrent changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from common import make_photo

from novelfind.base import lock
from novelfind.errors import ExitCode, LockedError
from novelfind.media import decode
from novelfind.media.ignore import IgnoreList, IgnoreListError, default_path, digest_file

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def photos(tmp_path) -> list[Path]:
    return [
        make_photo(tmp_path / "photos" / f"IMG_{i}.jpg", (40 * i, 90, 200 - 30 * i), seed=i) for i in range(5)
    ]


@pytest.fixture
def ignored(tmp_path) -> IgnoreList:
    return IgnoreList(tmp_path / "data" / "ignored.json")


def test_default_file_is_user_data_not_cache(isolated_user_dirs):
    assert default_path() == isolated_user_dirs / "data" / "novelfind" / "ignored.json"
    assert IgnoreList().path == default_path()


def test_key_is_the_feature_caches_digest(ignored, photos):
    ignored.add(photos[:1])
    digest, _ = decode.read_for_model(photos[0])  # what the cache stores for this file
    assert ignored.digests() == {digest}
    assert digest_file(photos[0]) == digest == decode.file_digest(photos[0].read_bytes())


def test_add_list_and_add_again(ignored, photos):
    change = ignored.add(photos[:2])
    assert [e.path for e in change.changed] == photos[:2]
    assert change.unchanged == [] and change.failures == []
    again = ignored.add(photos[1:3])
    assert [e.path for e in again.changed] == [photos[2]]
    assert again.unchanged == [photos[1]]
    entries = ignored.entries()
    assert sorted(e.path for e in entries) == sorted(photos[:3])
    assert all(e.added.endswith("+00:00") for e in entries)
    assert len(ignored) == 3 and digest_file(photos[0]) in ignored


def test_moved_and_renamed_photos_stay_ignored(ignored, photos, tmp_path):
    ignored.add([photos[0]])
    moved = tmp_path / "elsewhere" / "renamed.jpg"
    moved.parent.mkdir()
    photos[0].rename(moved)
    library = [digest_file(p) for p in [moved, *photos[1:]]]
    assert ignored.mask(library).tolist() == [True, False, False, False, False]


def test_mask_lines_up_with_the_library(ignored, photos):
    ignored.add([photos[1], photos[3]])
    digests = [digest_file(p) for p in photos]
    digests[2] = None  # a file that could not be read
    mask = ignored.mask(digests)
    assert mask.dtype == np.bool_ and mask.shape == (5,)
    assert mask.tolist() == [False, True, False, True, False]
    assert ignored.mask([]).shape == (0,)


def test_empty_list_without_a_file(ignored, photos):
    assert not ignored.path.exists()
    assert ignored.digests() == frozenset() and ignored.entries() == []
    assert ignored.mask([digest_file(photos[0])]).tolist() == [False]


def test_remove_by_path(ignored, photos):
    ignored.add(photos[:3])
    change = ignored.remove([photos[1], photos[4]])
    assert [e.path for e in change.changed] == [photos[1]]
    assert change.unchanged == [photos[4]]
    assert sorted(e.path for e in ignored.entries()) == [photos[0], photos[2]]


def test_remove_a_photo_that_is_gone_by_its_recorded_path(ignored, photos):
    ignored.add([photos[0]])
    photos[0].unlink()
    assert [e.path for e in ignored.remove([photos[0]]).changed] == [photos[0]]
    assert len(ignored) == 0


def test_remove_by_content_after_a_move(ignored, photos, tmp_path):
    ignored.add([photos[0]])
    moved = tmp_path / "moved.jpg"
    photos[0].rename(moved)
    assert len(ignored.remove([moved]).changed) == 1
    assert len(ignored) == 0


def test_clear(ignored, photos):
    ignored.add(photos)
    assert ignored.clear() == 5
    assert ignored.entries() == []
    assert json.loads(ignored.path.read_text()) == {"version": 1, "ignored": {}}


def test_missing_paths_are_failures_the_rest_is_added(ignored, photos, tmp_path):
    change = ignored.add([photos[0], tmp_path / "missing.jpg", photos[1]])
    assert [e.path for e in change.changed] == [photos[0], photos[1]]
    assert change.failures == [(tmp_path / "missing.jpg", "no such file or folder")]


def test_a_file_whose_bytes_cannot_be_read_is_added_by_path_size_and_time(ignored, photos):
    from common import unprivileged

    photos[0].chmod(0o000)
    script = (
        "import sys; from novelfind.media.ignore import IgnoreList; "
        "c = IgnoreList(sys.argv[1]).add(sys.argv[2:]); print(c.failures, len(c.changed), c.by_stat); "
        "print(IgnoreList(sys.argv[1]).find([[c.changed[0]]]).mask[0])"
    )
    out = subprocess.run(
        unprivileged([sys.executable, "-c", script, str(ignored.path), str(photos[0]), str(photos[1])]),
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        check=True,
    ).stdout
    assert out == f"[] 2 [({photos[0]!r}, 'Permission denied')]\nTrue\n"
    (entry,) = [e for e in ignored.entries() if e.path == photos[0]]
    assert entry.digest.startswith("stat:")


def test_a_folder_stands_for_the_images_under_it(ignored, photos, tmp_path):
    """Walked as a scan walks: image files (RAW too) in nested folders, hidden and other files left out."""
    nested = make_photo(tmp_path / "photos" / "deeper" / "x.png", (1, 2, 3), seed=9)
    (tmp_path / "photos" / "notes.txt").write_text("not a photo")
    (tmp_path / "photos" / ".hidden.jpg").write_bytes(photos[0].read_bytes() + b"x")
    raw = tmp_path / "photos" / "IMG_9.CR2"
    raw.write_bytes(b"raw bytes")
    change = ignored.add([tmp_path / "photos"], exclude=["IMG_4.jpg"])
    assert sorted(e.path for e in change.changed) == sorted([*photos[:4], nested, raw])
    assert {e.path: e.size for e in ignored.entries()}[raw] == len(b"raw bytes")


def test_remove_a_folder_takes_off_what_was_last_seen_under_it(ignored, photos, tmp_path):
    elsewhere = make_photo(tmp_path / "other" / "y.jpg", (9, 9, 9), seed=7)
    ignored.add([*photos[:2], elsewhere])
    photos[0].unlink()  # gone: still taken off by its recorded path
    change = ignored.remove([tmp_path / "photos"])
    assert sorted(e.path for e in change.changed) == photos[:2]
    assert [e.path for e in ignored.entries()] == [elsewhere]
    assert ignored.remove([tmp_path / "photos"]).unchanged == [tmp_path / "photos"]


def test_relative_paths_are_stored_absolute(ignored, photos, monkeypatch):
    monkeypatch.chdir(photos[0].parent)
    ignored.add([photos[0].name])
    assert ignored.entries()[0].path == photos[0]


def test_digests_known_to_a_scan(ignored, photos, tmp_path):
    digests = [digest_file(p) for p in photos]
    sizes = [p.stat().st_size for p in photos]
    change = ignored.add_files(zip(digests[:2], photos[:2], sizes[:2], strict=True))
    assert [e.digest for e in change.changed] == digests[:2]
    assert ignored.mask(digests).tolist() == [True, True, False, False, False]
    moved = tmp_path / "new-home.jpg"
    assert ignored.relocate({digests[0]: moved, digests[4]: photos[4]}) == 1
    assert {e.digest: e.path for e in ignored.entries()}[digests[0]] == moved
    assert len(ignored.remove([photos[1]]).changed) == 1
    assert ignored.digests() == {digests[0]}


def test_explicit_file_in_a_new_folder(tmp_path, photos):
    custom = IgnoreList(tmp_path / "a" / "b" / "mine.json")
    custom.add(photos[:1])
    assert custom.path.is_file()
    assert IgnoreList(custom.path).digests() == {digest_file(photos[0])}


def test_survives_cache_clear(photos):
    from novelfind.base.dirs import feature_cache_path
    from novelfind.cache import FeatureCache
    from novelfind.cli.group import cli

    IgnoreList().add(photos[:2])
    FeatureCache(feature_cache_path(), model_key="m").close()  # the cache a scan would have made
    result = CliRunner().invoke(cli, ["cache", "clear"])
    assert result.exit_code == 0, result.output
    assert result.output == "cleared\n"
    assert len(IgnoreList()) == 2
    assert not default_path().is_relative_to(feature_cache_path().parent.parent)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "Expecting property name"),
        ('{"version": 99, "ignored": {}}', "unknown version 99"),
        ('{"version": 1, "ignored": {"ab": 3}}', "bad entry 'ab'"),
        ('{"version": 1, "ignored": {"ab": {"path": "/x.jpg"}}}', "bad size in entry 'ab'"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_damaged_list_is_an_error_and_left_as_it_is(ignored, photos, content, why):
    ignored.path.parent.mkdir(parents=True)
    ignored.path.write_text(content)
    for call in (ignored.digests, lambda: ignored.add(photos[:1]), ignored.clear):
        with pytest.raises(IgnoreListError, match=f"the ignore list {ignored.path} is damaged .*{why}"):
            call()
    assert ignored.path.read_text() == content


def test_written_atomically_without_leftovers(ignored, photos):
    ignored.add(photos[:2])
    ignored.remove(photos[:1])
    assert sorted(os.listdir(ignored.path.parent)) == ["ignored.json", "ignored.json.lock"]
    json.loads(ignored.path.read_text())  # complete JSON


_ADD_SCRIPT = """
import sys
from novelfind.media.ignore import IgnoreList
lst = IgnoreList(sys.argv[1])
for p in sys.argv[2:]:
    lst.add_files([(p.rsplit("/", 1)[-1], p, 1)])
"""


def test_concurrent_changes_keep_every_entry(ignored, tmp_path):
    """Four processes adding one entry at a time: the lock keeps every read-modify-write whole."""
    procs = []
    for w in range(4):
        names = [str(tmp_path / f"{w:x}{i:031x}") for i in range(15)]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _ADD_SCRIPT, str(ignored.path), *names],
                env=dict(os.environ, PYTHONPATH=str(REPO)),
            )
        )
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert len(ignored) == 60


class _File:
    def __init__(self, path: Path):
        self.path = path
        self.size = path.stat().st_size


def test_find_reads_only_files_of_an_ignored_size(ignored, photos, tmp_path, monkeypatch):
    """A library's ignored photos are found by size first: no other file is looked up or read."""
    from novelfind.media import ignore

    ignored.add([photos[2]])
    same_size = tmp_path / "photos" / "same-size.jpg"
    same_size.write_bytes(b"\0" * photos[2].stat().st_size)  # the size of an ignored file, other bytes
    library = [[_File(p)] for p in [*photos, same_size]]
    read: list[Path] = []
    looked_up: list[Path] = []
    monkeypatch.setattr(ignore, "digest_file", lambda path: read.append(Path(path)) or digest_file(path))

    def cache(files):
        looked_up.extend(f.path for f in files)
        return [None] * len(files)

    found = ignored.find(library, known_digests=cache)
    assert found.mask.tolist() == [False, False, True, False, False, False]
    assert found.seen == {digest_file(photos[2]): photos[2]}
    assert sorted(read) == sorted(looked_up) == sorted([photos[2], same_size])


def test_find_takes_digests_the_cache_knows(ignored, photos, monkeypatch):
    from novelfind.media import ignore

    ignored.add([photos[1]])
    monkeypatch.setattr(ignore, "digest_file", lambda path: pytest.fail(f"read {path}"))
    digest = ignored.entries()[0].digest
    found = ignored.find([[_File(p)] for p in photos], known_digests=lambda files: [digest] * len(files))
    assert found.mask.tolist() == [False, True, False, False, False]


def test_any_file_of_a_photo_makes_it_ignored(ignored, photos, tmp_path):
    """RAW + JPEG: the photo is read through its JPEG, and ignoring the RAW ignores the photo."""
    raw = tmp_path / "photos" / "IMG_0.CR2"
    raw.write_bytes(b"raw bytes of IMG_0")
    ignored.add([raw])
    library = [[_File(photos[0]), _File(raw)], *[[_File(p)] for p in photos[1:]]]
    found = ignored.find(library)
    assert found.mask.tolist() == [True, False, False, False, False]
    assert found.seen == {digest_file(raw): raw}


def test_find_with_an_empty_list_reads_nothing(ignored, photos, monkeypatch):
    from novelfind.media import ignore

    monkeypatch.setattr(ignore, "digest_file", lambda path: pytest.fail(f"read {path}"))
    assert ignored.find([[_File(p)] for p in photos]).mask.tolist() == [False] * 5


def test_a_scans_steps_check_find_and_add_picks(tmp_path):
    from novelfind.media.walk import ImageFile

    a, b, c = (make_photo(tmp_path / f"{n}.jpg", (40 * i, 90, 200), seed=i) for i, n in enumerate("abc"))
    files = [ImageFile(p, p.stat().st_size, p.stat().st_mtime_ns) for p in (a, b, c)]
    ignored = IgnoreList(tmp_path / "ignored.json")
    ignored.check()  # no file yet: an empty list
    warnings = []
    known = {a: decode.file_digest(a.read_bytes())}  # what the cache knows; b and c are hashed
    lookup = lambda fs: [known.get(f.path) for f in fs]  # noqa: E731
    assert ignored.add_picks(files[:2], known_digests=lookup, on_warning=warnings.append) == 2
    assert ignored.add_picks(files[:1], known_digests=lookup, on_warning=warnings.append) == 0
    gone = ImageFile(tmp_path / "gone.jpg", 10, 0)
    assert ignored.add_picks([gone], on_warning=warnings.append) == 0
    assert warnings == [f"cannot add {gone.path} to the ignore list: No such file or directory"]
    moved = tmp_path / "moved.jpg"
    b.rename(moved)
    photos = [(files[0],), (ImageFile(moved, files[1].size, 0),), (files[2],)]
    assert ignored.ignored_in(photos).tolist() == [True, True, False]
    assert {e.path for e in ignored.entries()} == {a, moved}  # where the list saw them is brought up to date
    (tmp_path / "ignored.json").write_text("{")
    with pytest.raises(IgnoreListError, match="is damaged"):
        ignored.check()


def test_a_pick_not_as_ranked_is_not_put_on_the_list(tmp_path):
    """A pick read for its digest is read as it was ranked: rewritten since, or swapped for a link (to a
    device, or anything), it is left out with a warning rather than put on the list by other bytes."""
    import os

    from novelfind.media.walk import ImageFile

    a, b, c = (make_photo(tmp_path / f"{n}.jpg", (40 * i, 90, 200), seed=i) for i, n in enumerate("abc"))
    files = [ImageFile(p, p.stat().st_size, p.stat().st_mtime_ns) for p in (a, b, c)]
    make_photo(b, (200, 10, 10), seed=9, size=(90, 60))  # rewritten after the ranking
    os.unlink(c)
    os.symlink("/dev/zero", c)
    ignored = IgnoreList(tmp_path / "ignored.json")
    warnings: list[str] = []
    assert ignored.add_picks(files, on_warning=warnings.append) == 1
    assert {e.path for e in ignored.entries()} == {a}
    assert len(warnings) == 2
    assert str(b) in warnings[0] and "changed since it was listed" in warnings[0]
    assert str(c) in warnings[1] and "symbolic link" in warnings[1]


def test_a_picked_clip_is_put_on_the_list_by_its_clips_digest(tmp_path):
    """A clip's identity samples its bytes (``video.clip_digest``): a picked clip is listed by that, so
    the next scan, which knows the clip by it, recognises it."""
    from novelfind.media import video
    from novelfind.media.walk import ImageFile

    clip = tmp_path / "clip.mp4"
    clip.write_bytes(os.urandom(5 << 20))  # larger than what the clip's digest reads of it
    record = ImageFile(clip, clip.stat().st_size, clip.stat().st_mtime_ns)
    ignored = IgnoreList(tmp_path / "ignored.json")
    assert ignored.add_picks([record]) == 1
    assert ignored.digests() == {video.clip_digest(clip)}
    assert video.clip_digest(clip) != decode.file_digest(clip.read_bytes())
    assert ignored.find([[record]]).mask.tolist() == [True]


def test_a_selection_leaves_out_what_the_lines_last_run_ranked_and_says_when_nothing_is_new():
    from novelfind.media.ignore import select

    window = np.array([True, True, True, False])
    groups = [[] for _ in range(4)]
    fresh = select(window, None, groups, since=True, ignore_picks=True)
    assert fresh.candidates.tolist() == [0, 1, 2] and not fresh.nothing_new
    seen = select(
        window, None, groups, since=True, ignore_picks=True, considered=np.array([1, 0, 1, 1], bool)
    )
    assert seen.candidates.tolist() == [1] and seen.seen == 2 and seen.restricted and not seen.nothing_new
    every = select(window, None, groups, since=True, ignore_picks=True, considered=np.ones(4, bool))
    assert every.candidates.tolist() == [] and every.nothing_new
    # an empty window is not "nothing new": the run writes its empty list (a week without photos)
    empty = select(
        np.zeros(4, bool), None, groups, since=True, ignore_picks=True, considered=np.ones(4, bool)
    )
    assert empty.candidates.tolist() == [] and not empty.nothing_new


def test_a_lock_held_by_another_process_is_waited_for_a_bounded_time(ignored, photos, monkeypatch):
    """A shared ignore list whose lock another account's process holds: the change gives up after the
    bound (``lock.SHARED_WAIT_S``, 60 s; 0.5 s here), names the holder, and writes nothing."""
    ignored.add(photos[:1])
    before = ignored.path.read_bytes()
    hold = (
        "import sys; from novelfind.base.lock import RunLock\n"
        "with RunLock(sys.argv[1]):\n    print('held', flush=True); sys.stdin.read()\n"
    )
    lock_file = ignored.path.with_name(ignored.path.name + ".lock")
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(lock_file)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    release = threading.Timer(60, holder.stdin.close)  # unbounded, the add would then succeed
    try:
        assert holder.stdout.readline().strip() == "held"
        release.start()
        monkeypatch.setattr(lock, "SHARED_WAIT_S", 0.5)
        with pytest.raises(LockedError) as info:
            ignored.add(photos[1:2])
    finally:
        release.cancel()
        holder.stdin.close()
        holder.wait(timeout=30)
    said = f"gave up waiting for the ignore list {ignored.path} after 0.5 s: its lock is held by pid"
    assert str(info.value).startswith(f"{said} {holder.pid} ")
    assert str(info.value).endswith("; nothing was written to it") and info.value.exit_code == ExitCode.BUSY
    assert ignored.path.read_bytes() == before
