#!/usr/bin/env python3
"""What checking the kept ONNX graph costs a warm run: reading it through a descriptor and hashing it.

  python scripts/bench_graph_check.py --out docs/bench/graph-check-2core.json

A graph of the size of MobileNet-V2's (14 MB; its bytes do not matter to the cost) is kept in a temporary
model folder the way an export keeps it (``model.graph.keep_graph``: the graph and its SHA-256), then taken
back as a warm run does (``kept_graph``: through a descriptor, owner and mode checked, SHA-256 compared).
Against it, the plain read of the same file, which ONNX Runtime made itself when it was given the path:
the difference is what the check adds. Wall time, best of the repeats, page cache warm (as on a warm run).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from harness import machine, write_json

import novelfind
from novelfind.model.graph import keep_graph, kept_graph


def best_of(repeats: int, action) -> float:
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - began)
    return best


def measure(megabytes: float, repeats: int) -> dict:
    graph = os.urandom(int(megabytes * (1 << 20)))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "models" / "m.onnx"
        keep_graph(path, graph)
        assert kept_graph(path) == graph
        checked = best_of(repeats, lambda: kept_graph(path))
        plain = best_of(repeats, path.read_bytes)
    return {
        "graph_bytes": len(graph),
        "kept_graph_ms": round(1000 * checked, 2),
        "plain_read_ms": round(1000 * plain, 2),
        "check_adds_ms": round(1000 * (checked - plain), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--megabytes", type=float, default=13.3)  # MobileNet-V2's exported graph
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    doc = {
        "novelfind": novelfind.__version__,
        "machine": machine("cpus", "python", "platform", "load"),
        "check": measure(args.megabytes, args.repeats),
    }
    write_json(doc, args.out, indent=1, echo=True)


if __name__ == "__main__":
    main()
