"""Streaming extraction: cache lookups, parallel decode, batched inference, per-batch cache writes.

Flow for a list of files (walk order):
  1. stat lookup in the cache (path, size, mtime) in chunks: no image byte is read for a hit;
  2. the misses are read + decoded in worker processes (a bounded window of tasks in flight, so memory does
     not grow with the library); each worker returns (blake2b digest, uint8 224x224x3);
  3. a digest already in the cache (moved or renamed file) reuses its vector without inference;
  4. the rest are batched into the extractor; each batch is written to the cache in one transaction,
     so an interrupted run loses at most the batch in flight.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from novelfind.decode import read_for_model
from novelfind.errors import CacheError, DecodeError
from novelfind.features import available_cpus

STAT_CHUNK = 2048  # files per cache stat lookup
POOL_THRESHOLD = 16  # fewer misses than this are decoded in-process (a pool costs ~0.5 s to start)
TERMINATE_GRACE_S = 3.0  # running decodes get this long to finish when a scan stops early


@dataclass
class Extraction:
    files: list  # list[ImageFile]: successfully featurised, in walk order
    features: np.ndarray  # float32 (N, dim), row i <-> files[i]
    failures: list[tuple[Path, str]] = field(default_factory=list)  # (path, reason), in walk order
    from_cache: int = 0
    extracted: int = 0


def default_workers() -> int:
    """Decode processes: one per available core (inference runs in the parent and overlaps)."""
    return available_cpus()


_KNOWN: frozenset[str] = frozenset()  # in a decode worker: digests the cache already has vectors for


def _decode_task(
    path: str, known: frozenset[str] | None = None
) -> tuple[str, np.ndarray | None] | tuple[None, str]:
    """Worker body: (digest, pixels), (digest, None) for bytes already cached, or (None, reason).

    Never raises for a bad file. ``known`` defaults to the set the worker was started with.
    """
    try:
        return read_for_model(path, _KNOWN if known is None else known)
    except DecodeError as e:
        return None, str(e) or "cannot decode"
    except MemoryError:
        return None, "out of memory while decoding"
    except Exception as e:  # noqa: BLE001 - a bad file must not end the scan
        return None, f"{type(e).__name__}: {e}"[:200]


def _worker_init(parent_pid: int, known: frozenset[str]) -> None:
    """Decode workers: parent handles Ctrl-C; one thread each (the cores are shared with inference).

    A worker reports through return values only, so it lets go of the scan's stdout and stderr (a pipe
    reading the scan must see its end when the scan ends), and it exits by itself when the scan is gone
    (SIGKILL gives the scan no chance to stop it).
    """
    global _KNOWN
    _KNOWN = known
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
        try:
            os.kill(parent_pid, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:  # pragma: no cover - the pid was reused by another user's process
            os._exit(0)


def _mp_context():
    # forkserver: children do not inherit the parent's torch / onnxruntime threads (fork could deadlock).
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" not in methods:  # pragma: no cover - Windows, macOS without forkserver
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # the server imports the decoder once; every worker forks from it warm
    ctx.set_forkserver_preload(["__main__", "novelfind.pipeline"])
    return ctx


class _Decoder:
    """Decode misses in order with at most ``window`` tasks in flight; in-process when ``workers`` == 0."""

    def __init__(self, workers: int, window: int, known: frozenset[str] = frozenset()):
        self.workers = workers
        self.known = known  # digests already cached: such files are hashed, not decoded
        self.window = max(1, window)
        self.pool: ProcessPoolExecutor | None = None
        self.pool_worked = False  # a pool that never returned a result is broken, not the files

    def _start(self) -> ProcessPoolExecutor:
        if self.pool is None:
            self.pool = ProcessPoolExecutor(self.workers, mp_context=_mp_context(), initializer=_worker_init,
                                            initargs=(os.getpid(), self.known))
        return self.pool

    def run(self, paths: Sequence[str]):
        """Yield (position, (digest, pixels) | (None, reason)) in input order."""
        if self.workers <= 0:
            for i, p in enumerate(paths):
                yield i, _decode_task(p, self.known)
            return
        pending: deque[tuple[int, Future]] = deque()
        nxt = 0
        while nxt < len(paths) or pending:
            while nxt < len(paths) and len(pending) < self.window:
                pending.append((nxt, self._start().submit(_decode_task, paths[nxt])))
                nxt += 1
            i, fut = pending.popleft()
            try:
                result = fut.result()
                self.pool_worked = True
            except BrokenProcessPool:
                if not self.pool_worked:
                    # Worker processes cannot start here (e.g. __main__ not importable): decode in-process.
                    warnings.warn(
                        "decode workers unavailable; decoding in one process", RuntimeWarning, stacklevel=2
                    )
                    redo = [i] + [j for j, _ in pending] + list(range(nxt, len(paths)))
                    self._discard()
                    self.workers = 0
                    for j in redo:
                        yield j, _decode_task(paths[j], self.known)
                    return
                # A decoder crashed the worker (e.g. a segfault in a codec). Find the culprit by decoding the
                # affected files one at a time in fresh pools, then go on.
                redo = [i] + [j for j, _ in pending]
                pending.clear()
                self._discard()
                for j in redo:
                    yield j, self._isolated(paths[j])
                continue
            yield i, result

    def _isolated(self, path: str):
        try:
            return self._start().submit(_decode_task, path).result()
        except BrokenProcessPool:
            self._discard()
            return None, "decoder crashed"

    def _discard(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

    def terminate(self) -> None:
        """Stop the workers now (Ctrl-C, an error): cancel queued work, let running decodes finish briefly.

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


