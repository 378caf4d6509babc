#!/usr/bin/env python3
"""Novel moments: odd batches and single odd photos ranked on one scale, measured as moments.

Sets: the quality benchmark's split (``scripts/quality/sets.py``) plus the moments sets (odd batches of
5, 15, 40 and 80 photos, ordinary bursts and tight groups, 10 single odd photos). Every method returns
moments (``quality.moments``); metrics per set and draw: F1 at K of the plain score order (near-duplicates
passed over, as the quality benchmark), AP, coverage, moment recall at M and F1 over the expanded list.

    python scripts/bench_moments.py --split dev --seeds 3 --steps --out docs/bench/quality-moments-dev.json
    python scripts/bench_moments.py --split dev --seeds 2 --methods grid --group po,0.7,0.1 --out grid.json
    python scripts/bench_moments.py --split test --seeds 3 --methods cosine-knn,microcluster --steps

``--group``: how score-only methods are grouped into moments (default: the shipped microcluster
method's own microclusters, so every method is grouped the same way). ``--steps``: also ADS and
greedy farthest-first as the step that picks M moments out of the first 3M. Choose on dev only; test
is run once for the chosen candidate and the baselines (docs/bench/quality-moments.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_quality import average_precision, coverage, f1_at_k, paired  # noqa: E402
from harness import machine, write_json  # noqa: E402
from quality import extract, sets  # noqa: E402
from quality import methods as M  # noqa: E402
from quality import moments as Q  # noqa: E402

SPLITS = {
    "dev": (*sets.SPLITS["dev"], "moments-dev"),
    "dev-library": ("library-moments-dev",),
    "test": (*sets.SPLITS["test"], "moments-test"),
    "test-library": ("library-moments-test",),
}
FEATS = {"po": "pooled", "lo": "logits"}


class Ctx:
    """One set and draw: features, unit vectors and neighbour graphs per feature, shared by methods."""

    def __init__(self, f: dict, seed: int):
        self.f, self.seed = f, seed
        self.labels = f["labels"].astype(bool)
        self.k = int(self.labels.sum())
        self._xn: dict = {}
        self._nn: dict = {}
        self._mc: dict = {}

    def xn(self, feat: str) -> np.ndarray:
        if feat not in self._xn:
            self._xn[feat] = Q.unit(self.f[FEATS[feat]])
        return self._xn[feat]

    def nn(self, feat: str):
        if feat not in self._nn:
            self._nn[feat] = Q.neighbours(self.xn(feat), Q.GRAPH_K)
        return self._nn[feat]

    def mc(self, feat: str, r: float, share: float) -> np.ndarray:
        key = (feat, r, share)
        if key not in self._mc:
            self._mc[key] = Q.microclusters(*self.nn(feat), r, share)
        return self._mc[key]

    def shipped_groups(self) -> np.ndarray:
        """The shipped method's microclusters (``novelfind.ranking.microclusters``, logits)."""
        if "shipped" not in self._mc:
            from novelfind.ranking.microclusters import microclusters

            self._mc["shipped"] = microclusters(self.xn("lo"))
        return self._mc["shipped"]

    def mc_adaptive(self, feat: str, share: float, ratio: float) -> np.ndarray:
        """Each photo's largest microcluster over radii 2, 2/ratio, 2/ratio^2, ... down to 0.05 (the
        largest component holding at most ``share`` of the library): McCatch's geometric radii."""
        key = ("adaptive", feat, share, ratio)
        if key not in self._mc:
            nd, ni = self.nn(feat)
            n = len(nd)
            best = -1 - np.arange(n)
            done = np.zeros(n, dtype=bool)
            r = 2.0
            radii = []
            while r > 0.05:
                radii.append(r)
                r /= ratio
            for j, r in enumerate(radii):  # largest radius first: the first fit is the largest
                mc = Q.microclusters(nd, ni, r, share)
                fit = (mc >= 0) & ~done
                best[fit] = mc[fit] + j * n
                done |= fit
            # components nest as the radius grows, so the members of a photo's chosen component
            # chose the same one: the labels are a partition
            self._mc[key] = best
        return self._mc[key]


# --------------------------------------------------------------------------- methods
# A method: (ctx) -> (scores (N,), microcluster labels (N,) or None for the shared grouping)


