"""The feature cache's store: :class:`FeatureCache` (lookups by stat and by digest, writes in
batches, chunked reads, the ``rankings`` and ``clips`` records, maintenance), :class:`NullCache`
(no cache) and :func:`open_store` (the store a scan uses).

Each ``put_many`` is one transaction, so a run killed at any moment loses at most the batch in
flight. WAL mode and a busy timeout let several runs share one cache. The file's format is
:mod:`novelfind.cache.schema`; a damaged file and a busy one are handled by
:mod:`novelfind.cache.recovery`.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence, Set
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from novelfind.base import dirs
from novelfind.base.safe_text import display
from novelfind.cache import failures, guard
from novelfind.cache.recovery import (
    BUSY_TIMEOUT_S,
    SQLITE_BUSY,
    SQLITE_FULL,
    SQLITE_LOCKED,
    CacheWarning,
    CacheWriteError,
    check_health,
    errorcode,
    file_identity,
    is_damage,
    move_aside,
    open_error,
    retry_busy,
)
from novelfind.cache.schema import (
    SCHEMA_VERSION,
    check_ours,
    check_schema,
    create_tables,
    header,
    schema_cookie,
)
from novelfind.errors import CacheError

if TYPE_CHECKING:
    from novelfind.media.walk import ImageFile


MMAP_BYTES = 1 << 30  # memory-mapped reads: lookups in a big cache ~2x faster than with read()
# Pages of a cache file created for float16 vectors. A row lives on one page unless it overflows, so
# SQLite's 4 KiB pages hold one 2.6 KB float16 vector each (4.4 KB a photo for 10,000 photos); 16 KiB pages
# hold six (3.0 KB a photo). float32 vectors (5.2 KB) take 5.8 KB a photo with either, so a float32 cache
# keeps the default. A file keeps the pages it was created with.
FLOAT16_PAGE_BYTES = 16384
_CHUNK = 500  # paths per "IN (...)" query; well below SQLite's 999-variable floor
UPGRADE_CHUNK = 900  # vectors renamed per transaction by ``upgrade`` (keeps the WAL small); < 999 variables
# How vectors are stored. A blob's length says which (dim * 2 or dim * 4 bytes), so one cache may hold
# both and no schema change was needed: a float32 cache keeps working, its vectors are read as they
# are, and new ones are written in the cache's dtype.
DTYPES = {"float16": "<f2", "float32": "<f4"}
DEFAULT_DTYPE = "float32"
FLOAT16_MAX = 65504.0  # larger values are stored in float32
# The norm above which a vector read back is taken for damage when the model gives no bound of its own:
# far above any image model's vector, far below where float32 sums of squares overflow (3.4e38).
DEFAULT_MAX_NORM = 1e15
# The longest vector read: far above any image model's (MobileNet-V2's pooled vector has 1,280 values). A
# row claiming more, or a blob whose length is not its dimension's, is left in the file, unread: lookups
# check the lengths in SQL, so a planted 200 MB blob is never loaded.
MAX_DIM = 1 << 16
# The rows a lookup reads as vectors: a blob of float16 or float32 values of a plausible dimension.
_SOUND_ROW = (
    f"typeof(v.data) = 'blob' AND typeof(v.dim) = 'integer' AND v.dim BETWEEN 1 AND {MAX_DIM} "
    "AND length(v.data) IN (2 * v.dim, 4 * v.dim)"
)
# The rows of ``files`` whose path is one novelfind writes: bytes (os.fsencode), no longer than a path can be.
_PATH_ROW = "typeof(path) = 'blob' AND length(path) <= 4096"
MAX_TEXT = 4096  # characters of a digest, model key or version read (theirs are under 200)


def _short_text(column: str) -> str:
    """The SQL condition that ``column`` holds text of a plausible length (a 200 MB key is never read)."""
    return f"typeof({column}) = 'text' AND length({column}) <= {MAX_TEXT}"


MAX_CLIP_RECORD = 1 << 16  # bytes of a clip's record (video.ClipInfo as JSON: some hundred)


def _encode_path(path: str | os.PathLike[str]) -> bytes:
    return os.fsencode(os.fspath(path))


def _stat_keys(files: Sequence[Any]) -> list[tuple[bytes, int, int]]:
    """(path bytes, size, mtime_ns) per file record; straight from a ``walk.FileList``'s columns."""
    records = getattr(files, "records", None)
    if records is not None:
        return list(records())
    return [(_encode_path(f.path), int(f.size), int(f.mtime_ns)) for f in files]


def _storable(vector: np.ndarray, dtype: str) -> np.ndarray:
    """The vector in the storage type: float16 when asked for and every value fits, else float32."""
    if dtype == "float16" and float(np.abs(vector).max(initial=0.0)) <= FLOAT16_MAX:
        return np.ascontiguousarray(vector, dtype="<f2")
    return np.ascontiguousarray(vector, dtype="<f4")


def _to_blob(vector: np.ndarray, dtype: str = "float32") -> bytes:
    return _storable(vector, dtype).tobytes()


