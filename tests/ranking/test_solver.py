"""Tests for the ADS solver (novelfind.ranking.solver)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from novelfind.ranking.solver import ADSConfig, ADSResult, _k_at, ads, ads_reference

SOLVERS = [ads, ads_reference]


def planted(n: int, m: int, n_out: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Tight clusters plus n_out isolated points far from them and from each other."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((4, m)).astype(np.float32)
    x = centres[rng.integers(0, 4, n)] + 0.05 * rng.standard_normal((n, m)).astype(np.float32)
    out = rng.choice(n, n_out, replace=False)
    x[out] = 6.0 * rng.standard_normal((n_out, m)).astype(np.float32)
    return x, np.sort(out)


def check_result(res: ADSResult, n: int, k: int) -> None:
    """The invariants every result must satisfy."""
    w, r = res.weights, res.ranking
    kk = min(k, n)
    assert w.dtype == np.float32 and w.shape == (n,)
    assert r.dtype == np.int64 and r.shape == (kk,)
    assert np.isfinite(w).all()
    assert (w >= 0).all()
    assert np.count_nonzero(w) == kk
    assert math.isclose(float(np.linalg.norm(w.astype(np.float64))), 1.0, rel_tol=1e-5)
    assert sorted(r.tolist()) == np.flatnonzero(w).tolist()
    for a, b in zip(r[:-1], r[1:], strict=True):  # best first, ties by index
        assert w[a] > w[b] or (w[a] == w[b] and a < b)


# ----------------------------------------------------------------- validation


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("k", [0, -3, True, 2.5])
def test_bad_k(solver, k):
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        solver(np.ones((5, 3), np.float32), k)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite(solver, bad):
    x = np.ones((5, 3), np.float32)
    x[2, 1] = bad
    with pytest.raises(ValueError, match="NaN or infinite"):
        solver(x, 2)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize(
    ("shape", "match"), [((5, 0), "no columns"), ((0, 3), "no rows"), ((5,), "2-D"), ((2, 3, 4), "2-D")]
)
def test_bad_shape(solver, shape, match):
    with pytest.raises(ValueError, match=match):
        solver(np.zeros(shape, np.float32), 1)


def test_overflow_is_an_error():
    with pytest.raises(ValueError, match="too large"):
        ads(np.full((4, 3), 1e30, np.float32) * np.arange(4, dtype=np.float32)[:, None], 2)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"epochs": 0},
        {"partners": 0},
        {"restarts": 0},
        {"block": 0},
        {"lr": 0.0},
        {"momentum": 1.0},
        {"momentum": -0.1},
        {"seed": -1},
        {"epochs": 2.0},
    ],
)
def test_bad_config(kwargs):
    with pytest.raises(ValueError, match="ADSConfig"):
        ADSConfig(**kwargs)


# ----------------------------------------------------------------- edge cases


@pytest.mark.parametrize("solver", SOLVERS)
def test_single_row(solver):
    res = solver(np.array([[1.0, 2.0]]), 3)
    assert res.weights.tolist() == [1.0] and res.ranking.tolist() == [0]


@pytest.mark.parametrize("solver", SOLVERS)
def test_k_larger_than_n_ranks_all(solver):
    x, _ = planted(12, 4, 2)
    res = solver(x, 50)
    check_result(res, 12, 50)


@pytest.mark.parametrize("solver", SOLVERS)
def test_identical_rows(solver):
    res = solver(np.full((10, 6), 3.5, np.float32), 4)
    check_result(res, 10, 4)
    assert res.ranking.tolist() == [0, 1, 2, 3]  # all tied: lowest indices
    np.testing.assert_allclose(res.weights[:4], 0.5)


def test_numpy_torch_and_dtypes_agree():
    x, _ = planted(200, 8, 5)
    a = ads(x, 5)
    b = ads(torch.from_numpy(x), 5)
    c = ads(x.astype(np.float64), 5, device="cpu")
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_allclose(a.weights, c.weights, atol=1e-5)
    assert a.ranking.tolist() == b.ranking.tolist()


@pytest.mark.cuda
def test_cuda_matches_cpu_selection(cuda):
    x, out = planted(3000, 32, 20)
    a = ads(torch.from_numpy(x).to(cuda), 20)
    assert sorted(a.ranking.tolist()) == out.tolist()
    assert a.ranking.tolist() == ads(x, 20).ranking.tolist()
    b = ads(torch.from_numpy(x).to(cuda), 20)
    np.testing.assert_array_equal(a.weights, b.weights)


def test_spread_rows_stay_in_range_past_float32_integers():
    from novelfind.ranking.solver import _spread_rows

    for n in (1, 2, 5, 8192, 16_777_220, 100_000_007):
        rows = _spread_rows(n, 8192)
        assert rows.numel() == min(n, 8192)
        assert int(rows[0]) == 0 and int(rows[-1]) == n - 1
        assert bool((rows[1:] > rows[:-1]).all())  # distinct and increasing


def test_batched_blocks_path(monkeypatch):
    # the GPU path batches several blocks into one product; run it on CPU against the one-block path
    x, _ = planted(1000, 16, 10)
    cfg = ADSConfig(block=96)  # 10 full blocks and a tail of 40 rows
    one = ads(x, 10, cfg)
    monkeypatch.setattr("novelfind.ranking.solver._blocks_per_step", lambda device, block: 3)
    three = ads(x, 10, cfg)
    np.testing.assert_allclose(one.weights, three.weights, rtol=1e-4, atol=1e-6)
    assert one.ranking.tolist() == three.ranking.tolist()


def test_same_result_for_any_thread_count():
    x, _ = planted(3000, 24, 10)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = ads(x, 10, ADSConfig(block=128))
        torch.set_num_threads(3)
        three = ads(x, 10, ADSConfig(block=128))
        assert torch.get_num_threads() == 3  # restored after the solve
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(one.weights, three.weights)


def test_k_schedule():
    # the paper's 2-D example: N = 100, K = 9, E = 4 -> floor(100 - 91 t / 4)
    assert [_k_at(100, 9, t, 4) for t in range(5)] == [100, 77, 54, 31, 9]
    assert [_k_at(7, 7, t, 3) for t in range(4)] == [7, 7, 7, 7]
    assert _k_at(10**6, 1, 20, 20) == 1


# ----------------------------------------------------------------- semantics


def expected_two_steps(
    x: np.ndarray, cfg: ADSConfig, *, scale: float = 1.0, eq_first: bool = False
) -> np.ndarray:
    """Exact expectation of two ADS steps with K = N (no clipping), from the full distance matrix.

    With J draws from the N active images, (N / J) sum_{j in J_i} D_ij s_j has mean (D s)_i.
    Step 1 uses the raw sum (Algorithm 1: no momentum at t = 1); step 2 uses (1 - beta) new + beta old.
    ``scale`` and ``eq_first`` build the wrong variants: a different N/J factor, or eq. (component-2)
    read with (1 - beta) and Delta^0 = 0 already at t = 1.
    """
    n = x.shape[0]
    d = np.linalg.norm(x[:, None] - x[None], axis=2)
    s0 = np.full(n, 1 / math.sqrt(n))
    g1 = scale * (d @ s0) * ((1 - cfg.momentum) if eq_first else 1.0)
    s1 = s0 + 2 * cfg.lr * g1
    s1 /= np.linalg.norm(s1)
    g2 = (1 - cfg.momentum) * scale * (d @ s1) + cfg.momentum * g1
    s2 = s1 + 2 * cfg.lr * g2
    return s2 / np.linalg.norm(s2)


@pytest.mark.parametrize("solver", SOLVERS)
def test_update_rule_matches_expectation(solver):
    # Many partners make the Monte-Carlo sum nearly exact, and the step is sized so that s^{t-1} and
    # the gradient term are comparable: a wrong N/J scaling or momentum on the first step would show.
    x, _ = planted(40, 3, 4, seed=3)
    x64 = x.astype(np.float64)
    cfg = ADSConfig(epochs=2, partners=20000, lr=0.003, block=8)
    got = solver(x, 40, cfg).weights
    want = expected_two_steps(x64, cfg)
    err = np.abs(got - want).max()
    assert err < 2e-3
    for wrong in (
        expected_two_steps(x64, cfg, scale=2.0),
        expected_two_steps(x64, cfg, scale=0.5),
        expected_two_steps(x64, cfg, eq_first=True),
    ):
        assert np.abs(got - wrong).max() > 5 * err


@pytest.mark.parametrize("solver", SOLVERS)
def test_finds_planted_outliers(solver):
    x, out = planted(300, 16, 8)
    res = solver(x, 8)
    assert sorted(res.ranking.tolist()) == out.tolist()


def test_fast_agrees_with_reference_on_harder_data():
    # noisier data: the two versions use different random streams, so compare selections, not bits
    rng = np.random.default_rng(5)
    x = rng.standard_normal((400, 12)).astype(np.float32)
    x[:10] *= 2.5
    fast = set(ads(x, 10, ADSConfig(restarts=3)).ranking.tolist())
    ref = set(ads_reference(x, 10, ADSConfig(restarts=3)).ranking.tolist())
    assert len(fast & set(range(10))) >= 8 and len(ref & set(range(10))) >= 8
    assert len(fast & ref) >= 8


def test_restarts_average():
    x, _ = planted(150, 6, 5)
    res = ads(x, 5, ADSConfig(restarts=4))
    check_result(res, 150, 5)
    assert not np.array_equal(res.weights, ads(x, 5, ADSConfig(restarts=1)).weights)


def test_block_size_does_not_change_the_answer_on_clear_data(monkeypatch):
    """Literal sampling, small shared draws and one 10,000-row block all find the planted outliers.

    The fast path caps a block at ceil(N / MIN_DRAWS) rows, so at N = 300 any block above 5 runs as 5
    rows; a 10,000-row block needs N > 10,000 and, for the test only, a floor of one draw per epoch.
    The rows per block that really ran are recorded and checked.
    """
    import novelfind.ranking.solver as solver_mod

    widths: list[int] = []
    real_block_sums = solver_mod._block_sums

    def recording(x, mu, sq, s, rows, partners, bufs):
        widths.append(rows.shape[1])  # rows: (G, B)
        return real_block_sums(x, mu, sq, s, rows, partners, bufs)

    monkeypatch.setattr(solver_mod, "_block_sums", recording)
    x, out = planted(300, 8, 6)
    for block, ran in ((1, 1), (7, 5), (10_000, 5)):
        widths.clear()
        assert sorted(ads(x, 6, ADSConfig(block=block)).ranking.tolist()) == out.tolist()
        assert max(widths) == ran, (block, sorted(set(widths)))

    x, out = planted(10_500, 8, 6)
    monkeypatch.setattr(solver_mod, "MIN_DRAWS", 1)
    for block in (7, 10_000):
        widths.clear()
        cfg = ADSConfig(block=block, epochs=5)  # 1,500 blocks of 7 per epoch: few epochs keep it quick
        assert sorted(ads(x, 6, cfg).ranking.tolist()) == out.tolist()
        assert max(widths) == block, sorted(set(widths))
    assert sorted(set(widths)) == [500, 10_000]  # one full block and the tail, every epoch


# ----------------------------------------------------------------- properties

matrices = st.tuples(st.integers(1, 40), st.integers(1, 6), st.integers(0, 2**31)).map(
    lambda a: (
        np.random.default_rng(a[2]).standard_normal((a[0], a[1])).astype(np.float32)
        * np.random.default_rng(a[2]).choice([1e-3, 1.0, 100.0])
    )
)
quick = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@quick
@given(x=matrices, k=st.integers(1, 50), seed=st.integers(0, 1000), block=st.integers(1, 64))
def test_fast_invariants_and_determinism(x, k, seed, block):
    cfg = ADSConfig(epochs=5, seed=seed, block=block)
    res = ads(x, k, cfg)
    check_result(res, x.shape[0], k)
    again = ads(x, k, cfg)
    np.testing.assert_array_equal(res.weights, again.weights)
    np.testing.assert_array_equal(res.ranking, again.ranking)


@settings(max_examples=15, deadline=None)
@given(x=matrices, k=st.integers(1, 50), seed=st.integers(0, 1000))
def test_reference_invariants_and_determinism(x, k, seed):
    cfg = ADSConfig(epochs=4, seed=seed)
    res = ads_reference(x, k, cfg)
    check_result(res, x.shape[0], k)
    np.testing.assert_array_equal(res.weights, ads_reference(x, k, cfg).weights)


@settings(max_examples=15, deadline=None)
@given(x=matrices, k=st.integers(1, 50), restarts=st.integers(2, 3))
def test_restart_invariants(x, k, restarts):
    check_result(ads(x, k, ADSConfig(epochs=3, restarts=restarts)), x.shape[0], k)


# Permutation equivariance. The random draws are made in data order (a permutation of rows and
# positions in the active set), so permuting the input changes which rows meet which partners:
# equivariance of the exact weights does not hold for a seeded SGD whose stream is not tied to row
# identity, and a test claiming it would only pass by luck. What must hold is that the answer does not
# depend on data order where it is clear: on well-separated data (tight clusters plus isolated points
# on their own axes) the selected set is the same up to the permutation, for every seed and permutation.
# (The order inside the set is SGD noise when the isolated points are about equally novel, and when they
# are not, ADS concentrates on the most extreme one and the rest become noise -- so only the set is
# asserted.)
def separated(n: int, n_out: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, 8)).astype(np.float32) * 0.05
    x[: n // 2, 7] += 1.0
    out = list(range(n - n_out, n))
    for r, i in enumerate(out):
        x[i, r] += 10.0 + r
    return x, out


@pytest.mark.parametrize("solver", SOLVERS)
@settings(max_examples=8, deadline=None)
@given(perm_seed=st.integers(0, 2**31), seed=st.integers(0, 1000))
def test_permutation_equivariant_on_separated_data(solver, perm_seed, seed):
    x, out = separated(120, 5)
    perm = np.random.default_rng(perm_seed).permutation(len(x))  # new row r = old row perm[r]
    cfg = ADSConfig(seed=seed, epochs=8)
    base = solver(x, 5, cfg).ranking
    permuted = solver(x[perm], 5, cfg).ranking
    assert sorted(base.tolist()) == out
    assert sorted(perm[permuted].tolist()) == sorted(base.tolist())
