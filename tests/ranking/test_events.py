"""Events and bursts from capture times, and the event-aware ranking (``event-knn``)."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import dated_library

import novelfind
from novelfind.ranking import eventknn, events, knn
from novelfind.ranking import methods as ranking
from novelfind.ranking.driver import event_cap
from novelfind.ranking.sources import ChunkedSource, UnitSource, as_source

HOUR = 3600.0
DAY = 86400.0


def test_segment_splits_days_and_long_pauses_not_a_burst_heavy_afternoon():
    # day 1: 30 photos 20-90 s apart, then 3 h pause, then 10 photos; day 2: 5 photos
    rng = np.random.default_rng(0)
    t1 = np.cumsum(rng.uniform(20, 90, 30))
    t2 = t1[-1] + 3 * HOUR + np.cumsum(rng.uniform(20, 90, 10))
    t3 = DAY + np.cumsum(rng.uniform(20, 90, 5))
    t = np.concatenate([t1, t2, t3])
    labels = events.segment(t)
    assert len(np.unique(labels[:30])) == 1
    assert len(np.unique(labels[30:40])) == 1
    assert len(np.unique(labels[40:])) == 1
    assert len(np.unique(labels)) == 3


def test_segment_adapts_to_the_rhythm_and_keeps_minutes_together():
    # a slow roll: one photo every ~2 days, each its own event (gaps above MAX_GAP)
    t = np.cumsum(np.full(12, 2 * DAY))
    assert len(np.unique(events.segment(t))) == 12
    # regular shooting a minute apart for an hour: no gap is long for its neighbourhood
    t = np.arange(60) * 60.0
    assert len(np.unique(events.segment(t))) == 1
    # a 10-minute pause inside 1-second bursts is long for its neighbourhood, but under MIN_GAP
    t = np.concatenate([np.arange(20.0), 20 + 600 + np.arange(20.0)])
    assert len(np.unique(events.segment(t))) == 1
    assert len(np.unique(events.segment(t, min_gap=300))) == 2


def test_undated_photos_are_events_of_their_own_and_order_does_not_matter():
    t = np.array([10.0, np.nan, 20.0, np.nan, 30.0 + 2 * DAY])
    labels = events.segment(t)
    assert labels[0] == labels[2]
    assert len({labels[1], labels[3], labels[0], labels[4]}) == 4
    perm = np.array([4, 2, 0, 3, 1])
    again = events.segment(t[perm])
    same = lambda a, b: (a[:, None] == a[None, :]) == (b[:, None] == b[None, :])  # noqa: E731
    assert same(labels[perm], again).all()


def test_bursts_need_both_seconds_and_alike_content():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=64), rng.normal(size=64)
    x = np.stack([a, a + 0.01 * rng.normal(size=64), a + 0.01 * rng.normal(size=64), b, a])
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    t = np.array([0.0, 1.0, 2.5, 3.5, 60.0])  # frame 3 is 1 s later but another subject; 4 is a minute later
    lab = events.bursts(t, lambda i, j: np.linalg.norm(x[i] - x[j], axis=1))
    assert lab[0] == lab[1] == lab[2]
    assert lab[3] != lab[0] and lab[4] != lab[0] and lab[3] != lab[4]


def _library(seed: int, n_places: int = 30, batch: int = 25, dim: int = 48):
    """Places recurring over 200 days, one odd batch on one night, one odd photo inside an ordinary day."""
    rng = np.random.default_rng(seed)
    centres = np.abs(rng.normal(size=(n_places, dim)))
    rows, times = [], []
    for _ in range(1500):
        p, day = rng.integers(n_places), rng.integers(200)
        rows.append(centres[p] + 0.15 * np.abs(rng.normal(size=dim)))
        times.append(day * DAY + rng.uniform(9, 18) * HOUR)
    odd = np.abs(rng.normal(size=dim))
    for j in range(batch):  # a tight one-off batch: each other's neighbours
        rows.append(odd + 0.03 * np.abs(rng.normal(size=dim)))
        times.append(120 * DAY + 22 * HOUR + 60 * j)
    x = np.asarray(rows, dtype=np.float32)
    batch_rows = np.arange(1500, 1500 + batch)
    return x, np.asarray(times), batch_rows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_odd_batch_stands_out_against_recurring_places(seed):
    x, t, batch = _library(seed)
    plain = novelfind.rank(x, 5, method="cosine-knn", times=t)
    timed = novelfind.rank(x, 5, method="event-knn", times=t)
    seen = lambda r: np.concatenate([r.indices, *r.members])  # noqa: E731
    assert not np.isin(batch, seen(plain)).any()  # each other's neighbours: plain k-NN calls it ordinary
    first = np.concatenate([[timed.indices[0]], timed.members[0]])
    assert np.isin(first, batch).all() and len(first) == len(batch)  # one moment, the whole batch
    lo, hi = timed.spans[0]
    assert lo == t[batch].min() and hi == t[batch].max()
    assert not np.isin(timed.neighbour[0], batch)  # the nearest photo outside the moment


def test_without_dates_event_knn_is_cosine_knn_pick_for_pick():
    x, _, _ = _library(3)
    plain = novelfind.rank(x, 20, method="cosine-knn")
    for t in (None, np.full(len(x), np.nan)):
        r = novelfind.rank(x, 20, method="event-knn", times=t)
        assert np.array_equal(r.indices, plain.indices)
        assert np.array_equal(r.scores, plain.scores)
        assert np.array_equal(r.neighbour, plain.neighbour)
        assert all(np.array_equal(a, b) for a, b in zip(r.members, plain.members, strict=True))


def test_a_copied_archive_is_ranked_by_plain_knn():
    # every photo one date (a library copied in one go): one event of the whole library
    x, _, _ = _library(4)
    t = np.full(len(x), 1.7e9)
    plain = novelfind.rank(x, 10, method="cosine-knn")
    r = novelfind.rank(x, 10, method="event-knn", times=t)
    assert np.array_equal(r.indices, plain.indices)
    assert np.allclose(r.all_scores, plain.all_scores)


def test_a_single_odd_photo_in_an_ordinary_day_is_still_found():
    x, t, _ = _library(5, batch=0)
    rng = np.random.default_rng(5)
    odd = np.zeros((1, x.shape[1]), np.float32)
    odd[0, rng.choice(x.shape[1], 3, replace=False)] = 3.0  # pointing away from every place
    day = t[0]
    x = np.concatenate([x, odd])
    t = np.concatenate([t, [day + 30]])
    assert novelfind.rank(x, 3, method="cosine-knn").indices[0] == len(x) - 1
    r = novelfind.rank(x, 3, method="event-knn", times=t)
    assert r.indices[0] == len(x) - 1
    assert len(r.members[0]) == 0  # its ordinary day is not part of its moment


def test_chunked_equals_in_memory_above_the_exact_limit(monkeypatch):
    from novelfind.ranking import knn

    monkeypatch.setattr(knn, "EXACT_MAX_N", 500)  # the certified path (bounds, exact top)
    x, t, batch = _library(6)
    whole = novelfind.rank(x, 8, method="event-knn", times=t)
    chunked = novelfind.rank(_chunked(x, 256), 8, method="event-knn", times=t)
    assert np.array_equal(whole.indices, chunked.indices)
    assert np.allclose(whole.scores, chunked.scores)
    assert all(np.array_equal(a, b) for a, b in zip(whole.members, chunked.members, strict=True))
    monkeypatch.setattr(knn, "EXACT_MAX_N", 100_000)  # every row exact: the same picks and scores
    exact = novelfind.rank(x, 8, method="event-knn", times=t)
    assert np.array_equal(whole.indices, exact.indices)
    assert np.allclose(whole.scores, exact.scores, rtol=1e-5)


def _chunked(x: np.ndarray, rows: int) -> ChunkedSource:
    return ChunkedSource(
        lambda: (x[i : i + rows] for i in range(0, len(x), rows)), lambda r: x[r], len(x), x.shape[1]
    )


def test_times_of_the_wrong_shape_are_refused():
    x, t, _ = _library(7)
    with pytest.raises(ValueError, match="times"):
        novelfind.rank(x, 3, method="event-knn", times=t[:-1])


def test_event_knn_is_a_method():
    assert "event-knn" in ranking.METHODS
    assert ranking.METHODS["event-knn"].tuning == {"weight": eventknn.EVENT_WEIGHT}


def test_picks_and_json_carry_the_moment_span():
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from novelfind.outputs.formats import format_results
    from novelfind.picks import picks_of

    x, t, batch = _library(8)
    r = novelfind.rank(x, 3, method="event-knn", times=t)
    files = [SimpleNamespace(path=Path(f"/p/{i}.jpg"), size=1000 + i, mtime_ns=0) for i in range(len(x))]
    photos = [SimpleNamespace(also=()) for _ in range(len(x))]
    picks = picks_of(r, files, photos)
    assert picks[0].span == (t[batch].min(), t[batch].max())
    record = json.loads(format_results(picks, "json"))["picks"][0]
    assert record["span"]["photos"] == len(batch)
    assert record["span"]["first"] < record["span"]["last"]
    undated = picks_of(novelfind.rank(x, 3, method="event-knn"), files, photos)
    assert undated[0].span is None
    assert json.loads(format_results(undated, "json"))["picks"][0]["span"] is None


def test_a_moment_is_shown_by_its_best_original_not_a_resave():
    rng = np.random.default_rng(9)
    x = np.abs(rng.normal(size=(300, 32))).astype(np.float32)
    odd = np.zeros(32, np.float32)
    odd[:2] = 5.0
    resave = odd + 0.01 * np.abs(rng.normal(size=32)).astype(np.float32)  # a half-size resave: 0.01 away
    x = np.concatenate([x, [resave, odd]])  # the resave first: it is the medoid on ties
    sizes = np.full(len(x), 1e6)
    sizes[-2], sizes[-1] = 2e5, 3e6  # the resave is small, the original large
    plain = novelfind.rank(x, 1)
    assert set([plain.indices[0], *plain.members[0]]) == {300, 301}
    best = novelfind.rank(x, 1, prefer=sizes)
    assert best.indices[0] == 301 and list(best.members[0]) == [300]
    sizes[-2], sizes[-1] = 3e6, 2e5
    assert novelfind.rank(x, 1, prefer=sizes).indices[0] == 300


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_scan_ranks_a_night_of_odd_photos_by_their_capture_dates(tmp_path, fake_extractor, seed):
    """Through the whole scan: capture dates read from EXIF reach the ranking. Ordinary scenes recur
    over 20 days; one night holds 14 photos of a scene seen on no other day, more than the 10
    neighbours the default measures, so each is ordinary to it; event-knn picks that night as one
    moment, with its time span."""
    import json
    from pathlib import Path

    from click.testing import CliRunner
    from common import make_photo
    from PIL import Image

    from novelfind.cli.group import cli

    rng = np.random.default_rng(seed)
    lib = tmp_path / "lib"

    def dated(path, colour, photo_seed, when):
        make_photo(path, colour, seed=photo_seed)
        img = Image.open(path)
        img.load()
        exif = Image.Exif()
        exif.get_ifd(0x8769)[0x9003] = when
        img.save(path, exif=exif.tobytes())

    scenes = [(40, 60, 200), (30, 160, 60), (150, 150, 150)]
    for day in range(20):
        for j, colour in enumerate(scenes):
            hour = 8 + 4 * j + int(rng.integers(0, 3))
            dated(
                lib / f"d{day:02d}_{j}.jpg", colour, 100 * day + j, f"2025:05:{day + 1:02d} {hour:02d}:10:00"
            )
    for i in range(14):  # a night of astrophotography: one scene, one night
        dated(lib / f"night_{i:02d}.jpg", (230, 20, 20), 5000 + i, f"2025:05:09 23:{2 * i:02d}:00")
    out = CliRunner().invoke(
        cli, ["scan", str(lib), "--k", "3", "--method", "event-knn", "--format", "json", "--no-cache"]
    )
    assert out.exit_code == 0, out.output
    top = json.loads(out.stdout)["picks"][0]
    moment = [Path(p).name for p in (top["path"], *top["members"])]
    assert all(name.startswith("night_") for name in moment) and len(moment) >= 10
    assert top["span"]["first"].startswith("2025-05-09T23:") and top["span"]["photos"] == len(moment)
    assert not Path(top["neighbour"]).name.startswith("night_")  # the nearest photo outside the moment


# --------------------------------------------------------------------------- time links of moments


def _links(x, t, **kw) -> events.TimeLinks:
    unit = UnitSource(as_source(x))
    return events.TimeLinks(events.timeline(t, unit), unit, event_cap(len(x)), **kw)


def _mates(links: events.TimeLinks, rows) -> list[set[int]]:
    return [set(m.tolist()) for m in links(np.asarray(rows, dtype=np.int64))]


@pytest.mark.parametrize("seed", range(5))
def test_an_odd_evening_is_one_group_and_an_odd_photo_of_the_day_joins_nothing(seed):
    """The photos of a one-off evening link to each other (content and time); the unrelated odd photo
    shot that afternoon, and the astronaut dropped into an ordinary day, link to nothing and nothing
    links to them."""
    x, t, kinds = dated_library(seed)
    links = _links(x, t)
    evening = set(np.flatnonzero(kinds == "evening").tolist())
    assert _mates(links, sorted(evening)) == [evening - {r} for r in sorted(evening)]
    for kind in ("odd_same_day", "astronaut"):
        (row,) = np.flatnonzero(kinds == kind)
        same_event = np.flatnonzero(links.timeline.event == links.timeline.event[row])
        assert len(same_event) > 5  # it is one of an ordinary day's photos
        assert _mates(links, [row]) == [set()]
        assert not any(row in m for m in _mates(links, same_event))


def test_a_burst_links_where_its_event_is_the_whole_library():
    """One event holding every photo (a day of shooting a minute apart) links nothing by the event
    rule; the frames of a burst, seconds apart and alike, still are one moment."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(60, 32)) + 2
    x[20:24] = x[20] + 0.05 * rng.normal(size=(4, 32))
    t = np.arange(60) * 60.0
    t[20:24] = t[20] + np.arange(4)
    links = _links(x, t)
    assert len(np.unique(links.timeline.event)) == 1 and not links.counted.any()
    assert _mates(links, [20, 5]) == [{21, 22, 23}, set()]


