"""The command line: parse the options, call the library, print, and turn errors into exit codes.

Everything a scan does is :func:`novelfind.run.scan`; this module only gathers its keyword arguments
(command line > environment > config file > defaults), passes progress bars and stderr printing in as
callbacks, and prints the results. stdout carries results only; warnings, progress and the summary go
to stderr, and ``-q`` leaves only errors and unreadable files there. Exit codes live in
:mod:`novelfind.errors`.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext, redirect_stdout
from datetime import datetime
from pathlib import Path
from typing import Any

import click
import cloup

from novelfind import __version__, params, run
from novelfind.base import dirs
from novelfind.base.atomic import encode_output
from novelfind.base.safe_text import one_line
from novelfind.cache import FeatureCache, damage, foreign_schema, not_ours, remove_damaged
from novelfind.config import config_keys, configured_cache, configured_value, read_config, to_default_map
from novelfind.errors import (
    CacheError,
    ExitCode,
    InputError,
    Interrupted,
    NeedsError,
    NovelfindError,
    ParameterError,
)
from novelfind.extract.engines import ENGINES
from novelfind.media.ignore import IgnoreList, count_photos
from novelfind.model import weights
from novelfind.outputs.formats import escape_field
from novelfind.ranking.methods import SOLVER_METHODS

EXIT_CODES_HELP = """\b
Exit codes:
  0    success, every file read
  1    error: nothing could be ranked (no images, weights missing, output not writable,
       ignore list damaged, or the Ray cluster unreachable with --engine ray)
  2    usage: bad option, missing folder, unknown config key, --xmp without novelfind[xmp],
       --ray-address without --engine ray, --copy-to holding a scanned folder
  3    finished, but some files could not be read or some sidecars not written (each named
       on stderr); files an earlier scan already reported, unchanged since, do not count
       (`novelfind failures` lists them)
  4    another run holds the lock on the same output (with --no-wait)
  130  interrupted (Ctrl-C, SIGTERM); finished batches stay in the cache
"""

IGNORE_EXIT_CODES_HELP = """\b
Exit codes:
  0    done
  1    the ignore list cannot be read (damaged) or written
  2    usage: no PATHS, or PATHS with --list or --clear
  3    done, but some PATHS could not be read or are not photos (each named on stderr, not added)
"""

DEFAULTS = params.parameter_defaults()
# A date with a UTC offset (``Z``, ``+02:00``) is that moment; without one, local time.
class SinceType(click.DateTime):
    """``--since``: the forms ``params.parse_since`` takes (``7d``, ``yesterday``, ISO 8601)."""

    name = "date"

    def __init__(self) -> None:
        super().__init__(["%Y-%m-%d"])

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        try:
            return params.parse_since(str(value))
        except InputError as err:
            self.fail(str(err), param, ctx)

_SOURCES = "novelfind.ranking.sources"  # ctx.meta: parameter name -> ParameterSource, recorded before conversion
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


def _stderr(message: str) -> None:
    """Print one message on stderr as one line: every message novelfind prints there comes through here,
    so a file name cannot forge a line or speak to the terminal (:func:`novelfind.base.safe_text.one_line`)."""
    click.echo(one_line(message), err=True)


class NovelfindGroup(click.Group):
    """A group whose errors are one line on stderr and a documented exit code, in every mode."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # noqa: D102
        try:
            code = super().main(
                args=args, prog_name=prog_name or "novelfind", complete_var=complete_var,
                standalone_mode=False, **extra,
            )
            code = int(code or 0)
        except NovelfindError as err:
            _stderr(f"error: {err}")
            code = int(err.exit_code)
        except click.exceptions.NoArgsIsHelpError as err:  # help, not an error; still not a success
            click.echo(err.ctx.get_help() if err.ctx is not None else err.format_message(), err=True)
            code = int(ExitCode.USAGE)
        except click.UsageError as err:
            _stderr(f"error: {err.format_message()}")
            code = int(ExitCode.USAGE)
        except click.ClickException as err:
            _stderr(f"error: {err.format_message()}")
            code = int(err.exit_code)
        except click.exceptions.Abort:
            click.echo("interrupted", err=True)
            code = int(ExitCode.INTERRUPTED)
        except Exception as err:  # a bug: still one line, the traceback only on request
            if os.environ.get("NOVELFIND_DEBUG"):
                raise
            _stderr(f"error: internal error: {type(err).__name__}: {err} (set NOVELFIND_DEBUG=1 for "
                    "the traceback)")
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


