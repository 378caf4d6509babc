"""The ignore list: photos never to be picked again, known by their content.

A weekly run over the same archive should show new odd photos, not the same cat every week. A photo on
the list is never picked, but it still counts as part of the library: it keeps making its neighbours look
ordinary (``mask`` gives the ranking the photos it may not pick; nothing is removed before ranking).

The list holds content digests, the same blake2b-128 of the file's bytes as the feature cache
(``decode.file_digest``), so a photo moved or renamed stays ignored, and a scan gets the digests of its
library from the cache without reading a file again. Each entry also keeps the path it was last seen at
and when it was added, for ``entries`` (what ``novelfind ignore --list`` shows) and for removal by path of
a file that is gone.

It is user data, not cache: a JSON file in the user data folder (``default_path``: on Linux
``~/.local/share/novelfind/ignored.json``), which ``novelfind cache clear`` does not touch. Every change
is a read-modify-write under a lock file, written atomically (a temporary file, then a rename), so two
runs adding at once both keep their entries and a crash never leaves half a list.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from novelfind.decode import file_digest
from novelfind.errors import NovelfindError
from novelfind.lock import RunLock
from novelfind.report import write_atomic

FORMAT_VERSION = 1


class IgnoreListError(NovelfindError):
    """The ignore list file cannot be read (damaged, unreadable); it is left as it is."""


def default_path() -> Path:
    """``ignored.json`` in the user data folder (platformdirs: ``~/.local/share/novelfind`` on Linux)."""
    import platformdirs

    return platformdirs.user_data_path("novelfind") / "ignored.json"


def digest_file(path: str | os.PathLike[str]) -> str:
    """The content digest of a file, as the feature cache computes it. Raises OSError."""
    return file_digest(Path(path).read_bytes())


@dataclass(frozen=True)
class Ignored:
    """One entry: the content digest, the path the photo was last seen at, when it was added (UTC ISO)."""

    digest: str
    path: Path
    added: str


@dataclass
class IgnoreChange:
    """What ``add`` or ``remove`` did: the entries concerned, names that matched nothing, unreadable files."""

    changed: list[Ignored] = field(default_factory=list)  # added, or removed
    unchanged: list[Path] = field(default_factory=list)  # already on the list (add) / not on it (remove)
    failures: list[tuple[Path, str]] = field(default_factory=list)  # (path, one-line reason)


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
        self.path = Path(path) if path is not None else default_path()

    # ------------------------------------------------------------------------------------------ reading

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as e:
            raise IgnoreListError(f"cannot read the ignore list {self.path}: {_reason(e)}") from None
        except UnicodeDecodeError:
            raise IgnoreListError(f"the ignore list {self.path} is damaged: not UTF-8 text") from None
        if not text.strip():
            return {}
        try:
            doc = json.loads(text)
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
        except (ValueError, KeyError) as e:
            raise IgnoreListError(f"the ignore list {self.path} is damaged ({e}); fix or remove it") from None
        return entries

    def digests(self) -> frozenset[str]:
        """The digests on the list."""
        return frozenset(self._load())

    def entries(self) -> list[Ignored]:
        """Every entry, oldest first (then by path)."""
        items = [
            Ignored(digest, Path(entry["path"]), str(entry.get("added", "")))
            for digest, entry in self._load().items()
        ]
        return sorted(items, key=lambda e: (e.added, os.fsencode(e.path)))

    def __len__(self) -> int:
        return len(self._load())

    def __contains__(self, digest: object) -> bool:
        return digest in self._load()

    def mask(self, digests: Sequence[str | None]) -> np.ndarray:
        """bool (N,): True where the photo with ``digests[i]`` may not be picked (None: not ignored)."""
        ignored = self.digests()
        return np.fromiter((d is not None and d in ignored for d in digests), dtype=bool, count=len(digests))

    # ------------------------------------------------------------------------------------------ changing

    def _change(self, edit) -> None:
        """Run ``edit(entries) -> bool`` on the current list under the lock; write it back if it says so."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise IgnoreListError(f"cannot create {self.path.parent}: {_reason(e)}") from None
        lock = self.path.with_name(self.path.name + ".lock")
        with RunLock(lock, wait=True, label=str(self.path)):
            entries = self._load()
            if edit(entries):
                doc = {"version": FORMAT_VERSION, "ignored": dict(sorted(entries.items()))}
                write_atomic(self.path, json.dumps(doc, indent=1, ensure_ascii=True) + "\n")

    def add(self, paths: Iterable[str | os.PathLike[str]]) -> IgnoreChange:
        """Put the files ``paths`` on the list (read to get their digest). Unreadable files are failures."""
        result = IgnoreChange()
        found: list[tuple[str, Path]] = []
        for p in paths:
            path = Path(os.path.abspath(os.fspath(p)))
            if path.is_dir():
                result.failures.append((path, "is a folder"))
                continue
            try:
                found.append((digest_file(path), path))
            except OSError as e:
                result.failures.append((path, _reason(e)))
        self._add(found, result)
        return result

    def add_digests(self, items: Iterable[tuple[str, str | os.PathLike[str]]]) -> IgnoreChange:
        """Put ``(digest, path)`` pairs on the list without reading the files (a scan knows the digests)."""
        result = IgnoreChange()
        self._add([(str(d), Path(os.path.abspath(os.fspath(p)))) for d, p in items], result)
        return result

    def _add(self, found: list[tuple[str, Path]], result: IgnoreChange) -> None:
        if not found:
            return
        added = _now()

        def edit(entries: dict[str, dict[str, str]]) -> bool:
            for digest, path in found:
                if digest in entries:
                    result.unchanged.append(path)
                    continue
                entries[digest] = {"path": os.fsdecode(path), "added": added}
                result.changed.append(Ignored(digest, path, added))
            return bool(result.changed)

        self._change(edit)

    def remove(self, paths: Iterable[str | os.PathLike[str]]) -> IgnoreChange:
        """Take the photos ``paths`` off the list: by the file's content, else (a file that is gone, or
        changed since) by the path its entry was last seen at."""
        targets: list[tuple[str | None, Path]] = []
        result = IgnoreChange()
        for p in paths:
            path = Path(os.path.abspath(os.fspath(p)))
            try:
                targets.append((digest_file(path), path))
            except FileNotFoundError:
                targets.append((None, path))
            except OSError:
                if path.is_dir():
                    result.failures.append((path, "is a folder"))
                else:
                    targets.append((None, path))  # unreadable now: it may still be named in the list
        if targets:
            self._remove(targets, result)
        return result

    def remove_digests(self, digests: Iterable[str]) -> IgnoreChange:
        """Take the entries with these digests off the list (digests not on it are skipped)."""
        result = IgnoreChange()
        targets = [(str(d), Path()) for d in digests]
        if targets:
            self._remove(targets, result, by_path=False)
        return result

    def _remove(
        self, targets: list[tuple[str | None, Path]], result: IgnoreChange, by_path: bool = True
    ) -> None:
        def edit(entries: dict[str, dict[str, str]]) -> bool:
            by_name = {os.fsencode(entry["path"]): digest for digest, entry in entries.items()}
            for digest, path in targets:
                key = digest if digest in entries else None
                if key is None and by_path:
                    key = by_name.get(os.fsencode(path))
                if key is None:
                    if by_path:
                        result.unchanged.append(path)
                    continue
                entry = entries.pop(key)
                result.changed.append(Ignored(key, Path(entry["path"]), str(entry.get("added", ""))))
            return bool(result.changed)

        self._change(edit)

    def relocate(self, seen: Mapping[str, str | os.PathLike[str]]) -> int:
        """Record where a scan found ignored photos (``digest -> path``); returns how many entries moved."""
        moved = 0

        def edit(entries: dict[str, dict[str, str]]) -> bool:
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

        def edit(entries: dict[str, dict[str, str]]) -> bool:
            nonlocal count
            count = len(entries)
            entries.clear()
            return True

        self._change(edit)
        return count

    def __repr__(self) -> str:
        return f"IgnoreList({str(self.path)!r})"
