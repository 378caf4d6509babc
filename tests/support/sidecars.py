"""Reading an XMP sidecar back, for tests that check what novelfind wrote (the product never reads one
whole: it edits its own properties in place)."""

from __future__ import annotations

import os
from pathlib import Path

from novelfind.outputs import xmp


def read_sidecar(sidecar: str | os.PathLike[str]) -> dict[str, str | list[str]]:
    """The sidecar's XMP properties: arrays as lists of their items, everything else as text.

    Keys are libexiv2's (``Xmp.dc.subject``, ``Xmp.novelfind.Rank``, ...). Raises SidecarError.
    """
    path = Path(sidecar)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        data, _ = xmp._read(fd, path.name, path)
    finally:
        os.close(fd)
    if data is None:
        raise xmp.SidecarError(path, "no such file")
    with xmp._exiv2() as (exiv2, collect):
        packet = xmp._Packet(exiv2, collect, path, data)
        out: dict[str, str | list[str]] = {}
        for datum in packet.data:
            value = datum.getValue()
            if isinstance(value, exiv2.XmpArrayValue):
                out[datum.key()] = [value.toString(i) for i in range(value.count())]
            else:
                out[datum.key()] = datum.toString()
        return out
