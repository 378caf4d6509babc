"""The kinds of media file a library holds, one record each: a photo, a camera RAW, a clip.

A file's kind is decided by its extension alone (``kind_of``, any case), so the walk, the decoders, the
ignore list, the dates and the outputs all agree on it without opening the file. Each ``MediaKind``
carries everything that differs between kinds: its extensions (listed in
:mod:`novelfind.media.extensions`), which of them this installation offers, how it is read for the
model, how its content digest is made, where its capture date comes from, how a picture of it is made
for the report and the contact sheet, and what the report says of its size. Code outside ``media/``
asks ``kind_of(path)`` and calls the record; it never looks at a file name's extension itself.

The record's callables import their modules on first call (``_lazy``): importing this module imports
no decoder (Pillow, LibRaw, PyAV). The records name the decoders (``decode``, ``raw``, ``video``), so
those never import this module; they read the lists they need from ``extensions``. ``dates.py``,
above the records, reads the date of a kind's ``date_source``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from novelfind.media.extensions import (
    AVIF_EXTENSIONS,
    HEIF_EXTENSIONS,
    PILLOW_EXTENSIONS,
    RAW_EXTENSIONS,
    VIDEO_EXTENSIONS,
)

if TYPE_CHECKING:
    from PIL import Image

PathLike = str | os.PathLike[str]


def _lazy(target: str) -> Callable[..., Any]:
    """The function ``module:name``, imported when called. Looked up again on every call (a dictionary
    lookup once the module is imported), so a test that replaces the function in its module replaces
    it here too."""
    module, _, name = target.partition(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``{target}``, imported on first use."
    return call


@dataclass(frozen=True)
class MediaKind:
    """One kind of media file and what differs between kinds.

    ``read_for_model(path, known)`` -> (digest, pixels): uint8 (224, 224, 3) for a picture, a
    ``video.ClipFrames`` for a clip, None when the digest is in ``known``; raises DecodeError.
    ``digest(path, expect=None)`` -> the content digest the cache and the ignore list know the file
    by; raises OSError or DecodeError. ``date_source``: which reader of ``dates.py`` finds the
    capture date its own bytes hold (``extract.dating.embedded_date``): "exif", "raw" or "clip".
    ``picture(path, min_side=, at=, expect=None)`` -> (an upright RGB image, a clip's frame size or
    None): what the report and the contact sheet show (a clip's frame at ``at`` seconds); raises
    DecodeError (``FileRefused`` when the library door refuses what is at ``path`` now).
    ``info(path, expect=None)`` -> ``{"width", "height", "taken"}`` as the report shows them; never
    raises. ``expect``, everywhere: the (size, modification time in ns) the file must still have.
    ``offered()`` -> the extensions the walk offers in this installation.
    """

    name: str  # "photo", "raw", "clip"
    extensions: frozenset[str]
    # Read whole into memory, digested from all its bytes and decoded as one picture. A clip is not: a
    # few keyframes are decoded in a decode process, and its digest samples its bytes.
    whole: bool
    read_for_model: Callable[[PathLike, Container[str]], tuple[str, Any]]
    digest: Callable[..., str]
    date_source: str
    picture: Callable[..., tuple[Image.Image, tuple[int, int] | None]]
    info: Callable[..., dict]
    offered: Callable[[], frozenset[str]]


def _whole_digest(path: PathLike, *, expect: tuple[int, int] | None = None) -> str:
    """The digest of all the file's bytes (``decode.file_digest``), read through the library door within
    the decode budget; raises DecodeError."""
    from novelfind.media.decode import file_digest, read_bytes

    return file_digest(read_bytes(path, expect=expect))


def _photo_picture(
    path: PathLike, *, min_side: int, at: float | None = None, expect: tuple[int, int] | None = None
) -> tuple[Image.Image, tuple[int, int] | None]:
    from novelfind.media.decode import load_image

    return load_image(Path(path), min_side=min_side, expect=expect), None


def _raw_picture(
    path: PathLike, *, min_side: int, at: float | None = None, expect: tuple[int, int] | None = None
) -> tuple[Image.Image, tuple[int, int] | None]:
    from novelfind.media.raw import load_raw

    return load_raw(Path(path), min_side=min_side, expect=expect), None


def _clip_picture(
    path: PathLike, *, min_side: int, at: float | None = None, expect: tuple[int, int] | None = None
) -> tuple[Image.Image, tuple[int, int] | None]:
    """The clip's frame at ``at`` seconds (its novel moment; None: its first keyframe), whatever
    ``min_side``: a keyframe is scaled to the model's short side as it is decoded."""
    from novelfind.media.video import poster

    return poster(Path(path), at or 0.0, expect=expect)


def _photo_offered() -> frozenset[str]:
    """What Pillow reads in this installation (``decode.IMAGE_EXTENSIONS``)."""
    from novelfind.media.decode import IMAGE_EXTENSIONS

    return IMAGE_EXTENSIONS


def _clip_offered() -> frozenset[str]:
    """Clips where PyAV is installed, looked up without importing it."""
    from novelfind.media.video import installed

    return VIDEO_EXTENSIONS if installed() else frozenset()


PHOTO = MediaKind(
    name="photo",
    extensions=PILLOW_EXTENSIONS | HEIF_EXTENSIONS | AVIF_EXTENSIONS,
    whole=True,
    read_for_model=_lazy("novelfind.media.decode:read_for_model"),
    digest=_whole_digest,
    date_source="exif",
    picture=_photo_picture,
    info=_lazy("novelfind.media.decode:image_info"),
    offered=_photo_offered,
)

# Offered whether or not RAW support is installed: a RAW next to its JPEG is a file of that photo
# (``pairs``), copied and tagged with it; one with no twin is left out, with a warning, where LibRaw is
# missing (``pairs.PhotoList.readable``).
RAW = MediaKind(
    name="raw",
    extensions=RAW_EXTENSIONS,
    whole=True,
    read_for_model=_lazy("novelfind.media.raw:read_for_model"),
    digest=_whole_digest,  # as any picture's: the cache and the ignore list treat a RAW like a JPEG
    date_source="raw",
    picture=_raw_picture,
    info=_lazy("novelfind.media.raw:image_info"),
    offered=lambda: RAW_EXTENSIONS,
)

CLIP = MediaKind(
    name="clip",
    extensions=VIDEO_EXTENSIONS,
    whole=False,
    read_for_model=_lazy("novelfind.media.video:read_clip_for_model"),
    digest=_lazy("novelfind.media.video:clip_digest"),
    date_source="clip",
    picture=_clip_picture,
    # The report takes a clip's size from its frame (``picture``); the header read of a picture, which
    # finds nothing in a clip, is what it gets otherwise.
    info=_lazy("novelfind.media.decode:image_info"),
    offered=_clip_offered,
)

# Every kind; their extensions are disjoint. A file of any other extension is read as a photo (the
# walk offers only the extensions of ``offered_extensions``).
KINDS: tuple[MediaKind, ...] = (PHOTO, RAW, CLIP)

_BY_EXTENSION: dict[str, MediaKind] = {ext: kind for kind in KINDS for ext in kind.extensions}


def kind_of(path: PathLike) -> MediaKind:
    """The kind of the file at ``path``, from its extension in any case; ``PHOTO`` for any extension
    no kind names (and for none)."""
    return _BY_EXTENSION.get(os.path.splitext(os.fspath(path))[1].lower(), PHOTO)


def offered_extensions() -> frozenset[str]:
    """Every extension the walk offers in this installation: each kind's ``offered()``."""
    return frozenset().union(*(kind.offered() for kind in KINDS))
