"""What a scan returns: :class:`ScanResult` with its :class:`Counts`, the :class:`Progress` events it
reports on the way, the run record of the JSON formats (``docs/output-schema.md``), the scan's rank
step that makes its picks (:func:`rank_picks`), and the notices and warnings a scan gives about its
result (a ranking that changed method, nothing new to rank), and what names the line a scan is a run of
(:func:`line_options`, for :mod:`novelfind.media.reruns`)."""

from __future__ import annotations

import logging
import os
import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from novelfind import __version__
from novelfind.base import devices
from novelfind.cache import ranking_root
from novelfind.errors import InputError, NovelfindError
from novelfind.extract.engines import ENGINES
from novelfind.media import reruns
from novelfind.media.dates import Dates, since_mask
from novelfind.media.ignore import IgnoreList, Selection, select
from novelfind.media.kinds import RAW, kind_of
from novelfind.media.pairs import PhotoList
from novelfind.media.reruns import LineRecord
from novelfind.media.video import ClipInfo
from novelfind.media.walk import FileList, ImageFile
from novelfind.model.features import Extractor, classes_of
from novelfind.outputs.formats import format_results
from novelfind.outputs.xmp_ledger import SidecarSummary
from novelfind.params import FIELDS, ScanParameters
from novelfind.picks import Failure, Pick, picks_of
from novelfind.ranking import driver as ranking
from novelfind.ranking.methods import METHODS, method_settings
from novelfind.ranking.sources import FeatureSource, as_source


@dataclass(frozen=True)
class Counts:
    """What happened to the files of one scan."""

    found: int  # image files of the photos found (RAW twins included; the run's own outputs left out)
    from_cache: int  # vectors read from the cache (by stat, or by content for moved files)
    extracted: int  # vectors made by the model in this run
    failed: int  # files that could not be read (walk errors and decode failures)
    candidates: int  # photos that could be picked: all that were read, or those taken since `since`,
    #                  less the ignored ones (with ``ignore_picks``, less those the line's last run ranked)
    duplicates_dropped: int  # candidates folded into a better pick's moment (its members)
    photos: int = 0  # photos the found files make (a RAW + JPEG pair is one photo of two files)
    ignored: int = 0  # photos read but on the ignore list: ranked with the rest, never picked
    newly_ignored: int = 0  # photos of this run's moments added to the ignore list (``ignore_picks``)
    clips: int = 0  # of the photos found, the clips (video files; ``video.VIDEO_EXTENSIONS``)
    known_failed: int = 0  # of the failed files, those an earlier scan reported, unchanged since


@dataclass(frozen=True)
class Progress:
    """A progress event of :func:`scan`, for ``on_progress``.

    ``stage`` is ``"walk"`` (``done`` files found so far, ``total`` None), ``"wait"`` (another run is
    writing ``path``; this one waits for it), ``"extract"`` (``done`` of ``total`` files resolved:
    read from the cache, extracted or failed), ``"dates"`` (``done`` of ``total`` capture dates read
    from headers, where the cache has none yet), ``"rank"`` (0 of 1, then 1 of 1), ``"write"``
    (``done`` of ``total`` outputs written) or ``"report"`` (the HTML report: thumbnails of ``done`` of
    ``total`` files made).
    """

    stage: str
    done: int = 0
    total: int | None = None
    path: Path | None = None


