#!/usr/bin/env python3
"""How long ``novelfind scan --engine ray --ray-address HOST:PORT`` takes to fail when something listens at
HOST:PORT that is not a Ray head, and what it prints (the README's figure comes from here).

A local socket accepts connections and never answers. Each run is the whole command in a new process
(starting Python, importing Ray, Ray's one bounded connection attempt), so the figure is what a user waits.

    python scripts/bench_ray_connect.py                  # 3 runs, docs/bench/ray-connect.json
    python scripts/bench_ray_connect.py --runs 1 --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness import machine, write_json
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def silent_listener() -> tuple[socket.socket, threading.Event]:
    """A listening socket on a free local port whose connections are accepted and left unanswered."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.5)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue
        for conn in held:
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return sock, stop


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "ray-connect.json")
    args = parser.parse_args()

    sock, stop = silent_listener()
    address = f"127.0.0.1:{sock.getsockname()[1]}"
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        photos = Path(tmp) / "photos"
        photos.mkdir()
        Image.new("RGB", (64, 48), (200, 30, 30)).save(photos / "a.jpg")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [
            sys.executable,
            "-m",
            "novelfind",
            "scan",
            str(photos),
            "--engine",
            "ray",
            "--ray-address",
            address,
            "--no-cache",
        ]
        for _ in range(args.runs):
            load = os.getloadavg()[0]
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
            seconds = time.perf_counter() - start
            runs.append(
                {
                    "seconds": round(seconds, 2),
                    "exit_code": done.returncode,
                    "stderr_lines": done.stderr.splitlines(),
                    "load_before": round(load, 2),
                }
            )
            print(
                f"{seconds:.1f} s, exit {done.returncode}, {len(done.stderr.splitlines())} stderr line(s)",
                file=sys.stderr,
            )
    stop.set()
    sock.close()
    import ray

    doc = {
        "what": "novelfind scan --engine ray --ray-address pointing at a port that accepts connections "
        "but is not a Ray head: wall time of the whole command (new process each run)",
        "median_s": round(statistics.median(r["seconds"] for r in runs), 2),
        "runs": runs,
        "machine": {**machine("cpus", "platform", "python"), "ray": ray.__version__},
    }
    write_json(doc, args.out, indent=1)
    print(json.dumps({"median_s": doc["median_s"]}))


if __name__ == "__main__":
    main()
