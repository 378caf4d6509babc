"""One file to pixels: Pillow decode, orientation, reduced-scale JPEG decode, model input.

Everything here is plain Pillow + numpy (no torch), so decode workers start fast and small.

Whatever the bytes, a decode gives pixels or raises ``DecodeError`` with a one-line reason; it
prints nothing (Pillow's warnings are silenced here). Seeded mutations of every supported format
(``tests/support/fuzzing.py``) and valid but hostile files (``tests/support/hostile.py``) hold it to
that. A path that is no longer a regular file when it is read (swapped for a FIFO or a device after the walk)
is refused before a byte is read from it; a PNG refused only for an oversized text or ICC chunk
is decoded again without its metadata chunks, since the pixels do not depend on them.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import io
import os
import struct
import warnings
from collections.abc import Callable, Container, Iterator
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, ImageOps

from novelfind.base import door, extras
from novelfind.errors import DecodeError, FileRefused
from novelfind.media import dates
from novelfind.media.extensions import AVIF_EXTENSIONS, HEIF_EXTENSIONS, PILLOW_EXTENSIONS
from novelfind.model.weights import MOBILENET_V2

# The model's pixels, from its weights' record (IMAGENET1K_V1's transforms): the shorter side resized to
# RESIZE_SIZE, then the centre INPUT_SIZE square (``weights.PREPROCESS_VERSION`` names them in the cache key).
INPUT_SIZE = MOBILENET_V2.transforms.crop_size
RESIZE_SIZE = MOBILENET_V2.transforms.resize_size

# Refuse images above this many pixels (Pillow warns above it; we treat the warning as an error).
# 2**28 = 268 MP: large panoramas pass, decompression bombs do not.
MAX_IMAGE_PIXELS = 2**28
Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
# Below that limit, a header may still claim far more pixels than its file can hold: a 5 KB PNG or a
# 2 KB animated WebP whose canvas is 150 MP costs gigabytes and a minute to decode. Above 32 MP, an
# image is refused when it has more than 4096 pixels per byte of file. Real photos have well under
# 100 (a 45 MP camera JPEG is 10-25 MB); a flat-colour 8-bit PNG, the most compressible picture, has
# about 1,000 (zlib's limit); only bilevel scans and synthetic canvases come near 4096.
BOMB_CHECK_PIXELS = 2**25
MAX_PIXELS_PER_BYTE = 4096
ImageFile.LOAD_TRUNCATED_IMAGES = False
# The decoded-pixels budget: what one decode may hold, checked from the header before any pixel is
# decoded (after a JPEG's reduced-scale draft, which is what gets decoded). A decode peaks at about
# BYTES_PER_PIXEL bytes a pixel (RGBA or 16-bit planes decoded, then an RGB copy); the default gives all
# decodes at once (the workers and this process) half of the machine's memory, never more than
# MAX_IMAGE_PIXELS each. A file is not read when it is larger than an uncompressed image of the budget
# could be (a sparse multi-gigabyte file costs its size in memory).
BYTES_PER_PIXEL = 8
MEMORY_SHARE = 0.5
# A decode process may not grow its address space by more than its share of that memory (the larger of
# the default budget's and the scan's, at BYTES_PER_PIXEL a pixel) plus this, above the size it had when it
# started: room for the libraries loaded on first use (PyAV adds about 115 MB of address space, LibRaw
# and libheif less), thread stacks and malloc arenas. A decoder that allocates past it (a clip whose
# frames are larger than its stream says, a codec's own tables) gets MemoryError, one failure line for
# its file, instead of taking the machine (:func:`limit_address_space`).
ADDRESS_SPACE_HEADROOM = 1 << 30
# A progressive JPEG decodes every scan over the whole image: 8,000 scans of 16000 x 16000 took two
# minutes in a 2.7 MB file. Encoders write at most a few dozen (libjpeg's progressive script: 10).
MAX_JPEG_SCANS = 256
# 16-bit and float greyscale images are converted to 8 bits this many pixels at a time (a few MB of
# temporary arrays), so the conversion holds one byte a pixel beyond the image itself.
GREY_BAND_PIXELS = 1 << 20


def _avif_available() -> bool:
    from PIL import features

    try:
        return bool(features.check("avif"))
    except Exception:  # noqa: BLE001 - an older Pillow that does not know the feature
        return False


# The photos this installation reads (``kinds.PHOTO``'s extensions): HEIF through pillow-heif, when
# installed; AVIF by Pillow itself when built with libavif (Pillow >= 11.2). The walk offers these.
IMAGE_EXTENSIONS: frozenset[str] = PILLOW_EXTENSIONS.union(
    HEIF_EXTENSIONS if extras.available("pillow_heif") else (), AVIF_EXTENSIONS if _avif_available() else ()
)


@functools.cache
def _register_heif() -> bool:
    """Register pillow-heif's opener on first use; False when it is not installed. (Two threads that
    both register it at once register the same opener twice, which is harmless.)"""
    try:
        # Orientation is applied by us from EXIF (exif_transpose), as for JPEG.
        extras.load("pillow_heif").register_heif_opener(thumbnails=True)
    except Exception:  # noqa: BLE001 - optional dependency, any failure means "absent"
        return False
    return True


def _shared_pixels() -> float | None:
    """The pixels half the machine's memory holds (:data:`BYTES_PER_PIXEL` each); None: unknown."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):  # pragma: no cover - a system without sysconf
        return None
    return MEMORY_SHARE * memory / BYTES_PER_PIXEL


