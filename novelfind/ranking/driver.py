"""The ranking driver: which K images are the most novel, by one method (``novelfind.ranking.methods``).

``rank(features, k)`` returns the picks best first, each with its nearest other image. ``features`` is
an (N, M) array, or a source of vectors read in chunks (``novelfind.ranking.sources``): a library whose matrix
passes the memory budget (``novelfind.ranking.budget.fits_in_memory``) is ranked from the feature cache
that way. There is one ranking path over either source: the same PCA (``novelfind.ranking.pca``), the
same scores, the same grouping into moments; the source decides only how the vectors are read. Ranked
from a matrix and from the same vectors in chunks, the picks, their scores, neighbours and distances
are the same (tested).

The method's scorer gives every row's score (``novelfind.ranking.scoring.Scores``); the driver reads
the order from it, certified where the scores are bounds (``novelfind.ranking.knn.certified_order``).
The scores that ``Ranking.all_scores`` holds are exact for the picks and every row ranked above the
last one examined; past ``EXACT_MAX_N`` rows the others hold upper bounds.

Moments: the picks are moments (``novelfind.ranking.moments``). Reading the ranked candidates best first, a
candidate forms a moment with the photos linked to it by steps shorter than ``dedup`` (distances
between L2-normalised feature vectors: 0 = same direction, sqrt(2) = orthogonal, so the radius does not
depend on the feature kind), and a later candidate of an earlier moment is folded into it: k picks are k
moments. Each pick is its moment's most typical photo and carries the others (``Ranking.members``);
near-duplicates are members. ``dedup`` 0 makes every photo its own moment.

The names (``k``, ``support``, ``neighbours``) are those of :mod:`novelfind.ranking.methods`.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from novelfind.ranking import events
from novelfind.ranking.adsconfig import ADSConfig
from novelfind.ranking.methods import DEFAULT_METHOD, Method, find_method
from novelfind.ranking.moments import LINK_RADIUS, Grouper, UnitRows
from novelfind.ranking.scoring import KNN_K, ScoreInput
from novelfind.ranking.sources import (
    ChunkedSource,
    FeatureSource,
    MatrixSource,
    ScaledSource,
    UnitSource,
    as_source,
    blocks,
)

__all__ = ["ChunkedSource", "FeatureSource", "MatrixSource", "Ranking", "rank"]

DEFAULT_DEDUP = LINK_RADIUS  # the link radius of moments (``novelfind.ranking.moments``: why 0.15)


@dataclass
class Ranking:
    """The picks of :func:`rank`, best first; K' = min(k, N, number of candidates)."""

    indices: np.ndarray  # int64 (K',) best first
    scores: np.ndarray  # float32 (K',)
    # int64 (K',) index of each pick's nearest image outside its moment (-1 when there is none: N == 1, or
    # the moment holds the whole library)
    neighbour: np.ndarray
    distance: np.ndarray  # float32 (K',) distance to it (raw features; between unit rows for COSINE_METHODS)
    duplicates_dropped: int = 0  # candidates folded into a better moment (``novelfind.ranking.moments``)
    # each pick's moment: the other photos' rows, nearest to the pick first (empty: a photo alone), and
    # their distances to it (between rows scaled to unit length)
    members: list[np.ndarray] = field(default_factory=list, repr=False)
    member_distance: list[np.ndarray] = field(default_factory=list, repr=False)
    all_scores: np.ndarray | None = field(default=None, repr=False)  # float32 (N,) when the method scores all
    # each moment's first and last capture time (K', 2) float64 seconds, NaN where none of its photos
    # is dated; None when ``rank`` was given no times
    spans: np.ndarray | None = field(default=None, repr=False)


# --------------------------------------------------------------------------- building blocks


def _check(features: np.ndarray | FeatureSource, k: int) -> tuple[FeatureSource, float]:
    """The boundary's checks: -> (a source of float32 rows, max |x|)."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(f"k must be an integer, got {k!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if isinstance(features, FeatureSource) and not isinstance(features, np.ndarray):
        source = features
        if source.n < 1 or source.dim < 1:
            raise ValueError(f"features must be non-empty, got shape ({source.n}, {source.dim})")
    else:
        x = np.asarray(features)
        if x.ndim != 2:
            raise ValueError(f"features must be 2-D (N, M), got shape {x.shape}")
        if x.shape[0] == 0 or x.shape[1] == 0:
            raise ValueError(f"features must be non-empty, got shape {x.shape}")
        source = MatrixSource(x.astype(np.float32, copy=False))
    scale = source.abs_max()  # a chunked source checks its values as it reads them
    if not np.isfinite(scale):
        x = source.matrix
        raise ValueError(f"features contain {int((~np.isfinite(x)).sum())} NaN or infinite values")
    return source, scale


def nearest_neighbours(x: np.ndarray | FeatureSource, picks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest other row of each pick (raw space), exact, one blocked pass -> (index, distance)."""
    from novelfind.ranking import knn

    src = as_source(x)
    if src.n == 1 or len(picks) == 0:
        return np.full(len(picks), -1, dtype=np.int64), np.full(len(picks), np.nan, dtype=np.float32)
    d, i = knn.knn_exact(src, picks.astype(np.int64), 1)
    return i[:, 0], d[:, 0].astype(np.float32)


