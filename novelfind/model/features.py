"""Batched feature extraction (torchvision MobileNet-V2, IMAGENET1K_V1): the extractors and
``build_extractor``. The weights, their transforms and the model key are ``novelfind.model.weights``' record
(``MOBILENET_V2``); where the model runs is ``novelfind.base.devices``' choice.

The network is wrapped so that it takes the decoded pixels as they come from ``decode.read_for_model``:
uint8 (B, 224, 224, 3). The wrapper does the ImageNet normalisation and NHWC -> NCHW itself, so the
eager PyTorch path, the ONNX Runtime path and the CUDA path compute the same function.

Backends (model alone, 2-core CPU, images/s, idle machine; scripts/bench_extract.py):
  onnx   ONNX Runtime on a graph exported once (TorchScript exporter) and cached on disk: ~400.
         The default on CPU. (A graph from the dynamo exporter ran about 3x slower.)
  torch  eager PyTorch, channels_last: 80-100 (batch 8 or 32). The reference, and the fallback when
         onnxruntime is missing or its graph fails verification. torch.compile reached ~21 after ~70 s of
         compiling, so it is not offered.
  cuda   eager PyTorch in float16, channels_last, pinned host memory, cuDNN autotuning; it also takes
         a batch already on the GPU (JPEGs decoded there, ``extract/decoders/gpu.py``).
The CPU backends agree within ``BACKEND_TOLERANCE`` (checked when a graph is exported), so ``model_key``
does not name the backend. float16 on CUDA differs more: within ``CUDA_TOLERANCE`` per vector
(tests/model/test_cuda.py).

Every backend computes the 1280-d pooled vector, and that is what the cache keeps, one per photo, whatever
``--feature`` says: MobileNet-V2's classifier is linear at inference (Dropout is the identity), so the logits
are ``pooled @ W.T + b``, with W and b read once from the same verified weights file (``weights.Classifier``).
``model_key`` names what a stored vector holds (``weights.LAYOUT``), never the feature a scan ranks.
"""

from __future__ import annotations

import io
import logging
import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from novelfind.base import devices, dirs, extras
from novelfind.base.safe_text import display
from novelfind.errors import InputError, WeightsError
from novelfind.model.graph import keep_graph, kept_graph, reason_of
from novelfind.model.weights import (
    FEATURE_DIMS,
    MOBILENET_V2,
    POOLED_DIM,
    WEIGHTS_SHA256,
    Classifier,
    FormerKeys,
    former_keys,
    load_classifier,
    model_key_for,
    resolve_weights,
    top_classes,
)

# the side of the square the network takes: the weights' crop, which the decoders cut (media.decode)
INPUT_SIZE = MOBILENET_V2.transforms.crop_size

log = logging.getLogger(__name__)

# ONNX Runtime's telemetry: its Linux build writes a device id and a database of queued events (OS, paths)
# under ~/.cache/Microsoft/DeveloperTools/.onnxruntime/ as soon as it is imported, whatever
# disable_telemetry_events() says later. This variable, read when the library loads, stops both; it is
# set here, before anything can import onnxruntime through novelfind, and a value the user set is kept.
ORT_TELEMETRY_ENV = "ORT_DISABLE_TELEMETRY"
os.environ.setdefault(ORT_TELEMETRY_ENV, "1")

BACKENDS = ("auto", "torch", "onnx")

# Largest |fast - reference| accepted when an exported ONNX graph is checked against eager PyTorch (float32).
# Observed differences are ~1e-5 on logits (values of order 10); rankings are identical at this level.
BACKEND_TOLERANCE = 1e-3
# Largest relative L2 difference ||cuda - cpu|| / ||cpu|| of one vector, float16 on CUDA against float32 on
# the CPU (tests/model/test_cuda.py); float16 keeps ~3 significant digits, and the nearest other photo is
# typically tens of percent away, so cached vectors from either device can be mixed.
CUDA_TOLERANCE = 2e-2
ONNX_OPSET = 17
# Images per ONNX Runtime run; the caller's batch size only sets how many are committed together. Peak RSS
# of the model alone: 8 -> ~200 MB, 16 -> ~300 MB, 32 -> ~495 MB (two measurements agree). Throughput was
# 8 -> 140, 16 -> 113, 32 -> 107 img/s in a run whose machine load was not recorded (chunk 8 on an idle
# machine: the ~400 above), and within noise of each other at load average ~14: the choice rests on memory.
ONNX_CHUNK = 8
ONNX_GRAPH_VERSION = "1"  # bump when the wrapper below changes


