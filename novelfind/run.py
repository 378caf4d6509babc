"""The scan as one call: find -> look up -> extract -> rank -> write. Prints nothing.

:func:`scan` is what ``novelfind scan`` runs; the command line only parses its options into the same
keyword arguments, passes progress bars and stderr printing in as callbacks, and prints the result.
This module only orchestrates; each stage owns its work: the parameters and their checks
(:mod:`novelfind.params`), walking (:mod:`novelfind.walk`) and grouping twins (:mod:`novelfind.pairs`),
the feature store (:func:`novelfind.cache.open_store`), extraction (:mod:`novelfind.extract`), the
ignore list (:class:`novelfind.ignore.IgnoreList`), ranking (:mod:`novelfind.ranking`) and everything
written afterwards (:mod:`novelfind.outputs`). Errors are exceptions:
:class:`~novelfind.errors.InputError` (also a ValueError) for impossible values, other
:class:`~novelfind.errors.NovelfindError` subclasses for what stops a run (no images, weights
missing, an output not writable, another run holding an output). ``docs/architecture.md`` draws the map.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from novelfind import __version__, decode, devices, features, ranking, video, walk, weights
from novelfind.cache import open_store, ranking_root
from novelfind.errors import CacheError, InputError, NovelfindError
from novelfind.extract.engines import ENGINES
from novelfind.extract.stage import Extraction, FeatureStore, featured, load, stored_source
from novelfind.ignore import IgnoreList
from novelfind.lock import output_lock
from novelfind.outputs import OwnOutputs, check_outputs, write_outputs
from novelfind.pairs import PhotoList
from novelfind.params import ScanParameters, describe, scan_signature
from novelfind.pca import map_2d
from novelfind.picks import Failure, Pick, picks_of
from novelfind.results import Counts, Progress, ScanResult, run_record, warnings_to
from novelfind.sources import FeatureSource
from novelfind.walk import FileList, ImageFile

WALK_PROGRESS_EVERY = 1000  # files between two "walk" progress events
# Methods whose score scale a release changed, with that release: a library last ranked by an earlier
# version with the same method is told once that its scores moved. (None so far.)
SCALE_CHANGED: dict[str, str] = {}


# --------------------------------------------------------------------------- the scan

CALLBACKS = ("on_progress", "on_warning", "on_failure")


def scan(*args: Any, **kwargs: Any) -> ScanResult:
    bound = _SIGNATURE.bind(*args, **kwargs).arguments  # TypeError for an unknown keyword, as any call
    callbacks = {name: bound.pop(name) for name in CALLBACKS if name in bound}
    return run(ScanParameters(**bound), **callbacks)


_SIGNATURE = scan_signature(
    [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
        for name, annotation in (
            ("on_progress", "Callable[[Progress], None] | None"),
            ("on_warning", "Callable[[str], None] | None"),
            ("on_failure", "Callable[[Path, str], None] | None"),
        )
    ],
    returns="ScanResult",
)
scan.__signature__ = _SIGNATURE  # type: ignore[attr-defined]  # help() and editors show every keyword
scan.__doc__ = "Find the ``k`` most novel photos under ``paths``: exactly what ``novelfind scan`` does, "
scan.__doc__ += f"""minus printing.

    Walks the folders, reads each photo, describes it with MobileNet-V2 (vectors are cached, so a
    second scan of the same library only looks at what changed), ranks, and returns the picks best
    first. Nothing is written but the feature cache, unless an output is asked for.

    Args:
{describe()}
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


