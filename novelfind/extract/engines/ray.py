"""Extraction on a Ray cluster: decode and MobileNet-V2 in Ray workers, vectors streamed back in batches.

The driver (the process running the scan) walks the library and looks every file up in its cache exactly
as with the local engine; only the files the cache lacks are handed to ``RayEngine.run``. Ray Data runs
them through a pool of actors (``map_batches`` with a callable class that holds the model), each actor
reads its files, decodes them with ``stage.decode_file`` (the local engine's own function, so an
unreadable file gets the same reason) and runs the model on the batch. Results stream back to the
driver block by block (``iter_batches``), so the driver can commit every batch to its cache as it
arrives: one writer, and no SQLite over a network file system.

What the cluster needs:

- **Ray and novelfind on every node**, the same novelfind version as the driver (``pip install
  'novelfind[ray]'``). A worker whose version differs refuses to start, with both versions in the error.
- **The photos at the same path on every node**: a worker opens the very path the driver walked
  (``/mnt/archive/2019/IMG_0001.jpg``), so mount the library at one path everywhere.
- **Not the model**: the driver resolves and verifies the weights, exports and verifies the ONNX graph
  (as the local engine does) and puts the bytes in Ray's object store. Each node fetches them once
  (about 14 MB), writes them to a node-local folder of the account's alone
  (``<tmp>/novelfind-ray-UID/``, 0700) and checks their sha256, so nodes do not need the user's cache
  folder or any download.

Workers: on a cluster without GPUs, one actor per CPU, ONNX Runtime on one thread (decode and model
alternate in the actor; decoding dominates). On a cluster with GPUs (``device="auto"``), one actor per
GPU running eager PyTorch in float16, decoding its batch on the CPUs that come with that GPU (threads:
Pillow releases the GIL while decoding). float16 on a GPU differs from the CPU vectors by about 1e-2, as
with the local engine on CUDA.

Faults: Ray Data restarts an actor lost with its node and retries its work elsewhere; on top of that the
engine remembers which files it has yielded, and files still missing after a failed or short round are
submitted again (``MAX_ROUNDS``). Every file is yielded exactly once. A cluster that cannot be reached is a
``ClusterError`` within bounded time (a TCP probe, then Ray's own connection with its retries bounded:
``ray_connect``), never a hang; so is a cluster that stops producing results for ``stall_timeout``
seconds (all its workers lost).
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from novelfind import __version__
from novelfind.base import atomic, door
from novelfind.cache import DigestSet
from novelfind.errors import ClusterError
from novelfind.extract.engines.ray_actors import (
    ExtractWorker,
    ModelSpec,
    ResultBatch,
    sha256_of,
    subset,
    to_result,
)
from novelfind.extract.engines.ray_connect import (
    CONNECT_TIMEOUT_S,
    RAY_CONNECT_ATTEMPTS,
    RAY_CONNECT_ENV,
    RAY_LOG_LEVEL_ENV,
    _bounded_ray_connect,
    _first_line,
    _is_system_failure,
    _probe,
    _quiet_data_context,
    _ray_env,
    _stderr_held,
    _user_error,
)
from novelfind.media.decode import INPUT_SIZE

INSTALL_HINT = "pip install 'novelfind[ray]'"
STALL_TIMEOUT_S = 600.0  # no result for this long: the cluster has lost its workers (or never had any)
MAX_ROUNDS = 3  # submissions of the files still missing after a failed round
MODEL_MAX_BYTES = 1 << 30  # a weights or ONNX file shipped to the workers
MAX_BLOCKS = 20_000  # input blocks per run; more files per block above 20,000 x batch_size files


# --------------------------------------------------------------------------- the engine


class RayEngine:
    """Decode + MobileNet-V2 for a list of files on a Ray cluster; results stream back per batch.

    ``address``: None starts a Ray instance on this machine (and stops it on ``close``); ``"auto"``
    joins the cluster this machine is part of (``ray start`` was run here); ``"HOST:PORT"`` (the head's
    GCS port, 6379 by default) or ``"ray://HOST:PORT"`` (Ray Client) join a remote cluster. When Ray is
    already initialised in this process (the caller ran ``ray.init``), that connection is used.

    ``device``: ``"auto"`` uses GPU workers when the cluster has GPUs, else CPU workers; ``"cpu"`` or
    ``"cuda"`` force one kind. ``weights`` as for the local engine (None: the usual search). ``batch_size``:
    files per model call in a worker. ``stall_timeout``: seconds without any result before the run is
    given up (the cluster lost all its workers).

    Use as a context manager, or call ``close``. ``connect`` is called by ``run`` when needed; call it
    first to fail early. Raises ``ClusterError`` (Ray not installed, cluster unreachable, no workers,
    workers that keep failing), ``WeightsError`` (weights missing), ``ValueError`` (bad arguments).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        feature: str = "logits",
        device: str = "auto",
        weights: str | os.PathLike | None = None,
        batch_size: int = 32,
        connect_timeout: float = CONNECT_TIMEOUT_S,
        stall_timeout: float = STALL_TIMEOUT_S,
        model_cache_dir: Path | None = None,
    ):
        from novelfind.model.weights import FEATURE_DIMS, POOLED_DIM, model_key_for

        if feature not in FEATURE_DIMS:
            raise ValueError(f"feature must be one of {sorted(FEATURE_DIMS)}, got {feature!r}")
        if device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if connect_timeout <= 0 or stall_timeout <= 0:
            raise ValueError(f"timeouts must be > 0, got {connect_timeout} and {stall_timeout}")
        self.address = address
        self.feature = feature
        self.device = device
        self.weights = weights
        self.batch_size = batch_size
        self.connect_timeout = connect_timeout
        self.stall_timeout = stall_timeout
        self.model_cache_dir = model_cache_dir
        self.model_key = model_key_for()  # the workers make the stored (pooled) vector for every feature
        self.dim = POOLED_DIM
        self._ray: Any = None
        self._owns_ray = False
        self._spec: ModelSpec | None = None
        self._pool: tuple[int, float, float] | None = None  # (actors, CPUs each, GPUs each)

    # -- connection ----------------------------------------------------------------------------

    def connect(self) -> None:
        """Join (or start) the Ray cluster. ClusterError within bounded time when that fails."""
        if self._ray is not None:
            return
        joining = self.address not in (None, "", "local")
        added = []
        if joining and "ray" not in sys.modules:
            added = [name for name in RAY_CONNECT_ENV if name not in os.environ]
            os.environ.update({name: RAY_CONNECT_ENV[name] for name in added})
        try:
            import ray
            import ray.data  # noqa: F401 - the extra installs both; fail here, not in the middle of a run
        except ImportError as err:
            raise ClusterError(f"the Ray engine needs Ray ({err.name} is missing): {INSTALL_HINT}") from None
        finally:
            for name in added:  # read by Ray on import; not left for this process's children
                os.environ.pop(name, None)
        if ray.is_initialized():
            self._ray, self._owns_ray = ray, False
            return
        address = self.address
        kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
        try:
            if not joining:
                from novelfind.base.devices import available_cpus

                with _ray_env(RAY_LOG_LEVEL_ENV), _stderr_held():
                    ray.init(num_cpus=available_cpus(), include_dashboard=False, **kwargs)
            else:
                if address != "auto":
                    _probe(address, self.connect_timeout)
                with _bounded_ray_connect(RAY_CONNECT_ATTEMPTS), _ray_env(RAY_LOG_LEVEL_ENV), _stderr_held():
                    ray.init(address=address, **kwargs)
        except ClusterError:
            raise
        except ConnectionError:  # something listens at the address, but no Ray head answered
            # (Ray's own message names the address its node resolved, which need not be the one given)
            where = f" at {address}" if address else ""
            raise ClusterError(
                f"cannot connect to the Ray cluster{where}: no Ray head answered there (is it the head's "
                "GCS port, 6379 by default?)"
            ) from None
        except Exception as err:  # noqa: BLE001 - RuntimeError, ValueError from ray.init
            where = f" at {address}" if address else ""
            raise ClusterError(f"cannot connect to the Ray cluster{where}: {_first_line(err)}") from None
        self._ray, self._owns_ray = ray, True

    def close(self) -> None:
        """Drop the model refs; stop the Ray instance if this engine started or joined it."""
        self._spec = None
        self._pool = None
        if self._ray is not None and self._owns_ray:
            self._ray.shutdown()
        self._ray = None

    def __enter__(self) -> RayEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def resources(self) -> dict[str, float]:
        """CPUs and GPUs the cluster has now: {"CPU": ..., "GPU": ..., "nodes": ...}."""
        self.connect()
        ray = self._ray
        total = ray.cluster_resources()
        alive = [n for n in ray.nodes() if n.get("Alive")]
        return {"CPU": float(total.get("CPU", 0)), "GPU": float(total.get("GPU", 0)), "nodes": len(alive)}

    # -- preparation ---------------------------------------------------------------------------

    def _plan(self) -> tuple[str, int, float, float]:
        """(device, actors, CPUs per actor, GPUs per actor) from the cluster's resources."""
        ray = self._ray
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        cpus = sum(float(n["Resources"].get("CPU", 0)) for n in nodes)
        gpu_nodes = [n for n in nodes if float(n["Resources"].get("GPU", 0)) >= 1]
        gpus = sum(int(float(n["Resources"]["GPU"])) for n in gpu_nodes)
        if self.device == "cuda" or (self.device == "auto" and gpus):
            if not gpus:
                raise ClusterError("device cuda requested but the Ray cluster has no GPU")
            # decode threads per GPU actor: the CPUs of the poorest GPU node, shared among its GPUs
            per = min(float(n["Resources"].get("CPU", 0)) / float(n["Resources"]["GPU"]) for n in gpu_nodes)
            return "cuda", gpus, max(1.0, float(int(per))), 1.0
        if cpus < 1:
            raise ClusterError("the Ray cluster has no CPU for workers (is every worker node down?)")
        return "cpu", int(cpus), 1.0, 0.0

    def _prepare(self) -> ModelSpec:
        """Verify the weights, export + verify the ONNX graph here, and put the bytes in the object store."""
        if self._spec is not None:
            return self._spec
        from novelfind.model.features import OnnxExtractor
        from novelfind.model.graph import kept_graph
        from novelfind.model.weights import resolve_weights, sha256_file

        ray = self._ray
        device, actors, cpus, gpus = self._plan()
        weights = resolve_weights(self.weights)  # WeightsError with the usual advice
        weights_bytes = atomic.read_limited(weights, MODEL_MAX_BYTES, follow_link=True)
        onnx_ref, onnx_sha = None, ""
        if device == "cpu":
            local = OnnxExtractor(weights, self.feature, cache_dir=self.model_cache_dir)
            local(np.zeros((1, INPUT_SIZE, INPUT_SIZE, 3), np.uint8))  # exports and verifies the graph once
            onnx_bytes = kept_graph(local.onnx_path)  # read back checked, as a local run loads it
            if onnx_bytes is None:
                raise ClusterError(
                    f"the exported model {local.onnx_path} could not be kept to send to the nodes"
                )
            onnx_ref, onnx_sha = ray.put(onnx_bytes), sha256_of(onnx_bytes)
        self._spec = ModelSpec(
            feature=self.feature,
            device=device,
            onnx_ref=onnx_ref,
            onnx_sha256=onnx_sha,
            weights_ref=ray.put(weights_bytes) if device == "cuda" else None,
            weights_sha256=sha256_file(weights),
            decode_threads=int(cpus) if device == "cuda" else 1,
            door_policy=door.policy(),
        )
        self._pool = (actors, cpus, gpus)
        return self._spec

    # -- running -------------------------------------------------------------------------------

    def run(
        self, paths: Sequence[str | os.PathLike[str]], known: Collection[str] = frozenset()
    ) -> Iterator[ResultBatch]:
        """Decode and featurise ``paths`` on the cluster; yield ``ResultBatch`` es as they arrive.

        Every position 0..len(paths)-1 is yielded exactly once, in no particular order. ``known``: digests
        whose vectors the driver already has (moved or renamed files): such files are hashed, not
        decoded. Stopping the iteration early (or Ctrl-C) stops the run; what was yielded is final.
        """
        self.connect()
        spec = self._prepare()
        raw = [os.fsencode(os.fspath(p)) for p in paths]
        missing = np.ones(len(raw), bool)
        compact = known if isinstance(known, (frozenset, DigestSet)) else frozenset(known)
        known_ref = self._ray.put(compact)  # one copy in the object store, read by every worker
        last_error: BaseException | None = None
        for _ in range(MAX_ROUNDS):
            todo = np.flatnonzero(missing)
            if len(todo) == 0:
                return
            try:
                for batch in self._round(todo, raw, spec, known_ref):
                    fresh = missing[batch.positions]
                    if not fresh.all():  # a retried block may repeat files already yielded
                        batch = subset(batch, fresh)
                    if len(batch):
                        missing[batch.positions] = False
                        yield batch
            except ClusterError:
                raise
            except Exception as err:  # noqa: BLE001 - classified below
                if not _is_system_failure(err):
                    raise ClusterError(f"the Ray workers failed: {_user_error(err)}") from None
                last_error = err
                self._spec, self._pool = None, None  # re-plan on what is left of the cluster
                try:
                    spec = self._prepare()
                except ClusterError:
                    raise
                except Exception as again:  # noqa: BLE001 - the connection itself is gone
                    raise ClusterError(f"lost the Ray cluster: {_first_line(again)}") from None
        left = int(missing.sum())
        if left:
            reason = f": {_first_line(last_error)}" if last_error is not None else ""
            raise ClusterError(f"{left} files were not extracted after {MAX_ROUNDS} attempts{reason}")

    def _round(self, todo: np.ndarray, raw: list[bytes], spec: ModelSpec, known_ref: Any):
        """One Ray Data run over the positions ``todo``, pumped through a queue with a stall watchdog."""
        import pyarrow as pa
        import ray.data

        actors, cpus, gpus = self._pool or (1, 1.0, 0.0)
        per_block = max(self.batch_size, -(-len(todo) // MAX_BLOCKS))
        tables = [
            pa.table(
                {
                    "pos": pa.array(todo[s : s + per_block], pa.int64()),
                    "path": pa.array([raw[i] for i in todo[s : s + per_block]], pa.binary()),
                }
            )
            for s in range(0, len(todo), per_block)
        ]
        ctx = ray.data.DataContext.get_current()
        with _quiet_data_context(ctx):
            ds = ray.data.from_arrow(tables).map_batches(
                ExtractWorker,
                fn_constructor_kwargs={"spec": spec, "known_ref": known_ref, "driver_version": __version__},
                batch_size=self.batch_size,
                batch_format="numpy",
                compute=ray.data.ActorPoolStrategy(min_size=1, max_size=max(1, actors)),
                num_cpus=cpus,
                num_gpus=gpus or None,
            )
            yield from _pumped(ds.iter_batches(batch_size=None, batch_format="numpy"), self.stall_timeout)


# --------------------------------------------------------------------------- the extraction stage


def extract(
    files: Iterable[Any],
    extractor: Any,
    cache: Any,
    *,
    batch_size: int = 32,
    workers: int | None = None,
    decoder: str = "auto",
    on_progress: Any = None,
    on_failure: Any = None,
    on_warning: Any = None,
    address: str | None = None,
    device: str = "auto",
    keep_vectors: bool = True,
) -> Any:
    """The ``ray`` engine of ``engines.ENGINES``: ``local.extract`` with decoding and the model on a
    Ray cluster.

    The driver does what the local engine does (``stage.Stage``): the stat lookup in the cache, the
    digests the cache knows, the finite-values check, ``on_failure`` / ``on_progress``, and one cache
    transaction per batch as the batches come back; only the files the cache lacks go to the cluster.
    ``extractor`` is the driver's (never called): it names the model (``feature``, ``weights``,
    ``model_key``), which the workers then run. ``address``: as for :class:`RayEngine` (None: a Ray
    instance on this machine). ``device``: ``auto`` (GPU workers when the cluster has GPUs), ``cpu`` or
    ``cuda`` (``cuda:N`` counts as ``cuda``: the cluster places its workers). ``workers`` and ``decoder``
    are the local engine's and do not apply; ``keep_vectors`` as for the local engine. Raises
    ``ClusterError``; KeyboardInterrupt stops the run, and every batch committed before it stays in the
    cache.
    """
    from novelfind.extract.stage import Stage

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    feature = getattr(extractor, "feature", None)
    if feature is None:
        raise ValueError(
            "the Ray engine runs the package's MobileNet-V2: give it an extractor from "
            "features.build_extractor"
        )
    stage = Stage(files, extractor, cache, batch_size, on_progress, on_failure, on_warning, keep_vectors)
    misses = stage.stat_hits()
    if not misses:
        return stage.result()
    device = "cuda" if device.startswith("cuda") else device
    with RayEngine(
        address,
        feature=feature,
        device=device,
        weights=getattr(extractor, "weights", None),
        batch_size=batch_size,
        model_cache_dir=getattr(extractor, "cache_dir", None),
    ) as engine:
        if engine.model_key != extractor.model_key:
            raise ValueError(
                f"the cluster's model {engine.model_key} is not the driver's {extractor.model_key}"
            )
        paths = [stage.path(i) for i in misses]
        gone = _take_results(stage, engine.run(paths, known=cache.known_digests()), misses)
        if gone:  # cached when the scan began, gone from the cache since (it was cleared): extract them
            _take_results(stage, engine.run([paths[j] for j in gone]), [misses[j] for j in gone])
    return stage.result()


def _take_results(stage: Any, batches: Iterator[ResultBatch], rows: Sequence[int]) -> list[int]:
    """Feed the cluster's batches to the stage, one commit per batch; the positions whose vector the
    cache no longer has (to be extracted again)."""
    gone: list[int] = []
    for batch in batches:
        seen = batch.seen if batch.seen is not None else [None] * len(batch)
        rows_of = zip(batch.items(), batch.taken, batch.clips, seen, strict=True)
        for (pos, digest, vector, reason), taken, clip, read in rows_of:
            i = rows[pos]
            if digest is None:
                stage.fail(i, reason or "cannot decode")
                continue
            if stage.changed(i, read):  # the node read another file than the walk listed: not cached
                continue
            if taken is not None:  # read with the pixels on the worker: stored with the vector
                stage.take_date(i, digest, taken)
            if vector is not None:
                if clip is not None:  # a clip's record travels with its vector, as on this machine
                    stage.clips.keep(i, digest, clip)
                stage.take_vector(i, digest, vector)
            elif not stage.take_known(i, digest):
                gone.append(pos)
        stage.commit()
        stage.progress()
    return gone


def _pumped(blocks: Iterator[dict], stall_timeout: float) -> Iterator[ResultBatch]:
    """Iterate ``blocks`` in a thread; ClusterError when none arrives for ``stall_timeout`` seconds.

    Ray Data waits as long as it takes for workers; a cluster whose worker nodes are all gone would wait
    for ever. The consumer stops the pump when it stops iterating.
    """
    out: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def pump() -> None:
        try:
            for block in blocks:
                if not put(to_result(block)):
                    return
            put(end)
        except BaseException as err:  # noqa: BLE001 - handed to the consumer
            put(err)

    thread = threading.Thread(target=pump, name="novelfind-ray-results", daemon=True)
    thread.start()
    try:
        while True:
            try:
                item = out.get(timeout=stall_timeout)
            except queue.Empty:
                raise ClusterError(
                    f"no result from the Ray cluster for {stall_timeout:g} s (its workers are gone "
                    "or cannot start); files extracted so far are kept"
                ) from None
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        close = getattr(blocks, "close", None)
        if close is not None and not thread.is_alive():
            close()
