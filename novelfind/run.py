"""The scan as one call: find -> look up -> extract -> rank -> write. Prints nothing.

:func:`scan` is what ``novelfind scan`` runs; the command line only parses its options into the same keyword
arguments, passes progress bars and stderr printing in as callbacks, and prints the result. This module only
orchestrates; each stage owns its work: the parameters and their checks (:mod:`novelfind.params`), walking
(:mod:`novelfind.media.walk`) and grouping twins (:mod:`novelfind.media.pairs`), the feature store
(:func:`novelfind.cache.open_store`), extraction and its failures and capture dates
(:mod:`novelfind.extract`), the ignore list (:class:`novelfind.media.ignore.IgnoreList`), ranking
(:mod:`novelfind.ranking.driver`), everything written afterwards (:mod:`novelfind.outputs.write`) and the
result (:mod:`novelfind.results`). Errors are exceptions: :class:`~novelfind.errors.InputError` (also a
ValueError) for impossible values, other :class:`~novelfind.errors.NovelfindError` subclasses for what stops
a run (no images, weights missing, an output not writable, another run holding an output).
``docs/architecture.md`` draws the map.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from novelfind.base import devices, door
from novelfind.base.lock import output_lock
from novelfind.cache import open_store
from novelfind.errors import CacheError, NovelfindError
from novelfind.extract.engines import ENGINES
from novelfind.extract.failures import FailureLog
from novelfind.extract.header_dates import scan_dates
from novelfind.extract.stage import Extraction, FeatureStore, featured, load, stored_source
from novelfind.media import decode, video
from novelfind.media.ignore import IgnoreList
from novelfind.media.pairs import PhotoList, find_photos
from novelfind.media.walk import FileList
from novelfind.model import features, weights
from novelfind.outputs.write import OutputSettings, OwnOutputs, check_outputs, held_outputs, write_outputs
from novelfind.params import ScanParameters, describe, scan_signature
from novelfind.ranking.budget import read_in_chunks
from novelfind.ranking.methods import DEFAULT_METHOD
from novelfind.ranking.pca import map_2d
from novelfind.results import (
    Counts,
    Progress,
    ScanResult,
    choose_candidates,
    note_ranking,
    nothing_new_notice,
    rank_picks,
    ranking_changed,
    run_record,
    unranked_notice,
    unreadable_error,
    warnings_to,
)

WALK_PROGRESS_EVERY = 1000  # files between two "walk" progress events


# --------------------------------------------------------------------------- the scan

CALLBACKS = ("on_progress", "on_warning", "on_failure")


def scan(*args: Any, **kwargs: Any) -> ScanResult:
    bound = _SIGNATURE.bind(*args, **kwargs).arguments  # TypeError for an unknown keyword, as any call
    callbacks = {name: bound.pop(name) for name in CALLBACKS if name in bound}
    return run(ScanParameters(**bound), method_chosen="method" in bound, **callbacks)


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


def run(
    parameters: ScanParameters,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    on_failure: Callable[[Path, str], None] | None = None,
    method_chosen: bool | None = None,
) -> ScanResult:
    """:func:`scan` with its parameters already checked and gathered. ``method_chosen``: the caller named
    the method (None: unless it is the default); only a change not asked for is said (``ranking_changed``)."""
    chosen = parameters.method != DEFAULT_METHOD if method_chosen is None else method_chosen
    return _Scan(parameters, on_progress, on_warning, on_failure, chosen).run()


class _Scan:
    """One scan: :meth:`run` is the pipeline; the other methods are its small steps."""

    def __init__(self, params: ScanParameters, on_progress, on_warning, on_failure, method_chosen) -> None:
        self.params = params
        self.on_progress = on_progress
        self.on_warning = on_warning
        self.on_failure = on_failure
        self.started = time.monotonic()
        self.failures = FailureLog(on_failure, self.warn)  # every file that could not be read
        self.notices: list[str] = []
        self.warnings: list[str] = []  # without on_warning: the problems the scan survived
        self.method_chosen = method_chosen  # the user named the method (else a changed default is said)

    def run(self) -> ScanResult:
        p = self.params
        to_write = OutputSettings.of(p)
        check_outputs(to_write)
        ignore_list = None if p.include_ignored and not p.ignore_picks else IgnoreList(p.ignore_file)
        if ignore_list is not None:
            ignore_list.check()  # a damaged list stops the scan here, before the slow part
        # an unreadable file on the list is skipped without a word, also with include_ignored
        self.failures.ignore_list = ignore_list or IgnoreList(p.ignore_file)
        workers = p.workers if p.workers is not None else devices.available_cpus()
        budget = p.max_decode_pixels or decode.default_pixel_budget(workers)
        with ExitStack() as stack:
            stack.enter_context(decode.pixel_budget_of(budget))  # here, in the decode workers, the report
            stack.enter_context(door.scanning(p.paths, follow_links=p.follow_symlinks))  # and how files open
            held = stack.enter_context(held_outputs(to_write))  # the picks folder, opened once for the run
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
            streamed = read_in_chunks(p.method, len(photos), stored_dim)
            # a cached vector beyond what the model can make is damage (without ``encode``: no bound)
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
            self.failures.open(cache)
            # extract
            extraction = self.extract(photos.files, extractor, store, keep_vectors=not streamed)
            self.failures.remember(cache, extraction.files, p.paths)
            read = photos.subset(extraction.files)  # row i of the features is photo read[i]
            # when each photo was taken (row i for photo i): read with its pixels and cached beside its vector
            taken = scan_dates(
                extraction.files,
                store,
                decoded=extraction.taken,
                twins=lambda i: [os.fspath(t.path) for t in read[i].also],
                on_progress=lambda done, total: self.progress("dates", done, total),
                on_warning=self.warn,
                timeout=p.decode_timeout,  # the headers not read yet are read in decode processes
            )
            # rank: the photos taken (else modified) since ``since``, less those on the ignore list and,
            # with ignore_picks, those the last run of this line ranked (novelfind.media.reruns)
            chosen, in_window, line = choose_candidates(
                p, ignore_list, taken, extraction.files, read.groups, store.digests_by_stat, self.warn
            )
            vectors = (
                extraction.features
                if extraction.features is not None
                else stored_source(store, extraction.files)
            )
            changed = ranking_changed(cache, p, chosen=self.method_chosen)
            if changed is not None:
                self.warn(changed)
            picks, dropped = rank_picks(
                p,
                vectors,
                extraction.files,
                read,
                extraction.clips,
                taken,
                extractor,
                candidates=chosen.candidates,
                restricted=chosen.restricted,
                on_progress=lambda done: self.progress("rank", done, 1),
            )
            self.notice(unranked_notice(len(read), picks))
            note_ranking(cache, p)
            counts = Counts(
                found=photos.file_count(),
                from_cache=extraction.from_cache,
                extracted=extraction.extracted,
                failed=len(self.failures.failures),
                known_failed=len(self.failures.known_failures),
                candidates=len(chosen.candidates),
                duplicates_dropped=dropped,
                photos=len(photos),
                ignored=int(chosen.ignored.sum()) + self.failures.ignored,
                clips=len(video.clip_rows(photos.files)),
            )
            # write
            sidecars = None
            if chosen.nothing_new:
                self.notice(nothing_new_notice(p, int(in_window.sum())))
            else:
                sidecars = write_outputs(
                    to_write,
                    picks,
                    record=run_record(p, counts, self.seconds()),
                    failures=self.failures.failures,
                    files=extraction.files,
                    points2d=lambda: map_2d(vectors),  # the report's map
                    on_progress=lambda done, total: self.progress("write", done, total),
                    on_warning=self.warn,
                    on_failure=self.fail,  # a pick swapped since it was ranked: not copied, exit code 3
                    held=held,
                    on_thumbnails=lambda done, total: self.progress("report", done, total),
                    keep_tags=[f.path for row in chosen.kept for f in read.groups[int(row)]],
                )
            if p.ignore_picks and picks:  # the whole moment: the pick and its members
                added = ignore_list.add_moments(
                    picks, known_digests=store.digests_by_stat, on_warning=self.warn
                )
                counts = dataclasses.replace(counts, newly_ignored=added)
            if line is not None and not chosen.nothing_new:
                line.remember(in_window)
        return ScanResult(
            picks=picks,
            failures=list(self.failures.failures),
            known_failures=list(self.failures.known_failures),
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
            outputs_kept=chosen.nothing_new,
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
        """The photos under the paths, without the files novelfind writes itself
        (:func:`novelfind.media.pairs.find_photos`)."""
        p = self.params
        return find_photos(
            p.paths,
            exclude=p.exclude,
            follow_symlinks=p.follow_symlinks,
            excluded=OwnOutputs(p.outputs()).contains,
            on_error=self.fail,
            on_found=self.walk_progress,
            on_walked=lambda found: self.progress("walk", found),
            on_warning=self.warn,
        )

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
            raise NovelfindError(unreadable_error(len(files), self.failures.failures))
        return extraction

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
        """A file that could not be read (:meth:`novelfind.extract.failures.FailureLog.fail`)."""
        self.failures.fail(path, reason)

    def notice(self, message: str | None) -> None:
        """Something the user should know about the result, not a problem: kept in the result's
        ``notices`` (the command line prints them as ``note:`` lines). None: nothing to say."""
        if message is not None:
            self.notices.append(message)

    def seconds(self) -> float:
        return time.monotonic() - self.started
