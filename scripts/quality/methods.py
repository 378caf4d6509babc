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

from novelfind.ranking.solver import ADSConfig, ads

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
        for name in ("novelfind.ranking.driver", "novelfind.rank"):
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


def shipped_default(density_weight: float, kind: str = "logits") -> Callable:
    """The ``ads`` method's score (``novelfind.ranking.methods.ads_scores``) with another share for its
    density term: 1.0 is the default without its ADS term (the shipped density term alone, by the same
    code path as the default's at every N), 0.5 the default itself. The order is read as ``rank`` reads
    it (``novelfind.ranking.knn.certified_order``): exact as far as the near-duplicate pass reads; further
    down (above ``knn.EXACT_MAX_N`` rows) by upper bounds, which only AP sees."""

    def run(f: dict, k: int, seed: int) -> Scored:
        from novelfind.ranking.knn import certified_order
        from novelfind.ranking.methods import method_scores
        from novelfind.ranking.moments import dedup_order

        x = np.ascontiguousarray(f[kind], dtype=np.float32)
        share = {"density_weight": density_weight}
        sc = method_scores(x, k, "ads", ADSConfig(seed=seed), settings=share)
        if sc.exact is None:
            return _finish(np.asarray(sc.current(), dtype=np.float64), f, k, kind=kind)
        xn = _memo(f, ("l2n", kind), lambda: l2n(x))

        def walk(order: np.ndarray) -> int:
            picks, dropped = dedup_order(order, xn, k, DEDUP)
            return len(picks) + dropped if len(picks) == k else len(order)

        _, scores = certified_order(sc.current, sc.exact, sc.refine, walk, first=2 * k + 2 * KNN_K)
        return _finish(np.asarray(scores, dtype=np.float64), f, k, kind=kind)

    return run


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


def _finish(scores: np.ndarray, f: dict, k: int, full: bool = True, kind: str = "logits") -> Scored:
    order = np.lexsort((np.arange(len(scores)), -scores))
    if not full:
        order = order[: max(int((scores > 0).sum()), k)]
    xn = _memo(f, ("l2n", kind), lambda: l2n(np.asarray(f[kind], dtype=np.float32)))
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


def cleanlab_ood(kind: str = "pooled") -> Callable:
    """cleanlab's out-of-distribution score from features, through cleanlab's own code
    (``cleanlab.outlier.OutOfDistribution().fit_score(features=...)``, its defaults: k = 10 and the
    metric it picks for the dimension), lowest score first. Needs ``pip install cleanlab``."""

    def run(f: dict, k: int, seed: int) -> Scored:
        from cleanlab.outlier import OutOfDistribution

        x = np.asarray(f[kind], dtype=np.float32)
        score = OutOfDistribution().fit_score(features=x)  # (N,) in [0, 1], low = out of distribution
        return _finish(-np.asarray(score, dtype=np.float64), f, k)

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


# --------------------------------------------------------------------------- round three: views, k, cleaning

# Mid-level statistics in ``f["mid"]`` (extract.MID_BLOCKS): per block the channel means, then the stds.
MID_CHANNELS = {3: 24, 6: 32, 10: 64, 13: 96, 16: 160}
KS_MAX = 100  # largest neighbourhood measured; every smaller k is a prefix of the same neighbour lists


def _mid_block(f: dict, block: int) -> np.ndarray:
    """Block ``block``'s channel means and stds (N, 2C) out of the concatenated mid statistics."""
    start = 0
    for b, c in MID_CHANNELS.items():
        if b == block:
            return np.asarray(f["mid"][:, start : start + 2 * c], dtype=np.float32)
        start += 2 * c
    raise ValueError(f"no mid statistics for block {block}; blocks: {sorted(MID_CHANNELS)}")


def view(f: dict, name: str) -> np.ndarray:
    """One view of an image, rows L2-normalised: ``po`` the pooled vector as shipped (cosine k-NN's
    space), ``poc`` pooled mean-centred, ``lo`` / ``loc`` logits, ``b<block>`` a mid block's channel
    means and stds mean-centred, ``zb<block>`` the same with every column standardised first."""

    def make() -> np.ndarray:
        if name.startswith("ub"):  # uncentred
            return l2n(_mid_block(f, int(name[2:])))
        if name in ("po", "lo"):
            return l2n(np.asarray(f["pooled" if name == "po" else "logits"], dtype=np.float32))
        if name in ("poc", "loc"):
            x = np.asarray(f["pooled" if name == "poc" else "logits"], dtype=np.float32)
        elif name.startswith("zb"):
            x = _mid_block(f, int(name[2:]))
            x = x / np.maximum(x.std(0), 1e-6)
        elif name.startswith("b"):
            x = _mid_block(f, int(name[1:]))
        else:
            raise ValueError(f"unknown view {name!r}")
        return l2n(x - x.mean(0))

    return _memo(f, ("view", name), make)