def test_only_candidates_are_linked_and_every_photo_bounds_the_event():
    """Photos that may not be picked (ignored, older than --since) are no one's mates, but they are
    photos of the library: one of another day that looks like an evening photo says that photo is not
    one-off, so it links to nothing (nor does the rest of the evening link to it)."""
    x, t, kinds = dated_library(1)
    evening = np.flatnonzero(kinds == "evening")
    candidates = np.ones(len(x), bool)
    candidates[evening[6:]] = False  # half the evening may not be picked (on the ignore list)
    got = _mates(_links(x, t, candidates=candidates), evening[:6])
    assert got == [set(evening[:6].tolist()) - {r} for r in evening[:6].tolist()]
    again = np.vstack([x, x[evening[0]] + 0.01])  # the same view, on the first day, older than --since
    when = np.append(t, t.min() + 60)
    old = np.append(np.ones(len(x), bool), False)
    got = _mates(_links(again, when, candidates=old), evening)
    assert got[0] == set() and all(int(evening[0]) not in m for m in got)


def test_the_rankings_nearest_rows_give_the_links_a_search_gives():
    x, t, kinds = dated_library(2)
    unit = UnitSource(as_source(x))
    dens = knn.KnnScores.build(unit, 10)
    searched = _links(x, t)
    told = _links(x, t, nearest=dens.nearest, nearest_distance=dens.nearest_distance)
    rows = np.arange(len(x))
    assert _mates(told, rows) == _mates(searched, rows)
    np.testing.assert_allclose(
        told.outside[~np.isnan(told.outside)], searched.outside[~np.isnan(told.outside)], rtol=1e-5
    )


