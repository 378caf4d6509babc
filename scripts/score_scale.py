"""The scale of each method's scores on a library: what ``--min-score`` can be set to.

Usage: ``python scripts/score_scale.py FOLDER [--methods cosine-knn,knn] [--json OUT]``

Scans FOLDER once (vectors from the feature cache), ranks every photo with each method and prints the
score of the photos at a few ranks and percentiles, so a threshold between the odd ones and the rest
can be read off; the figures go to a JSON file too (default ``bench-results/score_scale.json``).
docs/ranking.md quotes the figures of the example set (``scripts/make_example.py``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import novelfind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--methods", default="cosine-knn,multiscale-knn,microcluster,knn,ads")
    parser.add_argument("--json", type=Path, default=Path("bench-results/score_scale.json"))
    args = parser.parse_args()
    figures = {}
    for method in args.methods.split(","):
        result = novelfind.scan(args.folder, k=100_000, method=method, dedup=0)
        scores = np.array([p.score for p in result.picks], dtype=np.float64)  # best first
        figures[method] = {
            "photos": len(scores),
            "top": [round(float(s), 4) for s in scores[:8]],
            "percentiles": {
                str(q): round(float(np.percentile(scores, q)), 4) for q in (0, 10, 50, 90, 95, 100)
            },
        }
        f = figures[method]
        print(
            f"{method:15s} {len(scores)} photos; top 8: {' '.join(f'{s:.3f}' for s in f['top'])}; "
            + ", ".join(f"p{q} {v:.3f}" for q, v in f["percentiles"].items())
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"folder": str(args.folder), "methods": figures}, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
