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
extraction stages: ``local`` is :func:`extract` on this machine; ``ray`` spreads decoding and the model over
a Ray cluster (``novelfind.engine_ray.extract``). An engine that runs elsewhere is a function with
:func:`extract`'s signature plus two keywords, ``address`` (where to run; None: the engine's default) and
``device`` (what its workers run the model on: ``auto``, ``cpu`` or ``cuda``); it drives a :class:`Stage` as
:func:`extract` does, so lookups, commits, checks and callbacks are the same. Both registries hold
"module:attribute" strings, imported only when chosen, so an engine's dependencies (Ray, say) stay optional.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from novelfind.errors import CacheError, DecodeError
from novelfind.features import Extractor, available_cpus
from novelfind.raw import read_any_for_model
from novelfind.walk import FileList

STAT_CHUNK = 2048  # files per cache stat lookup
POOL_THRESHOLD = 16  # fewer misses than this are decoded in-process (a pool costs ~0.5 s to start)
TERMINATE_GRACE_S = 3.0  # running decodes get this long to finish when a scan stops early
# A decode in a worker process that runs longer than this is stopped and its file reported. The largest
# image accepted (268 MP) decodes in under 10 s on one slow core; a decoder caught in a loop never ends.
DECODE_TIMEOUT_S = 120.0
MOVED_FLUSH = 8  # reused vectors of moved files are written once this many batches' worth wait

DECODERS: dict[str, str] = {
    "auto": "novelfind.gpu_decode:auto_decoder",
    "pillow": "novelfind.pipeline:ProcessDecoder",
    "gpu": "novelfind.gpu_decode:GpuFileDecoder",
}
ENGINES: dict[str, str] = {"local": "novelfind.pipeline:extract", "ray": "novelfind.engine_ray:extract"}

OnFailure = Callable[[Path, str], None]
OnWarning = Callable[[str], None]
OnProgress = Callable[[int, int], None]  # (files done, files in all)


@dataclass
class Extraction:
    """What the extraction stage returns."""

    files: FileList  # ImageFile records: successfully featurised, in walk order
    features: np.ndarray | None  # float32 (N, dim), row i <-> files[i]; None when not kept (in the cache)
    failures: list[tuple[Path, str]] = field(default_factory=list)  # (path, reason), in walk order
    from_cache: int = 0  # vectors found by stat or by digest
    extracted: int = 0  # vectors made by the model in this run


class Decoded(NamedTuple):
    """One file read for the model: ``digest`` None means it failed, ``reason`` says why; ``pixels``
    None with a digest means its bytes were already known (no decode was needed)."""

    digest: str | None
    pixels: Any = None  # uint8 (224, 224, 3): a numpy array, or whatever the decoder's stack() takes
    reason: str | None = None


class Decoder(Protocol):
    """Step 2 of the flow: files to :class:`Decoded` results, in input order.

    Constructed as ``Decoder(workers=..., window=..., known=..., extractor=..., on_warning=...)``:
    ``workers`` decode processes (or threads, or streams: the decoder's choice; 0 = in this process),
    at most ``window`` files in flight, the digests in ``known`` need no pixels, ``extractor`` is the
    model the pixels go to (its device, say), ``on_warning`` takes one-line messages.
    """

    def decode(self, paths: Sequence[str]) -> Iterator[tuple[int, Decoded]]:
        """Yield (position in ``paths``, result) in input order; never raises for a bad file."""
        ...

    def stack(self, pixels: list[Any]) -> Any:
        """One batch for the extractor from the pixels of several files: (B, 224, 224, 3) uint8 (a numpy
        array, or a tensor already on the model's device). A file whose vector vanished from the cache
        during the scan is decoded by :func:`decode_file`, so numpy pixels may come in too."""
        ...

    def terminate(self) -> None:
        """Stop at once (Ctrl-C, an error elsewhere): drop queued work, stop the workers."""
        ...

    def close(self) -> None:
        """Everything was decoded: release the workers."""
        ...


