"""The ignore list: photos never to be picked again, known by their content.

A weekly run over the same archive should show new odd photos, not the same cat every week. A photo on
the list is never picked, but it still counts as part of the library: it keeps making its neighbours look
ordinary (``mask`` gives the ranking the photos it may not pick; nothing is removed before ranking).

The list holds content digests, the same blake2b-128 of the file's bytes as the feature cache
(``decode.file_digest``; a clip's from samples of its bytes, ``video.clip_digest``), so a photo or a
clip moved or renamed stays ignored. Each entry also keeps the file's size, the path it was last seen at
and when it was added. The size is what keeps a scan cheap: a file can only
have an ignored digest if it has an ignored size, so ``IgnoreList.find`` looks up (in the feature cache)
or computes the digest of those few files only, never of the whole library. The path is for ``entries``
(what ``novelfind ignore --list`` shows) and for removal by path of a file that is gone; scans keep it up
to date (``relocate``).

A photo of several files (RAW + JPEG, see :mod:`novelfind.media.pairs`) is ignored when any of its files is on
the list, so ``novelfind ignore IMG_0042.CR2`` ignores the photo listed as ``IMG_0042.JPG``.

It is user data, not cache: a JSON file in the user data folder (:func:`novelfind.base.dirs.ignore_list_path`:
on Linux ``~/.local/share/novelfind/ignored.json``), which ``novelfind cache clear`` does not touch.
Every change is a read-modify-write under a lock file, written atomically (a temporary file, then a
rename), so two runs adding at once both keep their entries and a crash never leaves half a list.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from novelfind.base import atomic, dirs, safe_load
from novelfind.base.atomic import write_atomic
from novelfind.base.lock import waiting_lock
from novelfind.errors import DecodeError, NovelfindError
from novelfind.media import walk
from novelfind.media.kinds import kind_of

FORMAT_VERSION = 1
_LIST_LIMIT = 256 << 20  # bytes: a million entries are about 200 MB; a larger file is not a list of ours


class IgnoreListError(NovelfindError):
    """The ignore list file cannot be read (damaged, unreadable); it is left as it is."""


def default_path() -> Path:
    """The ignore list used when none is named (:func:`novelfind.base.dirs.ignore_list_path`)."""
    return dirs.ignore_list_path()


def digest_file(path: str | os.PathLike[str], *, expect: tuple[int, int] | None = None) -> str:
    """The content digest of a file, as the feature cache computes it (a clip's from samples of its
    bytes, ``video.clip_digest``): the digest of its kind (``kinds.kind_of``), read through the library
    door (``expect``: the size and modification time in ns it must still have). Raises OSError."""
    try:
        return kind_of(path).digest(path, expect=expect)
    except DecodeError as e:
        raise OSError(str(e)) from None


def stat_key(path: str | os.PathLike[str]) -> str | None:
    """The entry of a file whose bytes cannot be read (permission denied): its path, size and mtime,
    hashed (``stat:`` + 32 hex digits). It matches that file only while it stays where and as it is;
    None when the file cannot even be looked at."""
    import hashlib

    try:
        st = os.stat(path)
    except OSError:
        return None
    name = os.fsencode(os.path.abspath(os.fspath(path)))
    key = hashlib.blake2b(b"%s\0%d\0%d" % (name, st.st_size, st.st_mtime_ns), digest_size=16)
    return "stat:" + key.hexdigest()


@dataclass(frozen=True)
class Ignored:
    """One entry: the content digest, the path the photo was last seen at, when it was added (UTC ISO)
    and the file's size in bytes."""

    digest: str
    path: Path
    added: str
    size: int


@dataclass(frozen=True)
class Found:
    """What :meth:`IgnoreList.find` found in a library: ``mask[i]`` True when photo i is ignored, and
    ``seen`` the file each ignored digest was found at (for :meth:`IgnoreList.relocate`)."""

    mask: np.ndarray  # bool (N,)
    seen: dict[str, Path]


