"""``novelfind ignore`` and ``novelfind failures``: their modes, usage errors and exit codes."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from common import make_photo

from novelfind.cache import FeatureCache
from novelfind.cli.group import cli
from novelfind.errors import ExitCode


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--list", "--clear"], "--list and --clear cannot be used together"),
        (["--remove", "--clear"], "--remove and --clear cannot be used together"),
        (["--list", "x.jpg"], "--list takes no PATHS"),
        (["--clear", "x.jpg"], "--clear takes no PATHS"),
        ([], "give PATHS to ignore (or to --remove), or use --list or --clear"),
        (["--remove"], "give PATHS to ignore (or to --remove), or use --list or --clear"),
    ],
)
def test_ignore_usage_errors(tmp_path, args, message):
    result = run("ignore", "--ignore-file", tmp_path / "i.json", *args)
    assert result.exit_code == ExitCode.USAGE
    assert result.stdout == "" and result.stderr == f"error: {message}\n"
    assert not (tmp_path / "i.json").exists()


def test_ignore_add_list_remove_clear(tmp_path):
    lst = tmp_path / "i.json"
    a = make_photo(tmp_path / "lib" / "a.png", (200, 0, 0), seed=1)
    b = make_photo(tmp_path / "lib" / "b.png", (0, 200, 0), seed=2)
    added = run("ignore", "--ignore-file", lst, a)
    assert (added.exit_code, added.stdout, added.stderr) == (0, "added\t1\n", "")
    again = run("ignore", "--ignore-file", lst, a, b)
    assert again.stdout == "added\t1\n" and again.stderr == "note: 1 photo was already on the ignore list\n"
    listed = run("ignore", "--ignore-file", lst, "--list")
    assert sorted(line.split("\t")[1] for line in listed.stdout.splitlines()) == [str(a), str(b)]
    removed = run("ignore", "--ignore-file", lst, "--remove", a, tmp_path / "never.png")
    assert removed.stdout == "removed\t1\n"
    assert f"note: not on the ignore list: {tmp_path / 'never.png'}" in removed.stderr
    quiet = run("ignore", "--ignore-file", lst, "--remove", "-q", a)
    assert quiet.stdout == "removed\t0\n" and quiet.stderr == ""
    cleared = run("ignore", "--ignore-file", lst, "--clear")
    assert cleared.stdout == "cleared\t1\n"
    assert run("ignore", "--ignore-file", lst, "--list").stdout == ""


def test_ignoring_a_file_that_is_not_a_photo_is_a_partial_success(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list")
    result = run("ignore", "--ignore-file", tmp_path / "i.json", notes)
    assert result.exit_code == ExitCode.PARTIAL
    assert result.stdout == "added\t0\n"
    assert f"warning: not added: {notes} is not a photo novelfind reads" in result.stderr


def failures_in(path, rows):
    with FeatureCache.open(path) as store:
        store.record_failures([(os.fsencode(p), size, 0, reason) for p, size, reason in rows])


def test_failures_lists_and_forgets_by_folder(tmp_path):
    cache = tmp_path / "c.sqlite"
    lib = tmp_path / "lib"
    failures_in(
        cache,
        [
            (lib / "a.jpg", 1, "truncated"),
            (lib / "sub" / "b.jpg", 2, "bad\theader"),
            (tmp_path / "lib2" / "c.jpg", 3, "x"),
        ],
    )
    listed = run("failures", "--cache", cache)
    assert listed.exit_code == 0 and listed.stderr == ""
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert sorted(r[1] for r in rows) == sorted(
        [str(lib / "a.jpg"), str(lib / "sub" / "b.jpg"), str(tmp_path / "lib2" / "c.jpg")]
    )
    assert all(len(r) == 3 for r in rows)  # a tab in a reason is escaped: still three fields
    forgot = run("failures", "--cache", cache, "--forget", lib)
    assert forgot.stdout == "forgotten\t2\n"  # not lib2: a name that starts like the folder
    assert [line.split("\t")[1] for line in run("failures", "--cache", cache).stdout.splitlines()] == [
        str(tmp_path / "lib2" / "c.jpg")
    ]
    assert run("failures", "--cache", cache, "--forget").stdout == "forgotten\t1\n"


def test_failures_usage_and_a_missing_cache(tmp_path):
    usage = run("failures", "x.jpg")
    assert usage.exit_code == ExitCode.USAGE
    assert usage.stderr == "error: PATHS are for --forget (the list shows every unreadable file)\n"
    missing = run("failures", "--cache", tmp_path / "none.sqlite")
    assert missing.exit_code == ExitCode.ERROR and missing.stdout == ""
    assert not (tmp_path / "none.sqlite").exists()
