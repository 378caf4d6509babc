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
measured figures: ``scripts/bench_scale.py --archive``.
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


# --------------------------------------------------------------------------- ranking from chunks

NEIGHBOUR_SHORTLIST = 32  # rows per pick read first when searching its nearest neighbour
BOUND_ROWS = 65_536  # rows of the projection compared with the picks at a time (a (C, K) block)


def rank_streamed(
    source: Callable[[], Iterable[np.ndarray]],
    rows: Callable[[np.ndarray], np.ndarray],
    n: int,
    k: int,
    *,
    config=None,
    dedup: float | None = None,
    device=None,
    candidates: np.ndarray | None = None,
):
    """The default ranking of ``n`` vectors that are never all in memory -> (Ranking, float32 (N, d)).

    ``source()`` yields the vectors as (C, M) chunks in row order, afresh on each call (it is read twice);
    ``rows(indices)`` returns the (len(indices), M) vectors of those rows, in that order (a few thousand
    at a time). The vectors are projected chunk by chunk (:func:`stream_pca`) to the top ``DEFAULT_DIMS``
    principal axes, where the default ranking's ADS runs anyway, and :func:`novelfind.ranking.rank` with
    ``method="ads"`` runs on the (N, 64) projection: so the density term is measured there too, where the
    in-memory ranking measures it on the raw vectors (the two agree when the axes hold the vectors whole;
    on logits the 64 axes keep most of the spread, not all of it). ``all_scores`` beyond the rows ``rank``
    examined are upper bounds, as there. What needs the raw vectors reads only the rows it needs:
    near-duplicates (``dedup``) are judged on the raw vectors of the best-scored rows, and each pick's
    nearest other row is found exactly, in the raw space, among the rows whose distance bound
    (:func:`distance_bound`) could beat the nearest one found so far. ``config``, ``device`` and
    ``candidates`` as for ``rank``. Memory: the (N, 64) projection and a few arrays of N, plus what
    ``rank`` needs on it. Also returns the projection (its first two columns are the report's map).
    """
    from novelfind import ranking

    if dedup is None:
        dedup = ranking.DEFAULT_DEDUP
    if not dedup >= 0:
        raise ValueError(f"dedup must be >= 0, got {dedup}")
    projection = fit_pca(source(), DEFAULT_DIMS)
    if projection.count != n:
        raise ValueError(f"the source holds {projection.count} rows, expected {n}")
    coords = np.empty((n, projection.dims), np.float32)  # (N, d)
    residual = np.empty(n, np.float32)  # (N,)
    project(source(), projection, coords, residual)
    scored = ranking.rank(coords, k, config=config, dedup=0, device=device, candidates=candidates)
    scores = scored.all_scores  # (N,)
    order = np.lexsort((np.arange(n), -scores))  # by score, ties by index
    if candidates is not None:
        mask = np.asarray(candidates)
        if mask.dtype != bool:
            mask = np.zeros(n, bool)
            mask[np.asarray(candidates, np.int64)] = True
        order = order[mask[order]]
    picks, dropped = _distinct(order, rows, min(k, len(order)), dedup)
    neighbour, distance = _nearest(picks, coords, residual, rows)
    result = ranking.Ranking(
        indices=picks,
        scores=scores[picks].astype(np.float32),
        neighbour=neighbour,
        distance=distance,
        duplicates_dropped=dropped,
        all_scores=scores,
    )
    return result, coords


def _distinct(
    order: np.ndarray, rows: Callable[[np.ndarray], np.ndarray], k: int, threshold: float
) -> tuple[np.ndarray, int]:
    """``ranking.dedup_order`` on raw vectors read for the head of ``order`` only (4k rows, then more while
    near-duplicates use them up); with fewer than k distinct rows, skipped ones fill the end, as in
    ``rank``."""
    from novelfind import ranking

    if not threshold or k == 0:
        return order[:k].astype(np.int64), 0
    take = min(len(order), max(4 * k, 256))
    while True:
        head = order[:take]
        xn = ranking.l2_normalise(np.asarray(rows(head), np.float32))  # (take, M)
        kept, dropped = ranking.dedup_order(np.arange(take), xn, k, threshold)
        if len(kept) == k or take == len(order):
            break
        take = min(len(order), 4 * take)
    picks = head[kept].astype(np.int64)
    if len(picks) < k:
        taken = set(picks.tolist())
        rest = [int(i) for i in order if int(i) not in taken][: k - len(picks)]
        picks = np.concatenate([picks, np.asarray(rest, np.int64)])
        dropped = max(0, dropped - (k - len(taken)))
    return picks, dropped