@dataclass
class IgnoreChange:
    """What ``add`` or ``remove`` did: the entries concerned, names that matched nothing, unreadable files."""

    changed: list[Ignored] = field(default_factory=list)  # added, or removed
    unchanged: list[Path] = field(default_factory=list)  # already on the list (add) / not on it (remove)
    failures: list[tuple[Path, str]] = field(default_factory=list)  # (path, one-line reason)
    not_photos: list[Path] = field(default_factory=list)  # files named that a scan never reads (add)
    by_stat: list[tuple[Path, str]] = field(default_factory=list)  # unreadable bytes: added by path,
    #                                                                size and mtime (path, reason)


def count_photos(paths: Iterable[str | os.PathLike[str]]) -> int:
    """How many photos ``paths`` are: the files of one shot (``IMG_1.CR2`` + ``IMG_1.jpg``, same folder and
    name but for the extension and case) count once, as in a scan's summary."""
    return len(
        {(os.path.dirname(os.fspath(p)), os.path.splitext(os.path.basename(p))[0].casefold()) for p in paths}
    )


def _now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def _reason(err: OSError) -> str:
    return err.strerror or str(err)


class IgnoreList:
    """The ignore list in the JSON file ``path`` (default ``default_path()``).

    Reads go to the file each time (another run may have changed it); changes lock, re-read, apply and
    write back atomically. Raises IgnoreListError when the file exists but cannot be read as a list,
    OutputError when it cannot be written.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None):
        self.path = Path(path).expanduser() if path is not None else default_path()

    # ------------------------------------------------------------------------------------------ reading

    def _load(self) -> dict[str, dict[str, Any]]:
        try:  # read through a link the user made; written only where no link is (see _change)
            text = atomic.read_limited(self.path, _LIST_LIMIT, follow_link=True).decode("utf-8")
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise IgnoreListError(f"cannot read the ignore list {self.path}: {_reason(e)}") from None
        except UnicodeDecodeError:
            raise IgnoreListError(f"the ignore list {self.path} is damaged: not UTF-8 text") from None
        if not text.strip():
            return {}
        try:
            doc = safe_load.load_json(text, max_bytes=_LIST_LIMIT)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            version = doc.get("version")
            if version != FORMAT_VERSION:
                raise ValueError(f"unknown version {version!r}")
            entries = doc["ignored"]
            if not isinstance(entries, dict):
                raise ValueError("'ignored' is not an object")
            for digest, entry in entries.items():
                if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                    raise ValueError(f"bad entry {digest!r}")
                size = entry.get("size")
                if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                    raise ValueError(f"bad size in entry {digest!r}")
        except (ValueError, KeyError) as e:
            raise IgnoreListError(f"the ignore list {self.path} is damaged ({e}); fix or remove it") from None
        return entries

    def digests(self) -> frozenset[str]:
        """The digests on the list."""
        return frozenset(self._load())

    def entries(self) -> list[Ignored]:
        """Every entry, oldest first (then by path)."""
        items = [_entry(digest, entry) for digest, entry in self._load().items()]
        return sorted(items, key=lambda e: (e.added, os.fsencode(e.path)))

    def __len__(self) -> int:
        return len(self._load())

    def __contains__(self, digest: object) -> bool:
        return digest in self._load()

    def mask(self, digests: Sequence[str | None]) -> np.ndarray:
        """bool (N,): True where the photo with ``digests[i]`` may not be picked (None: not ignored)."""
        ignored = self.digests()
        return np.fromiter((d is not None and d in ignored for d in digests), dtype=bool, count=len(digests))

    def find(
        self,
        photos: Sequence[Sequence[Any]],
        *,
        known_digests: Callable[[Sequence[Any]], Sequence[str | None]] | None = None,
    ) -> Found:
        """Which of a library's ``photos`` are ignored; ``photos[i]`` are the files of photo i (walker
        records with ``path`` and ``size``), the file it is read from first.

        Only files with the size of an ignored file can be on the list, so only their digests are
        needed: ``known_digests(files)`` gives those it knows without reading a file (the feature
        cache: None where it does not know), the others are read and hashed here. A file that cannot
        be read counts as not ignored. With an empty list, nothing is looked at.
        """
        entries = self._load()
        mask = np.zeros(len(photos), dtype=bool)
        seen: dict[str, Path] = {}
        if not entries:
            return Found(mask, seen)
        sizes = {int(entry["size"]) for entry in entries.values()}
        # (photo, file) of every file whose size is an ignored size, the file read first within a photo
        suspects = [(i, f) for i, files in enumerate(photos) for f in files if int(f.size) in sizes]
        known = list(known_digests([f for _, f in suspects])) if known_digests and suspects else []
        known += [None] * (len(suspects) - len(known))
        for (i, f), digest in zip(suspects, known, strict=True):
            if mask[i]:
                continue
            if digest is None:
                try:
                    digest = digest_file(f.path)
                except OSError:  # unreadable now: on the list by its path, size and mtime, or not at all
                    digest = stat_key(f.path)
                    if digest is None:
                        continue
            if digest in entries:
                mask[i] = True
                seen[digest] = Path(f.path)
        return Found(mask, seen)

    # ------------------------------------------------------------------------------------------ changing

    def _change(self, edit) -> None:
        """Run ``edit(entries) -> bool`` on the current list under the lock; write it back if it says so."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise IgnoreListError(f"cannot create {self.path.parent}: {_reason(e)}") from None
        lock = self.path.with_name(self.path.name + ".lock")
        with waiting_lock(lock, f"the ignore list {self.path}"):
            entries = self._load()
            if edit(entries):
                doc = {"version": FORMAT_VERSION, "ignored": dict(sorted(entries.items()))}
                write_atomic(self.path, json.dumps(doc, indent=1, ensure_ascii=True) + "\n")

    def add(
        self,
        paths: Iterable[str | os.PathLike[str]],
        *,
        exclude: Iterable[str] = (),
        follow_symlinks: bool = False,
    ) -> IgnoreChange:
        """Put the files ``paths`` on the list, read to get their digest; a folder stands for every image
        file under it (RAW files included), found as a scan finds them (``exclude``, ``follow_symlinks``:
        as for a scan). A path that does not exist or cannot be read is a failure; a file named that a scan
        would never read (``notes.txt``) is not added (``not_photos``); the others are added.
        """
        result = IgnoreChange()
        found: list[tuple[str, Path, int]] = []

        def fail(path: Path, reason: str) -> None:
            result.failures.append((Path(path), reason))

        for path in _files(paths, exclude=exclude, follow_symlinks=follow_symlinks, on_error=fail):
            if not walk.is_image_name(path.name):
                result.not_photos.append(path)
                continue
            try:
                found.append((digest_file(path), path, path.stat().st_size))
            except OSError as e:
                key = stat_key(path)  # bytes that cannot be read: by path, size and mtime
                if key is None:
                    fail(path, _reason(e))
                    continue
                found.append((key, path, path.stat().st_size))
                result.by_stat.append((path, _reason(e)))
        self._add(found, result)
        return result

    def add_files(self, items: Iterable[tuple[str, str | os.PathLike[str], int]]) -> IgnoreChange:
        """Put ``(digest, path, size)`` of files on the list without reading them (a scan knows these)."""
        result = IgnoreChange()
        self._add([(str(d), Path(os.path.abspath(os.fspath(p))), int(n)) for d, p, n in items], result)
        return result

    def _add(self, found: list[tuple[str, Path, int]], result: IgnoreChange) -> None:
        if not found:
            return
        added = _now()

        def edit(entries: dict[str, dict[str, Any]]) -> bool:
            for digest, path, size in found:
                if digest in entries:
                    result.unchanged.append(path)
                    continue
                entries[digest] = {"path": os.fsdecode(path), "added": added, "size": size}
                result.changed.append(Ignored(digest, path, added, size))
            return bool(result.changed)

        self._change(edit)

    def remove(self, paths: Iterable[str | os.PathLike[str]]) -> IgnoreChange:
        """Take the photos ``paths`` off the list: by the file's content, else (a file that is gone, or
        changed since) by the path its entry was last seen at. A folder takes off every entry last seen
        under it (without reading a file: scans keep the recorded paths current)."""
        targets: list[tuple[str | None, Path]] = []
        folders: list[Path] = []
        result = IgnoreChange()
        for p in paths:
            path = Path(os.path.abspath(os.fspath(p)))
            if path.is_dir():
                folders.append(path)
                continue
            try:
                targets.append((digest_file(path), path))
            except OSError:
                targets.append((None, path))  # gone or unreadable now: it may still be named in the list
        if targets or folders:
            self._remove(targets, result, folders=folders)
        return result

    def _remove(
        self,
        targets: list[tuple[str | None, Path]],
        result: IgnoreChange,
        folders: Sequence[Path] = (),
    ) -> None:
        def edit(entries: dict[str, dict[str, Any]]) -> bool:
            by_name = {os.fsencode(entry["path"]): digest for digest, entry in entries.items()}
            for digest, path in targets:
                key = digest if digest in entries else None
                if key is None:
                    key = by_name.get(os.fsencode(path))
                if key is None:
                    result.unchanged.append(path)
                    continue
                result.changed.append(_entry(key, entries.pop(key)))
            for folder in folders:
                inside = [d for d, entry in entries.items() if Path(entry["path"]).is_relative_to(folder)]
                if not inside:
                    result.unchanged.append(folder)
                for key in inside:
                    result.changed.append(_entry(key, entries.pop(key)))
            return bool(result.changed)

        self._change(edit)

    def relocate(self, seen: Mapping[str, str | os.PathLike[str]]) -> int:
        """Record where a scan found ignored photos (``digest -> path``); returns how many entries moved."""
        moved = 0

        def edit(entries: dict[str, dict[str, Any]]) -> bool:
            nonlocal moved
            for digest, path in seen.items():
                entry = entries.get(digest)
                new = os.fsdecode(os.path.abspath(os.fspath(path)))
                if entry is not None and entry["path"] != new:
                    entry["path"] = new
                    moved += 1
            return moved > 0

        if any(d in self.digests() for d in seen):
            self._change(edit)
        return moved

    def clear(self) -> int:
        """Empty the list; returns how many entries it had. The (empty) file stays."""
        count = 0

        def edit(entries: dict[str, dict[str, Any]]) -> bool:
            nonlocal count
            count = len(entries)
            entries.clear()
            return True

        self._change(edit)
        return count

    # ------------------------------------------------------------------------------------------ scans

    def check(self) -> None:
        """Read the list: IgnoreListError when it is damaged, so a scan stops before the slow part."""
        self._load()

    def ignored_in(
        self,
        photos: Sequence[Sequence[Any]],
        *,
        known_digests: Callable[[Sequence[Any]], Sequence[str | None]] | None = None,
        on_warning: Callable[[str], None] | None = None,
    ) -> np.ndarray:
        """bool (N,): the ``photos`` (each a sequence of files, as :meth:`find` takes them) on the list.

        Where the list saw them is brought up to date for ``novelfind ignore --list``; a list that
        cannot be written still works (its paths grow stale), said through ``on_warning``.
        """
        found = self.find(photos, known_digests=known_digests)
        if found.seen:
            try:
                self.relocate(found.seen)
            except NovelfindError as err:
                if on_warning is not None:
                    on_warning(f"cannot record where ignored photos are now: {err}")
        return found.mask

    def add_picks(
        self,
        files: Sequence[Any],
        *,
        known_digests: Callable[[Sequence[Any]], Sequence[str | None]] | None = None,
        on_warning: Callable[[str], None] | None = None,
    ) -> int:
        """Put a scan's picks on the list, each by the file it was read from (walker records with
        ``path``, ``size`` and ``mtime_ns``); returns how many were new. A digest the cache knows
        (``known_digests``) is not computed again; a file that cannot be read, or is no longer the file
        that was ranked (another size or modification time, a link or a FIFO in its place: the library
        door's refusal), is left out, said through ``on_warning``."""
        digests = list(known_digests(files)) if known_digests is not None else [None] * len(files)
        items = []
        for f, digest in zip(files, digests, strict=True):
            if digest is None:
                try:  # through the library door, by its kind's digest (a clip's samples its bytes)
                    digest = digest_file(f.path, expect=(int(f.size), int(f.mtime_ns)))
                except OSError as err:
                    if on_warning is not None:
                        on_warning(f"cannot add {f.path} to the ignore list: {err.strerror or err}")
                    continue
            items.append((digest, f.path, f.size))
        return len(self.add_files(items).changed)

    def add_moments(self, picks: Sequence[Any], **options: Any) -> int:
        """Put a scan's picks on the list with the other photos of their moments (records with ``path``,
        ``size``, ``mtime_ns`` and ``members``); returns how many were new (:meth:`add_picks`, whose
        ``options`` these are)."""
        files = [
            walk.ImageFile(photo.path, photo.size, photo.mtime_ns)
            for pick in picks
            for photo in (pick, *pick.members)
        ]
        return self.add_picks(files, **options)

    def __repr__(self) -> str:
        return f"IgnoreList({str(self.path)!r})"


