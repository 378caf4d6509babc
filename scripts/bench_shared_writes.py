#!/usr/bin/env python3
"""What writing through descriptors costs: placing picks (``--copy-to``) and tagging sidecars (``--xmp``).

  python scripts/bench_shared_writes.py --out docs/bench/shared-writes-2core.json
  PYTHONPATH=/path/to/other/tree python scripts/bench_shared_writes.py    # the same on another version

N photos of about 200 KB each are made in a temporary folder; then ``place_picks`` copies them into a
picks folder (a fresh one each repeat), and ``xmp.tag`` tags each in a new sidecar (removed between
repeats). Wall time (the work is mostly system calls and fsyncs) and CPU time of this process, median
of the repeats, per photo. The public calls used are the same in every version, so the script runs on
an older tree as it is.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from harness import machine, timed, write_json

import novelfind
from novelfind.outputs import xmp
from novelfind.outputs.placement import place_picks
from novelfind.picks import Pick


def _photos(folder: Path, n: int) -> list[Path]:
    folder.mkdir()
    paths = []
    for i in range(n):
        path = folder / f"IMG_{i:05d}.jpg"
        path.write_bytes(os.urandom(200_000))
        paths.append(path)
    return paths


def measure(n: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        paths = _photos(Path(tmp) / "library", n)
        picks = [
            Pick(rank=i + 1, score=1.0, path=p, size=p.stat().st_size, mtime_ns=p.stat().st_mtime_ns)
            for i, p in enumerate(paths)
        ]
        place, tag = [], []
        for r in range(repeats):
            dest = Path(tmp) / f"picks-{r}"
            place.append(timed(lambda dest=dest: place_picks(picks, dest)))
            shutil.rmtree(dest)
            if xmp.available():
                tag.append(timed(lambda: [xmp.tag(p, rank=1, score=0.5) for p in paths]))
                for sidecar in Path(tmp, "library").glob("*.xmp"):
                    sidecar.unlink()

    def per_photo(runs: list[tuple[float, float]]) -> dict:
        if not runs:
            return {}
        return {
            "wall_ms": round(statistics.median(w for w, _ in runs) / n * 1000, 3),
            "cpu_ms": round(statistics.median(c for _, c in runs) / n * 1000, 3),
        }

    return {"place_copy": per_photo(place), "xmp_tag": per_photo(tag)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {
        "novelfind": os.path.dirname(novelfind.__file__),
        "photos": args.photos,
        "repeats": args.repeats,
        "machine": machine("cpus", "python"),
        "per_photo": measure(args.photos, args.repeats),
    }
    write_json(result, args.out, indent=1, echo=True)


if __name__ == "__main__":
    main()
