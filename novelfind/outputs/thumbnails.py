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
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from PIL import Image

from novelfind.base import door
from novelfind.base.devices import available_cpus
from novelfind.base.safe_text import display
from novelfind.cache import guard, recovery, schema
from novelfind.errors import CacheError, FileRefused
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
THUMBNAIL_APPLICATION_ID = 0x4E564654  # "NVFT" in the SQLite header: novelfind's thumbnail cache
THUMBNAIL_SCHEMA_VERSION = 1
# One kept thumbnail's JPEG at most (a 256 px one takes 10 to 60 KB), and a clip's frame side at most: a
# row beyond them is damage, never fetched.
MAX_THUMBNAIL_BYTES = 1 << 20
MAX_FRAME_SIDE = 1 << 16
THUMBNAIL_QUERY_TIMEOUT_S = 60.0  # one statement on the thumbnail cache (a lookup takes microseconds)
_THUMBS = (
    "CREATE TABLE IF NOT EXISTS thumbs (path BLOB, size INTEGER, at REAL, file_size INTEGER, "
    "mtime_ns INTEGER, width INTEGER, height INTEGER, jpeg BLOB, used INTEGER, PRIMARY KEY (path, size, at))"
)
# The rows of the shape novelfind writes, checked in SQL before anything is fetched: a 400 MB integer
# where the JPEG belongs (``bytes(400000000)`` in Python), text, a 200 MB blob are not read, and dropped.
VALID_ROW = (
    "typeof(file_size) = 'integer' AND typeof(mtime_ns) = 'integer' AND typeof(used) = 'integer' "
    f"AND typeof(jpeg) = 'blob' AND length(jpeg) BETWEEN 3 AND {MAX_THUMBNAIL_BYTES} "
    "AND substr(jpeg, 1, 2) = x'ffd8' AND ((width IS NULL AND height IS NULL) OR ("
    f"typeof(width) = 'integer' AND typeof(height) = 'integer' AND width BETWEEN 1 AND {MAX_FRAME_SIDE} "
    f"AND height BETWEEN 1 AND {MAX_FRAME_SIDE}))"
)


def _at_key(at: float | None) -> float:
    return -1.0 if at is None else float(at)


