#!/usr/bin/env python3
"""What grouping the picks into moments costs when every pick is a burst.

``bench_rank.py``'s structured features (N rows, M = 1000, 100 planted outliers), with 4 near-identical
copies of each planted row (noise 0.01 per feature), so the 100 most novel moments are 5-frame bursts and
every pick needs a look-up of its neighbourhood. The default ranking (K = 100) runs with the moments'
link radius (0.15) and with grouping off (0), alternately, ``--repeats`` times each; wall and CPU seconds,
how many picks carry members and how many members in all.

    nice -n 10 python scripts/bench_moment_cost.py --size 100k --out docs/bench/moments.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from bench_rank import ensure_data, load, parse_size  # noqa: E402
from harness import write_json  # noqa: E402

from novelfind.ranking import driver as ranking  # noqa: E402
from novelfind.ranking import moments  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100k")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--data-dir", type=Path, default=ROOT / "bench-results" / "rank-data")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "moments.json")
    args = ap.parse_args()
    x, planted = load(ensure_data(args.data_dir, parse_size(args.size), "structured"))
    rng = np.random.default_rng(0)
    copies = np.repeat(x[planted], 4, axis=0) + rng.normal(size=(4 * len(planted), x.shape[1])) * 0.01
    x = np.vstack([x, copies.astype(np.float32)])
    out: dict = {"n": len(x), "bursts": len(planted), "k": 100, "runs": []}
    for _ in range(args.repeats):
        for radius in (moments.LINK_RADIUS, 0.0):
            t, c = time.perf_counter(), time.process_time()
            r = ranking.rank(x, 100, dedup=radius)
            run = {
                "dedup": radius,
                "wall_s": round(time.perf_counter() - t, 2),
                "cpu_s": round(time.process_time() - c, 2),
                "picks_with_members": int(sum(len(m) > 0 for m in r.members)),
                "members": int(sum(len(m) for m in r.members)),
            }
            out["runs"].append(run)
            print(json.dumps(run), flush=True)
    write_json(out, args.out, indent=1)


if __name__ == "__main__":
    main()
