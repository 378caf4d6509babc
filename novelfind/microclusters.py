"""Microclusters: odd batches and single odd photos scored on one scale.

A library's memorable events come in batches (a night of astrophotography, a day of scanned pages).
Every photo of such a batch has close neighbours, the rest of its batch, so a k-nearest-neighbour score
calls the whole batch ordinary. The outlier-detection literature calls such a batch a *microcluster*
(McCatch, Sánchez Vinces, Cordeiro and Faloutsos, ICDE 2024; D.MCA, Jiang, Cordeiro and Akoglu, 2022):
a small group far from the rest of the data, to be found and scored as a whole, so that its members do
not mask each other.

The score here, ``microcluster`` in ``novelfind.ranking``:

1. **Microclusters**: the single-linkage components of the library at ``RADIUS`` (photos closer than
   the radius, chained), followed along each photo's ``GRAPH_K`` nearest neighbours. A component of at
   most ``SHARE`` of the library (and at least 2 photos) is a microcluster; a photo in a larger one (the
   ordinary bulk) or alone is its own.
2. **Score**: the mean distance from the photo to its ``KNN_K`` nearest photos *outside* its
   microcluster. For a photo on its own this is the plain k-NN score (``cosine-knn``), so single odd
   photos and batches are ranked on one scale: a batch far from the rest of the library scores as far
   as its members are from everything else; a burst or a tight group of an ordinary scene scores as
   the ordinary photos it is close to.

Distances are between rows scaled to unit length (0 = same direction, sqrt(2) = orthogonal). Every
constant has a meaning of its own: the radius is a distance between unit vectors, the share a share of
the library (McCatch's default largest microcluster is a tenth of the data), ``KNN_K`` the default's
neighbour count. Their sensitivity is in docs/bench/quality-moments.md.

Exact from a matrix and from the cache read in chunks: the neighbour graph is ``knn.knn_exact`` over all
rows, and the outside distances one blocked pass (``sources.blocks``) per query block, the same blocks
for either source. Quadratic in N: it computes every pair once (``knn.knn_exact``), unlike the
default's certified search.
"""

from __future__ import annotations

import math

import numpy as np

from novelfind.sources import FeatureSource, as_source, blocks

RADIUS = 0.7  # distance between unit vectors under which two photos are linked into one batch
SHARE = 0.1  # largest microcluster, as a share of the library (McCatch's default, c = 0.1)
KNN_K = 10  # neighbours outside the microcluster the score is the mean distance to (the default's k)
GRAPH_K = 30  # nearest neighbours followed when linking (a batch is linked along its members' nearest)
QUERY_ROWS = 2048  # grouped rows measured against the library at a time


def microclusters(x: np.ndarray | FeatureSource, radius: float = RADIUS, share: float = SHARE) -> np.ndarray:
    """Microcluster label of each row of x (rows taken as they are: pass unit-length rows): rows of
    one microcluster share a label >= 0; a row on its own (alone at ``radius``, or in a component of
    more than ``share`` of the rows) gets ``-1 - row``. -> int64 (N,)."""
    from novelfind import knn

    src = as_source(x)
    n = src.n
    own = -1 - np.arange(n, dtype=np.int64)
    if n < 2:
        return own
    dist, idx = knn.knn_exact(src, np.arange(n), min(GRAPH_K, n - 1))  # (N, G) each
    return _components(dist, idx, radius, share)


def _components(dist: np.ndarray, idx: np.ndarray, radius: float, share: float) -> np.ndarray:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(dist)
    rows, cols = np.nonzero(dist < radius)
    graph = coo_matrix((np.ones(len(rows), dtype=np.int8), (rows, idx[rows, cols])), shape=(n, n))
    _, lab = connected_components(graph, directed=False)
    size = np.bincount(lab)[lab]
    cap = max(2, math.ceil(share * n))
    return np.where((size < 2) | (size > cap), -1 - np.arange(n, dtype=np.int64), lab.astype(np.int64))


def microcluster_scores(
    x: np.ndarray | FeatureSource,
    radius: float = RADIUS,
    share: float = SHARE,
    neighbours: int = KNN_K,
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's mean distance to its ``neighbours`` nearest rows outside its microcluster, and the
    microcluster labels (``microclusters``): (scores float32 (N,), labels int64 (N,)). Rows as given
    (pass unit-length rows for the cosine geometry)."""
    from novelfind import knn

    src = as_source(x)
    n = src.n
    if n < 2:
        return np.zeros(n, np.float32), -1 - np.arange(n, dtype=np.int64)
    kk = min(neighbours, n - 1)
    dist, idx = knn.knn_exact(src, np.arange(n), max(kk, min(GRAPH_K, n - 1)))  # (N, G)
    labels = _components(dist, idx, radius, share)
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
    import torch

    from novelfind import knn

    q = torch.from_numpy(np.ascontiguousarray(src.take(rows), dtype=np.float32))  # (Q, d)
    qsq = (q * q).sum(1, keepdim=True)  # (Q, 1)
    qlab = torch.from_numpy(labels[rows])[:, None]  # (Q, 1)
    lab = torch.from_numpy(labels)
    best_d = torch.full((len(rows), k), math.inf)  # (Q, k) squared distances
    best_i = torch.zeros((len(rows), k), dtype=torch.int64)
    for start, block in blocks(src):
        b = torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32))  # (B, d)
        cols = torch.arange(start, start + len(b))
        d2 = torch.addmm(qsq + (b * b).sum(1), q, b.T, alpha=-2)  # (Q, B)
        d2[qlab == lab[cols][None, :]] = math.inf  # own microcluster (and the row itself)
        best_d, best_i = knn._merge_top(best_d, best_i, d2, cols, k)
    reader = lambda ids: torch.from_numpy(np.ascontiguousarray(src.take(ids.numpy()), dtype=np.float32))  # noqa: E731
    dist, _ = knn._direct_distances(reader, q, best_i)
    return dist.mean(1).astype(np.float32)
