"""Benchmark the ADS solver against the literal version and baselines on synthetic features.

Data: N points of M = 1280 features in 50 Gaussian clusters, with N/100 planted outliers drawn from
a wider isotropic Gaussian (K = number of outliers). For each method: wall time, peak memory above the
process's memory before the call (each case runs in a fresh subprocess), the objective
J(S) = sum_{i, j in S} ||x_i - x_j|| of the K picks, and planted-outlier F1.

    python scripts/bench_ads.py                       # 1k, 10k, 100k + seed-noise comparison (minutes)
    python scripts/bench_ads.py --sizes 1k,10k,100k,1M # 1M needs ~5 GB and about a minute per ADS run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from harness import CaseFailed, in_child, machine, write_json

from novelfind.ranking.solver import MIN_DRAWS, ADSConfig, ads, ads_reference

METHODS = ("ads", "ads-literal", "exact-power", "greedy-dispersion", "knn")


# ---------------------------------------------------------------------------- data


def make_data(
    n: int, m: int, seed: int, *, clusters: int = 50, spread: float = 0.6, outlier_scale: float = 1.2
):
    """float32 (N, M) features and the sorted indices of the N // 100 planted outliers, built in chunks."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(clusters, m, generator=g)  # (C, M)
    n_out = max(1, n // 100)
    outliers = torch.randperm(n, generator=g)[:n_out].sort().values  # (n_out,)
    x = torch.empty(n, m)  # (N, M)
    chunk = 16384
    for c0 in range(0, n, chunk):
        c1 = min(n, c0 + chunk)
        labels = torch.randint(0, clusters, (c1 - c0,), generator=g)
        x[c0:c1] = torch.randn(c1 - c0, m, generator=g).mul_(spread).add_(centres[labels])
    x[outliers] = torch.randn(n_out, m, generator=g) * outlier_scale
    return x.numpy(), outliers.numpy()


def parse_size(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("km")) * mult)


# ---------------------------------------------------------------------------- methods


def pairwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Euclidean distances (A, B), float32, via the dot-product form on centred data."""
    d2 = (x * x).sum(1, keepdim=True) + (y * y).sum(1) - 2 * x @ y.T
    return d2.clamp_min_(0).sqrt_()


def full_distances(x: np.ndarray) -> torch.Tensor:
    xt = torch.from_numpy(x)
    xt = xt - xt.mean(0)
    d = torch.empty(len(xt), len(xt))
    for c0 in range(0, len(xt), 2048):
        d[c0 : c0 + 2048] = pairwise(xt[c0 : c0 + 2048], xt)
    d.fill_diagonal_(0)
    return d


def exact_power(x: np.ndarray, k: int) -> np.ndarray:
    """Principal eigenvector of the full distance matrix (power iteration), top-K."""
    d = full_distances(x)
    s = torch.full((len(x),), 1 / len(x) ** 0.5)
    for _ in range(1000):
        new = d @ s
        new /= new.norm()
        done = float((new - s).norm()) < 1e-7
        s = new
        if done:
            break
    return np.argsort(-s.numpy(), kind="stable")[:k]


def greedy_dispersion(x: np.ndarray, k: int) -> np.ndarray:
    """Max-sum dispersion greedy: repeatedly take the farthest remaining pair (a 2-approximation,
    Hassin-Rubinstein-Tamir 1997 / Birnbaum-Goldman 2009); odd K: add the point farthest in sum."""
    d = full_distances(x)
    n = len(x)
    picked: list[int] = []
    while len(picked) + 2 <= k:
        flat = int(torch.argmax(d))
        i, j = divmod(flat, n)
        picked += [i, j]
        d[[i, j], :] = -1
        d[:, [i, j]] = -1
    if len(picked) < k:
        d = full_distances(x)
        score = d[:, picked].sum(1) if picked else d.sum(1)
        score[picked] = -1
        picked.append(int(torch.argmax(score)))
    return np.array(picked)


def knn_scores(x: np.ndarray, k: int, neighbours: int = 10) -> np.ndarray:
    """Distance to the 10th nearest neighbour, top-K (exact, blocked)."""
    xt = torch.from_numpy(x)
    xt = xt - xt.mean(0)
    score = torch.empty(len(xt))
    for c0 in range(0, len(xt), 1024):
        d = pairwise(xt[c0 : c0 + 1024], xt)
        score[c0 : c0 + 1024] = d.topk(neighbours + 1, dim=1, largest=False).values[:, -1]  # +1: self
    return np.argsort(-score.numpy(), kind="stable")[:k]


def run_method(method: str, x: np.ndarray, k: int, seed: int, block: int) -> np.ndarray:
    if method == "ads":
        return ads(x, k, ADSConfig(seed=seed, block=block)).ranking
    if method == "ads-literal":
        return ads_reference(x, k, ADSConfig(seed=seed)).ranking
    if method == "exact-power":
        return exact_power(x, k)
    if method == "greedy-dispersion":
        return greedy_dispersion(x, k)
    if method == "knn":
        return knn_scores(x, k)
    raise ValueError(f"unknown method {method!r}")


def objective(x: np.ndarray, picks: np.ndarray) -> float:
    xs = torch.from_numpy(x[np.sort(picks)]).double()
    return float(torch.cdist(xs, xs).sum())


def status_kb(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def run_case(case: dict) -> dict:
    """One (size, method, seed) in this (fresh) process."""
    torch.set_num_threads(case["threads"])
    x, outliers = make_data(case["n"], case["m"], case["seed"])
    k = len(outliers)
    if case["method"] == "ads":  # warm up torch kernels outside the measurement
        ads(x[:64], 2, ADSConfig(epochs=1))
    rss0 = status_kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    cpu0, t0 = time.process_time(), time.perf_counter()
    picks = run_method(case["method"], x, k, case["seed"], case["block"])
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    extra_mb = (status_kb("VmHWM") - rss0) / 1024
    hits = len(set(picks.tolist()) & set(outliers.tolist()))
    precision, recall = hits / len(picks), hits / k
    return {
        **case,
        "k": k,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_extra_mb": extra_mb,
        "features_mb": x.nbytes / 2**20,
        "peak_ratio": (x.nbytes / 2**20 + extra_mb) / (x.nbytes / 2**20),
        "objective": objective(x, picks),
        "f1": 0.0 if hits == 0 else 2 * precision * recall / (precision + recall),
        "loadavg_1m": os.getloadavg()[0],
    }


# ---------------------------------------------------------------------------- seed noise


def compare(n: int, m: int, seeds: int, blocks: list[int], data_seed: int = 0) -> list[dict]:
    """F1 and J(S) of the literal version and of the fast path at several block sizes, over many
    solver seeds on one data set: is the block-shared sampling within the literal version's seed noise?"""
    x, outliers = make_data(n, m, data_seed)
    k = len(outliers)
    truth = set(outliers.tolist())
    variants = [("ads-literal", None)] + [
        (f"ads block={b} (rows/draw {min(b, -(-n // MIN_DRAWS))})", b) for b in blocks
    ]
    rows = []
    for name, block in variants:
        f1, obj = [], []
        for seed in range(seeds):
            if block is None:
                picks = ads_reference(x, k, ADSConfig(seed=seed)).ranking
            else:
                picks = ads(x, k, ADSConfig(seed=seed, block=block)).ranking
            f1.append(len(set(picks.tolist()) & truth) / k)  # |S| = K = |outliers|: F1 = precision
            obj.append(objective(x, picks))
        rows.append(
            {
                "n": n,
                "variant": name,
                "seeds": seeds,
                "f1": f1,
                "objective": obj,
                "f1_mean": float(np.mean(f1)),
                "f1_sd": float(np.std(f1, ddof=1)),
                "objective_mean": float(np.mean(obj)),
                "objective_sd": float(np.std(obj, ddof=1)),
            }
        )
        r = rows[-1]
        print(
            f"N={n:,} {name:<18} F1 {r['f1_mean']:.3f} ± {r['f1_sd']:.3f}  "
            f"J(S) {r['objective_mean']:.5g} ± {r['objective_sd']:.3g}",
            file=sys.stderr,
            flush=True,
        )
    return rows


