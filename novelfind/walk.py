"""Walk folders and list the image files in them, in a stable order.

The walk streams: it lists one directory at a time (sorted by name), descends depth first and
yields an ``ImageFile`` per image as soon as it is seen. It never opens a file; whether a file
really is an image is decided later, by the decoder.

What it offers (``WALKED_EXTENSIONS``): every format the decoder reads (``decode.IMAGE_EXTENSIONS``),
and the camera RAW formats (``raw.RAW_EXTENSIONS``) whether or not RAW support is installed. A RAW file
next to its JPEG is a file of that photo (``pairs``): copied and tagged along with it even where
LibRaw is missing. A RAW file with no twin is only read when it is installed; the scan leaves the others
out (``run.py``), with one warning that says how many and how to read them.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from novelfind.decode import IMAGE_EXTENSIONS
from novelfind.errors import InputError
from novelfind.raw import RAW_EXTENSIONS

OnError = Callable[[Path, str], None]


@dataclass(frozen=True)
class ImageFile:
    """One image file found by the walk."""

    path: Path  # absolute, symlinks in it kept as found (Path.absolute(), not resolve())
    size: int  # st_size in bytes
    mtime_ns: int  # st_mtime_ns


WALKED_EXTENSIONS: frozenset[str] = IMAGE_EXTENSIONS | RAW_EXTENSIONS


def is_image_name(name: str) -> bool:
    """True when ``name`` has an extension the walk offers (``WALKED_EXTENSIONS``), any case."""
    return os.path.splitext(name)[1].lower() in WALKED_EXTENSIONS


class _Excluder:
    """``--exclude`` globs, matched like shell patterns (case-sensitive, ``*`` also crosses ``/``).

    A pattern is tried against the entry's name, its path relative to its root (with ``/``) and its
    absolute path; directories are also tried with a trailing ``/``, so ``thumbs/`` names a folder.
    A leading ``**/`` also matches at the root: ``**/thumbs/**`` excludes ``thumbs/`` and ``a/thumbs/``.
    An excluded folder is not entered.
    """

    def __init__(self, patterns: Iterable[str]):
        regexes = []
        for pattern in patterns:
            if not pattern:
                continue
            regexes.append(fnmatch.translate(pattern))
            if pattern.startswith("**/") and len(pattern) > 3:
                regexes.append(fnmatch.translate(pattern[3:]))
        self._regex = re.compile("|".join(f"(?:{r})" for r in regexes)) if regexes else None

    def __bool__(self) -> bool:
        return self._regex is not None

    def excluded(self, name: str, rel: str, absolute: str, is_dir: bool) -> bool:
        if self._regex is None:
            return False
        match = self._regex.match
        candidates = (name, rel, absolute)
        if is_dir:
            candidates += (name + "/", rel + "/", absolute + "/")
        return any(match(c) for c in candidates)


def _reason(err: OSError) -> str:
    return err.strerror or str(err)


def _check_root(root: str | os.PathLike[str]) -> tuple[Path, os.stat_result]:
    path = Path(os.fspath(root)).absolute()
    try:
        st = path.stat()  # a root named on the command line is followed even when it is a symlink
    except FileNotFoundError:
        raise InputError(f"no such folder: {path}") from None
    except NotADirectoryError:
        raise InputError(f"no such folder: {path}") from None
    except OSError as err:
        raise InputError(f"cannot open {path}: {_reason(err)}") from None
    if stat.S_ISDIR(st.st_mode):
        return path, st
    if stat.S_ISREG(st.st_mode) and is_image_name(path.name):
        return path, st
    raise InputError(f"not a folder or image: {path}")


def walk(
    roots: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    exclude: Iterable[str] = (),
    follow_symlinks: bool = False,
    on_error: OnError | None = None,
) -> Iterator[ImageFile]:
    """Yield the image files under ``roots``, depth first, sorted by name within each folder.

    ``roots`` is one folder or several (an image file is accepted as a root too, and yielded as is).
    Every root is checked before this returns: a missing one raises ``InputError("no such folder:
    PATH")``, one that is neither a folder nor an image ``InputError("not a folder or image: PATH")``.

    Hidden (dot) files and folders are skipped, except a root itself. ``exclude`` globs drop files
    and prune folders (see ``_Excluder``). Symbolic links are skipped unless ``follow_symlinks``;
    a folder is entered at most once (tracked by ``(st_dev, st_ino)``), so link loops end and a
    file reached through two roots, links or hard links is yielded once, the first time.

    A folder that cannot be listed (also one removed since its parent was listed) or an entry that
    cannot be inspected is passed to ``on_error(path, reason)`` and skipped; files that vanish
    during the walk are skipped silently. Files are never opened here: an unreadable file is the
    decoder's to report.
    """
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    checked = [_check_root(root) for root in roots]
    return _walk(checked, _Excluder(exclude), follow_symlinks, on_error)


def _walk(
    roots: list[tuple[Path, os.stat_result]],
    excluder: _Excluder,
    follow_symlinks: bool,
    on_error: OnError | None,
) -> Iterator[ImageFile]:
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[tuple[int, int]] = set()

    def report(path: str, reason: str) -> None:
        if on_error is not None:
            on_error(Path(path), reason)

    def listing(folder: str, rel: str) -> Iterator[tuple[os.DirEntry[str], str]] | None:
        """The folder's entries sorted by name, with their root-relative paths; None if unlistable."""
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            report(folder, "folder removed during the walk")  # since its parent was listed
            return None
        except OSError as err:
            report(folder, _reason(err))
            return None
        return ((e, f"{rel}/{e.name}" if rel else e.name) for e in entries)

    for root, root_st in roots:
        key = (root_st.st_dev, root_st.st_ino)
        if not stat.S_ISDIR(root_st.st_mode):
            if key not in seen_files:
                seen_files.add(key)
                yield ImageFile(root, root_st.st_size, root_st.st_mtime_ns)
            continue
        if key in seen_dirs:
            continue
        seen_dirs.add(key)
        top = listing(str(root), "")
        # Depth first over an explicit stack of open folder listings: a subfolder is walked where
        # its name sorts among the files, and deep trees cannot hit the recursion limit.
        stack = [top] if top is not None else []
        while stack:
            item = next(stack[-1], None)
            if item is None:
                stack.pop()
                continue
            entry, rel = item
            name = entry.name
            if name.startswith("."):
                continue
            is_link = is_dir = False
            try:
                is_link = entry.is_symlink()
                if is_link and not follow_symlinks:
                    continue
                is_dir = entry.is_dir()  # follows a link (only reached when following links)
                if not is_dir and not is_image_name(name):
                    continue
                if excluder and excluder.excluded(name, rel, entry.path, is_dir):
                    continue
                st = entry.stat()
            except FileNotFoundError:  # a broken link, or deleted since the folder was listed
                if is_link:
                    report(entry.path, "broken symbolic link")
                elif is_dir:
                    report(entry.path, "folder removed during the walk")
                continue
            except OSError as err:
                report(entry.path, _reason(err))
                continue
            key = (st.st_dev, st.st_ino)
            if stat.S_ISDIR(st.st_mode):
                if key not in seen_dirs:  # a link loop, or a folder already walked from another root
                    seen_dirs.add(key)
                    sub = listing(entry.path, rel)
                    if sub is not None:
                        stack.append(sub)
            elif stat.S_ISREG(st.st_mode) and key not in seen_files:
                seen_files.add(key)
                yield ImageFile(Path(entry.path), st.st_size, st.st_mtime_ns)
