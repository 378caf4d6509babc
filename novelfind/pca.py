"""Principal component analysis of a feature matrix, for the ranking's whitening and the report's map."""

from __future__ import annotations

import numpy as np


def pca(x: np.ndarray, dims: int, chunk: int = 16384) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Principal axes of the rows of x (N, M) -> (projections float32 (N, d), variances (d,), mean (M,)).

    d = min(dims, M, N - 1), less the axes with no variance; all rows identical gives one zero column.
    The covariance (M, M) is accumulated over row chunks, so memory stays O(N M + M^2) and time
    O(N M^2). Each axis points where its largest loading is positive, so the result does not depend
    on the sign the eigensolver happens to return. ``x`` must be finite (not checked here).
    """
    n, m = x.shape
    mean = x.mean(axis=0, dtype=np.float64).astype(np.float32)  # (M,)
    cov = np.zeros((m, m), dtype=np.float64)  # (M, M)
    for i in range(0, n, chunk):
        c = x[i : i + chunk] - mean  # (C, M) float32
        cov += c.T @ c
    cov /= max(n - 1, 1)
    evals, evecs = np.linalg.eigh(cov)  # ascending
    d = int(min(dims, m, max(n - 1, 1)))
    evals, evecs = evals[::-1][:d], evecs[:, ::-1][:, :d]  # (d,), (M, d)
    keep = evals > evals[0] * 1e-6 if evals[0] > 0 else np.zeros(d, dtype=bool)
    if not keep.any():
        return np.zeros((n, 1), dtype=np.float32), np.ones(1), mean
    axes = evecs[:, keep]  # (M, d')
    signs = np.sign(axes[np.abs(axes).argmax(axis=0), np.arange(axes.shape[1])])  # (d',)
    axes = (axes * np.where(signs == 0, 1.0, signs)).astype(np.float32)
    out = np.empty((n, axes.shape[1]), dtype=np.float32)
    for i in range(0, n, chunk):
        out[i : i + chunk] = (x[i : i + chunk] - mean) @ axes
    return out, evals[keep], mean