class FeatureStore(Protocol):
    """What the extraction stage needs of a cache (``FeatureCache`` and ``NullCache`` have it).

    A store that rounds what it keeps (``FeatureCache`` in float16) also has ``stored(vector)``, the
    vector as it will read back: the stage keeps that, so a first scan ranks what later scans read.
    """

    def get_many_by_stat(self, files: Sequence[Any]) -> list[np.ndarray | None]: ...
    def has_many_by_stat(self, files: Sequence[Any], dim: int) -> np.ndarray: ...
    def get_many_by_digest(self, digests: Sequence[str]) -> list[np.ndarray | None]: ...
    def known_digests(self) -> frozenset[str]: ...
    def put_many(self, rows: Sequence[tuple[Any, str, np.ndarray]]) -> None: ...


def load(spec: str) -> Any:
    """The object a ``DECODERS`` / ``ENGINES`` entry names ("package.module:attribute")."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def default_workers() -> int:
    """Decode processes: one per available core (inference runs in the parent and overlaps)."""
    return available_cpus()


# --------------------------------------------------------------------------- decoding in processes

_KNOWN: frozenset[str] = frozenset()  # in a decode worker: digests the cache already has vectors for
_STARTED: Any = None  # in a decode worker: the shared start times of the tasks in flight (see ProcessDecoder)


def decode_file(path: str, known: frozenset[str] | None = None) -> Decoded:
    """Read and decode one file for the model; never raises for a bad file.

    ``known`` defaults to the set the worker process was started with.
    """
    try:
        digest, pixels = read_any_for_model(path, _KNOWN if known is None else known)  # RAW or not
        return Decoded(digest, pixels)
    except DecodeError as e:
        return Decoded(None, reason=str(e) or "cannot decode")
    except MemoryError:
        return Decoded(None, reason="out of memory while decoding")
    except Exception as e:  # noqa: BLE001 - a bad file must not end the scan
        return Decoded(None, reason=f"{type(e).__name__}: {e}"[:200])


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
    global _KNOWN, _STARTED
    _KNOWN = known
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
    """The process has exited: no such pid, another user's (reused), or a zombie not yet reaped. A
    killed scan stays a zombie while its parent reads the scan's output to the end before it waits
    (``subprocess.run``); the forkserver these workers keep alive holds that output open, so a worker
    that waited for the pid to vanish would block that parent for ever."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
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


