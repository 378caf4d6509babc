#!/usr/bin/env python3
"""Ranking at library scale: each method at N = 10k, 100k, 1M on structured features with planted outliers.

Data (``make_features``; M = 1000 like MobileNet-V2 logits): 50 clusters of very different sizes (weights
proportional to 1/sqrt(rank)), each a centre plus a random 16-dimensional subspace with a decaying spectrum
(axis j scaled by 1/sqrt(1 + j), each cluster's spread drawn from 1.5-4.5) plus isotropic noise of 0.15
per feature. 100 rows, drawn at random, are planted outliers: members of a cluster with 5x the noise.
They sit on their cluster in the principal axes but off it in the other ~900 directions, so their
distance to their 10 nearest neighbours is about twice that of any ordinary row: every exact density
finds all of them, a projection to 64 axes alone finds ~90 (measured at 30k), and an approximate
search that misses neighbours of ordinary rows pushes them out (the old HNSW default: 0.62 at 30k).
``--data isotropic`` uses 50 isotropic Gaussian clusters (sd 0.3) and cluster members with 4x the
noise instead.

Each (size, method) runs in a fresh process on features saved once per size (``--data-dir``): share of
the planted outliers in the top 100 (K = 100), wall and CPU seconds, seconds per stage (PCA, candidate
search, exact rows, ADS, ordering and near-duplicate pass, nearest neighbours of the picks; measured by
wrapping those functions), peak memory above the process's memory before the call (the feature matrix
itself is listed apart), the rows the certified ranking made exact and how tight its bounds were. Where
it is affordable (``--exact-up-to``) the same ranking is repeated with every density exact
(``novelfind.ranking.knn.EXACT_MAX_N`` raised) and the picks compared.

``--alternatives N`` measures the ways of computing the density term on the default's density space
(brute force, faiss HNSW as the old default used it, faiss IVF, the k-means cells, the certified
ranking, a density against a random 10k-row sample): seconds, recall of the 10 nearest neighbours and
the share of exact bounds on 2048 evenly spaced rows, and planted share in the top 100 by that density.

    nice -n 10 python scripts/bench_rank.py                              # 10k, 100k, 1M (about 30 min)
    python scripts/bench_rank.py --sizes 10k,30k --methods ads,knn
    python scripts/bench_rank.py --sizes 100k --alternatives 100k --out /tmp/r.json

Prints a markdown table and writes JSON (default docs/bench/rank.json). The 1M matrix is 4 GB;
the default ranking at 1M peaks near 1.0 GB above it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from harness import CaseFailed, in_child, machine, write_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from novelfind.ranking import driver as ranking  # noqa: E402
from novelfind.ranking import knn, moments, pca, scoring, solver  # noqa: E402
from novelfind.ranking import methods as ranking_methods  # noqa: E402
from novelfind.ranking.cells import CELL_PROBE, CELL_ROWS  # noqa: E402

K = 100  # planted outliers = picks


# ---------------------------------------------------------------------------- data


def make_features(n: int, m: int = 1000, *, seed: int = 0, kind: str = "structured", chunk: int = 65536):
    """float32 (N, M) features and the sorted indices of the K planted outliers (see the module doc)."""
    rng = np.random.default_rng(seed)
    clusters, rank_, noise = 50, 16, 0.15
    out = np.sort(rng.choice(n, K, replace=False))
    centres = rng.standard_normal((clusters, m), dtype=np.float32)
    x = np.empty((n, m), dtype=np.float32)
    if kind == "isotropic":
        labels = rng.integers(0, clusters, n)
        for c0 in range(0, n, chunk):
            c1 = min(n, c0 + chunk)
            x[c0:c1] = centres[labels[c0:c1]] + rng.standard_normal((c1 - c0, m), dtype=np.float32) * 0.3
        x[out] += rng.standard_normal((K, m), dtype=np.float32) * 1.2
        return x, out
    bases = rng.standard_normal((clusters, rank_, m), dtype=np.float32) / np.float32(np.sqrt(m))
    spectrum = (1.0 / np.sqrt(1 + np.arange(rank_))).astype(np.float32)
    spread = rng.uniform(0.5, 1.5, clusters).astype(np.float32) * 3.0
    weights = 1.0 / np.sqrt(1 + np.arange(clusters))
    labels = rng.choice(clusters, n, p=weights / weights.sum())
    for c0 in range(0, n, chunk):
        c1 = min(n, c0 + chunk)
        lab = labels[c0:c1]
        z = rng.standard_normal((c1 - c0, rank_), dtype=np.float32) * spectrum * spread[lab, None]
        xb = centres[lab] + rng.standard_normal((c1 - c0, m), dtype=np.float32) * np.float32(noise)
        for c in np.unique(lab):
            sel = lab == c
            xb[sel] += z[sel] @ bases[c]
        x[c0:c1] = xb
    x[out] += rng.standard_normal((K, m), dtype=np.float32) * np.float32(noise * 5)
    return x, out


def data_path(data_dir: Path, n: int, kind: str) -> Path:
    return data_dir / f"{kind}-{n}.npz"


def ensure_data(data_dir: Path, n: int, kind: str) -> Path:
    path = data_path(data_dir, n, kind)
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        x, out = make_features(n, kind=kind)
        tmp = path.with_suffix(".tmp.npz")
        np.savez(tmp, x=x, outliers=out)
        tmp.replace(path)
        print(f"data {kind} N={n:,}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    return path


def load(path: Path) -> tuple[np.ndarray, np.ndarray]:
    z = np.load(path)
    return z["x"], z["outliers"]


def parse_size(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("km")) * mult)


# ---------------------------------------------------------------------------- one case


def status_kb(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


class StageClock:
    """Seconds spent in named library functions (wrapped in place; nested calls count once, outermost)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._depth = 0
        self.scores: list = []

    def wrap(self, owner, attr: str, stage: str) -> None:
        fn = getattr(owner, attr)
        clock = self

        def timed(*args, **kwargs):
            if clock._depth:
                return fn(*args, **kwargs)
            clock._depth += 1
            t, c = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                clock._depth -= 1
                clock.seconds[stage] = clock.seconds.get(stage, 0.0) + time.perf_counter() - t
                clock.cpu[stage] = clock.cpu.get(stage, 0.0) + time.process_time() - c

        setattr(owner, attr, timed)