def _entry(digest: str, entry: Mapping[str, Any]) -> Ignored:
    return Ignored(digest, Path(entry["path"]), str(entry.get("added", "")), int(entry["size"]))


def _files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    exclude: Iterable[str],
    follow_symlinks: bool,
    on_error: Callable[[Path, str], None],
) -> Iterable[Path]:
    """The files ``paths`` name, folders walked as a scan walks them; missing paths to ``on_error``."""
    exclude = tuple(exclude)
    for p in paths:
        path = Path(os.path.abspath(os.fspath(p)))
        if path.is_dir():
            for f in walk.walk(path, exclude=exclude, follow_symlinks=follow_symlinks, on_error=on_error):
                yield f.path
        elif path.exists():
            yield path
        else:
            on_error(path, "no such file or folder")


@dataclass(frozen=True)
class Selection:
    """Which of a scan's photos are ranked: the ``candidates`` (int64 rows), the ``ignored`` ones (bool
    (N,), on the ignore list) and, with ``ignore_picks``, the ``kept`` rows: the photos of the window on
    the ignore list (mostly an earlier run's picks of the same window), whose tags stay. ``seen``: how many
    photos of the window the last run of the same line ranked (``novelfind.media.reruns``), which are not
    candidates again. With photos in the window but none new (``nothing_new``) the outputs stay as they
    were: a re-run of the weekly line loses nothing and adds nothing; last week's picks (before ``since``)
    lose their tags when this week's are tagged."""

    candidates: np.ndarray
    ignored: np.ndarray
    kept: np.ndarray
    restricted: bool  # fewer candidates than photos: ``since``, ignored photos or a line's earlier run
    seen: int = 0

    @property
    def nothing_new(self) -> bool:
        return not len(self.candidates) and bool(len(self.kept) or self.seen)


