"""One ranking path over two sources of features: a matrix in memory, or the cache read in chunks."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from novelfind.ranking import budget, knn, methods, pca, scoring
from novelfind.ranking import driver as ranking
from novelfind.ranking.driver import rank
from novelfind.ranking.sources import ChunkedSource, MatrixSource, blocks


def _features(n: int, m: int, seed: int, offset: float = 0.0) -> np.ndarray:
    """Rows with a decaying spectrum (distinct eigenvalues) around a mean far from zero, like logits."""
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.normal(size=(m, m)))  # (M, M) orthonormal
    scales = 10.0 * 0.93 ** np.arange(m)  # (M,)
    z = rng.normal(size=(n, m)) * scales  # (N, M)
    return (z @ basis.T + offset + rng.normal(size=m)).astype(np.float32)


def _chunked(x: np.ndarray, rows: int, read: list | None = None) -> ChunkedSource:
    """A ChunkedSource over an in-memory matrix, ``rows`` at a time; ``read`` collects the rows taken."""

    def take(indices: np.ndarray) -> np.ndarray:
        if read is not None:
            read.append(len(indices))
        return x[np.asarray(indices)]

    return ChunkedSource(lambda: (x[i : i + rows] for i in range(0, len(x), rows)), take, len(x), x.shape[1])


def clusters_with_outliers(n: int, m: int, seed: int, planted: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Clusters of very different sizes, each in its own 8-d subspace plus isotropic noise, and
    ``planted`` cluster members with 5x the noise -> (features float32 (N, M), planted rows)."""
    rng = np.random.default_rng(seed)
    k = 30
    centres = rng.normal(size=(k, m)).astype(np.float32) * 3
    bases = rng.normal(size=(k, 8, m)).astype(np.float32) / np.sqrt(m)
    weights = 1 / np.sqrt(1 + np.arange(k))
    labels = rng.choice(k, n, p=weights / weights.sum())
    z = rng.normal(size=(n, 8)).astype(np.float32) * 3
    x = centres[labels] + np.einsum("nr,nrm->nm", z, bases[labels]) + rng.normal(size=(n, m)) * 0.15
    out = rng.choice(n, planted, replace=False)
    x[out] += rng.normal(size=(planted, m)) * 1.5
    return x.astype(np.float32), out


# --------------------------------------------------------------------------- one PCA for both sources


