"""``novelfind ignore`` and ``novelfind failures``: the lists a library's scans keep beside the photos.

The ignore list keeps photos out of the picks (:class:`novelfind.media.ignore.IgnoreList`); the
failures are the files scans could not read, kept in the feature cache so each is reported once.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from novelfind.base.atomic import encode_output
from novelfind.cli.base import QUIET, parameter_option
from novelfind.cli.cache import cache_option, existing_cache
from novelfind.cli.console import Console, plural, write_stdout
from novelfind.cli.scan import scan
from novelfind.config import configured_value
from novelfind.errors import ExitCode
from novelfind.media.ignore import IgnoreList, count_photos
from novelfind.outputs.formats import escape_field

IGNORE_EXIT_CODES_HELP = """\b
Exit codes:
  0    done
  1    the ignore list cannot be read (damaged) or written
  2    usage: no PATHS, or PATHS with --list or --clear
  3    done, but some PATHS could not be read or are not photos (each named on stderr, not added)
  4    the ignore list's lock was held by another process for 60 s (named on stderr); nothing written
"""


@click.command("ignore", epilog=IGNORE_EXIT_CODES_HELP)
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
def ignore(
    paths: tuple[Path, ...], show: bool, remove: bool, clear: bool, ignore_file: Path | None, quiet: bool
) -> int:
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
        write_stdout(encode_output("".join(lines)))
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
            already = count_photos(change.unchanged)
            console.note(
                f"{plural(already, 'photo')} {'was' if already == 1 else 'were'} already on the ignore list"
            )
        for path in change.not_photos:
            console.problem(f"not added: {path} is not a photo novelfind reads")
        for path, reason in change.by_stat:
            console.note(
                f"{path} cannot be read ({reason}): ignored by its path, size and time, until it "
                "changes or moves"
            )
    for path, reason in change.failures:
        console.unreadable(path, reason)
    partial = change.failures or change.not_photos
    return int(ExitCode.PARTIAL if partial else ExitCode.OK)


FAILURES_EXIT_CODES_HELP = """\b
Exit codes:
  0    done
  1    no cache there, or it cannot be read or written
  2    usage: PATHS without --forget
"""


@click.command("failures", epilog=FAILURES_EXIT_CODES_HELP)
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
    with existing_cache(cache_path) as store:
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
    # every field escaped: the cache is a file someone may have edited (an ESC or a newline in a field
    # would speak to the terminal or forge a line)
    lines = [
        f"{escape_field(f.first_seen)}\t{escape_field(os.fsdecode(f.path))}\t{escape_field(f.reason)}\n"
        for f in rows
    ]
    write_stdout(encode_output("".join(lines)))
    return int(ExitCode.OK)