def _older(version: str, than: str) -> bool:
    """Whether release ``version`` comes before ``than`` (both ``X.Y.Z``)."""
    return tuple(map(int, version.split("."))) < tuple(map(int, than.split(".")))


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
    """One scan: :meth:`run` is the pipeline; the other methods are its small steps."""

    def __init__(self, params: ScanParameters, on_progress, on_warning, on_failure) -> None:
        self.params = params
        self.on_progress = on_progress
        self.on_warning = on_warning
        self.on_failure = on_failure
        self.started = time.monotonic()
        self.failures: list[Failure] = []

    def run(self) -> ScanResult:
        p = self.params
        check_outputs(p)
        ignore_list = None if p.include_ignored and not p.ignore_picks else IgnoreList(p.ignore_file)
        if ignore_list is not None:
            ignore_list.check()  # a damaged list stops the scan here, before the slow part
        workers = p.workers if p.workers is not None else devices.available_cpus()
        budget = p.max_decode_pixels or decode.default_pixel_budget(workers)
        with ExitStack() as stack:
            stack.enter_context(decode.pixel_budget_of(budget))  # here, in the decode workers, the report
            if self.on_warning is not None:
                stack.enter_context(warnings_to(self.on_warning))
            for target in p.outputs():
                stack.enter_context(self.lock(target))
            # find
            photos = self.find_photos()
            # look up
            extractor = features.build_extractor(
                feature=p.feature,
                # an engine running the model elsewhere needs the driver's model for its name only
                device="cpu" if ENGINES[p.engine].remote else p.device,
                backend=p.backend,
                weights=p.weights,
            )
            # the memory budget decides how the ranking reads the vectors (in memory, or from the cache); the
            # stage keeps the stored vectors (pooled, also for logits), so those set the memory
            stored_dim = getattr(extractor, "stored_dim", extractor.dim)
            streamed = ranking.read_in_chunks(p.method, len(photos), stored_dim)
            # a cached vector beyond what the model can make is damage (extractors that store what they
            # return, without ``encode``, give no such bound)
            bound = {"max_norm": weights.STORED_NORM_MAX} if hasattr(extractor, "encode") else {}
            opened = open_store(
                p.cache,
                extractor.model_key,
                dtype=p.cache_dtype,
                streamed=streamed,
                on_warning=self.warn,
                **bound,
            )
            cache = stack.enter_context(opened)
            store = featured(cache, extractor)  # read back as the feature asked for
            # extract
            extraction = self.extract(photos.files, extractor, store, keep_vectors=not streamed)
            read = photos.subset(extraction.files)  # row i of the features is photo read[i]
            ignored = np.zeros(len(read), dtype=bool)
            if ignore_list is not None and not p.include_ignored:
                ignored = ignore_list.ignored_in(
                    read.groups, known_digests=store.digests_by_stat, on_warning=self.warn
                )
            # rank
            candidates = np.flatnonzero(extraction.files.modified_since(p.since) & ~ignored)  # int64 rows
            restricted = p.since is not None or bool(ignored.any())
            vectors = (
                extraction.features
                if extraction.features is not None
                else stored_source(store, extraction.files)
            )
            self.say_if_ranking_changed(cache)
            picks, dropped = self.rank(
                vectors, extraction.files, read, candidates, restricted, extraction.clips
            )
            self.note_ranking(cache)
            counts = Counts(
                found=photos.file_count(),
                from_cache=extraction.from_cache,
                extracted=extraction.extracted,
                failed=len(self.failures),
                candidates=len(candidates),
                duplicates_dropped=dropped,
                photos=len(photos),
                ignored=int(ignored.sum()),
                clips=len(video.clip_rows(photos.files)),
            )
            # write
            sidecars = write_outputs(
                p,
                picks,
                record=run_record(p, counts, self.seconds()),
                failures=self.failures,
                files=extraction.files,
                points2d=lambda: map_2d(vectors),  # the report's map
                on_progress=lambda done, total: self.progress("write", done, total),
                on_warning=self.warn,
            )
            if p.ignore_picks and picks:
                files = [  # the whole moment: the pick and its members
                    ImageFile(photo.path, photo.size, photo.mtime_ns)
                    for pick in picks
                    for photo in (pick, *pick.members)
                ]
                added = ignore_list.add_picks(
                    files, known_digests=store.digests_by_stat, on_warning=self.warn
                )
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
            clips=extraction.clips,
        )

    # -- find, look up, extract

    def lock(self, target: Path):
        """The lock on one output; while another run holds it, a "wait" progress event (or LockedError)."""
        return output_lock(
            target,
            wait=self.params.wait,
            on_warning=self.warn,
            on_wait=lambda: self.progress("wait", path=target),
        )

    def find_photos(self) -> PhotoList:
        """The photos under the paths, in walk order, without the files novelfind wrote itself; twins
        (RAW + JPEG) are one photo (:class:`novelfind.pairs.PhotoList`). What the walk or this installation
        left out (RAW files without LibRaw, HEIC without pillow-heif, clips without PyAV) is one warning
        line per kind, with the count and the reason (and a few names, for clips); with no photo left, the
        error says it instead."""
        p = self.params
        own = OwnOutputs(p.outputs())
        skipped: Counter[str] = Counter()
        names: dict[str, list[str]] = {}  # the first few names of the kinds whose line names them

        def on_skipped(kind: str, name: str) -> None:
            skipped[kind] += 1
            if kind in walk.NAMED_KINDS and len(names.setdefault(kind, [])) < walk.NAMES_SHOWN:
                names[kind].append(name)

        walked = walk.walk(
            p.paths,
            exclude=p.exclude,
            follow_symlinks=p.follow_symlinks,
            on_error=self.fail,
            on_skipped=on_skipped,
        )
        photos = PhotoList.from_walk((f for f in walked if not own.contains(f.path)), self.walk_progress)
        self.progress("walk", photos.file_count())
        photos, left_out = photos.readable()
        messages = [
            walk.skipped_message(kind, count, names.get(kind, ())) for kind, count in sorted(skipped.items())
        ]
        if left_out:
            messages.insert(
                0,
                f"{left_out} RAW file{'' if left_out == 1 else 's'} without a JPEG twin left out: "
                "RAW support is not installed (pip install 'novelfind[raw]')",
            )
        if not photos:
            where = ", ".join(str(path) for path in p.paths)
            raise NovelfindError(f"no images found in {where}" + "".join(f" ({m})" for m in messages))
        for message in messages:
            self.warn(message)
        return photos

    def extract(
        self, files: FileList, extractor: features.Extractor, store: FeatureStore, *, keep_vectors: bool
    ) -> Extraction:
        p = self.params
        engine = ENGINES[p.engine]
        # what the engine takes of the parameters: the local one a decode time limit, one that runs
        # elsewhere where, and on what device its workers run the model
        takes = {keyword: getattr(p, name) for name, keyword in engine.takes.items()}
        extraction = load(engine.target)(
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
            **takes,
        )
        if not keep_vectors and store.writes_disabled:
            raise CacheError(
                f"the feature cache {store.path} stopped taking vectors; a library of {len(files):,} "
                "photos is ranked from the cache, so this scan cannot finish (the vectors stored so far "
                "are kept)"
            )
        if not extraction.files:
            raise NovelfindError(f"none of the {len(files)} images could be read")
        return extraction

    # -- rank

    def rank(
        self,
        vectors: np.ndarray | FeatureSource,
        files: FileList,
        read: PhotoList,
        candidates: np.ndarray,
        restricted: bool,
        clips: Mapping[Path, video.ClipInfo],
    ) -> tuple[list[Pick], int]:
        """The picks: the most novel candidates, scored against the whole library (with ``since`` or
        ignored photos, the candidates are fewer than the photos; all of them count as neighbours).
        ``vectors``: the matrix, or the vectors left in the cache, read chunk by chunk; ``clips``: what
        the clips among ``files`` were read as (``Extraction.clips``)."""
        if not len(candidates):
            return [], 0
        p = self.params
        self.progress("rank", 0, 1)
        try:
            result = ranking.rank(
                vectors,
                p.k,
                method=p.method,
                config=p.solver_config(),
                dedup=p.dedup,
                device=self.solver_device(len(files)),
                candidates=candidates if restricted else None,
                # a moment is shown by its best original: the largest file among the medoid's copies
                prefer=np.fromiter((f.size for f in files), dtype=np.float64, count=len(files)),
            )
        except ValueError as err:  # e.g. a learning rate so large that the weights overflow
            raise InputError(f"cannot rank with these settings: {err}") from None
        self.progress("rank", 1, 1)
        return picks_of(result, files, read, clips), int(result.duplicates_dropped)

    def say_if_ranking_changed(self, cache: Any) -> None:
        """One warning when the library was last ranked (with this cache) by another method, or by an
        earlier version whose scores of this method were on another scale: the picks and scores then
        differ from the last run's for a reason the user did not choose, and the line says how to keep
        the old ranking. A cache an earlier version wrote stands for that version's default."""
        try:
            last = cache.last_ranking(ranking_root(self.params.paths))
        except NovelfindError:
            return  # an unreadable record only costs the notice
        if last is None:
            return
        method, version, inferred = last
        new = self.params.method
        rescaled = new in SCALE_CHANGED and _older(version, SCALE_CHANGED[new])
        if method == new and not rescaled:
            return
        was = (
            f"novelfind {version}, which last used this cache, ranked with {method} by default"
            if inferred
            else f"this library was last ranked with --method {method} (novelfind {version})"
        )
        if method == new:
            self.warn(f"{was}; the scores of {new} are on another scale since novelfind {SCALE_CHANGED[new]}")
        else:
            self.warn(
                f"{was}; this run ranks with --method {new}, so the picks and the scale of the scores "
                f"differ: add --method {method} to rank as before"
            )

    def note_ranking(self, cache: Any) -> None:
        """Remember this ranking of the library for the next scan (:meth:`say_if_ranking_changed`)."""
        try:
            cache.note_ranking(ranking_root(self.params.paths), self.params.method, __version__)
        except NovelfindError:
            pass  # a cache that cannot be written has already been reported

    def solver_device(self, photos: int) -> str:
        """Where the solver runs for ``photos`` photos: ``device``; with an engine running the model
        elsewhere, ``device`` is the workers', and the solver takes this machine's CUDA device when there is
        one and the ranking is large enough to pay for it (``devices.resolve_device``)."""
        p = self.params
        if not ENGINES[p.engine].remote or p.device == "cpu":
            return devices.resolve_device(p.device, photos)
        return devices.resolve_device("auto", photos)

    # -- reporting

    def walk_progress(self, found: int) -> None:
        if found % WALK_PROGRESS_EVERY == 0:
            self.progress("walk", found)

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