def view_knn(f: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Distances (N, KS_MAX) ascending and indices of every row's nearest others in view ``name``."""
    return _memo(f, ("view-knn", name), lambda: knn(view(f, name), KS_MAX))


def rank_pct(v: np.ndarray) -> np.ndarray:
    """Rank percentiles in (0, 1]: the scale-free form in which scores of views and k are fused."""
    from scipy.stats import rankdata

    return rankdata(v) / len(v)


def knn_score(f: dict, name: str, k: int | str) -> np.ndarray:
    """Mean distance to the k nearest others in view ``name``; k = "t<j>": the distance to the j-th."""
    d, _ = view_knn(f, name)
    if isinstance(k, str):
        return d[:, min(int(k[1:]), d.shape[1]) - 1].copy()
    return d[:, : min(k, d.shape[1])].mean(1)


def cleaned_score(f: dict, name: str, k: int | str, frac: float, rounds: int) -> np.ndarray:
    """k-NN score with a cleaning pass: each round sets the top ``frac`` of the still clean rows aside and
    re-scores the clean rows against the clean rows only; at the end the set-aside rows are scored against
    the clean rest. A group of similar odd photos stops being its own neighbourhood once it is aside."""
    x = view(f, name)
    n = len(x)
    clean = np.ones(n, dtype=bool)
    score = knn_score(f, name, k)
    step = max(1, int(round(frac * n)))
    for _ in range(rounds):
        idx = np.flatnonzero(clean)
        top = idx[np.argsort(-score[idx], kind="stable")[:step]]
        clean[top] = False
        ref = np.flatnonzero(clean)
        kk = int(k[1:]) if isinstance(k, str) else k
        d, _ = knn(x[ref], kk)  # clean rows against the other clean rows
        da = _knn_to(x[~clean], x[ref], kk)  # the set-aside rows against the clean rows
        score = np.empty(n)
        score[ref] = d[:, -1] if isinstance(k, str) else d.mean(1)
        score[~clean] = da[:, -1] if isinstance(k, str) else da.mean(1)
    return score


def _knn_to(q: np.ndarray, ref: np.ndarray, k: int) -> np.ndarray:
    """Distances (len(q), k) ascending from each query row to its k nearest reference rows."""
    qt, rt = torch.from_numpy(np.ascontiguousarray(q)), torch.from_numpy(np.ascontiguousarray(ref))
    d2 = (qt * qt).sum(1)[:, None] + (rt * rt).sum(1)[None, :] - 2 * qt @ rt.T
    v, _ = torch.topk(d2, min(k, len(ref)), dim=1, largest=False)
    return v.clamp_min(0).sqrt().numpy().astype(np.float64)


def fused_score(
    f: dict,
    views: tuple[str, ...] = ("po",),
    ks: tuple[int | str, ...] = (KNN_K,),
    fuse: str = "mean",
    clean: tuple[float, int] | None = None,
    kfuse: str = "mean",
) -> np.ndarray:
    """Rank-fused k-NN score: for every view and k the score's rank percentile, fused over the ks of a
    view by ``kfuse``, then over the views by ``fuse`` ("mean" or "max"). ``clean`` = (fraction, rounds):
    the cleaning pass (``cleaned_score``)."""
    per_view = []
    for v in views:
        if clean is None:
            parts = [knn_score(f, v, k) for k in ks]
        else:
            parts = [
                _memo(f, ("clean", v, k, clean), lambda v=v, k=k: cleaned_score(f, v, k, *clean)) for k in ks
            ]
        if len(views) == 1 and len(ks) == 1:
            return parts[0]  # one score: its own order (identical to the baseline for views=("po",))
        per_view.append(_fuse(np.stack([rank_pct(p) for p in parts]), kfuse))
    return _fuse(np.stack(per_view), fuse)


def _fuse(stack: np.ndarray, how: str) -> np.ndarray:
    """(S, N) rank percentiles -> (N,): their mean, or their max (ties of the max broken by the mean)."""
    if how == "mean":
        return stack.mean(0)
    if how == "max":
        return stack.max(0) + 1e-3 * stack.mean(0)
    raise ValueError(f"fusion must be 'mean' or 'max', got {how!r}")


def fused_method(
    views: tuple[str, ...] = ("po",),
    ks: tuple[int | str, ...] = (KNN_K,),
    fuse: str = "mean",
    clean: tuple[float, int] | None = None,
    shortlist: float | None = None,
    ads_views: tuple[str, ...] | None = None,
    gamma: float = 0.0,
    kfuse: str = "mean",
) -> Callable:
    """Rank-fused k-NN (``fused_score``); with ``shortlist`` = c, ADS (Algorithm 1) chooses the K picks
    among the c x K best-scored images: the K whose mutual distances (in ``ads_views`` concatenated,
    default the scoring views) weigh most; with gamma > 0 on the graph D'_ij = w_i D_ij w_j, w = score
    rank percentile ** gamma (odd photos weigh more). The rest follow in score order."""

    def run(f: dict, k: int, seed: int) -> Scored:
        score = fused_score(f, views, ks, fuse, clean, kfuse)
        if shortlist is None:
            return _finish(score, f, k)
        n = len(score)
        m = min(n, int(round(shortlist * k)))
        cand = np.argsort(-score, kind="stable")[:m]
        x = np.hstack([view(f, v)[cand] for v in (ads_views or views)])  # (m, sum of view dims)
        w = rank_pct(score)[cand] ** gamma if gamma > 0 else None
        a = ads_weights(x, min(m, k), seed, w)
        out = rank_pct(score)  # in (0, 1]
        act = a > 0
        out[cand[act]] = 2.0 + a[act] / a[act].max()  # the ADS picks first, by weight
        return _finish(out, f, k)

    return run


# --------------------------------------------------------------------------- round four: groups of odd photos


def knn_groups(f: dict, name: str, q: float | None, mult: float) -> np.ndarray:
    """Tight groups: connected components of the k-NN graph (``view_knn``, KS_MAX neighbours) keeping
    the edges shorter than ``mult`` x the ``q`` quantile of the library's own 1-NN distances (q None:
    shorter than ``mult`` itself, a distance between unit vectors), i.e. single linkage at that
    threshold, limited to the k-NN graph so that it scales. -> component id per row."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    def make() -> np.ndarray:
        d, idx = view_knn(f, name)
        n = len(d)
        t = mult if q is None else mult * np.quantile(d[:, 0], q)
        keep = d.ravel() < t
        rows = np.repeat(np.arange(n), d.shape[1])[keep]
        g = csr_matrix((np.ones(int(keep.sum())), (rows, idx.ravel()[keep])), shape=(n, n))
        return connected_components(g, directed=False)[1]

    return _memo(f, ("groups", name, q, mult), make)


def outside_score(f: dict, name: str, k: int, q: float, mult: float, cap: int, smin: int = 2) -> np.ndarray:
    """Mean distance to the k nearest photos OUTSIDE the photo's own tight group (``knn_groups``); a
    group larger than ``cap`` photos or smaller than ``smin`` is not excluded (the photo keeps its plain
    k-NN score: a group smaller than k does not fill its own neighbourhood anyway). A batch of
    similar odd photos then scores by how far it lies from everything else, not by how close its
    members are to one another; a burst of an ordinary scene by its distance to other ordinary scenes."""
    d, idx = view_knn(f, name)
    lab = knn_groups(f, name, q, mult)
    size = np.bincount(lab)[lab]
    cap = min(cap, d.shape[1] - k)  # at most cap - 1 members in a row's list: k others always remain
    excl = (lab[idx] == lab[:, None]) & (size[:, None] <= cap) & (size[:, None] >= smin)
    dm = np.where(excl, np.inf, d)
    first = np.sort(dm, axis=1)[:, :k]
    return first.mean(1)


def group_method(
    k_out: int = KNN_K,
    q: float = 0.5,
    mult: float = 1.0,
    cap: int = 60,
    ks: tuple[int, ...] = (KNN_K,),
    fuse: str = "mean",
    view_name: str = "po",
    w_out: float = 1.0,
    smin: int = 2,
) -> Callable:
    """Group-aware k-NN: rank percentile of ``outside_score`` fused (``fuse``: mean / max) with the
    rank percentiles of the plain k-NN scores at ``ks`` (their mean first); ``w_out`` weighs the
    outside term in the mean. The K picks are the plain top K of the fused score."""

    def run(f: dict, k: int, seed: int) -> Scored:
        out = rank_pct(outside_score(f, view_name, k_out, q, mult, cap, smin))
        plain = np.mean([rank_pct(knn_score(f, view_name, kk)) for kk in ks], axis=0)
        if fuse == "mean":
            score = (w_out * out + plain) / (1 + w_out)
        elif fuse == "out":
            score = out
        else:
            score = _fuse(np.stack([out, plain]), fuse)
        return _finish(score, f, k)

    return run


GROUP_NN = 160  # neighbours kept for the group-aware scores: a group of up to cap members plus 50 outside


def distinct_count(f: dict, name: str, lab: np.ndarray, dup: float) -> np.ndarray:
    """Per row: how many distinct photos its group ``lab`` holds, near-duplicates (frames of one burst,
    closer than ``dup`` between unit vectors, chained) counted once."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    d, idx = view_knn(f, name)
    n = len(d)
    keep = d.ravel() < dup
    rows = np.repeat(np.arange(n), d.shape[1])[keep]
    g = csr_matrix((np.ones(int(keep.sum())), (rows, idx.ravel()[keep])), shape=(n, n))
    fine = connected_components(g, directed=False)[1]
    pairs = np.unique(np.stack([lab, fine], 1), axis=0)  # (group, fine component) pairs
    return np.bincount(pairs[:, 0], minlength=lab.max() + 1)[lab]


def outside_knn_scores(
    f: dict,
    name: str,
    ks: tuple[int, ...],
    q: float,
    mult: float,
    cap: int,
    smin: int,
    dup: float | None = None,
) -> list[np.ndarray]:
    """Per k in ``ks``: mean distance to the k nearest photos outside the photo's own tight group
    (``knn_groups``) when that group holds smin..cap photos (with ``dup``: smin distinct photos,
    ``distinct_count``); every other photo keeps its plain k-NN score. The neighbour lists hold
    GROUP_NN others, so cap + max(ks) <= GROUP_NN + 1 is required."""
    if cap - 1 + max(ks) > GROUP_NN:
        raise ValueError(f"cap {cap} + k {max(ks)} needs more than {GROUP_NN} neighbours")
    d, idx = _memo(f, ("view-knn-wide", name), lambda: knn(view(f, name), GROUP_NN))
    lab = knn_groups(f, name, q, mult)
    size = np.bincount(lab)[lab]
    many = size if dup is None else distinct_count(f, name, lab, dup)
    excl = (lab[idx] == lab[:, None]) & (size[:, None] <= cap) & (many[:, None] >= smin)
    srt = np.sort(np.where(excl, np.inf, d), axis=1)
    return [srt[:, :kk].mean(1) for kk in ks]


def group_multik_method(
    q: float = 0.9,
    mult: float = 1.25,
    cap: int = 60,
    smin: int = 12,
    ks: tuple[int, ...] = (3, 10, 50),
    plain_w: float = 0.0,
    kfuse: str = "mean",
    dup: float | None = None,
) -> Callable:
    """Group-aware multi-k: the rank percentiles of ``outside_knn_scores`` at ``ks``, fused by
    ``kfuse``; plain_w > 0 mixes in the plain multi-k score (weight plain_w against 1). A photo outside
    any mid-size tight group scores as knn-cos-multik does; a member of one (a batch of screenshots, a
    set of nebulae) is scored by how far the rest of the library lies from its group."""

    def run(f: dict, k: int, seed: int) -> Scored:
        parts = outside_knn_scores(f, "po", ks, q, mult, cap, smin, dup)
        score = _fuse(np.stack([rank_pct(p) for p in parts]), kfuse)
        if plain_w > 0:
            plain = np.mean([rank_pct(knn_score(f, "po", kk)) for kk in ks], axis=0)
            score = (score + plain_w * plain) / (1 + plain_w)
        return _finish(score, f, k)

    return run


def group_multik_multi_method(
    ts: tuple[float, ...], cap: int = 30, smin: int = 14, dup: float = 0.3, ks: tuple[int, ...] = (3, 10, 50)
) -> Callable:
    """Group-aware multi-k over several absolute linkage thresholds ``ts``: per threshold the score of
    ``group_multik_method`` (rank percentiles), the photo's score the max over thresholds. A photo in no
    qualifying group at any threshold keeps the plain multi-k score; a batch found at any threshold
    scores as the most isolated of the groups it belongs to."""

    def run(f: dict, k: int, seed: int) -> Scored:
        per_t = []
        for t in ts:
            parts = outside_knn_scores(f, "po", ks, None, t, cap, smin, dup)
            per_t.append(_fuse(np.stack([rank_pct(p) for p in parts]), "mean"))
        return _finish(np.max(np.stack(per_t), axis=0), f, k)

    return run
