"""The open cache file that every table's methods share: :class:`CacheFile` (opening, recovery from
damage, the lock, write transactions, chunked ``IN (...)`` reads) and the small SQL helpers the tables
use.

``FeatureCache`` (:mod:`novelfind.cache.store`) is one ``CacheFile`` with a mixin per table: the mixins
(:mod:`~novelfind.cache.vectors`, :mod:`~novelfind.cache.models`, :mod:`~novelfind.cache.dates`,
:mod:`~novelfind.cache.clips`, :mod:`~novelfind.cache.rankings`, :mod:`~novelfind.cache.failures`,
:mod:`~novelfind.cache.upkeep`) derive from it, so each reads and writes through the one connection,
under the one lock, and a read or write failing says so in the same words whichever table it touched
(:meth:`CacheFile._reading`, :meth:`CacheFile._writing`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from novelfind.cache import guard
from novelfind.cache.recovery import (
    CacheWarning,
    CacheWriteError,
    check_health,
    file_identity,
    is_damage,
    move_aside,
    open_error,
    retry_busy,
)
from novelfind.cache.schema import check_ours, check_schema, create_tables, header, schema_cookie
from novelfind.errors import CacheError

MMAP_BYTES = 1 << 30  # memory-mapped reads: lookups in a big cache ~2x faster than with read()
# Pages of a cache file created for float16 vectors. A row lives on one page unless it overflows, so
# SQLite's 4 KiB pages hold one 2.6 KB float16 vector each (4.4 KB a photo for 10,000 photos); 16 KiB pages
# hold six (3.0 KB a photo). float32 vectors (5.2 KB) take 5.8 KB a photo with either, so a float32 cache
# keeps the default. A file keeps the pages it was created with.
FLOAT16_PAGE_BYTES = 16384
_CHUNK = 500  # paths per "IN (...)" query; well below SQLite's 999-variable floor
# The rows of ``files`` whose path is one novelfind writes: bytes (os.fsencode), no longer than a path can be.
PATH_ROW = "typeof(path) = 'blob' AND length(path) <= 4096"
MAX_TEXT = 4096  # characters of a digest, model key or version read (theirs are under 200)

Stat = tuple[bytes, int, int]  # (path bytes, size, mtime_ns): what a file had when it was read


def short_text(column: str) -> str:
    """The SQL condition that ``column`` holds text of a plausible length (a 200 MB key is never read)."""
    return f"typeof({column}) = 'text' AND length({column}) <= {MAX_TEXT}"


def encode_path(path: str | os.PathLike[str]) -> bytes:
    return os.fsencode(os.fspath(path))


def stat_keys(files: Sequence[Any]) -> list[Stat]:
    """(path bytes, size, mtime_ns) per file record; straight from a ``walk.FileList``'s columns."""
    records = getattr(files, "records", None)
    if records is not None:
        return list(records())
    return [(encode_path(f.path), int(f.size), int(f.mtime_ns)) for f in files]


