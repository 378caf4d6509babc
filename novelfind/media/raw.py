"""Camera RAW files to pixels with LibRaw (``rawpy``, the optional extra ``novelfind[raw]``).

The model sees a 224 x 224 centre crop, so demosaicing 24 million photosites is wasted work whenever the
camera already stored a processed preview. Two paths, cheapest first:

1. **Preview**: the embedded JPEG (or bitmap) preview, when its short side is at least the model input
   (224 px). It is decoded like any JPEG (``decode.decode_bytes``: DCT-domain reduction with Pillow's
   ``draft``), and shown in the RAW's orientation. LibRaw hands a preview without Exif over with an Exif
   header carrying the RAW's orientation; a preview with its own Exif (as some cameras write) keeps its own
   tag, which is replaced by the RAW's here: editors that rotate a RAW rewrite the RAW's tag only.
2. **Demosaic**: a half-size LibRaw development (one RGB pixel per 2x2 Bayer cell, no interpolation), with
   the camera's white balance and LibRaw's orientation; full size only when half size would fall below
   ``min_side``.

``scripts/bench_raw.py`` measures both paths on 24 MP DNGs.

A RAW file is one kind of :mod:`novelfind.media.kinds` (``kinds.RAW``, its extensions
``extensions.RAW_EXTENSIONS``): the record sends it here wherever a file is read (the decoders' worker
processes, the GPU decoder's CPU path, Ray workers, the HTML report and the contact sheet), so a RAW is
read wherever a JPEG is.

Everything a bad file can raise becomes ``DecodeError`` with a one-line reason, like any image.
LibRaw itself writes one line to the C-level stderr for some damaged files ("FILE: Unexpected end of
file"); rawpy offers no way to silence it, so a caller that must keep stderr clean decodes RAW files in
a worker process whose stderr is closed (the extraction pipeline's decode workers are).
"""

from __future__ import annotations

import io
import os
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image

from novelfind.base import extras
from novelfind.errors import DecodeError
from novelfind.media import dates
from novelfind.media.decode import (
    INPUT_SIZE,
    MAX_IMAGE_PIXELS,
    RESIZE_SIZE,
    decode_bytes,
    file_digest,
    model_input_of,
    read_bytes,
)

PREVIEW_MIN_SIDE = INPUT_SIZE  # an embedded preview at least this big on its short side is used as is

Source = Literal["preview", "demosaic"]


def available() -> bool:
    """rawpy imports (a broken install, e.g. a missing shared library, counts as absent). Cached."""
    return extras.available("rawpy")


@dataclass(frozen=True)
class RawImage:
    """A decoded RAW file: RGB pixels as displayed (orientation applied), and which path made them."""

    image: Image.Image
    source: Source


# LibRaw's ``sizes.flip`` (dcraw's code) as the EXIF orientation it stands for, and the transposition that
# displays an image stored with that orientation (the table ``PIL.ImageOps.exif_transpose`` uses).
_FLIP_TO_ORIENTATION = {0: 1, 1: 2, 2: 4, 3: 3, 4: 5, 5: 8, 6: 6, 7: 7}
_DISPLAY = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
# The transposition that undoes ``_DISPLAY[o]`` (all are their own inverse but the two quarter turns).
_UNDO = {
    **_DISPLAY,
    6: Image.Transpose.ROTATE_90,
    8: Image.Transpose.ROTATE_270,
}
_EXIF_ORIENTATION = 0x0112


# How RAW files begin: TIFF-based ones (CR2, NEF, ARW, DNG, PEF, SRW, 3FR, ERF, KDC, ... and ORF's and
# RW2's variants of the TIFF mark), Fujifilm's RAF, the ISO media box of CR3, Sigma's X3F, Minolta's MRW.
_RAW_SIGNATURES = (
    *(b"II*\x00", b"MM\x00*", b"IIII", b"IIRO", b"IIRS", b"MMOR", b"IIU\x00"),
    *(b"FUJIFILM", b"FOVb", b"\x00MRM"),
)


def _has_raw_signature(data: bytes) -> bool:
    """Whether ``data`` begin as some RAW format does; LibRaw's own message for a short text file is an
    I/O error, which would send the user looking for a damaged disk."""
    return data.startswith(_RAW_SIGNATURES) or data[4:8] == b"ftyp"


def _reason(err: BaseException) -> str:
    """One line for a LibRaw failure (rawpy's messages are bytes such as b'Input/output error')."""
    import rawpy

    if isinstance(err, rawpy.LibRawFileUnsupportedError):
        return "unsupported or not a RAW file"
    if isinstance(err, rawpy.LibRawIOError):
        return "truncated or unreadable RAW data"
    if isinstance(err, rawpy.LibRawDataError):
        return "damaged RAW data"
    if isinstance(err, rawpy.LibRawTooBigError):
        return "refused: too many pixels"
    if isinstance(err, (rawpy.LibRawUnsufficientMemoryError, rawpy.LibRawMemPoolOverflowError, MemoryError)):
        return "out of memory while decoding"
    text = err.args[0] if err.args else ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = str(text).strip().splitlines()[0] if str(text).strip() else type(err).__name__
    return text[:200]


