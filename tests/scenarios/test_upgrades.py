"""Upgrades that say what changed: a library ranked another way than last time is told so, once."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import novelfind
from novelfind import __version__, results
from novelfind.cache import FeatureCache, ranking_root
from novelfind.cli.group import cli

CHANGED = "this library was last ranked with --method"


def scan(root: Path, cache: Path, *args: str, env: dict | None = None):
    return CliRunner().invoke(cli, ["scan", str(root), "--k", "3", "--cache", str(cache), *args], env=env)


def notices(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if "ranked with" in line]


def test_a_method_the_user_chooses_or_leaves_is_never_warned_about(library, fake_extractor, tmp_path):
    """Switching on purpose, and back to the default, every time: nothing to warn about."""
    cache = tmp_path / "c.sqlite"
    for method in (None, "event-knn", None, "knn", "knn", None, "ads", None):
        switched = scan(library["root"], cache, *(("--method", method) if method else ()))
        assert switched.exit_code == 0, switched.stderr
        assert notices(switched) == [], method
    # from the environment, a config file or the call alike
    assert notices(scan(library["root"], cache, env={"NOVELFIND_METHOD": "knn"})) == []
    assert notices(scan(library["root"], cache)) == []
    assert novelfind.scan(library["root"], 3, cache=cache, method="ads").warnings == []
    assert novelfind.scan(library["root"], 3, cache=cache).warnings == []


def test_a_default_that_changed_since_the_last_ranking_is_said_once(library, fake_extractor, tmp_path):
    """The library was last ranked by 0.1.0 with its default, ads: this version's default run says so,
    once; a run that names a method is never told."""
    cache = tmp_path / "c.sqlite"
    scan(library["root"], cache)
    with FeatureCache(cache) as store:
        store.note_ranking(ranking_root([library["root"]]), "ads", "0.1.0")
    assert notices(scan(library["root"], cache, "--method", "knn")) == []  # asked for
    with FeatureCache(cache) as store:
        store.note_ranking(ranking_root([library["root"]]), "ads", "0.1.0")
    upgraded = scan(library["root"], cache)
    assert notices(upgraded) == [
        f"warning: this library was last ranked with ads, the default of novelfind 0.1.0; novelfind "
        f"{__version__} ranks with --method cosine-knn by default, so the picks and the scale of the scores "
        "differ: add --method ads to rank as before"
    ]
    assert notices(scan(library["root"], cache)) == []  # once: the record follows the last ranking
    # a method the user chose under 0.1.0 that was not its default: their choice, left by them
    with FeatureCache(cache) as store:
        store.note_ranking(ranking_root([library["root"]]), "knn", "0.1.0")
    assert notices(scan(library["root"], cache)) == []


@pytest.mark.parametrize(
    ("version", "default"),
    [("0.1.0", "ads"), ("0.1.9", "ads"), ("0.2.0", "cosine-knn"), ("0.10.0", "cosine-knn"), ("x", None)],
)
def test_each_releases_default_method(version, default):
    assert results.default_method_of(version) == default


def test_each_library_has_its_own_record(library, fake_extractor, tmp_path):
    cache = tmp_path / "c.sqlite"
    scan(library["root"], cache, "--method", "knn")
    other = library["root"] / "trip1"
    assert notices(scan(other, cache)) == []  # trip1 alone was never ranked
    with FeatureCache(cache) as store:
        assert store.last_ranking(ranking_root([library["root"]])) == ("knn", __version__, False)
        assert store.last_ranking(ranking_root([other])) == ("cosine-knn", __version__, False)
    assert ranking_root([other, library["root"]]) == ranking_root([library["root"], other])


def test_a_cache_of_the_earlier_version_stands_for_its_default(library, fake_extractor, tmp_path):
    """A cache written before the record was kept: the scan says 0.1.0 ranked with ads by default."""
    cache = tmp_path / "c.sqlite"
    with FeatureCache(cache, "fake-8x8-v1") as store:
        store.put_many([])
    conn = sqlite3.connect(cache)
    conn.execute("DROP TABLE rankings")  # as 0.1.0 left it
    conn.execute("INSERT INTO vectors VALUES ('d', 'old', 1, ?)", (np.zeros(1, "<f4").tobytes(),))
    conn.commit()
    conn.close()
    result = scan(library["root"], cache)
    assert result.exit_code == 0, result.stderr
    assert notices(result) == [
        f"warning: novelfind 0.1.0, which last used this cache, ranked with ads by default; novelfind "
        f"{__version__} ranks with --method cosine-knn by default, so the picks and the scale of the scores "
        "differ: add --method ads to rank as before"
    ]
    assert notices(scan(library["root"], cache)) == []
    # the same old cache with --method ads: nothing changed, nothing said
    assert notices(scan(library["root"] / "trip2", cache, "--method", "ads")) == []


def test_a_new_cache_says_nothing_and_clear_forgets(library, fake_extractor, tmp_path):
    cache = tmp_path / "c.sqlite"
    assert notices(scan(library["root"], cache)) == []
    assert CliRunner().invoke(cli, ["cache", "clear", "--cache", str(cache)]).exit_code == 0
    assert notices(scan(library["root"], cache, "--method", "knn")) == []


def test_a_changed_score_scale_is_said_for_the_same_method(library, fake_extractor, tmp_path, monkeypatch):
    cache = tmp_path / "c.sqlite"
    scan(library["root"], cache)
    with FeatureCache(cache) as store:
        store.note_ranking(ranking_root([library["root"]]), "cosine-knn", "0.1.9")
    monkeypatch.setitem(results.SCALE_CHANGED, "cosine-knn", "0.2.0")
    assert notices(scan(library["root"], cache)) == [
        f"warning: {CHANGED} cosine-knn (novelfind 0.1.9); the scores of cosine-knn are on another scale "
        "since novelfind 0.2.0"
    ]
    assert notices(scan(library["root"], cache)) == []


@pytest.mark.parametrize(
    ("version", "than", "older"),
    [("0.1.0", "0.2.0", True), ("0.2.0", "0.2.0", False), ("0.10.0", "0.9.1", False), ("x", "0.2.0", False)],
)
def test_versions_compare_as_numbers(version, than, older):
    assert results._older(version, than) is older
