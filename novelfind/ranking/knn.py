"""k-nearest-neighbour distances at library scale: exact where it matters, certified, sub-quadratic.

The density scores of the ranking are means of distances to the k nearest other rows. Computing them
exactly for every row costs N^2 distance evaluations (100,000 rows: 10^10), and an approximate index
(HNSW, IVF) gets some rows wrong: a missed search returns farther points, so an ordinary row looks
isolated, and with enough rows those false outliers crowd out the real ones.

What this module relies on instead is one property of approximate search: it returns real rows, and
distances to real rows. The k nearest rows it finds are each at least as far as the true k nearest, so
the mean distance it reports is an *upper bound* of the exact one, never an underestimate. Hence
``KnnScores``: an upper bound for every row from a search in compact k-means cells (``knn_cells``: each
cell's rows against the rows of the few cells nearest it, O(N x 1000) distance evaluations), made exact
for any rows asked for by a blocked matrix product against all N (``knn_exact``). A ranking by these
scores is exact as far as it reads, provided every row it reads is exact: any row not yet made exact
has a true score at most its upper bound, so it cannot belong above a row whose exact score is higher
(``certified_order``). The search's recall changes only how many rows must be made exact, never the
answer; ``KnnScores.stats`` says how close the bounds were.

The same holds when the vectors are read from the cache in chunks (``novelfind.ranking.sources``), where no
matrix is at hand. The candidates are searched in the principal coordinates p plus the residual norm
|r| (65 numbers a row, in memory), where distances are lower bounds of the raw ones
(``|p_a - p_b|^2 + (|r_a| - |r_b|)^2 <= d_ab^2``); each cell of rows reads the raw rows of the cells
nearest it by ``take`` (about 4 N rows read in all, a cell at a time) and measures its candidates
there, so the bounds are the very ones the matrix gives. The bounds from p and |r| alone,
``d_ab^2 <= |p_a - p_b|^2 + (|r_a| + |r_b|)^2``, need no raw row but were too loose: on 1000-d rows
whose residual holds most of the distance they were 1.7x the exact scores (against 1.04x measured),
so 11,000 of 20,000 rows had to be made exact, in 60 passes, instead of 900 in one. The exact pass
reads blocks of rows by ``take`` and does not read a block that the lower bound rules out for every
row asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from novelfind.base.devices import available_cpus
from novelfind.ranking.cells import (
    OutsideSearch,
    _direct_distances,
    _pairwise_to,
    _row_norms,
    _run_single_threaded,
    _smallest,
    _sq_dist,
    knn_cells,
)
from novelfind.ranking.sources import FeatureSource, as_source, blocks

EXACT_MAX_N = 4_096  # up to here every row is computed exactly (N^2 d flops); above, bounds + exact top
PRUNE_BLOCK = 2048  # exact search with pruning: rows per block (about 8 cells), skipped or read whole
PRUNE_MARGIN = 1e-3  # relative: a block is skipped only when farther than the bound by this much
BOUND_SLACK = 1e-5  # relative: upper bounds are inflated by this, so float rounding never breaks the bound


# --------------------------------------------------------------------------- exact search


def _reader(x: np.ndarray | FeatureSource) -> tuple[Callable[[np.ndarray], np.ndarray], int, int, bool]:
    """-> (read(rows) giving those rows as a float32 array, N, d, in memory)."""
    src = as_source(x)
    if src.matrix is not None:
        xm = np.ascontiguousarray(src.matrix, dtype=np.float32)  # (N, d)
        return (lambda ids: xm.take(ids, axis=0)), src.n, src.dim, True
    return (lambda ids: np.asarray(src.take(ids), dtype=np.float32)), src.n, src.dim, False


def _merge_top(
    best_d: np.ndarray, best_i: np.ndarray, d2: np.ndarray, cols: np.ndarray, kk: int
) -> tuple[np.ndarray, np.ndarray]:
    """The running k smallest: best so far (Q, k) merged with a block of squared distances d2 (Q, C) to
    the rows ``cols`` (C,) -> (Q, k) squared distances and row indices, unsorted."""
    j = _smallest(d2, min(kk, d2.shape[1]))  # (Q, m) the block's best
    both_d = np.concatenate([best_d, np.take_along_axis(d2, j, 1)], 1)  # (Q, k + m)
    both_i = np.concatenate([best_i, cols[j]], 1)
    jj = _smallest(both_d, kk)  # merged
    return np.take_along_axis(both_d, jj, 1), np.take_along_axis(both_i, jj, 1)


def _merge_parts(tops: list, kk: int) -> np.ndarray:
    """The k nearest (indices (Q, k)) from the per-thread lists [(squared distances, indices)]."""
    best_d = np.concatenate([t[0] for t in tops], 1)  # (Q, parts k)
    best_i = np.concatenate([t[1] for t in tops], 1)
    if len(tops) > 1:
        j = np.argsort(best_d, axis=1, kind="stable")
        best_i = np.take_along_axis(best_i, j[:, :kk], 1)
    return best_i


def knn_exact(
    x: np.ndarray | FeatureSource,
    rows: np.ndarray,
    k: int,
    *,
    chunk: int | None = None,
    centre: np.ndarray | None = None,
    prune: Pruning | None = None,
    groups: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest other rows of x (N, d) for each row in ``rows``: (distances (Q, k), indices (Q, k)).

    ``x``: a matrix, or a source read in chunks (``novelfind.ranking.sources``: its blocks of rows are read
    with ``take``, one after the other). Exact: a blocked matrix product of all queries against ``chunk`` rows
    of x at a time (so x is read once), ``|a - b|^2 = |a|^2 + |b|^2 - 2 a.b`` on rows centred at
    ``centre`` (default: the mean of x), keeping a running top-k. In memory, with more than one block of
    rows, the blocks are split between one Python thread per core running single-threaded kernels, whose
    top-k lists are merged at the end; one block is one multi-threaded matrix product. ``chunk`` defaults
    to what keeps the (Q, chunk) block near 16M entries and the centred chunk near 16 MB: memory
    O(Q d + 32M) per thread. A row is never its own neighbour; identical rows are each other's neighbours
    at distance 0 (the lower index first). k is capped at N - 1.

    ``prune``: skip, for each query, the blocks of rows that cannot hold one of its k nearest, judged
    in a cheaper space whose distances are lower bounds of those in x (``Pruning``); a block no query
    needs is not read. Same answer.

    ``groups`` (N,) labels: only rows of another group than the query's own count as its neighbours
    (an event's photos among the photos of other events); where fewer than k exist, the rest of the
    row is +inf at index -1.
    """
    read, n, d, in_memory = _reader(x)
    rows = np.asarray(rows, dtype=np.int64)
    kk = min(k, n - 1)
    q = len(rows)
    if q == 0 or kk <= 0:
        return np.zeros((q, max(kk, 0)), np.float32), np.zeros((q, max(kk, 0)), np.int64)
    if chunk is None:
        chunk = max(256, min(2**24 // q, 2**22 // d, 16384))
    if centre is None:
        src = as_source(x)
        centre = src.matrix.mean(0, dtype=np.float64) if in_memory else _mean(src)
    mu = np.asarray(centre, dtype=np.float32)  # (d,)
    xraw = read(rows)  # (Q, d)
    xq = xraw - mu  # (Q, d)
    qsq = (xq * xq).sum(1, keepdims=True)  # (Q, 1)
    gq = None if groups is None else np.asarray(groups)[rows]  # (Q,) each query's own group
    if prune is not None:
        best_i = _knn_exact_pruned(read, n, mu, rows, xq, qsq, kk, prune, in_memory, groups)
        return _direct_distances(read, xraw, best_i)
    arange_q = np.arange(q)
    starts = list(range(0, n, chunk))
    parts = max(1, min(available_cpus(), len(starts))) if in_memory else 1
    tops: list = [None] * parts

    def work(p: int) -> None:
        best_d = np.full((q, kk), np.inf, np.float32)  # (Q, k) squared distances
        best_i = np.full((q, kk), -1, dtype=np.int64)  # (Q, k)
        for c0 in starts[p::parts]:
            c1 = min(n, c0 + chunk)
            cols = np.arange(c0, c1)
            xb = read(cols)
            xb -= mu  # (C, d)
            d2 = _sq_dist(xq, qsq, xb, (xb * xb).sum(1))  # (Q, C)
            own = (rows >= c0) & (rows < c1)  # queries whose own row is in this chunk
            if own.any():
                d2[arange_q[own], rows[own] - c0] = np.inf
            if gq is not None:
                d2[groups[cols][None, :] == gq[:, None]] = np.inf
            best_d, best_i = _merge_top(best_d, best_i, d2, cols, kk)
        tops[p] = (best_d, best_i)

    _run_single_threaded(work, range(parts))
    return _direct_distances(read, xraw, _merge_parts(tops, kk))


def _mean(src: FeatureSource) -> np.ndarray:
    total = np.zeros(src.dim, np.float64)
    for _, b in blocks(src):
        total += b.sum(0, dtype=np.float64)
    return total / src.n


@dataclass
class Pruning:
    """What lets ``knn_exact`` skip rows: for every row of x, its coordinates in a space where distances
    are at most those in x (``lower``, (N, D), e.g. principal coordinates plus the residual norm), a
    permutation of the rows that keeps near rows together (``order``, e.g. k-means cells one after the
    other), and for every row an upper bound of its k-th nearest distance in x (``kth``, (N,); +inf
    where unknown). Rows are taken ``block`` at a time in ``order``; a query skips a block when every
    row of it is farther, in ``lower``, than its k-th bound (with a margin for float rounding) -- those
    rows cannot be among its k nearest. ``skipped`` counts the (query, block) pairs skipped, ``read``
    the blocks read."""

    lower: np.ndarray = field(repr=False)  # (N, D) float32
    order: np.ndarray = field(repr=False)  # (N,) int64 permutation of the rows
    kth: np.ndarray = field(repr=False)  # (N,) float32
    block: int = PRUNE_BLOCK
    skipped: int = 0
    pairs: int = 0
    read: int = 0


def _knn_exact_pruned(
    read: Callable[[np.ndarray], np.ndarray],
    n: int,
    mu: np.ndarray,
    qi: np.ndarray,
    xq: np.ndarray,
    qsq: np.ndarray,
    kk: int,
    prune: Pruning,
    in_memory: bool,
    groups: np.ndarray | None = None,
) -> np.ndarray:
    q = len(qi)
    zt = np.ascontiguousarray(prune.lower, dtype=np.float32)  # (N, D)
    order = np.asarray(prune.order, dtype=np.int64)
    zmu = zt[order[:: max(1, n // 65536)]].mean(0, dtype=np.float32)  # (D,) any centre: it cuts rounding
    zq = zt[qi] - zmu  # (Q, D)
    zqn = _row_norms(zq)  # (Q,)
    zqsq = (zqn * zqn)[:, None]  # (Q, 1)
    # a row can be among the k nearest only if its lower-bound distance is at most the k-th bound;
    # the margin covers the float rounding of both spaces (relative 1e-3 of the norms: far above it)
    thr = np.asarray(prune.kth, dtype=np.float32)[qi] * np.float32(1 + PRUNE_MARGIN)  # (Q,)
    starts = list(range(0, n, prune.block))
    # first a ball around each block (centre, radius in the lower-bound space): a query farther than
    # its bound from the whole ball skips the block at once; the others are checked row by row
    centres = np.empty((len(starts), zt.shape[1]), np.float32)  # (L, D)
    radii = np.empty(len(starts), np.float32)  # (L,)
    for b, c0 in enumerate(starts):
        zb = zt[order[c0 : c0 + prune.block]] - zmu  # (B, D)
        centres[b] = zb.mean(0)
        radii[b] = _row_norms(zb - centres[b]).max()
    ball = _pairwise_to(zq, centres) - radii - PRUNE_MARGIN * (zqn[:, None] + _row_norms(centres) + radii)
    near_ball = ball <= thr[:, None]  # (Q, L)
    parts = max(1, min(available_cpus(), len(starts))) if in_memory else 1
    tops: list = [None] * parts
    skipped = [0] * parts
    blocks_read = [0] * parts

    def work(p: int) -> None:
        best_d = np.full((q, kk), np.inf, np.float32)  # (Q, k) squared distances
        best_i = np.full((q, kk), -1, dtype=np.int64)  # (Q, k)
        for b in range(p, len(starts), parts):
            c0 = starts[b]
            ids = order[c0 : c0 + prune.block]  # (B,) row indices
            use = np.flatnonzero(near_ball[:, b])  # (U,) queries near the block's ball
            if len(use):
                zb = zt[ids] - zmu  # (B, D)
                zbn = _row_norms(zb)  # (B,)
                lb2 = _sq_dist(zq[use], zqsq[use], zb, zbn * zbn)  # (U, B) squared bounds
                lb = np.sqrt(np.maximum(lb2, 0, out=lb2), out=lb2)
                lb -= PRUNE_MARGIN * (zqn[use][:, None] + zbn)
                use = use[(lb <= thr[use][:, None]).any(1)]  # the queries this block can matter to
            skipped[p] += q - len(use)
            if len(use) == 0:
                continue
            blocks_read[p] += 1
            xb = read(ids)
            xb -= mu  # (B, d)
            d2 = _sq_dist(xq[use], qsq[use], xb, (xb * xb).sum(1))  # (U, B)
            d2[ids[None, :] == qi[use][:, None]] = np.inf  # a row is not its own neighbour
            if groups is not None:  # nor is a row of its own group
                d2[groups[ids][None, :] == groups[qi[use]][:, None]] = np.inf
            best_d[use], best_i[use] = _merge_top(best_d[use], best_i[use], d2, ids, kk)
        tops[p] = (best_d, best_i)

    _run_single_threaded(work, range(parts))
    prune.skipped += sum(skipped)
    prune.pairs += q * len(starts)
    prune.read += sum(blocks_read)
    return _merge_parts(tops, kk)


# --------------------------------------------------------------------------- certified scores


@dataclass
class KnnScores:
    """Mean distance of each row of x to its k nearest other rows: exact where ``exact``, else an upper bound.

    ``build`` makes every row exact when N <= ``EXACT_MAX_N`` (N^2 d flops; identical for any N to what the
    certified path gives on the rows it makes exact). Above, it finds k candidate neighbours per row with
    ``knn_cells`` in ``search``, a cheaper space whose near rows are near in x (default x itself), and
    bounds each row's score from above by the mean distance *in x* to those candidates (x read in
    chunks: each cell's candidate rows read with ``take``; the same bounds). Bounds are inflated by
    ``BOUND_SLACK`` so float rounding cannot put them below the exact value.
    ``means_at`` (k_1 < ... <= k): also the mean distance to the k_s nearest for each k_s, in ``at``
    (N, S), bounded and made exact with the same neighbours (the j-th nearest candidate is at least as
    far as the j-th nearest row, so the mean over the first k_s candidates bounds the exact one too).
    ``outside``: the cell search also fills this second list (``cells.OutsideSearch``: each row's
    candidates of another group, for event-knn), from the same matrix products.
    ``make_exact(rows)`` replaces those rows' bounds by exact scores, one blocked pass of ``knn_exact``
    over all N, and records each such row's nearest other row (``nearest``, ``nearest_distance``). With
    ``search_is_lower`` (distances in ``search`` are at most those in x) that pass skips, for each row,
    the blocks of rows that ``search`` puts beyond its k-th candidate (``Pruning``), and does not read a
    block that no row needs. ``stats`` counts the exact rows and passes and keeps bound / exact for each
    row made exact (how tight the approximate search was).
    """

    source: FeatureSource = field(repr=False)  # (N, M): the space the distances are measured in
    k: int
    values: np.ndarray = field(repr=False)  # (N,) float32 exact where ``exact``, an upper bound elsewhere
    exact: np.ndarray = field(repr=False)  # (N,) bool
    nearest: np.ndarray = field(repr=False)  # (N,) int64 nearest other row where ``exact``, else -1
    nearest_distance: np.ndarray = field(repr=False)  # (N,) float32 distance to it, NaN where unknown
    stats: dict = field(default_factory=dict)
    prune: Pruning | None = field(default=None, repr=False)  # what lets make_exact skip rows
    centre: np.ndarray | None = field(default=None, repr=False)  # (M,) rows are centred there (rounding)
    means_at: tuple[int, ...] = ()  # further neighbour counts whose mean distances ``at`` holds
    at: np.ndarray | None = field(default=None, repr=False)  # (N, S) float32, exact where ``exact``

    @classmethod
    def build(
        cls,
        x: np.ndarray | FeatureSource,
        k: int,
        *,
        search: np.ndarray | None = None,
        search_is_lower: bool = False,
        exact_max_n: int | None = None,
        centre: np.ndarray | None = None,
        means_at: tuple[int, ...] = (),
        outside: OutsideSearch | None = None,
    ) -> KnnScores:
        source = as_source(np.ascontiguousarray(x, dtype=np.float32) if isinstance(x, np.ndarray) else x)
        n = source.n
        limit = EXACT_MAX_N if exact_max_n is None else exact_max_n
        out = cls(
            source=source,
            k=k,
            values=np.zeros(n, np.float32),
            exact=np.zeros(n, dtype=bool),
            nearest=np.full(n, -1, dtype=np.int64),
            nearest_distance=np.full(n, np.nan, dtype=np.float32),
            stats={"n": n, "k": k, "exact_rows": 0, "passes": 0, "bound_over_exact": []},
            centre=centre,
            means_at=tuple(means_at),
            at=np.zeros((n, len(means_at)), np.float32) if means_at else None,
        )
        if n <= 1:  # no other row: score 0
            out.exact[:] = True
            out.stats["method"] = "exact"
            return out
        if n <= limit:
            out.make_exact(np.arange(n))
            out.stats["method"] = "exact"
            return out
        kk = min(k, n - 1)
        cells: list[np.ndarray] = []
        if search is None:
            if source.matrix is None:
                raise ValueError(
                    "a source read in chunks needs a search space (novelfind.ranking.pca.fit_space)"
                )
            dist, _ = knn_cells(source.matrix, kk, cells_out=cells)  # (N, k)
        else:  # candidates found in ``search``, measured in x
            dist, _ = knn_cells(search, kk, measure=source, cells_out=cells, outside=outside)
        out.values = (dist.mean(1) * (1 + BOUND_SLACK)).astype(np.float32)  # +inf where too few found
        if out.at is not None:
            out.at[:] = out._prefix_means(dist) * np.float32(1 + BOUND_SLACK)
        out.stats["method"] = "cells+exact"
        if search is not None and search_is_lower:  # distances there are at most those in x
            kth = (dist[:, -1] * (1 + BOUND_SLACK)).astype(np.float32)  # (N,) k-th candidate: a bound
            out.prune = Pruning(lower=search, order=np.concatenate(cells), kth=kth)
        return out

    def make_exact(self, rows: np.ndarray) -> None:
        """Exact scores for ``rows`` (those not exact yet), in one blocked pass over all N rows."""
        rows = np.asarray(rows, dtype=np.int64)
        rows = np.unique(rows[~self.exact[rows]])
        if len(rows) == 0:
            return
        dist, idx = knn_exact(self.source, rows, self.k, prune=self.prune, centre=self.centre)
        if self.prune is not None:
            self.stats["pairs_skipped"] = self.prune.skipped / max(self.prune.pairs, 1)
            self.stats["blocks_read"] = self.prune.read
        exact = dist.mean(1).astype(np.float32)
        self.nearest[rows], self.nearest_distance[rows] = idx[:, 0], dist[:, 0]
        if self.stats["passes"] or self.stats.get("method") != "exact":
            bound = self.values[rows]
            ok = exact > 0
            self.stats["bound_over_exact"].extend((bound[ok] / exact[ok]).tolist())
        self.values[rows] = exact
        if self.at is not None:
            self.at[rows] = self._prefix_means(dist)
        self.exact[rows] = True
        self.stats["exact_rows"] = int(self.exact.sum())
        self.stats["passes"] += 1

    def _prefix_means(self, dist: np.ndarray) -> np.ndarray:
        """(Q, S): the mean of the first k_s of each row's sorted distances (Q, k), for each k_s."""
        cum = np.cumsum(dist, axis=1, dtype=np.float64)  # (Q, k)
        cols = [min(k, dist.shape[1]) for k in self.means_at]
        return np.stack([cum[:, c - 1] / c for c in cols], axis=1).astype(np.float32)


def certified_order(
    values: Callable[[], np.ndarray],
    exact: np.ndarray,
    make_exact: Callable[[np.ndarray], None],
    walk: Callable[[np.ndarray], int],
    rows: np.ndarray | None = None,
    first: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Order rows by score (high first, ties by index) as far as ``walk`` reads, exactly.

    ``values()`` gives every row's score: exact where ``exact`` (bool (N,), updated in place by
    ``make_exact``), an upper bound elsewhere. ``walk(order)`` reads the order from the top and returns
    how many entries it used. Once every used entry is exact, the used part is the exact order: any other
    row's true score is at most its bound, which is at most the lowest used score (and a tie puts the
    lower index first, as in the exact order). Until then, the inexact rows among the first
    max(``first``, 2 x used) are made exact, and with them every row whose bound reaches the score
    now at position ``used`` (each of those must be exact in the end: that score is at least the
    exact one that will stand there), in one batch, and the order is redone. So the passes stay few
    (one, usually) however loose the bounds.
    ``rows``: bool mask (N,) of the rows that may be ordered (None: all). -> (order, scores).
    """
    want = max(first, 1)
    while True:
        scores = values()
        settled = exact.copy()  # (N,) the rows whose score in ``scores`` is exact
        order = np.lexsort((np.arange(len(scores)), -scores))
        if rows is not None:
            order = order[rows[order]]
        used = walk(order)
        # exact when they were read, not only now: ``walk`` may make rows exact as it reads (event-knn's
        # moments refine their events), which leaves ``scores`` and the order built from it stale
        if settled[order[:used]].all():
            return order, scores
        want = max(want, 2 * used)
        reach = int(np.searchsorted(-scores[order], -scores[order[used - 1]], side="right"))
        todo = order[: max(want, reach)]
        make_exact(todo[~exact[todo]])
