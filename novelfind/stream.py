"""Principal-axis projection of feature vectors that never sit in memory all at once.

The default ranking works in the space of the top ``dims`` principal axes of the features (N x 64), not on
the raw N x M matrix (M = 1000 or 1280). At 10 million photos the raw matrix is 40 GB in float32, the
projection 2.6 GB. So the projection is built from chunks, read twice from where the vectors live (the
feature cache, a Parquet file, ...):

1. ``fit_pca``: one pass accumulates the sum and the scatter matrix (M x M, float64) chunk by chunk;
   eigenvectors of the covariance give the axes. Memory: O(M^2 + chunk x M).
2. ``project``: a second pass projects every chunk onto the axes -> (chunk, d), written into an
   (N, d) array (or a ``numpy.memmap``). Memory: the output plus one chunk.

The scatter is accumulated around a shift (the first chunk's mean), not around zero, so the float32
products lose no precision to a large mean; the result equals the in-memory PCA to float32 rounding.
Each axis has a fixed sign (its largest-magnitude coordinate is positive), so two runs over the same
vectors, in one piece or in chunks, give the same projection.

Cost: 2 N M^2 flops for the scatter (the M x M product per chunk, BLAS) and 2 N M d for the projection;
measured figures are in ``scripts/bench_scale.py --stream``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

DEFAULT_DIMS = 64  # the axes the default ranking works in
# Axes whose variance is below this share of the largest are dropped (no information, only rounding).
RELATIVE_FLOOR = 1e-6


@dataclass(frozen=True)
class Projection:
    """Principal axes fitted on N vectors of length M."""

    mean: np.ndarray  # float64 (M,)
    axes: np.ndarray  # float32 (M, d), orthonormal columns, strongest first
    variances: np.ndarray  # float64 (d,), variance along each axis (N - 1 in the denominator)
    count: int  # N

    @property
    def dims(self) -> int:
        return int(self.axes.shape[1])

    def apply(self, chunk: np.ndarray) -> np.ndarray:
        """(C, M) vectors -> float32 (C, d) coordinates on the axes."""
        c = np.asarray(chunk, dtype=np.float32)
        return (c - self.mean.astype(np.float32)) @ self.axes  # (C, d)


class ScatterAccumulator:
    """Running mean and covariance of vectors added in chunks (shifted sums in float64)."""

    def __init__(self) -> None:
        self.count = 0
        self._shift: np.ndarray | None = None  # float32 (M,)
        self._sum: np.ndarray | None = None  # float64 (M,): sum of (x - shift)
        self._scatter: np.ndarray | None = None  # float64 (M, M): sum of (x - shift)(x - shift)^T

    def add(self, chunk: np.ndarray) -> None:
        x = np.asarray(chunk, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] == 0:
            raise ValueError(f"a chunk must be 2-D (C, M) with M > 0, got shape {x.shape}")
        if len(x) == 0:
            return
        if self._shift is None:
            m = x.shape[1]
            self._shift = x.mean(axis=0, dtype=np.float64).astype(np.float32)
            self._sum = np.zeros(m, np.float64)
            self._scatter = np.zeros((m, m), np.float64)
        elif x.shape[1] != len(self._shift):
            raise ValueError(f"chunks differ in width: {len(self._shift)} and {x.shape[1]}")
        if not np.isfinite(x).all():
            raise ValueError(f"a chunk contains {int((~np.isfinite(x)).sum())} NaN or infinite values")
        c = x - self._shift  # (C, M) float32
        self._sum += c.sum(axis=0, dtype=np.float64)
        self._scatter += c.T @ c  # (M, M) float32 product, accumulated in float64
        self.count += len(x)

    @property
    def mean(self) -> np.ndarray:
        if self._shift is None:
            raise ValueError("no vectors were added")
        return self._shift.astype(np.float64) + self._sum / self.count  # (M,)

    def covariance(self) -> np.ndarray:
        """(M, M) float64 covariance, N - 1 in the denominator."""
        if self._shift is None:
            raise ValueError("no vectors were added")
        d = self._sum / self.count  # (M,): mean - shift
        cov = self._scatter - self.count * np.outer(d, d)
        return cov / max(self.count - 1, 1)


def fit_pca(chunks: Iterable[np.ndarray], dims: int = DEFAULT_DIMS) -> Projection:
    """Principal axes of all rows of ``chunks`` (an iterable of (C, M) arrays), in one pass.

    Keeps at most ``dims`` axes, and only those with variance above ``RELATIVE_FLOOR`` times the largest;
    vectors that are all the same give one zero-variance axis (coordinates all zero).
    """
    if dims < 1:
        raise ValueError(f"dims must be >= 1, got {dims}")
    acc = ScatterAccumulator()
    for chunk in chunks:
        acc.add(chunk)
    if acc.count == 0:
        raise ValueError("no vectors to fit principal axes on")
    evals, evecs = np.linalg.eigh(acc.covariance())  # ascending
    d = int(min(dims, len(evals), max(acc.count - 1, 1)))
    evals, evecs = evals[::-1][:d], evecs[:, ::-1][:, :d]  # (d,), (M, d) strongest first
    keep = evals > evals[0] * RELATIVE_FLOOR if evals[0] > 0 else np.zeros(d, bool)
    if not keep.any():
        axes = np.zeros((len(acc.mean), 1), np.float32)
        return Projection(mean=acc.mean, axes=axes, variances=np.ones(1), count=acc.count)
    evecs = evecs[:, keep]
    # a fixed sign per axis: its largest-magnitude coordinate is positive
    signs = np.sign(evecs[np.abs(evecs).argmax(axis=0), np.arange(evecs.shape[1])])
    evecs = evecs * np.where(signs == 0, 1.0, signs)
    return Projection(mean=acc.mean, axes=evecs.astype(np.float32), variances=evals[keep], count=acc.count)


def project(
    chunks: Iterable[np.ndarray],
    projection: Projection,
    out: np.ndarray | None = None,
    residual: np.ndarray | None = None,
) -> np.ndarray:
    """Coordinates of all rows of ``chunks`` on ``projection``'s axes -> float32 (N, d), in row order.

    ``out``: an (N, d) float32 array to fill (a ``numpy.memmap`` keeps even that off the heap); N is
    ``projection.count`` unless ``out`` says otherwise. ``residual``: an (N,) float32 array that receives
    each row's distance from the axes' subspace (the length of what the projection leaves out), from which
    distances between rows are bounded below (:func:`distance_bound`). ValueError when the chunks hold
    another number of rows than the output.
    """
    n = projection.count if out is None else len(out)
    if out is None:
        out = np.empty((n, projection.dims), np.float32)  # (N, d)
    elif out.shape != (n, projection.dims):
        raise ValueError(f"out must have shape ({n}, {projection.dims}), got {out.shape}")
    if residual is not None and residual.shape != (n,):
        raise ValueError(f"residual must have shape ({n},), got {residual.shape}")
    mean = projection.mean.astype(np.float32)
    row = 0
    for chunk in chunks:
        c = np.asarray(chunk, dtype=np.float32) - mean  # (C, M)
        if row + len(c) > n:
            raise ValueError(f"the chunks hold more than the {n} rows the projection was fitted on")
        coords = c @ projection.axes  # (C, d)
        out[row : row + len(c)] = coords
        if residual is not None:
            total = np.einsum("ij,ij->i", c, c, dtype=np.float64)  # (C,) |x - mean|^2
            kept = np.einsum("ij,ij->i", coords, coords, dtype=np.float64)  # (C,) its part on the axes
            residual[row : row + len(c)] = np.sqrt(np.maximum(total - kept, 0.0))
        row += len(c)
    if row != n:
        raise ValueError(f"the chunks held {row} rows, expected {n}")
    return out


def distance_bound(
    coords: np.ndarray, residual: np.ndarray, q_coords: np.ndarray, q_residual: float
) -> np.ndarray:
    """A lower bound of the distances from one row (its coordinates ``q_coords`` (d,) and residual) to rows
    given by ``coords`` (C, d) and ``residual`` (C,) -> float32 (C,).

    The axes are orthonormal, so a distance splits into its part on the axes and its part off them
    (Pythagoras); the first is known exactly, the second is at least the difference of the two rows'
    residual lengths (triangle inequality). Rows farther than a distance already found can be skipped
    without reading their vectors.
    """
    on_axes = ((coords - q_coords) ** 2).sum(axis=1, dtype=np.float64)  # (C,)
    off_axes = (residual.astype(np.float64) - q_residual) ** 2  # (C,)
    return np.sqrt(on_axes + off_axes).astype(np.float32)


def stream_pca(
    source: Callable[[], Iterable[np.ndarray]], dims: int = DEFAULT_DIMS, out: np.ndarray | None = None
) -> tuple[np.ndarray, Projection]:
    """``fit_pca`` then ``project`` over two fresh iterations of ``source()`` -> ((N, d), projection).

    ``source`` must yield the same rows in the same order each time it is called (e.g. a cache read in a
    fixed order).
    """
    projection = fit_pca(source(), dims)
    return project(source(), projection, out), projection


def chunked(x: np.ndarray, rows: int) -> Callable[[], Iterable[np.ndarray]]:
    """A ``source`` over an in-memory (N, M) array, ``rows`` at a time (tests, small libraries)."""
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    return lambda: (x[i : i + rows] for i in range(0, len(x), rows))
