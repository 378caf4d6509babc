"""Labelled novelty sets built from real pictures (``sources``), split once into dev and test.

Every set is a plan of N items, each an ordinary picture (label False) or a planted novelty (True), in
random order. Each item is rendered from its own generator (``(set, seed, item index)``), so a set can be
streamed (the library-scale sets are never held in memory) and the same (set, seed) gives the same bytes
on every machine. A different seed is an independent draw: other source pictures, crops, classes.

No cue besides content: every item, ordinary or novel, goes through the same last step (``finish``): a
square picture resized to SIDE x SIDE (bicubic), the same mild exposure jitter, Gaussian sensor noise of
a random level and JPEG compression at a random quality, drawn from the same distributions for both
labels. Novelties are crops of their own source pictures at the same scales as the ordinary ones.

The split (fixed before any method was compared; see ``SPLITS``): each kind of novelty has a dev set,
used to choose anything, and a test set, only reported, built from other source pictures or another
variant of the kind (nebulae vs. drawings, digits 0-4 vs. 5-9, code screenshots vs. documents, blur and
colour casts vs. exposure and motion blur, ...). The library-scale sets (30,000 pictures) are test sets;
``library-dev`` (12,000) is their dev counterpart.
"""

from __future__ import annotations

import io
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont, ImageOps

from . import sources

VERSION = "sets-v1"  # bump when a set's recipe changes: it keys the feature cache
SIDE = 256  # every picture is SIDE x SIDE RGB JPEG (the model then centre-crops 224 of it)
JPEG_QUALITY = (75, 96)  # [lo, hi): one quality per picture, same distribution for every label
NOISE_SIGMA = (0.0, 3.0)  # sensor-noise level per picture (8-bit units)
MIN_CROP = 160  # no crop smaller than this many source pixels: no picture is upscaled more than 1.6x

Maker = Callable[[np.random.Generator], Image.Image]


@dataclass
class Item:
    label: bool  # True: planted novelty
    kind: str  # source picture (or class) it came from
    make: Maker = field(repr=False)  # rng -> square RGB picture (any size), before ``finish``
    group: int = -1  # burst id (near-duplicates share one), -1 for a single shot
    moment: str = ""  # a planted odd batch: every member carries the batch's name (one novelty group)


@dataclass
class LabelledSet:
    """A planned set: ``labels[i]`` is True for a planted novelty. Pictures are rendered on demand."""

    name: str
    seed: int
    items: list[Item]

    @property
    def labels(self) -> np.ndarray:
        return np.array([it.label for it in self.items], dtype=bool)

    @property
    def groups(self) -> np.ndarray:
        return np.array([it.group for it in self.items], dtype=np.int64)

    @property
    def kinds(self) -> list[str]:
        return [it.kind for it in self.items]

    @property
    def novelty_groups(self) -> np.ndarray:
        """Group id per item for the coverage metric, -1 for an ordinary picture (``novelty_group``)."""
        names: dict[str, int] = {}
        out = np.full(len(self.items), -1, dtype=np.int64)
        for i, it in enumerate(self.items):
            if it.label:
                out[i] = names.setdefault(novelty_group(it, i), len(names))
        return out

    @property
    def k(self) -> int:
        return int(self.labels.sum())

    def __len__(self) -> int:
        return len(self.items)

    def jpeg(self, i: int) -> bytes:
        """The encoded picture i (JPEG bytes, SIDE x SIDE)."""
        rng = np.random.default_rng([zlib.crc32(self.name.encode()), self.seed, i, 1])
        return finish(rng, self.items[i].make(rng))

    def image(self, i: int) -> Image.Image:
        with Image.open(io.BytesIO(self.jpeg(i))) as im:
            im.load()
            return im

    def images(self) -> Iterator[Image.Image]:
        for i in range(len(self)):
            yield self.image(i)


