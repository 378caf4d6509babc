#!/usr/bin/env python3
"""How fast novelfind copes: cache lookups and writes, contention, hostile and fuzzed files, stopping.

The tests check what happens in these situations; this script measures how long it takes, which a
test must not (a busy machine would fail it):

- cache: 10,000 stat lookups in one call, write rate, file size (10,000 vectors of 1,000 floats);
  the wait of a write that gives up after a 0.2 s busy timeout; eight processes opening one new
  cache at the same instant (time until all have opened and written);
- decode: each valid but hostile file of ``tests/support/hostile.py`` in a fresh process (time, peak RSS
  growth); the files whose header claims 100+ million pixels (time to refusal); fuzzed files
  (``tests/support/fuzzing.py``: cases per second, slowest case);
- command line: Ctrl-C during a scan until the process has exited; a second run asking for a
  locked output with ``--no-wait`` until it exits with 4.

    python scripts/bench_reliability.py [--out bench-results/bench_reliability.json] [--quick]

Prints each figure and writes them all as JSON, with the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import machine, write_json

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "support"  # the hostile and fuzzed files, the CLI with a fake model
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(ROOT))

from novelfind.cache import CacheWriteError, FeatureCache  # noqa: E402
from novelfind.media.walk import ImageFile  # noqa: E402


def _env(work: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVELFIND_")}
    env.update(
        PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(work / "xdg"), XDG_CONFIG_HOME=str(work / "cfg"), **extra
    )
    return env


def show(name: str, value, unit: str = "") -> None:
    print(f"{name:<58} {value}{(' ' + unit) if unit else ''}", flush=True)


# --------------------------------------------------------------------------- cache


def bench_cache(work: Path, repeats: int) -> dict:
    n, dim = 10_000, 1000
    db = work / "lookups.sqlite"
    files = [
        ImageFile(Path(f"/photos/d{i // 100}/IMG_{i:06d}.jpg"), 1000 + i, 1_700_000_000_000_000_000 + i)
        for i in range(n)
    ]
    vectors = np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32)
    with FeatureCache(db, "m1") as cache:
        started = time.perf_counter()
        for start in range(0, n, 500):
            cache.put_many([(files[i], f"{i:032x}", vectors[i]) for i in range(start, start + 500)])
        write_s = time.perf_counter() - started
    lookups = []
    for _ in range(repeats):
        with FeatureCache(db, "m1") as cache:
            started = time.perf_counter()
            got = cache.get_many_by_stat(files)
            lookups.append(time.perf_counter() - started)
        assert all(g is not None for g in got)
    size_mb = sum(os.path.getsize(str(db) + s) for s in ("", "-wal") if os.path.exists(str(db) + s)) / 1e6

    busy = []
    for i in range(repeats):
        path = work / f"busy-{i}.sqlite"
        cache = FeatureCache(path, "m1", busy_timeout=0.2)
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        started = time.perf_counter()
        try:
            cache.put_many([(files[0], "d", vectors[0])])
        except CacheWriteError:
            busy.append(time.perf_counter() - started)
        holder.execute("ROLLBACK")
        holder.close()
        cache.close()

    out = {
        "lookups_10k_s": {"median": statistics.median(lookups), "min": min(lookups), "max": max(lookups)},
        "write_vectors_per_s": n / write_s,
        "file_mb_10k_vectors_1000d": size_mb,
        "busy_timeout_0.2s_waited_s": {"median": statistics.median(busy), "max": max(busy)},
    }
    show(f"cache: 10,000 stat lookups, median of {repeats}", f"{out['lookups_10k_s']['median']:.3f}", "s")
    show("cache: writes (batches of 500)", f"{out['write_vectors_per_s']:,.0f}", "vectors/s")
    show("cache: file with 10,000 vectors of 1,000 floats", f"{size_mb:.1f}", "MB")
    show(
        "cache: write with a 0.2 s busy timeout gave up after",
        f"{out['busy_timeout_0.2s_waited_s']['median']:.3f}",
        "s (median)",
    )
    return out


_FIRST_OPEN = r"""
import json, multiprocessing, sys, time
from pathlib import Path
import numpy as np
from novelfind.cache import FeatureCache
from novelfind.media.walk import ImageFile

folder, writers, trials = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

