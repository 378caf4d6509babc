"""The cache file's format on its own: what marks a file as a novelfind cache, the tables made and added
in place, and the schema check that refuses anything novelfind did not create."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from novelfind.cache import APPLICATION_ID, EARLIER_RANKING, SCHEMA_VERSION, FeatureCache, not_ours, schema
from novelfind.cache.schema import (
    MAX_SCHEMA_OBJECTS,
    check_ours,
    check_schema,
    create_tables,
    foreign_object,
    foreign_schema,
    header,
    schema_cookie,
)
from novelfind.errors import CacheError


def sqlite_file(path: Path, *statements: str) -> Path:
    conn = sqlite3.connect(path)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()
    return path


@pytest.fixture
def made(tmp_path) -> Path:
    path = tmp_path / "features.sqlite"
    FeatureCache(path, "m1").close()
    return path


def test_a_new_file_gets_the_mark_the_version_and_every_table(tmp_path):
    conn = sqlite3.connect(tmp_path / "new.sqlite", isolation_level=None)
    try:
        assert header(conn) == (0, 0, 0)
        conn.execute("BEGIN IMMEDIATE")
        create_tables(conn, tmp_path / "new.sqlite")
        conn.execute("COMMIT")
        app_id, version, objects = header(conn)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert (app_id, version) == (APPLICATION_ID, SCHEMA_VERSION)
        assert tables == {"files", "vectors", "models", "rankings", "clips", "dates", "failures"}
        # the tables, the files_digest index, and the primary-key indexes of the three rowid tables
        # (vectors, models, rankings; the others are WITHOUT ROWID)
        assert objects == len(tables) + 1 + 3
        assert conn.execute("SELECT count(*) FROM rankings").fetchone()[0] == 0  # a new file ranked nothing
        assert foreign_object(conn) is None
    finally:
        conn.close()


def test_a_file_an_earlier_version_wrote_gets_the_new_tables_and_its_ranking(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in schema._SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("INSERT INTO vectors VALUES ('d', 'm', 1, x'0000803f')")
        before = schema_cookie(conn)
        conn.execute("BEGIN IMMEDIATE")
        create_tables(conn, path)
        conn.execute("COMMIT")
        assert schema_cookie(conn) != before  # tables were added: the schema changed
        assert conn.execute("SELECT root, method, version FROM rankings").fetchall() == [
            (b"", *EARLIER_RANKING)
        ]
        assert conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == 1
    finally:
        conn.close()


def test_check_ours_refuses_another_programs_database_and_a_newer_schema(tmp_path):
    path = tmp_path / "x.sqlite"
    check_ours(path, 0, 0, 0)  # empty: about to be made
    check_ours(path, APPLICATION_ID, SCHEMA_VERSION, 9)
    with pytest.raises(CacheError) as other:
        check_ours(path, 0, 0, 3)
    assert str(other.value) == f"{path} is an SQLite database of another program, not a novelfind cache"
    with pytest.raises(CacheError, match="of another program"):
        check_ours(path, 1234, 0, 0)
    with pytest.raises(CacheError) as newer:
        check_ours(path, APPLICATION_ID, SCHEMA_VERSION + 1, 3)
    assert str(newer.value) == (
        f"the feature cache {path} was written by a newer novelfind (schema {SCHEMA_VERSION + 1}, "
        f"this one reads {SCHEMA_VERSION}); upgrade novelfind or use another --cache"
    )


def test_not_ours_says_why_a_file_is_no_cache(made, tmp_path, monkeypatch):
    monkeypatch.setattr(schema, "CREATION_WAIT_S", 0.0)
    text = tmp_path / "thesis.txt"
    text.write_text("chapter one " * 20)
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    theirs = sqlite_file(tmp_path / "theirs.sqlite", "CREATE TABLE t (x)")
    blank = sqlite_file(tmp_path / "blank.sqlite", "PRAGMA user_version = 3")  # a database, nothing in it
    marked = sqlite_file(
        tmp_path / "marked.sqlite", f"PRAGMA application_id = {APPLICATION_ID}", "CREATE TABLE models (x)"
    )
    assert not_ours(made) is None
    assert not_ours(text) == "it is not an SQLite database"
    assert not_ours(empty) == "it is empty"
    assert not_ours(theirs) == "it is an SQLite database without novelfind's mark"
    assert not_ours(blank) == "it is an SQLite database with nothing in it"
    assert not_ours(marked) == "it lacks novelfind's table 'files'"
    assert not_ours(tmp_path / "missing").startswith("cannot read it: ")


def test_the_schema_check_names_what_novelfind_did_not_create(made):
    sqlite_file(made, "CREATE VIEW peek AS SELECT * FROM files")
    assert foreign_schema(made) == "a view 'peek'"
    conn = sqlite3.connect(made)
    try:
        with pytest.raises(CacheError) as refused:
            check_schema(conn, made)
    finally:
        conn.close()
    assert str(refused.value) == (
        f"the feature cache {made} holds a view 'peek' that novelfind did not create; not used: "
        f"move it aside, or delete it with `novelfind cache clear --cache {made}`"
    )


def test_comments_and_spacing_are_no_change_but_a_column_is(made):
    assert schema._normal("CREATE  TABLE t (\n  a TEXT -- note\n, b /* x */ INT)") == (
        "CREATE TABLE t ( a TEXT , b INT )"
    )
    assert schema._normal("SELECT '--not a comment'") == "SELECT '--not a comment'"
    sqlite_file(
        made,
        "DROP TABLE rankings",
        "CREATE TABLE rankings (root BLOB PRIMARY KEY, /* another comment */ method TEXT NOT NULL, "
        "version TEXT NOT NULL)",
    )
    assert foreign_schema(made) is None
    sqlite_file(made, "DROP TABLE rankings", "CREATE TABLE rankings (root BLOB PRIMARY KEY, method TEXT)")
    assert foreign_schema(made) == "a changed table 'rankings'"


def test_a_schema_too_long_to_read_is_refused_and_a_missing_file_has_none(made, tmp_path):
    sqlite_file(made, *(f"CREATE TABLE extra{i} (x)" for i in range(MAX_SCHEMA_OBJECTS)))
    assert foreign_schema(made) == f"more than {MAX_SCHEMA_OBJECTS} tables, indexes, views or triggers"
    assert foreign_schema(tmp_path / "missing.sqlite") is None
    assert not (tmp_path / "missing.sqlite").exists()
