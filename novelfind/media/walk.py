"""Walk folders and list the image files in them, in a stable order.

The walk streams: it lists one directory at a time (sorted by name), descends depth first and
yields an ``ImageFile`` per image as soon as it is seen. It never opens a file; whether a file
really is an image is decided later, by the decoder.

What it offers (``WALKED_EXTENSIONS``): what each kind of :mod:`novelfind.media.kinds` offers in this
installation (``kinds.offered_extensions``): every photo format the decoder reads
(``decode.IMAGE_EXTENSIONS``), and the camera RAW formats whether or not RAW support is installed. A RAW
file next to its JPEG is a file of that photo (``pairs``): copied and tagged along with it even where
LibRaw is missing. A RAW file with no twin is only read when it is installed; the scan leaves the others
out (``run.py``), with one warning that says how many and how to read them. Clips are offered where PyAV
is installed (``video.installed``).

Files of a kind a photo library holds but this installation does not rank are not offered either, but
never dropped in silence: the walk passes each to ``on_skipped`` with its kind (``SKIPPED_KINDS``), so
the scan can say how many it left out and why, in one line per kind. They are HEIC/HEIF files without
pillow-heif and clips without PyAV.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from novelfind.base.safe_text import display
from novelfind.errors import InputError
from novelfind.media.extensions import HEIF_EXTENSIONS
from novelfind.media.kinds import CLIP, offered_extensions
from novelfind.media.video import INSTALL_HINT as VIDEO_INSTALL_HINT

OnError = Callable[[Path, str], None]
OnSkipped = Callable[[str, str], None]  # (kind, the file's name)


@dataclass(frozen=True)
class ImageFile:
    """One image file found by the walk."""

    path: Path  # absolute, symlinks in it kept as found (Path.absolute(), not resolve())
    size: int  # st_size in bytes
    mtime_ns: int  # st_mtime_ns


# Clips are offered where PyAV is installed; looked up without importing it.
WALKED_EXTENSIONS: frozenset[str] = offered_extensions()
# What the scan says about the files of each kind the walk skipped (``skipped_kind``): the noun, and why
# they were left out, with the install hint where installing something would read them.
SKIPPED_KINDS: dict[str, tuple[str, str]] = {
    "heif": ("HEIC/HEIF file", "HEIC support is not installed (pip install 'novelfind[heif]')"),
    "video": ("clip", f"reading clips needs PyAV ({VIDEO_INSTALL_HINT})"),
}
# The kinds whose message names a few of the files (``skipped_message``).
NAMED_KINDS = frozenset({"video"})
NAMES_SHOWN = 3


class FileList(Sequence[ImageFile]):
    """Image file records in compact form: the paths' bytes back to back in one buffer, sizes and mtimes
    in arrays. About the path's length + 24 bytes per file, where a list of ``ImageFile`` objects costs
    about 500 (a ``Path`` object is most of it): 10 million files take about 1 GB instead of 5.

    A sequence of :class:`ImageFile`, made when an item is read; ``raw_path(i)`` gives the path's bytes
    without making a ``Path``, ``sizes`` and ``mtimes_ns`` the columns as numpy arrays.
    """

    def __init__(self, files: Iterable[ImageFile] = ()) -> None:
        self._arena = bytearray()  # os.fsencode(path) of each file, back to back
        self._ends = array("q")  # where file i's path ends in the arena
        self._sizes = array("q")
        self._mtimes = array("q")
        for f in files:
            self.append(f)

    def append(self, f: ImageFile) -> None:
        self._arena += os.fsencode(f.path)
        self._ends.append(len(self._arena))
        self._sizes.append(f.size)
        self._mtimes.append(f.mtime_ns)

    def __len__(self) -> int:
        return len(self._ends)

    def raw_path(self, i: int) -> bytes:
        """os.fsencode of file i's path."""
        start = self._ends[i - 1] if i > 0 else 0
        return bytes(self._arena[start : self._ends[i]])

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return self.take(range(*i.indices(len(self))))
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("FileList index out of range")
        return ImageFile(Path(os.fsdecode(self.raw_path(i))), self._sizes[i], self._mtimes[i])

    def take(self, indices: Iterable[int]) -> FileList:
        """A new FileList of the files at ``indices``, in that order."""
        out = FileList()
        for i in indices:
            i = int(i)
            out._arena += self._arena[(self._ends[i - 1] if i > 0 else 0) : self._ends[i]]
            out._ends.append(len(out._arena))
            out._sizes.append(self._sizes[i])
            out._mtimes.append(self._mtimes[i])
        return out

    @property
    def paths(self) -> Sequence[Path]:
        """The paths, as a sequence made on access."""
        return _Paths(self)

    def records(self) -> Iterator[tuple[bytes, int, int]]:
        """(path bytes, size, mtime_ns) per file, without making ``Path`` objects."""
        ends, arena, start = self._ends, self._arena, 0
        for i, end in enumerate(ends):
            yield bytes(arena[start:end]), self._sizes[i], self._mtimes[i]
            start = end

    def stat_of(self, i: int) -> tuple[int, int]:
        """(size, mtime_ns) of file i as the walk saw it."""
        return self._sizes[i], self._mtimes[i]

    @property
    def sizes(self) -> np.ndarray:
        """int64 (N,) file sizes (a copy)."""
        return np.array(self._sizes, dtype=np.int64)

    @property
    def mtimes_ns(self) -> np.ndarray:
        """int64 (N,) modification times in nanoseconds (a copy)."""
        return np.array(self._mtimes, dtype=np.int64)

    def nbytes(self) -> int:
        """Memory held by the records' buffers."""
        return len(self._arena) + 8 * 3 * len(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<FileList of {len(self)} files>"


class _Paths(Sequence[Path]):
    def __init__(self, files: FileList) -> None:
        self._files = files

    def __len__(self) -> int:
        return len(self._files)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return Path(os.fsdecode(self._files.raw_path(i if i >= 0 else i + len(self))))


def scanned_path_within(
    folder: str | os.PathLike[str], paths: Iterable[str | os.PathLike[str]]
) -> Path | None:
    """The first of ``paths`` that is ``folder`` or lies under it (links resolved), else None.

    A scan leaves the folder it places its picks in (``copy_to``) out of the walk; a picks folder that
    holds a scanned path would leave that whole path out.
    """
    inside = Path(os.path.realpath(os.fspath(folder)))
    for path in paths:
        real = Path(os.path.realpath(os.fspath(path)))
        if real == inside or inside in real.parents:
            return Path(path)
    return None


def is_image_name(name: str) -> bool:
    """True when ``name`` has an extension the walk offers (``WALKED_EXTENSIONS``), any case."""
    return os.path.splitext(name)[1].lower() in WALKED_EXTENSIONS


MAX_PATTERN_CHARS = 1024  # one exclude glob: longer than any sensible path pattern
MAX_PATTERNS = 1000  # exclude globs in one walk: compiled together into one regex


def skipped_kind(name: str) -> str | None:
    """The ``SKIPPED_KINDS`` key of a file the walk does not offer but a scan should count, else None:
    ``"heif"`` for a HEIC/HEIF file without pillow-heif, ``"video"`` for a clip without PyAV."""
    suffix = os.path.splitext(name)[1].lower()
    if suffix in HEIF_EXTENSIONS and suffix not in WALKED_EXTENSIONS:
        return "heif"
    if suffix in CLIP.extensions and suffix not in WALKED_EXTENSIONS:
        return "video"
    return None


def skipped_message(kind: str, count: int, names: Sequence[str] = ()) -> str:
    """One line for ``count`` skipped files of ``kind``, naming the first of ``names`` (the kinds of
    ``NAMED_KINDS``; each through ``safe_text.display``): ``3 clips left out (a.mp4, b.mov, c.mkv):
    reading clips needs PyAV (pip install 'novelfind[video]')``."""
    noun, why = SKIPPED_KINDS[kind]
    listed = ""
    if names:
        shown = ", ".join(display(name) for name in names[:NAMES_SHOWN])
        listed = f" ({shown}{', ...' if count > NAMES_SHOWN else ''})"
    return f"{count:,} {noun}{'' if count == 1 else 's'} left out{listed}: {why}"


class _Excluder:
    """``--exclude`` globs, matched like shell patterns (case-sensitive, ``*`` also crosses ``/``).

    A pattern is tried against the entry's name, its path relative to its root (with ``/``) and its
    absolute path; directories are also tried with a trailing ``/``, so ``thumbs/`` names a folder.
    A leading ``**/`` also matches at the root: ``**/thumbs/**`` excludes ``thumbs/`` and ``a/thumbs/``.
    An excluded folder is not entered.

    Patterns are limited (:data:`MAX_PATTERN_CHARS` each, :data:`MAX_PATTERNS` in all, an InputError
    beyond): ``fnmatch.translate`` takes time quadratic in the number of ``[`` (100,000 of them never
    finish), while the regexes it makes match in time linear in the name (atomic groups).
    """

    def __init__(self, patterns: Iterable[str]):
        regexes = []
        patterns = [p for p in patterns if p]
        if len(patterns) > MAX_PATTERNS:
            raise InputError(f"{len(patterns)} exclude patterns; at most {MAX_PATTERNS} are allowed")
        for pattern in patterns:
            if len(pattern) > MAX_PATTERN_CHARS:
                raise InputError(
                    f"an exclude pattern of {len(pattern)} characters; at most {MAX_PATTERN_CHARS} "
                    "are allowed"
                )
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
    on_skipped: OnSkipped | None = None,
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
    decoder's to report. A file of a kind the scan counts but does not read (``skipped_kind``: HEIC
    without pillow-heif, clips without PyAV) is passed to ``on_skipped(kind, name)`` instead of being
    yielded.
    """
    if isinstance(roots, (str, os.PathLike)):
        roots = [roots]
    checked = [_check_root(root) for root in roots]
    return _walk(checked, _Excluder(exclude), follow_symlinks, on_error, on_skipped)


def _walk(
    roots: list[tuple[Path, os.stat_result]],
    excluder: _Excluder,
    follow_symlinks: bool,
    on_error: OnError | None,
    on_skipped: OnSkipped | None = None,
) -> Iterator[ImageFile]:
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[tuple[int, int]] = set()
    # A file can be met twice only through a second name: a hard link, a followed symbolic link, or a
    # root naming a file. Only such files are remembered, so the set stays small in a library of
    # millions (a set entry costs about 150 bytes).
    root_files = {(st.st_dev, st.st_ino) for _, st in roots if not stat.S_ISDIR(st.st_mode)}

    def met_again_possible(key: tuple[int, int], st: os.stat_result) -> bool:
        return follow_symlinks or st.st_nlink > 1 or key in root_files

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
                    kind = skipped_kind(name) if on_skipped is not None else None
                    if kind is not None and not excluder.excluded(name, rel, entry.path, False):
                        on_skipped(kind, name)
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
                if met_again_possible(key, st):
                    seen_files.add(key)
                yield ImageFile(Path(entry.path), st.st_size, st.st_mtime_ns)
