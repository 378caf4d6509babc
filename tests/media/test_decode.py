"""decode.py: orientation, modes, reduced decode, model input geometry, failures, image_info."""

from __future__ import annotations

import hashlib
import os
import pickle
import tracemalloc
import warnings

import numpy as np
import pytest
from common import missing_prerequisite
from PIL import Image

from novelfind.errors import DecodeError
from novelfind.media import decode
from novelfind.media.decode import INPUT_SIZE, image_info, load_image, read_for_model, to_model_input


def _quadrants(w: int = 40, h: int = 20) -> Image.Image:
    """Left half red, right half blue."""
    a = np.zeros((h, w, 3), np.uint8)
    a[:, : w // 2] = (255, 0, 0)
    a[:, w // 2 :] = (0, 0, 255)
    return Image.fromarray(a)


def _photo(w: int, h: int, seed: int = 0) -> Image.Image:
    """Smooth gradients plus mild noise: resizes like a photo, compresses like one."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    a = np.stack([xx / w * 255, yy / h * 255, (np.sin(xx / 37) + np.cos(yy / 23)) * 60 + 128], -1)
    a += rng.normal(0, 4, a.shape)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def test_exif_orientation_applied(tmp_path):
    path = tmp_path / "rot.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, displayed rotated 90 degrees clockwise
    _quadrants().save(path, quality=95, exif=exif.tobytes())
    img = load_image(path)
    assert img.size == (20, 40)
    a = np.asarray(img)
    assert a[2, 10, 0] > 200 and a[2, 10, 2] < 60  # red now on top
    assert a[-3, 10, 2] > 200 and a[-3, 10, 0] < 60  # blue at the bottom


@pytest.mark.parametrize("mode", ["CMYK", "P", "L", "1", "LA", "RGBA", "I;16", "I", "F", "YCbCr"])
def test_any_mode_to_rgb(tmp_path, mode):
    img = _quadrants().convert("RGB")
    if mode in ("I;16", "I", "F"):
        img = img.convert("L").convert(mode) if mode != "I;16" else Image.new("I;16", (40, 20), 0)
    else:
        img = img.convert(mode)
    out = decode._to_rgb(img)
    assert out.mode == "RGB" and out.size == (40, 20)


def test_alpha_composited_on_white(tmp_path):
    a = np.zeros((10, 10, 4), np.uint8)
    a[..., 0] = 255  # red, fully transparent on the left half
    a[:, 5:, 3] = 255
    path = tmp_path / "alpha.png"
    Image.fromarray(a, "RGBA").save(path)
    px = np.asarray(load_image(path))
    assert tuple(px[0, 0]) == (255, 255, 255)
    assert tuple(px[0, 9]) == (255, 0, 0)


def test_palette_transparency_on_white(tmp_path):
    img = Image.new("P", (8, 8), 0)
    img.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    img.paste(1, (4, 0, 8, 8))
    path = tmp_path / "p.gif"
    img.save(path, transparency=0)
    px = np.asarray(load_image(path))
    assert tuple(px[0, 0]) == (255, 255, 255) and tuple(px[0, 7]) == (255, 0, 0)


def test_16_bit_scaled_to_8_bit(tmp_path):
    a = np.full((8, 8), 65535, np.uint16)
    a[:, :4] = 32896  # 128 * 257
    path = tmp_path / "deep.png"
    Image.fromarray(a).save(path)
    px = np.asarray(load_image(path))
    assert px[0, 7].tolist() == [255, 255, 255]
    assert px[0, 0].tolist() == [128, 128, 128]


@pytest.mark.parametrize("mode", ["I;16", "I", "F"])
def test_deep_greyscale_is_converted_in_bands_with_no_full_size_temporary(monkeypatch, mode):
    """A 200 MP 16-bit scan is within the default budget: its conversion holds one byte a pixel beyond the
    image (the 8-bit result), never a float64 copy of it (1.6 GB there), whatever the mode."""
    w, h = 1500, 1000
    rng = np.random.default_rng(0)
    values = rng.integers(0, 65536, (h, w))
    img = Image.fromarray(values.astype({"I;16": np.uint16, "I": np.int32, "F": np.float32}[mode]))
    assert img.mode == mode
    monkeypatch.setattr(decode, "GREY_BAND_PIXELS", 1 << 12, raising=False)  # 3 rows of 1500
    tracemalloc.start()
    try:
        rgb = decode._to_rgb(img)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.25 * w * h, peak / (w * h)  # bytes a pixel: the uint8 result, a band's temporaries
    expected = np.clip(values, 0, 255) if mode == "F" else (values + 128) // 257
    assert np.array_equal(np.asarray(rgb)[..., 1], expected), mode


def test_animated_gif_first_frame(tmp_path):
    frames = [Image.new("RGB", (16, 16), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50, loop=0)
    px = np.asarray(load_image(path))
    assert px[8, 8, 0] > 200 and px[8, 8, 1] < 50


def test_large_jpeg_reduced_decode(tmp_path):
    path = tmp_path / "big.jpg"
    _photo(3000, 2000).save(path, quality=90)
    img = load_image(path)
    assert min(img.size) >= 256  # never below the model's resize size
    assert img.size == (750, 500)  # 1/4 scale: 1/8 would give a 250-pixel short side
    small = tmp_path / "small.jpg"
    _photo(400, 300).save(small, quality=90)
    assert load_image(small).size == (400, 300)  # not worth reducing


def test_reduced_decode_close_to_full_decode_reference(tmp_path):
    """Reduced-scale decode + our resize/crop vs torchvision's IMAGENET1K_V1 transform on a full decode."""
    import torch
    from torchvision.models import MobileNet_V2_Weights

    path = tmp_path / "big.jpg"
    _photo(1600, 1200, seed=3).save(path, quality=92)  # decoded at 1/4 scale: 400x300
    _, ours = read_for_model(path)
    transform = MobileNet_V2_Weights.IMAGENET1K_V1.transforms()
    ref = transform(Image.open(path).convert("RGB"))  # (3, 224, 224) normalised
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    ref_px = ((ref * std + mean) * 255).permute(1, 2, 0).numpy()  # (224, 224, 3) 0..255
    diff = np.abs(ours.astype(np.float32) - ref_px)
    assert diff.mean() < 2.0, diff.mean()


def test_to_model_input_matches_torchvision_geometry():
    import torch
    from torchvision.models import MobileNet_V2_Weights

    img = _photo(333, 517, seed=1)  # odd sizes: exercises truncation and crop rounding
    ours = to_model_input(img)
    assert ours.shape == (INPUT_SIZE, INPUT_SIZE, 3) and ours.dtype == np.uint8
    ref = MobileNet_V2_Weights.IMAGENET1K_V1.transforms()(img)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    ref_px = ((ref * std + mean) * 255).permute(1, 2, 0).numpy()
    assert np.abs(ours - ref_px).mean() < 1.0
    # a 1-pixel shift of the crop would be far off on this gradient image
    assert np.abs(ours[:, 1:].astype(np.float32) - ref_px[:, :-1]).mean() > np.abs(ours - ref_px).mean()


def test_crop_only_resize_matches_full_resize_then_crop():
    """Resampling only the crop's source box gives the pixels of a full resize + crop (within 1 level)."""
    rng = np.random.default_rng(7)
    for w, h in [(333, 517), (640, 480), (257, 256), (100, 80), (3, 5), (300, 2), (1000, 999), (224, 224)]:
        img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        new_w, new_h = (256, max(1, int(256 * h / w))) if w <= h else (max(1, int(256 * w / h)), 256)
        full = img.resize((new_w, new_h), Image.Resampling.BILINEAR) if (new_w, new_h) != (w, h) else img
        top, left = int(round((new_h - 224) / 2.0)), int(round((new_w - 224) / 2.0))
        ref = np.asarray(full.crop((left, top, left + 224, top + 224)), dtype=np.int16)
        assert np.abs(to_model_input(img).astype(np.int16) - ref).max() <= 1, (w, h)


def test_very_thin_image_is_cheap(tmp_path):
    """A 1x20000 PNG: resizing the whole image to a 256 short side would need ~5 GB; the crop needs 150 KB.

    Memory is the claim here; scripts/bench_reliability.py times it.
    """
    import json
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "thin.png"
    a = np.zeros((20000, 1, 3), np.uint8)
    a[:, 0, 0] = np.arange(20000) % 256
    Image.fromarray(a).save(path)
    # a fresh process, so its peak RSS is this decode's and not an earlier test's
    code = textwrap.dedent(
        f"""
        import json
        from novelfind.media.decode import read_for_model
        def peak_kb():  # this process's own high-water mark (ru_maxrss includes the parent's)
            with open("/proc/self/status") as status:
                return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        before = peak_kb()
        _, px = read_for_model({str(path)!r})
        grown_kb = peak_kb() - before
        print(json.dumps([list(px.shape), str(px.dtype), grown_kb]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    shape, dtype, grown_kb = json.loads(out.stdout.strip().splitlines()[-1])
    assert shape == [224, 224, 3] and dtype == "uint8"
    assert grown_kb < 50_000, f"peak RSS grew by {grown_kb / 1024:.0f} MB"
    # in-process too: the same call returns the centre of the strip
    _, px = read_for_model(path)
    assert px.shape == (224, 224, 3)
    assert px[:, :, 1:].max() == 0  # green and blue stay 0


def test_read_for_model_digest_and_pickle(tmp_path):
    path = tmp_path / "a.png"
    _photo(300, 260).save(path)
    digest, px = read_for_model(path)
    assert digest == hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
    assert px.shape == (224, 224, 3) and px.dtype == np.uint8
    assert pickle.loads(pickle.dumps(read_for_model)) is read_for_model


@pytest.mark.parametrize(
    "content, reason",
    [(b"", "empty file"), (b"hello, not an image", "not a recognised image format")],
)
def test_bad_files_raise_decode_error(tmp_path, content, reason):
    path = tmp_path / "bad.jpg"
    path.write_bytes(content)
    with pytest.raises(DecodeError, match=reason):
        read_for_model(path)


def test_truncated_and_missing(tmp_path):
    path = tmp_path / "cut.jpg"
    _photo(600, 400).save(path, quality=90)
    path.write_bytes(path.read_bytes()[:3000])
    with pytest.raises(DecodeError):
        load_image(path)
    with pytest.raises(DecodeError, match="No such file"):
        read_for_model(tmp_path / "missing.jpg")


def test_decompression_bomb_refused(tmp_path, monkeypatch):
    path = tmp_path / "bomb.png"
    Image.new("RGB", (60, 30)).save(path)  # 1800 pixels
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # warning zone (1000..2000) is an error too
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DecodeError, match="too many pixels"):
            load_image(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)  # Pillow's own error zone
    with pytest.raises(DecodeError, match="too many pixels"):
        load_image(path)


def test_heic_uses_thumbnail_when_large_enough(tmp_path):
    try:
        import pillow_heif
    except ImportError:
        missing_prerequisite("pillow-heif is not installed")
    if not pillow_heif.libheif_info().get("HEIF"):
        missing_prerequisite("pillow-heif has no HEIF encoder")
    path = tmp_path / "photo.heic"
    pillow_heif.from_pillow(_photo(800, 600)).save(path, quality=60, thumbnails=[400])
    img = load_image(path)
    assert img.mode == "RGB"
    assert img.size == (400, 300)  # the thumbnail (short side >= 256), not the full image
    digest, px = read_for_model(path)
    assert px.shape == (224, 224, 3)


def test_image_info(tmp_path):
    path = tmp_path / "cam.jpg"
    exif = Image.Exif()
    exif[0x0112] = 8
    exif.get_ifd(0x8769)[0x9003] = "2021:06:01 12:30:05"
    _quadrants(50, 30).save(path, exif=exif.tobytes())
    assert image_info(path) == {"width": 30, "height": 50, "taken": "2021-06-01T12:30:05"}
    plain = tmp_path / "plain.png"
    _quadrants().save(plain)
    assert image_info(plain) == {"width": 40, "height": 20, "taken": None}
    junk = tmp_path / "junk.jpg"
    junk.write_bytes(b"junk")
    assert image_info(junk) == {"width": None, "height": None, "taken": None}


def test_a_file_not_as_listed_is_refused_apart_from_one_that_cannot_be_read(tmp_path):
    """``read_bytes`` through the library door: what the door refuses (a link, a FIFO, another size or
    time than ``expect``) is ``FileRefused``, which the outputs name; a missing file a plain DecodeError."""
    from novelfind.errors import FileRefused

    photo = tmp_path / "a.png"
    Image.new("RGB", (40, 30), (200, 30, 30)).save(photo)
    st = photo.stat()
    listed = (st.st_size, st.st_mtime_ns)
    assert decode.read_bytes(photo, expect=listed) == photo.read_bytes()
    with pytest.raises(FileRefused, match="changed since it was listed"):
        decode.read_bytes(photo, expect=(st.st_size + 1, st.st_mtime_ns))
    with pytest.raises(FileRefused, match="changed since it was listed"):
        load_image(photo, min_side=16, expect=(st.st_size, st.st_mtime_ns + 1))
    link = tmp_path / "link.png"
    link.symlink_to(photo)
    with pytest.raises(FileRefused, match="symbolic link"):
        decode.read_bytes(link)
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    with pytest.raises(FileRefused, match="not a regular file"):
        decode.read_bytes(fifo)
    with pytest.raises(DecodeError) as gone:
        decode.read_bytes(tmp_path / "gone.png")
    assert not isinstance(gone.value, FileRefused)


def test_image_info_reads_nothing_of_a_file_not_as_ranked(tmp_path):
    photo = tmp_path / "a.png"
    Image.new("RGB", (40, 30), (200, 30, 30)).save(photo)
    st = photo.stat()
    assert image_info(photo, expect=(st.st_size, st.st_mtime_ns))["width"] == 40
    assert image_info(photo, expect=(st.st_size - 1, st.st_mtime_ns)) == {
        "width": None,
        "height": None,
        "taken": None,
    }
