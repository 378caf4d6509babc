"""The contact sheet: its grid's geometry, its checks, and a pick that cannot be read."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from common import make_photo
from PIL import Image

from novelfind.errors import OutputError
from novelfind.outputs.contact_sheet import CONTACT_SHEET_FORMATS, write_contact_sheet
from novelfind.picks import Pick


def picks_of(paths: list[Path]) -> list[Pick]:
    """The picks of ``paths`` in order, with each file's own size and time (as a scan ranks them)."""
    stats = [p.stat() if p.exists() else None for p in paths]
    return [
        Pick(rank, 1.0 / rank, p, st.st_size if st else 0, st.st_mtime_ns if st else 0)
        for rank, (p, st) in enumerate(zip(paths, stats, strict=True), 1)
    ]


def size_of(path: Path) -> tuple[int, int]:
    with Image.open(path) as img:
        return img.size


def test_every_suffix_case_is_accepted_and_another_is_refused_before_writing(tmp_path):
    assert set(CONTACT_SHEET_FORMATS) == {".jpg", ".jpeg", ".png", ".webp"}
    picks = picks_of([make_photo(tmp_path / "a.png", (200, 40, 40), seed=1)])
    write_contact_sheet(tmp_path / "S.WEBP", picks, cell=64)
    with Image.open(tmp_path / "S.WEBP") as img:
        assert img.format == "WEBP"
    with pytest.raises(OutputError) as err:
        write_contact_sheet(tmp_path / "s.tiff", picks)
    assert (
        str(err.value) == f"cannot write contact sheet {tmp_path / 's.tiff'}: use a .jpg, .png or .webp name"
    )
    assert not (tmp_path / "s.tiff").exists()


def test_cells_and_columns_are_checked(tmp_path):
    with pytest.raises(ValueError, match=r"^cell must be at least 32 px, got 31$"):
        write_contact_sheet(tmp_path / "s.png", [], cell=31)
    with pytest.raises(ValueError, match=r"^columns must be at least 1, got 0$"):
        write_contact_sheet(tmp_path / "s.png", [], columns=0)
    assert not (tmp_path / "s.png").exists()


def test_no_picks_is_one_empty_cell(tmp_path):
    write_contact_sheet(tmp_path / "s.png", [], cell=64)
    gap = 2  # max(2, 64 // 32)
    assert size_of(tmp_path / "s.png") == (64 + 2 * gap, 64 + 2 * gap)


def test_more_columns_than_picks_is_one_row_of_the_picks(tmp_path):
    paths = [make_photo(tmp_path / f"{i}.png", (40 * i, 90, 90), seed=i) for i in range(3)]
    write_contact_sheet(tmp_path / "s.png", picks_of(paths), columns=10, cell=64)
    assert size_of(tmp_path / "s.png") == (3 * 64 + 4 * 2, 64 + 2 * 2)


def test_an_unreadable_pick_gets_a_placeholder_in_its_rank_order(tmp_path):
    good = make_photo(tmp_path / "good.png", (250, 250, 250), seed=3, size=(64, 64))
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    picks = picks_of([bad, good])[::-1]  # given out of order: laid out by rank
    write_contact_sheet(tmp_path / "s.png", picks, columns=2, cell=128)
    with Image.open(tmp_path / "s.png") as img:
        sheet = img.convert("RGB")
    gap = 4
    # rank 1 (unreadable) first: the cell's grey, not a photo; rank 2 second: the near-white photo
    assert sheet.getpixel((gap + 10, gap + 120)) == (48, 49, 52)
    r, g, b = sheet.getpixel((gap + 128 + gap + 64, gap + 64))
    assert min(r, g, b) > 200


def test_a_pick_swapped_for_a_link_is_not_shown_and_is_named(tmp_path):
    """A pick renamed over by a link to a private photo after the ranking: its cell says it cannot be
    read, the sheet holds nothing of the private photo, and ``on_skipped`` names the pick."""
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"p{i}.png")
        Image.new("RGB", (40, 30), (20, 120 + 40 * i, 20)).save(paths[-1])
    picks = picks_of(paths)
    private = tmp_path / "private.png"
    Image.new("RGB", (40, 30), (255, 0, 255)).save(private)
    bait = tmp_path / "bait"
    bait.symlink_to(private)
    os.rename(bait, paths[1])
    skipped: list[tuple[Path, str]] = []
    out = tmp_path / "sheet.png"
    write_contact_sheet(out, picks, on_skipped=lambda path, reason: skipped.append((path, reason)))
    assert len(skipped) == 1 and skipped[0][0] == paths[1]
    assert "symbolic link" in skipped[0][1] and skipped[0][1].endswith("not shown in the contact sheet")
    with Image.open(out) as sheet:
        px = np.asarray(sheet.convert("RGB"), dtype=int)
    assert not (np.abs(px - np.array([255, 0, 255])).max(axis=-1) <= 40).any()
    assert (np.abs(px - np.array([20, 120, 20])).max(axis=-1) <= 10).any()  # the other pick is shown
