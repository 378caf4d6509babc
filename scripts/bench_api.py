#!/usr/bin/env python3
"""What the Python API costs on a filled cache: the README's Python example run as a script, in a fresh
process each time, and ``novelfind.scan()`` alone, with and without a known unreadable file.

  python scripts/bench_api.py --tree before=/tmp/novelfind-before --tree after=. \
      --out docs/bench/api-2core.json

The library is the README's example set (``photosets.example_set``, 80 photos; built once under
``--work``), and a copy of it (hard links) with one broken JPEG. The first tree runs each case once to
fill the cache (the real model on the CPU; not the point, and not timed), which the others share. Then
each run is a fresh ``python CASE.py`` in the work folder, taking turns between the trees, so that a
busy machine slows them alike. Cases:

- ``readme``: the README's Python example exactly as written there (``scan`` then ``rank(..., "knn")``);
- ``scan``: ``novelfind.scan("example-photos", k=5)`` alone;
- ``scan_known_broken``: the same on the copy with the broken JPEG, which the cache knows as unreadable.

For each run: wall time and peak resident memory of the process (``os.wait4``), and the bytes it wrote
on stderr (the library prints nothing: 0). The medians are what to compare. Whether a case imports torch
or onnxruntime is read from ``python -X importtime`` in one extra run per tree and case. The example set
is built in a process of its own and this one imports no numpy: Linux counts a child's memory at the
fork (its parent's) in its peak.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import machine, wait_peak, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    """The first ```python block of the README's "Python API" section, as written there."""
    section = (ROOT / "README.md").read_text().split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


CASES = {
    "readme": readme_example(),
    "scan": 'import novelfind\nprint(novelfind.scan("example-photos", k=5).counts)\n',
    "scan_known_broken": 'import novelfind\nprint(novelfind.scan("with-broken", k=5).counts)\n',
}


def build(work: Path) -> None:
    """``example-photos`` (the README's example set) and ``with-broken`` (its photos as hard links, and
    one broken JPEG) under ``work``, unless they are there."""
    photos = work / "example-photos"
    if not photos.is_dir():  # in a process of its own: a child's peak memory counts its parent's at fork
        make = [sys.executable, str(ROOT / "scripts" / "make_example.py"), str(photos)]
        subprocess.run(make, check=True, stderr=subprocess.DEVNULL)
    broken = work / "with-broken"
    if not broken.is_dir():
        broken.mkdir()
        for p in sorted(photos.glob("*.jpg")):
            os.link(p, broken / p.name)
        (broken / "IMG_9999.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(200))  # a JPEG's start only
    for name, code in CASES.items():
        (work / f"{name}.py").write_text(code)


def timed(script: Path, env: dict[str, str]) -> dict[str, float]:
    """Wall time, peak RSS (MB) and stderr bytes of one run; SystemExit when it fails."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, script.name],
        env=env,
        cwd=script.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    stderr = proc.stderr.read()
    code, peak_mb = wait_peak(proc)
    wall = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"{script}: exit {code}\n{stderr.decode(errors='replace')}")
    return {"wall_s": round(wall, 3), "peak_rss_mb": peak_mb, "stderr_bytes": len(stderr)}


def imported(script: Path, env: dict[str, str]) -> list[str]:
    """The heavy modules (torch, onnxruntime) a run imports, from ``-X importtime``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", script.name],
        env=env,
        cwd=script.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    names = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return sorted(names & {"torch", "onnxruntime"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH of a novelfind source tree")
    ap.add_argument("--runs", type=int, default=7, help="timed runs of each tree and case (default 7)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    ap.add_argument("--work", type=Path, default=Path("bench-results/api"), help="library and cache")
    ap.add_argument("--out", type=Path, default=Path("bench-results/api.json"))
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in (a.tree or [f"this={ROOT}"]))
    cases = [c for c in a.cases.split(",") if c]
    work = a.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    build(work)
    base = {k: v for k, v in os.environ.items() if not k.startswith("NOVELFIND_")}
    base["NOVELFIND_CACHE"] = str(work / "features.sqlite")
    if "NOVELFIND_MODEL_CACHE" in os.environ:
        base["NOVELFIND_MODEL_CACHE"] = os.environ["NOVELFIND_MODEL_CACHE"]
    envs = {name: {**base, "PYTHONPATH": str(Path(path).resolve())} for name, path in trees.items()}
    first = next(iter(envs.values()))
    for case in cases:  # fills the cache (and the record of the broken file)
        subprocess.run([sys.executable, f"{case}.py"], env=first, cwd=work, capture_output=True, check=True)
    runs: dict[str, dict[str, list[dict[str, float]]]] = {c: {t: [] for t in trees} for c in cases}
    for r in range(a.runs):
        for case in cases:
            for name, env in envs.items():
                runs[case][name].append(timed(work / f"{case}.py", env))
        print(
            f"run {r + 1}/{a.runs}: "
            + "; ".join(
                f"{c} " + ", ".join(f"{t} {v[-1]['wall_s']:.2f} s" for t, v in runs[c].items()) for c in cases
            ),
            file=sys.stderr,
        )
    median = {
        case: {
            name: {
                "wall_s": statistics.median(x["wall_s"] for x in v),
                "peak_rss_mb": statistics.median(x["peak_rss_mb"] for x in v),
                "stderr_bytes": max(x["stderr_bytes"] for x in v),
                "imports": imported(work / f"{case}.py", envs[name]),
            }
            for name, v in by_tree.items()
        }
        for case, by_tree in runs.items()
    }
    result = {
        "what": "the README's Python example and scan() alone on a filled cache, a fresh process per run "
        "(the example set: 80 photos; with_broken: the same and one broken JPEG the cache knows)",
        "machine": machine("cpus", "python", "load_avg_1m_end=load_1m"),
        "trees": {name: str(Path(path).resolve()) for name, path in trees.items()},
        "median": median,
        "runs": runs,
    }
    write_json(result, a.out)
    print(f"{'':18} {'':8} {'wall s':>8} {'peak MB':>8} {'stderr':>7}  imports")
    for case, by_tree in median.items():
        for name, m in by_tree.items():
            heavy = ",".join(m["imports"]) or "-"
            figures = f"{m['wall_s']:8.2f} {m['peak_rss_mb']:8.0f} {m['stderr_bytes']:7d}"
            print(f"{case:18} {name:8} {figures}  {heavy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
