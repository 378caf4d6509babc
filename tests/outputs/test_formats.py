"""The results-list formats (novelfind.outputs.formats): TSV, CSV, JSON, JSON Lines, path lists, and the
escaping that keeps one pick on one line."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pick_fakes import MTIME_NS, make_pick

from novelfind.base.atomic import encode_output
from novelfind.media.video import ClipInfo
from novelfind.outputs import formats
from novelfind.outputs.formats import escape_field, format_results, unescape_field
from novelfind.picks import iso_utc

# --- text formats ------------------------------------------------------------------------------


def test_tsv_is_rank_score_path_best_first():
    picks = [make_pick("/lib/b.jpg", rank=2, score=0.25), make_pick("/lib/a.jpg", rank=1, score=0.75)]
    assert (
        format_results(picks, "tsv") == "1\t0.750000\t/lib/a.jpg\t0\t-\t-\n2\t0.250000\t/lib/b.jpg\t0\t-\t-\n"
    )
    assert format_results(picks) == format_results(picks, "tsv")


def test_the_tsv_line_says_when_the_pick_was_taken_and_the_span_of_its_moment():
    """One line per pick, for cut and awk: rank, score, path, member_count, taken, span (``FIRST/LAST``);
    ``-`` for what is not known."""
    from novelfind.picks import Member

    first, last = 1_562_264_528.0, 1_562_264_649.0  # 2019-07-04 18:22:08 and 18:24:09 on the camera's clock
    burst = make_pick(
        "/lib/IMG_1.jpg",
        taken="2019-07-04T18:22:08+02:00",
        taken_source="exif",
        members=(Member(Path("/lib/IMG_2.jpg"), 1, 1, 0.1), Member(Path("/lib/IMG_3.jpg"), 1, 1, 0.2)),
        span=(first, last),
    )
    alone = make_pick("/lib/IMG_9.jpg", rank=2, score=0.25)
    lines = [line.split("\t") for line in format_results([burst, alone], "tsv").splitlines()]
    assert formats.TSV_COLUMNS == ("rank", "score", "path", "member_count", "taken", "span")
    assert lines == [
        [
            "1",
            "0.500000",
            "/lib/IMG_1.jpg",
            "2",
            "2019-07-04T18:22:08+02:00",
            "2019-07-04T18:22:08/2019-07-04T18:24:09",
        ],
        ["2", "0.250000", "/lib/IMG_9.jpg", "0", "-", "-"],
    ]
    # the span is the JSON span's times
    span = json.loads(format_results([burst], "json"))["picks"][0]["span"]
    assert lines[0][5] == f"{span['first']}/{span['last']}"


def test_no_picks_is_empty_output():
    assert format_results([], "tsv") == ""
    assert format_results([], "paths") == ""
    assert json.loads(format_results([], "json"))["picks"] == []


def test_tsv_escapes_separators_so_one_line_is_one_pick():
    nasty = "/lib/a\tb\nc\\d\re\x1bf.jpg"
    out = format_results([make_pick(nasty)], "tsv")
    assert out.count("\n") == 1 and out.count("\t") == 5
    field = out.rstrip("\n").split("\t")[2]
    assert field == "/lib/a\\tb\\nc\\\\d\\re\\x1bf.jpg"
    assert unescape_field(field) == nasty


def test_undecodable_file_name_bytes_round_trip():
    raw = b"/lib/caf\xe9.jpg"  # Latin-1 name, not UTF-8
    path = os.fsdecode(raw)
    tsv = format_results([make_pick(path)], "tsv")
    tsv.encode("utf-8")  # valid UTF-8 text
    assert "caf\\xe9.jpg" in tsv
    assert os.fsencode(unescape_field(tsv.rstrip("\n").split("\t")[2])) == raw
    doc = json.loads(format_results([make_pick(path)], "json"))
    assert os.fsencode(doc["picks"][0]["path"]) == raw
    assert encode_output(format_results([make_pick(path)], "paths0")) == raw + b"\0"


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0xDCFF)))
def test_escape_round_trips_and_leaves_no_separators(text):
    escaped = escape_field(text)
    assert not any(ch in escaped for ch in "\t\n\r\0")
    assert unescape_field(escaped) == text


def test_ordinary_paths_are_unchanged():
    name = "/home/ana/Fotos/Été 2023/IMG_0001 (1).JPG"
    assert escape_field(name) == name


def test_paths_and_paths0():
    picks = [make_pick("/lib/b c.jpg", rank=2), make_pick("/lib/a\nb.jpg", rank=1)]
    assert format_results(picks, "paths") == "/lib/a\\nb.jpg\n/lib/b c.jpg\n"
    assert format_results(picks, "paths0") == "/lib/a\nb.jpg\0/lib/b c.jpg\0"


def test_csv_has_schema_columns_and_parses_back():
    picks = [
        make_pick('/lib/a,"b".jpg', rank=1, score=0.5),
        make_pick("/lib/only.jpg", rank=2, score=0.25, neighbour=None, distance=None),
        make_pick("/lib/IMG_1.JPG", rank=3, also=(Path("/lib/IMG_1.CR2"), Path('/lib/IMG_1 "x",.HEIC'))),
    ]
    rows = list(csv.reader(io.StringIO(format_results(picks, "csv"))))
    assert rows[0] == [
        *"rank score path size mtime neighbour distance also member_count taken taken_source labels".split(),
        "span_first",
        "span_last",
    ]
    assert rows[1] == [
        "1",
        "0.500000",
        '/lib/a,"b".jpg',
        "1234",
        "2023-11-14T22:13:20.123456Z",
        "/lib/near.jpg",
        "1.250000",
        "",
        "0",
        "",
        "none",
        "",
        "",
        "",
    ]
    assert rows[2][5:] == ["", "", "", "0", "", "none", "", "", ""]
    # a photo's other files: a JSON array of paths (empty cell when there are none)
    assert json.loads(rows[3][7]) == ["/lib/IMG_1.CR2", '/lib/IMG_1 "x",.HEIC']


def test_a_moments_time_span_is_in_tsv_csv_and_json():
    """The first and last capture time of a dated moment: the tsv column ``span`` (``FIRST/LAST``, ``-``
    without capture times), the last two csv columns and the JSON field ``span`` (empty, null without
    capture times). One line per pick."""
    import calendar

    first, last = calendar.timegm((2024, 6, 4, 20, 5, 0)), calendar.timegm((2024, 6, 4, 20, 53, 0))
    dated = make_pick("/lib/aerial_04.jpg", rank=1, span=(float(first), float(last)))
    picks = [dated, make_pick("/lib/b.jpg", rank=2)]
    lines = format_results(picks, "tsv").splitlines()
    assert [line.split("\t")[5:] for line in lines] == [["2024-06-04T20:05:00/2024-06-04T20:53:00"], ["-"]]
    rows = list(csv.reader(io.StringIO(format_results(picks, "csv"))))
    assert rows[0][-2:] == ["span_first", "span_last"]
    assert [row[-2:] for row in rows[1:]] == [["2024-06-04T20:05:00", "2024-06-04T20:53:00"], ["", ""]]
    doc = json.loads(format_results(picks, "json"))
    assert doc["picks"][0]["span"] == {
        "first": "2024-06-04T20:05:00",
        "last": "2024-06-04T20:53:00",
        "photos": 1,
    }
    assert doc["picks"][1]["span"] is None


def test_labels_are_in_the_json_formats_and_the_csv_column_labels():
    """What the model takes a pick for: a list of {label, p} in JSON and JSON lines, ``telescope 0.41,
    planetarium 0.12`` in the csv's column ``labels``; none for a pick without labels."""
    from novelfind.picks import Label

    labels = (Label("telescope", 0.41273), Label("planetarium", 0.1188))
    labelled = dataclasses.replace(make_pick("/lib/a.jpg", rank=1, score=0.5), labels=labels)
    picks = [labelled, make_pick("/lib/b.jpg", rank=2, score=0.25)]
    doc = json.loads(format_results(picks, "json"))
    want = [{"label": "telescope", "p": 0.4127}, {"label": "planetarium", "p": 0.1188}]
    assert doc["picks"][0]["labels"] == want
    assert doc["picks"][1]["labels"] == []
    lines = [json.loads(line) for line in format_results(picks, "jsonl").splitlines()]
    assert lines[1]["labels"] == doc["picks"][0]["labels"] and lines[2]["labels"] == []
    rows = list(csv.reader(io.StringIO(format_results(picks, "csv"))))
    col = rows[0].index("labels")
    assert [row[col] for row in rows[1:]] == ["telescope 0.41, planetarium 0.12", ""]


