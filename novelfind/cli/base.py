"""The commands' Click plumbing: option classes, types, config loading, and errors as exit codes.

An option's bad value is blamed on where it came from (the command line, ``NOVELFIND_<NAME>`` or the
config file's key); every error is one line on stderr and a documented exit code
(:mod:`novelfind.errors`). The options of the parameters are made here from :mod:`novelfind.params`,
so the commands and the library never disagree on a default, a limit or a choice.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import cloup

from novelfind import params
from novelfind.base import dirs
from novelfind.base.since import parse_since
from novelfind.cli.console import stderr_line
from novelfind.config import config_keys, read_config, to_default_map
from novelfind.errors import ExitCode, InputError, NovelfindError

DEFAULTS = params.parameter_defaults()
FIELDS = {f.name: f for f in params.FIELDS}


# A date with a UTC offset (``Z``, ``+02:00``) is that moment; without one, local time.
class SinceType(click.DateTime):
    """``--since``: the forms ``parse_since`` takes (``7d``, ``yesterday``, ISO 8601)."""

    name = "date"

    def __init__(self) -> None:
        super().__init__(["%Y-%m-%d"])

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            return parse_since(str(value))
        except InputError as err:
            self.fail(str(err), param, ctx)


# ctx.meta: parameter name -> ParameterSource, recorded before conversion
_SOURCES = "novelfind.sources"
_CONFIG = "novelfind.config"  # ctx.meta: (config file, {parameter name: key as written in it})


def value_source(ctx: click.Context, param: click.Parameter) -> tuple[str, str] | None:
    """Where a parameter's value came from when it was not typed on the command line, as (the name for
    "Invalid value for ...", the origin for "(from ...)"): ("NOVELFIND_K (environment variable)",
    "NOVELFIND_K") or ("key 'k' in config file PATH", "config file PATH, key 'k'"); None for the command
    line and defaults. What a cron user needs in an error message to find the value to fix."""
    source = ctx.meta.get(_SOURCES, {}).get(param.name) or ctx.get_parameter_source(param.name or "")
    if source == click.core.ParameterSource.ENVIRONMENT and isinstance(param, click.Option):
        names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or ())
        name = next((n for n in names if os.environ.get(n)), names[0] if names else None)
        return (f"{name} (environment variable)", name) if name else None
    if source == click.core.ParameterSource.DEFAULT_MAP and _CONFIG in ctx.meta:
        path, keys = ctx.meta[_CONFIG]
        key = keys.get(param.name, (param.name or "").replace("_", "-"))
        return f"key '{key}' in config file {path}", f"config file {path}, key '{key}'"
    return None


class SourcedOption(cloup.Option):
    """An option whose bad value is blamed on where it came from: the environment variable or the
    config file and key, not the option the user never typed."""

    def consume_value(self, ctx: click.Context, opts: Any) -> Any:  # noqa: D102
        value, source = super().consume_value(ctx, opts)
        ctx.meta.setdefault(_SOURCES, {})[self.name] = source
        return value, source

    def get_error_hint(self, ctx: click.Context) -> str:
        """An error names the option by its long form (``'--k'``, not ``'-k' / '--k'``): the name the
        documentation and the config key use."""
        longs = [name for name in self.opts if name.startswith("--")]
        return " / ".join(f"'{name}'" for name in longs) if longs else super().get_error_hint(ctx)

    def process_value(self, ctx: click.Context, value: Any) -> Any:  # noqa: D102
        try:
            return super().process_value(ctx, value)
        except click.BadParameter as err:
            where = value_source(ctx, self)
            if where is not None and err.param_hint is None:
                err.param_hint = where[0]
            raise


def blame_source(ctx: click.Context, message: str) -> str:
    """A library message naming an option, ``(from --weights)``, with the option replaced by where its
    value came from when that was not the command line."""

    def replace(match: re.Match[str]) -> str:
        param = next((p for p in ctx.command.params if match.group(1) in getattr(p, "opts", ())), None)
        where = value_source(ctx, param) if param is not None else None
        return f"(from {where[1]})" if where is not None else match.group(0)

    return re.sub(r"\(from (--[a-z0-9-]+)\)", replace, message)


class NovelfindCommand(cloup.Command):
    """A command whose library errors name the environment variable or config key behind an option."""

    def invoke(self, ctx: click.Context) -> Any:  # noqa: D102
        try:
            return super().invoke(ctx)
        except NovelfindError as err:
            if err.args and isinstance(err.args[0], str):
                err.args = (blame_source(ctx, err.args[0]), *err.args[1:])
            raise


class NovelfindGroup(click.Group):
    """A group whose errors are one line on stderr and a documented exit code, in every mode."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # noqa: D102
        try:
            code = super().main(
                args=args,
                prog_name=prog_name or "novelfind",
                complete_var=complete_var,
                standalone_mode=False,
                **extra,
            )
            code = int(code or 0)
        except NovelfindError as err:
            stderr_line(f"error: {err}")
            code = int(err.exit_code)
        except click.exceptions.NoArgsIsHelpError as err:  # help, not an error; still not a success
            click.echo(err.ctx.get_help() if err.ctx is not None else err.format_message(), err=True)
            code = int(ExitCode.USAGE)
        except click.UsageError as err:
            stderr_line(f"error: {err.format_message()}")
            code = int(ExitCode.USAGE)
        except click.ClickException as err:
            stderr_line(f"error: {err.format_message()}")
            code = int(err.exit_code)
        except click.exceptions.Abort:
            click.echo("interrupted", err=True)
            code = int(ExitCode.INTERRUPTED)
        except Exception as err:  # a bug: still one line, the traceback only on request
            if os.environ.get("NOVELFIND_DEBUG"):
                raise
            stderr_line(
                f"error: internal error: {type(err).__name__}: {err} (set NOVELFIND_DEBUG=1 for "
                "the traceback)"
            )
            code = int(ExitCode.ERROR)
        if standalone_mode:
            sys.exit(code)
        return code


