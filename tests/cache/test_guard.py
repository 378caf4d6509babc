"""A hostile cache file and hostile JSON, TOML and XML (docs/security.md, "The cache is data" and "Files
read back"): each attack either is refused with one line or is read as damage, and none hangs a run,
floods the disk or the memory, or ends in an internal error."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from common import make_photo

from novelfind.cache import APPLICATION_ID, CacheWriteError, FeatureCache, guard
from novelfind.cli.group import cli
from novelfind.errors import CacheError
from novelfind.media.walk import ImageFile

ENDLESS = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


def nf(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def small_library(tmp_path) -> Path:
    root = tmp_path / "lib"
    for i in range(6):
        make_photo(root / f"IMG_{i:04d}.jpg", (40 + 30 * i, 90, 200 - 25 * i), seed=i, size=(64, 48))
    return root


@pytest.fixture
def scanned(fake_extractor, small_library, tmp_path) -> tuple[Path, Path]:
    """(library, its cache after one scan)."""
    cache = tmp_path / "c.sqlite"
    result = nf("scan", small_library, "--k", 2, "--cache", cache)
    assert result.exit_code == 0, result.stderr
    return small_library, cache


def plant(cache: Path, *statements: str, params: tuple = ()) -> None:
    """Edit the cache as someone who can write it would, with SQLite itself."""
    conn = sqlite3.connect(cache)
    try:
        for sql in statements:
            conn.execute(sql, params if "?" in sql else ())
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def vec(seed: int, dim: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).random(dim).astype(np.float32)


# --------------------------------------------------------------------------- a schema novelfind did not make

PLANTED = {
    "endless-trigger": f"CREATE TRIGGER hang AFTER INSERT ON files BEGIN {ENDLESS}; END",
    "zeroblob-trigger": (
        "CREATE TRIGGER grow AFTER INSERT ON vectors BEGIN "
        "UPDATE vectors SET data = zeroblob(100000000) WHERE rowid = new.rowid; END"
    ),
    "view": f"CREATE VIEW everything AS {ENDLESS}",
    "table": "CREATE TABLE notes (text TEXT)",
    "index": "CREATE INDEX by_size ON files(size)",
}


@pytest.mark.parametrize("name", list(PLANTED))
def test_a_planted_schema_object_is_refused_at_open_and_never_runs(scanned, name):
    library, cache = scanned
    plant(cache, PLANTED[name])
    before = cache.read_bytes()
    with pytest.raises(CacheError) as refused:
        FeatureCache(cache, "m")
    message = str(refused.value)
    assert "novelfind did not create" in message and str(cache) in message
    assert f"novelfind cache clear --cache {cache}" in message and "\n" not in message
    assert cache.read_bytes() == before  # nothing written, no trigger fired


def test_a_scan_with_a_trapped_cache_runs_without_it_and_cache_clear_replaces_it(scanned, fake_extractor):
    library, cache = scanned
    plant(cache, PLANTED["endless-trigger"], PLANTED["zeroblob-trigger"])
    size = cache.stat().st_size
    result = nf("scan", library, "--k", 2, "--cache", cache)
    assert result.exit_code == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and "trigger" in warned[0] and "running without the cache" in warned[0]
    assert cache.stat().st_size == size  # the 100 MB blobs were never written
    info = nf("cache", "info", "--cache", cache)
    assert info.exit_code == 1 and "novelfind did not create" in info.stderr
    cleared = nf("cache", "clear", "--cache", cache)
    assert cleared.exit_code == 0 and cleared.stdout == "cleared\n"
    assert "trigger" in cleared.stderr and "deleted it" in cleared.stderr
    with sqlite3.connect(cache) as conn:
        assert not conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
    again = nf("scan", library, "--k", 2, "--cache", cache)
    assert again.exit_code == 0 and "warning" not in again.stderr


def test_changed_columns_are_refused(scanned):
    _, cache = scanned
    plant(
        cache,
        "DROP TABLE models",
        "CREATE TABLE models (model_key TEXT PRIMARY KEY, dim INTEGER NOT NULL, first_seen TEXT NOT NULL, "
        "note TEXT DEFAULT (randomblob(1000000)))",
    )
    with pytest.raises(CacheError, match="a changed table 'models'"):
        FeatureCache(cache, "m")


def test_a_trigger_added_while_the_cache_is_open_is_refused_before_the_next_write(tmp_path):
    path = tmp_path / "c.sqlite"
    files = [ImageFile(Path(f"/lib/{i}.jpg"), 10, 20) for i in range(2)]
    with FeatureCache(path, "m") as c:
        c.put_many([(files[0], "d0", vec(0))])
        plant(
            path, "CREATE TRIGGER fire AFTER INSERT ON files BEGIN SELECT raise(FAIL, 'the trigger ran'); END"
        )
        with pytest.raises(CacheWriteError) as refused:
            c.put_many([(files[1], "d1", vec(1))])
        assert "a trigger 'fire'" in str(refused.value) and "the trigger ran" not in str(refused.value)
        c.put_many([(files[1], "d1", vec(1))])  # writes are off from then on: nothing happens
        assert c.get_many_by_stat(files)[1] is None


def test_caches_of_older_versions_are_novelfind_made(tmp_path):
    """The first release's statements (other comments, no rankings or clips tables) are ours."""
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        f"""
        CREATE TABLE IF NOT EXISTS files (
            path     BLOB PRIMARY KEY,      -- os.fsencode(absolute path): any file name round-trips
            size     INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            digest   TEXT NOT NULL          -- hash of the file's bytes (decode.read_for_model)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS files_digest ON files(digest);
        CREATE TABLE IF NOT EXISTS vectors (
            digest    TEXT NOT NULL,
            model_key TEXT NOT NULL,        -- weights hash + feature kind + preprocessing version
            dim       INTEGER NOT NULL,
            data      BLOB NOT NULL,        -- little-endian float32, dim * 4 bytes
            PRIMARY KEY (digest, model_key)
        );
        CREATE TABLE IF NOT EXISTS models (
            model_key  TEXT PRIMARY KEY,
            dim        INTEGER NOT NULL,
            first_seen TEXT NOT NULL        -- ISO 8601, UTC
        );
        PRAGMA application_id = {APPLICATION_ID};
        PRAGMA user_version = 1;
        ANALYZE;
        """
    )
    conn.close()
    with FeatureCache(path, "m") as c:
        c.put_many([(ImageFile(Path("/lib/a.jpg"), 1, 2), "d", vec(0))])
        assert c.get_by_digest("d") is not None
    with FeatureCache(path, "m") as c:  # and what this version added to it is ours too
        assert c.get_by_digest("d") is not None


