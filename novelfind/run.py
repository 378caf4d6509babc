"""The scan as one call: walk -> pair -> cache -> extract -> rank -> outputs. Prints nothing.

:func:`scan` is what ``novelfind scan`` runs; the command line only parses its options into the same
keyword arguments, passes progress bars and stderr printing in as callbacks, and prints the result.
The parameters are checked here (:class:`ScanParameters`), so a notebook, a service or a cluster job
gets the same errors as the command line, as exceptions: :class:`~novelfind.errors.InputError` (also
a ValueError) for impossible values, other :class:`~novelfind.errors.NovelfindError` subclasses for
what stops a run (no images, weights missing, an output not writable, another run holding an output).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import numbers
import os
import tempfile
import time
import warnings
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from novelfind import __version__, features, raw, walk
from novelfind.cache import DEFAULT_DTYPE, DTYPES, FeatureCache, NullCache
from novelfind.decode import file_digest
from novelfind.errors import CacheError, InputError, MissingExtraError, NovelfindError, OutputError
from novelfind.html import CONTACT_SHEET_FORMATS, pca_2d, write_contact_sheet, write_html_report
from novelfind.ignore import IgnoreList
from novelfind.lock import output_lock
from novelfind.pairs import Photo, group_photos
from novelfind.pipeline import DECODERS, ENGINES, Extraction, FeatureStore, load
from novelfind.ranking import DEFAULT_DEDUP, METHODS
from novelfind.report import (
    FORMATS,
    MANIFEST_NAME,
    PLACE_MODES,
    Failure,
    Pick,
    format_results,
    place_picks,
    write_atomic,
)
from novelfind.walk import FileList, ImageFile
from novelfind.xmp import DEFAULT_KEYWORD as DEFAULT_XMP_KEYWORD
from novelfind.xmp import SidecarPick, SidecarSummary, apply_picks, check_keyword
from novelfind.xmp import available as xmp_available

WALK_PROGRESS_EVERY = 1000  # files between two "walk" progress events


# --------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class Limit:
    """The allowed range of a numeric parameter (the command line turns it into a Click range type)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is not allowed
    high_open: bool = False

    def check(self, name: str, value: float) -> None:
        """InputError naming ``name`` and the value when ``value`` is outside the range or not finite."""
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{name} must be a finite number, got {value}")
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            bound = "greater than" if self.low_open else "at least"
            raise InputError(f"{name} must be {bound} {self.low:g}, got {value}")
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            bound = "less than" if self.high_open else "at most"
            raise InputError(f"{name} must be {bound} {self.high:g}, got {value}")


# The one list of numeric limits: scan() checks them, the command line shows them in --help.
LIMITS: dict[str, Limit] = {
    "k": Limit(1),
    "epochs": Limit(1, 100_000),
    "partners": Limit(1, 100_000),
    "lr": Limit(0, low_open=True),
    "momentum": Limit(0, 1, high_open=True),
    "seed": Limit(0),
    "restarts": Limit(1, 1000),
    "dedup": Limit(0),
    "batch_size": Limit(1, 4096),
    "workers": Limit(0, 256),
}

# The one list of named choices: scan() checks them, the command line offers them. Engines and
# decoders are the registries themselves, so one added at run time is accepted.
CHOICES: dict[str, Collection[str]] = {
    "method": METHODS,
    "feature": tuple(features.FEATURE_DIMS),
    "device": features.DEVICES,
    "backend": features.BACKENDS,
    "engine": ENGINES,
    "cache_dtype": tuple(DTYPES),
    "decoder": DECODERS,
    "format": FORMATS,
    "link": PLACE_MODES,
}

_INTEGERS = ("k", "epochs", "partners", "seed", "restarts", "batch_size", "workers")
_NUMBERS = ("lr", "momentum", "dedup")
_OPTIONAL_PATHS = ("weights", "output", "copy_to", "report", "contact_sheet", "ignore_file")


