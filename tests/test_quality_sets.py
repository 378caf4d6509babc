"""The labelled sets of the quality benchmark (scripts/quality): reproducible, independent per seed, and
without any cue besides content (every picture, ordinary or novel, leaves through the same last step)."""

from __future__ import annotations

import hashlib
import io
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from quality import sets  # noqa: E402

SMALL = [*sets.SPLITS["dev"], *sets.SPLITS["test"]]
LIBRARY = [*sets.SPLITS["dev-library"], *sets.SPLITS["test-library"]]


def _sample(s: sets.LabelledSet, per_label: int = 5) -> list[int]:
    lab = s.labels
    return [*np.flatnonzero(lab)[:per_label], *np.flatnonzero(~lab)[:per_label]]


def _luma_tables() -> dict[tuple[int, ...], int]:
    """Luma quantisation table -> JPEG quality, for every quality ``finish`` may use."""
    out = {}
    for q in range(1, 101):
        buf = io.BytesIO()
        Image.new("RGB", (16, 16), (90, 120, 150)).save(buf, "JPEG", quality=q)
        with Image.open(buf) as im:
            out.setdefault(tuple(im.quantization[0]), q)
    return out


def test_split_is_fixed_disjoint_and_covers_every_kind():
    dev = set(sets.SPLITS["dev"]) | set(sets.SPLITS["dev-library"])
    test = set(sets.SPLITS["test"]) | set(sets.SPLITS["test-library"])
    assert not dev & test
    assert dev | test == set(sets.SETS)
    assert len(sets.SPLITS["test"]) >= 7 and len(sets.SPLITS["test-library"]) >= 2
    for kind, (d, t) in sets.PAIRS.items():
        assert d in dev and t in test, kind


@pytest.mark.parametrize("name", SMALL)
def test_same_seed_same_pictures(name):
    a, b = sets.build(name, 3), sets.build(name, 3)
    assert np.array_equal(a.labels, b.labels) and a.kinds == b.kinds
    for i in _sample(a, 2):
        assert a.jpeg(i) == b.jpeg(i)


@pytest.mark.parametrize("name", SMALL)
def test_seeds_are_independent_draws(name):
    a, b = sets.build(name, 0), sets.build(name, 1)
    assert a.k >= 10 and len(a) >= 150
    assert not np.array_equal(a.labels, b.labels)  # other positions
    novel_a = sorted(k for k, lab in zip(a.kinds, a.labels, strict=False) if lab)
    novel_b = sorted(k for k, lab in zip(b.kinds, b.labels, strict=False) if lab)
    if not name.startswith("digits"):  # digits: the novelties are classes, the samples differ below
        assert novel_a != novel_b  # other source pictures
    ha = {hashlib.sha1(a.jpeg(i)).hexdigest() for i in _sample(a, 4)}
    hb = {hashlib.sha1(b.jpeg(i)).hexdigest() for i in _sample(b, 4)}
    assert not ha & hb


def test_no_cue_besides_content():
    """Same size, mode, chroma subsampling and JPEG quality distribution for novel and ordinary pictures."""
    tables = _luma_tables()
    quality = {True: [], False: []}
    for name in SMALL:
        s = sets.build(name, 0)
        for i in _sample(s, 6):
            data = s.jpeg(i)
            with Image.open(io.BytesIO(data)) as im:
                assert im.format == "JPEG" and im.mode == "RGB" and im.size == (sets.SIDE, sets.SIDE)
                assert im.layer == [(1, 2, 2, 0), (2, 1, 1, 1), (3, 1, 1, 1)]  # 4:2:0, like every other
                q = tables[tuple(im.quantization[0])]
            assert sets.JPEG_QUALITY[0] <= q < sets.JPEG_QUALITY[1]
            quality[bool(s.labels[i])].append(q)
    from scipy.stats import mannwhitneyu

    assert len(quality[True]) == len(quality[False]) == 6 * len(SMALL)
    assert mannwhitneyu(quality[True], quality[False]).pvalue > 1e-3


def test_finish_is_label_blind():
    """The last step's draws (mirror, exposure, noise, quality) depend on the seed only, not on the label."""
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    im = Image.new("RGB", (300, 300), (120, 130, 140))
    assert sets.finish(rng_a, im) == sets.finish(rng_b, im)


@pytest.mark.parametrize("name", LIBRARY)
def test_library_sets_have_library_size(name):
    s = sets.build(name, 0)
    assert len(s) >= (12_000 if name in sets.SPLITS["dev-library"] else 30_000)
    assert 40 <= s.k <= 100
    g = s.groups[~s.labels]
    assert (g >= 0).mean() > 0.2  # bursts of near-identical frames, as in a real library
    assert (s.groups[s.labels] == -1).all()
    with Image.open(io.BytesIO(s.jpeg(int(np.flatnonzero(s.labels)[0])))) as im:
        assert im.size == (sets.SIDE, sets.SIDE)
