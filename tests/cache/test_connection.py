"""The open cache file every table shares: its SQL helpers, chunked lookups, and how a failed read or
write is reported, whichever table it touched."""

from __future__ import annotations

import os
import sqlite3
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from novelfind.cache import CacheWarning, CacheWriteError, FeatureCache
from novelfind.cache import connection as cache_connection
from novelfind.cache.connection import MAX_TEXT, encode_path, short_text, stat_keys
from novelfind.errors import CacheError
from novelfind.media.walk import ImageFile


@pytest.fixture
def cache(tmp_path):
    with FeatureCache(tmp_path / "features.sqlite", "m1") as opened:
        yield opened


def test_short_text_admits_text_of_a_plausible_length_only():
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE TABLE t (v)")
        conn.executemany(
            "INSERT INTO t VALUES (?)",
            [("short",), ("x" * MAX_TEXT,), ("x" * (MAX_TEXT + 1),), (b"bytes",), (7,), (None,)],
        )
        kept = [len(v) for (v,) in conn.execute(f"SELECT v FROM t WHERE {short_text('v')}")]
    finally:
        conn.close()
    assert sorted(kept) == [5, MAX_TEXT]


def test_paths_are_kept_as_their_bytes_and_stats_come_from_records_or_columns():
    odd = Path(os.fsdecode(b"/photos/caf\xe9.jpg"))  # not UTF-8: kept as the bytes the file system has
    assert encode_path(odd) == b"/photos/caf\xe9.jpg"
    assert encode_path("/a/b.jpg") == b"/a/b.jpg"
    files = [ImageFile(odd, 10, 20), SimpleNamespace(path="/a/b.jpg", size=np.int64(3), mtime_ns=4.0)]
    assert stat_keys(files) == [(b"/photos/caf\xe9.jpg", 10, 20), (b"/a/b.jpg", 3, 4)]
    assert all(type(v) is int for _, size, mtime in stat_keys(files) for v in (size, mtime))

    class Columns(list):
        def records(self):  # a FileList gives its columns as records, without making ImageFiles
            return iter([(b"/x", 1, 2)])

    assert stat_keys(Columns()) == [(b"/x", 1, 2)]


def test_lookups_are_chunked_and_ask_for_each_value_once(cache, monkeypatch):
    monkeypatch.setattr(cache_connection, "_CHUNK", 2)
    files = [ImageFile(Path(f"/p/{i}.jpg"), 100 + i, 1000 + i) for i in range(5)]
    cache.put_many([(f, f"d{i}", np.ones(4, np.float32)) for i, f in enumerate(files)])
    statements: list[str] = []
    cache._conn.set_trace_callback(statements.append)
    sql = "SELECT path, size, mtime_ns, digest FROM files WHERE path IN ({marks})"
    paths = [encode_path(f.path) for f in (*files, files[0], files[3])]  # two asked for twice
    with cache._lock:
        rows = list(cache._select_in(sql, (), paths))
    cache._conn.set_trace_callback(None)
    assert sorted(r[3] for r in rows) == ["d0", "d1", "d2", "d3", "d4"]
    assert len([s for s in statements if s.startswith("SELECT path")]) == 3  # 5 distinct paths, 2 a query


def test_by_stat_finds_a_row_only_while_the_file_keeps_its_size_and_mtime(cache):
    f = ImageFile(Path("/p/a.jpg"), 10, 20)
    cache.put_many([(f, "da", np.ones(4, np.float32))])
    sql = "SELECT path, size, mtime_ns, digest FROM files WHERE path IN ({marks})"
    asked = [(b"/p/a.jpg", 10, 20), (b"/p/a.jpg", 11, 20), (b"/p/a.jpg", 10, 21), (b"/p/none.jpg", 10, 20)]
    assert cache._by_stat(sql, (), asked) == [("da",), None, None, None]


def test_a_failed_read_is_a_cache_error_naming_the_file(cache):
    with pytest.raises(CacheError) as caught:
        with cache._reading() as conn:
            conn.execute("SELECT * FROM no_such_table")
    assert str(caught.value).startswith(f"cannot read the feature cache {cache.path}: no such table")
    assert not cache._lock.locked()


def test_a_failed_write_says_what_it_did_and_stop_ends_the_writes(cache):
    with pytest.raises(CacheError) as caught:
        with cache._writing(doing="prune", error=CacheError) as conn:
            conn.execute("INSERT INTO no_such_table VALUES (1)")
    assert type(caught.value) is CacheError
    assert str(caught.value).startswith(f"cannot prune the feature cache {cache.path}: ")
    assert not cache.writes_disabled and not cache._conn.in_transaction
    with pytest.raises(CacheWriteError, match="cannot write the feature cache"):
        with cache._writing(stop=True) as conn:
            conn.execute("INSERT INTO no_such_table VALUES (1)")
    assert cache.writes_disabled


def test_a_write_that_fails_midway_is_rolled_back(cache):
    with pytest.raises(CacheError):
        with cache._writing() as conn:
            conn.execute("INSERT INTO rankings VALUES (?, 'knn', '1')", (b"/lib",))
            conn.execute("INSERT INTO no_such_table VALUES (1)")
    assert cache.last_ranking(b"/lib") is None


def test_warnings_go_to_the_callback_else_to_python_warnings(tmp_path):
    heard: list[str] = []
    with FeatureCache(tmp_path / "a.sqlite", "m1", on_warning=heard.append) as cache:
        cache._warn("first")
    assert heard == ["first"]
    with FeatureCache(tmp_path / "b.sqlite", "m1") as cache:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache._warn("second")
    assert [(w.category, str(w.message)) for w in caught] == [(CacheWarning, "second")]
    cache.close()  # a second close does nothing
    assert cache._conn is None
