"""Shared fixtures: an isolated user environment, image folders, and a fast fake extractor."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from common import FakeExtractor, make_photo, missing_prerequisite
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    parser.addoption(
        "--require-cuda",
        action="store_true",
        default=False,
        help="fail the tests marked cuda instead of skipping them when CUDA (or the GPU "
        "decoding library) is missing: for runs on a GPU machine",
    )


@pytest.fixture(scope="session")
def cuda(request):
    """The CUDA device for a test marked ``cuda``: skipped without one, a failure under --require-cuda."""
    import torch

    if not torch.cuda.is_available():
        if request.config.getoption("--require-cuda"):
            pytest.fail("--require-cuda: no CUDA device")
        pytest.skip("needs CUDA")
    return torch.device("cuda")


@pytest.fixture(scope="session")
def nvimgcodec(cuda, request):
    """A checked GPU JPEG decoder (nvImageCodec) on the CUDA device; skipped or failed like ``cuda``."""
    from novelfind.extract.decoders import gpu as gpu_decode

    try:
        return gpu_decode.open_gpu_decoder(cuda)
    except gpu_decode.GpuDecodeUnavailable as e:
        if request.config.getoption("--require-cuda"):
            pytest.fail(f"--require-cuda: GPU JPEG decoding unavailable: {e}")
        pytest.skip(f"GPU JPEG decoding unavailable: {e}")


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory) -> Path:
    """One folder for the exported ONNX model, shared by the whole run (exporting takes seconds, tens on
    a busy machine): under pytest-xdist by every worker too, in the run's folder above the workers' own.
    The export is written atomically (a temporary file renamed), so workers that export at once each
    put a whole, verified model in place, and every later scan finds it."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # pytest-of-USER/pytest-N/ holds popen-gw0/, popen-gw1/, ...
    folder = base / "models"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(autouse=True)
def isolated_user_dirs(tmp_path_factory, monkeypatch, model_cache):
    """Every test gets its own cache, config and data folders and no NOVELFIND_* settings from outside."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    for name in list(os.environ):
        if name.startswith("NOVELFIND_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("NOVELFIND_MODEL_CACHE", str(model_cache))
    return home


@pytest.fixture
def fake_extractor(monkeypatch):
    """Replace the real model with FakeExtractor for the CLI; returns the instance to inspect."""
    import novelfind.model.features

    extractor = FakeExtractor()
    monkeypatch.setattr(novelfind.model.features, "build_extractor", lambda **kwargs: extractor)
    return extractor


@pytest.fixture
def library(tmp_path) -> dict:
    """30 bluish photos and 3 obvious odd ones (red, green, striped) in nested folders."""
    root = tmp_path / "photos"
    ordinary = [
        make_photo(root / f"trip{i % 3}" / f"IMG_{i:04d}.jpg", (40, 60 + i % 5, 200), seed=i)
        for i in range(30)
    ]
    odd = [
        make_photo(root / "trip1" / "odd_red.jpg", (220, 30, 30), seed=101),
        make_photo(root / "odd_green.png", (30, 220, 40), seed=102),
        make_photo(root / "trip2" / "odd_stripes.jpg", (40, 60, 200), seed=103, stripes=True),
    ]
    return {"root": root, "ordinary": ordinary, "odd": odd}


@pytest.fixture(scope="session")
def real_weights() -> Path:
    """The verified MobileNet-V2 weights file (the installed package's, no download), or the missing
    prerequisite."""
    from novelfind.errors import WeightsError
    from novelfind.model.weights import resolve_weights

    try:
        return resolve_weights(download=False)
    except WeightsError as e:
        missing_prerequisite(str(e))


@pytest.fixture(scope="session")
def real_photos() -> np.ndarray:
    """Real photos (scikit-image's bundled ones) as model input, and mirrored copies: uint8 (12, 224,
    224, 3)."""
    import skimage.data

    from novelfind.media.decode import to_model_input

    names = ["chelsea", "coffee", "astronaut", "rocket", "cat", "immunohistochemistry"]
    out = []
    for name in names:
        img = Image.fromarray(np.asarray(getattr(skimage.data, name)())[..., :3])
        out.append(to_model_input(img))
        out.append(out[-1][:, ::-1])
    return np.ascontiguousarray(np.stack(out))
