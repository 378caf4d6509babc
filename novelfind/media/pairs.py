"""One shot, several files: RAW + JPEG and HEIC + JPEG pairs become one photo.

Cameras set to RAW+JPEG, and phones that keep a JPEG next to a HEIC, write one shot as several files
with the same name in the same folder: ``IMG_0042.CR2`` and ``IMG_0042.JPG``. Ranked as two photos they
would be each other's nearest neighbour, so ``group_photos`` makes them one ``Photo``: it is read, ranked
and listed once, through its cheapest file to decode, and carries the other files in ``also``.

The rule, for the files of one folder whose names differ only in their extension (compared without
regard to case, as cameras and card readers disagree on it):

* only shot formats pair: JPEG (``.jpg``/``.jpeg``), HEIF (``.heic``/``.heif``/``.hif``) and the RAW
  formats of ``kinds.RAW``. A PNG, TIFF or WebP of the same name is an export or an edit, a
  picture in its own right, and stays a photo of its own;
* the file read and listed is the JPEG, else the HEIF, else the first RAW in walk order;
* a name with two files of the same format (``a.jpg`` and ``a.JPEG``, or ``a.jpg`` and ``a.JPG`` on a
  case-sensitive disk) is ambiguous: which JPEG belongs to the RAW? Nothing of that name is grouped.

Different folders never pair. The result keeps the walk order of the files that are read, so a library
ranks exactly as the same library without the twins.
"""

from __future__ import annotations

import os
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import numpy as np

from novelfind.errors import NovelfindError
from novelfind.media import raw, walk
from novelfind.media.extensions import HEIF_EXTENSIONS, JPEG_EXTENSIONS
from novelfind.media.kinds import RAW, kind_of
from novelfind.media.walk import FileList, ImageFile

# Decoding cost, cheapest first: the file a photo is read through.
_JPEG, _HEIF, _RAW = 0, 1, 2


class HasPath(Protocol):
    @property
    def path(self) -> Path: ...


F = TypeVar("F", bound=HasPath)


@dataclass(frozen=True)
class Photo(Generic[F]):
    """One shot: ``file`` is read, ranked and listed; ``also`` are its other files (best first)."""

    file: F
    also: tuple[F, ...] = ()

    @property
    def files(self) -> tuple[F, ...]:
        """Every file of the shot, ``file`` first: what a copy of the photo copies."""
        return (self.file, *self.also)


def _format(suffix: str) -> tuple[int, str] | None:
    """(cost rank, format name) of a shot format; None for a file that never pairs."""
    if suffix in JPEG_EXTENSIONS:
        return _JPEG, ".jpg"
    if suffix in HEIF_EXTENSIONS:
        return _HEIF, ".heic"
    if suffix in RAW.extensions:
        return _RAW, suffix
    return None


def group_photos(files: Iterable[F]) -> list[Photo[F]]:
    """The photos of ``files`` (walker records with a ``path``): twins grouped, walk order kept.

    Pure: reads no file. A file that pairs with nothing is a ``Photo`` with an empty ``also``.
    """
    files = list(files)
    # (folder, case-folded stem) -> indices of the shot-format files with that name
    names: dict[tuple[Path, str], list[int]] = {}
    formats: list[tuple[int, str] | None] = []
    for i, f in enumerate(files):
        path = Path(f.path)
        stem, suffix = os.path.splitext(path.name)
        fmt = _format(suffix.lower())
        formats.append(fmt)
        if fmt is not None and stem:
            names.setdefault((path.parent, stem.casefold()), []).append(i)

    grouped: dict[int, tuple[int, ...]] = {}  # index of the file read -> indices of its twins
    absorbed: set[int] = set()
    for members in names.values():
        if len(members) < 2:
            continue
        kinds = [formats[i][1] for i in members]  # type: ignore[index]
        if len(set(kinds)) != len(kinds):
            continue  # two files of one format: ambiguous, nothing is grouped
        ordered = sorted(members, key=lambda i: (formats[i][0], i))  # type: ignore[index]
        grouped[ordered[0]] = tuple(ordered[1:])
        absorbed.update(ordered[1:])

    return [
        Photo(f, tuple(files[j] for j in grouped.get(i, ())))
        for i, f in enumerate(files)
        if i not in absorbed
    ]


# --------------------------------------------------------------------------- a scan's photos, compactly