@dataclass(frozen=True)
class ScanResult:
    """What :func:`scan` returns.

    ``picks`` best first; ``failures`` the unreadable files, in walk order; ``files`` every image that
    was read (one per photo: a RAW + JPEG pair is read through its JPEG; a
    :class:`~novelfind.media.walk.FileList`, ImageFile records in compact form), and ``features`` (N, dim)
    float32 their vectors, row i for ``files[i]`` (rank them again another way with
    :func:`novelfind.rank`, without touching the photos); None for a library too large to hold them
    (``novelfind.ranking.budget.MATRIX_BUDGET``), ranked from the cache. ``sidecars`` says what ``xmp`` did.
    ``clips`` maps each clip among ``files`` to what its vector was made from (``video.ClipInfo``).
    ``taken`` / ``taken_source``: when each of ``files`` was taken and where that date came from
    (``dates``: :class:`novelfind.media.dates.Dates`, with the offsets).
    ``known_failures``: of ``failures``, the files an earlier scan with the same cache already reported
    and that have not changed since (not passed to ``on_failure`` again). ``notices``: what the user
    should know about the result, one line each (a library of one photo cannot be ranked; nothing new
    to rank). ``outputs_kept``: with ``ignore_picks``, nothing new since the last run of the same line (every
    photo it would rank was ranked by that run or is on the ignore list), so the outputs (results file,
    copies, report, sidecars) and the ignore list were left as they were. ``warnings``: the
    problems the scan survived (an unusable cache, a slower fallback) when no ``on_warning`` was given.
    """

    picks: list[Pick]
    failures: list[Failure]
    counts: Counts
    seconds: float
    parameters: ScanParameters
    files: list[ImageFile] = field(repr=False)
    features: np.ndarray | None = field(repr=False)
    sidecars: SidecarSummary | None = None  # with ``xmp``: the sidecars changed, and those that failed
    clips: dict[Path, ClipInfo] = field(default_factory=dict, repr=False)  # the clips among ``files``
    dates: Dates | None = field(default=None, repr=False)  # when each of ``files`` was taken

    @property
    def taken(self) -> np.ndarray:
        """float64 (N,): when each of ``files`` was taken, UTC seconds since the epoch, row i for
        ``files[i]`` (the ranking's rows); NaN where unknown. A local date (``exif-local``) is the wall
        clock read as UTC (``docs/dates.md``)."""
        return self.dates.taken if self.dates is not None else np.full(len(self.files), np.nan)

    @property
    def taken_source(self) -> list[str]:
        """Where each of :attr:`taken` came from: exif, exif-local, raw, clip, xmp, file, invalid, none."""
        return self.dates.sources if self.dates is not None else ["none"] * len(self.files)

    known_failures: list[Failure] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    outputs_kept: bool = False
    warnings: list[str] = field(default_factory=list)  # without ``on_warning``: what the scan survived

    def record(self) -> dict[str, Any]:
        """The run record of the JSON formats (``docs/output-schema.md``): parameters and counts."""
        return run_record(self.parameters, self.counts, self.seconds)

    def to_text(self, fmt: str | None = None) -> str:
        """The results in an output format (default: the scan's ``format``), as ``output`` gets them."""
        return format_results(
            self.picks, fmt or self.parameters.format, failures=self.failures, run=self.record()
        )


def capture_times(taken: Dates) -> np.ndarray:
    """The capture times the ranking groups by: those the photos (or their sidecars) say. A file time
    stands in for a date in the outputs, but it is when a file was copied, not a shot: two photos copied
    in one second are no burst."""
    times = np.array(taken.taken, dtype=np.float64, copy=True)
    times[[source == "file" for source in taken.sources]] = np.nan
    return times


def run_record(params: ScanParameters, counts: Counts, seconds: float) -> dict[str, Any]:
    """The ``run`` object of the JSON formats: the version, the parameters that shape the ranking
    (:func:`parameters_record`) and the counts."""
    return {
        "version": __version__,
        **parameters_record(params),
        "images_found": counts.found,
        "photos_found": counts.photos,
        "clips_found": counts.clips,
        "ignored": counts.ignored,
        "from_cache": counts.from_cache,
        "extracted": counts.extracted,
        "failed": counts.failed,
        "duplicates_dropped": counts.duplicates_dropped,
        "seconds": round(seconds, 3),
    }


def parameters_record(params: ScanParameters) -> dict[str, Any]:
    """The parameters of the run record (:meth:`ScanParameters.record`) that this run used: the solver's
    settings only for a method that takes them (``Method.settings``), and ``since`` as an aware ISO 8601
    time, a date given without an offset in local time (as it was read)."""
    unused = method_settings() - METHODS[params.method].settings
    record = {name: value for name, value in params.record().items() if name not in unused}
    since = params.since
    if since is not None and since.utcoffset() is None:  # local time: said with its offset
        record["since"] = since.astimezone().isoformat()
    return record