def novelty_group(it: Item, i: int) -> str:
    """What one labelled novelty group is, for coverage (the share of groups with a pick in the top K):
    all screenshots or document pages of a set are one batch; a digit class is one group; a planted
    defect or failed shot is its own group (the fault is the novelty, not the scene under it); any
    other novelty is grouped by its source picture (the same subject shot again is one group). A
    planted batch of the moments sets is one group whatever its members show."""
    if it.moment:
        return it.moment
    if it.kind.startswith(("code/", "doc/")):
        return "text-batch"
    if getattr(it.make, "__name__", "") in ("faulty", "defective"):
        return f"item-{i}"
    return it.kind


# --------------------------------------------------------------------------- rendering


def finish(rng: np.random.Generator, im: Image.Image) -> bytes:
    """The one last step of every picture: SIDE x SIDE, exposure jitter, noise, JPEG -> bytes."""
    if im.size != (SIDE, SIDE):
        im = im.resize((SIDE, SIDE), Image.Resampling.BICUBIC)
    if rng.random() < 0.5:
        im = ImageOps.mirror(im)
    arr = np.asarray(im, dtype=np.float32)  # (SIDE, SIDE, 3)
    gain = rng.uniform(0.9, 1.1)
    contrast = rng.uniform(0.9, 1.1)
    mean = arr.mean()
    arr = (arr - mean) * contrast + mean * gain
    arr += rng.normal(0.0, rng.uniform(*NOISE_SIGMA), size=arr.shape)
    out = Image.fromarray(np.clip(arr + 0.5, 0, 255).astype(np.uint8))
    buf = io.BytesIO()
    out.save(buf, "JPEG", quality=int(rng.integers(*JPEG_QUALITY)))
    return buf.getvalue()


_PICS: OrderedDict[Path, Image.Image] = OrderedDict()


def _load(pic: sources.Pic) -> Image.Image:
    """Decoded pool picture, from a small LRU cache (pools hold hundreds of pictures)."""
    im = _PICS.get(pic.path)
    if im is None:
        im = pic.load()
        _PICS[pic.path] = im
        if len(_PICS) > 160:
            _PICS.popitem(last=False)
    else:
        _PICS.move_to_end(pic.path)
    return im


def crop_box(rng: np.random.Generator, size: tuple[int, int], scale=(0.3, 0.8)) -> tuple[int, int, int]:
    """A random square (x, y, side) covering ``scale`` of the shorter side (at least MIN_CROP px)."""
    w, h = size
    short = min(w, h)
    s = int(short * rng.uniform(*scale))
    s = int(min(short, max(s, MIN_CROP)))
    return int(rng.integers(0, w - s + 1)), int(rng.integers(0, h - s + 1)), s


def cropper(pic: sources.Pic, scale=(0.3, 0.8)) -> Maker:
    def make(rng: np.random.Generator) -> Image.Image:
        im = _load(pic)
        x, y, s = crop_box(rng, im.size, scale)
        return im.crop((x, y, x + s, y + s))

    return make


def burst(pic: sources.Pic, box_rng: np.random.Generator, scale=(0.3, 0.8)) -> Callable[[], Maker]:
    """Frames of one burst: the same crop moved by up to 3 % and slightly zoomed, per frame."""
    im = _load(pic)
    x, y, s = crop_box(box_rng, im.size, scale)

    def frame() -> Maker:
        def make(rng: np.random.Generator) -> Image.Image:
            src = _load(pic)
            w, h = src.size
            s2 = int(min(min(w, h), s * rng.uniform(0.97, 1.03)))
            dx, dy = (rng.uniform(-0.03, 0.03, size=2) * s).astype(int)
            x2 = int(np.clip(x + dx, 0, w - s2))
            y2 = int(np.clip(y + dy, 0, h - s2))
            return src.crop((x2, y2, x2 + s2, y2 + s2))

        return make

    return frame


