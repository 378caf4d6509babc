"""RAW decoding on real DNG files made here: preview and demosaic paths, orientation, damaged files."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
from common import missing_prerequisite
from PIL import Image, ImageOps

from novelfind.base import extras
from novelfind.errors import DecodeError
from novelfind.media import decode, extensions, kinds, raw

try:
    import imagecodecs  # noqa: F401 - tifffile needs it to write the JPEG preview
    import rawpy  # noqa: F401
    import tifffile  # noqa: F401
except ImportError as e:  # pragma: no cover - the test extras install them
    _MISSING: str | None = f"RAW tests need rawpy, tifffile and imagecodecs ({e})"
else:
    _MISSING = None
    from rawfiles import jpeg_bytes, quadrant_scene, write_dng


@pytest.fixture(autouse=True)
def _prerequisites():
    if _MISSING:
        missing_prerequisite(_MISSING)


SCENE_H, SCENE_W = 600, 900


def _scene() -> np.ndarray:
    return quadrant_scene(SCENE_H, SCENE_W)


def _small(rgb: np.ndarray, w: int, h: int) -> np.ndarray:
    return np.asarray(Image.fromarray(rgb).resize((w, h), Image.Resampling.BILINEAR))


def _grid(img: Image.Image) -> list[str]:
    """3 x 3 cells (row by row) named by their colour: 'r'ed, 'b'lue or 'g'rey."""
    arr = np.asarray(img.convert("RGB"), np.float32)
    h, w = arr.shape[:2]
    names = []
    for i in range(3):
        for j in range(3):
            cell = arr[i * h // 3 : (i + 1) * h // 3, j * w // 3 : (j + 1) * w // 3]
            # the inner half of the cell: edges blur in resampling and demosaicing
            ch, cw = cell.shape[:2]
            r, g, b = cell[ch // 4 : ch - ch // 4, cw // 4 : cw - cw // 4].reshape(-1, 3).mean(axis=0)
            names.append("r" if r > 150 and b < 110 else "b" if b > 150 and r < 110 else "g")
    return names


def _displayed(rgb: np.ndarray, orientation: int) -> Image.Image:
    """The scene as a viewer shows a photo stored as ``rgb`` with EXIF ``orientation`` (Pillow's table)."""
    img = Image.fromarray(rgb)
    exif = img.getexif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    img.save(buf, "PNG", exif=exif.tobytes())
    return ImageOps.exif_transpose(Image.open(buf))


def _decode(path, **kwargs) -> raw.RawImage:
    return raw.decode_raw(path.read_bytes(), name=path.name, **kwargs)


# ------------------------------------------------------------------------------------------ names


def test_extensions_are_the_common_raw_formats():
    expected = (
        ".dng .cr2 .cr3 .nef .nrw .arw .srf .sr2 .orf .rw2 .raf .pef .srw .x3f .3fr .iiq .erf .kdc .mrw"
    )
    assert kinds.RAW.extensions == extensions.RAW_EXTENSIONS == frozenset(expected.split())
    assert all(ext == ext.lower() and ext.startswith(".") for ext in extensions.RAW_EXTENSIONS)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("IMG_1.CR2", True),
        ("a.Nef", True),
        ("b.dng", True),
        ("x.3FR", True),
        ("c.jpg", False),
        ("raw", False),
    ],
)
def test_raw_names_match_in_any_case(name, expected):
    assert (kinds.kind_of(name) is kinds.RAW) is expected


def test_rawpy_is_available_here():
    assert raw.available() is True


# ------------------------------------------------------------------------------------------ paths


def test_large_preview_is_used(tmp_path):
    rgb = _scene()
    path = write_dng(tmp_path / "a.dng", rgb, preview=_small(rgb, 450, 300))
    out = _decode(path)
    assert out.source == "preview"
    assert out.image.mode == "RGB"
    assert out.image.size == (450, 300)  # the preview's own size: too small to be reduced further
    assert _grid(out.image) == _grid(Image.fromarray(rgb))


