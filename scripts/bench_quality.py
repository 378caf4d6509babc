#!/usr/bin/env python3
"""Ranking quality on labelled sets of real pictures: a dev split for choosing, a test split for reporting.

Sets, sources and the split: ``scripts/quality/sets.py`` (``SPLITS``, fixed before any method was compared).
Each set is drawn independently per seed (other source pictures, crops, classes); features come from the
shipped MobileNet-V2 (``scripts/quality/extract.py``, cached under $NOVELFIND_DATA/features-v1).

Protocol: choose anything (methods, constants, features) on ``--split dev`` (and ``dev-library``); run
``--split test`` and ``test-library`` only to report. Scores per set and seed: F1 at K = number of planted
novelties (the picks after near-duplicate removal) and average precision over the method's full order
(a method that scores only a K-sparse support has the rest in random order), and group coverage: of the
labelled novelty groups (``LabelledSet.novelty_groups``: a batch of screenshots or pages, a digit class, a
source picture; a planted fault is its own group) the share with at least one of the K picks. Tables give
mean +- standard deviation over the seeds (independent draws); the summary line averages the sets per seed
first, and the paired differences in mean F1 and coverage against ``--baseline`` (default knn-cos@po) come
with a 95 % t-interval over the draws.

    python scripts/bench_quality.py --split dev                      # the ablation table on dev, 5 draws
    python scripts/bench_quality.py --split test --out test.json     # the reported table
    python scripts/bench_quality.py --split test-library --seeds 1   # 30,000-picture sets
    python scripts/bench_quality.py --split test --first-seed 3 --seeds 2 --add-to test.json  # 2 more draws
    python scripts/bench_quality.py --split dev --methods default,knn,scaled-g2
    python scripts/bench_quality.py --report docs/bench/quality-dev-r3-final.json --baseline r3-po-k1k10k50

Methods: ``ABLATIONS`` (the table) and ``CANDIDATES`` (research on dev); shipped methods are called
through novelfind's ranking API (``quality.methods.api_rank``), so a new default is measured the same way.
Run with ``nice -n 10``: a 30,000-picture set takes ~20-50 min to featurise on two busy cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# One BLAS / torch thread: on a busy shared machine multi-threaded BLAS spins and runs 10-40x slower
# (a 1000 x 1000 eigendecomposition: 29 s with two threads at load 15, 2.5 s with one).
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from harness import machine, write_json  # noqa: E402
from quality import extract, pins, sets  # noqa: E402
from quality import methods as M  # noqa: E402

# The table: the shipped default and the other shipped methods (through the API, on the feature each
# ranks by default), the earlier default's parts, and the baselines.
ABLATIONS = {
    "default": M.shipped("cosine-knn", "pooled"),  # novelfind's default ranking: cosine k-NN, k = 10, pooled
    "multiscale-knn": M.shipped("multiscale-knn", "pooled"),  # cosine k-NN at k = 3, 10, 50 fused by rank
    "microcluster": M.shipped("microcluster", "logits"),  # cosine k-NN outside the photo's microcluster
    "ads-blend": M.shipped("ads"),  # the earlier default: ADS on whitened logits blended with a density
    "ads-blend-no-ads": M.shipped_default(1.0),  # its density term alone
    "ads-alone": M.ads_alone(white="f64_32"),  # its ADS term alone, support K
    "knn": M.shipped("knn"),  # mean distance to 10 nearest neighbours, raw logits
    "knn-cos": M.knn_method("cos:logits"),
    "knn-cos@po": M.knn_method("cos:pooled"),  # the best single baseline (k = 10, cosine, pooled features)
    # round three's dev recommendation (docs/bench/quality-dev-r3.md), the benchmark's own code: cosine k-NN
    # on pooled vectors at k = 3, 10 and 50, rank percentiles fused by the mean, plain top K
    "knn-cos-multik": M.fused_method(("po",), (3, 10, 50)),
    "iforest": M.iforest(),
    "ads-paper": M.shipped("ads-paper"),  # Algorithm 1 on raw logits
    # cleanlab's own out-of-distribution score (pip install cleanlab)
    "cleanlab-ood": M.cleanlab_ood("pooled"),
}

# Research candidates (dev split only).
CANDIDATES: dict = {}
for _kind in ("logits", "pooled", "mid", "logmid", "logits+mid", "logits+logmid", "pooled+logmid"):
    _t = _kind.replace("logits", "lo").replace("pooled", "po")
    CANDIDATES[f"knn@{_t}"] = M.knn_method(_kind)
    CANDIDATES[f"knn-cos@{_t}"] = M.knn_method("cos:" + _kind)
    CANDIDATES[f"knn-f64@{_t}"] = M.knn_method(_kind, white="f64_32")
    CANDIDATES[f"knn-w32@{_t}"] = M.knn_method(_kind, white="w32")
    CANDIDATES[f"knn-w64@{_t}"] = M.knn_method(_kind, white="w64")
    CANDIDATES[f"ads-f64@{_t}"] = M.ads_alone(_kind, white="f64_32")
    for _g in (1, 2, 4):
        CANDIDATES[f"scaled-g{_g}@{_t}"] = M.ads_scaled(_kind, white="f64_32", gamma=_g)
        CANDIDATES[f"scaledw-g{_g}@{_t}"] = M.ads_scaled(_kind, white="w32", gamma=_g)
    CANDIDATES[f"knnspace@{_t}"] = M.ads_knn_space(_kind)
    for _p in (1.5, 2.0, 3.0):
        CANDIDATES[f"rerank-p{_p}@{_t}"] = M.ads_rerank(_kind, pool=_p)
    for _kn in ("K", "2K"):
        CANDIDATES[f"knn-k{_kn}@{_t}"] = M.knn_method(_kind, k_nn=_kn)
        CANDIDATES[f"knn-cos-k{_kn}@{_t}"] = M.knn_method("cos:" + _kind, k_nn=_kn)
        CANDIDATES[f"knn-f64-k{_kn}@{_t}"] = M.knn_method(_kind, k_nn=_kn, white="f64_32")
        for _g in (1, 2, 4):
            CANDIDATES[f"scaled-g{_g}-k{_kn}@{_t}"] = M.ads_scaled(_kind, white="f64_32", gamma=_g, k_nn=_kn)
            CANDIDATES[f"scaledc-g{_g}-k{_kn}@{_t}"] = M.ads_scaled(
                "cos:" + _kind, white=None, gamma=_g, k_nn=_kn
            )
        for _p in (1.5, 2.0):
            CANDIDATES[f"rerank-p{_p}-k{_kn}@{_t}"] = M.ads_rerank(_kind, pool=_p, k_nn=_kn)
            CANDIDATES[f"rerankc-p{_p}-k{_kn}@{_t}"] = M.ads_rerank(
                "cos:" + _kind, pool=_p, k_nn=_kn, white=None
            )
for _k in (5, 20):
    CANDIDATES[f"knn-k{_k}@lo"] = M.knn_method("logits", k_nn=_k)
    CANDIDATES[f"knn-cos-k{_k}@lo"] = M.knn_method("cos:logits", k_nn=_k)
for _k in (5, 20):
    CANDIDATES[f"knn-cos-k{_k}@po"] = M.knn_method("cos:pooled", k_nn=_k)
for _w in (0.25, 0.5, 0.75, 0.9):  # the default's blend, rebuilt on cosine pooled features
    CANDIDATES[f"blendc-w{_w}@po"] = M.blend("cos:pooled", white=None, wd=_w, dens_kind="cos:pooled")
    CANDIDATES[f"blendcf-w{_w}@po"] = M.blend("cos:pooled", white="f64_32", wd=_w, dens_kind="cos:pooled")
for _g in (2, 4, 8, 16):
    CANDIDATES[f"scaledc-g{_g}@po"] = M.ads_scaled("cos:pooled", white=None, gamma=_g)
CANDIDATES["knn-cosf64@po"] = M.knn_method("cos:pooled", white="f64_32")
CANDIDATES["ads-cos@po"] = M.ads_alone("cos:pooled", white=None)
CANDIDATES["blend-w0.25@lo"] = M.blend(wd=0.25)
CANDIDATES["blend-w0.75@lo"] = M.blend(wd=0.75)

# Round three (dev): views fused by rank, several neighbourhood sizes, a cleaning pass, ADS on a shortlist.
# Names: views joined by "+" (po pooled as shipped, poc centred, b13/b16 mid blocks, zb: standardised
# columns); "-mk" k in KS_WIDE rank-fused, "-k<k>" one k; "-max" max fusion; "-cl<pct>x<rounds>" cleaning;
# "-ads<c>" ADS picks K out of the c x K best ("g2": odd photos weigh more in its graph).
KS_WIDE = (5, 10, 20, 50, 100)
_R3_VIEWS = {
    "po": ("po",),
    "poc": ("poc",),
    "b13": ("b13",),
    "b16": ("b16",),
    "zb16": ("zb16",),
    "po+b16": ("po", "b16"),
    "po+b13+b16": ("po", "b13", "b16"),
    "po+zb13+zb16": ("po", "zb13", "zb16"),
    "po+lo": ("po", "lo"),
}
for _vn, _vs in _R3_VIEWS.items():
    for _kn, _ks in {"": (M.KNN_K,), "-mk": KS_WIDE, "-k50": (50,), "-mk20": (10, 20, 50)}.items():
        for _fu in ("mean", "max") if len(_vs) > 1 else ("mean",):
            _base = f"r3-{_vn}{_kn}" + ("-max" if _fu == "max" else "")
            CANDIDATES[_base] = M.fused_method(_vs, _ks, _fu)
            for _cl in ((0.01, 1), (0.01, 5), (0.05, 1), (0.02, 3)):
                _cn = f"{_base}-cl{round(_cl[0] * 100)}x{_cl[1]}"
                CANDIDATES[_cn] = M.fused_method(_vs, _ks, _fu, clean=_cl)
                for _c in (3, 5):
                    CANDIDATES[f"{_cn}-ads{_c}"] = M.fused_method(_vs, _ks, _fu, _cl, shortlist=_c)
                    CANDIDATES[f"{_cn}-ads{_c}g2"] = M.fused_method(_vs, _ks, _fu, _cl, shortlist=_c, gamma=2)
            for _c in (3, 5):
                CANDIDATES[f"{_base}-ads{_c}"] = M.fused_method(_vs, _ks, _fu, shortlist=_c)
                CANDIDATES[f"{_base}-ads{_c}g2"] = M.fused_method(_vs, _ks, _fu, shortlist=_c, gamma=2)
for _vn, _vs in {"ub16": ("ub16",), "ub13": ("ub13",), "po+ub16": ("po", "ub16")}.items():
    CANDIDATES[f"r3-{_vn}"] = M.fused_method(_vs)
    CANDIDATES[f"r3-{_vn}-mk"] = M.fused_method(_vs, KS_WIDE)
# several k fused by max (a photo odd at any scale), with and without cleaning and ADS
for _kn, _ks in {"-mkmax": KS_WIDE, "-mk20max": (10, 20, 50), "-k10k50max": (10, 50)}.items():
    for _vn, _vs in {"po": ("po",), "po+b16": ("po", "b16")}.items():
        for _cn, _cl in {"": None, "-cl2x3": (0.02, 3), "-cl1x5": (0.01, 5), "-cl5x1": (0.05, 1)}.items():
            _name = f"r3-{_vn}{_kn}{_cn}"
            CANDIDATES[_name] = M.fused_method(_vs, _ks, clean=_cl, kfuse="max")
            for _c in (3, 5):
                CANDIDATES[f"{_name}-ads{_c}"] = M.fused_method(
                    _vs, _ks, clean=_cl, shortlist=_c, kfuse="max"
                )
                CANDIDATES[f"{_name}-ads{_c}g2"] = M.fused_method(
                    _vs, _ks, clean=_cl, shortlist=_c, gamma=2, kfuse="max"
                )
for _k in (20, 50):
    for _cn, _cl in {"": None, "-cl2x3": (0.02, 3), "-cl1x5": (0.01, 5), "-cl5x1": (0.05, 1)}.items():
        CANDIDATES[f"r3-po-k{_k}{_cn}"] = M.fused_method(("po",), (_k,), clean=_cl)
# small k (a photo seen once), the usual k and a wide one (a group of odd photos), fused by mean rank
for _kn, _ks in {
    "-k1": (1,),
    "-k3": (3,),
    "-k1k10k100": (1, 10, 100),
    "-k3k10k100": (3, 10, 100),
    "-k1k10k30k100": (1, 10, 30, 100),
    "-k1k10t30": (1, 10, "t30"),
    "-k1k10k50": (1, 10, 50),
    "-k1k5k10k20k50k100": (1, 5, 10, 20, 50, 100),
    "-k3k10k50": (3, 10, 50),
    "-k5k10k50": (5, 10, 50),
    "-k3k10k30k100": (3, 10, 30, 100),
    "-k5k10k100": (5, 10, 100),
    "-k10k50": (10, 50),
    "-k10k100": (10, 100),
    "-k5k20k100": (5, 20, 100),
    "-k3k10k50k100": (3, 10, 50, 100),
}.items():
    for _cn, _cl in {"": None, "-cl2x3": (0.02, 3), "-cl1x5": (0.01, 5)}.items():
        _name = f"r3-po{_kn}{_cn}"
        CANDIDATES[_name] = M.fused_method(("po",), _ks, clean=_cl)
        for _c in (3, 5):
            for _g in (0, 2, 4, 8, 16):
                CANDIDATES[f"{_name}-ads{_c}g{_g}"] = M.fused_method(
                    ("po",), _ks, clean=_cl, shortlist=_c, gamma=_g
                )
    CANDIDATES[f"r3-po+b16{_kn}-max"] = M.fused_method(("po", "b16"), _ks, fuse="max")
# Round four (dev): groups of similar odd photos (docs/bench/quality-dev-r4.md). Groups: single linkage on
# the k-NN graph of unit pooled vectors at a threshold, mult x the q quantile of the 1-NN distances
# ("g<q>x<mult>") or an absolute distance ("gmt<t>"); a group of at most cap photos ("c<cap>") and at
# least smin ("s<smin>"; "d<dup>": near-duplicates closer than dup counted once) is left out of each
# member's neighbours.
# "r4-g...k<k_out>-<fuse>": the k_out-NN distance outside the group, fused by rank with the plain k = 10
# ("-p10") or k = 3, 10, 50 ("-p3.10.50") score by mean ("-mean", "-w<w>": weight w on the outside term)
# or max, or alone ("-out"). "r4-gm...": k = 3, 10, 50 all measured outside the group, rank-fused
# (knn-cos-multik for a photo in no such group); "-pw<w>" mixes in the plain multi-k score, weight w.
_R4_PLAIN = {"-p10": (10,), "-p3.10.50": (3, 10, 50)}
for _q in (0.25, 0.5, 0.75, 0.9):  # first grid: every group of 2..cap photos left out
    for _mult in (1.0, 1.25, 1.5):
        for _cap in (30, 60):
            for _ko in (5, 10, 20):
                CANDIDATES[f"r4-g{_q}x{_mult}c{_cap}k{_ko}-out"] = M.group_method(
                    _ko, _q, _mult, _cap, (10,), "out"
                )
                for _fu in ("mean", "max"):
                    for _pn, _ps in _R4_PLAIN.items():
                        CANDIDATES[f"r4-g{_q}x{_mult}c{_cap}k{_ko}-{_fu}{_pn}"] = M.group_method(
                            _ko, _q, _mult, _cap, _ps, _fu
                        )
for _q in (0.75, 0.9, 0.95):  # groups of at least smin photos
    for _mult in (1.0, 1.1, 1.25, 1.5):
        for _cap in (30, 60):
            for _sm in (5, 8, 10, 12, 16):
                for _ko in (10, 20):
                    _g = f"r4-g{_q}x{_mult}c{_cap}s{_sm}k{_ko}"
                    CANDIDATES[f"{_g}-out"] = M.group_method(_ko, _q, _mult, _cap, (10,), "out", smin=_sm)
                    CANDIDATES[f"{_g}-mean-p3.10.50"] = M.group_method(
                        _ko, _q, _mult, _cap, (3, 10, 50), "mean", smin=_sm
                    )
                    CANDIDATES[f"{_g}-max-p10"] = M.group_method(_ko, _q, _mult, _cap, (10,), "max", smin=_sm)
                    CANDIDATES[f"{_g}-max-p3.10.50"] = M.group_method(
                        _ko, _q, _mult, _cap, (3, 10, 50), "max", smin=_sm
                    )
                    for _w in (1, 2, 3):
                        CANDIDATES[f"{_g}-w{_w}-p3.10.50"] = M.group_method(
                            _ko, _q, _mult, _cap, (3, 10, 50), "mean", w_out=_w, smin=_sm
                        )
for _q in (0.75, 0.85, 0.9, 0.95):  # group-aware multi-k
    for _mult in (1.0, 1.05, 1.1, 1.15, 1.25, 1.5):
        for _cap in (30, 45, 60, 100):
            for _sm in (8, 10, 12, 14, 16):
                for _dup in (None, 0.25, 0.3, 0.35):
                    _g = f"r4-gm{_q}x{_mult}c{_cap}s{_sm}" + ("" if _dup is None else f"d{_dup}")
                    CANDIDATES[_g] = M.group_multik_method(_q, _mult, _cap, _sm, dup=_dup)
                    for _w in (0.1, 0.25, 0.5):
                        CANDIDATES[f"{_g}-pw{_w}"] = M.group_multik_method(
                            _q, _mult, _cap, _sm, plain_w=_w, dup=_dup
                        )
                    if _dup is None:
                        CANDIDATES[f"{_g}-k10k50"] = M.group_multik_method(_q, _mult, _cap, _sm, (10, 50))
for _t in (0.65, 0.7, 0.75, 0.8, 0.85, 0.9):  # an absolute linkage threshold
    for _cap in (30, 45):
        for _sm in (10, 12, 14):
            for _dup in (0.25, 0.3, 0.35):
                CANDIDATES[f"r4-gmt{_t}c{_cap}s{_sm}d{_dup}"] = M.group_multik_method(
                    None, _t, _cap, _sm, dup=_dup
                )
# several absolute thresholds, the max over them: "r4-gmm<t1>_<t2>...c<cap>s<smin>d<dup>"
for _ts in ((0.6, 0.7, 0.8), (0.7, 0.8), (0.65, 0.75, 0.85), (0.6, 0.7, 0.8, 0.9), (0.7, 0.75, 0.8)):
    for _sm in (12, 14):
        for _cap in (30, 45):
            CANDIDATES[f"r4-gmm{'_'.join(map(str, _ts))}c{_cap}s{_sm}d0.3"] = M.group_multik_multi_method(
                _ts, _cap, _sm, 0.3
            )
METHODS = {**ABLATIONS, **CANDIDATES}
BASELINE = "knn-cos@po"  # the best single baseline: paired differences are taken against it


def f1_at_k(picks: np.ndarray, labels: np.ndarray) -> float:
    k = int(labels.sum())
    hit = int(labels[picks[:k]].sum())
    return 0.0 if hit == 0 else 2 * hit / (len(picks[:k]) + k)


def coverage(picks: np.ndarray, groups: np.ndarray, k: int) -> float:
    """Share of the labelled novelty groups (``groups`` >= 0, ``LabelledSet.novelty_groups``) with at
    least one pick among the first k."""
    total = np.unique(groups[groups >= 0])
    hit = np.unique(groups[picks[:k]])
    return float(len(hit[hit >= 0]) / max(len(total), 1))


def average_precision(order: np.ndarray, labels: np.ndarray) -> float:
    rel = labels[order].astype(np.float64)
    prec = np.cumsum(rel) / np.arange(1, len(rel) + 1)
    return float((prec * rel).sum() / max(labels.sum(), 1))


def full_order(s: M.Scored, n: int, seed: int) -> np.ndarray:
    """Picks first, then the method's score order (or random order past a K-sparse support)."""
    rest = np.setdiff1d(np.arange(n), s.picks)
    if s.full:
        rest = rest[np.argsort(-s.scores[rest], kind="stable")]
    else:
        sup = rest[s.scores[rest] > 0]
        sup = sup[np.argsort(-s.scores[sup], kind="stable")]
        other = np.random.default_rng(seed).permutation(rest[s.scores[rest] <= 0])
        rest = np.concatenate([sup, other])
    return np.concatenate([s.picks, rest])


