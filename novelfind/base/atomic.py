"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every file novelfind writes (the outputs, the manifests, XMP sidecars, the exported ONNX model, model
bytes shipped to a cluster node) is made as a temporary file in the target's folder, written, fsynced,
given its mode (and, for a sidecar made by root, its owner), renamed over the target, and the folder
fsynced. A failure or an interrupt at any point removes the temporary file and leaves the old one as it
was. Callers turn the ``OSError`` into their own one-line error.

Someone else may write to the folder (a shared library, a picks folder): between two system calls they
can rename, replace or remove any name in it, a link to a file of root's included. So nothing in such a
folder is used by name twice. The folder is opened once (:func:`open_folder`, ``O_DIRECTORY``, its last
component not followed), and every later call is relative to that descriptor (``dir_fd``); the temporary
file is created ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a random name and then written, fsynced,
``fchmod``-ed and ``fchown``-ed through its own descriptor, never by name, and renamed with
``renameat``. A link swapped in for the temporary file meanwhile is never touched: the descriptor still
names the file novelfind created. The rename replaces the directory entry itself, so a link that
appears at the target is replaced, never written through. After the rename, the target must be the
file written (same inode), or the write is reported as disturbed (``EAGAIN``).

The mode of a new file is novelfind's choice (:func:`new_file_mode`), never one copied from a file
that happened to be there: a planted file of mode 6777 (or a planted 0666 output) lends the new one
nothing. Only permission bits are ever set; never setuid, setgid or sticky. The files :func:`write_bytes`
and :func:`replacing` make are private (:data:`PRIVATE_MODE`, ``0600``) unless the caller says otherwise
(:func:`output_mode`: ``0644`` for the outputs of a run with ``shared_outputs``), less the umask.

No write follows a link novelfind did not create: a symbolic link at the target is refused
(:data:`LINK_REFUSED`), ``-o`` included.

Where the system lacks one of these calls (``dir_fd`` support, ``O_NOFOLLOW``, ``O_DIRECTORY``,
``fchown``), :func:`require_descriptors` refuses with ``ENOTSUP`` rather than fall back to names.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from novelfind.base.safe_text import display
from novelfind.errors import OutputError

LINK_REFUSED = "it is a symbolic link novelfind did not create (not followed)"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_checked = False


def require_descriptors() -> None:
    """Raise OSError (ENOTSUP) unless this system has every call the writes here go through:
    ``openat``/``renameat``/``unlinkat``/``fstatat`` (``dir_fd``), ``O_NOFOLLOW``, ``O_DIRECTORY``,
    ``fchmod`` and ``fchown``. Linux, the BSDs and macOS have them all; without them novelfind writes
    nothing rather than use names in a folder someone else may change."""
    global _checked
    if _checked:
        return
    missing = [
        name
        for name, ok in (
            ("O_NOFOLLOW", bool(_NOFOLLOW)),
            ("O_DIRECTORY", bool(_DIRECTORY)),
            ("fchmod", hasattr(os, "fchmod")),
            ("fchown", hasattr(os, "fchown")),
            ("openat", os.open in os.supports_dir_fd),
            ("renameat", os.rename in os.supports_dir_fd),
            ("unlinkat", os.unlink in os.supports_dir_fd),
            ("fstatat", os.stat in os.supports_dir_fd and os.stat in os.supports_follow_symlinks),
        )
        if not ok
    ]
    if missing:
        raise OSError(
            errno.ENOTSUP,
            f"this system lacks {', '.join(missing)}, which safe writes need (see docs/security.md)",
        )
    _checked = True


def open_folder(path: str | os.PathLike[str], *, follow_link: bool = False) -> int:
    """A descriptor of the folder ``path`` (``O_DIRECTORY``), for every later call in it to be relative to.

    Its last component is not followed unless ``follow_link`` (a folder the user named on the command
    line may be a link of theirs; a folder found inside a shared one may not). Raises OSError (ELOOP,
    :data:`LINK_REFUSED`, for a refused link; ENOTDIR for a file).
    """
    require_descriptors()
    flags = os.O_RDONLY | _DIRECTORY | _CLOEXEC | (0 if follow_link else _NOFOLLOW)
    try:
        return os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP or (err.errno == errno.ENOTDIR and os.path.islink(path)):
            raise OSError(errno.ELOOP, LINK_REFUSED, os.fspath(path)) from None
        raise