def writer(db, name, barrier, results):
    barrier.wait()
    started = time.perf_counter()
    try:
        with FeatureCache(db, "m1") as cache:
            cache.put_many([(ImageFile(Path("/lib", f"{name}-{i}.jpg"), i, i), f"{name}-{i}",
                             np.full(64, i, np.float32)) for i in range(20)])
        results.put((time.perf_counter() - started, None))
    except Exception as err:
        results.put((time.perf_counter() - started, str(err)))

ctx = multiprocessing.get_context("fork")
slowest, failures = [], []
for t in range(trials):
    barrier, results = ctx.Barrier(writers), ctx.Queue()
    procs = [ctx.Process(target=writer, args=(folder / f"t{t}.sqlite", f"w{w}", barrier, results))
             for w in range(writers)]
    for p in procs:
        p.start()
    got = [results.get() for _ in procs]
    for p in procs:
        p.join()
    slowest.append(max(s for s, _ in got))
    failures += [e for _, e in got if e]
print(json.dumps({"slowest_s": slowest, "failures": failures}))
"""


def bench_first_open(work: Path, trials: int) -> dict:
    folder = work / "first-open"
    folder.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_OPEN, str(folder), "8", str(trials)],
        capture_output=True,
        text=True,
        env=_env(work),
        check=True,
    )
    result = json.loads(proc.stdout.splitlines()[-1])
    out = {
        "trials": trials,
        "writers": 8,
        "failures": len(result["failures"]),
        "all_opened_and_written_s": {
            "median": statistics.median(result["slowest_s"]),
            "max": max(result["slowest_s"]),
        },
    }
    show(
        f"cache: 8 processes create one new cache at once ({trials} trials)",
        f"{out['all_opened_and_written_s']['median']:.3f} s median, "
        f"{out['all_opened_and_written_s']['max']:.3f} s max, {out['failures']} failures",
    )
    return out


# --------------------------------------------------------------------------- decode


_DECODE_ONE = r"""
import json, sys, time
from novelfind.media.decode import read_for_model
from novelfind.errors import DecodeError

def peak_kb():  # this process's own high-water mark (ru_maxrss would include the parent's, inherited)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))

before = peak_kb()
started = time.perf_counter()
try:
    read_for_model(sys.argv[1])
    outcome = "decoded"
except DecodeError as err:
    outcome = str(err)[:80]  # the reason begins with "refused:" or says why it cannot be read
print(json.dumps({"s": time.perf_counter() - started, "outcome": outcome,
                  "rss_grew_mb": (peak_kb() - before) / 1024}))
