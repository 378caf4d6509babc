"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every file novelfind writes (the outputs, the manifests, XMP sidecars, the exported ONNX model, model
bytes shipped to a cluster node) goes through :func:`replacing`: a temporary file in the target's folder,
written, fsynced, given the target's mode, renamed over the target, and the folder fsynced. A failure or
an interrupt at any point removes the temporary file and leaves the old one as it was. Callers turn the
``OSError`` into their own one-line error.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: str | os.PathLike[str], *, owner: tuple[int, int] | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on a clean exit it replaces ``path``.

    A symlink at ``path`` is followed, so its target is replaced. The new file keeps the mode of the
    file it replaces; a new one gets 0o666 less the umask (not the private 0o600 of a temporary file).
    ``owner`` (uid, gid) is given to the new file where the system allows it. Raises OSError.
    """
    target = Path(os.path.realpath(path)) if os.path.islink(path) else Path(path)
    mode = _mode_for(target)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:100]}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        _fsync_file(tmp)
        os.chmod(tmp, mode)
        if owner is not None:
            try:
                os.chown(tmp, *owner)
            except OSError:
                pass  # not allowed to give it away or to that group: it stays ours
        os.replace(tmp, target)
    except BaseException:
        unlink_quietly(tmp)
        raise
    _fsync_dir(target.parent)


def write_bytes(path: str | os.PathLike[str], data: bytes, *, owner: tuple[int, int] | None = None) -> None:
    """Replace (or create) ``path`` with ``data`` atomically (see :func:`replacing`). Raises OSError."""
    with replacing(path, owner=owner) as tmp, open(tmp, "wb") as handle:
        handle.write(data)


def unlink_quietly(path: str | os.PathLike[str]) -> None:
    """Remove ``path`` if it can be removed; a file already gone (or kept by the system) is no error."""
    try:
        os.unlink(path)
    except OSError:
        pass


def _mode_for(path: Path) -> int:
    """Keep an existing file's permissions; a new file gets 0o666 minus the umask."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
