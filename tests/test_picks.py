"""The pick records and ``picks_of``, which turns a ranking of rows into picks: the rows' files, their
twins, their clips, their dates, their moments and labels, in the ranking's order."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from novelfind.media.dates import Dates
from novelfind.media.pairs import Photo
from novelfind.media.video import ClipInfo
from novelfind.media.walk import ImageFile
from novelfind.picks import Failure, Label, Member, Pick, iso_utc, picks_of, utc_datetime
from novelfind.ranking.driver import Ranking

FILES = [ImageFile(Path(f"/lib/IMG_{i}.jpg"), 1000 + i, 1_700_000_000_000_000_000 + i) for i in range(5)]


def ranking(**extra) -> Ranking:
    """Picks rows 3 then 0: row 3 alone (no neighbour), row 0 with rows 1 and 2 as its moment."""
    fields = {
        "indices": np.array([3, 0]),
        "scores": np.array([0.9, 0.4], np.float32),
        "neighbour": np.array([-1, 4]),
        "distance": np.array([0.0, 0.25], np.float32),
        "members": [np.array([], np.int64), np.array([2, 1])],
        "member_distance": [np.array([], np.float32), np.array([0.05, 0.1], np.float32)],
    }
    return Ranking(**{**fields, **extra})


def photos() -> list[Photo]:
    raw = ImageFile(Path("/lib/IMG_0.CR2"), 9000, 1)
    return [Photo(f, (raw,) if i == 0 else ()) for i, f in enumerate(FILES)]


def test_picks_follow_the_ranking_with_their_files_and_neighbours():
    picks = picks_of(ranking(), FILES, photos())
    assert [p.rank for p in picks] == [1, 2]
    first, second = picks
    assert (first.path, first.size, first.mtime_ns) == (FILES[3].path, 1003, FILES[3].mtime_ns)
    assert first.neighbour is None and first.distance is None  # -1: no neighbour, so no distance either
    assert second.neighbour == FILES[4].path and second.distance == pytest.approx(0.25)
    assert first.score == pytest.approx(0.9) and type(first.score) is float
    assert second.also == (Path("/lib/IMG_0.CR2"),) and second.files == (
        FILES[0].path,
        Path("/lib/IMG_0.CR2"),
    )
    assert first.also == () and first.members == ()


def test_members_keep_the_rankings_order_and_their_twins():
    second = picks_of(ranking(), FILES, photos())[1]
    assert [m.path for m in second.members] == [FILES[2].path, FILES[1].path]
    assert [m.distance for m in second.members] == pytest.approx([0.05, 0.1])
    assert second.members[0] == Member(FILES[2].path, 1002, FILES[2].mtime_ns, second.members[0].distance)
    assert second.members[0].taken is None and second.members[0].taken_source == "none"


def test_dates_labels_clips_and_spans_are_carried_to_their_rows():
    dates = Dates(
        np.array([0.0, 60.0, np.nan, 3600.0, 0.0]),
        ["exif", "exif-local", "none", "file", "exif"],
        np.array([3600.0, np.nan, np.nan, 0.0, 0.0]),
    )
    clip = ClipInfo(duration=4.0, times=(0.0, 2.0), moment=1, rule="middle")
    spans = np.array([[np.nan, np.nan], [10.0, 20.0]])
    labels = [[("tabby", 0.75)], [("lakeside", 0.5), ("boathouse", 0.25)]]
    first, second = picks_of(
        ranking(spans=spans), FILES, photos(), clips={FILES[3].path: clip}, dates=dates, labels=labels
    )
    assert (first.taken, first.taken_source) == ("1970-01-01T01:00:00+00:00", "file")
    assert (second.taken, second.taken_source) == ("1970-01-01T01:00:00+01:00", "exif")
    assert [(m.taken, m.taken_source) for m in second.members] == [
        (None, "none"),
        ("1970-01-01T00:01:00", "exif-local"),
    ]
    assert first.clip is clip and first.kind == "clip" and second.clip is None and second.kind == "photo"
    assert first.labels == (Label("tabby", 0.75),)
    assert [label.label for label in second.labels] == ["lakeside", "boathouse"]
    assert first.span is None  # none of its photos dated
    assert second.span == (10.0, 20.0)


def test_labels_must_match_the_picks_one_for_one():
    with pytest.raises(ValueError):
        picks_of(ranking(), FILES, photos(), labels=[[("tabby", 0.5)]])


def test_an_empty_ranking_has_no_picks():
    empty = Ranking(np.array([], np.int64), np.array([], np.float32), np.array([], np.int64), np.array([]))
    assert picks_of(empty, FILES, photos()) == []


def test_utc_times_keep_microseconds_and_drop_the_rest():
    when = utc_datetime(1_700_000_000_123_456_789)
    assert when == datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=timezone.utc)
    assert iso_utc(1_700_000_000_123_456_789) == "2023-11-14T22:13:20.123456Z"
    assert utc_datetime(-1) == datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
    pick = Pick(rank=1, score=1.0, path=Path("/a.jpg"), size=1, mtime_ns=1_500_000_000)
    assert pick.mtime == datetime(1970, 1, 1, 0, 0, 1, 500000, tzinfo=timezone.utc)


def test_records_are_values():
    pick = Pick(rank=1, score=0.5, path=Path("/a.jpg"), size=1, mtime_ns=0)
    assert pick == Pick(rank=1, score=0.5, path=Path("/a.jpg"), size=1, mtime_ns=0)
    with pytest.raises(AttributeError):
        pick.rank = 2  # type: ignore[misc]
    failure = Failure(Path("/b.jpg"), "truncated")
    path, reason = failure
    assert (path, reason) == (Path("/b.jpg"), "truncated")
    assert Label("tabby", 0.5).p == 0.5 and not math.isnan(Label("x", 0.0).p)
