"""``novelfind scan``: its options, made from :mod:`novelfind.params`, and what it prints.

Everything a scan does is :func:`novelfind.run.scan`; the command only gathers its keyword arguments
(command line > environment > config file > defaults), passes progress bars and stderr printing in as
callbacks, and prints the results and the summary.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import click
import cloup

from novelfind import params, run
from novelfind.base import atomic, safe_load
from novelfind.base.atomic import encode_output
from novelfind.cli.base import (
    QUIET,
    NovelfindCommand,
    SourcedOption,
    as_flag,
    env_name,
    load_config,
    parameter_declarations,
    value_source,
)
from novelfind.cli.console import (
    Console,
    plural,
    redirect_engine_output,
    sigterm_interrupts,
    write_stdout,
)
from novelfind.errors import ExitCode, InputError, Interrupted, NeedsError, ParameterError
from novelfind.extract.engines import ENGINES
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
  4    another run holds the lock on the same output (with --no-wait), or the ignore list's
       or the record of tagged sidecars' lock was held for 60 s (the holder is named)
  130  interrupted (Ctrl-C, SIGTERM); finished batches stay in the cache
"""


# The results file an earlier run wrote is read back (to say when a run empties it) up to this size.
LISTED_MAX_BYTES = 64 << 20

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


def _scan_options() -> list[click.Parameter]:
    """The options of ``scan`` in their ``--help`` sections (``OPTION_GROUPS``): one per parameter in the
    parameters' order, ``--config`` first in Input, ``--no-cache`` after the cache's, ``-q`` in Outputs."""
    groups = {key: cloup.OptionGroup(title) for key, title in OPTION_GROUPS}
    config = cloup.Option(
        ["--config"],
        type=click.Path(dir_okay=False, path_type=Path),
        is_eager=True,
        expose_value=False,
        callback=load_config,
        envvar="NOVELFIND_CONFIG",
        help="TOML file of defaults for these options (keys: the long option names).",
        group=groups["input"],
    )
    options: list[click.Parameter] = [config]
    for f in params.FIELDS:
        if f.metadata["help"] is not None:
            decls, kwargs = parameter_declarations(f.name)
            options.append(SourcedOption(decls, group=groups[f.metadata["group"]], **kwargs))
        if f.name == "cache_dtype":
            options.append(
                SourcedOption(
                    ["--no-cache"],
                    is_flag=True,
                    default=False,
                    envvar=env_name("no_cache"),
                    help="Neither read nor write the feature cache (wins over a cache set in the "
                    "environment or a config file).",
                    group=groups["cache"],
                )
            )
    options.append(cloup.Option(QUIET[0], group=groups["outputs"], **QUIET[1]))
    # cloup lists the sections in the order their first option comes: the parameters' order, by section
    position = {id(group): n for n, group in enumerate(groups.values())}
    return sorted(options, key=lambda option: position[id(option.group)])


@click.command(cls=NovelfindCommand, epilog=EXIT_CODES_HELP, params=_scan_options(), align_option_groups=True)
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
    # a method named nowhere is left to the library's default, so that the run can tell a default that
    # changed since the library was last ranked from a method the user asked for (never warned about)
    if ctx.get_parameter_source("method") == click.core.ParameterSource.DEFAULT:
        del options["method"]
    console = Console(quiet)
    listed_before = picks_listed(options["output"], options["format"])
    engine_output = redirect_engine_output(quiet) if ENGINES[options["engine"]].remote else nullcontext()
    with engine_output, console.progress_bars() as on_progress, sigterm_interrupts():
        try:
            result = run.scan(
                paths,
                **options,
                on_progress=on_progress,
                on_warning=console.warn,
                on_failure=console.unreadable,
            )
        except NeedsError as err:  # said in the command line's words
            raise InputError(err.said(as_flag, as_flag)) from None
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
            console.note(
                f"all {plural(counts.ignored, 'photo')} are on the ignore list; nothing to rank "
                "(--include-ignored shows them)"
            )
    elif k > counts.candidates:
        console.note(
            f"--k {k} is more than the {plural(counts.candidates, 'photo')} to rank; ranking all of them"
        )
    if result.parameters.output is None:
        write_stdout(encode_output(result.to_text()))
    elif not result.picks and not result.outputs_kept and listed_before:
        # shown even with -q: a list someone may rely on was emptied (once: the next run empties nothing)
        console.problem_note(
            f"{result.parameters.output} now lists no picks (it listed {plural(listed_before, 'pick')}): "
            + _why_no_picks(result)
        )
    found = plural(counts.photos - counts.clips, "photo")
    if counts.clips:
        found += f" and {plural(counts.clips, 'clip')}"
    summary = (
        f"{found} ({plural(counts.found, 'file')}) found, "
        f"{counts.from_cache} read from cache, "
        f"{counts.extracted} extracted, {counts.failed - counts.known_failed} failed"
    )
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
    a run that would empty a list someone relies on says so. Read as the outputs are written: not through
    a link, not a FIFO or device, at most ``LISTED_MAX_BYTES`` (a larger file counts as none), a JSON
    list with its nesting bounded (``safe_load``)."""
    if output is None:
        return 0
    try:
        # the user's own file, read back without following a link at it (-o refuses one), bounded
        text = atomic.read_limited(output, LISTED_MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return 0
    if fmt == "json":
        try:
            return len(safe_load.load_json(text, max_bytes=LISTED_MAX_BYTES).get("picks", []))
        except (ValueError, AttributeError, TypeError):
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
        return f"no photo taken since {p.since:%Y-%m-%d %H:%M:%S} to rank"
    if counts.candidates == 0:
        return "every photo is on the ignore list"
    if p.min_score is not None:
        return f"no photo scored at least --min-score {p.min_score:g}"
    return "nothing to rank"