def _sound(
    blobs: Sequence[tuple[bytes, int]], max_norm: float, min_value: float | None = None
) -> np.ndarray:
    """bool (N,): which stored vectors ``(blob, dim)`` are finite with a norm of at most ``max_norm`` and,
    given ``min_value``, no value below it.

    One pass over each group of equal layout: the squared norms in float32, where a NaN fails the
    comparison and an infinite value (or one so large that its square overflows) exceeds
    ``max_norm ** 2`` (at most 1e30, well inside float32), so no separate finiteness pass is needed.
    A blob of neither length is left to :func:`_from_blob`, which rejects it.
    """
    sound = np.ones(len(blobs), bool)
    groups: dict[tuple[int, str], list[int]] = {}
    for i, (blob, dim) in enumerate(blobs):
        layout = "<f4" if len(blob) == 4 * dim else "<f2" if len(blob) == 2 * dim else None
        if layout is not None:
            groups.setdefault((dim, layout), []).append(i)
    for (dim, layout), rows in groups.items():
        vectors = np.frombuffer(b"".join(blobs[i][0] for i in rows), layout).reshape(len(rows), dim)
        vectors = vectors.astype(np.float32, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):
            ok = np.einsum("ij,ij->i", vectors, vectors) <= max_norm * max_norm
            if min_value is not None:
                ok &= vectors.min(axis=1) >= min_value
            sound[rows] = ok
    return sound


def _from_blob(blob: bytes, dim: int) -> np.ndarray | None:
    if len(blob) == 4 * dim:
        return np.frombuffer(blob, dtype="<f4").astype(np.float32)  # a writable, native-order copy
    if len(blob) == 2 * dim:
        return np.frombuffer(blob, dtype="<f2").astype(np.float32)
    return None


class DigestSet(Set[str]):
    """A set of file digests, compact: the 128-bit hex digests the decoder makes as 16 bytes each in one
    sorted array (a frozenset of their strings costs about 110 bytes each: 1 GB for 10 million, copied
    into every decode process); anything else in a plain set."""

    def __init__(self, digests: Iterable[str] = ()) -> None:
        packed, other = bytearray(), set()
        for d in digests:
            if len(d) == 32:
                try:
                    packed += bytes.fromhex(d)
                    continue
                except ValueError:
                    pass
            other.add(d)
        self._sorted = np.sort(np.frombuffer(bytes(packed), dtype="S16"))  # (N,)
        self._other = frozenset(other)

    def __contains__(self, digest: object) -> bool:
        if not isinstance(digest, str):
            return False
        if len(digest) == 32:
            try:
                key = np.array(bytes.fromhex(digest), dtype="S16")
            except ValueError:
                return digest in self._other
            # an S16 element loses trailing zero bytes when read out, so compare positions, not values
            where = np.searchsorted(self._sorted, key, "left")
            return bool(np.searchsorted(self._sorted, key, "right") > where)
        return digest in self._other

    def __len__(self) -> int:
        return len(self._sorted) + len(self._other)

    def __iter__(self) -> Iterator[str]:
        data = self._sorted.tobytes()
        for i in range(0, len(data), 16):
            yield data[i : i + 16].hex()
        yield from self._other

    def __repr__(self) -> str:
        return f"<DigestSet of {len(self)}>"


