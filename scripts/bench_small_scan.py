#!/usr/bin/env python3
"""What a small scan costs: the ``novelfind`` process for a 5-photo library, in versions side by side.

  python scripts/bench_small_scan.py --tree before=/tmp/novelfind-before --tree after=. \
      --out docs/bench/small-scan-2core.json

Each ``--tree NAME=PATH`` is a source tree of novelfind (a checkout, or ``git archive`` of a commit
unpacked), run as ``python -m novelfind`` with ``PYTHONPATH=PATH``. The library is five photos from
scikit-image's bundled data; each run gets a fresh cache, so all five are decoded and go through the
model (the real weights, on the CPU), once as a plain scan and once with ``--report``. The trees take
turns run by run, so a busy machine slows them alike. Wall time and CPU time (user + system, the
process and the children it waited for) of each run; the medians are what to compare.

  python scripts/bench_small_scan.py --decode-step --out docs/bench/small-scan-decode-2core.json

times the decode step alone, in a fresh Python process each run: the five photos decoded in that
process (``stage.decode_file``) against one ``pillow.ProcessDecoder(workers=0)``, which starts its
decode process (and the forkserver) first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import skimage
from harness import machine, run_timed, write_json

PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png")
CONFIGS = {"scan": [], "scan --report": ["--report", "{tmp}/r.html"]}


def run_once(tree: Path, library: Path, extra: list[str], tmp: Path) -> dict[str, float]:
    cache = tmp / "cache.sqlite"
    cache.unlink(missing_ok=True)
    args = [sys.executable, "-m", "novelfind", "scan", str(library), "--k", "3", "--cache", str(cache)]
    args += ["--format", "paths", "--device", "cpu", *[a.format(tmp=tmp) for a in extra]]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done, wall, cpu = run_timed(args, env=env)
    if done.returncode != 0 or len(done.stdout.splitlines()) != 3:
        raise SystemExit(f"{tree}: exit {done.returncode}\n{done.stderr}")
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}


_DECODE_STEP = """
import json, sys, time
from novelfind.extract.decoders.pillow import ProcessDecoder
from novelfind.extract.stage import decode_file
def main():
    paths = sys.argv[2:]
    start = time.perf_counter()
    if sys.argv[1] == "in-process":
        results = [decode_file(p, frozenset()) for p in paths]
    else:
        decoder = ProcessDecoder(0, 4)
        results = [r for _, r in decoder.decode(paths)]
        decoder.close()
    assert all(r.digest for r in results)
    print(time.perf_counter() - start)
if __name__ == "__main__":
    main()
"""


def decode_step(library: Path, tmp: Path, runs: int) -> dict[str, list[float]]:
    script = tmp / "decode_step.py"
    script.write_text(_DECODE_STEP)
    paths = [str(library / name) for name in PHOTOS]
    got: dict[str, list[float]] = {"in-process": [], "one-process": []}
    for _ in range(runs):
        for mode, times in got.items():
            out = subprocess.run([sys.executable, str(script), mode, *paths], capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(out.stderr)
            times.append(round(float(out.stdout), 3))
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH of a novelfind source tree")
    ap.add_argument("--decode-step", action="store_true", help="time the decode step alone (this tree)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path)
    opts = ap.parse_args()
    trees = {name: Path(path).resolve() for name, _, path in (t.partition("=") for t in opts.tree)}
    if not trees and not opts.decode_step:
        ap.error("give --tree NAME=PATH (or --decode-step)")
    runs: dict[str, dict[str, list[dict[str, float]]]] = {c: {n: [] for n in trees} for c in CONFIGS}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        library = tmp / "library"
        library.mkdir()
        for name in PHOTOS:
            shutil.copy(Path(skimage.__file__).parent / "data" / name, library / name)
        if opts.decode_step:
            times = decode_step(library, tmp, opts.runs)
            result = {
                "what": "decoding 5 photos in a fresh process: in that process, or by one decode process",
                "machine": machine("cpus", "python"),
                "median_s": {mode: statistics.median(t) for mode, t in times.items()},
                "runs_s": times,
            }
            write_json(result, opts.out, echo=True)
            return
        for tree in trees.values():  # warm the file cache and the compiled modules of each tree
            run_once(tree, library, [], tmp)
        for _ in range(opts.runs):
            for config, extra in CONFIGS.items():
                for name, tree in trees.items():
                    runs[config][name].append(run_once(tree, library, extra, tmp))
    summary = {
        config: {
            name: {key: statistics.median(r[key] for r in got) for key in ("wall_s", "cpu_s")}
            for name, got in by_tree.items()
        }
        for config, by_tree in runs.items()
    }
    result = {
        "what": "novelfind scan of 5 photos (fresh cache each run): the process's wall and CPU seconds",
        "machine": machine("cpus", "platform", "python"),
        "trees": {name: str(path) for name, path in trees.items()},
        "median": summary,
        "runs": runs,
    }
    write_json(result, opts.out, echo=True)


if __name__ == "__main__":
    main()