def nearest_outside(
    x: np.ndarray | FeatureSource,
    picks: np.ndarray,
    members: list[np.ndarray],
    nb: np.ndarray,
    dist: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Each pick's nearest row outside its moment, from its nearest other row ``nb`` (and ``dist``):
    where that is one of its ``members`` (the frame next to it in a burst, listed already, which says
    nothing of why the moment stands out), the nearest row that is neither the pick nor a member, by one
    exact pass over the rows (numpy, blocked; only for those picks). -1 and NaN where the moment holds
    every row."""
    nb, dist = np.array(nb, dtype=np.int64), np.array(dist, dtype=np.float32)
    todo = [i for i, rows in enumerate(members) if len(rows) and np.isin(nb[i], rows)]
    if not todo:
        return nb, dist
    src = as_source(x)
    q = src.take(np.asarray(picks)[todo]).astype(np.float64)  # (Q, d)
    qsq = (q * q).sum(1)  # (Q,)
    inside = [np.append(np.asarray(members[i], np.int64), int(picks[i])) for i in todo]
    best_d2, best_i = np.full(len(todo), np.inf), np.full(len(todo), -1, dtype=np.int64)
    for start, block in blocks(src):
        b = block.astype(np.float64)  # (B, d)
        d2 = qsq[:, None] + (b * b).sum(1)[None, :] - 2.0 * (q @ b.T)  # (Q, B)
        for j, rows in enumerate(inside):
            here = rows[(rows >= start) & (rows < start + len(b))]
            d2[j, here - start] = np.inf
        col = d2.argmin(1)  # (Q,): the first of equals, the lowest row
        value = d2[np.arange(len(todo)), col]
        better = value < best_d2
        best_d2[better], best_i[better] = value[better], start + col[better]
    found = best_i >= 0
    exact = np.full(len(todo), np.nan, dtype=np.float32)
    if found.any():  # the distance itself, not the expansion's (which loses digits for near rows)
        exact[found] = np.linalg.norm(src.take(best_i[found]).astype(np.float64) - q[found], axis=1)
    nb[todo], dist[todo] = best_i, exact
    return nb, dist


def _candidate_mask(candidates, n: int) -> np.ndarray | None:
    """``candidates`` (bool mask (N,) or int indices) -> bool mask (N,), or None for all rows."""
    if candidates is None:
        return None
    c = np.asarray(candidates)
    if c.dtype == np.bool_:
        if c.shape != (n,):
            raise ValueError(f"candidates mask must have shape ({n},), got {c.shape}")
        return c
    if c.ndim != 1:
        raise ValueError(f"candidates must be a 1-D bool mask or index array, got shape {c.shape}")
    if c.size == 0:
        return np.zeros(n, dtype=bool)
    if not np.issubdtype(c.dtype, np.integer):
        raise ValueError(f"candidates must be a bool mask or integer indices, got dtype {c.dtype}")
    if int(c.min()) < 0 or int(c.max()) >= n:
        raise ValueError(f"candidate indices must be in [0, {n}), got {int(c.min())}..{int(c.max())}")
    mask = np.zeros(n, dtype=bool)
    mask[c] = True
    return mask


def rank(
    features: np.ndarray | FeatureSource,
    k: int,
    *,
    method: str = DEFAULT_METHOD,
    config: ADSConfig | None = None,
    dedup: float | None = None,
    device=None,
    candidates: np.ndarray | None = None,
    times: np.ndarray | None = None,
    prefer: np.ndarray | Callable[[np.ndarray], np.ndarray] | None = None,
) -> Ranking:
    """The min(k, N) most novel rows of ``features`` (N, M), best first.

    ``features``: any real (N, M) array (converted to float32), one row per image, or a source of such
    rows read in chunks (``ChunkedSource``; the same ranking, see the module docstring). ``method``: a
    name in ``METHODS`` (default ``DEFAULT_METHOD``, ``"cosine-knn"``; ``methods_help()`` says what
    each does; ``"ads-paper"`` needs a matrix). ``config``: the ADS solver's settings (``ADSConfig()``:
    the paper's E, J, alpha, beta and seed 0); the same seed on the same device gives the same ranking.
    ``device``: where the solver runs (``"cpu"``, ``"cuda"``; None: CPU).

    ``dedup``: the link radius of moments (distance between L2-normalised features;
    ``novelfind.ranking.moments``): a candidate linked to a better pick by steps shorter than this is one of
    its moment's ``members``, not a pick of its own. None means ``DEFAULT_DEDUP`` (0.15), 0 makes every
    photo its own moment. Every photo is a pick or a member, so k >= N lists the whole library.

    ``candidates``: the rows that may be picked, a bool mask (N,) or int indices (None: all). The
    scores are computed on all rows exactly as without it (same support k, same seed), the ranked
    list is filtered to the candidates before the grouping into moments, and at most min(k, #candidates) are
    returned; neighbours are searched among all rows. For ``ads-paper`` (scores zero outside a
    K-sparse support) the support is doubled until enough candidates are in it, or it is all N.
    No candidates: an empty Ranking.

    ``times``: when each row was taken, float64 (N,) seconds (UTC epoch or naive local time: only
    differences count), NaN where unknown. ``event-knn`` ranks by it (``novelfind.ranking.events``: events,
    bursts); with any method the moments then carry their time ``spans``. Without a dated row,
    ``event-knn`` ranks exactly as ``cosine-knn``.

    ``prefer``: how good an original each row is, larger better: (N,) values, or (N, K) keys compared
    first key first (say, a RAW twin, then the pixel count, then the file size), or a callable rows ->
    their values or keys (asked only for the rows it must compare): a moment is shown by the best
    original among its medoid and the medoid's copies (``novelfind.ranking.moments.COPY_RADIUS``), not
    by a resave or a thumbnail. None: the medoid.

    Returns a :class:`Ranking`: ``indices`` (rows, best first), ``scores`` (higher = more novel),
    each pick's nearest row outside its moment ``neighbour`` and the ``distance`` to it (raw feature
    units), and ``duplicates_dropped`` (candidates folded into a better moment), and each pick's
    ``members`` (rows, nearest first) with their ``member_distance``. Raises ValueError for a shape
    other than (N, M) with N, M >= 1, NaN or infinite values, k < 1, a negative ``dedup``, an unknown method,
    ``ads-paper`` on a source read in chunks, or bad ``candidates``.

    Example::

        >>> import numpy as np, novelfind
        >>> x = np.random.default_rng(0).random(size=(500, 64))  # non-negative, as image features are
        >>> x[7, :8] += 3  # one row pointing away from the rest
        >>> int(novelfind.rank(x, 3).indices[0])
        7
    """
    chosen = find_method(method)
    source, scale = _check(features, k)
    if not chosen.chunks and source.matrix is None:
        raise ValueError(f"method {method} needs the feature matrix in memory, not a source read in chunks")
    if chosen.max_rows is not None and source.n > chosen.max_rows:
        raise ValueError(f"method {method} ranks at most {chosen.max_rows:,} rows, got {source.n:,}")
    if dedup is None:
        dedup = DEFAULT_DEDUP
    if not dedup >= 0:
        raise ValueError(f"dedup must be >= 0, got {dedup}")
    if config is None:
        config = ADSConfig()
    if times is not None:
        times = events.check_times(times, source.n)
    if prefer is not None and not callable(prefer):
        prefer = np.asarray(prefer, dtype=np.float64)
        if prefer.shape[:1] != (source.n,) or prefer.ndim > 2:
            raise ValueError(f"prefer must have shape ({source.n},) or ({source.n}, K), got {prefer.shape}")
    return _rank(
        source, scale, k, chosen, config, dedup, device, _candidate_mask(candidates, source.n), times, prefer
    )


def _rank(
    source: FeatureSource,
    scale: float,
    k: int,
    method: Method,
    config: ADSConfig,
    dedup: float,
    device,
    cand: np.ndarray | None,
    times: np.ndarray | None = None,
    prefer: np.ndarray | Callable[[np.ndarray], np.ndarray] | None = None,
) -> Ranking:
    """``rank`` on checked input: the source, max |x| and the candidates as a bool mask (or None)."""
    n = source.n
    k_eff = min(k, n if cand is None else int(cand.sum()))
    if k_eff == 0:
        empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        return Ranking(indices=empty_i, scores=empty_f, neighbour=empty_i.copy(), distance=empty_f.copy())
    # every method but the paper's is scale-free: far outside float32's comfortable range, work on
    # x / max|x| so squares neither overflow nor vanish (a copy of a matrix, so only there)
    rescale = scale > 0 and not 2.0**-20 <= scale <= 2.0**20
    xs = ScaledSource(source, scale) if rescale else source  # (N, M)
    if method.cosine:  # cosine geometry: scores, neighbours and distances between unit rows
        xs, rescale = UnitSource(xs), False
    xm = xs if method.scale_free else source
    unit = xs if isinstance(xs, UnitSource) else UnitRows(xs)  # moments link rows of unit length
    grouper = Grouper(unit, dedup, candidates=cand)
    grouper.prefer = prefer
    # time's links (bursts, event groups), the same under every method; None without a dated photo
    links = None if times is None or dedup <= 0 else events.time_links(times, unit, event_cap(n), cand)
    grouper.time_mates = links
    support = min(k, n)  # a sparse method's support: it does not depend on the candidates
    walked: dict = {}

    def walk(order: np.ndarray) -> int:
        """The moments of ``order``; returns how many entries of it were read."""
        found = walked["moments"] = grouper.group(order, k_eff)
        return found.read if len(found.heads) == k_eff else len(order)

    while True:  # every scorer is given the same input, the method's own settings with it
        scored = method.scorer(ScoreInput(xm, min(k, n), config, device, support, times, dict(method.tuning)))
        grouper.exact = scored.exact  # look up only rows whose score is exact (updated in place)
        if method.cosine and scored.density is not None:  # its distances are between unit rows
            grouper.nearest = scored.density.nearest_distance
            if links is not None:  # a row whose nearest row is outside its event needs no search
                links.nearest, links.nearest_distance = (
                    scored.density.nearest,
                    scored.density.nearest_distance,
                )
        if scored.exact is None:
            scores = scored.current()  # (N,)
            order = np.lexsort((np.arange(n), -scores))  # by score, ties by index
            if method.sparse:  # only the K-sparse support is ranked
                order = order[: int((scores > 0).sum()) or support]
            ranked = len(order)
            if cand is not None:
                order = order[cand[order]]
            walk(order)
        else:  # exact as far as the grouping into moments reads (novelfind.ranking.knn)
            from novelfind.ranking.knn import certified_order

            order, scores = certified_order(
                scored.current, scored.exact, scored.refine, walk, rows=cand, first=2 * k_eff + 2 * KNN_K
            )
            ranked = n
        found = walked["moments"]
        picks, dropped = found.representatives, found.folded
        if not method.sparse or len(picks) == k_eff or support == n:
            break
        grow = support + k_eff - len(picks) + dropped  # widen the support to refill (dedup)
        if len(order) < ranked:  # non-candidates took part of the support: widen geometrically
            grow = max(grow, 2 * support)
        support = min(n, grow)
    if scored.density is not None and scored.density.exact[picks].all():  # found by the exact pass
        nb, dist = scored.density.nearest[picks], scored.density.nearest_distance[picks]
    else:
        nb, dist = nearest_neighbours(xs, picks)  # only the final picks; neighbours among all rows
    nb, dist = nearest_outside(xs, picks, found.members, nb, dist)  # a moment's: outside it
    unit_scale = scale if rescale else 1.0
    dist = (dist.astype(np.float64) * unit_scale).astype(np.float32)  # back to raw units
    head_scores = scores[found.heads].astype(np.float32)  # a moment's score: its highest scored photo's
    if not np.isfinite(head_scores).all():  # a bound read as a score: a fault of the ranking, never output
        bad = int(found.heads[~np.isfinite(head_scores)][0])
        raise RuntimeError(f"internal error: {method.name} gave pick row {bad} no finite score")
    return Ranking(
        indices=picks,
        scores=head_scores,
        neighbour=nb,
        distance=dist,
        duplicates_dropped=dropped,
        members=found.members,
        member_distance=found.distances,
        all_scores=scores,
        spans=None if times is None else _spans(times, picks, found.members),
    )


def event_cap(n: int) -> int:
    """The largest event of a library of n photos whose photos time may link into one moment: the
    bound ``event-knn`` puts on an event (``novelfind.ranking.eventknn``: a larger one, a copied archive
    with one date on every file, is the library itself)."""
    from novelfind.ranking.eventknn import EVENT_MAX_ROWS, EVENT_MIN_ROWS, EVENT_SHARE

    return min(EVENT_MAX_ROWS, max(2, int(EVENT_SHARE * n), min(EVENT_MIN_ROWS, (n - 1) // 2)))


def _spans(times: np.ndarray, picks: np.ndarray, members: list[np.ndarray]) -> np.ndarray:
    """(K, 2): each moment's first and last capture time, NaN where none of its photos is dated."""
    out = np.full((len(picks), 2), np.nan)
    for j, (p, m) in enumerate(zip(picks, members, strict=True)):
        t = times[np.concatenate([[p], m]).astype(np.int64)]
        t = t[np.isfinite(t)]
        if len(t):
            out[j] = t.min(), t.max()
    return out
