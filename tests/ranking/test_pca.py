"""Principal axes against numpy's SVD on small matrices, and the same numbers bit for bit whether the
rows are a matrix in memory or read in chunks."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from novelfind.ranking import pca
from novelfind.ranking.sources import ChunkedSource


@pytest.fixture(autouse=True)
def one_blas_thread():
    """The eigendecompositions here are small: a second BLAS thread waiting for a core on a busy machine
    only stalls them (a 300 x 300 eigh took 6 s with two at load 11)."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def spread_out(n: int, m: int, seed: int = 0) -> np.ndarray:
    """n rows of m columns with well separated variances, so each axis is unique up to its sign."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, m)) * np.geomspace(10, 0.5, m)).astype(np.float32)


def chunked(x: np.ndarray, rows: int) -> ChunkedSource:
    return ChunkedSource(
        lambda: (x[i : i + rows] for i in range(0, len(x), rows)), lambda r: x[r], len(x), x.shape[1]
    )


def svd_reference(x: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Axes (M, d) and variances (d,) from numpy's SVD of the centred rows, in float64."""
    c = x.astype(np.float64) - x.astype(np.float64).mean(0)
    _, s, vt = np.linalg.svd(c, full_matrices=False)
    return vt[:d].T, (s[:d] ** 2) / (len(x) - 1)


@pytest.mark.parametrize(("n", "m"), [(200, 6), (7, 30)])  # the covariance, and the Gram matrix (n < M)
def test_axes_and_variances_match_the_svd(n, m):
    x = spread_out(n, m)
    d = 4
    axes, var, mean = pca.principal_axes(x, d)
    ref_axes, ref_var = svd_reference(x, d)
    assert axes.shape == (m, d) and axes.dtype == np.float32
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(var, ref_var, rtol=1e-4)
    np.testing.assert_allclose(
        np.abs((axes.T @ ref_axes).diagonal()), 1.0, atol=1e-4
    )  # same axes, up to sign
    np.testing.assert_allclose(axes.T @ axes, np.eye(d), atol=1e-5)


def test_each_axis_points_where_its_largest_loading_is_positive():
    x = spread_out(100, 5)
    for sign in (1, -1):
        axes, _, _ = pca.principal_axes(sign * x, 5)
        top = axes[np.abs(axes).argmax(axis=0), np.arange(axes.shape[1])]
        assert (top > 0).all()


