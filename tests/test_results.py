"""What a scan returns: the run record the JSON formats carry, the result's dates where the scan had
none, its text in each format, and the routing of warnings to ``on_warning``."""

from __future__ import annotations

import json
import logging
import warnings
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from novelfind import __version__
from novelfind.media.dates import Dates
from novelfind.media.walk import ImageFile
from novelfind.outputs.formats import format_results
from novelfind.params import ScanParameters
from novelfind.picks import Failure, Pick
from novelfind.results import Counts, Progress, ScanResult, line_options, run_record, warnings_to

COUNTS = Counts(
    found=12,
    from_cache=7,
    extracted=3,
    failed=2,
    candidates=9,
    duplicates_dropped=1,
    photos=10,
    ignored=1,
    newly_ignored=0,
    clips=2,
    known_failed=1,
)


def result(**extra) -> ScanResult:
    params = ScanParameters("/lib", k=2, format="json")
    files = [ImageFile(Path(f"/lib/{i}.jpg"), i, i) for i in range(3)]
    picks = [Pick(rank=1, score=0.75, path=files[1].path, size=1, mtime_ns=1)]
    fields = {
        "picks": picks,
        "failures": [Failure(Path("/lib/bad.jpg"), "truncated")],
        "counts": COUNTS,
        "seconds": 1.23456,
        "parameters": params,
        "files": files,
        "features": None,
    }
    return ScanResult(**{**fields, **extra})


def test_the_run_record_is_the_version_the_parameters_and_the_counts():
    params = ScanParameters("/lib", k=5, method="ads")
    record = run_record(params, COUNTS, 2.00049)
    assert record["version"] == __version__
    assert {k: record[k] for k in params.record()} == params.record()
    assert record == {
        "version": __version__,
        **params.record(),
        "images_found": 12,
        "photos_found": 10,
        "clips_found": 2,
        "ignored": 1,
        "from_cache": 7,
        "extracted": 3,
        "failed": 2,
        "duplicates_dropped": 1,
        "seconds": 2.0,
    }
    assert list(record)[:2] == ["version", "paths"]
    json.dumps(record)  # JSON values only


def test_the_run_record_lists_only_the_settings_of_the_chosen_method():
    knn = run_record(ScanParameters("/lib", method="cosine-knn"), COUNTS, 1.0)
    ads = run_record(ScanParameters("/lib", method="ads", epochs=7), COUNTS, 1.0)
    solver = ("epochs", "partners", "lr", "momentum", "seed", "restarts")
    assert [name for name in solver if name in knn] == []
    assert [name for name in solver if name in ads] == list(solver) and ads["epochs"] == 7
    assert knn["method"] == "cosine-knn" and knn["k"] == ads["k"] == 100


@pytest.mark.parametrize("since", ["7d", "2026-01-01", "2026-01-01T10:00:00", "2026-01-01T10:00:00+02:00"])
def test_the_run_records_since_is_an_aware_time_however_it_was_given(since):
    params = ScanParameters("/lib", since=since)
    recorded = datetime.fromisoformat(run_record(params, COUNTS, 1.0)["since"])
    assert recorded.utcoffset() is not None
    assert recorded.timestamp() == params.since.timestamp()  # the same moment, naive ones in local time


def test_the_run_records_since_keeps_the_offset_it_was_given():
    params = ScanParameters("/lib", since="2026-01-01T10:00:00+02:00")
    assert run_record(params, COUNTS, 1.0)["since"] == "2026-01-01T10:00:00+02:00"


def test_a_line_is_its_folders_and_options_less_since_and_how_fast_it_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sunday = dict(k=20, since="7d", xmp=True, ignore_picks=True, output="tagged.tsv")
    line = line_options(ScanParameters("photos", **sunday))
    assert line["paths"] == [str(tmp_path / "photos")] and line["output"] == str(tmp_path / "tagged.tsv")
    assert "since" not in line and "workers" not in line and "epochs" not in line
    same = [
        {**sunday, "since": "2026-01-01"},  # by hand, another day
        {**sunday, "workers": 2, "batch_size": 8, "device": "cpu", "cache": False, "wait": False},
    ]
    assert all(line_options(ScanParameters("photos", **options)) == line for options in same)
    other = [{**sunday, "k": 5}, {**sunday, "output": "b.tsv"}, {**sunday, "method": "knn"}]
    assert all(line_options(ScanParameters("photos", **options)) != line for options in other)
    assert line_options(ScanParameters("elsewhere", **sunday)) != line