class ThumbnailCache:
    """The report's JPEG thumbnails of earlier runs, by path, size and clip time, each valid while its
    file keeps the size and modification time of the file it was made from (as the library door opens it
    now, and as it was ranked): a re-scan whose report shows the same photos decodes none of them again.
    Best effort: a cache that cannot be opened, read or written (locked by another run, damaged, on a
    full disk) is passed over, and the thumbnails are made as without it.

    The file is opened through the stores' door (:func:`novelfind.cache.guard.open_store`): in a folder
    of the user's alone, a regular file of the user's (a link there is not followed), created 0600; a file
    refused there, one whose schema novelfind did not make, or a damaged one is named in one warning
    (``on_warning``, else a ``CacheWarning``) and passed over. Every statement runs under a clock, and a
    row is read only when its values have the types and sizes novelfind writes (:data:`VALID_ROW`)."""

    def __init__(
        self,
        path: Path | str,
        max_bytes: int = THUMBNAIL_CACHE_BYTES,
        *,
        on_warning: Callable[[str], None] | None = None,
    ):
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.on_warning = on_warning
        self.conn: sqlite3.Connection | None = None
        self._cookie = 0
        if not self.path.parent.is_dir():
            return  # no feature cache folder either: nothing to keep
        try:
            conn = guard.open_store(
                self.path, what="the thumbnail cache", follow_link=False, isolation_level=None
            )
        except CacheError as err:  # refused by the door
            self._warn(str(err))
            return
        except (OSError, sqlite3.Error):
            return
        conn.query_timeout = THUMBNAIL_QUERY_TIMEOUT_S
        try:
            self._cookie = self._prepare(conn)
        except CacheError as err:
            conn.close()
            self._warn(str(err))
            return
        except sqlite3.Error as err:
            conn.close()
            if recovery.is_damage(err):
                self._warn(
                    f"the thumbnail cache {display(self.path)} is damaged ({err}); not used: delete it"
                )
            return
        self.conn = conn

    def _prepare(self, conn: sqlite3.Connection) -> int:
        """Check that the file is novelfind's thumbnail cache (or new), make its table; its schema version.
        CacheError for a file of another program or a schema novelfind did not make."""
        recovery.check_health(conn)
        app_id, version, objects = schema.header(conn)
        if app_id not in (0, THUMBNAIL_APPLICATION_ID) or version > THUMBNAIL_SCHEMA_VERSION:
            raise CacheError(
                f"the thumbnail cache {display(self.path)} is not one this novelfind made; not used: "
                "move it aside or delete it"
            )
        self._check_schema(conn)
        conn.execute("BEGIN IMMEDIATE")
        try:
            self._check_schema(conn)  # again, under the write lock
            conn.execute(_THUMBS)
            conn.execute(f"PRAGMA application_id = {THUMBNAIL_APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {THUMBNAIL_SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return schema.schema_cookie(conn)

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        what = schema.foreign_object(conn, schema.expected_schema(_THUMBS))
        if what is not None:
            raise CacheError(
                f"the thumbnail cache {display(self.path)} holds {display(what)} that novelfind did not "
                "create; not used: move it aside or delete it"
            )

    def _warn(self, message: str) -> None:
        if self.on_warning is not None:
            self.on_warning(message)
        else:
            warnings.warn(message, recovery.CacheWarning, stacklevel=3)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; the schema checked again first when another process changed it."""
        conn = self.conn
        assert conn is not None
        conn.execute("BEGIN IMMEDIATE")
        try:
            if schema.schema_cookie(conn) != self._cookie:
                self._check_schema(conn)  # a trigger added meanwhile never fires
                self._cookie = schema.schema_cookie(conn)
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise

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
                    f"WHERE path = ? AND size = ? AND at = ? AND {VALID_ROW}",
                    (os.fsencode(path), size, _at_key(at)),
                ).fetchone()
                if row is not None and stats[path] is not None and tuple(row[:2]) == stats[path]:
                    found[path, size, at] = bytes(row[4])
                    if row[2] is not None:
                        frames[Path(path)] = (int(row[2]), int(row[3]))
            if found:
                now = int(time.time())
                with self._write() as conn:
                    conn.executemany(
                        "UPDATE thumbs SET used = ? WHERE path = ? AND size = ? AND at = ?",
                        [(now, os.fsencode(p), s, _at_key(a)) for p, s, a in found],
                    )
        except (sqlite3.Error, CacheError):
            pass  # what was found stands; the rest is made again
        return found, frames

    def put(
        self,
        made: Mapping[Thumb, bytes | None],
        frames: Mapping[Path, tuple[int, int]],
        seen: Mapping[Path, Stat] | None = None,
    ) -> None:
        """Keep the thumbnails made (None: unreadable, not kept), each under the (size, modification time
        in ns) of the file it was made from (``seen``: what the library door opened; a file not in it is
        not kept; without ``seen``, the file as the door opens it now), then trim the cache to
        ``max_bytes``, dropping those used longest ago, and any row not of the shape novelfind writes."""
        if self.conn is None:
            return
        now = int(time.time())
        rows = []
        for (path, size, at), jpeg in made.items():
            stat = seen.get(Path(path)) if seen is not None else self._stat(Path(path), None)
            if jpeg is None or stat is None or len(jpeg) > MAX_THUMBNAIL_BYTES:
                continue
            width, height = frames.get(Path(path), (None, None))
            rows.append((os.fsencode(path), size, _at_key(at), *stat, width, height, jpeg, now))
        try:
            with self._write() as conn:
                conn.executemany("INSERT OR REPLACE INTO thumbs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
                conn.execute(f"DELETE FROM thumbs WHERE NOT ({VALID_ROW})")
                conn.execute(
                    "DELETE FROM thumbs WHERE rowid IN (SELECT rowid FROM (SELECT rowid, sum(length(jpeg)) "
                    "OVER (ORDER BY used DESC, rowid DESC) AS total FROM thumbs) WHERE total > ?)",
                    (int(self.max_bytes),),
                )
        except (sqlite3.Error, CacheError):
            pass  # nothing kept this time

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
