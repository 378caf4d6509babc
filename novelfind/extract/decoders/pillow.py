"""The ``pillow`` decoder: files decoded with Pillow (and LibRaw for RAW files) in worker processes.

:class:`ProcessDecoder` reads each file once in a pool of processes and hands back, in input order, the
digest of its bytes and the model's input pixels (``stage.decode_file``), with a bounded window of files
in flight. A decode that runs past its time limit (``DECODE_TIMEOUT_S``) is stopped with its process and
its file reported; the pool is started again. Every decode runs in a worker, also with ``workers`` 0 (a
few files: one worker): a thread cannot be stopped, so a decode in the scanning process could not be held
to the limit. Only where worker processes cannot start at all does it decode in the scanning process.

:func:`decode_each` lends the same processes, under the same limit, to other work on untrusted files
(the report's thumbnails): a function of a task instead of the model's input, so its callers need none
of the stage's records.
"""

from __future__ import annotations

import functools
import importlib
import multiprocessing
import multiprocessing.context
import multiprocessing.process
import multiprocessing.spawn
import os
import signal
import sys
import threading
import time
import types
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from novelfind.base import door
from novelfind.base.lock import pid_alive
from novelfind.extract.stage import Decoded, decode_file, guarded, use_known
from novelfind.media import decode

TERMINATE_GRACE_S = 3.0  # running decodes get this long to finish when a scan stops early
# A decode in a worker process that runs longer than this is stopped and its file reported. The largest
# image accepted (268 MP) decodes in under 10 s on one slow core; a decoder caught in a loop never ends.
DECODE_TIMEOUT_S = 120.0

# --------------------------------------------------------------------------- decoding in processes

_STARTED: Any = None  # in a decode worker: the shared start times of the tasks in flight (see ProcessDecoder)


def _decode_in_worker(decode: Callable[[str], Decoded], path: str, slot: int) -> Decoded:
    """Run in a decode worker: note when this task starts (its time limit counts from here), decode."""
    if _STARTED is not None:  # None: called in the scanning process itself
        _STARTED[2 * slot + 1] = os.getpid()
        _STARTED[2 * slot] = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process on the machine
    return decode(path)


def _worker_init(
    parent_pid: int,
    known: frozenset[str],
    started: Any = None,
    pixel_budget: int | None = None,
    memory_share: int | None = None,
    door_policy: door.Policy | None = None,
) -> None:
    """Decode workers: parent handles Ctrl-C; one thread each (the cores are shared with inference).

    With ``memory_share`` (bytes), the worker's address space is limited to its size now plus that share
    (:func:`novelfind.media.decode.limit_address_space`): a decoder that tries to hold more fails with
    MemoryError, reported as its file's failure.

    A worker reports through return values only, so it lets go of the scan's stdout and stderr (a pipe
    reading the scan must see its end when the scan ends), and it exits by itself when the scan is gone
    (SIGKILL gives the scan no chance to stop it).
    """
    global _STARTED
    use_known(known)
    _STARTED = started
    if pixel_budget is not None:  # the scan's, set in its process: a worker starts with the default
        decode.set_pixel_budget(pixel_budget)
    if memory_share is not None:
        decode.limit_address_space(memory_share)
    if door_policy is not None:  # the scan's folders: below them no link is followed
        door.use_policy(door_policy)
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


