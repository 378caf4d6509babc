"""The files a scan could not read, remembered in the feature cache so that each is reported once.

A truncated JPEG in a library scanned every night would otherwise print the same warning (and make cron
mail it, and exit 3) every night for ever. The cache's ``failures`` table keeps each unreadable file's
path, size, mtime and reason: a later scan that meets the same file unchanged (same path, size and
mtime) counts it as a *known* failure, says nothing and exits 0; a file that changed since (edited,
copied over again) is tried again, and reported again if it still fails. ``novelfind failures`` lists
the table, ``--forget`` empties it (so every unreadable file is reported at the next scan again).

A table of its own (:mod:`novelfind.cache.schema` makes it), added in place to caches an older
novelfind wrote, like the ``rankings`` table: the schema version stays, and an older novelfind never
looks at it. The functions take the cache's SQLite connection; :class:`Failures`, ``FeatureCache``'s
part for the table, calls them under its lock and in its write transactions. :class:`NullFailures` is
the same for no cache, where every unreadable file is new.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import NamedTuple

from novelfind.cache.connection import CacheFile
from novelfind.errors import CacheError


class KnownFailure(NamedTuple):
    """A file a scan could not read, as remembered: the stat it had then, the reason and when."""

    path: bytes
    size: int
    mtime_ns: int
    reason: str
    first_seen: str


# When a failure was first seen, as written: ISO 8601 in UTC to the second (``2026-11-29T08:15:00+00:00``).
FIRST_SEEN = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]+00:00"
# The rows of the shapes novelfind writes (the file is anyone's who can write it to edit), checked in SQL
# before anything is fetched: no 200 MB reason, no text where a number belongs, no ESC in a date.
FAILURE_ROW = (
    "typeof(path) = 'blob' AND length(path) <= 4096 AND typeof(size) = 'integer' "
    "AND typeof(mtime_ns) = 'integer' AND typeof(reason) = 'text' AND length(reason) <= 4096 "
    f"AND typeof(first_seen) = 'text' AND length(first_seen) = 25 AND first_seen GLOB '{FIRST_SEEN}'"
)


def _when(text: str) -> bool:
    """Whether ``text`` is a ``first_seen`` novelfind writes: a real time, in UTC, and nothing else."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return False
    return when.utcoffset() is not None and text == when.isoformat()


def load(conn: sqlite3.Connection) -> dict[bytes, KnownFailure]:
    """Every remembered failure, by path. The table is small (the library's unreadable files). A row not
    of the shape novelfind writes (:data:`FAILURE_ROW`, then a real time) is no failure: the file is
    tried again, and the row replaced if it still fails."""
    return {
        bytes(row[0]): KnownFailure(bytes(row[0]), int(row[1]), int(row[2]), str(row[3]), str(row[4]))
        for row in conn.execute(
            f"SELECT path, size, mtime_ns, reason, first_seen FROM failures WHERE {FAILURE_ROW}"
        )
        if _when(row[4])
    }


def record(conn: sqlite3.Connection, rows: Iterable[tuple[bytes, int, int, str]]) -> None:
    """Remember (path, size, mtime_ns, reason) of files that could not be read; a path already there
    keeps its ``first_seen`` when its stat is unchanged (and its ``first_seen`` is one novelfind wrote)."""
    now = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    for path, size, mtime_ns, reason in rows:
        conn.execute(
            "INSERT INTO failures VALUES (?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET "
            "reason = excluded.reason, first_seen = CASE WHEN size = excluded.size AND "
            f"mtime_ns = excluded.mtime_ns AND {FAILURE_ROW} THEN first_seen ELSE excluded.first_seen END, "
            "size = excluded.size, mtime_ns = excluded.mtime_ns",
            (path, int(size), int(mtime_ns), reason, now),
        )


def forget_paths(conn: sqlite3.Connection, paths: Iterable[bytes] | None = None) -> int:
    """Forget the failures of ``paths`` (None: all of them); returns how many were forgotten."""
    if paths is None:
        return conn.execute("DELETE FROM failures").rowcount
    return sum(conn.execute("DELETE FROM failures WHERE path = ?", (p,)).rowcount for p in paths)


class Failures(CacheFile):
    """``FeatureCache``'s record of unreadable files (the ``failures`` table)."""

    def known_failures(self) -> dict[bytes, KnownFailure]:
        """The files earlier scans could not read, by path (``os.fsencode``)."""
        with self._reading() as conn:
            return load(conn)

    def record_failures(
        self, rows: Sequence[tuple[bytes, int, int, str]], forget: Sequence[bytes] = ()
    ) -> None:
        """Remember (path, size, mtime_ns, reason) of files that could not be read, and forget the
        failures of ``forget`` (files read since, or gone), in one transaction."""
        if not rows and not forget:
            return
        with self._writing() as conn:
            forget_paths(conn, forget)
            record(conn, rows)

    def forget_failures(self, paths: Sequence[bytes] | None = None) -> int:
        """Forget the failures of ``paths`` (None: all); the next scan reports those files again."""
        with self._writing(error=CacheError) as conn:
            return forget_paths(conn, paths)


class NullFailures:
    """:class:`Failures` for no cache: no file is known to be unreadable (each is new), none is kept."""

    def known_failures(self) -> dict[bytes, KnownFailure]:
        return {}

    def record_failures(
        self, rows: Sequence[tuple[bytes, int, int, str]], forget: Sequence[bytes] = ()
    ) -> None:
        return None
