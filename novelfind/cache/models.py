"""The ``models`` table: which model keys the cache holds vectors for, and what changes a key as a whole
(renaming an older name of the same vectors to the current one, dropping a kind of vector no version
reads any more, counting the photos a scan would extract again).

A model key names what made a vector (weights, what the vector holds, preprocessing), so vectors of two
keys never mix. :class:`Models` is ``FeatureCache``'s part for the table; a scan without a cache never
asks for it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from novelfind.cache.connection import CacheFile, short_text, stat_keys
from novelfind.cache.recovery import CacheWriteError
from novelfind.cache.vectors import DigestSet

if TYPE_CHECKING:
    from novelfind.media.walk import ImageFile

UPGRADE_CHUNK = 900  # vectors renamed per transaction by ``upgrade`` (keeps the WAL small); < 999 variables


class Models(CacheFile):
    """``FeatureCache``'s view of the model keys (the ``models`` table, and the vectors by key)."""

    def model_keys(self) -> dict[str, int]:
        """The model keys the cache has vectors for, with their dimension (the small ``models`` table)."""
        with self._reading() as conn:
            return dict(
                conn.execute(
                    "SELECT model_key, dim FROM models "
                    f"WHERE {short_text('model_key')} AND typeof(dim) = 'integer'"
                ).fetchall()
            )

    def digests_under(self, files: Sequence[ImageFile], model_key: str) -> DigestSet:
        """The digests of those of ``files`` (unchanged since read) that have a vector under ``model_key``,
        any model's: what an earlier version stored for them. Byte-identical copies give one digest."""
        stats = stat_keys(files)
        sql = (
            "SELECT f.path, f.size, f.mtime_ns, f.digest FROM files f JOIN vectors v "
            f"ON v.digest = f.digest AND v.model_key = ? WHERE {short_text('f.digest')} "
            "AND f.path IN ({marks})"
        )
        with self._reading():
            rows = self._select_in(sql, (model_key,), (p for p, _, _ in stats))
            found = {row[:3]: row[3] for row in rows}
        return DigestSet({found[record] for record in stats if record in found})

    def photos_without(self, model_key: str, usable: Iterable[str]) -> int:
        """How many contents (distinct digests of files the cache knows) have a vector under ``model_key``
        but none under any ``usable`` key: the photos a scan must extract again when ``model_key`` is a
        kind of vector it cannot use (``novelfind cache info``)."""
        keys = list(dict.fromkeys(usable))
        marks = ",".join("?" * len(keys)) or "NULL"
        sql = (
            "SELECT count(DISTINCT v.digest) FROM vectors v WHERE v.model_key = ? "
            "AND v.digest IN (SELECT digest FROM files) "
            f"AND NOT EXISTS (SELECT 1 FROM vectors u WHERE u.digest = v.digest AND u.model_key IN ({marks}))"
        )
        with self._reading() as conn:
            return int(conn.execute(sql, (model_key, *keys)).fetchone()[0])

    def upgrade(self, former: str) -> int:
        """Give the vectors stored under ``former`` (an older name of what ``model_key`` names: the same
        vectors) this cache's key, ``UPGRADE_CHUNK`` at a time, one transaction each; a digest this key
        has already keeps its vector. Returns the vectors renamed. The old key is gone afterwards. Vectors
        of another length are left alone (two kinds are never mixed). CacheWriteError when it cannot write.
        """
        key = self._require_key()
        keys = self.model_keys()
        if former == key or former not in keys or keys.get(key, keys[former]) != keys[former]:
            return 0
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        renamed = 0
        try:
            with self._lock:
                rowids = [
                    r
                    for (r,) in self._conn.execute("SELECT rowid FROM vectors WHERE model_key = ?", (former,))
                ]
            for start in range(0, len(rowids), UPGRADE_CHUNK):
                chunk = rowids[start : start + UPGRADE_CHUNK]
                marks = ",".join("?" * len(chunk))
                with self._lock, self._write() as conn:
                    conn.execute(
                        "INSERT OR IGNORE INTO models (model_key, dim, first_seen) VALUES (?, ?, ?)",
                        (key, keys[former], now),
                    )
                    renamed += conn.execute(
                        "UPDATE OR IGNORE vectors SET model_key = ? "
                        f"WHERE model_key = ? AND rowid IN ({marks})",
                        (key, former, *chunk),
                    ).rowcount
                    conn.execute(
                        f"DELETE FROM vectors WHERE model_key = ? AND rowid IN ({marks})", (former, *chunk)
                    )
            with self._lock, self._write() as conn:
                conn.execute("DELETE FROM vectors WHERE model_key = ?", (former,))  # written meanwhile
                conn.execute("DELETE FROM models WHERE model_key = ?", (former,))
        except sqlite3.Error as err:
            raise CacheWriteError(f"cannot upgrade the feature cache {self.path}: {err}") from None
        return renamed

    def drop_model(self, model_key: str) -> int:
        """Forget every vector stored under ``model_key`` (vectors this version cannot use); returns how
        many. Their space is reused by the next vectors (``prune`` gives it back to the disk)."""
        with self._writing() as conn:
            dropped = conn.execute("DELETE FROM vectors WHERE model_key = ?", (model_key,)).rowcount
            conn.execute("DELETE FROM clips WHERE model_key = ?", (model_key,))
            conn.execute("DELETE FROM models WHERE model_key = ?", (model_key,))
        return dropped
