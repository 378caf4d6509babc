"""The CPU path's geometry emulated in torch, run on CPU tensors: the EXIF turns, Pillow's filter
weights, the draft's block means and the model input's shape, dtype and plain cut. (Agreement with
Pillow on real JPEGs is in tests/extract/test_gpu.py.)"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from novelfind.extract.decoders import gpu_geometry  # noqa: E402
from novelfind.extract.decoders.gpu_geometry import model_input, orient  # noqa: E402
from novelfind.extract.decoders.jpeg_header import JpegInfo  # noqa: E402
from novelfind.media.decode import INPUT_SIZE, resized_geometry  # noqa: E402


def pixels(h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def test_the_turns_compose_as_rotations_and_mirrors():
    x = pixels(3, 5)
    assert torch.equal(orient(x, 1), x)
    assert torch.equal(orient(orient(x, 6), 6), orient(x, 3))  # two quarter turns: half a turn
    assert torch.equal(orient(orient(x, 6), 8), x)  # clockwise then counter-clockwise
    assert torch.equal(orient(orient(x, 2), 2), x) and torch.equal(orient(orient(x, 4), 4), x)
    assert torch.equal(orient(x, 5), x.transpose(0, 1))
    for o in (5, 6, 7, 8):
        assert orient(x, o).shape == (5, 3, 3)
    for o in (0, 9):
        assert torch.equal(orient(x, o), x)  # unknown: as it is
    assert orient(x, 6)[0, -1].tolist() == x[0, 0].tolist()  # clockwise: the top left goes top right


@pytest.mark.parametrize(
    ("in_size", "box"), [(300, (38.0, 262.0)), (1000, (0.0, 1000.0)), (100, (10.0, 90.0))]
)
def test_filter_weights_sum_to_one_in_pillows_fixed_point(in_size, box):
    first, w = gpu_geometry._resample_weights(in_size, INPUT_SIZE, *box)
    assert w.dtype == np.float32 and w.shape[0] == INPUT_SIZE
    assert 0 <= first and first + w.shape[1] <= in_size
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=w.shape[1] / 2**22)
    assert (w >= 0).all()  # the bilinear filter has no negative lobe
    scaled = w.astype(np.float64) * 2**22
    np.testing.assert_array_equal(scaled, np.round(scaled))  # 22 fraction bits


def test_the_draft_reduction_is_block_means_rounded():
    x = torch.tensor([[[0], [1]], [[2], [4]]], dtype=torch.uint8)  # (2, 2, 1): mean 1.75
    assert gpu_geometry._reduce(x, 2).tolist() == [[[2.0]]]
    y = pixels(9, 7)
    assert gpu_geometry._reduce(y, 4).shape == (3, 2, 3)
    same = gpu_geometry._reduce(y, 1)
    assert same.dtype == torch.float32 and torch.equal(same, y.float())


def test_pillow_rounding_of_a_pass():
    x = torch.tensor([-3.0, 0.49, 0.5, 254.5, 300.0])
    assert gpu_geometry._round8(x).tolist() == [0.0, 0.0, 1.0, 255.0, 255.0]


@pytest.mark.parametrize(("h", "w"), [(256, 256), (256, 400), (500, 256)])
def test_a_short_side_of_256_is_a_plain_cut(h, w):
    x = pixels(h, w, seed=h + w)
    out = model_input(x, JpegInfo(w, h, 1, 1))
    _, _, left, top = resized_geometry(w, h)
    assert out.dtype == torch.uint8 and out.shape == (INPUT_SIZE, INPUT_SIZE, 3)
    assert torch.equal(out, x[top : top + INPUT_SIZE, left : left + INPUT_SIZE])


@pytest.mark.parametrize(
    ("h", "w", "draft", "orientation"), [(300, 400, 1, 6), (90, 60, 1, 1), (1200, 900, 2, 3)]
)
def test_a_flat_colour_stays_that_colour_through_any_geometry(h, w, draft, orientation):
    x = torch.zeros((h, w, 3), dtype=torch.uint8)
    x[...] = torch.tensor([12, 130, 250], dtype=torch.uint8)
    out = model_input(x, JpegInfo(w, h, orientation, draft))
    assert out.shape == (INPUT_SIZE, INPUT_SIZE, 3)
    assert out.reshape(-1, 3).unique(dim=0).tolist() == [[12, 130, 250]]


def test_the_orientation_is_applied_before_the_crop():
    """A tall image turned a quarter is wide: the crop then takes the middle of its width."""
    x = torch.zeros((400, 256, 3), dtype=torch.uint8)
    x[:100] = 255  # white top quarter: after a clockwise turn, the right quarter
    turned = model_input(x, JpegInfo(256, 400, 6, 1))
    plain = model_input(x, JpegInfo(256, 400, 1, 1))
    assert not torch.equal(turned, plain)
    assert turned[:, -1].float().mean() > 200 and turned[:, 0].float().mean() < 50
