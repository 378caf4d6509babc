#!/usr/bin/env python3
"""Benchmark feature extraction: naive pipeline vs novelfind, side by side, plus warm re-scan time.

  python scripts/bench_extract.py                 # 200 12-MP JPEGs (+ a few PNGs), 10,000-image re-scan
  python scripts/bench_extract.py --count 64 --rescan-count 2000 --out /tmp/b.json
  python scripts/bench_extract.py --raw 12 --raw-only   # RAW files: embedded preview vs demosaic

Photo-like test images are built from scikit-image's bundled photos (random crop, flip, colour change,
upscale to 4000x3000, sensor-like noise, JPEG quality 92, EXIF orientation on every 4th photo; every 25th
file a 1080p PNG), so file sizes (~3 MB) and decode cost resemble phone photos. Each measurement runs in its
own subprocess; peak memory is the summed RSS of that process tree (decode workers included), sampled, and
CPU time per image is summed over the same tree: cores / (CPU s per image) bounds images/s on idle cores, a
figure that does not depend on what else the machine is running.

With ``--raw N``, N 24-MP DNGs of each kind of ``scripts/bench_raw.py`` (lossless-JPEG tiles, ~30 MB; a
1616 x 1080 embedded preview, a full-size one, none) and the same photos as JPEGs go through the same
extraction (``novelfind.extract.engines.local.extract``, real model, one decode worker per core): RAW
throughput as a scan sees it. ``scripts/bench_raw.py`` times the decoding alone, per file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import (
    TICK,
    CaseFailed,
    Sampler,
    descendants,
    in_child,
    machine,
    process_table,
    rss_kib,
    sample_images,
    self_peak_mb,
    write_json,
)

ROOT = Path(__file__).resolve().parent.parent

PHOTO_SIZE = (4000, 3000)  # 12 MP

# ---------------------------------------------------------------------------------------------- data


def _make_one(args: tuple[int, str, int]) -> int:
    """Write image ``i`` to ``path``; returns its size in bytes."""
    from PIL import Image

    i, path, seed = args
    rng = np.random.default_rng(seed + i)
    src = _SRC[i % len(_SRC)]
    h, w = src.shape[:2]
    ch, cw = int(h * rng.uniform(0.6, 1.0)), int(w * rng.uniform(0.6, 1.0))
    y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
    crop = src[y : y + ch, x : x + cw].astype(np.float32)
    crop = crop * rng.uniform(0.8, 1.2, 3) + rng.uniform(-20, 20, 3)  # colour / exposure change
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    small = Image.fromarray(np.clip(crop, 0, 255).astype(np.uint8))
    if path.endswith(".png"):  # screenshots / edits: smaller, lossless
        small.resize((1920, 1080), Image.Resampling.BICUBIC).save(path, optimize=False)
        return os.path.getsize(path)
    big = np.asarray(small.resize(PHOTO_SIZE, Image.Resampling.BICUBIC), dtype=np.int16)
    shift = int(rng.integers(0, _NOISE.shape[1] - PHOTO_SIZE[0]))
    big = big + _NOISE[: PHOTO_SIZE[1], shift : shift + PHOTO_SIZE[0]]  # sensor-like grain
    img = Image.fromarray(np.clip(big, 0, 255).astype(np.uint8))
    exif = Image.Exif()
    exif[0x0110] = "BenchCam"
    exif[0x0112] = (3, 6, 8)[i // 4 % 3] if i % 4 == 0 else 1  # orientation on every 4th photo
    img.save(path, quality=92, exif=exif.tobytes())
    return os.path.getsize(path)


def _init_maker() -> None:
    global _SRC, _NOISE
    _SRC = sample_images()
    rng = np.random.default_rng(7)
    _NOISE = rng.normal(0, 6, (PHOTO_SIZE[1], PHOTO_SIZE[0] + 256, 3)).astype(np.int16)


def make_photos(folder: Path, count: int, seed: int = 0) -> dict:
    """``count`` 12-MP JPEGs (every 25th file a 1080p PNG) in ``folder``; reused when already there."""
    import multiprocessing

    folder.mkdir(parents=True, exist_ok=True)
    names = [f"IMG_{i:05d}.png" if i % 25 == 24 else f"IMG_{i:05d}.jpg" for i in range(count)]
    todo = [(i, str(folder / n), seed) for i, n in enumerate(names) if not (folder / n).exists()]
    t = time.perf_counter()
    if todo:
        with multiprocessing.get_context("fork").Pool(initializer=_init_maker) as pool:
            pool.map(_make_one, todo, chunksize=4)
    sizes = [(folder / n).stat().st_size for n in names]
    return {
        "count": count,
        "pngs": sum(n.endswith(".png") for n in names),
        "mean_jpeg_mb": round(
            float(np.mean([s for s, n in zip(sizes, names, strict=True) if n.endswith(".jpg")])) / 1e6, 2
        ),
        "generate_s": round(time.perf_counter() - t, 1),
    }


def make_small_library(folder: Path, count: int) -> None:
    """``count`` tiny distinct JPEGs in 100 sub-folders (for the re-scan measurement)."""
    from PIL import Image

    if folder.exists() and sum(1 for _ in folder.rglob("*.jpg")) == count:
        return
    shutil.rmtree(folder, ignore_errors=True)
    rng = np.random.default_rng(1)
    for i in range(count):
        sub = folder / f"d{i % 100:03d}"
        sub.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)).save(
            sub / f"s{i:06d}.jpg", quality=80
        )


def _image_files(folder: Path, prefix: str = "") -> list:
    from novelfind.media.walk import walk

    return [f for f in walk([folder]) if f.path.name.startswith(prefix)]


# --------------------------------------------------------------------------------------------- phases


class TreeRSS(Sampler):
    """Samples the summed RSS of this process and all its descendants (decode workers of a forkserver are
    grandchildren, which RUSAGE_CHILDREN does not see); keeps the peak, and the CPU ticks of each."""

    def __init__(self, interval: float = 0.1):
        self.peak_kb = 0
        self.cpu_ticks: dict[int, int] = {}  # pid -> latest utime + stime seen (clock ticks)
        super().__init__(self.read, interval)

    def read(self) -> None:
        table = process_table()
        tree = descendants(os.getpid(), table)
        for pid in tree & table.keys():
            self.cpu_ticks[pid] = max(self.cpu_ticks.get(pid, 0), table[pid][1])
        self.peak_kb = max(self.peak_kb, rss_kib(tree))


_TREE: TreeRSS | None = None


def _peak() -> dict:
    out = {"peak_rss_self_mb": self_peak_mb()}
    if _TREE is not None:
        _TREE.read()
        out["peak_rss_tree_mb"] = round(_TREE.peak_kb / 1024, 1)
    return out


def _cpu_mark() -> float:
    """CPU seconds used so far by this process tree (sampled every 0.1 s, so approximate: about +-10%)."""
    if _TREE is None:
        return time.process_time()
    _TREE.read()
    return sum(_TREE.cpu_ticks.values()) / TICK


def _cpu_stats(cpu_s: float, images: int) -> dict:
    """CPU cost per image, and what that allows on this many idle cores (load-independent)."""
    per = cpu_s / max(images, 1)
    cores = len(os.sched_getaffinity(0))
    return {"cpu_ms_per_image": round(per * 1000, 1), "idle_cores_bound_images_per_s": round(cores / per, 1)}


def phase_naive(folder: Path, limit: int | None) -> dict:
    """Full Pillow decode, torchvision transforms, eager PyTorch, batch 32, one process."""
    import torch
    import torchvision
    from PIL import Image, ImageOps

    from novelfind.model.weights import resolve_weights

    files = [f.path for f in _image_files(folder)][:limit]
    t0 = time.perf_counter()
    weights = torchvision.models.MobileNet_V2_Weights.IMAGENET1K_V1
    model = torchvision.models.mobilenet_v2(weights=None)
    model.load_state_dict(torch.load(resolve_weights(), map_location="cpu", weights_only=True))
    model.eval()
    transform = weights.transforms()
    t_model = time.perf_counter() - t0
    outs, batch = [], []
    c0 = _cpu_mark()
    t = time.perf_counter()
    with torch.inference_mode():
        for p in files:
            with Image.open(p) as im:
                img = ImageOps.exif_transpose(im).convert("RGB")
            batch.append(transform(img))
            if len(batch) == 32:
                outs.append(model(torch.stack(batch)).numpy())
                batch = []
        if batch:
            outs.append(model(torch.stack(batch)).numpy())
    secs = time.perf_counter() - t
    cpu = _cpu_mark() - c0
    return {
        "images": len(files),
        "seconds": round(secs, 2),
        "images_per_s": round(len(files) / secs, 2),
        **_cpu_stats(cpu, len(files)),
        "model_load_s": round(t_model, 2),
        "torch_threads": torch.get_num_threads(),
        **_peak(),
    }


def phase_fast(folder: Path, backend: str, workers: int | None, batch_size: int, prefix: str = "") -> dict:
    """``local.extract`` (novelfind.extract.engines) with the real extractor and a fresh cache (the files
    named ``prefix*``)."""
    from novelfind.extract.engines.local import extract
    from novelfind.model.features import build_extractor

    files = _image_files(folder, prefix)
    extractor = build_extractor(backend=backend, device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        cache = _open_cache(Path(tmp) / "features.sqlite", extractor.model_key)
        c0 = _cpu_mark()
        t = time.perf_counter()
        result = extract(files, extractor, cache, batch_size=batch_size, workers=workers)
        secs = time.perf_counter() - t
        cpu = _cpu_mark() - c0
        _close(cache)
    return {
        "images": len(files),
        "extracted": result.extracted,
        "failed": len(result.failures),
        "seconds": round(secs, 2),
        "images_per_s": round(len(files) / secs, 2),
        **_cpu_stats(cpu, len(files)),
        "backend": getattr(extractor, "backend", backend),
        "workers": workers,
        "batch_size": batch_size,
        **_peak(),
    }


def phase_rescan(folder: Path) -> dict:
    """Warm re-scan: walk + cache lookups of an unchanged library; no image byte is read."""
    import hashlib

    from novelfind.extract.engines.local import extract
    from novelfind.model.weights import model_key_for

    key = model_key_for()
    cache_path = folder.parent / "rescan-features.sqlite"
    files = _image_files(folder)
    cache = _open_cache(cache_path, key)
    stats = cache.get_many_by_stat(files) if hasattr(cache, "get_many_by_stat") else []
    if sum(v is not None for v in stats) != len(files):  # fill once: vectors stand in for real ones
        rng = np.random.default_rng(0)
        rows = []
        for f in files:
            digest = hashlib.blake2b(f.path.read_bytes(), digest_size=16).hexdigest()
            rows.append((f, digest, rng.normal(size=1280).astype(np.float32)))
        for s in range(0, len(rows), 1000):
            cache.put_many(rows[s : s + 1000])
    _close(cache)

    class NoModel:
        model_key, dim = key, 1280

        def __call__(self, batch):  # pragma: no cover - would mean a miss
            raise AssertionError("re-scan ran the model")

    t = time.perf_counter()
    files = _image_files(folder)
    t_walk = time.perf_counter() - t
    cache = _open_cache(cache_path, key)
    result = extract(files, NoModel(), cache)
    _close(cache)
    secs = time.perf_counter() - t
    return {
        "images": len(files),
        "from_cache": result.from_cache,
        "seconds": round(secs, 2),
        "walk_s": round(t_walk, 2),
        **_peak(),
    }


def phase_infer(backend: str, batch: int, seconds: float = 4.0) -> dict:
    """Model alone on random pixels: images/s of one backend at one batch size."""
    from novelfind.model.features import build_extractor

    extractor = build_extractor(backend=backend, device="cpu")
    x = np.random.default_rng(0).integers(0, 256, (batch, 224, 224, 3), dtype=np.uint8)
    extractor(x)  # build / load, warm up
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds:
        extractor(x)
        n += batch
    secs = time.perf_counter() - t
    return {"backend": backend, "batch": batch, "images_per_s": round(n / secs, 1), **_peak()}


def _open_cache(path: Path, key: str):
    from novelfind.cache import FeatureCache

    return FeatureCache(path, key)


def _close(cache) -> None:
    close = getattr(cache, "close", None)
    if close:
        close()


def _run_phase(args: list[str], timeout: float = 3600) -> dict:
    try:
        return in_child([str(Path(__file__).resolve()), "--phase", *args], timeout=timeout, cwd=ROOT)
    except CaseFailed as e:
        return {"error": e.error}


def _run_cli(folder: Path, count: int) -> dict:
    """`python -m novelfind scan DIR --k 10 -q` on a fresh cache, timed as a user sees it."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "novelfind",
            "scan",
            str(folder),
            "--k",
            "10",
            "-q",
            "--cache",
            str(Path(tmp) / "c.sqlite"),
        ]
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        secs = time.perf_counter() - t
    if proc.returncode not in (0, 3):
        return {"error": (proc.stderr.strip().splitlines() or [f"rc {proc.returncode}"])[-1]}
    return {
        "images": count,
        "seconds": round(secs, 2),
        "images_per_s": round(count / secs, 2),
        "note": "includes interpreter start, imports and ranking",
    }