def with_fault(make: Maker, kinds: tuple[str, ...]) -> Maker:
    """A failed shot of an ordinary crop: one of ``kinds`` (blur, cast, over, under, motion)."""

    def faulty(rng: np.random.Generator) -> Image.Image:
        im = make(rng).resize((SIDE, SIDE), Image.Resampling.BICUBIC)
        kind = kinds[int(rng.integers(len(kinds)))]
        arr = np.asarray(im, dtype=np.float32)
        if kind == "blur":  # missed focus
            return im.filter(ImageFilter.GaussianBlur(rng.uniform(3.0, 6.0)))
        if kind == "motion":  # camera shake: a horizontal-ish line kernel
            n = int(rng.integers(11, 21))
            k = np.zeros((n, n), np.float32)
            k[n // 2, :] = 1
            ang = rng.uniform(-30, 30)
            kim = Image.fromarray((k * 255).astype(np.uint8)).rotate(ang, resample=Image.Resampling.BILINEAR)
            ker = np.asarray(kim, np.float32)
            ker /= ker.sum()
            from scipy.signal import fftconvolve

            out = np.stack([fftconvolve(arr[..., c], ker, mode="same") for c in range(3)], -1)
            return Image.fromarray(np.clip(out, 0, 255).astype(np.uint8))
        if kind == "cast":  # wrong white balance
            casts = [(1.35, 0.85, 0.7), (0.7, 0.85, 1.4), (1.25, 1.2, 0.6), (0.75, 1.3, 0.8)]
            arr = arr * np.array(casts[int(rng.integers(len(casts)))], np.float32)
        elif kind == "over":  # blown highlights
            arr = arr * rng.uniform(1.8, 2.4) + 30
        elif kind == "under":
            arr = arr * rng.uniform(0.18, 0.3)
        return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))

    return faulty


def with_defect(make: Maker) -> Maker:
    """A small planted defect (scratch, stain, hole or crack, 1-5 % of the area) on a texture crop."""

    def defective(rng: np.random.Generator) -> Image.Image:
        im = make(rng).resize((SIDE, SIDE), Image.Resampling.BICUBIC)
        draw = ImageDraw.Draw(im)
        w = SIDE
        kind = int(rng.integers(4))
        cx, cy = rng.uniform(0.25, 0.75, size=2) * w  # inside the model's centre crop
        r = rng.uniform(0.07, 0.12) * w
        if kind == 0:  # scratch
            ang = rng.uniform(0, np.pi)
            dx, dy = np.cos(ang) * 2 * r, np.sin(ang) * 2 * r
            col = (230, 230, 225) if rng.random() < 0.5 else (25, 25, 25)
            draw.line([(cx - dx, cy - dy), (cx + dx, cy + dy)], fill=col, width=int(rng.integers(3, 6)))
        elif kind == 1:  # stain of another colour
            col = tuple(int(v) for v in rng.integers(0, 255, size=3))
            draw.ellipse([cx - r, cy - 0.6 * r, cx + r, cy + 0.6 * r], fill=col)
        elif kind == 2:  # hole
            draw.ellipse([cx - 0.6 * r, cy - 0.6 * r, cx + 0.6 * r, cy + 0.6 * r], fill=(12, 12, 12))
        else:  # crack
            pts = [(cx, cy - r)]
            for _ in range(6):
                pts.append((pts[-1][0] + rng.uniform(-0.5, 0.5) * r, pts[-1][1] + rng.uniform(0.2, 0.5) * r))
            draw.line(pts, fill=(15, 15, 15), width=3)
        return im

    return defective


def digit_maker(img8: np.ndarray) -> Maker:
    def make(rng: np.random.Generator) -> Image.Image:
        return Image.fromarray(img8).convert("RGB")  # 8x8; finish() upscales every digit alike

    return make


def _font(size: int, mono: bool = False, serif: bool = False, bold: bool = False) -> ImageFont.ImageFont:
    name = "SansMono" if mono else ("Serif" if serif else "Sans")
    return ImageFont.truetype(str(sources.font_path(name + ("-Bold" if bold else ""))), size)