@contextmanager
def warnings_to(on_warning: Callable[[str], None]) -> Iterator[None]:
    """Route Python warnings and the package's log records to ``on_warning``, one line each."""

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            on_warning(record.getMessage())

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        on_warning(str(message))

    logger = logging.getLogger("novelfind")
    handler = Handler(logging.WARNING)
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    previous = warnings.showwarning
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous
        logger.removeHandler(handler)
        logger.propagate = propagate


# --------------------------------------------------------------------------- the picks


def choose_candidates(
    params: ScanParameters,
    ignore_list: IgnoreList | None,
    taken: Dates,
    files: FileList,
    groups: Sequence[Sequence[ImageFile]],
    known_digests: Callable[[Sequence[Any]], Sequence[str | None]],
    on_warning: Callable[[str], None],
) -> tuple[Selection, np.ndarray, LineRecord | None]:
    """The photos a scan ranks as candidates (:func:`novelfind.media.ignore.select`): those of ``files``
    (row i: photo i, whose files are ``groups[i]``) taken (else modified) since ``since``, less those on
    the ignore list and, with ``ignore_picks``, those the last run of the same line ranked
    (:func:`line_record`). Returns the selection, the window (bool (N,)) and the line's record."""
    p = params
    in_window = since_mask(taken, files.mtimes_ns, p.since)
    line = line_record(p, ignore_list, files, on_warning)
    chosen = select(
        in_window,
        ignore_list if not p.include_ignored else None,
        groups,
        since=p.since is not None,
        ignore_picks=p.ignore_picks,
        considered=None if line is None else line.considered,
        known_digests=known_digests,
        on_warning=on_warning,
    )
    return chosen, in_window, line


def rank_picks(
    params: ScanParameters,
    vectors: np.ndarray | FeatureSource,
    files: FileList,
    read: PhotoList,
    clips: Mapping[Path, ClipInfo],
    taken: Dates | None,
    extractor: Extractor | None,
    *,
    candidates: np.ndarray,
    restricted: bool,
    on_progress: Callable[[int], None],
) -> tuple[list[Pick], int]:
    """The picks of a scan and the duplicates dropped: the most novel ``candidates``, scored against the
    whole library (with ``since`` or ignored photos, the candidates are fewer than the photos; all of them
    count as neighbours). ``vectors``: the matrix, or the vectors left in the cache, read chunk by chunk;
    ``clips``: what the clips among ``files`` were read as (``Extraction.clips``); ``taken``: when each was
    taken (``taken.taken``, float64 UTC seconds, NaN where unknown, row i for ``files[i]``): the events of
    ``event-knn`` and every moment's time span; ``extractor``: what made the vectors, whose classes label
    the picks (``features.classes_of``); ``on_progress(0)`` and ``on_progress(1)`` around the ranking."""
    if not len(candidates):
        return [], 0
    p = params
    on_progress(0)
    try:
        result = ranking.rank(
            vectors,
            p.k,
            method=p.method,
            config=p.solver_config(),
            dedup=p.dedup,
            device=solver_device(p, len(files)) if METHODS[p.method].solver else None,
            candidates=candidates if restricted else None,
            prefer=originality(files, read, clips),  # a moment is shown by its best original
            times=None if taken is None else capture_times(taken),  # when each photo was taken
        )
    except ValueError as err:  # e.g. a learning rate so large that the weights overflow
        raise InputError(f"cannot rank with these settings: {err}") from None
    on_progress(1)
    labels = classes_of(extractor, as_source(vectors).take(result.indices))
    picks = picks_of(result, files, read, clips, taken, labels)
    if p.min_score is not None:  # best first: the picks that reach it keep their ranks 1, 2, ...
        picks = [pick for pick in picks if pick.score >= p.min_score]
    return picks, int(result.duplicates_dropped)


