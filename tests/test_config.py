"""Config files read directly: the TOML file, its ``[scan]`` table, and each key checked against the
command's options with its exact message. (Precedence over the environment and the command line is in
tests/cli/test_scan.py.)"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from novelfind.cli.group import cli
from novelfind.config import (
    MAX_CONFIG_BYTES,
    config_keys,
    configured_cache,
    configured_value,
    read_config,
    to_default_map,
)
from novelfind.errors import InputError

SCAN = cli.commands["scan"]


def write(tmp_path: Path, text: str, name: str = "c.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_scan_table_or_the_top_level_is_read(tmp_path):
    assert read_config(write(tmp_path, "k = 3\nformat = 'json'\n")) == {"k": 3, "format": "json"}
    assert read_config(write(tmp_path, "[scan]\nk = 4\n")) == {"k": 4}
    assert read_config(write(tmp_path, "")) == {}


def test_keys_beside_the_scan_table_are_refused(tmp_path):
    path = write(tmp_path, "z = 1\n[scan]\nk = 3\n[other]\nx = 1\n")
    with pytest.raises(InputError) as err:
        read_config(path)
    assert str(err.value) == f"config file {path}: unknown key 'other' (expected a [scan] table)"


def test_a_missing_unreadable_or_invalid_file_is_named(tmp_path):
    with pytest.raises(InputError) as err:
        read_config(tmp_path / "none.toml")
    assert str(err.value) == f"config file not found: {tmp_path / 'none.toml'}"
    with pytest.raises(InputError, match=r"^cannot read config file .*: "):
        read_config(tmp_path)  # a folder
    with pytest.raises(InputError, match=r"^config file .*bad\.toml is not valid TOML: "):
        read_config(write(tmp_path, "k = \n", "bad.toml"))


def test_a_file_over_the_limit_is_refused(tmp_path):
    path = write(tmp_path, "# " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(InputError) as err:
        read_config(path)
    assert str(err.value) == f"cannot read config file {path}: larger than {MAX_CONFIG_BYTES} bytes"


def test_a_name_with_a_newline_stays_on_one_line_in_the_message(tmp_path):
    with pytest.raises(InputError) as err:
        read_config(tmp_path / "a\nb.toml")
    assert str(err.value) == f"config file not found: {tmp_path}/a\\nb.toml"


def test_keys_take_dashes_or_underscores_and_values_are_converted():
    source = Path("/etc/nf.toml")
    defaults = to_default_map(
        SCAN,
        {"batch-size": 8, "copy_to": "~/picks", "exclude": ["*.png", "**/thumbs/**"], "lr": 1, "xmp": True},
        source,
    )
    assert defaults["batch_size"] == 8
    assert defaults["exclude"] == ["*.png", "**/thumbs/**"]
    assert defaults["lr"] == 1.0 and isinstance(defaults["lr"], float)
    assert defaults["xmp"] is True
    assert "copy_to" in defaults
    since = to_default_map(SCAN, {"since": datetime.date(2030, 1, 2)}, source)["since"]
    assert since == "2030-01-02" or str(since).startswith("2030-01-02")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kk": 3}, "unknown key 'kk'"),
        ({"config": "x.toml"}, "unknown key 'config'"),  # a config file names no other
        ({"k": "many"}, "key 'k' must be a whole number, got 'many'"),
        ({"k": True}, "key 'k' must be a whole number, got True"),
        ({"lr": "fast"}, "key 'lr' must be a number, got 'fast'"),
        ({"quiet": 1}, "key 'quiet' must be true or false, got 1"),
        ({"format": 3}, "key 'format' must be a string, got 3"),
        ({"since": 7}, "key 'since' must be a date, got 7"),
        ({"k": [1, 2]}, "key 'k' must be a single value"),
        ({"k": {"a": 1}}, "key 'k' must be a single value"),
        ({"exclude": "*.png"}, "key 'exclude' must be a list"),
        ({"exclude": ["*.png", 3]}, "key 'exclude' must be a string, got 3"),
    ],
)
def test_unknown_keys_and_wrong_types_are_refused_with_their_message(data, message):
    with pytest.raises(InputError) as err:
        to_default_map(SCAN, data, Path("/etc/nf.toml"))
    assert str(err.value) == f"config file /etc/nf.toml: {message}"


def test_a_value_outside_the_options_range_or_choices_is_refused_by_the_options_type():
    with pytest.raises(InputError, match=r"^config file /c\.toml: key 'k': .*0 is not in the range x>=1\.$"):
        to_default_map(SCAN, {"k": 0}, Path("/c.toml"))
    with pytest.raises(InputError, match=r"^config file /c\.toml: key 'format': .*'xml' is not one of "):
        to_default_map(SCAN, {"format": "xml"}, Path("/c.toml"))


def test_config_keys_are_the_long_options_without_config():
    keys = config_keys(SCAN)
    assert "config" not in keys
    assert keys["k"].name == "k" and keys["no_cache"].name == "no_cache"
    assert all("-" not in key for key in keys)


def test_the_default_config_file_gives_its_cache_to_the_commands_beside_scan(tmp_path, monkeypatch):
    command = SCAN  # what the cache and ignore commands read the file with
    assert configured_value(command, "cache") is None and configured_cache(command) is None
    monkeypatch.setenv("NOVELFIND_CONFIG", str(write(tmp_path, f"cache = {str(tmp_path / 'f.sqlite')!r}\n")))
    assert configured_cache(command) == tmp_path / "f.sqlite"
    monkeypatch.setenv("NOVELFIND_CONFIG", str(write(tmp_path, "kk = 1\n", "bad.toml")))
    with pytest.raises(InputError, match="unknown key 'kk'"):
        configured_cache(command)