def select(
    in_window: np.ndarray,
    ignore_list: IgnoreList | None,
    groups: Sequence[Sequence[Any]],
    *,
    since: bool,
    ignore_picks: bool,
    considered: np.ndarray | None = None,
    known_digests: Callable[[Sequence[Any]], Sequence[str | None]] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> Selection:
    """The :class:`Selection` of the photos whose files are ``groups`` (row i: photo i's files), of which
    ``in_window`` (bool (N,)) fall within ``since`` (:func:`novelfind.media.dates.since_mask`), against
    ``ignore_list`` (None: nothing is ignored) and the photos the last run of the line ``considered``
    (bool (N,), ``LineRecord.considered``; None: no record)."""
    ignored = np.zeros(len(in_window), dtype=bool)
    if ignore_list is not None:
        ignored = ignore_list.ignored_in(groups, known_digests=known_digests, on_warning=on_warning)
    seen = in_window & considered if considered is not None else np.zeros(len(in_window), dtype=bool)
    kept = np.flatnonzero(in_window & ignored) if ignore_picks else np.zeros(0, np.int64)
    return Selection(
        candidates=np.flatnonzero(in_window & ~ignored & ~seen),  # int64 rows
        ignored=ignored,
        kept=kept,
        restricted=since or bool(ignored.any()) or bool(seen.any()),
        seen=int(seen.sum()),
    )
