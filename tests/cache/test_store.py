"""The feature cache: hits and misses, damage, full disks, kills and concurrent writers."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from common import unprivileged

from novelfind.cache import (
    APPLICATION_ID,
    SCHEMA_VERSION,
    CacheWarning,
    CacheWriteError,
    FeatureCache,
    NullCache,
)
from novelfind.cache import connection as cache_connection
from novelfind.cache import store as cache_store
from novelfind.errors import CacheError
from novelfind.media.walk import ImageFile

REPO = Path(cache_store.__file__).resolve().parents[2]
DIM = 16


def vec(seed: int, dim: int = DIM) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32)


def image(path: Path, data: bytes = b"pixels") -> ImageFile:
    """A real file on disk and its record, as the walk would give it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    st = path.stat()
    return ImageFile(path, st.st_size, st.st_mtime_ns)


def fake(i: int, root: str = "/photos") -> ImageFile:
    """A record of a file that need not exist."""
    return ImageFile(Path(f"{root}/d{i // 100}/IMG_{i:06d}.jpg"), 1000 + i, 1_700_000_000_000_000_000 + i)


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def python(script: str, *args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-c", script, *args], env=env, **kwargs)


@pytest.fixture
def db(tmp_path) -> Path:
    return tmp_path / "cache" / "features.sqlite"


# -- lookups ---------------------------------------------------------------------------------------


def test_put_then_get_by_stat_and_by_digest(db):
    f = fake(1)
    with FeatureCache(db, "m1") as c:
        assert c.get_by_stat(str(f.path), f.size, f.mtime_ns) is None
        c.put_many([(f, "d1", vec(1))])
        got = c.get_by_stat(str(f.path), f.size, f.mtime_ns)
        np.testing.assert_array_equal(got, vec(1))
        assert got.dtype == np.float32 and got.flags.writeable
        np.testing.assert_array_equal(c.get_by_digest("d1"), vec(1))
        assert c.get_by_digest("d2") is None


def test_known_digests_are_those_of_this_model(db):
    with FeatureCache(db, "m1") as c:
        c.put_many([(fake(i), f"d{i}", vec(i)) for i in range(3)])
    with FeatureCache(db, "m2") as c:
        c.put_many([(fake(9), "d9", vec(9))])
        assert c.known_digests() == frozenset({"d9"})
    with FeatureCache(db, "m1") as c:
        assert c.known_digests() == frozenset({"d0", "d1", "d2"})
    assert NullCache().known_digests() == frozenset()


def test_digests_by_stat_without_reading_the_files(db):
    """What the ignore list matches a library by: the recorded digest, only while size and mtime hold."""
    files = [fake(i) for i in range(3)]
    with FeatureCache(db, "m1") as c:
        c.put_many([(f, f"d{i}", vec(i)) for i, f in enumerate(files[:2])])
    changed = ImageFile(files[1].path, files[1].size + 1, files[1].mtime_ns)
    with FeatureCache(db, "m2") as c:  # the digest is the file's, whatever model made vectors of it
        assert c.digests_by_stat([files[0], changed, files[2], files[0]]) == ["d0", None, None, "d0"]
        assert c.digests_by_stat([]) == []
    assert NullCache().digests_by_stat(files) == [None, None, None]


def test_survives_reopening(db):
    with FeatureCache(db, "m1") as c:
        c.put_many([(fake(i), f"d{i}", vec(i)) for i in range(5)])
    with FeatureCache(db, "m1") as c:
        got = c.get_many_by_stat([fake(i) for i in range(5)])
    for i, v in enumerate(got):
        np.testing.assert_array_equal(v, vec(i))


@pytest.mark.parametrize("change", ["size", "mtime"])
def test_changed_file_is_a_stat_miss(db, change):
    f = fake(1)
    with FeatureCache(db, "m1") as c:
        c.put_many([(f, "d1", vec(1))])
        size = f.size + (change == "size")
        mtime = f.mtime_ns + (change == "mtime")
        assert c.get_by_stat(f.path, size, mtime) is None
        assert c.get_many_by_stat([ImageFile(f.path, size, mtime)]) == [None]


def test_moved_file_is_found_by_digest_and_rewritten_under_its_new_path(db):
    old, new = fake(1, "/photos/2019"), fake(1, "/photos/sorted")
    with FeatureCache(db, "m1") as c:
        c.put_many([(old, "same-bytes", vec(7))])
        assert c.get_many_by_stat([new]) == [None]
        np.testing.assert_array_equal(c.get_by_digest("same-bytes"), vec(7))
        c.put_many([(new, "same-bytes", vec(7))])
        np.testing.assert_array_equal(c.get_many_by_stat([new])[0], vec(7))
        assert c.info()["entries"] == 1  # one vector, two paths
        assert c.info()["files"] == 2


def test_vectors_of_different_models_never_mix(db):
    f = fake(1)
    with FeatureCache(db, "weights-a/logits/p1") as a:
        a.put_many([(f, "d1", vec(1))])
    with FeatureCache(db, "weights-a/pooled/p1") as b:
        assert b.get_by_stat(f.path, f.size, f.mtime_ns) is None
        assert b.get_by_digest("d1") is None
        assert b.get_many_by_stat([f]) == [None]
        b.put_many([(f, "d1", vec(2, dim=32))])  # another model may have another dimension
        np.testing.assert_array_equal(b.get_by_digest("d1"), vec(2, dim=32))
        assert b.info()["models"] == {"weights-a/logits/p1": 1, "weights-a/pooled/p1": 1}
    with FeatureCache(db, "weights-a/logits/p1") as a:
        np.testing.assert_array_equal(a.get_by_stat(f.path, f.size, f.mtime_ns), vec(1))


def test_get_many_lines_up_with_its_input(db):
    files = [fake(i) for i in range(1200)]  # more than one IN (...) chunk
    with FeatureCache(db, "m1") as c:
        c.put_many([(files[i], f"d{i}", vec(i)) for i in range(0, 1200, 3)])
        query = [files[5], files[3], files[3], fake(99999), files[1197], files[0]]
        got = c.get_many_by_stat(query)
        assert [g is None for g in got] == [True, False, False, True, False, False]
        np.testing.assert_array_equal(got[1], vec(3))
        np.testing.assert_array_equal(got[4], vec(1197))
        assert c.get_many_by_stat([]) == []
        by_digest = c.get_many_by_digest(["d3", "nope", "d3", "d6"])
        assert [g is None for g in by_digest] == [False, True, False, False]


def test_every_batch_lookup_lines_up_across_chunks(db, monkeypatch):
    monkeypatch.setattr(cache_connection, "_CHUNK", 3)  # every lookup below spans several IN (...) chunks
    files = [fake(i) for i in range(20)]
    with FeatureCache(db, "m1") as c:
        c.put_many([(files[i], f"d{i}", vec(i)) for i in range(0, 20, 2)])
        query = [files[4], files[5], files[4], fake(999), files[18], files[0], files[7], files[2]]
        stored = [True, False, True, False, True, True, False, True]
        assert [g is not None for g in c.get_many_by_stat(query)] == stored
        assert c.has_many_by_stat(query, DIM).tolist() == stored
        assert c.digests_by_stat(query) == ["d4", None, "d4", None, "d18", "d0", None, "d2"]
        by_digest = c.get_many_by_digest(["d8", "d9", "d8", "d16", "d0", "x", "d2"])
        assert [g is not None for g in by_digest] == [True, False, True, True, True, False, True]
        np.testing.assert_array_equal(by_digest[3], vec(16))


def test_known_digests_are_held_in_16_bytes_each_and_answer_like_a_set(db):
    rng = np.random.default_rng(0)
    digests = [rng.bytes(16).hex() for _ in range(3000)] + ["00" * 16, "00" * 15 + "01", "not-hex", "d1"]
    with FeatureCache(db, "m1") as c:
        c.put_many([(fake(i), d, vec(i)) for i, d in enumerate(digests)])
        known = c.known_digests()
    assert len(known) == len(digests) and sorted(known) == sorted(digests)
    assert all(d in known for d in digests)
    absent = [rng.bytes(16).hex() for _ in range(3000)] + ["00" * 15 + "02", "ff" * 16, "d2", 7]
    assert not any(d in known for d in absent)
    import pickle

    assert len(pickle.dumps(known)) < 17 * len(digests) + 1000  # what a decode process receives


def test_10k_stat_lookups_in_one_call_return_every_vector(db):
    """Many chunks of one lookup line up with the input (speed: scripts/bench_reliability.py)."""
    n, dim = 10_000, 1000
    files = [fake(i) for i in range(n)]
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    with FeatureCache(db, "m1") as c:
        for start in range(0, n, 500):
            c.put_many([(files[i], f"{i:032x}", vectors[i]) for i in range(start, start + 500)])
    with FeatureCache(db, "m1") as c:
        got = c.get_many_by_stat(files[::-1])
    assert all(g is not None for g in got)
    np.testing.assert_array_equal(np.stack(got[::-1]), vectors)


def test_file_names_that_are_not_utf8_round_trip(db, tmp_path):
    raw = os.fsencode(str(tmp_path)) + b"/caf\xe9.jpg"
    f = ImageFile(Path(os.fsdecode(raw)), 3, 4)
    with FeatureCache(db, "m1") as c:
        c.put_many([(f, "d", vec(1))])
        np.testing.assert_array_equal(c.get_many_by_stat([f])[0], vec(1))


# -- writes ----------------------------------------------------------------------------------------


def test_a_batch_is_stored_whole_or_not_at_all(db):
    with FeatureCache(db, "m1") as c:
        c.put_many([(fake(0), "d0", vec(0))])
        with pytest.raises(ValueError, match="differ in length: 16 and 8"):
            c.put_many([(fake(1), "d1", vec(1)), (fake(2), "d2", vec(2, dim=8))])
        with pytest.raises(ValueError, match="makes 16-d vectors, got 8-d"):
            c.put_many([(fake(3), "d3", vec(3, dim=8))])
        with pytest.raises(ValueError, match="1-D"):
            c.put_many([(fake(4), "d4", np.zeros((2, 8), np.float32))])
        assert c.get_many_by_stat([fake(i) for i in range(5)])[1:] == [None] * 4
        assert c.info()["entries"] == 1


def test_vectors_with_nan_or_inf_are_not_stored(db):
    bad = vec(1)
    bad[3] = np.nan
    worse = vec(2)
    worse[0] = np.inf
    with FeatureCache(db, "m1") as c:
        c.put_many([(fake(1), "d1", bad), (fake(2), "d2", worse), (fake(3), "d3", vec(3))])
        assert [g is None for g in c.get_many_by_stat([fake(1), fake(2), fake(3)])] == [True, True, False]


def test_vectors_are_stored_as_float32(db):
    with FeatureCache(db, "m1") as c:
        c.put_many([(fake(1), "d1", vec(1).astype(np.float64))])
        assert c.get_by_digest("d1").dtype == np.float32
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT dim, length(data) FROM vectors").fetchall() == [(DIM, 4 * DIM)]
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_float16_storage_halves_the_vectors_and_reads_back_what_stored_says(db):
    vectors = [vec(i, 1000) * 8 for i in range(20)]  # logits-like magnitudes
    with FeatureCache(db, "m1", dtype="float16") as c:
        c.put_many([(fake(i), f"d{i}", v) for i, v in enumerate(vectors)])
        got = np.stack(c.get_many_by_stat([fake(i) for i in range(20)]))  # (20, 1000)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, c.stored(np.stack(vectors)))
        np.testing.assert_array_equal(c.stored(vectors[3]), got[3])
        assert 0 < np.abs(got - np.stack(vectors)).max() <= 8 * 8 * 2**-11  # float16 rounding, no more
    with sqlite3.connect(db) as conn:
        assert set(conn.execute("SELECT length(data) FROM vectors").fetchall()) == {(2 * 1000,)}


def test_a_float32_cache_keeps_working_when_float16_is_written_into_it(db):
    with FeatureCache(db, "m1", dtype="float32") as c:  # as every earlier novelfind wrote it
        c.put_many([(fake(1), "d1", vec(1))])
    big = vec(2) * 1e5  # beyond float16's range: kept in float32
    with FeatureCache(db, "m1", dtype="float16") as c:
        np.testing.assert_array_equal(c.get_by_digest("d1"), vec(1))  # read exactly as written
        c.put_many([(fake(2), "d2", big), (fake(3), "d3", vec(3))])
        np.testing.assert_array_equal(c.get_by_digest("d2"), big)
        np.testing.assert_array_equal(c.stored(big), big)
        np.testing.assert_array_equal(c.get_by_digest("d3"), vec(3).astype(np.float16).astype(np.float32))
    with FeatureCache(db, "m1", dtype="float32") as c:  # and the other way round
        assert all(v is not None for v in c.get_many_by_stat([fake(1), fake(2), fake(3)]))
    assert integrity(db) == "ok"
    with pytest.raises(ValueError, match="dtype must be one of float16, float32, got 'int8'"):
        FeatureCache(db, "m1", dtype="int8")


def test_full_disk_stops_caching_but_keeps_what_was_written(db):
    with FeatureCache(db, "m1") as c:
        c.put_many([(fake(0), "d0", vec(0, 1000))])
        pages = c._conn.execute("PRAGMA page_count").fetchone()[0]
        c._conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # SQLite reports SQLITE_FULL past this
        big = [(fake(i), f"d{i}", vec(i, 1000)) for i in range(1, 200)]
        with pytest.raises(CacheWriteError, match=r"^the disk holding the feature cache .* is full$") as info:
            c.put_many(big)
        assert info.value.disk_full
        assert isinstance(info.value, CacheError)
        assert c.writes_disabled
        c.put_many(big[:1])  # later batches: silently not cached
        assert c.get_many_by_stat([fake(0), fake(1)])[1] is None
        np.testing.assert_array_equal(c.get_by_digest("d0"), vec(0, 1000))
    assert integrity(db) == "ok"


def test_busy_for_longer_than_the_timeout_is_a_write_error(db):
    c = FeatureCache(db, "m1", busy_timeout=0.2)
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another run in the middle of a long write
    # Should the timeout be ignored, the holder lets go after a minute and the write goes through,
    # which fails the test below instead of hanging it.
    done = threading.Event()
    letgo = threading.Thread(target=lambda: done.wait(60) or holder.execute("ROLLBACK"))
    letgo.start()
    try:
        started = time.monotonic()
        with pytest.raises(CacheWriteError, match="stayed busy for 0.2 s"):
            c.put_many([(fake(1), "d1", vec(1))])
        assert time.monotonic() - started >= 0.2  # it did wait
        assert c.get_many_by_stat([fake(1)]) == [None]  # reading still works
    finally:
        done.set()
        letgo.join()
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
        c.close()


# -- damage and bad locations ------------------------------------------------------------------------


def test_garbage_cache_file_is_moved_aside_and_replaced(db):
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is not a database, just bytes" * 100)
    messages = []
    with FeatureCache(db, "m1", on_warning=messages.append) as c:
        c.put_many([(fake(1), "d1", vec(1))])
        assert c.get_by_digest("d1") is not None
        moved = c.recovered_from
    assert moved is not None and moved.name.startswith("features.sqlite.corrupt-")
    assert moved.read_bytes() == b"this is not a database, just bytes" * 100  # kept, not deleted
    assert len(messages) == 1 and str(moved) in messages[0] and "damaged" in messages[0]
    assert integrity(db) == "ok"


def test_damage_goes_to_warnings_without_a_callback(db):
    db.parent.mkdir(parents=True)
    db.write_bytes(b"\x00garbage" * 512)
    with pytest.warns(CacheWarning, match="damaged"):
        FeatureCache(db, "m1").close()


def test_damaged_pages_are_caught_by_the_check_on_open(db):
    with FeatureCache(db, "m1") as c:
        for start in range(0, 600, 100):
            c.put_many([(fake(i), f"d{i}", vec(i, 256)) for i in range(start, start + 100)])
        c._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    page = 4096
    assert data[:16] == b"SQLite format 3\x00" and len(data) > 20 * page
    for p in range(3, len(data) // page, 4):  # scribble over the b-tree headers of many pages
        data[p * page : p * page + 64] = b"\xa5" * 64
    db.write_bytes(bytes(data))
    with pytest.warns(CacheWarning, match="damaged"):
        c = FeatureCache(db, "m1")
    with c:
        assert c.recovered_from is not None
        assert c.info()["entries"] == 0
    assert integrity(db) == "ok"


def test_truncated_cache_is_moved_aside(db):
    with FeatureCache(db, "m1") as c:
        c.put_many([(fake(i), f"d{i}", vec(i, 1000)) for i in range(300)])
        c._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size // 2)
    messages = []
    with FeatureCache(db, "m1", on_warning=messages.append) as c:
        assert c.recovered_from is not None and c.recovered_from.exists()
        c.put_many([(fake(1), "d1", vec(1, 1000))])
    assert len(messages) == 1
    assert integrity(db) == "ok"


def test_another_programs_database_is_refused_and_untouched(db):
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE accounts (name TEXT, balance REAL)")
    conn.execute("INSERT INTO accounts VALUES ('me', 1.0)")
    conn.commit()
    conn.close()
    before = db.read_bytes()
    with pytest.raises(CacheError, match="database of another program"):
        FeatureCache(db, "m1")
    assert db.read_bytes() == before
    assert list(db.parent.iterdir()) == [db]


def test_a_cache_from_a_newer_version_is_refused(db):
    FeatureCache(db, "m1").close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(CacheError, match=rf"newer novelfind \(schema {SCHEMA_VERSION + 1}"):
        FeatureCache(db, "m1")


def test_uncreatable_location_is_a_cache_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(CacheError, match="cannot create the cache folder"):
        FeatureCache(tmp_path / "file" / "sub" / "features.sqlite", "m1")
    (tmp_path / "dir.sqlite").mkdir()
    with pytest.raises(CacheError, match="cache path is a folder"):
        FeatureCache(tmp_path / "dir.sqlite", "m1")


_OPEN_SCRIPT = """
import sys
from novelfind.cache import FeatureCache
from novelfind.errors import CacheError
try:
    FeatureCache(sys.argv[1], "m1").close()
except CacheError as err:
    print("CacheError:", err)
else:
    print("opened")
"""


@pytest.mark.parametrize("existing", [False, True])
def test_read_only_location_is_a_cache_error(tmp_path, existing):
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "features.sqlite"
    if existing:
        with FeatureCache(db, "m1") as c:
            c.put_many([(fake(1), "d1", vec(1))])
        os.chmod(db, 0o444)
    os.chmod(folder, 0o555)
    try:
        proc = subprocess.run(
            unprivileged([sys.executable, "-c", _OPEN_SCRIPT, str(db)]),
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            timeout=60,
        )
    finally:
        os.chmod(folder, 0o755)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CacheError: cannot write the feature cache"), proc.stdout


def test_model_key_is_needed_for_lookups_not_for_maintenance(db):
    with FeatureCache(db) as c:
        assert c.info()["entries"] == 0
        with pytest.raises(ValueError, match="without a model_key"):
            c.get_by_digest("d")
        with pytest.raises(ValueError, match="without a model_key"):
            c.put_many([(fake(1), "d1", vec(1))])


# -- maintenance -----------------------------------------------------------------------------------


def test_info_counts_vectors_files_models_and_bytes(db):
    with FeatureCache(db, "m1") as c:
        c.put_many([(fake(i), f"d{i}", vec(i)) for i in range(3)])
        c.put_many([(fake(3), "d0", vec(0))])  # a copy of file 0: one more file, no new vector
    with FeatureCache(db, "m2") as c:
        c.put_many([(fake(0), "d0", vec(9, 8))])
        info = c.info()
    assert info["path"] == str(db)
    assert info["entries"] == 4
    assert info["files"] == 4
    assert info["models"] == {"m1": 3, "m2": 1}
    assert info["size_bytes"] >= db.stat().st_size > 0


def test_prune_drops_files_gone_or_changed_and_their_vectors(db, tmp_path):
    keep = image(tmp_path / "lib" / "keep.jpg", b"keep")
    gone = image(tmp_path / "lib" / "gone.jpg", b"gone")
    edited = image(tmp_path / "lib" / "edited.jpg", b"before")
    copy = image(tmp_path / "lib" / "copy_of_gone.jpg", b"gone")
    with FeatureCache(db, "m1") as c:
        c.put_many([(keep, "k", vec(1)), (gone, "g", vec(2)), (edited, "e", vec(3)), (copy, "g", vec(2))])
        gone.path.unlink()
        edited.path.write_bytes(b"after, longer")
        assert c.prune() == 2
        assert c.get_many_by_stat([keep, gone, edited, copy])[1:3] == [None, None]
        assert c.get_by_digest("g") is not None  # still used by the copy
        assert c.get_by_digest("e") is None  # nothing uses it any more
        assert c.info()["files"] == 2 and c.info()["entries"] == 2
        copy.path.unlink()
        keep.path.unlink()
        assert c.prune() == 2
        assert c.info() | {"size_bytes": 0} == {
            "path": str(db),
            "entries": 0,
            "files": 0,
            "failures": 0,
            "size_bytes": 0,
            "models": {},
            "schema_version": SCHEMA_VERSION,
        }
        assert c.prune() == 0


def test_clear_forgets_everything_and_shrinks_the_file(db):
    with FeatureCache(db, "m1") as c:
        c.put_many([(fake(i), f"d{i}", vec(i, 1000)) for i in range(500)])
        big = c.info()["size_bytes"]
        c.clear()
        info = c.info()
        assert (info["entries"], info["files"], info["models"]) == (0, 0, {})
        assert info["size_bytes"] < big / 4
        c.put_many([(fake(1), "d1", vec(1, 8))])  # usable afterwards, even with another dimension
        assert c.get_by_digest("d1") is not None


def test_clip_records_go_with_their_vectors_prune_clear_and_drop_model(db, tmp_path):
    clip = image(tmp_path / "lib" / "clip.mp4", b"clip")
    with FeatureCache(db, "m1") as c:
        c.put_many([(clip, "c", vec(1))])
        c.put_clips([("c", "record")])
        assert c.get_clips(["c", "x"]) == ["record", None]
        clip.path.unlink()
        assert c.prune() == 1
        assert c.get_clips(["c"]) == [None]  # its file gone: the record with the vector
        c.put_many([(fake(1), "d", vec(2))])
        c.put_clips([("d", "record")])
        c.drop_model("m1")
        assert c.get_clips(["d"]) == [None]
        c.put_many([(fake(1), "d", vec(2))])
        c.put_clips([("d", "record")])
        c.clear()
        assert c.get_clips(["d"]) == [None]
    with sqlite3.connect(db) as conn:  # both tables of the merged schema are there
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"clips", "rankings"} <= names


def test_null_cache_stores_nothing():
    with NullCache() as c:
        c.put_many([(fake(1), "d1", vec(1))])
        assert c.get_by_stat("/x", 1, 2) is None
        assert c.get_many_by_stat([fake(1), fake(2)]) == [None, None]
        assert c.get_by_digest("d1") is None
        assert c.get_many_by_digest(["d1"]) == [None]
        assert c.info()["entries"] == 0
        assert c.prune() == 0
        c.clear()


def test_null_cache_keeps_up_with_the_store_protocol_and_feature_cache(db):
    """Every method a scan needs of a store (``Store``) is on both stores, and every method NullCache has
    is FeatureCache's too, with the same parameters: a table's null part cannot drift from the table."""
    import inspect

    from novelfind.cache.store import Store

    with FeatureCache(db, "m") as real:
        assert isinstance(real, Store) and isinstance(NullCache(), Store)

    def methods(cls: type) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))}

    needed, nulls = methods(Store), methods(NullCache)
    assert needed <= nulls
    for name in nulls:
        assert list(inspect.signature(getattr(NullCache, name)).parameters) == list(
            inspect.signature(getattr(FeatureCache, name)).parameters
        ), name


