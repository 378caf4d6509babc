"""The extraction stage: feature vectors for a list of image files, from the cache where possible.

Flow for a list of files (walk order):
  1. stat lookup in the cache (path, size, mtime) in chunks: no image byte is read for a hit;
  2. the misses go to a *decoder*, which reads each file once and returns the digest of its bytes and
     the model's input pixels (uint8 224x224x3), in input order, with a bounded window of files in
     flight, so memory does not grow with the library;
  3. a digest already in the cache (moved or renamed file) reuses its vector without inference;
  4. the rest are batched into the extractor; each batch is written to the cache in one transaction,
     so an interrupted run loses at most the batch in flight.

Two places take alternatives. ``DECODERS`` names the decoders (step 2): ``pillow`` decodes with Pillow in
worker processes (:class:`ProcessDecoder`); ``gpu`` decodes JPEGs on the model's GPU with nvImageCodec and
the rest with Pillow (``gpu_decode.GpuFileDecoder``, alone); ``auto``, the default, is the GPU decoder and
Pillow processes at once, fed from one queue (:class:`SharedDecoder`: whichever is free takes the next
files) when the model runs on CUDA and nvImageCodec is installed, else ``pillow``. Another decoder is a
class (or factory) with the same constructor and the :class:`Decoder` methods. ``ENGINES`` names whole
extraction stages: ``local`` is :func:`extract` on this machine; ``ray`` spreads decoding and the model
over a Ray cluster (``novelfind.engine_ray.extract``). An engine that runs elsewhere is a function with
:func:`extract`'s signature plus two keywords, ``address`` (where to run; None: the engine's default)
and ``device`` (what its workers run the model on: ``auto``, ``cpu`` or ``cuda``); it drives a
:class:`Stage` as :func:`extract` does, so lookups, commits, checks and callbacks are the same. Both
registries hold "module:attribute" strings, imported only when chosen, so an engine's dependencies
(Ray, say) stay optional. What the decoders and engines share with this module (:class:`Decoded`,
:class:`FeatureStore`, :class:`Stage`, :func:`decode_file`) lives in ``extraction``, which imports none
of them: no module imports one that imports it back.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from novelfind import extraction
from novelfind.extraction import (
    Decoded,
    Decoder,
    Extraction,
    FeatureStore,
    OnFailure,
    OnProgress,
    OnWarning,
    SharedDecoder,  # noqa: F401 - the decoders' shared queue, used from here by callers
    Stage,
    decode_file,
)
from novelfind.features import Extractor, available_cpus
from novelfind.lock import pid_alive

POOL_THRESHOLD = 16  # fewer misses than this are decoded in-process (a pool costs ~0.5 s to start)
TERMINATE_GRACE_S = 3.0  # running decodes get this long to finish when a scan stops early
# A decode in a worker process that runs longer than this is stopped and its file reported. The largest
# image accepted (268 MP) decodes in under 10 s on one slow core; a decoder caught in a loop never ends.
DECODE_TIMEOUT_S = 120.0

DECODERS: dict[str, str] = {
    "auto": "novelfind.pipeline:auto_decoder",
    "pillow": "novelfind.pipeline:ProcessDecoder",
    "gpu": "novelfind.gpu_decode:GpuFileDecoder",
}
ENGINES: dict[str, str] = {"local": "novelfind.pipeline:extract", "ray": "novelfind.engine_ray:extract"}


def load(spec: str) -> Any:
    """The object a ``DECODERS`` / ``ENGINES`` entry names ("package.module:attribute")."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def default_workers() -> int:
    """Decode processes: one per available core (inference runs in the parent and overlaps)."""
    return available_cpus()


# --------------------------------------------------------------------------- decoding in processes

_STARTED: Any = None  # in a decode worker: the shared start times of the tasks in flight (see ProcessDecoder)


def _decode_in_worker(decode: Callable[[str], Decoded], path: str, slot: int) -> Decoded:
    """Run in a decode worker: note when this task starts (its time limit counts from here), decode."""
    if _STARTED is not None:  # None: called in the scanning process itself
        _STARTED[2 * slot + 1] = os.getpid()
        _STARTED[2 * slot] = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process on the machine
    return decode(path)


