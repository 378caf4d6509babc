"""What the ADS term contributes to the default ranking, pinned on fixed synthetic data over several seeds.

The ``ads`` method's score is ``(1 - w) * ADS term + w * density term``
(``novelfind.ranking.methods.ads_scores``, w =
``DENSITY_WEIGHT``); ``density_weight=1.0`` is the default without its ADS term, 0.0 the ADS term alone.
Three fixed datasets (500 points, 100 dimensions, five loud ones; 6 planted novelties), each drawn with
three data seeds and ranked with three solver seeds:

- ``far``: novelties far from everything in the raw space. Every variant finds all of them: removing the
  ADS term changes nothing. On the labelled sets of real pictures it changes nothing measurable either
  (README, Quality).
- ``quiet``: novelties along a quiet direction, invisible next to the loud ones. Only the ADS term sees
  them, because it works on whitened features; plain k-NN on the same whitened features finds them as well
  as ADS does, so what carries the default here is the whitening, not the ADS objective.
- ``group``: six novelties close to each other. ADS wants picks that are far from one another and keeps
  about one of them; its term adds no picks to the default there (on average it costs some).
"""

from __future__ import annotations

import numpy as np
import pytest

from novelfind.ranking.driver import DEFAULT_DEDUP
from novelfind.ranking.knn import KnnScores
from novelfind.ranking.methods import WHITEN_FLOOR, method_scores, scale_axes
from novelfind.ranking.moments import dedup_order
from novelfind.ranking.pca import fit_space
from novelfind.ranking.scoring import KNN_K, WHITEN_DIMS, l2_normalise
from novelfind.ranking.solver import ADSConfig

N, M, K = 500, 100, 6
DATA_SEEDS = (0, 1, 2)
ADS_SEEDS = (0, 1, 2)


def _data(kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = np.ones(M, dtype=np.float32)
    scale[:5] = 12.0  # five loud directions dominate raw distances
    x = rng.normal(size=(N, M)).astype(np.float32) * scale
    if kind == "far":  # each novelty 60 units away in its own random direction
        d = rng.normal(size=(K, M)).astype(np.float32)
        x[-K:] += 60 * d / np.linalg.norm(d, axis=1, keepdims=True)
    elif kind == "quiet":  # 14 sigma along a quiet direction: small next to the loud spread
        x[-K:, 10] += 14.0
    elif kind == "group":  # a tight group of K, 60 units away from the rest
        d = rng.normal(size=M).astype(np.float32)
        x[-K:] = 0.3 * x[-K:] + 60 * d / np.linalg.norm(d)
    return x / np.abs(x).max()  # as rank() scales its input


def _hits(scores: np.ndarray, x: np.ndarray) -> int:
    """Planted novelties among the K picks (near-duplicates removed as rank() does by default).
    With N = 500 (below ``knn.EXACT_MAX_N``) every score is exact, so ``current()`` is the order."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    picks, _ = dedup_order(order, l2_normalise(x), K, DEFAULT_DEDUP)
    return int((picks >= N - K).sum())


@pytest.fixture(scope="module")
def hits():
    """{dataset: {variant: hits per run}}; runs are (data seed, solver seed) pairs in a fixed order."""
    out: dict[str, dict[str, list[int]]] = {}
    for kind in ("far", "quiet", "group"):
        h: dict[str, list[int]] = {"default": [], "no-ads": [], "ads-term": [], "knn-whitened": []}
        for ds in DATA_SEEDS:
            x = _data(kind, ds)
            # the density term does not depend on the solver seed: one run per dataset, repeated per seed
            no_ads = _hits(
                method_scores(x, K, "ads", ADSConfig(seed=0), settings={"density_weight": 1.0}).current(), x
            )
            space = fit_space(x, WHITEN_DIMS)
            whitened = scale_axes(space.proj, space.var, WHITEN_FLOOR)
            knn_w = _hits(KnnScores.build(whitened, KNN_K, exact_max_n=N).values, x)
            for s in ADS_SEEDS:
                cfg = ADSConfig(seed=s)
                h["default"].append(_hits(method_scores(x, K, "ads", cfg).current(), x))
                h["ads-term"].append(
                    _hits(method_scores(x, K, "ads", cfg, settings={"density_weight": 0.0}).current(), x)
                )
                h["no-ads"].append(no_ads)
                h["knn-whitened"].append(knn_w)
        out[kind] = h
    return out


def test_far_novelties_removing_ads_changes_nothing(hits):
    h = hits["far"]
    assert h["default"] == h["no-ads"] == h["ads-term"] == [K] * len(h["default"])


def test_quiet_novelties_are_found_only_through_the_ads_term(hits):
    h = hits["quiet"]
    assert all(a > b for a, b in zip(h["default"], h["no-ads"], strict=True))  # every seed pair
    assert np.mean(h["no-ads"]) <= 1.0
    assert np.mean(h["default"]) >= 2.5
    assert np.mean(h["ads-term"]) >= 4.5
    # the ADS objective adds nothing over k-NN in the same whitened space: the whitening carries it
    assert np.mean(h["knn-whitened"]) >= np.mean(h["ads-term"]) - 0.5


def test_grouped_novelties_the_ads_term_adds_nothing(hits):
    h = hits["group"]
    assert np.mean(h["ads-term"]) <= 1.0  # ADS keeps about one of a tight group
    assert np.mean(h["no-ads"]) >= 3.5
    # data seeds 0-11: the mean with the ADS term was 0-0.7 picks below the mean without, never above
    assert np.mean(h["default"]) <= np.mean(h["no-ads"])
