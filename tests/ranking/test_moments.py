"""Moments (novelfind/ranking/moments.py): a pick and the other photos of its burst or batch, in every output.

Grouping is checked on vectors (``novelfind.rank``, from a matrix and from chunks, past
``knn.EXACT_MAX_N``), and end to end on photos with the deterministic fake extractor: a burst of five
near-identical photos among distinct ones is one pick with four members in every format, in the copies,
the HTML report, the ignore list and the XMP sidecars, and the same from memory and from the cache.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from common import make_photo, missing_prerequisite

import novelfind
from novelfind.cli.group import cli
from novelfind.outputs import xmp
from novelfind.outputs.formats import format_results, unescape_field
from novelfind.outputs.placement import place_picks
from novelfind.picks import Member, Pick
from novelfind.ranking import budget, knn, methods, moments
from novelfind.ranking import driver as ranking
from novelfind.ranking.scoring import l2_normalise
from novelfind.ranking.sources import ChunkedSource, UnitSource, as_source

MTIME_NS = 1_700_000_000_123_456_789


def _chunked(x: np.ndarray, rows: int) -> ChunkedSource:
    return ChunkedSource(
        lambda: (x[i : i + rows] for i in range(0, len(x), rows)), lambda r: x[r], len(x), x.shape[1]
    )


def _bursts(n: int, m: int, seed: int, bursts: int = 12, size: int = 5) -> tuple[np.ndarray, list[set[int]]]:
    """n rows of ordinary clustered vectors, then ``bursts`` groups of ``size`` near-identical rows, each
    far from everything else -> (x (N, M) float32, the bursts' row sets)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, m)) * 3
    x = centres[rng.integers(0, 20, n)] + rng.normal(size=(n, m))
    heads = rng.normal(size=(bursts, m)) * 6
    frames = np.repeat(heads, size, axis=0) + rng.normal(size=(bursts * size, m)) * 0.01
    groups = [set(range(n + b * size, n + (b + 1) * size)) for b in range(bursts)]
    return np.vstack([x, frames]).astype(np.float32), groups


def _moments(r: ranking.Ranking) -> list[set[int]]:
    return [{int(i), *r.members[j].tolist()} for j, i in enumerate(r.indices)]


# --------------------------------------------------------------------------- grouping


def test_a_burst_is_one_pick_with_its_frames_as_members_nearest_first():
    x, groups = _bursts(300, 32, seed=0, bursts=3)
    r = novelfind.rank(x, 3, method="knn")
    assert sorted(map(sorted, _moments(r))) == sorted(map(sorted, groups))  # K = 3 counts moments
    assert all(len(m) == 4 for m in r.members) and r.duplicates_dropped >= 1
    xn = l2_normalise(x)
    for pick, members, far in zip(r.indices, r.members, r.member_distance, strict=True):
        dist = np.linalg.norm(xn[members] - xn[pick], axis=1)
        np.testing.assert_allclose(far, dist, rtol=1e-4, atol=1e-6)
        assert (np.diff(far) >= 0).all()  # nearest first
    single = novelfind.rank(x, 3, method="knn", dedup=0)  # grouping off: frames fill the top
    assert all(len(m) == 0 for m in single.members) and len(single.indices) == 3
    assert len({next(g for g, s in enumerate(groups) if int(i) in s) for i in single.indices}) < 3


def test_the_representative_is_the_medoid_and_the_score_the_best_members():
    """A burst whose frames lie on a line: the middle frame represents it, whichever frame scores highest."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 16)).astype(np.float32)
    head = rng.normal(size=16).astype(np.float32) * 8
    step = rng.normal(size=16).astype(np.float32)
    step *= 0.06 * np.linalg.norm(head) / np.linalg.norm(step)  # about 0.06 apart once unit length
    x = np.vstack([x, head + np.arange(-2, 3)[:, None] * step])  # rows 200..204, 202 in the middle
    r = novelfind.rank(x, 1, method="knn")
    assert int(r.indices[0]) == 202 and sorted(r.members[0].tolist()) == [200, 201, 203, 204]
    assert r.scores[0] == pytest.approx(float(r.all_scores[200:205].max()))


def test_every_photo_is_a_pick_or_a_member_when_k_exceeds_the_moments():
    x, groups = _bursts(40, 8, seed=1, bursts=4)
    for method in methods.METHODS:
        r = novelfind.rank(x, 1000, method=method)
        listed = [int(i) for i in r.indices] + [int(i) for m in r.members for i in m]
        assert sorted(listed) == list(range(len(x))), method
        assert len(r.indices) == len(x) - r.duplicates_dropped


def test_a_moment_is_made_of_candidates_only():
    """Frames that may not be picked (ignored, older than --since) are not members either."""
    x, groups = _bursts(300, 32, seed=2, bursts=2)
    burst = sorted(groups[0])
    cand = np.ones(len(x), bool)
    cand[burst[2:]] = False  # only the first two frames may be picked
    r = novelfind.rank(x, 2, method="knn", candidates=cand)
    j = [int(i) for i in r.indices].index(next(i for i in r.indices if int(i) in burst))
    assert sorted([int(r.indices[j]), *r.members[j].tolist()]) == burst[:2]


def test_a_batch_larger_than_one_look_up_stays_one_moment():
    """A burst of 12 frames looked up 4 neighbours at a time: the moment grows until it is whole."""
    x, groups = _bursts(300, 32, seed=4, bursts=1, size=12)
    grouper = moments.Grouper(UnitSource(as_source(x)), 0.15, neighbours=4)
    found = grouper.group(np.argsort(-np.linalg.norm(x - x.mean(0), axis=1)), 3)
    assert groups[0] in [
        {int(h), *m.tolist()} for h, m in zip(found.representatives, found.members, strict=True)
    ]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matrix_and_chunks_give_the_same_moments_past_the_exact_size(seed):
    x, groups = _bursts(max(5000, knn.EXACT_MAX_N + 500), 64, seed, bursts=12)
    assert len(x) > knn.EXACT_MAX_N
    for method in ("cosine-knn", "knn"):
        want = novelfind.rank(x, 20, method=method)
        got = novelfind.rank(_chunked(x, 700), 20, method=method)
        assert got.indices.tolist() == want.indices.tolist()
        assert [m.tolist() for m in got.members] == [m.tolist() for m in want.members]
        assert got.duplicates_dropped == want.duplicates_dropped
        for g, w in zip(got.member_distance, want.member_distance, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6)
        found = _moments(want)
        assert sum(g in found for g in groups) >= 10  # the bursts are odd: most are picks, each whole


# --------------------------------------------------------------------------- distances in one product


def _reference_pairwise(x: np.ndarray, exact_near: float | None = None) -> np.ndarray:
    """The distances measured the straightforward way: row by row, each from the difference."""
    x = np.asarray(x, dtype=np.float64)
    return np.stack([np.linalg.norm(x - v, axis=1) for v in x]) if len(x) else np.zeros((0, 0))


def _unit_like_features(rng: np.random.Generator, g: int, m: int) -> np.ndarray:
    """g unit rows like image features (a shared non-negative part), with a copy, a near copy and a
    resave among them."""
    x = np.abs(rng.normal(size=m)) + rng.normal(size=(g, m))
    x[5] = x[3]  # the same file twice: distance 0
    x[7] = x[3] + 0.002 * rng.normal(size=m)  # a resave
    return l2_normalise(x)


@pytest.mark.parametrize("seed", range(4))
def test_pairwise_distances_are_those_of_the_differences(seed):
    rng = np.random.default_rng(seed)
    for g, m in ((65, 1280), (1, 8), (2, 8), (300, 64)):
        x = _unit_like_features(rng, g, m) if g > 7 else l2_normalise(rng.normal(size=(g, m)))
        got, want = moments._pairwise(x), _reference_pairwise(x)
        assert got.shape == want.shape and (got == got.T).all() and (np.diag(got) == 0).all()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_links_at_the_radius_are_those_of_the_differences(seed):
    """Rows planted at the link radius from each other, to the last bit either side: the groups are
    the ones the distances of the differences give."""
    rng = np.random.default_rng(seed)
    m, radius = 256, moments.LINK_RADIUS
    x = _unit_like_features(rng, 65, m)
    for j in range(1, 64, 2):  # each odd row at the radius from the row before it, give or take rounding
        step = rng.normal(size=m)
        step -= (step @ x[j - 1]) * x[j - 1]
        x[j] = x[j - 1] + step * (radius * (1 + rng.choice([-1, 0, 1]) * 1e-16) / np.linalg.norm(step))
    ref_near = _reference_pairwise(x) < radius
    assert ((moments._pairwise(x, exact_near=radius) < radius) == ref_near).all()
    assert ref_near[np.arange(1, 64, 2), np.arange(0, 63, 2)].any()  # some planted pairs link, some not
    assert not ref_near[np.arange(1, 64, 2), np.arange(0, 63, 2)].all()
    for start in range(0, 64, 7):
        rows = np.r_[start, np.delete(np.arange(65), start)]
        want = _reference_linked(x[rows], radius)
        assert moments._linked(x[rows], radius).tolist() == want.tolist()


def _reference_linked(x: np.ndarray, radius: float) -> np.ndarray:
    near = _reference_pairwise(x) < radius
    reached = np.zeros(len(x), bool)
    reached[0] = True
    frontier = reached.copy()
    while frontier.any():
        frontier = near[frontier].any(0) & ~reached
        reached |= frontier
    return np.flatnonzero(reached)


@pytest.mark.parametrize("seed", range(3))
def test_the_moments_are_those_of_the_row_by_row_distances(seed, monkeypatch):
    """The whole grouping, on bursts with copies among them: the same picks, members, order and
    distances as with the distances measured row by row."""
    x, _ = _bursts(400, 48, seed, bursts=10, size=6)
    x[-1] = x[-2]  # an exact copy of a frame
    got = novelfind.rank(x, 15, method="knn", dedup=0.3)
    monkeypatch.setattr(moments, "_pairwise", _reference_pairwise)
    want = novelfind.rank(x, 15, method="knn", dedup=0.3)
    assert got.indices.tolist() == want.indices.tolist()
    assert [m.tolist() for m in got.members] == [m.tolist() for m in want.members]
    assert all((g == w).all() for g, w in zip(got.member_distance, want.member_distance, strict=True))
    assert sum(len(m) for m in got.members) >= 40  # the bursts were grouped


def test_the_best_original_is_chosen_by_keys_compared_in_order_asked_only_for_copies():
    """``prefer`` as keys per row (first key first) or as a function of the rows, asked for the medoid
    and its copies only; equal keys keep the medoid."""
    rng = np.random.default_rng(9)
    x = np.abs(rng.normal(size=(300, 32))).astype(np.float32)
    odd = np.zeros(32, np.float32)
    odd[:2] = 5.0
    copies = odd + 0.005 * np.abs(rng.normal(size=(3, 32))).astype(np.float32)
    x = np.concatenate([x, copies])  # rows 300, 301, 302: one shot three times
    plain = novelfind.rank(x, 1)
    medoid = int(plain.indices[0])
    keys = np.zeros((len(x), 2))
    keys[301] = (1, 0)  # the RAW twin wins over more pixels
    keys[302] = (0, 9)
    assert int(novelfind.rank(x, 1, prefer=keys).indices[0]) == 301
    keys[301] = (0, 0)
    assert int(novelfind.rank(x, 1, prefer=keys).indices[0]) == 302
    asked = []

    def lazy(rows):
        asked.extend(np.asarray(rows).tolist())
        return np.zeros(len(rows))  # nothing to tell them apart: the medoid stays

    assert int(novelfind.rank(x, 1, prefer=lazy).indices[0]) == medoid
    assert sorted(set(asked)) == [300, 301, 302]


@pytest.mark.parametrize("method", [m for m in methods.METHODS if m != "ads-paper"])
def test_without_dates_the_moments_are_the_untimed_ones_pick_for_pick(method):
    """Capture times that link nothing (none known, or one photo a day) change nothing: the picks,
    scores, members and distances are those of the ranking without times."""
    x, _ = _bursts(200, 16, seed=5, bursts=4)
    want = novelfind.rank(x, 12, method=method)
    day = 1_700_000_000 + 86_400.0 * np.arange(len(x))
    for times in (np.full(len(x), np.nan), day):
        got = novelfind.rank(x, 12, method=method, times=times)
        assert got.indices.tolist() == want.indices.tolist(), method
        assert got.scores.tolist() == want.scores.tolist(), method
        assert [m.tolist() for m in got.members] == [m.tolist() for m in want.members], method
        for g, w in zip(got.member_distance, want.member_distance, strict=True):
            assert g.tolist() == w.tolist(), method


# --------------------------------------------------------------------------- the output formats


def _member(path: str, distance: float = 0.05) -> Member:
    return Member(Path(path), 2000, MTIME_NS, distance)


def _picks() -> list[Pick]:
    burst = Pick(
        rank=1,
        score=0.75,
        path=Path("/lib/burst/IMG_3.jpg"),
        size=1234,
        mtime_ns=MTIME_NS,
        neighbour=Path("/lib/burst/IMG_2.jpg"),
        distance=0.04,
        members=(_member("/lib/burst/IMG_2.jpg", 0.04), _member("/lib/burst/IMG_4\tx\n.jpg", 0.06)),
    )
    single = Pick(rank=2, score=0.5, path=Path("/lib/alone.jpg"), size=99, mtime_ns=MTIME_NS)
    return [burst, single]


def test_json_and_jsonl_carry_members_and_their_count():
    doc = json.loads(format_results(_picks(), "json"))
    first, second = doc["picks"]
    assert first["members"] == ["/lib/burst/IMG_2.jpg", "/lib/burst/IMG_4\tx\n.jpg"]
    assert first["member_count"] == 2
    assert second["members"] == [] and second["member_count"] == 0
    lines = [json.loads(line) for line in format_results(_picks(), "jsonl").splitlines()]
    assert [(p["members"], p["member_count"]) for p in lines[1:]] == [
        (first["members"], 2),
        ([], 0),
    ]


def test_tsv_and_csv_have_a_member_count_column():
    assert [line.split("\t")[:4] for line in format_results(_picks(), "tsv").splitlines()] == [
        ["1", "0.750000", "/lib/burst/IMG_3.jpg", "2"],  # member_count is the fourth column
        ["2", "0.500000", "/lib/alone.jpg", "0"],
    ]
    rows = list(csv.reader(io.StringIO(format_results(_picks(), "csv"))))
    col = rows[0].index("member_count")  # appended after also; labels came later
    assert rows[0][col - 1] == "also" and [r[col] for r in rows[1:]] == ["2", "0"]


def test_paths_lists_the_picks_and_members_every_photo_escaped():
    assert format_results(_picks(), "paths") == "/lib/burst/IMG_3.jpg\n/lib/alone.jpg\n"
    assert format_results(_picks(), "paths0") == "/lib/burst/IMG_3.jpg\0/lib/alone.jpg\0"
    lines = format_results(_picks(), "members").splitlines()
    assert lines == [
        "/lib/burst/IMG_3.jpg",
        "/lib/burst/IMG_2.jpg",
        "/lib/burst/IMG_4\\tx\\n.jpg",  # a hostile member name is escaped like any path
        "/lib/alone.jpg",
    ]
    assert unescape_field(lines[2]) == "/lib/burst/IMG_4\tx\n.jpg"
    assert format_results(_picks(), "members0").split("\0")[:-1] == [
        "/lib/burst/IMG_3.jpg",
        "/lib/burst/IMG_2.jpg",
        "/lib/burst/IMG_4\tx\n.jpg",
        "/lib/alone.jpg",
    ]


def test_copy_to_places_the_pick_and_with_copy_members_its_moment(tmp_path):
    lib = tmp_path / "lib"
    paths = [make_photo(lib / f"IMG_{i}.jpg", (200, 40 * i, 30), seed=i) for i in range(3)]
    st = [p.stat() for p in paths]  # as ranked: a file of another size or time is not copied
    pick = Pick(
        rank=1,
        score=1.0,
        path=paths[0],
        size=st[0].st_size,
        mtime_ns=st[0].st_mtime_ns,
        members=tuple(
            Member(p, s.st_size, s.st_mtime_ns, 0.1 * j)
            for j, (p, s) in enumerate(zip(paths[1:], st[1:], strict=True), 1)
        ),
    )
    dest = tmp_path / "picks"
    assert [p.name for p in place_picks([pick], dest)] == ["001_IMG_0.jpg"]
    placed = place_picks([pick], dest, members=True)
    assert [p.name for p in placed] == ["001_IMG_0.jpg", "001m01_IMG_1.jpg", "001m02_IMG_2.jpg"]
    assert sorted(os.listdir(dest)) == [".novelfind-picks.json", *[p.name for p in placed]]
    assert (dest / "001m02_IMG_2.jpg").read_bytes() == paths[2].read_bytes()
    place_picks([pick], dest)  # without members again: the members placed before are removed
    assert sorted(os.listdir(dest)) == [".novelfind-picks.json", "001_IMG_0.jpg"]


# --------------------------------------------------------------------------- end to end


HUES = [
    (230, 30, 30),
    (30, 200, 40),
    (30, 40, 220),
    (200, 200, 30),
    (200, 30, 200),
    (30, 200, 200),
    (250, 140, 20),
    (120, 20, 200),
    (20, 120, 60),
    (240, 240, 240),
    (60, 60, 60),
    (150, 90, 40),
]


@pytest.fixture
def burst_library(tmp_path) -> dict:
    """Twelve distinct photos (one per hue, half striped) and a burst of five frames of one scene,
    among them one with a hostile name."""
    root = tmp_path / "photos"
    distinct = [
        make_photo(root / "singles" / f"IMG_{i:02d}.jpg", hue, seed=i, stripes=i % 2 == 1)
        for i, hue in enumerate(HUES)
    ]
    names = ["burst_1.jpg", "burst_2.jpg", "burst 3\t(\u00e9).jpg", "burst_4.jpg", "burst_5.jpg"]
    burst = [make_photo(root / "burst" / name, (90, 170, 250), seed=50 + i) for i, name in enumerate(names)]
    return {"root": root, "distinct": distinct, "burst": burst}


def test_a_burst_among_distinct_photos_is_one_pick_with_four_members(burst_library, fake_extractor, tmp_path):
    result = novelfind.scan(burst_library["root"], k=100, cache=False)
    assert len(result.picks) == len(burst_library["distinct"]) + 1  # every photo, the burst as one
    (moment,) = [p for p in result.picks if p.members]
    assert {moment.path, *(m.path for m in moment.members)} == set(burst_library["burst"])
    assert len(moment.members) == 4 and result.counts.duplicates_dropped == 4
    three = novelfind.scan(burst_library["root"], k=3, cache=False)
    assert len(three.picks) == 3  # K counts moments, not photos


def test_the_same_moments_from_memory_and_from_the_cache(
    burst_library, fake_extractor, tmp_path, monkeypatch
):
    cache = tmp_path / "c.sqlite"
    in_memory = novelfind.scan(burst_library["root"], k=13, cache=cache)
    monkeypatch.setattr(budget, "MATRIX_BUDGET", 0)
    streamed = novelfind.scan(burst_library["root"], k=13, cache=cache)
    assert in_memory.features is not None and streamed.features is None
    assert [(p.path, p.members) for p in streamed.picks] == [(p.path, p.members) for p in in_memory.picks]
    assert any(p.members for p in streamed.picks)


def test_cli_formats_and_the_html_strip(burst_library, fake_extractor, tmp_path):
    root, report = burst_library["root"], tmp_path / "r.html"
    runner = CliRunner()
    result = runner.invoke(
        cli, ["scan", str(root), "--k", "13", "--format", "json", "--no-cache", "--report", str(report)]
    )
    assert result.exit_code == 0, result.stderr
    picks = json.loads(result.stdout)["picks"]
    (moment,) = [p for p in picks if p["member_count"]]
    assert moment["member_count"] == 4 and len(moment["members"]) == 4
    assert {moment["path"], *moment["members"]} == {str(p) for p in burst_library["burst"]}
    assert all(p["members"] == [] for p in picks if p is not moment)
    every = runner.invoke(cli, ["scan", str(root), "--k", "13", "--format", "members0", "--no-cache"])
    assert sorted(every.stdout_bytes.split(b"\0")[:-1]) == sorted(
        os.fsencode(p) for p in [*burst_library["distinct"], *burst_library["burst"]]
    )
    html = report.read_text()
    assert html.count('<div class="strip">') == 1 and "a moment of 5 photos" in html
    assert "burst 3\\x09(\u00e9).jpg" in html  # the hostile member name, escaped in its title


def test_ignore_picks_covers_the_whole_moment(burst_library, fake_extractor, tmp_path):
    first = novelfind.scan(burst_library["root"], k=100, cache=False, ignore_picks=True)
    assert first.counts.newly_ignored == len(burst_library["distinct"]) + len(burst_library["burst"])
    ignored = {e.path for e in novelfind.IgnoreList().entries()}
    assert set(burst_library["burst"]) <= ignored


def test_xmp_tags_every_photo_of_the_moment(burst_library, fake_extractor, tmp_path):
    if not xmp.available():
        missing_prerequisite("XMP tests need python-exiv2 (pip install '.[test]')")
    from sidecars import read_sidecar

    result = novelfind.scan(burst_library["root"], k=100, cache=False, xmp=True)
    (moment,) = [p for p in result.picks if p.members]
    for photo in (moment.path, *(m.path for m in moment.members)):
        props = read_sidecar(Path(f"{photo}.xmp"))
        assert props[xmp.SUBJECT] == ["novel"] and props[xmp.RANK] == str(moment.rank)
