"""The one list of media file extensions, on its own: its form, and that no extension has two kinds."""

from __future__ import annotations

import ast
from itertools import combinations
from pathlib import Path

from novelfind.media import extensions
from novelfind.media.extensions import (
    AVIF_EXTENSIONS,
    HEIF_EXTENSIONS,
    JPEG_EXTENSIONS,
    PILLOW_EXTENSIONS,
    RAW_EXTENSIONS,
    VIDEO_EXTENSIONS,
)

LISTS = {
    "PILLOW": PILLOW_EXTENSIONS,
    "HEIF": HEIF_EXTENSIONS,
    "AVIF": AVIF_EXTENSIONS,
    "RAW": RAW_EXTENSIONS,
    "VIDEO": VIDEO_EXTENSIONS,
}


def test_every_list_is_frozen_lower_case_and_dotted():
    for name, exts in {**LISTS, "JPEG": JPEG_EXTENSIONS}.items():
        assert type(exts) is frozenset, name  # a module constant no caller can change by accident
        assert exts, name
        for ext in exts:
            assert ext.startswith(".") and ext == ext.lower() and ext.strip() == ext and len(ext) > 1, ext
            assert "." not in ext[1:], ext  # one suffix, as os.path.splitext gives it


def test_no_extension_belongs_to_two_lists():
    for (a, one), (b, two) in combinations(LISTS.items(), 2):
        assert not one & two, (a, b, one & two)


def test_jpeg_is_read_by_pillow_and_the_spellings_cameras_use_are_there():
    assert JPEG_EXTENSIONS == {".jpg", ".jpeg"} and JPEG_EXTENSIONS < PILLOW_EXTENSIONS
    assert {".tif", ".tiff", ".png", ".webp"} <= PILLOW_EXTENSIONS
    assert {".heic", ".heif", ".hif"} == HEIF_EXTENSIONS
    assert {".dng", ".cr2", ".cr3", ".nef", ".arw", ".raf", ".orf", ".rw2"} <= RAW_EXTENSIONS
    assert {".mp4", ".mov", ".mts", ".m2ts"} <= VIDEO_EXTENSIONS  # AVCHD camcorders too
    assert ".xmp" not in set().union(*LISTS.values())  # a sidecar is never media


def test_the_list_depends_on_nothing():
    """Below the kinds and the decoders: importing it imports no other module."""
    tree = ast.parse(Path(extensions.__file__).read_text())
    imported = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert [getattr(node, "module", None) for node in imported] == ["__future__"]