def plural(count: int, noun: str) -> str:
    """``1 photo``, ``2 photos``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def human_size(size: int) -> str:
    """``812 B``, ``3.4 KB``, ``1.2 MB``, ``5.0 GB`` (powers of 1000, as file managers show them)."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def _env(name: str) -> str:
    return "NOVELFIND_" + name.upper()


def _load_config(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
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


@click.group(cls=NovelfindGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="novelfind", message="%(prog)s %(version)s")
def cli() -> None:
    """Find the most novel photos in a large library.

    \b
    Examples:
      novelfind scan ~/Pictures --k 100
      novelfind scan ~/Pictures --k 20 --report novel.html --copy-to ~/novel
      novelfind scan ~/Pictures --since 2026-01-01 --xmp --ignore-picks
      novelfind ignore --list
      novelfind failures
      novelfind cache info
    """


# --- scan ----------------------------------------------------------------------------------------


# The sections of ``novelfind scan --help``, everyday ones first: (key in params.param's ``group``, title).
OPTION_GROUPS = (
    ("input", "Input"),
    ("ranking", "Ranking"),
    ("outputs", "Outputs"),
    ("workflow", "Photo workflow (XMP sidecars, ignore list)"),
    ("cache", "Cache"),
    ("performance", "Performance"),
    ("cluster", "Cluster (pip install 'novelfind[ray]')"),
    ("solver", f"Solver tuning (--method {' and '.join(SOLVER_METHODS)})"),
)


def _parameter_option(name: str, dest: str | None = None) -> tuple[list[str], dict[str, Any]]:
    """The option of one parameter (:mod:`novelfind.params`), as Click's declarations and keywords: its
    flags and help, a Click type from its limit or choices (so ``--help`` shows them), the library's
    default and the environment variable NOVELFIND_<NAME>. ``scan`` has one for each parameter; the
    ``ignore`` and ``cache`` commands take theirs of ``--ignore-file`` and ``--cache`` (as ``dest``)."""
    f = FIELDS[name]
    meta = f.metadata
    kwargs: dict[str, Any] = {"default": DEFAULTS[f.name], "envvar": _env(f.name), "help": meta["help"]}
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


FIELDS = {f.name: f for f in params.FIELDS}
# -q of the commands that print progress or notes (not a parameter: the library prints nothing)
QUIET = (
    ["-q", "--quiet"],
    {
        "is_flag": True,
        "default": False,
        "envvar": _env("quiet"),
        "help": "Print nothing on stderr but errors and unreadable files.",
    },
)


def parameter_option(name: str, dest: str | None = None) -> Callable:
    """The option of a parameter as a decorator, for the commands other than ``scan``."""
    decls, kwargs = _parameter_option(name, dest)
    return click.option(*decls, cls=SourcedOption, **kwargs)


def _flag(name: str, value: Any = True) -> str:
    """A parameter as the command line spells it: ``--xmp``, ``--engine ray``."""
    flag = "--" + name.replace("_", "-")
    return flag if value is True else f"{flag} {value}"


def _scan_options() -> list[click.Parameter]:
    """The options of ``scan`` in their ``--help`` sections (``OPTION_GROUPS``): one per parameter in the
    parameters' order, ``--config`` first in Input, ``--no-cache`` after the cache's, ``-q`` in Outputs."""
    groups = {key: cloup.OptionGroup(title) for key, title in OPTION_GROUPS}
    config = cloup.Option(
        ["--config"],
        type=click.Path(dir_okay=False, path_type=Path),
        is_eager=True,
        expose_value=False,
        callback=_load_config,
        envvar="NOVELFIND_CONFIG",
        help="TOML file of defaults for these options (keys: the long option names).",
        group=groups["input"],
    )
    options: list[click.Parameter] = [config]
    for f in params.FIELDS:
        if f.metadata["help"] is not None:
            decls, kwargs = _parameter_option(f.name)
            options.append(SourcedOption(decls, group=groups[f.metadata["group"]], **kwargs))
        if f.name == "cache_dtype":
            options.append(
                SourcedOption(
                    ["--no-cache"],
                    is_flag=True,
                    default=False,
                    envvar=_env("no_cache"),
                    help="Neither read nor write the feature cache (wins over a cache set in the "
                    "environment or a config file).",
                    group=groups["cache"],
                )
            )
    options.append(cloup.Option(QUIET[0], group=groups["outputs"], **QUIET[1]))
    # cloup lists the sections in the order their first option comes: the parameters' order, by section
    position = {id(group): n for n, group in enumerate(groups.values())}
    return sorted(options, key=lambda option: position[id(option.group)])


@cli.command(cls=NovelfindCommand, epilog=EXIT_CODES_HELP, params=_scan_options(), align_option_groups=True)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def scan(paths: tuple[Path, ...], no_cache: bool, quiet: bool, **options: Any) -> int:
    """Rank the most novel photos under PATHS.

    \b
    Examples:
      novelfind scan ~/Pictures --k 100
      novelfind scan /srv/photos --k 50 --format json -o novel.json -q
      novelfind scan ~/Pictures --k 20 --copy-to ~/novel --link symlink
      novelfind scan ~/Pictures --since 2026-01-01 --report new.html
      novelfind scan ~/Pictures --k 20 --xmp --xmp-keyword 'novelfind|novel' --ignore-picks
      novelfind scan /mnt/archive --engine ray --ray-address head-node:6379 -o novel.tsv
    """
    ctx = click.get_current_context()
    if no_cache:
        from_command_line = ctx.get_parameter_source("cache") == click.core.ParameterSource.COMMANDLINE
        if options["cache"] is not None and from_command_line:
            raise InputError("--cache and --no-cache contradict each other")
        options["cache"] = False
    elif options["cache"] is None:
        options["cache"] = True
    for name in params.conditional() & options.keys():
        # from the environment or a config file it is a standing setting, for the runs it applies to
        # (epochs = 50 for the ads runs); from the command line the library refuses it where it takes
        # no effect
        from_command_line = ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE
        if not from_command_line and params.ignored(name, options.__getitem__) is not None:
            options[name] = params.DEFAULTS[name]
    console = Console(quiet)
    listed_before = picks_listed(options["output"], options["format"])
    engine_output = _engine_output(quiet) if ENGINES[options["engine"]].remote else nullcontext()
    with engine_output, console.progress_bars() as on_progress, _sigterm_interrupts():
        try:
            result = run.scan(
                paths,
                **options,
                on_progress=on_progress,
                on_warning=console.warn,
                on_failure=console.unreadable,
            )
        except NeedsError as err:  # said in the command line's words
            raise InputError(err.said(_flag, _flag)) from None
        except ParameterError as err:  # a value the user did not type: where it came from
            where = value_source(ctx, next(p for p in ctx.command.params if p.name == err.name))
            if where is None:
                raise
            raise InputError(f"Invalid value for {where[0]}: {err}") from None
        except KeyboardInterrupt:
            raise Interrupted("interrupted; finished batches are kept in the cache") from None
    counts, k = result.counts, result.parameters.k
    for notice in result.notices:
        console.note(notice)
    if result.outputs_kept:
        pass  # said in the notices
    elif counts.candidates == 0:
        if options["since"] is not None:
            console.note(
                f"no photos taken since {options['since']:%Y-%m-%d %H:%M:%S} that are not "
                "ignored; nothing to rank"
            )
        else:
            console.note(f"all {plural(counts.ignored, 'photo')} are on the ignore list; nothing to rank "
                         "(--include-ignored shows them)")
    elif k > counts.candidates:
        console.note(f"--k {k} is more than the {plural(counts.candidates, 'photo')} to rank; ranking all "
                     "of them")
    if result.parameters.output is None:
        _write_stdout(encode_output(result.to_text()))
    elif not result.picks and not result.outputs_kept and listed_before:
        # shown even with -q: a list someone may rely on was emptied (once: the next run empties nothing)
        console.problem_note(
            f"{result.parameters.output} now lists no picks (it listed {plural(listed_before, 'pick')}): "
            + _why_no_picks(result)
        )
    found = plural(counts.photos - counts.clips, "photo")
    if counts.clips:
        found += f" and {plural(counts.clips, 'clip')}"
    summary = (f"{found} ({plural(counts.found, 'file')}) found, "
               f"{counts.from_cache} read from cache, "
               f"{counts.extracted} extracted, {counts.failed - counts.known_failed} failed")
    if counts.known_failed:
        summary += f", {counts.known_failed} known unreadable (novelfind failures)"
    if counts.ignored:
        summary += f", {counts.ignored} ignored"
    if counts.newly_ignored:
        summary += f", {plural(counts.newly_ignored, 'pick')} added to the ignore list"
    console.info(f"{summary}, {result.seconds:.1f} s")
    sidecars = result.sidecars
    if sidecars is not None:
        tagged, created = sidecars.count("created", "updated"), sidecars.count("created")
        untagged, deleted = sidecars.count("removed", "deleted"), sidecars.count("deleted")
        console.info(
            f"XMP sidecars: {tagged} tagged ({created} created), {untagged} untagged "
            f"({deleted} deleted), {len(sidecars.problems)} not written"
        )
        if console.quiet:  # problems went to on_warning, which -q silences; a lost tag must still show
            for path, reason in sidecars.problems:
                console.problem(f"XMP sidecar {path}: {reason}")
    new_failures = len(result.failures) > len(result.known_failures)
    partial = new_failures or (sidecars is not None and sidecars.problems)
    return int(ExitCode.PARTIAL if partial else ExitCode.OK)


def picks_listed(output: Path | None, fmt: str) -> int:
    """How many picks the results file ``output`` lists now (0 when there is none, or it cannot be read):
    a run that would empty a list someone relies on says so."""
    if output is None:
        return 0
    try:
        text = Path(output).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 0
    if fmt == "json":
        try:
            return len(json.loads(text).get("picks", []))
        except (ValueError, AttributeError):
            return 0
    if fmt == "jsonl":
        return text.count('"type": "pick"') + text.count('"type":"pick"')
    if fmt.endswith("0"):
        return text.count("\0")
    lines = [line for line in text.splitlines() if line.strip()]
    return max(len(lines) - (fmt == "csv"), 0)


def _why_no_picks(result: run.ScanResult) -> str:
    """Why a run picked nothing, in a few words, for the note of an emptied list."""
    p, counts = result.parameters, result.counts
    if counts.candidates == 0 and p.since is not None:
        return f"no photo modified since {p.since:%Y-%m-%d %H:%M:%S} to rank"
    if counts.candidates == 0:
        return "every photo is on the ignore list"
    if p.min_score is not None:
        return f"no photo scored at least --min-score {p.min_score:g}"
    return "nothing to rank"


@contextmanager
def _engine_output(quiet: bool) -> Iterator[None]:
    """While an engine with machinery of its own runs (Ray: a core worker in this process, printing to
    the process's descriptors, and processes that inherit them): what it writes to stdout goes to stderr,
    since stdout carries results only, and with -q what it writes to either is dropped. novelfind's own
    messages keep going to the real stderr."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        out_fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # not real files (output captured by a caller)
        with redirect_stdout(sys.stderr):
            yield
        return
    saved_out, saved_err = os.dup(out_fd), os.dup(err_fd)
    previous = sys.stdout, sys.stderr
    sink = open(os.devnull, "w") if quiet else None
    try:
        if sink is None:
            os.dup2(err_fd, out_fd)
            sys.stdout = sys.stderr
        else:
            # novelfind writes to a new stream on the real stderr; the descriptors go nowhere. That stream
            # stays open: Ray's log handlers may hold it until the process ends.
            sys.stderr = open(
                os.dup(saved_err), "w", encoding=previous[1].encoding, errors="backslashreplace", buffering=1
            )
            sys.stdout = sink
            os.dup2(sink.fileno(), out_fd)
            os.dup2(sink.fileno(), err_fd)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = previous
        os.dup2(saved_out, out_fd)
        os.dup2(saved_err, err_fd)
        os.close(saved_out)
        os.close(saved_err)
        if sink is not None:
            sink.close()


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops a scan like Ctrl-C: finished batches stay in the cache, exit code 130."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Console:
    """stderr messages; -q leaves only errors and unreadable files."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def unreadable(self, path: Path, reason: str) -> None:
        """A file that could not be read: always reported, once."""
        _stderr(f"warning: cannot read {path}: {reason}")

    def problem(self, message: str) -> None:
        """A warning shown even with -q (something the run was asked to write was not written)."""
        _stderr(f"warning: {message}")

    def problem_note(self, message: str) -> None:
        """A note shown even with -q: the run changed something the user relies on (a list emptied)."""
        _stderr(f"note: {message}")

    def warn(self, message: str) -> None:
        if not self.quiet:
            _stderr(f"warning: {message}")

    def note(self, message: str) -> None:
        if not self.quiet:
            _stderr(f"note: {message}")

    def info(self, message: str) -> None:
        if not self.quiet:
            _stderr(message)

    @contextmanager
    def progress_bars(self) -> Iterator[Any]:
        """An ``on_progress`` callback: tqdm bars on stderr for a person watching (not with -q, not
        into a file or pipe), and the note that the run waits for another one."""
        bars = ProgressBars(enabled=not self.quiet and sys.stderr.isatty(), console=self)
        try:
            yield bars
        finally:
            bars.close()


class ProgressBars:
    """Turns :class:`novelfind.run.Progress` events into tqdm bars on stderr, one per stage."""

    LABELS = {"walk": "walking", "extract": "extracting", "dates": "reading dates", "report": "report"}

    def __init__(self, *, enabled: bool, console: Console) -> None:
        self.enabled = enabled
        self.console = console
        self.bar: Any = None
        self.stage: str | None = None

    def __call__(self, event: run.Progress) -> None:
        if event.stage == "wait":
            self.console.note(f"waiting for another novelfind run writing {event.path}")
            return
        if not self.enabled or event.stage not in self.LABELS:
            return
        if event.stage != self.stage:
            self.close()
            from tqdm import tqdm

            self.bar = tqdm(
                total=event.total,
                unit="img",
                desc=self.LABELS[event.stage],
                file=sys.stderr,
                dynamic_ncols=True,
                leave=False,
            )
            self.stage = event.stage
        self.bar.update(event.done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar, self.stage = None, None


def _write_stdout(data: bytes) -> None:
    """Results to stdout. A reader that stops early (``| head``) is not an error: the rest is dropped."""
    if sys.stdout is None:  # started with stdout closed
        return
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        os.close(devnull)


# --- ignore --------------------------------------------------------------------------------------


@cli.command("ignore", epilog=IGNORE_EXIT_CODES_HELP)
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--list",
    "show",
    is_flag=True,
    help="Print the list: when each photo was added, and where it was last seen.",
)
@click.option(
    "--remove", is_flag=True, help="Take PATHS off the list (a folder: every photo last seen under it)."
)
@click.option("--clear", is_flag=True, help="Empty the list.")
@parameter_option("ignore_file")
@click.option(*QUIET[0], **QUIET[1])
def ignore(paths: tuple[Path, ...], show: bool, remove: bool, clear: bool, ignore_file: Path | None,
           quiet: bool) -> int:
    """Keep photos out of the picks of later scans (PATHS: photos or folders), or take them back.

    Ignored photos are known by their content (moved or renamed, they stay ignored) and are never
    picked, but still count as part of the library. A file that cannot be read as a photo (a truncated
    JPEG) is silenced this way: scans skip it without a word. The list is user data: `cache clear`
    leaves it.

    \b
    Examples:
      novelfind ignore ~/Pictures/2019/IMG_4411.jpg ~/Pictures/screenshots
      novelfind ignore --list
      novelfind ignore --remove ~/Pictures/2019/IMG_4411.jpg
      novelfind ignore --clear
    """
    modes = [name for name, on in (("--list", show), ("--remove", remove), ("--clear", clear)) if on]
    if len(modes) > 1:
        raise click.UsageError(f"{modes[0]} and {modes[1]} cannot be used together")
    if (show or clear) and paths:
        raise click.UsageError(f"{modes[0]} takes no PATHS")
    if not (show or clear) and not paths:
        raise click.UsageError("give PATHS to ignore (or to --remove), or use --list or --clear")
    console = Console(quiet)
    if ignore_file is None:
        configured = configured_value(scan, "ignore_file")
        ignore_file = Path(configured) if configured is not None else None
    ignored = IgnoreList(ignore_file)
    if show:
        # both fields escaped: the list is a file someone may have edited (an ESC or a newline in
        # ``added`` would forge a line or speak to the terminal)
        lines = [
            f"{escape_field(entry.added)}\t{escape_field(str(entry.path))}\n" for entry in ignored.entries()
        ]
        _write_stdout(encode_output("".join(lines)))
        return int(ExitCode.OK)
    if clear:
        click.echo(f"cleared\t{ignored.clear()}")
        return int(ExitCode.OK)
    if remove:
        change = ignored.remove(paths)
        click.echo(f"removed\t{len(change.changed)}")
        for path in change.unchanged:
            console.note(f"not on the ignore list: {path}")
    else:
        change = ignored.add(paths)
        click.echo(f"added\t{count_photos(entry.path for entry in change.changed)}")
        if change.unchanged:
            console.note(f"{count_photos(change.unchanged)} already on the ignore list")
        for path in change.not_photos:
            console.problem(f"not added: {path} is not a photo novelfind reads")
        for path, reason in change.by_stat:
            console.note(f"{path} cannot be read ({reason}): ignored by its path, size and time, until it "
                         "changes or moves")
    for path, reason in change.failures:
        console.unreadable(path, reason)
    partial = change.failures or change.not_photos
    return int(ExitCode.PARTIAL if partial else ExitCode.OK)


# --- cache ---------------------------------------------------------------------------------------

cache_option = parameter_option("cache", dest="cache_path")

FAILURES_EXIT_CODES_HELP = """\b
Exit codes:
  0    done
  1    no cache there, or it cannot be read or written
  2    usage: PATHS without --forget
"""


@cli.command("failures", epilog=FAILURES_EXIT_CODES_HELP)
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--forget",
    is_flag=True,
    help="Forget the unreadable files (PATHS: those files or the files under those folders; none: all), "
    "so that the next scan tries them again and reports each one that still fails.",
)
@cache_option
def failures_command(paths: tuple[Path, ...], forget: bool, cache_path: Path | None) -> int:
    """List the files scans could not read, or forget them.

    A scan reports an unreadable file once: later scans that meet it unchanged (same size and
    modification time) count it as "known unreadable" in their summary, print nothing about it and
    exit 0. A file that changes is tried again. This lists them (when first reported, path, reason);
    `--forget` makes the next scan report them again. `novelfind ignore FILE` silences one for good.

    \b
    Examples:
      novelfind failures
      novelfind failures --forget
      novelfind failures --forget ~/Pictures/2019/broken.jpg
      novelfind ignore ~/Pictures/2019/broken.jpg
    """
    if paths and not forget:
        raise click.UsageError("PATHS are for --forget (the list shows every unreadable file)")
    with _existing_cache(cache_path) as store:
        known = store.known_failures()
        if forget:
            targets = None
            if paths:
                roots = [os.fsencode(p.expanduser().absolute()) for p in paths]
                targets = [
                    k for k in known if any(k == r or k.startswith(r.rstrip(b"/") + b"/") for r in roots)
                ]
            click.echo(f"forgotten\t{store.forget_failures(targets)}")
            return int(ExitCode.OK)
    rows = sorted(known.values(), key=lambda f: (f.first_seen, f.path))
    lines = [f"{f.first_seen}\t{escape_field(os.fsdecode(f.path))}\t{escape_field(f.reason)}\n" for f in rows]
    _write_stdout(encode_output("".join(lines)))
    return int(ExitCode.OK)


