#!/usr/bin/env python3
"""Scale: scans of big libraries in bounded memory, two ways.

**Library** (default): ``novelfind scan`` over up to 100,000 small generated photos. A library of small
JPEGs (a few templates, each file with its own noise) is generated once into ``--library`` (1,000 files
per folder; generation time is not counted), then for each size the first folders are scanned in a fresh
process, twice on one cache: ``cold`` (every file decoded and extracted) and ``warm`` (every vector read
from the cache). For each run it records wall time, the peak RSS of the largest process (``ru_maxrss`` of
the waited-for children: the scan and its decode workers) and the peak total RSS of the process tree
(sampled from /proc every 0.1 s), next to the size of the N x dim feature matrix.

    python scripts/bench_scale.py                                  # fake extractor, 10k / 30k / 100k
    python scripts/bench_scale.py --extractor real --sizes 1000,3000

``--extractor fake`` (default) replaces MobileNet-V2 with the tests' 8x8 colour-cell extractor (192-d),
so walking, decoding, caching and ranking are measured without the model; ``real`` runs MobileNet-V2.

**Archive** (``--archive``): millions of photos, all in the cache, as a nightly re-scan of a big archive
meets them. Under ``--dir``, a tree of N empty ``.jpg`` files (1,000 per folder) stands in for the
photos, and the feature cache gets one synthetic 1280-d vector per file, written through
``FeatureCache.put_many`` under the real model's key, as a first scan would have stored it: 64 latent
factors plus noise, and one file in 10,007 a planted outlier (four times the noise). Both are made once
and reused (the cache for 3M serves the 1M run too: a scan of the first 1,000 folders). Then the real
``novelfind.scan`` (default ranking, K = 100) runs on the first N files in a fresh process; it records
seconds per stage (walk, cache lookups, ranking), peak RSS (sampled, and VmHWM) and peak RssAnon (the
process's own memory, without the cache file SQLite maps: at most 1 GiB of page cache), and how many
picks are planted outliers.

    python scripts/bench_scale.py --archive --sizes 1000000,3000000 --dir /big/disk

Prints a table and writes JSON (``--out``); the archive mode adds a model that extrapolates to 10M.
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
from harness import Sampler, descendants, machine, process_table, rss_kib, write_json
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
PER_FOLDER = 1000
DIMS = {"fake": 8 * 8 * 3, "real": 1000}


# --------------------------------------------------------------------------- the library


def _templates(count: int = 8, size: int = 64) -> list[np.ndarray]:
    """A few distinct base pictures: gradients, stripes and blobs in different colours."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    out = []
    for i in range(count):
        colour = rng.integers(30, 226, 3).astype(np.float32)
        pattern = [xx, yy, (np.sin(xx * 12) + 1) / 2, ((xx - 0.5) ** 2 + (yy - 0.5) ** 2) * 2][i % 4]
        img = colour[None, None, :] * (0.4 + 0.6 * pattern[..., None])  # (size, size, 3)
        out.append(img)
    return out


def _generate_folder(args: tuple[Path, int, int]) -> None:
    folder, start, count = args
    templates = _templates()
    rng = np.random.default_rng(start)
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for i in range(start, start + count):
        base = templates[i % len(templates)]
        noise = rng.normal(0, 12, base.shape).astype(np.float32)
        pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(tmp / f"IMG_{i:06d}.jpg", quality=85)
    os.replace(tmp, folder)