def test_projections_are_the_centred_rows_on_the_axes():
    x = spread_out(50, 8)
    proj, var, mean = pca.pca(x, 3)
    axes, var_axes, _ = pca.principal_axes(x, 3)
    np.testing.assert_allclose(proj, (x - mean) @ axes, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(var, var_axes)
    np.testing.assert_allclose(proj.var(axis=0, ddof=1), var, rtol=1e-3)


def test_the_number_of_axes_is_bounded_by_rows_columns_and_spread():
    assert pca.principal_axes(spread_out(4, 10), 8)[0].shape == (10, 3)  # n - 1
    assert pca.principal_axes(spread_out(100, 3), 8)[0].shape == (3, 3)  # M
    rank_two = spread_out(60, 2) @ np.ones((2, 5), np.float32) * np.array([1, 2, 3, 4, 5], np.float32)
    assert pca.principal_axes(rank_two, 5)[0].shape[1] == 1  # one direction: the others carry rounding
    same = np.ones((10, 4), np.float32)
    axes, var, _ = pca.principal_axes(same, 3)
    assert axes.shape == (4, 0) and var.shape == (0,)
    proj, var, _ = pca.pca(same, 3)  # all rows identical: one zero column
    assert proj.shape == (10, 1) and not proj.any() and var.tolist() == [1.0]


@pytest.mark.parametrize(("n", "m"), [(300, 12), (9, 40)])
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_chunked_rows_give_the_same_numbers_bit_for_bit(n, m, rows):
    x = spread_out(n, m, seed=rows)
    for a, b in zip(pca.pca(x, 5, chunk=rows), pca.pca(chunked(x, 64), 5, chunk=rows), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(pca.map_2d(x, chunk=rows), pca.map_2d(chunked(x, 64), chunk=rows))
    in_memory, from_chunks = pca.fit_space(x, 4, chunk=rows), pca.fit_space(chunked(x, 64), 4, chunk=rows)
    np.testing.assert_array_equal(in_memory.proj, from_chunks.proj)
    np.testing.assert_array_equal(in_memory.resid, from_chunks.resid)


def test_fit_space_splits_each_row_into_projection_and_residual():
    x = spread_out(80, 10)
    space = pca.fit_space(x, 3)
    c = x.astype(np.float64) - x.mean(0)
    np.testing.assert_allclose((space.proj**2).sum(1) + space.resid**2, (c**2).sum(1), rtol=1e-4)
    full = pca.fit_space(x, 10)
    # every axis kept: nothing left out but float32 rounding of |c|^2 - |p|^2
    assert (full.resid <= 1e-2 * np.sqrt((c**2).sum(1))).all()
    assert (full.resid < 0.1 * space.resid).mean() > 0.9
    same = pca.fit_space(np.full((5, 3), 2.0, np.float32), 2)
    assert same.proj.shape == (5, 1) and not same.proj.any() and not same.resid.any()


def test_map_2d_edges_and_refusals():
    assert pca.map_2d(np.zeros((1, 4), np.float32)).shape == (1, 2)
    assert pca.map_2d(np.zeros((0, 4), np.float32)).shape == (0, 2)
    assert pca.map_2d(np.zeros((3, 0), np.float32)).tolist() == [[0, 0]] * 3
    line = np.array([[0, 0], [1, 1], [2, 2]], np.float32)  # one direction: the second column is zeros
    out = pca.map_2d(line)
    assert out.shape == (3, 2) and not out[:, 1].any()
    np.testing.assert_allclose(out[:, 0], [-np.sqrt(2), 0, np.sqrt(2)], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"^features must be 2-D \(N, M\), got shape \(3,\)$"):
        pca.map_2d(np.zeros(3, np.float32))
    bad = np.ones((3, 2), np.float32)
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="^features contain NaN or inf$"):
        pca.map_2d(bad)


def planted(n: int, m: int, seed: int) -> np.ndarray:
    """n rows of m columns: six random directions of decreasing spread under isotropic noise, as image
    features have a few strong directions over many weak ones."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(rng.normal(size=(m, 6)))[0].T  # (6, m) orthonormal rows
    strong = (rng.normal(size=(n, 6)) * [9.0, 6.0, 4.0, 3.0, 2.0, 1.5]) @ basis
    return (strong + rng.normal(size=(n, m)) * 0.5).astype(np.float32)


def full_eigh_map(x: np.ndarray, monkeypatch) -> np.ndarray:
    """The map as it was computed before the truncated solve: from every eigenpair of the covariance."""
    with monkeypatch.context() as m:
        m.setattr(pca, "TRUNCATED_MAX_AXES", 0)
        return pca.map_2d(x)


def counting_subspace(monkeypatch) -> dict[str, int]:
    """Count the subspace iterations that converged and those that gave up."""
    counts = {"converged": 0, "gave_up": 0}
    inner = pca._subspace_iteration

    def wrapped(cov, d):
        found = inner(cov, d)
        counts["converged" if found is not None else "gave_up"] += 1
        return found

    monkeypatch.setattr(pca, "_subspace_iteration", wrapped)
    return counts


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("make", [planted, spread_out])
def test_map_2d_matches_the_full_eigendecomposition_up_to_sign(make, seed, monkeypatch):
    x = make(700, 300, seed)  # wide enough (M >= TRUNCATED_MIN_WIDTH) for the truncated solve
    before = full_eigh_map(x, monkeypatch)
    counts = counting_subspace(monkeypatch)
    now = pca.map_2d(x)
    assert counts == {"converged": 1, "gave_up": 0}
    signs = np.sign((now * before).sum(0))  # each column may flip as a whole, nothing more
    np.testing.assert_allclose(now * signs, before, rtol=1e-5, atol=1e-4 * np.abs(before).max())
    assert pca.map_2d(chunked(x, 97)).tobytes() == now.tobytes()  # read in chunks: the same bits


@pytest.mark.parametrize("d", [1, 2, 5, 8])
def test_top_eigenpairs_are_the_full_decompositions_largest(d):
    x = planted(500, 260, seed=d).astype(np.float64)
    c = x - x.mean(0)
    cov = c.T @ c
    evals, evecs = pca._top_eigh(cov, d)
    ref_vals, ref_vecs = np.linalg.eigh(cov)
    np.testing.assert_allclose(evals, ref_vals[::-1][:d], rtol=1e-9)
    cosines = np.abs((evecs * ref_vecs[:, ::-1][:, :d]).sum(0))
    np.testing.assert_allclose(cosines, 1.0, atol=1e-8)
    np.testing.assert_allclose(np.linalg.norm(evecs, axis=0), 1.0, atol=1e-12)


def test_a_spectrum_with_no_gap_falls_back_to_the_full_decomposition(monkeypatch):
    """Noise alone: the iteration gives up, and the full eigendecomposition answers (its axes, exactly)."""
    x = np.random.default_rng(5).normal(size=(700, 300)).astype(np.float32)
    before = full_eigh_map(x, monkeypatch)
    counts = counting_subspace(monkeypatch)
    assert pca.map_2d(x).tobytes() == before.tobytes()
    assert counts == {"converged": 0, "gave_up": 1}


def test_narrow_or_many_axes_use_the_full_decomposition(monkeypatch):
    counts = counting_subspace(monkeypatch)
    pca.map_2d(planted(300, 40, seed=0))  # narrower than TRUNCATED_MIN_WIDTH
    pca.principal_axes(planted(700, 300, seed=0), pca.TRUNCATED_MAX_AXES + 1)
    assert counts == {"converged": 0, "gave_up": 0}