def instrument() -> StageClock:
    clock = StageClock()
    clock.wrap(scoring, "principal", "pca")  # where the density and event-knn fit it
    clock.wrap(ranking_methods, "principal", "pca")  # where ads and multiscale-knn fit it
    clock.wrap(knn, "knn_cells", "candidate search")
    clock.wrap(knn.KnnScores, "make_exact", "exact rows")
    clock.wrap(solver, "solve", "ads")  # the ADS solver, wherever a method runs it
    clock.wrap(moments.Grouper, "group", "moments")
    clock.wrap(ranking, "nearest_neighbours", "neighbours")
    build = knn.KnnScores.build.__func__

    def keep(cls, *args, **kwargs):
        obj = build(cls, *args, **kwargs)
        clock.scores.append(obj)
        return obj

    knn.KnnScores.build = classmethod(keep)
    return clock


def make_times(n: int, kind: str, seed: int = 0) -> np.ndarray | None:
    """Capture times for ``event-knn`` (seconds): ``events``: events of 1 to ~200 photos (geometric
    sizes, mean 20) seconds to minutes apart inside, on days spread over three years, 5 % undated;
    ``tenth``: the same, but a tenth of the photos (drawn at random) taken in one long day, a second
    apart (one event holding a tenth of the library); ``one-event``: every photo the same time (a copied
    archive); ``none``: no times."""
    if kind == "none":
        return None
    if kind == "one-event":
        return np.full(n, 1.7e9)
    if kind == "tenth":
        t = make_times(n, "events", seed)
        day = np.random.default_rng(seed + 1).choice(n, n // 10, replace=False)
        t[day] = 1.5e9 + np.arange(len(day), dtype=np.float64)  # before every other event: one event
        return t
    rng = np.random.default_rng(seed)
    sizes = rng.geometric(1 / 20, size=n // 5 + 10)
    sizes = sizes[: np.searchsorted(np.cumsum(sizes), n) + 1]
    starts = np.sort(rng.uniform(0, 3 * 365 * 86400.0, len(sizes)))
    t = np.concatenate([s + np.cumsum(rng.exponential(90.0, z)) for s, z in zip(starts, sizes, strict=True)])[
        :n
    ]
    t = rng.permutation(t) + 1.6e9  # rows of the data are in random order
    t[rng.random(n) < 0.05] = np.nan
    return t


def run_case(case: dict) -> dict:
    """One (size, method[, exact]) in this fresh process."""
    import torch

    x, outliers = load(Path(case["data"]))
    times = make_times(len(x), case.get("times", "none"))
    timed = {"times": times} if times is not None else {}
    if case.get("exact"):
        knn.EXACT_MAX_N = 10**12
    clock = instrument()
    ranking.rank(x[:256], 5, method=case["method"])  # warm up kernels, imports and thread pools
    clock.seconds.clear()
    clock.cpu.clear()
    clock.scores.clear()
    rss0 = status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    cpu0, t0 = time.process_time(), time.perf_counter()
    r = ranking.rank(x, K, method=case["method"], **timed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    stages = {name: round(s, 3) for name, s in clock.seconds.items()}
    stages["other"] = round(wall - sum(clock.seconds.values()), 3)
    stages_cpu = {name: round(s, 3) for name, s in clock.cpu.items()}
    out = {
        **case,
        "k": K,
        "share": len(set(r.indices.tolist()) & set(outliers.tolist())) / K,
        "picks": r.indices.tolist(),
        "scores": r.scores.tolist(),
        "wall_s": wall,
        "cpu_s": cpu,
        "stages_s": stages,
        "stages_cpu_s": stages_cpu,
        "peak_extra_mb": (status_kb("VmHWM") - rss0) / 1024,
        "peak_rss_mb": status_kb("VmHWM") / 1024,  # the process's peak resident memory, features included
        "features_mb": x.nbytes / 2**20,
        "threads": torch.get_num_threads(),
        "loadavg_1m": os.getloadavg()[0],
    }
    certified = [s for s in clock.scores if s.stats.get("method") == "cells+exact"]
    if certified:
        s = certified[-1]
        ratios = np.asarray(s.stats["bound_over_exact"])
        out["certified"] = {
            "rows_made_exact": s.stats["exact_rows"],
            "passes": s.stats["passes"],
            "blocks_skipped": s.stats.get("pairs_skipped"),  # (exact row, block of rows) pairs skipped
            "bound_over_exact_p50": float(np.median(ratios)) if len(ratios) else None,
            "bound_over_exact_p99": float(np.quantile(ratios, 0.99)) if len(ratios) else None,
            "bound_exact_share": float(np.mean(ratios < 1 + 2 * knn.BOUND_SLACK)) if len(ratios) else None,
        }
    return out


# ---------------------------------------------------------------------------- alternatives


def drop_self(d2: np.ndarray, idx: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """From k+1 faiss results per row (row i's own index possibly among them) keep k that are not row i."""
    n = len(idx)
    own = idx == np.arange(n)[:, None]  # (N, k+1)
    # drop the row's own entry, or the last one if it was not found (then k+1 others were as close)
    drop = np.where(own.any(1), own.argmax(1), idx.shape[1] - 1)  # (N,)
    keep = np.ones(idx.shape, dtype=bool)
    keep[np.arange(n), drop] = False
    d2 = d2[keep].reshape(n, k)
    idx = idx[keep].reshape(n, k)
    dist = np.sqrt(np.maximum(d2, 0)).astype(np.float32)
    dist[idx < 0] = np.inf
    return dist, idx


def alternatives(path: Path, sample: int = 2048) -> list[dict]:
    """Ways of computing the density term (mean distance to the 10 nearest rows, raw features), at one N."""
    import faiss

    x, outliers = load(path)
    n = len(x)
    kk = scoring.KNN_K
    truth = set(outliers.tolist())
    t = time.perf_counter()
    space = pca.fit_space(x, scoring.WHITEN_DIMS, max_rows=scoring.PCA_ROWS)
    proj, z = space.proj, scoring.search_space(space.proj, space.resid)
    t_space = time.perf_counter() - t
    rows = pca.spread(n, sample)
    ex_d, ex_i = knn.knn_exact(x, rows, kk)  # the reference for recall and bounds
    ex = ex_d.mean(1)

    def measure(name: str, fn) -> dict:
        t = time.perf_counter()
        dist, idx, note = fn()
        secs = time.perf_counter() - t
        score = dist.mean(1) if dist.ndim == 2 else dist
        row = {"alternative": name, "n": n, "seconds": secs, "principal_space_s": t_space, **note}
        if idx is not None:
            hits = [len(set(a) & set(b)) / len(b) for a, b in zip(idx[rows], ex_i, strict=True)]
            row["recall_at_10"] = float(np.mean(hits))
            row["bound_exact_share"] = float(np.mean(score[rows] <= ex * (1 + 1e-4)))
            row["bound_over_exact_p99"] = float(np.quantile(score[rows] / ex, 0.99))
        top = np.lexsort((np.arange(n), -score))[:K]
        row["share"] = len(truth & set(top.tolist())) / K
        print(f"alternative {name}: {secs:.1f} s, share {row['share']:.2f}", file=sys.stderr, flush=True)
        return row

    def exact_scores(rows: np.ndarray) -> np.ndarray:  # every row exact: O(N^2 M)
        return knn.KnnScores.build(rows, kk, exact_max_n=len(rows)).values

    def brute():
        return exact_scores(x), None, {}

    def in_space(space):
        return lambda: (exact_scores(space), None, {})

    def raw(idx):  # distances in the raw features to the rows found, sorted (chunked)
        out = np.empty(idx.shape, dtype=np.float32)
        for c0 in range(0, n, 4096):
            i = idx[c0 : c0 + 4096]
            d = np.linalg.norm(x[np.maximum(i, 0)] - x[c0 : c0 + 4096, None], axis=2)
            out[c0 : c0 + 4096] = np.sort(np.where(i < 0, np.inf, d), axis=1)
        return out

    def hnsw(space, settings):  # the previous index and settings (knn: raw; the default: 64 axes)
        index = faiss.IndexHNSWFlat(space.shape[1], 16)
        index.hnsw.efConstruction = 40
        index.add(np.ascontiguousarray(space))
        index.hnsw.efSearch = 64
        d2, idx = index.search(np.ascontiguousarray(space), kk + 1)
        _, i = drop_self(d2, idx, kk)
        return raw(i), i, {"settings": settings}

    def ivf(probe: int = 8):
        nlist = max(1, n // 256)
        index = faiss.IndexIVFFlat(faiss.IndexFlatL2(z.shape[1]), z.shape[1], nlist)
        index.cp.min_points_per_centroid = 1
        index.train(z[pca.spread(n, 64 * nlist)])
        index.add(z)
        index.nprobe = probe
        d2, idx = index.search(z, kk + 1)
        _, i = drop_self(d2, idx, kk)
        return raw(i), i, {"settings": f"65-d search space, nlist {nlist}, nprobe {probe}; raw distances"}

    def cells():
        d, i = knn.knn_cells(z, kk, measure=x)
        return d, i, {"settings": f"65-d search space, {CELL_ROWS} rows a cell, {CELL_PROBE} probed"}

    def certified():
        s = knn.KnnScores.build(x, kk, search=z)
        walk = lambda order: K  # noqa: E731 - the top K, as the ranking reads it without duplicates
        order, _ = knn.certified_order(lambda: s.values, s.exact, s.make_exact, walk, first=2 * K + 20)
        v = np.full(n, -np.inf, dtype=np.float32)
        v[order[:K]] = s.values[order[:K]]
        return v, None, {"rows_made_exact": int(s.exact.sum()), "passes": s.stats["passes"]}

    def sampled(size: int = 10_000):
        base = np.random.default_rng(0).choice(n, min(n, size), replace=False)
        d, _ = faiss.knn(x, x[base], kk + 1)
        d = np.sqrt(np.maximum(np.sort(d, 1)[:, 1:], 0))  # drop the nearest (itself, for sampled rows)
        return d, None, {"settings": f"distances to {len(base):,} random rows"}

    options = [
        ("brute force (exact)", brute),
        ("exact, 64 principal axes only", in_space(proj)),
        ("exact, 64 axes + distance from them", in_space(z)),
        ("faiss HNSW on raw features (old knn)", lambda: hnsw(x, "M=16, efC 40, efS 64, raw")),
        ("faiss HNSW on 64 axes (old default)", lambda: hnsw(proj, "M=16, efC 40, efS 64, 64 axes")),
        ("faiss IVF-Flat", ivf),
        ("k-means cells", cells),
        ("certified: cells + exact top", certified),
        ("density against a 10k sample", sampled),
    ]
    return [measure(name, fn) for name, fn in options]


# ---------------------------------------------------------------------------- driver


def table(rows: list[dict]) -> str:
    stages = ["pca", "candidate search", "exact rows", "ads", "moments", "neighbours", "other"]
    lines = [
        "| N | method | planted found | wall s | CPU s | "
        + " | ".join(stages)
        + " | peak MB above features | rows made exact |",
        "|---:|---|---:|---:|---:|" + "---:|" * len(stages) + "---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['n']:,} | {r['method']} | {r['error']} |")
            continue
        st = r["stages_s"]
        cert = r.get("certified", {}).get("rows_made_exact", "all" if r["method"] in ("ads", "knn") else "")
        name = r["method"] + (" (all exact)" if r.get("exact") else "")
        lines.append(
            f"| {r['n']:,} | {name} | {r['share']:.2f} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
            + " | ".join(f"{st.get(s, 0):.1f}" for s in stages)
            + f" | {r['peak_extra_mb']:.0f} | {cert} |"
        )
    return "\n".join(lines)


def against_default(rows: list[dict]) -> list[dict]:
    """Each method's CPU seconds and peak resident memory over ``cosine-knn``'s at the same N."""
    out = []
    for r in rows:
        base = [b for b in rows if b["n"] == r["n"] and b["method"] == "cosine-knn" and "cpu_s" in b]
        if r["method"] == "cosine-knn" or "cpu_s" not in r or not base:
            continue
        b = base[0]
        out.append(
            {
                "n": r["n"],
                "method": r["method"] + (" (all exact)" if r.get("exact") else ""),
                "times": r.get("times", ""),
                "cpu_ratio": r["cpu_s"] / b["cpu_s"],
                "peak_rss_ratio": r["peak_rss_mb"] / b["peak_rss_mb"],
                "peak_extra_ratio": r["peak_extra_mb"] / max(b["peak_extra_mb"], 1.0),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10k,100k,1M")
    ap.add_argument("--methods", default=",".join(ranking_methods.METHODS))
    ap.add_argument("--data", default="structured", choices=("structured", "isotropic"))
    ap.add_argument("--data-dir", type=Path, default=ROOT / "bench-results" / "rank-data")
    ap.add_argument("--exact-up-to", default="30k", help="also rank with every density exact up to this N")
    ap.add_argument("--alternatives", default="", help="measure the density-term alternatives at this N")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench" / "rank.json")
    ap.add_argument(
        "--times",
        default="events",
        help="capture times given to event-knn: comma-separated of events, tenth, one-event, none",
    )
    ap.add_argument("--note", default="", help="a note kept with the machine's record (that it was busy)")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))), flush=True)
        return
    sizes = [parse_size(s) for s in args.sizes.split(",") if s]
    methods = [m for m in args.methods.split(",") if m]
    exact_up_to = parse_size(args.exact_up_to) if args.exact_up_to else 0
    host = {
        **machine("python", "cpus", "processor=processor_or_machine", "loadavg_start=load"),
        "data": args.data,
        "note": args.note,
    }
    rows: list[dict] = []
    for n in sizes:
        path = ensure_data(args.data_dir, n, args.data)
        cases = [{"n": n, "method": m, "data": str(path)} for m in methods if m != "event-knn"]
        cases += [
            {"n": n, "method": m, "data": str(path), "times": t}
            for m in methods
            if m == "event-knn"
            for t in args.times.split(",")
        ]
        cases += [
            {"n": n, "method": m, "data": str(path), "exact": True}
            for m in methods
            if m in ("ads", "knn") and knn.EXACT_MAX_N < n <= exact_up_to
        ]
        for case in cases:
            try:
                rows.append(in_child([__file__, "--case", json.dumps(case)]))
            except CaseFailed as e:
                rows.append({**case, "error": e.error[:200]})
            r = rows[-1]
            print(
                f"N={n:,} {case['method']}{' exact' if case.get('exact') else ''} {case.get('times', '')}: "
                + (r["error"] if "error" in r else f"share {r['share']:.2f}, {r['wall_s']:.1f} s"),
                file=sys.stderr,
                flush=True,
            )
        for m in ("ads", "knn"):  # the certified ranking against the all-exact one
            a = [r for r in rows if r["n"] == n and r["method"] == m and "picks" in r]
            if len(a) == 2:
                a[1]["same_picks_as_certified"] = a[0]["picks"] == a[1]["picks"]
    alt = []
    if args.alternatives:
        n = parse_size(args.alternatives)
        alt = alternatives(ensure_data(args.data_dir, n, args.data))
    host["loadavg_end"] = os.getloadavg()
    failed = [r for r in rows if "error" in r]
    print(table(rows))
    for a in alt:
        nan = float("nan")
        print(
            f"- {a['alternative']} ({a.get('settings', '')}): {a['seconds']:.1f} s, recall@10 "
            f"{a.get('recall_at_10', nan):.3f}, exact bounds {a.get('bound_exact_share', nan):.3f}, "
            f"planted share {a['share']:.2f}"
        )
    ratios = against_default(rows)
    for line in ratios:
        print(
            f"- N={line['n']:,} {line['method']} {line['times']}: {line['cpu_ratio']:.2f}x the CPU seconds "
            f"of cosine-knn, {line['peak_rss_ratio']:.2f}x its peak memory"
        )
    doc = {"machine": host, "runs": rows, "against_cosine": ratios, "alternatives": alt}
    write_json(doc, args.out, indent=1, end="")
    load = f"{host['loadavg_start'][0]:.1f} -> {host['loadavg_end'][0]:.1f}"
    print(f"\nload average {load}; wrote {args.out}")
    if failed:  # a case that fails is a broken benchmark, not a figure
        sys.exit(f"{len(failed)} of {len(rows)} cases failed; the first: {failed[0]['error']}")


if __name__ == "__main__":
    main()