def test_time_links_nothing_without_dates_or_without_an_event_of_two():
    x, t, _ = dated_library(0)
    unit = UnitSource(as_source(x))
    assert events.time_links(np.full(len(x), np.nan), unit, 100) is None
    assert events.time_links(1e9 + DAY * np.arange(len(x)), unit, 100) is None  # one photo a day
    assert events.time_links(t, unit, 100) is not None


def _reference_groups(x: np.ndarray, t: np.ndarray, cap: int) -> list[set[int]]:
    """The rule computed the plain way, for every photo at once: all distances, every photo's nearest
    photo outside its event, the pairs of an event that count each closer to the other than that, and
    the groups they chain into."""
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    d = np.linalg.norm(u[:, None, :] - u[None, :, :], axis=2)
    event = events.segment(t)
    size = np.bincount(event)[event]
    same = event[:, None] == event[None, :]
    outside = np.where(same, np.inf, d).min(1)
    link = same & (d < outside[:, None]) & (d < outside[None, :]) & ((size >= 2) & (size <= cap))[:, None]
    np.fill_diagonal(link, False)
    groups = []
    for row in range(len(x)):
        group, todo = {row}, [row]
        while todo:
            new = set(np.flatnonzero(link[todo.pop()]).tolist()) - group
            group |= new
            todo.extend(new)
        groups.append(group)
    return groups


