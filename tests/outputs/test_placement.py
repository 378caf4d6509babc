"""Placing the picks in a folder (novelfind.outputs.placement): copies and links, their manifest, reruns,
foreign files and interrupted runs."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from pick_fakes import picks_for, three_photos

from novelfind.errors import OutputError
from novelfind.outputs import placement
from novelfind.outputs.placement import MANIFEST_NAME, pick_filename, place_picks


@pytest.fixture
def library(tmp_path: Path) -> list[Path]:
    return three_photos(tmp_path / "lib")


def test_pick_filename_padding_and_long_names():
    assert pick_filename(1, Path("/a/IMG_4411.jpg"), 3) == "001_IMG_4411.jpg"
    assert pick_filename(12, Path("/a/x.png"), 4) == "0012_x.png"
    long = pick_filename(7, Path("/a/" + "é" * 200 + ".jpeg"), 3)
    assert len(os.fsencode(long)) <= 255 and long.startswith("007_é") and long.endswith(".jpeg")


def test_copy_creates_folder_and_rank_prefixed_names(library, tmp_path):
    dest = tmp_path / "out" / "novel"
    created = place_picks(picks_for(library), dest)
    assert [p.name for p in created] == ["001_IMG_4411.jpg", "002_beach.png", "003_cat.jpg"]
    for source, copy in zip(library, created, strict=True):
        assert copy.read_bytes() == source.read_bytes() and not copy.is_symlink()
    assert sorted(os.listdir(dest)) == [MANIFEST_NAME, "001_IMG_4411.jpg", "002_beach.png", "003_cat.jpg"]
    manifest = json.loads((dest / MANIFEST_NAME).read_text())
    assert manifest["schema"] == "novelfind/picks-manifest"
    assert set(manifest["files"]) == {"001_IMG_4411.jpg", "002_beach.png", "003_cat.jpg"}


def test_a_pair_is_copied_together_and_replaced_together(library, tmp_path):
    """A RAW + JPEG pick: both files, under the pick's rank; a later run without it removes both."""
    raw = library[0].with_suffix(".CR2")
    raw.write_bytes(b"raw data of IMG_4411")
    pair = dataclasses.replace(picks_for(library[:1])[0], also=(raw,))
    dest = tmp_path / "d"
    created = place_picks([pair], dest)
    assert [p.name for p in created] == ["001_IMG_4411.jpg", "001_IMG_4411.CR2"]
    assert (dest / "001_IMG_4411.CR2").read_bytes() == raw.read_bytes()
    place_picks(picks_for([library[2]]), dest)
    assert sorted(os.listdir(dest)) == [MANIFEST_NAME, "001_cat.jpg"]


def test_pad_width_grows_with_k(library, tmp_path):
    pick = dataclasses.replace(picks_for(library[:1])[0], rank=1234)
    assert [p.name for p in place_picks([pick], tmp_path / "d")] == ["1234_IMG_4411.jpg"]


def test_symlink_and_hardlink(library, tmp_path):
    links = place_picks(picks_for(library), tmp_path / "s", mode="symlink")
    assert all(p.is_symlink() for p in links)
    assert os.readlink(links[0]) == str(library[0])
    hard = place_picks(picks_for(library), tmp_path / "h", mode="hardlink")
    assert all(p.stat().st_ino == s.stat().st_ino for p, s in zip(hard, library, strict=True))


def test_rerun_replaces_own_picks_and_removes_stale_ones(library, tmp_path):
    dest = tmp_path / "d"
    place_picks(picks_for(library), dest)
    # Next run: a different order and one pick fewer.
    again = picks_for([library[2], library[0]])
    created = place_picks(again, dest)
    assert [p.name for p in created] == ["001_cat.jpg", "002_IMG_4411.jpg"]
    assert sorted(os.listdir(dest)) == [MANIFEST_NAME, "001_cat.jpg", "002_IMG_4411.jpg"]
    assert (dest / "001_cat.jpg").read_bytes() == library[2].read_bytes()


def test_rerun_can_switch_mode(library, tmp_path):
    dest = tmp_path / "d"
    place_picks(picks_for(library), dest, mode="copy")
    created = place_picks(picks_for(library), dest, mode="symlink")
    assert all(p.is_symlink() for p in created)


