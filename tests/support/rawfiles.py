"""Real DNG files for tests and benchmarks, written with tifffile from an RGB picture.

The picture is mosaicked to an RGGB Bayer array (linear light, 12 bits) and stored as a CFA image, as
cameras do. With a preview, the file has the usual DNG layout: IFD0 holds the preview JPEG (``NewSubfileType``
1) and its SubIFD the raw data; without one, IFD0 is the raw data. LibRaw (rawpy) reads both.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import tifffile
from PIL import Image

WHITE_LEVEL = 4095  # 12-bit sensor
_IDENTITY_MATRIX = tuple(v for x in (1, 0, 0, 0, 1, 0, 0, 0, 1) for v in (x * 10000, 10000))


def quadrant_scene(height: int, width: int) -> np.ndarray:
    """A grey (H, W, 3) picture, red in the top-left ninth and blue in the bottom-left one.

    No flip or turn maps it onto itself, so each of the 8 orientations gives a different picture.
    """
    rgb = np.full((height, width, 3), 128, np.uint8)
    rgb[: height // 3, : width // 3] = (220, 30, 30)
    rgb[height - height // 3 :, : width // 3] = (30, 30, 220)
    return rgb


def bayer(rgb: np.ndarray) -> np.ndarray:
    """RGGB mosaic of an sRGB-ish (H, W, 3) uint8 picture, linear 12-bit values, uint16 (H, W)."""
    linear = (rgb.astype(np.float32) / 255.0) ** 2.2 * WHITE_LEVEL
    mosaic = np.empty(rgb.shape[:2], np.uint16)
    mosaic[0::2, 0::2] = linear[0::2, 0::2, 0]
    mosaic[0::2, 1::2] = linear[0::2, 1::2, 1]
    mosaic[1::2, 0::2] = linear[1::2, 0::2, 1]
    mosaic[1::2, 1::2] = linear[1::2, 1::2, 2]
    return mosaic


def jpeg_bytes(rgb: np.ndarray, *, orientation: int | None = None, quality: int = 90) -> bytes:
    """JPEG of ``rgb``; with ``orientation``, an Exif segment right after SOI carries it, as cameras write."""
    buf = io.BytesIO()
    if orientation is None:
        Image.fromarray(rgb).save(buf, "JPEG", quality=quality)
        return buf.getvalue()
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(rgb).save(buf, "JPEG", quality=quality, exif=exif.tobytes())
    data = buf.getvalue()
    if data[2:4] == b"\xff\xe0":  # drop Pillow's JFIF segment so that the Exif one comes first
        data = data[:2] + data[4 + int.from_bytes(data[4:6], "big") :]
    assert data[2:4] == b"\xff\xe1" and data[6:10] == b"Exif"
    return data


def write_dng(
    path: str | Path,
    rgb: np.ndarray,
    *,
    preview: np.ndarray | bytes | None = None,
    orientation: int = 1,
    compress: bool = False,
    taken: str | None = None,
) -> Path:
    """Write ``rgb`` (H, W, 3 uint8, even sizes) as a DNG with TIFF ``orientation`` (1-8).

    ``preview``: an (h, w, 3) uint8 picture stored as the embedded JPEG preview, or ready JPEG bytes.
    ``compress``: the raw data as 256 x 256 lossless-JPEG tiles (what cameras and converters write; needs
    imagecodecs), else uncompressed. ``taken``: the TIFF DateTime tag (``"2021:06:01 12:30:05"``).
    """
    path = Path(path)
    cfa = bayer(rgb)
    camera = [
        (50706, "B", 4, (1, 4, 0, 0), True),  # DNGVersion
        (50707, "B", 4, (1, 1, 0, 0), True),  # DNGBackwardVersion
        (50708, "s", 0, "novelfind test camera", True),  # UniqueCameraModel
        (274, "H", 1, orientation, True),  # Orientation
        (50721, "2i", 9, _IDENTITY_MATRIX, True),  # ColorMatrix1
        (50728, "2I", 3, (1, 1, 1, 1, 1, 1), True),  # AsShotNeutral
    ]
    if taken is not None:
        camera.append((306, "s", 0, taken, True))  # DateTime
    raw_tags = [
        (33421, "H", 2, (2, 2), True),  # CFARepeatPatternDim
        (33422, "B", 4, (0, 1, 1, 2), True),  # CFAPattern: R G / G B
        (50714, "I", 1, 0, True),  # BlackLevel
        (50717, "I", 1, WHITE_LEVEL, True),  # WhiteLevel
    ]
    with tifffile.TiffWriter(path) as tif:
        if preview is not None:
            data = preview if isinstance(preview, bytes) else jpeg_bytes(preview)
            with Image.open(io.BytesIO(data)) as header:
                pw, ph = header.size
            tif.write(
                iter([data]),
                shape=(ph, pw, 3),
                dtype=np.uint8,
                photometric="ycbcr",
                compression=7,  # JPEG
                subsampling=(2, 2),
                rowsperstrip=ph,
                subfiletype=1,  # reduced-resolution image
                subifds=1,
                extratags=camera,
                metadata=None,
            )
            _write_cfa(tif, cfa, raw_tags, compress)
        else:
            _write_cfa(tif, cfa, camera + raw_tags, compress)
    return path


def _write_cfa(tif: tifffile.TiffWriter, cfa: np.ndarray, tags: list, compress: bool) -> None:
    if not compress:
        tif.write(cfa, photometric=32803, subfiletype=0, extratags=tags, metadata=None)  # 32803: CFA
        return
    import imagecodecs

    tile = 256
    h, w = cfa.shape
    padded = np.zeros((-(-h // tile) * tile, -(-w // tile) * tile), np.uint16)
    padded[:h, :w] = cfa
    tiles = (
        imagecodecs.jpeg8_encode(padded[y : y + tile, x : x + tile], lossless=True, bitspersample=12)
        for y in range(0, padded.shape[0], tile)
        for x in range(0, padded.shape[1], tile)
    )
    tif.write(
        tiles,
        shape=cfa.shape,
        dtype=np.uint16,
        photometric=32803,
        compression=7,
        tile=(tile, tile),
        bitspersample=16,
        subfiletype=0,
        extratags=tags,
        metadata=None,
    )
