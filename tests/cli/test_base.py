"""The command line's building blocks: one error line and a documented exit code, the numeric types."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from novelfind.cli.base import FiniteFloatRange, IntRange, NovelfindGroup, as_flag, env_name
from novelfind.errors import ExitCode, InputError, LockedError, NovelfindError


@click.group(cls=NovelfindGroup)
def group() -> None:
    """A group to exercise the error handling."""


@group.command()
@click.argument("what")
def fail(what: str) -> None:
    if what == "novelfind":
        raise NovelfindError("the weights are missing")
    if what == "input":
        raise InputError("no such folder: /x")
    if what == "locked":
        raise LockedError("another run writes r.html")
    if what == "abort":
        raise click.exceptions.Abort()
    if what == "bug":
        raise KeyError("oops")
    click.echo("done")


@group.command()
@click.option("--k", type=IntRange(1, 10))
@click.option("--ratio", type=FiniteFloatRange(0, 1))
def numbers(k: int | None, ratio: float | None) -> None:
    click.echo(f"{k} {ratio}")


def run(*args: str, env: dict | None = None):
    return CliRunner().invoke(group, list(args), env=env)


@pytest.mark.parametrize(
    ("what", "code", "line"),
    [
        ("novelfind", ExitCode.ERROR, "error: the weights are missing"),
        ("input", ExitCode.USAGE, "error: no such folder: /x"),
        ("locked", ExitCode.BUSY, "error: another run writes r.html"),
        ("abort", ExitCode.INTERRUPTED, "interrupted"),
        (
            "bug",
            ExitCode.ERROR,
            "error: internal error: KeyError: 'oops' (set NOVELFIND_DEBUG=1 for the traceback)",
        ),
    ],
)
def test_every_error_is_one_line_on_stderr_with_its_exit_code(what, code, line):
    result = run("fail", what, env={"NOVELFIND_DEBUG": ""})
    assert result.exit_code == code
    assert result.stdout == ""
    assert result.stderr == line + "\n"


def test_a_bug_shows_its_traceback_on_request():
    result = run("fail", "bug", env={"NOVELFIND_DEBUG": "1"})
    assert isinstance(result.exception, KeyError)


def test_success_and_usage_errors():
    ok = run("fail", "fine")
    assert (ok.exit_code, ok.stdout, ok.stderr) == (0, "done\n", "")
    unknown = run("nope")
    assert unknown.exit_code == ExitCode.USAGE and unknown.stdout == ""
    assert unknown.stderr.startswith("error: No such command 'nope'")
    assert unknown.stderr.count("\n") == 1
    bare = run()  # no command: the help, on stderr, and not a success
    assert bare.exit_code == ExitCode.USAGE and "A group to exercise" in bare.stderr and bare.stdout == ""


def test_numeric_options_name_their_type_and_refuse_nan():
    assert run("numbers", "--k", "3", "--ratio", "0.5").stdout == "3 0.5\n"
    words = run("numbers", "--k", "ten")
    assert words.exit_code == ExitCode.USAGE
    assert "'ten' is not a valid integer." in words.stderr
    for value in ("nan", "inf"):
        bad = run("numbers", "--ratio", value)
        assert bad.exit_code == ExitCode.USAGE
        assert "is not a finite number." in bad.stderr or "is not in the range" in bad.stderr
    nan = run("numbers", "--ratio", "nan")
    assert "nan is not a finite number." in nan.stderr


def test_names_as_the_command_line_and_the_environment_spell_them():
    assert as_flag("xmp") == "--xmp"
    assert as_flag("engine", "ray") == "--engine ray"
    assert as_flag("decode_timeout", 5) == "--decode-timeout 5"
    assert env_name("decode_timeout") == "NOVELFIND_DECODE_TIMEOUT"