def test_foreign_file_is_never_overwritten(library, tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / "002_beach.png").write_text("mine")
    with pytest.raises(OutputError) as err:
        place_picks(picks_for(library), dest)
    assert str(err.value) == (
        f"refusing to overwrite {dest / '002_beach.png'}: not created by novelfind "
        "(move it away or choose another folder)"
    )
    # Checked before anything was written.
    assert os.listdir(dest) == ["002_beach.png"]
    assert (dest / "002_beach.png").read_text() == "mine"


def test_own_file_edited_by_the_user_becomes_foreign(library, tmp_path):
    dest = tmp_path / "d"
    place_picks(picks_for(library), dest)
    edited = dest / "001_IMG_4411.jpg"
    edited.write_bytes(b"edited by hand")
    with pytest.raises(OutputError, match="refusing to overwrite"):
        place_picks(picks_for(library), dest)
    assert edited.read_bytes() == b"edited by hand"
    # ...and it is not removed as stale either.
    place_picks(picks_for(library[1:2]), dest)
    assert edited.read_bytes() == b"edited by hand"


def test_forged_manifest_entry_does_not_allow_overwrite(library, tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / "001_IMG_4411.jpg").write_text("mine")
    manifest = {
        "schema": "novelfind/picks-manifest",
        "version": 1,
        "files": {"001_IMG_4411.jpg": {"mode": "copy"}},
    }
    (dest / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(OutputError, match="refusing to overwrite"):
        place_picks(picks_for(library), dest)


def test_corrupt_manifest_counts_as_empty(library, tmp_path):
    dest = tmp_path / "d"
    place_picks(picks_for(library), dest)
    (dest / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(OutputError, match="refusing to overwrite"):
        place_picks(picks_for(library), dest)


def test_dest_is_a_file(library, tmp_path):
    dest = tmp_path / "file"
    dest.write_text("x")
    with pytest.raises(OutputError, match="is not a folder"):
        place_picks(picks_for(library), dest)


def test_dest_cannot_be_created(library, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="cannot"):
        place_picks(picks_for(library), tmp_path / "file" / "sub")


def test_missing_source_fails_before_anything_is_written(library, tmp_path):
    picks = picks_for(library)
    library[1].unlink()
    dest = tmp_path / "d"
    with pytest.raises(OutputError, match="cannot copy .*beach.png: No such file"):
        place_picks(picks, dest)
    assert os.listdir(dest) == []


def test_hardlink_across_file_systems_is_an_error(library, tmp_path, monkeypatch):
    real_stat = os.stat
    foreign = str(library[0])

    def fake_stat(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if os.fspath(path) == foreign:
            fields = list(result)
            fields[2] += 1  # st_dev
            return os.stat_result(fields)
        return result

    monkeypatch.setattr(os, "stat", fake_stat)
    dest = tmp_path / "d"
    with pytest.raises(OutputError, match="different file systems .use --link copy or --link symlink"):
        place_picks(picks_for(library), dest, mode="hardlink")
    assert os.listdir(dest) == []


def test_interrupted_run_takes_back_what_it_placed(library, tmp_path, monkeypatch):
    dest = tmp_path / "d"
    real = placement._place_one
    calls = []

    def flaky(dir_fd, source, *args):
        calls.append(source)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(dir_fd, source, *args)

    monkeypatch.setattr(placement, "_place_one", flaky)
    with pytest.raises(KeyboardInterrupt):
        place_picks(picks_for(library), dest)
    assert sorted(os.listdir(dest)) == [MANIFEST_NAME]  # the picks are all there or none are
    monkeypatch.setattr(placement, "_place_one", real)
    created = place_picks(picks_for(library), dest)
    assert len(created) == 3
    calls.clear()
    monkeypatch.setattr(placement, "_place_one", flaky)
    with pytest.raises(KeyboardInterrupt):  # a re-run stopped part-way takes back its own new copies
        place_picks(picks_for(library), dest)
    assert sorted(os.listdir(dest)) == [MANIFEST_NAME] + sorted(p.name for p in created[1:])
    monkeypatch.setattr(placement, "_place_one", real)
    assert len(place_picks(picks_for(library), dest)) == 3  # what stayed is still known as ours


def test_temp_files_of_dead_runs_are_cleaned(library, tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    stale = dest / ".novelfind-tmp-999999999-0"
    stale.write_text("half a copy")
    place_picks(picks_for(library), dest)
    assert not stale.exists()


def test_unknown_mode(library, tmp_path):
    with pytest.raises(ValueError, match="unknown mode 'move'"):
        place_picks(picks_for(library), tmp_path / "d", mode="move")
