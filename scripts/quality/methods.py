"""Ranking methods measured by the quality benchmark: the shipped ones and the candidates and ablations.

Shipped methods go through the ranking API (``api_rank``: the one call site, written so that it works
with ``novelfind.rank(features, k, method=...)`` as well as ``novelfind.rank.rank``). Everything else
here is a prototype on plain numpy/torch plus the shipped ADS solver (``novelfind.ads.ads``), so the
ablations do not depend on the ranking module's private helpers.

A method maps (features dict, k, seed) to a ``Scored``: a score per image (higher = more novel), the
picks (best first, K of them, near-duplicates of a higher pick skipped as the shipped ``rank`` does)
and whether the score orders all images or only a K-sparse support (then the rest is random for AP).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from novelfind.solver import ADSConfig, ads

DEDUP = 0.15  # the shipped default near-duplicate threshold (distance between L2-normalised features)
KNN_K = 10


@dataclass
class Scored:
    scores: np.ndarray  # float (N,)
    picks: np.ndarray  # int64 (K,)
    full: bool  # True when ``scores`` orders every image


# --------------------------------------------------------------------------- shipped API


def api_rank(x: np.ndarray, k: int, method: str, seed: int):
    """novelfind's ranking API, whichever shape it has: ``novelfind.rank`` callable or a module's ``rank``."""
    import novelfind

    fn = getattr(novelfind, "rank", None)
    if fn is None or not callable(fn):
        import importlib

        mod = None
        for name in ("novelfind.ranking", "novelfind.rank"):
            try:
                mod = importlib.import_module(name)
                break
            except ImportError:
                continue
        fn = mod.rank
        cfg_cls = getattr(mod, "ADSConfig", ADSConfig)
    else:
        cfg_cls = getattr(novelfind, "ADSConfig", ADSConfig)
    return fn(x, k, method=method, config=cfg_cls(seed=seed))


def shipped(method: str, kind: str = "logits") -> Callable:
    def run(f: dict, k: int, seed: int) -> Scored:
        r = api_rank(f[kind], k, method, seed)
        full = getattr(r, "all_scores", None)
        scores = np.asarray(full if full is not None else np.zeros(len(f[kind])), dtype=np.float64)
        return Scored(scores, np.asarray(r.indices, dtype=np.int64), method not in ("ads-paper",))

    return run


# --------------------------------------------------------------------------- building blocks


def features(f: dict, kind: str) -> np.ndarray:
    """Feature kind: logits | pooled | mid | a+b (each part scaled to unit mean squared norm) | cos:<kind>."""
    if kind.startswith("cos:"):
        return l2n(features(f, kind[4:]))
    if "+" in kind:
        parts = []
        for p in kind.split("+"):
            x = features(f, p)
            x = x - x.mean(0)
            parts.append(x / np.sqrt((x**2).sum(1).mean()))
        return np.hstack(parts).astype(np.float32)
    if kind == "logmid":  # log of the mid-level statistics (they are non-negative, heavy-tailed)
        return np.log1p(np.maximum(f["mid"], 0)).astype(np.float32)
    return np.asarray(f[kind], dtype=np.float32)


def l2n(x: np.ndarray) -> np.ndarray:
    return (x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def whiten(x: np.ndarray, dims: int = 64, floor: int | None = 32) -> np.ndarray:
    """PCA to ``dims`` axes; axis i divided by sqrt(max(var_i, var_floor)) (floor None: full whitening)."""
    x = np.asarray(x, dtype=np.float64)
    n, m = x.shape
    c = x - x.mean(0)
    d = min(dims, m, n - 1)
    if n <= m:  # the (N, N) Gram matrix is the smaller eigenproblem: projections = U sqrt(lambda)
        evals, u = np.linalg.eigh(c @ c.T)
        evals, u = np.maximum(evals[::-1][:d], 1e-12), u[:, ::-1][:, :d]
        proj = u * np.sqrt(evals)
    else:
        evals, evecs = np.linalg.eigh(c.T @ c)
        evals, evecs = np.maximum(evals[::-1][:d], 1e-12), evecs[:, ::-1][:, :d]
        proj = c @ evecs
    var = evals / max(n - 1, 1)
    var = var if floor is None else np.maximum(var, var[min(floor, d) - 1])
    return (proj / np.sqrt(var)).astype(np.float32)


def knn(x: np.ndarray, k: int = KNN_K, chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Exact k nearest other rows: (distances (N, k) ascending, indices (N, k))."""
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    sq = (xt * xt).sum(1)
    n = len(x)
    kk = min(k, n - 1)
    ds, ix = [], []
    for s in range(0, n, chunk):
        q = xt[s : s + chunk]
        d2 = sq[s : s + chunk, None] + sq[None, :] - 2 * q @ xt.T
        d2[torch.arange(len(q)), torch.arange(s, s + len(q))] = float("inf")
        v, i = torch.topk(d2, kk, dim=1, largest=False)
        ds.append(v.clamp_min(0).sqrt())
        ix.append(i)
    return torch.cat(ds).numpy().astype(np.float64), torch.cat(ix).numpy()


