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