def test_sqlite_is_opened_in_one_place():
    """Every SQLite file goes through the door: ``sqlite3.connect`` is called in ``cache/guard.py`` alone."""
    package = Path(guard.__file__).resolve().parents[1]
    calling = sorted(
        str(p.relative_to(package)) for p in package.rglob("*.py") if "sqlite3.connect(" in p.read_text()
    )
    assert calling == ["cache/guard.py"]


# --------------------------------------------------------------------------- queries under a clock


def test_a_statement_past_the_time_limit_is_stopped(tmp_path):
    with FeatureCache(tmp_path / "c.sqlite", "m") as c:
        c._conn.query_timeout = 0.2
        with pytest.raises(sqlite3.OperationalError, match="ran longer than 0.2 s"):
            c._conn.execute(ENDLESS).fetchone()
        assert c._conn.execute("SELECT 1").fetchone() == (1,)  # the connection goes on


def test_a_signal_stops_a_statement_and_is_not_swallowed(tmp_path):
    """Python runs a SIGINT handler inside SQLite's progress handler, where the sqlite3 module would
    swallow its KeyboardInterrupt; the guarded cursor raises it again."""
    conn = guard.connect(str(tmp_path / "c.sqlite"))
    conn.query_timeout = 60.0  # a failing test ends
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            conn.execute(ENDLESS).fetchone()
    finally:
        timer.cancel()
        conn.close()
    assert conn_trusted_schema(tmp_path / "c.sqlite") == 0


def conn_trusted_schema(path: Path) -> int:
    conn = guard.connect(str(path))
    try:
        return conn.execute("PRAGMA trusted_schema").fetchone()[0]
    finally:
        conn.close()


# --------------------------------------------------------------------------- values


