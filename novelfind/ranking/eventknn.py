"""The ``event-knn`` scorer: cosine k-NN, each photo also measured against the photos outside its own
event in time (``novelfind.ranking.events``), so a one-off batch stands out and a place seen on many days
does not. Its weight is a declared setting of its record (``novelfind.ranking.methods``, ``Method.tuning``:
``weight``, default ``EVENT_WEIGHT``); the other constants below are the shipped values."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from novelfind.ranking import events
from novelfind.ranking.cells import OutsideSearch
from novelfind.ranking.pca import spread
from novelfind.ranking.scoring import (
    KNN_K,
    SCALE_ROWS,
    ScoreInput,
    Scores,
    density,
    median_mad,
    search_points,
    unit_source,
)
from novelfind.ranking.sources import FeatureSource

# event-knn (``event_knn_scores``): the share of the score that is the distance to the photos outside the
# photo's own event (the rest: plain cosine k-NN), chosen on the dev split of scripts/bench_time.py
EVENT_WEIGHT = 0.75
# An event holding more than this share of the library, or more than EVENT_MAX_ROWS photos, is not a
# moment but the library itself (a copied archive: every file one date): its photos are ranked by plain
# k-NN, at plain k-NN's cost.
EVENT_SHARE = 0.05
EVENT_MAX_ROWS = 2_000
# ... but an event of up to EVENT_MIN_ROWS photos (a night out, a day trip) is always one, in a small
# library too, as long as it holds less than half of the library
EVENT_MIN_ROWS = 100
# Above knn.EXACT_MAX_N rows, each photo's candidates outside its event are found among its
# KNN_K + EVENT_LOOK nearest candidates (a bound, made exact where the ranking reads)
EVENT_LOOK = 64
# The odd photos of one event are one moment: the event's photos scoring at least ODD_SHARE of the
# moment's best photo's score and at least ODD_MADS robust standard deviations (MAD) above the library's
# median score (measured on SCALE_ROWS evenly spaced photos), so an ordinary day stays out of a moment
ODD_SHARE = 0.8
ODD_MADS = 3.0
# A photo of a large event may have no candidate outside it among its KNN_K + EVENT_LOOK nearest: it is
# then bounded by its nearest among (at most) this many photos that the rest of its event found outside
POOL_ROWS = 1024


def event_knn_scores(given: ScoreInput) -> Scores:
    """The ``event-knn`` method: cosine k-NN, with each photo also measured against the photos *outside
    its own event* (``novelfind.ranking.events``; its burst lies inside its event).

    score = (1 - ``weight``) x (mean distance to the ``KNN_K`` nearest other photos)
          + ``weight`` x (mean distance to the ``KNN_K`` nearest photos of other events),
    rows scaled to unit length. A one-off batch (a night of nebulae, a day of scanned pages) has its
    nearest photos in its own event, so the first term calls it ordinary and the second does not; a
    place photographed on many days has close photos in other events, so both terms are small; a single
    odd photo inside an ordinary event is far from everything, so both are large. Content tempers time:
    an ordinary place seen on one day only is still near the photos of other places (both terms are
    distances between feature vectors), where time alone would call its whole day novel.

    Undated photos, and the photos of an event larger than ``EVENT_SHARE`` of the library (or
    ``EVENT_MIN_ROWS``, below half of it) or ``EVENT_MAX_ROWS`` photos (a copied archive), are events
    of their own: their score is the plain k-NN term. With no dated photo the scores are
    ``cosine-knn``'s, pick for pick.

    Cost: the plain term is ``cosine-knn``'s certified search. Up to ``knn.EXACT_MAX_N`` rows the
    outside term is exact for every row (each photo's KNN_K nearest photos of other events, one pass);
    above, the same cell search also keeps, for each dated photo, its KNN_K nearest candidates of other
    events among its KNN_K + ``EVENT_LOOK`` nearest (``cells.OutsideSearch``: the same matrix products,
    a candidate of both lists measured once), which bound the outside term; a photo with too few of them
    (a large event whose photos are each other's nearest) is bounded from the photos its event found
    outside it (``_pool_bounds``), so every bound is a number. The term is made exact where the ranking
    reads, by one exact pass over the photos of other events, pruned like the plain term's.
    """
    weight = given.settings.get("weight", EVENT_WEIGHT)
    src = unit_source(given.source)
    n = src.n
    t = None if given.times is None else events.check_times(given.times, n)
    if n == 1 or t is None or not np.isfinite(t).any():
        return Scores.of_density(density(src, KNN_K)[0])
    tl = events.timeline(t, src)
    sizes = tl.sizes(tl.event)
    cap = min(EVENT_MAX_ROWS, max(2, int(EVENT_SHARE * n), min(EVENT_MIN_ROWS, (n - 1) // 2)))
    timed = (sizes >= 2) & (sizes <= cap)
    if not timed.any():
        return dataclasses.replace(Scores.of_density(density(src, KNN_K)[0]), time_mates=_burst_mates(tl))
    from novelfind.ranking import knn

    kk = KNN_K
    if n <= knn.EXACT_MAX_N:
        plain, _ = density(src, KNN_K)
    else:  # ``density``'s search, which also finds each photo's candidates among other events
        z, space = search_points(src, None)
        found = OutsideSearch(groups=tl.event, look=kk + EVENT_LOOK, rows=timed)
        plain = knn.KnnScores.build(src, kk, search=z, search_is_lower=True, centre=space.mean, outside=found)
    outside = plain.values.copy()  # (N,) the outside term; the plain one where no event counts
    out_exact = ~timed

    prune: list = [None]  # the outside pass's pruning (above knn.EXACT_MAX_N), as the plain term's

    def make_outside_exact(rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        rows = np.unique(rows[timed[rows] & ~out_exact[rows]])
        if not len(rows):
            return
        # the KNN_K nearest photos of other events, in one pass (pruned like the plain term's); a small
        # library may hold fewer than KNN_K photos outside the event: the mean over those
        dist, idx = knn.knn_exact(src, rows, kk, centre=plain.centre, prune=prune[0], groups=tl.event)
        outside[rows] = _outside_mean(dist, idx, tl.event[rows], tl.event, np.minimum(kk, n - sizes[rows]))
        out_exact[rows] = True

    if n <= knn.EXACT_MAX_N:
        make_outside_exact(np.flatnonzero(timed))
    else:  # bounds from the cell search, in the same space as the plain term's
        # each photo's KNN_K nearest candidates of other events among its KNN_K + EVENT_LOOK nearest
        dist, idx = found.dist, found.index
        found.dist = found.index = None
        _pool_bounds(src, tl.event, timed, dist, idx, plain.centre)  # where too few lie outside
        rows = np.flatnonzero(timed)
        slack = np.float32(1 + knn.BOUND_SLACK)
        outside[rows] = _outside_mean(dist[rows], idx[rows], tl.event[rows], tl.event, kk) * slack
        kth = np.where(timed, dist[:, -1] * slack, np.inf).astype(np.float32)  # (N,) k-th candidate: a bound
        del dist, idx
        prune[0] = knn.Pruning(lower=z, order=plain.prune.order, kth=kth)
    exact = plain.exact & out_exact

    def refine(rows: np.ndarray) -> None:
        plain.make_exact(rows)
        make_outside_exact(rows)
        exact[:] = plain.exact & out_exact

    def current() -> np.ndarray:
        return ((1 - weight) * plain.values + weight * np.maximum(outside, plain.values)).astype(np.float32)

    sample = spread(n, SCALE_ROWS)
    refine(sample)
    med, mad = median_mad(current()[sample])
    # the rows the ranking reads first, made exact before it reads (as it would after its first reading):
    # the moments then look up rows at the top, not the sample's exact rows far below it, and ask time for
    # their events' photos only
    refine(np.argsort(-current(), kind="stable")[: 2 * given.k + 2 * KNN_K])

    event_rows, burst_rows = _rows_of(tl.event), _rows_of(tl.burst)

    def time_mates(rows: np.ndarray) -> list[np.ndarray]:
        """Each row's burst, and the odd photos of its event (exact scores >= ODD_SHARE of the row's
        and ODD_MADS above the median): the events of all ``rows`` made exact in one pass."""
        rows = np.asarray(rows, dtype=np.int64)
        refine(rows)
        s = current()
        own = rows[timed[rows]]
        # an event-mate whose bound is under the bar is under it exactly too: only the others are
        # made exact (an ordinary day's photos mostly are under it)
        bar = np.full(n, np.inf)
        bar[own] = np.maximum(ODD_SHARE * s[own], med + ODD_MADS * mad)
        lowest = np.full(int(tl.event.max()) + 1, np.inf)
        np.minimum.at(lowest, tl.event[own], bar[own])
        refine(np.flatnonzero(timed & (s >= lowest[tl.event])))
        s = current()
        out = []
        for row in rows.tolist():
            mates = [burst_rows(tl.burst[row])]
            if timed[row]:
                ev = event_rows(tl.event[row])
                mates.append(ev[(s[ev] >= ODD_SHARE * s[row]) & (s[ev] >= med + ODD_MADS * mad)])
            m = np.unique(np.concatenate(mates))
            out.append(m[m != row])
        return out

    stats = dict(plain.stats, events=int(len(np.unique(tl.event[timed]))), timed_rows=int(timed.sum()))
    return Scores(
        current=current, exact=exact, refine=refine, density=plain, stats=stats, time_mates=time_mates
    )


def _outside_mean(dist: np.ndarray, idx: np.ndarray, own: np.ndarray, event: np.ndarray, k) -> np.ndarray:
    """Mean of the first k distances of each row (sorted (Q, C)) to neighbours outside its own event
    ``own`` (Q,); ``k`` an int or one per row; +inf where fewer than k lie outside."""
    keep = (idx >= 0) & (event[idx] != own[:, None])  # (Q, C) (-1: no candidate)
    order = np.argsort(~keep, axis=1, kind="stable")  # the kept ones first, in distance order
    first = np.take_along_axis(np.where(keep, dist, np.inf), order, axis=1).astype(np.float64)
    kr = np.broadcast_to(np.asarray(k, dtype=np.int64), (len(dist),))
    cols = np.arange(first.shape[1])[None, :]
    take = cols < kr[:, None]
    total = np.where(take, first, 0.0).sum(1)
    out = total / np.maximum(kr, 1)
    out[(kr > first.shape[1]) | ~np.isfinite(total) | (kr < 1)] = np.inf
    return out.astype(np.float32)


def _pool_bounds(
    src: FeatureSource, event: np.ndarray, timed: np.ndarray, dist: np.ndarray, idx: np.ndarray, centre
) -> None:
    """Where the cell search found a photo fewer than KNN_K candidates outside its event (dist (N, k)
    +inf there; a large event whose photos are each other's nearest), its candidates become the k
    nearest among those that the photos of its event found outside it (at most ``POOL_ROWS``, evenly
    spaced; photos evenly spaced over the library outside the event added if fewer than k), measured:
    real photos outside the event, so still an upper bound, and finite, so the photo is ordered by a
    bound rather than put first by +inf and made exact. ``dist`` and ``idx`` are updated in place."""
    lacking = np.flatnonzero(timed & ~np.isfinite(dist[:, -1]))
    if not len(lacking):
        return
    n, k = dist.shape
    event_rows = _rows_of(event)
    for e in np.unique(event[lacking]):
        members = event_rows(e)
        found = idx[members]
        pool = np.unique(found[found >= 0])
        if len(pool) > POOL_ROWS:
            pool = pool[spread(len(pool), POOL_ROWS)]
        if len(pool) < k:
            extra = spread(n, min(n, 4 * (k + len(members))))
            pool = np.union1d(pool, extra[event[extra] != e])
        rows = lacking[event[lacking] == e]
        dist[rows], idx[rows] = _nearest_among(src, rows, pool, k, centre)


def _nearest_among(
    src: FeatureSource, rows: np.ndarray, pool: np.ndarray, k: int, centre
) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest rows of ``pool`` to each of ``rows`` (its own row excluded): (distances (Q, k),
    indices (Q, k)), sorted, measured from the differences as ``knn.knn_exact`` measures them; +inf and
    -1 where the pool holds fewer."""
    from novelfind.ranking import knn

    read, _, d, _ = knn._reader(src)
    mu = np.zeros(d, np.float32) if centre is None else np.asarray(centre, np.float32)
    xq = read(rows)  # (Q, d)
    a, b = xq - mu, read(pool) - mu  # (Q, d), (P, d)
    d2 = knn._sq_dist(a, (a * a).sum(1, keepdims=True), b, (b * b).sum(1))  # (Q, P)
    d2[pool[None, :] == rows[:, None]] = np.inf
    m = min(k, len(pool))
    j = knn._smallest(d2, m)  # (Q, m)
    found = np.where(np.isfinite(np.take_along_axis(d2, j, 1)), pool[j], -1)
    dist, idx = np.full((len(rows), k), np.inf, np.float32), np.full((len(rows), k), -1, np.int64)
    dist[:, :m], idx[:, :m] = knn._direct_distances(read, xq, found)
    return dist, idx


def _burst_mates(tl: events.Timeline) -> Callable[[np.ndarray], list[np.ndarray]] | None:
    """time_mates for a library whose events are all ranked by plain k-NN: the burst alone."""
    if len(np.unique(tl.burst)) == len(tl.burst):
        return None
    burst_rows = _rows_of(tl.burst)

    def mates(rows: np.ndarray) -> list[np.ndarray]:
        out = []
        for row in np.asarray(rows, dtype=np.int64).tolist():
            m = burst_rows(tl.burst[row])
            out.append(m[m != row])
        return out

    return mates


def _rows_of(labels: np.ndarray) -> Callable[[int], np.ndarray]:
    """label -> the rows carrying it, increasing: one sort of the (N,) int labels, then a slice a label
    (not a pass over all N rows for each)."""
    order = np.argsort(labels, kind="stable")
    ordered = labels[order]
    return lambda label: order[slice(*np.searchsorted(ordered, [label, label + 1]))]
