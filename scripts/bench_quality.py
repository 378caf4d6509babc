#!/usr/bin/env python3
"""Ranking quality on labelled sets built from package images (scripts/photosets.py).

For every set and seed the images are built, featurised with MobileNet-V2 (1000-d logits and
1280-d pooled features, cached on disk) and ranked by each method. Scores: precision, recall and
F1 at K = number of planted novelties, and average precision over the ranking (picks first, then
the rest in the method's score order, or in random order for a method that only ranks K).

    python scripts/bench_quality.py                       # all sets, 5 seeds, the main methods
    python scripts/bench_quality.py --sets mnist,defects --seeds 2 --methods ads,knn
    python scripts/bench_quality.py --timing 100000       # add the N = 100k timing (synthetic features)

Prints a markdown table and writes JSON (``--out``, default bench_quality.json).

Besides the shipped methods (novelfind.ranking.METHODS, run through ``rank()`` with its default
near-duplicate threshold; ``+dd<t>`` sets it, ``+dd0`` turns it off), ``--methods`` takes the
variants that were compared to choose the default (see ``_variant``): ``ads-w`` / ``knn-w`` (full
whitening to 32 axes), ``maha``, ``knn-s<f>`` / ``ads-s<f>`` (all axes, loud ones scaled to the f-th),
``F<d>f<f>w<weight>`` (ADS + density both in the d-axis space), ``G<d>f<f>w<weight>`` (ADS in that
space + density in raw space: G64f32w0.5 is the shipped default). Append ``@pooled`` to use the
1280-d pooled features instead of the 1000-d logits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import photosets as datasets
from baselines import BASELINES

from novelfind import ranking as rank_mod
from novelfind.solver import ADSConfig

CACHE = Path(os.environ.get("NOVELFIND_BENCH_CACHE", Path.home() / ".cache" / "novelfind-bench"))

# --------------------------------------------------------------------------- features


class _ProjectExtractor:
    """novelfind.features.build_extractor, once for logits and once for pooled features."""

    def __init__(self) -> None:
        from novelfind.features import build_extractor

        self.logits = build_extractor(feature="logits", device="cpu")
        self.pooled = build_extractor(feature="pooled", device="cpu")
        self.model_key = "project-" + str(getattr(self.logits, "model_key", "?"))

    def both(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.logits(batch), self.pooled(batch)


_EXTRACTOR = None


def extractor():
    """The shipped extractor (built once)."""
    global _EXTRACTOR
    if _EXTRACTOR is None:
        _EXTRACTOR = _ProjectExtractor()
    return _EXTRACTOR


def set_features(name: str, seed: int, src=None, batch: int = 32) -> dict:
    """Features and labels of set ``name`` with ``seed``, cached under CACHE."""
    from novelfind.decode import PREPROCESS_VERSION, to_model_input

    ext = extractor()
    key = hashlib.sha1(
        f"{name}-{seed}-{ext.model_key}-{PREPROCESS_VERSION}-{datasets.SIDE}".encode()
    ).hexdigest()[:12]
    path = CACHE / f"{name}-s{seed}-{key}.npz"
    if path.is_file():
        z = np.load(path)
        return {k: z[k] for k in z.files}
    s = datasets.build_set(name, seed, src)
    pix = np.stack([to_model_input(im) for im in s.images])  # (N, 224, 224, 3) uint8
    logits, pooled = [], []
    for i in range(0, len(pix), batch):
        lo, po = ext.both(pix[i : i + batch])
        logits.append(lo)
        pooled.append(po)
    out = {
        "logits": np.concatenate(logits).astype(np.float32),
        "pooled": np.concatenate(pooled).astype(np.float32),
        "labels": s.labels,
        "groups": s.groups,
    }
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)
    return out


# --------------------------------------------------------------------------- methods


def _shrink_whiten(x: np.ndarray, d: int) -> np.ndarray:
    mean = x.mean(0)
    c = x - mean
    evals, evecs = np.linalg.eigh(np.cov(c.T))
    evals, evecs = evals[::-1], evecs[:, ::-1]
    floor = evals[min(d, len(evals) - 1)]
    return (c @ (evecs / np.sqrt(np.maximum(evals, floor)))).astype(np.float32)


def _whiten_resid(x: np.ndarray, d: int = 32) -> np.ndarray:
    mean = x.mean(0)
    c = x - mean
    evals, evecs = np.linalg.eigh(np.cov(c.T))
    evals, evecs = evals[::-1], evecs[:, ::-1]
    p = c @ evecs[:, :d]
    r = np.linalg.norm(c - p @ evecs[:, :d].T, axis=1)
    return np.hstack([p / np.sqrt(evals[:d]), (r / np.sqrt((r**2).mean()) * np.sqrt(1))[:, None]]).astype(
        np.float32
    )


def _hyb(xa: np.ndarray, xk: np.ndarray, k: int, cfg, wd: float) -> np.ndarray:
    n = len(xa)
    dens = rank_mod._zscore(rank_mod.knn_scores(xk))
    a = rank_mod._ads_scores(xa, min(n, max(2 * k, k + 10)), cfg)
    za = np.zeros(n)
    act = a > 0
    za[act] = rank_mod._zscore(a[act]) + 1.0
    return (1 - wd) * za + wd * dens


def _variant(x: np.ndarray, k: int, name: str, cfg) -> np.ndarray:
    """Experimental scorers (not shipped) used to choose the default."""
    if name == "ads-w":  # ADS on whitened features, K support
        return rank_mod._ads_scores(rank_mod.whiten(x), k, cfg)
    if name == "ads-l2":
        return rank_mod._ads_scores(rank_mod.l2_normalise(x), k, cfg)
    if name == "knn-w":
        return rank_mod.knn_scores(rank_mod.whiten(x))
    if name == "knn-l2":
        return rank_mod.knn_scores(rank_mod.l2_normalise(x))
    if name == "maha":  # distance from the mean in whitened space
        w = rank_mod.whiten(x)
        return np.linalg.norm(w, axis=1)
    if name.startswith(("knn-s", "ads-s", "hyb-s")):  # shrink-whitening: top d scaled to the d-th variance
        kind, d = name.split("-s")
        w = _shrink_whiten(x, int(d))
        if kind == "knn":
            return rank_mod.knn_scores(w)
        if kind == "ads":
            return rank_mod._ads_scores(w, k, cfg)
        return _hyb(w, w, k, cfg, 0.5)
    if name.startswith(("knn-wr", "ads-wr")):
        w = _whiten_resid(x)
        return rank_mod.knn_scores(w) if name.startswith("knn") else rank_mod._ads_scores(w, k, cfg)
    if name.startswith("F"):  # F<dims>f<floor>w<density weight>[k<knn k>]
        dims, rest = name[1:].split("f")
        floor, wd = rest.split("w")
        w = rank_mod.whiten(x, int(dims), floor=int(floor))
        if wd == "knn":
            return rank_mod.knn_scores(w)
        if wd == "ads":
            return rank_mod._ads_scores(w, k, cfg)
        return _hyb(w, w, k, cfg, float(wd))
    if name.startswith("G"):  # ADS in F-space + knn in raw space
        dims, rest = name[1:].split("f")
        floor, wd = rest.split("w")
        w = rank_mod.whiten(x, int(dims), floor=int(floor))
        return _hyb(w, x, k, cfg, float(wd))
    if name.startswith("hybR"):  # ADS whitened + knn raw
        return _hyb(rank_mod.whiten(x), x, k, cfg, float(name[4:]))
    if name.startswith("hyb"):  # hyb<density weight>
        return rank_mod.default_scores(x, k, cfg, density_weight=float(name[3:]))
    raise ValueError(name)


def bench_rank(feats: dict, k: int, method: str, seed: int):
    """Run ``method`` ("name" or "name@pooled") on a cached set; shipped methods go through rank()."""
    name, _, kind = method.partition("@")
    x = feats[kind or "logits"]
    cfg = ADSConfig(seed=seed)
    dedup = None  # rank(): the default threshold; variants: no dedup
    if "+dd" in name:
        name, _, thr = name.partition("+dd")
        dedup = float(thr)
    if name in rank_mod.METHODS:
        return rank_mod.rank(x, k, method=name, config=cfg, dedup=dedup)
    if name in BASELINES:
        scores = BASELINES[name](x, seed)
    else:
        scores = _variant(x, k, name, cfg)
    order = np.lexsort((np.arange(len(scores)), -scores))
    picks, dropped = rank_mod.dedup_order(order, rank_mod.l2_normalise(x), k, dedup)
    return rank_mod.Ranking(
        indices=picks,
        scores=scores[picks],
        neighbour=picks * 0,
        distance=scores[picks],
        duplicates_dropped=dropped,
        all_scores=scores,
    )


# --------------------------------------------------------------------------- scoring


def scores_at_k(picks: np.ndarray, labels: np.ndarray) -> dict:
    k = int(labels.sum())
    hit = int(labels[picks[:k]].sum())
    p = hit / max(len(picks[:k]), 1)
    r = hit / max(k, 1)
    f1 = 0.0 if hit == 0 else 2 * p * r / (p + r)
    return {"precision": p, "recall": r, "f1": f1}


def average_precision(order: np.ndarray, labels: np.ndarray) -> float:
    rel = labels[order].astype(np.float64)
    hits = np.cumsum(rel)
    prec = hits / np.arange(1, len(rel) + 1)
    return float((prec * rel).sum() / max(labels.sum(), 1))


def full_order(r, n: int, seed: int) -> np.ndarray:
    """Picks first, then the rest by the method's full score when it has one, else randomly."""
    picks = np.asarray(r.indices)
    rest_mask = np.ones(n, dtype=bool)
    rest_mask[picks] = False
    full = getattr(r, "all_scores", None)
    rest = np.flatnonzero(rest_mask)
    if full is not None:
        rest = rest[np.argsort(-full[rest], kind="stable")]
    else:
        rest = np.random.default_rng(seed).permutation(rest)
    return np.concatenate([picks, rest])