CACHE_EXIT_CODES_HELP = """\b
Exit codes:
  0    done (prune and clear: also when the cache was damaged; a warning says what they did)
  1    no cache there, it cannot be read or written, (info) it is damaged, or (prune and
       clear) the file is not a novelfind cache: it is left as it is
"""


@cli.group(epilog=CACHE_EXIT_CODES_HELP)
def cache() -> None:
    """Inspect and tidy the feature cache.

    A damaged cache file is left as it is by `info`, which says so; `prune` moves it aside (it is
    kept as features.sqlite.corrupt-TIME) and `clear` deletes it; both then start a new, empty one.
    Both act only on a file they recognise as a novelfind cache (SQLite's header with novelfind's
    mark); any other file is refused and left as it is.

    \b
    Examples:
      novelfind cache info
      novelfind cache prune --cache /srv/novelfind.sqlite
      novelfind cache clear
    """


def _cache_path(path: Path | None) -> Path:
    """The cache a scan would use: --cache, $NOVELFIND_CACHE, the config file's ``cache``, the default."""
    path = path or configured_cache(scan) or dirs.feature_cache_path()
    return path.expanduser().absolute()


def _existing_cache(path: Path | None) -> FeatureCache:
    """That cache, opened; a damaged file is moved aside (one ``warning:`` line) and a new one started."""
    return FeatureCache.open(_cache_path(path), create=False, on_warning=Console(False).problem)


