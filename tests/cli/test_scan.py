"""The command line, end to end with the fake extractor: exit codes, stdout and stderr kept apart."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import novelfind
import novelfind.cli.scan as scan_command
from novelfind import __version__, params
from novelfind.base.atomic import LINK_REFUSED
from novelfind.base.lock import output_lock_path
from novelfind.cli.group import cli
from novelfind.cli.scan import OPTION_GROUPS, picks_listed
from novelfind.config import config_comment, config_keys
from novelfind.errors import InputError
from novelfind.ranking import methods as ranking

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def tsv_rows(stdout: str) -> list[list[str]]:
    return [line.split("\t") for line in stdout.splitlines()]


def test_version():
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"novelfind {__version__}"


def test_scan_ranks_the_odd_photos_first(library, fake_extractor, tmp_path):
    result = run("scan", library["root"], "--k", "3", "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 0, result.stderr
    rows = tsv_rows(result.stdout)
    assert [r[0] for r in rows] == ["1", "2", "3"]
    assert {Path(r[2]) for r in rows} == set(library["odd"])
    scores = [float(r[1]) for r in rows]
    assert scores == sorted(scores, reverse=True)
    # The summary is on stderr, never on stdout.
    assert "33 photos (33 files) found" in result.stderr
    assert "files) found" not in result.stdout


def test_second_scan_reads_everything_from_cache(library, fake_extractor, tmp_path):
    cache = tmp_path / "c.sqlite"
    first = run("scan", library["root"], "--k", "3", "--cache", cache)
    assert first.exit_code == 0, first.stderr
    extracted = fake_extractor.images
    assert extracted == 33
    second = run("scan", library["root"], "--k", "3", "--cache", cache)
    assert second.exit_code == 0, second.stderr
    assert fake_extractor.images == extracted  # nothing extracted again
    assert "33 read from cache, 0 extracted" in second.stderr
    assert second.stdout == first.stdout


def test_no_cache_extracts_again(library, fake_extractor, tmp_path):
    cache = tmp_path / "c.sqlite"
    run("scan", library["root"], "--k", "3", "--cache", cache)
    result = run("scan", library["root"], "--k", "3", "--no-cache")
    assert result.exit_code == 0
    assert fake_extractor.images == 66


def test_quiet_leaves_stderr_empty(library, fake_extractor):
    result = run("scan", library["root"], "--k", "2", "-q")
    assert result.exit_code == 0
    assert result.stderr == ""
    assert len(tsv_rows(result.stdout)) == 2


def test_json_format(library, fake_extractor):
    result = run("scan", library["root"], "--k", "3", "--format", "json", "-q")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [p["rank"] for p in doc["picks"]] == [1, 2, 3]
    assert {Path(p["path"]) for p in doc["picks"]} == set(library["odd"])
    assert doc["run"]["images_found"] == 33


def test_paths_format_and_output_file(library, fake_extractor, tmp_path):
    out = tmp_path / "picks.txt"
    result = run("scan", library["root"], "--k", "3", "--format", "paths", "-o", out)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert {Path(line) for line in out.read_text().splitlines()} == set(library["odd"])


def test_a_link_at_o_is_refused_and_its_target_left_alone(library, fake_extractor, tmp_path):
    """A link at ``-o`` (to root's private file, say) is never written through: one line, exit code 1,
    before the scan."""
    private = tmp_path / "private.conf"
    private.write_text("secret\n")
    private.chmod(0o600)
    link = tmp_path / "novel.tsv"
    link.symlink_to(private)
    result = run("scan", library["root"], "--k", "3", "-o", link, "--no-cache")
    assert result.exit_code == 1, result.stderr
    assert result.stderr == f"error: cannot write the results file {link}: {LINK_REFUSED}\n"
    assert private.read_text() == "secret\n" and stat.S_IMODE(private.stat().st_mode) == 0o600


def test_outputs_are_private_unless_shared_outputs(library, fake_extractor, tmp_path):
    """A file planted at an output's name lends it nothing: mode 0600, or 0644 with --shared-outputs."""
    old = os.umask(0o022)
    try:
        out, page = tmp_path / "novel.tsv", tmp_path / "r.html"
        for planted in (out, page):
            planted.write_text("planted")
            planted.chmod(0o666)
        result = run("scan", library["root"], "--k", "3", "-o", out, "--report", page, "--no-cache")
        assert result.exit_code == 0, result.stderr
        assert [stat.S_IMODE(p.stat().st_mode) for p in (out, page)] == [0o600, 0o600]
        args = ["--k", "3", "-o", out, "--report", page, "--no-cache", "--shared-outputs"]
        result = run("scan", library["root"], *args)
        assert result.exit_code == 0, result.stderr
        assert [stat.S_IMODE(p.stat().st_mode) for p in (out, page)] == [0o644, 0o644]
    finally:
        os.umask(old)


def test_the_earlier_results_file_is_read_back_bounded_and_never_through_a_link(tmp_path, monkeypatch):
    listed = tmp_path / "list.txt"
    listed.write_text("a\nb\nc\n")
    assert picks_listed(listed, "paths") == 3
    link = tmp_path / "link.txt"
    link.symlink_to(listed)
    assert picks_listed(link, "paths") == 0  # not read through a link
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    assert picks_listed(fifo, "paths") == 0  # nor a FIFO, which would block the open
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert picks_listed(deep, "json") == 0  # no RecursionError
    monkeypatch.setattr(scan_command, "LISTED_MAX_BYTES", 5)
    assert picks_listed(listed, "paths") == 0  # larger than the bound: not read


def test_unreadable_photo_is_reported_and_skipped(library, fake_extractor):
    bad = library["root"] / "trip0" / "broken.jpg"
    bad.write_text("this is not a jpeg")
    result = run("scan", library["root"], "--k", "3")
    assert result.exit_code == 3
    assert result.stderr.count(f"warning: cannot read {bad}") == 1
    assert len(tsv_rows(result.stdout)) == 3
    assert str(bad) not in result.stdout


def test_k_larger_than_library_ranks_all_with_a_note(library, fake_extractor):
    result = run("scan", library["root"], "--k", "500")
    assert result.exit_code == 0
    rows = tsv_rows(result.stdout)  # the 30 near-identical ordinary photos are one pick's moment
    assert len(rows) == 4 and sum(1 + int(r[3]) for r in rows) == 33
    assert "note: --k 500 is more than the 33 photos" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--k", "0"], 2, "error: Invalid value for '--k': 0 is not in the range x>=1.\n"),
        (["--k", "-3"], 2, "error: Invalid value for '--k': -3 is not in the range x>=1.\n"),
        (
            ["--batch-size", "-1"],
            2,
            "error: Invalid value for '--batch-size': -1 is not in the range 1<=x<=4096.\n",
        ),
        (
            ["--batch-size", "100000000"],
            2,
            "error: Invalid value for '--batch-size': 100000000 is not in the range 1<=x<=4096.\n",
        ),
        (["--epochs", "0"], 2, "error: Invalid value for '--epochs': 0 is not in the range 1<=x<=100000.\n"),
        (["--lr", "-1"], 2, "error: Invalid value for '--lr': -1.0 is not in the range x>0.\n"),
        (
            ["--momentum", "1.5"],
            2,
            "error: Invalid value for '--momentum': 1.5 is not in the range 0<=x<1.\n",
        ),
        (["--k", "ten"], 2, "error: Invalid value for '--k': 'ten' is not a valid integer."),
        (["--format", "xml"], 2, "error: Invalid value for '--format'"),
    ],
)
def test_bad_options_are_one_line_errors(library, fake_extractor, args, code, message):
    result = run("scan", library["root"], *args)
    assert result.exit_code == code
    assert result.stdout == ""
    assert result.stderr.startswith(message)
    assert len(result.stderr.strip().splitlines()) == 1
    assert fake_extractor.images == 0


