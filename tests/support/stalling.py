"""Decoders whose workers stall on some files, for the tests of the per-file decode time limit.

A file whose name contains "stuck" never finishes in time: its worker writes its pid to PATH.pid and
sleeps ``STUCK_S``, then returns what no real decode gives (a reason, or for a thumbnail a magenta
square), so a missing limit fails a test rather than hanging it. A name with "slow" sleeps ``SLOW_S``
before a normal decode. Other files decode as usual. Workers import this module by name: the tests
folder is on ``sys.path``.
"""

from __future__ import annotations

import os
import time

from PIL import Image

from novelfind.extract.decoders.pillow import ProcessDecoder
from novelfind.extract.stage import Decoded, decode_file
from novelfind.outputs.thumbnails import ThumbnailDecoder, Thumbnails, encode_jpeg, thumbnails_of

STUCK_S = 120.0
SLOW_S = 1.0
NOT_STOPPED = "woke up: the time limit did not stop this decode"
WOKE_UP = (255, 0, 255)  # the colour of the thumbnail a stalled worker returns when nothing stopped it


def _stalled(path: str) -> bool:
    """Stall as the file's name says; True when it was a "stuck" file (and nothing stopped it)."""
    name = os.path.basename(path)
    if "stuck" in name:
        with open(path + ".pid", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(STUCK_S)
        return True
    if "slow" in name:
        time.sleep(SLOW_S)
    return False


def decode_or_stall(path: str) -> Decoded:
    return Decoded(None, reason=NOT_STOPPED) if _stalled(path) else decode_file(path)


def thumbnail_or_stall(path: str, sizes, at=None, encode=False, expect=None) -> Thumbnails:
    if not _stalled(path):
        return thumbnails_of(path, sizes, at, encode, expect)
    woke = {size: Image.new("RGB", (size, size), WOKE_UP) for size in sizes}
    return Thumbnails({size: encode_jpeg(img) if encode else img for size, img in woke.items()})


class StallingDecoder(ProcessDecoder):
    decode_one = staticmethod(decode_or_stall)


class StallingThumbnails(ThumbnailDecoder):
    make = staticmethod(thumbnail_or_stall)
