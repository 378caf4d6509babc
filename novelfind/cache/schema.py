"""The feature cache's file format: its tables, the application id and schema version in the SQLite
header that mark a file as a novelfind cache, and the tables added in place to files an older
novelfind wrote.

Two tables do the work. ``files`` maps a path to the (size, mtime_ns) it had when read and the
digest of its bytes; ``vectors`` maps (digest, model_key) to the vector. The file's identity
(application id, schema version, tables) is always read in one statement (:func:`header`), so a
reader sees the file before or after another run's creating transaction, never half of it; and the
tables are created in one ``BEGIN IMMEDIATE`` transaction that checks the identity again under the
write lock (:func:`create_tables`).

The file is data, never code: :func:`check_schema` refuses a file whose schema holds anything novelfind
did not create (a trigger, a view, another table or index, a table whose columns differ), comparing
``sqlite_master`` with the schema made here, statement by statement, comments and spacing aside (the
comments of older versions' statements differ; their tables and columns do not).
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import time
from pathlib import Path

from novelfind.base.atomic import open_regular
from novelfind.base.safe_text import display
from novelfind.cache import guard
from novelfind.cache.recovery import BUSY_TIMEOUT_S, damage
from novelfind.errors import CacheError

SCHEMA_VERSION = 1
APPLICATION_ID = 0x4E564644  # "NVFD" in the SQLite header: this file is a novelfind cache

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    path     BLOB PRIMARY KEY,      -- os.fsencode(absolute path): any file name round-trips
    size     INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    digest   TEXT NOT NULL          -- hash of the file's bytes (decode.read_for_model)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS files_digest ON files(digest);
CREATE TABLE IF NOT EXISTS vectors (
    digest    TEXT NOT NULL,
    model_key TEXT NOT NULL,        -- weights hash + what the vector holds + preprocessing version
    dim       INTEGER NOT NULL,
    data      BLOB NOT NULL,        -- little-endian float16 (dim * 2 bytes) or float32 (dim * 4 bytes)
    PRIMARY KEY (digest, model_key)
);
CREATE TABLE IF NOT EXISTS models (
    model_key  TEXT PRIMARY KEY,
    dim        INTEGER NOT NULL,
    first_seen TEXT NOT NULL        -- ISO 8601, UTC
);
"""
# The last ranking of each library (its folders), so that a scan ranking it another way says so once. A
# table of its own, added to older files in place: the schema version stays, and an older novelfind
# reading the file never looks at it.
_RANKINGS = """
CREATE TABLE IF NOT EXISTS rankings (
    root    BLOB PRIMARY KEY,       -- the scan's folders (ranking_root); b'' for "before this table"
    method  TEXT NOT NULL,
    version TEXT NOT NULL           -- the novelfind that ranked
)"""
# What a cache written before the rankings table was last ranked with: 0.1.0's default, ADS.
EARLIER_RANKING = ("ads", "0.1.0")
# What a clip's vector was made from (video.ClipInfo as JSON: the rule, the frames' times, the moment);
# created in a cache of any age, so a clip's record is there wherever its vector is.
_CLIPS = """
CREATE TABLE IF NOT EXISTS clips (
    digest    TEXT NOT NULL,
    model_key TEXT NOT NULL,
    info      TEXT NOT NULL,
    PRIMARY KEY (digest, model_key)
) WITHOUT ROWID
"""

# When each photo was taken, as its bytes say (``novelfind.extract.dating.embedded_date``): keyed by the
# content digest like the vectors, for every model at once. Created in a cache of any age: a cache from
# before it gets its dates on the next scan, from the photos' headers (no decode).
_DATES = """
CREATE TABLE IF NOT EXISTS dates (
    digest  TEXT PRIMARY KEY,
    taken   REAL,                   -- seconds since the epoch (a local date: the wall clock read as UTC)
    utc_offset INTEGER,             -- seconds east of UTC; NULL for a local date or none
    source  TEXT NOT NULL           -- exif, exif-local, raw, clip, invalid, none
) WITHOUT ROWID
"""

# The files a scan could not read (``novelfind.cache.failures``), so that each is reported once. Created
# in a cache of any age.
_FAILURES = """
CREATE TABLE IF NOT EXISTS failures (
    path      BLOB PRIMARY KEY,     -- os.fsencode(absolute path), as in the files table
    size      INTEGER NOT NULL,     -- -1 when the file could not even be looked at
    mtime_ns  INTEGER NOT NULL,     -- -1 likewise
    reason    TEXT NOT NULL,        -- the one-line reason the scan gave
    first_seen TEXT NOT NULL        -- ISO 8601, UTC: when a scan first failed to read it
) WITHOUT ROWID
"""