def duplicate_picks(picks: np.ndarray, groups: np.ndarray) -> int:
    """Picks that share a burst with a higher-ranked pick."""
    seen, dup = set(), 0
    for i in picks:
        g = int(groups[i])
        if g >= 0 and g in seen:
            dup += 1
        seen.add(g)
    return dup


def run(sets: list[str], seeds: int, methods: list[str]) -> dict:
    src = datasets.load_sources()
    rows = []
    for name in sets:
        for seed in range(seeds):
            t0 = time.time()
            feats = set_features(name, seed, src)
            labels = feats["labels"].astype(bool)
            k = int(labels.sum())
            t_feat = time.time() - t0
            for m in methods:
                t1 = time.perf_counter()
                r = bench_rank(feats, k, m, seed=seed)
                dt = time.perf_counter() - t1
                sc = scores_at_k(np.asarray(r.indices), labels)
                ap = average_precision(full_order(r, len(labels), seed), labels)
                rows.append(
                    {
                        "set": name,
                        "seed": seed,
                        "method": m,
                        "n": len(labels),
                        "k": k,
                        **sc,
                        "ap": ap,
                        "dup_picks": duplicate_picks(np.asarray(r.indices)[:k], feats["groups"]),
                        "seconds": dt,
                    }
                )
            print(f"{name} seed {seed}: N={len(labels)} K={k} features {t_feat:.1f}s", file=sys.stderr)
    return {"rows": rows}