def _refuse_foreign(path: Path) -> None:
    """CacheError, before anything changes, when a file at ``path`` is not a novelfind cache: `prune` and
    `clear` move aside or delete only files they recognise (``--cache thesis.txt`` by mistake)."""
    if not os.path.lexists(path):
        return
    reason = not_ours(path)
    if reason is not None:
        raise CacheError(f"{path} is not a novelfind cache ({reason}); left as it is")


@cache.command("info")
@cache_option
def cache_info(cache_path: Path | None) -> int:
    """Show entries, size and models of the cache.

    \b
    Example:
      novelfind cache info --cache ~/.cache/novelfind/features.sqlite
    """
    path = _cache_path(cache_path)
    reason = damage(path)
    if reason is not None:  # info changes nothing, not even a damaged file
        click.echo(f"path\t{escape_field(str(path))}")
        click.echo("damaged\tyes")
        Console(False).problem(
            f"the feature cache {path} is damaged ({reason}); left as it is: `novelfind cache clear` "
            "deletes it and starts a new one (the next scan moves it aside and starts a new one)"
        )
        return int(ExitCode.ERROR)
    current, former = weights.model_key_for(), weights.former_keys()
    with _existing_cache(path) as store:
        info = store.info()
        models = sorted(info["models"].items())
        usable = (current, *former.same)
        # vectors this version's model made under another layout or preprocessing: not read, only replaced
        stale = {key: store.photos_without(key, usable) for key, _ in models
                 if weights.same_weights(key) and key not in usable}
    click.echo(f"path\t{escape_field(str(info['path']))}")
    click.echo(f"vectors\t{info['entries']}\tfeature vectors stored, one per distinct photo content and "
               "model")
    click.echo(f"files\t{info['files']}\tfile paths known, with size and time (copies of a photo share "
               "a vector)")
    click.echo(f"unreadable\t{info.get('failures', 0)}\tfiles scans could not read (novelfind failures)")
    click.echo(f"size\t{human_size(info['size_bytes'])}\t{info['size_bytes']} bytes on disk")
    for key, count in models:  # a key is text anyone who can write the cache may have written
        click.echo(f"model\t{escape_field(key)}\t{count}")
    for key, count in models:
        if key in former.same:
            click.echo(f"upgrade\t{escape_field(key)}\t{count}\tthe next scan renames these in place; "
                       "nothing is read again")
        elif key in stale:
            click.echo(f"stale\t{escape_field(key)}\t{count}\tthis version cannot use them; "
                       f"{plural(stale[key], 'photo')} to extract again")
    again = sum(stale.values())
    if again:
        Console(False).note(
            f"{plural(again, 'photo')} in this cache {'has' if again == 1 else 'have'} only vectors an "
            "earlier version made, which this one cannot use: the next scan of their library extracts them "
            "again (about as long as a first scan) and drops the old entries"
        )
    return 0


