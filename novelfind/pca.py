"""Principal component analysis of a feature matrix, for the ranking's whitening and the report's map."""

from __future__ import annotations

import numpy as np


def principal_axes(
    x: np.ndarray, dims: int, chunk: int = 16384, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Principal axes of the rows of x (N, M) -> (axes float32 (M, d), variances (d,), mean (M,)).

    d = min(dims, M, n - 1) for the n rows used, less the axes with no variance (all rows identical: no
    axis, shape (M, 0)). The covariance (M, M) is accumulated over row chunks, so memory stays
    O(chunk M + M^2) and time O(n M^2); ``rows`` (indices) estimates it from those rows only (the mean
    from all). Each axis points where its largest loading is positive, so the result does not depend on the
    sign the eigensolver happens to return. ``x`` must be finite (not checked here).
    """
    n, m = x.shape
    use = None if rows is None else np.asarray(rows, dtype=np.int64)
    count = n if use is None else len(use)
    part = (lambda i: x[i : i + chunk]) if use is None else (lambda i: x[use[i : i + chunk]])  # noqa: E731
    mean = x.mean(axis=0, dtype=np.float64).astype(np.float32)  # (M,) of all rows
    cov = np.zeros((m, m), dtype=np.float64)  # (M, M)
    for i in range(0, count, chunk):
        c = part(i) - mean  # (C, M) float32
        cov += c.T @ c
    cov /= max(count - 1, 1)
    evals, evecs = np.linalg.eigh(cov)  # ascending
    d = int(min(dims, m, max(count - 1, 1)))
    evals, evecs = evals[::-1][:d], evecs[:, ::-1][:, :d]  # (d,), (M, d)
    keep = evals > evals[0] * 1e-6 if evals[0] > 0 else np.zeros(d, dtype=bool)
    axes = evecs[:, keep]  # (M, d')
    signs = np.sign(axes[np.abs(axes).argmax(axis=0), np.arange(axes.shape[1])])  # (d',)
    return (axes * np.where(signs == 0, 1.0, signs)).astype(np.float32), evals[keep], mean


def pca(x: np.ndarray, dims: int, chunk: int = 16384) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Principal axes of the rows of x (N, M) -> (projections float32 (N, d), variances (d,), mean (M,)).

    The axes of ``principal_axes`` on all rows; all rows identical gives one zero column. Memory
    O(N d + M^2).
    """
    n = x.shape[0]
    axes, var, mean = principal_axes(x, dims, chunk)
    if axes.shape[1] == 0:
        return np.zeros((n, 1), dtype=np.float32), np.ones(1), mean
    out = np.empty((n, axes.shape[1]), dtype=np.float32)
    for i in range(0, n, chunk):
        out[i : i + chunk] = (x[i : i + chunk] - mean) @ axes
    return out, var, mean


def principal_space(
    x: np.ndarray, dims: int, chunk: int = 16384, max_rows: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's coordinates on the top ``dims`` principal axes and its distance from their subspace.

    -> (projections float32 (N, d), variances (d,), residual norms float32 (N,)). With ``max_rows`` and
    more rows than that, the axes come from ``max_rows`` evenly spaced rows (``spread``): O(max_rows M^2)
    instead of O(N M^2). ``||a - b||^2`` is the squared distance of the projections plus
    ``||r_a - r_b||^2`` of the residuals, which is at least the squared difference of the residual norms:
    so the distance between rows (projection, residual norm) is a lower bound of the raw one that still
    separates a row lying far off the main axes.
    """
    n = x.shape[0]
    sample = spread(n, max_rows) if max_rows is not None and n > max_rows else None
    axes, var, mean = principal_axes(x, dims, chunk, rows=sample)
    if axes.shape[1] == 0:
        axes, var = np.zeros((x.shape[1], 1), np.float32), np.ones(1)
    proj = np.empty((n, axes.shape[1]), dtype=np.float32)  # (N, d)
    resid = np.empty(n, dtype=np.float32)  # (N,)
    shift, msq = mean @ axes, float(mean @ mean)  # so the rows need not be centred (copied) first
    for i in range(0, n, chunk):
        c = x[i : i + chunk]  # (C, M)
        p = c @ axes - shift  # (C, d) = (c - mean) @ axes
        proj[i : i + chunk] = p
        csq = np.einsum("ij,ij->i", c, c) - 2 * (c @ mean) + msq  # |c - mean|^2
        resid[i : i + chunk] = np.sqrt(np.maximum(csq - np.einsum("ij,ij->i", p, p), 0))
    return proj, var, resid


def spread(n: int, m: int) -> np.ndarray:
    """min(n, m) evenly spaced row indices of n rows (int64, increasing): a sample with no seed."""
    m = min(n, m)
    return (np.arange(m) * (n / m)).astype(np.int64)
