"""What every scorer shares: the input, the Scores record, the robust scale and the density set-up."""

from __future__ import annotations

import numpy as np
import pytest

from novelfind.ranking import knn, scoring
from novelfind.ranking.adsconfig import ADSConfig
from novelfind.ranking.sources import MatrixSource, UnitSource


def test_l2_normalise_gives_unit_rows_and_leaves_zero_rows_zero():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [0.0, -2.0]], dtype=np.float32)
    u = scoring.l2_normalise(x)
    np.testing.assert_allclose(u, [[0.6, 0.8], [0.0, 0.0], [0.0, -1.0]], rtol=1e-6)


def test_unit_source_wraps_once():
    x = np.array([[3.0, 4.0], [1.0, 0.0]], dtype=np.float32)
    u = scoring.unit_source(x)
    assert isinstance(u, UnitSource)
    assert scoring.unit_source(u) is u
    np.testing.assert_allclose(u.take(np.array([0])), [[0.6, 0.8]], rtol=1e-6)


def test_median_mad_is_scaled_to_a_normal_and_never_zero():
    med, mad = scoring.median_mad(np.array([1.0, 2.0, 3.0, 4.0, 100.0]))
    assert med == 3.0
    assert mad == pytest.approx(1.0 * 1.4826)  # |v - 3| = 2, 1, 0, 1, 97: median 1
    assert scoring.median_mad(np.full(7, 5.0)) == (5.0, 1e-12)


def test_scores_of_values_and_of_a_density():
    v = np.array([0.5, 0.1], dtype=np.float32)
    s = scoring.Scores.of(v)
    assert s.current() is v and s.exact is None and s.refine is None and s.time_mates is None
    x = np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32)
    dens, space = scoring.density(x, 3)
    assert space is None  # small: exact, no principal space needed
    d = scoring.Scores.of_density(dens)
    assert d.current() is dens.values and d.exact is dens.exact and d.density is dens
    assert d.stats is dens.stats


def test_density_is_the_exact_mean_distance_to_the_nearest_rows_when_small():
    x = np.array([[0.0], [1.0], [3.0], [10.0]], dtype=np.float32)
    dens, _ = scoring.density(x, neighbours=2)
    assert dens.exact.all()
    # row 0: 1 and 3 -> 2; row 1: 1 and 2 -> 1.5; row 2: 2 and 3 -> 2.5; row 3: 7 and 9 -> 8
    np.testing.assert_allclose(dens.values, [2.0, 1.5, 2.5, 8.0], rtol=1e-5)


def test_search_space_appends_the_residual_column():
    proj = np.arange(6, dtype=np.float32).reshape(3, 2)
    resid = np.array([7.0, 8.0, 9.0], dtype=np.float32)
    z = scoring.search_space(proj, resid)
    assert z.shape == (3, 3)
    np.testing.assert_array_equal(z[:, :2], proj)
    np.testing.assert_array_equal(z[:, 2], resid)


def test_above_the_exact_size_density_fits_a_space_and_bounds_from_above(monkeypatch):
    monkeypatch.setattr(knn, "EXACT_MAX_N", 100)
    x = np.random.default_rng(1).normal(size=(400, 8)).astype(np.float32)
    dens, space = scoring.density(MatrixSource(x), neighbours=5)
    assert space is not None and space.proj.shape[0] == 400
    exact, _ = knn.knn_exact(x, np.arange(400), 5)
    assert np.all(dens.values >= exact.mean(1) * (1 - 1e-5))
    points, same = scoring.search_points(MatrixSource(x), space)
    assert same is space and points.shape == (400, space.proj.shape[1] + 1)


def test_score_input_defaults():
    given = scoring.ScoreInput(source=np.zeros((2, 2), dtype=np.float32), k=1, config=ADSConfig())
    assert given.device is None and given.support is None and given.times is None
    assert dict(given.settings) == {}