def robust_z(v: np.ndarray) -> np.ndarray:
    med = np.median(v)
    mad = np.median(np.abs(v - med)) * 1.4826
    return (v - med) / max(mad, 1e-12)


def dedup_picks(order: np.ndarray, xn: np.ndarray, k: int, thr: float = DEDUP) -> np.ndarray:
    """First k of ``order`` skipping any within ``thr`` of a kept one (rows of L2-normalised xn)."""
    kept: list[int] = []
    for i in order:
        if len(kept) == k:
            break
        if kept and np.min(np.linalg.norm(xn[kept] - xn[i], axis=1)) < thr:
            continue
        kept.append(int(i))
    if len(kept) < k:  # fewer distinct than k: the skipped ones fill up
        rest = [int(i) for i in order if int(i) not in set(kept)]
        kept += rest[: k - len(kept)]
    return np.asarray(kept, dtype=np.int64)


def ads_weights(x: np.ndarray, support: int, seed: int, w: np.ndarray | None = None) -> np.ndarray:
    """ADS (Algorithm 1) on the graph D'_ij = w_i ||x_i - x_j|| w_j -> (N,) weights, ``support``-sparse.

    w = None: the shipped solver (novelfind.ads.ads) on x. Otherwise the literal algorithm with the
    node weights (every row its own J partners from the active set), vectorised over rows.
    """
    n = len(x)
    if w is None:
        return np.asarray(ads(x, support, ADSConfig(seed=seed)).weights, dtype=np.float64)
    cfg = ADSConfig(seed=seed)
    rng = np.random.default_rng(seed)
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    wt = torch.from_numpy(w.astype(np.float32))
    s = np.full(n, 1 / np.sqrt(n))
    delta = np.zeros(n)
    for t in range(1, cfg.epochs + 1):
        active = np.flatnonzero(s > 0)
        part = torch.from_numpy(active[rng.integers(0, len(active), size=(n, cfg.partners))])  # (N, J)
        st = torch.from_numpy(s.astype(np.float32))
        raw = np.empty(n)
        for c in range(0, n, 4096):
            p = part[c : c + 4096]
            d = torch.linalg.vector_norm(xt[c : c + 4096, None, :] - xt[p], dim=2)  # (C, J)
            raw[c : c + 4096] = ((d * (wt[p] * st[p])).sum(1) * wt[c : c + 4096]).numpy()
        dt = raw if t == 1 else (1 - cfg.momentum) * raw + cfg.momentum * delta
        delta = dt
        new = s + 2 * cfg.lr * (n / cfg.partners) * dt
        kt = n - (-(-(n - support) * t // cfg.epochs))
        keep = np.argsort(-new, kind="stable")[:kt]
        s = np.zeros(n)
        s[keep] = new[keep]
        s /= np.linalg.norm(s)
    return s


def _finish(scores: np.ndarray, f: dict, k: int, full: bool = True) -> Scored:
    order = np.lexsort((np.arange(len(scores)), -scores))
    if not full:
        order = order[: max(int((scores > 0).sum()), k)]
    xn = _memo(f, ("l2n",), lambda: l2n(f["logits"]))
    return Scored(scores, dedup_picks(order, xn, k), full)


# --------------------------------------------------------------------------- candidates


def _k_nn(k_nn: int | str, k: int, n: int) -> int:
    """k_nn as a number, or 'K' / '2K' (relative to the number of picks), at least KNN_K."""
    if isinstance(k_nn, str):
        k_nn = max(KNN_K, int(k_nn[:-1] or 1) * k)
    return int(min(k_nn, n - 1))


def knn_method(kind: str = "logits", k_nn: int | str = KNN_K, white: str | None = None) -> Callable:
    """Mean distance to the k nearest neighbours; white: None | 'f<dims>_<floor>' | 'w<dims>' (full)."""

    def run(f: dict, k: int, seed: int) -> Scored:
        n = len(f["labels"])
        d, _ = knn_of(f, kind, white, _k_nn(k_nn, k, n))
        return _finish(d.mean(1), f, k)

    return run


def _memo(f: dict, key: tuple, compute: Callable):
    """Per-set cache (many methods share whitened features and neighbour lists)."""
    cache = f.setdefault("_memo", {})
    if key not in cache:
        cache[key] = compute()
    return cache[key]


def space(f: dict, kind: str, white: str | None) -> np.ndarray:
    """Features of ``kind`` in the space ``white`` (see _space), cached per set."""
    return _memo(f, ("space", kind, white), lambda: _space(features(f, kind), white))


def knn_of(f: dict, kind: str, white: str | None, k_nn: int) -> tuple[np.ndarray, np.ndarray]:
    return _memo(f, ("knn", kind, white, k_nn), lambda: knn(space(f, kind, white), k_nn))


def _space(x: np.ndarray, white: str | None) -> np.ndarray:
    if white is None:
        return x
    if white.startswith("f"):
        dims, floor = white[1:].split("_")
        return whiten(x, int(dims), int(floor))
    return whiten(x, int(white[1:]), None)


def iforest(kind: str = "logits") -> Callable:
    def run(f: dict, k: int, seed: int) -> Scored:
        from sklearn.ensemble import IsolationForest

        x = space(f, kind, None)
        m = IsolationForest(n_estimators=200, random_state=seed).fit(x)
        return _finish(-m.score_samples(x), f, k)

    return run


def ads_alone(kind: str = "logits", white: str | None = "f64_32", support: float = 1.0) -> Callable:
    """The shipped ADS solver alone (support K, or ``support`` x K), on the (whitened) features."""

    def run(f: dict, k: int, seed: int) -> Scored:
        x = space(f, kind, white)
        n = len(x)
        a = ads_weights(x, min(n, int(round(support * k))), seed)
        return _finish(a, f, k, full=False)

    return run


def blend(
    kind: str = "logits", white: str | None = "f64_32", wd: float = 0.5, dens_kind: str | None = None
) -> Callable:
    """The shipped default's recipe: (1-wd) * (robust z of ADS weights in a 2K support, +1) + wd * z(kNN).

    kNN on ``dens_kind`` features unwhitened (the shipped default: raw logits). wd = 1 is the default
    without its ADS term; white None is the default without whitening.
    """

    def run(f: dict, k: int, seed: int) -> Scored:
        n = len(f["labels"])
        d, _ = knn_of(f, dens_kind or kind, None, KNN_K)
        dens = robust_z(d.mean(1))
        if wd >= 1:
            return _finish(dens, f, k)
        a = ads_weights(space(f, kind, white), min(n, max(2 * k, k + KNN_K)), seed)
        za = np.zeros(n)
        act = a > 0
        za[act] = robust_z(a[act]) + 1.0 if act.sum() > 2 else 1.0
        return _finish((1 - wd) * za + wd * dens, f, k)

    return run


def ads_scaled(
    kind: str = "logits",
    white: str | None = "f64_32",
    gamma: float = 1.0,
    k_nn: int | str = KNN_K,
    support: float = 1.0,
    rest: str = "knn",
) -> Callable:
    """ADS on a density-aware graph: D'_ij = ||x_i - x_j|| (sigma_i sigma_j / median^2)^(gamma / 2),
    sigma_i = mean distance to the k_nn nearest neighbours. The objective then wants K images that are
    far apart *and* each in a sparse region. Images in the ADS support rank first by weight; the rest
    follow by sigma (rest='knn') so AP is defined.
    """

    def run(f: dict, k: int, seed: int) -> Scored:
        x = space(f, kind, white)
        n = len(x)
        d, _ = knn_of(f, kind, white, _k_nn(k_nn, k, n))
        sigma = d.mean(1)
        w = (sigma / np.median(sigma)) ** (gamma / 2)
        a = ads_weights(x, min(n, int(round(support * k))), seed, w)
        score = robust_z(sigma) - robust_z(sigma).max() - 1.0  # the rest: below every support member
        act = a > 0
        score[act] = a[act] / a[act].max() + 1.0
        if rest == "none":
            return _finish(np.where(act, score, 0.0), f, k, full=False)
        return _finish(score, f, k)

    return run


def ads_knn_space(
    kind: str = "logits", white: str | None = "f64_32", k_nn: int = KNN_K, support: float = 1.0
) -> Callable:
    """ADS on a kNN-normalised space: each row divided by the median kNN scale of its neighbourhood
    (x_i / median_j in N(i) sigma_j), so a tight cluster far away shrinks towards the origin."""

    def run(f: dict, k: int, seed: int) -> Scored:
        x = space(f, kind, white)
        n = len(x)
        d, idx = knn_of(f, kind, white, _k_nn(k_nn, k, n))
        sigma = d.mean(1)
        local = np.median(sigma[idx], axis=1)
        xs = x * (sigma / np.maximum(local, 1e-12))[:, None] ** 0.5
        a = ads_weights(xs, min(n, int(round(support * k))), seed)
        score = robust_z(sigma) - robust_z(sigma).max() - 1.0
        act = a > 0
        score[act] = a[act] / a[act].max() + 1.0
        return _finish(score, f, k)

    return run


def ads_rerank(
    kind: str = "logits",
    white: str | None = "f64_32",
    k_nn: int | str = KNN_K,
    pool: float = 2.0,
    gamma: float = 2.0,
    dens_white: str | None = None,
) -> Callable:
    """kNN proposes, ADS disposes: the ``pool`` x K images of highest kNN score form the candidate set,
    ADS on the density-aware graph (gamma) picks and orders K of them (diverse: one per cluster)."""

    def run(f: dict, k: int, seed: int) -> Scored:
        n = len(f["labels"])
        d, _ = knn_of(f, kind, dens_white, _k_nn(k_nn, k, n))
        sigma = d.mean(1)
        m = min(n, int(round(pool * k)))
        cand = np.argsort(-sigma, kind="stable")[:m]
        x = space(f, kind, white)[cand]
        w = (sigma[cand] / np.median(sigma)) ** (gamma / 2)
        a = ads_weights(x, min(m, k), seed, w)
        score = robust_z(sigma) - robust_z(sigma).max() - 2.0
        score[cand] = robust_z(sigma)[cand] - robust_z(sigma).max() - 1.0  # the rest of the pool
        act = a > 0
        score[cand[act]] = a[act] / a[act].max() + 1.0
        return _finish(score, f, k)

    return run
