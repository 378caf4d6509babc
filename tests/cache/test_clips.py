"""The ``clips`` table on its own: records kept per digest and model, updated in place, bounded in size."""

from __future__ import annotations

import sqlite3

import pytest

from novelfind.cache import CacheWriteError, FeatureCache, NullCache
from novelfind.cache.clips import MAX_CLIP_RECORD, NullClips


@pytest.fixture
def db(tmp_path):
    return tmp_path / "features.sqlite"


def test_records_line_up_with_the_digests_asked_for(db):
    with FeatureCache(db, "m1") as cache:
        cache.put_clips([("d1", '{"rule": "middle"}'), ("d2", '{"rule": "first"}')])
        assert cache.get_clips(["d2", "nope", "d1", "d2"]) == [
            '{"rule": "first"}',
            None,
            '{"rule": "middle"}',
            '{"rule": "first"}',
        ]


def test_a_record_is_kept_per_model_and_replaced_in_place(db):
    with FeatureCache(db, "m1") as one:
        one.put_clips([("d1", "first")])
        one.put_clips([("d1", "second")])  # the same (digest, model): updated, not a second row
        assert one.get_clips(["d1"]) == ["second"]
    with FeatureCache(db, "m2") as two:
        assert two.get_clips(["d1"]) == [None]  # another model's record is not this one's
        two.put_clips([("d1", "other")])
    with FeatureCache(db, "m1") as one:
        assert one.get_clips(["d1"]) == ["second"]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM clips").fetchone()[0] == 2
    finally:
        conn.close()


def test_records_that_are_not_short_text_are_not_read(db):
    with FeatureCache(db, "m1") as cache:
        cache.put_clips([("text", "ok")])
    conn = sqlite3.connect(db)
    try:
        conn.execute("INSERT INTO clips VALUES ('huge', 'm1', ?)", ("x" * (MAX_CLIP_RECORD + 1),))
        conn.execute("INSERT INTO clips VALUES ('blob', 'm1', ?)", (b"\x00\x01",))
        conn.commit()
    finally:
        conn.close()
    with FeatureCache(db, "m1") as cache:
        assert cache.get_clips(["huge", "blob", "text"]) == [None, None, "ok"]


def test_a_model_key_is_needed(db):
    with FeatureCache(db) as cache:
        with pytest.raises(ValueError, match="opened without a model_key"):
            cache.get_clips(["d1"])
        with pytest.raises(ValueError, match="opened without a model_key"):
            cache.put_clips([("d1", "x")])


def test_nothing_is_written_once_writes_are_disabled(db):
    with FeatureCache(db, "m1") as cache:
        cache.writes_disabled = True
        cache.put_clips([("d1", "x")])
        cache.writes_disabled = False
        assert cache.get_clips(["d1"]) == [None]


def test_a_failed_write_stops_further_writes(db):
    with FeatureCache(db, "m1") as cache:
        conn = sqlite3.connect(db)
        try:
            conn.execute("DROP TABLE clips")  # the write below then fails inside SQLite
            conn.commit()
        finally:
            conn.close()
        with pytest.raises(CacheWriteError):
            cache.put_clips([("d1", "x")])
        assert cache.writes_disabled


def test_null_clips_know_nothing_and_keep_nothing():
    for null in (NullClips(), NullCache()):
        null.put_clips([("d1", "x")])
        assert null.get_clips(["d1", "d2"]) == [None, None]
        assert null.get_clips([]) == []
