"""Valid but hostile photos: extreme shapes, thousands of frames or pages, deep or unusual colour,
huge compressed metadata, every EXIF orientation, a name that is not UTF-8.

Each builder writes one file and returns what a decode must give: the colour of the first frame or of
the four quadrants as displayed, so a test can check pixels and not just that something came back.
Used by ``tests/media/test_hostile.py`` and timed by ``scripts/bench_reliability.py``.
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageCms

RED, GREEN, BLUE, WHITE = (220, 20, 20), (20, 200, 40), (30, 40, 220), (250, 250, 250)


@dataclass(frozen=True)
class Hostile:
    path: Path
    colour: tuple[int, int, int] | None = None  # the whole (first) picture, roughly
    quadrants: tuple | None = None  # upright (top-left, top-right, bottom-left, bottom-right)
    displayed: tuple[int, int] | None = None  # (width, height) after orientation
    notes: dict = field(default_factory=dict)


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return (
        struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    )


def _png_with_chunk(png: bytes, kind: bytes, body: bytes) -> bytes:
    """``png`` with one more chunk right after IHDR (8-byte signature + 25-byte IHDR chunk)."""
    return png[:33] + _png_chunk(kind, body) + png[33:]


def _solid(w: int, h: int, colour) -> Image.Image:
    return Image.new("RGB", (w, h), colour)


def thin(folder: Path, w: int, h: int) -> Hostile:
    """A 1-pixel strip: its model input is a crop of a resize to 256 x 25.6 million."""
    a = np.zeros((h, w, 3), np.uint8)
    a[:] = RED
    path = folder / f"strip-{w}x{h}.png"
    Image.fromarray(a).save(path)
    return Hostile(path, colour=RED)


def many_frames_gif(folder: Path, frames: int = 10_000) -> Hostile:
    """An animated GIF: a red first frame, then ``frames - 1`` blue ones, assembled frame by frame."""

    def single(index: int) -> bytes:
        img = Image.new("P", (16, 16), index)
        img.putpalette(bytes(RED + BLUE))
        buf = io.BytesIO()
        img.save(buf, format="GIF", optimize=False)  # keeps the two-colour palette and the index
        return buf.getvalue()

    red, blue = single(0), single(1)
    table = 3 * 2 ** ((red[10] & 0x07) + 1)  # the global colour table follows the 13-byte header
    header = b"GIF89a" + red[6 : 13 + table]
    loop = b"\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    control = b"\x21\xf9\x04\x00\x02\x00\x00\x00"  # no disposal, 20 ms
    red_frame, blue_frame = red[13 + table : -1], blue[13 + table : -1]  # descriptor + data, no trailer
    body = [header, loop, control, red_frame, (control + blue_frame) * (frames - 1), b"\x3b"]
    path = folder / f"frames-{frames}.gif"
    path.write_bytes(b"".join(body))
    return Hostile(path, colour=RED, notes={"frames": frames})


def many_pages_tiff(folder: Path, pages: int = 1000) -> Hostile:
    """A TIFF of ``pages`` pages: the first red, the rest blue."""
    path = folder / f"pages-{pages}.tif"
    first = _solid(32, 24, RED)
    rest = [_solid(32, 24, BLUE)] * (pages - 1)
    first.save(path, save_all=True, append_images=rest, compression="tiff_deflate")
    return Hostile(path, colour=RED, notes={"pages": pages})


def _png16(w: int, h: int, samples: np.ndarray, colour_type: int) -> bytes:
    """A 16-bit PNG written by hand (Pillow cannot write 16-bit RGB): samples (h, w, c) uint16."""
    rows = samples.astype(">u2").reshape(h, -1).tobytes()
    stride = samples.shape[1] * samples.shape[2] * 2
    raw = b"".join(b"\x00" + rows[y * stride : (y + 1) * stride] for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 16, colour_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(raw))
        + _png_chunk(b"IEND", b"")
    )


def sixteen_bit(folder: Path) -> list[Hostile]:
    out = []
    rgb16 = np.empty((48, 64, 3), np.uint16)
    rgb16[:] = [c * 257 for c in RED]
    path = folder / "rgb16.png"
    path.write_bytes(_png16(64, 48, rgb16, 2))
    out.append(Hostile(path, colour=RED))
    rgba16 = np.empty((48, 64, 4), np.uint16)
    rgba16[:] = [c * 257 for c in GREEN] + [65535]
    path = folder / "rgba16.png"
    path.write_bytes(_png16(64, 48, rgba16, 6))
    out.append(Hostile(path, colour=GREEN))
    grey = np.full((48, 64), 200 * 257, np.uint16)
    for suffix in ("png", "tif"):
        path = folder / f"grey16.{suffix}"
        Image.fromarray(grey).save(path)  # mode I;16
        out.append(Hostile(path, colour=(200, 200, 200)))
    return out


def cmyk_and_lab(folder: Path) -> list[Hostile]:
    out = []
    rgb = _solid(64, 48, RED)
    for suffix in ("jpg", "tif"):
        path = folder / f"cmyk.{suffix}"
        rgb.convert("CMYK").save(path)
        out.append(Hostile(path, colour=RED))
    to_lab = ImageCms.buildTransform(
        ImageCms.createProfile("sRGB"), ImageCms.createProfile("LAB"), "RGB", "LAB"
    )
    path = folder / "lab.tif"
    ImageCms.applyTransform(rgb, to_lab).save(path)
    out.append(Hostile(path, colour=RED))
    return out


def huge_metadata(folder: Path, megabytes: int = 100) -> list[Hostile]:
    """PNGs whose text or ICC chunk inflates to ``megabytes`` MB (about 100 KB on disk)."""
    buf = io.BytesIO()
    _solid(64, 48, GREEN).save(buf, format="PNG")
    png = buf.getvalue()
    bomb = zlib.compress(b"\x00" * (megabytes << 20), 9)
    chunks = {
        "ztxt": (b"zTXt", b"Comment\x00\x00" + bomb),
        "itxt": (b"iTXt", b"Comment\x00\x01\x00\x00\x00" + bomb),
        "iccp": (b"iCCP", b"icc\x00\x00" + bomb),
    }
    out = []
    for name, (kind, body) in chunks.items():
        path = folder / f"big-{name}.png"
        path.write_bytes(_png_with_chunk(png, kind, body))
        out.append(Hostile(path, colour=GREEN, notes={"inflates_to_mb": megabytes}))
    return out


def _upright(w: int = 80, h: int = 60) -> np.ndarray:
    """Four coloured quadrants: red top-left, green top-right, blue bottom-left, white bottom-right."""
    a = np.empty((h, w, 3), np.uint8)
    a[: h // 2, : w // 2] = RED
    a[: h // 2, w // 2 :] = GREEN
    a[h // 2 :, : w // 2] = BLUE
    a[h // 2 :, w // 2 :] = WHITE
    return a


# How the stored pixels relate to the upright picture for each EXIF orientation, from the EXIF
# specification's wording ("row 0 is the visual top/bottom/left/right, column 0 is ..."), written
# out with numpy so that it does not borrow Pillow's table.
_STORED: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    1: lambda u: u,
    2: lambda u: u[:, ::-1],  # row 0 top, column 0 right
    3: lambda u: u[::-1, ::-1],  # row 0 bottom, column 0 right
    4: lambda u: u[::-1, :],  # row 0 bottom, column 0 left
    5: lambda u: u.transpose(1, 0, 2),  # row 0 left, column 0 top
    6: lambda u: np.rot90(u, 1),  # row 0 right, column 0 top
    7: lambda u: np.rot90(u, 1)[:, ::-1],  # row 0 right, column 0 bottom
    8: lambda u: np.rot90(u, -1),  # row 0 left, column 0 bottom
}


def oriented(folder: Path, orientation: int, suffix: str = "jpg") -> Hostile:
    """A photo stored rotated or mirrored, with the EXIF orientation that puts it upright."""
    upright = _upright()
    stored = Image.fromarray(np.ascontiguousarray(_STORED[orientation](upright)))
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = folder / f"orientation-{orientation}.{suffix}"
    options = {"quality": 95} if suffix in ("jpg", "webp") else {}
    stored.save(path, exif=exif.tobytes(), **options)
    h, w = upright.shape[:2]
    return Hostile(path, quadrants=(RED, GREEN, BLUE, WHITE), displayed=(w, h))


def non_utf8_name(folder: Path) -> Hostile:
    """A photo whose file name is Latin-1 bytes ("été.jpg"), not valid UTF-8."""
    raw = os.fsencode(str(folder)) + b"/\xe9t\xe9.jpg"
    path = Path(os.fsdecode(raw))
    _solid(64, 48, BLUE).save(path, format="JPEG", quality=95)
    return Hostile(path, colour=BLUE)


def build_all(folder: Path) -> list[Hostile]:
    """Every hostile case in ``folder`` (about 2 MB on disk)."""
    folder.mkdir(parents=True, exist_ok=True)
    cases = [
        thin(folder, 1, 100_000),
        thin(folder, 100_000, 1),
        many_frames_gif(folder),
        many_pages_tiff(folder),
    ]
    cases += sixteen_bit(folder) + cmyk_and_lab(folder) + huge_metadata(folder)
    cases += [oriented(folder, o) for o in range(1, 9)]
    cases += [oriented(folder, o, suffix) for o in (3, 6, 8) for suffix in ("png", "webp", "tif")]
    cases.append(non_utf8_name(folder))
    return cases


# -- Inputs that cost work out of proportion to their size (not in build_all: they are refused) ---------


def many_scans_jpeg(folder: Path, scans: int = 2000) -> Path:
    """A progressive JPEG whose last scan is repeated ``scans`` times: each scan is decoded over the whole
    image, so the work grows with the number of scans, not with the bytes (a few kilobytes here)."""
    buf = io.BytesIO()
    _solid(256, 256, RED).save(buf, format="JPEG", progressive=True, quality=90)
    data = buf.getvalue()
    last = data.rindex(b"\xff\xda")
    body, scan = data[:last], data[last:-2]  # the final scan, without the end-of-image marker
    path = folder / f"scans-{scans}.jpg"
    path.write_bytes(body + scan * (scans - data.count(b"\xff\xda") + 1) + b"\xff\xd9")
    return path


def flat_png(folder: Path, side: int) -> Path:
    """A flat ``side`` x ``side`` PNG: a few kilobytes per million pixels, under the pixels-per-byte
    check, that decodes to ``3 * side**2`` bytes."""
    path = folder / f"flat-{side}.png"
    _solid(side, side, GREEN).save(path, optimize=True)
    return path


def forged_names(folder: Path) -> list[Path]:
    """Unreadable "photos" whose names forge a line of their own, set the terminal's title, or end a
    line for ``str.splitlines`` (U+2028, U+2029, U+0085)."""
    names = ["x\nwarning: forged.jpg", "t\x1b]0;owned\x07.jpg", "sep\u2028ara\u2029tor\x85.jpg", "cr\rx.jpg"]
    paths = [folder / name for name in names]
    for path in paths:
        path.write_bytes(b"not an image")
    return paths
