"""Configuration files: TOML, checked against the command's own options.

Precedence, highest first: command line > environment (``NOVELFIND_*``) > config file > built-in
defaults. Click implements the first, second and last; this module turns a TOML file into Click's
``default_map`` after checking every key and value, so a typo is an error naming the key.
"""

from __future__ import annotations

import datetime
import textwrap
from pathlib import Path
from typing import Any

import click

from novelfind.base import atomic, dirs, safe_load
from novelfind.base.safe_text import display
from novelfind.errors import InputError
from novelfind.params import FIELDS

MAX_CONFIG_BYTES = 1 << 20  # a config file sets a few dozen keys: some kilobytes


def read_config(path: Path) -> dict[str, Any]:
    """The parsed TOML file; the ``[scan]`` table if present, else the top level.

    ``~`` in ``path`` is the home folder. Only a regular file of at most :data:`MAX_CONFIG_BYTES` is
    read (``NOVELFIND_CONFIG=/dev/zero`` would otherwise fill the memory); a link the user made to one
    is followed.
    """
    path = Path(path).expanduser()
    try:
        data = safe_load.load_toml(
            atomic.read_limited(path, MAX_CONFIG_BYTES, follow_link=True), max_bytes=MAX_CONFIG_BYTES
        )
    except FileNotFoundError:
        raise InputError(f"config file not found: {display(path)}") from None
    except OSError as err:
        raise InputError(f"cannot read config file {display(path)}: {err.strerror}") from None
    except safe_load.UnreadableError as err:
        raise InputError(f"config file {display(path)} is not valid TOML: {err}") from None
    if "scan" in data and isinstance(data["scan"], dict):
        extra = sorted(set(data) - {"scan"})
        if extra:
            raise InputError(f"config file {path}: unknown key '{extra[0]}' (expected a [scan] table)")
        data = data["scan"]
    return data


def to_default_map(command: click.Command, data: dict[str, Any], source: Path) -> dict[str, Any]:
    """Check every key against ``command``'s options and convert each value with the option's type.

    Keys are option names with dashes or underscores (``batch-size`` or ``batch_size``).
    """
    params = config_keys(command)
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        param = params.get(key.replace("-", "_"))
        if param is None:
            raise InputError(f"config file {source}: unknown key '{key}'")
        name = param.name
        if param.multiple and not isinstance(value, list):
            raise InputError(f"config file {source}: key '{key}' must be a list")
        if not param.multiple and isinstance(value, (list, dict)):
            raise InputError(f"config file {source}: key '{key}' must be a single value")
        values = value if param.multiple else [value]
        for v in values:
            _check_type(param, v, key, source)
        try:
            values = [v.isoformat() if isinstance(v, (datetime.date, datetime.time)) else v for v in values]
            converted = [param.type.convert(v, param, None) for v in values]
        except click.BadParameter as err:
            raise InputError(f"config file {source}: key '{key}': {err.format_message()}") from None
        defaults[name] = converted if param.multiple else converted[0]
    return defaults


def config_keys(command: click.Command) -> dict[str, click.Option]:
    """Config key (the long option name, underscored) -> option; ``--config`` itself excluded."""
    keys: dict[str, click.Option] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name == "config":
            continue
        longs = [o for o in param.opts if o.startswith("--")]
        if longs:
            keys[longs[0][2:].replace("-", "_")] = param
    return keys


def _check_type(param: click.Option, value: Any, key: str, source: Path) -> None:
    """TOML has types: a number where text is expected (or the reverse) is a mistake, not a conversion."""
    if param.is_flag:
        ok = isinstance(value, bool)
        wanted = "true or false"
    elif isinstance(param.type, click.types.IntParamType):  # click.INT and click.IntRange
        ok = isinstance(value, int) and not isinstance(value, bool)
        wanted = "a whole number"
    elif isinstance(param.type, click.types.FloatParamType):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        wanted = "a number"
    elif isinstance(param.type, click.DateTime):
        ok = isinstance(value, (str, datetime.date))
        wanted = "a date"
    else:
        ok = isinstance(value, str)
        wanted = "a string"
    if not ok:
        raise InputError(f"config file {source}: key '{key}' must be {wanted}, got {value!r}")


def configured_value(command: click.Command, key: str) -> Any:
    """The ``key`` of the default config file, checked against ``command``'s options (None when unset):
    what the commands beside ``scan`` use, so that they work on the same cache and ignore list."""
    path = dirs.config_path()
    if path is None:
        return None
    return to_default_map(command, read_config(path), path).get(key)


def configured_cache(command: click.Command) -> Path | None:
    """The ``cache`` key of the default config file, for the cache commands (None when unset)."""
    value = configured_value(command, "cache")
    return Path(value) if value is not None else None


def config_comment(name: str) -> str:
    """The comment above the key ``name`` in ``configs/default.toml``: the option's help, wrapped (a
    test holds the file to it, so the method and feature comments follow ``ranking.methods.METHODS``)."""
    help_text = next(f.metadata["help"] for f in FIELDS if f.name == name)
    return textwrap.fill(help_text, width=106, initial_indent="# ", subsequent_indent="# ")
