"""Features of the quality sets, cached as .npz under ``sources.data_dir()/features-v1``.

One forward pass of MobileNet-V2 (the shipped weights and preprocessing) gives every feature kind:

- ``logits`` (1000) and ``pooled`` (1280): what novelfind ships; checked against the shipped extractor
  (``novelfind.model.features.build_extractor``) on the first batch of every run.
- ``mid`` (752): mean and standard deviation over positions of the outputs of inverted-residual blocks
  3, 6, 10, 13 and 16 (24, 32, 64, 96 and 160 channels at strides 4, 8, 16, 16 and 32): mid-level
  texture statistics that the classifier head throws away. Prototype for the ranking research.

The multi-output network is exported to ONNX once and run with ONNX Runtime (several times faster
than eager PyTorch on CPU).
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

from . import sets, sources

MID_BLOCKS = (3, 6, 10, 13, 16)
FEATURE_VERSION = "features-v1"
_SESSION = None


def _net():
    import torch
    import torchvision
    from torch import nn

    from novelfind.model.weights import MOBILENET_V2, resolve_weights

    class MultiNet(nn.Module):
        """uint8 (B, 224, 224, 3) -> logits (B, 1000), pooled (B, 1280), mid (B, 752)."""

        def __init__(self, model: nn.Module):
            super().__init__()
            self.features = model.features
            self.classifier = model.classifier
            self.register_buffer("mean", torch.tensor(MOBILENET_V2.transforms.mean).view(1, 3, 1, 1) * 255.0)
            self.register_buffer("std", torch.tensor(MOBILENET_V2.transforms.std).view(1, 3, 1, 1) * 255.0)

        def forward(self, x):
            x = x.permute(0, 3, 1, 2).to(self.mean.dtype)
            x = (x - self.mean) / self.std
            mids = []
            for i, layer in enumerate(self.features):
                x = layer(x)
                if i in MID_BLOCKS:
                    mids.append(x.mean(dim=(2, 3)))  # (B, C)
                    mids.append(x.std(dim=(2, 3)))  # (B, C)
            pooled = torch.flatten(nn.functional.adaptive_avg_pool2d(x, (1, 1)), 1)  # (B, 1280)
            return self.classifier(pooled), pooled, torch.cat(mids, 1)

    model = torchvision.models.mobilenet_v2(weights=None)
    model.load_state_dict(torch.load(str(resolve_weights()), map_location="cpu", weights_only=True))
    net = MultiNet(model).eval()
    for p in net.parameters():
        p.requires_grad_(False)
    return net


def model_path() -> Path:
    from novelfind.model.weights import WEIGHTS_SHA256

    tag = hashlib.sha1(f"{WEIGHTS_SHA256}-{MID_BLOCKS}-v1".encode()).hexdigest()[:10]
    return sources.data_dir() / "models" / f"mobilenet-multi-{tag}.onnx"


def session():
    """ONNX Runtime session of the multi-output network (exported on first use)."""
    global _SESSION
    if _SESSION is not None:
        return _SESSION
    import onnxruntime as ort
    import torch

    path = model_path()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.onnx.export(
            _net(),
            (torch.zeros(2, 224, 224, 3, dtype=torch.uint8),),
            str(tmp),
            input_names=["pixels"],
            output_names=["logits", "pooled", "mid"],
            dynamic_axes={k: {0: "batch"} for k in ("pixels", "logits", "pooled", "mid")},
            opset_version=17,
            do_constant_folding=True,
            dynamo=False,
        )
        os.replace(tmp, path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(os.environ.get("NOVELFIND_BENCH_THREADS", "1"))
    _SESSION = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return _SESSION


def _check_against_shipped(pix: np.ndarray, logits: np.ndarray, pooled: np.ndarray) -> None:
    """The logits and pooled features must be the shipped extractor's (within float tolerance)."""
    from novelfind.model.features import build_extractor

    for kind, mine in (("logits", logits), ("pooled", pooled)):
        ref = build_extractor(feature=kind, device="cpu")(pix)
        err = float(np.abs(ref - mine).max() / max(np.abs(ref).max(), 1e-6))
        if err > 2e-3:
            raise RuntimeError(f"{kind} differ from the shipped extractor (relative error {err:.2e})")


def cache_key() -> str:
    from novelfind.model.weights import PREPROCESS_VERSION

    for p in sources.POOLS:  # pool indexes must exist for the fingerprint
        sources.pool(p)
    return hashlib.sha1(
        f"{FEATURE_VERSION}-{model_path().name}-{PREPROCESS_VERSION}-{sets.VERSION}-{sources.fingerprint()}".encode()
    ).hexdigest()[:10]


_WORKER_SET: sets.LabelledSet | None = None


