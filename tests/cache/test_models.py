"""The ``models`` table on its own: the keys a cache holds, and what is done to a key as a whole
(counting the photos only it describes, renaming it, dropping it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from novelfind.cache import FeatureCache
from novelfind.media.walk import ImageFile


def f(i: int) -> ImageFile:
    return ImageFile(Path(f"/photos/{i}.jpg"), 100 + i, 1_000 + i)


def put(path: Path, key: str, rows: list[tuple[ImageFile, str]], dim: int = 4) -> None:
    with FeatureCache(path, key) as cache:
        cache.put_many([(file, digest, np.full(dim, 1.0, np.float32)) for file, digest in rows])


@pytest.fixture
def path(tmp_path) -> Path:
    return tmp_path / "features.sqlite"


def test_model_keys_give_each_key_its_dimension_and_skip_rows_of_other_shapes(path):
    put(path, "a", [(f(0), "d0")], dim=4)
    put(path, "b", [(f(1), "d1")], dim=6)
    conn = sqlite3.connect(path)
    try:
        conn.execute("INSERT INTO models VALUES ('text-dim', 'four', 't')")
        conn.execute("INSERT INTO models VALUES (?, 4, 't')", ("k" * 5000,))
        conn.commit()
    finally:
        conn.close()
    with FeatureCache(path) as cache:
        assert cache.model_keys() == {"a": 4, "b": 6}


def test_photos_without_counts_contents_only_an_unusable_key_describes(path):
    put(path, "old", [(f(0), "d0"), (f(1), "d1"), (f(2), "d1"), (f(3), "d3")])  # f(1), f(2): one content
    put(path, "new", [(f(0), "d0")])
    put(path, "other", [(f(3), "d3")])
    with FeatureCache(path) as cache:
        assert cache.photos_without("old", []) == 3  # d0, d1, d3: distinct digests, not files
        assert cache.photos_without("old", ["new"]) == 2
        assert cache.photos_without("old", ["new", "other", "new"]) == 1
        assert cache.photos_without("missing", ["new"]) == 0


def test_photos_without_leaves_out_vectors_no_known_file_has(path):
    put(path, "old", [(f(0), "d0"), (f(1), "d1")])
    conn = sqlite3.connect(path)
    try:
        conn.execute("DELETE FROM files WHERE digest = 'd1'")  # a vector whose file was forgotten
        conn.commit()
    finally:
        conn.close()
    with FeatureCache(path) as cache:
        assert cache.photos_without("old", []) == 1


def test_digests_under_another_key_count_only_files_unchanged_since_read(path):
    put(path, "old", [(f(0), "d0"), (f(1), "d0"), (f(2), "d2")])
    changed = ImageFile(f(2).path, f(2).size + 1, f(2).mtime_ns)
    with FeatureCache(path, "new") as cache:
        under = cache.digests_under([f(0), f(1), changed, f(9)], "old")
        assert sorted(under) == ["d0"]  # two copies, one digest; the changed file is not counted


def test_upgrade_does_nothing_for_its_own_key_or_one_it_does_not_hold(path):
    put(path, "m1", [(f(0), "d0")])
    with FeatureCache(path, "m1") as cache:
        assert cache.upgrade("m1") == 0
        assert cache.upgrade("never-there") == 0
        assert cache.model_keys() == {"m1": 4}
    with FeatureCache(path) as keyless:
        with pytest.raises(ValueError, match="opened without a model_key"):
            keyless.upgrade("m1")


def test_drop_model_forgets_its_vectors_and_clips_and_leaves_the_others(path):
    put(path, "gone", [(f(0), "d0"), (f(1), "d1")])
    put(path, "kept", [(f(0), "d0")])
    with FeatureCache(path, "gone") as cache:
        cache.put_clips([("d0", "clip-gone")])
    with FeatureCache(path, "kept") as cache:
        cache.put_clips([("d0", "clip-kept")])
        assert cache.drop_model("gone") == 2
        assert cache.drop_model("gone") == 0
        assert cache.model_keys() == {"kept": 4}
        assert cache.get_clips(["d0"]) == ["clip-kept"]
        assert cache.digests_by_stat([f(0), f(1)]) == ["d0", "d1"]  # the files themselves are kept
    with FeatureCache(path, "gone") as cache:
        assert cache.get_clips(["d0"]) == [None]