def test_the_results_record_and_text_are_the_formats():
    res = result()
    assert res.record() == run_record(res.parameters, res.counts, res.seconds)
    assert res.record()["seconds"] == 1.235
    text = res.to_text()  # the scan's format: json
    assert text == format_results(res.picks, "json", failures=res.failures, run=res.record())
    assert json.loads(text)["run"]["k"] == 2
    assert res.to_text("paths") == "/lib/1.jpg\n"


def test_without_dates_every_file_is_undated():
    res = result()
    assert np.isnan(res.taken).all() and res.taken.shape == (3,)
    assert res.taken_source == ["none", "none", "none"]


def test_with_dates_the_result_gives_the_scans():
    dates = Dates(np.array([1.0, np.nan, 3.0]), ["exif", "none", "file"], np.array([0.0, np.nan, np.nan]))
    res = result(dates=dates)
    np.testing.assert_array_equal(res.taken, [1.0, np.nan, 3.0])
    assert res.taken_source == ["exif", "none", "file"]


def test_defaults_of_the_records():
    res = result()
    assert (res.known_failures, res.notices, res.warnings, res.outputs_kept) == ([], [], [], False)
    assert res.clips == {} and res.sidecars is None
    assert "files" not in repr(res) and "features" not in repr(res)
    assert Progress("walk") == Progress("walk", 0, None, None)
    small = Counts(1, 0, 1, 0, 1, 0)
    assert (small.photos, small.ignored, small.clips, small.known_failed) == (0, 0, 0, 0)


def test_warnings_and_log_records_reach_on_warning_one_each_and_stop_after():
    heard: list[str] = []
    logger = logging.getLogger("novelfind.test")
    before = warnings.showwarning
    with warnings_to(heard.append):
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("slower fallback", RuntimeWarning, stacklevel=1)
        logger.warning("cache %s unusable", "/c.sqlite")
        logger.info("not a warning")
    assert heard == ["slower fallback", "cache /c.sqlite unusable"]
    assert warnings.showwarning is before
    assert logging.getLogger("novelfind").propagate is True
    logger.warning("after")
    assert heard == ["slower fallback", "cache /c.sqlite unusable"]


def test_the_routing_is_undone_when_the_block_raises():
    logger = logging.getLogger("novelfind")
    handlers = list(logger.handlers)
    with pytest.raises(KeyError), warnings_to(lambda line: None):
        raise KeyError("x")
    assert logger.handlers == handlers and logger.propagate is True


def test_a_moments_best_original_is_a_photo_then_a_raw_twin_then_pixels_then_bytes(tmp_path):
    """The keys a scan ranks a moment's copies by: a photo before a clip; a camera's JPEG with its RAW
    before a JPEG alone; more pixels (read from the header) before fewer, even in a smaller file; then
    the larger file. Asked only for the rows it compares."""
    from PIL import Image

    from novelfind.media.pairs import PhotoList
    from novelfind.media.video import ClipInfo
    from novelfind.media.walk import FileList
    from novelfind.results import originality

    rng = np.random.default_rng(0)

    def jpeg(name: str, size: tuple[int, int], quality: int, noisy: bool) -> ImageFile:
        path = tmp_path / name
        pixels = rng.integers(0, 255, (size[1], size[0], 3)) if noisy else np.full((size[1], size[0], 3), 90)
        Image.fromarray(pixels.astype(np.uint8)).save(path, quality=quality)
        return ImageFile(path, path.stat().st_size, 0)

    camera = jpeg("IMG_1.jpg", (400, 300), 80, True)
    export = jpeg("IMG_1 export.jpg", (800, 600), 20, False)  # more pixels, a small file
    resave = jpeg("IMG_1 small.jpg", (200, 150), 100, True)  # fewer pixels, a larger file
    assert resave.size > export.size
    clip = ImageFile(tmp_path / "VID_1.mp4", 10**9, 0)
    files = FileList([camera, export, resave, clip])
    read = PhotoList(files, {0: (ImageFile(tmp_path / "IMG_1.CR2", 2 * 10**7, 0),)})
    clips = {clip.path: ClipInfo(duration=3.0, times=(1.0,), moment=0, rule="r/1")}
    keys = [tuple(k) for k in originality(files, read, clips)(np.array([0, 1, 2, 3]))]
    assert sorted(range(4), key=lambda i: keys[i], reverse=True) == [0, 1, 2, 3]
    assert keys[1][2] == 800 * 600 and keys[2][2] == 200 * 150 and keys[3][2] == 0
