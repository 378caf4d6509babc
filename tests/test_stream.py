"""Streaming principal-axis projection against the in-memory PCA the default ranking uses (pca.py)."""

from __future__ import annotations

import sqlite3

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


# --------------------------------------------------------------------------- ranking from chunks


def _reader(x: np.ndarray):
    """``rows`` over an in-memory matrix that counts the rows it hands out."""
    read = []

    def rows(indices: np.ndarray) -> np.ndarray:
        read.append(len(indices))
        return x[np.asarray(indices)]

    return rows, read


def _archive(n: int, m: int, latent: int, seed: int) -> np.ndarray:
    """Rows in a ``latent``-dimensional subspace (so the 64 principal axes hold them whole), a few far
    out, and near-copies of two of those (for the near-duplicate rule)."""
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(latent, m))
    z = rng.normal(size=(n, latent))
    z[rng.choice(n, 8, replace=False)] *= 5.0
    x = z @ mix + 3.0
    far = np.argsort(-np.linalg.norm(z, axis=1))[:2]
    x[-2:] = x[far] + 1e-3 * (rng.normal(size=(2, latent)) @ mix)
    return x.astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ranking_from_chunks_equals_the_in_memory_ranking(seed):
    from novelfind.ranking import rank

    x = _archive(3000, 150, 40, seed)
    want = rank(x, 10)
    rows, read = _reader(x)
    got, coords = stream.rank_streamed(stream.chunked(x, 500), rows, len(x), 10)
    assert got.indices.tolist() == want.indices.tolist()
    assert got.duplicates_dropped == want.duplicates_dropped >= 1
    assert got.neighbour.tolist() == want.neighbour.tolist()
    exact = np.linalg.norm(x[got.indices].astype(np.float64) - x[got.neighbour], axis=1)
    np.testing.assert_allclose(got.distance, exact, rtol=1e-5)  # rank's float32 Gram rounds tiny ones to 0
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-3, atol=1e-3)
    assert coords.shape == (3000, 40)  # no axes beyond the data's own
    assert sum(read) < len(x) // 4  # the raw vectors read back: a small part of them


@pytest.mark.parametrize("seed", [3, 4])
def test_neighbours_from_chunks_are_exact_in_the_raw_space(seed):
    from novelfind.ranking import nearest_neighbours

    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(4000, 300)) * np.linspace(3.0, 0.2, 300)).astype(np.float32)  # 300 axes, 64 kept
    x[17] = x[900] + 0.01  # one pick's nearest row is almost itself
    rows, read = _reader(x)
    got, coords = stream.rank_streamed(stream.chunked(x, 700), rows, len(x), 25, dedup=0)
    want_nb, _ = nearest_neighbours(x, got.indices)
    assert got.neighbour.tolist() == want_nb.tolist()
    exact = np.linalg.norm(x[got.indices].astype(np.float64)[:, None] - x[None], axis=2)  # (K, N)
    exact[np.arange(len(got.indices)), got.indices] = np.inf
    assert got.neighbour.tolist() == exact.argmin(1).tolist()
    np.testing.assert_allclose(got.distance, exact.min(1), rtol=1e-5)
    assert coords.shape == (4000, 64)


def test_ranking_from_chunks_picks_candidates_only_and_scores_all():
    from novelfind.ranking import rank

    x = _archive(2000, 120, 30, 5)
    mask = np.zeros(len(x), bool)
    mask[::3] = True
    want = rank(x, 8, candidates=mask)
    rows, _ = _reader(x)
    got, _ = stream.rank_streamed(stream.chunked(x, 333), rows, len(x), 8, candidates=np.flatnonzero(mask))
    assert got.indices.tolist() == want.indices.tolist()
    assert mask[got.indices].all() and len(got.all_scores) == len(x)


def test_ranking_from_chunks_refuses_a_source_of_another_length():
    x = _archive(500, 80, 20, 6)
    rows, _ = _reader(x)
    with pytest.raises(ValueError, match="holds 500 rows, expected 600"):
        stream.rank_streamed(stream.chunked(x, 100), rows, 600, 5)


