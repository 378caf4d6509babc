"""The ``dates`` table: when each photo was taken, as its bytes say, kept by content digest.

A date is a property of the bytes, so one row serves every path of a photo and every model, and a scan
reads only the headers of photos without a stored date (``novelfind.media.dates``). :class:`Dates` is
``FeatureCache``'s part for the table; :class:`NullDates` is the same for no cache: no date is known,
none is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from novelfind.cache.connection import CacheFile, stat_keys

if TYPE_CHECKING:
    from novelfind.media.walk import ImageFile

Date = tuple[float | None, int | None, str]  # (taken, utc_offset, source), as the dates table holds it


class Dates(CacheFile):
    """``FeatureCache``'s capture dates (the ``dates`` table, found through the ``files`` table)."""

    def dates_by_stat(self, files: Sequence[ImageFile]) -> list[tuple[str | None, Date | None]]:
        """Per file, (its digest as recorded when it was read, if it still has that size and mtime; the
        capture date stored for those bytes as (taken, utc_offset, source), or None when none is yet):
        what ``novelfind.media.dates`` needs to read only the headers of photos without a stored date."""
        sql = (
            "SELECT f.path, f.size, f.mtime_ns, f.digest, d.taken, d.utc_offset, d.source FROM files f "
            "LEFT JOIN dates d ON d.digest = f.digest WHERE f.path IN ({marks})"
        )
        out: list[tuple[str | None, Date | None]] = []
        for hit in self._by_stat(sql, (), stat_keys(files)):
            if hit is None:
                out.append((None, None))
            else:
                digest, taken, offset, source = hit
                out.append((digest, None if source is None else (taken, offset, source)))
        return out

    def put_dates(self, rows: Sequence[tuple[str, float | None, int | None, str]]) -> None:
        """Store (digest, taken, utc_offset, source) rows in one transaction (a date is a property of the
        bytes, so one row serves every path and model). CacheWriteError when they cannot be written."""
        if self.writes_disabled or not rows:
            return
        with self._writing() as conn:
            conn.executemany(
                "INSERT INTO dates (digest, taken, utc_offset, source) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (digest) DO UPDATE SET taken = excluded.taken, "
                "utc_offset = excluded.utc_offset, source = excluded.source",
                rows,
            )


class NullDates:
    """:class:`Dates` for no cache: no file's date is known, and none is kept."""

    def dates_by_stat(self, files: Sequence[ImageFile]) -> list[tuple[str | None, Any]]:
        return [(None, None)] * len(files)

    def put_dates(self, rows: Sequence[tuple[str, float | None, int | None, str]]) -> None:
        return None
