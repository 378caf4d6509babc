"""The ``event-knn`` scorer: cosine k-NN, each photo also measured against the photos outside its own
event in time (``novelfind.ranking.events``), so a one-off batch stands out and a place seen on many days
does not. Its weight is a declared setting of its record (``novelfind.ranking.methods``, ``Method.tuning``:
``weight``, default ``EVENT_WEIGHT``); the other constants below are the shipped values."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from novelfind.ranking import events
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
    outside term is exact for every row (each photo's KNN_K + event size nearest, its own event's
    dropped); above, it is bounded from the KNN_K + ``EVENT_LOOK`` candidates the cell search finds
    (+inf where too few lie outside the event) and made exact where the ranking reads, as ``cosine-knn``.
    """
    weight = given.settings.get("weight", EVENT_WEIGHT)
    src = unit_source(given.source)
    n = src.n
    plain, space = density(src, KNN_K)
    t = None if given.times is None else events.check_times(given.times, n)
    if n == 1 or t is None or not np.isfinite(t).any():
        return Scores.of_density(plain)
    tl = events.timeline(t, src)
    sizes = tl.sizes(tl.event)
    cap = min(EVENT_MAX_ROWS, max(2, int(EVENT_SHARE * n), min(EVENT_MIN_ROWS, (n - 1) // 2)))
    timed = (sizes >= 2) & (sizes <= cap)
    if not timed.any():
        return dataclasses.replace(Scores.of_density(plain), time_mates=_burst_mates(tl))
    outside = plain.values.copy()  # (N,) the outside term; the plain one where no event counts
    out_exact = ~timed
    kk = KNN_K

    def make_outside_exact(rows: np.ndarray) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        rows = rows[timed[rows] & ~out_exact[rows]]
        if not len(rows):
            return
        from novelfind.ranking import knn

        # batches of rows whose events have about the same size: each asks for k + 2^j neighbours
        span = np.ceil(np.log2(sizes[rows])).astype(np.int64)
        for j in np.unique(span):
            batch = rows[span == j]
            dist, idx = knn.knn_exact(src, batch, kk + (1 << int(j)), centre=plain.centre)
            # a small library may hold fewer than KNN_K photos outside the event: the mean over those
            want = np.minimum(kk, n - sizes[batch])
            outside[batch] = _outside_mean(dist, idx, tl.event[batch], tl.event, want)
            out_exact[batch] = True

    from novelfind.ranking import knn

    if n <= knn.EXACT_MAX_N:
        make_outside_exact(np.flatnonzero(timed))
    else:  # bounds from the cell search, in the same space as the plain term's
        z, space = search_points(src, space)
        dist, idx = knn.knn_cells(z, kk + EVENT_LOOK, measure=src)
        rows = np.flatnonzero(timed)
        outside[rows] = _outside_mean(dist[rows], idx[rows], tl.event[rows], tl.event, kk) * (
            1 + knn.BOUND_SLACK
        )
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
            mates = [np.flatnonzero(tl.burst == tl.burst[row])]
            if timed[row]:
                ev = np.flatnonzero(tl.event == tl.event[row])
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
    keep = event[idx] != own[:, None]  # (Q, C)
    order = np.argsort(~keep, axis=1, kind="stable")  # the kept ones first, in distance order
    first = np.take_along_axis(np.where(keep, dist, np.inf), order, axis=1).astype(np.float64)
    kr = np.broadcast_to(np.asarray(k, dtype=np.int64), (len(dist),))
    cols = np.arange(first.shape[1])[None, :]
    take = cols < kr[:, None]
    total = np.where(take, first, 0.0).sum(1)
    out = total / np.maximum(kr, 1)
    out[(kr > first.shape[1]) | ~np.isfinite(total) | (kr < 1)] = np.inf
    return out.astype(np.float32)


def _burst_mates(tl: events.Timeline) -> Callable[[np.ndarray], list[np.ndarray]] | None:
    """time_mates for a library whose events are all ranked by plain k-NN: the burst alone."""
    if len(np.unique(tl.burst)) == len(tl.burst):
        return None

    def mates(rows: np.ndarray) -> list[np.ndarray]:
        out = []
        for row in np.asarray(rows, dtype=np.int64).tolist():
            m = np.flatnonzero(tl.burst == tl.burst[row])
            out.append(m[m != row])
        return out

    return mates
