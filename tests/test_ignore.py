"""The ignore list: keyed by content, user data that survives the cache, safe under concurrent changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import make_photo

from novelfind import decode
from novelfind.ignore import IgnoreList, IgnoreListError, default_path, digest_file

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def photos(tmp_path) -> list[Path]:
    return [
        make_photo(tmp_path / "photos" / f"IMG_{i}.jpg", (40 * i, 90, 200 - 30 * i), seed=i) for i in range(5)
    ]


@pytest.fixture
def ignored(tmp_path) -> IgnoreList:
    return IgnoreList(tmp_path / "data" / "ignored.json")


def test_default_file_is_user_data_not_cache(isolated_user_dirs):
    assert default_path() == isolated_user_dirs / "data" / "novelfind" / "ignored.json"
    assert IgnoreList().path == default_path()


def test_key_is_the_feature_caches_digest(ignored, photos):
    ignored.add(photos[:1])
    digest, _ = decode.read_for_model(photos[0])  # what the cache stores for this file
    assert ignored.digests() == {digest}
    assert digest_file(photos[0]) == digest == decode.file_digest(photos[0].read_bytes())


def test_add_list_and_add_again(ignored, photos):
    change = ignored.add(photos[:2])
    assert [e.path for e in change.changed] == photos[:2]
    assert change.unchanged == [] and change.failures == []
    again = ignored.add(photos[1:3])
    assert [e.path for e in again.changed] == [photos[2]]
    assert again.unchanged == [photos[1]]
    entries = ignored.entries()
    assert sorted(e.path for e in entries) == sorted(photos[:3])
    assert all(e.added.endswith("+00:00") for e in entries)
    assert len(ignored) == 3 and digest_file(photos[0]) in ignored


def test_moved_and_renamed_photos_stay_ignored(ignored, photos, tmp_path):
    ignored.add([photos[0]])
    moved = tmp_path / "elsewhere" / "renamed.jpg"
    moved.parent.mkdir()
    photos[0].rename(moved)
    library = [digest_file(p) for p in [moved, *photos[1:]]]
    assert ignored.mask(library).tolist() == [True, False, False, False, False]


def test_mask_lines_up_with_the_library(ignored, photos):
    ignored.add([photos[1], photos[3]])
    digests = [digest_file(p) for p in photos]
    digests[2] = None  # a file that could not be read
    mask = ignored.mask(digests)
    assert mask.dtype == np.bool_ and mask.shape == (5,)
    assert mask.tolist() == [False, True, False, True, False]
    assert ignored.mask([]).shape == (0,)


def test_empty_list_without_a_file(ignored, photos):
    assert not ignored.path.exists()
    assert ignored.digests() == frozenset() and ignored.entries() == []
    assert ignored.mask([digest_file(photos[0])]).tolist() == [False]


def test_remove_by_path(ignored, photos):
    ignored.add(photos[:3])
    change = ignored.remove([photos[1], photos[4]])
    assert [e.path for e in change.changed] == [photos[1]]
    assert change.unchanged == [photos[4]]
    assert sorted(e.path for e in ignored.entries()) == [photos[0], photos[2]]


def test_remove_a_photo_that_is_gone_by_its_recorded_path(ignored, photos):
    ignored.add([photos[0]])
    photos[0].unlink()
    assert [e.path for e in ignored.remove([photos[0]]).changed] == [photos[0]]
    assert len(ignored) == 0


def test_remove_by_content_after_a_move(ignored, photos, tmp_path):
    ignored.add([photos[0]])
    moved = tmp_path / "moved.jpg"
    photos[0].rename(moved)
    assert len(ignored.remove([moved]).changed) == 1
    assert len(ignored) == 0


def test_clear(ignored, photos):
    ignored.add(photos)
    assert ignored.clear() == 5
    assert ignored.entries() == []
    assert json.loads(ignored.path.read_text()) == {"version": 1, "ignored": {}}


def test_unreadable_files_and_folders_are_failures(ignored, photos, tmp_path):
    change = ignored.add([photos[0], tmp_path / "missing.jpg", tmp_path / "photos"])
    assert [e.path for e in change.changed] == [photos[0]]
    assert change.failures == [
        (tmp_path / "missing.jpg", "No such file or directory"),
        (tmp_path / "photos", "is a folder"),
    ]


def test_relative_paths_are_stored_absolute(ignored, photos, monkeypatch):
    monkeypatch.chdir(photos[0].parent)
    ignored.add([photos[0].name])
    assert ignored.entries()[0].path == photos[0]


def test_digests_known_to_a_scan(ignored, photos, tmp_path):
    digests = [digest_file(p) for p in photos]
    change = ignored.add_digests(zip(digests[:2], photos[:2], strict=True))
    assert [e.digest for e in change.changed] == digests[:2]
    assert ignored.mask(digests).tolist() == [True, True, False, False, False]
    moved = tmp_path / "new-home.jpg"
    assert ignored.relocate({digests[0]: moved, digests[4]: photos[4]}) == 1
    assert {e.digest: e.path for e in ignored.entries()}[digests[0]] == moved
    assert len(ignored.remove_digests([digests[1], "0" * 32]).changed) == 1
    assert ignored.digests() == {digests[0]}


def test_explicit_file_in_a_new_folder(tmp_path, photos):
    custom = IgnoreList(tmp_path / "a" / "b" / "mine.json")
    custom.add(photos[:1])
    assert custom.path.is_file()
    assert IgnoreList(custom.path).digests() == {digest_file(photos[0])}


def test_survives_cache_clear(photos):
    from novelfind.cache import FeatureCache
    from novelfind.cli import cli
    from novelfind.dirs import feature_cache_path

    IgnoreList().add(photos[:2])
    FeatureCache(feature_cache_path(), model_key="m").close()  # the cache a scan would have made
    result = CliRunner().invoke(cli, ["cache", "clear"])
    assert result.exit_code == 0, result.output
    assert result.output == "cleared\n"
    assert len(IgnoreList()) == 2
    assert not default_path().is_relative_to(feature_cache_path().parent.parent)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "Expecting property name"),
        ('{"version": 99, "ignored": {}}', "unknown version 99"),
        ('{"version": 1, "ignored": {"ab": 3}}', "bad entry 'ab'"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_damaged_list_is_an_error_and_left_as_it_is(ignored, photos, content, why):
    ignored.path.parent.mkdir(parents=True)
    ignored.path.write_text(content)
    for call in (ignored.digests, lambda: ignored.add(photos[:1]), ignored.clear):
        with pytest.raises(IgnoreListError, match=f"the ignore list {ignored.path} is damaged .*{why}"):
            call()
    assert ignored.path.read_text() == content


def test_written_atomically_without_leftovers(ignored, photos):
    ignored.add(photos[:2])
    ignored.remove(photos[:1])
    assert sorted(os.listdir(ignored.path.parent)) == ["ignored.json", "ignored.json.lock"]
    json.loads(ignored.path.read_text())  # complete JSON


_ADD_SCRIPT = """
import sys
from novelfind.ignore import IgnoreList
lst = IgnoreList(sys.argv[1])
for p in sys.argv[2:]:
    lst.add_digests([(p.rsplit("/", 1)[-1], p)])
"""


def test_concurrent_changes_keep_every_entry(ignored, tmp_path):
    """Four processes adding one entry at a time: the lock keeps every read-modify-write whole."""
    procs = []
    for w in range(4):
        names = [str(tmp_path / f"{w:x}{i:031x}") for i in range(15)]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _ADD_SCRIPT, str(ignored.path), *names],
                env=dict(os.environ, PYTHONPATH=str(REPO)),
            )
        )
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    assert len(ignored) == 60
