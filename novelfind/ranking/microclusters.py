"""Microclusters: odd batches and single odd photos scored on one scale.

A library's memorable events come in batches (a night of astrophotography, a day of scanned pages).
Every photo of such a batch has close neighbours, the rest of its batch, so a k-nearest-neighbour score
calls the whole batch ordinary. The outlier-detection literature calls such a batch a *microcluster*
(McCatch, Sánchez Vinces, Cordeiro and Faloutsos, ICDE 2024; D.MCA, Jiang, Cordeiro and Akoglu, 2022):
a small group far from the rest of the data, to be found and scored as a whole, so that its members do
not mask each other.

The score here, ``microcluster`` in ``novelfind.ranking.methods``:

1. **Microclusters**: single-linkage components of the library (photos closer than a radius,
   chained, followed along each photo's ``GRAPH_K`` nearest neighbours) at a geometric series of radii,
   as McCatch counts neighbours: from 2 (the largest distance between unit vectors) down by a factor
   ``RATIO`` to ``MIN_RADIUS``. A photo's microcluster is its component at the largest radius at which
   that component holds at least 2 photos and at most ``SHARE`` of the library; a photo with no such
   component is on its own. Components nest as the radius grows, so this is a partition.
2. **Score**: the mean distance from the photo to its ``KNN_K`` nearest photos *outside* its
   microcluster. For a photo on its own this is the plain k-NN score, so single odd photos and batches
   are ranked on one scale: a batch far from the rest of the library scores as far as its members are
   from everything else.

Distances are between rows scaled to unit length (0 = same direction, sqrt(2) = orthogonal). Every
constant has a meaning of its own: the radii are distances between unit vectors, the share a share of
the library (McCatch's default largest microcluster, a tenth of the data), ``KNN_K`` a neighbour count.
It was chosen on the benchmark's dev split on the classifier's logits (``METHOD_FEATURE``), where
batches stand further apart than in the pooled vector. Their sensitivity and the method's results are
in docs/bench/quality-moments.md: it finds batches of pages and screenshots that every neighbour score
misses, and loses to ``cosine-knn`` on most other sets and on the 10,000-photo dev library (ordinary
groups, bursts or a scene shot many times, seem to stand as far apart), so it is not the default.

Exact from a matrix and from the cache read in chunks: the neighbour lists come from ``knn.knn_exact``,
``QUERY_ROWS`` rows at a time, and the outside distances from one blocked pass (``sources.blocks``) per
block of grouped rows, the same blocks for either source; memory O(N x GRAPH_K). Quadratic in N: it
computes every pair (10,000 photos took 8.6x the default's time), unlike the default's certified search.
"""

from __future__ import annotations

import math

import numpy as np

from novelfind.ranking.sources import FeatureSource, as_source, blocks

RATIO = 1.25  # each linkage radius is the previous one / RATIO, from 2 (the largest unit distance) down
MIN_RADIUS = 0.05  # no smaller radius: re-saved copies of one photo are ~0.01-0.05 apart
SHARE = 0.1  # largest microcluster, as a share of the library (McCatch's default, c = 0.1)
KNN_K = 50  # neighbours outside the microcluster the score is the mean distance to
GRAPH_K = 300  # nearest neighbours followed when linking (a batch is linked along its members' nearest)
QUERY_ROWS = 2048  # grouped rows measured against the library at a time


def radii(ratio: float = RATIO) -> list[float]:
    """The linkage radii, largest first: 2, 2 / ratio, 2 / ratio^2, ... down to ``MIN_RADIUS``."""
    out, r = [], 2.0
    while r >= MIN_RADIUS:
        out.append(r)
        r /= ratio
    return out


def microclusters(x: np.ndarray | FeatureSource, share: float = SHARE, ratio: float = RATIO) -> np.ndarray:
    """Microcluster label of each row of x (rows taken as they are: pass unit-length rows): rows of
    one microcluster share a label >= 0; a row on its own gets ``-1 - row``. -> int64 (N,)."""

    src = as_source(x)
    n = src.n
    own = -1 - np.arange(n, dtype=np.int64)
    if n < 2:
        return own
    dist, idx = _neighbours(src, min(GRAPH_K, n - 1))
    return _partition(dist, idx, share, ratio)


