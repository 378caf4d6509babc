"""The Ray engine's worker side: what runs in a Ray actor (:class:`ExtractWorker`: decode with
``stage.decode_file``, the model on the batch), how the model's files reach a node (shipped by the
driver, checked by sha256, kept in a node-local folder) and the result rows that come back
(:class:`ResultBatch`). :mod:`novelfind.extract.engines.ray` is the driver's side; the cluster's needs and
faults are described there.
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
import tempfile
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from novelfind import __version__
from novelfind.base import atomic, door
from novelfind.media.dates import Taken
from novelfind.media.decode import INPUT_SIZE
from novelfind.media.video import ClipFrames, ClipInfo, info_from_text, info_to_text

NODE_DIR = "novelfind-ray"  # under the node's temp folder: the model files shipped by the driver


@dataclass
class ResultBatch:
    """Results for some of the paths given to ``RayEngine.run``; row i is about ``paths[positions[i]]``.

    A row is one of three cases, as with the local engine:

    - extracted: ``digests[i]`` is set and ``vectors[i]`` holds the model's output (``has_vector[i]``);
    - bytes already known: ``digests[i]`` is in the ``known`` set given to ``run``, no vector was made
      (the driver takes the vector from its cache by digest);
    - unreadable: ``digests[i]`` is None and ``reasons[i]`` says why, word for word what the local engine
      says.

    Vectors are as the model produced them, the pooled vectors the cache keeps (``stage.Stage`` makes
    the feature asked for from them): the driver applies the same finite-values check to them as to a
    local batch.
    """

    positions: np.ndarray  # int64 (B,): index into the paths given to run()
    digests: list[str | None]  # blake2b-128 hex of the file's bytes; None where unreadable
    vectors: np.ndarray  # float32 (B, 1280) pooled; zero rows where has_vector is False
    has_vector: np.ndarray  # bool (B,)
    reasons: list[str | None]  # why a file is unreadable; None elsewhere
    nodes: list[str]  # Ray node id of the worker that read each file
    taken: list[Taken | None]  # the capture date the worker's decode read; None where unreadable
    clips: list[ClipInfo | None]  # a clip's record (its frames, its moment) where a clip was read
    # (size, modification time in ns) of the file the worker read (``Decoded.seen``), for the driver to
    # check against the walk; None where not said (None for the whole batch: a worker that says none)
    seen: list[tuple[int, int] | None] | None = None

    def __len__(self) -> int:
        return len(self.positions)

    def items(self) -> Iterator[tuple[int, str | None, np.ndarray | None, str | None]]:
        """(position, digest, vector or None, reason or None) per row."""
        for i in range(len(self.positions)):
            vec = self.vectors[i] if self.has_vector[i] else None
            yield int(self.positions[i]), self.digests[i], vec, self.reasons[i]


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def node_dir() -> Path:
    """The node's folder for the shipped model files, this account's alone: ``NODE_DIR-UID`` in the temp
    folder, made 0700. One there that is not a folder of this account's alone (planted by another
    account, which could swap the weights between their check and their load) is passed over for a new
    private one (``mkdtemp``)."""
    base = Path(tempfile.gettempdir()) / f"{NODE_DIR}-{os.geteuid()}"
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(base)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
            return base
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix=f"{NODE_DIR}-"))


def _materialise(path: Path, data: bytes, sha256: str) -> Path:
    """Write ``data`` to ``path`` unless a file with that sha256 is already there; atomic."""
    try:
        if path.is_file() and sha256_of(atomic.read_limited(path, len(data))) == sha256:
            return path
    except OSError:
        pass
    if sha256_of(data) != sha256:
        raise RuntimeError(f"model bytes for {path.name} arrived damaged (sha256 mismatch)")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(path, data)
    return path


@dataclass(frozen=True)
class ModelSpec:
    """What a worker needs to build its extractor; the bytes travel as object refs."""

    feature: str
    device: str  # "cpu" or "cuda"
    onnx_ref: Any  # ObjectRef to the ONNX graph bytes (CPU workers)
    onnx_sha256: str
    weights_ref: Any  # ObjectRef to the .pth bytes (GPU workers)
    weights_sha256: str
    decode_threads: int
    # how the library's files are opened on the node: the scan's folders, below which no link is followed
    door_policy: door.Policy = door.Policy()


def _worker_extractor(spec: ModelSpec):
    """The extractor a worker runs: the package's own classes on node-local copies of the shipped files."""
    import ray

    from novelfind.model.features import OnnxExtractor, TorchExtractor
    from novelfind.model.weights import WEIGHTS_FILE

    weights = node_dir() / WEIGHTS_FILE
    if spec.device == "cuda":
        _materialise(weights, ray.get(spec.weights_ref), spec.weights_sha256)
        return TorchExtractor(weights, spec.feature, device="cuda")
    graph = ray.get(spec.onnx_ref)  # loaded from memory: no graph file on the node
    if sha256_of(graph) != spec.onnx_sha256:
        raise RuntimeError("model bytes for the ONNX graph arrived damaged (sha256 mismatch)")
    return OnnxExtractor(weights, spec.feature, threads=1, graph=graph)


