"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every file novelfind writes (the outputs, the manifests, XMP sidecars, the exported ONNX model, model
bytes shipped to a cluster node) goes through :func:`replacing`: a temporary file in the target's folder,
written, fsynced, given the target's mode, renamed over the target, and the folder fsynced. A failure or
an interrupt at any point removes the temporary file and leaves the old one as it was. Callers turn the
``OSError`` into their own one-line error.

No write follows a link novelfind did not create: a symbolic link at the target is refused
(:func:`refuse_link`) unless the caller asks to follow it (``-o`` to a link the user made). The
temporary file has a random name and is created with ``O_EXCL`` (:func:`tempfile.mkstemp`), so a link
planted under a name guessed in advance is never opened; the rename replaces the directory entry
itself, so a link that appears at the target after the check is replaced, never written through.

:func:`write_atomic` is that for the outputs, with ``OutputError``. What is not a file written byte by
byte (a pick placed as a copy or a link) is made under a name of the caller's and swapped in by
:func:`staged`, the same rename and the same clean-up.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from novelfind.errors import OutputError
from novelfind.safe_text import display


@contextmanager
def replacing(
    path: str | os.PathLike[str], *, owner: tuple[int, int] | None = None, follow_link: bool = False
) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on a clean exit it replaces ``path``.

    A symlink at ``path`` is refused (:func:`refuse_link`); with ``follow_link`` it is followed, so its
    target is replaced. The new file keeps the mode of the file it replaces; a new one gets 0o666 less
    the umask (not the private 0o600 of a temporary file). ``owner`` (uid, gid) is given to the new
    file where the system allows it. Raises OSError.
    """
    if follow_link and os.path.islink(path):
        target = Path(os.path.realpath(path))
    else:
        refuse_link(path)
        target = Path(path)
    mode = _mode_for(target)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:100]}.", suffix=".tmp")
    os.close(fd)
    with staged(Path(name), target) as tmp:
        yield tmp
        _fsync_file(tmp)
        os.chmod(tmp, mode)
        if owner is not None:
            try:
                os.chown(tmp, *owner)
            except OSError:
                pass  # not allowed to give it away or to that group: it stays ours
    _fsync_dir(target.parent)


@contextmanager
def staged(tmp: Path, target: Path) -> Iterator[Path]:
    """Yield ``tmp`` for the caller to create (a file, a copy, a link); on a clean exit it is renamed over
    ``target``, on any failure or interrupt removed. The name is the caller's, so that it can find and
    remove what a killed run left (``placement.place_picks``). Raises OSError."""
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        unlink_quietly(tmp)
        raise


def write_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    owner: tuple[int, int] | None = None,
    follow_link: bool = False,
) -> None:
    """Replace (or create) ``path`` with ``data`` atomically (see :func:`replacing`). Raises OSError."""
    with replacing(path, owner=owner, follow_link=follow_link) as tmp, open(tmp, "wb") as handle:
        handle.write(data)


LINK_REFUSED = "it is a symbolic link novelfind did not create (not followed)"


def refuse_link(path: str | os.PathLike[str]) -> None:
    """Raise OSError (ELOOP, :data:`LINK_REFUSED`) when ``path`` is a symbolic link.

    Someone who can write into a shared folder (a picks folder, a photo library) can plant a link there
    to a file of the user's elsewhere; writing through it would overwrite that file.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, LINK_REFUSED, os.fspath(path))


def create_exclusive(path: str | os.PathLike[str], mode: int = 0o600) -> int:
    """Open a new file at ``path`` for writing; never an existing file or a link (``O_EXCL``,
    ``O_NOFOLLOW``). Returns the descriptor. Raises OSError (FileExistsError when the name is taken)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    return os.open(path, flags, mode)


def read_limited(path: str | os.PathLike[str], limit: int, *, follow_link: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    For files novelfind reads back (a picks manifest, a config file): a link is refused unless
    ``follow_link``, a device or FIFO (``/dev/zero``, a pipe that never ends) is refused without
    blocking, and a file over ``limit`` bytes is refused rather than read into memory. Raises OSError
    (ELOOP for a refused link, EINVAL for what is not a regular file, EFBIG for one too large).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_link:
        refuse_link(path)
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    with open(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
    return data


def encode_output(text: str) -> bytes:
    """Bytes to write for ``text``: UTF-8, with undecodable file-name bytes restored as they were."""
    return text.encode("utf-8", "surrogateescape")


def write_atomic(path: Path | str, data: str | bytes, *, follow_link: bool = False) -> None:
    """Write ``data`` to ``path`` all at once (:func:`replacing`).

    ``str`` is encoded as UTF-8 (undecodable file-name bytes restored). A symlink at ``path`` is
    refused, or with ``follow_link`` (``-o`` to a link the user made) followed, so its target is
    replaced. Raises OutputError with a one-line message; never leaves a temp file behind.
    """
    path = Path(os.path.realpath(path)) if follow_link and os.path.islink(path) else Path(path)
    payload = encode_output(data) if isinstance(data, str) else bytes(data)
    if not os.path.islink(path) and path.is_dir():
        raise OutputError(f"cannot write {display(path)}: it is a folder")
    if not path.parent.is_dir():
        raise OutputError(f"cannot write {display(path)}: no such folder {display(path.parent)}")
    try:
        write_bytes(path, payload)
    except OSError as err:
        raise OutputError(f"cannot write {display(path)}: {describe(err)}") from None


def describe(err: OSError) -> str:
    """An OSError in a few words for a one-line message: its strerror (``No space left on device``)."""
    return err.strerror or str(err)


def unlink_quietly(path: str | os.PathLike[str]) -> None:
    """Remove ``path`` if it can be removed; a file already gone (or kept by the system) is no error."""
    try:
        os.unlink(path)
    except OSError:
        pass


def _mode_for(path: Path) -> int:
    """Keep an existing file's permissions; a new file gets 0o666 minus the umask."""
    try:
        return path.lstat().st_mode & 0o7777
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