def test_missing_folder(tmp_path, fake_extractor):
    result = run("scan", tmp_path / "nope")
    assert result.exit_code == 2
    assert result.stderr == f"error: no such folder: {tmp_path / 'nope'}\n"


@pytest.mark.parametrize("content", [None, "notes.txt"])
def test_folder_without_images(tmp_path, fake_extractor, content):
    folder = tmp_path / "empty"
    folder.mkdir()
    if content:
        (folder / content).write_text("hello")
    result = run("scan", folder)
    assert result.exit_code == 1
    assert result.stderr == f"error: no images found in {folder}\n"


def test_unwritable_copy_to(library, fake_extractor, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    result = run("scan", library["root"], "--copy-to", blocker / "picks")
    assert result.exit_code == 1
    picks = blocker / "picks"
    assert result.stderr == f"error: cannot place the picks in {picks}: {blocker} is not a folder\n"
    assert len(result.stderr.strip().splitlines()) == 1
    assert fake_extractor.images == 0


def test_copy_to_places_ranked_names(library, fake_extractor, tmp_path):
    dest = tmp_path / "novel"
    result = run("scan", library["root"], "--k", "3", "--copy-to", dest, "-q")
    assert result.exit_code == 0, result.stderr
    placed = sorted(p.name for p in dest.iterdir() if not p.name.startswith("."))
    assert [name[:4] for name in placed] == ["001_", "002_", "003_"]
    first = tsv_rows(result.stdout)[0][2]
    assert placed[0] == "001_" + Path(first).name


def test_exclude(library, fake_extractor):
    result = run("scan", library["root"], "--k", "40", "--exclude", "odd_*", "-q", "--format", "members")
    assert result.exit_code == 0
    paths = {Path(line) for line in result.stdout.splitlines()}
    assert paths == set(library["ordinary"])


def test_since_ranks_only_recent_photos_against_the_library(library, fake_extractor):
    old = 1_600_000_000  # 2020-09-13
    for path in library["ordinary"] + library["odd"][:2]:
        os.utime(path, (old, old))
    recent = library["odd"][2]
    result = run("scan", library["root"], "--k", "5", "--since", "2021-01-01", "-q")
    assert result.exit_code == 0, result.stderr
    assert [Path(r[2]) for r in tsv_rows(result.stdout)] == [recent]


def test_config_file_and_precedence(library, fake_extractor, tmp_path):
    config = tmp_path / "novelfind.toml"
    config.write_text("[scan]\nk = 2\nformat = 'paths'\n")
    from_file = run("scan", library["root"], "--config", config, "-q")
    assert from_file.exit_code == 0, from_file.stderr
    assert len(from_file.stdout.splitlines()) == 2
    assert "\t" not in from_file.stdout
    from_env = run("scan", library["root"], "--config", config, "-q", env={"NOVELFIND_K": "4"})
    assert len(from_env.stdout.splitlines()) == 4
    from_cli = run("scan", library["root"], "--config", config, "-q", "--k", "1", env={"NOVELFIND_K": "4"})
    assert len(from_cli.stdout.splitlines()) == 1


def test_config_found_in_user_config_dir(library, fake_extractor, isolated_user_dirs):
    config = isolated_user_dirs / "config" / "novelfind" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("k = 1\n")
    result = run("scan", library["root"], "-q")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kk = 3\n", "unknown key 'kk'"),
        ("k = 'many'\n", "key 'k' must be a whole number, got 'many'"),
        ("[scan]\nk = 3\n[other]\nx = 1\n", "unknown key 'other'"),
        ("k = [1, 2]\n", "key 'k' must be a single value"),
        ("k = \n", "is not valid TOML"),
        ("k = true\n", "key 'k' must be a whole number, got True"),
        ("k = 2.7\n", "key 'k' must be a whole number, got 2.7"),
        ("quiet = 'yes'\n", "key 'quiet' must be true or false"),
        ("format = 3\n", "key 'format' must be a string"),
    ],
)
def test_bad_config_is_a_usage_error(library, fake_extractor, tmp_path, text, message):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    result = run("scan", library["root"], "--config", config)
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_default_config_documents_every_option_with_its_default():
    with open(ROOT / "configs" / "default.toml", "rb") as fh:
        documented = tomllib.load(fh)["scan"]
    text = (ROOT / "configs" / "default.toml").read_text()
    scan = cli.commands["scan"]
    ctx = click.Context(scan)
    keys = config_keys(scan)
    assert {"k", "format", "cache", "batch_size", "no_cache", "wait"} <= set(keys)
    for key, param in keys.items():
        assert f"\n{key} =" in text or f"# {key} =" in text, f"configs/default.toml does not document '{key}'"
        if key in documented:
            default = param.get_default(ctx, call=False)
            if param.multiple:
                default = list(default) if isinstance(default, (list, tuple)) else []
            assert documented[key] == default, key
    assert set(documented) <= set(keys)


