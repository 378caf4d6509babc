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

:func:`open_store` is the one door to every SQLite file novelfind keeps (the feature cache, the report's
thumbnails; ``sqlite3.connect`` is called here and nowhere else). SQLite opens the file and, beside it,
its ``-journal``, ``-wal`` and ``-shm`` files by name, when it chooses; it does not follow a link there
(``O_NOFOLLOW``), but it opens a FIFO and blocks for ever (a FIFO at ``-journal`` hung a scan), and it
writes through a hard link. No check made before SQLite's open can hold in a folder someone else can
write, so the door opens a store only in a folder that is the user's alone
(:func:`novelfind.base.private.why_shared`), and only a file there that is a regular file of the user's
(as are its side files, when there are any). A new file is created by the door itself, ``O_CREAT |
O_EXCL | O_NOFOLLOW``, mode 0600 (what it holds is made from the user's photos); SQLite's side files take
that mode from it. What the file holds is then checked by its owner (the schema:
:func:`novelfind.cache.schema.foreign_object`), and every value read back is checked in SQL before it is
fetched.
"""

from __future__ import annotations

import math
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

from novelfind.base.atomic import LINK_REFUSED, create_exclusive
from novelfind.base.private import why_shared
from novelfind.base.safe_text import display
from novelfind.errors import CacheError

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
    """``sqlite3.connect`` to ``database`` as it is named: a :class:`GuardedConnection`. For a database in
    memory (``":memory:"``), or a file :func:`open_store` has let through."""
    return sqlite3.connect(  # type: ignore[return-value]
        database, uri=uri, timeout=timeout, factory=GuardedConnection, **kwargs
    )


# -- the door ---------------------------------------------------------------------------------------

SIDE_FILES = ("-journal", "-wal", "-shm")  # what SQLite opens beside a database, by name
STORE_MODE = 0o600  # a new store: for its owner alone


class StoreRefused(CacheError):
    """A store file :func:`open_store` will not open, and why, in one line naming it: where it lies, what
    is at its name or beside it, or whose it is. Nothing in it was read."""


def refusal(path: str | os.PathLike[str], what: str) -> str | None:
    """Why :func:`open_store` would refuse the store file at ``path`` (``what``: "the feature cache",
    ...), as the line it would raise; None when it would open it. Looks, never creates."""
    try:
        _check(Path(os.path.abspath(os.fspath(path))), what, follow_link=True)
    except StoreRefused as err:
        return str(err)
    return None


def open_store(
    path: str | os.PathLike[str],
    *,
    what: str,
    create: bool = True,
    read_only: bool = False,
    follow_link: bool = True,
    timeout: float = 5.0,
    **kwargs: Any,
) -> GuardedConnection:
    """A :class:`GuardedConnection` to the store file at ``path`` (``what`` names it in messages: "the
    feature cache"), through the checks of the module's door:

    - its folder is the user's alone (:func:`~novelfind.base.private.why_shared`);
    - the file, when there is one, is a regular file of the user's (a link at ``path`` is followed when
      ``follow_link``, the path being one the user named, and the file it leads to is checked; otherwise
      refused); so are its side files (``-journal``, ``-wal``, ``-shm``), when there are any;
    - a missing file is created here (unless ``read_only`` or not ``create``): ``O_CREAT | O_EXCL |
      O_NOFOLLOW``, mode 0600.

    Raises :class:`StoreRefused` (a :class:`~novelfind.errors.CacheError`, one line) for a refused file,
    OSError when the file cannot be created, ``sqlite3.Error`` when SQLite cannot open it. ``kwargs`` go
    to ``sqlite3.connect``."""
    path = Path(os.path.abspath(os.fspath(path)))
    real = _check(path, what, follow_link=follow_link)
    if not os.path.lexists(real) and create and not read_only:
        try:
            os.close(create_exclusive(real, STORE_MODE))
        except FileExistsError:
            pass  # another run made it meanwhile (in a folder that is the user's alone: the user's run)
        real = _check(path, what, follow_link=follow_link)
    if read_only:
        return connect(f"{real.as_uri()}?mode=ro", uri=True, timeout=timeout, **kwargs)
    mode = "rwc" if create else "rw"
    return connect(f"{real.as_uri()}?mode={mode}", uri=True, timeout=timeout, **kwargs)


def _check(path: Path, what: str, *, follow_link: bool) -> Path:
    """The file SQLite is to open for ``path`` (links resolved): StoreRefused unless the door lets it
    through (:func:`open_store`)."""
    real = Path(os.path.realpath(path)) if follow_link else Path(os.path.realpath(path.parent)) / path.name
    shown = display(path)
    shared = why_shared(real.parent)
    if shared is not None:
        raise StoreRefused(
            f"{what} {shown} is in a folder others can write ({shared}); not used: keep it in a folder "
            "only you can write"
        )
    for suffix in ("", *SIDE_FILES):
        name = real.with_name(real.name + suffix)
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            continue
        except OSError as err:
            raise StoreRefused(
                f"{what} {shown}: cannot look at {display(name)} ({err.strerror or err})"
            ) from None
        why = _unusable(st)
        if why is not None:
            side = f" has a file {display(name)} beside it that" if suffix else ""
            raise StoreRefused(f"{what} {shown}{side} {why}; not used: move it aside")
    return real


def _unusable(st: os.stat_result) -> str | None:
    """Why a store file (or one of its side files) of this stat is not one SQLite may open, or None."""
    if stat.S_ISLNK(st.st_mode):
        return LINK_REFUSED.removeprefix("it ")
    if not stat.S_ISREG(st.st_mode):
        return f"is not a regular file (a {_kind(st.st_mode)})"
    if st.st_uid != os.geteuid():
        return f"belongs to another user (uid {st.st_uid})"
    return None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISDIR, "folder"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file"
