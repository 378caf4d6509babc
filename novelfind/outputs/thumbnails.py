"""Thumbnails of the picks for the report and the contact sheet, made in decode worker processes and
kept for the next report.

Each photo is decoded once for every size it is shown at (a pick's 256 px, a neighbour's 160, a
member's 96): JPEG's reduced-scale decode to the largest, each smaller one made from the larger, and the
report's JPEG data encoded there too, so the scanning process only assembles the page. A photo is
untrusted input, and only a process can be stopped when its decode runs past the limit
(``--decode-timeout``): the work goes to the scan's decode processes
(:func:`novelfind.extract.decoders.pillow.decode_each`), under the same limit and decoded-pixels budget.
The report's thumbnails are kept for the next report (:class:`ThumbnailCache`), so a re-scan showing
the same photos decodes none of them again.

Every file is opened through the library door (:mod:`novelfind.base.door`) as the file that was ranked:
its size and modification time then (``expect``), no link followed, no FIFO waited on. A file the door
refuses (someone renamed a link to a private photo over a pick after the ranking) gets no thumbnail, and
the output names it (:attr:`Made.refused`); a kept thumbnail is used only while the file the door opens
now is the one it was made from.

A clip is shown by its frame at its novel moment (:func:`clip_moment`), its times as ``0:07``
(:func:`clock`); both outputs show them the same way.
"""

from __future__ import annotations

import io
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, NamedTuple

from PIL import Image

from novelfind.base import door
from novelfind.base.devices import available_cpus
from novelfind.errors import FileRefused
from novelfind.extract.decoders.pillow import decode_each
from novelfind.media.decode import decode_processes_within_budget
from novelfind.media.kinds import kind_of
from novelfind.picks import Pick

Thumb = tuple[Path, int, "float | None"]  # a thumbnail wanted: path, size, and a clip's time (None: a photo)
# what a decode worker makes of one file: its path, the sizes wanted, a clip's time, whether to encode
# them as JPEG (the report) or return images (the contact sheet), and the size and modification time the
# file must still have (None: as it is)
ThumbTask = tuple[str, tuple[int, ...], "float | None", bool, "tuple[int, int] | None"]
Stat = tuple[int, int]  # a file's (size, modification time in ns)
MAX_THUMBNAIL_WORKERS = 8  # decode processes making the report's and the contact sheet's thumbnails


# ---------------------------------------------------------------------------------------------
# Thumbnails (decoded like the pipeline does: orientation, modes, reduced JPEG decode, RAW previews),
# in decode worker processes.


class Thumbnails(NamedTuple):
    """One file's thumbnails, by size: JPEG bytes (``encode``) or PIL images; a clip's frame size; the
    (size, modification time in ns) of the file they were made from; or, with no images, why the library
    door refused the file."""

    images: dict[int, Any]
    frame: tuple[int, int] | None = None  # a clip's: width, height of its frames (a photo: None)
    seen: Stat | None = None
    refused: str | None = None


def thumbnails_of(
    path: str,
    sizes: Sequence[int],
    at: float | None = None,
    encode: bool = False,
    expect: Stat | None = None,
) -> Thumbnails:
    """Run in a decode worker: ``path``'s thumbnails, the longest side of each one of ``sizes`` px, made
    from the file of size and modification time ``expect`` (None: as it is). Raises for a file that
    cannot be read (the worker reports it as None); one the library door refuses (a link, not a regular
    file, changed) gives no images and the reason. One decode for all sizes: the largest first (a JPEG
    decoded at a reduced scale no smaller than it), each smaller one from the one before. A clip's is its
    frame at ``at`` seconds (its novel moment; None: its first keyframe)."""
    try:
        with door.recording() as opened:
            img, frame = kind_of(path).picture(Path(path), min_side=max(sizes), at=at, expect=expect)
    except FileRefused as refused:
        return Thumbnails({}, refused=str(refused))
    made: dict[int, Any] = {}
    for size in sorted(set(sizes), reverse=True):
        img.thumbnail((size, size), Image.Resampling.LANCZOS)  # in place: the next size starts here
        made[size] = encode_jpeg(img) if encode else img.copy()
    return Thumbnails(made, frame, opened[0] if opened else None)