class ExtractWorker:
    """Ray Data callable class: {pos, path} batch -> {pos, digest, vector, has_vector, reason, node,
    taken, offset, source} (the last three: the capture date its decode read)."""

    def __init__(self, spec: ModelSpec, known_ref: Any, driver_version: str):
        import ray

        if driver_version != __version__:
            raise RuntimeError(
                f"novelfind {__version__} on this node, {driver_version} on the driver: "
                "install the same version on every node"
            )
        door.use_policy(spec.door_policy)
        self.extractor = _worker_extractor(spec)
        self.dim = int(self.extractor.stored_dim)  # the stored vector (pooled), whatever the feature
        self.known: Collection[str] = (
            ray.get(known_ref) if isinstance(known_ref, ray.ObjectRef) else known_ref
        )
        self.node = ray.get_runtime_context().get_node_id()
        self.pool = ThreadPoolExecutor(spec.decode_threads) if spec.decode_threads > 1 else None

    def _read(self, raw: bytes):
        from novelfind.extract.stage import decode_file

        return decode_file(os.fsdecode(raw), self.known)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raw_paths = list(batch["path"])
        read = self.pool.map(self._read, raw_paths) if self.pool is not None else map(self._read, raw_paths)
        n = len(raw_paths)
        digests, reasons, sources, clips = [b""] * n, [b""] * n, [b""] * n, [b""] * n
        taken, offsets = np.full(n, np.nan), np.full(n, np.nan)  # float64 (B,): the dates, b"" source: none
        seen = np.full((n, 2), -1, np.int64)  # (size, mtime_ns) of the file each row read; -1: not said
        vectors = np.zeros((n, self.dim), np.float32)  # (B, dim)
        has_vector = np.zeros(n, bool)
        todo: list[int] = []
        pixels: list[np.ndarray] = []
        for i, decoded in enumerate(read):
            if decoded.digest is None:
                reasons[i] = os.fsencode(decoded.reason)  # a reason may quote a file name: keep its bytes
            else:
                digests[i] = decoded.digest.encode("ascii")
                if decoded.seen is not None:
                    seen[i] = decoded.seen
                if decoded.taken is not None:
                    taken[i], sources[i] = decoded.taken.seconds, decoded.taken.source.encode("ascii")
                    offsets[i] = np.nan if decoded.taken.offset is None else decoded.taken.offset
                if isinstance(decoded.pixels, ClipFrames):  # its frames: a batch of their own, one vector
                    vectors[i], info = decoded.pixels.vector(self.extractor.encode)
                    has_vector[i], clips[i] = True, info_to_text(info).encode("utf-8")
                elif decoded.pixels is not None:
                    todo.append(i)
                    pixels.append(decoded.pixels)
        if todo:
            stacked = np.stack(pixels)  # (B', 224, 224, 3) uint8
            assert stacked.shape[1:] == (INPUT_SIZE, INPUT_SIZE, 3)
            vectors[todo] = np.asarray(self.extractor.encode(stacked), dtype=np.float32)  # (B', dim)
            has_vector[todo] = True
        return {
            "pos": np.asarray(batch["pos"], np.int64),
            "digest": np.array(digests, dtype=object),
            "vector": vectors,
            "has_vector": has_vector,
            "reason": np.array(reasons, dtype=object),
            "node": np.array([self.node.encode("ascii")] * n, dtype=object),
            "taken": taken,
            "offset": offsets,
            "source": np.array(sources, dtype=object),
            "clip": np.array(clips, dtype=object),
            "seen_size": seen[:, 0],
            "seen_mtime": seen[:, 1],
        }


def subset(batch: ResultBatch, keep: np.ndarray) -> ResultBatch:
    idx = np.flatnonzero(keep)
    return ResultBatch(
        positions=batch.positions[idx],
        digests=[batch.digests[i] for i in idx],
        vectors=batch.vectors[idx],
        has_vector=batch.has_vector[idx],
        reasons=[batch.reasons[i] for i in idx],
        nodes=[batch.nodes[i] for i in idx],
        taken=[batch.taken[i] for i in idx],
        clips=[batch.clips[i] for i in idx],
        seen=None if batch.seen is None else [batch.seen[i] for i in idx],
    )


def to_result(block: dict[str, np.ndarray]) -> ResultBatch:
    digests = [bytes(d).decode("ascii") or None for d in block["digest"]]
    reasons = [os.fsdecode(bytes(r)) or None for r in block["reason"]]
    vectors = np.asarray(block["vector"], dtype=np.float32)
    return ResultBatch(
        positions=np.asarray(block["pos"], np.int64),
        digests=digests,
        vectors=vectors.reshape(len(digests), -1),
        has_vector=np.asarray(block["has_vector"], bool),
        reasons=[r if d is None else None for d, r in zip(digests, reasons, strict=True)],
        nodes=[bytes(n).decode("ascii") for n in block["node"]],
        taken=[
            _taken(float(t), float(o), bytes(s).decode("ascii"))
            for t, o, s in zip(block["taken"], block["offset"], block["source"], strict=True)
        ],
        clips=[info_from_text(bytes(c).decode("utf-8")) if len(c) else None for c in block["clip"]],
        seen=_seen(block),
    )


def _seen(block: dict[str, np.ndarray]) -> list[tuple[int, int] | None] | None:
    """The (size, mtime_ns) of the file each row's bytes came from (-1: not said); None without them."""
    if "seen_size" not in block:
        return None
    pairs = zip(block["seen_size"], block["seen_mtime"], strict=True)
    return [None if size < 0 else (int(size), int(mtime)) for size, mtime in pairs]


def _taken(seconds: float, offset: float, source: str) -> Taken | None:
    """A row's date as the worker's decode read it; None where none was read (source empty)."""
    if not source:
        return None
    return Taken(seconds, source, None if math.isnan(offset) else int(offset))
