"""What keeps a feature cache usable when something goes wrong: SQLite's error codes, a damaged file
recognised (:func:`damage`), moved aside (``<name>.corrupt-<timestamp>``) or deleted
(:func:`remove_damaged`), and statements retried while another run holds the lock.

Any number of runs may open one cache at once; the switch to WAL and ``BEGIN IMMEDIATE`` can answer
SQLITE_BUSY at once, without waiting on the busy timeout (SQLite does so when waiting could deadlock),
so both are retried (:func:`retry_busy`) until the timeout.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

from novelfind.cache import guard
from novelfind.errors import CacheError

T = TypeVar("T")

BUSY_TIMEOUT_S = 30.0  # how long a write waits for another run's transaction before giving up

SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY = 5, 6, 8
SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL = 10, 11, 13
SQLITE_CANTOPEN, SQLITE_NOTADB = 14, 26


class CacheWarning(UserWarning):
    """Something went wrong with the cache that the run survives (a damaged file was replaced)."""


class CacheWriteError(CacheError):
    """A batch could not be written (disk full, I/O error, busy for too long).

    The batch is rolled back; the cache stays readable, and later ``put_many`` calls on the same
    ``FeatureCache`` do nothing, so a scan can warn once and carry on without caching.
    """

    def __init__(self, message: str, *, disk_full: bool = False):
        super().__init__(message)
        self.disk_full = disk_full


def errorcode(err: sqlite3.Error) -> int | None:
    code = getattr(err, "sqlite_errorcode", None)  # Python >= 3.11
    if code is not None:
        return code & 0xFF  # primary result code
    message = str(err).lower()
    for text, value in (
        ("database or disk is full", SQLITE_FULL),
        ("database is locked", SQLITE_BUSY),
        ("readonly database", SQLITE_READONLY),
        ("disk i/o error", SQLITE_IOERR),
        ("malformed", SQLITE_CORRUPT),
        ("file is not a database", SQLITE_NOTADB),
        ("unable to open database", SQLITE_CANTOPEN),
    ):
        if text in message:
            return value
    return None


def is_damage(err: sqlite3.Error) -> bool:
    return errorcode(err) in (SQLITE_CORRUPT, SQLITE_NOTADB)


def check_health(conn: sqlite3.Connection) -> None:
    """Raise sqlite3.DatabaseError (CORRUPT/NOTADB) when the file is not a sound database."""
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # NOTADB for a foreign file
    result = conn.execute("PRAGMA quick_check").fetchall()
    if [tuple(r) for r in result] != [("ok",)]:
        detail = "; ".join(str(r[0]) for r in result[:3])
        err = sqlite3.DatabaseError(f"database disk image is malformed: {detail}")
        err.sqlite_errorcode = SQLITE_CORRUPT  # type: ignore[attr-defined]
        raise err


def damage(path: str | os.PathLike[str]) -> str | None:
    """Why the cache file at ``path`` is damaged, or None when it is sound (or missing). Read-only: the
    file is opened without writing to it, and nothing is moved or created (``novelfind cache info``)."""
    path = Path(os.fspath(path)).expanduser().absolute()
    if not path.is_file():
        return None
    try:
        conn = guard.open_store(path, what="the feature cache", read_only=True, timeout=BUSY_TIMEOUT_S)
    except (sqlite3.Error, CacheError, OSError):
        return None  # cannot be read at all, or not through the door: opening it says why
    try:
        check_health(conn)
    except sqlite3.DatabaseError as err:
        return str(err) if is_damage(err) else None
    finally:
        conn.close()
    return None


def remove_damaged(path: str | os.PathLike[str]) -> None:
    """Delete a damaged cache file and its WAL and shared-memory files (``novelfind cache clear``)."""
    path = Path(os.fspath(path)).expanduser().absolute()
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            path.with_name(path.name + suffix).unlink()
        except FileNotFoundError:
            pass
        except OSError as err:
            reason = err.strerror or err
            raise CacheError(f"cannot delete the damaged feature cache {path}: {reason}") from None


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path``, or None when it is gone: whether a damaged file was
    replaced meanwhile (another run recovered it first)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def open_error(path: Path, err: sqlite3.Error) -> CacheError:
    """The CacheError for a cache file that cannot be opened or created, saying why."""
    code = errorcode(err)
    if code == SQLITE_FULL:
        return CacheError(f"the disk holding the feature cache {path} is full")
    if code in (SQLITE_READONLY, SQLITE_CANTOPEN) or not os.access(path.parent, os.W_OK):
        return CacheError(f"cannot write the feature cache {path}: {err}")
    return CacheError(f"cannot open the feature cache {path}: {err}")


def move_aside(path: Path, identity: tuple[int, int] | None) -> Path | None:
    """Rename the damaged file (and its WAL) out of the way; None if another run already did."""
    if identity is None or file_identity(path) != identity:
        return None  # gone or replaced meanwhile: someone else recovered it
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    try:
        os.replace(path, target)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise CacheError(
            f"the feature cache {path} is damaged and cannot be moved aside: {err.strerror or err}"
        ) from None
    for suffix in ("-wal", "-journal"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            try:
                os.replace(side, target.with_name(target.name + suffix))
            except OSError:
                pass
    try:
        path.with_name(path.name + "-shm").unlink()  # index of the old WAL; rebuilt on open
    except OSError:
        pass
    return target


def retry_busy(action: Callable[[], T], timeout: float) -> T:
    """``action()``, tried again while it fails with SQLITE_BUSY / LOCKED, for up to ``timeout`` seconds.

    SQLite's own busy handler does not cover every case: a statement that would deadlock waiting
    (BEGIN IMMEDIATE, a journal mode switch, against a run that holds a read lock and wants the
    write lock) is answered SQLITE_BUSY at once, so the whole statement is tried again here.
    """
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            return action()
        except sqlite3.OperationalError as err:
            if errorcode(err) not in (SQLITE_BUSY, SQLITE_LOCKED) or time.monotonic() > deadline:
                raise
        # jittered backoff, so runs that collided once do not collide again in step
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.25)