"""


def bench_hostile(work: Path) -> dict:
    from fuzzing import claimed_size_bombs
    from hostile import build_all

    cases = [c.path for c in build_all(work / "hostile")]
    for name, data in claimed_size_bombs().items():
        path = work / "bombs" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        cases.append(path)
    out = {}
    for path in cases:
        proc = subprocess.run(
            [sys.executable, "-c", _DECODE_ONE, path],
            capture_output=True,
            text=True,
            env=_env(work),
            check=True,
        )
        row = json.loads(proc.stdout.splitlines()[-1])
        name = os.fsencode(path.name).decode("latin-1")
        out[name] = row
        show(
            f"decode: {name}",
            f"{row['s'] * 1000:.1f} ms, +{row['rss_grew_mb']:.0f} MB peak RSS, {row['outcome']}",
        )
    return out


def bench_fuzz(work: Path, count: int) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            str(TESTS / "fuzzing.py"),
            "--seed",
            "7",
            "--cases",
            str(count),
            "--workdir",
            str(work),
        ],
        capture_output=True,
        text=True,
        env=_env(work),
        check=True,
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    done = rows.pop()
    seconds = [r["seconds"] for r in rows]
    slowest = max(rows, key=lambda r: r["seconds"])
    out = {
        "cases": len(rows),
        "cases_per_s": len(rows) / sum(seconds),
        "median_ms": 1000 * statistics.median(seconds),
        "slowest_ms": 1000 * slowest["seconds"],
        "slowest_case": f"{slowest['fmt']}: {slowest['mutation']}",
        "peak_rss_mb": done["peak_rss_kb"] / 1024,
        "faults": sum(bool(r["fault"]) for r in rows),
    }
    show(
        f"decode: {len(rows)} fuzzed files",
        f"{out['cases_per_s']:.0f} cases/s, slowest {out['slowest_ms']:.0f} ms, "
        f"peak RSS {out['peak_rss_mb']:.0f} MB, {out['faults']} faults",
    )
    return out


# --------------------------------------------------------------------------- command line


def _library(folder: Path, n: int) -> None:
    from conftest import make_photo

    for i in range(n):
        make_photo(folder / f"IMG_{i:04d}.jpg", ((i * 37) % 255, (i * 91) % 255, 120), seed=i, size=(64, 48))


def _wait_for_lock(work: Path, out: Path, holder: subprocess.Popen) -> None:
    """Until ``holder`` has taken the lock on ``out`` (the lock file holds its pid)."""
    from novelfind.base.lock import holder_pid

    code = f"from novelfind.base.lock import output_lock_path; print(output_lock_path({str(out)!r}))"
    # in the scans' environment: the lock folder follows XDG_CACHE_HOME
    where = subprocess.run(
        [sys.executable, "-c", code], env=_env(work), capture_output=True, text=True, check=True
    ).stdout.strip()
    while holder_pid(where) != holder.pid:
        if holder.poll() is not None:
            raise RuntimeError("the lock holder ended before the second run started")
        time.sleep(0.05)


def bench_cli(work: Path, repeats: int) -> dict:
    library = work / "cli-photos"
    _library(library, 48)
    fake_cli = [sys.executable, str(TESTS / "fake_cli.py")]
    stop_s = []
    for i in range(repeats):
        cache = work / f"int-{i}.sqlite"
        args = ["scan", str(library), "--k", "5", "--batch-size", "4", "--cache", str(cache)]
        proc = subprocess.Popen(
            [*fake_cli, *args],
            env=_env(work, NOVELFIND_TEST_DELAY="0.3"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            # Ctrl-C as in a terminal: a shell without job control starts background commands (this
            # benchmark, say) with SIGINT ignored, which the scan would inherit.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        while True:
            try:
                with sqlite3.connect(f"file:{cache}?mode=ro", uri=True) as conn:
                    if conn.execute("SELECT count(*) FROM files").fetchone()[0] >= 8:
                        break
            except sqlite3.Error:
                pass
            time.sleep(0.05)
        started = time.perf_counter()
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait()
        stop_s.append(time.perf_counter() - started)
    busy_s = []
    for i in range(repeats):
        out = work / f"locked-{i}.tsv"
        holder = subprocess.Popen(
            [*fake_cli, "scan", str(library), "--k", "5", "--batch-size", "4", "--no-cache", "-o", str(out)],
            env=_env(work, NOVELFIND_TEST_DELAY="1"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for_lock(work, out, holder)
        started = time.perf_counter()
        second = subprocess.run(
            [*fake_cli, "scan", str(library), "--k", "5", "--no-cache", "-o", str(out), "--no-wait"],
            env=_env(work),
            capture_output=True,
            text=True,
        )
        busy_s.append(time.perf_counter() - started)
        holder.kill()
        holder.communicate()
        assert second.returncode == 4, second.stderr
    result = {
        "ctrl_c_to_exit_s": {"median": statistics.median(stop_s), "max": max(stop_s)},
        "no_wait_refusal_s": {"median": statistics.median(busy_s), "max": max(busy_s)},
    }
    show(
        "cli: Ctrl-C mid-scan until the process has exited",
        f"{result['ctrl_c_to_exit_s']['median']:.2f}",
        "s (median)",
    )
    show(
        "cli: --no-wait on a locked output, start to exit 4 (process start included)",
        f"{result['no_wait_refusal_s']['median']:.2f}",
        "s (median)",
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "bench_reliability.json")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and fuzz cases")
    args = parser.parse_args()
    repeats = 2 if args.quick else 5
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="novelfind-bench-") as tmp:
        work = Path(tmp)
        result = {
            "cache": bench_cache(work, repeats),
            "first_open": bench_first_open(work, 5 if args.quick else 20),
            "hostile": bench_hostile(work),
            "fuzz": bench_fuzz(work, 300 if args.quick else 1500),
            "cli": bench_cli(work, repeats),
        }
    result["machine"] = {
        **machine("cpus", "platform", "python", "sqlite"),
        "load_before": load_before,
        **machine("load_after=load"),
    }
    show("load average before / after", f"{load_before[0]:.1f} / {os.getloadavg()[0]:.1f}")
    write_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
