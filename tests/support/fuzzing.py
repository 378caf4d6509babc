"""Seeded mutations of valid JPEG, PNG, WebP, GIF, TIFF and HEIC files, and a runner that decodes them.

``seed_files()`` encodes a few small, valid images per format with Pillow (and pillow-heif for HEIC),
with the structures decoders trip on: EXIF, ICC and text chunks, palettes with transparency,
progressive JPEG, 16-bit samples, several frames or pages. ``cases(seed, count)`` derives ``count``
mutated files from them, reproducibly: bit flips (anywhere, or in the header), truncation, overwritten
and deleted runs, splices of two files, and edits that know the format (a PNG chunk with its CRC fixed,
so the decoder reads the bad value instead of stopping at the checksum; JPEG segment lengths and frame
sizes; GIF, TIFF, WebP and HEIC image sizes set to 0, 1 or huge values).

Run as a script, it decodes cases in this process, one after another, and prints one JSON line per
case. A watchdog (``faulthandler``) ends the process if one case runs past ``--watchdog`` seconds, so
a hang or a crash shows as the process dying after the last case it finished:

    python tests/support/fuzzing.py --seed 1 --cases 500 [--formats png,gif] [--save-to DIR]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import struct
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageCms

FORMATS = ("jpeg", "png", "webp", "gif", "tiff", "heic")
SUFFIX = {"jpeg": ".jpg", "png": ".png", "webp": ".webp", "gif": ".gif", "tiff": ".tif", "heic": ".heic"}
# Sizes a header edit writes: degenerate, one past a power of two, the 2^31 overflow edge, the largest,
# and heights that make a small file claim 100-250 million pixels (under Pillow's bomb limit).
EXTREMES = (0, 1, 2, 255, 256, 4097, 46341, 65535, 65536, 2_500_000, 4_194_336, 2**31 - 1, 2**32 - 1)


@dataclass(frozen=True)
class Case:
    id: str  # "<seed>-<index>"
    fmt: str
    seed_name: str
    mutation: str  # human-readable: what was done, where
    data: bytes


# --------------------------------------------------------------------------- valid seed files


def _picture(w: int, h: int, seed: int) -> Image.Image:
    """A small picture with structure (gradient, stripes, noise), so every codec has real work to do."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    a = np.stack(
        [255 * xx / max(w - 1, 1), 255 * yy / max(h - 1, 1), 127 + 127 * np.sin(xx / 3.0 + yy / 5.0)], axis=2
    )
    a += rng.normal(0, 12, a.shape)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def _exif(orientation: int = 6, *, sub_ifd: bool = True) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    exif[0x010F] = "FuzzCam"
    if sub_ifd:  # libtiff cannot write a sub-IFD through Pillow's exif= argument
        exif.get_ifd(0x8769)[0x9003] = "2021:06:01 12:30:05"
    return exif.tobytes()


