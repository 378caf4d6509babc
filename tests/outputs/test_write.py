"""The outputs' checks before the slow part, the run's own files, and where the thumbnails are kept."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from novelfind.base import atomic, dirs
from novelfind.errors import InputError, OutputError
from novelfind.outputs import write
from novelfind.outputs.placement import MANIFEST_NAME
from novelfind.outputs.write import OutputSettings, OwnOutputs, check_outputs, thumbnail_cache_path


def settings(tmp_path: Path, **changes) -> OutputSettings:
    base = OutputSettings(
        paths=(tmp_path / "lib",),
        output=None,
        format="text",
        copy_to=None,
        link="copy",
        copy_members=False,
        follow_symlinks=False,
        report=None,
        contact_sheet=None,
        xmp=False,
        xmp_keyword="novel",
        decode_timeout=None,
        shared_outputs=False,
        cache=False,
    )
    return dataclasses.replace(base, **changes)


def test_settings_are_taken_by_name_and_nothing_else(tmp_path):
    given = settings(tmp_path, report=tmp_path / "r.html")
    scan_parameters = SimpleNamespace(**dataclasses.asdict(given), k=10, method="cosine-knn")
    assert OutputSettings.of(scan_parameters) == given


def test_an_output_target_that_cannot_be_written_fails_first(tmp_path):
    (tmp_path / "folder.html").mkdir()
    with pytest.raises(OutputError, match=r"^cannot write the report .*folder\.html: it is a folder$"):
        check_outputs(settings(tmp_path, report=tmp_path / "folder.html"))
    missing = tmp_path / "nowhere" / "sheet.png"
    with pytest.raises(OutputError) as err:
        check_outputs(settings(tmp_path, contact_sheet=missing))
    assert (
        str(err.value) == f"cannot write the contact sheet {missing}: folder {missing.parent} does not exist"
    )
    check_outputs(settings(tmp_path, output=tmp_path / "list.txt", report=tmp_path / "r.html"))  # fine


@pytest.mark.parametrize(
    "name, option", [("results file", "output"), ("report", "report"), ("contact sheet", "contact_sheet")]
)
def test_a_link_at_any_output_is_refused_before_the_scan(tmp_path, name, option):
    (tmp_path / "real.png").write_text("")
    (tmp_path / "link.png").symlink_to(tmp_path / "real.png")
    with pytest.raises(OutputError) as refused:
        check_outputs(settings(tmp_path, **{option: tmp_path / "link.png"}))
    assert str(refused.value) == f"cannot write the {name} {tmp_path / 'link.png'}: {atomic.LINK_REFUSED}"


def test_a_picks_folder_must_lie_outside_the_scan_and_be_a_folder(tmp_path):
    lib = tmp_path / "lib"
    (lib / "2024").mkdir(parents=True)
    with pytest.raises(InputError, match=r"^cannot place the picks in .*: it holds the scanned folder"):
        check_outputs(settings(tmp_path, paths=(lib / "2024",), copy_to=lib))
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OutputError, match=r"a-file: it is not a folder$"):
        check_outputs(settings(tmp_path, copy_to=tmp_path / "a-file"))
    with pytest.raises(
        OutputError, match=r"^cannot place the picks in .*a-file/deeper: .*a-file is not a folder$"
    ):
        check_outputs(settings(tmp_path, copy_to=tmp_path / "a-file" / "deeper"))
    check_outputs(settings(tmp_path, copy_to=tmp_path / "picks" / "new"))  # made when the picks are placed


def test_an_existing_picks_folder_is_held_open_for_the_run(tmp_path):
    with write.held_outputs(settings(tmp_path, copy_to=tmp_path / "not-yet")) as held:
        assert held.picks_folder is None
    (tmp_path / "picks").mkdir()
    with write.held_outputs(settings(tmp_path, copy_to=tmp_path / "picks")) as held:
        fd = held.picks_folder
        assert fd is not None and os.path.samefile(f"/proc/self/fd/{fd}", tmp_path / "picks")
    assert held.picks_folder is None
    with pytest.raises(OSError):
        os.fstat(fd)  # closed


def test_own_outputs_are_the_targets_and_any_folder_of_placed_picks(tmp_path):
    own = OwnOutputs([tmp_path / "r.html", tmp_path / "out"])
    assert own.contains(tmp_path / "r.html")
    assert own.contains(tmp_path / "out" / "deep" / "x.jpg")
    assert not own.contains(tmp_path / "r.html.jpg")
    (tmp_path / "old-picks").mkdir()
    (tmp_path / "old-picks" / MANIFEST_NAME).write_text("{}")
    assert own.contains(tmp_path / "old-picks" / "a.jpg")
    assert not own.contains(tmp_path / "lib" / "a.jpg")


def test_the_thumbnails_are_kept_beside_the_feature_cache(tmp_path):
    assert thumbnail_cache_path(False) is None
    assert thumbnail_cache_path(None) is None
    assert thumbnail_cache_path(tmp_path / "c.sqlite") == tmp_path / "thumbnails.sqlite"
    assert thumbnail_cache_path(str(tmp_path / "c.sqlite")) == tmp_path / "thumbnails.sqlite"
    assert (
        thumbnail_cache_path(SimpleNamespace(path=tmp_path / "x" / "c.sqlite"))
        == tmp_path / "x" / "thumbnails.sqlite"
    )
    assert thumbnail_cache_path(True) == dirs.feature_cache_path().parent / "thumbnails.sqlite"