def _mp_context() -> multiprocessing.context.BaseContext:
    """Where the decode workers start: a forkserver (a child does not inherit the parent's torch or
    onnxruntime threads, which fork could deadlock on), else spawn; either way without the scanning
    program's ``__main__`` (:class:`_Worker`)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover - Windows
        return _WORKER_CONTEXTS["spawn"]
    # The server imports the decoder once, every worker forks from it warm; it does not import __main__
    # (Python's default preload): a script's top level would run again there.
    multiprocessing.get_context("forkserver").set_forkserver_preload([__name__])
    return _WORKER_CONTEXTS["forkserver"]


class _SpawnWithoutMain:
    """``multiprocessing.spawn`` as a :class:`_Worker`'s start sees it: its preparation data (what a new
    process sets up before it unpickles its work) names no ``__main__`` to import."""

    def __getattr__(self, name: str) -> Any:
        return getattr(multiprocessing.spawn, name)

    @staticmethod
    def get_preparation_data(name: str) -> dict[str, Any]:
        data = multiprocessing.spawn.get_preparation_data(name)
        data.pop("init_main_from_name", None)
        data.pop("init_main_from_path", None)
        return data


def _without_main(popen: type) -> type:
    """``popen`` (a ``multiprocessing`` Popen class of the spawn or forkserver start method) whose new
    processes do not import the parent's ``__main__``.

    Python's own start imports it in every new process, so that functions defined there can be
    unpickled: a script run without ``if __name__ == "__main__":`` would run its top level again in each
    worker (a scan within a scan; a traceback on stderr). The decode workers run novelfind's functions
    only, so they need none of it, as ``loky`` (joblib's) workers do not. The class's ``_launch`` is
    Python's own, reading ``spawn.get_preparation_data`` through :class:`_SpawnWithoutMain`: no copy of
    the standard library's code, and nothing changed for other processes (the substitution is this
    function's alone, so it holds under threads).
    """
    launch = popen._launch  # type: ignore[attr-defined]
    if "spawn" not in launch.__code__.co_names:  # pragma: no cover - a Python whose start differs
        return popen
    namespace = {**vars(sys.modules[popen.__module__]), "spawn": _SpawnWithoutMain()}
    launch = types.FunctionType(
        launch.__code__, namespace, launch.__name__, launch.__defaults__, launch.__closure__
    )
    return type(popen.__name__, (popen,), {"_launch": launch, "__module__": __name__})


class _Worker(multiprocessing.process.BaseProcess):
    """A decode worker process: started by the context's method without the parent's ``__main__``
    (:func:`_without_main`). ``_popen_module`` is the start method's Popen module, named per subclass."""

    _popen_module = ""
    _popen: Any = None  # the Popen class, made at the first start

    @classmethod
    def _popen_class(cls) -> type:
        if cls._popen is None:
            cls._popen = _without_main(importlib.import_module(cls._popen_module).Popen)
        return cls._popen

    @staticmethod
    def _Popen(process_obj: Any) -> Any:  # noqa: N802 - multiprocessing's name
        return type(process_obj)._popen_class()(process_obj)


class _ForkServerWorker(_Worker):
    _start_method = "forkserver"
    _popen_module = "multiprocessing.popen_forkserver"


class _SpawnWorker(_Worker):
    _start_method = "spawn"
    _popen_module = (
        "multiprocessing.popen_spawn_win32"
        if sys.platform == "win32"
        else "multiprocessing.popen_spawn_posix"
    )

    @staticmethod
    def _after_fork() -> None:  # a spawned process has nothing to undo
        pass


def _worker_context(method: str, process: type) -> multiprocessing.context.BaseContext:
    """A context of ``method`` (its queues, locks, shared arrays) whose processes are ``process``."""
    base = type(multiprocessing.get_context(method))
    return type(base.__name__, (base,), {"Process": process, "__module__": __name__})()


_WORKER_CONTEXTS: dict[str, Any] = {"spawn": _worker_context("spawn", _SpawnWorker)}
if "forkserver" in multiprocessing.get_all_start_methods():
    _WORKER_CONTEXTS["forkserver"] = _worker_context("forkserver", _ForkServerWorker)


class _TimedOut(Exception):
    """The decode at the head of the queue ran past the time limit."""


class ProcessDecoder:
    """The ``pillow`` decoder: Pillow in ``workers`` processes (one when ``workers`` is 0), in order, at
    most ``window`` files in flight. The pool starts with the first file, so a scan that finds everything
    in the cache starts none.

    A decode in a worker that runs longer than ``timeout`` seconds (counted from when the worker takes
    the file, not from when it was queued) is stopped: that worker is killed, the file is reported, the
    other files in flight go to fresh workers. The workers never import the program's ``__main__``
    (:func:`_mp_context`), so they start from a script, a notebook or a REPL alike. Only when worker
    processes cannot start here at all (no processes left, a sandbox, a program still starting up itself)
    are the files decoded in this process, with no clock: said once by a ``RuntimeWarning``, which a scan
    reports among its warnings.
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
        self.workers = max(1, workers)  # 0 (a few files) still decodes in a process: the limit holds there
        self.in_process = False  # True once worker processes failed to start: decode here, unbounded
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
                initargs=(
                    os.getpid(),
                    self.known,
                    self._started(),
                    decode.pixel_budget(),
                    decode.decode_memory_share(self.workers),
                    door.policy(),
                ),
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
        if self.in_process:
            for i, p in enumerate(paths):
                yield i, self.decode_here(p)
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
                try:
                    pending.append((j, *self._submit(paths[j])))
                except (OSError, EOFError, RuntimeError) as e:
                    if self.pool_worked or isinstance(e, BrokenProcessPool):
                        raise
                    # no worker process can start here: decode in this process
                    rest = [j, *(k for k, _, _ in pending), *retry, *range(nxt, len(paths))]
                    yield from self._here_instead(paths, rest)
                    return
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
                if not self.pool_worked:  # every worker died before its first file: none can run here
                    rest = [i, *(j for j, _, _ in pending), *retry, *range(nxt, len(paths))]
                    yield from self._here_instead(paths, rest)
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

    def _here_instead(self, paths: Sequence[str], rest: list[int]) -> Iterator[tuple[int, Decoded]]:
        """Worker processes cannot run here: ``rest`` (positions in ``paths``) and every later file are
        decoded in this process, in input order; said once, by a warning."""
        warnings.warn("decode workers unavailable; decoding in one process", RuntimeWarning, stacklevel=3)
        self._discard()
        self.in_process = True
        for j in sorted(rest):
            yield j, self.decode_here(paths[j])

    def decode_again(self, paths: Sequence[str]) -> Iterator[tuple[int, Decoded]]:
        """Decode ``paths`` for their pixels although their digests are in ``known`` (their vectors left
        the cache during the scan: ``stage.Stage.run``), in one fresh process of this kind that knows no
        digests (the workers of this one skip them), under the same limit."""
        again = type(self)(1, self.window, frozenset(), self.timeout)
        try:
            yield from again.decode(paths)
        except BaseException:
            again.terminate()
            raise
        again.close()

    def decode_here(self, path: str) -> Decoded:
        """``decode_one`` in this process, where worker processes cannot start (no time limit)."""
        return decode_file(path, self.known)

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


# --------------------------------------------------------------------------- other work in processes


def _run_task(make: Callable[..., Any], task: Sequence[Any]) -> Decoded:
    """Run in a decode worker: what ``make(*task)`` returns, or why it failed (it never raises)."""
    return guarded(lambda: ("", make(*task)))


class _TaskDecoder(ProcessDecoder):
    """The decode processes of :func:`decode_each`: ``make(*task)`` for each task, in place of a file's
    decode for the model; its result is ``Decoded.pixels``."""

    def __init__(self, make: Callable[..., Any], workers: int, timeout: float | None = None):
        super().__init__(workers, window=2 * workers, timeout=timeout)
        self.decode_one = functools.partial(_run_task, make)  # sent with each task to the workers

    def decode_here(self, task: Any) -> Decoded:
        """The task run in this process, where worker processes cannot start (no time limit)."""
        return self.decode_one(task)


def decode_each(
    make: Callable[..., Any], tasks: Sequence[Sequence[Any]], workers: int, timeout: float | None = None
) -> Iterator[tuple[int, Any]]:
    """``make(*task)`` for each of ``tasks`` in ``workers`` decode processes, under the decode time limit
    (``timeout`` seconds; None: ``DECODE_TIMEOUT_S``) and the decoded-pixels budget, as the scan's own
    decodes: a file that takes too long is stopped with its process. Yields (position in ``tasks``, what
    ``make`` returned) as each is done, in order; None where ``make`` raised or was stopped.

    ``make`` runs in another process: a function importable by name, its tasks and results picklable.
    Closing the iterator early (or an exception while it runs) stops the processes at once.
    """
    decoder = _TaskDecoder(make, workers, timeout)
    try:
        for i, result in decoder.decode(tasks):  # type: ignore[arg-type]  # a task, not a path
            yield i, None if result.digest is None else result.pixels
    except BaseException:
        decoder.terminate()
        raise
    decoder.close()
