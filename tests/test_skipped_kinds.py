"""Nothing skipped in silence: HEIC files without pillow-heif and video clips are counted, with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import make_photo

from novelfind import walk
from novelfind.cli import cli
from novelfind.decode import HEIF_EXTENSIONS


@pytest.fixture
def without_heif(monkeypatch):
    """The walk as it is on an installation without pillow-heif: HEIC/HEIF names are not offered."""
    monkeypatch.setattr(walk, "WALKED_EXTENSIONS", walk.WALKED_EXTENSIONS - HEIF_EXTENSIONS)


def scan(*args, cache: Path):
    return CliRunner().invoke(cli, ["scan", *map(str, args), "--cache", str(cache)])


def test_skipped_kind_names_heic_without_pillow_heif_and_videos(without_heif):
    assert walk.skipped_kind("IMG_0001.HEIC") == "heif"
    assert walk.skipped_kind("a.hif") == "heif"
    for name in ("clip.mp4", "CLIP.MOV", "a.m4v", "a.3gp", "a.mts", "a.m2ts", "a.avi", "a.mkv", "a.webm"):
        assert walk.skipped_kind(name) == "video", name
    assert walk.skipped_kind("notes.txt") is None
    assert walk.skipped_kind("IMG_0001.jpg") is None


def test_heic_is_not_counted_as_skipped_when_pillow_heif_reads_it(monkeypatch):
    monkeypatch.setattr(walk, "WALKED_EXTENSIONS", walk.WALKED_EXTENSIONS | HEIF_EXTENSIONS)
    assert walk.skipped_kind("IMG_0001.HEIC") is None
    assert walk.is_image_name("IMG_0001.HEIC")


def test_the_walk_counts_skipped_files_it_would_otherwise_drop(tmp_path, without_heif):
    make_photo(tmp_path / "a.jpg", (10, 10, 10), seed=1)
    for name in ("b.heic", "c.HEIF", "clip.mp4", "d/clip.mov", ".hidden.mp4", "skip/x.mov", "notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    kinds: list[str] = []
    found = list(walk.walk(tmp_path, exclude=["skip"], on_skipped=kinds.append))
    assert [f.path.name for f in found] == ["a.jpg"]
    assert sorted(kinds) == ["heif", "heif", "video", "video"]  # hidden and excluded files are not counted


def test_a_mixed_folder_names_its_heic_files_and_clips(library, fake_extractor, tmp_path, without_heif):
    root = library["root"]
    for name in ("IMG_1.HEIC", "IMG_2.heic", "trip1/clip.mp4"):
        (root / name).write_bytes(b"not really")
    result = scan(root, "--k", "3", cache=tmp_path / "c.sqlite")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert "warning: 2 HEIC/HEIF files left out: HEIC support is not installed " \
        "(pip install 'novelfind[heif]')" in lines
    assert "warning: 1 video clip left out: video clips are not ranked yet" in lines
    assert len(result.stdout.splitlines()) == 3


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


def test_quiet_keeps_the_count_out_of_stderr(library, fake_extractor, tmp_path, without_heif):
    (library["root"] / "clip.mov").write_bytes(b"mov")
    result = scan(library["root"], "--k", "2", "-q", cache=tmp_path / "c.sqlite")
    assert (result.exit_code, result.stderr) == (0, "")
