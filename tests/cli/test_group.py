"""The ``novelfind`` group: its commands, its help and version, the console-script entry point."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner
from common import child_env

from novelfind import __version__
from novelfind.cli import group
from novelfind.cli.base import NovelfindGroup
from novelfind.errors import ExitCode


def test_every_command_is_registered_and_listed_by_help():
    assert isinstance(group.cli, NovelfindGroup)
    assert list(group.cli.commands) == ["scan", "ignore", "failures", "cache"]
    help_text = CliRunner().invoke(group.cli, ["--help"]).stdout
    listed = [line.split()[0] for line in help_text.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == ["cache", "failures", "ignore", "scan"]  # Click lists them by name


def test_short_and_long_help_are_the_same_on_stdout():
    long, short = (CliRunner().invoke(group.cli, [flag]) for flag in ("--help", "-h"))
    assert long.exit_code == short.exit_code == 0
    assert long.stdout == short.stdout and long.stderr == ""
    assert "Find the most novel photos in a large library." in long.stdout
    assert "novelfind scan ~/Pictures --k 100" in long.stdout  # the examples keep their lines


def test_version_and_an_unknown_command():
    version = CliRunner().invoke(group.cli, ["--version"])
    assert (version.exit_code, version.stdout, version.stderr) == (0, f"novelfind {__version__}\n", "")
    unknown = CliRunner().invoke(group.cli, ["scna"])
    assert unknown.exit_code == ExitCode.USAGE and unknown.stdout == ""
    assert unknown.stderr.startswith("error: No such command 'scna'.")


def test_main_is_the_entry_point_with_the_exit_code(tmp_path):
    code = "import sys; sys.argv = ['anything', *sys.argv[1:]]; from novelfind.cli.group import main; main()"
    env = child_env(tmp_path)
    ok = subprocess.run([sys.executable, "-c", code, "--version"], capture_output=True, text=True, env=env)
    assert (ok.returncode, ok.stdout) == (0, f"novelfind {__version__}\n")
    bad = subprocess.run([sys.executable, "-c", code, "nope"], capture_output=True, text=True, env=env)
    assert bad.returncode == ExitCode.USAGE and bad.stdout == ""
    assert bad.stderr.startswith("error: No such command 'nope'.")
    usage = subprocess.run(
        [sys.executable, "-c", code, "ignore", "-h"], capture_output=True, text=True, env=env
    )
    assert usage.stdout.startswith("Usage: novelfind ignore")  # prog_name: novelfind, whatever argv[0] says