class PhotoList(Sequence[Photo[ImageFile]]):
    """The photos of a scan in compact form: the file each is read from in a :class:`FileList`, and the
    other files of the few photos that have them (RAW + JPEG) by position. A list of ``Photo`` objects
    costs about 1 KB per photo; this, the path's length + 24 bytes."""

    def __init__(self, files: FileList, twins: dict[int, tuple[ImageFile, ...]]) -> None:
        self.files = files
        self.twins = twins  # position -> the photo's other files

    @classmethod
    def from_walk(
        cls, walked: Iterable[ImageFile], on_file: Callable[[int], None] | None = None
    ) -> PhotoList:
        """The photos of the files of a walk, in walk order, twins grouped (:func:`group_photos`).
        ``on_file(n)`` is called with the number of files taken so far, after each."""
        files, names = FileList(), array("q")
        for f in walked:
            files.append(f)
            names.append(hash((f.path.parent, os.path.splitext(f.path.name)[0].casefold())))
            if on_file is not None:
                on_file(len(files))
        return cls.grouped(files, np.frombuffer(names, np.int64))

    @classmethod
    def grouped(cls, files: FileList, names: np.ndarray) -> PhotoList:
        """The photos of ``files`` in walk order, twins grouped by :func:`group_photos`.
        ``names`` (N,) int64 is a hash of each file's (folder, case-folded stem): only files that share
        one can be twins, so only those are made into objects and grouped."""
        _, where, counts = np.unique(names, return_inverse=True, return_counts=True)
        shared = np.flatnonzero(counts[where.reshape(-1)] > 1)  # (S,) positions, walk order
        if not len(shared):
            return cls(files, {})
        position = {f.path: int(i) for i, f in zip(shared, files.take(shared), strict=True)}
        twins, absorbed = {}, np.zeros(len(files), bool)
        for photo in group_photos(files.take(shared)):
            if photo.also:
                twins[position[photo.file.path]] = photo.also
                absorbed[[position[f.path] for f in photo.also]] = True
        if not absorbed.any():
            return cls(files, twins)
        new = np.cumsum(~absorbed) - 1  # (N,) position among the photos
        kept = files.take(np.flatnonzero(~absorbed))
        return cls(kept, {int(new[i]): also for i, also in twins.items()})

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = i + len(self) if i < 0 else i
        return Photo(self.files[i], self.twins.get(i, ()))

    def file_count(self) -> int:
        """Files behind the photos (their other files included)."""
        return len(self.files) + sum(len(also) for also in self.twins.values())

    def take(self, positions: np.ndarray) -> PhotoList:
        """The photos at ``positions`` (increasing), as a new list."""
        new = {int(old): j for j, old in enumerate(positions) if int(old) in self.twins}
        return PhotoList(self.files.take(positions), {j: self.twins[old] for old, j in new.items()})

    def subset(self, files: FileList) -> PhotoList:
        """The photos read from ``files``, a subsequence of ``self.files`` in the same order."""
        if len(files) == len(self.files):
            return self
        positions, j = array("q"), 0
        for path, _, _ in files.records():
            while self.files.raw_path(j) != path:
                j += 1
            positions.append(j)
            j += 1
        return self.take(np.frombuffer(positions, np.int64))

    def readable(self) -> tuple[PhotoList, int]:
        """The photos this installation can read, and how many were left out: without RAW support
        (``novelfind[raw]``), a RAW file with a JPEG twin stays part of its photo (copied and tagged
        with it), and one without is left out."""
        if raw.available():
            return self, 0
        readable = np.fromiter(
            (kind_of(os.fsdecode(path)) is not RAW for path, _, _ in self.files.records()),
            bool,
            count=len(self),
        )
        if readable.all():
            return self, 0
        return self.take(np.flatnonzero(readable)), int((~readable).sum())

    @property
    def groups(self) -> Sequence[tuple[ImageFile, ...]]:
        """Every photo's files, the one read first (made on access)."""
        return _Groups(self)


class _Groups(Sequence[tuple[ImageFile, ...]]):
    def __init__(self, photos: PhotoList) -> None:
        self._photos = photos

    def __len__(self) -> int:
        return len(self._photos)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self._photos[i].files


def find_photos(
    paths: Sequence[Path],
    *,
    exclude: Sequence[str],
    follow_symlinks: bool,
    excluded: Callable[[Path], bool],
    on_error: Callable[[Path, str], None],
    on_found: Callable[[int], None],
    on_walked: Callable[[int], None],
    on_warning: Callable[[str], None],
) -> PhotoList:
    """The photos under ``paths``, in walk order, without the files ``excluded`` names (a run's own
    outputs); twins (RAW + JPEG) are one photo (:class:`PhotoList`). ``on_found(n)`` after each file the
    walk offers, ``on_walked(n)`` once the walk is done. What the walk or this installation left out
    (RAW files without LibRaw, HEIC without pillow-heif, clips without PyAV) is one warning line per
    kind, with the count and the reason (and a few names, for clips); with no photo left, the error
    (NovelfindError) says it instead."""
    skipped: Counter[str] = Counter()
    names: dict[str, list[str]] = {}  # the first few names of the kinds whose line names them

    def on_skipped(kind: str, name: str) -> None:
        skipped[kind] += 1
        if kind in walk.NAMED_KINDS and len(names.setdefault(kind, [])) < walk.NAMES_SHOWN:
            names[kind].append(name)

    walked = walk.walk(
        paths, exclude=exclude, follow_symlinks=follow_symlinks, on_error=on_error, on_skipped=on_skipped
    )
    photos = PhotoList.from_walk((f for f in walked if not excluded(f.path)), on_found)
    on_walked(photos.file_count())
    photos, left_out = photos.readable()
    messages = [
        walk.skipped_message(kind, count, names.get(kind, ())) for kind, count in sorted(skipped.items())
    ]
    if left_out:
        messages.insert(
            0,
            f"{left_out} RAW file{'' if left_out == 1 else 's'} without a JPEG twin left out: "
            "RAW support is not installed (pip install 'novelfind[raw]')",
        )
    if not photos:
        where = ", ".join(str(path) for path in paths)
        raise NovelfindError(f"no images found in {where}" + "".join(f" ({m})" for m in messages))
    for message in messages:
        on_warning(message)
    return photos
