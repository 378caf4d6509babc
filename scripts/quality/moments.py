"""Moments: picks that are groups of photos (an odd batch) or single photos, and how they are scored.

A *moment* is a representative photo and its members. Every method measured here returns moments, so
that the metrics over moments compare like with like:

- a score-only method (cosine k-NN, cleanlab, IsolationForest, ADS, GLOSH) is walked best first and each
  pick takes as members its microcluster: the shipped method's (``novelfind.ranking.microclusters``), or
  ``microclusters`` here (its single-linkage component at radius r, when that component holds at most a
  share c of the library; else the pick alone); a photo already a member of an earlier pick is passed
  over;
- the microcluster scores (``outside_knn``) are walked the same way with their own radius and share.

Metrics (``moment_metrics``), K = number of odd photos, M = number of odd moments (novelty groups):

- moment recall at M: the share of odd moments with a photo (representative or member) among the
  first M picks;
- expanded F1: the picks written out as photos (each representative followed by its members, nearest
  first), cut at K photos; an ordinary photo among the members is a false positive.

Distances are between unit-length vectors (0 same direction, sqrt(2) orthogonal, 2 opposite).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

GRAPH_K = 300  # neighbours kept per photo for linkage (a component is followed along these edges)


@dataclass
class Moments:
    reps: list[int]  # representative of each pick, best first
    members: list[np.ndarray]  # the other photos of each pick, nearest to the representative first
    scores: np.ndarray  # (N,) the score the walk followed (higher = more novel)


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def neighbours(xn: np.ndarray, k: int, chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest other rows of unit vectors: distances (N, k) ascending and indices."""
    xt = torch.from_numpy(np.ascontiguousarray(xn))
    n = len(xn)
    kk = min(k, n - 1)
    ds, ix = [], []
    for s in range(0, n, chunk):
        sim = xt[s : s + chunk] @ xt.T  # (C, N)
        sim[torch.arange(len(sim)), torch.arange(s, s + len(sim))] = -3.0
        v, i = torch.topk(sim, kk, dim=1)
        ds.append((2 - 2 * v).clamp_min(0).sqrt())
        ix.append(i)
    return torch.cat(ds).numpy().astype(np.float64), torch.cat(ix).numpy()


def components(nd: np.ndarray, ni: np.ndarray, r: float) -> tuple[np.ndarray, np.ndarray]:
    """Single-linkage components at radius r along the neighbour graph: labels (N,) and sizes (N,)."""
    n = len(nd)
    rows, cols = np.nonzero(nd < r)
    g = coo_matrix((np.ones(len(rows)), (rows, ni[rows, cols])), shape=(n, n))
    _, lab = connected_components(g, directed=False)
    return lab, np.bincount(lab)[lab]


def microclusters(nd, ni, r: float, share: float) -> np.ndarray:
    """Microcluster label per photo: its component at r when that holds at most ``share`` of the
    library (and at least 2), else a label of its own (-1 - row)."""
    n = len(nd)
    lab, size = components(nd, ni, r)
    cap = max(2, int(np.ceil(share * n)))
    own = (size < 2) | (size > cap)
    return np.where(own, -1 - np.arange(n), lab)


def outside_knn(xn: np.ndarray, nd, ni, mc: np.ndarray, k: int) -> np.ndarray:
    """Mean distance of each photo to the k nearest photos outside its microcluster. A photo alone
    gets its plain k-NN distance: one formula for single photos and batches."""
    n = len(xn)
    score = nd[:, :k].mean(1).copy()
    grouped = np.flatnonzero(mc >= 0)
    if len(grouped) == 0:
        return score
    xt = torch.from_numpy(np.ascontiguousarray(xn))
    mct = torch.from_numpy(mc)
    for s in range(0, len(grouped), 1024):
        rows = torch.from_numpy(grouped[s : s + 1024])
        d = (2 - 2 * (xt[rows] @ xt.T)).clamp_min(0).sqrt()  # (C, N)
        d[mct[rows][:, None] == mct[None, :]] = float("inf")
        v, _ = torch.topk(d, min(k, n - 1), dim=1, largest=False)
        score[grouped[s : s + 1024]] = v.double().mean(1).numpy()
    return score