def _neighbours(src: FeatureSource, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest other rows of every row, (N, k) distances and indices, exact (``knn.knn_exact``),
    ``QUERY_ROWS`` query rows per pass over the source: memory O(QUERY_ROWS x M + N x k), never the
    whole matrix, whichever the source."""
    from novelfind.ranking import knn

    n = src.n
    dist = np.empty((n, k), np.float32)
    idx = np.empty((n, k), np.int64)
    for q0 in range(0, n, QUERY_ROWS):
        rows = np.arange(q0, min(n, q0 + QUERY_ROWS))
        dist[rows], idx[rows] = knn.knn_exact(src, rows, k)
    return dist, idx


def _partition(dist: np.ndarray, idx: np.ndarray, share: float, ratio: float) -> np.ndarray:
    """Each row's component at the largest radius where it holds 2 to ``share`` x N rows (labels
    >= 0), else ``-1 - row``; components along the neighbour lists (dist, idx) (N, G)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(dist)
    cap = max(2, math.ceil(share * n))
    labels = -1 - np.arange(n, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    for j, r in enumerate(radii(ratio)):
        rows, cols = np.nonzero(dist < r)
        graph = coo_matrix((np.ones(len(rows), dtype=np.int8), (rows, idx[rows, cols])), shape=(n, n))
        _, lab = connected_components(graph, directed=False)
        size = np.bincount(lab)[lab]
        fit = (size >= 2) & (size <= cap) & ~done
        labels[fit] = lab[fit] + j * n  # one label space per radius
        done |= fit
    return labels


def microcluster_scores(
    x: np.ndarray | FeatureSource,
    share: float = SHARE,
    neighbours: int = KNN_K,
    ratio: float = RATIO,
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's mean distance to its ``neighbours`` nearest rows outside its microcluster, and the
    microcluster labels (``microclusters``): (scores float32 (N,), labels int64 (N,)). Rows as given
    (pass unit-length rows for the cosine geometry)."""

    src = as_source(x)
    n = src.n
    if n < 2:
        return np.zeros(n, np.float32), -1 - np.arange(n, dtype=np.int64)
    kk = min(neighbours, n - 1)
    dist, idx = _neighbours(src, max(kk, min(GRAPH_K, n - 1)))  # (N, G)
    labels = _partition(dist, idx, share, ratio)
    scores = dist[:, :kk].mean(1).astype(np.float32)  # a row on its own: its plain k-NN score
    grouped = np.flatnonzero(labels >= 0)
    for q0 in range(0, len(grouped), QUERY_ROWS):
        rows = grouped[q0 : q0 + QUERY_ROWS]
        scores[rows] = _outside_means(src, rows, labels, kk)
    return scores, labels


def _outside_means(src: FeatureSource, rows: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Mean distance of each of ``rows`` to its k nearest rows of another label: one pass over the
    source's blocks, a running top-k of squared distances (rows of the same label masked out), the
    chosen k measured again from the differences (``knn._direct_distances``)."""
    from novelfind.ranking import knn

    q = np.ascontiguousarray(src.take(rows), dtype=np.float32)  # (Q, d)
    qsq = (q * q).sum(1, keepdims=True)  # (Q, 1)
    qlab = labels[rows][:, None]  # (Q, 1)
    best_d = np.full((len(rows), k), np.inf, np.float32)  # (Q, k) squared distances
    best_i = np.zeros((len(rows), k), dtype=np.int64)
    for start, block in blocks(src):
        b = np.ascontiguousarray(block, dtype=np.float32)  # (B, d)
        cols = np.arange(start, start + len(b))
        d2 = knn._sq_dist(q, qsq, b, (b * b).sum(1))  # (Q, B)
        d2[qlab == labels[cols][None, :]] = np.inf  # own microcluster (and the row itself)
        best_d, best_i = knn._merge_top(best_d, best_i, d2, cols, k)
    reader = lambda ids: np.ascontiguousarray(src.take(ids), dtype=np.float32)  # noqa: E731
    dist, _ = knn._direct_distances(reader, q, best_i)
    return dist.mean(1).astype(np.float32)
