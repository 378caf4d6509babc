"""``novelfind cache``: inspect and tidy the feature cache (info, prune, clear).

Each subcommand acts on the cache a scan would use (``--cache``, ``NOVELFIND_CACHE``, the config file's
``cache``, the default), and only on a file it recognises as a novelfind cache. Beside it, the report's
thumbnails (``thumbnails.sqlite``, :class:`novelfind.outputs.thumbnails.ThumbnailCache`): ``info`` shows
their size, ``clear`` deletes them.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import click

from novelfind.base import dirs
from novelfind.cache import FeatureCache, damage, foreign_schema, guard, not_ours, remove_damaged
from novelfind.cli.base import parameter_option
from novelfind.cli.console import Console, human_size, plural
from novelfind.cli.scan import scan
from novelfind.config import configured_cache
from novelfind.errors import CacheError, ExitCode
from novelfind.model import weights
from novelfind.outputs.formats import escape_field
from novelfind.outputs.write import thumbnail_cache_path

# `--cache` of the cache subcommands and `failures`: the file a scan would use, as `cache_path`
cache_option = parameter_option("cache", dest="cache_path")

CACHE_EXIT_CODES_HELP = """\b
Exit codes:
  0    done (prune and clear: also when the cache was damaged; a warning says what they did)
  1    no cache there, it cannot be read or written, (info) it is damaged, or (prune and
       clear) the file is not a novelfind cache: it is left as it is
"""


@click.group(epilog=CACHE_EXIT_CODES_HELP)
def cache() -> None:
    """Inspect and tidy the feature cache.

    `info` also shows the size of the report's thumbnails kept beside it (thumbnails.sqlite), and
    `clear` deletes them. A damaged cache file is left as it is by `info`, which says so; `prune`
    moves it aside (it is kept as features.sqlite.corrupt-TIME) and `clear` deletes it; both then
    start a new, empty one.
    Both act only on a file they recognise as a novelfind cache (SQLite's header with novelfind's
    mark); any other file is refused and left as it is.

    \b
    Examples:
      novelfind cache info
      novelfind cache prune --cache /srv/novelfind.sqlite
      novelfind cache clear
    """


def chosen_cache_path(path: Path | None) -> Path:
    """The cache a scan would use: --cache, $NOVELFIND_CACHE, the config file's ``cache``, the default."""
    path = path or configured_cache(scan) or dirs.feature_cache_path()
    return path.expanduser().absolute()


def existing_cache(path: Path | None) -> FeatureCache:
    """That cache, opened; a damaged file is moved aside (one ``warning:`` line) and a new one started."""
    return FeatureCache.open(chosen_cache_path(path), create=False, on_warning=Console(False).problem)


def refuse_foreign(path: Path) -> None:
    """CacheError, before anything changes, when a file at ``path`` is not a novelfind cache: `prune` and
    `clear` move aside or delete only files they recognise (``--cache thesis.txt`` by mistake)."""
    if not os.path.lexists(path):
        return
    refused = guard.refusal(path, "the feature cache")  # where it lies, what it is, whose it is
    if refused is not None:
        raise CacheError(refused)
    reason = not_ours(path)
    if reason is not None:
        raise CacheError(f"{path} is not a novelfind cache ({reason}); left as it is")


def thumbnails_of(path: Path) -> tuple[Path, int]:
    """The report's thumbnail cache beside the feature cache ``path``, and its bytes on disk (with its
    journal files; 0 when there is none)."""
    thumbs = thumbnail_cache_path(path)
    total = 0
    for name in (thumbs, *(thumbs.with_name(thumbs.name + end) for end in _JOURNALS)):
        try:
            st = os.lstat(name)
        except OSError:
            continue
        total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return thumbs, total


_JOURNALS = ("-wal", "-shm", "-journal")  # SQLite's files beside a database