def open_below(root: str | os.PathLike[str], folder: str | os.PathLike[str]) -> int:
    """A descriptor of ``folder``, which lies inside ``root``: ``root`` is opened as named (links
    followed: the user named it), then each component below it with ``O_NOFOLLOW``, so a folder of the
    library swapped for a link (to ``/etc``) is refused rather than entered. Raises OSError (ELOOP, a
    link on the way; ValueError when ``folder`` is not inside ``root``)."""
    root_abs, folder_abs = os.path.abspath(root), os.path.abspath(folder)
    rel = os.path.relpath(folder_abs, root_abs)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
        raise ValueError(f"{folder_abs} is not inside {root_abs}")
    fd = open_folder(root_abs, follow_link=True)
    for part in [] if rel == os.curdir else rel.split(os.sep):
        try:
            nxt = os.open(part, os.O_RDONLY | _DIRECTORY | _CLOEXEC | _NOFOLLOW, dir_fd=fd)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.ELOOP, errno.ENOTDIR):
                raise OSError(errno.ELOOP, LINK_REFUSED, os.path.join(root_abs, rel)) from None
            raise
        os.close(fd)
        fd = nxt
    return fd


def current_umask() -> int:
    """The process's umask, read without changing it where the system says it (Linux ``/proc``: a
    read-and-restore with ``os.umask`` would race with other threads creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode(permissions: int = 0o666) -> int:
    """The mode novelfind gives a file it makes: ``permissions`` less the umask, permission bits only
    (no setuid, setgid or sticky bit, whatever was there before)."""
    return permissions & 0o777 & ~current_umask()


PRIVATE_MODE = 0o600  # a file novelfind makes for the user alone: outputs, its state, its caches
SHARED_MODE = 0o644  # an output the user shares (``shared_outputs``): readable by all, written by its owner


def output_mode(shared: bool = False) -> int:
    """The mode of an output (``-o``, the report, the contact sheet): :data:`SHARED_MODE` where the user
    asked for outputs others may read (``shared_outputs``), else :data:`PRIVATE_MODE`, less the umask;
    never the mode of a file that was there."""
    return new_file_mode(SHARED_MODE if shared else PRIVATE_MODE)


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """``lstat`` of ``name`` in the folder ``dir_fd``; None when there is none. Raises OSError."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def refuse_link_at(dir_fd: int, name: str, shown: str | os.PathLike[str]) -> os.stat_result | None:
    """``lstat_at``, raising OSError (ELOOP, :data:`LINK_REFUSED`, ``shown``) for a symbolic link."""
    st = lstat_at(dir_fd, name)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, LINK_REFUSED, os.fspath(shown))
    return st


def _temp_name(name: str) -> str:
    return f".{name[:100]}.{secrets.token_hex(8)}.tmp"


