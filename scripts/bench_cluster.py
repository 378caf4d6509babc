#!/usr/bin/env python3
"""Local engine against the Ray engine (one and two worker nodes) on the same photos.

A Ray cluster is started on this machine with ``ray.cluster_utils.Cluster``: a head without CPUs (the
driver's node) and 1 or 2 worker nodes of one CPU each. For each configuration the same generated photos
(``--count`` JPEGs of ``--size``, decoded at reduced scale like camera files) are featurised with the real
MobileNet-V2, and the benchmark records:

- ``startup_s``: connecting the driver, verifying the model and starting the workers, up to the first
  result (for the local engine: building the extractor and starting its decode processes);
- ``steady_images_per_s``: images per second after the first result;
- ``images_per_s`` and ``ms_per_image`` over the whole run;
- ``driver_cpu_ms_per_image``: CPU time of the driver process per image after the first result (for Ray:
  what stays on one machine however many nodes there are: receiving results; the scan adds walking and
  cache commits; for the local engine it includes the model, which runs in the driver);
- ``overhead_ms_per_image``: the run's wall time per image minus the local engine's on the same number
  of cores (the whole cluster is pinned to 1 core for one worker node, 2 for two: ``sched_setaffinity``);
  ``steady_overhead_ms_per_image`` the same after the first result (start-up excluded).

On a 2-core machine the "nodes" share the same two cores as the driver, so this measures the engine's
overhead, not a speed-up. The model for real nodes is written into the JSON (``model``) and
docs/scaling.md.

    python scripts/bench_cluster.py                     # 300 photos of 1600x1200
    python scripts/bench_cluster.py --count 60 --out /tmp/c.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from harness import machine, write_json
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MB = 1 << 20
OBJECT_STORE = 100 * MB
MODEL = (
    "t(N files, n nodes of c CPUs) = S + N / (n * c * r) + N * d, with S the start-up (driver connects, "
    "verifies and ships the model, ~30 MB per node once; workers start in parallel: seconds, not per "
    "file), r the per-CPU rate of decode + model in a worker (this box: the local engine's rate per core), "
    "and d the driver's time per file (walk, cache lookup, receiving the vector, cache commit), which does "
    "not shrink with n. Speed-up stops growing near n * c * r = 1 / d: the driver's ceiling."
)


def _load() -> float:
    return os.getloadavg()[0]


def make_photos(folder: Path, count: int, size: tuple[int, int]) -> list[Path]:
    """Smooth colour fields with noise, as JPEG: decoding costs about what a camera file of that size does."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    paths = []
    for i in range(count):
        path = folder / f"IMG_{i:05d}.jpg"
        paths.append(path)
        if path.is_file():
            continue
        c = rng.uniform(30, 220, 3)
        img = c * (0.5 + 0.5 * np.sin(xx[..., None] / rng.uniform(20, 200) + yy[..., None] / 97.0))
        img += rng.normal(0, 10, (h, w, 3))
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(path, quality=90)
    return paths


def run_local(paths: list[Path], cpus: int, batch: int) -> dict:
    """The local engine (local.extract, ONNX Runtime), on ``cpus`` cores, no cache."""
    from novelfind.cache import NullCache
    from novelfind.extract.engines import local
    from novelfind.model.features import build_extractor

    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(sorted(saved)[:cpus]))  # decode workers inherit it
    try:
        records = [
            SimpleNamespace(path=p, size=p.stat().st_size, mtime_ns=p.stat().st_mtime_ns) for p in paths
        ]
        started = time.monotonic()
        extractor = build_extractor(device="cpu", threads=cpus)
        # first result: one file through the whole path (model load included)
        local.extract(records[:1], extractor, NullCache(), batch_size=batch, workers=0)
        first, cpu_first = time.monotonic(), time.process_time()
        result = local.extract(records[1:], extractor, NullCache(), batch_size=batch, workers=cpus)
        wall = time.monotonic() - started
        steady = time.monotonic() - first
        cpu = time.process_time() - cpu_first
    finally:
        os.sched_setaffinity(0, saved)
    assert len(result.features) == len(paths) - 1
    return _figures("local", 0, cpus, len(paths), wall, first - started, steady, cpu)


