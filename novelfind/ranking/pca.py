"""Principal component analysis of feature vectors: the ranking's whitening and search space, the
report's map (``map_2d``).

One implementation for a matrix in memory and for vectors read from the cache in chunks
(``novelfind.ranking.sources``): every pass goes over blocks of ``chunk`` rows (``sources.blocks``), so
both give the same axes bit for bit. The axes come from the covariance (M x M, float64, accumulated from
float32 block products), whose eigenvectors ``numpy.linalg.eigh`` returns, or for a few axes of a wide
covariance (the report's map: 2 of 1280) a block subspace iteration (``_top_eigh``: a few 1280 x 16 products
instead of a full eigendecomposition, which took 9 s on a busy 2-core machine); each axis points where its
largest loading is positive, so the result does not depend on the sign the eigensolver happens to return. Past
``max_rows`` rows the covariance is estimated on that many evenly spaced rows (``spread``): at 100,000
rows of 1000-d logits, 20,000 rows give the same subspace (principal angles' cosines above 0.99) for a
fifth of the O(rows M^2) cost. Passes over the rows: one to fit (the mean of all rows, and the sampled
rows gathered), one to project.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from novelfind.ranking.sources import BLOCK, FeatureSource, as_source, blocks

RELATIVE_FLOOR = 1e-6  # axes with less variance than this share of the largest carry only rounding
# At most this many axes of a covariance at least TRUNCATED_MIN_WIDTH wide come from ``_top_eigh`` (the map's
# 2 of 1280); more axes (the ranking's 64), or a narrower covariance, from a full ``numpy.linalg.eigh``.
TRUNCATED_MAX_AXES = 8
TRUNCATED_MIN_WIDTH = 256
TRUNCATED_BLOCK = 16  # vectors iterated together: the axes wanted, and the rest to speed them up
TRUNCATED_TOL = 1e-10  # residual |C v - l v| of every axis, relative to the largest eigenvalue
TRUNCATED_MAX_ITER = 120  # past this, a full eigendecomposition instead (a spectrum with no gap)


@dataclass
class Space:
    """Each row's coordinates on the top principal axes and its distance from their subspace."""

    proj: np.ndarray  # float32 (N, d) coordinates on the axes
    var: np.ndarray  # float64 (d,) variance along each axis
    resid: np.ndarray  # float32 (N,) norm of what the axes leave out of each (centred) row
    mean: np.ndarray  # float32 (M,) mean of all rows