def ensure_library(root: Path, total: int, jobs: int) -> list[Path]:
    """Folders ``d000``, ``d001``, ... of ``PER_FOLDER`` files each, generated when missing."""
    from concurrent.futures import ProcessPoolExecutor

    folders = [root / f"d{i:03d}" for i in range((total + PER_FOLDER - 1) // PER_FOLDER)]
    todo = [(f, i * PER_FOLDER, PER_FOLDER) for i, f in enumerate(folders) if not f.is_dir()]
    if todo:
        started = time.monotonic()
        print(f"generating {len(todo) * PER_FOLDER} images in {root} ...", file=sys.stderr, flush=True)
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            list(pool.map(_generate_folder, todo))
        print(f"  done in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return folders


# --------------------------------------------------------------------------- measuring a run


def measure(cmd: list[str], env: dict[str, str]) -> dict:
    """Run ``cmd`` in a child that reports its own children's ru_maxrss; sample the tree's RSS meanwhile."""
    wrapper = (
        "import resource, subprocess, sys, json\n"
        "code = subprocess.call(sys.argv[1:])\n"
        "ru = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'code': code, 'maxrss_kib': ru.ru_maxrss}), file=sys.stderr)\n"
    )
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", wrapper, *cmd],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = [0]

    def sample() -> None:
        peak[0] = max(peak[0], rss_kib(descendants(proc.pid, process_table())))

    with Sampler(sample):
        _, err = proc.communicate()
    seconds = time.monotonic() - started
    lines = err.strip().splitlines()
    report = (
        json.loads(lines[-1])
        if lines and lines[-1].startswith("{")
        else {"code": proc.returncode, "maxrss_kib": 0}
    )
    summary = next((line for line in reversed(lines) if "files) found" in line), "")
    if report["code"] not in (0, 3):
        raise SystemExit(f"scan failed ({report['code']}):\n" + "\n".join(lines[-20:]))
    return {
        "seconds": round(seconds, 2),
        "max_process_rss_mib": round(report["maxrss_kib"] / 1024, 1),
        "peak_tree_rss_mib": round(peak[0] / 1024, 1),
        "summary": summary,
    }


def scan_command(extractor: str, folders: list[Path], cache: Path, out: Path, args) -> list[str]:
    runner = [str(ROOT / "tests" / "support" / "fake_cli.py")] if extractor == "fake" else ["-m", "novelfind"]
    cmd = [
        sys.executable,
        *runner,
        "scan",
        *map(str, folders),
        "--k",
        str(args.k),
        "--cache",
        str(cache),
        "--format",
        "json",
        "-o",
        str(out),
        "--batch-size",
        str(args.batch_size),
    ]
    if args.workers is not None:
        cmd += ["--workers", str(args.workers)]
    if extractor == "real":
        cmd += ["--device", "cpu"]
    return cmd


# --------------------------------------------------------------------------- archive mode

ARCHIVE_DIM = 1280  # what the cache keeps: MobileNet-V2 pooled vectors (a scan ranks logits from them)
LATENT = 64
PLANT_EVERY = 10_007  # one planted outlier per this many files
WRITE_CHUNK = 8192


def archive_folder(root: Path, i: int) -> Path:
    return root / f"a{i // 1000:03d}" / f"{i % 1000:03d}"


def ensure_tree(root: Path, n: int) -> None:
    """Folders of PER_FOLDER empty .jpg files for the first n files, made where missing."""
    started, made = time.monotonic(), 0
    for f in range((n + PER_FOLDER - 1) // PER_FOLDER):
        folder = archive_folder(root, f)
        if (folder / ".done").is_file():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        for j in range(PER_FOLDER):
            (folder / f"IMG_{f * PER_FOLDER + j:08d}.jpg").touch()
        (folder / ".done").touch()
        made += PER_FOLDER
    if made:
        print(f"  made {made} files in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)


def archive_vectors(start: int, stop: int) -> np.ndarray:
    """(C, 1280) float32 rows start..stop: latent factors through a fixed mixing plus noise;
    rows with i % PLANT_EVERY == 5 carry four times the noise (the planted outliers)."""
    mix = np.random.default_rng(0).standard_normal((LATENT, ARCHIVE_DIM), dtype=np.float32) * 0.5
    rng = np.random.default_rng(start)
    z = rng.standard_normal((stop - start, LATENT), dtype=np.float32)  # (C, 64)
    noise = rng.standard_normal((stop - start, ARCHIVE_DIM), dtype=np.float32) * 0.3  # (C, 1280)
    noise[np.arange(start, stop) % PLANT_EVERY == 5] *= 4.0
    return z @ mix + noise


def child_write(root: str, cache_path: str, n: int) -> dict:
    """Write cache entries for files [already there, n) through FeatureCache.put_many."""
    import hashlib
    from types import SimpleNamespace

    from novelfind.cache import FeatureCache
    from novelfind.model.weights import model_key_for

    gen = put = 0.0
    with FeatureCache(cache_path, model_key_for()) as cache:
        have = cache.info()["files"]
        for s in range(have - have % WRITE_CHUNK, n, WRITE_CHUNK):
            e = min(n, s + WRITE_CHUNK)
            t = time.monotonic()
            recs = []
            for i in range(s, e):
                path = archive_folder(Path(root), i // PER_FOLDER) / f"IMG_{i:08d}.jpg"
                st = path.stat()
                recs.append(SimpleNamespace(path=path, size=st.st_size, mtime_ns=st.st_mtime_ns))
            digests = [hashlib.blake2b(str(r.path).encode(), digest_size=16).hexdigest() for r in recs]
            vecs = archive_vectors(s, e)
            gen += time.monotonic() - t
            t = time.monotonic()
            cache.put_many(list(zip(recs, digests, vecs, strict=True)))
            put += time.monotonic() - t
        return {
            "written": n - have,
            "generate_s": round(gen, 1),
            "put_s": round(put, 1),
            "dtype": cache.dtype,
        }


def child_scan(root: str, cache_path: str, n: int) -> dict:
    """The real novelfind.scan on the first n files, seconds per stage from its progress events."""
    import novelfind
    from novelfind.ranking import budget

    # Ranked from the cache past 2 GiB of vectors, as on a machine of 6 GiB or less (a larger machine ranks
    # in memory up to a third of its memory).
    budget.MATRIX_BUDGET = budget.MATRIX_BUDGET_MIN
    marks: dict[str, float] = {}
    started = time.monotonic()

    def on_progress(event) -> None:
        now = time.monotonic() - started
        if f"{event.stage}_first" not in marks and event.stage == "rank":  # the scan's own, before ranking
            marks["anon_before_rank_mib"] = _proc_kib(os.getpid()).get("RssAnon", 0) / 1024
        marks.setdefault(f"{event.stage}_first", now)
        marks[f"{event.stage}_last"] = now

    folders = [archive_folder(Path(root), f) for f in range(n // PER_FOLDER)]
    result = novelfind.scan(folders, 100, cache=cache_path, device="cpu", on_progress=on_progress)
    total = time.monotonic() - started
    walked = marks.get("walk_last", 0.0)
    looked_up = marks.get("extract_last", walked)
    ranked = marks.get("rank_last", looked_up)
    planted = sum(int(p.path.stem.split("_")[1]) % PLANT_EVERY == 5 for p in result.picks)
    return {
        "found": result.counts.found,
        "from_cache": result.counts.from_cache,
        "walk_s": round(walked, 1),
        "lookup_s": round(looked_up - walked, 1),
        "rank_s": round(ranked - looked_up, 1),
        "total_s": round(total, 1),
        "anon_before_rank_mib": round(marks.get("anon_before_rank_mib", 0.0), 1),
        "picks": len(result.picks),
        "planted_in_picks": planted,
        "planted_in_library": (n - 6) // PLANT_EVERY + 1,
    }


def _proc_kib(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key = line.split(":", 1)[0]
                if key in ("VmRSS", "RssAnon", "VmHWM"):
                    out[key] = int(line.split()[1])
    except OSError:
        pass
    return out


def measured_child(phase: str, *args: str) -> dict:
    """One archive phase in a fresh process: its result, wall time, peak RSS and peak RssAnon."""
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import bench_scale as b; "
        "r = getattr(b, 'child_' + sys.argv[2])(sys.argv[3], sys.argv[4], int(sys.argv[5])); "
        "print(json.dumps(r))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVELFIND_")}
    env["PYTHONPATH"] = str(ROOT)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(Path(__file__).parent), phase, *args],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    peak = {"VmRSS": 0, "RssAnon": 0, "VmHWM": 0}

    def sample() -> None:
        for key, value in _proc_kib(proc.pid).items():
            peak[key] = max(peak[key], value)

    with Sampler(sample):
        out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{phase} failed with exit code {proc.returncode}")
    result = json.loads(out.strip().splitlines()[-1])
    result["seconds"] = round(time.monotonic() - started, 1)
    result["peak_rss_mib"] = round(max(peak["VmRSS"], peak["VmHWM"]) / 1024, 1)
    result["peak_anon_mib"] = round(peak["RssAnon"] / 1024, 1)
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return result


ARCHIVE_MODEL = (
    "memory(N) = F + b * N, with b the bytes per photo the scan holds (file records: the path plus 24 "
    "bytes; the (N, 64) float32 projection, 256 bytes; the ranking's per-row arrays) and F the fixed part "
    "(Python, torch, numpy, SQLite's page cache and at most 1 GiB of the cache file mapped); both fitted "
    "on the measured sizes. time(N) = N * t with t the seconds per photo of the largest run (walk, cache "
    "lookups and two reads of every vector are linear; the density's exact top is a small part)."
)


def archive_main(args) -> None:
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if any(n % PER_FOLDER for n in sizes):
        raise SystemExit(f"sizes must be multiples of {PER_FOLDER}")
    root, cache = args.dir / "archive", args.dir / "archive-features.sqlite"
    print(f"files for {max(sizes)} in {root} ...", file=sys.stderr, flush=True)
    ensure_tree(root, max(sizes))
    print(f"cache entries for {max(sizes)} in {cache} ...", file=sys.stderr, flush=True)
    write = measured_child("write", str(root), str(cache), str(max(sizes)))
    write["cache_gib"] = round(
        sum(p.stat().st_size for p in args.dir.glob("archive-features.sqlite*")) / 2**30, 2
    )
    print(f"  {write}", file=sys.stderr, flush=True)
    rows = []
    for n in sizes:
        print(f"N={n}: scan (all cached) + ranking ...", file=sys.stderr, flush=True)
        row = {"n": n, **measured_child("scan", str(root), str(cache), str(n))}
        rows.append(row)
        print(f"  {row}", file=sys.stderr, flush=True)
    model = {"text": ARCHIVE_MODEL}
    if len(rows) >= 2:
        (n0, m0), (n1, m1) = (
            (rows[0]["n"], rows[0]["peak_rss_mib"]),
            (rows[-1]["n"], rows[-1]["peak_rss_mib"]),
        )
        (a0, a1) = rows[0]["peak_anon_mib"], rows[-1]["peak_anon_mib"]
        per = (m1 - m0) * 2**20 / (n1 - n0)
        per_anon = (a1 - a0) * 2**20 / (n1 - n0)
        model.update(
            {
                "bytes_per_photo_rss": round(per),
                "bytes_per_photo_anon": round(per_anon),
                "fixed_rss_mib": round(m0 - per * n0 / 2**20),
                "rss_at_10M_gib": round((m0 * 2**20 + per * (10_000_000 - n0)) / 2**30, 2),
                "anon_at_10M_gib": round((a0 * 2**20 + per_anon * (10_000_000 - n0)) / 2**30, 2),
                "seconds_at_10M": round(rows[-1]["seconds"] * 10_000_000 / n1),
            }
        )
    doc = {
        "benchmark": "scale-archive",
        "machine": machine("cpus", "platform", "python"),
        "write": write,
        "runs": rows,
        "model": model,
    }
    print(
        "\n| N | seconds | walk s | lookups s | ranking s | peak RSS MiB | peak RssAnon MiB "
        "| planted in top 100 | load |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['n']:,} | {r['seconds']:.0f} | {r['walk_s']:.0f} | {r['lookup_s']:.0f} | "
            f"{r['rank_s']:.0f} | "
            f"{r['peak_rss_mib']:.0f} | {r['peak_anon_mib']:.0f} | {r['planted_in_picks']}/{r['picks']} | "
            f"{r['load_avg_1m']} |"
        )
    print(json.dumps(model, indent=2))
    write_json(doc, args.out)
    print(f"\nwrote {args.out}", file=sys.stderr)


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,30000,100000", help="comma-separated library sizes")
    parser.add_argument("--extractor", choices=("fake", "real"), default="fake")
    parser.add_argument(
        "--library",
        type=Path,
        default=Path(
            os.environ.get("NOVELFIND_BENCH_LIBRARY", "")
            or Path(tempfile.gettempdir()) / "novelfind-bench-library"
        ),
    )
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for generation")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--archive", action="store_true", help="millions of cached files (see above)")
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "novelfind-bench-archive",
        help="archive mode: where the file tree and the cache go (kept for the next run)",
    )
    args = parser.parse_args()
    if args.archive:
        if args.sizes == parser.get_default("sizes"):
            args.sizes = "1000000,3000000"
        args.out = args.out or ROOT / "bench-results" / "bench_scale_archive.json"
        args.dir.mkdir(parents=True, exist_ok=True)
        archive_main(args)
        return
    args.out = args.out or ROOT / "bench-results" / "bench_scale.json"
    sizes = sorted(int(s) for s in args.sizes.split(","))
    if any(s % PER_FOLDER for s in sizes):
        parser.error(f"sizes must be multiples of {PER_FOLDER}")

    folders = ensure_library(args.library, max(sizes), args.jobs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVELFIND_")}
    rows = []
    with tempfile.TemporaryDirectory(prefix="novelfind-bench-") as tmp:
        env["XDG_CACHE_HOME"] = str(Path(tmp) / "xdg")
        for n in sizes:
            cache = Path(tmp) / f"cache-{n}.sqlite"
            out = Path(tmp) / f"picks-{n}.json"
            cmd = scan_command(args.extractor, folders[: n // PER_FOLDER], cache, out, args)
            matrix_mib = n * DIMS[args.extractor] * 4 / 2**20
            for phase in ("cold", "warm"):
                print(f"N={n} {phase} ...", file=sys.stderr, flush=True)
                row = {
                    "n": n,
                    "phase": phase,
                    "extractor": args.extractor,
                    "feature_matrix_mib": round(matrix_mib, 1),
                    **measure(cmd, env),
                }
                row["picks"] = len(json.loads(out.read_text())["picks"])
                row["cache_mib"] = round(
                    sum(p.stat().st_size for p in Path(tmp).glob(f"cache-{n}.sqlite*")) / 2**20, 1
                )
                rows.append(row)
                print(
                    f"  {row['seconds']:.1f} s, max process {row['max_process_rss_mib']} MiB, "
                    f"tree {row['peak_tree_rss_mib']} MiB; {row['summary']}",
                    file=sys.stderr,
                    flush=True,
                )

    print("\n| N | run | seconds | images/s | max process RSS MiB | peak tree RSS MiB | N x dim matrix MiB |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['n']} | {r['phase']} | {r['seconds']:.1f} | {r['n'] / r['seconds']:.0f} | "
            f"{r['max_process_rss_mib']:.0f} | {r['peak_tree_rss_mib']:.0f} | "
            f"{r['feature_matrix_mib']:.0f} |"
        )
    doc = {
        "benchmark": "scale",
        "extractor": args.extractor,
        "machine": machine("cpus", "platform", "python"),
        "settings": {
            "k": args.k,
            "batch_size": args.batch_size,
            "workers": args.workers,
            "per_folder": PER_FOLDER,
            "image": "64x64 JPEG",
        },
        "runs": rows,
    }
    write_json(doc, args.out)
    print(f"\nwrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