@cache.command("prune")
@cache_option
def cache_prune(cache_path: Path | None) -> int:
    """Drop entries whose files no longer exist.

    \b
    Example:
      novelfind cache prune
    """
    _refuse_foreign(_cache_path(cache_path))
    with _existing_cache(cache_path) as store:
        dropped = store.prune()
    click.echo(f"pruned\t{dropped}")
    return 0


@cache.command("clear")
@cache_option
def cache_clear(cache_path: Path | None) -> int:
    """Delete every entry in the cache.

    \b
    Example:
      novelfind cache clear
    """
    path = _cache_path(cache_path)
    _refuse_foreign(path)
    # a schema novelfind did not make (a planted trigger) is damage here: the file is not opened for use
    foreign = foreign_schema(path)
    reason = damage(path) or (f"it holds {foreign} that novelfind did not create" if foreign else None)
    if reason is not None:  # nothing in it is worth keeping: delete it rather than move it aside
        remove_damaged(path)
        Console(False).problem(f"the feature cache {path} was damaged ({reason}); deleted it")
        with FeatureCache.open(path):  # a new, empty one in its place
            pass
        click.echo("cleared")
        return 0
    with _existing_cache(path) as store:
        store.clear()
    click.echo("cleared")
    return 0


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name="novelfind")
