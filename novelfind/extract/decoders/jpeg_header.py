"""The header check of the GPU JPEG path (CPU, headers only): which JPEGs the GPU may decode as the CPU
path would (``inspect_jpeg``), and what it must know to reproduce the CPU path's geometry (``JpegInfo``:
stored size, EXIF orientation as Pillow reads it, Pillow's draft reduction).

Only 8-bit baseline, extended or progressive Huffman JPEGs in YCbCr or greyscale, ending in an EOI marker
and at most ``GPU_MAX_PIXELS``, pass; every other file gets a one-line reason and goes to Pillow
(``novelfind.extract.decoders.gpu``). Plain Python, no torch: it runs in the reading threads.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from novelfind.media.decode import MAX_IMAGE_PIXELS, RESIZE_SIZE

# Larger JPEGs are left to Pillow (its reduced-scale decode needs far less memory than a full decode).
GPU_MAX_PIXELS = 2**27  # 134 MP: medium-format cameras still decode on the GPU
_SOF_GPU = frozenset({0xC0, 0xC1, 0xC2})  # baseline, extended sequential, progressive (Huffman)
_ORIENTATION = 0x0112


@dataclass(frozen=True)
class JpegInfo:
    """What the CPU learns from a JPEG's header before the GPU decodes it."""

    width: int  # as stored (before orientation)
    height: int
    orientation: int  # EXIF orientation as Pillow applies it: 1 (none) to 8
    draft: int  # the CPU path's DCT-domain reduction: 1, 2, 4 or 8

    @property
    def pixels(self) -> int:
        return self.width * self.height


def draft_factor(width: int, height: int) -> int:
    """The reduction Pillow's ``draft('RGB', (256, 256))`` gives a JPEG, as ``decode`` asks for it.

    ``decode._open_decoded`` drafts only when both sides are at least 2 x 256; Pillow then takes the
    largest of 8, 4, 2, 1 not above min(w // 256, h // 256) (``JpegImageFile.draft``).
    """
    if min(width, height) < 2 * RESIZE_SIZE:
        return 1
    scale = min(width // RESIZE_SIZE, height // RESIZE_SIZE)
    return next(s for s in (8, 4, 2, 1) if scale >= s)


def _jpeg_frame(data: bytes) -> tuple[int, int, int, int, bytes, int | None] | str:
    """Walk the markers to the frame header: (SOF marker, precision, height, width, component ids,
    Adobe transform or None), or why the bytes are not a plain JPEG."""
    if data[:2] != b"\xff\xd8":
        return "not a JPEG"
    adobe = None
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return "malformed JPEG markers"
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if length < 2 or i + 2 + length > n:
            return "malformed JPEG markers"
        seg = data[i + 4 : i + 2 + length]
        if marker == 0xEE and seg[:5] == b"Adobe" and len(seg) >= 12:
            adobe = seg[11]
        elif 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if len(seg) < 6:
                return "malformed JPEG frame header"
            count = seg[5]
            if len(seg) < 6 + 3 * count:
                return "malformed JPEG frame header"
            ids = bytes(seg[6 + 3 * k] for k in range(count))
            height, width = int.from_bytes(seg[1:3], "big"), int.from_bytes(seg[3:5], "big")
            return marker, seg[0], height, width, ids, adobe
        elif marker == 0xDA:
            return "scan before frame header"
        i += 2 + length
    return "no JPEG frame header"


def _pillow_orientation(data: bytes) -> int:
    """EXIF orientation exactly as ``ImageOps.exif_transpose`` reads it (1 when absent or unknown)."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Image.open(io.BytesIO(data)) as img:
            value = img.getexif().get(_ORIENTATION, 1)
    return value if value in (2, 3, 4, 5, 6, 7, 8) else 1


def inspect_jpeg(data: bytes) -> JpegInfo | str:
    """A JpegInfo when the GPU can decode ``data`` as the CPU path would; else why Pillow must (a reason).

    Cheap: reads the headers only.
    """
    frame = _jpeg_frame(data)
    if isinstance(frame, str):
        return frame
    marker, precision, height, width, ids, adobe = frame
    if marker not in _SOF_GPU:
        return f"JPEG coding 0x{marker:02X} (not Huffman baseline/progressive)"
    if precision != 8:
        return f"{precision}-bit JPEG"
    if len(ids) == 3:
        if ids == b"RGB" or adobe == 0:
            return "RGB-coded JPEG"  # libjpeg keeps these as RGB; nvJPEG would read them as YCbCr
    elif len(ids) != 1:
        return f"JPEG with {len(ids)} components"
    if width <= 0 or height <= 0:
        return "empty image"
    if width * height > min(GPU_MAX_PIXELS, MAX_IMAGE_PIXELS):
        return "too many pixels for the GPU path"
    if data.rstrip(b"\x00")[-2:] != b"\xff\xd9":
        return "no end-of-image marker (truncated?)"  # Pillow decides what a truncated file is
    try:
        orientation = _pillow_orientation(data)
    except Exception as e:  # noqa: BLE001 - whatever Pillow makes of the file, it does so on the fallback
        return f"header: {type(e).__name__}"
    return JpegInfo(width, height, orientation, draft_factor(width, height))
