#!/usr/bin/env python3
"""Would float16 vectors in the feature cache change any ranking? Measured on the labelled quality sets.

A float16 cache holds 2 KB per photo (1000-d logits) instead of 4 KB: 20 GB instead of 40 GB at 10 million.
For every set and seed of the quality benchmark (features from ``bench_quality.set_features``, cached
on disk), the shipped default ranking is run on the float32 vectors and on the same vectors rounded to
float16 and back, with K = the number of planted novelties. Reported per set: whether the picks are the
same list (order included), how many picks the two share, and F1 of each against the labels.

    python scripts/bench_float16.py                          # all sets, seeds 0 and 1, logits + pooled
    python scripts/bench_float16.py --sets domain --seeds 0 --out /tmp/f16.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
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
    a = rank(x32, k)
    b = rank(x16, k)
    rel = np.abs(x16 - x32).max() / max(float(np.abs(x32).max()), 1e-30)
    return {
        "n": int(len(x32)),
        "k": k,
        "same_list": bool(np.array_equal(a.indices, b.indices)),
        "shared_picks": int(len(set(a.indices.tolist()) & set(b.indices.tolist()))),
        "f1_float32": round(bench_quality.scores_at_k(a.indices, labels)["f1"], 4),
        "f1_float16": round(bench_quality.scores_at_k(b.indices, labels)["f1"], 4),
        "max_relative_rounding": float(rel),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", default=",".join(photosets.SETS))
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--out", type=Path, default=Path("bench_float16.json"))
    args = ap.parse_args()
    rows = []
    for name in args.sets.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            feats = bench_quality.set_features(name, seed)
            labels = np.asarray(feats["labels"]).astype(bool)
            for kind in ("logits", "pooled"):
                row = {"set": name, "seed": seed, "feature": kind, **compare(feats[kind], labels)}
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    same = sum(r["same_list"] for r in rows)
    report = {
        "benchmark": "bench_float16",
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "cases": len(rows),
        "identical_rankings": same,
        "f1_changed": sum(r["f1_float32"] != r["f1_float16"] for r in rows),
        "rows": rows,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print("| set | seed | feature | N | K | same list | shared picks | F1 float32 | F1 float16 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['set']} | {r['seed']} | {r['feature']} | {r['n']} | {r['k']} | {r['same_list']} | "
            f"{r['shared_picks']}/{r['k']} | {r['f1_float32']} | {r['f1_float16']} |"
        )
    print(f"identical rankings: {same}/{len(rows)}; written {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
