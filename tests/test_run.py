"""The scan as one call (``novelfind.run``), on its own: how ``scan()`` binds its arguments, what it
returns, the callbacks it calls in which order, and that it prints nothing."""

from __future__ import annotations

import numpy as np
import pytest
from common import make_photo

from novelfind import run as run_module
from novelfind.errors import NovelfindError
from novelfind.params import ScanParameters
from novelfind.results import Progress, ScanResult
from novelfind.run import CALLBACKS, run, scan


@pytest.fixture
def tiny(tmp_path):
    """Five photos: four of one colour, one red."""
    root = tmp_path / "lib"
    for i in range(4):
        make_photo(root / f"blue_{i}.jpg", (40, 60, 200), seed=i)
    make_photo(root / "red.jpg", (220, 30, 30), seed=9)
    return root


def test_scan_binds_like_its_signature_and_returns_a_result(tiny, fake_extractor, capsys):
    result = scan(tiny, 2, cache=False)
    assert isinstance(result, ScanResult)
    assert result.parameters == ScanParameters(tiny, 2, cache=False)
    assert len(result.picks) == 2 and result.picks[0].path == tiny / "red.jpg"
    assert [p.rank for p in result.picks] == [1, 2]
    assert len(result.files) == 5 and result.features.shape == (5, fake_extractor.dim)
    assert (result.counts.found, result.counts.photos, result.counts.extracted) == (5, 5, 5)
    assert result.failures == [] and result.warnings == [] and result.sidecars is None
    assert capsys.readouterr() == ("", "")
    with pytest.raises(TypeError):
        scan(tiny, 2, no_such_option=1)
    with pytest.raises(TypeError):
        scan(tiny, 2, False)  # only the paths and k by position


def test_run_takes_checked_parameters_and_gives_what_scan_gives(tiny, fake_extractor):
    by_scan = scan(tiny, k=3, cache=False, method="knn")
    by_run = run(ScanParameters(tiny, k=3, cache=False, method="knn"))
    assert [p.path for p in by_run.picks] == [p.path for p in by_scan.picks]
    np.testing.assert_array_equal(by_run.features, by_scan.features)
    assert CALLBACKS == ("on_progress", "on_warning", "on_failure")
    assert not set(CALLBACKS) & set(ScanParameters.__dataclass_fields__)  # never a parameter


def test_progress_goes_walk_extract_rank_then_write(tiny, fake_extractor, monkeypatch, tmp_path):
    monkeypatch.setattr(run_module, "WALK_PROGRESS_EVERY", 2)
    events: list[Progress] = []
    scan(tiny, 2, cache=False, output=tmp_path / "picks.csv", format="csv", on_progress=events.append)
    assert all(isinstance(e, Progress) for e in events)
    walk = [e.done for e in events if e.stage == "walk"]
    assert walk[:2] == [2, 4] and walk[-1] == 5  # every second file found, then the count walked
    stages = list(dict.fromkeys(e.stage for e in events))
    assert stages.index("walk") < stages.index("extract") < stages.index("rank") < stages.index("write")
    assert [(e.done, e.total) for e in events if e.stage == "rank"] == [(0, 1), (1, 1)]
    write = [e for e in events if e.stage == "write"]
    assert write[-1].done == write[-1].total
    assert (tmp_path / "picks.csv").is_file()


def test_warnings_go_to_the_callback_or_else_into_the_result(tiny, fake_extractor, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("x")  # no folder can be made under it: the cache cannot be opened
    kept = scan(tiny, 2, cache=blocked / "c.sqlite")
    assert len(kept.warnings) == 1 and kept.warnings[0].endswith("; running without the cache")
    heard: list[str] = []
    told = scan(tiny, 2, cache=blocked / "c.sqlite", on_warning=heard.append)
    assert heard == kept.warnings and told.warnings == []
    assert [p.path for p in told.picks] == [p.path for p in kept.picks]


def test_an_unreadable_file_is_reported_once_per_cache(tiny, fake_extractor, tmp_path):
    broken = tiny / "broken.jpg"
    broken.write_bytes(b"not a jpeg")
    cache = tmp_path / "c.sqlite"
    failed: list[tuple] = []
    first = scan(tiny, 2, cache=cache, on_failure=lambda path, reason: failed.append((path, reason)))
    assert failed == [(broken, "not a recognised image format")]
    assert (first.counts.failed, first.counts.known_failed) == (1, 0)
    failed.clear()
    again = scan(tiny, 2, cache=cache, on_failure=lambda path, reason: failed.append((path, reason)))
    assert failed == []  # unchanged since the last scan reported it
    assert (again.counts.failed, again.counts.known_failed) == (1, 1)
    assert [f.path for f in again.known_failures] == [broken]
    assert (again.counts.from_cache, again.counts.extracted) == (5, 0)


def test_a_library_none_of_whose_images_can_be_read_stops_the_scan(tmp_path, fake_extractor, capsys):
    root = tmp_path / "broken"
    root.mkdir()
    for name in ("a.jpg", "b.png"):
        (root / name).write_bytes(b"garbage")
    with pytest.raises(NovelfindError) as stopped:
        scan(root, 2, cache=False)
    assert str(stopped.value) == "none of the 2 images could be read: not a recognised image format"
    assert capsys.readouterr() == ("", "")


def test_a_scan_of_one_unreadable_photo_says_why(tmp_path, fake_extractor):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"garbage")
    with pytest.raises(NovelfindError) as stopped:
        scan(broken, 2, cache=False)
    assert str(stopped.value) == f"cannot read {broken}, the only image: not a recognised image format"


def test_of_many_unreadable_photos_the_commonest_reason_is_said_with_its_count(tmp_path, fake_extractor):
    for name in ("a.jpg", "b.jpg", "c.png"):
        (tmp_path / name).write_bytes(b"garbage")
    (tmp_path / "d.jpg").write_bytes(b"")  # another reason
    with pytest.raises(NovelfindError) as stopped:
        scan(tmp_path, 2, cache=False)
    assert str(stopped.value) == (
        "none of the 4 images could be read; the commonest reason (3 of 4): not a recognised image format"
    )
