"""Approximate Densest Subgraph (ADS): the paper's Algorithm 1.

Finds a K-sparse, non-negative, unit-norm vector ``s`` that (approximately) maximises
``s^T D s`` where ``D_ij = ||x_i - x_j||``, without ever forming ``D``.

One epoch t of Algorithm 1, as implemented here (both versions):

* Jacobi update: every image i (including those clipped to 0 at t-1, so they can come back)
  is updated from ``s^{t-1}``; no image sees another's new value within the epoch.
* Partners ``J_i^t`` are ``J`` draws (with replacement, like ``numpy.random.choice``; the active
  set may hold fewer than ``J`` images) from the active set ``{j : s_j^{t-1} > 0}``.
* ``Delta_i^t = sum_j ||x_i - x_j|| s_j^{t-1}``; for ``t >= 2`` it becomes
  ``(1 - beta) Delta_i^t + beta Delta_i^{t-1}`` (the first step has no momentum, as in the pseudocode).
* ``s_i^t = s_i^{t-1} + 2 alpha (N / J) Delta_i^t``. Eq. (component-2) puts ``N/J`` on the fresh sum
  inside the moving average, Algorithm 1 puts it outside; with ``N`` and ``J`` fixed the two are the
  same update. ``N`` is the number of images (the paper's factor), not the size of the active set.
* Keep the top ``K^t = floor(N - (N - K) t / E)`` entries (ties: lower index), then divide by the norm.

``ads_reference`` is the literal per-row loop. ``ads`` is the fast path: each epoch the rows are put in
a random order and cut into blocks of ``ADSConfig.block`` rows (smaller when N is small, so that there
are at least ``MIN_DRAWS`` blocks); all rows of one block share one draw of
``J`` partners, so the distances of a block are one matrix product
``||a - b||^2 = |a|^2 + |b|^2 - 2 a.b`` (on mean-centred rows, float32). Each row's partners still have
exactly the literal distribution; only rows in the same block share them. Extra memory is O(N) plus a
few blocks of rows: never N x N, never N x J x M. On CPU the blocks are spread over
``torch.get_num_threads()`` Python threads running single-threaded kernels (torch's thread count is
set to 1 for the duration of the call and restored), so the result does not depend on the thread count.
``restarts`` averages the weights of independent seeds, keeps the top K and renormalises.
"""

from __future__ import annotations

import math
import numbers
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from novelfind.ranking.adsconfig import ADSConfig

# Fewest independent partner draws per epoch on the fast path. With few blocks the shared draws start
# to cost objective value (scripts/bench_ads.py, 10 seeds: 1-3 blocks per epoch lose 1-2 seed-sd of J(S)
# against the literal version, 32 blocks ~1 sd at N = 1k, 64 or more are within noise), so small
# inputs get smaller blocks.
MIN_DRAWS = 64
PAPER = ADSConfig()  # the paper's settings, the default of ``ads`` and ``ads_reference``


@dataclass
class ADSResult:
    """Solver output."""

    weights: np.ndarray  # float32 (N,): K-sparse, non-negative, unit norm
    ranking: np.ndarray  # int64 (min(K, N),): indices, highest weight first, ties by index


def ads(features: Any, k: int, config: ADSConfig = PAPER, *, device: Any = None) -> ADSResult:
    """Approximate Densest Subgraph (the paper's Algorithm 1): the K images whose mutual distances weigh most.

    ``features``: a real (N, M) numpy array or torch tensor (CPU or CUDA), one row per image; ``k``:
    the support size K (>= 1; more than N means N). ``config``: E, J, alpha, beta, seed and restarts
    (:class:`ADSConfig`; the defaults are the paper's). ``device`` defaults to the tensor's device
    (CPU for numpy); the features are never copied on their device unless they must be moved there.
    Memory O(N M): the N x N distance matrix is never formed.

    Returns an :class:`ADSResult`: ``weights`` float32 (N,), K-sparse, non-negative, unit norm, and
    ``ranking`` int64 (min(K, N),), the rows by weight, highest first (ties: lower index). Raises
    ValueError for a shape other than (N, M) with N, M >= 1, a non-real dtype, NaN or infinite values,
    or k < 1.
    """
    x = _as_tensor(features, device)  # (N, M), any real dtype
    _check(tuple(x.shape), k)
    return solve(x, k, config)


