"""k-means cells: every row in exactly one cell, cells of about the asked size, centres their means."""

from __future__ import annotations

import numpy as np

from novelfind.ranking.cells import kmeans_cells


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
