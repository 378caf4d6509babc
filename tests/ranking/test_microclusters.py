"""The microcluster score: odd batches and single odd photos on one scale, the same from chunks."""

from __future__ import annotations

import numpy as np
import pytest

from novelfind.ranking import budget, knn, microclusters
from novelfind.ranking.driver import rank
from novelfind.ranking.sources import ChunkedSource


def _chunked(x: np.ndarray, rows: int) -> ChunkedSource:
    return ChunkedSource(
        lambda: (x[i : i + rows] for i in range(0, len(x), rows)), lambda r: x[r], len(x), x.shape[1]
    )


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def library_with_batches(n: int, m: int = 64, seed: int = 0):
    """Unit rows: an ordinary library (one broad cloud, every photo with close neighbours), an odd batch
    of 30 photos far from it, an ordinary tight group of 30 (ten frames each of three ordinary photos)
    and 5 single odd photos -> (x (N, M), batch rows, tight-group rows, single rows)."""
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=m) * 0.5
    x = mean + rng.normal(size=(n, m)) * 0.5
    batch = np.arange(30)
    x[batch] = rng.normal(size=m) * 0.5 + rng.normal(size=(30, m)) * 0.15
    tight = np.arange(30, 60)
    x[tight] = x[np.repeat(rng.integers(100, n, size=3), 10)] + rng.normal(size=(30, m)) * 0.05
    singles = np.arange(60, 65)
    x[singles] = rng.normal(size=(5, m)) * 0.5
    return _unit(x), batch, tight, singles


def test_a_far_batch_ranks_above_ordinary_photos_and_an_ordinary_tight_group_does_not():
    x, batch, tight, singles = library_with_batches(1200)
    plain = rank(x, 35, method="cosine-knn")
    picked = rank(x, 35, method="microcluster", dedup=0)
    assert len(set(plain.indices.tolist()) & set(batch.tolist())) < 5  # members hide each other
    got = set(picked.indices.tolist())
    assert set(batch.tolist()) <= got  # the batch, whole
    assert set(singles.tolist()) <= got  # and the singles on the same scale
    assert not got & set(tight.tolist())


def test_labels_group_the_batch_and_leave_the_bulk_alone():
    x, batch, tight, singles = library_with_batches(1200)
    lab = microclusters.microclusters(x)
    assert len(np.unique(lab[batch])) == 1 and lab[batch[0]] >= 0
    assert (lab[singles] < 0).all() and len(np.unique(lab)) > 1000  # a single is its own
    assert (lab == lab[batch[0]]).sum() == len(batch)


def test_a_photo_alone_scores_its_plain_knn_distance():
    x, *_ = library_with_batches(800)
    scores, lab = microclusters.microcluster_scores(x)
    d, _ = knn.knn_exact(x, np.arange(len(x)), microclusters.KNN_K)
    alone = lab < 0
    np.testing.assert_allclose(scores[alone], d[alone].mean(1), rtol=1e-5)
    assert (scores[~alone] >= d[~alone].mean(1) - 1e-6).all()  # outside the group: never nearer


@pytest.mark.parametrize("chunk", [333, 5000])
def test_the_same_picks_from_a_matrix_and_from_chunks_past_the_exact_size(chunk, monkeypatch):
    """Past ``knn.EXACT_MAX_N`` rows and with the query blocks smaller than the grouped rows, from a
    matrix and from a source read in chunks: the same picks and scores."""
    x, batch, _, singles = library_with_batches(knn.EXACT_MAX_N + 400, seed=1)
    monkeypatch.setattr(microclusters, "QUERY_ROWS", 16)
    want = rank(x, 40, method="microcluster", dedup=0)
    got = rank(_chunked(x, chunk), 40, method="microcluster", dedup=0)
    assert got.indices.tolist() == want.indices.tolist()
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-6)
    assert set(batch.tolist()) | set(singles.tolist()) <= set(want.indices.tolist())


def test_a_library_over_the_memory_budget_is_ranked_from_the_cache_the_same(
    library, fake_extractor, tmp_path, monkeypatch
):
    import novelfind

    cache = tmp_path / "c.sqlite"
    in_memory = novelfind.scan(library["root"], 3, cache=cache, method="microcluster")
    assert in_memory.features is not None
    monkeypatch.setattr(budget, "MATRIX_BUDGET", 0)
    streamed = novelfind.scan(library["root"], 3, cache=cache, method="microcluster")
    assert streamed.features is None
    assert [p.path for p in streamed.picks] == [p.path for p in in_memory.picks]
    assert [p.score for p in streamed.picks] == pytest.approx([p.score for p in in_memory.picks], rel=1e-6)


def test_microcluster_refuses_a_library_past_its_size_before_any_work():
    """Its cost grows with N^2: past ``MICROCLUSTER_MAX_ROWS`` the scan stops before extracting, and
    rank() before scoring; at the limit it is accepted (the small libraries above rank)."""
    import novelfind
    from novelfind.errors import InputError
    from novelfind.ranking import methods

    limit = methods.MICROCLUSTER_MAX_ROWS
    assert budget.read_in_chunks("microcluster", limit, 1280) is False
    with pytest.raises(InputError, match=f"ranks at most {limit:,} photos"):
        budget.read_in_chunks("microcluster", limit + 1, 1280)
    assert budget.read_in_chunks("cosine-knn", limit + 1, 1280) is False  # the others take any size
    x = np.random.default_rng(0).random((limit + 1, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="ranks at most"):
        novelfind.rank(x, 5, method="microcluster")
