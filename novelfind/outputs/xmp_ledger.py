"""A run's XMP tags: this run's picks tagged, and the photos earlier runs tagged, under the scanned
folders, that are no longer picked untagged (:func:`apply_picks`, through :func:`novelfind.outputs.xmp.tag`
and ``untag``).

Which photos those are is kept in a small JSON file in the user data folder, the ledger
(:func:`default_ledger_path`: photo -> its sidecar and the keyword written), since finding them by
reading every sidecar of a 500,000-photo library would take longer than the scan. It is updated
atomically under a lock, so two runs never lose each other's entries.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from novelfind.base import atomic, dirs, safe_load
from novelfind.base.atomic import write_atomic
from novelfind.base.lock import waiting_lock
from novelfind.errors import OutputError
from novelfind.outputs.xmp import (
    DEFAULT_KEYWORD,
    Action,
    SidecarChange,
    SidecarError,
    check_keyword,
    is_under,
    tag,
    untag,
)

_LEDGER_LIMIT = 256 << 20  # bytes: the record of tagged sidecars, about 200 bytes a tagged photo


def default_ledger_path() -> Path:
    """The record of the sidecars novelfind has tagged (:func:`novelfind.base.dirs.sidecar_record_path`)."""
    return dirs.sidecar_record_path()


@dataclass(frozen=True)
class SidecarPick:
    """One file to tag: a pick's file. Each file of a RAW + JPEG pair is its own ``SidecarPick``, with
    the pair's other files as ``twins`` (they decide whether a shared ``NAME.xmp`` is the photo's)."""

    path: Path
    rank: int
    score: float
    twins: tuple[Path, ...] = ()

    @classmethod
    def for_photo(cls, files: Sequence[str | os.PathLike[str]], rank: int, score: float) -> list[SidecarPick]:
        """One per file of a photo (``files``: the file read first, then its twins)."""
        paths = [Path(f) for f in files]
        return [cls(p, rank, score, tuple(q for q in paths if q != p)) for p in paths]


@dataclass
class SidecarSummary:
    """What ``apply_picks`` did: changes by action, and the sidecars it had to leave alone."""

    changes: list[SidecarChange] = field(default_factory=list)
    problems: list[tuple[Path, str]] = field(default_factory=list)  # (sidecar or ledger, reason)

    def count(self, *actions: Action) -> int:
        return sum(1 for c in self.changes if c.action in actions)


def _root_of(path: str, roots: Sequence[str]) -> str | None:
    """The scanned folder ``path`` was found under (the innermost), None when there is none."""
    inside = [r for r in roots if is_under(path, [r]) and path != r]
    return max(inside, key=len) if inside else None


def _load_ledger(path: Path) -> tuple[dict[str, dict[str, str]], str | None]:
    """The ledger's entries (photo -> {"sidecar", "keyword"}) and a problem, if it could not be read."""
    try:
        data = atomic.read_limited(path, _LEDGER_LIMIT)  # a link or FIFO there refused
        text = data.decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return {}, None
    except OSError as e:
        return {}, f"cannot read the record of tagged sidecars: {e.strerror or e}"
    try:
        doc = safe_load.load_json(text, max_bytes=_LEDGER_LIMIT)
        entries = doc["sidecars"]
        if not isinstance(entries, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("sidecar"), str) for v in entries.values()
        ):
            raise ValueError("bad entries")
        return entries, None
    except (ValueError, KeyError, TypeError):
        aside = path.with_name(path.name + ".damaged")
        try:
            os.replace(path, aside)
        except OSError:
            return {}, "the record of tagged sidecars is damaged; starting a new one"
        return {}, f"the record of tagged sidecars is damaged (kept as {aside}); starting a new one"


def _save_ledger(path: Path, entries: dict[str, dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"version": 1, "sidecars": dict(sorted(entries.items()))}
    write_atomic(path, json.dumps(doc, indent=1, ensure_ascii=True) + "\n")


def apply_picks(
    picks: Iterable[SidecarPick],
    *,
    roots: Iterable[str | os.PathLike[str]],
    keyword: str = DEFAULT_KEYWORD,
    ledger: str | os.PathLike[str] | None = None,
    on_problem: Callable[[Path, str], None] | None = None,
    keep: Iterable[str | os.PathLike[str]] = (),
) -> SidecarSummary:
    """Tag this run's ``picks`` and untag the files earlier runs tagged under ``roots`` that are not picked
    and not in ``keep``.

    ``keep``: files whose tag stays though they are not picked now: a scan passes the photos it would
    rank but for the ignore list, so a re-run of a line with ``ignore_picks`` (whose earlier picks are
    now ignored) keeps the tags it wrote, while the picks of earlier weeks (older than ``since``) lose
    theirs when a new week's picks are tagged.

    ``roots`` are the folders (or files) this run scanned: photos a run tagged elsewhere are left alone.
    ``ledger`` is the record of tagged files (default ``default_ledger_path()``), updated atomically
    under a lock. A sidecar that cannot be read or written is reported through ``on_problem(path,
    reason)`` and in the summary, and the run goes on; an untag that failed is tried again next run.
    """
    flat_roots = [os.path.abspath(os.fspath(r)) for r in roots]
    check_keyword(keyword)  # a bad keyword fails before any file is touched
    ledger_path = Path(ledger) if ledger is not None else default_ledger_path()
    summary = SidecarSummary()

    def problem(path: Path, reason: str) -> None:
        summary.problems.append((path, reason))
        if on_problem is not None:
            on_problem(path, reason)

    try:
        ledger_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {ledger_path.parent}: {e.strerror or e}") from None
    with waiting_lock(
        ledger_path.with_name(ledger_path.name + ".lock"), f"the record of tagged sidecars {ledger_path}"
    ):
        entries, trouble = _load_ledger(ledger_path)
        if trouble:
            problem(ledger_path, trouble)
        picked: set[str] = set()
        written: set[str] = set()  # sidecars of this run's picks (two files may share NAME.xmp)
        for pick in picks:
            photo = os.path.abspath(os.fspath(pick.path))
            picked.add(photo)
            try:
                change = tag(
                    photo,
                    rank=pick.rank,
                    score=pick.score,
                    keyword=keyword,
                    twins=pick.twins,
                    root=_root_of(photo, flat_roots),
                )
            except SidecarError as e:
                problem(e.path, e.reason)
                continue
            summary.changes.append(change)
            written.add(os.path.realpath(change.sidecar))
            entries[photo] = {"sidecar": str(change.sidecar), "keyword": keyword}
        kept = {os.path.abspath(os.fspath(k)) for k in keep}
        for photo in sorted(entries):
            if photo in picked or photo in kept or not is_under(photo, flat_roots):
                continue
            sidecar = Path(entries[photo]["sidecar"])
            if os.path.realpath(sidecar) in written:
                del entries[photo]  # shared with a file picked now: its tag stays
                continue
            try:
                change = untag(photo, sidecar=sidecar, root=_root_of(photo, flat_roots))
            except SidecarError as e:
                problem(e.path, e.reason)
                continue
            if change.action != "unchanged":
                summary.changes.append(change)
            del entries[photo]
        try:
            _save_ledger(ledger_path, entries)
        except Exception as e:  # noqa: BLE001 - OutputError or OSError: the sidecars are written already
            problem(ledger_path, str(e))
    return summary