def _run_cli_rescan(folder: Path, cache: Path) -> dict:
    """`python -m novelfind scan` of the unchanged small library on its warm cache (ranking included)."""
    cmd = [sys.executable, "-m", "novelfind", "scan", str(folder), "--k", "10", "-q", "--cache", str(cache)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 600 s"}
    secs = time.perf_counter() - t
    if proc.returncode not in (0, 3):
        return {"error": (proc.stderr.strip().splitlines() or [f"rc {proc.returncode}"])[-1]}
    return {
        "seconds": round(secs, 2),
        "note": "whole command: interpreter start, imports, walk, cache, ranking",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200, help="12-MP photos to generate (default 200)")
    ap.add_argument(
        "--naive-limit", type=int, default=None, help="time the naive pipeline on the first N only"
    )
    ap.add_argument(
        "--rescan-count", type=int, default=10000, help="small images for the re-scan (default 10000)"
    )
    ap.add_argument(
        "--workers", type=int, default=None, help="decode processes for novelfind (default: cores)"
    )
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--backends", default="auto,torch", help="novelfind backends to time (comma list)")
    ap.add_argument("--no-cli", action="store_true", help="skip timing `python -m novelfind scan`")
    ap.add_argument("--raw", type=int, default=0, help="also time N 24-MP RAW files of each kind (default 0)")
    ap.add_argument("--raw-only", action="store_true", help="time the RAW files only (with --raw)")
    ap.add_argument("--data-dir", type=Path, default=None, help="keep generated images here (reused)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "bench_extract.json")
    ap.add_argument("--infer-seconds", type=float, default=4.0, help="timed inference per backend and batch")
    ap.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.phase:  # subprocess mode
        global _TREE
        _TREE = TreeRSS().__enter__()
        kind, folder = a.phase[0], Path(a.phase[1])  # (folder is the backend for "infer")
        if kind == "naive":
            res = phase_naive(folder, int(a.phase[2]) if a.phase[2] != "none" else None)
        elif kind == "infer":
            res = phase_infer(a.phase[1], int(a.phase[2]), float(a.phase[3]) if len(a.phase) > 3 else 4.0)
        elif kind == "fast":
            workers = None if a.phase[3] == "none" else int(a.phase[3])
            prefix = a.phase[5] if len(a.phase) > 5 else ""
            res = phase_fast(folder, a.phase[2], workers, int(a.phase[4]), prefix)
        else:
            res = phase_rescan(folder)
        print(json.dumps(res))
        return 0

    tmp_ctx = tempfile.TemporaryDirectory(prefix="nf-bench-") if a.data_dir is None else None
    base = Path(tmp_ctx.name) if tmp_ctx else a.data_dir
    photos = base / "photos"
    results: dict = {"machine": machine("python", "cpus=affinity_cpus", "platform", "load_avg_before=load")}
    if a.raw:
        results["raw"] = bench_raw_files(base / "raw", a.raw, a.workers, a.batch_size)
    if a.raw_only:
        return _finish(results, a.out, tmp_ctx)
    print(f"generating {a.count} 12-MP photos in {photos} ...", file=sys.stderr)
    results["data"] = make_photos(photos, a.count)
    print(f"  {results['data']}", file=sys.stderr)

    # warm the exported-model cache so the timed run measures extraction, not the one-off export
    from novelfind.model.features import build_extractor

    t = time.perf_counter()
    warm = build_extractor(device="cpu")
    warm(np.zeros((1, 224, 224, 3), np.uint8))
    results["model_prepare_s"] = round(time.perf_counter() - t, 2)
    results["default_backend"] = getattr(warm, "backend", "?")

    results["inference_only"] = []
    for backend, batch in (("onnx", 32), ("torch", 8), ("torch", 32)):
        r = _run_phase(["infer", backend, str(batch), str(a.infer_seconds)])
        results["inference_only"].append(r)
        print(f"inference only: {r}", file=sys.stderr)

    limit = str(a.naive_limit) if a.naive_limit else "none"
    print("naive pipeline ...", file=sys.stderr)
    results["naive"] = _run_phase(["naive", str(photos), limit])
    print(f"  {results['naive']}", file=sys.stderr)
    for backend in a.backends.split(","):
        print(f"novelfind extract (backend {backend}) ...", file=sys.stderr)
        w = "none" if a.workers is None else str(a.workers)
        results[f"novelfind_{backend}"] = _run_phase(["fast", str(photos), backend, w, str(a.batch_size)])
        print(f"  {results[f'novelfind_{backend}']}", file=sys.stderr)
    if not a.no_cli:
        print("python -m novelfind scan ...", file=sys.stderr)
        results["novelfind_cli"] = _run_cli(photos, a.count)
        print(f"  {results['novelfind_cli']}", file=sys.stderr)
    if a.rescan_count:
        small = base / "small"
        print(f"re-scan of {a.rescan_count} unchanged small images ...", file=sys.stderr)
        make_small_library(small, a.rescan_count)
        _run_phase(["rescan", str(small)])  # fills the cache (first pass)
        results["rescan"] = _run_phase(["rescan", str(small)])
        print(f"  {results['rescan']}", file=sys.stderr)
        if not a.no_cli:
            results["rescan_cli"] = _run_cli_rescan(small, small.parent / "rescan-features.sqlite")
            print(f"  {results['rescan_cli']}", file=sys.stderr)
    naive = results["naive"].get("images_per_s")
    fast = results.get("novelfind_auto", {}).get("images_per_s")
    print(
        "\n| pipeline | images/s | CPU ms/image | bound on idle cores, img/s | peak RSS MB (process tree) |"
    )
    print("|---|---|---|---|---|")
    for name in ["naive"] + [k for k in results if k.startswith("novelfind_")]:
        r = results[name]
        print(
            f"| {name} | {r.get('images_per_s', r.get('error'))} | {r.get('cpu_ms_per_image', '-')} "
            f"| {r.get('idle_cores_bound_images_per_s', '-')} | {r.get('peak_rss_tree_mb', '-')} |"
        )
    if naive and fast:
        results["speedup_vs_naive"] = round(fast / naive, 2)
        print(f"\nspeed-up of novelfind (auto) over naive: {results['speedup_vs_naive']}x")
    if "rescan" in results:
        r = results["rescan"]
        print(
            f"re-scan of {r.get('images')} unchanged images: {r.get('seconds')} s (walk {r.get('walk_s')} s)"
        )
    return _finish(results, a.out, tmp_ctx)


def bench_raw_files(folder: Path, count: int, workers: int | None, batch_size: int) -> dict:
    """Extraction of ``count`` 24-MP files of each kind of ``bench_raw.KINDS`` (DNGs and JPEGs)."""
    import bench_raw

    files = bench_raw.make_files(folder, count, (6000, 4000))
    out: dict = {"megapixels": 24, "files_per_kind": count}
    w = "none" if workers is None else str(workers)
    print("\n| kind | MB/file | images/s | CPU ms/image | peak RSS MB (process tree) |", file=sys.stderr)
    print("|---|---|---|---|---|", file=sys.stderr)
    for kind in bench_raw.KINDS:
        prefix = Path(files[kind][0]).name.split("-6000x4000-")[0] + "-6000x4000-"
        r = _run_phase(["fast", str(folder), "auto", w, str(batch_size), prefix])
        r["mean_file_mb"] = round(sum(os.path.getsize(p) for p in files[kind]) / len(files[kind]) / 1e6, 1)
        out[kind] = r
        print(
            f"| {kind} | {r['mean_file_mb']} | {r.get('images_per_s', r.get('error'))} "
            f"| {r.get('cpu_ms_per_image', '-')} | {r.get('peak_rss_tree_mb', '-')} |",
            file=sys.stderr,
        )
    return out


def _finish(results: dict, out: Path, tmp_ctx) -> int:
    results["machine"]["load_avg_after"] = os.getloadavg()
    la = results["machine"]
    print(f"load average before / after: {la['load_avg_before'][0]:.1f} / {la['load_avg_after'][0]:.1f}")
    write_json(results, out)
    print(f"wrote {out}", file=sys.stderr)
    if tmp_ctx:
        tmp_ctx.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
