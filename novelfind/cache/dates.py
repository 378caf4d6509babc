"""The ``dates`` table: when each photo was taken, as its bytes say, kept by content digest.

A date is a property of the bytes, so one row serves every path of a photo and every model, and a scan
reads only the headers of photos without a stored date (``novelfind.media.dates``). :class:`Dates` is
``FeatureCache``'s part for the table; :class:`NullDates` is the same for no cache: no date is known,
none is kept.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from novelfind.cache.connection import CacheFile, short_text, stat_keys
from novelfind.media.dates import EMBEDDED, valid

if TYPE_CHECKING:
    from novelfind.media.walk import ImageFile

Date = tuple[float | None, int | None, str]  # (taken, utc_offset, source), as the dates table holds it

# A row of the dates table as novelfind writes it: a number or nothing for the date, an integer or nothing
# for the offset, one of the sources' short names.
DATE_ROW = (
    "(d.taken IS NULL OR typeof(d.taken) IN ('real', 'integer')) "
    "AND (d.utc_offset IS NULL OR typeof(d.utc_offset) = 'integer') "
    "AND typeof(d.source) = 'text' AND length(d.source) <= 16"
)
MAX_OFFSET_S = 18 * 3600  # the widest UTC offset a date may carry (the real ones: -12 h to +14 h)


def usable(date: Date, now: float | None = None) -> bool:
    """Whether a date read back from the table is one novelfind could have written: a known source, a
    date for the sources that carry one and none for the others, a date a camera could have taken
    (:func:`novelfind.media.dates.valid`: from 2000 to a day from ``now``), an offset within
    ``MAX_OFFSET_S``. Anything else (1e300, an offset of 1e12, a local date of 1e18) is damage."""
    taken, offset, source = date
    if source not in EMBEDDED:
        return False
    if source in ("invalid", "none"):
        return taken is None and offset is None
    if not isinstance(taken, (int, float)) or not math.isfinite(taken) or not valid(float(taken), now):
        return False
    return offset is None or (isinstance(offset, int) and abs(offset) <= MAX_OFFSET_S)


class Dates(CacheFile):
    """``FeatureCache``'s capture dates (the ``dates`` table, found through the ``files`` table)."""

    def dates_by_stat(self, files: Sequence[ImageFile]) -> list[tuple[str | None, Date | None]]:
        """Per file, (its digest as recorded when it was read, if it still has that size and mtime; the
        capture date stored for those bytes as (taken, utc_offset, source), or None when none is yet):
        what ``novelfind.media.dates`` needs to read only the headers of photos without a stored date."""
        # Only a date row of the types and sizes novelfind writes is joined, so nothing else is fetched (a
        # 200 MB blob, text where a number belongs); its values are then checked (:func:`usable`). A row
        # that fails either is no date: the photo's header is read again and the row replaced.
        sql = (
            "SELECT f.path, f.size, f.mtime_ns, f.digest, d.taken, d.utc_offset, d.source FROM files f "
            f"LEFT JOIN dates d ON d.digest = f.digest AND {DATE_ROW} "
            f"WHERE {short_text('f.digest')} AND f.path IN ({{marks}})"
        )
        out: list[tuple[str | None, Date | None]] = []
        now = time.time()
        for hit in self._by_stat(sql, (), stat_keys(files)):
            if hit is None:
                out.append((None, None))
            else:
                digest, taken, offset, source = hit
                date = (taken, offset, source)
                out.append((digest, date if source is not None and usable(date, now) else None))
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
