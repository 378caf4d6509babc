"""A lock that keeps two novelfind runs off the same output (the cache needs none: see cache.py).

``flock`` on a lock file: the kernel drops the lock when the holder exits, however it exits
(SIGKILL included), so a stale lock never blocks the next run. The holder's pid is written into
the file only to name it in the message. The lock file is left in place on release: removing it
would let a waiting run lock a file that no longer has a name.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from pathlib import Path
from types import TracebackType

from novelfind.errors import LockedError, NovelfindError

_POLL_S = 0.05  # how often a run waiting with a timeout retries

# Lock files this process holds: (st_dev, st_ino) -> [depth, descriptor]. flock is per open file,
# so a second RunLock on the same file in the same process would wait for itself forever; it nests.
_held: dict[tuple[int, int], list[int]] = {}
_held_guard = threading.Lock()


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
        self._key: tuple[int, int] | None = None

    def acquire(self) -> None:
        """Take the lock (see the class doc for waiting).

        Raises LockedError when another run holds it, NovelfindError when the lock file cannot
        be created or opened.
        """
        if self._key is not None:
            raise RuntimeError(f"{self!r} is already held")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise NovelfindError(f"cannot create the lock file {self.path}: {err.strerror or err}") from None
        try:
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            with _held_guard:
                if key in _held:
                    _held[key][0] += 1
                    self._key = key
                    os.close(fd)
                    return
            self._lock(fd)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        with _held_guard:
            _held[key] = [1, fd]
        self._key = key

    def _lock(self, fd: int) -> None:
        if self.wait and self.timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # Ctrl-C still interrupts the wait
            return
        deadline = time.monotonic() + (self.timeout or 0.0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as err:
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
            if not self.wait or time.monotonic() >= deadline:
                raise LockedError(self._message(fd))
            time.sleep(min(_POLL_S, max(0.0, deadline - time.monotonic())))

    def _message(self, fd: int) -> str:
        holder = holder_pid(fd)
        who = f"pid {holder}" if holder is not None else "pid unknown"
        if self.wait:
            return f"another novelfind run is still using {self.label} ({who}) after {self.timeout:g} s"
        return f"another novelfind run is using {self.label} ({who}); use --wait to queue"

    def release(self) -> None:
        """Give the lock back; a no-op when not held."""
        key = self._key
        if key is None:
            return
        self._key = None
        with _held_guard:
            entry = _held[key]
            entry[0] -= 1
            if entry[0] > 0:
                return  # still held by an enclosing RunLock in this process
            del _held[key]
            fd = entry[1]
        try:
            os.ftruncate(fd, 0)  # the pid is no longer true; a waiting run writes its own
        except OSError:
            pass
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

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


def holder_pid(fd_or_path: int | str | os.PathLike[str]) -> int | None:
    """The pid written into a lock file, or None when it is empty or unreadable."""
    try:
        if isinstance(fd_or_path, int):
            data = os.pread(fd_or_path, 32, 0)
        else:
            with open(fd_or_path, "rb") as f:
                data = f.read(32)
        return int(data.split()[0])
    except (OSError, ValueError, IndexError):
        return None
