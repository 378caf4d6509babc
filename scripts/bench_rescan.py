#!/usr/bin/env python3
"""What a re-scan with nothing new costs: the ``novelfind`` process over a cached library, against a bare
``python3 -c "import torch"``.

  python scripts/bench_rescan.py --tree before=/tmp/novelfind-before --tree after=. \
      --out docs/bench/rescan-2core.json

The library is ``--count`` small photos (default 3,000, 160 x 120 JPEGs): random crops of the README
example's sources (``photosets.example_set``: campus views, flower beds, five odd ones), each jittered,
so no two are alike; with ``--bursts``, a dated camera roll shot in bursts of near-identical frames a
second apart (``build_burst_library``), where every pick is a moment that is looked up. It is built
once under ``--work`` and scanned once with the real model on the CPU to fill the cache (minutes on a
2-core machine: that scan is timed too, but it is not the point). Then each run is a fresh
``python -m novelfind scan LIB --k 20`` (``--k``) on the filled cache (nothing to extract;
the default method and device), taking turns with ``python -c "import torch"`` and the other trees, so
a busy machine slows them alike. For each run: wall time and peak resident memory of the process
(``os.wait4``: the largest of the process and the children it waited for). The medians are what to
compare; ``ratio_to_import_torch`` is the median re-scan over the median bare ``import torch``.

Each ``--tree NAME=PATH`` is a source tree of novelfind (a checkout, or ``git archive`` of a commit
unpacked), run with ``PYTHONPATH=PATH``; the first tree fills the cache, which the others share (the
same cache format). Whether a run imported torch or onnxruntime is read from ``python -X importtime``
in one extra run per tree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import machine, wait_peak, write_json  # noqa: E402
from photosets import burst_frame, example_set, load_sources, photo_jitter, random_crop  # noqa: E402
from PIL import Image  # noqa: E402

SIZE = (160, 120)


def build_library(dest: Path, count: int, seed: int = 0) -> None:
    """``count`` JPEGs under ``dest`` (100 per folder), unless it holds them already."""
    if dest.is_dir() and sum(1 for _ in dest.rglob("*.jpg")) == count:
        return
    base = example_set(seed=seed)
    rng = np.random.default_rng([seed, 35])
    for i in range(count):
        im = base.images[i % len(base.images)]
        im = photo_jitter(rng, random_crop(rng, im, (0.4, 0.9)), 0.8).resize(SIZE)
        path = dest / f"roll{i // 100:03d}" / f"IMG_{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        im.convert("RGB").save(path, "JPEG", quality=85)


def build_burst_library(dest: Path, count: int, seed: int = 0) -> None:
    """``count`` dated JPEGs under ``dest``, a camera roll shot in bursts: views of the example's scenes
    (campus, flower beds, aerial mosaics), each a burst of 1 to 12 frames a second apart
    (``photosets.burst_frame``: near-identical, so every pick's moment is looked up), a few bursts an
    hour, over days; the capture time in each file's EXIF. Unless it holds them already."""
    if dest.is_dir() and sum(1 for _ in dest.rglob("*.jpg")) == count:
        return
    src = load_sources()
    pool = [im for group in ("campus", "aerial", "flowers") for im in src.mvtb[group]]
    rng = np.random.default_rng([seed, 36])
    when, i = 1_717_228_800, 0  # 2024-06-01 08:00 UTC
    while i < count:
        im = pool[int(rng.integers(len(pool)))]
        w, h = im.size
        side = int(min(w, h) * rng.uniform(0.3, 0.8))
        box = (int(rng.integers(0, w - side + 1)), int(rng.integers(0, h - side + 1)), side)
        for _ in range(min(count - i, 1 if rng.random() < 0.3 else int(rng.integers(2, 13)))):
            exif = Image.Exif()
            exif.get_ifd(0x8769)[0x9003] = time.strftime("%Y:%m:%d %H:%M:%S", time.gmtime(when))
            path = dest / f"roll{i // 100:03d}" / f"IMG_{i:05d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            burst_frame(rng, im, box).resize(SIZE).save(path, "JPEG", quality=85, exif=exif.tobytes())
            when, i = when + 1, i + 1
        when += int(rng.uniform(600, 5400))  # the next burst minutes later
        if time.gmtime(when).tm_hour >= 20:  # the next day, at eight
            when += (24 - time.gmtime(when).tm_hour + 8) * 3600


def timed(args: list[str], env: dict[str, str]) -> dict[str, float]:
    """Wall time and peak RSS (MB) of one process, its output discarded; SystemExit when it fails. Run
    from the root folder: ``python -m`` puts the working folder first on the path, before PYTHONPATH."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, env=env, cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read()
    code, peak_mb = wait_peak(proc)
    wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"{' '.join(args)}: exit {code}\n{stderr.decode(errors='replace')}")
    return {"wall_s": round(wall, 3), "peak_rss_mb": peak_mb}


def scan_args(library: Path, cache: Path, k: int = 20) -> list[str]:
    return [
        sys.executable,
        "-m",
        "novelfind",
        "scan",
        str(library),
        "--k",
        str(k),
        "--cache",
        str(cache),
        "-q",
    ]


def imported(args: list[str], env: dict[str, str]) -> list[str]:
    """The heavy modules (torch, onnxruntime) a run imports, from ``-X importtime``."""
    done = subprocess.run(
        [args[0], "-X", "importtime", *args[1:]], env=env, cwd="/", capture_output=True, text=True, check=True
    )
    names = {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return sorted(names & {"torch", "onnxruntime"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH of a novelfind source tree")
    ap.add_argument("--count", type=int, default=3000, help="photos in the library (default 3000)")
    ap.add_argument("--runs", type=int, default=7, help="timed runs of each (default 7)")
    ap.add_argument("--work", type=Path, default=Path("bench-results/rescan"), help="library and cache")
    ap.add_argument("--out", type=Path, default=Path("bench-results/rescan.json"))
    ap.add_argument(
        "--bursts", action="store_true", help="a dated library shot in bursts (every pick's moment looked up)"
    )
    ap.add_argument("--k", type=int, default=20, help="picks (default 20)")
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in (a.tree or [f"this={Path(__file__).resolve().parents[1]}"]))
    work = a.work.resolve()
    kind = "bursts-" if a.bursts else ""
    library, cache = work / f"photos-{kind}{a.count}", work / f"cache-{kind}{a.count}.sqlite"
    (build_burst_library if a.bursts else build_library)(library, a.count)
    envs = {name: {**os.environ, "PYTHONPATH": str(Path(path).resolve())} for name, path in trees.items()}
    first = next(iter(envs.values()))
    fill = None
    if not cache.exists():
        fill = timed(scan_args(library, cache, a.k), first)
        print(
            f"first scan (fills the cache): {fill['wall_s']:.1f} s, {fill['peak_rss_mb']:.0f} MB",
            file=sys.stderr,
        )
    runs: dict[str, list[dict[str, float]]] = {"import torch": [], **{name: [] for name in trees}}
    for r in range(a.runs):
        runs["import torch"].append(timed([sys.executable, "-c", "import torch"], first))
        for name, env in envs.items():
            runs[name].append(timed(scan_args(library, cache, a.k), env))
        print(
            f"run {r + 1}/{a.runs}: " + ", ".join(f"{n} {v[-1]['wall_s']:.2f} s" for n, v in runs.items()),
            file=sys.stderr,
        )
    med = {
        name: {
            "wall_s": statistics.median(x["wall_s"] for x in v),
            "peak_rss_mb": statistics.median(x["peak_rss_mb"] for x in v),
        }
        for name, v in runs.items()
    }
    torch_s = med["import torch"]["wall_s"]
    for name in trees:
        med[name]["ratio_to_import_torch"] = round(med[name]["wall_s"] / torch_s, 2)
        med[name]["imports"] = imported(scan_args(library, cache, a.k), envs[name])
    result = {
        "what": f"novelfind scan of {a.count} cached {SIZE[0]}x{SIZE[1]} photos"
        + (" shot in bursts, dated" if a.bursts else "")
        + f", --k {a.k}, the defaults",
        "machine": machine("cpus", "python", "load_avg_1m_end=load_1m"),
        "count": a.count,
        "first_scan": fill,
        "median": med,
        "runs": runs,
    }
    write_json(result, a.out)
    print(f"{'':14} {'wall s':>8} {'peak MB':>8} {'x import torch':>14}  imports")
    for name, m in med.items():
        ratio, heavy = m.get("ratio_to_import_torch", 1.0), ",".join(m.get("imports", [])) or "-"
        print(f"{name:14} {m['wall_s']:8.2f} {m['peak_rss_mb']:8.0f} {ratio:14.2f}  {heavy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
