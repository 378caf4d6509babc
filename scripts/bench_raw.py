#!/usr/bin/env python3
"""Benchmark RAW decoding for the model: embedded preview vs half-size demosaic, images/s per core.

  python scripts/bench_raw.py                      # 10 files of each kind, 24 MP
  python scripts/bench_raw.py --count 4 --megapixels 12 --out /tmp/raw.json

Photo-like 24 MP DNGs are generated from scikit-image's bundled photos (random crop, colour change,
upscale, sensor-like noise), mosaicked to a 12-bit RGGB Bayer array and stored as lossless-JPEG tiles,
as cameras and Adobe's converter store them (about 25-30 MB a file). Kinds:

  preview-small  a 1616 x 1080 embedded JPEG preview (Sony, Nikon, Fujifilm bodies)
  preview-full   a full-size embedded JPEG preview (Canon CR2/CR3 bodies)
  no-preview     no usable preview: LibRaw demosaics at half size
  jpeg           the same photos as 24 MP JPEGs (quality 92), for comparison

Each kind is timed in its own process, one file after another on one core, doing what a decode worker
does (``raw.read_for_model`` / ``decode.read_for_model``: read, digest, decode, resize and crop to
224 x 224). The files were just written, so they come from the page cache: the figures are decoding
cost, not disk speed. images/s is per decode worker; the scan runs one worker per core.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from harness import CaseFailed, cpu_model, in_child, machine, sample_images, self_peak_mb, write_json

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT, ROOT / "tests" / "support"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

KINDS = ("preview-small", "preview-full", "no-preview", "jpeg")

# ---------------------------------------------------------------------------------------------- data


def _photo(i: int, size: tuple[int, int], seed: int) -> np.ndarray:
    """A (H, W, 3) uint8 photo-like picture of ``size`` (W, H), even sides."""
    from PIL import Image

    rng = np.random.default_rng(seed + i)
    sources = sample_images()
    src = sources[i % len(sources)]
    h, w = src.shape[:2]
    ch, cw = int(h * rng.uniform(0.6, 1.0)), int(w * rng.uniform(0.6, 1.0))
    y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
    crop = src[y : y + ch, x : x + cw].astype(np.float32) * rng.uniform(0.8, 1.2, 3) + rng.uniform(-20, 20, 3)
    small = Image.fromarray(np.clip(crop, 0, 255).astype(np.uint8))
    big = np.asarray(small.resize(size, Image.Resampling.BICUBIC), dtype=np.int16)
    big = big + rng.normal(0, 4, big.shape).astype(np.int16)  # sensor-like grain
    return np.clip(big, 0, 255).astype(np.uint8)


def _make_one(args: tuple[int, str, str, tuple[int, int], int]) -> int:
    from PIL import Image
    from rawfiles import jpeg_bytes, write_dng

    i, kind, path, size, seed = args
    rgb = _photo(i, size, seed)
    if kind == "jpeg":
        Image.fromarray(rgb).save(path, quality=92)
    elif kind == "no-preview":
        write_dng(path, rgb, compress=True)
    else:
        w, h = (1616, 1080) if kind == "preview-small" else size
        preview = (
            rgb
            if (w, h) == size
            else np.asarray(Image.fromarray(rgb).resize((w, h), Image.Resampling.BILINEAR))
        )
        write_dng(path, rgb, preview=jpeg_bytes(preview, quality=90), compress=True)
    return os.path.getsize(path)


def make_files(folder: Path, count: int, size: tuple[int, int], seed: int = 0) -> dict[str, list[str]]:
    """``count`` files of each kind in ``folder``; files already there are reused."""
    import multiprocessing

    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[str]] = {}
    todo = []
    for kind in KINDS:
        ext = ".jpg" if kind == "jpeg" else ".dng"
        names = [str(folder / f"{kind}-{size[0]}x{size[1]}-{i:03d}{ext}") for i in range(count)]
        files[kind] = names
        todo += [(i, kind, n, size, seed) for i, n in enumerate(names) if not os.path.exists(n)]
    if todo:
        print(f"generating {len(todo)} files in {folder} ...", file=sys.stderr)
        with multiprocessing.get_context("fork").Pool() as pool:
            pool.map(_make_one, todo, chunksize=1)
    return files


# ---------------------------------------------------------------------------------------------- timing


def _worker(kind: str, paths: list[str]) -> dict:
    """Time the decode worker's job on ``paths`` in this process (one core)."""
    from novelfind.media import decode, raw

    def job(path: str) -> str:
        if kind == "jpeg":
            decode.read_for_model(path)
            return "jpeg"
        data = Path(path).read_bytes()
        decode.file_digest(data)
        out = raw.decode_raw(data, name=path)
        decode.to_model_input(out.image)
        return out.source

    job(paths[0])  # warm-up: imports, first allocation
    walls, cpus, sources = [], [], {}
    for path in paths:
        w0, c0 = time.perf_counter(), time.process_time()
        source = job(path)
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        sources[source] = sources.get(source, 0) + 1
    return {
        "files": len(paths),
        "mean_file_mb": round(float(np.mean([os.path.getsize(p) for p in paths])) / 1e6, 1),
        "images_per_s": round(len(paths) / sum(walls), 2),
        "images_per_cpu_s": round(len(paths) / sum(cpus), 2),
        "ms_median": round(1000 * float(np.median(walls)), 1),
        "ms_p90": round(1000 * float(np.percentile(walls, 90)), 1),
        "peak_rss_mb": self_peak_mb(0),
        "sources": sources,
    }


def _machine() -> dict:
    import rawpy

    return {
        "cpu": cpu_model() or platform.processor(),
        **machine("cores=cpus", "python"),
        "rawpy": rawpy.__version__,
        "libraw": ".".join(map(str, rawpy.libraw_version)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=10, help="files of each kind (default 10)")
    ap.add_argument("--megapixels", type=int, choices=(12, 24, 45), default=24)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma list of: " + ", ".join(KINDS))
    ap.add_argument("--data-dir", type=Path, default=None, help="keep generated files here (reused)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "bench_raw.json")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.worker:
        print(json.dumps(_worker(a.worker[0], a.worker[1:])))
        return 0

    size = {12: (4000, 3000), 24: (6000, 4000), 45: (8256, 5504)}[a.megapixels]
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    folder = a.data_dir or Path(os.environ.get("TMPDIR", "/tmp")) / "novelfind-bench-raw"
    t = time.perf_counter()
    files = make_files(folder, a.count, size)
    generate_s = time.perf_counter() - t

    results: dict = {
        "machine": _machine(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "photo_size": list(size),
        "generate_s": round(generate_s, 1),
        "kinds": {},
    }
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for kind in kinds:
        try:
            results["kinds"][kind] = in_child([__file__, "--worker", kind, *files[kind]], env=env)
        except CaseFailed as e:
            print(e.stderr, file=sys.stderr)
            return 1
        r = results["kinds"][kind]
        print(
            f"{kind:14s} {r['mean_file_mb']:5.1f} MB  {r['images_per_s']:6.2f} images/s  "
            f"{r['ms_median']:7.1f} ms median  {r['images_per_cpu_s']:6.2f} images/CPU-s  "
            f"peak {r['peak_rss_mb']:.0f} MB  {r['sources']}",
            file=sys.stderr,
        )
    results["load_after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(results, a.out, echo=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
