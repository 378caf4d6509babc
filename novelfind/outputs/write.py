"""Everything a scan writes after ranking, behind one call: the results list, the copies, the HTML
report, the contact sheet and the XMP sidecars.

:func:`check_outputs` runs first, before the slow part, so a scan that could never write its outputs
fails in a second; :class:`OwnOutputs` keeps what novelfind wrote out of the photos it ranks;
:func:`write_outputs` writes what was asked for, in turn, the sidecars last. The writers themselves
live in :mod:`novelfind.outputs.formats` (lists), :mod:`novelfind.outputs.placement` (copies),
:mod:`novelfind.outputs.report` (the report), :mod:`novelfind.outputs.contact_sheet` and
:mod:`novelfind.outputs.xmp` (sidecars).

What to write comes as :class:`OutputSettings`, taken by name from the scan's parameters: the writers
know nothing of how those are given or checked, so the parameters can name the outputs' choices
(formats, modes, the default keyword) without a tie back.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from novelfind.base import atomic, dirs
from novelfind.base.atomic import write_atomic
from novelfind.base.safe_text import display
from novelfind.errors import InputError, MissingExtraError, OutputError
from novelfind.media.walk import FileList, scanned_path_within
from novelfind.outputs.contact_sheet import write_contact_sheet
from novelfind.outputs.formats import format_results
from novelfind.outputs.placement import MANIFEST_NAME, open_picks_folder, place_picks
from novelfind.outputs.report import write_html_report
from novelfind.outputs.thumbnails import THUMBNAIL_CACHE_NAME
from novelfind.outputs.xmp import available as xmp_available
from novelfind.outputs.xmp_ledger import SidecarPick, SidecarSummary, apply_picks
from novelfind.picks import Failure, Pick


@dataclass(frozen=True)
class OutputSettings:
    """What a run writes, and what its writers need to know: the scan's parameters of the same names
    (:meth:`of`)."""

    paths: tuple[Path, ...]  # the scanned folders and files (the picks folder must lie outside them)
    output: Path | None  # the results list
    format: str  # its format (``formats.FORMATS``)
    copy_to: Path | None  # the picks folder
    link: str  # how the picks are placed there (``placement.PLACE_MODES``)
    copy_members: bool  # also the other photos of each pick's moment
    follow_symlinks: bool  # whether the walk followed links (a pick found through one may be placed)
    report: Path | None  # the HTML report
    contact_sheet: Path | None
    xmp: bool  # tag the picks in their XMP sidecars
    xmp_keyword: str
    decode_timeout: float | None  # seconds a thumbnail's decode may take in its process
    shared_outputs: bool  # the results list, the report and the contact sheet readable by all (else private)
    cache: Any  # the scan's feature cache (True, False, None, a path or a cache): the thumbnails go beside it

    @classmethod
    def of(cls, settings: Any) -> OutputSettings:
        """The output settings of ``settings`` (a ``ScanParameters``, or anything with these names)."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})


