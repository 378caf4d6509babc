"""Where the ranking reads feature vectors from: a matrix in memory, or a store read in chunks.

A library's float32 feature matrix is N x M (M = 1000 for logits, 1280 for pooled vectors): 4 GB at a
million photos, 40 GB at ten million. Past the memory budget (``novelfind.ranking.budget.fits_in_memory``) the
vectors stay in the feature cache and are read back in chunks. The ranking is written once, against the
small protocol here, so the budget decides only how the vectors are read, never which scorer runs:

- ``n``, ``dim``: the shape;
- ``chunks()``: every row, in row order, as (C, M) float32 blocks (a fresh iteration per call);
- ``take(rows)``: the vectors of the given rows, in that order (a few thousand at a time: the exact
  neighbour searches read blocks of rows this way, so they can skip the blocks they do not need);
- ``matrix``: the (N, M) array when there is one (None for a chunked source), for the code that reads
  the rows of a matrix faster than through ``take``;
- ``abs_max()``: max |x| over all rows (the ranking's check for NaN and its guard against float32
  overflow; a chunked source reads every chunk once for it and raises ValueError for a NaN).

``MatrixSource`` wraps an array; ``ChunkedSource`` wraps two callables (the scan builds them on
``FeatureCache.rows_by_stat``). ``blocks`` re-cuts any source into blocks of a fixed size, so sums over
the rows come out bit for bit the same whatever the source's own chunk size.
"""

from __future__ import annotations

import math
import mmap
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, runtime_checkable

import numpy as np

BLOCK = 16384  # rows per block for passes over all rows (``blocks``): 64 MB of 1000-d float32
STREAM_CHUNK = 8192  # vectors read from the cache at a time when ranking from it (32 MiB of 1000-d)


@runtime_checkable
class FeatureSource(Protocol):
    """N feature vectors of length M, read in chunks or by row (see the module docstring)."""

    n: int
    dim: int
    matrix: np.ndarray | None

    def chunks(self) -> Iterable[np.ndarray]: ...

    def take(self, rows: np.ndarray) -> np.ndarray: ...

    def abs_max(self) -> float: ...


class MatrixSource:
    """An (N, M) float32 array in memory."""

    def __init__(self, x: np.ndarray) -> None:
        self.matrix = x
        self.n, self.dim = x.shape

    def chunks(self, rows: int = BLOCK) -> Iterator[np.ndarray]:
        return (self.matrix[i : i + rows] for i in range(0, self.n, rows))

    def take(self, rows: np.ndarray) -> np.ndarray:
        return self.matrix[np.asarray(rows, dtype=np.int64)]

    def abs_max(self) -> float:
        """max |x| (NaN if x holds a NaN, inf if an infinity), with no temporary the size of x."""
        lo, hi = float(self.matrix.min()), float(self.matrix.max())
        return math.nan if math.isnan(lo) or math.isnan(hi) else max(-lo, hi)


class ChunkedSource:
    """N vectors that are never all in memory: ``chunks()`` yields them in row order, afresh on each call;
    ``take(rows)`` returns the vectors of those rows, in that order, as a new array. ``dim`` None: read
    from one row. ``abs_max`` reads them once (and raises ValueError for NaN or infinite values); its
    answer is kept."""

    matrix = None

    def __init__(
        self,
        chunks: Callable[[], Iterable[np.ndarray]],
        take: Callable[[np.ndarray], np.ndarray],
        n: int,
        dim: int | None = None,
    ) -> None:
        self._chunks, self._take = chunks, take
        self.n = int(n)
        self.dim = int(dim) if dim is not None else int(np.shape(take(np.zeros(1, np.int64)))[1])
        self._abs_max: float | None = None

    def chunks(self) -> Iterator[np.ndarray]:
        row = 0
        for chunk in self._chunks():
            c = np.asarray(chunk, dtype=np.float32)
            if c.ndim != 2 or c.shape[1] != self.dim:
                raise ValueError(f"a chunk has shape {c.shape}, expected (C, {self.dim})")
            row += len(c)
            if row > self.n:
                break
            yield c
        if row != self.n:
            raise ValueError(f"the source holds {row} rows, expected {self.n}")

    def take(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) == 0:
            return np.zeros((0, self.dim), np.float32)
        return np.asarray(self._take(rows), dtype=np.float32)

    def abs_max(self) -> float:
        if self._abs_max is None:
            top, bad = 0.0, 0
            for c in self.chunks():
                if len(c):
                    lo, hi = float(c.min()), float(c.max())
                    if not (math.isfinite(lo) and math.isfinite(hi)):
                        bad += int((~np.isfinite(c)).sum())
                    else:
                        top = max(top, -lo, hi)
            if bad:
                raise ValueError(f"features contain {bad} NaN or infinite values")
            self._abs_max = top
        return self._abs_max


