"""Ranking methods on synthetic features with known novelties."""

from __future__ import annotations

import numpy as np
import pytest

from novelfind import rank as rank_mod
from novelfind.ads import ADSConfig, ads
from novelfind.rank import METHODS, rank


def blob_with_outliers(n=400, m=40, k=5, seed=0, shift=6.0):
    """A Gaussian blob and k points far from it (the last k rows)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, m)).astype(np.float32)
    x[-k:] += shift * rng.normal(size=(k, m)).astype(np.float32) / np.sqrt(m) * 3
    return x, set(range(n - k, n))


@pytest.mark.parametrize("method", METHODS)
def test_every_method_finds_far_outliers(method):
    x, truth = blob_with_outliers()
    r = rank(x, 5, method=method, config=ADSConfig(seed=1))
    assert set(r.indices.tolist()) == truth
    assert r.indices.dtype == np.int64 and r.scores.dtype == np.float32
    assert r.neighbour.shape == r.distance.shape == (5,)


def test_scores_are_best_first():
    x, _ = blob_with_outliers()
    r = rank(x, 5)
    assert np.all(np.diff(r.scores) <= 0)


def test_nearest_neighbour_is_exact_in_raw_space():
    x, _ = blob_with_outliers(n=300)
    r = rank(x, 5, method="knn")
    for i, nb, d in zip(r.indices, r.neighbour, r.distance, strict=True):
        dist = np.linalg.norm(x - x[i], axis=1)
        dist[i] = np.inf
        assert nb == int(np.argmin(dist))
        assert d == pytest.approx(dist.min(), rel=1e-3)


def test_single_image_has_no_neighbour():
    r = rank(np.ones((1, 8), dtype=np.float32), 3)
    assert r.indices.tolist() == [0]
    assert r.neighbour.tolist() == [-1]


def test_k_larger_than_n_returns_all():
    x = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    for method in ("ads", "ads-paper", "knn"):
        r = rank(x, 50, method=method, dedup=0)
        assert sorted(r.indices.tolist()) == list(range(7))


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros(5, dtype=np.float32), "2-D"),
        (np.zeros((0, 3), dtype=np.float32), "non-empty"),
        (np.array([[0.0, np.nan], [1.0, 2.0]], dtype=np.float32), "NaN"),
    ],
)
def test_bad_features_raise(bad, match):
    with pytest.raises(ValueError, match=match):
        rank(bad, 1)


def test_bad_k_and_method_raise():
    x = np.zeros((4, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        rank(x, 0)
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        rank(x, 1, method="nope")


def test_ads_paper_is_the_solver_on_raw_features():
    x, _ = blob_with_outliers(seed=3)
    cfg = ADSConfig(seed=4)
    r = rank(x, 5, method="ads-paper", config=cfg, dedup=0)
    assert r.indices.tolist() == ads(x, 5, cfg).ranking.tolist()


def test_default_finds_subtle_outliers_the_paper_misses():
    """Outliers along a low-variance direction: whitening makes them stand out, raw distances do not."""
    rng = np.random.default_rng(0)
    n, m, k = 500, 100, 6
    scale = np.ones(m, dtype=np.float32)
    scale[:5] = 12.0  # five loud directions dominate raw distances
    x = rng.normal(size=(n, m)).astype(np.float32) * scale
    x[-k:, 10] += 14.0  # quiet direction: 14 sigma there, but small next to the loud spread
    truth = set(range(n - k, n))
    hits = {
        m_: len(truth & set(rank(x, k, method=m_).indices.tolist())) for m_ in ("ads", "ads-paper", "knn")
    }
    assert hits["ads"] >= k - 1
    assert hits["ads-paper"] <= 1 and hits["knn"] <= 1


def test_dedup_keeps_one_per_burst():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 32)).astype(np.float32)
    odd = rng.normal(size=(3, 32)).astype(np.float32) * 6  # three odd scenes
    bursts = np.repeat(odd, 4, axis=0) + rng.normal(size=(12, 32)).astype(np.float32) * 0.01
    x = np.vstack([x, bursts])  # rows 300..311: 3 bursts of 4 near-identical frames
    groups = {i: (i - 300) // 4 for i in range(300, 312)}
    plain = rank(x, 3, method="knn", dedup=0)
    assert len({groups.get(i) for i in plain.indices.tolist()}) < 3  # copies fill the top without dedup
    r = rank(x, 3, method="knn", dedup=0.05)
    assert sorted(groups[i] for i in r.indices.tolist()) == [0, 1, 2]
    assert r.duplicates_dropped >= 1


def test_default_dedup_and_bad_dedup():
    x = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    x[1] = x[0] * 1.0001  # a re-saved copy
    x[0] *= 20
    x[1] *= 20
    r = rank(x, 2, method="knn")  # dedup=None: the default threshold applies
    assert not {0, 1} <= set(r.indices.tolist())
    assert r.duplicates_dropped == 1
    with pytest.raises(ValueError, match="dedup must be >= 0, got -1"):
        rank(x, 2, dedup=-1)


def test_dedup_with_k_at_least_n_still_returns_everything():
    x = np.zeros((6, 4), dtype=np.float32)
    x[:, 0] = [1, 1.001, 1.002, 5, 9, 9.001]  # two groups of near-identical rows
    x[:, 1] = 1
    for method in ("ads", "knn", "ads-paper"):
        r = rank(x, 10, method=method, dedup=0.05)
        assert sorted(r.indices.tolist()) == list(range(6))
        assert r.duplicates_dropped == 0
    r = rank(x, 3, method="knn", dedup=0.05)
    assert len(r.indices) == 3


def test_dedup_refills_ads_paper_to_k():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 16)).astype(np.float32)
    x[:6] = (
        rng.normal(size=(1, 16)).astype(np.float32) * 8 + rng.normal(size=(6, 16)).astype(np.float32) * 1e-3
    )
    r = rank(x, 4, method="ads-paper", dedup=0.05)
    assert len(r.indices) == 4
    assert len(set(r.indices.tolist()) & set(range(6))) == 1


def test_whiten_gives_unit_variance():
    rng = np.random.default_rng(0)
    x = (rng.normal(size=(2000, 50)) @ rng.normal(size=(50, 50))).astype(np.float32)
    w = rank_mod.whiten(x, 8, chunk=300)
    assert w.shape == (2000, 8)
    cov = np.cov(w.T)
    np.testing.assert_allclose(cov, np.eye(8), atol=1e-3)


def test_whiten_constant_rows():
    w = rank_mod.whiten(np.ones((5, 3), dtype=np.float32))
    assert np.all(w == 0)


def test_ann_knn_agrees_with_exact(monkeypatch):
    pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, 16)).astype(np.float32)
    exact = rank_mod.knn_scores(x, 10, exact=True)
    monkeypatch.setattr(rank_mod, "ANN_MIN_N", 0)
    approx = rank_mod.knn_scores(x, 10)
    assert np.corrcoef(exact, approx)[0, 1] > 0.99
    assert len(set(np.argsort(-exact)[:20]) & set(np.argsort(-approx)[:20])) >= 18


def test_power_iteration_matches_dense_eigenvector():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5)).astype(np.float32)
    d = np.linalg.norm(x[:, None] - x[None], axis=2)
    vals, vecs = np.linalg.eigh(d)
    v = np.abs(vecs[:, -1])
    s = rank_mod.power_scores(x)
    np.testing.assert_allclose(s, v, atol=1e-4)


def test_same_seed_same_ranking():
    x, _ = blob_with_outliers(seed=5)
    a = rank(x, 5, config=ADSConfig(seed=2))
    b = rank(x, 5, config=ADSConfig(seed=2))
    assert a.indices.tolist() == b.indices.tolist()
