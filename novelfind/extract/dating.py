"""The capture dates of an extraction's files: one reader per file kind, and the dates of a scan.

A file's own date travels with its vector: the decode that reads a file for the model also reads its
date (:func:`novelfind.extract.stage.decode_file`, through :func:`embedded_date`), the stage stores it in
the cache's dates table in the same commit as the vector, and :class:`~novelfind.extract.stage.Extraction`
hands it on (``taken``). :func:`scan_dates` completes the scan's dates: a file whose vector came from
the cache has its date in the cache's dates table too, and one whose date is not there (a cache written
before the table, a decoder that reads no date) has its header read once and its date stored. The rules
that turn these into one date per photo (sidecars, file times) are
:func:`novelfind.media.dates.library_dates`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from novelfind.media import dates
from novelfind.media.dates import NONE, Dates, Taken
from novelfind.media.kinds import kind_of
from novelfind.media.walk import FileList

STORE_EVERY = 512  # dates read from headers are written to the cache this many at a time
PROGRESS_EVERY = 256  # headers read between two progress events


def embedded_date(path: str | os.PathLike[str], now: float | None = None) -> Taken:
    """What the file's own bytes say, by the reader of its kind (never raises): the value the cache keeps
    for its digest."""
    read = {"exif": dates.image_date, "raw": dates.raw_date, "clip": dates.clip_date}[
        kind_of(path).date_source
    ]
    return read(path, now)


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


def scan_dates(
    files: FileList,
    store: Any,
    *,
    decoded: Sequence[Taken | None] = (),
    twins: Callable[[int], Sequence[str]] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    read: Callable[[str], Taken] = embedded_date,
    now: float | None = None,
) -> Dates:
    """The capture dates of a scan's files (row i for file i). ``decoded[i]``: the date file i's decode
    read (``Extraction.taken``; None: none was read). Every other file's date comes from ``store``
    (``FeatureCache.dates_by_stat`` / ``put_dates``; a ``NullCache`` keeps nothing) when it holds one;
    else its header is read once with ``read`` (``on_progress(done, to_read)``) and the date stored for
    the next scan, ``STORE_EVERY`` at a time. A cache that cannot take them is one warning.

    Measured (``scripts/bench_dates.py``, 2 cores, 300 JPEGs with a camera's Exif): 5.5 ms of CPU for
    the 300 when their dates are cached, 138 ms when every header is read and stored (0.35 ms a header).
    """
    n = len(files)
    cached: list[Taken | None] = [decoded[i] if i < len(decoded) else None for i in range(n)]
    lookup = [i for i in range(n) if cached[i] is None]
    digests: dict[int, str | None] = {}
    if lookup:
        for i, (digest, hit) in zip(lookup, store.dates_by_stat(files.take(lookup)), strict=True):
            digests[i] = digest
            if hit is not None:
                cached[i] = stored(hit)
    to_read = sum(1 for c in cached if c is None)
    pending: list[tuple[str, float | None, int | None, str]] = []
    state = {"done": 0, "writable": True}

    def flush() -> None:
        rows = list(pending)
        pending.clear()
        if not rows or not state["writable"]:
            return
        try:
            store.put_dates(rows)
        except Exception as err:  # noqa: BLE001 - CacheWriteError: the dates are read again next time
            state["writable"] = False
            if on_warning is not None:
                on_warning(f"{err}; capture dates are not cached")

    def on_read(i: int, taken: Taken) -> None:
        digest = digests.get(i)
        if digest is not None:
            pending.append(row_of(digest, taken))
            if len(pending) >= STORE_EVERY:
                flush()
        state["done"] += 1
        if on_progress is not None and (state["done"] % PROGRESS_EVERY == 0 or state["done"] == to_read):
            on_progress(state["done"], to_read)

    paths = [os.fsdecode(files.raw_path(i)) for i in range(n)]
    try:
        return library_dates(
            paths, files.mtimes_ns, cached=cached, twins=twins, read=read, on_read=on_read, now=now
        )
    finally:
        flush()  # Ctrl-C keeps the dates read so far