def test_json_document_schema():
    picks = [make_pick("/lib/a.jpg", rank=1, score=0.5)]
    run = {"k": 1, "paths": [Path("/lib")], "images_found": 3}
    doc = json.loads(format_results(picks, "json", failures=[(Path("/lib/bad.jpg"), "truncated")], run=run))
    assert doc["schema"] == "novelfind/results"
    assert doc["version"] == formats.RESULT_SCHEMA_VERSION == 2
    assert doc["run"] == {"k": 1, "paths": ["/lib"], "images_found": 3}
    assert doc["picks"] == [
        {
            "rank": 1,
            "score": 0.5,
            "path": "/lib/a.jpg",
            "size": 1234,
            "mtime": "2023-11-14T22:13:20.123456Z",
            "mtime_ns": MTIME_NS,
            "neighbour": "/lib/near.jpg",
            "distance": 1.25,
            "also": [],
            "kind": "photo",
            "clip": None,
            "member_count": 0,
            "members": [],
            "taken": None,
            "taken_source": "none",
            "members_taken": [],
            "members_taken_source": [],
            "labels": [],
            "span": None,
        }
    ]
    assert doc["failures"] == [{"path": "/lib/bad.jpg", "reason": "truncated"}]


def test_a_clip_in_json_has_its_kind_frame_times_duration_and_moment():
    clip = ClipInfo(duration=12.3456, times=(1.0, 3.5, 6.0), moment=1, rule="r/1")
    pick = dataclasses.replace(make_pick("/lib/VID_1.mp4"), clip=clip)
    record = json.loads(format_results([pick], "json"))["picks"][0]
    assert (record["kind"], record["clip"]) == (
        "clip",
        {"duration": 12.346, "frame_times": [1.0, 3.5, 6.0], "moment": 3.5},
    )
    line = json.loads(format_results([pick], "jsonl").splitlines()[1])
    assert line["kind"] == "clip" and line["clip"]["moment"] == 3.5
    assert (
        format_results([pick], "tsv") == "1\t0.500000\t/lib/VID_1.mp4\t0\t-\t-\n"
    )  # the line formats: no clip fields


