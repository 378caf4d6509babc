"""The ``files`` and ``vectors`` tables on their own: how a vector is stored and read back, which stored
vectors are sound, what a batch refuses, and the compact set of digests."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from novelfind.cache import DigestSet, FeatureCache
from novelfind.cache.vectors import FLOAT16_MAX, NullVectors, _from_blob, _sound, _to_blob
from novelfind.errors import CacheError
from novelfind.media.walk import ImageFile


def f(i: int) -> ImageFile:
    return ImageFile(Path(f"/photos/{i}.jpg"), 100 + i, 1_000 + i)


@pytest.fixture
def path(tmp_path) -> Path:
    return tmp_path / "features.sqlite"


def test_a_vector_is_stored_little_endian_in_float16_only_where_every_value_fits():
    small = np.array([1.0, -2.5, 0.1], np.float32)
    assert _to_blob(small) == small.astype("<f4").tobytes()  # float32 unless asked
    assert _to_blob(small, "float16") == small.astype("<f2").tobytes()
    big = np.array([1.0, FLOAT16_MAX * 2], np.float32)
    assert _to_blob(big, "float16") == big.astype("<f4").tobytes()  # would overflow: kept in float32
    edge = np.array([FLOAT16_MAX], np.float32)
    assert len(_to_blob(edge, "float16")) == 2
    # the blob's length says how it was stored
    np.testing.assert_array_equal(_from_blob(_to_blob(small), 3), small)
    np.testing.assert_array_equal(_from_blob(_to_blob(small, "float16"), 3), small.astype(np.float16))
    assert _from_blob(_to_blob(small), 4) is None and _from_blob(b"\x00" * 5, 2) is None
    back = _from_blob(_to_blob(small), 3)
    assert back.dtype == np.float32 and back.flags.writeable


def test_a_stored_vector_is_sound_when_finite_within_the_norm_and_above_the_floor():
    def blob(values: list[float], dtype: str = "<f4") -> tuple[bytes, int]:
        return np.array(values, dtype).tobytes(), len(values)

    blobs = [
        blob([3.0, 4.0]),  # norm 5
        blob([3.0, 4.1]),  # norm above 5
        blob([np.nan, 0.0]),
        blob([np.inf, 0.0], "<f2"),
        blob([-0.5, 1.0], "<f2"),  # below the floor
        (b"\x00" * 3, 2),  # neither layout: left to _from_blob
    ]
    assert _sound(blobs, max_norm=5.0).tolist() == [True, False, False, False, True, True]
    assert _sound(blobs, max_norm=5.0, min_value=0.0).tolist() == [True, False, False, False, False, True]
    assert _sound([], 1.0).tolist() == []


def test_digest_sets_pack_hex_digests_and_keep_anything_else_as_it_is():
    hexes = ["ab" * 16, "00" * 16, "ff" + "00" * 15]
    odd = ["zz" * 16, "short", ""]  # 32 characters that are not hex, and other lengths
    digests = DigestSet([*hexes, *odd])  # distinct, as the cache's queries give them
    assert len(digests) == 6 and set(digests) == {*hexes, *odd}
    assert all(d in digests for d in (*hexes, *odd))
    assert "ff" * 16 not in digests and "00" * 15 + "01" not in digests  # zero bytes are compared too
    assert 7 not in digests and None not in digests and b"\xab" * 16 not in digests
    assert len(DigestSet()) == 0 and list(DigestSet()) == [] and repr(digests) == "<DigestSet of 6>"


def test_a_digest_set_holds_each_digest_once():
    a, b = "ab" * 16, "cd" * 16
    digests = DigestSet([a, b, a, "short", "short", a])  # repeats, as a list of files' digests has them
    assert len(digests) == 3 and sorted(digests) == sorted([a, b, "short"])
    assert a in digests and b in digests


def test_a_batch_refuses_vectors_of_the_wrong_shape_and_stores_nothing(path):
    with FeatureCache(path, "m1") as cache:
        with pytest.raises(ValueError, match=r"must be 1-D and non-empty, got shape \(2, 2\)"):
            cache.put_many([(f(0), "d0", np.ones((2, 2)))])
        with pytest.raises(ValueError, match=r"must be 1-D and non-empty, got shape \(0,\)"):
            cache.put_many([(f(0), "d0", np.ones(0))])
        with pytest.raises(ValueError, match="vectors of one batch differ in length: 4 and 5"):
            cache.put_many([(f(0), "d0", np.ones(4)), (f(1), "d1", np.ones(5))])
        cache.put_many([(f(0), "d0", np.ones(4))])
        with pytest.raises(ValueError, match="model m1 makes 4-d vectors, got 5-d"):
            cache.put_many([(f(1), "d1", np.ones(5))])
        assert cache.get_many_by_stat([f(0), f(1)])[1] is None  # the refused batch was rolled back
        assert not cache.writes_disabled  # a caller's mistake, not the cache's
        assert cache.has_many_by_stat([f(0)], 4).tolist() == [True]
        assert cache.has_many_by_stat([f(0)], 5).tolist() == [False]


def test_reading_back_a_library_names_the_first_vector_that_is_gone(path):
    with FeatureCache(path, "m1") as cache:
        cache.put_many([(f(i), f"d{i}", np.full(4, float(i))) for i in (0, 1, 3)])
        chunks = list(cache.rows_by_stat([f(0), f(1), f(3)], chunk=2))
        assert [c.shape for c in chunks] == [(2, 4), (1, 4)]
        assert [c[:, 0].tolist() for c in chunks] == [[0.0, 1.0], [3.0]]
        with pytest.raises(CacheError) as gone:
            list(cache.rows_by_stat([f(0), f(2), f(3)], chunk=2))
    assert str(gone.value) == (
        f"the vector of {f(2).path} is no longer in the feature cache {path} "
        "(cleared or pruned during the scan?)"
    )
    with pytest.raises(CacheError, match="no feature cache to read the vectors back from"):
        next(NullVectors().rows_by_stat([f(0)]))


def test_a_damaged_vector_found_by_digest_is_named_by_a_file_with_its_bytes(path):
    warned: list[str] = []
    with FeatureCache(path, "m1", on_warning=warned.append, max_norm=10.0) as cache:
        cache.put_many([(f(0), "d0", np.full(4, 100.0)), (f(1), "d1", np.ones(4))])
        conn = sqlite3.connect(path)
        try:
            blob = np.full(4, 100.0, "<f4").tobytes()
            conn.execute("INSERT INTO vectors VALUES ('orphan', 'm1', 4, ?)", (blob,))
            conn.commit()
        finally:
            conn.close()
        got = cache.get_many_by_digest(["d0", "d1", "orphan"])
        assert got[0] is None and got[1] is not None and got[2] is None
        assert sorted(w.split(" is damaged")[0] for w in warned) == [
            f"the cached vector of {f(0).path}",
            "the cached vector of the file with digest orphan",
        ]
        assert cache.get_many_by_digest(["d0", "orphan"]) == [None, None]
        assert len(warned) == 2  # deleted once found: not named again


def test_stored_rounds_to_float16_only_the_rows_that_fit(path):
    rows = np.array([[0.1, 0.2], [0.1, FLOAT16_MAX * 4]], np.float32)
    with FeatureCache(path, "m1", dtype="float16") as cache:
        out = cache.stored(rows)
        np.testing.assert_array_equal(out[0], rows[0].astype(np.float16).astype(np.float32))
        np.testing.assert_array_equal(out[1], rows[1])  # a value too large: the row stays float32
        np.testing.assert_array_equal(cache.stored(rows[0]), out[0])
        cache.put_many([(f(0), "d0", rows[0]), (f(1), "d1", rows[1])])
        np.testing.assert_array_equal(np.stack(cache.get_many_by_stat([f(0), f(1)])), out)
    with FeatureCache(path, "m1", dtype="float32") as cache:
        np.testing.assert_array_equal(cache.stored(rows), rows)
