"""Ranked output: the pick record, text formats, atomic writes and placing the picks in a folder.

The formats are described in ``docs/output-schema.md``. The HTML report and the contact sheet build
on this module, in :mod:`novelfind.htmlreport`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import secrets
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from novelfind import atomic
from novelfind.atomic import describe, unlink_quietly, write_atomic
from novelfind.errors import OutputError
from novelfind.lock import pid_alive
from novelfind.safe_text import display
from novelfind.video import ClipInfo

RESULT_SCHEMA = "novelfind/results"
RESULT_SCHEMA_VERSION = 2  # 2: a pick is a moment (a representative and its members), K counts moments
FORMATS = ("tsv", "json", "jsonl", "csv", "paths", "paths0", "members", "members0")
CSV_COLUMNS = ("rank", "score", "path", "size", "mtime", "neighbour", "distance", "also", "member_count")
PLACE_MODES = ("copy", "symlink", "hardlink")
MANIFEST_NAME = ".novelfind-picks.json"
MANIFEST_SCHEMA = "novelfind/picks-manifest"
_TMP_PREFIX = ".novelfind-tmp-"
_NAME_MAX = 255  # bytes in one file name on common file systems
_MANIFEST_LIMIT = 256 << 20  # bytes: a manifest of a million picks is about 200 MB


@dataclass(frozen=True)
class Member:
    """Another photo of a pick's moment (``novelfind.moments``): a frame of its burst or batch."""

    path: Path  # absolute, as found by the walk
    size: int
    mtime_ns: int
    distance: float  # to the pick, between feature vectors scaled to unit length
    also: tuple[Path, ...] = ()  # the photo's other files (a RAW + JPEG pair)

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.path, *self.also)


