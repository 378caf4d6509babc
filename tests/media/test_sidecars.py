"""Which XMP sidecar belongs to a photo, on its own: the names looked at, and when ``NAME.xmp`` is the
photo's and when it may be another file's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from novelfind.media.sidecars import sidecar_candidates, sidecar_for, sidecar_name


def files(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"x")
    return folder


def test_candidates_of_names_with_several_dots_or_none():
    assert [p.name for p in sidecar_candidates("/p/trip.day1.JPG")] == [
        "trip.day1.JPG.xmp",
        "trip.day1.JPG.XMP",
        "trip.day1.xmp",
        "trip.day1.XMP",
    ]
    # without an extension NAME.xmp and NAME.EXT.xmp are one name
    assert [p.name for p in sidecar_candidates("/p/scan")] == ["scan.xmp", "scan.XMP"] * 2
    assert all(p.parent == Path("/p") for p in sidecar_candidates("/p/scan"))


def test_a_folder_that_cannot_be_opened_gives_the_name_a_new_sidecar_would_have(tmp_path):
    assert sidecar_for(tmp_path / "missing" / "a.jpg") == tmp_path / "missing" / "a.jpg.xmp"


def test_own_sidecars_win_in_order_upper_case_included(tmp_path):
    folder = files(tmp_path, "a.jpg", "a.jpg.XMP", "a.xmp")
    assert sidecar_for(folder / "a.jpg") == folder / "a.jpg.XMP"
    files(folder, "a.jpg.xmp")
    assert sidecar_for(folder / "a.jpg") == folder / "a.jpg.xmp"


@pytest.mark.parametrize(
    "names, photo, twins, expected",
    [
        (["a.JPG", "a.xmp"], "a.JPG", [], "a.xmp"),  # alone with it: its own
        (["a.JPG", "a.PNG", "a.xmp"], "a.JPG", [], "a.JPG.xmp"),  # an unrelated a.PNG may own it
        (["a.JPG", "A.png", "a.xmp"], "a.JPG", [], "a.JPG.xmp"),  # names compared without case
        (["a.JPG", "a.CR2", "a.xmp"], "a.JPG", ["a.CR2"], "a.xmp"),  # the RAW twin's JPEG shares it
        (["a.CR2", "a.tif", "a.xmp"], "a.CR2", [], "a.xmp"),  # a RAW beside an export: the RAW's
        (["a.CR2", "a.DNG", "a.xmp"], "a.CR2", [], "a.CR2.xmp"),  # two RAWs: whose is it?
        (["a.JPG", "a.XMP", "a.xmp"], "a.JPG", [], "a.xmp"),  # sidecars own none; lower case first
        (["a.JPG", "ab.PNG", "a.xmp"], "a.JPG", [], "a.xmp"),  # another name altogether
    ],
)
def test_name_xmp_is_taken_only_when_no_other_file_may_own_it(tmp_path, names, photo, twins, expected):
    folder = files(tmp_path / "lib", *names)
    assert sidecar_for(folder / photo, [folder / t for t in twins]) == folder / expected


def test_sidecar_name_looks_in_the_folder_it_is_given(tmp_path):
    folder = files(tmp_path / "lib", "IMG_1.NEF", "IMG_1.XMP")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        # the photo's own path may name any folder: only the name is looked up, in dir_fd
        assert sidecar_name(fd, Path("/elsewhere/IMG_1.NEF"), []) == "IMG_1.XMP"
        assert sidecar_name(fd, Path("/elsewhere/IMG_2.NEF"), []) == "IMG_2.NEF.xmp"
    finally:
        os.close(fd)
