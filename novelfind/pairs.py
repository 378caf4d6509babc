"""One shot, several files: RAW + JPEG and HEIC + JPEG pairs become one photo.

Cameras set to RAW+JPEG, and phones that keep a JPEG next to a HEIC, write one shot as several files
with the same name in the same folder: ``IMG_0042.CR2`` and ``IMG_0042.JPG``. Ranked as two photos they
would be each other's nearest neighbour, so ``group_photos`` makes them one ``Photo``: it is read, ranked
and listed once, through its cheapest file to decode, and carries the other files in ``also``.

The rule, for the files of one folder whose names differ only in their extension (compared without
regard to case, as cameras and card readers disagree on it):

* only shot formats pair: JPEG (``.jpg``/``.jpeg``), HEIF (``.heic``/``.heif``/``.hif``) and the RAW
  formats of ``raw.RAW_EXTENSIONS``. A PNG, TIFF or WebP of the same name is an export or an edit, a
  picture in its own right, and stays a photo of its own;
* the file read and listed is the JPEG, else the HEIF, else the first RAW in walk order;
* a name with two files of the same format (``a.jpg`` and ``a.JPEG``, or ``a.jpg`` and ``a.JPG`` on a
  case-sensitive disk) is ambiguous: which JPEG belongs to the RAW? Nothing of that name is grouped.

Different folders never pair. The result keeps the walk order of the files that are read, so a library
ranks exactly as the same library without the twins.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from novelfind.raw import RAW_EXTENSIONS

JPEG_EXTENSIONS: frozenset[str] = frozenset({".jpg", ".jpeg"})
HEIF_EXTENSIONS: frozenset[str] = frozenset({".heic", ".heif", ".hif"})

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
    if suffix in RAW_EXTENSIONS:
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