class SharedDecoder:
    """Several decoders fed from one queue (``Decoder``): whichever is free takes the next files.

    Each decoder runs in its own thread and claims the next ``claims[name]`` files of ``paths`` when it
    has finished its last claim, so a faster decoder (the GPU's) takes more of them and the scan can pass
    either decoder alone. Results come out in input order, each once. Memory stays bounded: a decoder
    claims only while the claims not yet handed on span at most ``ahead`` files. A decoder that raises
    is reported once through ``on_warning`` and leaves the scan; its claim goes back to the queue, whole
    (nothing of a claim is handed on before all of it is decoded), so no file is lost or reported twice.
    ``taken`` counts the files each decoder decoded.
    """

    def __init__(
        self,
        decoders: dict[str, Any],
        *,
        claims: dict[str, int],
        ahead: int,
        stack: Callable[[list[Any]], Any] = np.stack,
        on_warning: OnWarning | None = None,
    ):
        if not decoders:
            raise ValueError("SharedDecoder needs at least one decoder")
        self.decoders = dict(decoders)
        self.claims = {name: max(1, int(claims.get(name, 1))) for name in self.decoders}
        self.ahead = max(int(ahead), 2 * sum(self.claims.values()))
        self.stack = stack
        self.on_warning = on_warning
        self.taken: dict[str, int] = dict.fromkeys(self.decoders, 0)
        self.threads: list[threading.Thread] = []
        self._cond = threading.Condition()
        self._stop = False

    def decode(self, paths: Sequence[str]) -> Iterator[tuple[int, Decoded]]:
        cond = self._cond
        order: deque[tuple[int, int]] = deque()  # the claims, (start, end), in the order they were made
        returned: deque[tuple[int, int]] = deque()  # claims given back by a decoder that failed
        done: dict[int, list[tuple[int, Decoded]]] = {}  # start -> the claim's results, in order
        state = {"next": 0, "emitted": 0, "busy": 0, "alive": len(self.decoders)}
        errors: list[BaseException] = []
        self._stop = False

        def claim(size: int) -> tuple[int, int] | None:
            """The next files for a free decoder; None when there are none left (or the scan stopped).
            A decoder stays until every claim is decoded: one that fails gives its claim back."""
            while not self._stop:
                if returned:
                    state["busy"] += 1
                    return returned.popleft()
                nxt = state["next"]
                room = nxt == state["emitted"] or nxt + size <= state["emitted"] + self.ahead
                if nxt < len(paths) and room:
                    state["next"] = min(nxt + size, len(paths))
                    order.append((nxt, state["next"]))
                    state["busy"] += 1
                    return nxt, state["next"]
                if nxt >= len(paths) and state["busy"] == 0:
                    return None
                cond.wait()
            return None

        def feed(name: str, decoder: Any) -> None:
            while True:
                with cond:
                    span = claim(self.claims[name])
                if span is None:
                    return
                start, end = span
                try:
                    got = [(start + j, r) for j, r in decoder.decode(paths[start:end])]
                    if len(got) != end - start:
                        raise RuntimeError(f"{name} returned {len(got)} results for {end - start} files")
                except BaseException as e:  # noqa: BLE001 - the other decoders take its work
                    with cond:
                        state["busy"] -= 1
                        if not self._stop:
                            returned.append(span)
                            state["alive"] -= 1
                            if state["alive"] == 0:
                                errors.append(e)
                            elif self.on_warning is not None:
                                self.on_warning(
                                    f"{name} decoding stopped ({type(e).__name__}: {e}); "
                                    "the other decoders go on"
                                )
                        cond.notify_all()
                    return
                with cond:
                    state["busy"] -= 1
                    done[start] = got
                    self.taken[name] += end - start
                    cond.notify_all()

        self.threads = [
            threading.Thread(target=feed, args=(name, d), name=f"novelfind-{name}", daemon=True)
            for name, d in self.decoders.items()
        ]
        for t in self.threads:
            t.start()
        try:
            while True:
                with cond:
                    while not order and state["next"] < len(paths) and not errors:
                        cond.wait(0.5)
                    if not order:
                        if errors:
                            raise errors[0]
                        return
                    start = order[0][0]
                    while start not in done and not errors:
                        cond.wait(0.5)  # a timeout keeps Ctrl-C prompt
                    if start not in done:
                        raise errors[0]
                    order.popleft()
                    got = done.pop(start)
                    state["emitted"] = order[0][0] if order else state["next"]
                    cond.notify_all()
                yield from got
        finally:
            with cond:
                self._stop = True
                cond.notify_all()

    def terminate(self) -> None:
        """Stop every decoder at once; their threads end with their current claim."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for d in self.decoders.values():
            d.terminate()
        self._join()
        for d in self.decoders.values():  # what a thread may have started again before it saw the stop
            d.terminate()

    def close(self) -> None:
        self._join()
        for d in self.decoders.values():
            d.close()

    def _join(self) -> None:
        for t in self.threads:
            t.join(timeout=TERMINATE_GRACE_S + 5)
        self.threads = []


# --------------------------------------------------------------------------- the stage


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
) -> Extraction:
    """Feature vectors for ``files`` (ImageFile records), from the cache where possible.

    ``extractor``: the model, uint8 (B, 224, 224, 3) -> float32 (B, extractor.dim). ``workers``:
    decode processes (None = one per core, 0 = decode in this process). ``decoder``: a ``DECODERS``
    name. Bad files are reported through ``on_failure(path, reason)`` as they happen and listed in
    ``failures``; they are never cached. ``on_progress(done, total)`` follows the files resolved
    (found, extracted or failed). KeyboardInterrupt stops the workers and propagates; batches already
    written stay in the cache. A cache that cannot be written (disk full, I/O error) is reported once
    through ``on_warning`` and the scan goes on without storing more.

    ``keep_vectors`` False: for a library whose N x dim matrix should not sit in memory. The vectors
    go to the cache only (``features`` is None); a file the cache has is checked without reading its
    vector (``has_many_by_stat``). The caller reads them back from the cache, in chunks.
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
        if workers is None:
            workers = default_workers() if len(misses) >= POOL_THRESHOLD else 0
        window = max(2 * batch_size, 4 * max(workers, 1))
        decoding = load(DECODERS[decoder])(
            workers=workers,
            window=window,
            known=cache.known_digests(),
            extractor=extractor,
            on_warning=on_warning,
        )
        stage.run(misses, decoding)
    return stage.result()


