"""``novelfind`` with the fake extractor, for tests that need a real process (signals, locks, rlimits).

Usage: ``python tests/support/fake_cli.py scan PATH ... [options]``, the same arguments as ``novelfind``.

Environment:
  NOVELFIND_TEST_DELAY    seconds to sleep in every extractor call (so a signal lands mid-scan)
  NOVELFIND_TEST_COUNTER  file to which the number of images of each extractor call is appended,
                          one line per call, flushed at once (survives SIGKILL)
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from common import FakeExtractor  # this script's folder is on sys.path: tests/support/


class SlowCountingExtractor(FakeExtractor):
    """FakeExtractor that sleeps per call and logs how many images it has seen to a file."""

    def __init__(self, delay: float, counter: str | None) -> None:
        super().__init__()
        self.delay = delay
        self.counter = counter

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        if self.delay:
            time.sleep(self.delay)
        out = super().__call__(batch)
        if self.counter:
            with open(self.counter, "a") as fh:
                fh.write(f"{len(batch)}\n")
                fh.flush()
        return out


def main() -> None:
    import novelfind.model.features
    from novelfind.cli import main as cli_main

    extractor = SlowCountingExtractor(
        float(os.environ.get("NOVELFIND_TEST_DELAY") or 0), os.environ.get("NOVELFIND_TEST_COUNTER")
    )
    novelfind.model.features.build_extractor = lambda **kwargs: extractor
    sys.argv[0] = "novelfind"
    cli_main()


if __name__ == "__main__":
    main()