# --------------------------------------------------------------------------- a scan ranked from the cache


def test_a_library_over_the_matrix_budget_is_ranked_from_the_cache(
    library, fake_extractor, tmp_path, monkeypatch
):
    import novelfind
    from novelfind import run

    in_memory = novelfind.scan(library["root"], 3, cache=tmp_path / "c.sqlite", report=tmp_path / "a.html")
    assert in_memory.features is not None
    monkeypatch.setattr(run, "MATRIX_BUDGET", 0)
    for cache in (tmp_path / "c.sqlite", False):  # vectors from the cache; a temporary cache without one
        streamed = novelfind.scan(library["root"], 3, cache=cache, report=tmp_path / "b.html")
        assert streamed.features is None and len(streamed.files) == 33
        assert {p.path for p in streamed.picks} == set(library["odd"])
        assert [p.neighbour for p in streamed.picks] == [p.neighbour for p in in_memory.picks]
        assert [p.distance for p in streamed.picks] == pytest.approx([p.distance for p in in_memory.picks])
        assert "3 most novel photos of 33" in (tmp_path / "b.html").read_text()
    assert not list(tmp_path.glob("novelfind-*"))


@pytest.mark.parametrize("method", ["ads-paper", "knn"])
def test_methods_that_hold_every_vector_refuse_a_library_over_the_budget(
    library, fake_extractor, monkeypatch, method
):
    from click.testing import CliRunner

    from novelfind import run
    from novelfind.cli import cli

    monkeypatch.setattr(run, "MATRIX_BUDGET", 33 * fake_extractor.dim * 4 - 1)
    result = CliRunner().invoke(cli, ["scan", str(library["root"]), "--method", method, "--no-cache"])
    assert result.exit_code == 2 and result.stdout == ""
    assert f"method {method} ranks all 33 feature vectors in memory" in result.stderr
    assert "GiB of float32" in result.stderr and "the default method (ads) ranks" in result.stderr
    monkeypatch.setattr(run, "MATRIX_BUDGET", 33 * fake_extractor.dim * 4)  # exactly fits: ranked as before
    assert (
        CliRunner().invoke(cli, ["scan", str(library["root"]), "--method", method, "--no-cache"]).exit_code
        == 0
    )


def test_cache_dtype_float16_stores_half_and_ranks_the_same_photos(library, fake_extractor, tmp_path):
    from click.testing import CliRunner

    from novelfind.cli import cli

    picks = {}
    for dtype in ("float32", "float16"):
        cache = tmp_path / f"{dtype}.sqlite"
        args = ["scan", str(library["root"]), "--k", "3", "--cache", str(cache), "--format", "paths"]
        result = CliRunner().invoke(cli, [*args, "--cache-dtype", dtype])
        assert result.exit_code == 0, result.stderr
        picks[dtype] = set(result.stdout.split())
        with sqlite3.connect(cache) as db:
            blobs = db.execute("SELECT DISTINCT length(data) FROM vectors").fetchall()
        assert blobs == [(fake_extractor.dim * (2 if dtype == "float16" else 4),)]
    assert picks["float16"] == picks["float32"] == {str(p) for p in library["odd"]}
    bad = CliRunner().invoke(cli, ["scan", str(library["root"]), "--cache-dtype", "int8"])
    assert bad.exit_code == 2 and "int8" in bad.stderr


@pytest.mark.parametrize("physical_gib, budget_gib", [(4, 2), (6, 2), (24, 8), (96, 32)])
def test_the_matrix_budget_is_a_third_of_memory_and_never_below_2_gib(monkeypatch, physical_gib, budget_gib):
    from novelfind import run

    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": physical_gib * 2**30 // 4096}
    monkeypatch.setattr(run, "MATRIX_BUDGET", None)
    monkeypatch.setattr(run.os, "sysconf", lambda name: pages[name])
    assert run.matrix_budget() == budget_gib * 2**30
    monkeypatch.setattr(run, "MATRIX_BUDGET", 12345)  # set explicitly: used as it is
    assert run.matrix_budget() == 12345
