"""Every connection to a cache file: SQLite's ``trusted_schema`` off, and every statement under a clock.

A cache file is data that anyone who can write it may have edited (a shared account's cache folder, a
cache copied from elsewhere). What its schema holds runs inside our queries: a trigger fires on our
writes, a view answers our reads. :func:`novelfind.cache.schema.check_schema` refuses a file whose schema
novelfind did not make; this module bounds what is left:

- ``PRAGMA trusted_schema = OFF``: functions with side effects are not callable from the schema;
- a progress handler on every connection (SQLite calls it every ``PROGRESS_STEPS`` virtual-machine
  instructions): a statement running longer than ``QUERY_TIMEOUT_S`` is stopped (an endless recursive
  query in a planted trigger hung a scan for 672 s, deaf to SIGTERM), and a Ctrl-C or SIGTERM that
  arrives during a statement stops it. Python runs a signal's handler inside that callback, and the
  ``sqlite3`` module swallows what the callback raises and fails the statement as "interrupted"; the
  cursor here tells the two apart and raises ``KeyboardInterrupt`` for the signal (what the command line
  turns into exit code 130), ``sqlite3.OperationalError`` naming the time limit for the clock.

The handler costs one Python call per ``PROGRESS_STEPS`` instructions. With the checks of
:mod:`~novelfind.cache.vectors`' SQL (blob lengths and types), a re-scan's lookups took 24.2 µs of CPU per
photo instead of 22.5 (``get_many_by_stat``), and 16.6 instead of 16.8 (``has_many_by_stat``): medians of
5 runs of ``scripts/bench_cache_check.py`` on the loaded 2-core development machine
(``docs/bench/cache-guard-2core.json``).
"""

from __future__ import annotations

import math
import sqlite3
import time
from typing import Any

# The longest one statement may run: far above any legitimate one (the lookups of a chunk take
# milliseconds, a VACUUM of a 1 GB cache about 10 s on the 2-core development machine).
QUERY_TIMEOUT_S = 600.0
PROGRESS_STEPS = 10_000
SQLITE_INTERRUPT = 9


class GuardedCursor(sqlite3.Cursor):
    """A cursor whose statements run under its connection's clock (:class:`GuardedConnection`)."""

    connection: GuardedConnection

    def execute(self, sql: str, parameters: Any = ()) -> GuardedCursor:
        self.connection.start_clock()
        try:
            return super().execute(sql, parameters)
        except sqlite3.OperationalError as err:
            raise self.connection.stopped(err) from None

    def executemany(self, sql: str, seq: Any) -> GuardedCursor:
        self.connection.start_clock()
        try:
            return super().executemany(sql, seq)
        except sqlite3.OperationalError as err:
            raise self.connection.stopped(err) from None

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.OperationalError as err:
            raise self.connection.stopped(err) from None

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.OperationalError as err:
            raise self.connection.stopped(err) from None

    def fetchmany(self, size: int | None = None) -> list[Any]:
        try:
            return super().fetchmany(self.arraysize if size is None else size)
        except sqlite3.OperationalError as err:
            raise self.connection.stopped(err) from None

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.OperationalError as err:
            raise self.connection.stopped(err) from None


class GuardedConnection(sqlite3.Connection):
    """A connection with ``trusted_schema`` off and a clock on every statement (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.query_timeout = QUERY_TIMEOUT_S
        self._deadline = math.inf
        self._timed_out = False
        self.set_progress_handler(self._progress, PROGRESS_STEPS)
        self.execute("PRAGMA trusted_schema = OFF")

    def _progress(self) -> int:
        if time.monotonic() > self._deadline:
            self._timed_out = True
            return 1  # SQLite stops the statement: SQLITE_INTERRUPT
        return 0

    def start_clock(self) -> None:
        """A statement starts: it (and the reading of its rows) has ``query_timeout`` seconds."""
        self._deadline = time.monotonic() + self.query_timeout
        self._timed_out = False

    def stopped(self, err: sqlite3.OperationalError) -> BaseException:
        """What to raise for ``err``: itself, unless the progress handler stopped the statement."""
        code = getattr(err, "sqlite_errorcode", None)
        if not (code == SQLITE_INTERRUPT or (code is None and str(err) == "interrupted")):
            return err
        if self._timed_out:
            stopped = sqlite3.OperationalError(
                f"a query ran longer than {self.query_timeout:g} s and was stopped (a hostile cache?)"
            )
            stopped.sqlite_errorcode = SQLITE_INTERRUPT  # type: ignore[attr-defined]
            return stopped
        return KeyboardInterrupt()  # a signal's handler raised inside the progress handler

    def cursor(self, factory: Any = None) -> GuardedCursor:  # type: ignore[override]
        return super().cursor(factory or GuardedCursor)

    def execute(self, sql: str, parameters: Any = ()) -> GuardedCursor:  # type: ignore[override]
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, seq: Any) -> GuardedCursor:  # type: ignore[override]
        return self.cursor().executemany(sql, seq)


def connect(database: str, *, uri: bool = False, timeout: float = 5.0, **kwargs: Any) -> GuardedConnection:
    """``sqlite3.connect`` for a cache file: a :class:`GuardedConnection`."""
    return sqlite3.connect(  # type: ignore[return-value]
        database, uri=uri, timeout=timeout, factory=GuardedConnection, **kwargs
    )
