"""The ``files`` and ``vectors`` tables: a file's vector found by its stat (path, size, mtime) or by the
digest of its bytes, written in batches, read back in chunks, and checked as it is read.

How a vector is stored (float16 or float32, its blob's length saying which), what makes a stored vector
sound, and :class:`DigestSet` (a library's digests, compact) are here too. :class:`Vectors` is
``FeatureCache``'s part for these tables; :class:`NullVectors` is the same for no cache: nothing found,
nothing kept.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence, Set
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from novelfind.base.safe_text import display
from novelfind.cache.connection import CacheFile, encode_path, short_text, stat_keys
from novelfind.cache.recovery import SQLITE_BUSY, SQLITE_FULL, SQLITE_LOCKED, CacheWriteError, errorcode
from novelfind.errors import CacheError

if TYPE_CHECKING:
    from novelfind.media.walk import ImageFile

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


def _storable(vector: np.ndarray, dtype: str) -> np.ndarray:
    """The vector in the storage type: float16 when asked for and every value fits, else float32."""
    if dtype == "float16" and float(np.abs(vector).max(initial=0.0)) <= FLOAT16_MAX:
        return np.ascontiguousarray(vector, dtype="<f2")
    return np.ascontiguousarray(vector, dtype="<f4")


def _to_blob(vector: np.ndarray, dtype: str = "float32") -> bytes:
    return _storable(vector, dtype).tobytes()


def _sound(blobs: Sequence[tuple[bytes, int]], max_norm: float, min_value: float | None = None) -> np.ndarray:
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
        self._sorted = np.unique(np.frombuffer(bytes(packed), dtype="S16"))  # (N,) sorted, each once
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


class Vectors(CacheFile):
    """``FeatureCache``'s lookups and writes of vectors (the ``files`` and ``vectors`` tables)."""

    max_norm: float
    min_value: float | None

    def get_by_stat(self, path: str | os.PathLike[str], size: int, mtime_ns: int) -> np.ndarray | None:
        """The vector of the file at ``path`` if it still has this size and mtime, else None."""
        return self.get_many_by_stat([SimpleNamespace(path=path, size=size, mtime_ns=mtime_ns)])[0]

    def get_many_by_stat(self, files: Sequence[ImageFile]) -> list[np.ndarray | None]:
        """``get_by_stat`` for many files at once; the result lines up with ``files``."""
        key = self._require_key()
        found: dict[bytes, tuple[int, int, str, bytes, int]] = {}
        stats = stat_keys(files)  # [(path bytes, size, mtime_ns)]
        sql = (
            "SELECT f.path, f.size, f.mtime_ns, f.digest, v.data, v.dim FROM files f JOIN vectors v "
            f"ON v.digest = f.digest AND v.model_key = ? WHERE {_SOUND_ROW} AND f.path IN ({{marks}})"
        )
        with self._reading():
            for path, *hit in self._select_in(sql, (key,), (p for p, _, _ in stats)):
                found[path] = tuple(hit)
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
        stats = stat_keys(files)
        found: dict[bytes, tuple[int, int]] = {}
        hits: list[tuple[bytes, str, bytes, int]] = []  # the values are checked too, a chunk at once
        sql = (
            "SELECT f.path, f.size, f.mtime_ns, f.digest, v.data FROM files f JOIN vectors v "
            "ON v.digest = f.digest AND v.model_key = ? "
            "WHERE v.dim = ? AND typeof(v.data) = 'blob' AND length(v.data) IN (?, ?) AND f.path IN ({marks})"
        )
        with self._reading():
            params = (key, dim, 2 * dim, 4 * dim)
            rows = self._select_in(sql, params, (p for p, _, _ in stats))
            for path, size, mtime_ns, digest, data in rows:
                found[path] = (size, mtime_ns)
                hits.append((path, digest, data, dim))
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
        sql = (
            f"SELECT path, size, mtime_ns, digest FROM files WHERE {short_text('digest')} "
            "AND path IN ({marks})"
        )
        return [None if hit is None else hit[0] for hit in self._by_stat(sql, (), stat_keys(files))]

    def known_digests(self) -> DigestSet:
        """Digests of every file whose vector this model already has (so its bytes need no decoding)."""
        key = self._require_key()
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT digest FROM vectors WHERE model_key = ? AND {short_text('digest')}", (key,)
            )
            batches = iter(lambda: rows.fetchmany(65536), [])  # not row by row: millions of rows
            return DigestSet(digest for batch in batches for (digest,) in batch)

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
        with self._reading():
            for digest, data, dim in self._select_in(sql, (key,), digests):
                found[digest] = (data, dim)
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
            file_rows.append((encode_path(file.path), int(file.size), int(file.mtime_ns), str(digest)))
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


class NullVectors:
    """:class:`Vectors` for no cache: every lookup finds nothing, every batch is dropped."""

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

    def stored(self, vectors: np.ndarray) -> np.ndarray:
        return np.asarray(vectors, dtype=np.float32)
