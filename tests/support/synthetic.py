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
