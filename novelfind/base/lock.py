"""Locks that keep two novelfind runs off the same output (the cache needs none: see cache.py).

The locking is filelock's (``flock`` on Unix): the kernel drops the lock when its holder exits,
however it exits (SIGKILL included), so a stale lock never blocks the next run, and the lock file is
left in place on release, so waiting runs always meet on the same file. What is added here: the
holder writes its pid into the lock file, so a run that finds it taken can say who holds it, and
locks on the same file nest within one process instead of waiting for themselves. A lock on a file
another account may also lock (the ignore list, the record of tagged sidecars: :func:`waiting_lock`) is
waited for at most ``SHARED_WAIT_S``: a lock held for ever by someone else never holds a run (a root cron
job) for ever.
"""

from __future__ import annotations

import errno
import hashlib
import os
import pwd
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import filelock

from novelfind.base import atomic, dirs
from novelfind.errors import LockedError, NovelfindError

# The longest a run waits for the lock of a file another account may also lock (:func:`waiting_lock`):
# the ignore list and the record of tagged sidecars, whose lock files lie beside them. Past it the run
# gives up on that file (LockedError, exit code 4), saying who holds the lock.
SHARED_WAIT_S = 60.0


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a zombie not yet reaped counts). Another user's process
    exists too: signalling it is refused (PermissionError), which a missing one never is."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # there, and not ours to signal
    return True


def _write_pid(fd: int) -> None:
    """filelock's ``on_acquired`` hook: the holder's pid, for the message a blocked run prints."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


class RunLock:
    """Exclusive lock on ``path`` (the lock file, created if needed), as a context manager.

    When another process holds it: with ``wait`` False, raise ``LockedError("another novelfind
    run is using LABEL (pid N); use --wait to queue")`` at once; with ``wait`` True, block until it
    is free, or until ``timeout`` seconds have passed (then ``LockedError``). ``label`` names the
    thing being protected in that message (default: ``path``). Entering again in the same
    process, on the same file, nests.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        wait: bool = False,
        timeout: float | None = None,
        *,
        label: str | None = None,
    ):
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
        self.path = Path(os.fspath(path))
        self.wait = wait
        self.timeout = timeout
        self.label = label if label is not None else str(self.path)
        # One instance per file in this process (is_singleton), so a second RunLock nests.
        self._lock = filelock.FileLock(
            self.path, is_singleton=True, thread_local=False, on_acquired=_write_pid
        )
        self._held = False

    def acquire(self) -> None:
        """Take the lock (see the class doc for waiting).

        Raises LockedError when another run holds it, NovelfindError when the lock file cannot
        be created or opened.
        """
        if self._held:
            raise RuntimeError(f"{self!r} is already held")
        timeout = (-1 if self.timeout is None else self.timeout) if self.wait else 0
        if self.path.is_symlink():  # the lock file is opened for writing: a planted link is not followed
            raise NovelfindError(
                f"cannot use the lock file {self.path}: it is a symbolic link novelfind did not create"
            )
        try:
            self._lock.acquire(timeout=timeout)
        except filelock.Timeout:
            raise LockedError(self._message()) from None
        except OSError as err:
            # filelock creates missing folders; under a file that fails as "File exists": say why
            parent_is_file = self.path.parent.exists() and not self.path.parent.is_dir()
            reason = os.strerror(errno.ENOTDIR) if parent_is_file else err.strerror or str(err)
            raise NovelfindError(f"cannot create the lock file {self.path}: {reason}") from None
        self._held = True

    def _message(self) -> str:
        holder = holder_pid(self.path)
        who = f"pid {holder}" if holder is not None else "pid unknown"
        if self.wait:
            return (
                f"gave up waiting for {self.label} after {self.timeout:g} s: its lock is held by {who} "
                f"({lock_owner(self.path)}); nothing was written to it"
            )
        return f"another novelfind run is using {self.label} ({who}); use --wait to queue"

    def release(self) -> None:
        """Give the lock back; a no-op when not held."""
        if not self._held:
            return
        self._held = False
        if self._lock.lock_counter == 1:  # the outermost holder: the pid is no longer true
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
                try:
                    os.ftruncate(fd, 0)
                finally:
                    os.close(fd)
            except OSError:
                pass
        self._lock.release()

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"RunLock({str(self.path)!r}, wait={self.wait}, timeout={self.timeout})"


def holder_pid(path: str | os.PathLike[str]) -> int | None:
    """The pid written into a lock file, or None when it is empty or unreadable (read as a lock file is
    opened: not through a link, never blocking on a FIFO; its first 32 bytes). Whoever can write the
    file wrote it: a name for the message, nothing more."""
    try:
        fd, _ = atomic.open_regular(path)
    except OSError:
        return None
    try:
        return int(os.read(fd, 32).split()[0])
    except (OSError, ValueError, IndexError):
        return None
    finally:
        os.close(fd)


def lock_owner(path: str | os.PathLike[str]) -> str:
    """Who owns the lock file, for the message of a run that gave up waiting: ``lock file owned by ana,
    uid 1000``."""
    try:
        uid = os.stat(path, follow_symlinks=False).st_uid
    except OSError:
        return "lock file gone"
    try:
        return f"lock file owned by {pwd.getpwuid(uid).pw_name}, uid {uid}"
    except KeyError:
        return f"lock file owned by uid {uid}"


def waiting_lock(path: str | os.PathLike[str], label: str) -> RunLock:
    """The lock on a file of the user's that another account may also lock (the ignore list, the record
    of tagged sidecars): waited for, at most ``SHARED_WAIT_S`` seconds (as set when this is called), then
    LockedError (exit code 4) saying who holds it. ``label`` names the file in that message."""
    return RunLock(path, wait=True, timeout=SHARED_WAIT_S, label=label)


def output_lock_path(target: Path) -> Path:
    """The lock file guarding one output path (in the user cache folder, never next to the output)."""
    digest = hashlib.sha1(str(Path(target).absolute()).encode()).hexdigest()[:16]
    return dirs.lock_dir() / f"{digest}.lock"


@contextmanager
def output_lock(
    target: Path,
    *,
    wait: bool,
    on_wait: Callable[[], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold the lock on one output, so two runs writing it never interleave.

    Taken at once when free. Otherwise: LockedError with ``wait`` False, or ``on_wait()`` and then
    wait for the other run. A lock folder that cannot be created is reported through ``on_warning``
    and the run goes on without the lock.
    """
    path = output_lock_path(target)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        if on_warning is not None:
            on_warning(f"cannot create lock folder {path.parent} ({err.strerror}); running without a lock")
        yield
        return
    lock = RunLock(path, wait=False, label=str(target))
    try:
        lock.acquire()
    except LockedError:
        if not wait:
            raise
        if on_wait is not None:
            on_wait()
        lock = RunLock(path, wait=True, label=str(target))
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
