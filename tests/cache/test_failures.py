"""The ``failures`` table on its own: each unreadable file remembered with its stat, reason and the
time it first failed, so that an unchanged one is reported once."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone

import pytest

from novelfind.cache import FeatureCache, NullCache
from novelfind.cache import failures as cache_failures
from novelfind.cache.failures import KnownFailure, NullFailures, forget_paths, load, record


class Clock(datetime):
    """``datetime`` as ``failures`` sees it, at a time the test sets (reading times as ``datetime`` does)."""

    at = datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)

    @classmethod
    def now(cls, tz=None):
        return cls.at


@pytest.fixture
def clock(monkeypatch):
    monkeypatch.setattr(cache_failures, "datetime", Clock)
    return Clock


@pytest.fixture
def cache(tmp_path):
    with FeatureCache(tmp_path / "features.sqlite") as opened:
        yield opened


def test_a_failure_is_remembered_with_the_time_it_was_first_seen(cache, clock):
    cache.record_failures([(b"/p/bad.jpg", 10, 20, "truncated")])
    # whole seconds, UTC: the microseconds of the moment are dropped
    assert cache.known_failures() == {
        b"/p/bad.jpg": KnownFailure(b"/p/bad.jpg", 10, 20, "truncated", "2024-01-01T12:00:00+00:00")
    }


def test_an_unchanged_file_keeps_its_first_seen_and_a_changed_one_starts_again(cache, clock):
    cache.record_failures([(b"/p/a.jpg", 10, 20, "truncated"), (b"/p/b.jpg", 10, 20, "truncated")])
    clock.at = datetime(2024, 2, 2, tzinfo=timezone.utc)
    cache.record_failures([(b"/p/a.jpg", 10, 20, "still bad"), (b"/p/b.jpg", 11, 20, "other")])
    known = cache.known_failures()
    assert known[b"/p/a.jpg"] == (b"/p/a.jpg", 10, 20, "still bad", "2024-01-01T12:00:00+00:00")
    assert known[b"/p/b.jpg"] == (b"/p/b.jpg", 11, 20, "other", "2024-02-02T00:00:00+00:00")


def test_forgetting_some_or_all_counts_what_was_forgotten(cache, clock):
    cache.record_failures([(p, -1, -1, "gone") for p in (b"/a", b"/b", b"/c")])
    assert cache.forget_failures([b"/a", b"/missing"]) == 1
    assert set(cache.known_failures()) == {b"/b", b"/c"}
    assert cache.forget_failures() == 2
    assert cache.known_failures() == {}


def test_forgetting_and_recording_happen_in_one_transaction(cache, clock):
    cache.record_failures([(b"/old", 1, 1, "bad")])
    cache.record_failures([(b"/new", 2, 2, "bad")], forget=[b"/old"])
    assert list(cache.known_failures()) == [b"/new"]
    cache.record_failures([], forget=[])  # nothing to do: no transaction at all
    assert list(cache.known_failures()) == [b"/new"]


def test_rows_of_shapes_novelfind_never_writes_are_not_loaded(cache, clock):
    cache.record_failures([(b"/ok", 1, 2, "bad")])
    conn = sqlite3.connect(cache.path)
    try:
        for row in [
            ("/text-path", 1, 2, "r", "t"),  # a path as text, not bytes
            (b"/float", 1.5, 2, "r", "t"),
            (b"/long-reason", 1, 2, "r" * 5000, "t"),
            (b"/long-time", 1, 2, "r", "t" * 65),
            (b"/" + b"x" * 4096, 1, 2, "r", "t"),
        ]:
            conn.execute("INSERT INTO failures VALUES (?, ?, ?, ?, ?)", row)
        conn.commit()
        assert list(load(conn)) == [b"/ok"]
    finally:
        conn.close()


def test_the_functions_work_on_any_connection_to_the_table(cache, clock):
    conn = sqlite3.connect(cache.path)
    try:
        record(conn, [(b"/x", 3, 4, "r1"), (b"/y", 5, 6, "r2")])
        assert {k: v.reason for k, v in load(conn).items()} == {b"/x": "r1", b"/y": "r2"}
        assert forget_paths(conn, [b"/y", b"/y"]) == 1
        assert forget_paths(conn) == 1
        assert load(conn) == {}
    finally:
        conn.close()


def test_no_cache_knows_no_failure_and_keeps_none():
    for null in (NullFailures(), NullCache()):
        null.record_failures([(b"/x", 1, 2, "bad")], forget=[b"/y"])
        assert null.known_failures() == {}
