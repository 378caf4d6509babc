"""``--copy-to``: copying or linking the picks into a folder, and the manifest that records which
files there novelfind made (so that a re-run replaces only its own, never a file it did not create).
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from novelfind import atomic, safe_load
from novelfind.atomic import describe, unlink_quietly, write_atomic
from novelfind.errors import OutputError
from novelfind.formats import dumps_json
from novelfind.lock import pid_alive
from novelfind.picks import Pick
from novelfind.safe_text import display

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
    on_warning: Callable[[str], None] | None = None,
) -> list[Path]:
    """Copy or link the picks into ``dest`` as ``001_name.jpg`` ... and return the new paths.

    Every file of a pick goes (``Pick.files``): a RAW + JPEG pair as ``001_IMG_1.JPG`` and ``001_IMG_1.CR2``.
    With ``members``, the other photos of each pick's moment go too, numbered nearest first after the
    pick's rank: ``001m01_IMG_2.JPG``, ``001m02_IMG_3.JPG``.

    ``dest`` is created when missing. Files novelfind created there are listed in
    ``.novelfind-picks.json``; a re-run replaces (or removes) its own earlier picks when they are
    unchanged, and raises OutputError, before changing anything, if a name is taken by any other
    file. ``hardlink`` across file systems is an OutputError (no silent copy). A manifest that cannot be
    read counts as empty (nothing there is taken for novelfind's), with one line to ``on_warning``.
    """
    if mode not in PLACE_MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(PLACE_MODES)}")
    dest = Path(dest)
    picks = sorted(picks, key=lambda p: p.rank)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"cannot use {dest} for the picks: it is not a folder") from None
    except OSError as err:
        raise OutputError(f"cannot create {dest}: {describe(err)}") from None
    if not dest.is_dir():
        raise OutputError(f"cannot use {dest} for the picks: it is not a folder")
    if not os.access(dest, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write to {dest}: permission denied")

    manifest_path = dest / MANIFEST_NAME
    try:  # a manifest that is a link may point anywhere: never read or replaced through it
        atomic.refuse_link(manifest_path)
    except OSError as err:
        raise OutputError(f"cannot use {display(manifest_path)}: {describe(err)}") from None
    previous = _read_manifest(manifest_path, on_warning)
    ours = {name: rec for name, rec in previous.items() if _still_ours(dest / name, rec)}
    width = max(3, len(str(max((p.rank for p in picks), default=0))))
    sources = [(p.rank, "", Path(source)) for p in picks for source in p.files]
    if members:
        sources += [
            (p.rank, f"m{j:0{max(2, len(str(len(p.members))))}d}", Path(source))
            for p in picks
            for j, m in enumerate(p.members, 1)
            for source in m.files
        ]
    names = [pick_filename(rank, source, width, label) for rank, label, source in sources]

    # Check everything before touching anything.
    if len(set(names)) != len(names):
        raise OutputError("two picks have the same rank; cannot name them apart")
    dest_dev = dest.stat().st_dev
    for (*_, source), name in zip(sources, names, strict=True):
        target = dest / name
        if os.path.lexists(target) and name not in ours:
            raise OutputError(
                f"refusing to overwrite {display(target)}: not created by novelfind "
                "(move it away or choose another folder)"
            )
        try:
            source_stat = os.stat(source)
        except OSError as err:
            raise OutputError(f"cannot {mode} {source}: {describe(err)}") from None
        if mode == "hardlink" and source_stat.st_dev != dest_dev:
            raise OutputError(
                f"cannot hardlink {source} into {dest}: different file systems "
                "(use --link copy or --link symlink)"
            )

    _remove_stale_temps(dest)
    created: list[Path] = []
    records: dict[str, dict[str, Any]] = {}
    try:
        for (*_, source), name in zip(sources, names, strict=True):
            target = dest / name
            try:
                # a random name, created exclusively: a link planted under a name guessed in advance
                # is never opened
                tmp_name = f"{_TMP_PREFIX}{os.getpid()}-{secrets.token_hex(8)}"
                with atomic.staged(dest / tmp_name, target) as tmp:
                    _place_one(source, tmp, mode)
                    records[name] = _record(tmp, mode, source)
            except OSError as err:
                raise OutputError(
                    f"cannot {mode} {display(source)} to {display(target)}: {describe(err)}"
                ) from None
            ours.pop(name, None)
            created.append(target)
        for name in ours:  # earlier picks of ours that are no longer picked
            unlink_quietly(dest / name)
        _write_manifest(manifest_path, records)
    except BaseException:
        # A full disk, an error or Ctrl-C part-way: the picks are all there or none of this run's are.
        for target in created:
            unlink_quietly(target)
        try:
            _write_manifest(manifest_path, {n: r for n, r in ours.items() if os.path.lexists(dest / n)})
        except OutputError:
            pass  # the earlier manifest stays; it names no file of this run
        raise
    return created


def _place_one(source: Path, tmp: Path, mode: str) -> None:
    """Make ``tmp`` a copy of, or a link to, ``source``. ``tmp`` is a new name (random, see
    ``place_picks``); each way refuses one that exists, so a link planted there is never written
    through: the copy is created with ``O_EXCL | O_NOFOLLOW``, ``symlink`` and ``link`` fail on any
    existing name."""
    if mode == "copy":  # shutil.copy2 opens the destination by name, following a link there
        with open(source, "rb") as src, open(atomic.create_exclusive(tmp), "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
            st = os.fstat(src.fileno())
            out.flush()
            os.fchmod(out.fileno(), st.st_mode & 0o7777)
            os.utime(out.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))
    elif mode == "symlink":
        os.symlink(os.path.abspath(source), tmp)
    else:
        os.link(source, tmp)


def _record(created: Path, mode: str, source: Path) -> dict[str, Any]:
    st = os.lstat(created)
    rec: dict[str, Any] = {"mode": mode, "source": str(source)}
    if mode == "symlink":
        rec["target"] = os.readlink(created)
    else:
        rec["ino"] = st.st_ino
        if mode == "copy":
            rec["size"] = st.st_size
            rec["mtime_ns"] = st.st_mtime_ns
    return rec


def _still_ours(path: Path, rec: Mapping[str, Any]) -> bool:
    """True when ``path`` is still exactly what novelfind put there (not edited or replaced)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    mode = rec.get("mode")
    if mode == "symlink":
        return os.path.islink(path) and os.readlink(path) == rec.get("target")
    if os.path.islink(path) or st.st_ino != rec.get("ino"):
        return False
    if mode == "copy":
        return st.st_size == rec.get("size") and st.st_mtime_ns == rec.get("mtime_ns")
    return mode == "hardlink"


def _read_manifest(path: Path, on_warning: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """Entries of an earlier run; an unreadable or foreign manifest counts as empty (safe side)."""
    try:
        doc = safe_load.load_json(atomic.read_limited(path, _MANIFEST_LIMIT), max_bytes=_MANIFEST_LIMIT)
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


def _write_manifest(path: Path, files: Mapping[str, Mapping[str, Any]]) -> None:
    doc = {"schema": MANIFEST_SCHEMA, "version": 1, "files": dict(sorted(files.items()))}
    write_atomic(path, dumps_json(doc, indent=1) + "\n")


def _remove_stale_temps(dest: Path) -> None:
    """Temp files left by a run that was killed (SIGKILL, power loss) in this folder."""
    try:
        entries = list(os.scandir(dest))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(_TMP_PREFIX):
            continue
        pid = entry.name[len(_TMP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            unlink_quietly(entry.path)
