"""Synthetic feature matrices with known outliers, for the ranking's tests."""

from __future__ import annotations

import numpy as np


def blob_with_outliers(n=400, m=40, k=5, seed=0, shift=6.0, offset=0.0):
    """A Gaussian blob and k points far from it (the last k rows); ``offset`` moves the blob away from
    the origin, as image features are (the angle between two rows then tells what their distance does)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, m)).astype(np.float32) + np.float32(offset)
    x[-k:] += shift * rng.normal(size=(k, m)).astype(np.float32) / np.sqrt(m) * 3
    return x, set(range(n - k, n))


DAY = 86_400.0
FIRST_DAY = 1_717_200_000.0  # 2024-06-01 00:00 UTC


def dated_library(seed=0, m=64, days=20):
    """A dated library of feature vectors, as a camera roll looks (unit-length distances like the real
    model's: photos of one place 0.3-0.5 apart, unrelated photos about 1.1): eight ordinary places
    photographed ten times a day, 09:00-18:00, for ``days`` days; on day 6 an evening of 12 photos of
    one subject seen on no other day (20:05-20:49, 0.5-0.8 apart), and that afternoon an unrelated odd
    photo; on day 11 an odd photo among the ordinary ones (the planted astronaut); on day 14 a burst of 5
    frames of an odd subject, one second apart (about 0.2 apart: beyond the content link radius, 0.15).

    -> (x (N, m) float32, times (N,) float64 UTC seconds, kinds (N,) str: ``ordinary``, ``evening``,
    ``odd_same_day``, ``astronaut``, ``burst``)."""
    rng = np.random.default_rng([seed, 61])
    base = np.abs(rng.normal(size=m))  # a non-negative part every photo shares, as image features do

    def subject():
        return base + 1.1 * rng.normal(size=m)

    def around(centre, count, spread):
        return centre + spread * rng.normal(size=(count, m))

    places = [subject() for _ in range(8)]
    vectors, times, kinds = [], [], []

    def add(rows, when, kind):
        vectors.extend(rows)
        times.extend(when)
        kinds.extend([kind] * len(when))

    for day in range(days):
        when = FIRST_DAY + day * DAY + np.sort(rng.uniform(9 * 3600, 18 * 3600, 10))
        add([around(places[rng.integers(8)], 1, 0.45)[0] for _ in when], when, "ordinary")
    add(around(subject(), 12, 0.8), FIRST_DAY + 6 * DAY + 20 * 3600 + 300 + 240 * np.arange(12), "evening")
    add([subject()], [FIRST_DAY + 6 * DAY + 15.5 * 3600], "odd_same_day")
    add([subject()], [FIRST_DAY + 11 * DAY + 13 * 3600], "astronaut")
    add(around(subject(), 5, 0.2), FIRST_DAY + 14 * DAY + 11 * 3600 + np.arange(5), "burst")
    return np.asarray(vectors, np.float32), np.asarray(times, np.float64), np.asarray(kinds)