def evaluate(names: list[str], seeds: list[int], methods: list[str], log=sys.stderr) -> list[dict]:
    rows = []
    for seed in seeds:
        for name in names:
            f = extract.features(name, seed)
            labels = f["labels"].astype(bool)
            k = int(labels.sum())
            groups = sets.build(name, seed).novelty_groups
            if not np.array_equal(groups >= 0, labels):
                raise RuntimeError(f"{name} seed {seed}: the set's plan differs from its cached features")
            for m in methods:
                t = time.perf_counter()
                s = METHODS[m](f, k, seed)
                dt = time.perf_counter() - t
                rows.append(
                    {
                        "set": name,
                        "seed": seed,
                        "method": m,
                        "n": len(labels),
                        "k": k,
                        "f1": f1_at_k(s.picks, labels),
                        "coverage": coverage(s.picks, groups, k),
                        "groups": int(len(np.unique(groups[groups >= 0]))),
                        "ap": average_precision(full_order(s, len(labels), seed), labels),
                        "seconds": dt,
                    }
                )
            print(f"{name} seed {seed}: N={len(labels)} K={k}", file=log)
    return rows


def paired(diffs: list[float]) -> dict:
    """Mean of paired differences over draws and its 95 % t-interval (half-width 0 with one draw)."""
    from scipy.stats import t as student

    d = np.asarray(diffs, dtype=np.float64)
    half = float(student.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    return {
        "mean": float(d.mean()),
        "lo": float(d.mean() - half),
        "hi": float(d.mean() + half),
        "draws": len(d),
    }


def _per_seed(rows: list[dict], m: str, s: str, key: str) -> dict[int, float]:
    return {r["seed"]: r.get(key, float("nan")) for r in rows if r["method"] == m and r["set"] == s}


def summarise(
    rows: list[dict], names: list[str], methods: list[str], baseline: str | None = BASELINE
) -> tuple[str, dict]:
    """Markdown table (F1 mean +- sd per set, then mean F1, AP and coverage over sets, and the paired
    difference in mean F1 against ``baseline`` with its 95 % interval over draws) and the same as a dict.
    Per set and method the dict also holds the paired F1 and coverage differences against the baseline."""
    summary: dict = {}
    base = baseline if baseline in methods else None
    head = "| method | " + " | ".join(names) + " | mean F1 | mean AP | coverage |"
    head += f" ΔF1 vs {base} [95% CI] | Δcoverage [95% CI] |" if base else ""
    lines = [head, "|---" * (len(names) + 4 + 2 * bool(base)) + "|"]
    for m in methods:
        cells = []
        per_seed: dict[str, dict[int, list[float]]] = {
            "f1": {},
            "ap": {},
            "coverage": {},
            "d_f1": {},
            "d_coverage": {},
        }
        for s in names:
            rs = [r for r in rows if r["method"] == m and r["set"] == s]
            vals = {key: np.array([r.get(key, np.nan) for r in rs]) for key in ("f1", "ap", "coverage")}
            for r in rs:
                for key in ("f1", "ap", "coverage"):
                    per_seed[key].setdefault(r["seed"], []).append(r.get(key, np.nan))
            cell = {"draws": len(rs)}
            for key, v in vals.items():
                cell[key] = float(v.mean())
                cell[key + "_sd"] = float(v.std(ddof=1)) if len(v) > 1 else 0.0
            if base:
                b_f1, m_f1 = _per_seed(rows, base, s, "f1"), _per_seed(rows, m, s, "f1")
                b_cov, m_cov = _per_seed(rows, base, s, "coverage"), _per_seed(rows, m, s, "coverage")
                both = sorted(set(b_f1) & set(m_f1))
                if both:
                    cell["d_f1"] = paired([m_f1[i] - b_f1[i] for i in both])
                    cell["d_coverage"] = paired([m_cov[i] - b_cov[i] for i in both])
                    for i in both:
                        per_seed["d_f1"].setdefault(i, []).append(m_f1[i] - b_f1[i])
                        per_seed["d_coverage"].setdefault(i, []).append(m_cov[i] - b_cov[i])
            summary.setdefault(m, {})[s] = cell
            cells.append(f"{cell['f1']:.2f}±{cell['f1_sd']:.2f}")
        mean: dict = {}
        for key in ("f1", "ap", "coverage"):
            v = np.array([np.mean(x) for x in per_seed[key].values()])
            mean[key] = float(v.mean())
            mean[key + "_sd"] = float(v.std(ddof=1)) if len(v) > 1 else 0.0
        line = (
            f"| {m} | "
            + " | ".join(cells)
            + f" | {mean['f1']:.3f}±{mean['f1_sd']:.3f} | {mean['ap']:.3f}±{mean['ap_sd']:.3f}"
            + f" | {mean['coverage']:.3f} |"
        )
        if base:
            for key in ("d_f1", "d_coverage"):
                full = [np.mean(v) for v in per_seed[key].values() if len(v) == len(names)]
                if full:
                    mean[key] = d = paired(full)
                    line += f" {d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] |"
                else:
                    line += " |"
        summary[m]["_mean"] = mean
        lines.append(line)
    return "\n".join(lines), summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", default="dev", choices=sorted(sets.SPLITS))
    ap.add_argument("--sets", default=None, help="comma-separated subset of the split's sets")
    ap.add_argument("--seeds", type=int, default=None, help="draws per set (default 5; library splits 1)")
    ap.add_argument("--first-seed", type=int, default=0, help="seed of the first draw")
    ap.add_argument(
        "--add-to",
        default=None,
        help="JSON of an earlier run of the same split: its rows for other draws are kept (more draws)",
    )
    ap.add_argument("--methods", default=",".join(ABLATIONS))
    ap.add_argument("--baseline", default=BASELINE, help="paired differences against this method")
    ap.add_argument(
        "--report",
        default=None,
        help="JSON of an earlier run: print its table again (--methods, --baseline), computing nothing",
    )
    ap.add_argument("--out", default=None, help="JSON output (default bench_quality_<split>.json)")
    a = ap.parse_args()
    if a.report:
        earlier = json.loads(Path(a.report).read_text())
        chosen = a.methods.split(",") if a.methods != ",".join(ABLATIONS) else earlier["methods"]
        missing = [m for m in [*chosen, a.baseline] if m not in earlier["methods"]]
        if missing:
            ap.error(f"not in {a.report}: {', '.join(missing)}")
        print(summarise(earlier["rows"], earlier["sets"], chosen, a.baseline)[0])
        return
    names = list(sets.SPLITS[a.split])
    if a.sets:
        want = a.sets.split(",")
        bad = [s for s in want if s not in names]
        if bad:
            ap.error(f"not in split {a.split}: {', '.join(bad)}")
        names = want
    methods = a.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        ap.error(f"unknown methods: {', '.join(unknown)}")
    if a.split.startswith("test") and any(m in CANDIDATES and m not in ABLATIONS for m in methods):
        print("note: research candidates on the test split; choose on dev only", file=sys.stderr)
    n_seeds = a.seeds or (1 if "library" in a.split else 5)
    rows = evaluate(names, list(range(a.first_seed, a.first_seed + n_seeds)), methods)
    if a.add_to:
        earlier = json.loads(Path(a.add_to).read_text())
        if earlier["split"] != a.split:
            ap.error(f"{a.add_to} is a run of split {earlier['split']}, not {a.split}")
        done = {(r["set"], r["seed"]) for r in rows}
        rows = [
            r
            for r in earlier["rows"]
            if r["set"] in names and r["method"] in methods and (r["set"], r["seed"]) not in done
        ] + rows
    n_seeds = len({r["seed"] for r in rows})
    table, summary = summarise(rows, names, methods, a.baseline)
    print(
        f"F1 at K (mean ± sd over {n_seeds} draws); mean F1 / AP over sets (± sd over draws), coverage "
        f"(share of novelty groups with a pick in the top K), paired ΔF1; split {a.split}\n"
    )
    print(table)
    out = {
        "split": a.split,
        "sets": names,
        "seeds": n_seeds,
        "methods": methods,
        "baseline": a.baseline,
        "pins": pins.digest(),  # the pinned sources the sets were built from (scripts/quality/sources.lock)
        "rows": rows,
        "summary": summary,
        "table": table,
        "machine": machine("python", "cpus", "load"),
    }
    write_json(out, Path(a.out or f"bench_quality_{a.split}.json"), indent=1, end="")


if __name__ == "__main__":
    main()
