"""``novelfind cache``: which file it acts on, and that it never touches a file that is not a cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from novelfind.base import dirs
from novelfind.cache import FeatureCache
from novelfind.cli import cache as cache_cli
from novelfind.cli.console import human_size
from novelfind.cli.group import cli
from novelfind.errors import ExitCode


def run(*args, env: dict | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def test_the_cache_chosen_is_the_option_then_the_environment_then_the_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cache_cli.chosen_cache_path(None) == dirs.feature_cache_path().absolute()
    monkeypatch.setenv("NOVELFIND_CACHE", str(tmp_path / "env.sqlite"))
    assert cache_cli.chosen_cache_path(None) == tmp_path / "env.sqlite"
    assert cache_cli.chosen_cache_path(Path("rel.sqlite")) == tmp_path / "rel.sqlite"


@pytest.mark.parametrize("command", ["prune", "clear"])
def test_a_file_that_is_not_a_cache_is_refused_and_left_as_it_is(tmp_path, command):
    thesis = tmp_path / "thesis.txt"
    thesis.write_text("chapter one\n" * 100)
    result = run("cache", command, "--cache", thesis)
    assert result.exit_code == ExitCode.ERROR
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {thesis} is not a novelfind cache (")
    assert result.stderr.endswith("); left as it is\n")
    assert thesis.read_text() == "chapter one\n" * 100


def test_info_of_a_new_cache_and_prune_and_clear_of_an_empty_one(tmp_path):
    path = tmp_path / "c.sqlite"
    with FeatureCache.open(path):
        pass
    info = run("cache", "info", "--cache", path)
    assert info.exit_code == 0, info.stderr
    lines = info.stdout.splitlines()
    assert lines[0] == f"path\t{path}"
    assert lines[1].startswith("vectors\t0\t") and lines[2].startswith("files\t0\t")
    assert lines[3].startswith("unreadable\t0\t") and lines[4].startswith("size\t")
    assert info.stderr == ""
    assert (run("cache", "prune", "--cache", path).stdout, run("cache", "clear", "--cache", path).stdout) == (
        "pruned\t0\n",
        "cleared\n",
    )


def test_a_missing_cache_is_an_error_for_info_and_prune(tmp_path):
    for command in ("info", "prune"):
        result = run("cache", command, "--cache", tmp_path / "none.sqlite")
        assert result.exit_code == ExitCode.ERROR and result.stdout == ""
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert not (tmp_path / "none.sqlite").exists()  # nothing created


def test_info_shows_the_reports_thumbnails_and_clear_deletes_them(tmp_path):
    from novelfind.outputs.thumbnails import ThumbnailCache

    path = tmp_path / "c.sqlite"
    with FeatureCache.open(path):
        pass
    thumbs = tmp_path / "thumbnails.sqlite"
    before = {
        line.split("\t")[0]: line.split("\t")[1:]
        for line in run("cache", "info", "--cache", path).stdout.splitlines()
    }
    assert before["thumbnails"] == ["0 B", f"0 bytes on disk: the report's thumbnails, {thumbs}"]
    photo = tmp_path / "a.jpg"
    photo.write_bytes(b"x" * 10)
    with ThumbnailCache(thumbs) as kept:  # what a report leaves beside the cache
        st = photo.stat()
        kept.put({(photo, 256, None): b"\xff\xd8" + b"j" * 50_000}, {}, {photo: (st.st_size, st.st_mtime_ns)})
    info = run("cache", "info", "--cache", path)
    lines = {line.split("\t")[0]: line.split("\t")[1:] for line in info.stdout.splitlines()}
    size, raw = lines["thumbnails"]
    assert int(raw.split(" ")[0]) == thumbs.stat().st_size > 50_000 and size == human_size(
        thumbs.stat().st_size
    )
    assert run("cache", "clear", "--cache", path).stdout == "cleared\n"
    assert not thumbs.exists() and path.exists()
    # a file of that name that is not the thumbnail cache is left as it is, with a warning
    thumbs.write_text("my notes\n")
    cleared = run("cache", "clear", "--cache", path)
    assert cleared.exit_code == 0 and cleared.stdout == "cleared\n"
    assert cleared.stderr == f"warning: {thumbs} is not novelfind's thumbnail cache; left as it is\n"
    assert thumbs.read_text() == "my notes\n"
