"""Valid but hostile photos (tests/hostile.py): each gives the right pixels, in bounded memory.

Pixels are checked, not just the shape: the colour of the first frame or page, and for every EXIF
orientation the four coloured quadrants where an upright photo has them. Memory is checked as the
growth of a fresh process's peak RSS; work as the frames a decode touches. Timings are in
scripts/bench_reliability.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import child_env, rank_all_as_json
from hostile import BLUE, GREEN, RED, WHITE, Hostile, build_all

from novelfind.decode import image_info, load_image, read_for_model

ROOT = Path(__file__).resolve().parents[1]
FAKE_CLI = ROOT / "tests" / "fake_cli.py"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, Hostile]:
    cases = build_all(tmp_path_factory.mktemp("hostile"))
    return {os.fsencode(c.path.name).decode("latin-1"): c for c in cases}


def close(pixel, colour, tolerance: int = 12) -> bool:
    return bool(np.all(np.abs(np.asarray(pixel, int) - np.asarray(colour, int)) <= tolerance))


SOLID = [
    "strip-1x100000.png",
    "strip-100000x1.png",
    "frames-10000.gif",
    "pages-1000.tif",
    "rgb16.png",
    "rgba16.png",
    "grey16.png",
    "grey16.tif",
    "cmyk.jpg",
    "cmyk.tif",
    "lab.tif",
    "big-ztxt.png",
    "big-itxt.png",
    "big-iccp.png",
    "\xe9t\xe9.jpg",  # Latin-1 bytes, not UTF-8
]


@pytest.mark.parametrize("name", SOLID)
def test_solid_colour_cases_give_their_colour(hostile, name):
    case = hostile[name]
    digest, px = read_for_model(case.path)
    assert len(digest) == 32
    assert px.shape == (224, 224, 3) and px.dtype == np.uint8
    for y, x in ((5, 5), (112, 112), (218, 218)):
        assert close(px[y, x], case.colour), (name, px[y, x].tolist(), case.colour)


ORIENTED = [f"orientation-{o}.jpg" for o in range(1, 9)]
ORIENTED += [f"orientation-{o}.{suffix}" for o in (3, 6, 8) for suffix in ("png", "webp", "tif")]


@pytest.mark.parametrize("name", ORIENTED)
def test_every_exif_orientation_comes_out_upright(hostile, name):
    case = hostile[name]
    _, px = read_for_model(case.path)
    corners = {
        "top-left": px[30, 30],
        "top-right": px[30, 194],
        "bottom-left": px[194, 30],
        "bottom-right": px[194, 194],
    }
    for (where, pixel), colour in zip(corners.items(), (RED, GREEN, BLUE, WHITE), strict=True):
        assert close(pixel, colour, 24), (name, where, pixel.tolist())
    thumb = load_image(case.path, min_side=32)  # what the HTML report shows
    assert thumb.size[0] > thumb.size[1]  # landscape, as displayed
    assert close(thumb.getpixel((2, 2)), RED, 24)
    info = image_info(case.path)
    assert (info["width"], info["height"]) == case.displayed


def test_many_frames_and_pages_decode_only_the_first(hostile, monkeypatch):
    """A 10,000-frame GIF and a 1,000-page TIFF: the decode never seeks past frame 1 (the check
    whether the file is animated), so its work does not grow with the number of frames."""
    from PIL import GifImagePlugin, TiffImagePlugin

    frames: list[int] = []
    for cls in (GifImagePlugin.GifImageFile, TiffImagePlugin.TiffImageFile):
        real_seek = cls._seek

        def seek(self, frame, *args, _real=real_seek, **kwargs):
            frames.append(frame)
            return _real(self, frame, *args, **kwargs)

        monkeypatch.setattr(cls, "_seek", seek)
    for name in ("frames-10000.gif", "pages-1000.tif"):
        frames.clear()
        _, px = read_for_model(hostile[name].path)
        assert close(px[112, 112], RED)
        assert frames and max(frames) <= 1, (name, sorted(set(frames))[-5:])


_PEAK_SCRIPT = """
import json, sys
from novelfind.decode import read_for_model
def peak_kb():  # this process's own high-water mark (ru_maxrss would include the parent's, inherited)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
before = peak_kb()
read_for_model(sys.argv[1])
print(json.dumps(peak_kb() - before))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "limit_mb"),
    [
        ("strip-1x100000.png", 40),  # the whole strip is 0.3 MB; a full resize would need ~20 GB
        ("strip-100000x1.png", 40),
        ("frames-10000.gif", 40),
        ("pages-1000.tif", 40),
        ("big-ztxt.png", 40),  # each inflates to 100 MB: Pillow stops at 1 MB, the retry drops it
        ("big-itxt.png", 40),
        ("big-iccp.png", 40),
    ],
)
def test_peak_memory_of_one_decode_is_bounded(hostile, name, limit_mb):
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, hostile[name].path],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    grown_kb = json.loads(out.stdout.splitlines()[-1])
    assert grown_kb < limit_mb * 1024, f"{name}: peak RSS grew by {grown_kb / 1024:.0f} MB"


@pytest.mark.slow
def test_a_scan_of_the_hostile_folder_ranks_every_photo(hostile, tmp_path):
    folder = next(iter(hostile.values())).path.parent
    env = child_env(tmp_path)
    args = rank_all_as_json(folder, "--cache", tmp_path / "c.sqlite")
    proc = subprocess.run([sys.executable, str(FAKE_CLI), *args], capture_output=True, env=env, timeout=600)
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    doc = json.loads(proc.stdout.decode("utf-8", "surrogateescape"))  # file-name bytes as they are
    assert doc["failures"] == []
    assert {os.fsencode(p["path"]) for p in doc["picks"]} == {os.fsencode(c.path) for c in hostile.values()}
