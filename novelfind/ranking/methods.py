"""The ranking methods: one ``Method`` record each in ``METHODS``, and the scorer behind each.

A record says all that the rest of novelfind knows of a method (its name, scorer, help line, feature,
geometry, whether it ranks from chunks, the scan settings it uses and its own declared settings); a
scorer is called the same way for every method, ``scorer(ScoreInput) -> Scores``
(``novelfind.ranking.scoring``), and ``rank`` (``novelfind.ranking.driver``) reads its scores.

Methods:

- ``cosine-knn`` (default): the mean distance to the ``KNN_K`` nearest other rows, the rows scaled to
  unit length first (each distance is sqrt(2 - 2 cos): the k-NN score embedding tools compute;
  cleanlab's out-of-distribution score averages the cosine distances to the same neighbours). On
  the pooled MobileNet-V2 vector (``METHOD_FEATURE``) it is the best method measured on the
  benchmark's test split (README, "Quality"): it beats IsolationForest, the ADS blend (the earlier
  default) and Algorithm 1, and no candidate chosen on the dev split beat it on test by a margin
  that counts. The neighbour search is the certified one of ``knn`` below (exact up to
  ``novelfind.ranking.knn.EXACT_MAX_N`` rows, bounds and an exact top above).
- ``event-knn``: ``cosine-knn`` with each photo also measured against the photos outside its own event
  in time (``novelfind.ranking.eventknn``); without capture times it is ``cosine-knn`` pick for pick.
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

Names: ``k`` is the number of picks; ``support`` the number of images ADS keeps (2k for ``ads``);
``neighbours`` the number of nearest rows a density is the mean over (``KNN_K``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from novelfind.ranking import microclusters
from novelfind.ranking.eventknn import EVENT_WEIGHT, event_knn_scores
from novelfind.ranking.pca import spread
from novelfind.ranking.scoring import (
    KNN_K,
    SCALE_ROWS,
    ScoreInput,
    Scores,
    density,
    median_mad,
    principal,
    unit_source,
)
from novelfind.ranking.sources import FeatureSource, as_source

if TYPE_CHECKING:
    from novelfind.ranking.solver import ADSConfig

# torch (the solver is torch code) is imported where it is used: the command line and the cache commands
# import this module for METHODS and must start without paying for torch.

DEFAULT_METHOD = "cosine-knn"
# The largest library ``microcluster`` (novelfind.ranking.microclusters) ranks. It measures every pair: 10,000
# photos took 306 s on a busy 2-core machine (docs/bench/rank-microcluster.json), so 50,000 would take
# over an hour and a half; past that it refuses before anything is extracted.
MICROCLUSTER_MAX_ROWS = 50_000
MULTISCALE_K = (3, 10, 50)  # multiscale-knn's neighbourhood sizes (dev: the best of 16 sets of sizes)
WHITEN_FLOOR = 32  # the loudest axes are scaled down to the spread of the 32nd (full whitening hurt digits)
DENSITY_WEIGHT = 0.5  # share of the local-density term in ``ads``'s score (benchmark, all sets)
# the scan parameters of the ADS solver (``ADSConfig``'s, less its internal ``block``), for the methods
# that run it
SOLVER_SETTINGS = frozenset({"epochs", "partners", "lr", "momentum", "seed", "restarts"})


def scale_axes(proj: np.ndarray, var: np.ndarray, floor: int | None) -> np.ndarray:
    """Each axis divided by sqrt(max(var_i, var_floor)): the loud axes brought down to the floor-th."""
    if floor is not None:
        var = np.maximum(var, var[min(floor, len(var)) - 1])
    return (proj / np.sqrt(var).astype(np.float32)).astype(np.float32)


def _zscore(v: np.ndarray) -> np.ndarray:
    """Robust standardisation: (v - median) / MAD."""
    med, mad = median_mad(v)
    return (v - med) / mad


def _ads_weights(x: np.ndarray, support: int, config: ADSConfig, device=None) -> np.ndarray:
    """ADS weights as an (N,) score (zero outside the ``support``-sparse support)."""
    from novelfind.ranking.solver import solve

    return np.asarray(solve(x, support, config, device=device).weights, dtype=np.float32)


def ads_scores(given: ScoreInput) -> Scores:
    """The ``ads`` method's score for every image (higher = more novel), for ``k`` picks.

    ADS runs on whitened features (``WHITEN_DIMS`` axes, the loudest brought down to the
    ``WHITEN_FLOOR``-th) with a support of 2k, so near-duplicates can be replaced; inside the support
    its weights rank the images. The density term is the mean distance to the ``KNN_K`` nearest
    neighbours in the raw feature space (``density``). Both are robustly standardised, the density with
    the median and MAD of ``SCALE_ROWS`` evenly spaced rows (all rows for smaller N), and blended.
    The density is exact for every row up to ``knn.EXACT_MAX_N`` rows; above, an upper bound outside the
    rows ``refine`` made exact (the blend grows with the density, so a bound on one bounds the other).
    The density's share is its declared setting ``density_weight`` (default ``DENSITY_WEIGHT``).
    """
    k, density_weight = given.k, given.settings.get("density_weight", DENSITY_WEIGHT)
    src = as_source(given.source)
    n = src.n
    if n == 1:
        return Scores.of(np.ones(1, dtype=np.float32))
    space = principal(src)  # (N, d) coordinates, (d,) variances, (N,) residuals
    w = scale_axes(space.proj, space.var, WHITEN_FLOOR)  # (N, d)
    dens, _ = density(src, KNN_K, space)
    support = min(n, max(2 * k, k + KNN_K))
    a = _ads_weights(w, support, given.config, given.device)  # (N,) sparse
    active = a > 0
    sample = spread(n, SCALE_ROWS)
    # one exact pass for the scale sample and the likely top: the ADS support, the highest bounds
    likely = np.argpartition(-dens.values, min(n - 1, 2 * k + 2 * KNN_K))[: 2 * k + 2 * KNN_K]
    dens.make_exact(np.concatenate([sample, np.flatnonzero(active), likely]))
    med, mad = median_mad(dens.values[sample])
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


def multiscale_scores(given: ScoreInput) -> Scores:
    """The ``multiscale-knn`` method: cosine k-NN at several neighbourhood sizes, fused by rank.

    Rows are scaled to unit length (``UnitSource``: the distance between unit rows is a monotone
    function of the cosine distance). For every k in its declared setting ``ks`` (default
    ``MULTISCALE_K``) each row gets the mean distance to its k
    nearest other rows, and that score's rank percentile over the library (``rank_percentiles``); the
    row's score is the mean of those percentiles. A small k finds a subject seen once, a large one a
    small group of similar odd photos; the mean of the ranks keeps most of both (measured, README
    "Quality"). One neighbour search (the largest k) serves every k: exact for every row up to
    ``knn.EXACT_MAX_N`` rows; above, upper bounds from the principal space, made exact from the top
    of the ranking down as far as the picks read (``rank``: rows are made exact until every row the
    grouping into moments reads is exact; the percentiles are taken over the exact scores of those rows
    and the bounds of the others, which are the same from a matrix and from chunks).
    """
    ks = given.settings.get("ks", MULTISCALE_K)
    src = unit_source(given.source)
    if src.n == 1:
        return Scores.of(np.ones(1, dtype=np.float32))
    space = principal(src)
    dens, _ = density(src, max(ks), space, means_at=tuple(sorted(ks)))

    def current() -> np.ndarray:
        pct = [rank_percentiles(dens.at[:, s]) for s in range(dens.at.shape[1])]
        return np.mean(pct, axis=0).astype(np.float32)

    return dataclasses.replace(Scores.of_density(dens), current=current)


def knn_scores(given: ScoreInput) -> Scores:
    """The ``knn`` method: mean distance to the ``KNN_K`` nearest other rows, raw features."""
    return Scores.of_density(density(given.source, KNN_K)[0])


def cosine_knn_scores(given: ScoreInput) -> Scores:
    """The ``cosine-knn`` method: mean distance to the ``KNN_K`` nearest other rows scaled to unit
    length."""
    return Scores.of_density(density(unit_source(given.source), KNN_K)[0])


def microcluster_method_scores(given: ScoreInput) -> Scores:
    """The ``microcluster`` method (:mod:`novelfind.ranking.microclusters`): the mean distance to the
    nearest rows outside the row's microcluster, rows scaled to unit length; exact for every row."""
    return Scores.of(microclusters.microcluster_scores(unit_source(given.source))[0])


