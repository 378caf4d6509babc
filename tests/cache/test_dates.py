"""The ``dates`` table on its own: a capture date kept per content digest, found through a file's stat."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from novelfind.cache import FeatureCache, NullCache
from novelfind.cache.dates import NullDates
from novelfind.media.walk import ImageFile

A = ImageFile(Path("/photos/a.jpg"), 100, 1_000)
A_COPY = ImageFile(Path("/photos/copy/a.jpg"), 100, 2_000)  # the same bytes under another path
B = ImageFile(Path("/photos/b.jpg"), 200, 3_000)
T = 1_600_000_000.0  # 2020-09-13: a date a camera could have written


@pytest.fixture
def cache(tmp_path):
    with FeatureCache(tmp_path / "features.sqlite", "m1") as opened:
        opened.put_many([(A, "da", np.ones(4, np.float32)), (A_COPY, "da", np.ones(4, np.float32))])
        opened.put_many([(B, "db", np.ones(4, np.float32))])
        yield opened


def test_a_file_gives_its_digest_and_the_date_of_its_bytes(cache):
    assert cache.dates_by_stat([A, B]) == [("da", None), ("db", None)]  # read, no date stored yet
    cache.put_dates([("da", 1_600_000_000.5, 7200, "exif")])
    # one row serves every path of the bytes
    assert cache.dates_by_stat([B, A, A_COPY]) == [
        ("db", None),
        ("da", (1_600_000_000.5, 7200, "exif")),
        ("da", (1_600_000_000.5, 7200, "exif")),
    ]


def test_a_file_unknown_or_changed_since_read_gives_nothing(cache):
    cache.put_dates([("da", T + 1, None, "exif-local")])
    changed = ImageFile(A.path, A.size + 1, A.mtime_ns)
    touched = ImageFile(A.path, A.size, A.mtime_ns + 1)
    unknown = ImageFile(Path("/photos/new.jpg"), 1, 1)
    assert cache.dates_by_stat([changed, touched, unknown]) == [(None, None)] * 3


def test_a_stored_absence_of_a_date_is_a_date_record(cache):
    """``none``: the header was read and says nothing; that is remembered, unlike a photo never read."""
    cache.put_dates([("db", None, None, "none")])
    assert cache.dates_by_stat([B, A]) == [("db", (None, None, "none")), ("da", None)]


def test_a_date_is_replaced_whole_and_kept_once_per_digest(cache, tmp_path):
    cache.put_dates([("da", T + 5, 3600, "exif")])
    cache.put_dates([("da", T + 6, None, "exif-local")])
    assert cache.dates_by_stat([A]) == [("da", (T + 6, None, "exif-local"))]
    conn = sqlite3.connect(cache.path)
    try:
        assert conn.execute("SELECT count(*) FROM dates").fetchone()[0] == 1
    finally:
        conn.close()


def test_dates_need_no_model_key_and_nothing_is_written_when_writes_stopped(tmp_path):
    path = tmp_path / "features.sqlite"
    with FeatureCache(path, "m1") as cache:
        cache.put_many([(A, "da", np.ones(4, np.float32))])
    with FeatureCache(path) as keyless:  # a date is no model's: maintenance opens read them too
        keyless.put_dates([("da", T + 9, 0, "exif")])
        assert keyless.dates_by_stat([A]) == [("da", (T + 9, 0, "exif"))]
        keyless.writes_disabled = True
        keyless.put_dates([("da", T + 1, 0, "raw")])
        assert keyless.dates_by_stat([A]) == [("da", (T + 9, 0, "exif"))]


def test_no_cache_knows_no_date_and_keeps_none():
    for null in (NullDates(), NullCache()):
        null.put_dates([("da", T + 1, 0, "exif")])
        assert null.dates_by_stat([A, B]) == [(None, None), (None, None)]
        assert null.dates_by_stat([]) == []
