"""What a library holds, and everything read from its files.

``kinds`` (one :class:`~novelfind.media.kinds.MediaKind` record per kind of file: photo, RAW, clip) over
``extensions`` (each kind's extensions); ``walk`` (folders into file records), ``pairs`` (RAW + JPEG and
HEIC + JPEG files as one photo), ``decode`` (Pillow), ``raw`` (LibRaw), ``video`` (PyAV), ``dates`` (when a
photo was taken: one reader per source), ``sidecars`` (which XMP sidecar is a photo's), ``ignore`` (the
ignore list, by content).
"""
