"""The event-knn scorer: plain cosine k-NN without times, a one-off batch lifted by the outside term."""

from __future__ import annotations

import numpy as np
import pytest

from novelfind.ranking import eventknn
from novelfind.ranking.adsconfig import ADSConfig
from novelfind.ranking.scoring import KNN_K, ScoreInput, density, unit_source

DAY = 86_400.0


def library(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """40 photos of one place, one a day, then a batch of 12 photos of another subject in one evening
    (10 minutes apart: one event) -> (features (52, 8), times (52,))."""
    rng = np.random.default_rng(seed)
    place = np.eye(8)[0] + rng.normal(size=(40, 8)) * 0.05
    batch = np.eye(8)[1] + rng.normal(size=(12, 8)) * 0.05
    x = np.vstack([place, batch]).astype(np.float32)
    times = np.concatenate([np.arange(40) * DAY + 12 * 3600, 100 * DAY + np.arange(12) * 600.0])
    return x, times


def plain_values(x: np.ndarray) -> np.ndarray:
    return density(unit_source(x), KNN_K)[0].values


def scores(x, times=None, **settings) -> eventknn.Scores:
    given = ScoreInput(source=x, k=3, config=ADSConfig(), times=times, settings=settings)
    return eventknn.event_knn_scores(given)


def test_without_times_or_without_a_dated_photo_it_is_plain_cosine_knn():
    x, _ = library()
    for times in (None, np.full(len(x), np.nan), np.full(len(x), np.inf)):
        s = scores(x, times)
        np.testing.assert_array_equal(s.current(), plain_values(x))
        assert s.time_mates is None


def test_times_of_the_wrong_shape_are_refused():
    x, times = library()
    with pytest.raises(ValueError, match=r"times must have shape \(52,\), got \(51,\)"):
        scores(x, times[:-1])


def test_a_one_off_batch_is_lifted_and_the_daily_place_is_not():
    x, times = library()
    plain = plain_values(x)
    s = scores(x, times)
    cur = s.current()
    assert s.exact.all()  # small library: every row exact
    # one photo a day: each an event of its own, ranked by the plain term alone
    np.testing.assert_allclose(cur[:40], plain[:40], rtol=1e-6)
    # the batch's KNN_K nearest photos are all inside its event (plain: small); its nearest photos
    # outside it are the far place (orthogonal unit vectors, about sqrt(2) away): the outside term lifts it
    assert np.all(plain[40:] < 0.3)
    assert np.all(cur[40:] > 0.75 * 1.2)
    assert s.stats["events"] == 1 and s.stats["timed_rows"] == 12


def test_weight_zero_is_the_plain_term_and_weight_one_the_outside_term_alone():
    x, times = library()
    plain = plain_values(x)
    np.testing.assert_allclose(scores(x, times, weight=0.0).current(), plain, rtol=1e-6)
    whole = scores(x, times, weight=1.0).current()
    half = scores(x, times, weight=0.5).current()
    np.testing.assert_allclose(half, (plain + whole) / 2, rtol=1e-5)


def test_the_time_mates_of_a_batch_photo_are_the_rest_of_its_odd_batch():
    x, times = library()
    mates = scores(x, times).time_mates(np.array([41, 3]))
    assert mates[0].tolist() == [40, *range(42, 52)]
    assert mates[1].tolist() == []  # a day of its own, no burst


def test_outside_mean_skips_the_own_event_and_is_inf_when_too_few_lie_outside():
    dist = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    idx = np.array([[5, 6, 7, 8]])
    event = np.zeros(9, dtype=np.int64)
    event[6], event[8] = 1, 2  # rows 5 and 7 share the query's event 0
    own = np.array([0])
    assert eventknn._outside_mean(dist, idx, own, event, 2).tolist() == [3.0]  # (2 + 4) / 2
    assert eventknn._outside_mean(dist, idx, own, event, 1).tolist() == [2.0]
    assert eventknn._outside_mean(dist, idx, own, event, 3).tolist() == [np.inf]
    assert eventknn._outside_mean(dist, idx, own, event, 0).tolist() == [np.inf]
    assert eventknn._outside_mean(dist, idx, own, event, 5).tolist() == [np.inf]  # more than the candidates


# Odd one-off events of these sizes (the largest above every K below) in a library of recurring places
ODD_SIZES = (80, 50, 30, 20, 12, 8, 5, 3, 2)


def dated_library(seed: int, n: int = 1500, dim: int = 48) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """20 places photographed on 400 days, and one evening each of ``ODD_SIZES`` frames of a subject
    seen nowhere else (a minute apart: one event each) -> (features, times, rows of each odd event)."""
    rng = np.random.default_rng(seed)
    centres = np.abs(rng.normal(size=(20, dim)))
    daily = n - sum(ODD_SIZES)
    rows = [centres[rng.integers(20, size=daily)] + 0.3 * rng.normal(size=(daily, dim))]
    times = [rng.integers(400, size=daily) * DAY + rng.uniform(9, 18, daily) * 3600]
    odd = []
    for e, size in enumerate(ODD_SIZES):
        odd.append(np.arange(size) + sum(len(r) for r in rows))
        rows.append(rng.normal(size=dim) + 0.03 * np.abs(rng.normal(size=(size, dim))))
        times.append((500 + 3 * e) * DAY + 22 * 3600 + 60.0 * np.arange(size))
    return np.vstack(rows).astype(np.float32), np.concatenate(times), odd


@pytest.mark.parametrize(("seed", "k"), [(0, 15), (1, 20), (2, 50)])
def test_past_the_exact_limit_with_k_under_the_largest_batch_each_event_is_one_exact_moment(
    monkeypatch, seed, k
):
    """Past ``knn.EXACT_MAX_N`` (the certified path: bounds, made exact where read) with K below the
    size of the largest odd event: every score finite, each odd event one pick holding all its frames,
    and the picks, scores and members those of the ranking with every row exact."""
    import novelfind
    from novelfind.ranking import knn

    x, t, odd = dated_library(seed)
    monkeypatch.setattr(knn, "EXACT_MAX_N", 1000)
    assert len(x) > knn.EXACT_MAX_N and max(ODD_SIZES) > k
    got = novelfind.rank(x, k, method="event-knn", times=t)
    assert len(got.indices) == k and np.isfinite(got.scores).all()
    assert np.isfinite(got.all_scores).all()
    moments = [set(np.append(m, p).tolist()) for p, m in zip(got.indices, got.members, strict=True)]
    for rows in odd:
        holding = [j for j, m in enumerate(moments) if m & set(rows.tolist())]
        assert len(holding) == 1 and set(rows.tolist()) <= moments[holding[0]]
    monkeypatch.setattr(knn, "EXACT_MAX_N", 10**9)
    want = novelfind.rank(x, k, method="event-knn", times=t)
    assert got.indices.tolist() == want.indices.tolist()
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5)
    assert all(np.array_equal(a, b) for a, b in zip(got.members, want.members, strict=True))


