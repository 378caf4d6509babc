"""Compact k-means cells: the rows of a library cut into cells of a few hundred rows each, so that the
cells whose centres are nearest a cell's centre hold its rows' neighbours. The approximate neighbour
search of ``novelfind.ranking.knn`` (``knn_cells``) compares each cell's rows with the rows of those
cells only."""

from __future__ import annotations

import numpy as np

CELL_ROWS = 256  # approximate search: rows per k-means cell
CELL_BRANCH = 64  # most k-means centres per level of the cell hierarchy
CELL_TRAIN = 64  # k-means training rows per centre


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