@pytest.mark.parametrize("key", ["method", "feature"])
def test_default_config_comments_on_the_methods_are_made_from_their_records(key):
    """The comments above ``method`` and ``feature`` are the options' help, which ranking.METHODS makes."""
    text = (ROOT / "configs" / "default.toml").read_text()
    assert f"\n{config_comment(key)}\n{key} = " in text
    said = {"method": set(ranking.METHODS), "feature": {m.feature for m in ranking.METHODS.values()}}[key]
    for word in said:
        assert word in config_comment(key)


def test_cache_commands(library, fake_extractor, tmp_path):
    cache = tmp_path / "c.sqlite"
    run("scan", library["root"], "--k", "3", "--cache", cache, "-q")
    info = run("cache", "info", "--cache", cache)
    assert info.exit_code == 0, info.stderr
    assert "vectors\t33" in info.stdout
    assert "model\tfake-8x8-v1\t33" in info.stdout
    library["odd"][0].unlink()
    pruned = run("cache", "prune", "--cache", cache)
    assert pruned.exit_code == 0, pruned.stderr
    assert pruned.stdout == "pruned\t1\n"
    cleared = run("cache", "clear", "--cache", cache)
    assert cleared.exit_code == 0
    assert "vectors\t0" in run("cache", "info", "--cache", cache).stdout


