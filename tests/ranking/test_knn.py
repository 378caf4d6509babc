"""Nearest-neighbour building blocks: exact search, the approximate cells, bounds and the certified order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from novelfind.ranking import knn
from novelfind.ranking.cells import CELL_BRANCH, kmeans_cells


def clustered(n, d, seed, clusters=12, spread=0.3):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, d)) * 3
    return (centres[rng.integers(0, clusters, n)] + rng.normal(size=(n, d)) * spread).astype(np.float32)


def brute(x, rows, k):
    """Exact k smallest distances to other rows (float64, torch.cdist)."""
    out = []
    for c0 in range(0, len(rows), 1000):
        r = rows[c0 : c0 + 1000]
        d = torch.cdist(torch.from_numpy(x[r]).double(), torch.from_numpy(x).double()).numpy()
        d[np.arange(len(r)), r] = np.inf
        out.append(np.sort(d, axis=1)[:, :k])
    return np.concatenate(out)


@pytest.mark.parametrize("chunk", [None, 64, 1000])
def test_knn_exact_matches_brute_force(chunk):
    x = clustered(700, 9, seed=1)
    x[10] = x[11]  # identical rows are each other's neighbours
    rows = np.array([0, 10, 11, 699, 350, 64, 65])
    dist, idx = knn.knn_exact(x, rows, 5, chunk=chunk)
    np.testing.assert_allclose(dist, brute(x, rows, 5), rtol=1e-4, atol=1e-4)
    assert not (idx == rows[:, None]).any()  # never its own neighbour
    again = np.linalg.norm(x[idx] - x[rows][:, None], axis=2)  # the indices are the rows at those distances
    np.testing.assert_allclose(again, dist, rtol=1e-4, atol=1e-4)
    assert idx[1, 0] == 11 and idx[2, 0] == 10 and dist[1, 0] == pytest.approx(0, abs=1e-3)


def test_knn_exact_small_and_degenerate():
    x = np.ones((4, 3), dtype=np.float32)  # all identical
    dist, idx = knn.knn_exact(x, np.arange(4), 10)  # k capped at N - 1
    assert dist.shape == (4, 3) and np.allclose(dist, 0, atol=1e-3)
    assert all(sorted(idx[i].tolist()) == [j for j in range(4) if j != i] for i in range(4))
    dist, idx = knn.knn_exact(x[:1], np.arange(1), 3)
    assert dist.shape == (1, 0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_knn_cells_are_upper_bounds_to_real_rows(seed):
    """Cells of 48 rows on 5,000 rows: two levels of k-means (more cells than CELL_BRANCH)."""
    x = clustered(5000, 8, seed)
    dist, idx = knn.knn_cells(x, 10, rows=48, probe=4)
    exact = brute(x, np.arange(len(x)), 10)
    assert np.all(dist >= exact * (1 - 1e-5) - 1e-5)  # each rank at least the exact one: an upper bound
    assert not (idx == np.arange(len(x))[:, None]).any()
    assert all(len(set(r)) == 10 for r in idx.tolist())  # distinct rows
    again = np.linalg.norm(x[idx] - x[:, None], axis=2)
    np.testing.assert_allclose(again, dist, rtol=1e-4, atol=1e-4)
    assert np.all(np.diff(dist, axis=1) >= 0)
    assert np.median(dist.mean(1) / exact.mean(1)) < 1.05  # a useful search: most bounds are close


def test_knn_cells_measured_in_another_space():
    x = clustered(3000, 20, seed=3)
    search = x[:, :6]  # candidates found in a projection
    dist, idx = knn.knn_cells(search, 5, measure=x, rows=32)
    again = np.linalg.norm(x[idx] - x[:, None], axis=2)
    np.testing.assert_allclose(again, dist, rtol=1e-4, atol=1e-4)
    assert np.all(np.diff(dist, axis=1) >= 0)
    assert np.all(dist >= brute(x, np.arange(3000), 5) * (1 - 1e-5) - 1e-5)


def test_kmeans_cells_partition_every_row_once():
    x = clustered(6000, 5, seed=4)
    cells, centres = kmeans_cells(x, 16)
    allrows = np.concatenate(cells)
    assert sorted(allrows.tolist()) == list(range(6000))
    assert len(cells) > CELL_BRANCH  # the hierarchy was used
    assert max(len(c) for c in cells) <= 4 * 16 * 2
    np.testing.assert_allclose(centres[0], x[cells[0]].mean(0), rtol=1e-5, atol=1e-5)


def test_kmeans_cells_identical_rows_terminate():
    x = np.zeros((5000, 4), dtype=np.float32)  # k-means cannot cut these: they are cut by position
    cells, _ = kmeans_cells(x, 64)
    assert sorted(np.concatenate(cells).tolist()) == list(range(5000))
    assert max(len(c) for c in cells) <= 128
    dist, _ = knn.knn_cells(x, 10, rows=64)
    assert np.allclose(dist, 0, atol=1e-4)


def test_knn_scores_bounds_then_exact():
    x = clustered(4000, 6, seed=5)
    exact = brute(x, np.arange(4000), 10).mean(1)
    s = knn.KnnScores.build(x, 10, exact_max_n=1000)  # past the limit: bounds
    assert s.stats["method"] == "cells+exact" and not s.exact.any()
    assert np.all(s.values >= exact * (1 - 1e-5))
    rows = np.array([3, 7, 3999, 7])
    s.make_exact(rows)
    np.testing.assert_allclose(s.values[rows], exact[rows], rtol=1e-4)
    assert s.exact.sum() == 3 and s.stats["passes"] == 1
    assert len(s.stats["bound_over_exact"]) == 3 and min(s.stats["bound_over_exact"]) >= 1 - 1e-5
    small = knn.KnnScores.build(x[:500], 10)  # within EXACT_MAX_N: every row exact
    assert small.exact.all()
    np.testing.assert_allclose(small.values, brute(x[:500], np.arange(500), 10).mean(1), rtol=1e-4)


def test_knn_scores_at_several_neighbour_counts_bound_then_exact():
    """``means_at``: the mean distance to the 3, 10 and 50 nearest from one search for 50: each an upper
    bound of the exact one past the limit, exact where made exact, and all exact within the limit."""
    x = clustered(3000, 6, seed=7)
    d = brute(x, np.arange(3000), 50)
    exact = np.stack([d[:, :k].mean(1) for k in (3, 10, 50)], axis=1)  # (N, 3)
    s = knn.KnnScores.build(x, 50, exact_max_n=1000, means_at=(3, 10, 50))
    assert s.at.shape == (3000, 3) and not s.exact.any()
    assert np.all(s.at >= exact * (1 - 1e-5))
    rows = np.array([0, 5, 2999])
    s.make_exact(rows)
    np.testing.assert_allclose(s.at[rows], exact[rows], rtol=1e-4)
    np.testing.assert_allclose(s.values[rows], exact[rows, 2], rtol=1e-4)
    small = knn.KnnScores.build(x[:400], 50, means_at=(3, 10, 50))
    d_small = brute(x[:400], np.arange(400), 50)
    want = np.stack([d_small[:, :k].mean(1) for k in (3, 10, 50)], axis=1)
    assert small.exact.all()
    np.testing.assert_allclose(small.at, want, rtol=1e-4)


def _lower_space(x, dims):
    """Principal coordinates plus residual norm: distances there are at most those in x."""
    from novelfind.ranking.pca import fit_space

    space = fit_space(x, dims)
    return np.hstack([space.proj, space.resid[:, None]])


@pytest.mark.parametrize("block", [64, 500, 10_000])  # many blocks, a few, one block holding every row
@pytest.mark.parametrize("seed", [0, 1])
def test_knn_exact_pruned_matches_unpruned(block, seed):
    """Skipping blocks by a lower-bound space changes nothing: same neighbours, same distances, for
    ordinary rows (tight bounds, most blocks skipped) and outliers (loose bounds, fewer skipped)."""
    x = clustered(6000, 40, seed, clusters=20, spread=0.4)
    rng = np.random.default_rng(seed)
    out = rng.choice(len(x), 30, replace=False)
    x[out] += rng.normal(size=(30, 40)).astype(np.float32) * 1.5  # far from their cluster
    x[20] = x[21]  # identical rows: each other's neighbour at distance 0
    low = _lower_space(x, 8)
    s = knn.KnnScores.build(x, 10, search=low, search_is_lower=True, exact_max_n=1000)
    prune = s.prune
    assert prune is not None
    prune.block = block
    rows = np.unique(np.concatenate([out, [20, 21, 0, 5999], rng.choice(len(x), 200, replace=False)]))
    dist, idx = knn.knn_exact(x, rows, 10, prune=prune)
    ref_d, ref_i = knn.knn_exact(x, rows, 10)
    np.testing.assert_array_equal(dist, ref_d)
    twins = np.isin(ref_i, [20, 21])  # rows 20 and 21 are tied everywhere: either may come first
    np.testing.assert_array_equal(idx[~twins], ref_i[~twins])
    np.testing.assert_array_equal(
        np.sort(np.where(twins, ref_i, -1), 1), np.sort(np.where(twins, idx, -1), 1)
    )
    np.testing.assert_allclose(dist, brute(x, rows, 10), rtol=1e-4, atol=1e-4)
    if block < len(x):  # several blocks: most (query, block) pairs cannot matter and are skipped
        assert prune.skipped > 0.5 * prune.pairs
    else:  # one block holds every query's own row: nothing to skip
        assert prune.skipped == 0 and prune.pairs == len(rows)


def test_knn_exact_pruned_skips_nothing_without_a_bound():
    """A row with no k-th bound (+inf: too few candidates) reads every block."""
    x = clustered(3000, 12, seed=4)
    low = _lower_space(x, 4)
    order = np.argsort(low[:, 0], kind="stable")
    prune = knn.Pruning(lower=low, order=order, kth=np.full(len(x), np.inf, np.float32), block=100)
    rows = np.array([0, 1, 2999])
    dist, idx = knn.knn_exact(x, rows, 7, prune=prune)
    assert prune.skipped == 0 and prune.pairs == 3 * 30
    np.testing.assert_array_equal(idx, knn.knn_exact(x, rows, 7)[1])


def test_knn_scores_pruned_equals_exact_scores():
    x = clustered(5000, 30, seed=6, clusters=15)
    low = _lower_space(x, 6)
    exact = brute(x, np.arange(5000), 10).mean(1)
    s = knn.KnnScores.build(x, 10, search=low, search_is_lower=True, exact_max_n=1000)
    plain = knn.KnnScores.build(x, 10, search=low, exact_max_n=1000)  # not declared a lower bound
    assert s.prune is not None and plain.prune is None
    assert np.all(s.values >= exact * (1 - 1e-5))
    rows = np.argsort(-s.values)[:300]
    s.make_exact(rows)
    plain.make_exact(rows)
    np.testing.assert_array_equal(s.values[rows], plain.values[rows])
    np.testing.assert_array_equal(s.nearest[rows], plain.nearest[rows])
    np.testing.assert_allclose(s.values[rows], exact[rows], rtol=1e-4)
    assert 0 < s.stats["pairs_skipped"] < 1


def _fake_scores(n, seed):
    """True scores and deliberately poor upper bounds: most a little high, some far too high, some inf."""
    rng = np.random.default_rng(seed)
    true = rng.gamma(2.0, size=n).astype(np.float32)
    bound = true * (1 + rng.exponential(0.05, size=n)).astype(np.float32)
    wild = rng.random(n) < 0.02
    bound[wild] = true[wild] * 5
    bound[rng.random(n) < 0.005] = np.inf
    return true, bound


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("take", [1, 40, 300])
def test_certified_order_equals_exact_order(seed, take):
    n = 5000
    true, bound = _fake_scores(n, seed)
    values, exact = bound.copy(), np.zeros(n, dtype=bool)
    made = []

    def make_exact(rows):
        made.append(len(rows))
        values[rows] = true[rows]
        exact[rows] = True

    rows = np.random.default_rng(seed + 10).random(n) < 0.7 if seed % 2 else None
    walk = lambda o: min(take, len(o))  # noqa: E731
    order, scores = knn.certified_order(lambda: values, exact, make_exact, walk, rows=rows)
    want = np.lexsort((np.arange(n), -true))
    if rows is not None:
        want = want[rows[want]]
    assert order[:take].tolist() == want[:take].tolist()
    np.testing.assert_array_equal(scores[order[:take]], true[order[:take]])
    assert exact.sum() < n / 2  # only the top was made exact


def test_certified_order_with_a_reader_that_skips():
    """The walk decides how far it reads (as the near-duplicate pass does): every row read is exact."""
    n = 3000
    true, bound = _fake_scores(n, 7)
    values, exact = bound.copy(), np.zeros(n, dtype=bool)

    def make_exact(rows):
        values[rows] = true[rows]
        exact[rows] = True

    def walk(order):  # keep 20 rows, passing over every row whose index is divisible by 3
        kept = 0
        for i, r in enumerate(order):
            kept += r % 3 != 0
            if kept == 20:
                return i + 1
        return len(order)

    order, _ = knn.certified_order(lambda: values, exact, make_exact, walk)
    want = np.lexsort((np.arange(n), -true))
    used = walk(want)
    assert order[:used].tolist() == want[:used].tolist()


def test_certified_order_reads_again_the_rows_a_walk_made_exact_as_it_read_them():
    """A walk that makes rows exact as it reads (event-knn's moments refine their events): the rows it
    read on their bounds are read again, exact, and the scores returned are those of the order."""
    n = 3000
    true, bound = _fake_scores(n, 3)
    top = np.lexsort((np.arange(n), -true))[:40]
    bound[np.isinf(bound)] = 3 * true[np.isinf(bound)]
    bound[top] = np.inf  # no finite bound for the best rows alone (too few candidates outside their event)
    values, exact = bound.copy(), np.zeros(n, dtype=bool)

    def make_exact(rows):
        values[rows] = true[rows]
        exact[rows] = True

    make_exact(np.arange(0, n, 50))  # a sample made exact first (the scale's rows)

    def walk(order):  # reads 10 rows; a settled row it looks past them for makes the best rows exact
        settled = order[exact[order]]
        if len(settled):
            make_exact(top)
        return 10

    order, scores = knn.certified_order(lambda: values.copy(), exact, make_exact, walk)
    want = np.lexsort((np.arange(n), -true))
    assert order[:10].tolist() == want[:10].tolist()
    assert np.isfinite(scores[order[:10]]).all()
    np.testing.assert_array_equal(scores[order[:10]], true[order[:10]])


def brute_outside(x, rows, groups, k):
    """Exact k smallest distances to rows of another group (float64), +inf where fewer exist."""
    d = torch.cdist(torch.from_numpy(x[rows]).double(), torch.from_numpy(x).double()).numpy()
    d[groups[rows][:, None] == groups[None, :]] = np.inf
    d = np.sort(d, axis=1)[:, :k]
    return np.pad(d, ((0, 0), (0, k - d.shape[1])), constant_values=np.inf)


@pytest.mark.parametrize("pruned", [False, True])
def test_knn_exact_among_other_groups_matches_brute_force(pruned):
    """``groups``: the k nearest rows of another group; a tight group of 60 rows (each other's nearest)
    finds its nearest rows outside it, pruned by a lower-bound space or not."""
    rng = np.random.default_rng(8)
    x = clustered(3000, 20, seed=8, clusters=10)
    groups = rng.integers(0, 150, len(x))
    x[:60] = x[0] + 0.01 * rng.normal(size=(60, 20)).astype(np.float32)
    groups[:60] = 1000
    rows = np.concatenate([np.arange(6), rng.choice(len(x), 100, replace=False)])
    want = brute_outside(x, rows, groups, 10)
    prune = None
    if pruned:  # a valid k-th bound for every row: the exact k-th distance outside its group, a little up
        low = _lower_space(x, 6)
        kth = np.full(len(x), np.inf, np.float32)
        kth[rows] = want[:, -1] * 1.01
        prune = knn.Pruning(lower=low, order=np.argsort(low[:, 0], kind="stable"), kth=kth, block=128)
    dist, idx = knn.knn_exact(x, rows, 10, groups=groups, prune=prune)
    assert (groups[idx] != groups[rows][:, None]).all()
    np.testing.assert_allclose(dist, want, rtol=1e-4, atol=1e-4)
    again = np.linalg.norm(x[idx] - x[rows][:, None], axis=2)
    np.testing.assert_allclose(again, dist, rtol=1e-4, atol=1e-4)
    if pruned:
        assert prune.skipped > 0


def test_knn_exact_among_other_groups_with_fewer_than_k_outside():
    x = clustered(12, 4, seed=9)
    groups = np.array([0] * 9 + [1, 2, 3])
    dist, idx = knn.knn_exact(x, np.array([0, 10]), 5, groups=groups)
    assert sorted(idx[0, :3].tolist()) == [9, 10, 11] and idx[0, 3:].tolist() == [-1, -1]
    assert np.isfinite(dist[0, :3]).all() and np.isinf(dist[0, 3:]).all()
    assert np.all(np.diff(dist[0, :3]) >= 0)
    assert (groups[idx[1]] != 2).all() and np.isfinite(dist[1]).all()  # 11 rows outside its group