@pytest.mark.parametrize("max_rows", [None, 700])
@pytest.mark.parametrize("chunk", [1, 257, 5000])
def test_principal_space_from_chunks_is_the_in_memory_one_bit_for_bit(max_rows, chunk):
    x = _features(3000, 120, 0, 40.0)
    want = pca.fit_space(x, 64, chunk=1024, max_rows=max_rows)
    got = pca.fit_space(_chunked(x, chunk), 64, chunk=1024, max_rows=max_rows)
    for name in ("proj", "var", "resid", "mean"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    # and the same principal axes as numpy's, up to sign
    if max_rows is None:
        ref, var, _ = pca.pca(x.astype(np.float64), 64)
        np.testing.assert_allclose(want.var, var, rtol=1e-4)
        signs = np.sign((want.proj * ref).sum(0))
        np.testing.assert_allclose(want.proj * signs, ref, atol=1e-3 * float(np.abs(ref).max()))


@pytest.mark.parametrize("chunk", [1, 257, 5000])
def test_the_reports_map_from_chunks_is_the_in_memory_one_bit_for_bit(chunk):
    """One map for both paths of a scan: the top two principal axes of the raw rows."""
    x = _features(3000, 120, 0, 40.0)
    want = pca.map_2d(x)
    np.testing.assert_array_equal(pca.map_2d(_chunked(x, chunk)), want)
    ref, _, _ = pca.pca(x.astype(np.float64), 2)
    np.testing.assert_allclose(np.abs(want), np.abs(ref), atol=1e-3 * float(np.abs(ref).max()))


@pytest.mark.parametrize("n", [5, 60, 119, 120, 400])  # fewer rows than the 120 dimensions: the Gram path
def test_principal_axes_from_few_rows_are_those_of_the_covariance(n):
    x = _features(n, 120, n, 40.0)
    axes, var, mean = pca.principal_axes(x, 64)
    c = x.astype(np.float64) - x.mean(axis=0)
    evals, evecs = np.linalg.eigh(c.T @ c / (n - 1))  # the reference: the full (M, M) covariance
    d = min(64, n - 1)
    assert axes.shape == (120, d) and var.shape == (d,)
    np.testing.assert_allclose(var, evals[::-1][:d], rtol=1e-5, atol=1e-5 * evals.max())
    want = evecs[:, ::-1][:, :d]
    want = want * np.sign(want[np.abs(want).argmax(axis=0), np.arange(d)])  # the same sign rule
    top = min(d, 16)  # the well separated axes (float32 products blur the smallest ones)
    np.testing.assert_allclose(axes[:, :top], want[:, :top], atol=1e-3)
    np.testing.assert_allclose(np.linalg.norm(axes, axis=0), 1.0, rtol=1e-6)


def test_blocks_cut_any_chunking_into_the_same_blocks():
    x = np.arange(50 * 3, dtype=np.float32).reshape(50, 3)
    for rows in (1, 7, 16, 50, 64):
        got = [(i, b.copy()) for i, b in blocks(_chunked(x, rows), 16)]
        want = [(i, b) for i, b in blocks(MatrixSource(x), 16)]
        assert [i for i, _ in got] == [i for i, _ in want] == [0, 16, 32, 48]
        for (_, a), (_, b) in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_axis_signs_are_fixed_and_identical_rows_give_one_zero_axis():
    axes, _, _ = pca.principal_axes(_chunked(_features(500, 30, 4), 100), 10)
    assert (axes[np.abs(axes).argmax(axis=0), np.arange(axes.shape[1])] > 0).all()
    np.testing.assert_allclose(axes.T @ axes, np.eye(axes.shape[1]), atol=1e-5)
    same = np.tile(np.arange(6, dtype=np.float32), (50, 1))
    space = pca.fit_space(_chunked(same, 16), 4)
    assert space.proj.shape == (50, 1) and not space.proj.any() and not space.resid.any()
    assert pca.fit_space(_features(5, 20, 6), 64).proj.shape == (5, 4)  # n - 1 axes


@pytest.mark.parametrize("seed", [0, 1])
def test_principal_coordinates_and_residuals_bound_every_distance_from_both_sides(seed):
    x = _features(800, 60, seed, 30.0)
    s = pca.fit_space(_chunked(x, 100), 8)
    for q in (0, 17, 799):
        on = np.linalg.norm(s.proj.astype(np.float64) - s.proj[q], axis=1)
        low = np.sqrt(on**2 + (s.resid.astype(np.float64) - s.resid[q]) ** 2)
        high = np.sqrt(on**2 + (s.resid.astype(np.float64) + s.resid[q]) ** 2)
        true = np.linalg.norm(x.astype(np.float64) - x[q], axis=1)
        assert (low <= true * (1 + 1e-5) + 1e-4).all() and (true <= high * (1 + 1e-5) + 1e-4).all()
        assert np.median(low / np.maximum(true, 1e-9)) > 0.5  # and not trivial bounds


def test_a_source_of_the_wrong_length_or_with_nan_is_refused():
    x = _features(500, 20, 6)
    short = ChunkedSource(lambda: iter([x]), lambda r: x[r], 600, 20)
    with pytest.raises(ValueError, match="holds 500 rows, expected 600"):
        rank(short, 5)
    bad = x.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="1 NaN or infinite"):
        rank(_chunked(bad, 64), 5)
    with pytest.raises(ValueError, match="method ads-paper needs the feature matrix in memory"):
        rank(_chunked(x, 64), 5, method="ads-paper")
    assert ChunkedSource(lambda: iter([x]), lambda r: x[r], 500).dim == 20  # read from one row


# --------------------------------------------------------------------------- the same ranking either way