# -- crashes and concurrency (real processes) ----------------------------------------------------------

_WRITER_SCRIPT = """
import sys
import numpy as np
from pathlib import Path
from novelfind.cache import FeatureCache
from novelfind.media.walk import ImageFile

db, name, batches, size, dim = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
go = Path(sys.argv[6]) if len(sys.argv) > 6 else None
with FeatureCache(db, "m1") as cache:
    print("open", flush=True)
    while go is not None and not go.exists():
        pass
    b = 0
    while batches < 0 or b < batches:
        rows = []
        for i in range(size):
            key = f"{name}-{b}-{i}"
            rows.append((ImageFile(Path("/lib", key + ".jpg"), b, i), key,
                         np.full(dim, b * 10000 + i, np.float32)))
        cache.put_many(rows)
        print(b, flush=True)
        b += 1
"""


def stored_batches(db: Path, name: str, size: int) -> dict[int, int]:
    """Batch number -> rows present, checking each vector against what the writer put."""
    conn = sqlite3.connect(db)
    counts: dict[int, int] = {}
    rows = conn.execute(
        "SELECT f.path, f.size, f.mtime_ns, v.data FROM files f JOIN vectors v ON v.digest = f.digest"
    )
    for path, batch, i, data in rows:
        if not os.fsdecode(path).startswith(f"/lib/{name}-"):
            continue
        assert np.frombuffer(data, "<f4")[0] == batch * 10000 + i
        counts[batch] = counts.get(batch, 0) + 1
    conn.close()
    return counts