def ads_paper_scores(given: ScoreInput) -> Scores:
    """The ``ads-paper`` method: Algorithm 1's weights on the raw matrix, zero outside a support of
    ``support`` rows (default k)."""
    matrix = as_source(given.source).matrix
    return Scores.of(_ads_weights(matrix, given.support or given.k, given.config, given.device))


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
    # ScoreInput -> Scores, higher = more novel: exact where ``Scores.exact`` says so, an upper bound
    # elsewhere, so ``rank`` can certify the top. Every scorer is called the same way; each reads the
    # fields of its input it uses (the times, the solver's settings, its own ``tuning``)
    scorer: Callable[[ScoreInput], Scores]
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
    # its own settings, with their shipped values: what its scorer reads as ``ScoreInput.settings``. Not
    # scan parameters (no option sets them); ``method_scores`` takes others, to measure a variant
    tuning: Mapping[str, Any] = field(default_factory=dict)


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
            tuning={"weight": EVENT_WEIGHT},
        ),
        Method(
            "multiscale-knn",
            multiscale_scores,
            f"cosine k-NN at {_spoken(MULTISCALE_K)} neighbours, fused by rank",
            feature="pooled",
            cosine=True,
            tuning={"ks": MULTISCALE_K},
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
            tuning={"density_weight": DENSITY_WEIGHT},
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


def find_method(name: str) -> Method:
    """The record of method ``name``; ValueError naming the choices for an unknown one."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}") from None


def method_scores(
    x: np.ndarray | FeatureSource,
    k: int,
    method: str,
    config: ADSConfig,
    device=None,
    support: int | None = None,
    *,
    times: np.ndarray | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Scores:
    """Score every image with ``method`` for ``k`` picks (higher = more novel); see ``Scores``.
    ``support``: the ADS support of a sparse method (default k). ``settings``: values for some of the
    method's own settings (``Method.tuning``; the others keep theirs), to measure a variant of it;
    ValueError for a name the method does not declare."""
    chosen = find_method(method)
    unknown = sorted(set(settings or ()) - set(chosen.tuning))
    if unknown:
        raise ValueError(f"method {method} has no setting {', '.join(unknown)}")
    own = {**chosen.tuning, **(settings or {})}
    return chosen.scorer(ScoreInput(x, k, config, device, support, times, own))