@pytest.mark.parametrize("seed", range(3))
def test_the_event_groups_are_those_of_the_rule_computed_for_every_photo(seed):
    """The links found with bounds and few searches are those of the rule computed for every photo,
    in a library with bursts (frames close to each other, where the bounds settle comparisons), the
    rows asked a few at a time."""
    x, t, kinds = dated_library(seed)
    rng = np.random.default_rng(seed)
    frames = x[rng.choice(len(x), 30)] + 0.05 * rng.normal(size=(30, x.shape[1])).astype(np.float32)
    x = np.vstack([x, frames])  # 30 more frames, each beside a photo, shot a few seconds later
    t = np.concatenate(
        [t, t[np.argmin(np.linalg.norm(x[: len(t), None] - frames[None], axis=2), axis=0)] + 2]
    )
    cap = event_cap(len(x))
    links = _links(x, t)
    searched = []
    search = links._search
    links._search = lambda rows: (searched.extend(rows), search(rows))
    want = _reference_groups(x, t, cap)
    for batch in np.array_split(rng.permutation(len(x)), 25):  # asked a few at a time, as moments ask
        links(batch)
    got = [set(links.groups[r].tolist()) if links.counted[r] else {r} for r in range(len(x))]
    assert got == want
    assert any(len(g) > 1 for g in want)
    assert len(set(searched)) < len(x)  # the bounds spared some searches
