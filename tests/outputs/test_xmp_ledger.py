"""The record of tagged sidecars: its file, the folder a photo belongs to, and what a run keeps tagged."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from novelfind.errors import OutputError
from novelfind.outputs import xmp_ledger
from novelfind.outputs.xmp import SidecarChange
from novelfind.outputs.xmp_ledger import SidecarPick, SidecarSummary


def photo(folder: Path, name: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xff\xd8 not really a jpeg")
    return path


def test_for_photo_gives_each_file_the_others_as_twins():
    picks = SidecarPick.for_photo(["/p/a.jpg", Path("/p/a.orf")], 2, 0.5)
    assert picks == [
        SidecarPick(Path("/p/a.jpg"), 2, 0.5, (Path("/p/a.orf"),)),
        SidecarPick(Path("/p/a.orf"), 2, 0.5, (Path("/p/a.jpg"),)),
    ]
    assert SidecarPick.for_photo(["/p/b.jpg"], 1, 1.0) == [SidecarPick(Path("/p/b.jpg"), 1, 1.0)]


def test_the_summary_counts_by_action():
    summary = SidecarSummary(
        changes=[
            SidecarChange(Path("a"), Path("a.xmp"), "created"),
            SidecarChange(Path("b"), Path("b.xmp"), "updated"),
            SidecarChange(Path("c"), Path("c.xmp"), "created"),
        ]
    )
    assert summary.count("created") == 2
    assert summary.count("created", "updated") == 3
    assert summary.count("removed") == 0


def test_a_photo_belongs_to_the_innermost_scanned_folder_above_it():
    roots = ["/lib", "/lib/2024", "/library"]
    assert xmp_ledger._root_of("/lib/2024/a.jpg", roots) == "/lib/2024"
    assert xmp_ledger._root_of("/lib/2023/a.jpg", roots) == "/lib"
    assert xmp_ledger._root_of("/library/a.jpg", roots) == "/library"
    assert xmp_ledger._root_of("/lib", roots) is None  # a root given as a file is no folder of itself
    assert xmp_ledger._root_of("/elsewhere/a.jpg", roots) is None


def test_the_ledger_round_trips_sorted(tmp_path):
    path = tmp_path / "d" / "ledger.json"
    entries = {
        "/b.jpg": {"sidecar": "/b.xmp", "keyword": "novel"},
        "/a.jpg": {"sidecar": "/a.xmp", "keyword": "k"},
    }
    xmp_ledger._save_ledger(path, entries)
    doc = json.loads(path.read_text())
    assert doc["version"] == 1 and list(doc["sidecars"]) == ["/a.jpg", "/b.jpg"]
    assert xmp_ledger._load_ledger(path) == (entries, None)
    assert xmp_ledger._load_ledger(tmp_path / "missing.json") == ({}, None)


@pytest.mark.parametrize(
    "text",
    ['{"version": 1}', '{"sidecars": []}', '{"sidecars": {"/a.jpg": {"keyword": "novel"}}}', "[1, 2]"],
)
def test_a_ledger_of_the_wrong_shape_is_damaged_and_kept_aside(tmp_path, text):
    path = tmp_path / "ledger.json"
    path.write_text(text)
    entries, problem = xmp_ledger._load_ledger(path)
    assert entries == {}
    assert problem == f"the record of tagged sidecars is damaged (kept as {path}.damaged); starting a new one"
    assert not path.exists() and Path(f"{path}.damaged").read_text() == text


def test_a_kept_photo_keeps_its_tag_and_its_entry(tmp_path):
    ledger = tmp_path / "ledger.json"
    root = tmp_path / "lib"
    a, b = photo(root, "a.jpg"), photo(root, "b.jpg")
    xmp_ledger.apply_picks([SidecarPick(a, 1, 1.0), SidecarPick(b, 2, 0.5)], roots=[root], ledger=ledger)
    summary = xmp_ledger.apply_picks([], roots=[root], ledger=ledger, keep=[a])
    assert [(c.photo, c.action) for c in summary.changes] == [(b, "deleted")]
    assert set(json.loads(ledger.read_text())["sidecars"]) == {os.path.abspath(a)}
    assert (root / "a.jpg.xmp").exists() and not (root / "b.jpg.xmp").exists()


def test_a_ledger_folder_that_cannot_be_made_is_an_output_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OutputError, match=rf"^cannot create {blocker}/sub: "):
        xmp_ledger.apply_picks([], roots=[tmp_path], ledger=blocker / "sub" / "ledger.json")