class Extractor(Protocol):
    """uint8 (B, 224, 224, 3) pixels -> float32 (B, dim). The package's extractors also carry ``feature``
    and ``weights`` (the resolved file), which an engine running the model elsewhere ships to its workers,
    and what the cache needs (:class:`_Features`): ``encode`` (pixels -> the stored vector, ``stored_dim``
    long, under ``model_key``), ``head`` (stored vectors -> the feature; None when they are the feature)
    and ``former`` (:class:`FormerKeys`). An extractor without ``encode`` stores what it returns."""

    model_key: str
    dim: int

    def __call__(self, batch: np.ndarray) -> np.ndarray: ...


def _build_torch_net(weights: Path, *, pooled: bool = True):
    """The torchvision model with the pixel wrapper, eval mode, float32, on CPU: pooled vectors (what
    every extractor computes), or with ``pooled`` False the network's own logits (for checks)."""
    import torch
    import torchvision
    from torch import nn

    class PixelNet(nn.Module):
        """uint8 (B, H, W, 3) pixels -> float32 (B, dim) logits or pooled features."""

        def __init__(self, model: nn.Module, pooled: bool):
            super().__init__()
            self.features = model.features
            self.classifier = model.classifier
            self.pooled = pooled
            self.register_buffer("mean", torch.tensor(MOBILENET_V2.transforms.mean).view(1, 3, 1, 1) * 255.0)
            self.register_buffer("std", torch.tensor(MOBILENET_V2.transforms.std).view(1, 3, 1, 1) * 255.0)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.permute(0, 3, 1, 2).to(self.mean.dtype)  # (B, 3, H, W), channels_last in memory
            x = (x - self.mean) / self.std  # ImageNet normalisation of 0..255 values
            x = self.features(x)  # (B, 1280, 7, 7)
            x = nn.functional.adaptive_avg_pool2d(x, (1, 1))  # (B, 1280, 1, 1)
            x = torch.flatten(x, 1)  # (B, 1280); never squeeze: B may be 1
            if self.pooled:
                return x
            return self.classifier(x)  # (B, 1000)

    try:
        state = torch.load(str(weights), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001
        raise WeightsError(f"cannot load weights {weights}: {e}") from None
    model = torchvision.models.mobilenet_v2(weights=None)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise WeightsError(f"weights {weights} do not fit MobileNet-V2: {str(e).splitlines()[0]}") from None
    net = PixelNet(model, pooled=pooled).eval()
    for p in net.parameters():
        p.requires_grad_(False)
    return net


def _reference_batch(n: int = 8) -> np.ndarray:
    """Fixed check input: smooth gradients + noise, so activations look like images, not white noise."""
    rng = np.random.default_rng(12345)
    yy, xx = np.mgrid[0:INPUT_SIZE, 0:INPUT_SIZE].astype(np.float32) / INPUT_SIZE
    out = np.empty((n, INPUT_SIZE, INPUT_SIZE, 3), np.uint8)
    for i in range(n):
        base = np.stack(
            [xx * rng.uniform(0, 255), yy * rng.uniform(0, 255), (xx + yy) * rng.uniform(0, 127)], -1
        )
        noise = rng.normal(0, rng.uniform(2, 60), base.shape)
        out[i] = np.clip(base + noise, 0, 255).astype(np.uint8)
    return out


def export_onnx(net) -> bytes:
    """``net`` (the pixel wrapper) exported to ONNX with a dynamic batch axis, in memory: the exporter
    writes no file, so no name of a folder someone else may write is ever opened by it."""
    import torch

    example = torch.from_numpy(_reference_batch(2))
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The TorchScript exporter (dynamo=False) folds BatchNorm into the convolutions, keeps the weights
        # inside one file; ONNX Runtime ran its graph ~3x faster than the dynamo exporter's here.
        torch.onnx.export(
            net,
            (example,),
            buffer,
            input_names=["pixels"],
            output_names=["features"],
            dynamic_axes={"pixels": {0: "batch"}, "features": {0: "batch"}},
            opset_version=ONNX_OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    return buffer.getvalue()


def classes_of(extractor: Any, vectors: np.ndarray) -> list[list[tuple[str, float]]] | None:
    """What a few photos look like to the model: the most likely ImageNet classes of each row of
    ``vectors`` (K, dim), the feature ``extractor`` gives (``weights.top_classes``). The logits are the
    feature, or the pooled vector through the classifier (numpy, no torch: ~30 ms to read it once, then
    ~1 ms for 100 picks). None for an extractor that is not MobileNet-V2's (it has no classes)."""
    key, feature = str(getattr(extractor, "model_key", "")), getattr(extractor, "feature", None)
    weights = getattr(extractor, "weights", None)
    if not key.startswith("mobilenet_v2:") or weights is None or feature not in FEATURE_DIMS:
        return None
    vectors = np.asarray(vectors, dtype=np.float32)  # (K, dim)
    logits = vectors if feature == "logits" else load_classifier(Path(weights))(vectors)  # (K, 1000)
    return top_classes(logits)


def _in_background(load: Any) -> threading.Thread:
    """Run ``load`` (a model's loading) in a daemon thread, so that it overlaps what the scan does before
    the first batch (the decoders' start, the first reads). A failure there is dropped: it happens again
    at the first call, which reports it."""

    def run() -> None:
        try:
            load()
        except BaseException:  # noqa: BLE001, S110 - reported by the first call
            pass

    thread = threading.Thread(target=run, name="novelfind-model-load", daemon=True)
    thread.start()
    return thread


class _Features:
    """What the package's extractors share: the stored vector is the pooled one (``encode``), the feature
    asked for follows from it (``head``), and calling the extractor gives the feature."""

    feature: str
    weights: Path
    model_key: str
    dim: int
    stored_dim: int = POOLED_DIM
    former: FormerKeys

    def _kind(self) -> None:
        if self.feature not in FEATURE_DIMS:
            raise ValueError(f"feature must be one of {sorted(FEATURE_DIMS)}, got {self.feature!r}")
        self.model_key = model_key_for()
        self.dim = FEATURE_DIMS[self.feature]
        self.former = former_keys()

    @property
    def head(self) -> Classifier | None:
        """Stored (pooled) vectors -> the feature: the classifier for logits, None for pooled."""
        return load_classifier(self.weights) if self.feature == "logits" else None

    def encode(self, batch: Any) -> np.ndarray:
        """uint8 (B, 224, 224, 3) pixels -> float32 (B, 1280) pooled vectors, as the cache keeps them."""
        raise NotImplementedError

    def __call__(self, batch: Any) -> np.ndarray:
        """uint8 (B, 224, 224, 3) pixels -> float32 (B, dim): the feature asked for."""
        pooled = self.encode(batch)  # (B, 1280)
        head = self.head
        return pooled if head is None else head(pooled)  # (B, dim)


@dataclass
class TorchExtractor(_Features):
    """Eager PyTorch; on CUDA in float16 with channels_last and pinned host memory."""

    weights: Path
    feature: str = "logits"
    device: str = "cpu"
    threads: int | None = None
    model_key: str = ""
    dim: int = 0
    stored_dim: int = POOLED_DIM
    former: FormerKeys = field(default_factory=former_keys)
    _net: Any = field(default=None, repr=False)
    _pinned: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    backend: str = "torch"

    def __post_init__(self):
        self._kind()

    def _load(self):
        import torch

        with self._lock:
            if self._net is None:
                if self.device == "cpu" and self.threads:
                    torch.set_num_threads(self.threads)
                net = _build_torch_net(self.weights)
                if self.device.startswith("cuda"):
                    torch.backends.cudnn.benchmark = True  # fixed input size: let cuDNN pick kernels
                    # .half() converts the normalisation buffers too
                    net = net.to(self.device, memory_format=torch.channels_last).half()
                self._net = net
        return self._net

    def start_loading(self) -> threading.Thread:
        """Build the model (on its device) in the background; the first call waits for it."""
        return _in_background(self._load)

    def encode(self, batch: Any) -> np.ndarray:
        """uint8 (B, 224, 224, 3) pixels -> float32 (B, 1280) pooled vectors. ``batch`` is a numpy array, or
        a torch tensor (already on the device when the JPEGs were decoded on the GPU: no host round trip)."""
        import torch

        net = self._load()
        if isinstance(batch, torch.Tensor):
            _check_shape(batch.dtype == torch.uint8, batch.dtype, tuple(batch.shape))
            with torch.inference_mode():
                out = net(batch.to(self.device, non_blocking=True))  # (B, 1280)
                return out.float().cpu().numpy()
        batch = _check_batch(batch)
        with torch.inference_mode():
            x = torch.from_numpy(batch)  # (B, 224, 224, 3) uint8
            if self.device.startswith("cuda"):
                n = len(batch)
                if self._pinned is None or len(self._pinned) < n:
                    self._pinned = torch.empty(tuple(batch.shape), dtype=torch.uint8).pin_memory()
                staging = self._pinned[:n]
                staging.copy_(x)  # pageable -> pinned, then an asynchronous host-to-device copy
                x = staging.to(self.device, non_blocking=True)  # (B, 224, 224, 3) uint8 on the GPU
                out = net(x)  # (B, 1280) float16; uint8 -> fp16 happens on the device
                return out.float().cpu().numpy()  # the copy back synchronises
            return net(x).numpy().astype(np.float32, copy=False)  # (B, 1280)


@dataclass
class OnnxExtractor(_Features):
    """ONNX Runtime on the exported wrapper; verified against eager PyTorch when exported."""

    weights: Path
    feature: str = "logits"
    threads: int | None = None
    cache_dir: Path | None = None
    model_key: str = ""
    dim: int = 0
    stored_dim: int = POOLED_DIM
    former: FormerKeys = field(default_factory=former_keys)
    # the graph's bytes, given by a caller that checked them (a Ray node: the driver's): then nothing is
    # read from the model cache or exported
    graph: bytes | None = field(default=None, repr=False)
    _session: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    backend: str = "onnx"

    def __post_init__(self):
        self._kind()

    @property
    def onnx_path(self) -> Path:
        base = self.cache_dir or dirs.model_dir()
        name = f"mobilenet_v2-{WEIGHTS_SHA256[:16]}-pooled-opset{ONNX_OPSET}-g{ONNX_GRAPH_VERSION}.onnx"
        return base / name

    def _new_session(self, graph: bytes):
        ort = onnxruntime()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads or devices.available_cpus()
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # No busy-waiting between runs: decode workers need those cycles.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"])

    def _load(self):
        with self._lock:
            if self._session is None:
                self._session = self._prepare()
        return self._session

    def start_loading(self) -> threading.Thread:
        """Open the session in the background; the first call waits for it."""
        return _in_background(self._load)

    def _prepare(self):
        """A session on the kept graph when it checks out (:func:`kept_graph`), else on a graph exported
        here and verified against eager PyTorch, then kept (:func:`keep_graph`). RuntimeError when the
        graph can't be trusted. ONNX Runtime loads the checked bytes, never the file by name."""
        if self.graph is not None:  # given (a Ray node: the driver's checked bytes)
            return self._new_session(self.graph)
        path = self.onnx_path
        kept = kept_graph(path)
        if kept is not None:
            try:
                return self._new_session(kept)
            except Exception as e:  # noqa: BLE001 - a damaged cache file is rebuilt
                log.warning("re-exporting damaged ONNX model %s: %s", display(path), e)
        import torch

        net = _build_torch_net(self.weights)
        graph = export_onnx(net)
        session = self._new_session(graph)
        check = _reference_batch(8)
        got = session.run(None, {"pixels": check})[0]  # (8, 1280)
        with torch.inference_mode():
            want = net(torch.from_numpy(check)).numpy()  # (8, 1280)
        diff = float(np.max(np.abs(got - want)))
        if not np.isfinite(diff) or diff > BACKEND_TOLERANCE:
            raise RuntimeError(f"ONNX output differs from PyTorch by {diff:.2e} (> {BACKEND_TOLERANCE})")
        try:
            keep_graph(path, graph)
        except OSError as err:  # the run goes on with the graph in memory; the next one exports again
            log.warning(
                "cannot keep the exported model %s (%s); exported again next time",
                display(path),
                reason_of(err),
            )
        return session

    def encode(self, batch: np.ndarray) -> np.ndarray:
        """uint8 (B, 224, 224, 3) pixels -> float32 (B, 1280) pooled vectors."""
        session = self._load()
        batch = _check_batch(batch)
        out = np.empty((len(batch), self.stored_dim), np.float32)  # (B, 1280)
        for s in range(0, len(batch), ONNX_CHUNK):  # small runs: ~300 MB less memory than 32
            out[s : s + ONNX_CHUNK] = session.run(None, {"pixels": batch[s : s + ONNX_CHUNK]})[0]
        return out


class _FallbackExtractor(_Features):
    """ONNX first; on any failure to prepare it, warn once and use eager PyTorch (same model_key)."""

    def __init__(self, onnx: OnnxExtractor, torch_ex: TorchExtractor):
        self._onnx, self._torch = onnx, torch_ex
        self._active: Any = None
        self._lock = threading.Lock()
        self.feature, self.weights = onnx.feature, onnx.weights
        self._kind()

    @property
    def backend(self) -> str:
        return self._active.backend if self._active is not None else "auto"

    def _pick(self):
        with self._lock:
            if self._active is None:
                try:
                    self._onnx._load()
                    self._active = self._onnx
                except WeightsError:
                    raise
                except Exception as e:  # noqa: BLE001
                    warnings.warn(
                        f"ONNX Runtime unavailable ({e}); using PyTorch", RuntimeWarning, stacklevel=3
                    )
                    self._active = self._torch
        return self._active

    def start_loading(self) -> threading.Thread:
        """Pick and load the engine in the background; the first call waits for it."""
        return _in_background(lambda: self._pick()._load())

    def encode(self, batch: np.ndarray) -> np.ndarray:
        return self._pick().encode(batch)


def _check_batch(batch: np.ndarray) -> np.ndarray:
    batch = np.ascontiguousarray(batch)
    _check_shape(batch.dtype == np.uint8, batch.dtype, batch.shape)
    return batch


def _check_shape(is_uint8: bool, dtype: Any, shape: tuple) -> None:
    if not is_uint8 or len(shape) != 4 or tuple(shape[1:]) != (INPUT_SIZE, INPUT_SIZE, 3):
        raise ValueError(f"expected uint8 (B, {INPUT_SIZE}, {INPUT_SIZE}, 3), got {dtype} {tuple(shape)}")


def onnxruntime() -> Any:
    """The onnxruntime module, with its telemetry off (see ``ORT_TELEMETRY_ENV``) before any session."""
    os.environ.setdefault(ORT_TELEMETRY_ENV, "1")
    import onnxruntime as ort

    ort.disable_telemetry_events()
    return ort


def _onnxruntime_available() -> bool:
    return extras.installed("onnxruntime")


def build_extractor(
    *,
    feature: str = "logits",
    device: str = "auto",
    backend: str = "auto",
    weights: str | os.PathLike | None = None,
    threads: int | None = None,
    cache_dir: Path | None = None,
) -> Extractor:
    """An extractor for ``feature`` ('logits' 1000-d or 'pooled' 1280-d); the model is built on first call.
    Whatever the feature, what it stores (``encode``, under ``model_key``) is the pooled vector.

    device: auto (CUDA when available and the work large enough, ``AutoDeviceExtractor``) | cpu | cuda.
    backend: auto (ONNX Runtime on CPU when installed, falling back to PyTorch with a warning) | torch |
    onnx (CPU only, so ``auto`` means the CPU). Weights are resolved (and verified) here. Building one
    imports neither torch nor onnxruntime: ``auto`` asks for CUDA when the scan knows how many photos the
    model will see (none, on a re-scan with nothing new: then nothing is asked, nothing loaded).
    """
    if feature not in FEATURE_DIMS:
        raise ValueError(f"feature must be one of {sorted(FEATURE_DIMS)}, got {feature!r}")
    if device not in devices.DEVICES and not device.startswith("cuda:"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be auto, torch or onnx, got {backend!r}")
    path = resolve_weights(weights)
    if device == "auto" and backend != "onnx":
        cpu = build_extractor(
            feature=feature, device="cpu", backend=backend, weights=path, threads=threads, cache_dir=cache_dir
        )
        return AutoDeviceExtractor(cpu, TorchExtractor(path, feature, device="cuda"))
    if device == "auto":  # backend onnx: the CPU
        device = "cpu"
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise InputError("device 'cuda' requested but no CUDA device is available")
        if backend == "onnx":
            raise InputError("backend 'onnx' runs on CPU only; use backend 'torch' or 'auto' with CUDA")
        return TorchExtractor(path, feature, device=device)
    if backend == "torch":
        return TorchExtractor(path, feature, device="cpu", threads=threads)
    if backend == "onnx":
        if not _onnxruntime_available():
            raise InputError("backend 'onnx' needs the onnxruntime package (pip install onnxruntime)")
        return OnnxExtractor(path, feature, threads=threads, cache_dir=cache_dir)
    torch_ex = TorchExtractor(path, feature, device="cpu", threads=threads)
    if not _onnxruntime_available():
        warnings.warn(
            "onnxruntime is not installed; using PyTorch (slower on CPU)", RuntimeWarning, stacklevel=2
        )
        return torch_ex
    return _FallbackExtractor(OnnxExtractor(path, feature, threads=threads, cache_dir=cache_dir), torch_ex)


class AutoDeviceExtractor:
    """``--device auto``: the CPU extractor or the CUDA one, whichever the scan at hand makes faster. The
    pipeline calls :meth:`settle` with the number of photos the model will see once the cache has been
    asked (``devices.resolve_device``'s rule: too few for CUDA to pay, or none, settle on the CPU without
    asking torch whether there is CUDA); unsettled, it runs on CUDA when there is a CUDA device. Neither
    model is built before it is used; both give vectors under one ``model_key``, and what describes the
    vectors (key, lengths, the head that makes the feature from the stored vector) is the CPU one's."""

    def __init__(self, cpu: Extractor, cuda: Extractor):
        self._cpu, self._cuda = cpu, cuda
        self._chosen: Any = None
        self.model_key, self.dim = cpu.model_key, cpu.dim
        self.stored_dim = getattr(cpu, "stored_dim", cpu.dim)
        self.feature, self.weights = getattr(cpu, "feature", None), getattr(cpu, "weights", None)
        self.former = getattr(cpu, "former", None)

    @property
    def head(self) -> Classifier | None:
        return getattr(self._cpu, "head", None)

    def settle(self, photos: int | None) -> str:
        """Choose the device for a scan whose model will see ``photos`` photos (None: unknown); returns it."""
        if self._chosen is None:
            self._chosen = self._cuda if devices.resolve_device("auto", photos) != "cpu" else self._cpu
        return self.device

    @property
    def device(self) -> str:
        return str(getattr(self._current(), "device", "cpu"))

    @property
    def backend(self) -> str:
        return str(getattr(self._current(), "backend", "torch"))

    def start_loading(self) -> threading.Thread | None:
        """The chosen (unsettled: CUDA where there is CUDA) extractor's ``start_loading``."""
        start = getattr(self._current(), "start_loading", None)
        return start() if start is not None else None

    def _current(self) -> Any:
        """The chosen extractor; unsettled, the one an unknown amount of work would take (not kept)."""
        if self._chosen is not None:
            return self._chosen
        return self._cuda if devices.resolve_device("auto") != "cpu" else self._cpu

    def _model(self) -> Any:
        if self._chosen is None:
            self.settle(None)
        return self._chosen

    def encode(self, batch: Any) -> np.ndarray:
        """The stored vectors (``encode`` of the chosen extractor; what it returns, for one without)."""
        model = self._model()
        return getattr(model, "encode", model)(batch)

    def __call__(self, batch: Any) -> np.ndarray:
        return self._model()(batch)
