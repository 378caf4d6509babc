"""The research baselines of the benchmarks (scripts/baselines.py): not shipped, but measured against."""

from __future__ import annotations

import numpy as np
import pytest
from baselines import BASELINES, POWER_MAX_N, power_scores
from synthetic import blob_with_outliers


def test_power_iteration_matches_dense_eigenvector():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5)).astype(np.float32)
    d = np.linalg.norm(x[:, None] - x[None], axis=2)
    vals, vecs = np.linalg.eigh(d)
    v = np.abs(vecs[:, -1])
    s = power_scores(x)
    np.testing.assert_allclose(s, v, atol=1e-4)


def test_power_iteration_refuses_a_library_sized_input():
    with pytest.raises(ValueError, match="O\\(N\\^2\\)"):
        power_scores(np.zeros((POWER_MAX_N + 1, 2), np.float32))


@pytest.mark.parametrize("name", sorted(BASELINES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_baseline_finds_far_outliers(name, seed):
    x, truth = blob_with_outliers(seed=seed)
    scores = BASELINES[name](x, seed)
    assert scores.shape == (len(x),) and scores.dtype == np.float32
    assert set(np.argsort(-scores)[:5].tolist()) == truth
