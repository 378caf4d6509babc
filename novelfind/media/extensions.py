"""The file extensions of each kind of media file, lower-case, with the dot: the one list of them.

:mod:`novelfind.media.kinds` makes one record of each kind from these lists (``kinds.PHOTO``,
``kinds.RAW``, ``kinds.CLIP``); the decoders read the lists they need from here, below the records,
since the records name the decoders' functions. A new extension of a kind, or an extension moved to
another kind, is an edit of this file alone.
"""

from __future__ import annotations

# Lower-case, with the dot. What Pillow reads itself, and the formats it reads through a plugin or an
# optional codec (HEIF through pillow-heif; AVIF where Pillow is built with libavif): ``decode.py``
# offers those only where they are installed.
JPEG_EXTENSIONS: frozenset[str] = frozenset({".jpg", ".jpeg"})
PILLOW_EXTENSIONS: frozenset[str] = JPEG_EXTENSIONS | {".png", ".webp", ".gif", ".bmp", ".tif", ".tiff"}
HEIF_EXTENSIONS: frozenset[str] = frozenset({".heic", ".heif", ".hif"})
AVIF_EXTENSIONS: frozenset[str] = frozenset({".avif"})

# The formats LibRaw reads that cameras of the last twenty years write.
RAW_EXTENSIONS: frozenset[str] = frozenset(
    {
        ".dng",  # Adobe DNG (Leica, Pentax, Ricoh, phones, converters)
        ".cr2",  # Canon
        ".cr3",
        ".nef",  # Nikon
        ".nrw",
        ".arw",  # Sony
        ".srf",
        ".sr2",
        ".orf",  # Olympus / OM System
        ".rw2",  # Panasonic
        ".raf",  # Fujifilm
        ".pef",  # Pentax
        ".srw",  # Samsung
        ".x3f",  # Sigma
        ".3fr",  # Hasselblad
        ".iiq",  # Phase One
        ".erf",  # Epson
        ".kdc",  # Kodak
        ".mrw",  # Minolta
    }
)

# What phones, cameras and camcorders write as clips (.mts/.m2ts: AVCHD).
VIDEO_EXTENSIONS: frozenset[str] = frozenset(
    {".mp4", ".mov", ".m4v", ".3gp", ".mts", ".m2ts", ".avi", ".mkv", ".webm"}
)