class FeatureCache:
    """Vectors made by one model (``model_key``), stored in the SQLite file at ``path``.

    Raises ``CacheError`` when the file cannot be opened or created (a read-only or missing
    location, a database of another program, a cache from a newer novelfind). ``model_key`` may
    be None for the maintenance commands (``info``, ``prune``, ``clear``); lookups and writes then
    raise ``ValueError``.

    ``on_warning(message)`` receives survivable problems (a damaged cache moved aside); without it
    they go to ``warnings.warn`` as ``CacheWarning``. ``recovered_from`` is where a damaged file
    was moved, or None.

    ``dtype``: how new vectors are stored, ``"float16"`` (2 bytes a value) or ``"float32"``; vectors
    already stored are read in whichever they were written. :meth:`stored` gives a vector as it will
    read back, so a scan ranks the same values the first time as when it reads them again.

    Vectors read back are checked (the file can be edited by anyone who can write it, or damaged on
    disk): one with a NaN or infinite value, a norm above ``max_norm`` (the model's bound, say), or a value
    below ``min_value`` (MobileNet-V2's pooled values are never negative) is treated as a damaged row.
    Lookups do not find it, it is deleted from the cache so that the photo is extracted again, and
    ``on_warning`` names the photo once.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        model_key: str | None = None,
        *,
        on_warning: Callable[[str], None] | None = None,
        busy_timeout: float = BUSY_TIMEOUT_S,
        dtype: str = DEFAULT_DTYPE,
        max_norm: float = DEFAULT_MAX_NORM,
        min_value: float | None = None,
    ):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        self.path = Path(os.fspath(path)).expanduser().absolute()
        self.model_key = model_key
        self.dtype = dtype
        self.max_norm = float(max_norm)
        self.min_value = None if min_value is None else float(min_value)
        self._cookie: int | None = None  # the schema version check_schema last passed
        self.writes_disabled = False
        self.recovered_from: Path | None = None
        self._busy_timeout = busy_timeout
        self._on_warning = on_warning
        self._lock = threading.Lock()
        self._conn = self._open_or_recover()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        model_key: str | None = None,
        *,
        create: bool = True,
        on_warning: Callable[[str], None] | None = None,
        dtype: str = DEFAULT_DTYPE,
        max_norm: float = DEFAULT_MAX_NORM,
        min_value: float | None = None,
    ) -> FeatureCache:
        """The cache at ``path``; None means the user's cache (``$NOVELFIND_CACHE``, else
        ``~/.cache/novelfind/features.sqlite``: :func:`novelfind.base.dirs.feature_cache_path`).

        With ``create`` False a missing file is ``CacheError("no cache at PATH")`` instead of a new,
        empty cache. Use it as a context manager, or call :meth:`close`::

            with novelfind.Cache.open() as cache:
                print(cache.info()["entries"], "vectors")
                cache.prune()
        """
        path = Path(os.fspath(path)).expanduser() if path is not None else dirs.feature_cache_path()
        if not create and not path.exists():
            raise CacheError(f"no cache at {path}")
        return cls(
            path, model_key, on_warning=on_warning, dtype=dtype, max_norm=max_norm, min_value=min_value
        )

    # -- opening -------------------------------------------------------------------------------

    def _open_or_recover(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CacheError(
                f"cannot create the cache folder {self.path.parent}: {err.strerror or err}"
            ) from None
        if self.path.is_dir():
            raise CacheError(f"cache path is a folder: {self.path}")
        identity = file_identity(self.path)
        try:
            return self._open()
        except sqlite3.DatabaseError as err:
            if not is_damage(err):
                raise open_error(self.path, err) from None
            reason = str(err)
        moved = move_aside(self.path, identity)
        if moved is not None:
            self.recovered_from = moved
            self._warn(
                f"the feature cache {self.path} was damaged ({reason}); moved it to {moved} "
                "and started a new one"
            )
        try:
            return self._open()
        except sqlite3.DatabaseError as err:
            raise open_error(self.path, err) from None

    def _open(self) -> sqlite3.Connection:
        conn = guard.connect(
            str(self.path), timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")  # read vectors straight from the page cache
            if self.dtype == "float16":  # takes effect on a new file only (before WAL); else a no-op
                conn.execute(f"PRAGMA page_size = {FLOAT16_PAGE_BYTES}")
            check_health(conn)
            check_ours(self.path, *header(conn))  # before anything writes to a file that may not be ours
            check_schema(conn, self.path)  # and before a trigger planted in it could fire
            # Where WAL is not possible (a file system without shared memory) SQLite keeps the rollback
            # journal, which still keeps each batch atomic.
            retry_busy(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone(), self._busy_timeout)
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: safe against crashes of the process
            self._cookie = None
            with self._write(conn):  # checks the schema again, under the write lock
                create_tables(conn, self.path)
                self._cookie = schema_cookie(conn)  # what we made: the schema later writes expect
        except BaseException:
            conn.close()
            raise
        return conn

    def _warn(self, message: str) -> None:
        if self._on_warning is not None:
            self._on_warning(message)
        else:
            warnings.warn(message, CacheWarning, stacklevel=4)

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def _write(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        """One write transaction (BEGIN IMMEDIATE), retried while another run holds the lock."""
        conn = conn or self._conn
        retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"), self._busy_timeout)
        try:
            # Another process may have changed the schema since it was checked (a trigger added to a
            # cache in a shared folder): checked again, under the lock, before anything here fires it.
            if self._cookie is None or schema_cookie(conn) != self._cookie:
                try:
                    check_schema(conn, self.path)
                except CacheError as err:
                    self.writes_disabled = True  # as for any batch that cannot be written
                    raise CacheWriteError(str(err)) from None
                self._cookie = schema_cookie(conn)
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            raise

    def _require_key(self) -> str:
        if self.model_key is None:
            raise ValueError("this FeatureCache was opened without a model_key")
        return self.model_key

    def _read_error(self, err: sqlite3.Error) -> CacheError:
        return CacheError(f"cannot read the feature cache {self.path}: {err}")

    def _select_in(
        self, sql: str, params: tuple[Any, ...], values: Iterable[Any]
    ) -> Iterator[tuple[Any, ...]]:
        """The rows of ``sql`` (whose last condition is ``IN ({marks})``) for ``values``, looked up
        ``_CHUNK`` distinct values at a time after ``params``. Call with ``self._lock`` held."""
        unique = list(dict.fromkeys(values))
        for start in range(0, len(unique), _CHUNK):
            chunk = unique[start : start + _CHUNK]
            marks = ",".join("?" * len(chunk))
            yield from self._conn.execute(sql.format(marks=marks), (*params, *chunk)).fetchall()

    # -- lookups -------------------------------------------------------------------------------

    def get_by_stat(self, path: str | os.PathLike[str], size: int, mtime_ns: int) -> np.ndarray | None:
        """The vector of the file at ``path`` if it still has this size and mtime, else None."""
        return self.get_many_by_stat([SimpleNamespace(path=path, size=size, mtime_ns=mtime_ns)])[0]

    def get_many_by_stat(self, files: Sequence[ImageFile]) -> list[np.ndarray | None]:
        """``get_by_stat`` for many files at once; the result lines up with ``files``."""
        key = self._require_key()
        found: dict[bytes, tuple[int, int, str, bytes, int]] = {}
        stats = _stat_keys(files)  # [(path bytes, size, mtime_ns)]
        sql = (
            "SELECT f.path, f.size, f.mtime_ns, f.digest, v.data, v.dim FROM files f JOIN vectors v "
            f"ON v.digest = f.digest AND v.model_key = ? WHERE {_SOUND_ROW} AND f.path IN ({{marks}})"
        )
        try:
            with self._lock:
                for path, *hit in self._select_in(sql, (key,), (p for p, _, _ in stats)):
                    found[path] = tuple(hit)
        except sqlite3.Error as err:
            raise self._read_error(err) from None
        for path in self._drop_unsound([(path, *hit[2:]) for path, hit in found.items()]):
            del found[path]
        out: list[np.ndarray | None] = []
        for path, size, mtime_ns in stats:
            hit = found.get(path)
            out.append(None if hit is None or hit[:2] != (size, mtime_ns) else _from_blob(hit[3], hit[4]))
        return out

    def has_many_by_stat(self, files: Sequence[ImageFile], dim: int) -> np.ndarray:
        """bool (N,): which of ``files`` ``get_many_by_stat`` would find a ``dim``-long vector for; the
        vectors themselves are not read (a re-scan of a big library checks millions this way)."""
        key = self._require_key()
        stats = _stat_keys(files)
        found: dict[bytes, tuple[int, int]] = {}
        hits: list[tuple[bytes, str, bytes, int]] = []  # the values are checked too, a chunk at once
        sql = (
            "SELECT f.path, f.size, f.mtime_ns, f.digest, v.data FROM files f JOIN vectors v "
            "ON v.digest = f.digest AND v.model_key = ? "
            "WHERE v.dim = ? AND typeof(v.data) = 'blob' AND length(v.data) IN (?, ?) AND f.path IN ({marks})"
        )
        try:
            with self._lock:
                params = (key, dim, 2 * dim, 4 * dim)
                rows = self._select_in(sql, params, (p for p, _, _ in stats))
                for path, size, mtime_ns, digest, data in rows:
                    found[path] = (size, mtime_ns)
                    hits.append((path, digest, data, dim))
        except sqlite3.Error as err:
            raise self._read_error(err) from None
        for path in self._drop_unsound(hits):
            del found[path]
        return np.fromiter(
            (found.get(path) == (size, mtime_ns) for path, size, mtime_ns in stats), bool, count=len(stats)
        )

    def rows_by_stat(self, files: Sequence[ImageFile], chunk: int = 8192) -> Iterator[np.ndarray]:
        """The vectors of ``files`` in their order, ``chunk`` files at a time: float32 (C, dim) arrays.

        For reading a library's vectors back without holding them all. ``files`` must all be in the
        cache (as a scan that has just stored them knows); CacheError names the first one that is not
        (the cache was cleared or pruned meanwhile).
        """
        for start in range(0, len(files), chunk):
            part = files[start : start + chunk]
            found = self.get_many_by_stat(part)
            missing = next((j for j, v in enumerate(found) if v is None), None)
            if missing is not None:
                raise CacheError(
                    f"the vector of {part[missing].path} is no longer in the feature cache {self.path} "
                    "(cleared or pruned during the scan?)"
                )
            yield np.stack(found)  # (C, dim)

    def digests_by_stat(self, files: Sequence[ImageFile]) -> list[str | None]:
        """The digest of each file's bytes as recorded when it was read, if it still has that size and
        mtime (else None), without reading the file: the ignore list matches a library by these."""
        found: dict[bytes, tuple[int, int, str]] = {}
        encoded = [_encode_path(f.path) for f in files]
        sql = (
            f"SELECT path, size, mtime_ns, digest FROM files WHERE {_short_text('digest')} "
            "AND path IN ({marks})"
        )
        try:
            with self._lock:
                for path, size, mtime_ns, digest in self._select_in(sql, (), encoded):
                    found[path] = (size, mtime_ns, digest)
        except sqlite3.Error as err:
            raise self._read_error(err) from None
        out: list[str | None] = []
        for f, path in zip(files, encoded, strict=True):
            hit = found.get(path)
            out.append(hit[2] if hit is not None and hit[:2] == (f.size, f.mtime_ns) else None)
        return out

    def known_digests(self) -> DigestSet:
        """Digests of every file whose vector this model already has (so its bytes need no decoding)."""
        key = self._require_key()
        try:
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT digest FROM vectors WHERE model_key = ? AND {_short_text('digest')}", (key,)
                )
                batches = iter(lambda: rows.fetchmany(65536), [])  # not row by row: millions of rows
                return DigestSet(digest for batch in batches for (digest,) in batch)
        except sqlite3.Error as err:
            raise self._read_error(err) from None

    def get_by_digest(self, digest: str) -> np.ndarray | None:
        """The vector of any file with these bytes (a moved or renamed file), else None."""
        return self.get_many_by_digest([digest])[0]

    def get_many_by_digest(self, digests: Sequence[str]) -> list[np.ndarray | None]:
        """``get_by_digest`` for many digests; the result lines up with ``digests``."""
        key = self._require_key()
        found: dict[str, tuple[bytes, int]] = {}
        sql = (
            f"SELECT digest, data, dim FROM vectors v WHERE model_key = ? AND {_SOUND_ROW} "
            "AND digest IN ({marks})"
        )
        try:
            with self._lock:
                for digest, data, dim in self._select_in(sql, (key,), digests):
                    found[digest] = (data, dim)
        except sqlite3.Error as err:
            raise self._read_error(err) from None
        for digest in self._drop_unsound([(d, d, *hit) for d, hit in found.items()], by_digest=True):
            del found[digest]
        return [_from_blob(*found[d]) if d in found else None for d in digests]

    def _drop_unsound(
        self, hits: Sequence[tuple[Any, str, bytes, int]], *, by_digest: bool = False
    ) -> list[Any]:
        """The keys of ``hits`` (key, digest, blob, dim) whose vector is not sound (:func:`_sound`).

        Each is deleted from the cache (the photo is then extracted again, and stored anew) and named in
        one warning. A cache that cannot be written keeps it; lookups still do not find it.
        """
        if not hits:
            return []
        sound = _sound([(blob, dim) for _, _, blob, dim in hits], self.max_norm, self.min_value)
        if sound.all():
            return []
        bad = [(key, digest) for (key, digest, _, _), ok in zip(hits, sound, strict=True) if not ok]
        names = [os.fsdecode(key) for key, _ in bad] if not by_digest else []
        try:
            with self._lock:
                for _, digest in bad if by_digest else ():  # a file with those bytes, to name
                    row = self._conn.execute(
                        "SELECT path FROM files WHERE digest = ? AND typeof(path) = 'blob'", (digest,)
                    ).fetchone()
                    names.append(os.fsdecode(row[0]) if row is not None else f"the file with digest {digest}")
            with self._lock, self._write() as conn:
                conn.executemany(
                    "DELETE FROM vectors WHERE digest = ? AND model_key = ?",
                    [(digest, self.model_key) for _, digest in bad],
                )
        except (sqlite3.Error, CacheError):
            pass  # read-only or busy: the vector stays, unused, until a scan can replace it
        for name in names:
            self._warn(
                f"the cached vector of {display(name)} is damaged (not finite, or out of the model's range); "
                "extracting it again"
            )
        return [key for key, _ in bad]

    def dates_by_stat(
        self, files: Sequence[ImageFile]
    ) -> list[tuple[str | None, tuple[float | None, int | None, str] | None]]:
        """Per file, (its digest as recorded when it was read, if it still has that size and mtime; the
        capture date stored for those bytes as (taken, utc_offset, source), or None when none is yet):
        what ``novelfind.media.dates`` needs to read only the headers of photos without a stored date."""
        found: dict[bytes, tuple[int, int, str, Any]] = {}
        stats = _stat_keys(files)
        sql = (
            "SELECT f.path, f.size, f.mtime_ns, f.digest, d.taken, d.utc_offset, d.source FROM files f "
            "LEFT JOIN dates d ON d.digest = f.digest WHERE f.path IN ({marks})"
        )
        try:
            with self._lock:
                for path, size, mtime_ns, digest, taken, offset, source in self._select_in(
                    sql, (), (p for p, _, _ in stats)
                ):
                    date = None if source is None else (taken, offset, source)
                    found[path] = (size, mtime_ns, digest, date)
        except sqlite3.Error as err:
            raise self._read_error(err) from None
        out: list[tuple[str | None, tuple[float | None, int | None, str] | None]] = []
        for path, size, mtime_ns in stats:
            hit = found.get(path)
            out.append((None, None) if hit is None or hit[:2] != (size, mtime_ns) else hit[2:])
        return out

    def put_dates(self, rows: Sequence[tuple[str, float | None, int | None, str]]) -> None:
        """Store (digest, taken, utc_offset, source) rows in one transaction (a date is a property of the
        bytes, so one row serves every path and model). CacheWriteError when they cannot be written."""
        if self.writes_disabled or not rows:
            return
        try:
            with self._lock, self._write() as conn:
                conn.executemany(
                    "INSERT INTO dates (digest, taken, utc_offset, source) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (digest) DO UPDATE SET taken = excluded.taken, "
                    "utc_offset = excluded.utc_offset, source = excluded.source",
                    rows,
                )
        except sqlite3.Error as err:
            raise CacheWriteError(f"cannot write the feature cache {self.path}: {err}") from None

    def get_clips(self, digests: Sequence[str]) -> list[str | None]:
        """The records ``put_clips`` stored for this model and these digests (None where there is none)."""
        key = self._require_key()
        found: dict[str, str] = {}
        sql = (
            "SELECT digest, info FROM clips WHERE model_key = ? AND typeof(info) = 'text' "
            f"AND length(info) <= {MAX_CLIP_RECORD} AND digest IN ({{marks}})"
        )
        try:
            with self._lock:
                found.update(self._select_in(sql, (key,), digests))
        except sqlite3.Error as err:
            raise self._read_error(err) from None
        return [found.get(d) for d in digests]

    def put_clips(self, rows: Sequence[tuple[str, str]]) -> None:
        """Store (digest, record) rows for this model in one transaction: what a clip's vector was made
        from (``video.ClipInfo``). CacheWriteError when they cannot be written."""
        key = self._require_key()
        if self.writes_disabled or not rows:
            return
        try:
            with self._lock, self._write() as conn:
                conn.executemany(
                    "INSERT INTO clips (digest, model_key, info) VALUES (?, ?, ?) "
                    "ON CONFLICT (digest, model_key) DO UPDATE SET info = excluded.info",
                    [(digest, key, info) for digest, info in rows],
                )
        except sqlite3.Error as err:
            self.writes_disabled = True
            raise CacheWriteError(f"cannot write the feature cache {self.path}: {err}") from None

    def model_keys(self) -> dict[str, int]:
        """The model keys the cache has vectors for, with their dimension (the small ``models`` table)."""
        try:
            with self._lock:
                return dict(
                    self._conn.execute(
                        "SELECT model_key, dim FROM models "
                        f"WHERE {_short_text('model_key')} AND typeof(dim) = 'integer'"
                    ).fetchall()
                )
        except sqlite3.Error as err:
            raise self._read_error(err) from None

    def digests_under(self, files: Sequence[ImageFile], model_key: str) -> DigestSet:
        """The digests of those of ``files`` (unchanged since read) that have a vector under ``model_key``,
        any model's: what an earlier version stored for them. Byte-identical copies give one digest."""
        stats = _stat_keys(files)
        sql = (
            "SELECT f.path, f.size, f.mtime_ns, f.digest FROM files f JOIN vectors v "
            f"ON v.digest = f.digest AND v.model_key = ? WHERE {_short_text('f.digest')} "
            "AND f.path IN ({marks})"
        )
        try:
            with self._lock:
                rows = self._select_in(sql, (model_key,), (p for p, _, _ in stats))
                found = {row[:3]: row[3] for row in rows}
        except sqlite3.Error as err:
            raise self._read_error(err) from None
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
        try:
            with self._lock:
                return int(self._conn.execute(sql, (model_key, *keys)).fetchone()[0])
        except sqlite3.Error as err:
            raise self._read_error(err) from None

    def last_ranking(self, root: bytes) -> tuple[str, str, bool] | None:
        """(method, novelfind version, inferred) of the last ranking of the library ``root``
        (:func:`ranking_root`), or None when none is recorded. ``inferred``: there is no record of the
        library, but the file was written before records were kept (``EARLIER_RANKING``)."""
        try:
            with self._lock:
                rows = dict(
                    (bytes(r[0]), r[1:])
                    for r in self._conn.execute(
                        "SELECT root, method, version FROM rankings WHERE root IN (?, ?) "
                        f"AND {_short_text('method')} AND {_short_text('version')}",
                        (root, b""),
                    )
                )
        except sqlite3.Error as err:
            raise self._read_error(err) from None
        if root in rows:
            return (*rows[root], False)
        return (*rows[b""], True) if b"" in rows else None

    def note_ranking(self, root: bytes, method: str, version: str) -> None:
        """Record that ``version`` ranked the library ``root`` with ``method`` (one small row per library)."""
        try:
            with self._lock, self._write() as conn:
                conn.execute("INSERT OR REPLACE INTO rankings VALUES (?, ?, ?)", (root, method, version))
        except sqlite3.Error as err:
            raise CacheWriteError(f"cannot write the feature cache {self.path}: {err}") from None

    # -- unreadable files (cache/failures.py) ----------------------------------------------------

    def known_failures(self) -> dict[bytes, failures.KnownFailure]:
        """The files earlier scans could not read, by path (``os.fsencode``)."""
        try:
            with self._lock:
                return failures.load(self._conn)
        except sqlite3.Error as err:
            raise self._read_error(err) from None

    def record_failures(
        self, rows: Sequence[tuple[bytes, int, int, str]], forget: Sequence[bytes] = ()
    ) -> None:
        """Remember (path, size, mtime_ns, reason) of files that could not be read, and forget the
        failures of ``forget`` (files read since, or gone), in one transaction."""
        if not rows and not forget:
            return
        try:
            with self._lock, self._write() as conn:
                failures.forget(conn, forget)
                failures.record(conn, rows)
        except sqlite3.Error as err:
            raise CacheWriteError(f"cannot write the feature cache {self.path}: {err}") from None

    def forget_failures(self, paths: Sequence[bytes] | None = None) -> int:
        """Forget the failures of ``paths`` (None: all); the next scan reports those files again."""
        try:
            with self._lock, self._write() as conn:
                return failures.forget(conn, paths)
        except sqlite3.Error as err:
            raise CacheError(f"cannot write the feature cache {self.path}: {err}") from None

    # -- writes --------------------------------------------------------------------------------

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
        try:
            with self._lock, self._write() as conn:
                dropped = conn.execute("DELETE FROM vectors WHERE model_key = ?", (model_key,)).rowcount
                conn.execute("DELETE FROM clips WHERE model_key = ?", (model_key,))
                conn.execute("DELETE FROM models WHERE model_key = ?", (model_key,))
        except sqlite3.Error as err:
            raise CacheWriteError(f"cannot write the feature cache {self.path}: {err}") from None
        return dropped

    def stored(self, vectors: np.ndarray) -> np.ndarray:
        """``vectors`` (1-D, or one per row) as this cache will give them back: float32, rounded to the
        storage type."""
        v = np.asarray(vectors, dtype=np.float32)
        if self.dtype == "float32":
            return v
        rows = v.reshape(-1, v.shape[-1]) if v.ndim else v.reshape(1, 1)
        out = np.array(rows, dtype=np.float32)
        fits = np.abs(rows).max(axis=1, initial=0.0) <= FLOAT16_MAX  # (B,) as _storable decides
        out[fits] = rows[fits].astype(np.float16).astype(np.float32)
        return out.reshape(v.shape)

    def put_many(self, rows: Sequence[tuple[ImageFile, str, np.ndarray]]) -> None:
        """Store ``(file, digest, vector)`` rows in one transaction: all of them or none.

        A vector must be 1-D with the model's dimension (``ValueError`` otherwise); rows with a
        NaN or infinite value are not stored. Raises ``CacheWriteError`` when the batch cannot be
        written (disk full, I/O error, another run holding the cache for longer than the busy
        timeout); after that, further calls do nothing.
        """
        key = self._require_key()
        if self.writes_disabled or not rows:
            return
        file_rows: list[tuple[bytes, int, int, str]] = []
        vector_rows: dict[str, bytes] = {}
        dim = None
        for file, digest, vector in rows:
            vec = np.asarray(vector)
            if vec.ndim != 1 or vec.size == 0:
                raise ValueError(f"a cached vector must be 1-D and non-empty, got shape {vec.shape}")
            if dim is None:
                dim = vec.shape[0]
            elif vec.shape[0] != dim:
                raise ValueError(f"vectors of one batch differ in length: {dim} and {vec.shape[0]}")
            if not np.isfinite(vec).all():
                continue
            file_rows.append((_encode_path(file.path), int(file.size), int(file.mtime_ns), str(digest)))
            vector_rows[str(digest)] = _to_blob(vec, self.dtype)
        if not file_rows:
            return
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        try:
            with self._lock, self._write() as conn:
                conn.execute(
                    "INSERT OR IGNORE INTO models (model_key, dim, first_seen) VALUES (?, ?, ?)",
                    (key, dim, now),
                )
                stored = conn.execute("SELECT dim FROM models WHERE model_key = ?", (key,)).fetchone()[0]
                if stored != dim:
                    raise ValueError(f"model {key} makes {stored}-d vectors, got {dim}-d")
                conn.executemany(
                    "INSERT INTO vectors (digest, model_key, dim, data) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (digest, model_key) DO UPDATE SET dim = excluded.dim, data = excluded.data",
                    [(digest, key, dim, blob) for digest, blob in vector_rows.items()],
                )
                conn.executemany(
                    "INSERT INTO files (path, size, mtime_ns, digest) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (path) DO UPDATE SET size = excluded.size, "
                    "mtime_ns = excluded.mtime_ns, digest = excluded.digest",
                    file_rows,
                )
        except sqlite3.Error as err:
            self.writes_disabled = True
            code = errorcode(err)
            if code == SQLITE_FULL:
                raise CacheWriteError(
                    f"the disk holding the feature cache {self.path} is full", disk_full=True
                ) from None
            if code in (SQLITE_BUSY, SQLITE_LOCKED):
                raise CacheWriteError(
                    f"the feature cache {self.path} stayed busy for {self._busy_timeout:g} s"
                ) from None
            raise CacheWriteError(f"cannot write the feature cache {self.path}: {err}") from None

    # -- maintenance ---------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Path, vector count (``entries``), file count, bytes on disk and vectors per model."""
        try:
            with self._lock:
                entries = self._conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
                files = self._conn.execute("SELECT count(*) FROM files").fetchone()[0]
                unreadable = len(failures.load(self._conn))
                models = dict(
                    self._conn.execute(
                        "SELECT m.model_key, count(v.digest) FROM models m "
                        "LEFT JOIN vectors v ON v.model_key = m.model_key "
                        f"WHERE {_short_text('m.model_key')} "
                        "GROUP BY m.model_key ORDER BY m.first_seen, m.model_key"
                    ).fetchall()
                )
        except sqlite3.Error as err:
            raise self._read_error(err) from None
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
        try:
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT path, size, mtime_ns FROM files WHERE {_PATH_ROW}"
                ).fetchall()
                unreadable = list(failures.load(self._conn))
        except sqlite3.Error as err:
            raise self._read_error(err) from None
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
        try:
            with self._lock, self._write() as conn:
                dropped = conn.execute(f"DELETE FROM files WHERE NOT ({_PATH_ROW})").rowcount
                for (
                    path,
                    size,
                    mtime_ns,
                ) in stale:  # unchanged since read above: another run may have updated it
                    dropped += conn.execute(
                        "DELETE FROM files WHERE path = ? AND size = ? AND mtime_ns = ?",
                        (path, size, mtime_ns),
                    ).rowcount
                failures.forget(conn, gone)
                conn.execute("DELETE FROM vectors WHERE digest NOT IN (SELECT digest FROM files)")
                conn.execute("DELETE FROM clips WHERE digest NOT IN (SELECT digest FROM files)")
                conn.execute("DELETE FROM dates WHERE digest NOT IN (SELECT digest FROM files)")
                conn.execute(
                    "DELETE FROM models WHERE model_key NOT IN (SELECT DISTINCT model_key FROM vectors)"
                )
        except sqlite3.Error as err:
            raise CacheError(f"cannot prune the feature cache {self.path}: {err}") from None
        self._compact()
        return dropped

    def clear(self) -> None:
        """Forget everything, for every model, and give the space back."""
        try:
            with self._lock, self._write() as conn:
                conn.execute("DELETE FROM vectors")
                conn.execute("DELETE FROM clips")
                conn.execute("DELETE FROM dates")
                conn.execute("DELETE FROM files")
                conn.execute("DELETE FROM models")
                conn.execute("DELETE FROM rankings")
                failures.forget(conn)
        except sqlite3.Error as err:
            raise CacheError(f"cannot clear the feature cache {self.path}: {err}") from None
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

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.execute("PRAGMA optimize")
                except sqlite3.Error:
                    pass
                self._conn.close()
                self._conn = None  # type: ignore[assignment]

    def __enter__(self) -> FeatureCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FeatureCache({str(self.path)!r}, {self.model_key!r})"