class ThumbnailDecoder:
    """Thumbnails made in decode worker processes, under the decode time limit and the decode budget
    as the scan's own decodes are: a photo that takes too long is stopped with its process and gets the
    placeholder. ``make`` (path, sizes, clip time, encode) -> :class:`Thumbnails` is what a worker runs."""

    make: Callable[..., Thumbnails] = staticmethod(thumbnails_of)

    def __init__(self, workers: int, timeout: float | None = None):
        self.workers = workers
        self.timeout = timeout

    def thumbnails(self, tasks: Sequence[ThumbTask]) -> Iterator[tuple[int, Thumbnails | None]]:
        """(position in ``tasks``, its thumbnails) as each is made, in order; None where the file
        cannot be read or took too long. Closing it early stops the processes."""
        return decode_each(self.make, tasks, self.workers, self.timeout)


class Made(NamedTuple):
    """The thumbnails of :func:`make_thumbnails`: by (path, size, clip time), None where unreadable; the
    frame size of each clip read; and the files the library door refused, with the reason."""

    thumbs: dict[Thumb, Any]
    frames: dict[Path, tuple[int, int]]
    refused: dict[Path, str]


def make_thumbnails(
    wanted: Sequence[Thumb],
    timeout: float | None,
    *,
    encode: bool = False,
    on_progress: Callable[[int, int], None] | None = None,
    cache: ThumbnailCache | None = None,
    expect: Mapping[Path, Stat] | None = None,
) -> Made:
    """The thumbnails of (path, size, clip time) triples, each file decoded once for all its sizes, by a
    few decode processes: no more than one per core, nor than the decoded-pixels budget leaves memory
    for. ``encode``: as JPEG bytes (else PIL images); ``on_progress(done, total)`` counts the files;
    ``cache``: JPEG thumbnails of earlier runs, taken where their files are unchanged, and the new ones
    kept there (with ``encode``); ``expect``: the (size, modification time in ns) each file was ranked
    with, which it must still have (a file not in it: as it is)."""
    expect = {Path(path): tuple(stat) for path, stat in (expect or {}).items()}
    wanted = [(Path(path), size, at) for path, size, at in dict.fromkeys(wanted)]
    kept, frames = cache.get(wanted, expect) if cache is not None and encode else ({}, {})
    sizes: dict[tuple[Path, float | None], list[int]] = {}
    for path, size, at in wanted:
        if (path, size, at) not in kept:
            sizes.setdefault((path, at), []).append(size)
    if not sizes:
        if on_progress is not None and kept:
            on_progress(1, 1)
        return Made(dict(kept), frames, {})
    sources = list(sizes)
    tasks = [(os.fspath(path), tuple(sizes[path, at]), at, encode, expect.get(path)) for path, at in sources]
    workers = min(MAX_THUMBNAIL_WORKERS, available_cpus(), decode_processes_within_budget(), len(tasks))
    decoder = ThumbnailDecoder(max(1, workers), timeout)
    made = Made({}, dict(frames), {})
    seen: dict[Path, Stat] = {}
    with closing(decoder.thumbnails(tasks)) as results:  # closed early: the processes are stopped
        for done, (i, result) in enumerate(results, 1):
            path, at = sources[i]
            for size in sizes[path, at]:
                made.thumbs[path, size, at] = None if result is None else result.images.get(size)
            if result is not None and result.refused is not None:
                made.refused[path] = result.refused
            if result is not None and result.seen is not None:
                seen[path] = result.seen
            if result is not None and result.frame is not None:
                made.frames[path] = result.frame
            if on_progress is not None:
                on_progress(done, len(tasks))
    if cache is not None and encode:
        cache.put(made.thumbs, made.frames, seen)
    made.thumbs.update(kept)
    return made


# The report's thumbnails, kept for the next report (``ThumbnailCache``): at most this many bytes of JPEG;
# past it, those used longest ago go. 256 + 160 + 96 px of a photo take ~25 KB: 64 MB keeps ~2,500 photos.
THUMBNAIL_CACHE_BYTES = 64 << 20
THUMBNAIL_CACHE_NAME = "thumbnails.sqlite"  # beside the feature cache


def _at_key(at: float | None) -> float:
    return -1.0 if at is None else float(at)