def create_exclusive(path: str | os.PathLike[str], mode: int = 0o600, *, dir_fd: int | None = None) -> int:
    """Open a new file at ``path`` (in ``dir_fd``) for writing; never an existing file or a link
    (``O_EXCL``, ``O_NOFOLLOW``). Returns the descriptor. Raises OSError (FileExistsError when the name
    is taken)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    return os.open(path, flags, mode, dir_fd=dir_fd)


def _create_temp(dir_fd: int, name: str) -> tuple[int, str]:
    for _ in range(100):
        tmp = _temp_name(name)
        try:
            return create_exclusive(tmp, dir_fd=dir_fd), tmp
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "no free temporary name", name)


def finish_file(fd: int, *, mode: int, owner: tuple[int, int] | None = None) -> None:
    """Sync the file ``fd``, give it ``owner`` (uid, gid: where the system allows it) and ``mode``, all
    through its descriptor. The owner first: a change of owner may clear mode bits."""
    os.fsync(fd)
    if owner is not None:
        try:
            os.fchown(fd, *owner)
        except OSError:
            pass  # not allowed to give it away or to that group: it stays ours
    os.fchmod(fd, mode & 0o777)


def rename_checked(fd: int, tmp: str, dir_fd: int, name: str, shown: str | os.PathLike[str]) -> None:
    """Rename ``tmp`` over ``name`` (both in ``dir_fd``), then check that ``name`` is the file ``fd``:
    someone who swapped the temporary name meanwhile has had their own file renamed, never novelfind's
    data written anywhere else. Raises OSError (EAGAIN) when the file there is not ours."""
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    mine, there = os.fstat(fd), lstat_at(dir_fd, name)
    if there is None or (there.st_dev, there.st_ino) != (mine.st_dev, mine.st_ino):
        raise OSError(
            errno.EAGAIN,
            "it was changed by someone else while it was written (not written)",
            os.fspath(shown),
        )


def fsync_folder(dir_fd: int) -> None:
    try:
        os.fsync(dir_fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the rename is done


@contextmanager
def replacing_at(
    dir_fd: int,
    name: str,
    *,
    mode: int,
    owner: tuple[int, int] | None = None,
    shown: str | os.PathLike[str] | None = None,
) -> Iterator[int]:
    """Yield the descriptor of a new temporary file in the folder ``dir_fd``, for the caller to write;
    on a clean exit it is synced, given ``mode`` and ``owner`` through that descriptor and renamed over
    ``name`` (:func:`rename_checked`); on any failure or interrupt it is removed. A link at ``name`` is
    refused. ``shown`` names the target in errors. Raises OSError."""
    shown = shown if shown is not None else name
    refuse_link_at(dir_fd, name, shown)
    fd, tmp = _create_temp(dir_fd, name)
    try:
        yield fd
        finish_file(fd, mode=mode, owner=owner)
        rename_checked(fd, tmp, dir_fd, name, shown)
    except BaseException:
        unlink_quietly(tmp, dir_fd=dir_fd)
        raise
    finally:
        os.close(fd)
    fsync_folder(dir_fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd``. Raises OSError."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_bytes_at(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    mode: int,
    owner: tuple[int, int] | None = None,
    shown: str | os.PathLike[str] | None = None,
) -> None:
    """Replace (or create) ``name`` in the folder ``dir_fd`` with ``data`` (:func:`replacing_at`)."""
    with replacing_at(dir_fd, name, mode=mode, owner=owner, shown=shown) as fd:
        write_all(fd, data)


def _target(path: str | os.PathLike[str], follow_link: bool) -> Path:
    if follow_link and os.path.islink(path):
        return Path(os.path.realpath(path))
    return Path(path)


@contextmanager
def replacing(
    path: str | os.PathLike[str],
    *,
    owner: tuple[int, int] | None = None,
    follow_link: bool = False,
    mode: int | None = None,
) -> Iterator[Path]:
    """Yield the path of a new temporary file next to ``path``, for a writer that needs a name (the
    ONNX exporter); on a clean exit it replaces ``path``. Only for folders of the user's own (the user
    cache folder): the caller writes by name. The file is then opened again with ``O_NOFOLLOW`` and
    must be a regular file of this user's; it is synced, given its mode and ``owner`` through that
    descriptor and renamed ``dir_fd``-relative. ``mode``: None is :data:`PRIVATE_MODE` less the umask,
    never the replaced file's. A symlink at ``path`` is refused unless ``follow_link``. Raises
    OSError."""
    target = _target(path, follow_link)
    mode = new_file_mode(PRIVATE_MODE) if mode is None else mode
    dir_fd = open_folder(target.parent if str(target.parent) else ".", follow_link=True)
    try:
        refuse_link_at(dir_fd, target.name, target)
        fd, tmp = _create_temp(dir_fd, target.name)
        os.close(fd)
        try:
            yield target.parent / tmp
            fd = os.open(tmp, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC, dir_fd=dir_fd)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    raise OSError(
                        errno.EAGAIN, "its temporary file was replaced (not written)", os.fspath(target)
                    )
                finish_file(fd, mode=mode, owner=owner)
                rename_checked(fd, tmp, dir_fd, target.name, target)
            finally:
                os.close(fd)
        except BaseException:
            unlink_quietly(tmp, dir_fd=dir_fd)
            raise
        fsync_folder(dir_fd)
    finally:
        os.close(dir_fd)


def write_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    owner: tuple[int, int] | None = None,
    mode: int | None = None,
) -> None:
    """Replace (or create) ``path`` with ``data`` atomically, through descriptors (:func:`replacing_at`).

    The folder is opened as named; a symlink at ``path`` is refused. The new file gets ``mode`` (None:
    :data:`PRIVATE_MODE` less the umask), never the mode of the file it replaces. Raises OSError.
    """
    target = Path(path)
    mode = new_file_mode(PRIVATE_MODE) if mode is None else mode
    dir_fd = open_folder(target.parent if str(target.parent) else ".", follow_link=True)
    try:
        write_bytes_at(dir_fd, target.name, data, mode=mode, owner=owner, shown=target)
    finally:
        os.close(dir_fd)


def refuse_link(path: str | os.PathLike[str]) -> None:
    """Raise OSError (ELOOP, :data:`LINK_REFUSED`) when ``path`` is a symbolic link.

    Someone who can write into a shared folder (a picks folder, a photo library) can plant a link there
    to a file of the user's elsewhere; writing through it would overwrite that file. (A check by name,
    for an early error; the writes themselves refuse a link through their folder's descriptor.)
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, LINK_REFUSED, os.fspath(path))