class Stage:
    """The state of one extraction; each method is one step of the flow.

    :func:`extract` drives it with a decoder and the model on this machine. An engine that makes the
    vectors elsewhere drives it with what comes back: :meth:`stat_hits` first (the misses by index), then
    per result :meth:`take_vector` (made by the model), :meth:`take_known` (bytes already cached) or
    :meth:`fail`, and :meth:`commit` once per batch (one cache transaction), :meth:`progress` as it likes.
    """

    def __init__(
        self,
        files: Iterable[Any],
        extractor: Extractor,
        cache: FeatureStore,
        batch_size: int,
        on_progress: OnProgress | None,
        on_failure: OnFailure | None,
        on_warning: OnWarning | None,
        keep_vectors: bool = True,
    ) -> None:
        self.files = files if isinstance(files, FileList) else FileList(files)
        self.extractor, self.cache, self.batch_size = extractor, cache, batch_size
        self.stored: Callable[[np.ndarray], np.ndarray] | None = getattr(cache, "stored", None)
        self.on_progress, self.on_failure, self.on_warning = on_progress, on_failure, on_warning
        n = len(files)
        self.dim = int(extractor.dim)
        # (N, dim): row i <-> files[i]; the only big buffer, and only when the vectors are kept here
        self.matrix = np.empty((n, self.dim), np.float32) if keep_vectors else None
        self.done = np.zeros(n, bool)  # row i filled
        self.reasons: dict[int, str] = {}  # file index -> why it failed
        self.from_cache = 0
        self.extracted = 0
        self.batch: list[tuple[int, str, np.ndarray]] = []  # (file index, digest, pixels) for the model
        self.rows: list[tuple[Any, str, np.ndarray]] = []  # (file, digest, vector) for the next commit
        self.moved = 0  # of self.rows, reused vectors of moved files (their commit may wait)
        self.cache_writable = True
        self.reported = 0  # files resolved when progress was last reported
        self.stack: Callable[[list], Any] = np.stack  # the decoder's batch assembly

    # -- step 1: stat hits

    def stat_hits(self) -> list[int]:
        """Fill every row the cache has by (path, size, mtime); the rest (the misses) by index."""
        for start in range(0, len(self.files), STAT_CHUNK):
            chunk = self.files.take(range(start, min(start + STAT_CHUNK, len(self.files))))
            if self.matrix is None:  # the vectors stay in the cache: only whether it has them
                self.done[start : start + len(chunk)] = self.cache.has_many_by_stat(chunk, self.dim)
                continue
            for j, vec in enumerate(self.cache.get_many_by_stat(chunk)):
                if self._fits(vec):
                    self._fill(start + j, vec)
        self.from_cache = int(self.done.sum())
        self.progress()
        return np.flatnonzero(~self.done).tolist()

    # -- steps 2-4 on this machine: decode, reuse by digest, infer in batches

    def run(self, misses: list[int], decoder: Decoder) -> None:
        self.stack = decoder.stack
        try:
            for pos, decoded in decoder.decode([self.path(i) for i in misses]):
                self._take(misses[pos], decoded)
                self.progress()
            self._flush()
            self.progress()
        except BaseException:
            decoder.terminate()
            raise
        decoder.close()

    def _take(self, i: int, decoded: Decoded) -> None:
        if decoded.digest is None:
            self.fail(i, decoded.reason or "cannot decode")
            return
        if self.take_known(i, decoded.digest):  # the same bytes were seen before (moved, renamed, touched)
            if self.moved >= MOVED_FLUSH * self.batch_size and not self.batch:
                self._flush()
            return
        if decoded.pixels is None:  # cached when the scan began, gone now (a cleared cache): decode it here
            decoded = decode_file(self.path(i), frozenset())
            if decoded.digest is None:
                self.fail(i, decoded.reason or "cannot decode")
                return
        self.batch.append((i, decoded.digest, decoded.pixels))
        if len(self.batch) >= self.batch_size:
            self._flush()

    def _flush(self) -> None:
        """Run the model on the batch and write it, with the waiting moved files, in one transaction."""
        if self.batch:
            pixels = self.stack([b[2] for b in self.batch])  # (B, 224, 224, 3) uint8
            out = np.asarray(self.extractor(pixels), dtype=np.float32)  # (B, dim)
            if out.shape != (len(self.batch), self.dim):
                raise RuntimeError(f"extractor returned {out.shape}, expected {(len(self.batch), self.dim)}")
            for (i, digest, _), vec in zip(self.batch, out, strict=True):
                self.take_vector(i, digest, vec)
            self.batch = []
        self.commit()

    # -- results, however they were made

    def take_vector(self, i: int, digest: str, vec: np.ndarray) -> None:
        """File i's bytes (``digest``) made ``vec`` in the model: kept and queued for the next commit,
        unless it holds NaN or infinity (then file i fails)."""
        if np.all(np.isfinite(vec)):
            if self.stored is not None:
                vec = self.stored(vec)
            self._fill(i, vec)
            self.extracted += 1
            self.rows.append((self.files[i], digest, vec))
        else:
            self.fail(i, "model produced non-finite values")

    def take_known(self, i: int, digest: str) -> bool:
        """File i has bytes whose vector the cache holds (a moved, renamed or touched file): reuse it and
        record it under the file's new path at the next commit. False when the cache lacks it."""
        known = self.cache.get_many_by_digest([digest])[0]
        if not self._fits(known):
            return False
        self._fill(i, known)
        self.from_cache += 1
        self.rows.append((self.files[i], digest, known))
        self.moved += 1
        return True

    def fail(self, i: int, reason: str) -> None:
        """File i cannot be read: reported now, listed in the result, never cached."""
        self.reasons[i] = reason
        if self.on_failure is not None:
            self.on_failure(self.files[i].path, reason)

    def path(self, i: int) -> str:
        """File i's path, as a string for a decoder."""
        return os.fsdecode(self.files.raw_path(i))

    def commit(self) -> None:
        """Write the queued rows in one transaction (a cache that cannot be written: warn once, go on)."""
        rows, self.rows, self.moved = self.rows, [], 0
        if not rows or not self.cache_writable:
            return
        try:
            self.cache.put_many(rows)
        except CacheError as err:
            self.cache_writable = False
            message = f"{err}; going on without caching"
            if self.on_warning is not None:
                self.on_warning(message)
            else:
                warnings.warn(message, RuntimeWarning, stacklevel=2)

    def progress(self) -> None:
        """The one place progress is reported: files resolved (found, extracted or failed) so far."""
        resolved = self.from_cache + self.extracted + len(self.reasons)
        if self.on_progress is not None and resolved != self.reported:
            self.on_progress(resolved, len(self.files))
        self.reported = resolved

    # -- bookkeeping

    def _fits(self, vec: np.ndarray | None) -> bool:
        return vec is not None and np.shape(vec) == (self.dim,)

    def _fill(self, i: int, vec: np.ndarray) -> None:
        if self.matrix is not None:
            self.matrix[i] = vec
        self.done[i] = True

    def result(self) -> Extraction:
        keep = np.flatnonzero(self.done)
        features = self.matrix
        if features is not None and len(keep) < len(self.files):
            features = features[keep]  # (N_ok, dim)
        return Extraction(
            files=self.files if len(keep) == len(self.files) else self.files.take(keep),
            features=features,
            failures=[(self.files[i].path, self.reasons[i]) for i in sorted(self.reasons)],
            from_cache=self.from_cache,
            extracted=self.extracted,
        )
