#!/usr/bin/env python3
"""What reading the capture dates costs: the ``novelfind`` process re-scanning a cached library, with the
dates already in the cache, against the first scan after an upgrade (a cache without them: every photo's
header is read once), plus the header read alone.

  python scripts/bench_dates.py --photos 400 --out docs/bench/dates-2core.json

The library is ``--photos`` JPEGs of 1024 x 768 with the Exif a camera writes (make, model, capture date
with sub-seconds and offset, and a 24 KB maker note: real cameras' Exif blocks are 10-60 KB). The first
scan extracts every photo (the real weights, on the CPU) and fills the cache; then, run by run in turns
(so a busy machine slows both alike), a re-scan with the dates cached ("cached") and one whose cache has
just lost its dates table, as a cache from before it ("upgrade"). Wall and CPU time (user + system) of each
process; the medians are what to compare. "header_ms" / "header_cpu_ms" is
``novelfind.extract.dating.embedded_date`` per photo in this process (files in the page cache), wall and
CPU time, the median of ``--rounds`` passes.
On a shared machine the CPU times are the figures to read (the load average is recorded).
"dates_step_cpu_ms" is ``header_dates.scan_dates`` alone on the same cache, in this process: every date
cached, then just after the table was dropped (the headers read and stored, in decode processes: their
CPU time is not in this figure).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import machine, run_timed, write_json
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def make_library(folder: Path, n: int) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    base = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
    for i in range(n):
        small = np.roll(base, i * 7, axis=1) // 2 + rng.integers(0, 127, (96, 128, 3), dtype=np.uint8)
        img = Image.fromarray(small.astype(np.uint8)).resize((1024, 768), Image.Resampling.BILINEAR)
        exif = Image.Exif()
        exif[0x010F], exif[0x0110] = "Camera Maker", "Model X"
        exif[0x0132] = f"2024:05:{1 + i % 28:02d} 12:{i % 60:02d}:00"
        ifd = exif.get_ifd(0x8769)
        ifd[0x9003] = f"2024:05:{1 + i % 28:02d} 12:{i % 60:02d}:00"
        ifd[0x9291], ifd[0x9011] = "250", "+02:00"
        ifd[0x927C] = bytes(rng.integers(0, 255, 24 * 1024, dtype=np.uint8))  # maker note
        img.save(folder / f"IMG_{i:05d}.jpg", quality=85, exif=exif.tobytes())


def scan(library: Path, cache: Path) -> dict[str, float]:
    args = [sys.executable, "-m", "novelfind", "scan", str(library), "--k", "10", "--cache", str(cache)]
    args += ["--format", "paths", "--device", "cpu", "-q"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done, wall, cpu = run_timed(args, env=env)
    if done.returncode != 0:
        raise SystemExit(f"exit {done.returncode}\n{done.stderr}")
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}


def drop_dates(cache: Path) -> None:
    with sqlite3.connect(cache) as conn:
        conn.execute("DROP TABLE IF EXISTS dates")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--photos", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from novelfind.extract import dating, header_dates

    with tempfile.TemporaryDirectory(prefix="bench-dates-") as tmp:
        library, cache = Path(tmp) / "lib", Path(tmp) / "cache.sqlite"
        make_library(library, args.photos)
        first = scan(library, cache)
        runs: dict[str, list[dict[str, float]]] = {"cached": [], "upgrade": []}
        for _ in range(args.rounds):
            runs["cached"].append(scan(library, cache))
            drop_dates(cache)
            runs["upgrade"].append(scan(library, cache))
        # the dates step alone, in this process, on the same cache: all cached, then after an upgrade
        step: dict[str, list[float]] = {"cached": [], "upgrade": []}
        from novelfind.cache import FeatureCache
        from novelfind.media.walk import FileList, walk

        files = FileList(walk([library]))
        for _ in range(args.rounds):
            for name in ("cached", "upgrade"):
                if name == "upgrade":
                    drop_dates(cache)
                with FeatureCache(cache) as store:
                    cpu = time.process_time()
                    found = header_dates.scan_dates(files, store)
                    step[name].append((time.process_time() - cpu) * 1000)
                assert found.sources == ["exif"] * len(files), set(found.sources)
        paths = sorted(str(p) for p in library.iterdir())
        header, header_cpu = [], []
        for _ in range(args.rounds):
            start, cpu = time.perf_counter(), time.process_time()
            got = [dating.embedded_date(p) for p in paths]
            header.append((time.perf_counter() - start) / len(paths) * 1000)
            header_cpu.append((time.process_time() - cpu) / len(paths) * 1000)
        assert all(t.source == "exif" for t in got), {t.source for t in got}
        photo_bytes = statistics.median(os.path.getsize(p) for p in paths)
    median = {
        name: {key: round(statistics.median(r[key] for r in rs), 3) for key in ("wall_s", "cpu_s")}
        for name, rs in runs.items()
    }
    extra = median["upgrade"]["wall_s"] - median["cached"]["wall_s"]
    extra_cpu = median["upgrade"]["cpu_s"] - median["cached"]["cpu_s"]
    result = {
        "what": "novelfind scan of a cached library: dates cached vs read once from the headers (upgrade)",
        "photos": args.photos,
        "photo_bytes_median": int(photo_bytes),
        "machine": machine("cpus", "python", "platform"),
        "first_scan": first,
        "runs": runs,
        "median": median,
        "upgrade_extra_wall_s": round(extra, 3),
        "upgrade_extra_ms_per_photo": round(extra / args.photos * 1000, 3),
        "upgrade_extra_cpu_s": round(extra_cpu, 3),
        "upgrade_extra_cpu_ms_per_photo": round(extra_cpu / args.photos * 1000, 3),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "dates_step_cpu_ms": {name: [round(v, 1) for v in vs] for name, vs in step.items()},
        "dates_step_cpu_ms_median": {name: round(statistics.median(vs), 1) for name, vs in step.items()},
        "header_ms": [round(h, 3) for h in header],
        "header_ms_median": round(statistics.median(header), 3),
        "header_cpu_ms": [round(h, 3) for h in header_cpu],
        "header_cpu_ms_median": round(statistics.median(header_cpu), 3),
    }
    write_json(result, args.out, echo=True)


if __name__ == "__main__":
    main()