def originality(
    files: FileList, read: PhotoList, clips: Mapping[Path, ClipInfo]
) -> Callable[[np.ndarray], np.ndarray]:
    """How good an original each of some rows of ``files`` is, as keys compared first key first
    (``ranking.rank``'s ``prefer``): among a moment's medoid and its copies the best is shown
    (``novelfind.ranking.moments``). A photo before a clip (a clip's size says nothing of its frames);
    then a camera's own picture, one with a RAW twin (``media.pairs``: the JPEG the camera wrote next to
    its RAW), before a file without one (an export, a resave); then the larger pixel count (read from
    the header, only for the photos compared: 0 when unreadable); then the larger file."""
    pixels: dict[int, int] = {}

    def count(row: int) -> int:
        if row not in pixels:
            path = files[row].path
            info = kind_of(path).info(path)  # the header only; never raises
            pixels[row] = int(info.get("width") or 0) * int(info.get("height") or 0)
        return pixels[row]

    def keys(rows: np.ndarray) -> np.ndarray:
        out = np.zeros((len(rows), 4))
        for j, row in enumerate(np.asarray(rows, dtype=np.int64).tolist()):
            f = files[row]
            clip = f.path in clips
            raw_twin = any(kind_of(t.path) is RAW for t in read.twins.get(row, ()))
            out[j] = (not clip, raw_twin, 0 if clip else count(row), f.size)
        return out

    return keys


def solver_device(params: ScanParameters, photos: int) -> str:
    """Where the solver runs for ``photos`` photos: ``device``; with an engine running the model
    elsewhere, ``device`` is the workers', and the solver takes this machine's CUDA device when there is
    one and the ranking is large enough to pay for it (``devices.resolve_device``)."""
    if not ENGINES[params.engine].remote or params.device == "cpu":
        return devices.resolve_device(params.device, photos)
    return devices.resolve_device("auto", photos)


# --------------------------------------------------------------------------- what a scan tells besides

# Methods whose score scale a release changed, with that release: a library last ranked by an earlier
# version with the same method is told once that its scores moved. (None so far.)
SCALE_CHANGED: dict[str, str] = {}
# The default method from each release that changed it: a library last ranked with an earlier release's
# default, ranked now by this one's (no method chosen), is told once that the default changed.
DEFAULT_METHODS: tuple[tuple[str, str], ...] = (("0.1.0", "ads"), ("0.2.0", "cosine-knn"))


def _release(version: str) -> tuple[int, ...] | None:
    """``X.Y.Z`` as numbers (a suffix such as ``.dev1`` aside); None for text that is no version."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    return None if m is None else tuple(int(part or 0) for part in m.groups())


def _older(version: str, than: str) -> bool:
    """Whether release ``version`` comes before ``than`` (both ``X.Y.Z``); False when either is no version."""
    a, b = _release(version), _release(than)
    return a is not None and b is not None and a < b


def default_method_of(version: str) -> str | None:
    """The method novelfind ``version`` ranked with by default (None: a version this one cannot place)."""
    if _release(version) is None:
        return None
    chosen = None
    for since, method in DEFAULT_METHODS:
        if not _older(version, since):
            chosen = method
    return chosen


def ranking_changed(cache: Any, params: ScanParameters, *, chosen: bool) -> str | None:
    """The one warning of a ranking that changed for a reason the user did not choose: the library was last
    ranked (with this cache) by an earlier version's default method and this run, choosing none, ranks
    with this version's default; or the scores of the method it chose again are on another scale since a
    release. The line says how to keep the old ranking. ``chosen``: the user named the method (on the
    command line, in the environment, the config file or the call): a method they asked for is never
    warned about, nor is leaving one they had chosen before. A cache an earlier version wrote stands for
    that version's default."""
    try:
        last = cache.last_ranking(ranking_root(params.paths))
    except NovelfindError:
        return None  # an unreadable record only costs the notice
    if last is None:
        return None
    method, version, inferred = last
    new = params.method
    if method == new:
        if new in SCALE_CHANGED and _older(version, SCALE_CHANGED[new]):
            return (
                f"this library was last ranked with --method {method} (novelfind {version}); the scores "
                f"of {new} are on another scale since novelfind {SCALE_CHANGED[new]}"
            )
        return None
    if chosen or default_method_of(version) != method:
        return None  # asked for now, or the last run's method was chosen then: nothing changed unasked
    was = (
        f"novelfind {version}, which last used this cache, ranked with {method} by default"
        if inferred
        else f"this library was last ranked with {method}, the default of novelfind {version}"
    )
    return (
        f"{was}; novelfind {__version__} ranks with --method {new} by default, so the picks and the scale "
        f"of the scores differ: add --method {method} to rank as before"
    )