def solve(features: Any, k: int, config: ADSConfig, *, device: Any = None) -> ADSResult:
    """``ads`` without its checks: ``features`` a finite real (N, M) array or tensor, N, M, k >= 1. For the
    callers inside the package (``novelfind.ranking.methods``), which check their input at their own
    boundary."""
    x = _as_tensor(features, device)  # (N, M)
    k = min(int(k), x.shape[0])
    mu, sq = _centred_stats(x)  # (M,) float32, (N,) float32
    threads = torch.get_num_threads()
    workers = threads if x.device.type == "cpu" else 1
    seeds = [_restart_seed(config.seed, r) for r in range(config.restarts)]
    if workers == 1:
        runs = [_solve_fast(x, mu, sq, k, config, sd, None, 1) for sd in seeds]
        return _finish(runs, k)
    torch.set_num_threads(1)  # kernels single-threaded; the blocks are spread over `workers` threads
    try:
        with ThreadPoolExecutor(workers) as pool:
            runs = [_solve_fast(x, mu, sq, k, config, sd, pool, workers) for sd in seeds]
    finally:
        torch.set_num_threads(threads)
    return _finish(runs, k)


def ads_reference(features: Any, k: int, config: ADSConfig = PAPER) -> ADSResult:
    """Literal Algorithm 1: one partner draw and one Python step per image (float64, CPU). Slow."""
    x = _as_tensor(features, "cpu")
    n, k = _check(tuple(x.shape), k)
    x64 = x.double().numpy()  # (N, M)
    if not np.isfinite(x64).all():
        raise ValueError("features contain NaN or infinite values")
    runs = []
    for r in range(config.restarts):
        rng = np.random.default_rng(_restart_seed(config.seed, r))
        s = np.full(n, 1.0 / math.sqrt(n))  # (N,) s^0
        delta = np.zeros(n)  # (N,) Delta^{t-1}
        for t in range(1, config.epochs + 1):
            active = np.flatnonzero(s > 0)  # {j : s_j^{t-1} > 0}
            new = np.empty(n)
            for i in range(n):
                js = active[rng.integers(0, active.size, config.partners)]  # (J,) with replacement
                raw = float(np.linalg.norm(x64[i] - x64[js], axis=1) @ s[js])
                d = raw if t == 1 else (1 - config.momentum) * raw + config.momentum * delta[i]
                new[i] = s[i] + 2 * config.lr * (n / config.partners) * d
                delta[i] = d
            s = _clip_normalise(torch.from_numpy(new), _k_at(n, k, t, config.epochs)).numpy()
        runs.append(torch.from_numpy(s))
    return _finish(runs, k)


# --------------------------------------------------------------------------- internals


def _as_tensor(features: Any, device: Any) -> torch.Tensor:
    if isinstance(features, torch.Tensor):
        x = features.detach()
    else:
        arr = np.asarray(features)
        if arr.dtype.kind not in "fiub":
            raise ValueError(f"features must be a real-valued array, got dtype {arr.dtype}")
        if arr.dtype.kind == "f" and arr.dtype.itemsize not in (2, 4, 8):
            arr = arr.astype(np.float64)
        if arr.ndim >= 1 and any(st < 0 for st in arr.strides):
            arr = np.ascontiguousarray(arr)
        x = torch.from_numpy(arr)
    if x.is_complex():
        raise ValueError(f"features must be real-valued, got dtype {x.dtype}")
    if device is not None:
        x = x.to(device)
    return x


def _check(shape: tuple[int, ...], k: int) -> tuple[int, int]:
    """Validate shapes and K; return (N, min(K, N))."""
    if len(shape) != 2:
        raise ValueError(f"features must be 2-D (N, M), got shape {shape}")
    n, m = shape
    if m == 0:
        raise ValueError(f"features have no columns (shape {shape})")
    if n == 0:
        raise ValueError(f"features have no rows (shape {shape})")
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    return n, min(int(k), n)