def open_regular(
    path: str | os.PathLike[str], *, dir_fd: int | None = None, follow_link: bool = False
) -> tuple[int, os.stat_result]:
    """Open ``path`` (in ``dir_fd``) for reading without blocking (``O_NONBLOCK``: a FIFO swapped in
    never hangs the open or the read) and without following a link at it unless ``follow_link``; it
    must be a regular file (``fstat`` of the descriptor). Returns (descriptor, its stat). Raises OSError
    (ELOOP for a refused link, EINVAL for what is not a regular file)."""
    flags = os.O_RDONLY | _NONBLOCK | _CLOEXEC | (0 if follow_link else _NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as err:
        if err.errno == errno.ELOOP and not follow_link:
            raise OSError(errno.ELOOP, LINK_REFUSED, os.fspath(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_limited(
    path: str | os.PathLike[str], limit: int, *, follow_link: bool = False, dir_fd: int | None = None
) -> bytes:
    """The bytes of the regular file ``path`` (in ``dir_fd``), at most ``limit`` of them.

    For files novelfind reads back (a picks manifest, a config file, a sidecar): a link is refused
    unless ``follow_link``, a device or FIFO (``/dev/zero``, a pipe that never ends) is refused without
    blocking, and a file over ``limit`` bytes is refused rather than read into memory. Raises OSError
    (ELOOP for a refused link, EINVAL for what is not a regular file, EFBIG for one too large).
    """
    fd, _ = open_regular(path, dir_fd=dir_fd, follow_link=follow_link)
    with open(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
    return data


def encode_output(text: str) -> bytes:
    """Bytes to write for ``text``: UTF-8, with undecodable file-name bytes restored as they were."""
    return text.encode("utf-8", "surrogateescape")


def write_atomic(path: Path | str, data: str | bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` all at once (:func:`write_bytes`), with ``mode`` (None:
    :data:`PRIVATE_MODE` less the umask; an output: :func:`output_mode`).

    ``str`` is encoded as UTF-8 (undecodable file-name bytes restored). A symlink at ``path`` is
    refused (:data:`LINK_REFUSED`). Raises OutputError with a one-line message; never leaves a temp
    file behind.
    """
    path = Path(path)
    payload = encode_output(data) if isinstance(data, str) else bytes(data)
    if not os.path.islink(path) and path.is_dir():
        raise OutputError(f"cannot write {display(path)}: it is a folder")
    if not path.parent.is_dir():
        raise OutputError(f"cannot write {display(path)}: no such folder {display(path.parent)}")
    try:
        write_bytes(path, payload, mode=mode)
    except OSError as err:
        raise OutputError(f"cannot write {display(path)}: {describe(err)}") from None


def describe(err: OSError) -> str:
    """An OSError in a few words for a one-line message: its strerror (``No space left on device``)."""
    return err.strerror or str(err)


def unlink_quietly(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> None:
    """Remove ``path`` (in ``dir_fd``) if it can be removed; a file already gone (or kept by the
    system) is no error."""
    try:
        os.unlink(path, dir_fd=dir_fd)
    except OSError:
        pass