def test_huge_blobs_are_never_loaded(tmp_path):
    path = tmp_path / "c.sqlite"
    files = [ImageFile(Path(f"/lib/{i}.jpg"), 10, 20) for i in range(3)]
    with FeatureCache(path, "m") as c:
        c.put_many([(f, f"d{i}", vec(i)) for i, f in enumerate(files)])
    blob = 30_000_000  # bytes each, made by SQLite itself
    plant(
        path,
        f"UPDATE vectors SET data = zeroblob({blob}) WHERE digest = 'd0'",
        f"UPDATE vectors SET data = zeroblob({blob}), dim = {blob // 4} WHERE digest = 'd1'",
    )
    with FeatureCache(path, "m") as c:
        tracemalloc.start()
        try:
            by_stat = c.get_many_by_stat(files)
            by_digest = c.get_many_by_digest(["d0", "d1", "d2"])
            present = c.has_many_by_stat(files, 8)
            known = c.known_digests()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert [v is None for v in by_stat] == [True, True, False]
        assert [v is None for v in by_digest] == [True, True, False]
        assert list(present) == [False, False, True]
        assert "d2" in known
        assert peak < blob // 10  # no blob was read into memory
        c.put_many([(files[0], "d0", vec(0))])  # extracted again: the blob is replaced
        assert np.array_equal(c.get_many_by_stat(files[:1])[0], vec(0))


def test_a_negative_pooled_value_is_damage_with_one_warning(tmp_path):
    from novelfind.model.weights import STORED_NORM_MAX, STORED_VALUE_MIN

    warned: list[str] = []
    files = [ImageFile(Path(f"/lib/{i}.jpg"), 10, 20) for i in range(3)]
    bounds = {"max_norm": STORED_NORM_MAX, "min_value": STORED_VALUE_MIN}
    with FeatureCache(tmp_path / "c.sqlite", "m", **bounds, on_warning=warned.append) as c:
        c.put_many(
            [
                (files[0], "d0", np.full(1280, 0.0, np.float32)),  # the smallest the model makes
                (files[1], "d1", np.full(1280, -5.0, np.float32)),  # a norm ReLU6 gives, but negative
                (files[2], "d2", np.full(1280, 0.5, np.float32)),
            ]
        )
        assert [v is not None for v in c.get_many_by_stat(files)] == [True, False, True]
        assert len(warned) == 1 and "/lib/1.jpg" in warned[0] and "damaged" in warned[0]
        assert list(c.has_many_by_stat(files, 1280)) == [True, False, True]  # deleted: found no more
        assert len(warned) == 1


def test_the_scan_gives_the_cache_the_models_bounds(monkeypatch, tmp_path):
    from novelfind import run
    from novelfind.model import weights

    seen = {}

    def fake_open_store(*args, **kwargs):
        seen.update(kwargs)
        raise RuntimeError("stop here")

    class Pooled:
        model_key, dim = "m", 1280

        def encode(self, batch):  # what makes an extractor's stored vector MobileNet-V2's pooled one
            raise AssertionError

    root = tmp_path / "lib"
    make_photo(root / "a.jpg", (1, 2, 3), seed=1)
    monkeypatch.setattr(run, "open_store", fake_open_store)
    monkeypatch.setattr("novelfind.model.features.build_extractor", lambda **kwargs: Pooled())
    with pytest.raises(RuntimeError, match="stop here"):
        run.scan([root], cache=tmp_path / "c.sqlite")
    assert seen["min_value"] == weights.STORED_VALUE_MIN and seen["max_norm"] == weights.STORED_NORM_MAX


def test_prune_drops_rows_whose_path_is_no_path(scanned):
    library, cache = scanned
    plant(
        cache,
        "INSERT INTO files VALUES (1.5, 1, 2, 'x')",
        "INSERT INTO files VALUES ('text', 1, 2, 'y')",
        "INSERT INTO files VALUES (?, 1, 2, 'z')",
        params=(b"/lib/a\0b.jpg",),
    )
    plant(cache, "INSERT INTO files VALUES (zeroblob(5000), 1, 2, 'w')")
    result = nf("cache", "prune", "--cache", cache)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "pruned\t4\n"
    with sqlite3.connect(cache) as conn:
        assert conn.execute("SELECT count(*) FROM files").fetchone()[0] == 6  # the library's photos stay