def default_pixel_budget(workers: int) -> int:
    """Pixels one decode may hold when ``workers`` decode processes and this one run at once: half the
    machine's memory shared among them (:data:`BYTES_PER_PIXEL` each), at most :data:`MAX_IMAGE_PIXELS`."""
    shared = _shared_pixels()
    if shared is None:  # pragma: no cover
        return MAX_IMAGE_PIXELS
    return max(1, min(MAX_IMAGE_PIXELS, int(shared / (max(0, workers) + 1))))


def decode_processes_within_budget() -> int:
    """How many decode processes, each at this process's budget (:func:`pixel_budget`), fit beside this
    one in the share :func:`default_pixel_budget` divides (at least 1): the report's thumbnails start no
    more, so ``--workers 0`` (one process's budget) makes them one at a time."""
    shared = _shared_pixels()
    if shared is None:  # pragma: no cover
        return 1
    return max(1, int(shared // pixel_budget()) - 1)


def decode_memory_share(workers: int) -> int:
    """Bytes of memory one of ``workers`` decode processes may use for pixels: the larger of the default
    budget's share and this process's budget (``--max-decode-pixels`` may ask for more), at
    :data:`BYTES_PER_PIXEL` a pixel."""
    return max(default_pixel_budget(workers), pixel_budget()) * BYTES_PER_PIXEL


def _address_space() -> int | None:
    """This process's address space in bytes (``VmSize``), None where /proc does not say."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def limit_address_space(share: int) -> int | None:
    """In a decode process: limit its address space (``RLIMIT_AS``) to what it has now plus ``share`` and
    :data:`ADDRESS_SPACE_HEADROOM`; a tighter limit already set is kept. Returns the limit in bytes, or
    None where it cannot be set (no /proc or no ``resource``: the pixel budget alone holds there)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not a Unix
        return None
    baseline = _address_space()
    if baseline is None:  # pragma: no cover - not Linux
        return None
    limit = baseline + int(share) + ADDRESS_SPACE_HEADROOM
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY and soft <= limit:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError):  # pragma: no cover
        return None
    return limit


_pixel_budget = MAX_IMAGE_PIXELS  # this process's; set for a scan by set_pixel_budget


def set_pixel_budget(pixels: int) -> None:
    """Refuse, in this process, images that would decode to more than ``pixels`` (see
    :func:`default_pixel_budget`); a scan sets it in the scanning process and in each decode worker."""
    global _pixel_budget
    _pixel_budget = max(1, min(MAX_IMAGE_PIXELS, int(pixels)))


def pixel_budget() -> int:
    """The decoded-pixels budget of this process."""
    return _pixel_budget


@contextlib.contextmanager
def pixel_budget_of(pixels: int) -> Iterator[None]:
    """:func:`set_pixel_budget` for the time of a ``with`` block (a scan), then the one before."""
    previous = _pixel_budget
    set_pixel_budget(pixels)
    try:
        yield
    finally:
        set_pixel_budget(previous)


def _to_rgb(img: Image.Image) -> Image.Image:
    """Any Pillow mode to 8-bit RGB; transparency is composited on white."""
    mode = img.mode
    if mode == "RGB":
        return img
    if mode.startswith("I;16") or mode in ("I", "F"):
        return _grey_to_l(img).convert("RGB")
    has_alpha = mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info
    if has_alpha:
        rgba = img.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return img.convert("RGB")


def _grey_to_l(img: Image.Image) -> Image.Image:
    """A 16-bit (``I;16*``), 32-bit integer (``I``) or float (``F``) greyscale image as 8-bit ``L``,
    converted a band of ``GREY_BAND_PIXELS`` at a time into one uint8 array: no copy of the whole image
    other than that one byte a pixel (a float64 copy of a 200 MP scan was 1.6 GB, past a decode
    process's address space). 16-bit values (and ``I`` values above 255) are scaled by 1/257 to the
    nearest integer; ``F`` values in [0, 1] by 255; NaN is 0; the rest is clipped to [0, 255]."""
    w, h = img.size
    rows = max(1, GREY_BAND_PIXELS // max(1, w))
    bands = [(top, min(h, top + rows)) for top in range(0, h, rows)]

    def band(top: int, bottom: int) -> np.ndarray:
        return np.asarray(img.crop((0, top, w, bottom)))

    mode = img.mode
    if mode == "F":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a band of NaN only: its nanmax is NaN
            peaks = [float(np.nanmax(band(*b))) for b in bands]
        finite = [p for p in peaks if not np.isnan(p)]
        factor = 255.0 if finite and max(finite) <= 1.0 else 1.0
    sixteen = mode.startswith("I;16") or (mode == "I" and any(int(band(*b).max()) > 255 for b in bands))
    out = np.empty((h, w), np.uint8)
    for top, bottom in bands:
        part = band(top, bottom)
        if mode == "F":
            part = np.rint(np.nan_to_num(part.astype(np.float64) * factor))
        elif sixteen:  # round(x / 257), exactly, in integers: 257 is odd, so no x is half-way
            part = (part.astype(np.int64) + 128) // 257
        out[top:bottom] = np.clip(part, 0, 255)
    return Image.fromarray(out, "L")


def _open_decoded(fp: io.BytesIO, name: str, min_side: int) -> Image.Image:
    """Open, reduce (JPEG draft / HEIF thumbnail), orient and convert. Raises DecodeError."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "corrupt EXIF data" and the like: the library prints nothing
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            img = Image.open(fp)
        except Image.DecompressionBombError as e:
            raise DecodeError(f"refused: too many pixels ({e})") from None
        except Image.DecompressionBombWarning as e:
            raise DecodeError(f"refused: too many pixels ({e})") from None
        except Image.UnidentifiedImageError:
            raise DecodeError("not a recognised image format") from None
        except (OSError, ValueError, SyntaxError, EOFError) as e:
            raise DecodeError(_short(e)) from None
        try:
            w, h = img.size
            if w <= 0 or h <= 0:
                raise DecodeError("empty image")
            size = fp.getbuffer().nbytes
            if w * h > BOMB_CHECK_PIXELS and w * h > MAX_PIXELS_PER_BYTE * size:
                raise DecodeError(
                    f"refused: {w} x {h} pixels from a file of {size} bytes (decompression bomb?)"
                )
            if w * h > MAX_IMAGE_PIXELS:  # our own bound: does not depend on Pillow's global setting
                raise DecodeError(f"refused: too many pixels ({w} x {h}, limit {MAX_IMAGE_PIXELS})")
            if img.format in ("JPEG", "MPO", "HEIF", "AVIF"):
                # DCT-domain (JPEG) or embedded-thumbnail (HEIF) reduced decode; both sides stay >= min_side
                # so the later resize to the model's shorter side is still a downscale.
                if min(w, h) >= 2 * min_side:
                    img.draft("RGB", (min_side, min_side))
            dw, dh = img.size  # what will be decoded
            if dw * dh > _pixel_budget:
                raise DecodeError(
                    f"refused: {dw} x {dh} pixels to decode, over the budget of {_pixel_budget} "
                    "(max_decode_pixels)"
                )
            if getattr(img, "is_animated", False):
                img.seek(0)
            img.load()
            img = ImageOps.exif_transpose(img) or img
            return _to_rgb(img)
        except DecodeError:
            raise
        except Image.DecompressionBombWarning as e:
            raise DecodeError(f"refused: too many pixels ({e})") from None
        except MemoryError:
            raise DecodeError("out of memory while decoding") from None
        except Exception as e:  # noqa: BLE001 - any decoder failure is one bad file, not a crash
            raise DecodeError(_short(e)) from None


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    text = text or type(e).__name__
    return text[:200]


def load_image(
    path: str | os.PathLike, *, min_side: int = RESIZE_SIZE, expect: tuple[int, int] | None = None
) -> Image.Image:
    """Decode ``path`` to an RGB image with EXIF orientation applied, reduced but never below ``min_side``.
    ``expect``: the (size, modification time in ns) it must still have (:func:`read_bytes`)."""
    path = Path(path)
    if path.suffix.lower() in HEIF_EXTENSIONS:
        _register_heif()
    return _decode_bytes(read_bytes(path, expect=expect), path.name, min_side)


def read_bytes(path: str | os.PathLike, *, expect: tuple[int, int] | None = None) -> bytes:
    """The whole regular file at ``path``, read through the library door (:mod:`novelfind.base.door`: no
    link followed, no FIFO waited on, no more than an image within the budget can take; ``expect``: the
    size and modification time in ns it must still have). Raises :class:`~novelfind.errors.FileRefused`
    when the door refuses what is there now, DecodeError with the reason when it cannot be read."""
    try:
        return door.read(path, max_file_bytes(), expect=expect)
    except OSError as e:
        if e.errno == errno.EFBIG:
            raise DecodeError(
                f"refused: a file of more bytes than an image within the decode budget "
                f"({_pixel_budget} pixels) can take"
            ) from None
        raise unreadable(e) from None


def unreadable(err: OSError) -> DecodeError:
    """The DecodeError for a library file the door did not open or read: :class:`FileRefused` for the
    door's refusal of what is there now (a link, not a regular file, changed), DecodeError otherwise."""
    reason = err.strerror or _short(err)
    return FileRefused(reason) if door.refused(err) else DecodeError(reason)


def max_file_bytes() -> int:
    """The largest image file read into memory: an uncompressed image of the budget, with 16 MiB of
    metadata (a RAW file is held to the same bound)."""
    return _pixel_budget * BYTES_PER_PIXEL + (16 << 20)


def decode_bytes(data: bytes, name: str, *, min_side: int = RESIZE_SIZE) -> Image.Image:
    """``load_image`` for bytes already in memory (a file read for its digest, a RAW's embedded preview).

    ``name`` only hints at the format (a HEIF suffix registers pillow-heif). Raises DecodeError.
    """
    return _decode_bytes(data, name, min_side)


def _decode_bytes(data: bytes, name: str, min_side: int) -> Image.Image:
    if not data:
        raise DecodeError("empty file")
    if data.startswith(b"\xff\xd8"):
        # 0xFF 0xDA starts a scan; inside entropy-coded data 0xFF is always followed by 0x00 or a
        # restart marker, so this counts the scans exactly, in one pass over the bytes.
        scans = data.count(b"\xff\xda")
        if scans > MAX_JPEG_SCANS:
            raise DecodeError(f"refused: a JPEG of {scans} scans (limit {MAX_JPEG_SCANS}; each costs a pass)")
    if Path(name).suffix.lower() in HEIF_EXTENSIONS or data[4:8] == b"ftyp":
        _register_heif()
    try:
        return _open_decoded(io.BytesIO(data), name, min_side)
    except DecodeError as first:
        slim = _png_without_metadata(data) if data.startswith(_PNG_SIGNATURE) else None
        if slim is None:
            raise
        try:
            return _open_decoded(io.BytesIO(slim), name, min_side)
        except DecodeError:
            raise first from None


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# Chunks that never change the pixels and that Pillow refuses when they inflate past its limits.
_PNG_METADATA = frozenset({b"tEXt", b"zTXt", b"iTXt", b"iCCP"})


def _png_without_metadata(data: bytes) -> bytes | None:
    """``data`` without its text and ICC chunks; None if it has none or its chunks do not parse."""
    out, pos, dropped = [data[:8]], 8, False
    while pos + 12 <= len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        end = pos + 12 + length
        if end > len(data):
            return None
        if kind in _PNG_METADATA:
            dropped = True
        else:
            out.append(data[pos:end])
        pos = end
        if kind == b"IEND":
            break
    return b"".join(out) if dropped else None


def resized_geometry(w: int, h: int) -> tuple[int, int, int, int]:
    """(new_w, new_h, left, top): the size after 'short side to 256' and the centre crop's offsets in it."""
    # same size rule as torchvision's resize(256): the short side is 256, the long side truncated
    if w <= h:
        new_w, new_h = RESIZE_SIZE, max(1, int(RESIZE_SIZE * h / w))
    else:
        new_w, new_h = max(1, int(RESIZE_SIZE * w / h)), RESIZE_SIZE
    # torchvision center_crop: offsets rounded, same as F.center_crop
    top = int(round((new_h - INPUT_SIZE) / 2.0))
    left = int(round((new_w - INPUT_SIZE) / 2.0))
    return new_w, new_h, left, top


def crop_box(w: int, h: int) -> tuple[float, float, float, float] | None:
    """The source region (x0, y0, x1, y1) of a w x h image that becomes the model's 224 x 224 input.

    None when no resampling is needed (the image is already 256 on its short side): the crop is then
    a plain cut at ``resized_geometry``'s offsets.
    """
    new_w, new_h, left, top = resized_geometry(w, h)
    if (new_w, new_h) == (w, h):
        return None
    # the crop's edges in source coordinates (output pixel x covers source [x*sx, (x+1)*sx))
    sx, sy = w / new_w, h / new_h
    return (
        max(0.0, left * sx),
        max(0.0, top * sy),
        min(float(w), (left + INPUT_SIZE) * sx),
        min(float(h), (top + INPUT_SIZE) * sy),
    )


def to_model_input(img: Image.Image) -> np.ndarray:
    """IMAGENET1K_V1 geometry -> uint8 (224, 224, 3): short side to 256 (bilinear, antialias), centre crop.

    Only the source region that becomes the centre crop is resampled (``Image.resize(box=...)``), so
    memory is O(224 * 224) whatever the aspect ratio (a 1x100000 image would otherwise be resized to
    256 x 25.6M first). The filter positions are the same as resizing the whole image and then cropping.
    """
    if img.mode != "RGB":
        img = _to_rgb(img)
    w, h = img.size
    box = crop_box(w, h)
    if box is None:
        new_w, new_h, left, top = resized_geometry(w, h)
        img = img.crop((left, top, left + INPUT_SIZE, top + INPUT_SIZE))
    else:
        img = img.resize(
            (INPUT_SIZE, INPUT_SIZE), Image.Resampling.BILINEAR, box=box
        )  # Pillow's bilinear antialiases downscales
    arr = np.asarray(img, dtype=np.uint8)  # (224, 224, 3)
    if arr.shape != (INPUT_SIZE, INPUT_SIZE, 3):  # pragma: no cover - defensive
        raise DecodeError(f"unexpected pixel shape {arr.shape}")
    return arr


def file_digest(data: bytes) -> str:
    """Content identity of a file: blake2b-128 of its bytes, hex."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def model_input_from_bytes(data: bytes, name: str) -> np.ndarray:
    """Encoded file bytes -> uint8 (224, 224, 3), the model's input. ``name`` picks the format hint.

    Raises DecodeError.
    """
    return model_input_of(_decode_bytes(data, name, RESIZE_SIZE))


def model_input_of(img: Image.Image, reason: Callable[[BaseException], str] = _short) -> np.ndarray:
    """``to_model_input`` with any failure a DecodeError, worded by ``reason`` (a decoder's own words
    for its library's errors)."""
    try:
        return to_model_input(img)
    except DecodeError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever Pillow raises on a damaged image is the file's fault
        raise DecodeError(reason(e)) from None


def read_for_model(
    path: str | os.PathLike, known: Container[str] = frozenset()
) -> tuple[str, np.ndarray | None]:
    """Read ``path`` once: (blake2b-128 hex of the bytes, uint8 (224, 224, 3)). Raises DecodeError.

    When the digest is in ``known`` (bytes whose vector is already cached: a moved, renamed or
    touched file) the image is not decoded and the pixels are None.
    """
    path = Path(path)
    data = read_bytes(path)
    digest = file_digest(data)
    if digest in known:
        return digest, None
    return digest, model_input_from_bytes(data, path.name)


_ORIENTATION = 0x0112
_IMAGE_WIDTH, _IMAGE_LENGTH = 0x0100, 0x0101  # TIFF: as stored


def image_info(path: str | os.PathLike, *, expect: tuple[int, int] | None = None) -> dict:
    """``{"width", "height", "taken"}`` as displayed (orientation applied), None if unknown: read through
    the library door, from the file of size and modification time ``expect`` when given. Never raises."""
    info: dict = {"width": None, "height": None, "taken": None}
    path = Path(path)
    try:
        if path.suffix.lower() in HEIF_EXTENSIONS:
            _register_heif()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with door.opened(path, expect=expect) as f:
                try:
                    img = Image.open(f)
                except Exception:  # noqa: BLE001 - a PNG may open without its oversized metadata
                    f.seek(0)
                    data = f.read(max_file_bytes())
                    slim = _png_without_metadata(data) if data.startswith(_PNG_SIGNATURE) else None
                    if slim is None:
                        raise
                    img = Image.open(io.BytesIO(slim))
                with img:
                    _fill_info(info, img)
    except Exception:  # noqa: BLE001 - informational only
        pass
    return info


def _fill_info(info: dict, img: Image.Image) -> None:
    w, h = img.size
    exif = img.getexif()
    if img.format == "TIFF":  # newer Pillow gives a TIFF's size as displayed already
        w, h = img.tag_v2.get(_IMAGE_WIDTH, w), img.tag_v2.get(_IMAGE_LENGTH, h)
    if exif.get(_ORIENTATION) in (5, 6, 7, 8):
        w, h = h, w
    info["width"], info["height"] = int(w), int(h)
    info["taken"] = dates.original_iso(exif)