def run_ray(paths: list[Path], nodes: int, batch: int) -> dict:
    """The Ray engine on a local cluster of ``nodes`` 1-CPU worker nodes, all pinned to ``nodes`` cores."""
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(sorted(saved)[:nodes]))  # the cluster's processes inherit it
    try:
        return _run_ray(paths, nodes, batch)
    finally:
        os.sched_setaffinity(0, saved)


def _run_ray(paths: list[Path], nodes: int, batch: int) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from novelfind.extract.engines.ray import RayEngine

    t0 = time.monotonic()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "object_store_memory": OBJECT_STORE, "include_dashboard": False},
    )
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
        cluster.wait_for_nodes()
        cluster_s = time.monotonic() - t0
        received = 0
        started = time.monotonic()
        first = None
        with RayEngine(cluster.address, batch_size=batch) as engine:
            for b in engine.run([str(p) for p in paths]):
                received += len(b)
                if first is None:
                    first, cpu_first = time.monotonic(), time.process_time()
        wall = time.monotonic() - started
        cpu = time.process_time() - cpu_first  # steady state: start-up (model check, connect) excluded
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    assert received == len(paths)
    out = _figures("ray", nodes, nodes, len(paths), wall, first - started, time.monotonic() - first, cpu)
    out["cluster_start_s"] = round(cluster_s, 2)
    return out


def _figures(engine, nodes, cpus, n, wall, startup, steady, cpu) -> dict:
    return {
        "engine": engine,
        "worker_nodes": nodes,
        "cpus": cpus,
        "images": n,
        "wall_s": round(wall, 2),
        "startup_s": round(startup, 2),
        "steady_images_per_s": round((n - 1) / steady, 2) if steady > 0 else None,
        "images_per_s": round(n / wall, 2),
        "ms_per_image": round(1000 * wall / n, 2),
        "driver_cpu_ms_per_image": round(1000 * cpu / n, 3),
        "load_avg_1m": round(_load(), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--size", default="1600x1200", help="photo size WxH")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--library", type=Path, default=None, help="where the photos are generated (kept)")
    ap.add_argument("--out", type=Path, default=Path("bench_cluster.json"))
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.lower().split("x"))
    folder = args.library or Path(tempfile.gettempdir()) / f"novelfind-bench-cluster-{w}x{h}"
    paths = make_photos(folder, args.count, (w, h))
    load_before = _load()
    runs = []
    for name, fn in (
        ("local, 1 CPU", lambda: run_local(paths, 1, args.batch)),
        ("ray, 1 worker node", lambda: run_ray(paths, 1, args.batch)),
        ("local, 2 CPUs", lambda: run_local(paths, 2, args.batch)),
        ("ray, 2 worker nodes", lambda: run_ray(paths, 2, args.batch)),
    ):
        print(f"{name} ...", file=sys.stderr, flush=True)
        runs.append(fn())
    by = {(r["engine"], r["cpus"]): r for r in runs}
    for r in runs:
        if r["engine"] == "ray":
            local = by[("local", r["cpus"])]
            r["overhead_ms_per_image"] = round(r["ms_per_image"] - local["ms_per_image"], 2)
            r["steady_overhead_ms_per_image"] = round(
                1000 / r["steady_images_per_s"] - 1000 / local["steady_images_per_s"], 2
            )
    report = {
        "benchmark": "bench_cluster",
        "machine": machine("cpus", "platform", "python"),
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(_load(), 2),
        "photos": {"count": args.count, "size": f"{w}x{h}", "folder": str(folder)},
        "batch_size": args.batch,
        "note": "2-core machine: the worker nodes share the driver's cores; this is overhead, not speed-up",
        "runs": runs,
        "model": MODEL,
    }
    write_json(report, args.out)
    cols = (
        "engine",
        "worker_nodes",
        "cpus",
        "startup_s",
        "steady_images_per_s",
        "images_per_s",
        "ms_per_image",
        "driver_cpu_ms_per_image",
        "overhead_ms_per_image",
        "steady_overhead_ms_per_image",
        "load_avg_1m",
    )
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in runs:
        print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    print(f"written {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