# Tables created in a cache of any age when it is opened: the schema check expects each of them too,
# so a table added here is never taken for a foreign one.
ADDED_TABLES = (_CLIPS, _DATES, _FAILURES)

_SQLITE_MAGIC = b"SQLite format 3\x00"
_TABLES = ("files", "models", "vectors")


# A run that opens a new cache creates the file first (empty), then writes novelfind's mark and tables in
# its first transaction, a few milliseconds later. A file seen in between is waited for this long before
# it is judged: ``cache prune`` beside a scan that has just started must not call the cache foreign.
CREATION_WAIT_S = 5.0
_STILL_EMPTY = ("it is empty", "it is an SQLite database with nothing in it")


def not_ours(path: str | os.PathLike[str]) -> str | None:
    """Why the file at ``path`` is not recognisably a novelfind cache, or None when it is.

    What ``cache clear`` and ``cache prune`` check before they delete or move anything: a file that
    ``--cache`` names by mistake (``thesis.txt``, another program's database) must be left alone. A
    novelfind cache starts with SQLite's header and carries novelfind's application id in it (bytes
    68-71); when the database can be read, it also has novelfind's tables. A cache whose pages are
    damaged but whose header is intact is still recognised (clearing it is what it is for). A file that
    is still empty may be a cache another run is creating: it is looked at again for up to
    ``CREATION_WAIT_S``, and refused only if it stays empty.
    """
    path = Path(os.fspath(path)).expanduser().absolute()
    deadline = time.monotonic() + CREATION_WAIT_S
    while True:
        why = _not_ours_now(path)
        if why not in _STILL_EMPTY or time.monotonic() >= deadline:
            return why
        time.sleep(0.05)


def _not_ours_now(path: Path) -> str | None:
    refused = guard.refusal(path, "the feature cache")
    if refused is not None:  # where the door would not open it, nothing in it is read
        return f"cannot read it: {refused}"
    try:
        fd, _ = open_regular(path, follow_link=True)  # a FIFO never blocks this read
        try:
            head = os.read(fd, 100)
        finally:
            os.close(fd)
    except OSError as err:
        return f"cannot read it: {err.strerror or err}"
    if not head:
        return _STILL_EMPTY[0]
    if not head.startswith(_SQLITE_MAGIC) or len(head) < 100:
        return "it is not an SQLite database"
    marked = int.from_bytes(head[68:72], "big") == APPLICATION_ID
    if marked and damage(path) is not None:
        return None
    try:
        conn = guard.open_store(path, what="the feature cache", read_only=True, timeout=BUSY_TIMEOUT_S)
        try:
            # through SQLite, not the file's bytes: a new cache's mark may still be in its write-ahead log
            app_id = conn.execute("SELECT application_id FROM pragma_application_id()").fetchone()[0]
            names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except (sqlite3.Error, CacheError) as err:
        return f"cannot read it: {err}" if marked else "it is an SQLite database without novelfind's mark"
    if not (marked or app_id == APPLICATION_ID):
        return _STILL_EMPTY[1] if not names else "it is an SQLite database without novelfind's mark"
    missing = [table for table in _TABLES if table not in names]
    return f"it lacks novelfind's table '{missing[0]}'" if missing else None


def check_ours(path: Path, app_id: int, version: int, tables: int) -> None:
    """CacheError unless the file is a novelfind cache this version reads, or still empty.

    The three values must come from one snapshot (:func:`header`): read one at a time, a file that
    another run creates in between looks like a database with tables and no novelfind mark.
    """
    if app_id not in (0, APPLICATION_ID) or (app_id == 0 and tables):
        raise CacheError(f"{path} is an SQLite database of another program, not a novelfind cache")
    if version > SCHEMA_VERSION:
        raise CacheError(
            f"the feature cache {path} was written by a newer novelfind (schema {version}, "
            f"this one reads {SCHEMA_VERSION}); upgrade novelfind or use another --cache"
        )


