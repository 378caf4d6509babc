#!/usr/bin/env python3
"""Millions of photos: vectors written through the cache, then projected to 64 axes in bounded memory.

For each N (default 1,000,000) synthetic 1000-d vectors are written through ``FeatureCache.put_many`` under
synthetic file records (an archive layout of 1,000 files per folder), as a first scan would; then the
vectors are read back in chunks by stat lookup (``get_many_by_stat``, as a re-scan does) and fed to
``novelfind.stream``: one pass accumulates the covariance, a second projects every chunk onto the top 64
axes, the (N, 64) space the default ranking works in. File records are made chunk by chunk, never listed
whole, as a streaming scan will hold them.

Each phase runs in a fresh process; the benchmark records its wall time and peak memory: RSS (sampled from
/proc every 0.1 s, and ru_maxrss), which includes up to ``cache.MMAP_BYTES`` (1 GiB) of the cache file mapped
by SQLite (page cache, reclaimable), and RssAnon, the process's own memory. Writing also reports the time
spent generating the vectors (not the cache's), the cache file size and bytes per entry.

    python scripts/bench_stream.py                               # N = 1M (about 4 GB of cache)
    python scripts/bench_stream.py --sizes 100000,1000000,3000000 --dir /big/disk
    python scripts/bench_stream.py --sizes 20000 --keep           # quick look, keep the cache

The model for 10 million (also in the JSON, ``model``): time is linear in N (SQLite insert and read, the
M x M scatter at BLAS speed), memory is the (N, 64) float32 projection (256 bytes per photo) plus fixed
buffers (one chunk, the M x M scatter, Python and numpy).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DIM = 1000  # MobileNet-V2 logits
DIMS = 64  # the default ranking's space
CHUNK = 8192  # vectors per cache transaction / per streamed chunk
MODEL_KEY = "bench-synthetic-1000"


def records(start: int, stop: int) -> list[SimpleNamespace]:
    """File records i in [start, stop): a camera-archive path, a size and an mtime (deterministic)."""
    return [
        SimpleNamespace(
            path=f"/archive/{i // 1000 // 100:04d}/{i // 1000:06d}/IMG_{i:08d}.JPG",
            size=2_000_000 + i % 997,
            mtime_ns=1_600_000_000_000_000_000 + i,
        )
        for i in range(start, stop)
    ]


def vectors(start: int, stop: int) -> np.ndarray:
    """(C, DIM) float32: 64 latent factors through a fixed mixing, plus noise (a spectrum like logits)."""
    mix = np.random.default_rng(0).standard_normal((DIMS, DIM), dtype=np.float32) * 0.5  # (64, DIM)
    rng = np.random.default_rng(start)
    z = rng.standard_normal((stop - start, DIMS), dtype=np.float32)  # (C, 64)
    return z @ mix + rng.random((stop - start, DIM), dtype=np.float32)  # (C, DIM)


def child_write(cache_path: Path, n: int) -> dict:
    from novelfind.cache import FeatureCache

    gen = put = 0.0
    with FeatureCache(cache_path, MODEL_KEY) as cache:
        for s in range(0, n, CHUNK):
            e = min(n, s + CHUNK)
            t = time.monotonic()
            recs, vecs = records(s, e), vectors(s, e)
            digests = [hashlib.blake2b(r.path.encode(), digest_size=16).hexdigest() for r in recs]
            gen += time.monotonic() - t
            t = time.monotonic()
            cache.put_many(list(zip(recs, digests, vecs, strict=True)))
            put += time.monotonic() - t
    return {"generate_s": round(gen, 2), "put_s": round(put, 2)}


def child_stream(cache_path: Path, n: int) -> dict:
    from novelfind import stream
    from novelfind.cache import FeatureCache

    timings = {"read_s": 0.0}

    def source():
        for s in range(0, n, CHUNK):
            t = time.monotonic()
            found = cache.get_many_by_stat(records(s, min(n, s + CHUNK)))
            if any(v is None for v in found):
                raise SystemExit(f"cache miss in chunk at {s}")
            chunk = np.stack(found)  # (C, DIM)
            timings["read_s"] += time.monotonic() - t
            yield chunk

    with FeatureCache(cache_path, MODEL_KEY) as cache:
        t = time.monotonic()
        projection = stream.fit_pca(source(), DIMS)
        fit = time.monotonic() - t
        read_fit = timings["read_s"]
        t = time.monotonic()
        out = stream.project(source(), projection)  # (N, 64)
        proj = time.monotonic() - t
    return {
        "pass1_read_s": round(read_fit, 2),
        "pass1_scatter_s": round(fit - read_fit, 2),
        "pass2_read_s": round(timings["read_s"] - read_fit, 2),
        "pass2_project_s": round(proj - (timings["read_s"] - read_fit), 2),
        "projection_mib": round(out.nbytes / 2**20, 1),
        "axes": projection.dims,
    }


def _rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, RssAnon) in KiB. RSS includes the cache file's pages mapped by SQLite (``cache.MMAP_BYTES``,
    page cache the kernel can take back); RssAnon is the process's own memory."""
    rss = anon = 0
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
    except OSError:
        pass
    return rss, anon