def test_cache_info_without_cache(tmp_path):
    result = run("cache", "info", "--cache", tmp_path / "none.sqlite")
    assert result.exit_code == 1
    assert result.stderr == f"error: no cache at {tmp_path / 'none.sqlite'}\n"


def _commands(group: click.Group, prefix: str = "novelfind"):
    for name, command in group.commands.items():
        yield f"{prefix} {name}", command
        if isinstance(command, click.Group):
            yield from _commands(command, f"{prefix} {name}")


@pytest.mark.parametrize(("name", "command"), list(_commands(cli)))
def test_every_command_has_help_with_examples_and_is_in_the_readme(name, command):
    args = name.split()[1:] + ["--help"]
    result = run(*args)
    assert result.exit_code == 0
    assert command.get_short_help_str().strip()
    assert "Example" in result.stdout
    assert f"`{name}" in (ROOT / "README.md").read_text(), f"{name} is not documented in README.md"


def test_exit_codes_are_documented():
    readme = (ROOT / "README.md").read_text()
    scan_help = run("scan", "--help").stdout
    for code in ("0", "1", "2", "3", "4", "130"):
        assert f"| {code} " in readme
        assert f"  {code} " in scan_help


def _hold_lock(path: Path) -> subprocess.Popen:
    """Another process holding the lock file ``path`` until its stdin closes."""
    code = (
        "import sys; from novelfind.base.lock import RunLock\n"
        f"with RunLock({str(path)!r}):\n"
        "    print('held', flush=True); sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_second_run_on_the_same_output_exits_4_with_no_wait(library, fake_extractor, tmp_path):
    out = tmp_path / "picks.tsv"
    lock = output_lock_path(out)
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = _hold_lock(lock)
    try:
        result = run("scan", library["root"], "--k", "2", "-o", out, "--no-wait")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert result.exit_code == 4
    assert result.stderr.startswith(f"error: another novelfind run is using {out} (pid {holder.pid})")
    assert not out.exists()
    assert fake_extractor.images == 0


def test_second_run_on_the_same_output_waits_by_default(library, fake_extractor, tmp_path):
    out = tmp_path / "picks.tsv"
    lock = output_lock_path(out)
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = _hold_lock(lock)
    release = threading.Timer(1.0, holder.stdin.close)
    release.start()
    started = time.monotonic()
    result = run("scan", library["root"], "--k", "2", "-o", out)
    holder.wait(timeout=30)
    assert result.exit_code == 0, result.stderr
    assert time.monotonic() - started >= 0.9
    assert f"note: waiting for another novelfind run writing {out}" in result.stderr
    assert len(out.read_text().splitlines()) == 2


def test_runs_with_different_outputs_do_not_block_each_other(library, fake_extractor, tmp_path):
    lock = output_lock_path(tmp_path / "other.tsv")
    lock.parent.mkdir(parents=True, exist_ok=True)
    holder = _hold_lock(lock)
    try:
        result = run("scan", library["root"], "--k", "2", "-o", tmp_path / "mine.tsv", "--no-wait")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert result.exit_code == 0, result.stderr


def test_no_cache_wins_over_a_cache_from_the_environment(library, fake_extractor, tmp_path):
    cache = tmp_path / "env.sqlite"
    result = run("scan", library["root"], "--k", "2", "--no-cache", "-q", env={"NOVELFIND_CACHE": str(cache)})
    assert result.exit_code == 0, result.stderr
    assert not cache.exists()


def test_cache_and_no_cache_on_the_command_line_contradict(library, fake_extractor, tmp_path):
    result = run("scan", library["root"], "--no-cache", "--cache", tmp_path / "c.sqlite")
    assert result.exit_code == 2
    assert result.stderr == "error: --cache and --no-cache contradict each other\n"


def test_config_since_may_be_a_toml_date(library, fake_extractor, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("since = 2999-01-01\n")
    result = run("scan", library["root"], "--config", config)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert "no photos taken since 2999-01-01" in result.stderr


def test_since_before_everything_is_the_same_as_no_since(library, fake_extractor):
    plain = run("scan", library["root"], "--k", "5", "-q")
    since = run("scan", library["root"], "--k", "5", "-q", "--since", "1971-01-01")
    assert plain.exit_code == since.exit_code == 0
    assert since.stdout == plain.stdout


def test_cache_commands_use_the_configured_cache(library, fake_extractor, tmp_path, isolated_user_dirs):
    cache = tmp_path / "configured.sqlite"
    config = isolated_user_dirs / "config" / "novelfind" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"cache = {str(cache)!r}\n")
    assert run("scan", library["root"], "--k", "2", "-q").exit_code == 0
    assert cache.exists()
    info = run("cache", "info")
    assert info.exit_code == 0, info.stderr
    assert f"path\t{cache}" in info.stdout


@pytest.mark.parametrize(
    ("args", "kwargs", "cli_message", "api_message"),
    [
        (
            ["--contact-sheet", "sheet.gif"],
            {"contact_sheet": "sheet.gif"},
            "contact sheet sheet.gif: use a .jpg, .png or .webp name",
            "contact sheet sheet.gif: use a .jpg, .png or .webp name",
        ),
        (
            ["--xmp-keyword", "odd"],
            {"xmp_keyword": "odd"},
            "--xmp-keyword takes effect only with --xmp",
            "xmp_keyword takes effect only with xmp=True",
        ),
        (
            ["--ray-address", "auto"],
            {"ray_address": "auto"},
            "--ray-address takes effect only with --engine ray",
            "ray_address takes effect only with engine='ray'",
        ),
    ],
)
def test_the_command_line_and_the_library_refuse_the_same_parameters_before_scanning(
    library, fake_extractor, args, kwargs, cli_message, api_message
):
    result = run("scan", library["root"], *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"error: {cli_message}\n")
    with pytest.raises(InputError) as info:
        novelfind.scan(library["root"], **kwargs)
    assert str(info.value) == api_message
    assert fake_extractor.images == 0


def test_a_keyword_from_the_environment_waits_for_xmp(library, fake_extractor):
    """A standing setting (environment, config file) is not refused on the runs it does not apply to."""
    result = run("scan", library["root"], "--k", "2", "-q", env={"NOVELFIND_XMP_KEYWORD": "Picks|novel"})
    assert result.exit_code == 0, result.stderr
    assert not list(library["root"].rglob("*.xmp"))


def test_the_ads_settings_have_one_set_of_limits():
    """The scan's ADS parameters and the solver's ADSConfig accept and refuse the same values."""
    from novelfind.ranking.adsconfig import ADS_LIMITS, ADSConfig

    for name, limit in ADS_LIMITS.items():
        if name in params.LIMITS:
            assert params.LIMITS[name] is limit, name
    for name, bad in (("epochs", 100_001), ("partners", 0), ("restarts", 1001), ("momentum", 1.0)):
        with pytest.raises(InputError, match=f"ADSConfig.{name} must be"):
            ADSConfig(**{name: bad})
        with pytest.raises(InputError, match=f"^{name} must be"):
            params.ScanParameters(paths="x", **{name: bad})


def test_placed_picks_are_never_ranked_by_later_runs(library, fake_extractor):
    picks = library["root"] / "novel"
    first = run("scan", library["root"], "--k", "3", "--copy-to", picks, "-q")
    assert first.exit_code == 0, first.stderr
    second = run("scan", library["root"], "--k", "40", "--format", "members", "-q")
    assert second.exit_code == 0
    ranked = {Path(line) for line in second.stdout.splitlines()}
    assert ranked == set(library["ordinary"]) | set(library["odd"])


def test_a_run_without_picks_clears_earlier_picks(library, fake_extractor, tmp_path):
    dest = tmp_path / "novel"
    assert run("scan", library["root"], "--k", "3", "--copy-to", dest, "-q").exit_code == 0
    assert len([p for p in dest.iterdir() if not p.name.startswith(".")]) == 3
    later = run("scan", library["root"], "--k", "3", "--copy-to", dest, "--since", "2999-01-01", "-q")
    assert later.exit_code == 0, later.stderr
    assert [p for p in dest.iterdir() if not p.name.startswith(".")] == []


def test_quiet_hides_warnings_but_not_unreadable_files(library, fake_extractor, tmp_path):
    bad = library["root"] / "broken.jpg"
    bad.write_text("not a jpeg")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    loud = run("scan", library["root"], "--k", "2", "--cache", blocker / "c.sqlite")
    assert loud.exit_code == 3
    assert "running without the cache" in loud.stderr
    quiet = run("scan", library["root"], "--k", "2", "--cache", blocker / "c.sqlite", "-q")
    assert quiet.exit_code == 3
    lines = quiet.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"warning: cannot read {bad}: ")


