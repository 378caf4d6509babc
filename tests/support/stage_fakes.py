"""Stand-ins for the extraction stage's tests: files by stat, a cache in a dict, a model that gives each
image its mean colour, and a library of small photos with some broken ones."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class File:
    path: Path
    size: int
    mtime_ns: int


def stat(path: Path) -> File:
    st = path.stat()
    return File(path, st.st_size, st.st_mtime_ns)


class DictCache:
    """In-memory stand-in for FeatureCache: files (path -> size, mtime, digest), vectors by digest."""

    def __init__(self):
        self.files: dict[str, tuple[int, int, str]] = {}
        self.vectors: dict[str, np.ndarray] = {}
        self.dates: dict[str, tuple] = {}  # digest -> (taken, offset, source), stored with the vectors
        self.transactions: list[int] = []
        self.stat_calls = 0

    def get_many_by_stat(self, files):
        self.stat_calls += 1
        out = []
        for f in files:
            hit = self.files.get(str(f.path))
            ok = hit is not None and hit[:2] == (f.size, f.mtime_ns)
            out.append(self.vectors.get(hit[2]) if ok else None)
        return out

    def get_many_by_digest(self, digests):
        return [self.vectors.get(d) for d in digests]

    def known_digests(self):
        return frozenset(self.vectors)

    def put_many(self, rows):
        self.transactions.append(len(rows))
        for f, digest, vec in rows:
            self.files[str(f.path)] = (f.size, f.mtime_ns, digest)
            self.vectors[digest] = np.array(vec, np.float32)

    def put_dates(self, rows):
        self.dates.update((digest, (taken, offset, source)) for digest, taken, offset, source in rows)


class MeanColour:
    """Fake model: mean colour per channel plus a fixed random projection of a 4x4 thumbnail."""

    model_key = "fake-mean-colour"
    dim = 3 + 8

    def __init__(self, interrupt_on_call: int | None = None):
        self.calls = 0
        self.images = 0
        self.interrupt_on_call = interrupt_on_call
        self.proj = np.random.default_rng(0).normal(size=(4 * 4 * 3, 8)).astype(np.float32)

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        self.calls += 1
        if self.interrupt_on_call == self.calls:
            raise KeyboardInterrupt
        self.images += len(batch)
        x = batch.astype(np.float32) / 255.0  # (B, 224, 224, 3)
        mean = x.mean(axis=(1, 2))  # (B, 3)
        thumb = x.reshape(len(x), 4, 56, 4, 56, 3).mean(axis=(2, 4)).reshape(len(x), -1)  # (B, 48)
        return np.concatenate([mean, thumb @ self.proj], axis=1)  # (B, 11)


def make_library(root: Path, n: int, *, bad: tuple[int, ...] = ()) -> list[File]:
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        path = root / f"img_{i:03d}.png"
        if i in bad:
            path.write_bytes(b"not an image")
        else:
            rng = np.random.default_rng(i)
            colour = rng.integers(0, 256, 3)
            a = np.clip(colour + rng.normal(0, 10, (40, 50, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(a).save(path)
        out.append(stat(path))
    return out
