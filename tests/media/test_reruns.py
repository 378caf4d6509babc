"""The record of a line's runs: which photos its last run considered, per line, beside the ignore list."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from novelfind.media import reruns
from novelfind.media.reruns import LineRecord, line_name, photo_keys, record_path
from novelfind.media.walk import FileList, ImageFile


def files(*records: tuple[str, int, int]) -> FileList:
    return FileList(ImageFile(Path(path), size, mtime) for path, size, mtime in records)


def test_the_record_lies_beside_the_ignore_list():
    assert record_path(Path("/data/novelfind/ignored.json")) == Path("/data/novelfind/ignored.lines.json")
    assert record_path("/x/list") == Path("/x/list.lines.json")


def test_a_line_is_named_by_its_options_in_any_order():
    one = line_name({"paths": ["/p"], "k": 20, "xmp": True})
    assert one == line_name({"xmp": True, "k": 20, "paths": ["/p"]})
    assert one != line_name({"paths": ["/p"], "k": 21, "xmp": True})
    assert len(one) == 32 and int(one, 16) >= 0


def test_a_photo_is_known_by_its_path_size_and_time():
    keys = photo_keys(
        files(("/p/a.jpg", 10, 5), ("/p/a.jpg", 11, 5), ("/p/a.jpg", 10, 6), ("/p/b.jpg", 10, 5))
    )
    assert keys.dtype == np.uint64 and len(set(keys.tolist())) == 4
    assert photo_keys(files(("/p/a.jpg", 10, 5))).tolist() == keys[:1].tolist()


def test_a_line_remembers_the_photos_of_its_window_and_the_others_do_not_see_them(tmp_path):
    path = tmp_path / "ignored.lines.json"
    keys = photo_keys(files(*[(f"/p/{i}.jpg", 10, i) for i in range(4)]))
    first = LineRecord(path, "sunday", keys)
    assert first.considered.tolist() == [False] * 4  # never run
    first.remember(np.array([True, True, False, True]))
    assert LineRecord(path, "sunday", keys).considered.tolist() == [True, True, False, True]
    assert LineRecord(path, "nightly", keys).considered.tolist() == [False] * 4
    # a later run records its own window: what fell out of it is forgotten
    LineRecord(path, "sunday", keys).remember(np.array([False, False, True, True]))
    assert LineRecord(path, "sunday", keys).considered.tolist() == [False, False, True, True]
    # a photo it never saw (another key) is new
    more = np.concatenate([keys, photo_keys(files(("/p/new.jpg", 3, 3)))])
    assert LineRecord(path, "sunday", more).considered.tolist() == [False, False, True, True, False]


def test_only_the_lines_run_last_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(reruns, "MAX_LINES", 2)
    path = tmp_path / "lines.json"
    keys = photo_keys(files(("/p/a.jpg", 1, 1)))
    for name in ("one", "two", "three"):
        LineRecord(path, name, keys).remember(np.array([True]))
    lines = json.loads(path.read_text())["lines"]
    assert len(lines) == 2 and "three" in lines
    assert lines["three"]["photos"] == 1 and len(lines["three"]["considered"]) == 12  # base64 of 8 bytes


def test_a_damaged_record_is_passed_over_with_a_warning_and_written_anew(tmp_path):
    path = tmp_path / "lines.json"
    path.write_text(
        '{"version": 1, "lines": {"sunday": {"run": "2026-11-22T04:00:00+00:00", "considered": "abc"}}}'
    )
    heard: list[str] = []
    keys = photo_keys(files(("/p/a.jpg", 1, 1)))
    record = LineRecord(path, "sunday", keys, heard.append)
    assert record.considered.tolist() == [False]
    (warning,) = heard
    assert warning.startswith(f"the record of earlier runs {path} cannot be read (damaged (")
    assert warning.endswith("every photo since counts as new, and this run records itself anew")
    record.remember(np.array([True]))
    assert LineRecord(path, "sunday", keys, heard.append).considered.tolist() == [True]
    assert len(heard) == 1


def test_a_record_that_cannot_be_written_is_a_warning(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    heard: list[str] = []
    record = LineRecord(blocked / "lines.json", "sunday", np.array([7], np.uint64), heard.append)
    record.remember(np.array([True]))  # the folder cannot be made: the scan goes on
    (warning,) = heard
    assert warning.startswith(f"cannot record this run in {blocked / 'lines.json'} (")
    assert warning.endswith("the next run of the line counts every photo as new")
