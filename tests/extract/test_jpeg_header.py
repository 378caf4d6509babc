"""The header check of the GPU JPEG path, on hand-made marker sequences: what passes, the reason for what
does not, and the draft reduction. (Whole JPEGs against Pillow are in tests/extract/test_gpu.py.)"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from novelfind.extract.decoders.jpeg_header import JpegInfo, draft_factor, inspect_jpeg


def jpeg(w: int = 64, h: int = 48, *, orientation: int | None = None, grey: bool = False) -> bytes:
    arr = np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)
    img = Image.fromarray(arr).convert("L") if grey else Image.fromarray(arr)
    save = {}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        save["exif"] = exif.tobytes()
    buf = io.BytesIO()
    img.save(buf, "JPEG", **save)
    return buf.getvalue()


def segment(marker: int, payload: bytes) -> bytes:
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def sof(width: int, height: int, ids: bytes = b"\x01\x02\x03", marker: int = 0xC0) -> bytes:
    comps = b"".join(bytes([i, 0x11, 0]) for i in ids)
    return segment(
        marker, b"\x08" + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes([len(ids)]) + comps
    )


def test_a_plain_jpeg_gives_its_stored_size_and_no_orientation():
    info = inspect_jpeg(jpeg(64, 48))
    assert info == JpegInfo(width=64, height=48, orientation=1, draft=1)
    assert info.pixels == 64 * 48
    assert inspect_jpeg(jpeg(40, 30, grey=True)) == JpegInfo(40, 30, 1, 1)


@pytest.mark.parametrize(("tag", "read"), [(1, 1), (6, 6), (8, 8), (0, 1), (9, 1), (300, 1)])
def test_an_orientation_pillow_would_not_apply_counts_as_none(tag, read):
    info = inspect_jpeg(jpeg(orientation=tag))
    assert isinstance(info, JpegInfo) and info.orientation == read
    assert (info.width, info.height) == (64, 48)  # as stored, before turning


def test_padding_after_the_end_marker_and_fill_bytes_are_accepted():
    data = jpeg()
    assert isinstance(inspect_jpeg(data + b"\x00" * 100), JpegInfo)
    filled = data[:2] + b"\xff\xff\xff" + data[2:]  # fill bytes before the first marker
    assert isinstance(inspect_jpeg(filled), JpegInfo)
    assert inspect_jpeg(data + b"junk") == "no end-of-image marker (truncated?)"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x89PNG\r\n", "not a JPEG"),
        (b"\xff\xd8" + segment(0xDA, b"\x00" * 8), "scan before frame header"),
        (b"\xff\xd8" + segment(0xE0, b"JFIF\x00"), "no JPEG frame header"),
        (b"\xff\xd8\xff\xe0\x00\x01\x00\x00", "malformed JPEG markers"),  # a length under 2
        (b"\xff\xd8\xff\xe0\x00\x40\x00\x00", "malformed JPEG markers"),  # past the end
        (b"\xff\xd8" + segment(0xC0, b"\x08\x00"), "malformed JPEG frame header"),
        (b"\xff\xd8" + segment(0xC0, b"\x08\x00\x10\x00\x10\x03\x01\x11"), "malformed JPEG frame header"),
        (b"\xff\xd8" + sof(0, 16) + b"\xff\xd9", "empty image"),
        (b"\xff\xd8" + sof(16, 16, b"\x01\x02") + b"\xff\xd9", "JPEG with 2 components"),
        (
            b"\xff\xd8" + sof(16, 16, marker=0xC9) + b"\xff\xd9",
            "JPEG coding 0xC9 (not Huffman baseline/progressive)",
        ),
        (b"\xff\xd8" + sof(16, 16, b"RGB") + b"\xff\xd9", "RGB-coded JPEG"),
        (
            b"\xff\xd8" + segment(0xEE, b"Adobe\x00\x64\x00\x00\x00\x00\x00") + sof(16, 16) + b"\xff\xd9",
            "RGB-coded JPEG",  # Adobe transform 0: the components are RGB
        ),
    ],
)
def test_the_reason_for_each_file_the_gpu_leaves_to_pillow(data, reason):
    assert inspect_jpeg(data) == reason


def test_the_huffman_tables_marker_is_not_a_frame():
    """0xC4 (DHT), 0xC8 (JPG) and 0xCC (DAC) sit among the frame markers and are skipped."""
    data = jpeg()
    start = data.index(b"\xff\xc0")
    moved = data[:2] + segment(0xC4, b"\x00" * 17) + segment(0xCC, b"\x00\x00") + data[2:]
    assert isinstance(inspect_jpeg(moved), JpegInfo) and start > 2


@pytest.mark.parametrize(
    ("size", "draft"),
    [
        ((511, 4000), 1),  # a side under 512: no draft
        ((512, 512), 2),
        ((1023, 1023), 2),
        ((1024, 1024), 4),
        ((2047, 4000), 4),
        ((2048, 2048), 8),
        ((20000, 9000), 8),
        ((4000, 700), 2),
    ],
)
def test_draft_factor_at_its_boundaries(size, draft):
    assert draft_factor(*size) == draft
    assert draft_factor(*reversed(size)) == draft
