"""Compute (and cache) the features of sets: ``python -m quality.warm SPLIT|SET... --seeds 5``."""

from __future__ import annotations

import argparse

from . import extract, sets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("names", nargs="+")
    ap.add_argument("--seeds", default="0:5", help="first:end seeds")
    a = ap.parse_args()
    names = [n for x in a.names for n in sets.SPLITS.get(x, (x,))]
    first, end = (int(v) for v in a.seeds.split(":"))
    for seed in range(first, end):
        for name in names:
            extract.features(name, seed)


if __name__ == "__main__":
    main()