def document_maker(title: str, text: str) -> Maker:
    """A page of real prose (title, justified paragraphs), then a square crop of it."""

    def make(rng: np.random.Generator) -> Image.Image:
        W, H = 850, 1100
        paper = tuple(int(v) for v in rng.integers(236, 256, size=3))
        page = Image.new("RGB", (W, H), paper)
        d = ImageDraw.Draw(page)
        serif = bool(rng.random() < 0.6)
        size = int(rng.integers(15, 22))
        body = _font(size, serif=serif)
        margin = int(rng.integers(60, 110))
        y = margin
        heading = title.split(".")[0].replace("_", " ").title()
        d.text((margin, y), heading, font=_font(int(size * 1.6), serif=serif, bold=True), fill=(20, 20, 20))
        y += int(size * 3)
        words = text.split()
        start = int(rng.integers(0, max(1, len(words) - 400)))
        line, lh = "", int(size * 1.45)
        for wd in words[start:]:
            trial = (line + " " + wd).strip()
            if d.textlength(trial, font=body) > W - 2 * margin:
                d.text((margin, y), line, font=body, fill=(30, 30, 30))
                y += lh
                line = wd
                if y > H - margin:
                    break
            else:
                line = trial
        if y <= H - margin:
            d.text((margin, y), line, font=body, fill=(30, 30, 30))
        x, yy, s = crop_box(rng, page.size, (0.6, 1.0))
        return page.crop((x, yy, x + s, yy + s))

    return make


_KEYWORDS = set(
    "def class return import from if else elif for while in not and or is None True False "
    "with as try except raise yield lambda".split()
)


