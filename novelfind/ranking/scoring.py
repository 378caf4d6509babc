"""What every scorer shares: the input it is given, the scores it returns, and the density set-up.

Every method's scorer (``novelfind.ranking.methods``) is called the same way, ``scorer(ScoreInput) ->
Scores``: the input carries the rows, k, the solver's settings, the capture times and the method's own
declared settings, and each scorer reads what it uses, so ``rank`` never needs to know which method
reads what. ``Scores`` is every row's score, exact where it matters (``novelfind.ranking.knn``).

The density set-up is here once: the mean distance to the nearest other rows (``density``), exact up to
``knn.EXACT_MAX_N`` rows and, above, bounded from candidates searched in the principal space
(``search_points``), which the event-knn scorer's outside term searches as well.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from novelfind.ranking.pca import Space, fit_space
from novelfind.ranking.sources import FeatureSource, UnitSource, as_source

if TYPE_CHECKING:
    from novelfind.ranking.knn import KnnScores
    from novelfind.ranking.solver import ADSConfig

WHITEN_DIMS = 64  # principal axes kept by ``ads`` (benchmark: 32 loses subtle differences, 256 is slower)
KNN_K = 10  # neighbours for the density term and the knn baseline
# Past these sizes a sample stands in for all rows, evenly spaced (no seed; the same rows for the same N):
PCA_ROWS = 20_000  # rows the principal axes are estimated from (O(rows M^2); axes from 100k rows agree)
SCALE_ROWS = 512  # rows the density's median and MAD are measured on (each costs an exact search; MAD +-5%)


@dataclass(frozen=True)
class ScoreInput:
    """What a scorer is given, the same for every method; each scorer reads the fields it uses."""

    source: np.ndarray | FeatureSource  # (N, M) rows as ``rank`` prepared them (unit length: cosine)
    k: int  # the number of picks
    config: ADSConfig  # the ADS solver's settings (read by the methods that run it)
    device: Any = None  # where the solver runs (None: the CPU)
    support: int | None = None  # a sparse method's support (None: k)
    times: np.ndarray | None = None  # (N,) float64 capture seconds, NaN unknown; None: no times
    # the method's own settings (``Method.tuning``: each declared on its record with its default)
    settings: Mapping[str, Any] = field(default_factory=dict)


def l2_normalise(x: np.ndarray) -> np.ndarray:
    nrm = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(nrm, 1e-12)


def unit_source(x: np.ndarray | FeatureSource) -> UnitSource:
    """x's rows scaled to unit length (x itself when it is already such a source)."""
    return x if isinstance(x, UnitSource) else UnitSource(as_source(x))


def median_mad(v: np.ndarray) -> tuple[float, float]:
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


def search_space(proj: np.ndarray, resid: np.ndarray) -> np.ndarray:
    """Where the density's candidate neighbours are searched: the principal coordinates plus the
    distance from their subspace (N, d + 1). Distances there are lower bounds of the raw ones, and rows
    near in the raw features are near there, at a fraction of the cost (65 numbers a row, not 1000)."""
    return np.hstack([proj, resid[:, None]])


def search_points(src: FeatureSource, space: Space | None) -> tuple[np.ndarray, Space]:
    """Where ``src``'s candidate neighbours are searched above ``knn.EXACT_MAX_N`` rows: the search
    space (``search_space``) of ``space``, fitted here (``principal``) when not given -> (points, space)."""
    if space is None:
        space = principal(src)
    return search_space(space.proj, space.resid), space


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
    z, space = search_points(src, space)
    dens = knn.KnnScores.build(
        src, neighbours, search=z, search_is_lower=True, centre=space.mean, means_at=means_at
    )
    return dens, space