class IntRange(click.IntRange):
    name = "integer"  # "'ten' is not a valid integer.", not "... valid integer range."


class FiniteFloatRange(click.FloatRange):
    """A FloatRange that also refuses NaN and infinity (a plain FloatRange lets NaN through)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{number} is not a finite number.", param, ctx)
        return number


def _range(name: str, kind: type) -> click.ParamType:
    """The Click type of a numeric option, from the library's one list of limits."""
    limit = params.LIMITS[name]
    if kind is int:
        return IntRange(limit.low, limit.high, min_open=limit.low_open, max_open=limit.high_open)
    return FiniteFloatRange(limit.low, limit.high, min_open=limit.low_open, max_open=limit.high_open)


def env_name(name: str) -> str:
    return "NOVELFIND_" + name.upper()


def load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Eager callback: read the config file into Click's default_map before other options parse."""
    path = Path(value) if value else dirs.config_path()
    if path is None:
        return value
    data = read_config(path)
    ctx.default_map = {**(ctx.default_map or {}), **to_default_map(ctx.command, data, path)}
    params = config_keys(ctx.command)
    keys = {params[key.replace("-", "_")].name: key for key in data if key.replace("-", "_") in params}
    ctx.meta[_CONFIG] = (path, keys)
    return str(path)


def parameter_declarations(name: str, dest: str | None = None) -> tuple[list[str], dict[str, Any]]:
    """The option of one parameter (:mod:`novelfind.params`), as Click's declarations and keywords: its
    flags and help, a Click type from its limit or choices (so ``--help`` shows them), the library's
    default and the environment variable NOVELFIND_<NAME>. ``scan`` has one for each parameter; the
    ``ignore`` and ``cache`` commands take theirs of ``--ignore-file`` and ``--cache`` (as ``dest``)."""
    f = FIELDS[name]
    meta = f.metadata
    kwargs: dict[str, Any] = {"default": DEFAULTS[f.name], "envvar": env_name(f.name), "help": meta["help"]}
    if meta["limit"] is not None:
        kwargs["type"] = _range(f.name, int if f.type.startswith("int") else float)
    elif meta["choices"] is not None:
        kwargs["type"] = click.Choice(list(meta["choices"]))
    elif f.type == "datetime | None":
        kwargs["type"] = SinceType()
    elif meta["folder"]:
        kwargs["type"] = click.Path(file_okay=False, path_type=Path)
    elif "Path" in f.type:  # a file; the cache too, whose True/False are the default and --no-cache
        kwargs["type"] = click.Path(dir_okay=False, path_type=Path)
        kwargs["default"] = None if f.name == "cache" else kwargs["default"]
    flags = meta["flags"] or ("--" + f.name.replace("_", "-"),)
    if f.type == "bool" and not any("/" in flag for flag in flags):
        kwargs["is_flag"] = True
    if f.type.startswith("tuple"):
        kwargs["multiple"] = True
    default = kwargs["default"]
    kwargs["show_default"] = not (default is None or default is False or default == ())
    if meta["metavar"]:
        kwargs["metavar"] = meta["metavar"]
    return [*flags, dest or f.name], kwargs


# -q of the commands that print progress or notes (not a parameter: the library prints nothing)
QUIET = (
    ["-q", "--quiet"],
    {
        "is_flag": True,
        "default": False,
        "envvar": env_name("quiet"),
        "help": "Print nothing on stderr but errors and unreadable files.",
    },
)


def parameter_option(name: str, dest: str | None = None) -> Callable:
    """The option of a parameter as a decorator, for the commands other than ``scan``."""
    decls, kwargs = parameter_declarations(name, dest)
    return click.option(*decls, cls=SourcedOption, **kwargs)


def as_flag(name: str, value: Any = True) -> str:
    """A parameter as the command line spells it: ``--xmp``, ``--engine ray``."""
    flag = "--" + name.replace("_", "-")
    return flag if value is True else f"{flag} {value}"
