#!/usr/bin/env python3
"""GPU benchmarks and CPU-vs-CUDA checks (run by scripts/gpu_check.sh on a CUDA machine).

    python scripts/bench_gpu.py make-jpegs DIR --distinct 256 --copies 6   # 12 MP JPEGs, 16 processes
    python scripts/bench_gpu.py compare DIR --k 20 --out compare.json       # scan --device cpu vs cuda
    python scripts/bench_gpu.py throughput DIR --out bench.json             # 12 MP images/s, decode variants
    python scripts/bench_gpu.py model --out bench.json                      # MobileNet-V2 alone
    python scripts/bench_gpu.py ads --sizes 1000000 10000000 --out bench.json
    python scripts/bench_gpu.py rank --n 1000000 --out bench.json           # the default ranking
    python scripts/bench_gpu.py cli DIR --small 192 --out bench.json        # `novelfind scan` itself

Every subcommand merges its results into the JSON file given with --out as soon as each measurement is
done (atomic rewrite), so a run killed by a time limit keeps what it finished. Without CUDA the same code
runs on the CPU (give it small sizes) and every result says "device": "cpu (no CUDA: logic check only)":
a dry run that debugs the script, never a figure to quote.
Timings: wall clock after torch.cuda.synchronize(), warm-up excluded unless the name says "first".
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
WHERE = "cuda" if CUDA else "cpu (no CUDA: logic check only)"


# --------------------------------------------------------------------------- results file


def merge(out: Path | None, key: str, value) -> None:
    """results[key] = value in the JSON file ``out``, written atomically; also printed on stderr."""
    print(f"{key}: {json.dumps(value, default=str)}", file=sys.stderr, flush=True)
    if out is None:
        return
    doc = {}
    if out.exists():
        try:
            doc = json.loads(out.read_text())
        except ValueError:
            doc = {}
    if isinstance(value, dict):
        value = {**value, "device": WHERE}
    doc[key] = value
    doc.setdefault("machine", machine())
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)


def machine() -> dict:
    info = harness.machine("torch", "python", "cpus")
    if CUDA:
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1))
    return {**info, **harness.machine("load_average=load")}


def sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def guarded(out: Path | None, key: str, fn, *args, **kwargs):
    """Run one measurement; a failure is recorded under ``key`` and the next measurement goes on."""
    try:
        value = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - one broken measurement must not lose the others
        if CUDA:
            traceback.print_exc()
        value = {"error": f"{type(e).__name__}: {e}"[:500]}
    merge(out, key, value)
    return value


def walk_files(root: Path) -> list:
    from novelfind.media.walk import walk

    return list(walk([root]))


# --------------------------------------------------------------------------- make-jpegs


def _photo_jpeg(seed: int, w: int = 4000, h: int = 3000, quality: int = 90) -> bytes:
    """A photo-like 12 MP JPEG (~4 MB at quality 90): smooth colour fields plus fine texture."""
    import io

    from PIL import Image

    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 100, w // 100, 3), dtype=np.uint8)
    arr = np.asarray(Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC)).astype(np.int16)
    tile = rng.integers(-12, 13, (256, 256, 1), dtype=np.int16)  # texture: one noise tile, repeated
    arr += np.tile(tile, (h // 256 + 1, w // 256 + 1, 1))[:h, :w]
    buf = io.BytesIO()
    Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def _with_comment(data: bytes, text: str) -> bytes:
    """The same JPEG with a COM segment after SOI: other bytes (another digest), the same pixels."""
    payload = text.encode()
    return data[:2] + b"\xff\xfe" + (len(payload) + 2).to_bytes(2, "big") + payload + data[2:]


def _make_one(args: tuple[Path, int, int, int, int]) -> int:
    dest, seed, copies, w, h = args
    data = _photo_jpeg(seed, w, h)
    for c in range(copies):
        copy = data if c == 0 else _with_comment(data, f"copy {c}")
        (dest / f"set{c}" / f"IMG_{seed:05d}.jpg").write_bytes(copy)
    return len(data)


def cmd_make_jpegs(a) -> int:
    """``distinct`` different photos in DIR/set0/, and byte-different copies of them in DIR/set1/... (the
    same pixels under another digest: the cache cannot tell them apart, so each is decoded)."""
    for c in range(a.copies):
        (a.dir / f"set{c}").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    jobs = [(a.dir, s, a.copies, a.width, a.height) for s in range(a.distinct)]
    with multiprocessing.get_context("fork").Pool(a.procs) as pool:
        sizes = pool.map(_make_one, jobs, chunksize=1)
    merge(
        a.out,
        "jpegs",
        {
            "dir": str(a.dir),
            "distinct": a.distinct,
            "files": a.distinct * a.copies,
            "size": f"{a.width}x{a.height}",
            "mean_mb": round(float(np.mean(sizes)) / 1e6, 2),
            "generate_s": round(time.perf_counter() - t0, 1),
            "procs": a.procs,
        },
    )
    return 0


# --------------------------------------------------------------------------- compare


def _scan(root: Path, device: str, k: int, cache: Path, extra: list[str]) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "novelfind",
        "scan",
        str(root),
        "--k",
        str(k),
        "--device",
        device,
        "--format",
        "json",
        "--cache",
        str(cache),
        "-q",
        *extra,
    ]
    t0 = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if run.returncode not in (0, 3):
        raise RuntimeError(f"scan --device {device} exited {run.returncode}: {run.stderr.strip()[-400:]}")
    doc = json.loads(run.stdout)
    return {"wall_s": round(wall, 3), "doc": doc, "stderr": run.stderr.strip()[-300:]}


def _cached_vectors(cache: Path, files: list, feature: str) -> np.ndarray:
    from novelfind.cache import FeatureCache
    from novelfind.model.weights import model_key_for

    with FeatureCache(cache, model_key_for()) as c:  # the pooled vectors, whatever the feature
        vecs = c.get_many_by_stat(files)
    dim = next(v.shape[0] for v in vecs if v is not None)
    return np.stack([v if v is not None else np.full(dim, np.nan, np.float32) for v in vecs])


def compare_scans(root: Path, k: int, feature: str = "logits") -> dict:
    """``novelfind scan`` on the CPU and on CUDA (GPU decoding where available): picks and vectors."""
    work = Path(tempfile.mkdtemp(prefix="novelfind-compare-"))
    extra = ["--feature", feature]
    cpu = _scan(root, "cpu", k, work / "cpu.sqlite", extra)
    gpu = _scan(root, DEVICE, k, work / "cuda.sqlite", extra)
    files = walk_files(root)
    vc = _cached_vectors(work / "cpu.sqlite", files, feature)
    vg = _cached_vectors(work / "cuda.sqlite", files, feature)
    ok = ~np.isnan(vc).any(1) & ~np.isnan(vg).any(1)
    rel = np.linalg.norm(vg[ok] - vc[ok], axis=1) / np.linalg.norm(vc[ok], axis=1)
    # how far apart the photos themselves are, for scale: each one's nearest other photo (CPU vectors)
    x = torch.from_numpy(vc[ok])
    d = torch.cdist(x, x)
    d.fill_diagonal_(float("inf"))
    nn = d.min(1).values.numpy()
    pc = [Path(p["path"]).name for p in cpu["doc"]["picks"]]
    pg = [Path(p["path"]).name for p in gpu["doc"]["picks"]]
    sc = {Path(p["path"]).name: p["score"] for p in cpu["doc"]["picks"]}
    sg = {Path(p["path"]).name: p["score"] for p in gpu["doc"]["picks"]}
    differ = [
        {"rank": i + 1, "cpu": a, "cuda": b, "cpu_score": sc.get(a), "cuda_score": sg.get(b)}
        for i, (a, b) in enumerate(zip(pc, pg, strict=False))
        if a != b
    ]
    return {
        "files": len(files),
        "k": k,
        "feature": feature,
        "same_picks_in_order": pc == pg,
        "same_pick_set": sorted(pc) == sorted(pg),
        "picks_cpu": pc,
        "picks_cuda": pg,
        "differences": differ,
        "vector_rel_l2": {
            "median": float(np.median(rel)),
            "p99": float(np.percentile(rel, 99)),
            "max": float(rel.max()),
        },
        "vector_abs_l2_median": float(np.median(np.linalg.norm(vg[ok] - vc[ok], axis=1))),
        "nearest_other_photo_median": float(np.median(nn)),
        "scan_wall_s": {"cpu": cpu["wall_s"], "cuda": gpu["wall_s"]},
        "images_per_s_end_to_end": {
            "cpu": round(len(files) / cpu["wall_s"], 1),
            "cuda": round(len(files) / gpu["wall_s"], 1),
        },
        "failures": {"cpu": len(cpu["doc"].get("failures", [])), "cuda": len(gpu["doc"].get("failures", []))},
        "stderr_cuda": gpu["stderr"],
    }


def cmd_compare(a) -> int:
    guarded(a.out, a.key or f"compare_{a.dir.name}", compare_scans, a.dir, a.k, a.feature)
    return 0


# --------------------------------------------------------------------------- throughput


def _extract_rate(files: list, decoder: str, batch_size: int, workers: int) -> dict:
    from novelfind.cache import NullCache
    from novelfind.extract.decoders import gpu as gd
    from novelfind.extract.engines.local import extract
    from novelfind.model.features import build_extractor

    made: list = []  # the pipeline's GPU file decoders, to read how many files the GPU really decoded

    class Recorded(gd.GpuFileDecoder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    original, gd.GpuFileDecoder = gd.GpuFileDecoder, Recorded  # the registry names it by attribute
    try:
        ex = build_extractor(device=DEVICE)
        extract(
            files[:batch_size], ex, NullCache(), batch_size=batch_size, workers=workers, decoder=decoder
        )  # warm-up: model, cuDNN autotuning, decoder start
        sync()
        t0 = time.perf_counter()
        res = extract(files, ex, NullCache(), batch_size=batch_size, workers=workers, decoder=decoder)
        sync()
        wall = time.perf_counter() - t0
    finally:
        gd.GpuFileDecoder = original
    out = {
        "images": len(files),
        "ok": len(res.files),
        "failed": len(res.failures),
        "wall_s": round(wall, 2),
        "images_per_s": round(len(files) / wall, 1),
        "batch_size": batch_size,
        "workers": workers,
        "decoder": decoder,
    }
    if made:
        out["file_decoder"] = dict(made[-1].stats)  # gpu / pillow / known / failed
    return out


def _open_time() -> dict:
    """What a scan pays once to start GPU decoding (library, decoder, check decode)."""
    from novelfind.extract.decoders import gpu as gd

    t0 = time.perf_counter()
    gpu = gd.open_gpu_decoder("cuda")
    wall = time.perf_counter() - t0
    backend = gpu.backend
    return {
        "seconds": round(wall, 3),
        "nvimgcodec": getattr(backend, "version", "?"),
        "notes": getattr(backend, "notes", "")[:300],
    }


def _cpu_decode_rate(paths: list[str], workers: int) -> dict:
    """The CPU decoders alone (Pillow, reduced-scale JPEG decode), ``workers`` processes."""
    from novelfind.extract.decoders.pillow import ProcessDecoder

    dec = ProcessDecoder(workers, 4 * workers)
    list(dec.decode(paths[: 2 * workers]))  # start the pool
    t0 = time.perf_counter()
    n = sum(1 for _ in dec.decode(paths))
    wall = time.perf_counter() - t0
    dec.close()
    return {"images": n, "wall_s": round(wall, 2), "images_per_s": round(n / wall, 1), "workers": workers}


def _gpu_decode_rate(datas: list[bytes], batch: int, **backend) -> dict:
    """GPU decoding alone on bytes in memory: decode + resize to the model's input, img/s."""
    from novelfind.extract.decoders import gpu as gd

    gpu = gd.GpuDecoder(gd.NvImageCodec("cuda", **backend))
    gpu.decode(datas[:batch])  # warm-up
    sync()
    infos = [gd.inspect_jpeg(d) for d in datas]
    t0 = time.perf_counter()
    for s in range(0, len(datas), batch):
        gpu.decode(datas[s : s + batch], infos[s : s + batch])
    sync()
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(3):
        [gd.inspect_jpeg(d) for d in datas[:batch]]
    inspect_ms = (time.perf_counter() - t1) / (3 * batch) * 1e3
    return {
        "images": len(datas),
        "batch": batch,
        "wall_s": round(wall, 3),
        "images_per_s": round(len(datas) / wall, 1),
        "fallbacks": gpu.stats["fallback"],
        "inspect_ms_per_image_cpu": round(inspect_ms, 3),
        **{k: str(v) for k, v in backend.items()},
    }


