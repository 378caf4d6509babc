"""The capture dates of a scan: each file's from its decode, else from the cache, else read from its
header in decode processes, never in the scanning process.

:func:`scan_dates` completes what the extraction read (``Extraction.taken``): a file whose vector came
from the cache has its date in the cache's dates table too, and one whose date is not there (a cache
written before the table, a decoder that reads no date) has its header read once, by
:func:`read_in_processes`, under a decode's limits (the decode time limit, the decoded-pixels budget,
the address-space limit: a file of the library is untrusted input), and its date stored. The rules that
turn these into one date per photo (sidecars, file times) are
:func:`novelfind.media.dates.library_dates`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from typing import Any

from novelfind.base.devices import available_cpus
from novelfind.extract.dating import embedded_date, library_dates, row_of, stored
from novelfind.extract.decoders.pillow import decode_each
from novelfind.media.dates import NONE, Dates, Taken
from novelfind.media.decode import decode_processes_within_budget
from novelfind.media.walk import FileList

STORE_EVERY = 512  # dates read from headers are written to the cache this many at a time
PROGRESS_EVERY = 256  # headers read between two progress events
HEADER_CHUNK = 64  # headers read by one task of a decode process (0.35 ms each: a task costs more)


def _dates_of(paths: Sequence[str]) -> list[Taken]:
    """Run in a decode process: :func:`embedded_date` of each of ``paths``."""
    return [embedded_date(path) for path in paths]


def read_in_processes(paths: Sequence[str], timeout: float | None = None) -> Iterator[tuple[int, Taken]]:
    """(position in ``paths``, :func:`embedded_date`) of each, read in decode processes under the limits
    a decode has there (``pillow.decode_each``): the decode time limit (``timeout`` seconds; None: the
    default), the decoded-pixels budget and the address-space limit, never in the scanning process. The
    files go ``HEADER_CHUNK`` to a task; a task that fails (a header that took too long, a reader that
    brought its process down) has each of its files read again alone, and one that fails alone is NONE.
    In order of position, except for those read again, which come last."""
    chunks = [tuple(paths[k : k + HEADER_CHUNK]) for k in range(0, len(paths), HEADER_CHUNK)]
    if not chunks:
        return
    workers = max(1, min(available_cpus(), decode_processes_within_budget(), len(chunks)))
    again: list[int] = []
    with closing(decode_each(_dates_of, [(chunk,) for chunk in chunks], workers, timeout)) as results:
        for c, got in results:  # closed early (Ctrl-C): the processes are stopped
            if got is None:
                again.extend(range(c * HEADER_CHUNK, c * HEADER_CHUNK + len(chunks[c])))
                continue
            for k, taken in enumerate(got):
                yield c * HEADER_CHUNK + k, taken
    if again:
        tasks = [(paths[i],) for i in again]
        with closing(decode_each(embedded_date, tasks, min(workers, len(again)), timeout)) as results:
            for k, taken in results:
                yield again[k], NONE if taken is None else taken


def scan_dates(
    files: FileList,
    store: Any,
    *,
    decoded: Sequence[Taken | None] = (),
    twins: Callable[[int], Sequence[str]] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    read: Callable[[str], Taken] | None = None,
    timeout: float | None = None,
    now: float | None = None,
) -> Dates:
    """The capture dates of a scan's files (row i for file i). ``decoded[i]``: the date file i's decode
    read (``Extraction.taken``; None: none was read). Every other file's date comes from ``store``
    (``FeatureCache.dates_by_stat`` / ``put_dates``; a ``NullCache`` keeps nothing) when it holds one;
    else its header is read once (``on_progress(done, to_read)``) and the date stored for the next scan,
    ``STORE_EVERY`` at a time. A cache that cannot take them is one warning.

    The headers are read in decode processes (:func:`read_in_processes`, ``timeout``: the decode time
    limit), under a decode's limits: a file of the library is untrusted input. ``read``: a reader to
    call in this process instead (a test's).

    Measured (``scripts/bench_dates.py``, 2 cores, 300 JPEGs with a camera's Exif): 5.5 ms of CPU for
    the 300 when their dates are cached, 138 ms when every header is read and stored (0.35 ms a header)
    in this process; read in decode processes, the step takes 0.36 s of wall time instead of 0.11 s
    (medians of 5, the machine loaded), most of it starting the processes.
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
    missing = [i for i in range(n) if cached[i] is None]
    wanted = [paths[i] for i in missing]
    if read is None:
        got: Iterator[tuple[int, Taken]] = read_in_processes(wanted, timeout)
    else:
        got = ((k, read(path)) for k, path in enumerate(wanted))
    try:
        with closing(got):
            for k, taken in got:
                cached[missing[k]] = taken
                on_read(missing[k], taken)
    finally:
        flush()  # Ctrl-C keeps the dates read so far
    return library_dates(paths, files.mtimes_ns, cached=cached, twins=twins, now=now)
