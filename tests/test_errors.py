"""Exit codes and the exceptions that carry them: each code is distinct, each error class carries the
code the README's exit-code table gives it, and the messages of ``NeedsError`` say what gives effect."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from novelfind import errors
from novelfind.errors import (
    CacheError,
    ClusterError,
    DecodeError,
    ExitCode,
    InputError,
    Interrupted,
    LockedError,
    MissingExtraError,
    NeedsError,
    NovelfindError,
    OutputError,
    ParameterError,
    WeightsError,
)

ROOT = Path(__file__).resolve().parents[1]


def readme_exit_codes() -> dict[int, str]:
    """The README's ``## Exit codes`` table: code -> its meaning."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    return {int(code): meaning for code, meaning in re.findall(r"^\| (\d+) \| (.+) \|$", section, re.M)}


def test_exit_codes_are_distinct():
    values = [code.value for code in ExitCode]
    assert len(values) == len(set(values))
    assert ExitCode.OK == 0 and ExitCode.INTERRUPTED == 130  # 128 + SIGINT, as shells report it


def test_the_readme_lists_each_exit_code_and_no_other():
    assert sorted(readme_exit_codes()) == sorted(code.value for code in ExitCode)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (ExitCode.OK, "success"),
        (ExitCode.ERROR, "error"),
        (ExitCode.USAGE, "usage"),
        (ExitCode.PARTIAL, "some files could not be read"),
        (ExitCode.BUSY, "holds the lock"),
        (ExitCode.INTERRUPTED, "interrupted"),
    ],
)
def test_the_readme_says_what_each_code_means(code, words):
    assert words in readme_exit_codes()[code.value]


@pytest.mark.parametrize(
    ("error", "code", "readme_words"),
    [
        (NovelfindError("x"), ExitCode.ERROR, "error"),
        (WeightsError("x"), ExitCode.ERROR, "weights missing"),
        (OutputError("x"), ExitCode.ERROR, "an output not writable"),
        (ClusterError("x"), ExitCode.ERROR, "cluster could not be used"),
        (CacheError("x"), ExitCode.ERROR, "error"),
        (InputError("x"), ExitCode.USAGE, "bad option value"),
        (ParameterError("k", "x"), ExitCode.USAGE, "bad option value"),
        (NeedsError("xmp_keyword", "xmp", True), ExitCode.USAGE, "takes effect only with another"),
        (MissingExtraError("x"), ExitCode.USAGE, "whose extra is not installed"),
        (LockedError("x"), ExitCode.BUSY, "holds the lock"),
        (Interrupted("x"), ExitCode.INTERRUPTED, "interrupted"),
    ],
)
def test_each_error_carries_the_code_the_readme_gives_it(error, code, readme_words):
    assert error.exit_code == code
    assert readme_words in readme_exit_codes()[code.value]


def test_every_novelfind_error_is_in_the_table_above():
    classes = {
        obj for obj in vars(errors).values() if isinstance(obj, type) and issubclass(obj, NovelfindError)
    }
    assert classes == {
        NovelfindError,
        WeightsError,
        OutputError,
        ClusterError,
        CacheError,
        InputError,
        ParameterError,
        NeedsError,
        MissingExtraError,
        LockedError,
        Interrupted,
    }


def test_input_errors_are_value_errors_and_decode_errors_end_no_scan():
    assert issubclass(InputError, ValueError) and issubclass(NeedsError, ValueError)
    assert not issubclass(DecodeError, NovelfindError)
    assert not hasattr(DecodeError("truncated"), "exit_code")
    assert str(DecodeError("truncated")) == "truncated"


def test_a_parameter_error_keeps_the_name_and_the_message():
    err = ParameterError("contact_sheet", "contact sheet s.gif: use a .jpg, .png or .webp name")
    assert err.name == "contact_sheet"
    assert str(err) == "contact sheet s.gif: use a .jpg, .png or .webp name"


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (NeedsError("xmp_keyword", "xmp", True), "xmp_keyword takes effect only with xmp=True"),
        (
            NeedsError("epochs", "method", ("ads", "ads-paper"), chosen="knn"),
            "epochs takes effect only with method='ads' or method='ads-paper', not method='knn'",
        ),
        (
            NeedsError(
                "decode_timeout", "engine", ("local",), chosen="ray", also=("report", "contact_sheet")
            ),
            "decode_timeout takes effect only with engine='local' or with report or contact_sheet, "
            "not engine='ray'",
        ),
    ],
)
def test_needs_error_says_what_gives_the_parameter_effect(error, message):
    assert str(error) == message
    assert isinstance(error, ParameterError) and error.exit_code == ExitCode.USAGE


def test_needs_error_keeps_its_parts_and_says_them_in_other_words():
    err = NeedsError("ray_address", "engine", "ray", chosen="local")
    assert (err.name, err.needs, err.values, err.chosen, err.also) == (
        "ray_address",
        "engine",
        ("ray",),
        "local",
        (),
    )
    flags = err.said(
        spell=lambda name, value: f"--{name.replace('_', '-')} {value}",
        named=lambda name: f"--{name.replace('_', '-')}",
    )
    assert flags == "--ray-address takes effect only with --engine ray, not --engine local"