def measured(phase: str, cache_path: Path, n: int) -> dict:
    """Run one phase in a fresh process; wall time, peak RSS (sampled and ru_maxrss), its own timings."""
    code = (
        "import json, resource, sys; sys.path.insert(0, sys.argv[1]); import bench_stream as b; "
        "r = getattr(b, 'child_' + sys.argv[2])(__import__('pathlib').Path(sys.argv[3]), int(sys.argv[4])); "
        "r['maxrss_kib'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; print(json.dumps(r))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(Path(__file__).parent), phase, str(cache_path), str(n)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    peak = [0, 0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            rss, anon = _rss_kib(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], anon)
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{phase} failed with exit code {proc.returncode}")
    result = json.loads(out.strip().splitlines()[-1])
    result["seconds"] = round(time.monotonic() - started, 2)
    result["peak_rss_mib"] = round(max(peak[0], result.pop("maxrss_kib")) / 1024, 1)
    result["peak_anon_mib"] = round(peak[1] / 1024, 1)
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return result


MODEL = (
    "time(N) = N * (w + r + s) with w the cache write per entry, r the read per entry per pass (two passes), "
    "s the scatter per entry (2 M^2 flops, M = 1000); memory(N) = 256 B * N (the (N, 64) float32 "
    "projection) + a fixed part (one chunk of 8192 x 1000 float32 = 31 MB, the M x M float64 scatter = "
    "8 MB, Python + numpy + SQLite page cache ~ 100-200 MB). Extrapolate from the measured N with the "
    "per-entry figures in 'per_million'."
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000000")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where the caches go")
    ap.add_argument("--keep", action="store_true", help="keep the cache files")
    ap.add_argument("--out", type=Path, default=Path("bench_stream.json"))
    args = ap.parse_args()
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        folder = Path(tempfile.mkdtemp(prefix=f"novelfind-stream-{n}-", dir=args.dir))
        cache_path = folder / "features.sqlite"
        try:
            print(f"N={n}: writing ...", file=sys.stderr, flush=True)
            write = measured("write", cache_path, n)
            size = sum(p.stat().st_size for p in folder.glob("features.sqlite*"))
            write["cache_mib"] = round(size / 2**20, 1)
            write["bytes_per_entry"] = round(size / n)
            print(f"  {write}", file=sys.stderr, flush=True)
            print(f"N={n}: streaming read + projection ...", file=sys.stderr, flush=True)
            read = measured("stream", cache_path, n)
            print(f"  {read}", file=sys.stderr, flush=True)
        finally:
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
        per_m = 1e6 / n
        rows.append(
            {
                "n": n,
                "write": write,
                "stream": read,
                "per_million": {
                    "write_s": round((write["seconds"] - write["generate_s"]) * per_m, 1),
                    "stream_s": round(read["seconds"] * per_m, 1),
                    "cache_gib": round(write["cache_mib"] * per_m / 1024, 2),
                },
            }
        )
    report = {
        "benchmark": "bench_stream",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "dim": DIM,
        "dims": DIMS,
        "chunk": CHUNK,
        "runs": rows,
        "model": MODEL,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        "| N | write s (of which generating) | write peak RSS / anon MiB | cache GiB | stream s "
        "| stream peak RSS / anon MiB |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        w, s = r["write"], r["stream"]
        print(
            f"| {r['n']} | {w['seconds']} ({w['generate_s']}) | {w['peak_rss_mib']} / {w['peak_anon_mib']} | "
            f"{w['cache_mib'] / 1024:.2f} | {s['seconds']} | {s['peak_rss_mib']} / {s['peak_anon_mib']} |"
        )
    print(f"written {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