def principal_axes(
    x: np.ndarray | FeatureSource, dims: int, chunk: int = BLOCK, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Principal axes of the rows of x (N, M) -> (axes float32 (M, d), variances (d,), mean (M,)).

    d = min(dims, M, n - 1) for the n rows used, less the axes with no variance (all rows identical: no
    axis, shape (M, 0)). The covariance (M, M) is accumulated over row blocks, so memory stays
    O(chunk M + M^2) and time O(n M^2); with fewer rows than dimensions (n < M) the axes come from the
    (n, n) Gram matrix instead (``_gram_axes``), O(n^2 M); ``rows`` (increasing indices) estimates it
    from those rows only (the mean from all), gathered in the pass that takes the mean. ``x`` must be
    finite (not checked).
    """
    src = as_source(x)
    m = src.dim
    use = None if rows is None else np.asarray(rows, dtype=np.int64)
    total = np.zeros(m, dtype=np.float64)
    gathered: list[np.ndarray] = []
    for start, b in blocks(src, chunk):
        total += b.sum(axis=0, dtype=np.float64)
        if use is not None:
            lo, hi = np.searchsorted(use, [start, start + len(b)])
            gathered.append(b[use[lo:hi] - start])
    mean = (total / src.n).astype(np.float32)  # (M,) of all rows
    if use is None:
        count = src.n
        parts = (b for _, b in blocks(src, chunk))
    else:
        count = len(use)
        sample = np.concatenate(gathered) if gathered else np.zeros((0, m), np.float32)
        parts = (sample[i : i + chunk] for i in range(0, count, chunk))
    d = int(min(dims, m, max(count - 1, 1)))
    if count < m:  # fewer rows than dimensions: the same axes from the (n, n) Gram matrix, far cheaper
        evals, evecs = _gram_axes(np.concatenate([part - mean for part in parts]), d)
    else:
        cov = np.zeros((m, m), dtype=np.float64)  # (M, M)
        for part in parts:
            c = part - mean  # (C, M) float32
            cov += c.T @ c
        evals, evecs = _top_eigh(cov, d)  # (d,) descending, (M, d)
    evals = evals / max(count - 1, 1)
    keep = evals > evals[0] * RELATIVE_FLOOR if evals[0] > 0 else np.zeros(d, dtype=bool)
    axes = evecs[:, keep]  # (M, d')
    signs = np.sign(axes[np.abs(axes).argmax(axis=0), np.arange(axes.shape[1])])  # (d',)
    return (axes * np.where(signs == 0, 1.0, signs)).astype(np.float32), evals[keep], mean


def fit_space(
    x: np.ndarray | FeatureSource, dims: int, chunk: int = BLOCK, max_rows: int | None = None
) -> Space:
    """The rows' coordinates on the top ``dims`` principal axes and their distances from the axes.

    With ``max_rows`` and more rows than that, the axes come from ``max_rows`` evenly spaced rows
    (``spread``). ``||a - b||^2`` is the squared distance of the projections plus ``||r_a - r_b||^2`` of
    the residuals, which lies between ``(|r_a| - |r_b|)^2`` and ``(|r_a| + |r_b|)^2``: so the rows'
    (projection, residual norm) bound every raw distance from below and from above without the raw
    vectors. All rows identical: one zero axis.
    """
    src = as_source(x)
    n = src.n
    if max_rows is not None and n > max_rows:
        sample = spread(n, max_rows)
    elif src.matrix is None and max_rows is not None:
        sample = np.arange(n)  # a source read in chunks: gathered while the mean is taken (one pass fewer)
    else:
        sample = None
    axes, var, mean = principal_axes(src, dims, chunk, rows=sample)
    if axes.shape[1] == 0:
        axes, var = np.zeros((src.dim, 1), np.float32), np.ones(1)
    proj = np.empty((n, axes.shape[1]), dtype=np.float32)  # (N, d)
    resid = np.empty(n, dtype=np.float32)  # (N,)
    shift, msq = mean @ axes, float(mean @ mean)  # so the rows need not be centred (copied) first
    for i, c in blocks(src, chunk):  # c (C, M)
        p = c @ axes - shift  # (C, d) = (c - mean) @ axes
        proj[i : i + len(c)] = p
        csq = np.einsum("ij,ij->i", c, c) - 2 * (c @ mean) + msq  # |c - mean|^2
        resid[i : i + len(c)] = np.sqrt(np.maximum(csq - np.einsum("ij,ij->i", p, p), 0))
    return Space(proj=proj, var=var, resid=resid, mean=mean)


def pca(
    x: np.ndarray | FeatureSource, dims: int, chunk: int = BLOCK
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Principal axes of the rows of x (N, M) -> (projections float32 (N, d), variances (d,), mean (M,)).

    The axes of ``principal_axes`` on all rows; all rows identical gives one zero column. Memory
    O(N d + M^2). ``x`` a matrix or a source read in chunks: the same numbers bit for bit.
    """
    src = as_source(x)
    axes, var, mean = principal_axes(src, dims, chunk)
    if axes.shape[1] == 0:
        return np.zeros((src.n, 1), dtype=np.float32), np.ones(1), mean
    out = np.empty((src.n, axes.shape[1]), dtype=np.float32)
    for i, c in blocks(src, chunk):
        out[i : i + len(c)] = (c - mean) @ axes
    return out, var, mean


def map_2d(x: np.ndarray | FeatureSource, chunk: int = BLOCK) -> np.ndarray:
    """Where the report's map puts each row: its coordinates on the top two principal axes of all the
    rows as they are (``pca``) -> float32 (N, 2).

    One computation whether the vectors are a matrix in memory or a source read from the cache in
    chunks (the same axes and coordinates bit for bit); signs are fixed, so the map is deterministic.
    The two axes of a wide covariance come from ``_top_eigh``'s subspace iteration, run in one BLAS
    thread.
    Fewer than two rows, no columns or no spread give zeros. Raises ValueError for a matrix that is not
    2-D, or NaN or infinite values.
    """
    if isinstance(x, np.ndarray) and x.ndim != 2:
        raise ValueError(f"features must be 2-D (N, M), got shape {x.shape}")
    src = as_source(x)
    if src.n < 2 or src.dim == 0:
        return np.zeros((src.n, 2), dtype=np.float32)
    if not np.isfinite(src.abs_max()):  # a source read in chunks raises ValueError itself
        raise ValueError("features contain NaN or inf")
    from threadpoolctl import threadpool_limits

    # one BLAS thread: these products are small, and a second thread that waits for a core on a busy
    # machine stalls them (the map took 1.2-3.1 s with two threads at load 10, 0.3-0.5 s with one)
    with threadpool_limits(limits=1, user_api="blas"):
        proj, _, _ = pca(src, 2, chunk)  # (N, d), d <= 2
    return np.pad(proj, ((0, 0), (0, 2 - proj.shape[1])))


def spread(n: int, m: int) -> np.ndarray:
    """min(n, m) evenly spaced row indices of n rows (int64, increasing): a sample with no seed."""
    m = min(n, m)
    return (np.arange(m) * (n / m)).astype(np.int64)


def _gram_axes(c: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The top ``d`` eigenpairs of the scatter ``c.T @ c`` of centred rows c (n, M) with n < M, from the
    (n, n) Gram matrix ``c @ c.T``, which has the same nonzero eigenvalues: an eigenvector u of the Gram
    matrix gives the axis ``c.T @ u / sqrt(eigenvalue)``. O(n^2 M + n^3) instead of O(n M^2 + M^3): for
    the 80 photos of a small library, milliseconds instead of a 1000 x 1000 eigendecomposition (2.7 s of
    a 4-photo scan's 5.5 s on a busy 2-core machine). Eigenvalues descending, axes (M, d) unit length."""
    c64 = c.astype(np.float64)
    evals, u = np.linalg.eigh(c64 @ c64.T)  # ascending, (n,), (n, n)
    evals, u = evals[::-1][:d], u[:, ::-1][:, :d]
    axes = c64.T @ u  # (M, d), column norms sqrt(eigenvalue)
    norms = np.linalg.norm(axes, axis=0)
    return np.maximum(evals, 0.0), axes / np.where(norms > 0, norms, 1.0)


def _top_eigh(cov: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The top ``d`` eigenpairs of the symmetric ``cov`` (M, M): eigenvalues descending (d,), unit
    eigenvectors (M, d) (signs as they come).

    Few axes of a wide matrix (``d <= TRUNCATED_MAX_AXES``, ``M >= TRUNCATED_MIN_WIDTH``): block subspace
    iteration with Rayleigh-Ritz, ``TRUNCATED_BLOCK`` vectors from a fixed pseudo-random start (so the
    same matrix gives the same axes in every run), until every wanted pair has a residual below
    ``TRUNCATED_TOL`` of the largest eigenvalue. Each step costs one (M, M) x (M, 16) product; on MobileNet
    features (2,046 photos, 1280-d) the map's two axes took 11 steps, 0.15 s on a busy 2-core machine
    against 1.3 s for ``numpy.linalg.eigh`` (9.8 s with two BLAS threads), and agree with it to 1e-14.
    The error of an axis is its residual over the gap to the next eigenvalue; where there is no gap to
    speak of (noise alone, the axes not unique anyway) the iteration stops after ``TRUNCATED_MAX_ITER``
    steps and the full ``numpy.linalg.eigh`` answers instead. Otherwise, and for more axes or a narrower
    matrix, ``numpy.linalg.eigh``.
    """
    m = cov.shape[0]
    if d <= TRUNCATED_MAX_AXES and m >= TRUNCATED_MIN_WIDTH:
        found = _subspace_iteration(cov, d)
        if found is not None:
            return found
    evals, evecs = np.linalg.eigh(cov)  # ascending
    return evals[::-1][:d], evecs[:, ::-1][:, :d]


def _subspace_iteration(cov: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``_top_eigh`` by block subspace iteration; None when it has not converged in
    ``TRUNCATED_MAX_ITER`` steps."""
    m = cov.shape[0]
    b = min(m, max(TRUNCATED_BLOCK, 2 * d))
    start = np.random.default_rng(0).standard_normal((m, b))  # a fixed start: the same axes every run
    q, _ = np.linalg.qr(cov @ start)  # (M, b) orthonormal
    for _ in range(TRUNCATED_MAX_ITER):
        z = cov @ q  # (M, b)
        h = q.T @ z  # (b, b) Rayleigh quotient
        theta, u = np.linalg.eigh((h + h.T) / 2)  # ascending
        theta, u = theta[::-1], u[:, ::-1]
        vecs = q @ u[:, :d]  # (M, d) Ritz vectors
        resid = np.linalg.norm(z @ u[:, :d] - vecs * theta[:d], axis=0)  # |C v - theta v|, (d,)
        scale = max(abs(float(theta[0])), np.finfo(np.float64).tiny)
        if float(resid.max()) <= TRUNCATED_TOL * scale:
            norms = np.linalg.norm(vecs, axis=0)
            return theta[:d].copy(), vecs / norms
        q, _ = np.linalg.qr(z)
    return None