def test_without_preview_the_raw_data_are_demosaiced_at_half_size(tmp_path):
    rgb = _scene()
    path = write_dng(tmp_path / "a.dng", rgb)
    with rawpy.imread(str(path)) as r:  # the file really has no preview
        with pytest.raises(rawpy.LibRawNoThumbnailError):
            r.extract_thumb()
    out = _decode(path)
    assert out.source == "demosaic"
    assert out.image.size == (SCENE_W // 2, SCENE_H // 2)
    assert _grid(out.image) == _grid(Image.fromarray(rgb))


def test_compressed_raw_data_decode_like_uncompressed(tmp_path):
    rgb = _scene()
    plain = np.asarray(_decode(write_dng(tmp_path / "plain.dng", rgb)).image, np.int16)
    packed = np.asarray(_decode(write_dng(tmp_path / "lj92.dng", rgb, compress=True)).image, np.int16)
    assert packed.shape == plain.shape
    assert np.array_equal(packed, plain)  # lossless JPEG tiles: the same photosites


def test_preview_smaller_than_model_input_is_not_used(tmp_path):
    rgb = _scene()
    path = write_dng(tmp_path / "a.dng", rgb, preview=_small(rgb, 330, 220))  # short side 220 < 224
    out = _decode(path)
    assert out.source == "demosaic"
    assert out.image.size == (SCENE_W // 2, SCENE_H // 2)


def test_preview_exactly_model_input_size_is_used(tmp_path):
    rgb = _scene()
    path = write_dng(tmp_path / "a.dng", rgb, preview=_small(rgb, 336, 224))
    assert _decode(path).source == "preview"


def test_large_preview_is_decoded_at_reduced_scale(tmp_path):
    rgb = quadrant_scene(1200, 1800)
    path = write_dng(tmp_path / "a.dng", rgb, preview=_small(rgb, 1800, 1200))
    out = _decode(path)
    assert out.source == "preview"
    w, h = out.image.size
    assert decode.RESIZE_SIZE <= min(w, h) < 1200 // 2  # JPEG draft: a power-of-two reduction, >= 256
    assert w * 2 == h * 3
    assert _grid(out.image) == _grid(Image.fromarray(rgb))


def test_damaged_preview_falls_back_to_the_raw_data(tmp_path):
    rgb = _scene()
    good = jpeg_bytes(_small(rgb, 450, 300))
    broken = good[: len(good) // 3]  # header fine, entropy data cut short
    path = write_dng(tmp_path / "a.dng", rgb, preview=broken)
    out = _decode(path)
    assert out.source == "demosaic"
    assert _grid(out.image) == _grid(Image.fromarray(rgb))


def test_tiny_raw_is_demosaiced_at_full_size(tmp_path):
    rgb = quadrant_scene(300, 450)  # half size would be 150 px high, below the 256 px the model resizes to
    out = _decode(write_dng(tmp_path / "a.dng", rgb))
    assert out.source == "demosaic"
    assert out.image.size == (450, 300)


# ------------------------------------------------------------------------------------------ orientation


@pytest.mark.parametrize("orientation", range(1, 9))
def test_both_paths_show_the_raw_orientation(tmp_path, orientation):
    rgb = _scene()
    expected = _displayed(rgb, orientation)
    with_preview = write_dng(tmp_path / "p.dng", rgb, preview=_small(rgb, 450, 300), orientation=orientation)
    without = write_dng(tmp_path / "n.dng", rgb, orientation=orientation)
    fast, slow = _decode(with_preview), _decode(without)
    assert (fast.source, slow.source) == ("preview", "demosaic")
    portrait = orientation >= 5
    assert (fast.image.height > fast.image.width) is portrait
    assert (slow.image.height > slow.image.width) is portrait
    assert _grid(fast.image) == _grid(expected)
    assert _grid(slow.image) == _grid(expected)


def test_quarter_turn_puts_top_left_at_top_right(tmp_path):
    """Orientation 6 (camera held with the grip up): the stored top-left corner shows at the top right."""
    rgb = _scene()
    out = _decode(write_dng(tmp_path / "a.dng", rgb, preview=_small(rgb, 450, 300), orientation=6))
    assert out.image.size == (300, 450)
    assert _grid(out.image) == ["b", "g", "r", "g", "g", "g", "g", "g", "g"]


def test_raw_orientation_replaces_the_previews_own(tmp_path):
    rgb = _scene()
    preview = jpeg_bytes(_small(rgb, 450, 300), orientation=8)  # disagrees with the RAW's 6
    out = _decode(write_dng(tmp_path / "a.dng", rgb, preview=preview, orientation=6))
    assert out.source == "preview"
    assert out.image.size == (300, 450)
    assert _grid(out.image) == _grid(_displayed(rgb, 6))


def test_image_info_reports_displayed_size(tmp_path):
    rgb = _scene()
    assert raw.image_info(write_dng(tmp_path / "a.dng", rgb, orientation=6)) == {
        "width": SCENE_H,
        "height": SCENE_W,
        "taken": None,
    }
    assert raw.image_info(write_dng(tmp_path / "b.dng", rgb))["width"] == SCENE_W
    assert raw.image_info(tmp_path / "missing.dng") == {"width": None, "height": None, "taken": None}


def test_image_info_reports_when_the_shot_was_taken(tmp_path, monkeypatch):
    """The camera's local time, as written: the same in any time zone of the machine reading it."""
    path = write_dng(tmp_path / "a.dng", _scene(), taken="2021:06:01 12:30:05")
    for tz in ("UTC", "America/New_York", "Asia/Tokyo"):
        monkeypatch.setenv("TZ", tz)
        time.tzset()
        assert raw.image_info(path)["taken"] == "2021-06-01T12:30:05"
    monkeypatch.delenv("TZ")
    time.tzset()
    assert kinds.kind_of(path).info(path) == raw.image_info(path)


# ------------------------------------------------------------------------------------------ bad files


def _one_line_error(excinfo) -> str:
    text = str(excinfo.value)
    assert text and "\n" not in text and len(text) <= 200
    return text


def test_truncated_raw_is_a_decode_error(tmp_path):
    data = write_dng(tmp_path / "a.dng", _scene()).read_bytes()
    path = tmp_path / "cut.dng"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DecodeError) as excinfo:
        raw.load_raw(path)
    assert _one_line_error(excinfo) == "truncated or unreadable RAW data"


def test_truncated_raw_data_with_intact_preview_still_reads(tmp_path):
    rgb = _scene()
    data = write_dng(tmp_path / "a.dng", rgb, preview=_small(rgb, 450, 300)).read_bytes()
    path = tmp_path / "cut.dng"
    path.write_bytes(data[: len(data) - 1000])  # the raw data come after the preview
    out = _decode(path)
    assert out.source == "preview"
    with pytest.raises(DecodeError):
        raw.decode_raw(path.read_bytes(), preview_min_side=10_000)  # the raw data themselves are damaged


def test_not_a_raw_file_is_a_decode_error(tmp_path):
    path = tmp_path / "fake.nef"
    path.write_bytes(b"this is not a camera file " * 50)
    with pytest.raises(DecodeError) as excinfo:
        raw.load_raw(path)
    assert _one_line_error(excinfo) == "unsupported or not a RAW file"


def test_jpeg_renamed_to_raw_is_not_read_as_raw(tmp_path):
    path = tmp_path / "photo.cr2"
    path.write_bytes(jpeg_bytes(_scene()))
    with pytest.raises(DecodeError) as excinfo:
        raw.load_raw(path)
    _one_line_error(excinfo)


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.arw"
    empty.write_bytes(b"")
    with pytest.raises(DecodeError, match="^empty file$"):
        raw.load_raw(empty)
    with pytest.raises(DecodeError, match="No such file"):
        raw.load_raw(tmp_path / "missing.arw")


def test_without_rawpy_a_raw_is_a_decode_error(tmp_path, monkeypatch):
    path = write_dng(tmp_path / "a.dng", _scene())
    monkeypatch.setitem(extras._loaded, "rawpy", ImportError("No module named 'rawpy'"))
    assert raw.available() is False
    with pytest.raises(DecodeError, match=r"RAW support is not installed \(pip install 'novelfind\[raw\]'\)"):
        raw.load_raw(path)


# ------------------------------------------------------------------------------------------ for the model


def test_read_for_model_matches_decode_contract(tmp_path):
    rgb = _scene()
    path = write_dng(tmp_path / "a.dng", rgb, preview=_small(rgb, 450, 300))
    digest, pixels = raw.read_for_model(path)
    assert digest == decode.file_digest(path.read_bytes())
    assert pixels.shape == (decode.INPUT_SIZE, decode.INPUT_SIZE, 3) and pixels.dtype == np.uint8
    expected = decode.to_model_input(raw.load_raw(path))
    assert np.array_equal(pixels, expected)
    assert raw.read_for_model(path, known={digest}) == (digest, None)


def test_preview_and_demosaic_feed_the_model_similar_pixels(tmp_path):
    rgb = _scene()
    _, fast = raw.read_for_model(write_dng(tmp_path / "p.dng", rgb, preview=_small(rgb, 450, 300)))
    _, slow = raw.read_for_model(write_dng(tmp_path / "n.dng", rgb))
    # same scene, two developments: the layout agrees cell by cell
    assert _grid(Image.fromarray(fast)) == _grid(Image.fromarray(slow))
