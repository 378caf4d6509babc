#!/usr/bin/env python3
"""A warm re-run with nothing new, side by side with fastdup: the whole process of each, start-up included.

  nice -n 10 python scripts/bench_warm.py --fastdup-python /tmp/fastdup-venv/bin/python \
      --tree before=/tmp/novelfind-before --tree after=. --out docs/bench/warm-2core.json

The library is ``--count`` photos (default 2,046, 256 x 256 JPEGs, 100 a folder), made once under
``--work`` from the photo sets' sources (scripts/photosets.py: campus, aerial and flower views): most
scenes shot as bursts of 2-12 near-identical frames (``photosets.burst_frame``), as a phone's library
is, the 12 odd scenes among them too (people, animals, objects), so the picks are moments of several
frames and the ranking groups them. Each novelfind tree's cache
is filled once by a first ``novelfind scan LIB --k 20 --report`` (the real model on the CPU; the
report's thumbnails are kept beside the cache), and fastdup's work folder by a first
``fastdup.create(input_dir=LIB, work_dir=W).run()``; both first runs are timed too.

Every case is run once untimed (its modules compiled, kept under ``--work`` as an installed package
keeps them; its files in the page cache), then ``--runs`` rounds, each running every case once in a
fresh process, the order turned by one each round, so that a busy machine slows them alike:

- ``novelfind scan LIB --k 20 --cache C`` (each ``--tree NAME=PATH``: a source tree on ``PYTHONPATH``);
- the same with ``--report R.html`` (the thumbnails already kept: the report's own cost);
- fastdup's re-run: the same ``create(...).run()`` on the filled work folder. It says "Fastdup was already
  applied" and stops: it does not look at the folder again, so a new photo is not seen, where novelfind
  walks the folder, finds each photo's vector in its cache by the file's state, and ranks again.

For each run: wall seconds and CPU seconds of the whole process tree (``harness.run_tree``); medians
over the rounds, and the ratios to read: novelfind's over fastdup's, and ``--report``'s over the plain
re-run. fastdup runs under ``--fastdup-python`` (an interpreter where ``import fastdup`` works, such as
a virtual environment made for it: ``pip install fastdup``); without one its figures are left out, and
``--quoted-fastdup-wall`` (a figure measured elsewhere) is filed as quoted, labelled so.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from harness import machine, run_tree, write_json  # noqa: E402

SIDE = 256
ODD = 12  # odd scenes (people, animals, objects) among the views, shot like the others
FASTDUP_RUN = "import fastdup; fastdup.create(input_dir={lib!r}, work_dir={work!r}).run()"
ALREADY = "already applied"  # what fastdup says when its work folder holds a finished run


def build_library(dest: Path, count: int, seed: int = 0) -> dict:
    """``count`` JPEGs under ``dest`` (100 a folder), unless it holds them already; what it holds."""
    paths = sorted(dest.rglob("*.jpg")) if dest.is_dir() else []
    if len(paths) != count:
        from photosets import burst_frame, load_sources

        src = load_sources()
        rng = np.random.default_rng([seed, 2046])
        pool = [im for g in ("campus", "aerial", "flowers") for im in src.mvtb[g]]
        odd = [src.skimage[n] for n in ("astronaut", "coffee", "chelsea", "rocket", "horse", "coins")]
        odd += src.imagenet

        def shoot(im) -> list:
            """One scene: a single shot (3 in 10) or a burst of 2-12 frames."""
            w, h = im.size
            s = int(min(w, h) * rng.uniform(0.3, 0.8))
            box = (int(rng.integers(0, w - s + 1)), int(rng.integers(0, h - s + 1)), s)
            frames = 1 if rng.random() < 0.3 else int(rng.integers(2, 13))
            return [burst_frame(rng, im, box, SIDE) for _ in range(frames)]

        images = [f for i in rng.choice(len(odd), size=ODD, replace=False) for f in shoot(odd[int(i)])]
        while len(images) < count:
            images += shoot(pool[int(rng.integers(len(pool)))])
        images = images[:count]
        order = rng.permutation(len(images))
        for old in paths:
            old.unlink()
        paths = []
        for n, i in enumerate(order):
            path = dest / f"roll{n // 100:03d}" / f"IMG_{n:05d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            images[int(i)].convert("RGB").save(path, "JPEG", quality=90)
            paths.append(path)
    return {
        "photos": len(paths),
        "pixels": f"{SIDE}x{SIDE}",
        "megabytes": round(sum(p.stat().st_size for p in paths) / 1e6, 1),
    }


def timed(args: list[str], env: dict[str, str], expect: str | None = None) -> dict:
    """One run: wall and CPU seconds of its process tree; SystemExit when it fails (or when its output
    lacks ``expect``). Run from /: ``python -m`` puts the working folder first on the path."""
    done, wall, cpu, below = run_tree(args, env=env, cwd="/")
    if done.returncode != 0 or (expect is not None and expect not in done.stdout + done.stderr):
        raise SystemExit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr[-3000:]}")
    run = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}
    if below:
        run["processes_below"] = below
    return run


def novelfind_args(library: Path, cache: Path, report: Path | None) -> list[str]:
    args = [sys.executable, "-m", "novelfind", "scan", str(library), "--k", "20", "--cache", str(cache)]
    return args + (["--report", str(report)] if report is not None else [])


def fastdup_version(python: str) -> str | None:
    done = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('fastdup'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def medians(runs: list[dict]) -> dict:
    return {key: round(statistics.median(r[key] for r in runs), 3) for key in ("wall_s", "cpu_s")}


def ratio(a: dict, b: dict) -> dict:
    return {key: round(a[key] / b[key], 2) for key in ("wall_s", "cpu_s")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", action="append", default=[], help="NAME=PATH of a novelfind source tree")
    ap.add_argument("--count", type=int, default=2046, help="photos in the library (default 2046)")
    ap.add_argument("--runs", type=int, default=7, help="rounds (default 7)")
    ap.add_argument("--work", type=Path, default=Path("bench-results/warm"), help="library, caches")
    ap.add_argument("--fastdup-python", help="a Python where `import fastdup` works (default: none)")
    ap.add_argument("--quoted-fastdup-wall", type=float, help="fastdup's warm wall seconds from elsewhere")
    ap.add_argument("--out", type=Path, default=Path("bench-results/warm.json"))
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in (a.tree or [f"this={HERE.parent}"]))
    work = a.work.resolve()
    library = work / f"photos-{a.count}"
    facts = build_library(library, a.count)
    print(f"{facts['photos']} photos, {facts['megabytes']} MB in {library}", file=sys.stderr)
    load_start = [round(x, 2) for x in os.getloadavg()]

    # Compiled modules kept as an installed package keeps them (pip compiles them on install), for every
    # case alike, in a folder of the benchmark's own: not compiling each module again on every start
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base_env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    cases: dict[str, tuple[list[str], dict[str, str], str | None]] = {}
    first: dict[str, dict] = {}
    for name, path in trees.items():
        env = {**base_env, "PYTHONPATH": str(Path(path).resolve())}
        cache = work / f"cache-{name}-{a.count}.sqlite"
        report = work / f"report-{name}.html"
        if not cache.exists():  # the first scan: the real model, the report's thumbnails made
            first[name] = timed(novelfind_args(library, cache, report), env)
            print(f"{name} first scan: {first[name]}", file=sys.stderr)
        cases[name] = (novelfind_args(library, cache, None), env, None)
        cases[f"{name} --report"] = (novelfind_args(library, cache, report), env, None)
    version = fastdup_version(a.fastdup_python) if a.fastdup_python else None
    if version is not None:
        fd_work = work / f"fastdup-{a.count}"
        fd_args = [a.fastdup_python, "-c", FASTDUP_RUN.format(lib=str(library), work=str(fd_work))]
        if not (fd_work / "config.json").exists():
            first["fastdup"] = timed(fd_args, base_env)
            print(f"fastdup first run: {first['fastdup']}", file=sys.stderr)
        cases["fastdup"] = (fd_args, base_env, ALREADY)

    names = list(cases)
    for name in names:  # untimed: every timed run then finds its modules compiled, its files in memory
        args, env, expect = cases[name]
        timed(args, env, expect)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(a.runs):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            args, env, expect = cases[name]
            runs[name].append(timed(args, env, expect))
        print(
            f"round {r + 1}/{a.runs}: " + ", ".join(f"{n} {v[-1]['wall_s']:.2f} s" for n, v in runs.items()),
            file=sys.stderr,
        )
    med = {name: medians(v) for name, v in runs.items()}
    ratios: dict[str, dict] = {}
    for name in trees:
        ratios[f"{name} --report over {name}"] = ratio(med[f"{name} --report"], med[name])
        if "fastdup" in med:
            ratios[f"{name} over fastdup"] = ratio(med[name], med["fastdup"])
    result: dict = {
        "what": f"a warm re-run with nothing new of {facts['photos']} cached photos: `novelfind scan LIB "
        "--k 20` with and without --report (its thumbnails kept), and fastdup's re-run on its filled work "
        "folder (it does not look at the folder again); each a fresh process, wall and CPU seconds of its "
        "process tree, start-up included; medians of the interleaved rounds",
        "machine": machine("cpus", "affinity_cpus", "cpu_model", "python"),
        "load_start": load_start,
        "load_end": [round(x, 2) for x in os.getloadavg()],
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "library": facts,
        "trees": trees,
        "commands": {
            name: " ".join(Path(c).name if i == 0 else c for i, c in enumerate(cases[name][0]))
            for name in names
        },
        "fastdup": {"version": version, "python": a.fastdup_python}
        if version is not None
        else {"version": None, "note": "not run: no --fastdup-python where `import fastdup` works"},
        "first_runs": first,
        "runs": runs,
        "median": med,
        "ratios": ratios,
    }
    if a.quoted_fastdup_wall is not None:
        result["fastdup_quoted"] = {
            "wall_s": a.quoted_fastdup_wall,
            "note": "quoted, not measured by this run",
        }
        for name in trees:
            ratios[f"{name} over quoted fastdup (wall)"] = round(
                med[name]["wall_s"] / a.quoted_fastdup_wall, 2
            )
    write_json(result, a.out)
    print(f"{'':24} {'wall s':>8} {'CPU s':>8}")
    for name, m in med.items():
        print(f"{name:24} {m['wall_s']:8.2f} {m['cpu_s']:8.2f}")
    for name, value in ratios.items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