class ScaledSource:
    """Another source's vectors divided by ``scale`` (the ranking's guard against float32 over- and
    underflow); a matrix is divided once (a copy), chunks and rows as they are read."""

    def __init__(self, source: FeatureSource, scale: float) -> None:
        self.source, self.scale = source, np.float32(scale)
        self.n, self.dim = source.n, source.dim
        self.matrix = None if source.matrix is None else source.matrix / self.scale

    def chunks(self) -> Iterator[np.ndarray]:
        return (np.asarray(c, np.float32) / self.scale for c in self.source.chunks())

    def take(self, rows: np.ndarray) -> np.ndarray:
        if self.matrix is not None:
            return self.matrix[np.asarray(rows, dtype=np.int64)]
        return self.source.take(rows) / self.scale

    def abs_max(self) -> float:
        return self.source.abs_max() / float(self.scale)


class UnitSource:
    """Another source's vectors scaled to unit length (cosine geometry: the distance between two unit
    rows is sqrt(2 - 2 cos)); a matrix is normalised once (a copy), chunks and rows as they are read,
    each row the same way, so both give the same numbers. A zero row stays zero."""

    def __init__(self, source: FeatureSource) -> None:
        self.source = source
        self.n, self.dim = source.n, source.dim
        self.matrix = None if source.matrix is None else unit_rows(source.matrix)

    def chunks(self) -> Iterator[np.ndarray]:
        return (unit_rows(c) for c in self.source.chunks())

    def take(self, rows: np.ndarray) -> np.ndarray:
        if self.matrix is not None:
            return self.matrix[np.asarray(rows, dtype=np.int64)]
        return unit_rows(self.source.take(rows))

    def abs_max(self) -> float:
        return 1.0 if self.source.abs_max() > 0 else 0.0


def unit_rows(x: np.ndarray, rows: int = 4096) -> np.ndarray:
    """Each row of x (float32) times the inverse of its length (summed in float64), row by row: the same
    numbers for a row read alone or in a block. Blocks of ``rows`` keep the temporaries small."""
    x = np.asarray(x, dtype=np.float32)
    out = _empty(x.shape)
    for i in range(0, len(x), rows):
        b = x[i : i + rows]
        norm = np.sqrt(np.einsum("ij,ij->i", b, b, dtype=np.float64))
        inv = (1.0 / np.maximum(norm, 1e-12)).astype(np.float32)
        np.multiply(b, inv[:, None], out=out[i : i + rows])
    return out


def _empty(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised float32 array; a large one in anonymous memory advised to the kernel as huge
    pages (writing a fresh 4 GB array took 7.5 s with numpy's 4 KiB pages and 1.5 s with huge pages)."""
    size = math.prod(shape)
    if size < 1 << 22:
        return np.empty(shape, np.float32)
    buf = mmap.mmap(-1, size * 4)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        buf.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(buf, np.float32).reshape(shape)


def as_source(x: np.ndarray | FeatureSource) -> FeatureSource:
    """A source as it is; an array as a ``MatrixSource`` (float32, not copied when it is already)."""
    if isinstance(x, np.ndarray):
        return MatrixSource(np.asarray(x, dtype=np.float32))
    return x


def blocks(source: FeatureSource, rows: int = BLOCK) -> Iterator[tuple[int, np.ndarray]]:
    """(first row, (B, M) float32 block) over every row in order, each block ``rows`` long but the last.

    A matrix is cut into views; chunks of another size are joined and cut, so what is computed per
    block does not depend on how the source chunks its rows.
    """
    if source.matrix is not None:
        for i in range(0, source.n, rows):
            yield i, source.matrix[i : i + rows]
        return
    pending: list[np.ndarray] = []
    held = start = 0
    for chunk in source.chunks():
        pending.append(chunk)
        held += len(chunk)
        while held >= rows:
            joined = np.concatenate(pending) if len(pending) > 1 else pending[0]
            yield start, joined[:rows]
            start += rows
            rest = joined[rows:]
            pending, held = ([rest] if len(rest) else []), len(rest)
    if held:
        yield start, np.concatenate(pending) if len(pending) > 1 else pending[0]