def create_tables(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables if the file is new, add the ones an older novelfind did not make, and write
    the schema version. Call inside one write transaction: it is also the write probe."""
    app_id, version, tables = header(conn)
    check_ours(path, app_id, version, tables)  # under the write lock: no other run is mid-creation
    if app_id != APPLICATION_ID or version < SCHEMA_VERSION:
        # a new file (no older schema exists yet; migrations go here)
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(_RANKINGS)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    elif not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'rankings'").fetchone():
        conn.execute(_RANKINGS)  # a file an earlier version wrote: its rankings were that version's
        if conn.execute("SELECT 1 FROM vectors LIMIT 1").fetchone():
            conn.execute("INSERT INTO rankings VALUES (?, ?, ?)", (b"", *EARLIER_RANKING))
    for statement in ADDED_TABLES:
        conn.execute(statement)
    # Written even when unchanged: SQLite opens a read-only file without complaint, and this
    # write is what finds out.
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def header(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """(application id, schema version, number of schema objects), read in one statement."""
    row = conn.execute(
        "SELECT (SELECT application_id FROM pragma_application_id()), "
        "(SELECT user_version FROM pragma_user_version()), "
        "(SELECT count(*) FROM sqlite_master)"
    ).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


# What SQLite itself adds to a file novelfind made: ANALYZE's statistics (``PRAGMA optimize`` on close).
_SQLITE_OWN = {
    "sqlite_stat1": ("table", "sqlite_stat1", "CREATE TABLE sqlite_stat1(tbl,idx,stat)"),
    "sqlite_stat4": ("table", "sqlite_stat4", "CREATE TABLE sqlite_stat4(tbl,idx,neq,nlt,ndlt,sample)"),
}
# SQL's lexemes: a quoted name or string, a comment, spacing, a word, any other character
_LEXEME = re.compile(
    r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\]|(--[^\n]*|/\*.*?(?:\*/|\Z)|\s+)|\w+|.""",
    re.S,
)
MAX_SCHEMA_OBJECTS = 64  # more rows than that in sqlite_master are not read: the file is refused


def _normal(sql: str | None) -> str | None:
    """``sql`` as its lexemes, comments and spacing left out: what the statement does, not how it reads."""
    if sql is None:
        return None
    return " ".join(m.group() for m in _LEXEME.finditer(sql) if m.group(1) is None)


Schema = dict[str, tuple[str, str, "str | None"]]  # name -> (type, table, statement), as SQLite records them


@functools.cache
def expected_schema(*statements: str) -> Schema:
    """name -> (type, table, statement) of every schema object ``statements`` create, as SQLite records
    them (and the statistics tables SQLite adds itself): what a store novelfind made holds, at most."""
    conn = guard.connect(":memory:")
    try:
        for statement in statements:
            if statement.strip():
                conn.execute(statement)
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    finally:
        conn.close()
    objects = {name: (kind, table, _normal(sql)) for kind, name, table, sql in rows}
    objects.update((name, (kind, table, _normal(sql))) for name, (kind, table, sql) in _SQLITE_OWN.items())
    return objects


def _expected() -> Schema:
    """The feature cache's schema objects, every table of every version."""
    return expected_schema(*_SCHEMA.split(";"), _RANKINGS, *ADDED_TABLES)


def foreign_object(conn: sqlite3.Connection, expected: Schema | None = None) -> str | None:
    """What in the file's schema novelfind did not create ("a trigger 'x'", "a changed table 'files'"),
    or None. ``expected``: the schema of the store (:func:`expected_schema`; None: the feature cache's).
    Tables it adds to older files may be missing; nothing else may be there or differ."""
    rows = conn.execute(
        f"SELECT type, name, tbl_name, sql FROM sqlite_master LIMIT {MAX_SCHEMA_OBJECTS + 1}"
    ).fetchall()
    if len(rows) > MAX_SCHEMA_OBJECTS:
        return f"more than {MAX_SCHEMA_OBJECTS} tables, indexes, views or triggers"
    expected = _expected() if expected is None else expected
    for kind, name, table, sql in rows:
        want = expected.get(name) if isinstance(name, str) else None
        if want is None:
            return f"a {kind} '{name}'"
        if (kind, table, _normal(sql) if isinstance(sql, str) else sql) != want:
            return f"a changed {kind} '{name}'"
    return None


def check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """CacheError, naming the cache and what to do, when its schema holds anything novelfind did not
    create (:func:`foreign_object`); nothing in the file is used then."""
    what = foreign_object(conn)
    if what is not None:
        raise CacheError(
            f"the feature cache {display(path)} holds {display(what)} that novelfind did not create; "
            f"not used: move it aside, or delete it with `novelfind cache clear --cache {display(path)}`"
        )


def foreign_schema(path: str | os.PathLike[str]) -> str | None:
    """What in the schema of the cache file at ``path`` novelfind did not create, or None (also when it
    cannot be read: opening it says why). Read-only, like :func:`~novelfind.cache.recovery.damage`."""
    path = Path(os.fspath(path)).expanduser().absolute()
    if not path.is_file():
        return None
    try:
        conn = guard.open_store(path, what="the feature cache", read_only=True, timeout=BUSY_TIMEOUT_S)
        try:
            return foreign_object(conn)
        finally:
            conn.close()
    except (sqlite3.Error, CacheError, OSError):
        return None


def schema_cookie(conn: sqlite3.Connection) -> int:
    """SQLite's schema version: changes whenever anything alters the schema (another process included)."""
    return int(conn.execute("PRAGMA schema_version").fetchone()[0])