def _save(img: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def seed_files() -> dict[str, tuple[str, bytes]]:
    """name -> (format, bytes): valid files, a few per format."""
    pic = _picture(48, 40, 0)
    big = _picture(300, 260, 1)
    frames = [_picture(40, 32, s) for s in range(3)]
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    seeds: dict[str, tuple[str, bytes]] = {
        "baseline.jpg": ("jpeg", _save(pic, "JPEG", quality=85, exif=_exif())),
        "progressive.jpg": ("jpeg", _save(big, "JPEG", quality=80, progressive=True, icc_profile=icc)),
        "grey-restart.jpg": ("jpeg", _save(pic.convert("L"), "JPEG", quality=70, restart_marker_rows=1)),
        "cmyk.jpg": ("jpeg", _save(pic.convert("CMYK"), "JPEG", quality=80)),
        "rgb.png": ("png", _save(pic, "PNG", exif=_exif(3), icc_profile=icc)),
        "palette-trns.png": (
            "png",
            _save(pic.convert("P", palette=Image.Palette.ADAPTIVE, colors=16), "PNG", transparency=0),
        ),
        "interlaced-rgba.png": ("png", _save(pic.convert("RGBA"), "PNG", interlace=1)),
        "grey16.png": (
            "png",
            _save(Image.fromarray((np.arange(48 * 40).reshape(40, 48) * 30).astype(np.uint16)), "PNG"),
        ),
        "lossy.webp": ("webp", _save(pic, "WEBP", quality=70, exif=_exif(8))),
        "lossless-alpha.webp": ("webp", _save(pic.convert("RGBA"), "WEBP", lossless=True)),
        "animated.webp": (
            "webp",
            _save(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=40),
        ),
        "still.gif": ("gif", _save(pic.convert("P"), "GIF")),
        "animated.gif": (
            "gif",
            _save(
                frames[0].convert("P"),
                "GIF",
                save_all=True,
                append_images=[f.convert("P") for f in frames[1:]],
                duration=40,
                loop=0,
            ),
        ),
        "lzw.tif": ("tiff", _save(pic, "TIFF", compression="tiff_lzw", exif=_exif(6, sub_ifd=False))),
        "raw-pages.tif": ("tiff", _save(frames[0], "TIFF", save_all=True, append_images=frames[1:])),
        "deflate16.tif": (
            "tiff",
            _save(
                Image.fromarray((np.arange(48 * 40).reshape(40, 48) * 30).astype(np.uint16)),
                "TIFF",
                compression="tiff_adobe_deflate",
            ),
        ),
        "jpeg-in.tif": ("tiff", _save(pic, "TIFF", compression="jpeg")),
    }
    try:
        import pillow_heif

        pillow_heif.register_heif_opener()
        seeds["photo.heic"] = ("heic", _save(pic, "HEIF", quality=60, exif=_exif(6)))
        seeds["alpha.heic"] = ("heic", _save(pic.convert("RGBA"), "HEIF", quality=60))
    except ImportError:  # pragma: no cover - a test dependency; the runner reports the gap
        pass
    return seeds


# --------------------------------------------------------------------------- mutations


def _put(out: bytearray, at: int, value: bytes) -> None:
    """Overwrite ``out[at:at + len(value)]``, or as much of it as lies inside ``out``."""
    if 0 <= at < len(out):
        value = value[: len(out) - at]
        out[at : at + len(value)] = value


def _flip_bits(data: bytearray, rng: random.Random, lo: int, hi: int, count: int) -> str:
    hi = max(lo + 1, min(hi, len(data)))
    spots = sorted(rng.randrange(lo, hi) for _ in range(count))
    for pos in spots:
        data[pos] ^= 1 << rng.randrange(8)
    return f"flip {count} bits in [{lo}, {hi})"


def _png_chunks(data: bytes) -> list[tuple[int, int, bytes]]:
    """(offset of the length field, data length, type) of each chunk, as far as they parse."""
    out, pos = [], 8
    while pos + 8 <= len(data):
        length = struct.unpack(">I", data[pos : pos + 4])[0]
        out.append((pos, length, data[pos + 4 : pos + 8]))
        pos += 12 + length
    return out


def _png_edit(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Change one chunk's contents or length and recompute its CRC."""
    chunks = _png_chunks(data)
    if not chunks:
        return data, "png: no chunks"
    pos, length, kind = rng.choice(chunks)
    body = bytearray(data[pos + 8 : pos + 8 + length])
    what = rng.choice(
        ["size", "bytes", "grow", "shrink", "type"]
        if kind == b"IHDR"
        else ["bytes", "grow", "shrink", "type", "duplicate"]
    )
    if what == "size":  # IHDR: width or height
        field = rng.choice([0, 4])
        body[field : field + 4] = struct.pack(">I", rng.choice(EXTREMES))
    elif what == "bytes" and body:
        for _ in range(rng.randint(1, 4)):
            body[rng.randrange(len(body))] = rng.randrange(256)
    elif what == "grow":
        body += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif what == "shrink" and body:
        del body[rng.randrange(len(body)) :]
    elif what == "type":
        kind = rng.choice([b"IDAT", b"IEND", b"PLTE", b"tRNS", b"iCCP", b"zTXt", b"acTL", b"fcTL", b"eXIf"])
    chunk = struct.pack(">I", len(body)) + kind + bytes(body)
    chunk += struct.pack(">I", zlib.crc32(kind + bytes(body)) & 0xFFFFFFFF)
    if what == "duplicate":
        return data[: pos + 12 + length] + chunk + data[pos + 12 + length :], f"png: duplicate {kind!r}"
    return data[:pos] + chunk + data[pos + 12 + length :], f"png: {what} in {kind!r} (CRC fixed)"


def _jpeg_edit(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Edit a marker segment: its length, a frame size (SOFn), a table byte, or drop the segment."""
    segments, pos = [], 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        length = struct.unpack(">H", data[pos + 2 : pos + 4])[0]
        segments.append((pos, marker, length))
        if marker == 0xDA:  # start of scan: entropy-coded data follows
            break
        pos += 2 + length
    if not segments:
        return data, "jpeg: no segments"
    pos, marker, length = rng.choice(segments)
    out = bytearray(data)
    sof = marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC9, 0xCA)
    what = rng.choice(["length", "byte", "drop"] + (["size", "size", "components"] if sof else []))
    if what == "length":
        _put(
            out, pos + 2, struct.pack(">H", rng.choice([0, 1, 2, 3, length + 1, length - 1, 65535]) & 0xFFFF)
        )
    elif what == "byte" and length > 2:
        _put(out, pos + 4 + rng.randrange(length - 2), bytes([rng.randrange(256)]))
    elif what == "drop":
        del out[pos : pos + 2 + length]
    elif what == "size":
        field = pos + 5 + rng.choice([0, 2])  # height, width
        _put(out, field, struct.pack(">H", rng.choice(EXTREMES) & 0xFFFF))
    elif what == "components":
        _put(out, pos + 9, bytes([rng.choice([0, 2, 4, 5, 255])]))
    return bytes(out), f"jpeg: {what} of segment FF{marker:02X} at {pos}"


def _gif_edit(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    out = bytearray(data)
    where = rng.choice(["screen", "frame", "lzw-min", "flags"])
    if where == "screen":
        _put(out, 6 + rng.choice([0, 2]), struct.pack("<H", rng.choice(EXTREMES) & 0xFFFF))
    else:
        frames = [i for i in range(13, len(data) - 10) if data[i] == 0x2C]  # image descriptors (maybe)
        if not frames:
            return data, "gif: no frame"
        at = rng.choice(frames)
        if where == "frame":  # left, top, width, height
            _put(out, at + 1 + rng.choice([0, 2, 4, 6]), struct.pack("<H", rng.choice(EXTREMES) & 0xFFFF))
        elif where == "lzw-min":
            _put(out, at + 10, bytes([rng.choice([0, 1, 12, 13, 255])]))
        else:
            _put(out, at + 9, bytes([rng.randrange(256)]))
    return bytes(out), f"gif: {where}"


def _tiff_edit(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Set one IFD entry of the first page (type, count or value) to an odd value."""
    if data[:2] not in (b"II", b"MM") or len(data) < 8:
        return data, "tiff: no header"
    e = "<" if data[:2] == b"II" else ">"
    ifd = struct.unpack(e + "I", data[4:8])[0]
    if ifd + 2 > len(data):
        return data, "tiff: IFD outside the file"
    n = struct.unpack(e + "H", data[ifd : ifd + 2])[0]
    if n == 0 or ifd + 2 + 12 * n > len(data):
        return data, "tiff: empty IFD"
    entry = ifd + 2 + 12 * rng.randrange(n)
    tag = struct.unpack(e + "H", data[entry : entry + 2])[0]
    out = bytearray(data)
    what = rng.choice(["value", "value", "count", "type"])
    if what == "value":
        _put(out, entry + 8, struct.pack(e + "I", rng.choice(EXTREMES)))
    elif what == "count":
        _put(out, entry + 4, struct.pack(e + "I", rng.choice(EXTREMES)))
    else:
        _put(out, entry + 2, struct.pack(e + "H", rng.choice([0, 1, 2, 5, 7, 12, 13, 16, 99])))
    return bytes(out), f"tiff: {what} of tag {tag}"


def _box_size_edit(data: bytes, rng: random.Random, label: str, names: list[bytes]) -> tuple[bytes, str]:
    """RIFF chunks (WebP) or ISO boxes (HEIC): a size field or the canvas / image size."""
    spots = [(name, i) for name in names for i in range(len(data)) if data.startswith(name, i)]
    if not spots:
        return data, f"{label}: nothing to edit"
    name, at = rng.choice(spots)
    out = bytearray(data)
    if label == "heic":
        if name == b"ispe":  # after version/flags: width, height
            _put(out, at + 8 + rng.choice([0, 4]), struct.pack(">I", rng.choice(EXTREMES)))
        elif at >= 4:
            _put(out, at - 4, struct.pack(">I", rng.choice(EXTREMES)))  # the box's own size
    else:
        if name == b"VP8X":  # canvas width-1, height-1 (24-bit)
            _put(out, at + 12 + rng.choice([0, 3]), (rng.choice(EXTREMES) & 0xFFFFFF).to_bytes(3, "little"))
        else:
            _put(out, at + 4, struct.pack("<I", rng.choice(EXTREMES)))  # the chunk's size
    return bytes(out), f"{label}: {name.decode()} at {at}"


def _format_edit(fmt: str, data: bytes, rng: random.Random) -> tuple[bytes, str]:
    if fmt == "png":
        return _png_edit(data, rng)
    if fmt == "jpeg":
        return _jpeg_edit(data, rng)
    if fmt == "gif":
        return _gif_edit(data, rng)
    if fmt == "tiff":
        return _tiff_edit(data, rng)
    if fmt == "webp":
        return _box_size_edit(
            data, rng, "webp", [b"RIFF", b"VP8 ", b"VP8L", b"VP8X", b"ANMF", b"ALPH", b"EXIF"]
        )
    return _box_size_edit(data, rng, "heic", [b"ftyp", b"meta", b"iinf", b"iloc", b"ispe", b"mdat", b"hvcC"])


def mutate(fmt: str, data: bytes, rng: random.Random, donor: bytes) -> tuple[bytes, str]:
    """One to three mutations, chosen by ``rng``."""
    steps = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        if not data:
            break
        out = bytearray(data)
        kind = rng.choice(
            ["format", "format", "format", "flip", "flip-header", "truncate", "overwrite", "delete", "splice"]
        )
        if kind == "format":
            data, what = _format_edit(fmt, data, rng)
        elif kind == "flip":
            what = _flip_bits(out, rng, 0, len(out), rng.choice([1, 2, 8, 32]))
            data = bytes(out)
        elif kind == "flip-header":
            what = _flip_bits(out, rng, 0, 256, rng.choice([1, 2, 4]))
            data = bytes(out)
        elif kind == "truncate":
            cut = rng.randrange(len(data))
            data, what = data[:cut], f"truncate to {cut} of {len(data)}"
        elif kind == "overwrite":
            start = rng.randrange(len(data))
            size = rng.choice([1, 4, 16, 256])
            fill = rng.choice([b"\x00", b"\xff", bytes([rng.randrange(256)])])
            out[start : start + size] = fill * len(out[start : start + size])
            data, what = bytes(out), f"overwrite {size} bytes at {start} with {fill!r}"
        elif kind == "delete":
            start = rng.randrange(len(data))
            size = rng.choice([1, 3, 64])
            del out[start : start + size]
            data, what = bytes(out), f"delete {size} bytes at {start}"
        else:
            cut = rng.randrange(len(data))
            data, what = data[:cut] + donor[rng.randrange(len(donor)) :], f"splice another file at {cut}"
        steps.append(what)
    return data, "; ".join(steps)


def cases(seed: int, count: int, formats: tuple[str, ...] = FORMATS) -> Iterator[Case]:
    """``count`` mutated files, the same for the same seed; the formats take turns."""
    seeds = seed_files()
    by_format: dict[str, list[tuple[str, bytes]]] = {}
    for name, (fmt, data) in sorted(seeds.items()):
        by_format.setdefault(fmt, []).append((name, data))
    order = [f for f in formats if f in by_format]
    every = [data for _, data in sorted(seeds.values())]
    rng = random.Random(seed)
    for i in range(count):
        fmt = order[i % len(order)]
        name, data = rng.choice(by_format[fmt])
        mutated, what = mutate(fmt, data, rng, rng.choice(every))
        yield Case(f"{seed}-{i}", fmt, name, what, mutated)


def claimed_size_bombs() -> dict[str, bytes]:
    """Files whose header claims 100-170 million pixels from a few KB (found by this fuzzer): under
    Pillow's pixel limit, they cost gigabytes and a minute each to decode."""
    seeds = seed_files()
    png = seeds["interlaced-rgba.png"][1]
    ihdr = bytearray(png[16:29])
    ihdr[4:8] = struct.pack(">I", 3_080_232)  # height; width stays 48
    tall_png = png[:8] + struct.pack(">I", 13) + b"IHDR" + bytes(ihdr)
    tall_png += struct.pack(">I", zlib.crc32(b"IHDR" + bytes(ihdr)) & 0xFFFFFFFF) + png[33:]
    webp = bytearray(seeds["animated.webp"][1])
    at = webp.index(b"VP8X")
    webp[at + 15 : at + 18] = (4_194_335).to_bytes(3, "little")  # canvas height - 1; width stays 40
    gif = bytearray(seeds["animated.gif"][1])
    gif[6:10] = struct.pack("<HH", 65535, 65535)  # logical screen: 4.3 gigapixels, refused by Pillow's limit
    return {"tall-interlaced.png": tall_png, "tall-canvas.webp": bytes(webp), "huge-screen.gif": bytes(gif)}


# --------------------------------------------------------------------------- the runner


def check_one(path: Path) -> dict:
    """Decode ``path`` the way a scan does: pixels of the right shape, or a one-line reason."""
    from novelfind.errors import DecodeError
    from novelfind.media.decode import image_info, read_for_model

    try:
        digest, pixels = read_for_model(path)
    except DecodeError as err:
        reason = str(err)
        fault = None
        if not reason.strip() or "\n" in reason or len(reason) > 300:
            fault = "reason is not one short line"
        elif "out of memory" in reason:
            fault = "ran out of memory (the runner's address-space limit)"
        return {"outcome": "reason", "reason": reason, "fault": fault}
    except BaseException as err:  # noqa: BLE001 - this is what the fuzzing looks for
        return {
            "outcome": "exception",
            "reason": f"{type(err).__name__}: {err}"[:300],
            "fault": "raised something other than DecodeError",
        }
    fault = None
    if pixels is None or pixels.shape != (224, 224, 3) or pixels.dtype != np.uint8 or len(digest) != 32:
        fault = f"bad pixels: {None if pixels is None else (pixels.shape, pixels.dtype)}"
    info = image_info(path)  # never raises
    if set(info) != {"width", "height", "taken"}:
        fault = f"image_info returned {info}"
    return {"outcome": "decoded", "reason": None, "fault": fault}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=600)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--watchdog", type=float, default=60.0, help="seconds one case may take")
    parser.add_argument("--workdir", type=Path, default=None, help="where case files are written")
    parser.add_argument("--save-to", type=Path, default=None, help="also keep every case file here")
    parser.add_argument(
        "--memory-limit-mb",
        type=int,
        default=4096,
        help="address-space limit: a decode that needs more fails instead of swapping",
    )
    args = parser.parse_args(argv)

    import faulthandler
    import resource
    import tempfile

    if args.memory_limit_mb:
        limit = args.memory_limit_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    formats = tuple(f for f in args.formats.split(",") if f)
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for case in cases(args.seed, args.cases, formats):
            path = Path(tmp) / f"case-{case.id}{SUFFIX[case.fmt]}"
            path.write_bytes(case.data)
            if args.save_to is not None:
                args.save_to.mkdir(parents=True, exist_ok=True)
                (args.save_to / path.name).write_bytes(case.data)
            faulthandler.dump_traceback_later(args.watchdog, exit=True)
            started = time.perf_counter()
            result = check_one(path)
            seconds = time.perf_counter() - started  # reported, never asserted: the watchdog is the bound
            faulthandler.cancel_dump_traceback_later()
            path.unlink()
            print(
                json.dumps(
                    {
                        "id": case.id,
                        "fmt": case.fmt,
                        "seed_file": case.seed_name,
                        "mutation": case.mutation,
                        "seconds": round(seconds, 4),
                        **result,
                    }
                ),
                flush=True,
            )
    with open("/proc/self/status") as status:  # ru_maxrss would include the parent's peak, inherited
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(json.dumps({"done": True, "cases": args.cases, "peak_rss_kb": peak}), flush=True)
    return 0


if __name__ == "__main__":
    repo = Path(__file__).resolve().parents[2]
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))  # the package, when it is not installed
    sys.exit(main())