@dataclass(frozen=True)
class ScanParameters:
    """Everything a scan is asked to do: the keyword arguments of :func:`scan`, checked.

    Creating one checks every value (InputError naming the parameter) and normalises the types:
    paths become :class:`~pathlib.Path` objects and sequences tuples. The defaults of the ADS
    solver's settings are the paper's (:class:`novelfind.solver.ADSConfig`).
    """

    paths: tuple[Path, ...]
    k: int = 100
    # ranking
    method: str = "ads"
    feature: str = "logits"
    epochs: int = 20
    partners: int = 16
    lr: float = 1e-3
    momentum: float = 0.9
    seed: int = 0
    restarts: int = 1
    dedup: float = DEFAULT_DEDUP
    since: datetime | None = None
    # walking
    exclude: tuple[str, ...] = ()
    follow_symlinks: bool = False
    # extraction
    batch_size: int = 32
    workers: int | None = None
    device: str = "auto"
    backend: str = "auto"
    weights: Path | None = None
    engine: str = "local"
    ray_address: str | None = None
    decoder: str = "auto"
    cache: bool | Path | FeatureCache = True
    cache_dtype: str = DEFAULT_DTYPE
    # outputs
    output: Path | None = None
    format: str = "tsv"
    copy_to: Path | None = None
    link: str = "copy"
    report: Path | None = None
    contact_sheet: Path | None = None
    xmp: bool = False
    xmp_keyword: str = DEFAULT_XMP_KEYWORD
    wait: bool = True
    # the ignore list
    ignore_file: Path | None = None
    ignore_picks: bool = False
    include_ignored: bool = False

    def __post_init__(self) -> None:
        paths = [self.paths] if isinstance(self.paths, (str, os.PathLike)) else list(self.paths)
        if not paths:
            raise InputError("paths must name at least one folder or image")
        self._set("paths", tuple(Path(p) for p in paths))
        exclude = [self.exclude] if isinstance(self.exclude, str) else list(self.exclude)
        self._set("exclude", tuple(str(e) for e in exclude))
        for name in _OPTIONAL_PATHS:
            value = getattr(self, name)
            if value is not None:
                self._set(name, Path(value))
        if not isinstance(self.cache, (bool, FeatureCache)):
            self._set("cache", Path(self.cache))
        for name in _INTEGERS:
            value = getattr(self, name)
            if value is None and name == "workers":
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise InputError(f"{name} must be a whole number, got {value!r}")
        for name in _NUMBERS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise InputError(f"{name} must be a number, got {value!r}")
            self._set(name, float(value))
        for name, limit in LIMITS.items():
            value = getattr(self, name)
            if value is not None:
                limit.check(name, value)
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            numbered_gpu = name == "device" and isinstance(value, str) and value.startswith("cuda:")
            if value not in allowed and not numbered_gpu:
                raise InputError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if self.ray_address is not None and not isinstance(self.ray_address, str):
            raise InputError(f"ray_address must be a string (auto, HOST:PORT), got {self.ray_address!r}")
        if self.since is not None and not isinstance(self.since, datetime):
            raise InputError(f"since must be a datetime, got {self.since!r}")
        sheet = self.contact_sheet
        if sheet is not None and sheet.suffix.lower() not in CONTACT_SHEET_FORMATS:
            raise InputError(f"contact sheet {sheet}: use a .jpg, .png or .webp name")
        try:
            check_keyword(self.xmp_keyword)
        except ValueError as err:
            raise InputError(f"xmp_keyword: {err}") from None

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def outputs(self) -> list[Path]:
        """What this run writes, absolute and sorted (the order their locks are taken in)."""
        targets = (self.output, self.copy_to, self.report, self.contact_sheet)
        return sorted({t.absolute() for t in targets if t is not None})


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Counts:
    """What happened to the files of one scan."""

    found: int  # image files of the photos found (RAW twins included; the run's own outputs left out)
    from_cache: int  # vectors read from the cache (by stat, or by content for moved files)
    extracted: int  # vectors made by the model in this run
    failed: int  # files that could not be read (walk errors and decode failures)
    candidates: int  # photos that could be picked: all that were read, or those modified since `since`,
    #                  less the ignored ones
    duplicates_dropped: int  # near-duplicates of better picks passed over
    photos: int = 0  # photos the found files make (a RAW + JPEG pair is one photo of two files)
    ignored: int = 0  # photos read but on the ignore list: ranked with the rest, never picked
    newly_ignored: int = 0  # picks of this run added to the ignore list (``ignore_picks``)


@dataclass(frozen=True)
class Progress:
    """A progress event of :func:`scan`, for ``on_progress``.

    ``stage`` is ``"walk"`` (``done`` files found so far, ``total`` None), ``"wait"`` (another run is
    writing ``path``; this one waits for it), ``"extract"`` (``done`` of ``total`` files resolved:
    read from the cache, extracted or failed), ``"rank"`` (0 of 1, then 1 of 1) or ``"write"``
    (``done`` of ``total`` outputs written).
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
    :class:`~novelfind.walk.FileList`, ImageFile records in compact form), and ``features`` (N, dim)
    float32 their vectors, row i for ``files[i]`` (rank them again another way with
    :func:`novelfind.rank`, without touching the photos); None for a library too large to hold them
    (``MATRIX_BUDGET``), ranked from the cache. ``sidecars`` says what ``xmp`` did.
    """

    picks: list[Pick]
    failures: list[Failure]
    counts: Counts
    seconds: float
    parameters: ScanParameters
    files: list[ImageFile] = field(repr=False)
    features: np.ndarray | None = field(repr=False)
    sidecars: SidecarSummary | None = None  # with ``xmp``: the sidecars changed, and those that failed

    def record(self) -> dict[str, Any]:
        """The run record of the JSON formats (``docs/output-schema.md``): parameters and counts."""
        return run_record(self.parameters, self.counts, self.seconds)

    def to_text(self, fmt: str | None = None) -> str:
        """The results in an output format (default: the scan's ``format``), as ``output`` gets them."""
        return format_results(
            self.picks, fmt or self.parameters.format, failures=self.failures, run=self.record()
        )