class NullCache:
    """The cache interface, storing nothing: for ``--no-cache`` and unusable cache locations."""

    path = None
    model_key = None
    writes_disabled = True
    recovered_from = None

    def get_by_stat(self, path: str | os.PathLike[str], size: int, mtime_ns: int) -> np.ndarray | None:
        return None

    def get_many_by_stat(self, files: Sequence[ImageFile]) -> list[np.ndarray | None]:
        return [None] * len(files)

    def has_many_by_stat(self, files: Sequence[ImageFile], dim: int) -> np.ndarray:
        return np.zeros(len(files), bool)

    def rows_by_stat(self, files: Sequence[ImageFile], chunk: int = 8192) -> Iterator[np.ndarray]:
        raise CacheError("no feature cache to read the vectors back from")

    def digests_by_stat(self, files: Sequence[ImageFile]) -> list[str | None]:
        return [None] * len(files)

    def known_digests(self) -> DigestSet:
        return DigestSet()

    def get_by_digest(self, digest: str) -> np.ndarray | None:
        return None

    def get_many_by_digest(self, digests: Sequence[str]) -> list[np.ndarray | None]:
        return [None] * len(digests)

    def put_many(self, rows: Sequence[tuple[ImageFile, str, np.ndarray]]) -> None:
        return None

    def get_clips(self, digests: Sequence[str]) -> list[str | None]:
        return [None] * len(digests)

    def dates_by_stat(self, files: Sequence[ImageFile]) -> list[tuple[str | None, Any]]:
        return [(None, None)] * len(files)

    def put_dates(self, rows: Sequence[tuple[str, float | None, int | None, str]]) -> None:
        return None

    def put_clips(self, rows: Sequence[tuple[str, str]]) -> None:
        return None

    def stored(self, vectors: np.ndarray) -> np.ndarray:
        return np.asarray(vectors, dtype=np.float32)

    def info(self) -> dict[str, Any]:
        return {"path": None, "entries": 0, "files": 0, "size_bytes": 0, "models": {}, "schema_version": None}

    def prune(self) -> int:
        return 0

    def clear(self) -> None:
        return None

    def last_ranking(self, root: bytes) -> tuple[str, str, bool] | None:
        return None

    def known_failures(self) -> dict:
        return {}  # without a cache every unreadable file is new

    def record_failures(self, rows, forget=()) -> None:
        return None

    def note_ranking(self, root: bytes, method: str, version: str) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> NullCache:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return "NullCache()"