def _restart_seed(seed: int, restart: int) -> int:
    """Independent 63-bit seed per restart, derived from (seed, restart)."""
    return int(np.random.SeedSequence([seed, restart]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def _k_at(n: int, k: int, t: int, epochs: int) -> int:
    """K^t = floor(N - (N - K) t / E), in exact integer arithmetic."""
    return n - (-(-(n - k) * t // epochs))


def _rows(x: torch.Tensor, rows: torch.Tensor, mu: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    """Gather rows into a float32 buffer and centre them; (R,) -> (R, M)."""
    out = buf[: rows.numel()]  # (R, M)
    if x.dtype == torch.float32:
        torch.index_select(x, 0, rows, out=out)
    else:
        out.copy_(x.index_select(0, rows))
    return out.sub_(mu)


def _spread_rows(n: int, count: int, device: Any = None) -> torch.Tensor:
    """min(n, count) evenly spaced row indices from 0 to n - 1 (int64), exact for any n.

    Integer arithmetic: a float32 ``linspace`` rounds past 2**24 rows, as far as row n itself.
    """
    c = min(n, count)
    return torch.arange(c, device=device) * (n - 1) // max(c - 1, 1)


def _centred_stats(x: torch.Tensor, chunk: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """A centre (float32) and the squared norms of the centred rows, in one pass of bounded memory.

    Centring changes no distance but keeps |a|^2 + |b|^2 - 2 a.b well conditioned in float32. Any
    centre near the data works, so it is the mean of at most 8192 evenly spaced rows.
    """
    n, m = x.shape
    picks = _spread_rows(n, 8192, x.device)  # (min(N, 8192),)
    total = torch.zeros(m, dtype=torch.float64, device=x.device)  # (M,)
    for c0 in range(0, picks.numel(), 512):
        total += x.index_select(0, picks[c0 : c0 + 512]).to(torch.float64).sum(0)
    mu = (total / picks.numel()).to(torch.float32)  # (M,)
    sq = torch.empty(n, dtype=torch.float32, device=x.device)  # (N,)
    buf = torch.empty(min(chunk, n), m, dtype=torch.float32, device=x.device)  # (C, M)
    for c0 in range(0, n, chunk):
        xb = buf[: min(chunk, n - c0)]
        xb.copy_(x[c0 : c0 + chunk]).sub_(mu)  # (C, M)
        torch.linalg.vector_norm(xb, dim=1, out=sq[c0 : c0 + chunk])  # (C,)
    sq.square_()
    if not bool(torch.isfinite(sq).all()):
        if x.is_floating_point() and not all(
            bool(torch.isfinite(x[c0 : c0 + chunk]).all()) for c0 in range(0, n, chunk)
        ):
            raise ValueError("features contain NaN or infinite values")
        raise ValueError("features are too large for float32 distances (squared norm overflows)")
    return mu, sq


def _block_sums(
    x: torch.Tensor,
    mu: torch.Tensor,
    sq: torch.Tensor,
    s: torch.Tensor,
    rows: torch.Tensor,
    partners: torch.Tensor,
    bufs: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """sum_j ||x_i - x_j|| s_j for G blocks: rows (G, B), partners (G, J) -> (G, B) float64."""
    g, b = rows.shape
    j = partners.shape[1]
    xb = _rows(x, rows.reshape(-1), mu, bufs[0]).view(g, b, -1)  # (G, B, M)
    xp = _rows(x, partners.reshape(-1), mu, bufs[1]).view(g, j, -1)  # (G, J, M)
    d2 = torch.bmm(xb, xp.transpose(1, 2)).mul_(-2)  # (G, B, J)
    d2 += sq[rows].unsqueeze(2)  # + |x_i|^2
    d2 += sq[partners].unsqueeze(1)  # + |x_j|^2
    dist = d2.clamp_min_(0).sqrt_()  # (G, B, J)
    w = s[partners].to(torch.float32).unsqueeze(2)  # (G, J, 1)
    return torch.bmm(dist, w).squeeze(2).to(torch.float64)  # (G, B)


def _blocks_per_step(device: torch.device, block: int) -> int:
    """Blocks batched into one matrix product: one on CPU (cache-sized), ~64k rows on a GPU."""
    return max(1, 65536 // block) if device.type == "cuda" else 1


def _solve_fast(
    x: torch.Tensor,
    mu: torch.Tensor,
    sq: torch.Tensor,
    k: int,
    cfg: ADSConfig,
    seed: int,
    pool: ThreadPoolExecutor | None,
    workers: int,
) -> torch.Tensor:
    """One seed of the fast path; returns s^E as float64 (N,) on x's device.

    On CPU the blocks of an epoch are shared out to ``workers`` threads that each run single-threaded
    kernels on their own buffers (no per-kernel thread barriers, which stall badly on a busy machine).
    Every block writes its own rows, so the result does not depend on the number of workers.
    """
    n, m = x.shape
    dev = x.device
    gen = torch.Generator().manual_seed(seed)  # CPU stream: the same draws on every device
    b = min(cfg.block, -(-n // MIN_DRAWS))  # rows per block: at least MIN_DRAWS draws per epoch
    n_full = n // b  # blocks of exactly b rows; one shorter tail block if b does not divide n
    per_step = _blocks_per_step(dev, b)
    s = torch.full((n,), 1.0 / math.sqrt(n), dtype=torch.float64, device=dev)  # (N,) s^0
    delta = torch.zeros(n, dtype=torch.float64, device=dev)  # (N,) Delta^{t-1}
    raw = torch.empty(n, dtype=torch.float64, device=dev)  # (N,) this step's partner sums
    bufs = [
        (
            torch.empty(per_step * b, m, dtype=torch.float32, device=dev),  # (G*B, M) gathered rows
            torch.empty(per_step * cfg.partners, m, dtype=torch.float32, device=dev),  # (G*J, M) partners
        )
        for _ in range(workers)
    ]
    for t in range(1, cfg.epochs + 1):
        active = torch.nonzero(s > 0).squeeze(1)  # (A,) {j : s_j^{t-1} > 0}
        order = torch.randperm(n, generator=gen).to(dev)  # (N,) random block assignment
        n_blocks = -(-n // b)
        draw = torch.randint(0, active.numel(), (n_blocks, cfg.partners), generator=gen)
        partners = active[draw.to(dev)]  # (n_blocks, J), with replacement
        full = order[: n_full * b].view(n_full, b)  # (n_full, B)
        steps = [
            (full[g0 : g0 + per_step], partners[g0 : min(g0 + per_step, n_full)])
            for g0 in range(0, n_full, per_step)
        ]  # [((G, B), (G, J))]
        if n_full * b < n:
            steps.append((order[n_full * b :].view(1, -1), partners[n_full:]))  # tail block

        def work(w: int, s: torch.Tensor = s, steps: list = steps) -> None:
            for rows, parts in steps[w::workers]:
                raw[rows] = _block_sums(x, mu, sq, s, rows, parts, bufs[w])

        if pool is None:
            work(0)
        else:
            list(pool.map(work, range(workers)))
        if t == 1:
            delta.copy_(raw)
        else:
            delta.mul_(cfg.momentum).add_(raw, alpha=1 - cfg.momentum)
        s = s + (2 * cfg.lr * n / cfg.partners) * delta
        s = _clip_normalise(s, _k_at(n, k, t, cfg.epochs))
    return s


def _top_mask(v: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of the k largest entries of v (N,); ties go to the lower index. O(N)."""
    n = v.numel()
    if k >= n:
        return torch.ones(n, dtype=torch.bool, device=v.device)
    thr = v.kthvalue(n - k + 1).values  # k-th largest value
    mask = v > thr
    missing = k - int(mask.sum())
    tied = torch.nonzero(v == thr).squeeze(1)  # ascending indices
    mask[tied[:missing]] = True
    return mask


def _clip_normalise(s: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the top-k entries of s, zero the rest, scale to unit norm."""
    if not bool(torch.isfinite(s).all()):
        raise ValueError("weights overflowed; features are too large for these ADS settings")
    s = torch.where(_top_mask(s, k), s, torch.zeros_like(s))
    norm = torch.linalg.vector_norm(s)
    if not float(norm) > 0:  # cannot happen for non-negative updates; keep it explicit
        s = _top_mask(torch.zeros_like(s), k).to(s.dtype)
        norm = torch.linalg.vector_norm(s)
    return s / norm


def _finish(runs: list[torch.Tensor], k: int) -> ADSResult:
    """Average restarts, keep the top-k, renormalise, rank (ties by index)."""
    mean = torch.stack([r.detach().to("cpu", torch.float64) for r in runs]).mean(0)  # (N,)
    w = _clip_normalise(mean, k).numpy().astype(np.float32)  # (N,)
    picked = np.flatnonzero(w > 0)
    ranking = picked[np.lexsort((picked, -w[picked]))].astype(np.int64)
    return ADSResult(weights=w, ranking=ranking)
