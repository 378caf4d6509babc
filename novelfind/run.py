"""The scan as one call: find -> look up -> extract -> rank -> write. Prints nothing.

:func:`scan` is what ``novelfind scan`` runs; the command line only parses its options into the same
keyword arguments, passes progress bars and stderr printing in as callbacks, and prints the result.
This module only orchestrates; each stage owns its work: the parameters and their checks
(:mod:`novelfind.params`), walking (:mod:`novelfind.media.walk`) and grouping twins (:mod:`novelfind.media.pairs`),
the feature store (:func:`novelfind.cache.open_store`), extraction (:mod:`novelfind.extract`), the
ignore list (:class:`novelfind.media.ignore.IgnoreList`), ranking (:mod:`novelfind.ranking.driver`) and everything
written afterwards (:mod:`novelfind.outputs.write`). Errors are exceptions:
:class:`~novelfind.errors.InputError` (also a ValueError) for impossible values, other
:class:`~novelfind.errors.NovelfindError` subclasses for what stops a run (no images, weights
missing, an output not writable, another run holding an output). ``docs/architecture.md`` draws the map.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from novelfind import __version__
from novelfind.base import devices
from novelfind.base.lock import output_lock
from novelfind.cache import open_store, ranking_root
from novelfind.errors import CacheError, InputError, NovelfindError
from novelfind.extract.dating import scan_dates
from novelfind.extract.engines import ENGINES
from novelfind.extract.stage import Extraction, FeatureStore, featured, load, stored_source
from novelfind.media import dates, decode, video, walk
from novelfind.media.ignore import IgnoreList
from novelfind.media.pairs import PhotoList
from novelfind.media.walk import FileList, ImageFile
from novelfind.model import features, weights
from novelfind.outputs.write import OwnOutputs, check_outputs, held_outputs, write_outputs
from novelfind.params import ScanParameters, describe, scan_signature
from novelfind.picks import Failure, Pick, picks_of
from novelfind.ranking import driver as ranking
from novelfind.ranking.pca import map_2d
from novelfind.ranking.sources import FeatureSource, as_source
from novelfind.results import Counts, Progress, ScanResult, run_record, warnings_to

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
            cache, a fallback to a slower engine); without it they are kept in the result's
            ``warnings``: the scan prints nothing (Python warnings raised while it runs go there too).
        on_failure: called with (path, reason) for each file that cannot be read, as it happens; not
            for a file an earlier scan with the same cache already reported and that has not changed
            since (it is in the result's ``known_failures``), nor for one on the ignore list.

    Returns:
        A :class:`ScanResult`: ``picks`` (:class:`Pick`: ``rank``, ``path``, ``score``, ``neighbour``,
        ``distance``, ``size``, ``mtime``, ``also``, ``kind``, ``clip``, ``members``, ``taken``,
        ``labels``: the model's ImageNet classes, a hint, not the truth), ``failures`` (path, reason),
        ``counts``, ``seconds``, ``parameters``, the ``files`` and ``features`` that were ranked,
        ``sidecars``, ``known_failures``, ``notices`` (a library of one photo cannot be ranked; nothing new
        to rank) and ``warnings``.

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
        self.failures: list[Failure] = []  # every file that could not be read, in the order met
        self.known_failures: list[Failure] = []  # of those, the ones an earlier scan reported (unchanged)
        self.stats: dict[Path, tuple[int, int]] = {}  # (size, mtime_ns) of each failure, (-1, -1): none
        self.known: dict[bytes, Any] | None = None  # the cache's record of unreadable files, once open
        self.pending: list[Failure] = []  # failures met before the cache was open (the walk's)
        self.ignore_list: IgnoreList | None = None
        self.ignored_failures = 0  # unreadable files the user put on the ignore list: skipped silently
        self.notices: list[str] = []
        self.warnings: list[str] = []  # without on_warning: the problems the scan survived

    def run(self) -> ScanResult:
        p = self.params
        check_outputs(p)
        ignore_list = None if p.include_ignored and not p.ignore_picks else IgnoreList(p.ignore_file)
        if ignore_list is not None:
            ignore_list.check()  # a damaged list stops the scan here, before the slow part
        # an unreadable file on the list is skipped without a word, also with include_ignored (which
        # shows ignored photos among the picks: an unreadable one cannot be one)
        self.ignore_list = ignore_list or IgnoreList(p.ignore_file)
        workers = p.workers if p.workers is not None else devices.available_cpus()
        budget = p.max_decode_pixels or decode.default_pixel_budget(workers)
        with ExitStack() as stack:
            stack.enter_context(decode.pixel_budget_of(budget))  # here, in the decode workers, the report
            held = stack.enter_context(held_outputs(p))  # the picks folder, opened once for the run
            # every warning of the run (novelfind's, and a library's Python warning or log record) goes to
            # on_warning, or without one into the result's ``warnings``: scan() itself prints nothing
            stack.enter_context(warnings_to(self.warn))
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
            bound = (
                {"max_norm": weights.STORED_NORM_MAX, "min_value": weights.STORED_VALUE_MIN}
                if hasattr(extractor, "encode")
                else {}
            )
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
            self.open_failures(cache)
            # extract
            extraction = self.extract(photos.files, extractor, store, keep_vectors=not streamed)
            self.remember_failures(cache, extraction.files)
            read = photos.subset(extraction.files)  # row i of the features is photo read[i]
            # when each photo was taken (row i for photo i): read with its pixels and cached beside its vector
            taken = scan_dates(
                extraction.files,
                store,
                decoded=extraction.taken,
                twins=lambda i: [os.fspath(t.path) for t in read[i].also],
                on_progress=lambda done, total: self.progress("dates", done, total),
                on_warning=self.warn,
            )
            ignored = np.zeros(len(read), dtype=bool)
            if ignore_list is not None and not p.include_ignored:
                ignored = ignore_list.ignored_in(
                    read.groups, known_digests=store.digests_by_stat, on_warning=self.warn
                )
            # rank
            in_window = dates.since_mask(taken, extraction.files.mtimes_ns, p.since)  # taken (else modified)
            candidates = np.flatnonzero(in_window & ~ignored)  # int64 rows
            # With ignore_picks, the photos this run would rank but for the ignore list (mostly an earlier
            # run's picks of the same window): their tags stay, and with nothing else to rank the outputs
            # stay as they were. A re-run of the weekly line loses nothing; last week's picks (before
            # ``since``) lose their tags when this week's are tagged.
            kept_rows = np.flatnonzero(in_window & ignored) if p.ignore_picks else np.zeros(0, np.int64)
            nothing_new = not len(candidates) and bool(len(kept_rows))
            restricted = p.since is not None or bool(ignored.any())
            vectors = (
                extraction.features
                if extraction.features is not None
                else stored_source(store, extraction.files)
            )
            self.say_if_ranking_changed(cache)
            picks, dropped = self.rank(
                vectors, extraction.files, read, candidates, restricted, extraction.clips, taken, extractor
            )
            self.say_if_unranked(len(read), picks)
            self.note_ranking(cache)
            counts = Counts(
                found=photos.file_count(),
                from_cache=extraction.from_cache,
                extracted=extraction.extracted,
                failed=len(self.failures),
                known_failed=len(self.known_failures),
                candidates=len(candidates),
                duplicates_dropped=dropped,
                photos=len(photos),
                ignored=int(ignored.sum()) + self.ignored_failures,
                clips=len(video.clip_rows(photos.files)),
            )
            # write
            sidecars = None
            if nothing_new:
                self.say_nothing_new(len(kept_rows))
            else:
                sidecars = write_outputs(
                    p,
                    picks,
                    record=run_record(p, counts, self.seconds()),
                    failures=self.failures,
                    files=extraction.files,
                    points2d=lambda: map_2d(vectors),  # the report's map
                    on_progress=lambda done, total: self.progress("write", done, total),
                    on_warning=self.warn,
                    on_failure=self.fail,  # a pick swapped since it was ranked: not copied, exit code 3
                    held=held,
                    on_thumbnails=lambda done, total: self.progress("report", done, total),
                    keep_tags=[f.path for row in kept_rows for f in read.groups[int(row)]],
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
            known_failures=list(self.known_failures),
            counts=counts,
            seconds=self.seconds(),
            parameters=p,
            files=extraction.files,
            features=extraction.features,
            sidecars=sidecars,
            clips=extraction.clips,
            dates=taken,
            notices=list(self.notices),
            warnings=list(self.warnings),
            outputs_kept=nothing_new,
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
        (RAW + JPEG) are one photo (:class:`novelfind.media.pairs.PhotoList`). What the walk or this installation
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
        taken: dates.Dates | None = None,
        extractor: features.Extractor | None = None,
    ) -> tuple[list[Pick], int]:
        """The picks: the most novel candidates, scored against the whole library (with ``since`` or
        ignored photos, the candidates are fewer than the photos; all of them count as neighbours).
        ``vectors``: the matrix, or the vectors left in the cache, read chunk by chunk; ``clips``: what
        the clips among ``files`` were read as (``Extraction.clips``); ``taken``: when each was taken
        (``taken.taken``, float64 UTC seconds, NaN where unknown, row i for ``files[i]``): the events of
        ``event-knn`` and every moment's time span;
        ``extractor``: what made the vectors, whose classes label the picks (``features.classes_of``)."""
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
                device=self.solver_device(len(files)) if ranking.METHODS[p.method].solver else None,
                candidates=candidates if restricted else None,
                # a moment is shown by its best original: the largest file among the medoid's copies
                # (a clip's size says nothing of its frames: a photo is preferred to it)
                prefer=np.fromiter(
                    (0.0 if f.path in clips else f.size for f in files), dtype=np.float64, count=len(files)
                ),
                times=None if taken is None else taken.taken,  # when each photo was taken
            )
        except ValueError as err:  # e.g. a learning rate so large that the weights overflow
            raise InputError(f"cannot rank with these settings: {err}") from None
        self.progress("rank", 1, 1)
        labels = features.classes_of(extractor, as_source(vectors).take(result.indices))
        picks = picks_of(result, files, read, clips, taken, labels)
        if p.min_score is not None:  # best first: the picks that reach it keep their ranks 1, 2, ...
            picks = [pick for pick in picks if pick.score >= p.min_score]
        return picks, int(result.duplicates_dropped)

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
            self.warnings.append(message)

    def fail(self, path: Path, reason: str) -> None:
        """A file that could not be read. One on the ignore list (``novelfind ignore broken.jpg``) is
        skipped without a word; one an earlier scan reported and that has not changed since is a known
        failure (counted, not reported again); any other goes to ``on_failure``. Failures met before
        the cache is open (the walk's) wait for it."""
        failure = Failure(Path(path), reason)
        try:
            st = os.stat(failure.path)
            stat = (st.st_size, st.st_mtime_ns)
        except OSError:
            stat = (-1, -1)
        if self.on_ignore_list(failure.path, stat[0]):
            self.ignored_failures += 1
            return
        self.failures.append(failure)
        self.stats[failure.path] = stat
        if self.known is None:
            self.pending.append(failure)
        else:
            self.report_failure(failure)

    def on_ignore_list(self, path: Path, size: int) -> bool:
        """Whether the unreadable file at ``path`` is on the ignore list (by the digest of its bytes)."""
        if self.ignore_list is None or size < 0:
            return False
        try:
            found = self.ignore_list.find([[ImageFile(path, size, 0)]])
        except NovelfindError:
            return False
        return bool(found.mask[0])

    def report_failure(self, failure: Failure) -> None:
        known = self.known.get(os.fsencode(os.path.abspath(failure.path))) if self.known else None
        if known is not None and (known.size, known.mtime_ns) == self.stats[failure.path]:
            self.known_failures.append(failure)
        elif self.on_failure is not None:
            self.on_failure(failure.path, failure.reason)

    def open_failures(self, cache: Any) -> None:
        """Read the cache's record of unreadable files (:mod:`novelfind.cache.failures`) and report the
        failures met so far against it."""
        try:
            self.known = cache.known_failures()
        except NovelfindError:
            self.known = {}  # an unreadable record: every failure is new
        for failure in self.pending:
            self.report_failure(failure)
        self.pending.clear()

    def remember_failures(self, cache: Any, files: FileList) -> None:
        """Record this run's unreadable files in the cache, and forget those read now (or gone): a file
        fixed, or changed and readable, is reported again if it ever fails again."""
        failed = {os.fsencode(os.path.abspath(f.path)) for f in self.failures}
        rows = [(os.fsencode(os.path.abspath(f.path)), *self.stats[f.path], f.reason) for f in self.failures]
        roots = [os.fsencode(os.path.abspath(root)) for root in self.params.paths]
        forget = [
            path
            for path in (self.known or {})
            if path not in failed
            and any(path == root or path.startswith(root.rstrip(b"/") + b"/") for root in roots)
        ]
        try:
            cache.record_failures(rows, forget)
        except NovelfindError as err:
            self.warn(f"cannot remember the unreadable files: {err}")

    def say_if_unranked(self, photos: int, picks: list[Pick]) -> None:
        """A notice when the library is one photo: there is nothing to compare it with, so its score
        (0) says nothing."""
        if photos == 1 and picks:
            self.notice(
                f"the library is one photo ({picks[0].path}): it has nothing to be compared with, so "
                "it cannot be ranked and its score 0 means nothing"
            )

    def say_nothing_new(self, held: int) -> None:
        """The notice of a run with nothing to rank but photos on the ignore list (a re-run of a line
        with ``ignore_picks``): it says why, and that the outputs are left as they were."""
        p = self.params
        photos = f"{held} photo" + ("" if held == 1 else "s")
        if p.since is not None:
            what = f"nothing new: the {photos} modified since {p.since:%Y-%m-%d %H:%M:%S}"
            what += " is" if held == 1 else " are all"
        else:
            what = f"nothing new: {'the' if held == 1 else 'all'} {photos} {'is' if held == 1 else 'are'}"
        what += " on the ignore list (already picked by an earlier run, or ignored)"
        kept = [str(target) for target in p.outputs()] + (["the XMP tags"] if p.xmp else [])
        self.notice(what + (f"; left as they were: {', '.join(kept)}" if kept else ""))

    def notice(self, message: str) -> None:
        """Something the user should know about the result, not a problem: kept in the result's
        ``notices`` (the command line prints them as ``note:`` lines)."""
        self.notices.append(message)

    def seconds(self) -> float:
        return time.monotonic() - self.started
