"""Which XMP sidecar belongs to a photo, by the names photo managers give them: read by the capture
dates (:func:`novelfind.media.dates.sidecar_date`) and written by the tags
(:mod:`novelfind.outputs.xmp`).

Sidecar names, as the tools expect: an existing ``NAME.EXT.xmp`` (darktable, digiKam, exiftool's
default), else an existing ``NAME.xmp`` (Lightroom, Capture One), each also tried as ``.XMP``; the first
that exists is updated. Without one, ``NAME.EXT.xmp`` is created: it cannot be mistaken for the sidecar
of another file with the same name (``IMG_1.CR2`` and ``IMG_1.JPG``).

``NAME.xmp`` names no file of its own, so it is only taken when it cannot belong to another photo:

* when every other file of that name in the folder is a file of the same photo (``twins``: the JPEG of
  a RAW + JPEG pair): the pair shares it, as Lightroom and Capture One share it between a RAW and its
  JPEG, and it gets the photo's one rank;
* for a RAW file, also when none of the others is a RAW: Lightroom and Capture One write ``NAME.xmp``
  for RAW files only, so ``IMG_1.xmp`` next to ``IMG_1.CR2`` and an exported ``IMG_1.tif`` is the RAW's.

Otherwise (``a.JPG`` and an unrelated ``a.PNG`` next to ``a.xmp``) each file gets its own
``NAME.EXT.xmp`` and ``NAME.xmp`` is left alone: one photo's rank never lands in another's sidecar.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from novelfind.base import atomic
from novelfind.media.kinds import RAW, kind_of


def sidecar_candidates(photo: str | os.PathLike[str]) -> tuple[Path, ...]:
    """Where a sidecar of ``photo`` may be, in the order looked at.

    NAME.EXT.xmp, NAME.EXT.XMP, NAME.xmp, NAME.XMP.
    """
    photo = Path(photo)
    stem = photo.with_suffix("") if photo.suffix else photo
    return (
        photo.with_name(photo.name + ".xmp"),
        photo.with_name(photo.name + ".XMP"),
        stem.with_name(stem.name + ".xmp"),
        stem.with_name(stem.name + ".XMP"),
    )


def sidecar_for(photo: str | os.PathLike[str], twins: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """The sidecar :func:`novelfind.outputs.xmp.tag` writes for ``photo``: the first existing candidate,
    else ``NAME.EXT.xmp``.

    ``twins`` are the other files of the same photo (a RAW + JPEG pair); ``NAME.xmp`` is skipped when
    another file of the folder may own it (see the module doc).
    """
    photo = Path(photo)
    try:
        dir_fd = atomic.open_folder(photo.parent, follow_link=True)
    except OSError:
        return sidecar_candidates(photo)[0]
    try:
        return photo.parent / sidecar_name(dir_fd, photo, twins)
    finally:
        os.close(dir_fd)


def sidecar_name(dir_fd: int, photo: Path, twins: Iterable[str | os.PathLike[str]]) -> str:
    """:func:`sidecar_for`, looked up in the photo's folder opened as ``dir_fd``: the sidecar's name."""

    def exists(name: str) -> bool:
        try:
            return atomic.lstat_at(dir_fd, name) is not None
        except OSError:
            return False

    candidates = [c.name for c in sidecar_candidates(photo)]
    own = [c for c in candidates[:2] if exists(c)]
    if own:
        return own[0]
    shared = [c for c in candidates[2:] if exists(c)]
    if shared and _owns_name_xmp(dir_fd, photo, twins):
        return shared[0]
    return candidates[0]


def _owns_name_xmp(dir_fd: int, photo: Path, twins: Iterable[str | os.PathLike[str]]) -> bool:
    """Whether ``NAME.xmp`` can be ``photo``'s: no other file of that name, but its twins, may own it."""
    stem = os.path.splitext(photo.name)[0].casefold()
    mine = {photo.name, *(Path(t).name for t in twins)}
    try:
        names = os.listdir(dir_fd)
    except OSError:
        return False
    others = [
        n
        for n in names
        if n not in mine
        and os.path.splitext(n)[0].casefold() == stem
        and os.path.splitext(n)[1].lower() != ".xmp"
    ]
    if not others:
        return True
    return kind_of(photo.name) is RAW and not any(kind_of(n) is RAW for n in others)