class CacheFile:
    """The SQLite file at ``path``, open: its connection, its lock and its transactions.

    The table mixins read ``self._conn`` only under ``self._lock`` (``with self._reading() as conn``)
    and write in one transaction each (``with self._writing() as conn``). ``FeatureCache.__init__``
    sets the attributes and opens the file (:meth:`_open_or_recover`).
    """

    path: Path
    model_key: str | None
    dtype: str
    writes_disabled: bool
    recovered_from: Path | None
    _cookie: int | None  # the schema version check_schema last passed
    _busy_timeout: float
    _on_warning: Callable[[str], None] | None
    _lock: threading.Lock
    _conn: sqlite3.Connection

    # -- opening -------------------------------------------------------------------------------

    def _open_or_recover(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as err:
            raise CacheError(
                f"cannot create the cache folder {self.path.parent}: {err.strerror or err}"
            ) from None
        if self.path.is_dir():
            raise CacheError(f"cache path is a folder: {self.path}")
        identity = file_identity(self.path)
        try:
            return self._open()
        except sqlite3.DatabaseError as err:
            if not is_damage(err):
                raise open_error(self.path, err) from None
            reason = str(err)
        moved = move_aside(self.path, identity)
        if moved is not None:
            self.recovered_from = moved
            self._warn(
                f"the feature cache {self.path} was damaged ({reason}); moved it to {moved} "
                "and started a new one"
            )
        try:
            return self._open()
        except sqlite3.DatabaseError as err:
            raise open_error(self.path, err) from None

    def _open(self) -> sqlite3.Connection:
        try:  # the one door: a folder of the user's alone, a file of the user's, a new one 0600
            conn = guard.open_store(
                self.path,
                what="the feature cache",
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        except OSError as err:
            raise CacheError(f"cannot write the feature cache {self.path}: {err.strerror or err}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")  # read vectors straight from the page cache
            if self.dtype == "float16":  # takes effect on a new file only (before WAL); else a no-op
                conn.execute(f"PRAGMA page_size = {FLOAT16_PAGE_BYTES}")
            check_health(conn)
            check_ours(self.path, *header(conn))  # before anything writes to a file that may not be ours
            check_schema(conn, self.path)  # and before a trigger planted in it could fire
            # Where WAL is not possible (a file system without shared memory) SQLite keeps the rollback
            # journal, which still keeps each batch atomic.
            retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone(), self._busy_timeout)
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: safe against crashes of the process
            self._cookie = None
            with self._write(conn):  # checks the schema again, under the write lock
                create_tables(conn, self.path)
                self._cookie = schema_cookie(conn)  # what we made: the schema later writes expect
        except BaseException:
            conn.close()
            raise
        return conn

    def _warn(self, message: str) -> None:
        if self._on_warning is not None:
            self._on_warning(message)
        else:
            warnings.warn(message, CacheWarning, stacklevel=4)

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def _write(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE), retried while another run holds the lock."""
        conn = conn or self._conn
        retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"), self._busy_timeout)
        try:
            # Another process may have changed the schema since it was checked (a trigger added to a
            # cache in a shared folder): checked again, under the lock, before anything here fires it.
            if self._cookie is None or schema_cookie(conn) != self._cookie:
                try:
                    check_schema(conn, self.path)
                except CacheError as err:
                    self.writes_disabled = True  # as for any batch that cannot be written
                    raise CacheWriteError(str(err)) from None
                self._cookie = schema_cookie(conn)
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the lock; an SQLite error in the block is a CacheError naming the file.
        The one shape of every lookup, whichever table it reads."""
        try:
            with self._lock:
                yield self._conn
        except sqlite3.Error as err:
            raise self._read_error(err) from None

    @contextmanager
    def _writing(
        self, *, doing: str = "write", error: type[CacheError] = CacheWriteError, stop: bool = False
    ) -> Iterator[sqlite3.Connection]:
        """One write transaction under the lock; an SQLite error in it is ``error("cannot {doing} the
        feature cache PATH: ...")``. With ``stop`` the store takes no more writes after one (as after a
        batch of vectors that could not be written). The one shape of every small write."""
        try:
            with self._lock, self._write() as conn:
                yield conn
        except sqlite3.Error as err:
            if stop:
                self.writes_disabled = True
            raise error(f"cannot {doing} the feature cache {self.path}: {err}") from None

    def _require_key(self) -> str:
        if self.model_key is None:
            raise ValueError("this FeatureCache was opened without a model_key")
        return self.model_key

    def _read_error(self, err: sqlite3.Error) -> CacheError:
        return CacheError(f"cannot read the feature cache {self.path}: {err}")

    def _select_in(
        self, sql: str, params: tuple[Any, ...], values: Iterable[Any]
    ) -> Iterator[tuple[Any, ...]]:
        """The rows of ``sql`` (whose last condition is ``IN ({marks})``) for ``values``, looked up
        ``_CHUNK`` distinct values at a time after ``params``. Call with ``self._lock`` held."""
        unique = list(dict.fromkeys(values))
        for start in range(0, len(unique), _CHUNK):
            chunk = unique[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            yield from self._conn.execute(sql.format(marks=marks), (*params, *chunk)).fetchall()

    def _by_stat(
        self, sql: str, params: tuple[Any, ...], stats: Sequence[Stat]
    ) -> list[tuple[Any, ...] | None]:
        """Per file of ``stats``, the rest of the row ``sql`` selects for its path (``path, size,
        mtime_ns, ...`` with the paths last, ``IN ({marks})``) while the file still has the size and mtime
        it had when read; None for a file unknown or changed since."""
        found: dict[bytes, tuple[Any, ...]] = {}
        with self._reading():
            for path, *hit in self._select_in(sql, params, (p for p, _, _ in stats)):
                found[path] = tuple(hit)
        out: list[tuple[Any, ...] | None] = []
        for path, size, mtime_ns in stats:
            hit = found.get(path)
            out.append(None if hit is None or hit[:2] != (size, mtime_ns) else hit[2:])
        return out

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.execute("PRAGMA optimize")
                except sqlite3.Error:
                    pass
                self._conn.close()
                self._conn = None  # type: ignore[assignment]
