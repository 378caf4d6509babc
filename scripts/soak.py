#!/usr/bin/env python3
"""Soak: many scans at once on one cache, with ``cache prune`` and ``cache clear`` in between.

For ``--seconds`` (default 300, and at least until one prune and one clear have run), ``--scans``
(default 8) scans run side by side on one cache file, each over a random part of a generated
library, with random batch sizes and decode workers; as one ends the next starts. Every few
seconds the library changes (photos deleted, new ones added) and ``cache prune`` or ``cache clear``
runs on the same cache. Checked all along:

- every scan exits 0 or 3, and 3 only for photos deleted under it; every maintenance command exits 0;
- no traceback and no cache warning (busy, full, unreadable) on any stderr;
- the cache stays sound: ``PRAGMA integrity_check`` after every maintenance command and every 10 s;
- no committed vector is lost except by ``clear``: when a scan ends, every photo it ranked that is
  still on disk unchanged has its row and vector in the cache, unless a ``clear`` started after the
  scan did;
- at the end, a scan on the soaked cache ranks exactly as a scan without a cache.

    python scripts/soak.py                      # 5 minutes, 8 scans at a time
    python scripts/soak.py --seconds 30 --out /tmp/soak.json

The scans use the tests' fast stand-in for the model (``tests/support/fake_cli.py``), since what is soaked
is the cache and the process handling, not MobileNet-V2; ``--extractor real`` runs the real one.
Prints a summary and writes JSON (``--out``); exits 1 if anything failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from harness import machine, write_json
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
FAKE_CLI = ROOT / "tests" / "support" / "fake_cli.py"
FOLDERS = 8
CACHE_WARNING = ("feature cache", "without caching", "without the cache")


@dataclass
class Scan:
    proc: subprocess.Popen
    args: list[str]
    started: float
    serial: int


@dataclass
class Tally:
    scans: int = 0
    exit_codes: dict[str, int] = field(default_factory=dict)
    prunes: int = 0
    clears: int = 0
    integrity_checks: int = 0
    vectors_checked: int = 0
    scans_not_checked_after_clear: int = 0
    photos_added: int = 0
    photos_deleted: int = 0
    failures: list[str] = field(default_factory=list)


def photo(path: Path, seed: int) -> None:
    """A small JPEG with its own colours and noise."""
    rng = np.random.default_rng(seed)
    base = rng.integers(20, 235, 3).astype(np.float32)
    a = np.empty((36, 48, 3), np.float32)
    a[:] = base
    a[:, : rng.integers(4, 44)] *= 0.6
    a += rng.normal(0, 10, a.shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(path, quality=90)


class Soak:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.library = work / "photos"
        self.cache = work / "cache.sqlite"
        self.rng = random.Random(args.seed)
        self.tally = Tally()
        self.clears_started: list[float] = []
        self.next_photo = 0
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("NOVELFIND_")}
        self.env.update(
            PYTHONPATH=str(ROOT),
            XDG_CACHE_HOME=str(work / "xdg"),
            XDG_CONFIG_HOME=str(work / "cfg"),
            PYTHONDONTWRITEBYTECODE="1",
        )

    # -- the library ------------------------------------------------------------------------------

    def add_photos(self, count: int) -> None:
        for _ in range(count):
            i = self.next_photo
            self.next_photo += 1
            photo(self.library / f"folder{i % FOLDERS}" / f"IMG_{i:06d}.jpg", seed=i)  # names never reused
        self.tally.photos_added += count

    def change_library(self) -> None:
        """Delete a few photos and add a few new ones (never rewriting one in place)."""
        existing = sorted(self.library.rglob("*.jpg"))
        for path in self.rng.sample(existing, min(len(existing) // 20, 6)):
            path.unlink()
            self.tally.photos_deleted += 1
        self.add_photos(self.rng.randint(2, 6))

    # -- processes --------------------------------------------------------------------------------

    def command(self, *args: str) -> list[str]:
        if self.args.extractor == "fake":
            return [sys.executable, str(FAKE_CLI), *args]
        return [sys.executable, "-m", "novelfind", *args]

    def start_scan(self, serial: int) -> Scan:
        folders = self.rng.sample(range(FOLDERS), self.rng.randint(1, 3))
        args = [
            "scan",
            *(str(self.library / f"folder{f}") for f in folders),
            "--k",
            "100000",
            "--dedup",
            "0",
            "--format",
            "json",
            "--batch-size",
            str(self.rng.choice([4, 8, 16, 32])),
            "--workers",
            str(self.rng.choice([0, 1, 2])),
            "--cache",
            str(self.cache),
        ]
        proc = subprocess.Popen(
            self.command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env
        )
        return Scan(proc, args, time.monotonic(), serial)

    def fail(self, message: str) -> None:
        self.tally.failures.append(message)
        print(f"FAILURE: {message}", file=sys.stderr, flush=True)

    def finish_scan(self, scan: Scan) -> None:
        out, err = scan.proc.communicate()
        code = scan.proc.returncode
        self.tally.scans += 1
        self.tally.exit_codes[str(code)] = self.tally.exit_codes.get(str(code), 0) + 1
        label = f"scan {scan.serial} ({' '.join(scan.args[1:])})"
        if code not in (0, 3):
            self.fail(f"{label} exited {code}: {err.strip()[-500:]}")
            return
        if "Traceback" in err:
            self.fail(f"{label}: traceback on stderr: {err[-800:]}")
        for line in err.splitlines():
            if line.startswith("warning:") and any(w in line for w in CACHE_WARNING):
                self.fail(f"{label}: {line}")
        doc = json.loads(out)
        for failure in doc["failures"]:
            if failure["reason"] != "No such file or directory":
                self.fail(f"{label}: {failure['path']}: {failure['reason']}")
        if (code == 3) != bool(doc["failures"]):
            self.fail(f"{label}: exit {code} with {len(doc['failures'])} failures listed")
        if any(t >= scan.started for t in self.clears_started):
            self.tally.scans_not_checked_after_clear += 1  # a clear may rightly have removed its rows
            return
        self.check_committed(label, doc["picks"])

    def check_committed(self, label: str, picks: list[dict]) -> None:
        """Every photo the scan ranked that is still on disk unchanged has its vector in the cache."""
        unchanged = []
        for pick in picks:
            try:
                st = os.stat(pick["path"])
            except FileNotFoundError:
                continue
            if (st.st_size, st.st_mtime_ns) == (pick["size"], pick["mtime_ns"]):
                unchanged.append(pick)
        conn = sqlite3.connect(f"file:{self.cache}?mode=ro", uri=True, timeout=60)
        try:
            missing = [
                p["path"]
                for p in unchanged
                if conn.execute(
                    "SELECT 1 FROM files f JOIN vectors v ON v.digest = f.digest "
                    "WHERE f.path = ? AND f.size = ? AND f.mtime_ns = ?",
                    (os.fsencode(p["path"]), p["size"], p["mtime_ns"]),
                ).fetchone()
                is None
            ]
        finally:
            conn.close()
        self.tally.vectors_checked += len(unchanged)
        if missing:
            self.fail(f"{label}: {len(missing)} committed vectors lost, e.g. {missing[0]}")

    def maintenance(self, what: str) -> None:
        if what == "clear":
            self.clears_started.append(time.monotonic())
        proc = subprocess.run(
            self.command("cache", what, "--cache", str(self.cache)),
            capture_output=True,
            text=True,
            env=self.env,
            timeout=600,
        )
        if what == "clear":
            self.tally.clears += 1
        else:
            self.tally.prunes += 1
        if proc.returncode != 0 or "Traceback" in proc.stderr:
            self.fail(f"cache {what} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
        self.integrity(f"after cache {what}")

    def integrity(self, when: str) -> None:
        if not self.cache.exists():
            return
        conn = sqlite3.connect(f"file:{self.cache}?mode=ro", uri=True, timeout=60)
        try:
            result = conn.execute("PRAGMA integrity_check").fetchall()
        finally:
            conn.close()
        self.tally.integrity_checks += 1
        if result != [("ok",)]:
            self.fail(f"integrity_check {when}: {result[:3]}")

    # -- the run ----------------------------------------------------------------------------------

    def run(self) -> dict:
        self.add_photos(self.args.photos)
        started = time.monotonic()
        end = started + self.args.seconds
        running: list[Scan] = []
        serial = 0
        # Repeated: a clear every sixth time. The rows a scan wrote are checked only when no clear
        # started while it ran, so clears are kept rare enough for most scans to be checked.
        plan = ["prune", "clear", "prune", "prune", "prune", "prune"]
        next_maintenance = started + self.args.maintenance_every
        next_integrity = started + 10
        ops = 0
        while time.monotonic() < end or running or not (self.tally.prunes and self.tally.clears):
            for scan in [s for s in running if s.proc.poll() is not None]:
                running.remove(scan)
                self.finish_scan(scan)
            now = time.monotonic()
            window = now < end or not (self.tally.prunes and self.tally.clears)  # at least one of each
            while window and len(running) < self.args.scans:
                running.append(self.start_scan(serial))
                serial += 1
            if window and now >= next_maintenance and self.cache.exists():  # the first scan creates it
                self.change_library()
                self.maintenance(plan[ops % len(plan)])
                ops += 1
                next_maintenance = time.monotonic() + self.args.maintenance_every
            if now >= next_integrity:
                self.integrity("during the scans")
                next_integrity = now + 10
            time.sleep(0.05)
        soaked = time.monotonic() - started
        self.integrity("at the end")
        self.final_check()
        return {
            "seconds": round(soaked, 1),
            "minutes": round(soaked / 60, 2),
            "concurrent_scans": self.args.scans,
            **{k: v for k, v in vars(self.tally).items()},
            "ok": not self.tally.failures,
        }

    def final_check(self) -> None:
        """A scan of everything on the soaked cache ranks as a scan without a cache."""
        base = ["scan", str(self.library), "--k", "100000", "--dedup", "0", "--format", "json"]
        results = []
        for extra in (["--cache", str(self.cache)], ["--no-cache"]):
            proc = subprocess.run(
                self.command(*base, *extra), capture_output=True, text=True, env=self.env, timeout=1800
            )
            if proc.returncode != 0:
                self.fail(
                    f"final scan {' '.join(extra)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}"
                )
                return
            picks = json.loads(proc.stdout)["picks"]
            if extra[0] == "--cache":
                self.check_committed("final scan", picks)
            results.append([(p["path"], p["score"]) for p in picks])
        if results[0] != results[1]:
            self.fail("the final scan on the soaked cache ranks differently from a scan without a cache")
        self.integrity("after the final scan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--scans", type=int, default=8, help="scans running at the same time")
    parser.add_argument("--photos", type=int, default=240, help="photos in the library at the start")
    parser.add_argument("--maintenance-every", type=float, default=5.0, help="seconds between prune/clear")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--extractor", choices=["fake", "real"], default="fake")
    parser.add_argument("--workdir", type=Path, default=None, help="kept afterwards when given")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "soak.json")
    args = parser.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="novelfind-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        result = Soak(args, work).run()
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    result.update(machine("machine", "cpus", "load_average=load", "python", "sqlite"))
    write_json(result, args.out)
    print(
        f"soak: {result['scans']} scans in {result['minutes']} min ({args.scans} at a time), "
        f"{result['prunes']} prunes, {result['clears']} clears, "
        f"{result['integrity_checks']} integrity checks, "
        f"{result['vectors_checked']} vectors checked; exit codes {result['exit_codes']}; "
        f"{len(result['failures'])} failures"
    )
    for failure in result["failures"][:20]:
        print(f"  {failure}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
