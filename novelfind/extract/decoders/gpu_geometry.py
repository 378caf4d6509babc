"""The CPU path's geometry (``novelfind.media.decode.to_model_input``) emulated in torch, on the device the
pixels were decoded on: Pillow's ``draft`` (libjpeg's DCT-domain 1/2, 1/4 or 1/8 decode) as an average
over the same pixel blocks, then EXIF orientation, then Pillow's antialiased bilinear resize of the centre
crop with its filter weights computed as Pillow computes them, each stage rounded to 8 bits like
Pillow's (``model_input``). The result is the CPU path's uint8 (224, 224, 3) up to the difference between
a DCT-domain reduction and a block average (a level or two of 255). Plain torch: it runs on the CPU too,
which is how it is tested there.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING

import numpy as np

from novelfind.extract.decoders.jpeg_header import JpegInfo
from novelfind.media.decode import INPUT_SIZE, crop_box, resized_geometry

if TYPE_CHECKING:
    import torch

# Pillow's 8-bit resampling: fixed-point weights with this many fraction bits (Resample.c).
_PRECISION_BITS = 32 - 8 - 2


def _reduce(x: torch.Tensor, a: int) -> torch.Tensor:
    """(H, W, C) uint8 -> (ceil(H/a), ceil(W/a), C) float32 block means rounded to integers.

    Stands in for libjpeg's 1/a DCT-domain decode (whose output is 8-bit, hence the rounding); edge
    blocks average the pixels they have.
    """
    import torch

    if a == 1:
        return x.to(torch.float32)
    h_in, w_in, c = x.shape
    ph, pw = -h_in % a, -w_in % a
    if ph or pw:
        x = torch.nn.functional.pad(x, (0, 0, 0, pw, 0, ph))
    h, w = (h_in + ph) // a, (w_in + pw) // a
    sums = x.reshape(h, a, w, a, c).sum(dim=(1, 3), dtype=torch.float32)  # (h, w, C)
    rows = torch.full((h,), float(a), device=x.device)
    cols = torch.full((w,), float(a), device=x.device)
    rows[-1] = h_in - (h - 1) * a
    cols[-1] = w_in - (w - 1) * a
    counts = rows[:, None] * cols[None, :]  # (h, w)
    return torch.floor(sums / counts[:, :, None] + 0.5)


def orient(x: torch.Tensor, orientation: int) -> torch.Tensor:
    """Apply EXIF ``orientation`` to an (H, W, ...) tensor, as ``ImageOps.exif_transpose`` does."""
    import torch

    if orientation == 2:  # FLIP_LEFT_RIGHT
        return x.flip(1)
    if orientation == 3:  # ROTATE_180
        return x.flip((0, 1))
    if orientation == 4:  # FLIP_TOP_BOTTOM
        return x.flip(0)
    if orientation == 5:  # TRANSPOSE
        return x.transpose(0, 1)
    if orientation == 6:  # ROTATE_270: a quarter turn clockwise
        return torch.rot90(x, -1, (0, 1))
    if orientation == 7:  # TRANSVERSE
        return torch.rot90(x, 2, (0, 1)).transpose(0, 1)
    if orientation == 8:  # ROTATE_90: a quarter turn counter-clockwise
        return torch.rot90(x, 1, (0, 1))
    return x


@functools.lru_cache(maxsize=512)
def _resample_weights(in_size: int, out_size: int, in0: float, in1: float) -> tuple[int, np.ndarray]:
    """Pillow's bilinear weights for source [in0, in1) -> out_size pixels (Resample.c,
    ``precompute_coeffs`` then ``normalize_coeffs_8bpc``): (first source index, float32 (out, span))."""
    scale = (in1 - in0) / out_size
    filterscale = max(scale, 1.0)
    support = 1.0 * filterscale  # the bilinear filter's support is 1
    centre = in0 + (np.arange(out_size) + 0.5) * scale  # (out,)
    xmin = np.maximum(np.trunc(centre - support + 0.5), 0).astype(np.int64)
    xmax = np.minimum(np.trunc(centre + support + 0.5), in_size).astype(np.int64)
    first, last = int(xmin.min()), int(xmax.max())
    src = np.arange(first, last)  # (span,)
    w = np.maximum(0.0, 1.0 - np.abs((src[None, :] - centre[:, None] + 0.5) / filterscale))  # (out, span)
    w[(src[None, :] < xmin[:, None]) | (src[None, :] >= xmax[:, None])] = 0.0
    total = w.sum(axis=1, keepdims=True)
    w = np.divide(w, total, out=np.zeros_like(w), where=total != 0)
    one = float(1 << _PRECISION_BITS)
    w = np.where(w < 0, np.trunc(-0.5 + w * one), np.trunc(0.5 + w * one)) / one  # 8-bit fixed point
    return first, w.astype(np.float32)


def _weights_on(device: torch.device, in_size: int, out_size: int, in0: float, in1: float):
    first, w = _resample_weights(in_size, out_size, in0, in1)
    return first, _device_weights(device, in_size, out_size, in0, in1, w)


_weights_cache: dict[tuple, torch.Tensor] = {}
_weights_lock = threading.Lock()


def _device_weights(device, in_size, out_size, in0, in1, w: np.ndarray) -> torch.Tensor:
    import torch

    key = (str(device), in_size, out_size, in0, in1)
    with _weights_lock:
        t = _weights_cache.get(key)
        if t is None:
            if len(_weights_cache) > 1024:
                _weights_cache.clear()
            t = torch.from_numpy(w).to(device)
            _weights_cache[key] = t
    return t


def _round8(x: torch.Tensor) -> torch.Tensor:
    """Pillow's 8-bit output of a resampling pass: round half up, clip to 0..255."""
    import torch

    return torch.floor(x + 0.5).clamp_(0, 255)


def model_input(pixels: torch.Tensor, info: JpegInfo) -> torch.Tensor:
    """Full-resolution decoded pixels (H, W, 3) uint8 -> model input (224, 224, 3) uint8, on their device.

    The CPU path's steps in its order: draft reduction, EXIF orientation, short side to 256 and centre
    crop with Pillow's bilinear filter (horizontal pass, then vertical, each rounded to 8 bits).
    """
    import torch

    x = orient(_reduce(pixels, info.draft), info.orientation)  # (h, w, 3) float32, integer-valued
    h, w = int(x.shape[0]), int(x.shape[1])
    box = crop_box(w, h)
    if box is None:
        _, _, left, top = resized_geometry(w, h)
        out = x[top : top + INPUT_SIZE, left : left + INPUT_SIZE]
    else:
        x0, wx = _weights_on(x.device, w, INPUT_SIZE, box[0], box[2])  # (224, span_x)
        y0, wy = _weights_on(x.device, h, INPUT_SIZE, box[1], box[3])  # (224, span_y)
        src = x[y0 : y0 + wy.shape[1], x0 : x0 + wx.shape[1]].permute(2, 0, 1)  # (3, span_y, span_x)
        horizontal = _round8(torch.matmul(src, wx.T))  # (3, span_y, 224)
        out = _round8(torch.matmul(wy, horizontal)).permute(1, 2, 0)  # (224, 224, 3)
    return out.to(torch.uint8)
