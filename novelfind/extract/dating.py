"""The capture dates that travel with the vectors: one reader per file kind, and the cache's rows.

A file's own date travels with its vector: the decode that reads a file for the model also reads its
date (:func:`novelfind.extract.stage.decode_file`, through :func:`embedded_date`), the stage stores it in
the cache's dates table in the same commit as the vector, and :class:`~novelfind.extract.stage.Extraction`
hands it on (``taken``). :func:`novelfind.extract.header_dates.scan_dates` completes the scan's dates
(from the cache, else from the headers, read in decode processes). The rules that turn these into one
date per photo (sidecars, file times) are :func:`novelfind.media.dates.library_dates`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from novelfind.media import dates
from novelfind.media.dates import NONE, Dates, Taken
from novelfind.media.decode import pixel_budget
from novelfind.media.kinds import kind_of


def embedded_date(path: str | os.PathLike[str], now: float | None = None) -> Taken:
    """What the file's own bytes say, by the reader of its kind (never raises: a reader that fails is
    NONE): the value the cache keeps for its digest."""
    source = kind_of(path).date_source
    try:
        if source == "clip":  # opened under this process's decoded-pixels budget, as for its frames
            return dates.clip_date(path, now, max_pixels=pixel_budget())
        return {"exif": dates.image_date, "raw": dates.raw_date}[source](path, now)
    except Exception:  # noqa: BLE001 - a date is never worth a scan: what cannot be read is unknown
        return NONE


def library_dates(paths: Sequence[str], mtimes_ns: Any, **options: Any) -> Dates:
    """:func:`novelfind.media.dates.library_dates` with the readers of this package: each kind's
    (:func:`embedded_date`, unless ``read`` is given) and the XMP sidecars' names."""
    from novelfind.media.sidecars import sidecar_candidates

    options.setdefault("read", embedded_date)
    return dates.library_dates(paths, mtimes_ns, sidecars=sidecar_candidates, **options)


def stored(row: tuple[float | None, int | None, str]) -> Taken:
    """A row of the cache's dates table (taken, offset, source) as a :class:`Taken`."""
    taken, offset, source = row
    if source not in dates.EMBEDDED:
        return NONE
    return Taken(math.nan if taken is None else float(taken), source, None if offset is None else int(offset))


def row_of(digest: str, taken: Taken) -> tuple[str, float | None, int | None, str]:
    """A :class:`Taken` as a row for ``FeatureCache.put_dates``."""
    return digest, None if not taken.known else taken.seconds, taken.offset, taken.source
