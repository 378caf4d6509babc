"""One scan's unreadable files: reported once, known ones counted, ignored ones silent, the record kept."""

from __future__ import annotations

import os
from pathlib import Path

from novelfind.cache.failures import KnownFailure
from novelfind.errors import CacheError
from novelfind.extract.failures import FailureLog
from novelfind.media.ignore import IgnoreList
from novelfind.media.walk import FileList
from novelfind.picks import Failure


class Cache:
    """The failure record of a feature cache, in memory."""

    def __init__(self, known=None, unreadable: bool = False, unwritable: bool = False) -> None:
        self.known = known or {}
        self.unreadable = unreadable
        self.unwritable = unwritable
        self.recorded: list[tuple[list, list]] = []

    def known_failures(self):
        if self.unreadable:
            raise CacheError("the record is damaged")
        return dict(self.known)

    def record_failures(self, rows, forget=()):
        if self.unwritable:
            raise CacheError("read-only cache")
        self.recorded.append((list(rows), list(forget)))


def broken(path: Path, data: bytes = b"\xff\xd8 truncated") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def known_as(path: Path, size: int | None = None) -> tuple[bytes, KnownFailure]:
    st = path.stat()
    key = os.fsencode(os.path.abspath(path))
    return key, KnownFailure(key, st.st_size if size is None else size, st.st_mtime_ns, "old", "2024-01-01")


def log_of(reported: list, warnings: list, ignore_list=None) -> FailureLog:
    return FailureLog(lambda p, r: reported.append((p, r)), warnings.append, ignore_list)


def test_failures_met_before_the_cache_opens_wait_for_it(tmp_path):
    reported, warnings = [], []
    log = log_of(reported, warnings)
    a = broken(tmp_path / "a.jpg")
    log.fail(a, "truncated")
    log.fail(tmp_path / "gone.jpg", "vanished")  # no stat: (-1, -1)
    assert reported == [] and len(log.pending) == 2
    log.open(Cache())
    assert reported == [(a, "truncated"), (tmp_path / "gone.jpg", "vanished")]
    assert log.pending == [] and log.stats[tmp_path / "gone.jpg"] == (-1, -1)
    log.fail(broken(tmp_path / "b.jpg"), "bad header")  # after open: at once
    assert reported[-1] == (tmp_path / "b.jpg", "bad header")
    assert [f.reason for f in log.failures] == ["truncated", "vanished", "bad header"]
    assert warnings == []


def test_an_unchanged_known_failure_is_counted_not_reported_and_a_changed_one_is(tmp_path):
    same = broken(tmp_path / "same.jpg")
    grown = broken(tmp_path / "grown.jpg")
    cache = Cache(dict([known_as(same), known_as(grown, size=1)]))
    reported, warnings = [], []
    log = log_of(reported, warnings)
    log.open(cache)
    log.fail(same, "truncated")
    log.fail(grown, "truncated")
    assert log.known_failures == [Failure(same, "truncated")]
    assert reported == [(grown, "truncated")]


def test_an_unreadable_record_makes_every_failure_new(tmp_path):
    a = broken(tmp_path / "a.jpg")
    reported: list = []
    log = log_of(reported, [])
    log.fail(a, "truncated")
    log.open(Cache(dict([known_as(a)]), unreadable=True))
    assert reported == [(a, "truncated")] and log.known_failures == []


def test_a_file_on_the_ignore_list_is_skipped_silently(tmp_path):
    a = broken(tmp_path / "a.jpg")
    other = broken(tmp_path / "b.jpg", b"\xff\xd8 truncateX")  # same size, other bytes
    ignore = IgnoreList(tmp_path / "ignored.json")
    ignore.add([str(a)])
    reported: list = []
    log = log_of(reported, [], ignore)
    log.open(Cache())
    log.fail(a, "truncated")
    log.fail(other, "truncated")
    assert log.ignored == 1
    assert reported == [(other, "truncated")] and log.failures == [Failure(other, "truncated")]


def test_remember_records_this_scan_and_forgets_what_was_read_under_the_roots(tmp_path):
    lib = tmp_path / "lib"
    still = broken(lib / "still.jpg")
    fixed = broken(lib / "fixed.jpg")
    sibling = broken(tmp_path / "library" / "x.jpg")  # a name that starts like the root: not under it
    elsewhere = broken(tmp_path / "other" / "y.jpg")
    cache = Cache(dict(known_as(p) for p in (still, fixed, sibling, elsewhere)))
    log = log_of([], [])
    log.open(cache)
    log.fail(still, "truncated")
    log.remember(cache, FileList(), [lib])
    st = still.stat()
    key = os.fsencode(os.path.abspath(still))
    assert cache.recorded == [([(key, st.st_size, st.st_mtime_ns, "truncated")], [os.fsencode(str(fixed))])]


def test_a_cache_that_cannot_remember_is_a_warning(tmp_path):
    warnings: list[str] = []
    log = log_of([], warnings)
    log.open(Cache())
    log.fail(broken(tmp_path / "a.jpg"), "truncated")
    log.remember(Cache(unwritable=True), FileList(), [tmp_path])
    assert warnings == ["cannot remember the unreadable files: read-only cache"]


def test_a_recorded_file_put_on_the_ignore_list_stays_recorded_one_never_reported_is_not_added(tmp_path):
    """The record keeps a reported file once it is ignored (rather than forget it as if it read), so a
    later scan knows it without decoding it (``Stage.known_failures``); a file ignored before any scan
    reported it is not added: taken off the list again, it is reported as new."""
    lib = tmp_path / "lib"
    reported_before = broken(lib / "a.jpg")
    never_reported = broken(lib / "b.jpg", b"\xff\xd8 truncateX")
    ignore = IgnoreList(tmp_path / "ignored.json")
    ignore.add([str(reported_before), str(never_reported)])
    cache = Cache(dict([known_as(reported_before)]))
    reported: list = []
    log = log_of(reported, [], ignore)
    log.open(cache)
    log.fail(reported_before, "truncated")
    log.fail(never_reported, "truncated")
    log.remember(cache, FileList(), [lib])
    st = reported_before.stat()
    key = os.fsencode(os.path.abspath(reported_before))
    assert reported == [] and log.failures == [] and log.ignored == 2
    assert cache.recorded == [([(key, st.st_size, st.st_mtime_ns, "truncated")], [])]
