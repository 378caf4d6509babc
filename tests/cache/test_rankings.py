"""The ``rankings`` table on its own: what names a library, and its last ranking, noted and read back."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from novelfind.cache import EARLIER_RANKING, FeatureCache, NullCache, ranking_root
from novelfind.cache.rankings import NullRankings


@pytest.fixture
def cache(tmp_path):
    with FeatureCache(tmp_path / "features.sqlite") as opened:
        yield opened


def test_a_library_is_named_by_its_folders_absolute_and_sorted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = os.fsencode(tmp_path)
    assert ranking_root(["b", Path("a")]) == root + b"/a\0" + root + b"/b"
    assert ranking_root([tmp_path / "b", "a"]) == ranking_root(["a", "b"])  # the order given is no matter
    assert ranking_root([tmp_path]) == root
    assert ranking_root([]) == b""


def test_folder_names_that_are_not_utf8_keep_their_bytes():
    odd = os.fsdecode(b"/photos/\xff\xfe")
    assert ranking_root([odd]) == b"/photos/\xff\xfe"


def test_the_last_ranking_of_each_library_is_read_back(cache):
    one, two = ranking_root(["/one"]), ranking_root(["/two"])
    assert cache.last_ranking(one) is None
    cache.note_ranking(one, "ads", "0.3.0")
    cache.note_ranking(two, "knn", "0.3.0")
    cache.note_ranking(one, "knn", "0.4.0")  # one row a library: the latest replaces it
    assert cache.last_ranking(one) == ("knn", "0.4.0", False)
    assert cache.last_ranking(two) == ("knn", "0.3.0", False)
    conn = sqlite3.connect(cache.path)
    try:
        assert conn.execute("SELECT count(*) FROM rankings").fetchone()[0] == 2
    finally:
        conn.close()


def test_a_cache_from_before_the_table_answers_for_every_library_it_has_no_record_of(cache):
    cache.note_ranking(b"", *EARLIER_RANKING)  # what create_tables writes into an earlier version's cache
    cache.note_ranking(b"/known", "knn", "0.4.0")
    assert cache.last_ranking(b"/unknown") == (*EARLIER_RANKING, True)
    assert cache.last_ranking(b"/known") == ("knn", "0.4.0", False)


def test_rows_of_other_shapes_are_no_record(cache):
    conn = sqlite3.connect(cache.path)
    try:
        conn.execute("INSERT INTO rankings VALUES (?, ?, '1')", (b"/blob-method", b"knn"))
        conn.execute("INSERT INTO rankings VALUES (?, 'knn', ?)", (b"/long-version", "9" * 5000))
        conn.commit()
    finally:
        conn.close()
    assert cache.last_ranking(b"/blob-method") is None
    assert cache.last_ranking(b"/long-version") is None


def test_no_cache_knows_no_ranking_and_notes_none():
    for null in (NullRankings(), NullCache()):
        null.note_ranking(b"/one", "knn", "0.4.0")
        assert null.last_ranking(b"/one") is None
