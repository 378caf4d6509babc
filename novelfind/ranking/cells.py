"""Compact k-means cells: the rows of a library cut into cells of a few hundred rows each, so that the
cells whose centres are nearest a cell's centre hold its rows' neighbours; and the approximate
neighbour search in them (``knn_cells``), which compares each cell's rows with the rows of those cells
only. Its candidates give the upper bounds that ``novelfind.ranking.knn`` makes exact where needed. The
numpy kernels both searches use (distances by one matrix product, the k smallest, distances measured
from the differences, work split over one thread per core) are here too."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from novelfind.base.devices import available_cpus
from novelfind.ranking.sources import FeatureSource

CELL_ROWS = 256  # approximate search: rows per k-means cell
CELL_PROBE = 4  # cells each cell's rows are compared with (its own and those with the nearest centres)
CELL_BRANCH = 64  # most k-means centres per level of the cell hierarchy
CELL_TRAIN = 64  # k-means training rows per centre


# --------------------------------------------------------------------------- numpy helpers


def _row_norms(a: np.ndarray) -> np.ndarray:
    """The length of each vector along the last axis of a (float32)."""
    return np.sqrt(np.einsum("...j,...j->...", a, a))


def _sq_dist(aq: np.ndarray, asq: np.ndarray, b: np.ndarray, bsq: np.ndarray) -> np.ndarray:
    """(Q, B) squared distances |a|^2 + |b|^2 - 2 a.b from the rows aq (Q, d), b (B, d) and their squared
    lengths asq (Q, 1), bsq (B,): one matrix product (BLAS), then in place."""
    d2 = aq @ b.T  # (Q, B)
    d2 *= -2
    d2 += asq
    d2 += bsq
    return d2


def _smallest(d2: np.ndarray, m: int) -> np.ndarray:
    """Column indices (Q, m) of the m smallest entries of each row of d2 (Q, C), in no order."""
    if m >= d2.shape[1]:
        return np.broadcast_to(np.arange(d2.shape[1]), d2.shape).copy()
    return np.argpartition(d2, m - 1, axis=1)[:, :m]


def _pairwise_to(aq: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(Q, B) distances between the rows of aq and of b (the Gram form, clamped at 0: for coarse choices,
    such as which cells or blocks are near)."""
    d2 = _sq_dist(aq, (aq * aq).sum(1, keepdims=True), b, (b * b).sum(1))
    return np.sqrt(np.maximum(d2, 0, out=d2), out=d2)


def _direct_distances(
    read: Callable[[np.ndarray], np.ndarray], xq: np.ndarray, idx: np.ndarray, chunk: int = 4096
) -> tuple[np.ndarray, np.ndarray]:
    """||x_q - x_j|| for the chosen neighbours idx (Q, k) of the query vectors xq (Q, d), from the
    differences (the |a|^2 + |b|^2 - 2 a.b form that chose them loses ~1e-5 of a small distance), sorted
    per row, equal distances by row index; an index -1 (none) is +inf, last."""
    q, kk = idx.shape
    dist = np.empty((q, kk), np.float32)
    none = idx < 0
    for c0 in range(0, q, chunk):
        c1 = min(q, c0 + chunk)
        diff = read(np.maximum(idx[c0:c1], 0).reshape(-1)).reshape(c1 - c0, kk, -1)  # (C, k, d)
        diff -= xq[c0:c1, None, :]
        dist[c0:c1] = _row_norms(diff)
    dist[none] = np.inf
    j = np.lexsort((np.where(none, np.iinfo(np.int64).max, idx), dist), axis=1)
    return np.take_along_axis(dist, j, 1), np.take_along_axis(idx, j, 1)


def _run_single_threaded(fn: Callable[[int], None], items) -> None:
    """fn over items on one Python thread per core, each running single-threaded kernels (small matrix
    products parallelise badly inside one kernel, and stall on a busy machine). numpy releases the GIL
    in its matrix products, partitions and sorts; the BLAS library's own threads are held at one
    meanwhile (threadpoolctl)."""
    threads = available_cpus()
    items = list(items)
    if threads <= 1 or len(items) < 2:
        for i in items:
            fn(i)
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, items))


# ------------------------------------------------------------------- k-means cells and the search in them


