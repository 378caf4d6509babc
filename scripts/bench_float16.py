#!/usr/bin/env python3
"""Would float16 vectors in the feature cache change any ranking? Measured on labelled sets.

A float16 cache holds 2 KB per photo (1000-d logits) instead of 4 KB: 20 GB instead of 40 GB at 10 million.
Two kinds of data:

- ``real``: every set and seed of the quality benchmark (MobileNet-V2 features of real photos from
  ``bench_quality.set_features``, cached on disk; N = 400-520), logits and pooled features, K = the number
  of planted novelties;
- ``synthetic``: N = 20,000 and more (``--sizes``): 50 Gaussian clusters in 1000-d at the scale of
  logits, plus 100 planted outliers (cluster points with 4x the noise), K = 100.

For each, the shipped default ranking runs on the float32 vectors, again on the float32 vectors (so a
method that is not deterministic shows up as such), and on the same vectors rounded to float16 and back.
Reported per case: whether the picks are the same list (order included), how many picks they share, and
F1 of each against the labels.

    python scripts/bench_float16.py                          # real sets (seeds 0, 1) and synthetic 20k, 50k
    python scripts/bench_float16.py --data synthetic --sizes 20000 --seeds 0 --out /tmp/f16.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import bench_quality  # noqa: E402
import photosets  # noqa: E402

from novelfind.ranking import rank  # noqa: E402


def compare(x32: np.ndarray, labels: np.ndarray) -> dict:
    k = int(labels.sum())
    x16 = x32.astype(np.float16).astype(np.float32)
    t = time.monotonic()
    a = rank(x32, k)
    seconds = time.monotonic() - t
    again = rank(x32, k)
    b = rank(x16, k)
    rel = np.abs(x16 - x32).max() / max(float(np.abs(x32).max()), 1e-30)
    return {
        "n": int(len(x32)),
        "k": k,
        "float32_repeatable": bool(np.array_equal(a.indices, again.indices)),
        "same_list": bool(np.array_equal(a.indices, b.indices)),
        "shared_picks": int(len(set(a.indices.tolist()) & set(b.indices.tolist()))),
        "rank_s": round(seconds, 2),
        "f1_float32": round(bench_quality.scores_at_k(a.indices, labels)["f1"], 4),
        "f1_float16": round(bench_quality.scores_at_k(b.indices, labels)["f1"], 4),
        "max_relative_rounding": float(rel),
    }


def planted(n: int, seed: int, m: int = 1000, clusters: int = 50, outliers: int = 100):
    """(N, M) float32 at the scale of logits and a bool label per row: cluster points, and ``outliers``
    of them with 4x the noise (their nearest neighbours are about 3x farther than anyone else's)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, m), dtype=np.float32) * 4.0  # (C, M)
    x = centres[rng.integers(0, clusters, n)]  # (N, M)
    x += rng.standard_normal((n, m), dtype=np.float32)
    labels = np.zeros(n, bool)
    labels[rng.choice(n, outliers, replace=False)] = True
    x[labels] += 3.0 * rng.standard_normal((outliers, m), dtype=np.float32)  # 4x the noise in all
    return x, labels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", choices=("all", "real", "synthetic"), default="all")
    ap.add_argument("--sets", default=",".join(photosets.SETS))
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--sizes", default="20000,50000", help="synthetic library sizes")
    ap.add_argument("--out", type=Path, default=Path("bench_float16.json"))
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    if args.data in ("all", "real"):
        for name in args.sets.split(","):
            for seed in seeds:
                feats = bench_quality.set_features(name, seed)
                labels = np.asarray(feats["labels"]).astype(bool)
                for kind in ("logits", "pooled"):
                    row = {"set": name, "seed": seed, "feature": kind, **compare(feats[kind], labels)}
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    if args.data in ("all", "synthetic"):
        for n in (int(s) for s in args.sizes.split(",")):
            for seed in seeds:
                x, labels = planted(n, seed)
                row = {"set": f"planted-{n // 1000}k", "seed": seed, "feature": "synthetic"}
                row.update(compare(x, labels))
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    same = sum(r["same_list"] for r in rows)
    report = {
        "benchmark": "bench_float16",
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cases": len(rows),
        "identical_rankings": same,
        "float32_repeatable": sum(r["float32_repeatable"] for r in rows),
        "f1_changed": sum(r["f1_float32"] != r["f1_float16"] for r in rows),
        "rows": rows,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print("| set | seed | feature | N | K | float32 repeatable | same list | shared picks | F1 float32 "
          "| F1 float16 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['set']} | {r['seed']} | {r['feature']} | {r['n']} | {r['k']} | "
            f"{r['float32_repeatable']} | {r['same_list']} | {r['shared_picks']}/{r['k']} | "
            f"{r['f1_float32']} | {r['f1_float16']} |"
        )
    print(f"identical rankings: {same}/{len(rows)}; written {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
