#!/usr/bin/env python3
"""Scale: ``novelfind scan`` over up to 100,000 small generated photos, with bounded memory.

A library of small JPEGs (a few templates, each file with its own noise) is generated once into
``--library`` (1,000 files per folder; generation time is not counted), then for each size the
first folders are scanned in a fresh process, twice on one cache: ``cold`` (every file decoded and
extracted) and ``warm`` (every vector read from the cache). For each run it records wall time,
the peak RSS of the largest process (``ru_maxrss`` of the waited-for children: the scan and its
decode workers) and the peak total RSS of the process tree (sampled from /proc every 0.1 s),
next to the size of the N x dim feature matrix, the one thing that must grow with N.

    python scripts/bench_scale.py                                  # fake extractor, 10k / 30k / 100k
    python scripts/bench_scale.py --extractor real --sizes 1000,3000
    python scripts/bench_scale.py --sizes 2000 --out /tmp/b.json

``--extractor fake`` (default) replaces MobileNet-V2 with the tests' 8x8 colour-cell extractor
(192-d), so walking, decoding, caching and ranking are measured without the model; ``real`` runs
MobileNet-V2 (ONNX Runtime on CPU, about 80 images/s on two cores: 100k images take over 20
minutes, hence not the default). Prints a table and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
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

import numpy as np
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


def _tree_rss_kib(pid: int) -> int:
    """Sum of VmRSS over ``pid`` and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    try:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry))
            except OSError:
                continue
    except OSError:
        return 0
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        stack.extend(children.get(p, []))
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total


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
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_kib(proc.pid))
            done.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    done.set()
    sampler.join()
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
    runner = [str(ROOT / "tests" / "fake_cli.py")] if extractor == "fake" else ["-m", "novelfind"]
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
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "bench_scale.json")
    args = parser.parse_args()
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
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "settings": {
            "k": args.k,
            "batch_size": args.batch_size,
            "workers": args.workers,
            "per_folder": PER_FOLDER,
            "image": "64x64 JPEG",
        },
        "runs": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