def _torchvision_rate(datas: list[bytes], batch: int) -> dict:
    """torchvision.io.decode_jpeg on the GPU (deprecated since torchvision 0.29), decode only, for scale."""
    if not CUDA:
        raise RuntimeError("no CUDA")
    import torchvision
    from torchvision.io import decode_jpeg

    tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas]
    decode_jpeg(tensors[:batch], device="cuda")
    sync()
    t0 = time.perf_counter()
    for s in range(0, len(tensors), batch):
        decode_jpeg(tensors[s : s + batch], device="cuda")
    sync()
    wall = time.perf_counter() - t0
    return {
        "images": len(datas),
        "batch": batch,
        "images_per_s": round(len(datas) / wall, 1),
        "torchvision": torchvision.__version__,
        "note": "decode only, full resolution",
    }


def cmd_throughput(a) -> int:
    from novelfind.extract.decoders import gpu as gd

    files = walk_files(a.dir)[: a.limit]
    paths = [str(f.path) for f in files]
    workers = a.workers
    datas = [Path(p).read_bytes() for p in paths[: a.decode_images]]
    merge(
        a.out,
        "throughput_set",
        {
            "dir": str(a.dir),
            "images": len(files),
            "workers": workers,
            "gpu_decode_library": gd.library_installed(),
        },
    )
    guarded(a.out, "gpu_decoder_open_s", _open_time)
    # end to end through the extraction pipeline (NullCache: every file decoded and run)
    guarded(a.out, "e2e_cpu_decode_gpu_model", _extract_rate, files, "pillow", a.batch_size, workers)
    guarded(a.out, "e2e_gpu_decode_gpu_model", _extract_rate, files, "gpu", a.batch_size, workers)
    # "auto" on CUDA: the GPU decoder and Pillow processes at once, one queue
    guarded(a.out, "e2e_both_decoders_gpu_model", _extract_rate, files, "auto", a.batch_size, workers)
    # the parts
    guarded(a.out, "decode_cpu_processes", _cpu_decode_rate, paths, workers)
    guarded(a.out, "decode_gpu_default", _gpu_decode_rate, datas, 64)
    for kinds in (("hw",), ("gpu",), ("hybrid",)):
        guarded(a.out, f"decode_gpu_{kinds[0]}_only", _gpu_decode_rate, datas, 64, kinds=kinds)
    guarded(a.out, "decode_gpu_adaptive", _gpu_decode_rate, datas, 64, adaptive=True)
    guarded(a.out, "decode_gpu_hw_load_0.6", _gpu_decode_rate, datas, 64, hw_load=0.6)
    guarded(a.out, "decode_gpu_no_buffer_reuse", _gpu_decode_rate, datas, 64, reuse_buffers=False)
    guarded(a.out, "decode_gpu_batch16", _gpu_decode_rate, datas, 16)
    guarded(a.out, "decode_torchvision_gpu", _torchvision_rate, datas, 64)
    if a.batch_size != 64:
        guarded(a.out, "e2e_gpu_decode_gpu_model_batch64", _extract_rate, files, "gpu", 64, workers)
    return 0


