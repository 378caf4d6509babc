"""The one door for library files: every read of a file someone else may write goes through here.

Photos, clips, RAW files, sidecars, the picks to put on the ignore list: their folders may be writable
by someone other than the user running novelfind (a family share, an upload folder, a root cron job over
everyone's photos). Between the walk and a read, that someone can rename a link to a root-only file over
a photo, swap a folder on the way for a link to ``/root``, or leave a FIFO that never answers. So a
library file is never opened by name with ``open()``. This module opens it:

- **without following links** (unless the user asked, ``--follow-symlinks``): below a scanned folder
  (:func:`scanning`) each folder on the way is opened ``O_NOFOLLOW`` from the descriptor of the one above
  (:func:`novelfind.base.atomic.open_below`), and the file itself ``O_NOFOLLOW``; a file outside the
  scanned folders (a path named on the command line) has its folder opened as named and only the file
  itself refused when it is a link;
- **without blocking** (``O_NONBLOCK``: a FIFO or device never hangs the open or the read);
- **checked on the descriptor** (``fstat``): a regular file, and, where the caller knows them, of the size
  and modification time the walk (or the ranking) saw (:class:`Changed` otherwise);
- **read with a bound**: more than the caller's limit is refused (``EFBIG``), never read into memory.

What it hands out is the descriptor, a file object over it (for Pillow, PyAV and LibRaw, which take one),
or the bytes. :func:`recording` tells a caller which file a read went to (its size and modification
time), so the extraction can check that what it decoded is what the walk listed.

The policy (the scanned folders, whether links are followed) is per process: the run sets it for its
duration (:func:`scanning`), and decode processes are started with the run's (:func:`policy`,
:func:`use_policy`). ``tests/project/test_doors.py`` fails when a module outside the doors opens a file
by name.
"""

from __future__ import annotations

import errno
import io
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

from novelfind.base import atomic

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class Policy:
    """How library files are opened: ``roots`` are the scanned folders (absolute; a link at a root itself
    is followed: the user named it), below which no link is followed unless ``follow_links``."""

    roots: tuple[str, ...] = ()
    follow_links: bool = False

    def root_of(self, path: str) -> str | None:
        """The innermost scanned folder holding the absolute ``path`` (None outside all of them)."""
        inside = [r for r in self.roots if path.startswith(r.rstrip(os.sep) + os.sep)]
        return max(inside, key=len) if inside else None


_policy = Policy()
_recorded = threading.local()

# The door's own refusals of what is at a path now: a link not followed, not a regular file, Changed.
REFUSALS = frozenset({errno.ELOOP, errno.EINVAL, errno.ESTALE})


class Changed(OSError):
    """The file is no longer the one the walk listed (another size or modification time)."""

    def __init__(self, path: PathLike):
        reason = "it changed since it was listed (another size or modification time)"
        super().__init__(errno.ESTALE, reason, os.fspath(path))


def refused(err: OSError) -> bool:
    """Whether ``err`` is the door refusing what is at the path now (:data:`REFUSALS`: not the regular
    file that was listed), rather than a file that cannot be read (gone, no permission, an I/O error)."""
    return err.errno in REFUSALS


def policy() -> Policy:
    """This process's policy (for starting a decode process with the same one)."""
    return _policy


def use_policy(new: Policy) -> Policy:
    """Make ``new`` this process's policy (a decode process, at its start); returns the one before."""
    global _policy
    before, _policy = _policy, new
    return before


@contextmanager
def scanning(roots: Iterable[PathLike], *, follow_links: bool = False) -> Iterator[Policy]:
    """Within the block, library files are opened as below the scanned folders ``roots``."""
    before = use_policy(Policy(tuple(os.path.abspath(r) for r in roots), follow_links))
    try:
        yield _policy
    finally:
        use_policy(before)


def open_fd(
    path: PathLike, *, expect: tuple[int, int] | None = None, within: Policy | None = None
) -> tuple[int, os.stat_result]:
    """``path`` opened for reading through the door: (descriptor, its ``fstat``). The caller closes it.

    ``expect``: (size, modification time in ns) it must still have. ``within``: a policy other than the
    process's (the picks being copied, by the folders they were ranked from). Raises OSError: ``ELOOP``
    (:data:`~novelfind.base.atomic.LINK_REFUSED`) for a link refused on the way, ``EINVAL`` for what is not
    a regular file, :class:`Changed`, or the system's own error.
    """
    full = os.path.abspath(path)
    rule = _policy if within is None else within
    if rule.follow_links:
        fd, st = atomic.open_regular(full, follow_link=True)
    else:
        root = rule.root_of(full)
        if root is None:
            # named on the command line (or by the API's caller): its folder as named, the file not followed
            parent = atomic.open_folder(os.path.dirname(full), follow_link=True)
        else:
            parent = atomic.open_below(root, os.path.dirname(full))
        try:
            fd, st = atomic.open_regular(os.path.basename(full), dir_fd=parent)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise OSError(errno.ELOOP, atomic.LINK_REFUSED, full) from None
            raise
        finally:
            os.close(parent)
    if expect is not None and (st.st_size, st.st_mtime_ns) != tuple(expect):
        os.close(fd)
        raise Changed(full)
    _note(st)
    return fd, st


@contextmanager
def opened(path: PathLike, *, expect: tuple[int, int] | None = None) -> Iterator[BinaryIO]:
    """A binary file object over :func:`open_fd`'s descriptor (for Pillow, PyAV, LibRaw), closed after."""
    fd, _ = open_fd(path, expect=expect)
    with os.fdopen(fd, "rb") as handle:
        yield handle


def read(path: PathLike, limit: int, *, expect: tuple[int, int] | None = None) -> bytes:
    """All the bytes of the library file ``path``; ``EFBIG`` when it holds more than ``limit``."""
    fd, st = open_fd(path, expect=expect)
    try:
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
        data = _read_fd(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while it was read
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
    return data


def read_head(path: PathLike, limit: int) -> bytes:
    """At most the first ``limit`` bytes of the library file ``path`` (a header, a sidecar's text)."""
    fd, _ = open_fd(path)
    try:
        return _read_fd(fd, limit)
    finally:
        os.close(fd)


def _read_fd(fd: int, limit: int) -> bytes:
    out = io.BytesIO()
    while out.tell() < limit:
        block = os.read(fd, min(1 << 20, limit - out.tell()))
        if not block:
            break
        out.write(block)
    return out.getvalue()


@contextmanager
def recording() -> Iterator[list[tuple[int, int]]]:
    """Within the block, (size, modification time in ns) of each file this thread opened through the door,
    in order: what a read went to, for the caller to compare with what the walk listed."""
    seen: list[tuple[int, int]] = []
    before = getattr(_recorded, "seen", None)
    _recorded.seen = seen
    try:
        yield seen
    finally:
        _recorded.seen = before


def _note(st: os.stat_result) -> None:
    seen = getattr(_recorded, "seen", None)
    if seen is not None:
        seen.append((st.st_size, st.st_mtime_ns))
