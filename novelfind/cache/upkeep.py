"""Keeping a cache file in shape: what it holds (:meth:`Upkeep.info`), forgetting files gone or changed
(:meth:`Upkeep.prune`), forgetting everything (:meth:`Upkeep.clear`), and giving the space back.

These touch every table at once, so they live apart from any one table's module: a table added to the
cache is pruned and cleared here. :class:`Upkeep` is ``FeatureCache``'s part for them (``novelfind cache
info / prune / clear``); :class:`NullUpkeep` is the same for no cache: nothing held, nothing to do.
"""

from __future__ import annotations

import math
import os
import sqlite3
from typing import Any

from novelfind.cache import failures
from novelfind.cache.connection import PATH_ROW, CacheFile, short_text
from novelfind.cache.schema import SCHEMA_VERSION
from novelfind.errors import CacheError


class Upkeep(CacheFile):
    """``FeatureCache``'s maintenance: info, prune, clear, and shrinking the file after them."""

    def info(self) -> dict[str, Any]:
        """Path, vector count (``entries``), file count, bytes on disk and vectors per model."""
        with self._reading() as conn:
            entries = conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
            files = conn.execute("SELECT count(*) FROM files").fetchone()[0]
            unreadable = len(failures.load(conn))
            models = dict(
                conn.execute(
                    "SELECT m.model_key, count(v.digest) FROM models m "
                    "LEFT JOIN vectors v ON v.model_key = m.model_key "
                    f"WHERE {short_text('m.model_key')} "
                    "GROUP BY m.model_key ORDER BY m.first_seen, m.model_key"
                ).fetchall()
            )
        size = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                size += os.stat(str(self.path) + suffix).st_size
            except OSError:
                pass
        return {
            "path": str(self.path),
            "entries": entries,
            "files": files,
            "failures": unreadable,
            "size_bytes": size,
            "models": models,
            "schema_version": SCHEMA_VERSION,
        }

    def prune(self) -> int:
        """Forget files that are gone or changed since they were read, vectors no file uses, and the
        unreadable files (``failures``) that are gone.

        Returns the number of file entries dropped. A file on a drive that is not mounted counts
        as gone. Files that cannot be checked (permission denied) are kept. A row whose path is no path
        novelfind wrote (not bytes, longer than any path, holding a NUL) is damaged, and dropped.
        """
        stale: list[tuple[bytes, int, int]] = []
        with self._reading() as conn:
            rows = conn.execute(f"SELECT path, size, mtime_ns FROM files WHERE {PATH_ROW}").fetchall()
            unreadable = list(failures.load(conn))
        gone = [path for path in unreadable if not os.path.lexists(path)]  # unreadable files since deleted
        for path, size, mtime_ns in rows:
            try:
                st = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                stale.append((path, size, mtime_ns))
                continue
            except OSError:
                continue
            except ValueError:  # a NUL in it: not a path novelfind wrote, a damaged row
                stale.append((path, size, mtime_ns))
                continue
            if st.st_size != size or st.st_mtime_ns != mtime_ns:
                stale.append((path, size, mtime_ns))
        with self._writing(doing="prune", error=CacheError) as conn:
            dropped = conn.execute(f"DELETE FROM files WHERE NOT ({PATH_ROW})").rowcount
            for path, size, mtime_ns in stale:  # unchanged since read above: another run may have updated it
                dropped += conn.execute(
                    "DELETE FROM files WHERE path = ? AND size = ? AND mtime_ns = ?",
                    (path, size, mtime_ns),
                ).rowcount
            failures.forget_paths(conn, gone)
            conn.execute("DELETE FROM vectors WHERE digest NOT IN (SELECT digest FROM files)")
            conn.execute("DELETE FROM clips WHERE digest NOT IN (SELECT digest FROM files)")
            conn.execute("DELETE FROM dates WHERE digest NOT IN (SELECT digest FROM files)")
            conn.execute("DELETE FROM models WHERE model_key NOT IN (SELECT DISTINCT model_key FROM vectors)")
        self._compact()
        return dropped

    def clear(self) -> None:
        """Forget everything, for every model, and give the space back."""
        with self._writing(doing="clear", error=CacheError) as conn:
            conn.execute("DELETE FROM vectors")
            conn.execute("DELETE FROM clips")
            conn.execute("DELETE FROM dates")
            conn.execute("DELETE FROM files")
            conn.execute("DELETE FROM models")
            conn.execute("DELETE FROM rankings")
            failures.forget_paths(conn)
        self._compact()

    def _compact(self) -> None:
        """Shrink the file after deletions; skipped quietly while another run is using the cache.

        The one statement without a time limit: VACUUM copies pages and runs nothing of the schema, and a
        large cache takes minutes (Ctrl-C still stops it)."""
        try:
            with self._lock:
                limit, self._conn.query_timeout = self._conn.query_timeout, math.inf
                try:
                    self._conn.execute("VACUUM")
                finally:
                    self._conn.query_timeout = limit
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:
            pass


class NullUpkeep:
    """:class:`Upkeep` for no cache: nothing held, nothing to prune or clear."""

    def info(self) -> dict[str, Any]:
        return {"path": None, "entries": 0, "files": 0, "size_bytes": 0, "models": {}, "schema_version": None}

    def prune(self) -> int:
        return 0

    def clear(self) -> None:
        return None