def compare_table(rows: list[dict]) -> str:
    lines = ["| N | variant | seeds | F1 mean ± sd | J(S) mean ± sd |", "|---:|---|---:|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {r['variant']} | {r['seeds']} | {r['f1_mean']:.3f} ± {r['f1_sd']:.3f} | "
            f"{r['objective_mean']:.5g} ± {r['objective_sd']:.3g} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- driver


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    keys = sorted({(r["n"], METHODS.index(r["method"]), r["method"]) for r in rows})
    for n, _, method in keys:
        rs = [r for r in rows if r["n"] == n and r["method"] == method]
        f1 = np.array([r["f1"] for r in rs])
        out.append(
            {
                "n": n,
                "method": method,
                "runs": len(rs),
                "wall_s": float(np.median([r["wall_s"] for r in rs])),
                "cpu_s": float(np.median([r["cpu_s"] for r in rs])),
                "peak_extra_mb": float(max(r["peak_extra_mb"] for r in rs)),
                "peak_ratio": float(max(r["peak_ratio"] for r in rs)),
                "objective": float(np.mean([r["objective"] for r in rs])),
                "f1_mean": float(f1.mean()),
                "f1_std": float(f1.std(ddof=1)) if len(f1) > 1 else 0.0,
            }
        )
    return out


def table(summary: list[dict]) -> str:
    lines = [
        "| N | method | runs | wall s (median) | CPU s | peak extra MB | peak / features | J(S) (mean) "
        "| F1 mean ± sd |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for s in summary:
        lines.append(
            f"| {s['n']:,} | {s['method']} | {s['runs']} | {s['wall_s']:.2f} | {s['cpu_s']:.2f} | "
            f"{s['peak_extra_mb']:.0f} | {s['peak_ratio']:.2f} | {s['objective']:.4g} | "
            f"{s['f1_mean']:.3f} ± {s['f1_std']:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1k,10k,100k", help="comma list, e.g. 1k,10k,100k,1M")
    ap.add_argument("--dim", type=int, default=1280)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seeds", type=int, default=5, help="data+solver seeds per size up to 10k")
    ap.add_argument("--big-seeds", type=int, default=1, help="seeds per size above 10k")
    ap.add_argument("--literal-max", type=parse_size, default=10_000, help="largest N for ads-literal")
    ap.add_argument("--exact-max", type=parse_size, default=10_000, help="largest N for exact/greedy (N x N)")
    ap.add_argument("--knn-max", type=parse_size, default=10_000, help="largest N for exact k-NN")
    ap.add_argument("--block", type=int, default=ADSConfig().block)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--out", type=Path, default=Path("bench-results/bench_ads.json"))
    ap.add_argument(
        "--compare-sizes",
        default="1k,10k",
        help="sizes for the seed-noise comparison of literal vs block-shared sampling ('' = skip)",
    )
    ap.add_argument("--compare-seeds", type=int, default=10)
    ap.add_argument("--compare-blocks", default="16,256,1024,4096")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))), flush=True)
        return

    limits = {
        "ads": 10**9,
        "ads-literal": args.literal_max,
        "exact-power": args.exact_max,
        "greedy-dispersion": args.exact_max,
        "knn": args.knn_max,
    }
    rows = []
    for n in map(parse_size, args.sizes.split(",")):
        seeds = args.seeds if n <= 10_000 else args.big_seeds
        for method in args.methods.split(","):
            if n > limits[method]:
                continue
            for seed in range(seeds):
                case = {
                    "n": n,
                    "m": args.dim,
                    "method": method,
                    "seed": seed,
                    "block": args.block,
                    "threads": args.threads,
                }
                try:
                    row = in_child([__file__, "--case", json.dumps(case)])
                except CaseFailed as e:
                    print(e.stderr, file=sys.stderr)
                    raise SystemExit(f"case failed: {case}") from None
                rows.append(row)
                print(
                    f"N={n:>9,} {method:<18} seed={seed} wall={row['wall_s']:7.2f}s "
                    f"cpu={row['cpu_s']:7.2f}s extra={row['peak_extra_mb']:7.0f}MB "
                    f"F1={row['f1']:.3f} J={row['objective']:.4g} load={row['loadavg_1m']:.1f}",
                    file=sys.stderr,
                    flush=True,
                )
    summary = summarise(rows)
    comparison = []
    for n in [parse_size(s) for s in args.compare_sizes.split(",") if s.strip()]:
        comparison += compare(
            n, args.dim, args.compare_seeds, [int(b) for b in args.compare_blocks.split(",")]
        )
    print(table(summary))
    if comparison:
        print()
        print(compare_table(comparison))
    host = {
        **machine("cpu=processor_or_machine", "cores=cpus"),
        "threads": args.threads,
        **machine("torch", "python", "cpu_model"),
    }
    doc = {"machine": host, "summary": summary, "runs": rows, "seed_noise": comparison}
    write_json(doc, args.out, indent=1, end="")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
