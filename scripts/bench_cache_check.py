#!/usr/bin/env python3
"""What checking cached vectors costs a re-scan: CPU time of the cache lookups, per photo.

  python scripts/bench_cache_check.py --out docs/bench/cache-check-2core.json
  PYTHONPATH=/path/to/other/tree python scripts/bench_cache_check.py    # the same on another version

A cache of N pooled-size vectors (float32, 1280 values) is written to a temporary folder, then every
file is looked up the two ways a scan does: ``has_many_by_stat`` (a library too large to hold in memory,
whose vectors stay in the cache) and ``get_many_by_stat`` (the others), in the scan's chunks of 8,192.
Since vectors are checked when read back (finite, norm within the model's bound), ``has_many_by_stat``
reads them too. CPU time of this process (``time.process_time``), best of the repeats, so it does not
depend much on what else the machine runs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import machine, write_json

import novelfind
from novelfind.cache import FeatureCache
from novelfind.media.walk import ImageFile

DIM = 1280
CHUNK = 8192


def measure(n: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    mtime = 1_700_000_000 * 10**9
    files = [ImageFile(Path(f"/library/{i:07d}.jpg"), 100_000 + i, mtime + i) for i in range(n)]
    with tempfile.TemporaryDirectory() as folder, FeatureCache(Path(folder) / "c.sqlite", "m") as cache:
        for start in range(0, n, 1000):
            rows = range(start, min(n, start + 1000))
            cache.put_many([(files[i], f"{i:032x}", (rng.random(DIM) * 6).astype(np.float32)) for i in rows])
        lookups = {
            "has_many_by_stat": lambda part: cache.has_many_by_stat(part, DIM),
            "get_many_by_stat": cache.get_many_by_stat,
        }
        out = {}
        for name, lookup in lookups.items():
            best = float("inf")
            for _ in range(repeats):
                began = time.process_time()
                for start in range(0, n, CHUNK):
                    lookup(files[start : start + CHUNK])
                best = min(best, time.process_time() - began)
            out[name] = {"cpu_s": round(best, 4), "us_per_photo": round(1e6 * best / n, 2)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--photos", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    doc = {
        "novelfind": novelfind.__version__,
        "tree": os.path.dirname(os.path.dirname(os.path.abspath(novelfind.__file__))),
        "machine": machine("cpus", "python", "platform"),
        "photos": args.photos,
        "lookups": measure(args.photos, args.repeats),
    }
    write_json(doc, args.out, indent=1, echo=True)


if __name__ == "__main__":
    main()