def run_record(params: ScanParameters, counts: Counts, seconds: float) -> dict[str, Any]:
    """The ``run`` object of the JSON formats."""
    return {
        "version": __version__,
        "paths": [str(p) for p in params.paths],
        "k": params.k,
        "method": params.method,
        "feature": params.feature,
        "epochs": params.epochs,
        "partners": params.partners,
        "lr": params.lr,
        "momentum": params.momentum,
        "seed": params.seed,
        "restarts": params.restarts,
        "dedup": params.dedup,
        "since": params.since.isoformat() if params.since else None,
        "ignore_file": None if params.ignore_file is None else str(params.ignore_file),
        "include_ignored": params.include_ignored,
        "images_found": counts.found,
        "photos_found": counts.photos,
        "ignored": counts.ignored,
        "from_cache": counts.from_cache,
        "extracted": counts.extracted,
        "failed": counts.failed,
        "duplicates_dropped": counts.duplicates_dropped,
        "seconds": round(seconds, 3),
    }


# --------------------------------------------------------------------------- the scan


def scan(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    k: int = 100,
    *,
    method: str = "ads",
    feature: str = "logits",
    epochs: int = 20,
    partners: int = 16,
    lr: float = 1e-3,
    momentum: float = 0.9,
    seed: int = 0,
    restarts: int = 1,
    dedup: float = DEFAULT_DEDUP,
    since: datetime | None = None,
    exclude: str | Iterable[str] = (),
    follow_symlinks: bool = False,
    batch_size: int = 32,
    workers: int | None = None,
    device: str = "auto",
    backend: str = "auto",
    weights: str | os.PathLike[str] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    decoder: str = "auto",
    cache: bool | str | os.PathLike[str] | FeatureCache = True,
    cache_dtype: str = DEFAULT_DTYPE,
    output: str | os.PathLike[str] | None = None,
    format: str = "tsv",
    copy_to: str | os.PathLike[str] | None = None,
    link: str = "copy",
    report: str | os.PathLike[str] | None = None,
    contact_sheet: str | os.PathLike[str] | None = None,
    xmp: bool = False,
    xmp_keyword: str = DEFAULT_XMP_KEYWORD,
    wait: bool = True,
    ignore_file: str | os.PathLike[str] | None = None,
    ignore_picks: bool = False,
    include_ignored: bool = False,
    on_progress: Callable[[Progress], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    on_failure: Callable[[Path, str], None] | None = None,
) -> ScanResult:
    """Find the ``k`` most novel photos under ``paths``: exactly what ``novelfind scan`` does, minus printing.

    Walks the folders, reads each photo, describes it with MobileNet-V2 (vectors are cached, so a
    second scan of the same library only looks at what changed), ranks, and returns the picks best
    first. Nothing is written but the feature cache, unless an output is asked for.

    Args:
        paths: a folder or image file, or several. Hidden files and folders are skipped.
        k: how many photos to pick (at least 1); more than there are ranks them all.
        method: ``"ads"`` (default: the ADS solver on whitened features, blended with a k-NN density
            score), ``"ads-paper"`` (the paper's Algorithm 1 alone) or ``"knn"`` (mean distance to the
            10 nearest neighbours). See :func:`novelfind.rank`.
        feature: ``"logits"`` (1000-d classifier output) or ``"pooled"`` (1280-d pooled features).
        epochs, partners, lr, momentum: the ADS solver's E (1-100000), J (1-100000), alpha (> 0) and
            beta (0 <= beta < 1).
        seed: the solver's random seed (>= 0): the same seed on the same device, the same ranking.
        restarts: average the solver over this many seeds (1-1000).
        dedup: a pick closer than this to a better one (distance between L2-normalised features) is
            passed over as a near-duplicate; 0 turns it off.
        since: rank only photos modified at or after this time (a naive datetime is local time),
            against the whole library.
        exclude: glob patterns of files and folders to skip (``"*.png"``, ``"**/thumbs/**"``).
        follow_symlinks: follow symbolic links to files and folders (loops are detected).
        batch_size: images per batch, decoded, featurised and committed to the cache together (1-4096).
        workers: decoding processes (0-256; None: one per core, 0: decode in this process).
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; the model and
            the solver run there.
        backend: ``"auto"`` (the fastest available for the device), ``"torch"`` or ``"onnx"``.
        weights: the MobileNet-V2 weights file; None searches the usual places.
        engine: where decoding and the model run: ``"local"`` (this machine) or ``"ray"`` (the workers of
            a Ray cluster, ``pip install 'novelfind[ray]'``; the photos must be at the same path on
            every node); see ``novelfind.pipeline.ENGINES``. Walking, the cache and the ranking stay
            on this machine either way. With ``"ray"``, ``device`` picks the workers' device (``auto``:
            GPU workers when the cluster has GPUs) and the solver runs here, on CUDA when this machine
            has it (unless ``device`` is ``"cpu"``).
        ray_address: the Ray cluster for ``engine="ray"``: None starts Ray on this machine for the
            scan, ``"auto"`` joins the cluster this machine belongs to (``ray start`` was run here),
            ``"HOST:PORT"`` the cluster whose head listens there (``ray://HOST:PORT`` through Ray
            Client). Not used by the local engine.
        decoder: what decodes the photos: ``"auto"`` (JPEGs on the GPU when the model runs on CUDA and
            nvImageCodec is installed, else Pillow), ``"pillow"`` or ``"gpu"``; see
            ``novelfind.pipeline.DECODERS``.
        cache: True for the user's feature cache (``~/.cache/novelfind/features.sqlite`` or
            ``$NOVELFIND_CACHE``), False for none, a path to a cache file, or a :class:`novelfind.Cache`
            (its file and its dtype are used). A cache that cannot be opened is reported through
            ``on_warning`` and the scan runs without one.
        cache_dtype: how new vectors are stored: ``"float32"`` (default, 4 KB per photo of logits) or
            ``"float16"`` (half that; rankings on the benchmark sets kept their picks, see the README's
            Cache section). A cache may hold both; each vector is read back as it was stored.
        output, format: write the results to this file, atomically, in this format (``"tsv"``,
            ``"json"``, ``"jsonl"``, ``"csv"``, ``"paths"``, ``"paths0"``: ``docs/output-schema.md``).
        copy_to, link: put the picks in this folder as ``001_name.jpg``, ... by ``"copy"``,
            ``"symlink"`` or ``"hardlink"``; earlier picks placed there by novelfind are replaced.
        report: write a self-contained HTML report of the picks to this file.
        contact_sheet: write a grid of the picks to this .jpg, .png or .webp file.
        xmp, xmp_keyword: write the picks into the photos' XMP sidecars (``NAME.EXT.xmp``, or an
            existing ``NAME.xmp``): the keyword (default ``"novel"``; ``"Picks|novel"`` is hierarchical)
            and the rank and score; earlier picks under ``paths`` that are no longer picked lose what
            novelfind wrote. Needs ``pip install 'novelfind[xmp]'`` (``MissingExtraError`` otherwise). A
            sidecar that cannot be read or written is reported through ``on_warning`` and in
            ``ScanResult.sidecars``; the photos themselves are never written.
        wait: when another run writes the same outputs, wait for it (True) or raise LockedError.
        ignore_file: the ignore list (default: ``ignored.json`` in the user data folder, or
            ``$NOVELFIND_IGNORE_FILE``); see :class:`novelfind.IgnoreList`.
        ignore_picks: after writing the outputs, put this run's picks on the ignore list, so that the
            next run shows other photos.
        include_ignored: let the photos on the ignore list be picked again. Otherwise they are never
            picked, but still ranked with the rest: they keep making their neighbours look ordinary.
        on_progress: called with a :class:`Progress` event as the scan advances.
        on_warning: called with a one-line message for each problem the scan survives (an unusable
            cache, a fallback to a slower engine); without it they go through :mod:`warnings` and
            :mod:`logging`.
        on_failure: called with (path, reason) for each file that cannot be read, as it happens.

    Returns:
        A :class:`ScanResult`: ``picks`` (:class:`Pick`: ``rank``, ``path``, ``score``, ``neighbour``,
        ``distance``, ``size``, ``mtime``, ``also``), ``failures`` (path, reason), ``counts``,
        ``seconds``, ``parameters``, the ``files`` and ``features`` that were ranked, and ``sidecars``.

    A RAW + JPEG pair (or HEIC + JPEG: one shot, two files with one name in one folder) is one photo,
    read through its JPEG and listed by it, with the other files in ``Pick.also``. RAW files are read
    through LibRaw when ``novelfind[raw]`` is installed; without it, a RAW file with no twin is left out
    (one warning says how many).

    Raises:
        InputError: an impossible value (also a ValueError), a missing folder.
        MissingExtraError: ``xmp`` without ``novelfind[xmp]``.
        NovelfindError: nothing to rank (no images, none readable); ``WeightsError`` (no weights),
            ``OutputError`` (an output cannot be written), ``LockedError`` (another run writes the
            same output and ``wait`` is False).
        KeyboardInterrupt: passed on; every finished batch stays in the cache.

    Example::

        import novelfind
        from pathlib import Path

        result = novelfind.scan(Path.home() / "Pictures", k=20, report="novel.html")
        for pick in result.picks:
            print(pick.rank, pick.path, "nearest:", pick.neighbour)
    """
    parameters = ScanParameters(
        paths=paths,
        k=k,
        method=method,
        feature=feature,
        epochs=epochs,
        partners=partners,
        lr=lr,
        momentum=momentum,
        seed=seed,
        restarts=restarts,
        dedup=dedup,
        since=since,
        exclude=exclude,
        follow_symlinks=follow_symlinks,
        batch_size=batch_size,
        workers=workers,
        device=device,
        backend=backend,
        weights=weights,
        engine=engine,
        ray_address=ray_address,
        decoder=decoder,
        cache=cache,
        cache_dtype=cache_dtype,
        output=output,
        format=format,
        copy_to=copy_to,
        link=link,
        report=report,
        contact_sheet=contact_sheet,
        xmp=xmp,
        xmp_keyword=xmp_keyword,
        wait=wait,
        ignore_file=ignore_file,
        ignore_picks=ignore_picks,
        include_ignored=include_ignored,
    )
    return run(parameters, on_progress=on_progress, on_warning=on_warning, on_failure=on_failure)


def run(
    parameters: ScanParameters,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    on_failure: Callable[[Path, str], None] | None = None,
) -> ScanResult:
    """:func:`scan` with its parameters already checked and gathered."""
    return _Scan(parameters, on_progress, on_warning, on_failure).run()


class _Scan:
    """One scan; each method is one step, in the order :meth:`run` calls them."""

    def __init__(self, params: ScanParameters, on_progress, on_warning, on_failure) -> None:
        self.params = params
        self.on_progress = on_progress
        self.on_warning = on_warning
        self.on_failure = on_failure
        self.started = time.monotonic()
        self.failures: list[Failure] = []
        self.projection: np.ndarray | None = None  # (N, 2) the ranking's principal map, where it made one

    def run(self) -> ScanResult:
        p = self.params
        self.check_outputs()
        ignore_list = self.check_ignore_list()
        with ExitStack() as stack:
            if self.on_warning is not None:
                stack.enter_context(_warnings_to(self.on_warning))
            for target in p.outputs():
                stack.enter_context(
                    output_lock(
                        target,
                        wait=p.wait,
                        on_warning=self.warn,
                        on_wait=lambda target=target: self.progress("wait", path=target),
                    )
                )
            photos = self.find_photos()
            extractor = features.build_extractor(
                feature=p.feature,
                # an engine running the model elsewhere needs the driver's model for its name only
                device=p.device if p.engine == "local" else "cpu",
                backend=p.backend,
                weights=p.weights,
            )
            streamed = self.streamed(len(photos), extractor.dim)
            store = stack.enter_context(self.open_cache(extractor.model_key, streamed))
            extraction = self.extract(photos.files, extractor, store, keep_vectors=not streamed)
            read = photos.subset(extraction.files)  # row i of the features is photo read[i]
            ignored = self.find_ignored(ignore_list, read, store)
            candidates = np.flatnonzero(_candidates(extraction.files, p.since) & ~ignored)  # int64 rows
            restricted = p.since is not None or bool(ignored.any())
            picks, dropped = self.rank(extraction, read, candidates, restricted, store)
            counts = Counts(
                found=photos.file_count(),
                from_cache=extraction.from_cache,
                extracted=extraction.extracted,
                failed=len(self.failures),
                candidates=len(candidates),
                duplicates_dropped=dropped,
                photos=len(photos),
                ignored=int(ignored.sum()),
            )
            sidecars = self.write_outputs(picks, counts, extraction)
            if p.ignore_picks and picks:
                added = self.ignore_picks(ignore_list, picks, store)
                counts = dataclasses.replace(counts, newly_ignored=added)
        return ScanResult(
            picks=picks,
            failures=list(self.failures),
            counts=counts,
            seconds=self.seconds(),
            parameters=p,
            files=extraction.files,
            features=extraction.features,
            sidecars=sidecars,
        )

    # -- steps

    def check_ignore_list(self) -> IgnoreList | None:
        """The ignore list this scan uses (None: it shows ignored photos and adds none); a damaged list
        stops the scan here, before the slow part."""
        p = self.params
        if p.include_ignored and not p.ignore_picks:
            return None
        ignore_list = IgnoreList(p.ignore_file)
        ignore_list.digests()  # IgnoreListError when it cannot be read
        return ignore_list

    def check_outputs(self) -> None:
        """Fail before the slow part when an output cannot possibly be written, or needs what is not
        installed."""
        p = self.params
        if p.xmp and not xmp_available():
            raise MissingExtraError(
                "XMP sidecars need python-exiv2, which is not installed: pip install 'novelfind[xmp]'"
            )
        targets = (("results file", p.output), ("report", p.report), ("contact sheet", p.contact_sheet))
        for what, target in targets:
            if target is None:
                continue
            parent = target.parent if str(target.parent) else Path(".")
            if target.is_dir():
                raise OutputError(f"cannot write the {what} {target}: it is a folder")
            if not parent.is_dir():
                raise OutputError(f"cannot write the {what} {target}: folder {parent} does not exist")
            if not os.access(parent, os.W_OK):
                raise OutputError(f"cannot write the {what} {target}: folder {parent} is not writable")
        if p.copy_to is not None:
            if p.copy_to.exists() and not p.copy_to.is_dir():
                raise OutputError(f"cannot place the picks in {p.copy_to}: it is not a folder")
            existing = p.copy_to.absolute()
            while not existing.exists() and existing.parent != existing:
                existing = existing.parent
            if not existing.is_dir():
                raise OutputError(f"cannot place the picks in {p.copy_to}: {existing} is not a folder")
            if not os.access(existing, os.W_OK):
                raise OutputError(f"cannot place the picks in {p.copy_to}: {existing} is not writable")

    def find_photos(self) -> PhotoList:
        """The photos under the paths, in walk order, without the files novelfind wrote itself.

        Files of one shot (RAW + JPEG) are one photo (:func:`novelfind.pairs.group_photos`). Without
        RAW support, a RAW file with a twin stays part of its photo (copied and tagged with it), and one
        without is left out, with one warning.
        """
        p = self.params
        own = _OwnOutputs(p.outputs())
        files, names = FileList(), array("q")
        for f in walk.walk(p.paths, exclude=p.exclude, follow_symlinks=p.follow_symlinks, on_error=self.fail):
            if not own.contains(f.path):
                files.append(f)
                names.append(hash((f.path.parent, os.path.splitext(f.path.name)[0].casefold())))
                if len(files) % WALK_PROGRESS_EVERY == 0:
                    self.progress("walk", len(files))
        self.progress("walk", len(files))
        photos = PhotoList.grouped(files, np.frombuffer(names, np.int64))
        left_out = ""
        if not raw.available():
            readable = np.fromiter(
                (not raw.is_raw_name(os.fsdecode(path)) for path, _, _ in photos.files.records()),
                bool,
                count=len(photos),
            )
            if not readable.all():
                left_out = (
                    f"{int((~readable).sum())} RAW files without a JPEG twin left out: RAW support "
                    "is not installed (pip install 'novelfind[raw]')"
                )
                if readable.any():
                    self.warn(left_out)
                photos = photos.take(np.flatnonzero(readable))
        if not photos:
            where = ", ".join(str(path) for path in p.paths)
            raise NovelfindError(f"no images found in {where}" + (f" ({left_out})" if left_out else ""))
        return photos

    @contextmanager
    def open_cache(self, model_key: str, streamed: bool = False) -> Iterator[FeatureStore]:
        """The feature cache for this model (NullCache when none is wanted or it cannot be opened; a
        temporary cache file, deleted afterwards, when the vectors are ``streamed`` and there is none)."""
        choice = self.params.cache
        if choice is False:
            if not streamed:
                yield NullCache()
                return
            with tempfile.TemporaryDirectory(prefix="novelfind-") as folder:
                path = Path(folder) / "features.sqlite"
                with FeatureCache(path, model_key, dtype=self.params.cache_dtype) as store:
                    yield store
            return
        path, dtype = None, self.params.cache_dtype
        if isinstance(choice, FeatureCache):
            path, dtype = choice.path, choice.dtype
        elif choice is not True:
            path = choice
        try:
            store = FeatureCache.open(path, model_key, on_warning=self.warn, dtype=dtype)
        except CacheError as err:
            if streamed:
                raise CacheError(f"{err}; a library this large is ranked from the cache") from None
            self.warn(f"{err}; running without the cache")
            yield NullCache()
            return
        with store:
            yield store

    def extract(
        self, files: FileList, extractor: features.Extractor, store: FeatureStore, *, keep_vectors: bool
    ) -> Extraction:
        p = self.params
        engine = load(ENGINES[p.engine])
        # an engine that runs elsewhere is told where, and on what device its workers run the model
        elsewhere = {} if p.engine == "local" else {"address": p.ray_address, "device": p.device}
        extraction = engine(
            files,
            extractor,
            store,
            batch_size=p.batch_size,
            workers=p.workers,
            decoder=p.decoder,
            on_progress=self.extract_progress,
            on_failure=self.fail,
            on_warning=self.warn,
            keep_vectors=keep_vectors,
            **elsewhere,
        )
        if not keep_vectors and getattr(store, "writes_disabled", False):
            raise CacheError(
                f"the feature cache {store.path} stopped taking vectors; a library of {len(files):,} "
                "photos is ranked from the cache, so this scan cannot finish (the vectors stored so far "
                "are kept)"
            )
        if not extraction.files:
            raise NovelfindError(f"none of the {len(files)} images could be read")
        return extraction

    def streamed(self, n: int, dim: int) -> bool:
        """Whether the vectors of ``n`` photos pass the memory budget (``novelfind.ranking.read_in_chunks``):
        then they stay in the cache and the ranking reads them back in chunks. ``ads-paper`` needs them all
        in memory: InputError, saying how much."""
        from novelfind import ranking

        return ranking.read_in_chunks(self.params.method, n, dim)

    def find_ignored(
        self, ignore_list: IgnoreList | None, read: PhotoList, store: FeatureStore
    ) -> np.ndarray:
        """bool (N,): the photos read that are on the ignore list (all False with ``include_ignored``).

        Only files of an ignored size need a digest (the cache knows most of them, the rest are
        hashed). Where the list saw a photo is brought up to date for ``novelfind ignore --list``.
        """
        if ignore_list is None or self.params.include_ignored:
            return np.zeros(len(read), dtype=bool)
        lookup = getattr(store, "digests_by_stat", None)
        found = ignore_list.find(read.groups, known_digests=lookup)
        if found.seen:
            try:
                ignore_list.relocate(found.seen)
            except NovelfindError as err:  # a read-only list still works; only its paths grow stale
                self.warn(f"cannot record where ignored photos are now: {err}")
        return found.mask

    def rank(
        self,
        extraction: Extraction,
        read: PhotoList,
        candidates: np.ndarray,
        restricted: bool,
        store: FeatureStore,
    ) -> tuple[list[Pick], int]:
        """The picks: the most novel candidates, scored against the whole library (with ``since`` or
        ignored photos, the candidates are fewer than the photos; all of them count as neighbours).
        Vectors left in the cache (``extraction.features`` None) are ranked from it, chunk by chunk."""
        if not len(candidates):
            return [], 0
        from novelfind import ranking
        from novelfind.solver import ADSConfig

        p = self.params
        self.progress("rank", 0, 1)
        config = ADSConfig(
            epochs=p.epochs,
            partners=p.partners,
            lr=p.lr,
            momentum=p.momentum,
            seed=p.seed,
            restarts=p.restarts,
        )
        files = extraction.files
        if extraction.features is not None:
            source: Any = extraction.features
        else:
            source = ranking.ChunkedSource(
                chunks=lambda: store.rows_by_stat(files, ranking.STREAM_CHUNK),
                take=lambda rows: np.concatenate(
                    list(store.rows_by_stat(files.take(rows), ranking.STREAM_CHUNK))
                ),
                n=len(files),
            )
        try:
            result = ranking.rank(
                source,
                p.k,
                method=p.method,
                config=config,
                dedup=p.dedup,
                device=self.solver_device(),
                candidates=candidates if restricted else None,
            )
        except ValueError as err:  # e.g. a learning rate so large that the weights overflow
            raise InputError(f"cannot rank with these settings: {err}") from None
        self.projection = result.map2d
        self.progress("rank", 1, 1)
        picks = []
        for index, score, neighbour, distance in zip(
            result.indices, result.scores, result.neighbour, result.distance, strict=True
        ):
            f = files[int(index)]
            found = int(neighbour) >= 0
            picks.append(
                Pick(
                    rank=len(picks) + 1,
                    score=float(score),
                    path=f.path,
                    size=f.size,
                    mtime_ns=f.mtime_ns,
                    neighbour=files[int(neighbour)].path if found else None,
                    distance=float(distance) if found else None,
                    also=tuple(twin.path for twin in read[int(index)].also),
                )
            )
        return picks, int(result.duplicates_dropped)

    def solver_device(self) -> str:
        """Where the solver runs: ``device``; with an engine running the model elsewhere, ``device`` is the
        workers', and the solver takes this machine's CUDA device when there is one."""
        p = self.params
        if p.engine == "local" or p.device == "cpu":
            return features.resolve_device(p.device)
        return features.resolve_device("auto")

    def write_outputs(
        self, picks: list[Pick], counts: Counts, extraction: Extraction
    ) -> SidecarSummary | None:
        """Every output asked for, in turn; the XMP sidecars last. Returns what ``xmp`` did."""
        p = self.params
        record = run_record(p, counts, self.seconds())
        writers: list[Callable[[], Any]] = []
        sidecars: list[SidecarSummary] = []
        if p.output is not None:
            text = format_results(picks, p.format, failures=self.failures, run=record)
            writers.append(lambda: write_atomic(p.output, text))
        if p.copy_to is not None:  # with no picks, this removes the picks of an earlier run
            writers.append(lambda: place_picks(picks, p.copy_to, mode=p.link))
        if p.report is not None:
            writers.append(lambda: self.write_report(picks, record, extraction))
        if p.contact_sheet is not None:
            writers.append(lambda: write_contact_sheet(p.contact_sheet, picks))
        if p.xmp:  # with no picks, this takes back the tags of an earlier run
            writers.append(lambda: sidecars.append(self.write_sidecars(picks)))
        for done, write in enumerate(writers):
            self.progress("write", done, len(writers))
            write()
        if writers:
            self.progress("write", len(writers), len(writers))
        return sidecars[0] if sidecars else None

    def write_sidecars(self, picks: list[Pick]) -> SidecarSummary:
        """Tag every file of each pick in its XMP sidecar; untag the earlier picks under the paths."""
        p = self.params

        def problem(path: Path, reason: str) -> None:
            self.warn(f"XMP sidecar {path}: {reason}" if path.suffix.lower() == ".xmp" else reason)

        return apply_picks(
            [sp for pick in picks for sp in SidecarPick.for_photo(pick.files, pick.rank, pick.score)],
            roots=p.paths,
            keyword=p.xmp_keyword,
            on_problem=problem,  # the record of tagged sidecars: novelfind.dirs.sidecar_record_path()
        )

    def ignore_picks(self, ignore_list: IgnoreList | None, picks: list[Pick], store: FeatureStore) -> int:
        """Put this run's picks on the ignore list (each by the file it was read from); how many were new."""
        if ignore_list is None:
            ignore_list = IgnoreList(self.params.ignore_file)
        files = [ImageFile(pick.path, pick.size, pick.mtime_ns) for pick in picks]
        lookup = getattr(store, "digests_by_stat", None)
        digests = list(lookup(files)) if lookup is not None else [None] * len(files)
        items = []
        for f, digest in zip(files, digests, strict=True):
            if digest is None:
                try:
                    data = f.path.read_bytes()
                except OSError as err:
                    self.warn(f"cannot add {f.path} to the ignore list: {err.strerror or err}")
                    continue
                digest, size = file_digest(data), len(data)
            else:
                size = f.size
            items.append((digest, f.path, size))
        return len(ignore_list.add_files(items).changed)

    def write_report(self, picks: list[Pick], record: dict[str, Any], extraction: Extraction) -> None:
        row_of = {f.path: i for i, f in enumerate(extraction.files)}
        write_html_report(
            self.params.report,
            picks,
            points2d=pca_2d(extraction.features) if self.projection is None else self.projection,
            pick_indices=[row_of[pick.path] for pick in picks],
            run=record,
            failures=self.failures,
            paths=extraction.files.paths,
        )

    # -- reporting

    def extract_progress(self, done: int, total: int) -> None:
        self.progress("extract", done, total)

    def progress(
        self, stage: str, done: int = 0, total: int | None = None, *, path: Path | None = None
    ) -> None:
        if self.on_progress is not None:
            self.on_progress(Progress(stage, done, total, path))

    def warn(self, message: str) -> None:
        if self.on_warning is not None:
            self.on_warning(message)
        else:
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def fail(self, path: Path, reason: str) -> None:
        failure = Failure(Path(path), reason)
        self.failures.append(failure)
        if self.on_failure is not None:
            self.on_failure(failure.path, failure.reason)

    def seconds(self) -> float:
        return time.monotonic() - self.started


class PhotoList(Sequence[Photo[ImageFile]]):
    """The photos of a scan in compact form: the file each is read from in a :class:`FileList`, and the
    other files of the few photos that have them (RAW + JPEG) by position. A list of ``Photo`` objects
    costs about 1 KB per photo; this, the path's length + 24 bytes."""

    def __init__(self, files: FileList, twins: dict[int, tuple[ImageFile, ...]]) -> None:
        self.files = files
        self.twins = twins  # position -> the photo's other files

    @classmethod
    def grouped(cls, files: FileList, names: np.ndarray) -> PhotoList:
        """The photos of ``files`` in walk order, twins grouped by :func:`novelfind.pairs.group_photos`.
        ``names`` (N,) int64 is a hash of each file's (folder, case-folded stem): only files that share
        one can be twins, so only those are made into objects and grouped."""
        _, where, counts = np.unique(names, return_inverse=True, return_counts=True)
        shared = np.flatnonzero(counts[where.reshape(-1)] > 1)  # (S,) positions, walk order
        if not len(shared):
            return cls(files, {})
        position = {f.path: int(i) for i, f in zip(shared, files.take(shared), strict=True)}
        twins, absorbed = {}, np.zeros(len(files), bool)
        for photo in group_photos(files.take(shared)):
            if photo.also:
                twins[position[photo.file.path]] = photo.also
                absorbed[[position[f.path] for f in photo.also]] = True
        if not absorbed.any():
            return cls(files, twins)
        new = np.cumsum(~absorbed) - 1  # (N,) position among the photos
        kept = files.take(np.flatnonzero(~absorbed))
        return cls(kept, {int(new[i]): also for i, also in twins.items()})

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = i + len(self) if i < 0 else i
        return Photo(self.files[i], self.twins.get(i, ()))

    def file_count(self) -> int:
        """Files behind the photos (their other files included)."""
        return len(self.files) + sum(len(also) for also in self.twins.values())

    def take(self, positions: np.ndarray) -> PhotoList:
        """The photos at ``positions`` (increasing), as a new list."""
        new = {int(old): j for j, old in enumerate(positions) if int(old) in self.twins}
        return PhotoList(self.files.take(positions), {j: self.twins[old] for old, j in new.items()})

    def subset(self, files: FileList) -> PhotoList:
        """The photos read from ``files``, a subsequence of ``self.files`` in the same order."""
        if len(files) == len(self.files):
            return self
        positions, j = array("q"), 0
        for path, _, _ in files.records():
            while self.files.raw_path(j) != path:
                j += 1
            positions.append(j)
            j += 1
        return self.take(np.frombuffer(positions, np.int64))

    @property
    def groups(self) -> Sequence[tuple[ImageFile, ...]]:
        """Every photo's files, the one read first (made on access)."""
        return _Groups(self)


class _Groups(Sequence[tuple[ImageFile, ...]]):
    def __init__(self, photos: PhotoList) -> None:
        self._photos = photos

    def __len__(self) -> int:
        return len(self._photos)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self._photos[i].files


class _OwnOutputs:
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


def _candidates(files: FileList, since: datetime | None) -> np.ndarray:
    """bool (N,): the rows that may be picked: all, or those modified at or after ``since``."""
    if since is None:
        return np.ones(len(files), bool)
    cutoff_ns = int(since.timestamp() * 1e9)
    return files.mtimes_ns >= cutoff_ns


@contextmanager
def _warnings_to(on_warning: Callable[[str], None]) -> Iterator[None]:
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


def parameter_defaults() -> dict[str, Any]:
    """Each parameter's default, for the command line's options (so the two never disagree)."""
    return {f.name: f.default for f in dataclasses.fields(ScanParameters) if f.name != "paths"}