def is_thumbnail_cache(path: Path) -> bool:
    """Whether ``path`` is a regular file (not a link) holding SQLite's ``thumbs`` table, as
    ``ThumbnailCache`` makes it: only such a file is deleted by `clear`."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        conn = guard.open_store(path, what="the thumbnail cache", read_only=True, follow_link=False)
    except (OSError, sqlite3.Error, ValueError, CacheError):
        return False
    try:
        row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'thumbs'").fetchone()
        return row is not None
    except sqlite3.Error:
        return False
    finally:
        conn.close()


def clear_thumbnails(path: Path) -> None:
    """Delete the report's thumbnails beside the feature cache ``path`` (the next report makes them again);
    a file of that name that is not novelfind's thumbnail cache is left as it is, with a warning."""
    thumbs = thumbnail_cache_path(path)
    if not os.path.lexists(thumbs):
        return
    if not is_thumbnail_cache(thumbs):
        Console(False).problem(f"{thumbs} is not novelfind's thumbnail cache; left as it is")
        return
    for name in (thumbs, *(thumbs.with_name(thumbs.name + end) for end in _JOURNALS)):
        try:
            os.unlink(name)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise CacheError(f"cannot delete the report's thumbnails {name}: {e.strerror or e}") from None


@cache.command("info")
@cache_option
def cache_info(cache_path: Path | None) -> int:
    """Show entries, size and models of the cache.

    \b
    Example:
      novelfind cache info --cache ~/.cache/novelfind/features.sqlite
    """
    path = chosen_cache_path(cache_path)
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
    with existing_cache(path) as store:
        info = store.info()
        models = sorted(info["models"].items())
        usable = (current, *former.same)
        # vectors this version's model made under another layout or preprocessing: not read, only replaced
        stale = {
            key: store.photos_without(key, usable)
            for key, _ in models
            if weights.same_weights(key) and key not in usable
        }
    click.echo(f"path\t{escape_field(str(info['path']))}")
    click.echo(
        f"vectors\t{info['entries']}\tfeature vectors stored, one per distinct photo content and model"
    )
    click.echo(
        f"files\t{info['files']}\tfile paths known, with size and time (copies of a photo share a vector)"
    )
    click.echo(f"unreadable\t{info.get('failures', 0)}\tfiles scans could not read (novelfind failures)")
    click.echo(f"size\t{human_size(info['size_bytes'])}\t{info['size_bytes']} bytes on disk")
    thumbs, thumb_bytes = thumbnails_of(path)
    click.echo(
        f"thumbnails\t{human_size(thumb_bytes)}\t{thumb_bytes} bytes on disk: the report's thumbnails, "
        f"{escape_field(str(thumbs))}"
    )
    for key, count in models:  # a key is text anyone who can write the cache may have written
        click.echo(f"model\t{escape_field(key)}\t{count}")
    for key, count in models:
        if key in former.same:
            click.echo(
                f"upgrade\t{escape_field(key)}\t{count}\tthe next scan renames these in place; "
                "nothing is read again"
            )
        elif key in stale:
            click.echo(
                f"stale\t{escape_field(key)}\t{count}\tthis version cannot use them; "
                f"{plural(stale[key], 'photo')} to extract again"
            )
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
    refuse_foreign(chosen_cache_path(cache_path))
    with existing_cache(cache_path) as store:
        dropped = store.prune()
    click.echo(f"pruned\t{dropped}")
    return 0


@cache.command("clear")
@cache_option
def cache_clear(cache_path: Path | None) -> int:
    """Delete every entry in the cache, and the report's thumbnails beside it.

    \b
    Example:
      novelfind cache clear
    """
    path = chosen_cache_path(cache_path)
    refuse_foreign(path)
    # a schema novelfind did not make (a planted trigger) is damage here: the file is not opened for use
    foreign = foreign_schema(path)
    reason = damage(path) or (f"it holds {foreign} that novelfind did not create" if foreign else None)
    if reason is not None:  # nothing in it is worth keeping: delete it rather than move it aside
        remove_damaged(path)
        Console(False).problem(f"the feature cache {path} was damaged ({reason}); deleted it")
        with FeatureCache.open(path):  # a new, empty one in its place
            pass
        clear_thumbnails(path)
        click.echo("cleared")
        return 0
    with existing_cache(path) as store:
        store.clear()
    clear_thumbnails(path)
    click.echo("cleared")
    return 0