def _worker_init(parent_pid: int, known: frozenset[str], started: Any = None) -> None:
    """Decode workers: parent handles Ctrl-C; one thread each (the cores are shared with inference).

    A worker reports through return values only, so it lets go of the scan's stdout and stderr (a pipe
    reading the scan must see its end when the scan ends), and it exits by itself when the scan is gone
    (SIGKILL gives the scan no chance to stop it).
    """
    global _STARTED
    extraction.use_known(known)
    _STARTED = started
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()


def _exit_with_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if _gone(parent_pid):
            os._exit(0)


def _gone(pid: int) -> bool:
    """The process has exited: no such pid, or a zombie not yet reaped. A killed scan stays a zombie
    while its parent reads the scan's output to the end before it waits (``subprocess.run``); the
    forkserver these workers keep alive holds that output open, so a worker that waited for the pid to
    vanish would block that parent for ever."""
    if not pid_alive(pid):
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):  # no /proc (macOS): the kill test alone
        return False


def _mp_context():
    # forkserver: children do not inherit the parent's torch / onnxruntime threads (fork could deadlock).
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" not in methods:  # pragma: no cover - Windows, macOS without forkserver
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # the server imports the decoder once; every worker forks from it warm
    ctx.set_forkserver_preload(["__main__", "novelfind.pipeline"])
    return ctx


class _TimedOut(Exception):
    """The decode at the head of the queue ran past the time limit."""