def test_cache_info_escapes_a_model_key(scanned):
    _, cache = scanned
    forged = "\x1b]0;owned\x07\x1b[2J\nstale\tforged\t1\teverything"
    plant(cache, "INSERT INTO models VALUES (?, 8, '2000-01-01')", params=(forged,))
    result = nf("cache", "info", "--cache", cache)
    assert result.exit_code == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert not [line for line in result.stdout.splitlines() if line.startswith("stale")]
    forged_line = [line for line in result.stdout.splitlines() if "owned" in line]
    assert forged_line == ["model\t\\x1b]0;owned\\x07\\x1b[2J\\nstale\\tforged\\t1\\teverything\t0"]


# --------------------------------------------------------------------------- JSON, TOML and XML read back

DEEP = 100_000


def test_a_deeply_nested_picks_manifest_counts_as_empty_with_one_warning(
    fake_extractor, small_library, tmp_path
):
    picks = tmp_path / "picks"
    picks.mkdir()
    (picks / ".novelfind-picks.json").write_text("[" * DEEP)
    report = tmp_path / "report.html"
    result = nf(
        "scan",
        small_library,
        "--k",
        2,
        "--copy-to",
        picks,
        "--report",
        report,
        "--cache",
        tmp_path / "c.sqlite",
    )
    assert result.exit_code == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and ".novelfind-picks.json" in warned[0] and "counted as empty" in warned[0]
    assert report.is_file() and len(list(picks.glob("0*_*"))) == 2
    import json

    assert json.loads((picks / ".novelfind-picks.json").read_text())["schema"] == "novelfind/picks-manifest"


def test_a_deeply_nested_ignore_list_is_damaged(fake_extractor, small_library, tmp_path):
    listed = tmp_path / "ignored.json"
    listed.write_text('{"version": 1, "ignored": ' + "[" * DEEP)
    result = nf("ignore", "--list", "--ignore-file", listed)
    assert result.exit_code == 1, result.output
    assert "damaged" in result.stderr and "nested" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("text", ["a = " + "[" * DEEP, "a = " + "{b = " * DEEP])
def test_a_deeply_nested_config_is_a_usage_error(fake_extractor, small_library, tmp_path, text):
    config = tmp_path / "deep.toml"
    config.write_text(text)
    result = nf("scan", small_library, "--config", config)
    assert result.exit_code == 2
    assert str(config) in result.stderr and "nested" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_deeply_nested_sidecar_is_reported_and_left_alone(fake_extractor, small_library, tmp_path):
    pytest.importorskip("exiv2")
    sidecar = small_library / "IMG_0000.jpg.xmp"
    content = b"<x:xmpmeta xmlns:x='adobe:ns:meta/'>" + b"<a>" * DEEP + b"</a>" * DEEP + b"</x:xmpmeta>"
    sidecar.write_bytes(content)
    result = nf("scan", small_library, "--k", 6, "--xmp", "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 3, result.stderr  # done, one sidecar not written
    refused = [line for line in result.stderr.splitlines() if "IMG_0000.jpg.xmp" in line]
    assert len(refused) == 1 and "nested" in refused[0]
    assert sidecar.read_bytes() == content
    assert (small_library / "IMG_0001.jpg.xmp").is_file()  # the others are tagged


def test_safe_load_bounds(tmp_path):
    from novelfind.base import safe_load

    # brackets inside strings are no nesting
    assert safe_load.load_json('{"a": "[[[[\\"[[", "b": [[1]]}', max_bytes=100, max_depth=3) == {
        "a": '[[[["[[',
        "b": [[1]],
    }
    for bad in ("[" * 4, '{"a": [[[1]]]}'):
        with pytest.raises(safe_load.UnreadableError, match="nested 4 levels"):
            safe_load.load_json(bad, max_bytes=100, max_depth=3)
    with pytest.raises(safe_load.UnreadableError, match="larger than 10 bytes"):
        safe_load.load_json("[" + "1," * 10 + "1]", max_bytes=10)
    with pytest.raises(safe_load.UnreadableError):
        safe_load.load_json("{", max_bytes=10)
    assert safe_load.load_toml("a = [[1]]", max_bytes=100, max_depth=2) == {"a": [[1]]}
    with pytest.raises(safe_load.UnreadableError, match="nested"):
        safe_load.load_toml("a = [[[1]]]", max_bytes=100, max_depth=2)
    safe_load.check_xml(b"<a><b/></a>", max_bytes=100, max_depth=2)
    with pytest.raises(safe_load.UnreadableError, match="nested more than 2"):
        safe_load.check_xml(b"<a><b><c/></b></a>", max_bytes=100, max_depth=2)