def test_a_photos_other_files_in_json_and_jsonl_only_as_also():
    """A RAW + JPEG pair is one record: listed by its JPEG, the RAW in ``also``; tsv and paths unchanged."""
    pick = make_pick("/lib/IMG_1.JPG", also=(Path("/lib/IMG_1.CR2"),))
    doc = json.loads(format_results([pick], "json"))
    assert doc["picks"][0]["path"] == "/lib/IMG_1.JPG" and doc["picks"][0]["also"] == ["/lib/IMG_1.CR2"]
    line = json.loads(format_results([pick], "jsonl").splitlines()[1])
    assert line["type"] == "pick" and line["also"] == ["/lib/IMG_1.CR2"]
    assert format_results([pick], "tsv") == "1\t0.500000\t/lib/IMG_1.JPG\t0\t-\t-\n"
    assert format_results([pick], "paths") == "/lib/IMG_1.JPG\n"
    assert pick.files == (Path("/lib/IMG_1.JPG"), Path("/lib/IMG_1.CR2"))


def test_json_accepts_numpy_values():
    np = pytest.importorskip("numpy")
    pick = make_pick("/lib/a.jpg", score=np.float32(0.5), distance=np.float32(2.0))
    doc = json.loads(format_results([pick], "json", run={"seed": np.int64(3)}))
    assert doc["run"]["seed"] == 3 and doc["picks"][0]["distance"] == 2.0


def test_json_never_contains_nan():
    pick = make_pick("/lib/a.jpg", score=0.5, distance=float("inf"))
    text = format_results([pick], "json", run={"lr": float("nan"), "nested": {"x": [float("inf")]}})
    doc = json.loads(text)  # strict JSON: no NaN / Infinity tokens
    assert "NaN" not in text and "Infinity" not in text
    assert doc["picks"][0]["score"] == 0.5 and doc["picks"][0]["distance"] is None
    assert doc["run"] == {"lr": None, "nested": {"x": [None]}}


@pytest.mark.parametrize("fmt", ["json", "jsonl", "tsv", "csv"])
@pytest.mark.parametrize("score", [float("nan"), float("inf")])
def test_a_score_that_is_not_a_number_is_an_internal_error_not_a_null(fmt, score):
    with pytest.raises(ValueError, match="internal error: a pick's score is"):
        format_results([make_pick("/lib/a.jpg", score=score)], fmt)


def test_jsonl_one_object_per_line_with_type():
    picks = [make_pick("/lib/b.jpg", rank=2), make_pick("/lib/a.jpg", rank=1)]
    out = format_results(picks, "jsonl", failures=[("/lib/x.jpg", "bad")], run={"k": 2})
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["type"] for line in lines] == ["run", "pick", "pick", "failure"]
    assert lines[0] == {"type": "run", "schema": "novelfind/results", "version": 2, "run": {"k": 2}}
    assert [line["rank"] for line in lines[1:3]] == [1, 2]
    assert lines[3] == {"type": "failure", "path": "/lib/x.jpg", "reason": "bad"}


def test_unknown_format_is_value_error():
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        format_results([], "xml")


def test_iso_utc():
    assert iso_utc(MTIME_NS) == "2023-11-14T22:13:20.123456Z"
    assert iso_utc(0) == "1970-01-01T00:00:00.000000Z"


# --- place_picks -------------------------------------------------------------------------------