class ThumbnailCache:
    """The report's JPEG thumbnails of earlier runs, by path, size and clip time, each valid while its
    file keeps the size and modification time of the file it was made from (as the library door opens it
    now, and as it was ranked): a re-scan whose report shows the same photos decodes none of them again.
    Best effort: a cache that cannot be opened, read or written (locked by another run, damaged, on a
    full disk) is passed over, and the thumbnails are made as without it. The file is created for its
    owner alone (0600), never through a symbolic link."""

    def __init__(self, path: Path | str, max_bytes: int = THUMBNAIL_CACHE_BYTES):
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.conn: sqlite3.Connection | None = None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
            os.close(fd)
            conn = sqlite3.connect(self.path, timeout=5.0)
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS thumbs (path BLOB, size INTEGER, at REAL, file_size INTEGER, "
                    "mtime_ns INTEGER, width INTEGER, height INTEGER, jpeg BLOB, used INTEGER, "
                    "PRIMARY KEY (path, size, at))"
                )
                conn.commit()
            except sqlite3.Error:
                conn.close()
                raise
            self.conn = conn
        except (OSError, sqlite3.Error):
            self.conn = None

    @staticmethod
    def _stat(path: Path, expect: Stat | None) -> Stat | None:
        """(size, modification time in ns) of the file the library door opens at ``path`` now, which must
        be ``expect`` when given; None when it refuses it or cannot open it."""
        try:
            fd, st = door.open_fd(path, expect=expect)
        except OSError:
            return None
        os.close(fd)
        return st.st_size, st.st_mtime_ns

    def get(
        self, wanted: Sequence[Thumb], expect: Mapping[Path, Stat] | None = None
    ) -> tuple[dict[Thumb, bytes], dict[Path, tuple[int, int]]]:
        """The thumbnails of ``wanted`` made from the files as they are now (``expect``: as they were
        ranked), and the clips' frame sizes."""
        found: dict[Thumb, bytes] = {}
        frames: dict[Path, tuple[int, int]] = {}
        if self.conn is None:
            return found, frames
        expect = expect or {}
        stats = {path: self._stat(Path(path), expect.get(Path(path))) for path, _, _ in wanted}
        try:
            for path, size, at in wanted:
                row = self.conn.execute(
                    "SELECT file_size, mtime_ns, width, height, jpeg FROM thumbs "
                    "WHERE path = ? AND size = ? AND at = ?",
                    (os.fsencode(path), size, _at_key(at)),
                ).fetchone()
                if row is not None and stats[path] is not None and tuple(row[:2]) == stats[path]:
                    found[path, size, at] = bytes(row[4])
                    if row[2] is not None:
                        frames[Path(path)] = (int(row[2]), int(row[3]))
            if found:
                now = int(time.time())
                self.conn.executemany(
                    "UPDATE thumbs SET used = ? WHERE path = ? AND size = ? AND at = ?",
                    [(now, os.fsencode(p), s, _at_key(a)) for p, s, a in found],
                )
                self.conn.commit()
        except sqlite3.Error:
            pass  # what was found stands; the rest is made again
        return found, frames

    def put(
        self,
        made: Mapping[Thumb, bytes | None],
        frames: Mapping[Path, tuple[int, int]],
        seen: Mapping[Path, Stat],
    ) -> None:
        """Keep the thumbnails made (None: unreadable, not kept), each under the (size, modification time
        in ns) of the file it was made from (``seen``: what the library door opened; a file not in it is
        not kept), then trim the cache to ``max_bytes``, dropping those used longest ago."""
        if self.conn is None:
            return
        now = int(time.time())
        rows = []
        for (path, size, at), jpeg in made.items():
            stat = seen.get(Path(path))
            if jpeg is None or stat is None:
                continue
            width, height = frames.get(Path(path), (None, None))
            rows.append((os.fsencode(path), size, _at_key(at), *stat, width, height, jpeg, now))
        try:
            self.conn.executemany("INSERT OR REPLACE INTO thumbs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            total, stale = 0, []
            for rowid, length in self.conn.execute(
                "SELECT rowid, length(jpeg) FROM thumbs ORDER BY used DESC, rowid DESC"
            ).fetchall():
                total += length
                if total > self.max_bytes:
                    stale.append((rowid,))
            self.conn.executemany("DELETE FROM thumbs WHERE rowid = ?", stale)
            self.conn.commit()
        except sqlite3.Error:
            try:
                self.conn.rollback()
            except sqlite3.Error:
                pass

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def __enter__(self) -> ThumbnailCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def encode_jpeg(img: Image.Image, quality: int = 82) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality, optimize=True)
    return buf.getvalue()


def clip_moment(p: Pick) -> float | None:
    """Where a clip's thumbnail is taken: the frame that made it novel (None for a photo)."""
    return None if p.clip is None else p.clip.moment_time


def clock(seconds: float) -> str:
    """``0:07``, ``12:34``, ``1:02:03``: a time in a clip, to the second."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
