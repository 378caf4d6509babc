"""Stand-ins for the GPU decoder's tests on a machine without one: Pillow in nvImageCodec's place, a model
that takes numpy or tensor batches, and a cache that remembers nothing."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image


class PillowBackend:
    """Stands in for nvImageCodec: Pillow's full-resolution decode, orientation not applied.

    ``reject``: bytes it returns None for; ``explode``: bytes that make the whole call raise.
    """

    def __init__(self, reject=(), explode=(), grey_as_one_channel=True):
        self.device = torch.device("cpu")
        self.reject = set(reject)
        self.explode = set(explode)
        self.grey_as_one_channel = grey_as_one_channel
        self.calls: list[list[bytes]] = []

    def decode(self, datas):
        self.calls.append(list(datas))
        if any(d in self.explode for d in datas):
            raise RuntimeError("device error")
        out = []
        for d in datas:
            if d in self.reject:
                out.append(None)
                continue
            with Image.open(io.BytesIO(d)) as img:
                img.load()
                if img.mode == "L" and self.grey_as_one_channel:
                    arr = np.asarray(img)[..., None]
                else:
                    arr = np.asarray(img.convert("RGB"))
            out.append(torch.from_numpy(arr.copy()))
        return out


class TensorFake:
    """A fake model that takes numpy or tensor batches: 8x8 colour cells, like conftest's FakeExtractor."""

    model_key = "fake-cells"
    dim = 8 * 8 * 3
    device = "cpu"

    def __init__(self):
        self.kinds: list[type] = []

    def __call__(self, batch):
        self.kinds.append(type(batch))
        b = (batch.numpy() if isinstance(batch, torch.Tensor) else batch).astype(np.float32) / 255.0
        return b.reshape(len(b), 8, 28, 8, 28, 3).mean(axis=(2, 4)).reshape(len(b), -1)


class MemoryCache:
    def __init__(self):
        self.rows = {}

    def get_many_by_stat(self, files):
        return [None] * len(files)

    def get_many_by_digest(self, digests):
        return [None] * len(digests)

    def known_digests(self):
        return frozenset()

    def put_many(self, rows):
        for f, digest, vec in rows:
            self.rows[f.path] = (digest, vec)

    def put_dates(self, rows):
        pass
