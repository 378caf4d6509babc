"""Streaming principal-axis projection against the in-memory PCA the default ranking uses (pca.py)."""

from __future__ import annotations

import numpy as np
import pytest

from novelfind import stream
from novelfind.pca import pca


def _features(n: int, m: int, seed: int, offset: float = 0.0) -> np.ndarray:
    """Rows with a decaying spectrum (distinct eigenvalues) around a mean far from zero, like logits."""
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.normal(size=(m, m)))  # (M, M) orthonormal
    scales = 10.0 * 0.93 ** np.arange(m)  # (M,)
    z = rng.normal(size=(n, m)) * scales  # (N, M)
    return (z @ basis.T + offset + rng.normal(size=m)).astype(np.float32)


def _aligned(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` with each column's sign flipped to agree with ``b`` (PCA axes have no intrinsic sign)."""
    signs = np.sign((a * b).sum(axis=0))
    return a * np.where(signs == 0, 1, signs)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("offset", [0.0, 40.0])
def test_streamed_projection_equals_the_in_memory_one(seed, offset):
    x = _features(3000, 120, seed, offset)
    want, want_var, want_mean = pca(x, 64)  # (N, 64)
    got, projection = stream.stream_pca(stream.chunked(x, 257), 64)
    assert got.shape == want.shape == (3000, 64)
    np.testing.assert_allclose(projection.mean, want_mean, atol=1e-4)
    np.testing.assert_allclose(projection.variances, want_var, rtol=1e-4)
    spread = float(np.abs(want).max())
    np.testing.assert_allclose(_aligned(got, want), want, atol=1e-3 * spread)


def test_chunk_size_does_not_change_the_result():
    x = _features(2000, 80, 3, 25.0)
    one, p1 = stream.stream_pca(stream.chunked(x, 2000), 16)
    many, p2 = stream.stream_pca(stream.chunked(x, 7), 16)
    np.testing.assert_allclose(p1.variances, p2.variances, rtol=1e-5)
    np.testing.assert_allclose(many, one, atol=1e-4 * float(np.abs(one).max()))  # same signs, too


def test_axis_signs_are_fixed():
    x = _features(500, 30, 4)
    _, p = stream.stream_pca(stream.chunked(x, 100), 10)
    strongest = p.axes[np.abs(p.axes).argmax(axis=0), np.arange(p.dims)]
    assert (strongest > 0).all()
    np.testing.assert_allclose(p.axes.T @ p.axes, np.eye(p.dims), atol=1e-5)


def test_projection_fills_a_memmap(tmp_path):
    x = _features(1000, 40, 5)
    p = stream.fit_pca(stream.chunked(x, 128)(), 8)
    out = np.lib.format.open_memmap(tmp_path / "proj.npy", mode="w+", dtype=np.float32, shape=(1000, 8))
    stream.project(stream.chunked(x, 128)(), p, out)
    out.flush()
    np.testing.assert_allclose(np.load(tmp_path / "proj.npy"), p.apply(x), atol=1e-5)


def test_identical_vectors_give_one_zero_axis():
    x = np.tile(np.arange(6, dtype=np.float32), (50, 1))
    got, p = stream.stream_pca(stream.chunked(x, 16), 4)
    assert got.shape == (50, 1) and not got.any()
    want, _, _ = pca(x, 4)
    assert want.shape == (50, 1)


def test_fewer_rows_than_dims_keeps_n_minus_one_axes():
    x = _features(5, 20, 6)
    got, p = stream.stream_pca(stream.chunked(x, 2), 64)
    want, _, _ = pca(x, 64)
    assert got.shape == want.shape == (5, 4)


def test_bad_input_is_refused():
    x = _features(100, 10, 7)
    p = stream.fit_pca([x], 4)
    with pytest.raises(ValueError, match="held 50 rows, expected 100"):
        stream.project([x[:50]], p)
    with pytest.raises(ValueError, match="more than the 100 rows"):
        stream.project([x, x[:1]], p)
    with pytest.raises(ValueError, match="chunks differ in width: 10 and 9"):
        stream.fit_pca([x, x[:, :9]], 4)
    bad = x.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="1 NaN or infinite"):
        stream.fit_pca([x, bad], 4)
    with pytest.raises(ValueError, match="no vectors"):
        stream.fit_pca([], 4)
    with pytest.raises(ValueError, match="dims must be >= 1"):
        stream.fit_pca([x], 0)
    with pytest.raises(ValueError, match=r"out must have shape \(100, 4\)"):
        stream.project([x], p, np.empty((100, 3), np.float32))


@pytest.mark.parametrize("seed", [0, 1])
def test_residuals_bound_every_distance_from_below_and_are_exact_for_the_part_left_out(seed):
    x = _features(800, 60, seed, 30.0)
    p = stream.fit_pca(stream.chunked(x, 100)(), 8)
    residual = np.empty(800, np.float32)
    coords = stream.project(stream.chunked(x, 100)(), p, residual=residual)
    centred = x.astype(np.float64) - p.mean
    off = centred - centred @ p.axes.astype(np.float64) @ p.axes.T.astype(np.float64)  # (N, M)
    np.testing.assert_allclose(residual, np.linalg.norm(off, axis=1), rtol=1e-3)
    for q in (0, 17, 799):
        bound = stream.distance_bound(coords, residual, coords[q], float(residual[q]))
        true = np.linalg.norm(x.astype(np.float64) - x[q], axis=1)
        assert (bound <= true * (1 + 1e-5) + 1e-4).all()
        assert np.median(bound / np.maximum(true, 1e-9)) > 0.5  # and not a trivial bound
