"""A decoder whose workers stall on some files, for the tests of the per-file decode time limit.

A file whose name contains "stuck" never finishes in time: its worker writes its pid to PATH.pid and
sleeps ``STUCK_S``, then returns a reason no real decode gives (so a missing limit fails a test rather
than hanging it). A name with "slow" sleeps ``SLOW_S`` before a normal decode. Other files decode as
usual. Workers import this module by name: the tests folder is on ``sys.path``.
"""

from __future__ import annotations

import os
import time

from novelfind.extract.decoders.pillow import ProcessDecoder
from novelfind.extract.stage import Decoded, decode_file

STUCK_S = 120.0
SLOW_S = 1.0
NOT_STOPPED = "woke up: the time limit did not stop this decode"


def decode_or_stall(path: str) -> Decoded:
    name = os.path.basename(path)
    if "stuck" in name:
        with open(path + ".pid", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(STUCK_S)
        return Decoded(None, reason=NOT_STOPPED)
    if "slow" in name:
        time.sleep(SLOW_S)
    return decode_file(path)


class StallingDecoder(ProcessDecoder):
    decode_one = staticmethod(decode_or_stall)
