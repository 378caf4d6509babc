"""Helpers the tests share: a fast fake model, small photos, the sample sizes, prerequisites, and the
environment of novelfind in a child process. (The fixtures are in ``tests/conftest.py``.)"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]

# The soak, fuzz and race tests run a sample by default, so that the suite (scripts/test.sh, what CI runs)
# takes minutes on a 2-core machine; NOVELFIND_TESTS=full runs them at their full size (read here, before
# each test takes the NOVELFIND_ variables out of its environment).
FULL = os.environ.get("NOVELFIND_TESTS", "") == "full"


def sized(sample: int, full: int) -> int:
    """``full`` with NOVELFIND_TESTS=full, else ``sample``: how many iterations, cases or seconds."""
    return full if FULL else sample


class FakeExtractor:
    """Deterministic, fast stand-in for MobileNet-V2: the image shrunk to 8x8 colour cells."""

    model_key = "fake-8x8-v1"
    dim = 8 * 8 * 3

    def __init__(self) -> None:
        self.calls = 0
        self.images = 0

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        self.calls += 1
        self.images += len(batch)
        b = batch.astype(np.float32) / 255.0  # (B, 224, 224, 3)
        cells = b.reshape(len(b), 8, 28, 8, 28, 3).mean(axis=(2, 4))  # (B, 8, 8, 3)
        return cells.reshape(len(b), -1)


def make_photo(
    path: Path, colour: tuple[int, int, int], *, seed: int, size=(160, 120), stripes=False
) -> Path:
    """A small noisy image of roughly one colour (or stripes), saved by its extension."""
    rng = np.random.default_rng(seed)
    w, h = size
    base = np.empty((h, w, 3), np.float32)
    base[:] = colour
    if stripes:
        base[:, (np.arange(w) // 10) % 2 == 0] = (255 - np.array(colour)).astype(np.float32)
    base += rng.normal(0, 8, base.shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.clip(base, 0, 255).astype(np.uint8)).save(path)
    return path


def missing_prerequisite(reason: str) -> None:
    """A test's outside prerequisite (weights, package data, a browser) is missing.

    In CI (``CI`` set), where .ci/run installs every prerequisite, that is a failure; on a developer's
    machine the test is skipped with the reason.
    """
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"prerequisite missing in CI: {reason}")
    pytest.skip(reason)


def unprivileged(cmd: list[str]) -> list[str]:
    """``cmd`` so that file permissions apply to it: as root, without the capabilities that bypass them."""
    if os.geteuid() != 0:
        return cmd
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        missing_prerequisite("running as root without setpriv (util-linux): permissions cannot be tested")
    drop = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={drop}", f"--bounding-set={drop}", "--", *cmd]


def child_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of novelfind in a child process: none of the caller's NOVELFIND_ settings, this
    checkout first on the path, the user folders under ``tmp_path``; ``extra`` on top."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVELFIND_")}
    env.update(
        PYTHONPATH=str(ROOT),
        XDG_CACHE_HOME=str(tmp_path / "xdg"),
        XDG_CONFIG_HOME=str(tmp_path / "cfg"),
        **extra,
    )
    return env


def rank_all_as_json(folder: str | os.PathLike[str], *options: str | os.PathLike[str]) -> list[str]:
    """``scan`` arguments that rank every photo of ``folder`` (no near-duplicate is passed over) and print
    them as JSON, then ``options``."""
    return ["scan", str(folder), "--k", "1000", "--dedup", "0", "--format", "json", *map(str, options)]