def test_sigkill_mid_write_loses_only_the_batch_in_flight(db):
    size, dim = 200, 1000  # ~0.8 MB per transaction, so the kill usually lands inside one
    for attempt in range(3):
        proc = python(
            _WRITER_SCRIPT,
            str(db),
            f"k{attempt}",
            "-1",
            str(size),
            str(dim),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout.readline().strip() == "open"
        committed = []
        while len(committed) < 5 + 3 * attempt:
            committed.append(int(proc.stdout.readline()))
        time.sleep(0.013 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        assert integrity(db) == "ok"
        counts = stored_batches(db, f"k{attempt}", size)
        assert set(committed) <= set(counts)  # every batch reported committed is there...
        assert set(counts.values()) == {size}  # ...and no batch is there in part
        with FeatureCache(db, "m1") as c:  # and the cache opens and works after the kill
            assert c.get_by_digest(f"k{attempt}-0-0")[0] == 0
            c.put_many([(fake(attempt), f"after-{attempt}", vec(attempt, dim))])
    assert integrity(db) == "ok"


def test_two_processes_write_to_one_new_cache_at_once(db, tmp_path):
    go = tmp_path / "go"
    size, batches = 50, 25
    procs = [
        python(
            _WRITER_SCRIPT,
            str(db),
            name,
            str(batches),
            str(size),
            "256",
            str(go),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "open", p.stderr.read()
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.split()[-1] == str(batches - 1)
    for name in ("a", "b"):
        assert stored_batches(db, name, size) == {b: size for b in range(batches)}
    assert integrity(db) == "ok"


_FIRST_OPEN_SCRIPT = """
import json, multiprocessing, sqlite3, sys, tempfile
from pathlib import Path
import numpy as np
from novelfind.cache import FeatureCache
from novelfind.media.walk import ImageFile

folder, writers, trials, burners = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


def writer(db, name, barrier, results):
    barrier.wait()  # every writer leaves here at the same instant
    try:
        with FeatureCache(db, "m1") as cache:
            rows = [(ImageFile(Path("/lib", f"{name}-{i}.jpg"), i, i), f"{name}-{i}",
                     np.full(64, i, np.float32)) for i in range(20)]
            cache.put_many(rows)
        results.put((name, "ok"))
    except BaseException as err:  # anything at all is a failure of the test
        results.put((name, f"{type(err).__name__}: {err}"))


def burn(stop):  # keep every core busy: the race shows when a writer is descheduled mid-open
    while not stop.is_set():
        pass


def trial(db):
    barrier, results = ctx.Barrier(writers), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(db, f"w{w}", barrier, results)) for w in range(writers)]
    for p in procs:
        p.start()
    outcome = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join()
    conn = sqlite3.connect(db)
    check = conn.execute("PRAGMA integrity_check").fetchone()[0]
    rows = conn.execute("SELECT count(*) FROM files f JOIN vectors v ON v.digest = f.digest").fetchone()[0]
    conn.close()
    expected = 20 * sum(what == "ok" for what in outcome.values())
    failures = [f"{db.name} {name}: {what}" for name, what in sorted(outcome.items()) if what != "ok"]
    bad = [] if check == "ok" and rows == expected else [f"{db.name}: {check}, {rows} rows of {expected}"]
    return failures, bad


if __name__ == "__main__":
    ctx = multiprocessing.get_context("fork")
    failures, bad_files = [], []
    for hogs_wanted in (0, burners):  # as the machine is, then with every core kept busy
        stop = ctx.Event()
        hogs = [ctx.Process(target=burn, args=(stop,)) for _ in range(hogs_wanted)]
        for h in hogs:
            h.start()
        try:
            for t in range(trials):
                f, b = trial(folder / f"busy{hogs_wanted}-trial{t}.sqlite")
                failures += f
                bad_files += b
        finally:
            stop.set()
            for h in hogs:
                h.join()
    print(json.dumps({"opens": 2 * writers * trials, "failures": failures, "bad_files": bad_files}))
"""


@pytest.mark.slow
def test_many_processes_create_one_new_cache_at_the_same_instant(tmp_path):
    """Eight processes open one cache file that does not exist yet, released together by a barrier.

    Forty trials as the machine is, forty more while two processes keep both cores busy (the race
    also shows when a process is descheduled half-way through opening): no open fails, none takes
    the new file for another program's database, every row written is there.
    """
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_OPEN_SCRIPT, str(tmp_path), "8", "40", "2"],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert result["opens"] == 640
    assert result["failures"] == []
    assert result["bad_files"] == []


_READER_SCRIPT = """
import sys, json
from pathlib import Path
from novelfind.cache import FeatureCache
from novelfind.media.walk import ImageFile
db, rounds = sys.argv[1], int(sys.argv[2])
files = [ImageFile(Path("/lib", f"a-0-{i}.jpg"), 0, i) for i in range(50)]
hits = []
with FeatureCache(db, "m1") as cache:
    for _ in range(rounds):
        hits.append(sum(v is not None for v in cache.get_many_by_stat(files)))
print(json.dumps(hits))
"""


def test_reading_while_another_process_writes(db):
    writer = python(_WRITER_SCRIPT, str(db), "a", "40", "50", "256", stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "open"
    assert writer.stdout.readline().strip() == "0"  # batch 0 (the one the reader looks for) is in
    reader = python(_READER_SCRIPT, str(db), "200", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = reader.communicate(timeout=120)
    writer.communicate(timeout=120)
    assert reader.returncode == 0, err
    assert writer.returncode == 0
    assert set(json.loads(out)) == {50}


def test_open_store_gives_a_scan_its_store(tmp_path):
    from novelfind.cache import NullCache, open_store

    with open_store(False, "m") as store:
        assert isinstance(store, NullCache)
    with open_store(False, "m", streamed=True) as store:  # a library ranked from the cache needs one
        assert isinstance(store, FeatureCache) and store.path.exists()
        temporary = store.path
    assert not temporary.exists()
    with FeatureCache.open(tmp_path / "c.sqlite", dtype="float16") as chosen:
        with open_store(chosen, "m") as store:  # a Cache object: its file and its dtype
            assert (store.path, store.dtype) == (chosen.path, "float16")
    with open_store(tmp_path / "p.sqlite", "m", dtype="float16") as store:
        assert (store.path, store.dtype) == (tmp_path / "p.sqlite", "float16")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    warnings = []
    with open_store(folder, "m", on_warning=warnings.append) as store:
        assert isinstance(store, NullCache)
    assert len(warnings) == 1 and warnings[0].endswith("; running without the cache")
    with pytest.raises(CacheError, match="a library this large is ranked from the cache$"):
        with open_store(folder, "m", streamed=True, on_warning=warnings.append):
            pass