def walk(scores: np.ndarray, xn: np.ndarray, mc: np.ndarray, count: int) -> Moments:
    """The first ``count`` moments, best first: the best photo not yet taken, its microcluster as the
    moment; representative = the member nearest to the others (the medoid), members nearest to it."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    taken = np.zeros(len(scores), dtype=bool)
    reps: list[int] = []
    members: list[np.ndarray] = []
    by_label: dict[int, np.ndarray] = {}
    grouped = np.flatnonzero(mc >= 0)
    for i in grouped:
        by_label.setdefault(int(mc[i]), []).append(i)
    for i in order:
        if len(reps) == count:
            break
        if taken[i]:
            continue
        group = np.asarray(by_label.get(int(mc[i]), [i]), dtype=np.int64) if mc[i] >= 0 else np.array([i])
        taken[group] = True
        if len(group) > 1:
            g = xn[group]
            d = np.sqrt(np.maximum(2 - 2 * g @ g.T, 0))
            rep = int(group[np.argmin(d.sum(1))])
            dr = np.sqrt(np.maximum(2 - 2 * xn[group] @ xn[rep], 0))
            rest = group[np.argsort(dr, kind="stable")]
            others = rest[rest != rep]
        else:
            rep, others = int(i), np.array([], dtype=np.int64)
        reps.append(rep)
        members.append(others)
    return Moments(reps, members, scores)


def expanded(m: Moments, k: int, picks: list[int] | None = None) -> np.ndarray:
    """The picks written out as photos (representative, then members), the first k."""
    out: list[int] = []
    for j in range(len(m.reps)) if picks is None else picks:
        out.append(m.reps[j])
        out.extend(int(x) for x in m.members[j])
        if len(out) >= k:
            break
    return np.asarray(out[:k], dtype=np.int64)


def moment_metrics(
    m: Moments, labels: np.ndarray, groups: np.ndarray, order: list[int] | None = None
) -> dict:
    """Moment recall at M and F1 over the expanded list at K (``order``: the picks' order, default
    as walked)."""
    k = int(labels.sum())
    total = np.unique(groups[groups >= 0])
    mm = len(total)
    seq = list(range(len(m.reps))) if order is None else order
    hit: set[int] = set()
    for j in seq[:mm]:
        g = groups[np.concatenate([[m.reps[j]], m.members[j]]).astype(np.int64)]
        hit.update(int(x) for x in g[g >= 0])
    photos = expanded(m, k, seq)
    tp = int(labels[photos].sum())
    return {"moment_recall": len(hit) / max(mm, 1), "f1_expanded": 2 * tp / (len(photos) + k) if tp else 0.0}


# --------------------------------------------------------------------------- choosing K moments


def farthest_first(reps_x: np.ndarray, count: int) -> list[int]:
    """Greedy farthest-first: the best moment, then each time the one farthest from those chosen."""
    chosen = [0]
    dmin = np.sqrt(np.maximum(2 - 2 * reps_x @ reps_x[0], 0))
    while len(chosen) < min(count, len(reps_x)):
        dmin[chosen] = -1
        j = int(np.argmax(dmin))
        chosen.append(j)
        dmin = np.minimum(dmin, np.sqrt(np.maximum(2 - 2 * reps_x @ reps_x[j], 0)))
    return chosen


def ads_choice(reps_x: np.ndarray, count: int, seed: int) -> list[int]:
    """ADS (paper Algorithm 1, the shipped solver) on the shortlist's representatives: the ``count``
    with the largest weights, in weight order."""
    from novelfind.ranking.solver import ADSConfig, ads

    if len(reps_x) <= count:
        return list(range(len(reps_x)))
    w = np.asarray(ads(reps_x.astype(np.float32), count, ADSConfig(seed=seed)).weights, dtype=np.float64)
    return [int(j) for j in np.argsort(-w, kind="stable")[:count]]


def glosh(x: np.ndarray, min_cluster_size: int) -> np.ndarray:
    """GLOSH outlier scores (Campello et al. 2015) from scikit-learn's HDBSCAN hierarchy: for each
    photo, 1 - lambda(photo leaves its cluster) / max lambda of that cluster and its descendants."""
    from sklearn.cluster import HDBSCAN
    from sklearn.cluster._hdbscan._tree import _condense_tree

    h = HDBSCAN(min_cluster_size=min_cluster_size, copy=True).fit(x)
    tree = _condense_tree(h._single_linkage_tree_, min_cluster_size)
    n = len(x)
    parent, child, lam = tree["parent"], tree["child"], tree["value"]  # lambda = 1 / distance
    top = int(parent.max()) + 1
    lmax = np.zeros(top)
    np.maximum.at(lmax, parent, lam)
    clusters = child >= n
    for p, c in sorted(zip(parent[clusters], child[clusters], strict=True), key=lambda t: -t[1]):
        lmax[p] = max(lmax[p], lmax[c])  # children (higher ids) first: descendants' deaths propagate up
    score = np.zeros(n)
    pts = ~clusters
    lp = lmax[parent[pts]]
    lx = np.where(np.isinf(lam[pts]), lp, lam[pts])
    score[child[pts]] = np.where(lp > 0, (lp - lx) / np.where(lp > 0, lp, 1), 0)
    return score
