"""Labelled sets built from package images (needs the pinned foolbox and mvtb-data wheels: fetched on first
use)."""

from __future__ import annotations

import copy
import hashlib

import numpy as np
import photosets
import pytest
from common import missing_prerequisite
from PIL import Image
from quality import pins

# Resolved at import, before the autouse fixture points XDG_CACHE_HOME at a temp folder, so the
# wheels (foolbox 1.7 MB, mvtb-data 130 MB) are downloaded once per machine, not once per test.
DATA_CACHE = photosets.data_dir()


@pytest.fixture(scope="module")
def src():
    try:
        return photosets.load_sources(DATA_CACHE)
    except pins.ChecksumError:  # a source that differs from its pin is a fault, never a skip
        raise
    except RuntimeError as e:  # no PyPI access and no cached wheels
        missing_prerequisite(str(e))


def test_data_folder_is_named_by_the_environment_or_under_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xc"))
    assert photosets.data_dir() == tmp_path / "xc" / "novelfind-data"
    monkeypatch.setenv("NOVELFIND_DATA", str(tmp_path / "data"))
    assert photosets.data_dir() == tmp_path / "data"


def test_unknown_set_is_refused():
    with pytest.raises(ValueError, match="unknown set 'nope'"):
        photosets.build_set("nope")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mnist", "defects", "bursts"])
def test_sets_are_reproducible_and_labelled(src, name):
    a = photosets.build_set(name, seed=3, src=src)
    b = photosets.build_set(name, seed=3, src=src)
    c = photosets.build_set(name, seed=4, src=src)
    assert len(a) == len(a.labels) == len(a.groups) == len(a.kinds)
    assert 5 <= a.k < len(a) // 10
    assert all(im.size == (photosets.SIDE, photosets.SIDE) and im.mode == "RGB" for im in a.images[:20])
    assert np.array_equal(a.labels, b.labels)
    pairs = zip(a.images[:10], b.images[:10], strict=True)
    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in pairs)
    assert not np.array_equal(np.asarray(a.images[0]), np.asarray(c.images[0]))


def test_one_class_sets_have_one_novelty_per_other_class(src):
    s = photosets.build_set("mnist", seed=0, src=src)
    novel_kinds = [k for k, lab in zip(s.kinds, s.labels, strict=True) if lab]
    others = sorted({f"mnist{lab}" for lab, _ in src.foolbox["mnist"]} - {"mnist9"})
    assert sorted(novel_kinds) == others and len(others) >= 7
    assert {k for k, lab in zip(s.kinds, s.labels, strict=True) if not lab} == {"mnist9"}


def test_bursts_are_near_identical_and_never_novel(src):
    s = photosets.build_set("bursts", seed=0, src=src)
    assert (s.groups[s.labels] == -1).all()  # novelties are single shots
    ids, counts = np.unique(s.groups[s.groups >= 0], return_counts=True)
    assert len(ids) >= 20 and counts.min() >= 2
    frames = [np.asarray(s.images[i], dtype=np.float32) for i in np.flatnonzero(s.groups == ids[0])[:2]]
    other = np.asarray(s.images[int(np.flatnonzero(s.groups == ids[1])[0])], dtype=np.float32)
    assert np.abs(frames[0] - frames[1]).mean() < np.abs(frames[0] - other).mean()


def test_defects_change_few_pixels(src):
    rng = np.random.default_rng(0)
    base = photosets.random_crop(rng, src.skimage["brick"])
    bad = photosets.plant_defect(rng, base)
    diff = np.abs(np.asarray(bad, dtype=np.int16) - np.asarray(base, dtype=np.int16)).max(axis=2) > 10
    assert 0.001 < diff.mean() < 0.15


def test_example_set_writes_jpegs(src, tmp_path):
    s = photosets.example_set(src=src)
    assert s.k == 5 and len(s) == 80
    paths = photosets.write_set(s, tmp_path / "photos")
    assert len(paths) == 80 and all(p.suffix == ".jpg" for p in paths)
    with Image.open(paths[0]) as im:
        assert im.size == (photosets.SIDE, photosets.SIDE)


def test_missing_wheel_is_downloaded_into_the_cache(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, cwd, capture_output, text):
        calls.append(cmd)
        dest = cwd / cmd[cmd.index("-d") + 1]
        (dest / pins.pin("pypi", "foolbox").file).write_bytes(b"zip")

        class P:
            returncode = 0
            stderr = ""

        return P()

    # the fake download is "zip": pin foolbox to that (the real pin is checked in test_quality_sets)
    table = copy.deepcopy(pins.table())
    table["pypi"]["foolbox"]["sha256"] = hashlib.sha256(b"zip").hexdigest()
    monkeypatch.setattr(pins, "table", lambda: table)
    monkeypatch.setattr(pins.subprocess, "run", fake_run)
    p = photosets.wheel_path("foolbox", tmp_path)
    assert p == tmp_path / "foolbox-3.3.4-py3-none-any.whl"
    assert "foolbox==3.3.4" in calls[0] and "--no-deps" in calls[0]
    photosets.wheel_path("foolbox", tmp_path)  # cached: no second download
    assert len(calls) == 1