class ProcessDecoder:
    """The ``pillow`` decoder: Pillow in ``workers`` processes, in order, at most ``window`` files in
    flight; in this process when ``workers`` is 0 (or when worker processes cannot start here).

    A decode in a worker that runs longer than ``timeout`` seconds (counted from when the worker takes
    the file, not from when it was queued) is stopped: that worker is killed, the file is reported, the
    other files in flight go to fresh workers. Decoding in this process (``workers`` 0) has no limit.
    """

    decode_one: Callable[[str], Decoded] = staticmethod(decode_file)  # what a worker runs on one path

    def __init__(
        self,
        workers: int,
        window: int,
        known: frozenset[str] = frozenset(),
        timeout: float | None = None,
        **context: Any,
    ):
        self.workers = workers
        self.known = known  # digests already cached: such files are hashed, not decoded
        self.window = max(1, window)
        self.timeout = DECODE_TIMEOUT_S if timeout is None else timeout
        self.pool: ProcessPoolExecutor | None = None
        self.pool_worked = False  # a pool that never returned a result is broken, not the files
        # Shared with the workers: for task slot s, [2s] is when a worker took it (0: not yet), [2s+1] its
        # pid. A slot is the task's number modulo the window: no two tasks in flight share one.
        self.started: Any = None
        self.submitted = 0

    stack = staticmethod(np.stack)

    def _start(self) -> ProcessPoolExecutor:
        if self.pool is None:
            self.pool = ProcessPoolExecutor(
                self.workers,
                mp_context=_mp_context(),
                initializer=_worker_init,
                initargs=(os.getpid(), self.known, self._started()),
            )
        return self.pool

    def _started(self) -> Any:
        if self.started is None:
            self.started = _mp_context().RawArray("d", 2 * self.window)
        return self.started

    def _submit(self, path: str) -> tuple[Future, int]:
        pool = self._start()
        slot = self.submitted % self.window
        self.submitted += 1
        self._started()[2 * slot] = 0.0
        return pool.submit(_decode_in_worker, self.decode_one, path, slot), slot

    def _result(self, fut: Future, slot: int) -> Decoded:
        """The future's result; _TimedOut once its worker has spent ``timeout`` seconds on it."""
        while True:
            began = self.started[2 * slot]
            wait = 0.5 if not began else began + self.timeout - time.monotonic()  # 0.5 s: poll for the start
            if began and wait <= 0 and not fut.done():
                raise _TimedOut
            try:
                return fut.result(timeout=max(wait, 0.0))
            except FutureTimeout:
                continue

    def _stop_stuck(self, slot: int) -> None:
        """Kill the worker that holds ``slot`` and drop the pool (its other tasks are resubmitted)."""
        pid = int(self.started[2 * slot + 1])
        procs = (getattr(self.pool, "_processes", None) or {}) if self.pool is not None else {}
        for p in list(procs.values()):
            if p.pid == pid and p.is_alive():
                p.kill()
                p.join(timeout=5)
        self._discard()

    def _too_slow(self) -> Decoded:
        return Decoded(None, reason=f"decoding took longer than {self.timeout:g} s; stopped")

    def decode(self, paths: Sequence[str]) -> Iterator[tuple[int, Decoded]]:
        if self.workers <= 0:
            for i, p in enumerate(paths):
                yield i, decode_file(p, self.known)
            return
        pending: deque[tuple[int, Future, int]] = deque()  # (position, future, slot), in input order
        retry: deque[int] = deque()  # positions in flight when a stuck worker was killed, to submit again
        nxt = 0
        while nxt < len(paths) or pending or retry:
            while (retry or nxt < len(paths)) and len(pending) < self.window:
                if retry:
                    j = retry.popleft()
                else:
                    j, nxt = nxt, nxt + 1
                pending.append((j, *self._submit(paths[j])))
            i, fut, slot = pending.popleft()
            try:
                result = self._result(fut, slot)
                self.pool_worked = True
            except _TimedOut:
                self.pool_worked = True  # a worker took the file: the pool itself works
                retry.extendleft(reversed([j for j, _, _ in pending]))
                pending.clear()
                self._stop_stuck(slot)
                yield i, self._too_slow()
                continue
            except BrokenProcessPool:
                if not self.pool_worked:
                    # Worker processes cannot start here (e.g. __main__ not importable): decode in-process.
                    warnings.warn(
                        "decode workers unavailable; decoding in one process", RuntimeWarning, stacklevel=2
                    )
                    redo = [i] + [j for j, _, _ in pending] + list(retry) + list(range(nxt, len(paths)))
                    self._discard()
                    self.workers = 0
                    for j in redo:
                        yield j, decode_file(paths[j], self.known)
                    return
                # A decoder crashed the worker (e.g. a segfault in a codec). Find the culprit by decoding the
                # affected files one at a time in fresh pools, then go on.
                redo = [i] + [j for j, _, _ in pending]
                pending.clear()
                self._discard()
                for j in redo:
                    yield j, self._isolated(paths[j])
                continue
            yield i, result

    def _isolated(self, path: str) -> Decoded:
        fut, slot = self._submit(path)
        try:
            return self._result(fut, slot)
        except _TimedOut:
            self._stop_stuck(slot)
            return self._too_slow()
        except BrokenProcessPool:
            self._discard()
            return Decoded(None, reason="decoder crashed")

    def _discard(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

    def terminate(self) -> None:
        """Cancel queued work, let running decodes finish briefly, then kill the workers.

        Killing a worker while it sends a result can leave the pool's manager thread blocked on a half
        message at interpreter exit, so workers get a short grace period before they are killed.
        """
        pool, self.pool = self.pool, None
        if pool is None:
            return
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + TERMINATE_GRACE_S
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=2)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None


# --------------------------------------------------------------------------- several decoders at once


# --------------------------------------------------------------------------- the stage


