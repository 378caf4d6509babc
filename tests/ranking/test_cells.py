"""k-means cells: every row in exactly one cell, cells of about the asked size, centres their means."""

from __future__ import annotations

import numpy as np
import pytest

from novelfind.ranking.cells import OutsideSearch, kmeans_cells, knn_cells


def blobs(n: int, d: int, seed: int, clusters: int = 6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, d)) * 10
    return (centres[rng.integers(0, clusters, n)] + rng.normal(size=(n, d))).astype(np.float32)


def as_partition(cells: list[np.ndarray], n: int) -> np.ndarray:
    every = np.concatenate(cells)
    assert sorted(every.tolist()) == list(range(n))  # each row once, none lost
    label = np.empty(n, dtype=np.int64)
    for i, c in enumerate(cells):
        label[c] = i
    return label


def test_cells_partition_the_rows_and_centres_are_their_means():
    x = blobs(1200, 5, seed=0)
    cells, centres = kmeans_cells(x, rows=100)
    as_partition(cells, len(x))
    assert centres.shape == (len(cells), 5) and centres.dtype == np.float32
    for c, centre in zip(cells, centres, strict=True):
        np.testing.assert_allclose(centre, x[c].mean(0), rtol=1e-5, atol=1e-5)
    assert all(len(c) <= 4 * 100 for c in cells)  # a part far too big is cut again
    assert len(cells) >= 1200 // 400


def test_fewer_than_two_cells_worth_of_rows_is_one_cell():
    x = blobs(300, 4, seed=1)
    cells, centres = kmeans_cells(x, rows=256)
    assert len(cells) == 1 and cells[0].tolist() == list(range(300))
    np.testing.assert_allclose(centres[0], x.mean(0), rtol=1e-5, atol=1e-5)


def test_identical_rows_are_cut_by_position():
    x = np.ones((1000, 3), dtype=np.float32)
    cells, _ = kmeans_cells(x, rows=100)
    as_partition(cells, 1000)
    assert len(cells) == 10  # np.array_split into len // rows parts
    assert all(np.all(np.diff(c) == 1) for c in cells)  # each a run of consecutive rows


def test_well_separated_clusters_are_never_mixed_in_a_cell():
    rng = np.random.default_rng(2)
    far = np.eye(4, dtype=np.float32) * 1000
    owner = np.repeat(np.arange(4), 150)
    x = (far[owner] + rng.normal(size=(600, 4))).astype(np.float32)
    cells, _ = kmeans_cells(x, rows=50)
    assert all(len(np.unique(owner[c])) == 1 for c in cells)


def test_the_same_seed_gives_the_same_cells():
    x = blobs(2000, 6, seed=3)
    a, _ = kmeans_cells(x, rows=64, seed=7)
    b, _ = kmeans_cells(x, rows=64, seed=7)
    assert [c.tolist() for c in a] == [c.tolist() for c in b]


@pytest.mark.parametrize("measured", [False, True])
def test_the_outside_list_holds_real_rows_of_other_groups_and_bounds_the_exact_ones(measured):
    """``knn_cells`` with an ``OutsideSearch``: the first list is what it is without one, bit for bit;
    the second holds rows of another group only, at their true distances, each rank at least the
    exact one outside the group (an upper bound); the rows not asked for get none."""
    rng = np.random.default_rng(3)
    x = blobs(3000, 8, seed=3)
    groups = rng.integers(0, 300, len(x))
    tight = np.arange(150)  # a group of near rows: each other's nearest
    x[tight] = x[0] + 0.01 * rng.normal(size=(150, 8)).astype(np.float32)
    groups[tight] = 10_000
    asked = rng.random(len(x)) < 0.8
    asked[tight] = True
    search = x[:, :4].copy() if measured else x  # found in 4 of the 8 coordinates, measured in all 8
    measure = x if measured else None
    plain = knn_cells(search, 10, rows=64, measure=measure)
    found = OutsideSearch(groups=groups, look=40, rows=asked)
    dist, idx = knn_cells(search, 10, rows=64, measure=measure, outside=found)
    np.testing.assert_array_equal(dist, plain[0])
    np.testing.assert_array_equal(idx, plain[1])
    od, oi = found.dist, found.index
    assert (oi[~asked] == -1).all() and np.isinf(od[~asked]).all()
    got = oi >= 0
    assert (groups[oi[got]] != groups[np.nonzero(got)[0]]).all()
    true = np.linalg.norm(x[oi[got]] - x[np.nonzero(got)[0]], axis=1)
    np.testing.assert_allclose(od[got], true, rtol=1e-5, atol=1e-5)
    assert np.all(np.where(got[:, 1:], np.diff(np.where(got, od, 0), axis=1), 0) >= 0)  # sorted
    rows = np.flatnonzero(asked)[:300]
    for r in rows:  # each rank at least the exact one among the rows of other groups
        d = np.linalg.norm(x - x[r], axis=1)
        d[groups == groups[r]] = np.inf
        exact = np.sort(d)[:10]
        assert np.all(od[r] >= exact * (1 - 1e-5) - 1e-5)
    clear = asked & ~(groups[np.maximum(idx, 0)] == groups[:, None]).any(1)
    np.testing.assert_array_equal(oi[clear], idx[clear])  # its nearest are all outside its group
    assert np.isinf(od[tight, -1]).all()  # the tight group's rows: too few outside among their 40