def knn_score(feat: str, k: int):
    def run(c: Ctx):
        return c.nn(feat)[0][:, :k].mean(1), None

    return run


def mc_score(feat: str, r: float, share: float, k: int):
    def run(c: Ctx):
        mc = c.mc(feat, r, share)
        return Q.outside_knn(c.xn(feat), *c.nn(feat), mc, k), mc

    return run


def mca_score(feat: str, share: float, k: int, ratio: float):
    def run(c: Ctx):
        mc = c.mc_adaptive(feat, share, ratio)
        return Q.outside_knn(c.xn(feat), *c.nn(feat), mc, k), mc

    return run


def from_quality(method):
    def run(c: Ctx):
        return np.asarray(method(c.f, c.k, c.seed).scores, dtype=np.float64), None

    return run


def shipped_microcluster(feat: str, **constants):
    """novelfind's own ``microcluster`` scorer and its microclusters (``novelfind.ranking.microclusters``)."""

    def run(c: Ctx):
        from novelfind.ranking.microclusters import microcluster_scores

        scores, labels = microcluster_scores(c.xn(feat), **constants)
        return scores.astype(np.float64), labels

    return run


def glosh_score(feat: str, m: int):
    def run(c: Ctx):
        return Q.glosh(c.xn(feat), m), None

    return run


BASELINES = {
    "cosine-knn": knn_score("po", 10),  # the default: cosine k-NN, k = 10, pooled
    "cosine-knn-k50": knn_score("po", 50),
    "cosine-knn@lo": knn_score("lo", 10),
    "cosine-knn-k50@lo": knn_score("lo", 50),
    "cleanlab-ood": from_quality(M.cleanlab_ood("pooled")),
    "iforest": from_quality(M.iforest("pooled")),
    "ads-paper": from_quality(M.shipped("ads-paper")),
    "glosh-m10": glosh_score("po", 10),
    "microcluster": shipped_microcluster("lo"),  # the shipped method, its own constants (logits)
}
GRID: dict = {}
for _f in ("po", "lo"):
    for _r in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
        for _c in (0.01, 0.03, 0.1, 0.2):
            for _k in (5, 10, 20, 50):
                GRID[f"mc@{_f}-r{_r}-c{_c}-k{_k}"] = mc_score(_f, _r, _c, _k)
    for _c in (0.01, 0.03, 0.1, 0.2):
        for _k in (5, 10, 20, 50):
            for _q in (1.25, 1.5, 2.0):
                GRID[f"mca@{_f}-c{_c}-k{_k}-q{_q}"] = mca_score(_f, _c, _k, _q)
for _m in (5, 20):
    GRID[f"glosh-m{_m}"] = glosh_score("po", _m)
METHODS = {**BASELINES, **GRID}


def evaluate(names, seeds, methods, group: tuple[str, float, float], steps: bool, log=sys.stderr):
    rows = []
    for seed in seeds:
        for name in names:
            f = extract.features(name, seed)
            c = Ctx(f, seed)
            groups = sets.build(name, seed).novelty_groups
            labels, k = c.labels, c.k
            mm = len(np.unique(groups[groups >= 0]))
            shared = c.mc(*group) if group[0] != "shipped" else c.shipped_groups()
            for m in methods:
                t = time.perf_counter()
                scores, mc = METHODS[m](c)
                mc = shared if mc is None else mc
                feat = m.split("@")[1][:2] if "@" in m else "lo" if group[0] == "shipped" else group[0]
                mo = Q.walk(scores, c.xn(feat), mc, k)
                dt = time.perf_counter() - t
                order = np.lexsort((np.arange(len(scores)), -scores))
                picks = M.dedup_picks(order, c.xn("po"), k)
                row = {
                    "set": name,
                    "seed": seed,
                    "method": m,
                    "n": len(labels),
                    "k": k,
                    "moments": mm,
                    "f1": f1_at_k(picks, labels),
                    "ap": average_precision(order, labels),
                    "coverage": coverage(picks, groups, k),
                    **Q.moment_metrics(mo, labels, groups),
                    "seconds": dt,
                }
                rows.append(row)
                if steps:  # ADS / farthest-first choosing M moments out of the first 3M
                    short = min(3 * mm, len(mo.reps))
                    rx = c.xn(feat)[mo.reps[:short]]
                    for tag, chosen in (
                        ("ads", Q.ads_choice(rx, mm, seed)),
                        ("ff", Q.farthest_first(rx, mm)),
                    ):
                        rest = [j for j in range(len(mo.reps)) if j not in set(chosen)]
                        rows.append(
                            {
                                **row,
                                "method": f"{m}+{tag}",
                                **Q.moment_metrics(mo, labels, groups, chosen + rest),
                            }
                        )
            print(f"{name} seed {seed}: N={len(labels)} K={k} M={mm}", file=log, flush=True)
    return rows