@dataclass(frozen=True)
class Pick:
    """One selected moment, shown by its most typical photo; ``rank`` 1 is the most novel."""

    rank: int
    score: float  # the ranking's score: higher = more novel; comparable within one run only
    path: Path  # absolute, as found by the walk (symbolic links kept)
    size: int  # bytes, when it was scanned
    mtime_ns: int  # modification time when it was scanned, ns since the epoch
    neighbour: Path | None = None  # nearest other image in the library (None when it is alone)
    distance: float | None = None  # distance to it in the feature space: the reason it is novel
    also: tuple[Path, ...] = ()  # the photo's other files (the RAW of a RAW + JPEG pair), not read
    clip: ClipInfo | None = None  # a clip: its length, the frames read and the moment that is its vector
    members: tuple[Member, ...] = ()  # the other photos of its moment, nearest first; () for a photo alone

    @property
    def kind(self) -> str:
        """``"clip"`` or ``"photo"``."""
        return "photo" if self.clip is None else "clip"

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file of the photo, ``path`` first: what ``--copy-to`` places and ``--xmp`` tags."""
        return (self.path, *self.also)

    @property
    def mtime(self) -> datetime:
        """The modification time as an aware UTC datetime (microsecond precision)."""
        return utc_datetime(self.mtime_ns)


def picks_of(
    ranking: Any, files: Sequence[Any], photos: Sequence[Any], clips: Mapping[Path, ClipInfo] | None = None
) -> list[Pick]:
    """The picks of a ``novelfind.ranking.Ranking`` of the rows of ``files`` (``ImageFile`` records),
    best first, each with the members of its moment; ``photos[i].also`` are row i's other files (a
    RAW + JPEG pair); ``clips`` the records of the clips among ``files``, by path."""
    clips = clips or {}

    def member(row: int, distance: float) -> Member:
        f = files[row]
        return Member(f.path, f.size, f.mtime_ns, float(distance), tuple(t.path for t in photos[row].also))

    picks = []
    for index, score, neighbour, distance, rows, far in zip(
        ranking.indices,
        ranking.scores,
        ranking.neighbour,
        ranking.distance,
        ranking.members,
        ranking.member_distance,
        strict=True,
    ):
        f, found = files[int(index)], int(neighbour) >= 0
        picks.append(
            Pick(
                rank=len(picks) + 1,
                score=float(score),
                path=f.path,
                size=f.size,
                mtime_ns=f.mtime_ns,
                neighbour=files[int(neighbour)].path if found else None,
                distance=float(distance) if found else None,
                also=tuple(twin.path for twin in photos[int(index)].also),
                clip=clips.get(f.path),
                members=tuple(member(int(r), d) for r, d in zip(rows, far, strict=True)),
            )
        )
    return picks


class Failure(NamedTuple):
    """A file that could not be read, and why (one line)."""

    path: Path
    reason: str


# ---------------------------------------------------------------------------------------------
# Text formats


def format_results(
    picks: Sequence[Pick],
    fmt: str = "tsv",
    *,
    failures: Iterable[tuple[Path | str, str]] = (),
    run: Mapping[str, Any] | None = None,
) -> str:
    """Render the picks (best first) as one of :data:`FORMATS`.

    ``tsv`` and ``paths`` escape ``\\``, tab, newline and other control characters so that one
    line is always one pick; ``paths0`` is NUL-separated and exact; ``members`` and ``members0`` are
    ``paths`` and ``paths0`` with each pick followed by its moment's members (every photo of every
    moment); ``json``/``jsonl`` are the versioned schema of ``docs/output-schema.md``. ``failures``
    and ``run`` only appear in ``json`` and ``jsonl``. Raises ValueError for an unknown format.
    """
    picks = sorted(picks, key=lambda p: p.rank)
    if fmt == "tsv":
        return "".join(
            f"{p.rank}\t{_score(p.score)}\t{escape_field(str(p.path))}\t{len(p.members)}\n" for p in picks
        )
    if fmt in ("paths", "paths0", "members", "members0"):
        every = fmt.startswith("members")  # each pick followed by its members
        paths = [path for p in picks for path in (p.path, *(m.path for m in p.members if every))]
        if fmt.endswith("0"):
            return "".join(f"{path}\0" for path in paths)
        return "".join(f"{escape_field(str(path))}\n" for path in paths)
    if fmt == "csv":
        return _format_csv(picks)
    failure_rows = [{"path": str(path), "reason": str(reason)} for path, reason in failures]
    if fmt == "json":
        doc = {
            "schema": RESULT_SCHEMA,
            "version": RESULT_SCHEMA_VERSION,
            "run": _json_safe(dict(run or {})),
            "picks": [_pick_record(p) for p in picks],
            "failures": failure_rows,
        }
        return _dumps(doc, indent=2) + "\n"
    if fmt == "jsonl":
        lines = [
            {
                "type": "run",
                "schema": RESULT_SCHEMA,
                "version": RESULT_SCHEMA_VERSION,
                "run": _json_safe(dict(run or {})),
            }
        ]
        lines += [{"type": "pick", **_pick_record(p)} for p in picks]
        lines += [{"type": "failure", **row} for row in failure_rows]
        return "".join(_dumps(line) + "\n" for line in lines)
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
# Also C1 controls and U+2028 / U+2029: ``str.splitlines`` (and many viewers) end a line at U+0085,
# U+2028 and U+2029, so one pick would read as two.
_NEEDS_ESCAPE = re.compile(r"[\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_ESCAPE_TOKEN = re.compile(r"\\(\\|t|n|r|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4})")


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte of the file name (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code >= 0x80:  # C1 control, line separator, lone surrogate (\xHH from 80 up stands for a byte)
        return f"\\u{code:04x}"
    return f"\\x{code:02x}"


def escape_field(text: str) -> str:
    """Escape a path for the line formats: ``\\\\ \\t \\n \\r``, ``\\xHH`` for other C0 control
    characters and for bytes that are not UTF-8, ``\\uHHHH`` for C1 controls (U+0085) and the line
    separators U+2028 / U+2029. Ordinary names come out unchanged."""
    return _NEEDS_ESCAPE.sub(_escape_char, text)


def unescape_field(text: str) -> str:
    """Invert :func:`escape_field`; ``os.fsencode`` of the result gives the original bytes."""

    def one(match: re.Match[str]) -> str:
        token = match.group(1)
        if token in ("\\", "t", "n", "r"):
            return {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[token]
        code = int(token[1:], 16)
        if token[0] == "x" and code >= 0x80:
            return chr(0xDC00 + code)
        return chr(code)

    return _ESCAPE_TOKEN.sub(one, text)


def _score(score: float) -> str:
    return f"{score:.6f}"


def iso_utc(mtime_ns: int) -> str:
    """``2024-05-01T12:34:56.123456Z`` for a nanosecond timestamp (microsecond precision)."""
    return utc_datetime(mtime_ns).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utc_datetime(mtime_ns: int) -> datetime:
    """An aware UTC datetime for a nanosecond timestamp (microsecond precision)."""
    seconds, rest = divmod(int(mtime_ns), 1_000_000_000)
    return datetime.fromtimestamp(seconds, tz=timezone.utc).replace(microsecond=rest // 1000)


def _pick_record(p: Pick) -> dict[str, Any]:
    return {
        "rank": int(p.rank),
        "score": _finite(p.score),
        "path": str(p.path),
        "size": int(p.size),
        "mtime": iso_utc(p.mtime_ns),
        "mtime_ns": int(p.mtime_ns),
        "neighbour": None if p.neighbour is None else str(p.neighbour),
        "distance": None if p.distance is None else _finite(p.distance),
        "also": [str(path) for path in p.also],
        "kind": p.kind,
        "clip": None if p.clip is None else p.clip.as_json(),
        "member_count": len(p.members),
        "members": [str(m.path) for m in p.members],
    }


def _finite(value: Any) -> float | None:
    """JSON has no NaN or infinity: those become null."""
    number = float(value)
    return number if math.isfinite(number) else None


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) or (hasattr(obj, "dtype") and getattr(obj, "ndim", 1) == 0):
        try:
            return _finite(obj) if isinstance(obj, float) or obj.dtype.kind == "f" else obj
        except (TypeError, ValueError):
            return obj
    if isinstance(obj, Mapping):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _format_csv(picks: Sequence[Pick]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180
    writer.writerow(CSV_COLUMNS)
    for p in picks:
        rec = _pick_record(p)
        writer.writerow(
            [
                rec["rank"],
                _score(p.score),
                rec["path"],
                rec["size"],
                rec["mtime"],
                "" if rec["neighbour"] is None else rec["neighbour"],
                "" if rec["distance"] is None else f"{rec['distance']:.6f}",
                json.dumps(rec["also"], ensure_ascii=False) if rec["also"] else "",
                rec["member_count"],
            ]
        )
    return out.getvalue()


# Lone surrogates (undecodable file-name bytes), and the characters ``str.splitlines`` ends a line at
# that JSON leaves raw (U+0085, U+2028, U+2029): escaped, one JSON Lines record stays one line.
_JSON_ESCAPE = re.compile(r"[\x85\u2028\u2029\ud800-\udfff]")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):  # numpy arrays
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, datetime):
        return obj.isoformat()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _dumps(obj: Any, indent: int | None = None) -> str:
    """JSON, UTF-8 readable; undecodable file-name bytes as ``\\udcXX`` escapes (round-trip
    with ``json.loads`` + ``os.fsencode``)."""
    text = json.dumps(obj, ensure_ascii=False, indent=indent, default=_json_default, allow_nan=False)
    return _JSON_ESCAPE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# ---------------------------------------------------------------------------------------------
# Atomic writes


# ---------------------------------------------------------------------------------------------
# Placing the picks in a folder


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
    picks: Sequence[Pick], dest: Path | str, mode: str = "copy", *, members: bool = False
) -> list[Path]:
    """Copy or link the picks into ``dest`` as ``001_name.jpg`` ... and return the new paths.

    Every file of a pick goes (``Pick.files``): a RAW + JPEG pair as ``001_IMG_1.JPG`` and ``001_IMG_1.CR2``.
    With ``members``, the other photos of each pick's moment go too, numbered nearest first after the
    pick's rank: ``001m01_IMG_2.JPG``, ``001m02_IMG_3.JPG``.

    ``dest`` is created when missing. Files novelfind created there are listed in
    ``.novelfind-picks.json``; a re-run replaces (or removes) its own earlier picks when they are
    unchanged, and raises OutputError, before changing anything, if a name is taken by any other
    file. ``hardlink`` across file systems is an OutputError (no silent copy).
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
    previous = _read_manifest(manifest_path)
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


def _read_manifest(path: Path) -> dict[str, dict[str, Any]]:
    """Entries of an earlier run; an unreadable or foreign manifest counts as empty (safe side)."""
    try:
        doc = json.loads(atomic.read_limited(path, _MANIFEST_LIMIT).decode("utf-8", "surrogateescape"))
    except (OSError, ValueError):
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
    write_atomic(path, _dumps(doc, indent=1) + "\n")


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
