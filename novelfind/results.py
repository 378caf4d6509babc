"""What a scan returns: :class:`ScanResult` with its :class:`Counts`, the :class:`Progress` events it
reports on the way, the run record of the JSON formats (``docs/output-schema.md``), the scan's rank
step that makes its picks (:func:`rank_picks`), and the notices and warnings a scan gives about its
result (a ranking that changed method, nothing new to rank)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator, Mapping
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
from novelfind.media.dates import Dates
from novelfind.media.kinds import RAW, kind_of
from novelfind.media.pairs import PhotoList
from novelfind.media.video import ClipInfo
from novelfind.media.walk import FileList, ImageFile
from novelfind.model.features import Extractor, classes_of
from novelfind.outputs.formats import format_results
from novelfind.outputs.xmp_ledger import SidecarSummary
from novelfind.params import ScanParameters
from novelfind.picks import Failure, Pick, picks_of
from novelfind.ranking import driver as ranking
from novelfind.ranking.methods import METHODS
from novelfind.ranking.sources import FeatureSource, as_source


@dataclass(frozen=True)
class Counts:
    """What happened to the files of one scan."""

    found: int  # image files of the photos found (RAW twins included; the run's own outputs left out)
    from_cache: int  # vectors read from the cache (by stat, or by content for moved files)
    extracted: int  # vectors made by the model in this run
    failed: int  # files that could not be read (walk errors and decode failures)
    candidates: int  # photos that could be picked: all that were read, or those modified since `since`,
    #                  less the ignored ones
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
    to rank). ``outputs_kept``: nothing was left to rank but photos on the ignore list, so the outputs
    (results file, copies, report, sidecars) were left as the last run wrote them. ``warnings``: the
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


def run_record(params: ScanParameters, counts: Counts, seconds: float) -> dict[str, Any]:
    """The ``run`` object of the JSON formats: the version, the parameters that shape the ranking
    (:meth:`ScanParameters.record`) and the counts."""
    return {
        "version": __version__,
        **params.record(),
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
            times=None if taken is None else taken.taken,  # when each photo was taken
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


def _older(version: str, than: str) -> bool:
    """Whether release ``version`` comes before ``than`` (both ``X.Y.Z``)."""
    return tuple(map(int, version.split("."))) < tuple(map(int, than.split(".")))


def ranking_changed(cache: Any, params: ScanParameters) -> str | None:
    """The one warning when the library was last ranked (with this cache) by another method, or by an
    earlier version whose scores of this method were on another scale: the picks and scores then
    differ from the last run's for a reason the user did not choose, and the line says how to keep
    the old ranking. A cache an earlier version wrote stands for that version's default."""
    try:
        last = cache.last_ranking(ranking_root(params.paths))
    except NovelfindError:
        return None  # an unreadable record only costs the notice
    if last is None:
        return None
    method, version, inferred = last
    new = params.method
    rescaled = new in SCALE_CHANGED and _older(version, SCALE_CHANGED[new])
    if method == new and not rescaled:
        return None
    was = (
        f"novelfind {version}, which last used this cache, ranked with {method} by default"
        if inferred
        else f"this library was last ranked with --method {method} (novelfind {version})"
    )
    if method == new:
        return f"{was}; the scores of {new} are on another scale since novelfind {SCALE_CHANGED[new]}"
    return (
        f"{was}; this run ranks with --method {new}, so the picks and the scale of the scores "
        f"differ: add --method {method} to rank as before"
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


def nothing_new_notice(params: ScanParameters, held: int) -> str:
    """The notice of a run with nothing to rank but ``held`` photos on the ignore list (a re-run of a line
    with ``ignore_picks``): it says why, and that the outputs are left as they were."""
    photos = f"{held} photo" + ("" if held == 1 else "s")
    if params.since is not None:
        what = f"nothing new: the {photos} modified since {params.since:%Y-%m-%d %H:%M:%S}"
        what += " is" if held == 1 else " are all"
    else:
        what = f"nothing new: {'the' if held == 1 else 'all'} {photos} {'is' if held == 1 else 'are'}"
    what += " on the ignore list (already picked by an earlier run, or ignored)"
    kept = [str(target) for target in params.outputs()] + (["the XMP tags"] if params.xmp else [])
    return what + (f"; left as they were: {', '.join(kept)}" if kept else "")