def auto_decoder(
    workers: int = 0,
    window: int = 1,
    known: frozenset[str] = frozenset(),
    extractor: Any = None,
    on_warning: OnWarning | None = None,
    **context: Any,
) -> Decoder:
    """The "auto" decoder: when ``extractor`` runs on CUDA and nvImageCodec is installed, the GPU decoder
    sharing the work with Pillow processes (``gpu_decode.both_decoder``; the GPU decoder alone when
    ``workers`` is 0: few files to decode), else Pillow in worker processes (:class:`ProcessDecoder`).

    Without the library (an optional extra) this is silent; a library that fails its start-up check is
    reported once through ``on_warning`` and the scan decodes on the CPU. A CPU model never imports
    ``gpu_decode`` (nor torch through it).
    """
    timeout = context.get("timeout")
    if str(getattr(extractor, "device", "cpu")).startswith("cuda"):
        from novelfind import gpu_decode

        if gpu_decode.library_installed():
            try:
                if workers > 0:  # GPU and Pillow processes at once: whichever is free takes the next files

                    def cpu(n: int) -> ProcessDecoder:
                        return ProcessDecoder(n, max(1, window), known, timeout=timeout)

                    return gpu_decode.both_decoder(workers, window, known, extractor, on_warning, cpu=cpu)
                return gpu_decode.GpuFileDecoder(workers, window, known, extractor, on_warning)
            except gpu_decode.GpuDecodeUnavailable as e:
                message = f"GPU JPEG decoding unavailable ({e}); decoding on the CPU"
                if on_warning is not None:
                    on_warning(message)
                else:
                    warnings.warn(message, RuntimeWarning, stacklevel=2)
    return ProcessDecoder(workers, window, known, timeout=timeout)


def extract(
    files: Iterable[Any],
    extractor: Extractor,
    cache: FeatureStore,
    *,
    batch_size: int = 32,
    workers: int | None = None,
    decoder: str = "auto",
    on_progress: OnProgress | None = None,
    on_failure: OnFailure | None = None,
    on_warning: OnWarning | None = None,
    keep_vectors: bool = True,
    decode_timeout: float | None = None,
) -> Extraction:
    """Feature vectors for ``files`` (ImageFile records), from the cache where possible.

    ``extractor``: the model, uint8 (B, 224, 224, 3) -> float32 (B, extractor.dim); the package's store
    their ``encode`` output (the pooled vector) and give ``features`` through their ``head`` (logits,
    say), as :class:`extraction.Stage` says. ``workers``:
    decode processes (None = one per core, 0 = decode in this process). ``decoder``: a ``DECODERS``
    name. Bad files are reported through ``on_failure(path, reason)`` as they happen and listed in
    ``failures``; they are never cached. ``on_progress(done, total)`` follows the files resolved
    (found, extracted or failed). KeyboardInterrupt stops the workers and propagates; batches already
    written stay in the cache. A cache that cannot be written (disk full, I/O error) is reported once
    through ``on_warning`` and the scan goes on without storing more.

    ``keep_vectors`` False: for a library whose N x dim matrix should not sit in memory. The vectors
    go to the cache only (``features`` is None); a file the cache has is checked without reading its
    vector (``has_many_by_stat``). The caller reads them back from the cache, in chunks
    (through ``extraction.featured(store, extractor)``, which applies the ``head``).

    ``decode_timeout``: seconds a decoding process may spend on one file (None: ``DECODE_TIMEOUT_S``).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if decoder not in DECODERS:
        raise ValueError(f"unknown decoder {decoder!r}; choose from {', '.join(DECODERS)}")
    stage = Stage(files, extractor, cache, batch_size, on_progress, on_failure, on_warning, keep_vectors)
    misses = stage.stat_hits()
    settle = getattr(extractor, "settle", None)  # a device chosen by the work at hand (``--device auto``)
    if settle is not None:
        settle(len(misses))
    if misses:
        start_loading = getattr(extractor, "start_loading", None)  # the model loads while decoding starts
        if start_loading is not None:
            start_loading()
        if workers is None:  # a clip is read in a worker even alone: there its decode has a time limit
            few = len(misses) < POOL_THRESHOLD and not set(stage.clips.rows).intersection(misses)
            workers = 0 if few else default_workers()
        window = max(2 * batch_size, 4 * max(workers, 1))
        limit = {} if decode_timeout is None else {"timeout": decode_timeout}
        decoding = load(DECODERS[decoder])(
            workers=workers,
            window=window,
            known=cache.known_digests(),
            extractor=extractor,
            on_warning=on_warning,
            **limit,
        )
        stage.run(misses, decoding)
    return stage.result()