KEYS = ("f1_expanded", "moment_recall", "f1", "ap", "coverage")


def summarise(rows, names, baseline="cosine-knn"):
    methods = list(dict.fromkeys(r["method"] for r in rows))
    summary: dict = {}
    for m in methods:
        s: dict = {}
        for name in names:
            rs = [r for r in rows if r["method"] == m and r["set"] == name]
            s[name] = {key: float(np.mean([r[key] for r in rs])) for key in KEYS}
            s[name]["draws"] = len(rs)
        seeds = sorted({r["seed"] for r in rows if r["method"] == m})
        per_seed = {
            key: {
                sd: np.mean(
                    [r[key] for r in rows if r["method"] == m and r["seed"] == sd and r["set"] in names]
                )
                for sd in seeds
            }
            for key in KEYS
        }
        s["_mean"] = {key: float(np.mean(list(v.values()))) for key, v in per_seed.items()}
        if baseline in methods:
            b = {
                sd: np.mean(
                    [
                        r["f1_expanded"]
                        for r in rows
                        if r["method"] == baseline and r["seed"] == sd and r["set"] in names
                    ]
                )
                for sd in seeds
            }
            s["_mean"]["d_f1_expanded"] = paired([per_seed["f1_expanded"][sd] - b[sd] for sd in seeds])
        summary[m] = s
    return summary


def table(summary, names, methods=None, key="f1_expanded") -> str:
    methods = methods or list(summary)
    head = (
        "| method | "
        + " | ".join(names)
        + " | mean F1 (expanded) | moment recall | F1 | AP | coverage | ΔF1 exp. vs cosine-knn [95% CI] |"
    )
    lines = [head, "|---" * (len(names) + 7) + "|"]
    for m in methods:
        s = summary[m]
        mean = s["_mean"]
        d = mean.get("d_f1_expanded")
        dcell = f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]" if d else ""
        lines.append(
            f"| {m} | "
            + " | ".join(f"{s[n][key]:.2f}" for n in names)
            + f" | {mean['f1_expanded']:.3f} | {mean['moment_recall']:.3f} | {mean['f1']:.3f}"
            + f" | {mean['ap']:.3f} | {mean['coverage']:.3f} | {dcell} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--split", default="dev", choices=sorted(SPLITS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--methods", default="baselines", help="baselines | grid | all | comma-separated names")
    ap.add_argument(
        "--group",
        default="shipped",
        help="the score-only methods' grouping: 'shipped' (the microcluster method's own microclusters, "
        "so every method is grouped the same way) or feature,radius,share (components at one radius)",
    )
    ap.add_argument("--steps", action="store_true", help="also ADS / farthest-first choosing M moments")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    names = list(SPLITS[a.split])
    sel = {"baselines": list(BASELINES), "grid": ["cosine-knn", *GRID], "all": list(METHODS)}
    methods = sel.get(a.methods) or a.methods.split(",")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        ap.error(f"unknown methods: {', '.join(unknown)}")
    g = a.group.split(",")
    group = ("shipped", 0.0, 0.0) if a.group == "shipped" else (g[0], float(g[1]), float(g[2]))
    rows = evaluate(names, list(range(a.first_seed, a.first_seed + a.seeds)), methods, group, a.steps)
    summary = summarise(rows, names)
    text = table(summary, names)
    print(text)
    out = {
        "split": a.split,
        "sets": names,
        "seeds": a.seeds,
        "first_seed": a.first_seed,
        "group": a.group,
        "methods": list(summary),
        "rows": rows,
        "summary": summary,
        "table": text,
        "machine": machine("python", "cpus", "load"),
    }
    write_json(out, Path(a.out or f"bench_moments_{a.split}.json"), indent=1, end="")


if __name__ == "__main__":
    main()
