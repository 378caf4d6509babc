#!/usr/bin/env python3
"""What ``--report`` adds to a re-scan: the ``novelfind`` process with and without it, on a library of
camera-sized photos whose vectors are all cached.

  python scripts/bench_report.py --out docs/bench/report-2core.json

The library (``--photos`` 300 JPEGs, ``--size`` 4032x3024 px: a 12 MP phone's) is built once under
``--library`` from the README's example set (scripts/photosets.py: campus and flower photos, five odd
ones; the rest repeated with other crops and jitter), each scaled up to the size, so that reading a
thumbnail costs what it costs for a real photo. A first scan fills a fresh cache; then the re-scans,
``--k`` 100, take turns with and without ``--report`` (``--runs`` each, so a busy machine slows both
alike). Wall time and CPU time (user + system, the process and its children) of each run; the
medians and their ratio are what to compare. ``--tree`` runs another source tree (``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build_library(dest: Path, photos: int, size: tuple[int, int]) -> list[Path]:
    """``photos`` JPEGs of ``size`` under ``dest`` (kept between runs: built when missing)."""
    existing = sorted(dest.glob("IMG_*.jpg"))
    if len(existing) == photos:
        return existing
    sys.path.insert(0, str(HERE))
    from PIL import Image
    from photosets import example_set

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


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(tree: Path, library: Path, cache: Path, k: int, extra: list[str]) -> dict[str, float]:
    args = [sys.executable, "-m", "novelfind", "scan", str(library), "--k", str(k), "--cache", str(cache)]
    args += ["--format", "paths", "--device", "cpu", *extra]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cpu, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0 or len(done.stdout.splitlines()) != k:
        raise SystemExit(f"exit {done.returncode}, {len(done.stdout.splitlines())} picks\n{done.stderr}")
    return {"wall_s": round(wall, 3), "cpu_s": round(_children_cpu() - cpu, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--library", type=Path, default=Path(tempfile.gettempdir()) / "novelfind-bench-report")
    ap.add_argument("--photos", type=int, default=300)
    ap.add_argument("--size", default="4032x3024", help="WIDTHxHEIGHT of each photo")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tree", type=Path, default=HERE.parent, help="the novelfind source tree to run")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    width, height = (int(v) for v in a.size.lower().split("x"))
    paths = build_library(a.library, a.photos, (width, height))
    megabytes = sum(p.stat().st_size for p in paths) / 1e6
    print(f"{len(paths)} photos, {width}x{height}, {megabytes:.0f} MB in {a.library}", file=sys.stderr)
    runs: dict[str, list[dict[str, float]]] = {"scan": [], "scan --report": []}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache.sqlite"
        first = run_once(a.tree, a.library, cache, a.k, [])  # fills the cache
        print(f"first scan: {first}", file=sys.stderr)
        for i in range(a.runs):
            for name in runs:
                extra = ["--report", str(Path(tmp) / f"r{i}.html")] if "--report" in name else []
                runs[name].append(run_once(a.tree, a.library, cache, a.k, extra))
                print(f"{name}: {runs[name][-1]}", file=sys.stderr)
        report_mb = (Path(tmp) / "r0.html").stat().st_size / 1e6
    medians = {
        name: {key: round(statistics.median(r[key] for r in rs), 3) for key in ("wall_s", "cpu_s")}
        for name, rs in runs.items()
    }
    ratio = round(medians["scan --report"]["wall_s"] / medians["scan"]["wall_s"], 2)
    result = {
        "what": f"re-scan of {len(paths)} cached photos ({width}x{height} JPEG), --k {a.k}, with and "
        "without --report (the novelfind process, wall and CPU seconds)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "first_scan": first,
        "runs": runs,
        "median": medians,
        "report_over_scan_wall": ratio,
        "report_mb": round(report_mb, 2),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