def _bounds(coords: np.ndarray, residual: np.ndarray, picks: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Lower bounds (as :func:`distance_bound`, a matrix product at a time) of the distances from rows
    start..stop to each pick -> float64 (C, K); a pick's own row gets infinity."""
    stop = min(stop, len(coords))
    c = coords[start:stop].astype(np.float64)  # (C, d)
    q = coords[picks].astype(np.float64)  # (K, d)
    on_axes = (c * c).sum(1)[:, None] + (q * q).sum(1)[None, :] - 2 * c @ q.T  # (C, K)
    off_axes = (residual[start:stop, None].astype(np.float64) - residual[picks][None, :]) ** 2
    bound = np.sqrt(np.maximum(on_axes, 0.0) + off_axes) * (1 - 1e-6)  # (C, K), rounding slack
    own = (picks >= start) & (picks < stop)
    bound[picks[own] - start, np.flatnonzero(own)] = np.inf
    return bound


def _nearest(
    picks: np.ndarray, coords: np.ndarray, residual: np.ndarray, rows: Callable[[np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Each pick's nearest other row in the raw space, exact -> (index int64 (K,), distance float32 (K,)).

    Two passes over the (N, d) projection: the first keeps, per pick, the ``NEIGHBOUR_SHORTLIST`` rows of
    smallest bound, whose raw vectors give a first nearest distance; the second finds every row whose
    bound is below that distance for some pick (usually few), and only those are read and compared.
    """
    n, kk = len(coords), len(picks)
    best = np.full(kk, np.inf)
    nb = np.full(kk, -1, np.int64)
    if n == 1 or kk == 0:
        return nb, np.full(kk, np.nan, np.float32)
    query = np.asarray(rows(picks), np.float64)  # (K, M)
    q_sq = (query * query).sum(1)

    def compare(indices: np.ndarray) -> None:
        for s in range(0, len(indices), 4096):
            idx = np.sort(indices[s : s + 4096])
            block = np.asarray(rows(idx), np.float64)  # (B, M)
            d2 = (block * block).sum(1)[:, None] + q_sq[None, :] - 2 * block @ query.T  # (B, K)
            d2[idx[:, None] == picks[None, :]] = np.inf
            j = d2.argmin(0)  # (K,) first (lowest index) of the smallest
            d = np.sqrt(np.maximum(d2[j, np.arange(kk)], 0.0))
            better = (d < best) | ((d == best) & (idx[j] < nb))
            best[better], nb[better] = d[better], idx[j][better]

    m = min(NEIGHBOUR_SHORTLIST, n - 1)
    short_i = np.zeros((0, kk), np.int64)
    short_b = np.zeros((0, kk))
    for start in range(0, n, BOUND_ROWS):
        stop = min(n, start + BOUND_ROWS)
        b = np.concatenate([short_b, _bounds(coords, residual, picks, start, stop)])
        i = np.concatenate([short_i, np.broadcast_to(np.arange(start, stop)[:, None], (stop - start, kk))])
        keep = np.argpartition(b, m - 1, axis=0)[:m] if len(b) > m else np.arange(len(b))[:, None]
        short_b, short_i = np.take_along_axis(b, keep, 0), np.take_along_axis(i, keep, 0)
    first = np.unique(short_i[np.isfinite(short_b)])
    compare(first)
    seen = np.zeros(n, bool)
    seen[first] = True
    below = [  # rows whose bound is under some pick's nearest distance so far
        s + np.flatnonzero((_bounds(coords, residual, picks, s, s + BOUND_ROWS) < best).any(1))
        for s in range(0, n, BOUND_ROWS)
    ]
    later = np.concatenate(below)
    later = later[~seen[later]]
    if len(later):
        compare(later)
    return nb, best.astype(np.float32)
