"""Nothing skipped in silence: HEIC files without pillow-heif and clips without PyAV are counted, with why."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from common import make_photo

from novelfind.cli.group import cli
from novelfind.media import video, walk
from novelfind.media.extensions import HEIF_EXTENSIONS, VIDEO_EXTENSIONS


@pytest.fixture
def without_heif(monkeypatch):
    """The walk as it is on an installation without pillow-heif: HEIC/HEIF names are not offered."""
    monkeypatch.setattr(walk, "WALKED_EXTENSIONS", walk.WALKED_EXTENSIONS - HEIF_EXTENSIONS)


@pytest.fixture
def without_pyav(monkeypatch):
    """The walk as it is on an installation without PyAV: clips are not offered."""
    monkeypatch.setattr(walk, "WALKED_EXTENSIONS", walk.WALKED_EXTENSIONS - VIDEO_EXTENSIONS)


def scan(*args, cache: Path):
    return CliRunner().invoke(cli, ["scan", *map(str, args), "--cache", str(cache)])


def test_skipped_kind_names_heic_without_pillow_heif_and_clips_without_pyav(without_heif, without_pyav):
    assert walk.skipped_kind("IMG_0001.HEIC") == "heif"
    assert walk.skipped_kind("a.hif") == "heif"
    for name in ("clip.mp4", "CLIP.MOV", "a.m4v", "a.3gp", "a.mts", "a.m2ts", "a.avi", "a.mkv", "a.webm"):
        assert walk.skipped_kind(name) == "video", name
    assert walk.skipped_kind("notes.txt") is None
    assert walk.skipped_kind("IMG_0001.jpg") is None


def test_clips_are_walked_not_counted_as_skipped_when_pyav_reads_them(monkeypatch):
    monkeypatch.setattr(walk, "WALKED_EXTENSIONS", walk.WALKED_EXTENSIONS | VIDEO_EXTENSIONS)
    assert walk.skipped_kind("clip.mp4") is None
    assert walk.is_image_name("CLIP.MOV")


def test_the_walk_offers_clips_exactly_when_pyav_is_installed():
    assert (VIDEO_EXTENSIONS <= walk.WALKED_EXTENSIONS) == video.installed()


def test_heic_is_not_counted_as_skipped_when_pillow_heif_reads_it(monkeypatch):
    monkeypatch.setattr(walk, "WALKED_EXTENSIONS", walk.WALKED_EXTENSIONS | HEIF_EXTENSIONS)
    assert walk.skipped_kind("IMG_0001.HEIC") is None
    assert walk.is_image_name("IMG_0001.HEIC")


def test_the_walk_counts_skipped_files_it_would_otherwise_drop(tmp_path, without_heif, without_pyav):
    make_photo(tmp_path / "a.jpg", (10, 10, 10), seed=1)
    for name in ("b.heic", "c.HEIF", "clip.mp4", "d/clip.mov", ".hidden.mp4", "skip/x.mov", "notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    skipped: list[tuple[str, str]] = []
    found = list(
        walk.walk(tmp_path, exclude=["skip"], on_skipped=lambda kind, name: skipped.append((kind, name)))
    )
    assert [f.path.name for f in found] == ["a.jpg"]
    # hidden and excluded files are not counted
    assert sorted(skipped) == [
        ("heif", "b.heic"),
        ("heif", "c.HEIF"),
        ("video", "clip.mov"),
        ("video", "clip.mp4"),
    ]


def test_a_mixed_folder_names_its_heic_files_and_clips(
    library, fake_extractor, tmp_path, without_heif, without_pyav
):
    root = library["root"]
    for name in ("IMG_1.HEIC", "IMG_2.heic", "trip1/clip.mp4"):
        (root / name).write_bytes(b"not really")
    result = scan(root, "--k", "3", cache=tmp_path / "c.sqlite")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert (
        "warning: 2 HEIC/HEIF files left out: HEIC support is not installed "
        "(pip install 'novelfind[heif]')" in lines
    )
    assert (
        "warning: 1 clip left out (clip.mp4): reading clips needs PyAV (pip install 'novelfind[video]')"
        in lines
    )
    assert len(result.stdout.splitlines()) == 3
    assert sum("left out" in line for line in lines) == 2  # one line per kind


def test_the_clips_line_names_three_and_escapes_names(tmp_path, fake_extractor, without_pyav):
    make_photo(tmp_path / "a.jpg", (10, 10, 10), seed=1)
    make_photo(tmp_path / "b.jpg", (200, 10, 10), seed=2)
    for name in ("c0\nwarning: x.webm", "c1.mp4", "c2.mov", "c3.mkv"):
        (tmp_path / name).write_bytes(b"clip")
    result = scan(tmp_path, "--k", "1", cache=tmp_path / "c.sqlite")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert not any(line.startswith("warning: x") for line in lines)
    [line] = [line for line in lines if "clips left out" in line]
    assert line.startswith("warning: 4 clips left out (")
    assert line.endswith(", ...): reading clips needs PyAV (pip install 'novelfind[video]')")
    assert line.count(", ") == 3  # three names, then "..."
    assert walk.skipped_message("video", 1, ["c0\nwarning: x.webm"]) == (
        "1 clip left out (c0\\nwarning: x.webm): reading clips needs PyAV (pip install 'novelfind[video]')"
    )


def test_clips_alone_without_pyav_say_why_nothing_was_found(tmp_path, fake_extractor, without_pyav):
    (tmp_path / "a.mp4").write_bytes(b"clip")
    result = scan(tmp_path, cache=tmp_path / "c.sqlite")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"error: no images found in {tmp_path} (1 clip left out (a.mp4): reading clips needs PyAV "
        "(pip install 'novelfind[video]'))\n"
    )


def test_a_folder_of_only_heic_files_says_why_nothing_was_found(tmp_path, fake_extractor, without_heif):
    photos = tmp_path / "phone"
    photos.mkdir()
    for i in range(4):
        (photos / f"IMG_{i}.HEIC").write_bytes(b"heic")
    result = scan(photos, cache=tmp_path / "c.sqlite")
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"error: no images found in {photos} (4 HEIC/HEIF files left out: HEIC support is not installed "
        "(pip install 'novelfind[heif]'))\n"
    )
    assert fake_extractor.images == 0


def test_quiet_keeps_the_count_out_of_stderr(library, fake_extractor, tmp_path, without_heif, without_pyav):
    (library["root"] / "clip.mov").write_bytes(b"mov")
    result = scan(library["root"], "--k", "2", "-q", cache=tmp_path / "c.sqlite")
    assert (result.exit_code, result.stderr) == (0, "")
