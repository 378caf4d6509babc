"""Moments a person recognises, in a dated library: an odd evening of a dozen alike photos is one pick,
an odd photo dropped into an ordinary day stays a pick of its own and takes no one with it, and a burst
is one pick whatever the method. On feature vectors (``synthetic.dated_library``, several seeds, every
method), and once through ``novelfind scan`` on real pictures with EXIF dates and the real model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from synthetic import dated_library

import novelfind
from novelfind.ranking.methods import METHODS


def _moments(r) -> list[set[int]]:
    return [{int(p), *m.tolist()} for p, m in zip(r.indices, r.members, strict=True)]


def _holding(moments: list[set[int]], rows) -> list[int]:
    """Positions of the moments that hold any of ``rows``."""
    rows = set(np.asarray(rows).tolist())
    return [j for j, m in enumerate(moments) if m & rows]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("method", ["cosine-knn", "event-knn"])
def test_an_odd_evening_is_one_pick_and_an_odd_photo_of_an_ordinary_day_stays_alone(seed, method):
    x, t, kinds = dated_library(seed)
    evening = np.flatnonzero(kinds == "evening")
    untimed = _moments(novelfind.rank(x, 12, method=method))
    assert len(_holding(untimed, evening)) >= 3  # by content alone the evening is several picks
    moments = _moments(novelfind.rank(x, 12, method=method, times=t))
    (j,) = _holding(moments, evening)
    assert moments[j] == set(evening.tolist())  # the whole evening, nothing else
    for kind in ("astronaut", "odd_same_day"):
        (row,) = np.flatnonzero(kinds == kind)
        (k,) = _holding(moments, [row])
        assert moments[k] == {row}, kind  # picked, alone: it absorbed no one and joined no one


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_burst_is_one_pick_under_every_method(method):
    """Five frames a second apart, about 0.2 apart in content (beyond the link radius): one pick with
    four members once the dates are known, under every method."""
    for seed in range(2):
        x, t, kinds = dated_library(seed)
        burst = np.flatnonzero(kinds == "burst")
        r = novelfind.rank(x, len(x), method=method, times=t)
        moments = _moments(r)
        (j,) = _holding(moments, burst)
        assert moments[j] >= set(burst.tolist()), (method, seed)
        assert r.spans is not None and r.spans[j, 1] - r.spans[j, 0] == 4.0  # first to last frame


# --------------------------------------------------------------------------- through the command line


def _dated_jpeg(image, path: Path, when: str) -> None:
    from PIL import Image

    exif = Image.Exif()
    exif.get_ifd(0x8769)[0x9003] = when  # DateTimeOriginal
    image.save(path, "JPEG", quality=90, exif=exif.tobytes())


@pytest.fixture(scope="module")
def dated_photos(tmp_path_factory) -> Path:
    """71 real pictures with capture dates: six ordinary days of campus and flower-bed views (8 a day,
    09:00-18:00); on 4 June an evening of 13 aerial views, 20:05-20:53; an astronaut dropped into 6 June;
    a burst of 5 frames of one view, a second apart, on 8 June; four more odd pictures on other days."""
    from photosets import burst_frame, load_sources, photo_jitter, random_crop

    src = load_sources()
    rng = np.random.default_rng(0)
    dest = tmp_path_factory.mktemp("dated")
    scenes = src.mvtb["campus"][:6] + src.mvtb["flowers"][:3]
    for day in range(6):
        for i, sec in enumerate(np.sort(rng.uniform(9 * 3600, 18 * 3600, 8)).astype(int)):
            view = photo_jitter(
                rng, random_crop(rng, scenes[int(rng.integers(len(scenes)))], (0.5, 0.95)), 0.6
            )
            when = f"2024:06:{day + 1:02d} {sec // 3600:02d}:{sec % 3600 // 60:02d}:{sec % 60:02d}"
            _dated_jpeg(view, dest / f"day{day:02d}_{i:02d}.jpg", when)
    aerial = src.mvtb["aerial"]
    for i in range(13):
        view = photo_jitter(rng, random_crop(rng, aerial[i % len(aerial)], (0.4, 0.9)), 0.6)
        _dated_jpeg(view, dest / f"aerial_{i:02d}.jpg", f"2024:06:04 20:{5 + 4 * i:02d}:00")
    astronaut = photo_jitter(rng, random_crop(rng, src.skimage["astronaut"], (0.85, 1.0)), 0.3)
    _dated_jpeg(astronaut, dest / "astronaut.jpg", "2024:06:06 13:00:00")
    w, h = scenes[2].size
    side = int(min(w, h) * 0.7)
    box = (int(rng.integers(0, w - side)), int(rng.integers(0, h - side)), side)
    for i in range(5):
        _dated_jpeg(burst_frame(rng, scenes[2], box), dest / f"burst_{i}.jpg", f"2024:06:08 11:00:{i:02d}")
    for j, name in enumerate(["rocket", "coffee", "chelsea", "horse"]):
        view = photo_jitter(rng, random_crop(rng, src.skimage[name], (0.85, 1.0)), 0.3)
        _dated_jpeg(view, dest / f"odd_{name}.jpg", f"2024:06:{2 * j + 2:02d} 15:3{j}:00")
    return dest


def _scan(folder: Path, *args) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "novelfind", "scan", folder, "--k", "1000", "-q", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_a_scan_of_dated_photos_shows_the_evening_and_the_burst_as_one_pick_each(dated_photos, tmp_path):
    """The default method, every photo listed in JSON: the evening is one pick of 13 photos with its
    span, the burst one pick of 5, the astronaut a pick alone. Then event-knn from the same cache, in the
    default tsv: one line per pick, the evening's and the burst's with their member counts and spans."""
    cache = tmp_path / "features.sqlite"
    picks = json.loads(_scan(dated_photos, "--cache", cache, "--format", "json"))["picks"]
    moments = [[Path(p).name for p in (pick["path"], *pick["members"])] for pick in picks]
    (aerial,) = [m for m in moments if any(n.startswith("aerial_") for n in m)]
    assert sorted(aerial) == [f"aerial_{i:02d}.jpg" for i in range(13)]
    (burst,) = [m for m in moments if any(n.startswith("burst_") for n in m)]
    assert sorted(burst) == [f"burst_{i}.jpg" for i in range(5)]
    assert ["astronaut.jpg"] in moments  # a pick of its own, with no member
    evening = next(p for p in picks if Path(p["path"]).name.startswith("aerial_"))
    assert evening["span"] == {"first": "2024-06-04T20:05:00", "last": "2024-06-04T20:53:00", "photos": 13}

    lines = [
        line.split("\t")
        for line in _scan(dated_photos, "--cache", cache, "--method", "event-knn").splitlines()
    ]
    assert sum(int(line[3]) + 1 for line in lines) == 71  # every photo once: a pick or a member
    by_name = {Path(line[2]).name: line[3:] for line in lines}
    (evening_line,) = [v for name, v in by_name.items() if name.startswith("aerial_")]
    # member_count, taken (the representative's), span (FIRST/LAST)
    assert evening_line[0] == "12" and evening_line[1].startswith("2024-06-04T20:")
    assert evening_line[2] == "2024-06-04T20:05:00/2024-06-04T20:53:00"
    (burst_line,) = [v for name, v in by_name.items() if name.startswith("burst_")]
    assert burst_line[0] == "4" and burst_line[2] == "2024-06-08T11:00:00/2024-06-08T11:00:04"
    assert by_name["astronaut.jpg"][0] == "0" and by_name["astronaut.jpg"][1].startswith(
        "2024-06-06T13:00:00"
    )
    assert by_name["astronaut.jpg"][2] == "2024-06-06T13:00:00/2024-06-06T13:00:00"