@pytest.mark.parametrize("method", ["cosine-knn", "microcluster"])
def test_past_the_exact_limit_the_content_methods_score_every_pick(monkeypatch, method):
    """The same library and limit for the methods without time: finite scores, no photo in two moments,
    and (for the certified ``cosine-knn``; ``microcluster`` is exact at any N) the same picks as with
    every row exact."""
    import novelfind
    from novelfind.ranking import knn

    x, t, _ = dated_library(0)
    monkeypatch.setattr(knn, "EXACT_MAX_N", 1000)
    got = novelfind.rank(x, 20, method=method, times=t)
    assert len(got.indices) == 20 and np.isfinite(got.scores).all()
    seen = np.concatenate([got.indices, *got.members])
    assert len(np.unique(seen)) == len(seen)  # no photo in two moments
    if method == "cosine-knn":
        monkeypatch.setattr(knn, "EXACT_MAX_N", 10**9)
        want = novelfind.rank(x, 20, method=method, times=t)
        assert got.indices.tolist() == want.indices.tolist()
        np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5)


def test_past_the_exact_limit_every_bound_is_a_finite_upper_bound(monkeypatch):
    """Before anything is made exact, a photo of the largest odd event (its nearest photos all in it, so
    the cell search finds none outside it) is bounded from the photos its event found outside it: a
    number, not +inf, and at least its exact score."""
    from novelfind.ranking import knn

    x, t, odd = dated_library(0)
    monkeypatch.setattr(knn, "EXACT_MAX_N", 1000)
    bounds = scores(x, t)
    got = bounds.current()
    assert np.isfinite(got).all()
    assert not bounds.exact[odd[0]].all()  # most read on their bounds (a sample is made exact)
    monkeypatch.setattr(knn, "EXACT_MAX_N", 10**9)
    exact = scores(x, t).current()
    assert np.all(got >= exact * (1 - 1e-5))
    assert np.all(got[odd[0]] <= 1.5 * exact[odd[0]])  # and near it: from real photos outside the event
