"""Ranking methods: which K images are the most novel.

``rank(features, k)`` returns the picks best first, each with its nearest other image. ``features`` is
an (N, M) array, or a source of vectors read in chunks (``novelfind.ranking.sources``): a library whose matrix
passes the memory budget (``fits_in_memory``) is ranked from the feature cache that way. There is one
ranking path over either source: the same PCA (``novelfind.ranking.pca``), the same scores, the same
grouping into moments; the source decides only how the vectors are read. Ranked from a matrix and from
the same vectors in chunks, the picks, their scores, neighbours and distances are the same (tested).

Methods (``METHODS``, one ``Method`` record each: name, scorer, help, feature, geometry, whether it
ranks from chunks):

- ``cosine-knn`` (default): the mean distance to the ``KNN_K`` nearest other rows, the rows scaled to
  unit length first (each distance is sqrt(2 - 2 cos): the k-NN score embedding tools compute;
  cleanlab's out-of-distribution score averages the cosine distances to the same neighbours). On
  the pooled MobileNet-V2 vector (``METHOD_FEATURE``) it is the best method measured on the
  benchmark's test split (README, "Quality"): it beats IsolationForest, the ADS blend (the earlier
  default) and Algorithm 1, and no candidate chosen on the dev split beat it on test by a margin
  that counts. The neighbour search is the certified one of ``knn`` below (exact up to
  ``novelfind.ranking.knn.EXACT_MAX_N`` rows, bounds and an exact top above).
- ``multiscale-knn``: cosine k-NN at several neighbourhood sizes, fused by rank
  (``multiscale_scores``). For each k in ``MULTISCALE_K`` (3, 10, 50) every row gets the mean distance
  to its k nearest other rows, turned into a rank percentile; the score is the mean of the
  percentiles. Made to see both a subject shot once (small k) and a small group of similar odd photos
  (large k): the best of about 75 candidates on the dev split, but on test it lost the rare-subject
  set and ended 0.02 below ``cosine-knn``; kept for groups of similar photos (art, quality faults).
- ``microcluster``: odd batches and single odd photos on one scale (``novelfind.ranking.microclusters``): the
  mean distance to the 50 nearest photos outside the photo's microcluster (its largest single-linkage
  component, over a geometric series of radii between unit rows, that holds at most a tenth of the
  library), on the logits, so the members of a batch far from the rest no longer hide each other.
  Exact for every row, from a matrix or from chunks, at N^2 cost (docs/bench/quality-moments.md).
- ``ads``: the earlier default, not ADS alone but a blend of two scores. Approximate Densest Subgraph (paper
  Algorithm 1) runs on whitened features (PCA to ``WHITEN_DIMS`` axes; the loud axes scaled down to the
  spread of the ``WHITEN_FLOOR``-th); its weights are blended, ``DENSITY_WEIGHT`` to the other, with a
  local-density term (mean distance to the ``KNN_K`` nearest neighbours, raw features). Whitening
  makes subtle differences (a defect, a different digit) count next to the big ones; the density
  term keeps small clusters of ordinary pictures from looking novel. Sub-quadratic: ADS costs
  O(E N J d); the density term is exact for every row up to ``novelfind.ranking.knn.EXACT_MAX_N`` rows and,
  above, exact for the top of the ranking and certified (``novelfind.ranking.knn``: upper bounds from
  candidates found in the principal axes, the top made exact until no bound can reach it), so the
  picks are those of the exact computation at any N, from a matrix or from chunks. (An earlier
  from-cache path measured the density in the 64 axes instead: it found 0 of 100 planted outliers
  that differ off those axes; the raw-space density finds them.)
- ``ads-paper``: Algorithm 1 exactly as written, on the raw features. It draws random partner rows of
  the raw matrix every epoch, so it needs the matrix in memory (``read_in_chunks`` refuses it above
  the budget, saying how much memory it would need).
- ``knn``: mean distance to the ``KNN_K`` nearest neighbours (raw features): the ``ads`` method's density
  term alone, exact and certified in the same way, from either source.

The research baselines the benchmark compares against (exact power iteration, IsolationForest) live
with it, in ``scripts/baselines.py``.

The scores that ``Ranking.all_scores`` holds are exact for the picks and every row ranked above the
last one examined; past ``EXACT_MAX_N`` rows the others hold upper bounds.

Moments: the picks are moments (``novelfind.ranking.moments``). Reading the ranked candidates best first, a
candidate forms a moment with the photos linked to it by steps shorter than ``dedup`` (distances
between L2-normalised feature vectors: 0 = same direction, sqrt(2) = orthogonal, so the radius does not
depend on the feature kind), and a later candidate of an earlier moment is folded into it: k picks are k
moments. Each pick is its moment's most typical photo and carries the others (``Ranking.members``);
near-duplicates are members. ``dedup`` 0 makes every photo its own moment.

Names: ``k`` is the number of picks; ``support`` the number of images ADS keeps (2k for ``ads``);
``neighbours`` the number of nearest rows a density is the mean over (``KNN_K``).
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from novelfind.errors import InputError
from novelfind.ranking import events, microclusters
from novelfind.ranking.moments import LINK_RADIUS, Grouper, UnitRows
from novelfind.ranking.pca import Space, fit_space, spread
from novelfind.ranking.sources import (
    ChunkedSource,
    FeatureSource,
    MatrixSource,
    ScaledSource,
    UnitSource,
    as_source,
    blocks,
)

if TYPE_CHECKING:
    from novelfind.ranking.knn import KnnScores
    from novelfind.ranking.solver import ADSConfig

# torch (the solver is torch code; novelfind.ranking.knn is numpy) is imported where it is used: the command
# line and the cache commands import this module for METHODS and must start without paying for torch.

__all__ = ["ChunkedSource", "FeatureSource", "MatrixSource", "Ranking", "rank"]

DEFAULT_METHOD = "cosine-knn"
# The largest library ``microcluster`` (novelfind.ranking.microclusters) ranks. It measures every pair: 10,000
# photos took 306 s on a busy 2-core machine (docs/bench/rank-microcluster.json), so 50,000 would take
# over an hour and a half; past that it refuses before anything is extracted.
MICROCLUSTER_MAX_ROWS = 50_000
MULTISCALE_K = (3, 10, 50)  # multiscale-knn's neighbourhood sizes (dev: the best of 16 sets of sizes)
WHITEN_DIMS = 64  # principal axes kept by ``ads`` (benchmark: 32 loses subtle differences, 256 is slower)
WHITEN_FLOOR = 32  # the loudest axes are scaled down to the spread of the 32nd (full whitening hurt digits)
KNN_K = 10  # neighbours for the density term and the knn baseline
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
DENSITY_WEIGHT = 0.5  # share of the local-density term in ``ads``'s score (benchmark, all sets)
DEFAULT_DEDUP = LINK_RADIUS  # the link radius of moments (``novelfind.ranking.moments``: why 0.15)
# the scan parameters of the ADS solver (``ADSConfig``'s, less its internal ``block``), for the methods
# that run it
SOLVER_SETTINGS = frozenset({"epochs", "partners", "lr", "momentum", "seed", "restarts"})
# Past these sizes a sample stands in for all rows, evenly spaced (no seed; the same rows for the same N):
PCA_ROWS = 20_000  # rows the principal axes are estimated from (O(rows M^2); axes from 100k rows agree)
SCALE_ROWS = 512  # rows the density's median and MAD are measured on (each costs an exact search; MAD +-5%)

# A library whose N x dim float32 feature matrix is larger than this is ranked from the cache, read in
# chunks, instead of from a matrix in memory. None: a third of the machine's memory (the in-memory ranking
# needs about twice the matrix at its peak; 2.2x for the cosine methods, which rank a unit-length copy),
# and never less than 2 GiB (about 536,000 photos of 1000-d
# logits). The scores are the same either way.
MATRIX_BUDGET: int | None = None
MATRIX_BUDGET_MIN = 2 << 30


def matrix_budget() -> int:
    """Bytes of float32 features ranked in memory (``MATRIX_BUDGET``, or a third of physical memory)."""
    if MATRIX_BUDGET is not None:
        return MATRIX_BUDGET
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        physical = 0
    return max(MATRIX_BUDGET_MIN, physical // 3)


def fits_in_memory(n: int, dim: int) -> bool:
    """Whether the N x dim float32 features of a library are within ``matrix_budget()``."""
    return n * dim * 4 <= matrix_budget()


def read_in_chunks(method: str, n: int, dim: int) -> bool:
    """Whether ``method`` should read a library's N x dim features from the cache in chunks (they pass
    the memory budget). A method that cannot (``Method.chunks`` false: ``ads-paper`` draws random rows
    of the matrix): InputError saying how much memory it would need."""
    limit = METHODS[method].max_rows
    if limit is not None and n > limit:
        raise InputError(
            f"method {method} ranks at most {limit:,} photos (its cost grows with the square of the "
            f"library: {n:,} would take hours); the default method ({DEFAULT_METHOD}) ranks any size"
        )
    if fits_in_memory(n, dim):
        return False
    if not METHODS[method].chunks:
        need, budget = n * dim * 4, matrix_budget()
        raise InputError(
            f"method {method} ranks all {n:,} feature vectors in memory ({need / 2**30:.1f} "
            f"GiB of float32, more than the {budget / 2**30:.1f} GiB novelfind holds); the default "
            f"method ({DEFAULT_METHOD}) ranks a library of this size from the cache"
        )
    return True


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


def _scale(proj: np.ndarray, var: np.ndarray, floor: int | None) -> np.ndarray:
    """Each axis divided by sqrt(max(var_i, var_floor)): the loud axes brought down to the floor-th."""
    if floor is not None:
        var = np.maximum(var, var[min(floor, len(var)) - 1])
    return (proj / np.sqrt(var).astype(np.float32)).astype(np.float32)


def l2_normalise(x: np.ndarray) -> np.ndarray:
    nrm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(nrm, 1e-12)


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


def _zscore(v: np.ndarray) -> np.ndarray:
    """Robust standardisation: (v - median) / MAD."""
    med, mad = _median_mad(v)
    return (v - med) / mad


def _median_mad(v: np.ndarray) -> tuple[float, float]:
    """Median and MAD (scaled to a normal's standard deviation, at least 1e-12) of v."""
    med = float(np.median(v))
    return med, max(float(np.median(np.abs(v - med))) * 1.4826, 1e-12)


@dataclass
class Scores:
    """Every row's score (higher = more novel), maybe exact only where it matters.

    ``current()`` gives the scores (N,): exact where ``exact`` (None: everywhere), elsewhere an upper
    bound; ``refine(rows)`` makes those rows exact (``exact`` is updated in place). ``rank`` reads the
    order through ``novelfind.ranking.knn.certified_order``, so its picks are those of the exact scores.
    """

    current: Callable[[], np.ndarray]
    exact: np.ndarray | None = None
    refine: Callable[[np.ndarray], None] | None = None
    density: KnnScores | None = None  # the raw-space k-NN scores behind it (their nearest rows)
    stats: dict = field(default_factory=dict)
    # rows -> for each, the other rows of its moment that time says belong with it (its burst, the odd
    # photos of its event); None: moments by content alone
    time_mates: Callable[[np.ndarray], list[np.ndarray]] | None = None

    @classmethod
    def of(cls, values: np.ndarray) -> Scores:
        return cls(current=lambda: values)

    @classmethod
    def of_density(cls, dens: KnnScores) -> Scores:
        return cls(
            current=lambda: dens.values,
            exact=dens.exact,
            refine=dens.make_exact,
            density=dens,
            stats=dens.stats,
        )


def _ads_weights(x: np.ndarray, support: int, config: ADSConfig, device=None) -> np.ndarray:
    """ADS weights as an (N,) score (zero outside the ``support``-sparse support)."""
    from novelfind.ranking.solver import solve

    return np.asarray(solve(x, support, config, device=device).weights, dtype=np.float32)


def search_space(proj: np.ndarray, resid: np.ndarray) -> np.ndarray:
    """Where the density's candidate neighbours are searched: the principal coordinates plus the
    distance from their subspace (N, d + 1). Distances there are lower bounds of the raw ones, and rows
    near in the raw features are near there, at a fraction of the cost (65 numbers a row, not 1000)."""
    return np.hstack([proj, resid[:, None]])


def principal(x: np.ndarray | FeatureSource) -> Space:
    """The ranking's principal space of x: ``WHITEN_DIMS`` axes fitted on at most ``PCA_ROWS`` rows."""
    return fit_space(x, WHITEN_DIMS, max_rows=PCA_ROWS)


def density(
    x: np.ndarray | FeatureSource,
    neighbours: int = KNN_K,
    space: Space | None = None,
    means_at: tuple[int, ...] = (),
) -> tuple[KnnScores, Space | None]:
    """Mean distance of each row of x to its ``neighbours`` nearest other rows (raw features), and the
    principal space it used (None where it needed none): (``knn.KnnScores``, space).

    Exact for every row up to ``knn.EXACT_MAX_N`` rows; above, upper bounds from candidates found in
    the principal space (``search_space`` of ``space``, fitted here when not given), made exact where
    asked. From a matrix the bounds are measured in x; from a source read in chunks, from the space.
    ``means_at``: also the mean distance to the k_s nearest for these k_s <= ``neighbours``
    (``KnnScores.at``), from the same neighbours.
    """
    from novelfind.ranking import knn

    src = as_source(x)
    if src.n <= knn.EXACT_MAX_N:
        centre = None if space is None else space.mean
        return knn.KnnScores.build(src, neighbours, centre=centre, means_at=means_at), space
    if space is None:
        space = principal(src)
    z = search_space(space.proj, space.resid)
    dens = knn.KnnScores.build(
        src, neighbours, search=z, search_is_lower=True, centre=space.mean, means_at=means_at
    )
    return dens, space


def ads_scores(
    x: np.ndarray | FeatureSource,
    k: int,
    config: ADSConfig,
    device=None,
    support: int | None = None,
    density_weight: float = DENSITY_WEIGHT,
) -> Scores:
    """The ``ads`` method's score for every image (higher = more novel), for ``k`` picks.

    ADS runs on whitened features (``WHITEN_DIMS`` axes, the loudest brought down to the
    ``WHITEN_FLOOR``-th) with a support of 2k, so near-duplicates can be replaced; inside the support
    its weights rank the images. The density term is the mean distance to the ``KNN_K`` nearest
    neighbours in the raw feature space (``density``). Both are robustly standardised, the density with
    the median and MAD of ``SCALE_ROWS`` evenly spaced rows (all rows for smaller N), and blended.
    The density is exact for every row up to ``knn.EXACT_MAX_N`` rows; above, an upper bound outside the
    rows ``refine`` made exact (the blend grows with the density, so a bound on one bounds the other).
    """
    src = as_source(x)
    n = src.n
    if n == 1:
        return Scores.of(np.ones(1, dtype=np.float32))
    space = principal(src)  # (N, d) coordinates, (d,) variances, (N,) residuals
    w = _scale(space.proj, space.var, WHITEN_FLOOR)  # (N, d)
    dens, _ = density(src, KNN_K, space)
    support = min(n, max(2 * k, k + KNN_K))
    a = _ads_weights(w, support, config, device)  # (N,) sparse
    active = a > 0
    sample = spread(n, SCALE_ROWS)
    # one exact pass for the scale sample and the likely top: the ADS support, the highest bounds
    likely = np.argpartition(-dens.values, min(n - 1, 2 * k + 2 * KNN_K))[: 2 * k + 2 * KNN_K]
    dens.make_exact(np.concatenate([sample, np.flatnonzero(active), likely]))
    med, mad = _median_mad(dens.values[sample])
    za = np.zeros(n, dtype=np.float64)
    if active.sum() > 2:
        za[active] = _zscore(a[active]) + 1.0  # being in the ADS support counts
    else:
        za[active] = 1.0

    def current() -> np.ndarray:
        return ((1 - density_weight) * za + density_weight * (dens.values - med) / mad).astype(np.float32)

    return Scores(current=current, exact=dens.exact, refine=dens.make_exact, density=dens, stats=dens.stats)


def rank_percentiles(v: np.ndarray) -> np.ndarray:
    """Each value's rank among all of v, divided by N, in (0, 1] (ties share their mean rank): the
    scale-free form in which scores of different neighbourhood sizes are averaged."""
    v = np.asarray(v)
    ordered = np.sort(v)
    below = np.searchsorted(ordered, v, side="left")  # values smaller
    upto = np.searchsorted(ordered, v, side="right")  # values smaller or equal
    return ((below + upto + 1) / (2.0 * len(v))).astype(np.float64)


def multiscale_scores(
    x: np.ndarray | FeatureSource,
    k: int,
    config: ADSConfig,
    device=None,
    support: int | None = None,
    ks: tuple[int, ...] = MULTISCALE_K,
) -> Scores:
    """The ``multiscale-knn`` method: cosine k-NN at several neighbourhood sizes, fused by rank.

    Rows are scaled to unit length (``UnitSource``: the distance between unit rows is a monotone
    function of the cosine distance). For every k in ``ks`` each row gets the mean distance to its k
    nearest other rows, and that score's rank percentile over the library (``rank_percentiles``); the
    row's score is the mean of those percentiles. A small k finds a subject seen once, a large one a
    small group of similar odd photos; the mean of the ranks keeps most of both (measured, README
    "Quality"). One neighbour search (the largest k) serves every k: exact for every row up to
    ``knn.EXACT_MAX_N`` rows; above, upper bounds from the principal space, made exact from the top
    of the ranking down as far as the picks read (``rank``: rows are made exact until every row the
    grouping into moments reads is exact; the percentiles are taken over the exact scores of those rows
    and the bounds of the others, which are the same from a matrix and from chunks).
    """
    src = unit_source(x)
    if src.n == 1:
        return Scores.of(np.ones(1, dtype=np.float32))
    space = principal(src)
    dens, _ = density(src, max(ks), space, means_at=tuple(sorted(ks)))

    def current() -> np.ndarray:
        pct = [rank_percentiles(dens.at[:, s]) for s in range(dens.at.shape[1])]
        return np.mean(pct, axis=0).astype(np.float32)

    return dataclasses.replace(Scores.of_density(dens), current=current)


def unit_source(x: np.ndarray | FeatureSource) -> UnitSource:
    """x's rows scaled to unit length (x itself when it is already such a source)."""
    return x if isinstance(x, UnitSource) else UnitSource(as_source(x))


def knn_scores(
    x: np.ndarray | FeatureSource, k: int, config: ADSConfig, device=None, support: int | None = None
) -> Scores:
    """The ``knn`` method: mean distance to the ``KNN_K`` nearest other rows, raw features."""
    return Scores.of_density(density(x, KNN_K)[0])


def cosine_knn_scores(
    x: np.ndarray | FeatureSource, k: int, config: ADSConfig, device=None, support: int | None = None
) -> Scores:
    """The ``cosine-knn`` method: mean distance to the ``KNN_K`` nearest other rows scaled to unit
    length."""
    return Scores.of_density(density(unit_source(x), KNN_K)[0])


def microcluster_method_scores(
    x: np.ndarray | FeatureSource, k: int, config: ADSConfig, device=None, support: int | None = None
) -> Scores:
    """The ``microcluster`` method (:mod:`novelfind.ranking.microclusters`): the mean distance to the nearest rows
    outside the row's microcluster, rows scaled to unit length; exact for every row."""
    return Scores.of(microclusters.microcluster_scores(unit_source(x))[0])


def event_knn_scores(
    x: np.ndarray | FeatureSource,
    k: int,
    config: ADSConfig,
    device=None,
    support: int | None = None,
    *,
    times: np.ndarray | None = None,
    weight: float | None = None,
    segment_args: dict | None = None,
) -> Scores:
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
    ``EVENT_MIN_ROWS``, below half of it) or ``EVENT_MAX_ROWS`` photos (a copied archive), are events of their own: their score is the plain
    k-NN term. With no dated photo the scores are ``cosine-knn``'s, pick for pick.

    Cost: the plain term is ``cosine-knn``'s certified search. Up to ``knn.EXACT_MAX_N`` rows the
    outside term is exact for every row (each photo's KNN_K + event size nearest, its own event's
    dropped); above, it is bounded from the KNN_K + ``EVENT_LOOK`` candidates the cell search finds
    (+inf where too few lie outside the event) and made exact where the ranking reads, as ``cosine-knn``.
    """
    weight = EVENT_WEIGHT if weight is None else weight
    src = unit_source(x)
    n = src.n
    plain, space = density(src, KNN_K)
    t = None if times is None else events.check_times(times, n)
    if n == 1 or t is None or not np.isfinite(t).any():
        return Scores.of_density(plain)
    tl = events.timeline(t, src, **(segment_args or {}))
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
        space = space or principal(src)
        dist, idx = knn.knn_cells(search_space(space.proj, space.resid), kk + EVENT_LOOK, measure=src)
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
    med, mad = _median_mad(current()[sample])

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


def ads_paper_scores(
    x: np.ndarray | FeatureSource, k: int, config: ADSConfig, device=None, support: int | None = None
) -> Scores:
    """The ``ads-paper`` method: Algorithm 1's weights on the raw matrix, zero outside a support of
    ``support`` rows (default k)."""
    return Scores.of(_ads_weights(as_source(x).matrix, support or k, config, device))


# --------------------------------------------------------------------------- the methods


def _spoken(items) -> str:
    """``(3, 10, 50)`` -> ``"3, 10 and 50"``."""
    words = [str(i) for i in items]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


@dataclass(frozen=True)
class Method:
    """One ranking method: all that the rest of novelfind knows of it.

    The ``--method`` choices, ``scan()``'s doc and the command line's help of ``method`` and ``feature``,
    the config file's comments, what ``--feature auto`` extracts and which settings a scan accepts with
    it (``settings``) are made from these records, so a new method is one record in ``METHODS`` plus its
    scorer.
    """

    name: str
    # (x, k, config, device, support) -> Scores, higher = more novel: exact where ``Scores.exact`` says
    # so, an upper bound elsewhere, so ``rank`` can certify the top
    scorer: Callable[..., Scores]
    help: str  # one line, without the name: what --help, scan()'s doc and the config file say
    feature: str  # the feature vector it was chosen and measured on: what ``--feature auto`` extracts
    cosine: bool = False  # ranks rows scaled to unit length: scores, neighbours, distances between them
    chunks: bool = True  # can rank a source read in chunks (False: it needs the matrix in memory)
    # its scores are zero outside a support of k rows: only the support is ranked, widened when
    # near-duplicates or non-candidates leave fewer than k picks in it
    sparse: bool = False
    scale_free: bool = True  # the same ranking for x and c * x (False: ranks the rows exactly as given)
    max_rows: int | None = None  # refuses larger libraries, before extraction (its cost grows as N^2)
    # runs the ADS solver, on ``rank``'s ``device``: its settings (``ADSConfig``: epochs, partners, lr, ...)
    # shape the ranking; the other methods ignore them (the report shows them only where they count) and
    # run on the CPU whatever ``device`` says (so a scan need not ask where CUDA is, which imports torch)
    solver: bool = False
    # the scan parameters it uses of those only some methods use (``method_settings()``): a scan refuses a
    # value given for one its method ignores (``novelfind.params``), rather than ignore it in silence
    settings: frozenset[str] = frozenset()
    timed: bool = False  # reads when each photo was taken (``rank``'s ``times``), as a keyword


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "cosine-knn",
            cosine_knn_scores,
            f"cosine distance to the {KNN_K} nearest neighbours",
            feature="pooled",
            cosine=True,
        ),
        Method(
            "event-knn",
            event_knn_scores,
            f"cosine distance to the {KNN_K} nearest neighbours, {EVENT_WEIGHT:.0%} of it to those "
            "outside the photo's own event in time: odd batches stand out, places seen on many days do not",
            feature="pooled",
            cosine=True,
            timed=True,
        ),
        Method(
            "multiscale-knn",
            multiscale_scores,
            f"cosine k-NN at {_spoken(MULTISCALE_K)} neighbours, fused by rank",
            feature="pooled",
            cosine=True,
        ),
        Method(
            "microcluster",
            microcluster_method_scores,
            f"distance to the {microclusters.KNN_K} nearest photos outside the photo's batch: odd "
            "batches and single odd photos on one scale",
            feature="logits",
            cosine=True,
            max_rows=MICROCLUSTER_MAX_ROWS,
        ),
        Method(
            "ads",
            ads_scores,
            "the ADS solver on whitened features, blended with a k-NN density score",
            feature="logits",
            solver=True,
            settings=SOLVER_SETTINGS,
        ),
        Method(
            "ads-paper",
            ads_paper_scores,
            "Algorithm 1 alone, as published",
            feature="logits",
            chunks=False,
            sparse=True,
            scale_free=False,
            solver=True,
            settings=SOLVER_SETTINGS,
        ),
        Method("knn", knn_scores, f"distance to the {KNN_K} nearest neighbours", feature="logits"),
    )
}
# derived views, by name
COSINE_METHODS = tuple(name for name, m in METHODS.items() if m.cosine)
METHOD_FEATURE = {name: m.feature for name, m in METHODS.items()}
SOLVER_METHODS = tuple(name for name, m in METHODS.items() if m.settings >= SOLVER_SETTINGS)  # run ADS


def method_settings() -> frozenset[str]:
    """The scan parameters only some methods use: those any ``METHODS`` record names (a record added at
    run time counts at once)."""
    return frozenset().union(*(m.settings for m in METHODS.values()))


def methods_help(code: bool = False) -> str:
    """Each method with its help line, the default said to be so: ``cosine-knn (default: ...), ...,
    knn (...)``; with ``code`` each name is written as a string literal in code (the API doc)."""
    said = []
    for name, m in METHODS.items():
        shown = f'``"{name}"``' if code else name
        said.append(f"{shown} ({'default: ' if name == DEFAULT_METHOD else ''}{m.help})")
    return ", ".join(said)


def features_help() -> str:
    """What ``--feature auto`` extracts, by method: ``pooled for cosine-knn and multiscale-knn, logits
    for the other methods`` (the last feature's methods are "the other methods")."""
    by_feature: dict[str, list[str]] = {}
    for name, m in METHODS.items():
        by_feature.setdefault(m.feature, []).append(name)
    said = [f"{feature} for {_spoken(names)}" for feature, names in by_feature.items()]
    if len(said) > 1:
        said[-1] = f"{list(by_feature)[-1]} for the other methods"
    return ", ".join(said)


# --------------------------------------------------------------------------- main entry


def dedup_order(order: np.ndarray, xn: np.ndarray, k: int, threshold: float | None) -> tuple[np.ndarray, int]:
    """First k of ``order`` skipping any within ``threshold`` of an already kept one (rows of xn): the
    plain near-duplicate pass over a matrix, as the research scripts measure it (``rank`` groups its
    picks into moments instead, ``novelfind.ranking.moments``).

    -> (kept indices int64, number skipped before the k-th was kept). Greedy and sequential in meaning,
    but evaluated a block of candidates at a time: one matmul against the kept rows (a preallocated
    (k, M) array) and one inside the block flag the pairs that may be within ``threshold`` (Gram
    distances, with a float slack), and only those pairs are confirmed with the exact norm of the
    difference. So the cost is a few GEMMs, O(scanned x kept x M) flops at BLAS speed, with no
    per-pick copying; for k = 100 it is one or two small blocks.
    """
    order = np.asarray(order, dtype=np.int64)
    if threshold is None or threshold <= 0:
        return order[:k], 0
    cap = int(min(k, len(order)))
    if cap <= 0:
        return np.zeros(0, dtype=np.int64), 0
    dt = np.result_type(xn.dtype, np.float32)
    kept_x = np.empty((cap, xn.shape[1]), dtype=dt)  # (k, M) the kept rows, in pick order
    kept_sq = np.empty(cap, dtype=np.float64)  # (k,) their squared norms
    kept_idx = np.empty(cap, dtype=np.int64)
    thr = float(threshold)
    thr2 = thr * thr
    c = dropped = pos = 0
    while c < cap and pos < len(order):
        # block size: about twice the picks still needed (few wasted rows for small k), bounded so the
        # (B, kept) Gram block stays <= ~8M entries
        b = int(min(len(order) - pos, max(32, min(1024, 2 * (cap - c)), 1), max(32, 8_000_000 // max(c, 1))))
        blk = order[pos : pos + b]
        pos += b
        bx = np.asarray(xn[blk], dtype=dt)  # (B, M)
        bsq = np.einsum("ij,ij->i", bx, bx).astype(np.float64)  # (B,)
        # candidate pairs (Gram distance below threshold + slack); confirmed exactly below
        if c:
            g = (bx @ kept_x[:c].T).astype(np.float64)  # (B, c)
            ssum = bsq[:, None] + kept_sq[None, :c]
            flag_prev = (ssum - 2 * g) < thr2 + 1e-4 * ssum + 1e-6  # (B, c)
            any_prev = flag_prev.any(axis=1)  # (B,)
        gb = (bx @ bx.T).astype(np.float64)  # (B, B)
        ssb = bsq[:, None] + bsq[None, :]
        flag_blk = (ssb - 2 * gb) < thr2 + 1e-4 * ssb + 1e-6  # (B, B)
        acc = np.zeros(b, dtype=bool)  # accepted in this block
        c0 = c
        for j in range(b):
            near = False
            if c0 and any_prev[j]:
                r = np.flatnonzero(flag_prev[j])
                near = bool((np.linalg.norm(kept_x[r] - bx[j], axis=1) < thr).any())
            if not near and j:
                r = np.flatnonzero(flag_blk[j, :j] & acc[:j])
                if len(r):
                    near = bool((np.linalg.norm(bx[r] - bx[j], axis=1) < thr).any())
            if near:
                dropped += 1
                continue
            acc[j] = True
            kept_x[c] = bx[j]
            kept_sq[c] = bsq[j]
            kept_idx[c] = blk[j]
            c += 1
            if c == cap:
                break
    return kept_idx[:c].copy(), dropped


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


def method_scores(
    x: np.ndarray | FeatureSource,
    k: int,
    method: str,
    config: ADSConfig,
    device=None,
    support: int | None = None,
) -> Scores:
    """Score every image with ``method`` for ``k`` picks (higher = more novel); see ``Scores``.
    ``support``: the ADS support of a sparse method (default k)."""
    return _method(method).scorer(x, k, config, device, support)


def _method(name: str) -> Method:
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}") from None


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
    prefer: np.ndarray | None = None,
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

    ``prefer``: (N,) how good an original each row is (pixel count, else file size; larger is better):
    a moment is shown by the best original among its medoid and the medoid's copies
    (``novelfind.ranking.moments.COPY_RADIUS``), not by a resave or a thumbnail. None: the medoid.

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
    chosen = _method(method)
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
        from novelfind.ranking.solver import ADSConfig

        config = ADSConfig()
    if times is not None:
        times = events.check_times(times, source.n)
    if prefer is not None:
        prefer = np.asarray(prefer, dtype=np.float64)
        if prefer.shape != (source.n,):
            raise ValueError(f"prefer must have shape ({source.n},), got {prefer.shape}")
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
    prefer: np.ndarray | None = None,
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
    support = min(k, n)  # a sparse method's support: it does not depend on the candidates
    walked: dict = {}

    def walk(order: np.ndarray) -> int:
        """The moments of ``order``; returns how many entries of it were read."""
        found = walked["moments"] = grouper.group(order, k_eff)
        return found.read if len(found.heads) == k_eff else len(order)

    scorer = functools.partial(method.scorer, times=times) if method.timed else method.scorer
    while True:
        scored = scorer(xm, min(k, n), config, device, support)
        grouper.exact = scored.exact  # look up only rows whose score is exact (updated in place)
        grouper.time_mates = scored.time_mates
        if method.cosine and scored.density is not None:  # its distances are between unit rows
            grouper.nearest = scored.density.nearest_distance
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
    return Ranking(
        indices=picks,
        scores=scores[found.heads].astype(np.float32),  # a moment's score: its highest scored photo's
        neighbour=nb,
        distance=dist,
        duplicates_dropped=dropped,
        members=found.members,
        member_distance=found.distances,
        all_scores=scores,
        spans=None if times is None else _spans(times, picks, found.members),
    )


def _spans(times: np.ndarray, picks: np.ndarray, members: list[np.ndarray]) -> np.ndarray:
    """(K, 2): each moment's first and last capture time, NaN where none of its photos is dated."""
    out = np.full((len(picks), 2), np.nan)
    for j, (p, m) in enumerate(zip(picks, members, strict=True)):
        t = times[np.concatenate([[p], m]).astype(np.int64)]
        t = t[np.isfinite(t)]
        if len(t):
            out[j] = t.min(), t.max()
    return out
