"""Keeping a cache file in shape, on its own: what ``info`` counts, and what ``prune`` and ``clear`` do to
the tables beside files and vectors (dates, models, rankings, failures)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from novelfind.cache import FeatureCache, NullCache
from novelfind.cache.upkeep import NullUpkeep
from novelfind.media.walk import ImageFile


def real(path: Path, data: bytes) -> ImageFile:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    st = path.stat()
    return ImageFile(path, st.st_size, st.st_mtime_ns)


def vec() -> np.ndarray:
    return np.ones(4, np.float32)


@pytest.fixture
def path(tmp_path) -> Path:
    return tmp_path / "cache" / "features.sqlite"


def test_info_counts_the_unreadable_files_and_lists_models_in_the_order_first_seen(path):
    with FeatureCache(path, "zeta") as cache:
        cache.put_many([(ImageFile(Path("/p/a.jpg"), 1, 2), "da", vec())])
    with FeatureCache(path, "alpha") as cache:
        cache.put_many([(ImageFile(Path("/p/a.jpg"), 1, 2), "da", vec())])
        cache.record_failures([(b"/p/bad1.jpg", 1, 1, "bad"), (b"/p/bad2.jpg", 1, 1, "bad")])
        info = cache.info()
    assert info["failures"] == 2
    # by first_seen, then key: both were first seen in the same second, so alphabetical here
    assert list(info["models"]) == sorted(info["models"]) == ["alpha", "zeta"]
    assert info["size_bytes"] >= os.stat(path).st_size > 0


def test_prune_forgets_the_failures_of_files_gone_and_keeps_the_others(path, tmp_path):
    still = real(tmp_path / "lib" / "still_bad.jpg", b"bad")
    with FeatureCache(path) as cache:
        cache.record_failures(
            [(os.fsencode(still.path), still.size, still.mtime_ns, "bad"), (b"/lib/deleted.jpg", 1, 1, "bad")]
        )
        assert cache.prune() == 0  # no file entries: the count is of those
        assert list(cache.known_failures()) == [os.fsencode(still.path)]


def test_prune_drops_dates_and_models_nothing_uses_any_more(path, tmp_path):
    keep = real(tmp_path / "lib" / "keep.jpg", b"keep")
    gone = real(tmp_path / "lib" / "gone.jpg", b"gone")
    with FeatureCache(path, "m1") as cache:
        cache.put_many([(keep, "dk", vec())])
    with FeatureCache(path, "m2") as cache:
        cache.put_many([(gone, "dg", vec())])
        cache.put_dates([("dk", 1.6e9, 0, "exif"), ("dg", 1.7e9, 0, "exif")])
        gone.path.unlink()
        assert cache.prune() == 1
        assert cache.model_keys() == {"m1": 4}  # m2's only vector was the gone file's
        assert cache.dates_by_stat([keep]) == [("dk", (1.6e9, 0, "exif"))]
        conn_dates = cache._conn.execute("SELECT digest FROM dates").fetchall()
        assert conn_dates == [("dk",)]


def test_prune_keeps_a_file_recorded_anew_since_it_was_looked_at(path, tmp_path):
    """A row another run updates between prune's read of the rows and its delete is that run's: kept."""
    photo = real(tmp_path / "lib" / "a.jpg", b"first")
    fresh = real(photo.path, b"second, longer")  # changed on disk: stale as recorded below
    with FeatureCache(path, "m1") as cache:
        cache.put_many([(photo, "d1", vec())])
        reading = cache._reading

        @contextmanager
        def then_recorded_anew():
            with reading() as conn:
                yield conn
            cache.put_many([(fresh, "d2", vec())])  # another run, once prune has read the rows

        cache._reading = then_recorded_anew
        assert cache.prune() == 0
        cache._reading = reading
        assert cache.digests_by_stat([fresh]) == ["d2"]


def test_clear_forgets_rankings_dates_and_failures_too(path):
    with FeatureCache(path, "m1") as cache:
        cache.put_many([(ImageFile(Path("/p/a.jpg"), 1, 2), "da", vec())])
        cache.put_dates([("da", 1.6e9, 0, "exif")])
        cache.note_ranking(b"/p", "knn", "0.4.0")
        cache.record_failures([(b"/p/bad.jpg", 1, 1, "bad")])
        cache.clear()
        assert cache.last_ranking(b"/p") is None
        assert cache.known_failures() == {}
        assert cache._conn.execute("SELECT count(*) FROM dates").fetchone()[0] == 0
        assert cache.info()["entries"] == cache.info()["files"] == 0


def test_no_cache_holds_nothing_and_has_nothing_to_do():
    expected = {"path": None, "entries": 0, "files": 0, "size_bytes": 0, "models": {}, "schema_version": None}
    for null in (NullUpkeep(), NullCache()):
        assert null.info() == expected
        assert null.prune() == 0
        assert null.clear() is None