def check_outputs(settings: OutputSettings) -> None:
    """Fail before the slow part when an output cannot possibly be written (OutputError), or needs what
    is not installed (MissingExtraError)."""
    p = settings
    if p.xmp and not xmp_available():
        raise MissingExtraError(
            "XMP sidecars need python-exiv2, which is not installed: pip install 'novelfind[xmp]'"
        )
    targets = (("results file", p.output), ("report", p.report), ("contact sheet", p.contact_sheet))
    for what, target in targets:
        if target is None:
            continue
        parent = target.parent if str(target.parent) else Path(".")
        if target.is_symlink():  # written through descriptors: a link there is never followed
            raise OutputError(f"cannot write the {what} {display(target)}: {atomic.LINK_REFUSED}")
        if target.is_dir():
            raise OutputError(f"cannot write the {what} {target}: it is a folder")
        if not parent.is_dir():
            raise OutputError(f"cannot write the {what} {target}: folder {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise OutputError(f"cannot write the {what} {target}: folder {parent} is not writable")
    if p.copy_to is not None:
        scanned = scanned_path_within(p.copy_to, p.paths)
        if scanned is not None:
            raise InputError(
                f"cannot place the picks in {p.copy_to}: it holds the scanned folder {scanned}, and the "
                "picks folder is left out of the walk, so nothing would be ranked; choose a folder "
                "outside it"
            )
        if p.copy_to.is_symlink():  # opened O_NOFOLLOW: a link there could be swapped to point anywhere
            raise OutputError(f"cannot place the picks in {display(p.copy_to)}: {atomic.LINK_REFUSED}")
        if p.copy_to.exists() and not p.copy_to.is_dir():
            raise OutputError(f"cannot place the picks in {p.copy_to}: it is not a folder")
        manifest = p.copy_to / MANIFEST_NAME
        if manifest.is_symlink():  # checked again when the picks are placed
            raise OutputError(f"cannot use {display(manifest)}: {atomic.LINK_REFUSED}")
        existing = p.copy_to.absolute()
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
        if not existing.is_dir():
            raise OutputError(f"cannot place the picks in {p.copy_to}: {existing} is not a folder")
        if not os.access(existing, os.W_OK):
            raise OutputError(f"cannot place the picks in {p.copy_to}: {existing} is not writable")


@contextmanager
def held_outputs(settings: OutputSettings) -> Iterator[HeldOutputs]:
    """Open, for the whole run, the folders the outputs go into that someone else may write: the picks
    folder (``O_DIRECTORY | O_NOFOLLOW``). Whatever its parent folder does to it during the scan (swap it
    for a link, rename it), the picks go into the folder opened here. A picks folder that does not exist
    yet is created and opened when the picks are placed. Raises OutputError."""
    held = HeldOutputs()
    if settings.copy_to is not None and os.path.lexists(settings.copy_to):
        held.picks_folder = open_picks_folder(settings.copy_to, create=False)
    try:
        yield held
    finally:
        if held.picks_folder is not None:
            os.close(held.picks_folder)
            held.picks_folder = None


@dataclass
class HeldOutputs:
    """Descriptors :func:`held_outputs` holds for :func:`write_outputs`."""

    picks_folder: int | None = None


class OwnOutputs:
    """Files novelfind wrote are never ranked as photos: this run's outputs, and any folder of picks
    placed by ``copy_to`` (marked by its manifest)."""

    def __init__(self, targets: list[Path]) -> None:
        self.targets = targets
        self._picks_folder: dict[Path, bool] = {}

    def contains(self, path: Path) -> bool:
        if any(path == t or t in path.parents for t in self.targets):
            return True
        folder = path.parent
        if folder not in self._picks_folder:
            self._picks_folder[folder] = (folder / MANIFEST_NAME).is_file()
        return self._picks_folder[folder]


def write_outputs(
    settings: OutputSettings,
    picks: list[Pick],
    *,
    record: dict[str, Any],
    failures: Sequence[Failure],
    files: FileList,
    points2d: Callable[[], np.ndarray],
    on_progress: Callable[[int, int], None],
    on_warning: Callable[[str], None],
    on_failure: Callable[[Path, str], None] | None = None,
    held: HeldOutputs | None = None,
    keep_tags: Sequence[Path] = (),
    on_thumbnails: Callable[[int, int], None] | None = None,
) -> SidecarSummary | None:
    """Every output ``settings`` asks for, in turn; the XMP sidecars last. Returns what ``xmp`` did.

    ``record``: the run record of the JSON formats; ``failures``: the files that could not be read;
    ``files``: every file ranked (row i of the features), and ``points2d()`` their (N, 2) map for the
    report, made only when a report is written. ``on_progress(done, total)`` counts the outputs
    written, ``on_thumbnails(done, total)`` the files whose thumbnails the report has made; a sidecar
    that cannot be written goes to ``on_warning``, a file that is no longer the one that was ranked (a
    pick not copied, a file the report or the contact sheet does not show) to ``on_failure(path,
    reason)`` (else to ``on_warning``). ``held``: the folders opened
    for the run (:func:`held_outputs`).
    ``keep_tags``: files whose tags of an earlier run stay though they are not picked now (photos this
    run would rank but for the ignore list: an earlier run's picks, with ``ignore_picks``).
    """
    p = settings
    writers: list[Callable[[], Any]] = []
    mode = atomic.output_mode(p.shared_outputs)  # never the mode of a file that was there

    def skipped(path: Path, reason: str) -> None:
        if on_failure is not None:
            on_failure(path, reason)
        else:
            on_warning(f"{display(path)}: {reason}")

    sidecars: list[SidecarSummary] = []
    if p.output is not None:
        text = format_results(picks, p.format, failures=failures, run=record)
        writers.append(lambda: write_atomic(p.output, text, mode=mode))
    if p.copy_to is not None:  # with no picks, this removes the picks of an earlier run
        writers.append(
            lambda: place_picks(
                picks,
                p.copy_to,
                mode=p.link,
                members=p.copy_members,
                on_skipped=skipped,
                follow_links=p.follow_symlinks,
                roots=p.paths,
                dir_fd=held.picks_folder if held is not None else None,
                on_warning=on_warning,
            )
        )
    if p.report is not None:
        writers.append(
            lambda: _write_report(
                p.report,
                picks,
                record,
                failures,
                files,
                points2d(),
                p.decode_timeout,
                on_thumbnails,
                thumbnail_cache_path(p.cache),
                skipped,
                mode,
            )
        )
    if p.contact_sheet is not None:
        writers.append(
            lambda: write_contact_sheet(
                p.contact_sheet, picks, decode_timeout=p.decode_timeout, on_skipped=skipped, mode=mode
            )
        )
    if p.xmp:  # with no picks, this takes back the tags of an earlier run
        writers.append(lambda: sidecars.append(_write_sidecars(p, picks, on_warning, keep_tags)))
    for done, write in enumerate(writers):
        on_progress(done, len(writers))
        write()
    if writers:
        on_progress(len(writers), len(writers))
    return sidecars[0] if sidecars else None


def _write_report(
    path: Path,
    picks: list[Pick],
    record: dict[str, Any],
    failures: Sequence[Failure],
    files: FileList,
    points2d: np.ndarray,
    decode_timeout: float,
    on_progress: Callable[[int, int], None] | None = None,
    thumbnail_cache: Path | None = None,
    on_skipped: Callable[[Path, str], None] | None = None,
    mode: int | None = None,
) -> None:
    row_of = {f.path: i for i, f in enumerate(files)}
    # the neighbours shown, as they were ranked (a pick and its members carry their own size and time)
    listed = {p.neighbour: files.stat_of(row_of[p.neighbour]) for p in picks if p.neighbour in row_of}
    write_html_report(
        path,
        picks,
        points2d=points2d,
        pick_indices=[row_of[pick.path] for pick in picks],
        run=record,
        failures=failures,
        paths=files.paths,
        decode_timeout=decode_timeout,
        on_progress=on_progress,
        thumbnail_cache=thumbnail_cache,
        listed=listed,
        on_skipped=on_skipped,
        mode=mode,
    )


def thumbnail_cache_path(cache: Any) -> Path | None:
    """Where the report keeps its thumbnails (:class:`novelfind.outputs.thumbnails.ThumbnailCache`):
    beside the feature cache (``cache``: the scan's ``cache`` parameter); None without a feature cache
    (``--no-cache``)."""
    if cache is False or cache is None:
        return None
    path = dirs.feature_cache_path() if cache is True else Path(getattr(cache, "path", cache))
    return path.parent / THUMBNAIL_CACHE_NAME


def _write_sidecars(
    p: OutputSettings, picks: list[Pick], on_warning: Callable[[str], None], keep: Sequence[Path]
) -> SidecarSummary:
    """Tag every file of each pick's moment in its XMP sidecar (the members with the pick's rank and
    score); untag the earlier picks under the paths."""

    def problem(path: Path, reason: str) -> None:
        on_warning(f"XMP sidecar {path}: {reason}" if path.suffix.lower() == ".xmp" else reason)

    return apply_picks(
        [
            sp
            for pick in picks
            for photo in (pick.files, *(m.files for m in pick.members))
            for sp in SidecarPick.for_photo(photo, pick.rank, pick.score)
        ],
        roots=p.paths,
        keyword=p.xmp_keyword,
        on_problem=problem,  # the record of tagged sidecars: novelfind.base.dirs.sidecar_record_path()
        keep=keep,
    )