def _same(a: ranking.Ranking, b: ranking.Ranking) -> None:
    assert a.indices.tolist() == b.indices.tolist()
    assert a.neighbour.tolist() == b.neighbour.tolist()
    assert a.duplicates_dropped == b.duplicates_dropped
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(a.distance, b.distance, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("method", ["cosine-knn", "multiscale-knn", "ads", "knn"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matrix_and_chunks_give_the_same_ranking_past_the_exact_size(method, seed):
    """6,000 x 256 (past ``knn.EXACT_MAX_N``, so the density is certified, not computed for every row):
    in memory the bounds are measured on the raw rows, from chunks on the principal coordinates; the
    picks, scores, neighbours and distances are the same."""
    x, planted = clusters_with_outliers(6000, 256, seed)
    assert len(x) > knn.EXACT_MAX_N
    want = rank(x, 40, method=method)
    got = rank(_chunked(x, 500), 40, method=method)
    _same(got, want)
    _same(rank(MatrixSource(x), 40, method=method), want)  # the array's own source
    assert len(set(got.indices.tolist()) & set(planted.tolist())) >= 35
    if method in methods.COSINE_METHODS:  # they measure between rows scaled to unit length
        x = scoring.l2_normalise(x)
    nb, dist = ranking.nearest_neighbours(x, got.indices)  # exact, in the space the method measures in
    assert got.neighbour.tolist() == nb.tolist()
    np.testing.assert_allclose(got.distance, dist, rtol=1e-5)


def test_matrix_and_chunks_agree_with_candidates_and_near_duplicates():
    x, planted = clusters_with_outliers(5000, 128, 3)
    rng = np.random.default_rng(4)
    heads = planted[:8]
    copies = np.repeat(x[heads], 2, axis=0) + rng.normal(size=(16, 128)).astype(np.float32) * 1e-3
    x = np.vstack([x, copies])  # 8 bursts of 3 near-identical novel rows
    mask = rng.random(len(x)) < 0.7
    mask[-16:] = True
    for method in ("cosine-knn", "multiscale-knn", "ads", "knn"):
        want = rank(x, 70, method=method, candidates=mask)
        got = rank(_chunked(x, 333), 70, method=method, candidates=np.flatnonzero(mask))
        _same(got, want)
        assert mask[got.indices].all() and len(got.all_scores) == len(x)
        if method != "multiscale-knn":  # a burst of near-copies is its own small-k neighbourhood there
            assert got.duplicates_dropped >= 1


def test_small_sources_are_exact_for_every_row():
    x, _ = clusters_with_outliers(900, 64, 5, planted=10)
    for method in ("cosine-knn", "multiscale-knn", "ads", "knn"):
        want = rank(x, 10, method=method, dedup=0)
        got = rank(_chunked(x, 128), 10, method=method, dedup=0)
        _same(got, want)
        np.testing.assert_allclose(got.all_scores, want.all_scores, rtol=1e-6, atol=1e-7)


def off_axis_outliers(n: int, seed: int, m: int = 1000, planted: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Clusters in 1000-d, and ``planted`` cluster members moved only off the top 64 principal axes of the
    ordinary rows: in those axes they sit on their cluster, in the raw space they are far from it."""
    rng = np.random.default_rng(seed)
    k = 40
    centres = rng.standard_normal((k, m), dtype=np.float32)
    bases = rng.standard_normal((k, 6, m), dtype=np.float32) / np.float32(np.sqrt(m))
    labels = rng.integers(0, k, n)
    z = rng.standard_normal((n, 6), dtype=np.float32) * 2
    x = centres[labels] + np.einsum("nr,nrm->nm", z, bases[labels])
    x += rng.standard_normal((n, m), dtype=np.float32) * np.float32(0.1)
    out = rng.choice(n, planted, replace=False)
    axes, _, _ = pca.principal_axes(x, 64)  # (M, 64)
    push = rng.standard_normal((planted, m), dtype=np.float32)
    push -= (push @ axes) @ axes.T  # nothing along the 64 axes
    x[out] += push * np.float32(0.25)
    return x.astype(np.float32), out


@pytest.mark.parametrize(
    ("seed", "method"), [(0, "cosine-knn"), (1, "cosine-knn"), (2, "cosine-knn"), (0, "ads")]
)
def test_chunked_ranking_finds_outliers_that_differ_off_the_principal_axes(seed, method):
    """The former from-cache scorer measured density in the 64 axes and found 0 of 100 such outliers;
    the one scorer measures it on the raw vectors, from chunks as well (the default, three draws, and
    the earlier default)."""
    x, out = off_axis_outliers(20_000, seed)
    space = pca.fit_space(x, scoring.WHITEN_DIMS)
    in_axes = knn.KnnScores.build(space.proj, scoring.KNN_K, exact_max_n=len(x)).values  # exact, 64 axes
    assert len(set(np.argsort(-in_axes)[:100].tolist()) & set(out.tolist())) < 20
    read: list = []
    r = rank(_chunked(x, 4096, read), 100, method=method, config=ranking_config(seed))
    assert len(set(r.indices.tolist()) & set(out.tolist())) >= 95
    assert sum(read) < 8 * len(x)  # rows read by take: the 4 cells' rows per cell, the top's blocks


def ranking_config(seed: int):
    from novelfind.ranking.solver import ADSConfig

    return ADSConfig(seed=seed)


# --------------------------------------------------------------------------- a scan ranked from the cache


@pytest.fixture
def big_library(tmp_path) -> dict:
    """4,400 small photos of a few colours with noise, and 6 odd ones: past ``knn.EXACT_MAX_N``."""
    from PIL import Image

    root = tmp_path / "big"
    rng = np.random.default_rng(0)
    odd = []
    for i in range(4406):
        folder = root / f"f{i // 500}"
        folder.mkdir(parents=True, exist_ok=True)
        if i % 733 == 5:  # an odd photo: stripes of two colours
            img = np.zeros((24, 32, 3), np.uint8)
            img[:, ::4] = rng.integers(0, 255, 3)
            img[:, 1::4] = rng.integers(0, 255, 3)
            path = folder / f"odd_{i}.png"
            odd.append(path)
        else:
            base = np.array([(40, 60, 200), (200, 180, 40), (30, 160, 60)][i % 3], np.float32)
            img = np.clip(base + rng.normal(0, 10, (24, 32, 3)), 0, 255).astype(np.uint8)
            path = folder / f"IMG_{i:05d}.png"
        Image.fromarray(img).save(path)
    return {"root": root, "odd": odd}


def test_a_library_over_the_budget_is_ranked_from_the_cache_with_the_same_picks(
    big_library, fake_extractor, tmp_path, monkeypatch
):
    import novelfind

    cache = tmp_path / "c.sqlite"
    in_memory = novelfind.scan(big_library["root"], 10, cache=cache)
    assert in_memory.features is not None and len(in_memory.files) > knn.EXACT_MAX_N
    monkeypatch.setattr(budget, "MATRIX_BUDGET", 0)
    streamed = novelfind.scan(big_library["root"], 10, cache=cache, report=tmp_path / "b.html")
    assert streamed.features is None and len(streamed.files) == len(in_memory.files)
    assert [p.path for p in streamed.picks] == [p.path for p in in_memory.picks]
    assert set(big_library["odd"]) <= {p.path for p in streamed.picks}
    assert [p.score for p in streamed.picks] == pytest.approx([p.score for p in in_memory.picks], rel=1e-6)
    assert [p.neighbour for p in streamed.picks] == [p.neighbour for p in in_memory.picks]
    assert [p.distance for p in streamed.picks] == pytest.approx([p.distance for p in in_memory.picks])
    assert "10 most novel photos of" in (tmp_path / "b.html").read_text()


def test_a_small_library_over_the_budget_with_and_without_a_cache(
    library, fake_extractor, tmp_path, monkeypatch
):
    import novelfind

    methods = ("cosine-knn", "multiscale-knn", "ads", "knn")
    in_memory = {
        m: novelfind.scan(
            library["root"], 3, cache=tmp_path / "c.sqlite", report=tmp_path / "a.html", method=m
        )
        for m in methods
    }
    assert all(r.features is not None for r in in_memory.values())
    monkeypatch.setattr(budget, "MATRIX_BUDGET", 0)
    for cache in (tmp_path / "c.sqlite", False):  # vectors from the cache; a temporary cache without one
        for method in methods:
            streamed = novelfind.scan(
                library["root"], 3, cache=cache, report=tmp_path / "b.html", method=method
            )
            assert streamed.features is None and len(streamed.files) == 33
            assert {p.path for p in streamed.picks} == set(library["odd"])
            same = in_memory[method].picks
            assert [p.path for p in streamed.picks] == [p.path for p in same]
            assert [p.neighbour for p in streamed.picks] == [p.neighbour for p in same]
            assert [p.distance for p in streamed.picks] == pytest.approx([p.distance for p in same])
        assert "3 most novel photos of 33" in (tmp_path / "b.html").read_text()
    assert not list(tmp_path.glob("novelfind-*"))


def test_ads_paper_refuses_a_library_over_the_budget_and_knn_reads_it_in_chunks(
    library, fake_extractor, monkeypatch
):
    from click.testing import CliRunner

    from novelfind.cli.group import cli

    monkeypatch.setattr(budget, "MATRIX_BUDGET", 33 * fake_extractor.dim * 4 - 1)
    result = CliRunner().invoke(cli, ["scan", str(library["root"]), "--method", "ads-paper", "--no-cache"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "method ads-paper ranks all 33 feature vectors in memory" in result.stderr
    assert "GiB of float32" in result.stderr and "the default method (cosine-knn) ranks" in result.stderr
    args = ["scan", str(library["root"]), "--method", "knn", "--no-cache", "--k", "3", "--format", "paths"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.stderr
    assert set(result.stdout.split()) == {str(p) for p in library["odd"]}
    monkeypatch.setattr(budget, "MATRIX_BUDGET", 33 * fake_extractor.dim * 4)  # exactly fits: in memory
    args = ["scan", str(library["root"]), "--method", "ads-paper", "--no-cache"]
    assert CliRunner().invoke(cli, args).exit_code == 0


def test_cache_dtype_float16_stores_half_and_ranks_the_same_photos(library, fake_extractor, tmp_path):
    from click.testing import CliRunner

    from novelfind.cli.group import cli

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
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": physical_gib * 2**30 // 4096}
    monkeypatch.setattr(budget, "MATRIX_BUDGET", None)
    monkeypatch.setattr(budget.os, "sysconf", lambda name: pages[name])
    assert budget.matrix_budget() == budget_gib * 2**30
    assert budget.fits_in_memory(budget_gib * 2**30 // 4000, 1000)
    assert not budget.fits_in_memory(budget_gib * 2**30 // 4000 + 1, 1000)
    monkeypatch.setattr(budget, "MATRIX_BUDGET", 12345)  # set explicitly: used as it is
    assert budget.matrix_budget() == 12345