def ranking_root(paths: Iterable[str | os.PathLike[str]]) -> bytes:
    """What names a library in the ``rankings`` table: its folders, absolute, sorted, NUL-separated."""
    return b"\0".join(sorted(os.fsencode(Path(os.fspath(p)).absolute()) for p in paths))


@contextmanager
def open_store(
    choice: bool | str | os.PathLike[str] | FeatureCache,
    model_key: str,
    *,
    dtype: str = DEFAULT_DTYPE,
    streamed: bool = False,
    on_warning: Callable[[str], None] | None = None,
    max_norm: float = DEFAULT_MAX_NORM,
    min_value: float | None = None,
) -> Iterator[FeatureCache | NullCache]:
    """The feature store a scan uses, as a context manager that closes it.

    ``choice`` is ``scan()``'s ``cache``: True for the user's cache, False for none, a path, or a
    :class:`FeatureCache` (its file and dtype are used). A cache that cannot be opened is reported
    through ``on_warning`` and a :class:`NullCache` stands in. With ``streamed`` (the vectors are read
    back from the store, the library being too large to hold them) there must be a real store: without
    a cache it is a temporary file, deleted afterwards, and one that cannot be opened is a CacheError.
    ``max_norm``, ``min_value``: the model's bounds on a vector's norm and values (see :class:`FeatureCache`).
    """
    import tempfile

    if choice is False:
        if not streamed:
            yield NullCache()
            return
        with tempfile.TemporaryDirectory(prefix="novelfind-") as folder:
            temporary = Path(folder) / "features.sqlite"
            with FeatureCache(
                temporary, model_key, dtype=dtype, max_norm=max_norm, min_value=min_value
            ) as store:
                yield store
        return
    path = None
    if isinstance(choice, FeatureCache):
        path, dtype = choice.path, choice.dtype
    elif choice is not True:
        path = choice
    try:
        store = FeatureCache.open(
            path, model_key, on_warning=on_warning, dtype=dtype, max_norm=max_norm, min_value=min_value
        )
    except CacheError as err:
        if streamed:
            raise CacheError(f"{err}; a library this large is ranked from the cache") from None
        if on_warning is not None:
            on_warning(f"{err}; running without the cache")
        else:
            warnings.warn(f"{err}; running without the cache", RuntimeWarning, stacklevel=3)
        yield NullCache()
        return
    with store:
        yield store