def note_ranking(cache: Any, params: ScanParameters) -> None:
    """Remember this ranking of the library for the next scan (:func:`ranking_changed`)."""
    try:
        cache.note_ranking(ranking_root(params.paths), params.method, __version__)
    except NovelfindError:
        pass  # a cache that cannot be written has already been reported


def unranked_notice(photos: int, picks: list[Pick]) -> str | None:
    """The notice of a library of one photo: there is nothing to compare it with, so its score (0) says
    nothing."""
    if photos == 1 and picks:
        return (
            f"the library is one photo ({picks[0].path}): it has nothing to be compared with, so "
            "it cannot be ranked and its score 0 means nothing"
        )
    return None


def unreadable_error(images: int, failures: Sequence[Failure]) -> str:
    """The error of a scan none of whose ``images`` could be read, with why: the one image's reason, or
    of several the commonest reason and how many it stopped (``failures``: what the scan met)."""
    if images == 1 and len(failures) == 1:
        return f"cannot read {failures[0].path}, the only image: {failures[0].reason}"
    said = "the only image could not be read" if images == 1 else f"none of the {images} images could be read"
    reasons = Counter(failure.reason for failure in failures).most_common()
    if len(reasons) == 1:
        return f"{said}: {reasons[0][0]}"
    if reasons:
        reason, count = reasons[0]
        return f"{said}; the commonest reason ({count} of {len(failures)}): {reason}"
    return said


def nothing_new_notice(params: ScanParameters, window: int) -> str:
    """The notice of a run with nothing new to rank among the ``window`` photos it would rank (a re-run of a
    line with ``ignore_picks``): each was ranked by the line's last run or is on the ignore list. It says
    so, and that the outputs are left as they were."""
    photos = f"{window} photo" + ("" if window == 1 else "s")
    if params.since is not None:
        what = f"nothing new: the {photos} taken since {params.since:%Y-%m-%d %H:%M:%S}"
        what += " was" if window == 1 else " were all"
    else:
        what = f"nothing new: {'the' if window == 1 else 'all'} {photos} {'was' if window == 1 else 'were'}"
    what += " ranked by an earlier run of this line or put on the ignore list"
    kept = [str(target) for target in params.outputs()] + (["the XMP tags"] if params.xmp else [])
    return what + (f"; left as they were: {', '.join(kept)}" if kept else "")


# --------------------------------------------------------------------------- re-running a line

# What does not make a scan another line (``line_options``): its window (a cron line's ``since`` moves
# each day), and the settings that only change how fast or where it runs.
NOT_THE_LINE = frozenset({"since", "wait", "decoder"})
NOT_THE_LINE_GROUPS = frozenset({"performance", "cluster", "cache"})


def line_options(params: ScanParameters) -> dict[str, Any]:
    """What names the line a scan is a run of (``novelfind.media.reruns``): its folders and its options,
    paths absolute, less ``NOT_THE_LINE`` and the settings the method does not take."""
    unused = method_settings() - METHODS[params.method].settings

    def value(v: Any) -> Any:
        if isinstance(v, tuple):
            return [value(x) for x in v]
        return os.path.abspath(v) if isinstance(v, Path) else v

    return {
        f.name: value(getattr(params, f.name))
        for f in FIELDS
        if f.name not in NOT_THE_LINE | unused and f.metadata["group"] not in NOT_THE_LINE_GROUPS
    }


def line_record(
    params: ScanParameters, ignore_list: Any, files: FileList, on_warning: Callable[[str], None]
) -> LineRecord | None:
    """With ``ignore_picks``: the record of the runs of this scan's line, beside its ``ignore_list``, for
    the photos read (``files``, row i for photo i); None otherwise (a line that ignores nothing picks the
    same photos when run again)."""
    if not params.ignore_picks:
        return None
    return LineRecord(
        reruns.record_path(ignore_list.path),
        reruns.line_name(line_options(params)),
        reruns.photo_keys(files),
        on_warning,
    )