def decode_raw(
    data: bytes,
    *,
    name: str = "",
    min_side: int = RESIZE_SIZE,
    preview_min_side: int = PREVIEW_MIN_SIDE,
) -> RawImage:
    """Decode the bytes of a RAW file to RGB as displayed. Raises DecodeError.

    The embedded preview is used when its short side is at least ``preview_min_side`` (and it decodes);
    otherwise the RAW data are demosaiced at half size. Either way the result is reduced no further than
    ``min_side`` on its short side when the source allows (as ``decode.load_image``).
    """
    if not data:
        raise DecodeError("empty file")
    if not available():
        raise DecodeError("RAW support is not installed (pip install 'novelfind[raw]')")
    import rawpy

    try:
        with rawpy.imread(io.BytesIO(data)) as raw:
            sizes = raw.sizes
            if sizes.raw_width * sizes.raw_height > MAX_IMAGE_PIXELS:
                raise DecodeError(f"refused: too many pixels ({sizes.raw_width} x {sizes.raw_height})")
            orientation = _FLIP_TO_ORIENTATION.get(sizes.flip, 1)
            preview = _preview(raw, name, orientation, min_side, preview_min_side)
            if preview is not None:
                return RawImage(preview, "preview")
            half = min(sizes.width, sizes.height) >= 2 * min_side
            rgb = raw.postprocess(half_size=half, use_camera_wb=True, output_bps=8)  # (H, W, 3) uint8
        return RawImage(Image.fromarray(np.ascontiguousarray(rgb), "RGB"), "demosaic")
    except DecodeError:
        raise
    except (rawpy.LibRawError, MemoryError) as e:
        if not _has_raw_signature(data):
            raise DecodeError("unsupported or not a RAW file") from None
        raise DecodeError(_reason(e)) from None
    except Exception as e:  # noqa: BLE001 - any LibRaw or numpy failure is one bad file, not a crash
        raise DecodeError(_reason(e)) from None


def _preview(raw, name: str, orientation: int, min_side: int, preview_min_side: int) -> Image.Image | None:
    """The embedded preview as displayed, or None when there is none, it is too small or it is damaged."""
    import rawpy

    try:
        thumb = raw.extract_thumb()
    except (rawpy.LibRawNoThumbnailError, rawpy.LibRawUnsupportedThumbnailError):
        return None
    except rawpy.LibRawError:
        return None  # a damaged preview: the RAW data may still be fine
    if thumb.format == rawpy.ThumbFormat.JPEG:
        try:
            with Image.open(io.BytesIO(thumb.data)) as header:  # reads the header only
                if min(header.size) < preview_min_side:
                    return None
                own = header.getexif().get(_EXIF_ORIENTATION, 1)
        except Exception:  # noqa: BLE001 - not a readable JPEG: fall back to the RAW data
            return None
        try:
            img = decode_bytes(thumb.data, f"{name or 'raw'}.preview.jpg", min_side=min_side)
        except DecodeError:
            return None
        if own in _UNDO:  # decode_bytes displayed the preview by its Exif tag: take that back
            img = img.transpose(_UNDO[own])
    elif thumb.format == rawpy.ThumbFormat.BITMAP:
        arr = np.asarray(thumb.data)
        if arr.ndim != 3 or arr.shape[2] != 3 or min(arr.shape[:2]) < preview_min_side:
            return None
        img = Image.fromarray(np.ascontiguousarray(arr, dtype=np.uint8), "RGB")
    else:  # pragma: no cover - a preview format added to LibRaw later
        return None
    if orientation in _DISPLAY:
        img = img.transpose(_DISPLAY[orientation])
    return img


def _read(path: str | os.PathLike[str], expect: tuple[int, int] | None = None) -> bytes:
    """The RAW file's bytes through the library door, within the decode budget (``expect``: the size and
    modification time in ns it must still have). Raises DecodeError (FileRefused)."""
    return read_bytes(path, expect=expect)


def load_raw(
    path: str | os.PathLike[str], *, min_side: int = RESIZE_SIZE, expect: tuple[int, int] | None = None
) -> Image.Image:
    """``decode.load_image`` for a RAW file: RGB as displayed, reduced but not below ``min_side``."""
    return decode_raw(_read(path, expect), name=Path(path).name, min_side=min_side).image


def read_for_model(
    path: str | os.PathLike[str], known: Container[str] = frozenset()
) -> tuple[str, np.ndarray | None]:
    """``decode.read_for_model`` for a RAW file: (blake2b-128 hex of the bytes, uint8 (224, 224, 3)).

    The digest is the same function of the bytes as for any image, so the cache and the ignore list treat
    a RAW like any other file. When the digest is in ``known`` the file is not decoded (pixels None).
    Raises DecodeError.
    """
    data = _read(path)
    digest = file_digest(data)
    if digest in known:
        return digest, None
    return digest, model_input_of(decode_raw(data, name=Path(path).name).image, _reason)


def image_info(path: str | os.PathLike[str], *, expect: tuple[int, int] | None = None) -> dict:
    """``{"width", "height", "taken"}`` of a RAW as displayed (LibRaw's visible area); ``taken`` is the
    camera's local time of the shot (``2021-06-01T12:30:05``) as LibRaw reads it, None when unknown.
    ``expect``: the size and modification time in ns the file must still have.

    Reads the header only. Never raises: unknown values are None.
    """
    info: dict = {"width": None, "height": None, "taken": None}
    if not available():
        return info
    try:
        import rawpy

        with rawpy.imread(io.BytesIO(_read(path, expect))) as raw:
            w, h, flip = raw.sizes.width, raw.sizes.height, raw.sizes.flip
            other = getattr(raw, "other", None)  # rawpy >= 0.24
            taken = getattr(other, "timestamp", None)
        if flip & 4:  # a quarter turn
            w, h = h, w
        if w > 0 and h > 0:
            info["width"], info["height"] = int(w), int(h)
        info["taken"] = dates.libraw_iso(taken)
    except Exception:  # noqa: BLE001 - informational only
        pass
    return info