def screenshot_maker(title: str, lines: list[str]) -> Maker:
    """A code editor or terminal window showing real source lines, then a square crop of it."""

    def make(rng: np.random.Generator) -> Image.Image:
        W, H = 1280, 960
        dark = bool(rng.random() < 0.6)
        bg = (30, 32, 38) if dark else (250, 250, 248)
        fg = (215, 215, 210) if dark else (40, 40, 40)
        kw = (198, 120, 221) if dark else (0, 0, 200)
        st = (152, 195, 121) if dark else (163, 21, 21)
        shot = Image.new("RGB", (W, H), bg)
        d = ImageDraw.Draw(shot)
        bar = (55, 58, 66) if dark else (222, 222, 222)
        d.rectangle([0, 0, W, 34], fill=bar)
        for j, col in enumerate(((237, 106, 94), (245, 191, 79), (98, 197, 84))):
            d.ellipse([12 + 22 * j, 10, 26 + 22 * j, 24], fill=col)
        d.text((W // 2 - 60, 9), title.split("/")[-1], font=_font(15), fill=fg)
        size = int(rng.integers(14, 19))
        f = _font(size, mono=True)
        start = int(rng.integers(0, max(1, len(lines) - 80)))
        y, lh = 46, int(size * 1.35)
        gutter = 60 if rng.random() < 0.7 else 12
        for n, ln in enumerate(lines[start:], start + 1):
            if y > H - lh:
                break
            if gutter > 12:
                d.text((8, y), f"{n:4d}", font=f, fill=(120, 120, 120))
            x = gutter
            for tok in ln.replace("\t", "    ").split(" "):
                col = kw if tok in _KEYWORDS else (st if tok[:1] in "'\"" else fg)
                d.text((x, y), tok, font=f, fill=col)
                x += d.textlength(tok + " ", font=f)
                if x > W:
                    break
            y += lh
        x0, y0, s = crop_box(rng, shot.size, (0.6, 1.0))
        return shot.crop((x0, y0, x0 + s, y0 + s))

    return make


# --------------------------------------------------------------------------- set plans


def _rng(name: str, seed: int) -> np.random.Generator:
    return np.random.default_rng([zlib.crc32(name.encode()), seed, 0])


def _scenes(rng: np.random.Generator, n: int, scale=(0.3, 0.8)) -> list[Item]:
    """n ordinary pictures: crops of scene photos, each photo used about equally often."""
    pics = sources.pool("scenes")
    idx = rng.permutation(np.resize(rng.permutation(len(pics)), n))
    return [Item(False, pics[i].name, cropper(pics[i], scale)) for i in idx]


def _bursty_scenes(rng: np.random.Generator, n: int, burst_share: float, max_frames: int) -> list[Item]:
    """n ordinary pictures, about ``burst_share`` of them in bursts of 2..max_frames frames."""
    pics = sources.pool("scenes")
    items: list[Item] = []
    group = 0
    while len(items) < n:
        pic = pics[int(rng.integers(len(pics)))]
        if rng.random() < burst_share:
            frames = burst(pic, rng)
            m = int(min(rng.integers(2, max_frames + 1), n - len(items)))
            items += [Item(False, pic.name, frames(), group if m > 1 else -1) for _ in range(m)]
            group += 1
        else:
            items.append(Item(False, pic.name, cropper(pic)))
    return items


def _novel(rng: np.random.Generator, pool: str, k: int, scale=(0.6, 1.0)) -> list[Item]:
    """k novelties: crops of k distinct pictures of ``pool``."""
    pics = sources.pool(pool)
    pick = rng.choice(len(pics), size=k, replace=False)
    return [Item(True, pics[i].name, cropper(pics[i], scale)) for i in pick]


def _shuffle(name: str, seed: int, rng: np.random.Generator, items: list[Item]) -> LabelledSet:
    order = rng.permutation(len(items))
    return LabelledSet(name, seed, [items[i] for i in order])


def _domain(name: str, pool: str, seed: int, n: int = 420, k: int = 16) -> LabelledSet:
    rng = _rng(name, seed)
    return _shuffle(name, seed, rng, _scenes(rng, n) + _novel(rng, pool, k))


def astro_set(seed: int) -> LabelledSet:
    """Everyday scenes + astronomical photos (another domain)."""
    return _domain("astro", "nebulae", seed)


def art_set(seed: int) -> LabelledSet:
    """Everyday scenes + constellation drawings (another domain)."""
    return _domain("art", "art_test", seed)


def _digits(name: str, classes: tuple[int, ...], seed: int, n: int = 170, per_class: int = 2) -> LabelledSet:
    """Handwritten digits of one class (drawn from ``classes``) + ``per_class`` of every other digit."""
    rng = _rng(name, seed)
    img, lab = sources.digits()
    c = int(rng.choice(classes))
    normal = rng.choice(np.flatnonzero(lab == c), size=n, replace=False)
    items = [Item(False, f"digit{c}", digit_maker(img[i])) for i in normal]
    for o in range(10):
        if o != c:
            for i in rng.choice(np.flatnonzero(lab == o), size=per_class, replace=False):
                items.append(Item(True, f"digit{o}", digit_maker(img[i])))
    return _shuffle(name, seed, rng, items)


def digits_dev_set(seed: int) -> LabelledSet:
    return _digits("digits-dev", (0, 1, 2, 3, 4), seed)


def digits_test_set(seed: int) -> LabelledSet:
    return _digits("digits-test", (5, 6, 7, 8, 9), seed)


def _defects(name: str, pool: str, seed: int, n: int = 420, k: int = 16) -> LabelledSet:
    """Crops of a few textures; k crops carry a small planted defect."""
    rng = _rng(name, seed)
    pics = sources.pool(pool)
    items = []
    for j in range(n + k):
        p = pics[int(rng.integers(len(pics)))]
        make = cropper(p, (0.25, 0.5))
        items.append(Item(j >= n, p.name, with_defect(make) if j >= n else make))
    return _shuffle(name, seed, rng, items)


def defects_dev_set(seed: int) -> LabelledSet:
    return _defects("defects-dev", "textures_dev", seed)


def defects_test_set(seed: int) -> LabelledSet:
    return _defects("defects-test", "textures_test", seed)


def _rare(
    name: str, pool: str, seed: int, n_scenes: int = 340, n_common: int = 20, shots: int = 4, k: int = 10
):
    """A personal library: scenes, plus ``n_common`` subjects shot ``shots`` times each (pets, the kids);
    the novelties are k other subjects that appear once."""
    rng = _rng(name, seed)
    pics = sources.pool(pool)
    pick = rng.choice(len(pics), size=n_common + k, replace=False)
    items = _scenes(rng, n_scenes)
    for i in pick[:n_common]:
        items += [Item(False, pics[i].name, cropper(pics[i], (0.5, 1.0))) for _ in range(shots)]
    items += [Item(True, pics[i].name, cropper(pics[i], (0.5, 1.0))) for i in pick[n_common:]]
    return _shuffle(name, seed, rng, items)


def rare_dev_set(seed: int) -> LabelledSet:
    return _rare("rare-dev", "art_dev", seed)


def rare_test_set(seed: int) -> LabelledSet:
    return _rare("rare-test", "subjects", seed, n_common=20, k=10)


def _bursts(name: str, pool: str, seed: int, n: int = 420, k: int = 12) -> LabelledSet:
    """Scenes, 70 % of them shot as bursts of 2-10 near-identical frames, + k single odd shots."""
    rng = _rng(name, seed)
    return _shuffle(name, seed, rng, _bursty_scenes(rng, n, 0.7, 10) + _novel(rng, pool, k))


def bursts_dev_set(seed: int) -> LabelledSet:
    return _bursts("bursts-dev", "art_dev", seed)


def bursts_test_set(seed: int) -> LabelledSet:
    return _bursts("bursts-test", "subjects", seed)


def _faults(name: str, kinds: tuple[str, ...], seed: int, n: int = 420, k: int = 16) -> LabelledSet:
    """Scenes; k of them are failed shots of the same kind of scene."""
    rng = _rng(name, seed)
    items = _scenes(rng, n + k)
    for it in items[n:]:
        it.label = True
        it.make = with_fault(it.make, kinds)
    return _shuffle(name, seed, rng, items)


def faults_dev_set(seed: int) -> LabelledSet:
    return _faults("faults-dev", ("blur", "cast"), seed)


def faults_test_set(seed: int) -> LabelledSet:
    return _faults("faults-test", ("over", "under", "motion"), seed)


def _text_items(rng: np.random.Generator, kind: str, k: int) -> list[Item]:
    if kind == "code":
        srcs = sources.code()
        pick = rng.choice(len(srcs), size=k, replace=False)
        return [Item(True, f"code/{srcs[i][0]}", screenshot_maker(*srcs[i])) for i in pick]
    srcs = sources.prose()
    pick = rng.choice(len(srcs), size=k, replace=False)
    return [Item(True, f"doc/{srcs[i][0]}", document_maker(srcs[i][0], srcs[i][1])) for i in pick]


def screens_dev_set(seed: int, n: int = 420, k: int = 16) -> LabelledSet:
    """Scenes + screenshots of code editors and terminals."""
    rng = _rng("screens-dev", seed)
    return _shuffle("screens-dev", seed, rng, _scenes(rng, n) + _text_items(rng, "code", k))


def docs_test_set(seed: int, n: int = 420, k: int = 16) -> LabelledSet:
    """Scenes + pages of documents."""
    rng = _rng("docs-test", seed)
    return _shuffle("docs-test", seed, rng, _scenes(rng, n) + _text_items(rng, "doc", k))


def _library(name: str, seed: int, n: int, novel: list[tuple[str, int]]) -> LabelledSet:
    """A photo library: crops of scenes, 40 % in bursts of 2-8 frames; novelties of several kinds."""
    rng = _rng(name, seed)
    items = _bursty_scenes(rng, n, 0.4, 8)
    for kind, k in novel:
        if kind in ("code", "doc"):
            items += _text_items(rng, kind, k)
        elif kind.startswith("fault:"):
            extra = _scenes(rng, k)
            for it in extra:
                it.label = True
                it.make = with_fault(it.make, tuple(kind[6:].split("+")))
            items += extra
        else:
            items += _novel(rng, kind, k)
    return _shuffle(name, seed, rng, items)


def library_dev_set(seed: int) -> LabelledSet:
    return _library("library-dev", seed, 12_000, [("art_dev", 15), ("code", 15), ("fault:blur+cast", 10)])


def library_docs_set(seed: int) -> LabelledSet:
    return _library("library-docs", seed, 30_000, [("doc", 30), ("art_test", 30), ("subjects", 30)])


def library_faults_set(seed: int) -> LabelledSet:
    return _library("library-faults", seed, 30_000, [("fault:over+under+motion", 40), ("subjects", 20)])


# --------------------------------------------------------------------------- moments: odd batches
# Odd photos come in batches (a night of astrophotography, a day of scanned pages) as well as alone.
# A moments set plants odd batches of 5, 15, 40 and 80 photos and 10 single odd photos in an ordinary
# library that has its own groups: bursts, many crops of one scene (a garden shot all afternoon) and
# crops of one texture (wallpaper). No batch size is shared between a batch and an ordinary group, and
# the split takes its batches from other sources: dev nebulae, code screenshots, digits 0-4 and one
# drawing of the dev cultures; test document pages, drawings of the test cultures, digits 5-9 and one
# subject photo.
BATCH_SIZES = (80, 40, 15, 5)
SINGLES = 10


def _batch(rng: np.random.Generator, source: str, m: int, name: str) -> list[Item]:
    """m odd photos of one event, all in novelty group ``name``: distinct pictures of a pool, pages or
    screenshots (``doc`` / ``code``), one digit class (``digits:<classes>``), or crops of one picture
    (``one:<pool>``, returned with that picture's index so the singles can avoid it)."""
    if source in ("code", "doc"):
        items = _text_items(rng, source, m)
    elif source.startswith("digits:"):
        img, lab = sources.digits()
        c = int(rng.choice([int(ch) for ch in source[7:]]))
        pick = rng.choice(np.flatnonzero(lab == c), size=m, replace=False)
        items = [Item(True, f"digit{c}", digit_maker(img[i])) for i in pick]
    elif source.startswith("one:"):
        pics = sources.pool(source[4:])
        pic = pics[int(rng.integers(len(pics)))]
        items = [Item(True, pic.name, cropper(pic, (0.5, 1.0))) for _ in range(m)]
    else:
        items = _novel(rng, source, m)
    for it in items:
        it.moment = name
    return items


def _ordinary_groups(rng: np.random.Generator, textures: str, copies: int) -> list[Item]:
    """``copies`` times: 25 crops of one texture, 30 crops of one scene, a burst of 20 frames."""
    items: list[Item] = []
    tex, scenes = sources.pool(textures), sources.pool("scenes")
    for _ in range(copies):
        t = tex[int(rng.integers(len(tex)))]
        items += [Item(False, t.name, cropper(t, (0.25, 0.5))) for _ in range(25)]
        s = scenes[int(rng.integers(len(scenes)))]
        items += [Item(False, s.name, cropper(s, (0.4, 0.9))) for _ in range(30)]
        s = scenes[int(rng.integers(len(scenes)))]
        frames = burst(s, rng)
        items += [Item(False, s.name, frames(), 10_000 + len(items)) for _ in range(20)]
    return items


def _moments(name: str, seed: int, n: int, batches: tuple[str, ...], singles: str, textures: str):
    rng = _rng(name, seed)
    copies = max(1, n // 2500)
    odd = [
        it for src, m in zip(batches, BATCH_SIZES, strict=True) for it in _batch(rng, src, m, f"batch-{m}")
    ]
    items = _bursty_scenes(rng, n - 75 * copies, 0.4, 8) + _ordinary_groups(rng, textures, copies)
    taken = {it.kind for it in odd}
    pics = [p for p in sources.pool(singles) if p.name not in taken]
    for i in rng.choice(len(pics), size=SINGLES, replace=False):
        items.append(Item(True, pics[i].name, cropper(pics[i], (0.6, 1.0))))
    return _shuffle(name, seed, rng, items + odd)


MOMENTS_DEV = ("nebulae", "code", "digits:01234", "one:art_dev")
MOMENTS_TEST = ("doc", "art_test", "digits:56789", "one:subjects")


def moments_dev_set(seed: int) -> LabelledSet:
    return _moments("moments-dev", seed, 900, MOMENTS_DEV, "art_dev", "textures_dev")


def moments_test_set(seed: int) -> LabelledSet:
    return _moments("moments-test", seed, 900, MOMENTS_TEST, "subjects", "textures_test")


def library_moments_dev_set(seed: int) -> LabelledSet:
    return _moments("library-moments-dev", seed, 10_000, MOMENTS_DEV, "art_dev", "textures_dev")


def library_moments_test_set(seed: int) -> LabelledSet:
    return _moments("library-moments-test", seed, 10_000, MOMENTS_TEST, "subjects", "textures_test")


SETS: dict[str, Callable[[int], LabelledSet]] = {
    "astro": astro_set,
    "digits-dev": digits_dev_set,
    "defects-dev": defects_dev_set,
    "rare-dev": rare_dev_set,
    "bursts-dev": bursts_dev_set,
    "faults-dev": faults_dev_set,
    "screens-dev": screens_dev_set,
    "library-dev": library_dev_set,
    "art": art_set,
    "digits-test": digits_test_set,
    "defects-test": defects_test_set,
    "rare-test": rare_test_set,
    "bursts-test": bursts_test_set,
    "faults-test": faults_test_set,
    "docs-test": docs_test_set,
    "library-docs": library_docs_set,
    "library-faults": library_faults_set,
    "moments-dev": moments_dev_set,
    "moments-test": moments_test_set,
    "library-moments-dev": library_moments_dev_set,
    "library-moments-test": library_moments_test_set,
}

# Decided before any comparison and not changed after: choose on "dev", report "test".
SPLITS: dict[str, tuple[str, ...]] = {
    "dev": ("astro", "digits-dev", "defects-dev", "rare-dev", "bursts-dev", "faults-dev", "screens-dev"),
    "dev-library": ("library-dev",),
    "test": ("art", "digits-test", "defects-test", "rare-test", "bursts-test", "faults-test", "docs-test"),
    "test-library": ("library-docs", "library-faults"),
    # odd batches of many sizes (added with the moments benchmark, scripts/bench_moments.py)
    "dev-moments": ("moments-dev",),
    "dev-moments-library": ("library-moments-dev",),
    "test-moments": ("moments-test",),
    "test-moments-library": ("library-moments-test",),
}
# what each kind of novelty is called in the tables: dev set -> test set
PAIRS = {
    "another domain": ("astro", "art"),
    "another class": ("digits-dev", "digits-test"),
    "subtle defects": ("defects-dev", "defects-test"),
    "rare subject": ("rare-dev", "rare-test"),
    "bursts": ("bursts-dev", "bursts-test"),
    "quality faults": ("faults-dev", "faults-test"),
    "screenshots/documents": ("screens-dev", "docs-test"),
    "library scale": ("library-dev", "library-docs"),
}


def build(name: str, seed: int) -> LabelledSet:
    """The planned set ``name`` for ``seed``; ValueError for an unknown name."""
    if name not in SETS:
        raise ValueError(f"unknown set {name!r}; choose from {', '.join(SETS)}")
    return SETS[name](seed)
