"""``--copy-to``: copying or linking the picks into a folder, and the manifest that records which
files there novelfind made (so that a re-run replaces only its own, never a file it did not create).

The picks folder may be shared (a synced folder, a NAS share): its other writers can rename, replace or
remove any name in it between two of novelfind's calls, and whoever can write the folder above it can
swap the folder itself for a link. So the folder is opened once (``O_DIRECTORY | O_NOFOLLOW``) and
everything in it goes through that descriptor (``dir_fd``): reading the manifest, checking names,
creating, renaming and removing files. A swap of the folder during the run changes nothing: the
descriptor still names the folder that was opened.

The photos copied are read the same way: each opened once, ``O_NOFOLLOW | O_NONBLOCK`` (a link swapped
in is refused, a FIFO cannot block the open or the read), checked with ``fstat`` to be a regular file of
the size and modification time it had when it was ranked, and copied from that descriptor. A photo that
fails a check is skipped with one warning; the other picks are placed.

Each copy is fsynced before it is renamed into place and named in the manifest, so a crash cannot leave
a copy of another size than the manifest says (which the next run would take for a file of someone
else's and refuse to replace). What that costs: 12 ms a photo instead of 2.4 (wall, 200 photos of
200 KB, median of 5 runs; CPU 1.6 ms instead of 0.6) on the 2-core development machine's disk; sidecars,
fsynced before too, are unchanged within the noise (20 ms a photo). ``scripts/bench_shared_writes.py``,
``docs/bench/shared-writes-2core.json`` and ``shared-writes-before-2core.json``.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from novelfind.base import atomic, door, safe_load
from novelfind.base.atomic import describe
from novelfind.base.lock import pid_alive
from novelfind.base.safe_text import display
from novelfind.errors import OutputError
from novelfind.outputs.formats import dumps_json
from novelfind.picks import Pick

PLACE_MODES = ("copy", "symlink", "hardlink")
MANIFEST_NAME = ".novelfind-picks.json"
MANIFEST_SCHEMA = "novelfind/picks-manifest"
_TMP_PREFIX = ".novelfind-tmp-"
_NAME_MAX = 255  # bytes in one file name on common file systems
_MANIFEST_LIMIT = 256 << 20  # bytes: a manifest of a million picks is about 200 MB


def pick_filename(rank: int, source: Path, width: int, member: str = "") -> str:
    """``001_IMG_4411.jpg``: rank zero-padded to ``width``; long names shortened, suffix kept. A
    member of the pick's moment has its number after the rank (``member`` ``m01``: ``001m01_IMG_4412.jpg``,
    listed after the pick)."""
    prefix = f"{rank:0{width}d}{member}_"
    name = source.name
    if len(os.fsencode(prefix + name)) <= _NAME_MAX:
        return prefix + name
    suffix = source.suffix if len(os.fsencode(source.suffix)) <= 32 else ""
    budget = _NAME_MAX - len(os.fsencode(prefix + suffix))
    stem = os.fsencode(name[: len(name) - len(suffix)] if suffix else name)[:budget]
    return prefix + stem.decode("utf-8", "ignore") + suffix


def place_picks(
    picks: Sequence[Pick],
    dest: Path | str,
    mode: str = "copy",
    *,
    members: bool = False,
    on_skipped: Callable[[Path, str], None] | None = None,
    follow_links: bool = False,
    roots: Sequence[str | os.PathLike[str]] = (),
    dir_fd: int | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> list[Path]:
    """Copy or link the picks into ``dest`` as ``001_name.jpg`` ... and return the new paths.

    Every file of a pick goes (``Pick.files``): a RAW + JPEG pair as ``001_IMG_1.JPG`` and ``001_IMG_1.CR2``.
    With ``members``, the other photos of each pick's moment go too, numbered nearest first after the
    pick's rank: ``001m01_IMG_2.JPG``, ``001m02_IMG_3.JPG``.

    ``dest`` is created when missing; a link there is refused. ``dir_fd``: the folder already opened
    (:func:`open_picks_folder`, held by the caller for the whole run), used instead of opening ``dest``.
    Files novelfind created there are listed in ``.novelfind-picks.json``; a re-run replaces (or
    removes) its own earlier picks when they are unchanged, and raises OutputError, before changing
    anything, if a name is taken by any other file. ``hardlink`` across file systems is an OutputError
    (no silent copy). A photo that is no longer the regular file that was ranked (a link, a FIFO, another
    size or time) is skipped and said through ``on_skipped(photo, reason)``; a link is followed only
    with ``follow_links`` (a scan that followed links). ``roots``: the scanned folders; a photo under one
    is opened from it one folder at a time without following a link (``atomic.open_below``), so a
    folder of the library swapped for a link cannot lead the copy elsewhere. A manifest that cannot be
    read counts as empty (nothing there is taken for novelfind's), with one line to ``on_warning``.
    """
    if mode not in PLACE_MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(PLACE_MODES)}")
    dest = Path(dest)
    reading = door.Policy(tuple(os.path.abspath(os.fspath(r)) for r in roots), follow_links)
    if dir_fd is not None:
        return _place_in(dir_fd, picks, dest, mode, members, on_skipped, reading, on_warning)
    fd = open_picks_folder(dest, create=True)
    try:
        return _place_in(fd, picks, dest, mode, members, on_skipped, reading, on_warning)
    finally:
        os.close(fd)


def open_picks_folder(dest: Path | str, *, create: bool) -> int:
    """Open the picks folder ``dest`` (``O_DIRECTORY | O_NOFOLLOW``), created first when missing and
    ``create``; a link at ``dest`` is refused. Returns its descriptor. Raises OutputError."""
    dest = Path(dest)
    if create:
        try:
            dest.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            pass  # a file or a link: said below, from the descriptor's point of view
        except OSError as err:
            raise OutputError(f"cannot create {display(dest)}: {describe(err)}") from None
    try:
        fd = atomic.open_folder(dest)
    except OSError as err:
        if err.errno == errno.ENOTDIR:
            raise OutputError(f"cannot use {display(dest)} for the picks: it is not a folder") from None
        raise OutputError(f"cannot use {display(dest)} for the picks: {describe(err)}") from None
    if not os.access(dest, os.W_OK | os.X_OK):  # for a plain message; the writes are through ``fd``
        os.close(fd)
        raise OutputError(f"cannot write to {display(dest)}: permission denied")
    return fd


def _place_in(
    dir_fd: int,
    picks: Sequence[Pick],
    dest: Path,
    mode: str,
    members: bool,
    on_skipped: Callable[[Path, str], None] | None,
    reading: door.Policy,
    on_warning: Callable[[str], None] | None = None,
) -> list[Path]:
    picks = sorted(picks, key=lambda p: p.rank)
    manifest_path = dest / MANIFEST_NAME
    try:  # a manifest that is a link may point anywhere: never read or replaced through it
        atomic.refuse_link_at(dir_fd, MANIFEST_NAME, manifest_path)
    except OSError as err:
        raise OutputError(f"cannot use {display(manifest_path)}: {describe(err)}") from None
    previous = _read_manifest(dir_fd, manifest_path, on_warning)
    ours = {name: rec for name, rec in previous.items() if _still_ours(dir_fd, name, rec)}
    width = max(3, len(str(max((p.rank for p in picks), default=0))))
    # (rank, member label, file, (size, mtime_ns) when ranked: known for the file each photo was read from)
    sources: list[tuple[int, str, Path, tuple[int, int] | None]] = [
        (p.rank, "", Path(source), (p.size, p.mtime_ns) if Path(source) == Path(p.path) else None)
        for p in picks
        for source in p.files
    ]
    if members:
        sources += [
            (
                p.rank,
                f"m{j:0{max(2, len(str(len(p.members))))}d}",
                Path(source),
                (m.size, m.mtime_ns) if Path(source) == Path(m.path) else None,
            )
            for p in picks
            for j, m in enumerate(p.members, 1)
            for source in m.files
        ]
    names = [pick_filename(rank, source, width, label) for rank, label, source, _ in sources]

    # Check everything before touching anything.
    if len(set(names)) != len(names):
        raise OutputError("two picks have the same rank; cannot name them apart")
    dest_dev = os.fstat(dir_fd).st_dev
    for (_, _, source, _), name in zip(sources, names, strict=True):
        if name not in ours and _lstat(dir_fd, name, dest / name) is not None:
            raise OutputError(
                f"refusing to overwrite {display(dest / name)}: not created by novelfind "
                "(move it away or choose another folder)"
            )
        try:
            source_stat = os.stat(source)
        except OSError as err:
            raise OutputError(f"cannot {mode} {display(source)}: {describe(err)}") from None
        if mode == "hardlink" and source_stat.st_dev != dest_dev:
            raise OutputError(
                f"cannot hardlink {display(source)} into {display(dest)}: different file systems "
                "(use --link copy or --link symlink)"
            )

    _remove_stale_temps(dir_fd)
    created: list[str] = []
    records: dict[str, dict[str, Any]] = {}
    try:
        for (_, _, source, ranked), name in zip(sources, names, strict=True):
            target = dest / name
            try:
                records[name] = _place_one(dir_fd, source, name, mode, ranked, reading)
            except _Skipped as skip:
                if on_skipped is not None:
                    on_skipped(source, f"{skip}; not placed in the picks folder")
                continue
            except OSError as err:
                raise OutputError(
                    f"cannot {mode} {display(source)} to {display(target)}: {describe(err)}"
                ) from None
            ours.pop(name, None)
            created.append(name)
        for name, rec in ours.items():  # earlier picks of ours that are no longer picked
            if _still_ours(dir_fd, name, rec):
                atomic.unlink_quietly(name, dir_fd=dir_fd)
        _write_manifest(dir_fd, manifest_path, records)
    except BaseException:
        # A full disk, an error or Ctrl-C part-way: the picks are all there or none of this run's are.
        for name in created:
            if _still_ours(dir_fd, name, records[name]):
                atomic.unlink_quietly(name, dir_fd=dir_fd)
        try:
            kept = {n: r for n, r in ours.items() if _lstat(dir_fd, n, dest / n) is not None}
            _write_manifest(dir_fd, manifest_path, kept)
        except OutputError:
            pass  # the earlier manifest stays; it names no file of this run
        raise
    return [dest / name for name in created]


class _Skipped(Exception):
    """A photo that is no longer what was ranked; its reason is the message."""


def _lstat(dir_fd: int, name: str, shown: Path) -> os.stat_result | None:
    try:
        return atomic.lstat_at(dir_fd, name)
    except OSError as err:
        raise OutputError(f"cannot use {display(shown)}: {describe(err)}") from None


def _open_source(
    source: Path, ranked: tuple[int, int] | None, reading: door.Policy
) -> tuple[int, os.stat_result]:
    """The photo ``source`` opened through the library door (no link followed below a scanned folder,
    ``O_NONBLOCK``, a regular file), checked to be the file that was ranked (``ranked``: its size and
    modification time then). Raises _Skipped, OSError."""
    try:
        return door.open_fd(source, expect=ranked, within=reading)
    except door.Changed:
        raise _Skipped("it changed since it was ranked (another size or modification time)") from None
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.EINVAL, errno.ENXIO):
            raise _Skipped(describe(err)) from None
        raise


def _place_one(
    dir_fd: int, source: Path, name: str, mode: str, ranked: tuple[int, int] | None, reading: door.Policy
) -> dict[str, Any]:
    """Make ``name`` (in the picks folder ``dir_fd``) a copy of, or a link to, ``source``, and return its
    manifest record. It is made under a new random name first (created exclusively: a link planted
    under a name guessed in advance is never opened), then renamed; a failure removes it. Raises
    _Skipped, OSError."""
    src, src_st = _open_source(source, ranked, reading)
    tmp = f"{_TMP_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
    try:
        if mode == "copy":
            out = atomic.create_exclusive(tmp, dir_fd=dir_fd)
            try:
                try:
                    _copy_fd(src, out)
                    after = os.fstat(src)
                    if (after.st_size, after.st_mtime_ns) != (src_st.st_size, src_st.st_mtime_ns):
                        raise _Skipped("it changed while it was copied")
                    os.utime(out, ns=(src_st.st_atime_ns, src_st.st_mtime_ns))
                    # novelfind's mode, not the photo's: read and write bits only, no more open than 0o644
                    atomic.finish_file(out, mode=atomic.new_file_mode(src_st.st_mode & 0o644))
                    atomic.rename_checked(out, tmp, dir_fd, name, name)
                except BaseException:
                    atomic.unlink_quietly(tmp, dir_fd=dir_fd)
                    raise
                st = os.fstat(out)
            finally:
                os.close(out)
            return {
                "mode": mode,
                "source": str(source),
                "ino": st.st_ino,
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
            }
        if mode == "symlink":
            target = os.path.abspath(source)
            os.symlink(target, tmp, dir_fd=dir_fd)
        else:
            os.link(source, tmp, dst_dir_fd=dir_fd, follow_symlinks=reading.follow_links)
        try:
            made = atomic.lstat_at(dir_fd, tmp)
            if mode == "hardlink" and (
                made is None or (made.st_dev, made.st_ino) != (src_st.st_dev, src_st.st_ino)
            ):
                raise _Skipped("it was replaced while it was linked")
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            atomic.unlink_quietly(tmp, dir_fd=dir_fd)
            raise
        rec = _record(dir_fd, name, mode, source)
        if rec is None or (mode == "hardlink" and rec["ino"] != src_st.st_ino):
            raise OSError(errno.EAGAIN, "it was changed by someone else while it was placed")
        return rec
    finally:
        os.close(src)


def _copy_fd(src: int, out: int) -> None:
    """Every byte of the open file ``src`` into ``out`` (the kernel's copy where it has one)."""
    while True:
        try:
            sent = os.sendfile(out, src, None, 1 << 24)
        except OSError as err:
            if err.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                break  # no sendfile between these two: copied below
            raise
        if sent == 0:
            return
    while chunk := os.read(src, 1 << 20):
        atomic.write_all(out, chunk)


def _record(dir_fd: int, name: str, mode: str, source: Path) -> dict[str, Any] | None:
    st = atomic.lstat_at(dir_fd, name)
    if st is None:
        return None
    rec: dict[str, Any] = {"mode": mode, "source": str(source)}
    if mode == "symlink":
        if not stat.S_ISLNK(st.st_mode):
            return None
        rec["target"] = os.readlink(name, dir_fd=dir_fd)
    else:
        rec["ino"] = st.st_ino
        if mode == "copy":
            rec["size"] = st.st_size
            rec["mtime_ns"] = st.st_mtime_ns
    return rec


def _still_ours(dir_fd: int, name: str, rec: Mapping[str, Any]) -> bool:
    """True when ``name`` is still exactly what novelfind put there (not edited or replaced)."""
    try:
        st = atomic.lstat_at(dir_fd, name)
        if st is None:
            return False
        mode = rec.get("mode")
        if mode == "symlink":
            return stat.S_ISLNK(st.st_mode) and os.readlink(name, dir_fd=dir_fd) == rec.get("target")
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode) or st.st_ino != rec.get("ino"):
        return False
    if mode == "copy":
        return st.st_size == rec.get("size") and st.st_mtime_ns == rec.get("mtime_ns")
    return mode == "hardlink"


def _read_manifest(
    dir_fd: int, path: Path, on_warning: Callable[[str], None] | None = None
) -> dict[str, dict[str, Any]]:
    """Entries of an earlier run; an unreadable or foreign manifest counts as empty (safe side)."""
    try:
        data = atomic.read_limited(MANIFEST_NAME, _MANIFEST_LIMIT, dir_fd=dir_fd)
        doc = safe_load.load_json(data, max_bytes=_MANIFEST_LIMIT)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        if on_warning is not None:
            reason = describe(err) if isinstance(err, OSError) else str(err)
            on_warning(f"the picks manifest {display(path)} cannot be read ({reason}); counted as empty")
        return {}
    files = doc.get("files") if isinstance(doc, dict) and doc.get("schema") == MANIFEST_SCHEMA else None
    if not isinstance(files, dict):
        return {}
    return {
        str(name): rec
        for name, rec in files.items()
        if isinstance(rec, dict) and "/" not in str(name) and str(name) not in ("", ".", "..")
    }


def _write_manifest(dir_fd: int, shown: Path, files: Mapping[str, Mapping[str, Any]]) -> None:
    """The manifest, replaced atomically through the folder's descriptor, with novelfind's mode (0o644
    less the umask: never the mode of a file someone planted under its name)."""
    doc = {"schema": MANIFEST_SCHEMA, "version": 1, "files": dict(sorted(files.items()))}
    data = atomic.encode_output(dumps_json(doc, indent=1) + "\n")
    try:
        atomic.write_bytes_at(dir_fd, MANIFEST_NAME, data, mode=atomic.new_file_mode(0o644), shown=shown)
    except OSError as err:
        raise OutputError(f"cannot write {display(shown)}: {describe(err)}") from None


def _remove_stale_temps(dir_fd: int) -> None:
    """Temp files left by a run that was killed (SIGKILL, power loss) in this folder."""
    try:
        with os.scandir(dir_fd) as it:
            names = [entry.name for entry in it]
    except OSError:
        return
    for name in names:
        if not name.startswith(_TMP_PREFIX):
            continue
        pid = name[len(_TMP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            atomic.unlink_quietly(name, dir_fd=dir_fd)