def _pixels(s: sets.LabelledSet, idx: range) -> np.ndarray:
    from novelfind.media.decode import to_model_input

    pix = []
    for i in idx:
        with Image.open(io.BytesIO(s.jpeg(i))) as im:
            pix.append(to_model_input(im.convert("RGB")))
    return np.stack(pix)  # (B, 224, 224, 3) uint8


def _worker_pixels(idx: range) -> np.ndarray:
    return _pixels(_WORKER_SET, idx)


def _batches(s: sets.LabelledSet, batch: int, procs: int, first: int = 0, end: int | None = None):
    """Model input batches of pictures ``first:end``; rendered by ``procs`` forked workers when procs > 1."""
    end = len(s) if end is None else end
    ranges = [range(b, min(end, b + batch)) for b in range(first, end, batch)]
    if procs <= 1:
        for r in ranges:
            yield _pixels(s, r)
        return
    import multiprocessing as mp

    global _WORKER_SET
    _WORKER_SET = s
    with mp.get_context("fork").Pool(procs) as pool:
        yield from pool.imap(_worker_pixels, ranges, chunksize=1)


class _CudaNet:
    """The same network in eager PyTorch on a GPU (float32), for machines that have one."""

    def __init__(self):
        import torch

        self.torch = torch
        self.cpu = _net()
        self.net = _net().to("cuda")
        self.checked = False

    def run(self, _names, feeds):
        with self.torch.inference_mode():
            x = self.torch.from_numpy(feeds["pixels"])
            out = [t.float().cpu().numpy() for t in self.net(x.to("cuda"))]
            if not self.checked:  # the GPU must agree with the CPU network (checked against the shipped one)
                ref = [t.numpy() for t in self.cpu(x[:4])]
                for a, b in zip(out, ref, strict=False):
                    err = float(np.abs(a[:4] - b).max() / max(np.abs(b).max(), 1e-6))
                    if err > 2e-3:
                        raise RuntimeError(f"GPU features differ from CPU ones (relative error {err:.2e})")
                self.checked = True
            return out


CHUNK = 2048  # pictures per saved part: an interrupted extraction resumes from the last finished part


def _save(path: Path, arrays: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def features(name: str, seed: int, batch: int = 64, verbose: bool = True) -> dict[str, np.ndarray]:
    """Features and labels of set ``name`` drawn with ``seed`` (computed once, then read from disk).

    On a machine with CUDA the network runs on the GPU and the pictures are rendered by one worker
    process per CPU; otherwise ONNX Runtime on the CPU renders and infers in turn. Work is saved in
    parts of ``CHUNK`` pictures (next to the final file), so a killed run loses at most one part.
    """
    path = sources.data_dir() / FEATURE_VERSION / f"{name}-s{seed}-{cache_key()}.npz"
    if path.is_file():
        z = np.load(path)
        return {k: z[k] for k in z.files}
    s = sets.build(name, seed)
    import torch

    cuda = torch.cuda.is_available()
    sess = None
    procs = (os.cpu_count() or 1) if cuda else 1
    kinds = ("logits", "pooled", "mid")
    parts_dir = path.with_name(path.stem + ".parts")
    parts: list[dict[str, np.ndarray]] = []
    t0 = time.time()
    done_here = 0
    checked = cuda  # the CPU check builds the shipped extractor; on a GPU box it is checked separately
    for first in range(0, len(s), CHUNK):
        end = min(len(s), first + CHUNK)
        part = parts_dir / f"{first:07d}-{end:07d}.npz"
        if part.is_file():
            z = np.load(part)
            parts.append({k: z[k] for k in kinds})
            continue
        if sess is None:
            sess = _CudaNet() if cuda else session()
        out: dict[str, list[np.ndarray]] = {k: [] for k in kinds}
        for x in _batches(s, batch, procs, first, end):
            lo, po, mi = sess.run(None, {"pixels": x})
            if not checked:
                _check_against_shipped(x[:8], lo[:8], po[:8])
                checked = True
            out["logits"].append(lo)
            out["pooled"].append(po)
            out["mid"].append(mi)
        arrays = {k: np.concatenate(v).astype(np.float32) for k, v in out.items()}
        if end < len(s) or first > 0:
            _save(part, arrays)
        parts.append(arrays)
        done_here += end - first
        if verbose and end < len(s):
            rate = done_here / (time.time() - t0)
            print(f"  {name} s{seed}: {end}/{len(s)} ({rate:.1f}/s)", file=sys.stderr, flush=True)
    res = {k: np.concatenate([p[k] for p in parts]) for k in kinds}
    res["labels"] = s.labels
    res["groups"] = s.groups
    _save(path, res)
    if parts_dir.is_dir():
        for f in parts_dir.glob("*.npz"):
            f.unlink()
        parts_dir.rmdir()
    if verbose:
        print(f"{name} s{seed}: N={len(s)} K={s.k} {time.time() - t0:.0f}s", file=sys.stderr)
    return res