def kmeans_cells(x: np.ndarray, rows: int = CELL_ROWS, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """Cut the rows of x (N, d) into compact cells of about ``rows`` rows -> (row indices per cell, centres).

    k-means (faiss, 10 iterations on at most ``CELL_TRAIN`` rows per centre) with at most ``CELL_BRANCH``
    centres per level: a node with more rows than ``CELL_BRANCH`` cells can hold is cut into
    ``CELL_BRANCH`` parts first and each part cut again, so assigning the rows costs O(N d CELL_BRANCH)
    per level rather than O(N d N / rows). Cells are compact (unlike slabs), so the cells whose centres
    are nearest to a cell's centre are the ones that hold its rows' neighbours.
    """
    import faiss

    xc = np.ascontiguousarray(x, dtype=np.float32)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # many small calls: OpenMP start-up cost more than it saved (busy box: 10x)
    try:
        cells = _cells(faiss, xc, rows, seed)
    finally:
        faiss.omp_set_num_threads(threads)
    centres = np.stack([xc[c].mean(0) for c in cells]).astype(np.float32)  # (L, d)
    return cells, centres


def _cells(faiss, xc: np.ndarray, rows: int, seed: int) -> list[np.ndarray]:
    d = xc.shape[1]
    cells: list[np.ndarray] = []
    stack = [np.arange(xc.shape[0])]
    level_seed = seed
    while stack:
        idx = stack.pop()
        want = len(idx) // rows
        if want <= 1:
            cells.append(idx)
            continue
        parts = min(want, CELL_BRANCH)
        sub = xc[idx] if len(idx) <= parts * CELL_TRAIN else xc[idx[:: -(-len(idx) // (parts * CELL_TRAIN))]]
        km = faiss.Kmeans(d, parts, niter=10, seed=level_seed, min_points_per_centroid=1)
        level_seed += 1
        km.train(np.ascontiguousarray(sub))
        _, lab = km.index.search(xc[idx], 1)  # (n_node, 1) nearest centre
        lab = lab[:, 0]
        order = np.argsort(lab, kind="stable")
        groups = [
            g for g in np.split(idx[order], np.cumsum(np.bincount(lab, minlength=parts))[:-1]) if len(g)
        ]
        if len(groups) == 1:  # k-means could not cut it (identical rows): cut by position
            cells += np.array_split(idx, want)
            continue
        for g in groups:
            # a last-level part is a cell unless it came out far too big (then it is cut again)
            (cells if parts == want and len(g) <= 4 * rows else stack).append(g)
    return cells


@dataclass
class OutsideSearch:
    """A second list that ``knn_cells`` fills from the same search: each row's ``k`` nearest candidates
    *of another group* (``groups`` (N,) labels: an event's photos among the photos of other events),
    taken from its ``look`` nearest in the search space, its own group's dropped, and measured as the
    first list is; fewer where fewer of the ``look`` lie outside (+inf, index -1). A row whose first-list
    candidates are all of other groups has them as its second list too (they are its nearest
    outside); only ``rows`` (bool (N,); None: all) get a second list."""

    groups: np.ndarray = field(repr=False)  # (N,) labels
    look: int
    rows: np.ndarray | None = field(default=None, repr=False)  # (N,) bool: the rows that need it (None: all)
    dist: np.ndarray | None = field(default=None, repr=False)  # (N, k) float32, sorted
    index: np.ndarray | None = field(default=None, repr=False)  # (N, k) int64


def knn_cells(
    x: np.ndarray,
    k: int,
    *,
    measure: np.ndarray | FeatureSource | None = None,
    rows: int = CELL_ROWS,
    probe: int = CELL_PROBE,
    seed: int = 0,
    cells_out: list | None = None,
    outside: OutsideSearch | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Approximate k nearest other rows of every row of x (N, d): (distances (N, k), indices (N, k)).

    The rows are cut into compact cells (``kmeans_cells``); the rows of each cell are compared, in one
    matrix product, with every row of the ``probe`` cells whose centres are nearest its own (itself
    included). Cost O(N probe rows d). The distances are to real rows, so each is at least the exact one
    of the same rank (an upper bound); a row with fewer than k candidates gets +inf there.

    ``measure`` (N, M): find the candidates in x but return their distances measured in ``measure``,
    sorted (an upper bound there too, good when rows near in x are near in ``measure``). A cell's
    candidates are gathered once, so the rows read stay near the cache. ``cells_out``: a list that
    receives the cells (row indices per cell).
    ``measure`` may be a source read in chunks (``novelfind.ranking.sources``): each cell then reads the rows
    of its ``probe`` cells with ``take`` (``probe`` x N rows in all, a cell at a time) and the distances
    are those the matrix would give, bit for bit.
    ``outside``: also each row's k nearest candidates of another group (``OutsideSearch``), from the
    same matrix products; a candidate in both lists is measured once.
    """
    n, d = x.shape
    xc = np.ascontiguousarray(x, dtype=np.float32)
    kk = min(k, n - 1)
    cells, centres = kmeans_cells(xc, rows, seed)
    if cells_out is not None:
        cells_out.extend(cells)
    p = min(probe, len(cells))
    near = np.argsort(_pairwise_to(centres, centres), axis=1, kind="stable")[:, :p]  # (L, P)
    for i in range(len(cells)):  # its own cell first (a tie with an identical centre could move it)
        if near[i, 0] != i:
            near[i] = np.concatenate([[i], near[i][near[i] != i][: p - 1]])
    mu = xc.mean(0, dtype=np.float64).astype(np.float32)

    def read_x(ids: np.ndarray) -> np.ndarray:
        return xc.take(ids, axis=0)

    sq = np.concatenate([_row_norms(xc[i : i + 16384] - mu) for i in range(0, n, 16384)])
    sq *= sq  # (N,) squared norms of the centred rows
    dist = np.full((n, kk), np.inf, dtype=np.float32)
    index = np.full((n, kk), -1, dtype=np.int64)
    if outside is not None:
        outside.dist, outside.index = dist.copy(), index.copy()
    mt = None
    if isinstance(measure, np.ndarray):
        mt = np.ascontiguousarray(measure, dtype=np.float32)
    elif measure is not None and measure.matrix is not None:
        mt = np.ascontiguousarray(measure.matrix, dtype=np.float32)

    def work(c: int) -> None:
        q = cells[c]
        base = np.concatenate([cells[j] for j in near[c]])  # own rows first
        xq = xc[q] - mu  # (Q, d)
        xb = xc[base] - mu  # (B, d)
        d2 = _sq_dist(xq, sq[q][:, None], xb, sq[base])  # (Q, B)
        d2[np.arange(len(q)), np.arange(len(q))] = np.inf  # row j of the cell is column j of the base
        m = min(kk, len(base) - 1)
        j = _smallest(d2, m)  # (Q, m), sorted below
        cand = base[j]  # (Q, m)
        jo = None if outside is None else _outside_first(d2, base, q, j, outside, kk)  # (Q, m') or None
        if measure is None:  # distances from the differences, as knn_exact gives them
            dist[q, :m], index[q, :m] = _direct_distances(read_x, xc[q], cand)
            if jo is not None:
                found = np.where(jo >= 0, base[np.maximum(jo, 0)], -1)
                outside.dist[q, : jo.shape[1]], outside.index[q, : jo.shape[1]] = _direct_distances(
                    read_x, xc[q], found
                )
            return
        # one neighbour rank at a time: the (Q, M) differences stay in cache
        if mt is None:  # a source read in chunks: this cell's base rows, its own first
            rows_m, cand_t = np.asarray(measure.take(base), np.float32), np.ascontiguousarray(j.T)
        else:
            rows_m, cand_t = mt, np.ascontiguousarray(cand.T)  # (m, Q) rows of mt
        xm = rows_m[: len(q)] if mt is None else mt[q]  # (Q, M)
        diff = np.empty_like(xm)  # (Q, M)
        dm = np.empty((len(q), m), np.float32)  # (Q, m)
        for r in range(m):
            np.take(rows_m, cand_t[r], axis=0, out=diff)
            diff -= xm
            dm[:, r] = _row_norms(diff)
        if jo is not None:  # the outside list: what the first measured already, the rest now
            at = jo[:, :, None] == j[:, None, :]  # (Q, m', m)
            known = at.any(2)
            do = np.where(known, dm[np.arange(len(q))[:, None], at.argmax(2)], np.inf).astype(np.float32)
            for r in range(jo.shape[1]):
                sel = np.flatnonzero(~known[:, r] & (jo[:, r] >= 0))
                if len(sel):
                    cols = jo[sel, r] if mt is None else base[jo[sel, r]]
                    do[sel, r] = _row_norms(rows_m.take(cols, axis=0) - xm[sel])
            oo = np.argsort(do, axis=1, kind="stable")
            found = np.where(jo >= 0, base[np.maximum(jo, 0)], -1)
            outside.dist[q, : jo.shape[1]] = np.take_along_axis(do, oo, 1)
            outside.index[q, : jo.shape[1]] = np.take_along_axis(found, oo, 1)
        o = np.argsort(dm, axis=1)
        dist[q, :m] = np.take_along_axis(dm, o, 1)
        index[q, :m] = np.take_along_axis(cand, o, 1)

    _run_single_threaded(work, range(len(cells)))
    return dist, index


def _outside_first(
    d2: np.ndarray, base: np.ndarray, q: np.ndarray, j0: np.ndarray, outside: OutsideSearch, kk: int
) -> np.ndarray:
    """(Q, m') positions in ``base`` of each query's kk nearest rows (by d2 (Q, B)) of another group,
    among its ``outside.look`` nearest, nearest first; -1 where fewer lie outside (or where the row
    needs none). ``j0`` (Q, m): the first list's positions, its m nearest: where they all lie outside,
    they are the answer."""
    g = outside.groups
    out = np.full((len(q), min(kk, d2.shape[1] - 1)), -1, np.int64)
    need = np.ones(len(q), bool) if outside.rows is None else outside.rows[q]
    mixed = need & (g[base[j0]] == g[q][:, None]).any(1)  # (Q,) a row of its own group among the m
    clear = need & ~mixed
    out[clear, : j0.shape[1]] = j0[clear]
    if mixed.any():
        d2m, qm = d2[mixed], q[mixed]
        j = _smallest(d2m, min(max(outside.look, kk), d2.shape[1] - 1))  # (Q', L)
        j = np.take_along_axis(j, np.argsort(np.take_along_axis(d2m, j, 1), axis=1, kind="stable"), 1)
        other = g[base[j]] != g[qm][:, None]  # (Q', L) nearest first
        first = np.argsort(~other, axis=1, kind="stable")[:, : out.shape[1]]  # the others first, in order
        out[mixed, : first.shape[1]] = np.where(
            np.take_along_axis(other, first, 1), np.take_along_axis(j, first, 1), -1
        )
    return out
