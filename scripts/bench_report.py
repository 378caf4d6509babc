#!/usr/bin/env python3
"""What ``--report`` adds to a re-scan: the ``novelfind`` process with and without it, on a library of
camera-sized photos whose vectors are all cached.

  python scripts/bench_report.py --tree before=/tmp/novelfind-before --tree after=. \
      --out docs/bench/report-2core.json

The library (``--photos`` 300 JPEGs, ``--size`` 4032x3024 px: a 12 MP phone's) is built once under
``--library`` from the README's example set (scripts/photosets.py: campus and flower photos, five odd
ones; the rest repeated with other crops and jitter), each scaled up to the size, so that reading a
thumbnail costs what it costs for a real photo. A first scan fills a fresh cache; then the re-scans,
``--k`` 100, take turns with and without ``--report`` (``--runs`` each, so a busy machine slows both
alike). The first re-scan with ``--report`` is its first report (``report_first``: no thumbnail kept
yet); the others show the same photos again (``report_again``). Each run's wall time, and its CPU
time: user + system of the whole process tree (the decode workers are the forkserver's children,
which ``getrusage`` does not count), sampled from /proc every 0.1 s, so it holds on a busy machine
where wall time does not. ``--tree NAME=PATH`` (repeatable) runs source trees side by side
(``PYTHONPATH``), each with its own fresh cache, run by run in turn.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import TICK, Sampler, children_cpu, descendants, machine, process_table, write_json

HERE = Path(__file__).resolve().parent


def build_library(dest: Path, photos: int, size: tuple[int, int]) -> list[Path]:
    """``photos`` JPEGs of ``size`` under ``dest`` (kept between runs: built when missing)."""
    existing = sorted(dest.glob("IMG_*.jpg"))
    if len(existing) == photos:
        return existing
    sys.path.insert(0, str(HERE))
    from photosets import example_set
    from PIL import Image

    dest.mkdir(parents=True, exist_ok=True)
    for old in existing[photos:]:
        old.unlink()
    images = example_set(n_normal=photos - 5).images
    paths = []
    for i, im in enumerate(images, 1):
        path = dest / f"IMG_{i:04d}.jpg"
        if not path.exists():  # a build that was stopped goes on where it was
            tmp = path.with_suffix(".part")
            im.convert("RGB").resize(size, Image.Resampling.BICUBIC).save(tmp, "JPEG", quality=88)
            tmp.rename(path)
        paths.append(path)
    return paths


def _tree_cpu(root: int, seen: dict[int, float]) -> None:
    """Add to ``seen`` (pid -> CPU seconds so far) every process descended from ``root``."""
    table = process_table()
    for pid in descendants(root, table) & table.keys():
        seen[pid] = max(seen.get(pid, 0.0), table[pid][1] / TICK)


def run_once(tree: Path, library: Path, cache: Path, k: int, extra: list[str]) -> dict[str, float]:
    args = [sys.executable, "-m", "novelfind", "scan", str(library), "--k", str(k), "--cache", str(cache)]
    args += ["--format", "paths", "--device", "cpu", *extra]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = children_cpu()  # the main process itself, exactly, once it has been waited for
    start = time.perf_counter()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, float] = {}
    with Sampler(lambda: _tree_cpu(proc.pid, seen)):
        out, err = proc.communicate()
        wall = time.perf_counter() - start
    if proc.returncode != 0 or len(out.splitlines()) != k:
        raise SystemExit(f"exit {proc.returncode}, {len(out.splitlines())} picks\n{err}")
    seen.pop(proc.pid, None)
    main_cpu = children_cpu() - before
    return {"wall_s": round(wall, 3), "cpu_s": round(main_cpu + sum(seen.values()), 3)}


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(r[key] for r in runs), 3) for key in ("wall_s", "cpu_s")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--library", type=Path, default=Path(tempfile.gettempdir()) / "novelfind-bench-report")
    ap.add_argument("--photos", type=int, default=300)
    ap.add_argument("--size", default="4032x3024", help="WIDTHxHEIGHT of each photo")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3, help="re-scans of each kind (the first report is one)")
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH of a source tree (default: .)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in a.tree) or {"this": str(HERE.parent)}
    width, height = (int(v) for v in a.size.lower().split("x"))
    paths = build_library(a.library, a.photos, (width, height))
    megabytes = sum(p.stat().st_size for p in paths) / 1e6
    print(f"{len(paths)} photos, {width}x{height}, {megabytes:.0f} MB in {a.library}", file=sys.stderr)
    kinds = ("scan", "scan --report")
    runs = {name: {kind: [] for kind in kinds} for name in trees}
    first = {}
    with tempfile.TemporaryDirectory() as tmp:
        caches = {}
        for name, tree in trees.items():
            (Path(tmp) / name).mkdir()
            caches[name] = Path(tmp) / name / "cache.sqlite"  # the thumbnails go beside it
            first[name] = run_once(Path(tree), a.library, caches[name], a.k, [])  # fills the cache
            print(f"{name} first scan: {first[name]}", file=sys.stderr)
        for i in range(a.runs):
            for name, tree in trees.items():
                for kind in kinds:
                    extra = ["--report", str(Path(tmp) / name / f"r{i}.html")] if "--report" in kind else []
                    runs[name][kind].append(run_once(Path(tree), a.library, caches[name], a.k, extra))
                    print(f"{name} {kind}: {runs[name][kind][-1]}", file=sys.stderr)
        report_mb = {name: (Path(tmp) / name / "r0.html").stat().st_size / 1e6 for name in trees}
    results = {}
    for name in trees:
        scan, report = runs[name]["scan"], runs[name]["scan --report"]
        again = _medians(report[1:] or report)
        med = {"scan": _medians(scan), "report_first": report[0], "report_again": again}
        results[name] = {
            "tree": trees[name],
            "first_scan": first[name],
            "runs": runs[name],
            "median": med,
            "report_first_over_scan": {
                k: round(med["report_first"][k] / med["scan"][k], 2) for k in ("wall_s", "cpu_s")
            },
            "report_again_over_scan": {
                k: round(med["report_again"][k] / med["scan"][k], 2) for k in ("wall_s", "cpu_s")
            },
            "report_mb": round(report_mb[name], 2),
        }
    result = {
        "what": f"re-scan of {len(paths)} cached photos ({width}x{height} JPEG), --k {a.k}, with and "
        "without --report: the novelfind process tree, wall and CPU seconds",
        "machine": machine("cpus", "python", "load"),
        "trees": results,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(result, a.out, echo=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