def summarise(rows: list[dict], sets: list[str], methods: list[str]) -> tuple[str, dict]:
    def mean(m, s, key):
        v = [r[key] for r in rows if r["method"] == m and r["set"] == s]
        return float(np.mean(v)), float(np.std(v))

    summary: dict = {}
    lines = ["| method | " + " | ".join(sets) + " | mean F1 | mean AP |", "|---" * (len(sets) + 3) + "|"]
    for m in methods:
        cells, f1s, aps = [], [], []
        for s in sets:
            f1, f1sd = mean(m, s, "f1")
            ap, _ = mean(m, s, "ap")
            f1s.append(f1)
            aps.append(ap)
            summary.setdefault(m, {})[s] = {
                "f1": f1,
                "f1_std": f1sd,
                "ap": ap,
                "precision": mean(m, s, "precision")[0],
                "recall": mean(m, s, "recall")[0],
                "dup_picks": mean(m, s, "dup_picks")[0],
            }
            cells.append(f"{f1:.2f} / {ap:.2f}")
        summary[m]["_mean"] = {"f1": float(np.mean(f1s)), "ap": float(np.mean(aps))}
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {np.mean(f1s):.3f} | {np.mean(aps):.3f} |")
    return "\n".join(lines), summary


def timing(
    n: int, dim: int = 1000, k: int = 50, methods=("ads", "knn", "ads-paper"), brute: bool = True
) -> dict:
    """Seconds per method on synthetic (n, dim) features; brute-force exact kNN for reference."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(20, dim)).astype(np.float32) * 3
    x = centres[rng.integers(0, 20, size=n)] + rng.normal(size=(n, dim)).astype(np.float32)  # (n, dim)
    out = {"n": n, "dim": dim, "k": k}
    for m in methods:
        t = time.perf_counter()
        rank_mod.rank(x, k, method=m)
        out[m] = time.perf_counter() - t
        print(f"timing {m}: {out[m]:.1f}s", file=sys.stderr)
    if brute:
        t = time.perf_counter()
        rank_mod.knn_scores(x, 10, exact=True)
        out["brute-force-knn"] = time.perf_counter() - t
        print(f"timing brute-force kNN: {out['brute-force-knn']:.1f}s", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default=",".join(datasets.SETS))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--methods", default="ads,ads-paper,power,knn,iforest,ads+dd0,ads@pooled,knn@pooled")
    ap.add_argument(
        "--timing", type=int, default=0, help="also time the methods at this N (synthetic features)"
    )
    ap.add_argument("--out", default="bench_quality.json")
    a = ap.parse_args()
    sets = a.sets.split(",")
    methods = a.methods.split(",")
    res = run(sets, a.seeds, methods)
    table, summary = summarise(res["rows"], sets, methods)
    res["summary"] = summary
    res["table"] = table
    res["machine"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "extractor": extractor().model_key,
    }
    print("F1 at K / average precision, mean over seeds\n")
    print(table)
    if a.timing:
        res["timing"] = timing(a.timing)
        t = res["timing"]
        print(
            f"\nN = {t['n']}, M = {t['dim']}, K = {t['k']}: "
            + ", ".join(f"{m} {v:.1f}s" for m, v in t.items() if m not in ("n", "dim", "k"))
        )
    Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
