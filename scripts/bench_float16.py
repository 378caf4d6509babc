#!/usr/bin/env python3
"""Would float16 vectors in the feature cache change any ranking? Measured on labelled sets.

The cache keeps one 1280-d pooled vector per photo; float16 holds it in 3.0 KB instead of 5.8 KB (30 GB
instead of 58 GB at 10 million), and the logits are computed from what the cache gives back
(``novelfind.model.features.Classifier``). Two kinds of data:

- ``real``: the dev split's sets of the quality benchmark (MobileNet-V2 features of real photos,
  ``quality.extract.features``, cached on disk; N = 188-436), K = the number of planted novelties. Each
  shipped method ranks the feature it uses by default: the pooled vector as stored (float32, or rounded
  to float16 and back), or the logits computed from it;
- ``synthetic``: N = 20,000 and more (``--sizes``): 50 Gaussian clusters in 1000-d at the scale of
  logits, plus 100 planted outliers (cluster points with 4x the noise), K = 100.

For each, the method runs on the float32 vectors, again on the float32 vectors (so a method that is not
deterministic shows up as such), and on the vectors from float16 storage.
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
from harness import write_json  # noqa: E402
from quality import extract, sets  # noqa: E402

from novelfind.model.weights import load_classifier, resolve_weights  # noqa: E402
from novelfind.ranking.driver import rank  # noqa: E402
from novelfind.ranking.methods import METHOD_FEATURE  # noqa: E402


def compare(
    x32: np.ndarray, labels: np.ndarray, x16: np.ndarray | None = None, method: str | None = None
) -> dict:
    """The method's picks on x32, again on x32, and on x16 (default: x32 rounded to float16 and back)."""
    k = int(labels.sum())
    if x16 is None:
        x16 = x32.astype(np.float16).astype(np.float32)
    kw = {} if method is None else {"method": method}
    t = time.monotonic()
    a = rank(x32, k, **kw)
    seconds = time.monotonic() - t
    again = rank(x32, k, **kw)
    b = rank(x16, k, **kw)
    rel = np.abs(x16 - x32).max() / max(float(np.abs(x32).max()), 1e-30)
    return {
        "n": int(len(x32)),
        "k": k,
        "float32_repeatable": bool(np.array_equal(a.indices, again.indices)),
        "same_list": bool(np.array_equal(a.indices, b.indices)),
        "shared_picks": int(len(set(a.indices.tolist()) & set(b.indices.tolist()))),
        "rank_s": round(seconds, 2),
        "f1_float32": round(bench_quality.f1_at_k(a.indices, labels), 4),
        "f1_float16": round(bench_quality.f1_at_k(b.indices, labels), 4),
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
    ap.add_argument("--sets", default=",".join(sets.SPLITS["dev"]))
    ap.add_argument(
        "--methods", default="cosine-knn,ads", help="shipped methods, each on its default feature"
    )
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--sizes", default="20000,50000", help="synthetic library sizes")
    ap.add_argument("--out", type=Path, default=Path("bench_float16.json"))
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    if args.data in ("all", "real"):
        classifier = load_classifier(resolve_weights(download=False))
        for name in args.sets.split(","):
            for seed in seeds:
                feats = extract.features(name, seed, verbose=False)
                labels = np.asarray(feats["labels"]).astype(bool)
                p32 = np.asarray(feats["pooled"], np.float32)
                p16 = p32.astype(np.float16).astype(np.float32)  # what a float16 cache gives back
                for method in args.methods.split(","):
                    if METHOD_FEATURE[method] == "pooled":
                        x32, x16 = p32, p16
                    else:  # logits, computed from the stored vector as a scan does
                        x32, x16 = classifier(p32), classifier(p16)
                    row = {"set": name, "seed": seed, "method": method, "feature": METHOD_FEATURE[method]}
                    row.update(compare(x32, labels, x16, method))
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    if args.data in ("all", "synthetic"):
        for n in (int(s) for s in args.sizes.split(",")):
            for seed in seeds:
                x, labels = planted(n, seed)
                row = {
                    "set": f"planted-{n // 1000}k",
                    "seed": seed,
                    "method": "default",
                    "feature": "synthetic",
                }
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
    write_json(report, args.out)
    print(
        "| set | seed | method | feature | N | K | float32 repeatable | same list | shared picks "
        "| F1 float32 | F1 float16 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['set']} | {r['seed']} | {r['method']} | {r['feature']} | {r['n']} | {r['k']} | "
            f"{r['float32_repeatable']} | {r['same_list']} | {r['shared_picks']}/{r['k']} | "
            f"{r['f1_float32']} | {r['f1_float16']} |"
        )
    print(f"identical rankings: {same}/{len(rows)}; written {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