def _gpu_file_decoder(extractor, required, threads, known, on_warning):
    """The GPU decoding hook: gpu_decode.FileDecoder for a CUDA extractor, None for the CPU decoders."""
    if required is None and not str(getattr(extractor, "device", "cpu")).startswith("cuda"):
        return None  # the usual CPU scan never imports the GPU module
    from novelfind.gpu_decode import file_decoder_for

    return file_decoder_for(extractor, threads=threads, known=known, required=required, on_warning=on_warning)


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="img", desc="extracting", file=sys.stderr, dynamic_ncols=True, leave=False)


def extract(
    files: Iterable[Any],
    extractor: Any,
    cache: Any,
    *,
    batch_size: int = 32,
    workers: int | None = None,
    progress: bool = False,
    on_failure: Callable[[Path, str], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    gpu_decode: bool | None = None,
) -> Extraction:
    """Feature vectors for ``files`` (ImageFile records), from the cache where possible.

    ``workers``: decode processes (None = one per core, 0 = decode in this process); with GPU decoding,
    the threads that read files and decode what the GPU does not. ``gpu_decode``: None decodes JPEGs on
    the GPU when the extractor runs on CUDA and nvImageCodec is installed (``gpu_decode.py``); True
    requires it (GpuDecodeUnavailable otherwise); False never. Bad files are reported
    through ``on_failure(path, reason)`` as they happen and listed in ``failures``; they are never cached.
    KeyboardInterrupt stops the workers and propagates; batches already written stay in the cache.
    A cache that cannot be written (disk full, I/O error) is reported once through ``on_warning`` and
    the scan goes on without storing more.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    files = list(files)
    n = len(files)
    dim = int(extractor.dim)
    matrix = np.empty((n, dim), np.float32)  # (N, dim): row i <-> files[i]; the only per-library buffer
    done = np.zeros(n, bool)  # row i filled
    reasons: dict[int, str] = {}

    # 1. stat hits: no image data read
    for start in range(0, n, STAT_CHUNK):
        chunk = files[start : start + STAT_CHUNK]
        for j, vec in enumerate(cache.get_many_by_stat(chunk)):
            if vec is not None and np.shape(vec) == (dim,):
                matrix[start + j] = vec
                done[start + j] = True
    misses = np.flatnonzero(~done).tolist()
    from_cache = n - len(misses)
    extracted = 0

    bar = _progress_bar(n, progress and n > 0)
    if bar is not None:
        bar.update(from_cache)

    cache_writable = True

    def store(rows: list) -> None:
        nonlocal cache_writable
        if not rows or not cache_writable:
            return
        try:
            cache.put_many(rows)
        except CacheError as err:
            cache_writable = False
            message = f"{err}; going on without caching"
            if on_warning is not None:
                on_warning(message)
            else:
                warnings.warn(message, RuntimeWarning, stacklevel=2)

    def fail(i: int, reason: str) -> None:
        reasons[i] = reason
        if on_failure is not None:
            on_failure(files[i].path, reason)

    if misses:
        if workers is None:
            workers = default_workers() if len(misses) >= POOL_THRESHOLD else 0
        window = max(2 * batch_size, 4 * max(workers, 1))
        known_digests = getattr(cache, "known_digests", None)
        known = known_digests() if known_digests else frozenset()
        decoder: Any = None
        stack: Callable[[list], Any] = np.stack
        if gpu_decode is not False:
            threads = workers or default_workers()
            decoder = _gpu_file_decoder(extractor, gpu_decode, threads, known, on_warning)
        if decoder is None:
            decoder = _Decoder(workers, window, known)
        else:
            from novelfind.gpu_decode import stack_pixels as stack
        batch: list[tuple[int, str, np.ndarray]] = []  # (file index, digest, pixels)
        moved: list[tuple[Any, str, np.ndarray]] = []  # digest hits: rows to record under their new path

        def flush() -> None:
            nonlocal extracted
            if not batch:
                if moved:
                    store(list(moved))
                    moved.clear()
                return
            pixels = stack([b[2] for b in batch])  # (B, 224, 224, 3) uint8, numpy or on the model's device
            out = np.asarray(extractor(pixels), dtype=np.float32)  # (B, dim)
            if out.shape != (len(batch), dim):
                raise RuntimeError(f"extractor returned {out.shape}, expected {(len(batch), dim)}")
            rows = list(moved)
            moved.clear()
            for (i, digest, _), vec in zip(batch, out, strict=True):
                if np.all(np.isfinite(vec)):
                    matrix[i] = vec
                    done[i] = True
                    rows.append((files[i], digest, vec))
                else:
                    fail(i, "model produced non-finite values")
            store(rows)  # one transaction per batch
            extracted += int(done[[b[0] for b in batch]].sum())
            if bar is not None:
                bar.update(len(batch))
            batch.clear()

        digest_lookup = getattr(cache, "get_many_by_digest", None)
        try:
            for pos, (digest, payload) in decoder.run([str(files[i].path) for i in misses]):
                i = misses[pos]
                if digest is None:
                    fail(i, payload)
                    if bar is not None:
                        bar.update(1)
                    continue
                known = digest_lookup([digest])[0] if digest_lookup else cache.get_by_digest(digest)
                if payload is None and (known is None or np.shape(known) != (dim,)):
                    # cached when the scan began, gone now (another run cleared the cache): decode here
                    digest, payload = _decode_task(str(files[i].path), frozenset())
                    if digest is None:
                        fail(i, payload)
                        if bar is not None:
                            bar.update(1)
                        continue
                if known is not None and np.shape(known) == (dim,):
                    # same bytes seen before (moved / renamed): reuse, and record the new path
                    matrix[i] = known
                    done[i] = True
                    from_cache += 1
                    moved.append((files[i], digest, known))
                    if bar is not None:
                        bar.update(1)
                    if len(moved) >= 8 * batch_size and not batch:
                        flush()
                    continue
                batch.append((i, digest, payload))
                if len(batch) >= batch_size:
                    flush()
            flush()
        except BaseException:
            decoder.terminate()
            if bar is not None:
                bar.close()
            raise
        decoder.close()
    if bar is not None:
        bar.close()

    keep = np.flatnonzero(done).tolist()
    features = matrix if len(keep) == n else matrix[done]  # (N_ok, dim)
    failures = [(files[i].path, reasons[i]) for i in sorted(reasons)]
    return Extraction(
        files=[files[i] for i in keep],
        features=features,
        failures=failures,
        from_cache=from_cache,
        extracted=extracted,
    )