def test_reader_closing_the_pipe_early_is_not_an_error(library, tmp_path):
    script = Path(__file__).resolve().parents[1] / "support" / "fake_cli.py"
    args = [sys.executable, str(script), "scan", str(library["root"]), "--k", "30", "--no-cache"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # like `| head -0`: nobody reads the results
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "error" not in stderr and "Traceback" not in stderr
    assert "33 photos (33 files) found" in stderr


def test_progress_bars_go_to_stderr_and_waiting_is_a_note(capsys, tmp_path):
    from novelfind.cli.console import Console, ProgressBars
    from novelfind.run import Progress

    bars = ProgressBars(enabled=True, console=Console(quiet=False))
    for event in [
        Progress("walk", 1000),
        Progress("walk", 1500),
        Progress("extract", 3, 10),
        Progress("extract", 10, 10),
    ]:
        bars(event)
    assert (bars.stage, bars.bar.n, bars.bar.total) == ("extract", 10, 10)  # one bar per stage, moved to done
    for event in [Progress("rank", 0, 1), Progress("wait", path=tmp_path / "o")]:
        bars(event)
    for done in (1, 2, 3):  # the HTML report's thumbnails, file by file
        bars(Progress("report", done, 3))
    assert (bars.stage, bars.bar.n, bars.bar.total) == ("report", 3, 3)
    bars.close()
    out, err = capsys.readouterr()
    assert out == ""
    assert "walking" in err and "extracting" in err and "report" in err
    assert f"note: waiting for another novelfind run writing {tmp_path / 'o'}" in err
    quiet = ProgressBars(enabled=False, console=Console(quiet=True))
    quiet(Progress("extract", 1, 2))
    quiet(Progress("wait", path=tmp_path / "o"))
    assert capsys.readouterr() == ("", "")


def test_every_parameter_is_a_scan_option_made_from_its_declaration():
    from novelfind import params

    options = {p.name: p for p in cli.commands["scan"].params}
    for f in params.FIELDS:
        meta = f.metadata
        if f.name == "paths" or meta["help"] is None:  # the argument, and what only the API offers
            assert f.name == "paths" or f.name not in options, f.name
            continue
        option = options[f.name]
        assert option.help == meta["help"] and option.envvar == f"NOVELFIND_{f.name.upper()}", f.name
        assert option.group.title == dict(OPTION_GROUPS)[meta["group"]], f.name  # its --help section
        assert option.default == (None if f.name == "cache" else f.default), f.name
        if meta["limit"] is not None:
            limit, kind = meta["limit"], option.type
            assert (kind.min, kind.max, kind.min_open, kind.max_open) == (
                limit.low,
                limit.high,
                limit.low_open,
                limit.high_open,
            ), f.name
        if meta["choices"] is not None:
            assert list(option.type.choices) == list(meta["choices"]), f.name
    assert "decoder" not in options  # API only
    assert {"quiet", "no_cache", "config"} <= set(options)