# --------------------------------------------------------------------------- the CLI itself


def _timed_scan(root: Path, device: str, cache: Path) -> dict:
    """``novelfind scan`` in a fresh process with a fresh cache (every photo goes through the model):
    wall seconds from process start to exit."""
    got = _scan(root, device, 5, cache, [])
    run = got["doc"]["run"]
    return {"wall_s": got["wall_s"], "photos": run["extracted"], "in_scan_s": run["seconds"]}


def cli_rates(small: Path, large: Path, devices: list[str], repeats: int) -> dict:
    """Start-up seconds and marginal photos/s of ``novelfind scan`` per device: a small and a large scan,
    each in a fresh process and cache; marginal rate = (large - small photos) / (large - small seconds),
    start-up = small seconds - small photos / marginal rate (what is left at zero photos)."""
    work = Path(tempfile.mkdtemp(prefix="novelfind-cli-"))
    out: dict = {"small_dir": str(small), "large_dir": str(large), "repeats": repeats}
    _timed_scan(small, "cpu", work / "warm.sqlite")  # once: the ONNX graph export, the page cache
    for device in devices:
        runs: dict[str, list[dict]] = {"small": [], "large": []}
        for r in range(repeats):
            for size, root in (("small", small), ("large", large)):
                runs[size].append(_timed_scan(root, device, work / f"{device}-{size}-{r}.sqlite"))
        best = {k: min(v, key=lambda x: x["wall_s"]) for k, v in runs.items()}
        dn = best["large"]["photos"] - best["small"]["photos"]
        dt = best["large"]["wall_s"] - best["small"]["wall_s"]
        rate = dn / dt if dt > 0 else float("inf")
        out[device] = {
            "small": best["small"],
            "large": best["large"],
            "all_wall_s": {k: [x["wall_s"] for x in v] for k, v in runs.items()},
            "marginal_photos_per_s": round(rate, 1),
            "startup_s": round(best["small"]["wall_s"] - best["small"]["photos"] / rate, 2),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
    return out


def cmd_cli(a) -> int:
    small = a.small_dir
    if small is None:  # the first --small files of DIR, hard-linked (or copied) into a folder of their own
        import shutil

        small = Path(tempfile.mkdtemp(prefix="novelfind-small-"))
        for i, f in enumerate(walk_files(a.dir)[: a.small]):
            dest = small / f"{i:05d}_{f.path.name}"
            try:
                os.link(f.path, dest)
            except OSError:
                shutil.copyfile(f.path, dest)
    devices = a.devices or (["cpu", "cuda", "auto"] if CUDA else ["cpu", "auto"])
    guarded(a.out, a.key, cli_rates, small, a.dir, devices, a.repeats)
    return 0


# --------------------------------------------------------------------------- model


def _model_rate(batch: int, on_device: bool, feature: str, seconds: float = 2.0) -> dict:
    from novelfind.model.features import build_extractor

    ex = build_extractor(device=DEVICE, feature=feature, backend="auto" if CUDA else "torch")
    gen = np.random.default_rng(0)
    host = gen.integers(0, 256, (batch, 224, 224, 3), dtype=np.uint8)
    x = torch.from_numpy(host).to(DEVICE) if on_device else host
    for _ in range(5):
        ex(x)
    sync()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        ex(x)
        n += batch
    sync()
    wall = time.perf_counter() - t0
    return {
        "batch": batch,
        "input": "device tensor" if on_device else "host numpy (pinned copy)",
        "feature": feature,
        "images_per_s": round(n / wall, 1),
    }


def cmd_model(a) -> int:
    for batch in a.batches:
        for on_device in (False, True):
            where = "device" if on_device else "host"
            guarded(a.out, f"model_b{batch}_{where}", _model_rate, batch, on_device, "logits", a.seconds)
    return 0


# --------------------------------------------------------------------------- ADS


def _ads_time(n: int, m: int, k: int) -> dict:
    from novelfind.ranking.solver import ADSConfig, ads

    if CUDA:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    gen = torch.Generator(device=DEVICE).manual_seed(n)
    x = torch.randn(n, m, device=DEVICE, generator=gen)  # (N, M) float32, made on the GPU
    sync()
    t0 = time.perf_counter()
    res = ads(x, k, ADSConfig())
    sync()
    wall = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30 if CUDA else None
    g = torch.Generator().manual_seed(0)
    t1 = time.perf_counter()
    torch.randperm(n, generator=g)
    randperm = time.perf_counter() - t1
    del x
    if CUDA:
        torch.cuda.empty_cache()
    return {
        "n": n,
        "m": m,
        "k": k,
        "epochs": ADSConfig().epochs,
        "seconds": round(wall, 3),
        "peak_gpu_gib": None if peak is None else round(peak, 2),
        "features_gib": round(n * m * 4 / 2**30, 2),
        "cpu_randperm_per_epoch_s": round(randperm, 3),
        "picked": int(len(res.ranking)),
    }


def cmd_ads(a) -> int:
    _ads_time(min(20_000, min(a.sizes)), a.m, a.k)  # warm-up: cuBLAS handles, kernels
    for n in a.sizes:
        free = torch.cuda.mem_get_info()[0] if CUDA else 2**40
        if n * a.m * 4 * 1.3 > free:
            merge(
                a.out,
                f"ads_n{n}",
                {"skipped": f"{n}x{a.m} float32 needs more than the {free / 2**30:.0f} GiB free"},
            )
            continue
        guarded(a.out, f"ads_n{n}", _ads_time, n, a.m, a.k)
    return 0


# --------------------------------------------------------------------------- default ranking


def _clustered(n: int, m: int, seed: int = 0) -> np.ndarray:
    """(N, M) float32 features with structure (1000 clusters of different spread), made on the GPU."""
    dev = DEVICE
    g = torch.Generator(device=dev).manual_seed(seed)
    centres = torch.randn(1000, m, device=dev, generator=g) * 3
    which = torch.randint(0, 1000, (n,), device=dev, generator=g)
    spread = torch.rand(1000, 1, device=dev, generator=g) + 0.2
    x = centres[which] + torch.randn(n, m, device=dev, generator=g) * spread[which]
    return x.cpu().numpy()


def _rank_time(n: int, m: int, k: int) -> dict:
    from novelfind.ranking.driver import rank
    from novelfind.ranking.solver import ADSConfig, ads

    t0 = time.perf_counter()
    x = _clustered(n, m)
    made = time.perf_counter() - t0
    t0 = time.perf_counter()
    r = rank(x, k, device=DEVICE)
    total = time.perf_counter() - t0
    # the GPU part alone: ADS on whitened-size features (64 axes), support 2K
    w = torch.from_numpy(np.ascontiguousarray(x[:, :64])).to(DEVICE)
    sync()
    t0 = time.perf_counter()
    ads(w, 2 * k, ADSConfig())
    sync()
    ads_s = time.perf_counter() - t0
    return {
        "n": n,
        "m": m,
        "k": k,
        "seconds": round(total, 2),
        "ads_part_s_approx": round(ads_s, 3),
        "make_features_s": round(made, 1),
        "picked": int(len(r.indices)),
        "note": "rank(method='ads', device='cuda'): PCA and the density term on the CPU, ADS on the GPU",
    }


def cmd_rank(a) -> int:
    guarded(a.out, f"rank_default_n{a.n}", _rank_time, a.n, a.m, a.k)
    return 0


# --------------------------------------------------------------------------- summary


def _junit(path: Path) -> dict:
    import xml.etree.ElementTree as ET

    if not path.exists():
        return {"missing": str(path.name)}
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    out = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    out["not_passed"], props = [], {}
    for case in suite.iter("testcase"):
        name = f"{Path(case.get('classname', '').replace('.', '/')).name}::{case.get('name')}"
        for kind in ("failure", "error", "skipped"):
            el = case.find(kind)
            if el is not None:
                out["not_passed"].append({"test": name, kind: (el.get("message") or "")[:300]})
        for prop in case.iter("property"):
            props[prop.get("name")] = prop.get("value")
    out["measured"] = props
    return out


def _headline(bench: dict) -> dict:
    def pick(key, *fields):
        v = bench.get(key)
        if not isinstance(v, dict):
            return None
        if "error" in v or "skipped" in v:
            return v.get("error") or v.get("skipped")
        return {f: v.get(f) for f in fields if f in v}

    h = {"device": bench.get("machine", {}).get("gpu", "no GPU"), "jpegs": bench.get("jpegs")}
    for key in ("compare_example", "compare_12mp"):
        h[key] = pick(
            key,
            "files",
            "same_picks_in_order",
            "same_pick_set",
            "differences",
            "vector_rel_l2",
            "nearest_other_photo_median",
            "images_per_s_end_to_end",
            "failures",
        )
    for key in sorted(bench):
        if key.startswith(("e2e_", "decode_", "model_")):
            h[key] = pick(key, "images_per_s", "fallbacks", "file_decoder")
        elif key.startswith(("ads_n", "rank_default")):
            h[key] = pick(key, "seconds", "peak_gpu_gib", "cpu_randperm_per_epoch_s", "ads_part_s_approx")
    h["gpu_decoder_open_s"] = pick("gpu_decoder_open_s", "seconds", "nvimgcodec")
    cli = bench.get("cli")
    if isinstance(cli, dict):
        h["cli"] = {
            d: {k: v.get(k) for k in ("startup_s", "marginal_photos_per_s")} if isinstance(v, dict) else v
            for d, v in cli.items()
            if d in ("cpu", "cuda", "auto", "error")
        }
    return {k: v for k, v in h.items() if v is not None}


def _criteria(bench: dict) -> dict:
    """The issue's marks for the GPU feed: the CLI's marginal rate on CUDA against the GPU decoder alone
    (>= 0.9x) and against 500 photos/s; both decoders at once against the GPU decoder alone."""

    def rate(key, field="images_per_s"):
        v = bench.get(key)
        return v.get(field) if isinstance(v, dict) else None

    cli = bench.get("cli") if isinstance(bench.get("cli"), dict) else {}
    cuda = cli.get("cuda") if isinstance(cli.get("cuda"), dict) else {}
    marginal = cuda.get("marginal_photos_per_s")
    decoder = rate("decode_gpu_default")
    out: dict = {"cli_cuda_marginal_photos_per_s": marginal, "gpu_decoder_alone_photos_per_s": decoder}
    if marginal and decoder:
        out["cli_over_gpu_decoder"] = round(marginal / decoder, 3)
        out["cli_at_least_0.9x_decoder"] = marginal >= 0.9 * decoder
    if marginal:
        out["cli_at_least_500_per_s"] = marginal >= 500
    both, alone = rate("e2e_both_decoders_gpu_model"), rate("e2e_gpu_decode_gpu_model")
    out["extract_both_decoders_photos_per_s"], out["extract_gpu_decoder_photos_per_s"] = both, alone
    if both and decoder:
        out["both_above_gpu_decoder_alone"] = both > decoder
    rank = bench.get("rank_default_n1000000")
    if isinstance(rank, dict) and "seconds" in rank:
        out["rank_1m_cuda_s"] = rank["seconds"]
        out["rank_1m_at_most_5_s"] = rank["seconds"] <= 5
    ex = bench.get("compare_example")
    if isinstance(ex, dict) and "same_picks_in_order" in ex:
        out["example_same_picks_cpu_gpu"] = ex["same_picks_in_order"]
    return out


def cmd_summary(a) -> int:
    parts = []
    if a.parts.exists():
        for line in a.parts.read_text().splitlines():
            name, rc, secs = (line.split("\t") + ["", ""])[:3]
            status = {"0": "ok", "124": "time limit", "137": "time limit", "no time": "skipped: no time left"}
            parts.append({"part": name, "status": status.get(rc, f"exit {rc}"), "seconds": int(secs or 0)})
    bench = {}
    if a.bench.exists():
        try:
            bench = json.loads(a.bench.read_text())
        except ValueError as e:
            bench = {"unreadable": str(e)}
    doc = {
        "cuda": CUDA,
        "dry_run": not CUDA,
        "elapsed_s": a.elapsed,
        "parts": parts,
        "tests": _junit(a.junit),
        "headline": _headline(bench),
        "criteria": _criteria(bench),
        "machine": machine(),
    }
    tmp = a.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, a.out)
    if a.print:
        print("\n=== summary" + ("" if CUDA else " (no CUDA: dry run, figures meaningless)"))
        for p in parts:
            print(f"  {p['part']:<16} {p['status']:<22} {p['seconds']:>4}s")
        t = doc["tests"]
        print(
            f"  tests: {t.get('tests')} run, {t.get('failures')} failed, {t.get('errors')} errors, "
            f"{t.get('skipped')} skipped"
        )
        for bad in t.get("not_passed", [])[:8]:
            print(f"    {json.dumps(bad)[:160]}")
        for k, v in doc["headline"].items():
            print(f"  {k}: {json.dumps(v, default=str)[:230]}")
        print(f"  criteria: {json.dumps(doc['criteria'], default=str)}")
    return 0


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def add(name, fn, **kw):
        p = sub.add_parser(name, **kw)
        p.add_argument("--out", type=Path, default=None, help="JSON file to merge results into")
        p.set_defaults(fn=fn)
        return p

    p = add("make-jpegs", cmd_make_jpegs)
    p.add_argument("dir", type=Path)
    p.add_argument("--distinct", type=int, default=256)
    p.add_argument("--copies", type=int, default=1, help="byte-different copies of each (same pixels)")
    p.add_argument("--procs", type=int, default=os.cpu_count())
    p.add_argument("--width", type=int, default=4000)
    p.add_argument("--height", type=int, default=3000)
    p = add("compare", cmd_compare)
    p.add_argument("dir", type=Path)
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--feature", default="logits")
    p.add_argument("--key", default=None)
    p = add("throughput", cmd_throughput)
    p.add_argument("dir", type=Path)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--decode-images", type=int, default=256, help="images for the decode-only variants")
    p = add("model", cmd_model)
    p.add_argument("--batches", type=int, nargs="+", default=[32, 128])
    p.add_argument("--seconds", type=float, default=2.0, help="timed run per setting")
    p = add("ads", cmd_ads)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    p.add_argument("--m", type=int, default=1000, help="feature dimension (1000: the logits)")
    p.add_argument("--k", type=int, default=100)
    p = add("rank", cmd_rank)
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--m", type=int, default=1000)
    p.add_argument("--k", type=int, default=100)
    p = add("cli", cmd_cli)
    p.add_argument("dir", type=Path, help="the large set")
    p.add_argument("--small", type=int, default=192, help="photos of DIR in the small set")
    p.add_argument("--small-dir", type=Path, default=None, help="the small set (instead of --small)")
    p.add_argument("--devices", nargs="+", default=None)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--key", default="cli")
    p = add("summary", cmd_summary)
    p.add_argument("--parts", type=Path, required=True)
    p.add_argument("--junit", type=Path, required=True)
    p.add_argument("--bench", type=Path, required=True)
    p.add_argument("--elapsed", type=int, default=0)
    p.add_argument("--print", action="store_true")
    a = ap.parse_args()
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
