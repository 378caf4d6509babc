"""The exported ONNX graph kept on disk: written through descriptors with its SHA-256 beside it, and read
back only through a descriptor, checked against that record, before ONNX Runtime loads the bytes.

The graph is made by :func:`novelfind.model.features.export_onnx` in memory (the exporter writes no file),
verified against eager PyTorch, then kept in the model cache folder (``$NOVELFIND_MODEL_CACHE``, else
``~/.cache/novelfind/models``) by :func:`keep_graph`. Someone who can write that folder (a shared
``~/.cache``, a model cache set to a shared folder) could otherwise swap a temporary file for a link (and
have root's export written over a file of root's) or plant a graph of their own (every photo scored the
same, without a word). So the graph and its record are written atomically through the folder's
descriptor (:func:`novelfind.base.atomic.write_bytes_at`: a new file ``O_EXCL | O_NOFOLLOW`` under a random
name, written, synced, given mode 0600 through its descriptor, renamed and checked), and
:func:`kept_graph` takes a graph only when it and its record are regular files of the user's that nobody
else can write, read through descriptors (no link followed, no FIFO waited on), and the graph's SHA-256 is
the recorded one. The check hashes the graph at every load, through the descriptor that read it (no hash
is kept with the file's stat, which someone who can write the folder could keep while changing the
bytes): 38 ms for MobileNet-V2's 14 MB graph, against 1 ms to read it alone, on the 2-core development
machine at load 7 (``scripts/bench_graph_check.py``, ``docs/bench/graph-check-2core.json``).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
from pathlib import Path

from novelfind.base import atomic
from novelfind.base.safe_text import display

log = logging.getLogger(__name__)

MAX_GRAPH_BYTES = 64 << 20  # a kept graph larger than this is not read (MobileNet-V2's: 14 MB)
GRAPH_RECORD = ".sha256"  # beside the kept graph: the SHA-256 of the graph exported there
GRAPH_MODE = 0o600  # the kept graph and its record: the user's alone


def _read_own(dir_fd: int, name: str, limit: int) -> bytes:
    """The bytes of ``name`` in the folder ``dir_fd``, through a descriptor: a regular file (no link
    followed, a FIFO never waited on) of the running user's that nobody else can write, of at most
    ``limit`` bytes. OSError saying why not."""
    fd, st = atomic.open_regular(name, dir_fd=dir_fd)
    try:
        if st.st_uid != os.geteuid():
            raise OSError(errno.EPERM, f"it belongs to another user (uid {st.st_uid})")
        if st.st_mode & 0o022:
            raise OSError(errno.EPERM, "others can write it")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"it is larger than {limit} bytes")
    return data


def kept_graph(path: Path) -> bytes | None:
    """The exported graph kept at ``path``, checked: read through a descriptor (:func:`_read_own`), its
    SHA-256 the one recorded beside it when it was exported (``PATH.sha256``). None when there is none,
    or when it cannot be trusted: then one warning (``novelfind`` logger, which a scan's ``on_warning``
    receives) says why, unless it is only a graph of the user's an earlier version kept without a record.
    The bytes are what ONNX Runtime then loads: the file is never opened again by name."""
    try:
        dir_fd = atomic.open_folder(path.parent, follow_link=True)
    except OSError:
        return None  # no model folder yet
    try:
        if atomic.lstat_at(dir_fd, path.name) is None:
            return None
        try:
            data = _read_own(dir_fd, path.name, MAX_GRAPH_BYTES)
        except OSError as err:
            log.warning(
                "the exported model %s cannot be used (%s); exporting it again", display(path), reason_of(err)
            )
            return None
        try:
            recorded = _read_own(dir_fd, path.name + GRAPH_RECORD, 256).decode("ascii").strip()
        except FileNotFoundError:
            return None  # an earlier version's, the user's own: exported again, quietly
        except (OSError, UnicodeDecodeError) as err:
            reason = reason_of(err) if isinstance(err, OSError) else "it is not text"
            log.warning(
                "the record of the exported model %s cannot be used (%s); exporting it again",
                display(path),
                reason,
            )
            return None
    finally:
        os.close(dir_fd)
    if hashlib.sha256(data).hexdigest() != recorded:
        log.warning(
            "the exported model %s is not the one novelfind exported (its SHA-256 differs from the one "
            "recorded); exporting it again",
            display(path),
        )
        return None
    return data


def keep_graph(path: Path, graph: bytes) -> None:
    """Keep an exported, verified graph at ``path`` with its SHA-256 beside it, each written atomically
    through the folder's descriptor (a new file ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a random name,
    synced, given mode 0600 through its descriptor, renamed and checked: :func:`atomic.replacing_at`).
    OSError when they cannot be written."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    dir_fd = atomic.open_folder(path.parent, follow_link=True)
    try:
        atomic.write_bytes_at(dir_fd, path.name, graph, mode=GRAPH_MODE, shown=path)
        record = f"{hashlib.sha256(graph).hexdigest()}\n".encode("ascii")
        atomic.write_bytes_at(dir_fd, path.name + GRAPH_RECORD, record, mode=GRAPH_MODE, shown=path)
    finally:
        os.close(dir_fd)


def reason_of(err: OSError) -> str:
    """An OSError of the reads and writes here, in a few words."""
    if err.errno == errno.ELOOP:
        return atomic.LINK_REFUSED
    return err.strerror or str(err)
