"""What the extraction stage's parts share: the result types, the store and decoder protocols, one
file's decode, and :class:`Stage`, the state of one extraction.

Every engine (``engines.local``, ``engines.ray``) drives a :class:`Stage`; the decoders
(``decoders.pillow``, ``decoders.gpu``) build on the same pieces. They all import this module and it
imports none of them, so the registries (``decoders.DECODERS``, ``engines.ENGINES``: names to
"module:attribute" strings, :func:`load`) can point at any of them without an import cycle. The flow
itself is described in ``novelfind.extract``.
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from novelfind.base import door
from novelfind.cache import DigestSet
from novelfind.errors import CacheError, DecodeError, NovelfindError
from novelfind.extract.dating import embedded_date, row_of
from novelfind.media import video
from novelfind.media.dates import Taken
from novelfind.media.kinds import kind_of
from novelfind.media.walk import FileList
from novelfind.model.features import Extractor
from novelfind.ranking.sources import STREAM_CHUNK, ChunkedSource

STAT_CHUNK = 2048  # files per cache stat lookup
HEAD_CHUNK = 8192  # stored vectors turned into features at a time (bounds the temporary copy)
MOVED_FLUSH = 8  # reused vectors of moved files are written once this many batches' worth wait

# How a failure's reason begins when the run rather than the file was at fault (a busy machine, a tight
# memory budget, a file written while it was read): such a file is decoded again at the next scan even
# unchanged (``Stage.known_failures``).
RUN_FAILURES = ("decoding took longer than", "out of memory", "it changed while it was read")

OnFailure = Callable[[Path, str], None]
OnWarning = Callable[[str], None]
OnProgress = Callable[[int, int], None]  # (files done, files in all)


@dataclass
class Extraction:
    """What the extraction stage returns."""

    files: FileList  # ImageFile records: successfully featurised, in walk order
    # float32 (N, dim) features (``extractor.dim``: logits computed from the stored pooled vectors), row i
    # <-> files[i]; None when not kept (in the cache: read them back through :func:`featured`)
    features: np.ndarray | None
    failures: list[tuple[Path, str]] = field(default_factory=list)  # (path, reason), in walk order
    from_cache: int = 0  # vectors found by stat or by digest
    extracted: int = 0  # vectors made by the model in this run
    clips: dict[Path, video.ClipInfo] = field(default_factory=dict)  # the clips among ``files``, by path
    # when each of ``files`` was taken, as its decode read it (None: its vector came from the cache, or its
    # decoder reads no date): what ``dating.scan_dates`` completes from the cache
    taken: list[Taken | None] = field(default_factory=list)


CHANGED_WHILE_READ = "it changed while it was read (another size or modification time)"


class Decoded(NamedTuple):
    """One file read for the model: ``digest`` None means it failed, ``reason`` says why; ``pixels``
    None with a digest means its bytes were already known (no decode was needed). ``taken``: its capture
    date as its own bytes say (:func:`~novelfind.extract.dating.embedded_date`), stored with its vector;
    None when the decoder reads none (the date is then read once after the extraction)."""

    digest: str | None
    pixels: Any = None  # uint8 (224, 224, 3): a numpy array, or whatever the decoder's stack() takes
    reason: str | None = None
    taken: Taken | None = None
    # (size, modification time in ns) of the file the bytes came from (the library door's ``fstat``);
    # None when the decoder does not say. The stage checks it against what the walk listed.
    seen: tuple[int, int] | None = None


class Decoder(Protocol):
    """Step 2 of the flow: files to :class:`Decoded` results, in input order.

    Constructed as ``Decoder(workers=..., window=..., known=..., extractor=..., on_warning=...)``:
    ``workers`` decode processes (or threads, or streams: the decoder's choice; 0 = in this process),
    at most ``window`` files in flight, the digests in ``known`` need no pixels, ``extractor`` is the
    model the pixels go to (its device, say), ``on_warning`` takes one-line messages.

    A decoder may also have ``decode_again(paths)``, like ``decode`` but for the pixels of files whose
    digests are in ``known`` (their vectors left the cache during the scan, :meth:`Stage.run`); without
    it such files are decoded by :func:`decode_file` in this process, with no time limit.
    """

    def decode(self, paths: Sequence[str]) -> Iterator[tuple[int, Decoded]]:
        """Yield (position in ``paths``, result) in input order; never raises for a bad file."""
        ...

    def stack(self, pixels: list[Any]) -> Any:
        """One batch for the extractor from the pixels of several files: (B, 224, 224, 3) uint8 (a numpy
        array, or a tensor already on the model's device). A file whose vector vanished from the cache
        during the scan is decoded again (:meth:`Stage.run`), so numpy pixels may come in too."""
        ...

    def terminate(self) -> None:
        """Stop at once (Ctrl-C, an error elsewhere): drop queued work, stop the workers."""
        ...

    def close(self) -> None:
        """Everything was decoded: release the workers."""
        ...


class FeatureStore(Protocol):
    """What the extraction stage and the scan need of a cache (``FeatureCache`` and ``NullCache`` have it).

    A store that rounds what it keeps (``FeatureCache`` in float16) also has ``stored(vector)``, the
    vector as it will read back: the stage keeps that, so a first scan ranks what later scans read.
    """

    path: Path | None  # where the vectors are kept (None: nowhere)
    writes_disabled: bool  # True once the store stopped taking vectors (a full disk, say)

    def get_many_by_stat(self, files: Sequence[Any]) -> list[np.ndarray | None]: ...
    def has_many_by_stat(self, files: Sequence[Any], dim: int) -> np.ndarray: ...
    def rows_by_stat(self, files: Sequence[Any], chunk: int = ...) -> Iterator[np.ndarray]: ...
    def digests_by_stat(self, files: Sequence[Any]) -> list[str | None]: ...
    def get_many_by_digest(self, digests: Sequence[str]) -> list[np.ndarray | None]: ...
    def known_digests(self) -> frozenset[str]: ...
    def put_many(self, rows: Sequence[tuple[Any, str, np.ndarray]]) -> None: ...
    def dates_by_stat(self, files: Sequence[Any]) -> list[tuple[str | None, Any]]: ...
    def put_dates(self, rows: Sequence[tuple[str, float | None, int | None, str]]) -> None: ...


def load(spec: str) -> Any:
    """The object a ``DECODERS`` / ``ENGINES`` entry names ("package.module:attribute")."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def stored_source(store: FeatureStore, files: FileList, chunk: int = STREAM_CHUNK) -> ChunkedSource:
    """The vectors of ``files`` as ``store`` keeps them, read in chunks: what the ranking
    and the report's map read when a library's vectors stay in the cache."""
    return ChunkedSource(
        chunks=lambda: store.rows_by_stat(files, chunk),
        take=lambda rows: np.concatenate(list(store.rows_by_stat(files.take(rows), chunk))),
        n=len(files),
    )


_KNOWN: frozenset[str] = frozenset()  # in a decode worker: digests the cache already has vectors for


def use_known(known: frozenset[str]) -> None:
    """In a decode worker, at its start: the digests :func:`decode_file` skips by default."""
    global _KNOWN
    _KNOWN = known


def decode_file(path: str, known: frozenset[str] | None = None) -> Decoded:
    """Read and decode one file for the model, with its capture date; never raises for a bad file. A
    clip's pixels are a :class:`video.ClipFrames` (several frames), a photo's one uint8 (224, 224, 3)
    array. The date is read here, in the decode worker, under the same time limit as the pixels.

    ``known`` defaults to the set the worker process was started with.
    """
    read = kind_of(path).read_for_model
    with door.recording() as opened:
        decoded = guarded(lambda: read(path, _KNOWN if known is None else known))
    if decoded.digest is None:
        return decoded
    return decoded._replace(taken=embedded_date(path), seen=opened[0] if opened else None)


def _decode_again(decoder: Decoder, paths: list[str]) -> Iterator[tuple[int, Decoded]]:
    """``paths`` decoded for their pixels although their digests are in the decoder's ``known`` set."""
    again = getattr(decoder, "decode_again", None)
    if again is not None:
        return again(paths)
    return ((pos, decode_file(p, frozenset())) for pos, p in enumerate(paths))


def guarded(decode: Callable[[], tuple[str, Any]]) -> Decoded:
    """``Decoded`` from ``decode()`` -> (digest, pixels), or the one-line reason it failed: a bad file never
    raises (every decoder reports its failures in these words)."""
    try:
        digest, pixels = decode()
        return Decoded(digest, pixels)
    except DecodeError as e:
        return Decoded(None, reason=str(e) or "cannot decode")
    except MemoryError:
        return Decoded(None, reason="out of memory while decoding")
    except Exception as e:  # noqa: BLE001 - a bad file must not end the scan
        return Decoded(None, reason=f"{type(e).__name__}: {e}"[:200])


class Stage:
    """The state of one extraction; each method is one step of the flow.

    :func:`extract` drives it with a decoder and the model on this machine. An engine that makes the
    vectors elsewhere drives it with what comes back: :meth:`stat_hits` first (the misses by index), then
    per result :meth:`take_vector` (made by the model), :meth:`take_known` (bytes already cached) or
    :meth:`fail`, with :meth:`take_date` for a date read with the pixels, and :meth:`commit` once per
    batch (one cache transaction), :meth:`progress` as it likes.

    What is stored and kept is what the extractor's ``encode`` makes (``stored_dim`` long: the pooled
    vector, one per photo); :meth:`result` turns it into the feature asked for (``head``). An extractor
    without ``encode`` stores what it returns.
    """

    def __init__(
        self,
        files: Iterable[Any],
        extractor: Extractor,
        cache: FeatureStore,
        batch_size: int,
        on_progress: OnProgress | None,
        on_failure: OnFailure | None,
        on_warning: OnWarning | None,
        keep_vectors: bool = True,
    ) -> None:
        self.files = files if isinstance(files, FileList) else FileList(files)
        self.extractor, self.cache, self.batch_size = extractor, cache, batch_size
        self.stored: Callable[[np.ndarray], np.ndarray] | None = getattr(cache, "stored", None)
        self.on_progress, self.on_failure, self.on_warning = on_progress, on_failure, on_warning
        n = len(files)
        self.encode: Callable[[Any], np.ndarray] = getattr(extractor, "encode", extractor)
        self.dim = int(getattr(extractor, "stored_dim", extractor.dim))  # the stored vector's length
        # (N, dim): row i <-> files[i]; the only big buffer, and only when the vectors are kept here
        self.matrix = np.empty((n, self.dim), np.float32) if keep_vectors else None
        self.done = np.zeros(n, bool)  # row i filled
        self.reasons: dict[int, str] = {}  # file index -> why it failed
        self.from_cache = 0
        self.extracted = 0
        self.batch: list[tuple[int, str, np.ndarray]] = []  # (file index, digest, pixels) for the model
        self.rows: list[tuple[Any, str, np.ndarray]] = []  # (file, digest, vector) for the next commit
        self.taken: list[Taken | None] = [None] * n  # file index -> the date its decode read
        self.dated: list[tuple[str, float | None, int | None, str]] = []  # date rows for the next commit
        self.moved = 0  # of self.rows, reused vectors of moved files (their commit may wait)
        self.former_kind = DigestSet()  # digests the cache held only an earlier kind of vector for
        self.again = 0  # of self.extracted, files with such a digest
        self.cache_writable = True
        self.reported = 0  # files resolved when progress was last reported
        self.stack: Callable[[list], Any] = np.stack  # the decoder's batch assembly
        self.clips = video.ClipBook(self.files)

    # -- step 1: stat hits

    def stat_hits(self) -> list[int]:
        """Fill every row the cache has by (path, size, mtime); the rest (the misses) by index.

        First a cache written by an earlier version is brought up to date (:meth:`upgrade`)."""
        retired = self.upgrade()
        for start in range(0, len(self.files), STAT_CHUNK):
            chunk = self.files.take(range(start, min(start + STAT_CHUNK, len(self.files))))
            if self.matrix is None:  # the vectors stay in the cache: only whether it has them
                self.done[start : start + len(chunk)] = self.cache.has_many_by_stat(chunk, self.dim)
                continue
            for j, vec in enumerate(self.cache.get_many_by_stat(chunk)):
                if self._fits(vec):
                    self._fill(start + j, vec)
        stale = self.clips.stale(self.cache, self.done)  # read under another frame rule: read again
        if stale:
            self.done[stale] = False
            self.warn(video.stale_note(len(stale)))
        misses = self.known_failures(np.flatnonzero(~self.done).tolist())
        self.from_cache = int(self.done.sum())
        self.progress()
        if retired:
            self.retire(retired, misses)
        return misses

    def known_failures(self, misses: list[int]) -> list[int]:
        """Of the ``misses``, those the cache's record of unreadable files (``novelfind failures``) holds
        unchanged (the same path, size and mtime) fail again at once, with the reason recorded, unread:
        a re-scan decodes none of them, and loads no model for them. A file that failed for a reason of
        the run's (``RUN_FAILURES``) stays a miss, to be tried again. Returns the misses left."""
        read = getattr(self.cache, "known_failures", None)
        if read is None or not misses:
            return misses
        try:
            known = read()
        except NovelfindError:  # an unreadable record: every file is tried
            return misses
        if not known:
            return misses
        left = []
        for i in misses:
            record = known.get(os.path.abspath(self.files.raw_path(i)))
            if record is not None and not record.reason.startswith(RUN_FAILURES):
                f = self.files[i]
                if (record.size, record.mtime_ns) == (f.size, f.mtime_ns):
                    self.fail(i, record.reason)
                    continue
            left.append(i)
        return left

    def upgrade(self) -> list[str]:
        """Vectors an earlier version stored under another name for what the extractor stores
        (``former.same``) get the extractor's key; returns the keys of another kind the cache holds
        (``former.other``: the classifier output alone), which :meth:`retire` drops after the lookup."""
        former = getattr(self.extractor, "former", None)
        model_keys = getattr(self.cache, "model_keys", None)
        if former is None or model_keys is None:
            return []
        try:
            held = model_keys()
            for key in former.same:
                if key in held:
                    self.cache.upgrade(key)
        except CacheError as err:
            self.warn(f"{err}; its vectors of an earlier version are left as they are")
            return []
        return [key for key in former.other if key in held]

    def retire(self, keys: list[str], misses: list[int]) -> None:
        """Remember which of the ``misses`` the cache held only vectors of another kind for (by digest, so
        that the notice :meth:`result` gives counts what the model really extracted again, as the summary
        does: byte-identical copies are read once), then drop those vectors: this version never reads them.
        """
        held: set[str] = set()
        try:
            for key in keys:
                for start in range(0, len(misses), STAT_CHUNK):
                    chunk = self.files.take(misses[start : start + STAT_CHUNK])
                    held.update(self.cache.digests_under(chunk, key))
            for key in keys:
                self.cache.drop_model(key)
        except CacheError as err:
            self.warn(f"{err}; its vectors of an earlier version are left as they are")
        self.former_kind = DigestSet(held)

    # -- steps 2-4 on this machine: decode, reuse by digest, infer in batches

    def run(self, misses: list[int], decoder: Decoder) -> None:
        """Decode the misses and extract their vectors. Files whose digest the cache held when the scan
        began come back without pixels; if their vector has left the cache since (a cache cleared
        meanwhile), they are decoded again at the end, for their pixels, by the decoder's
        ``decode_again(paths)`` (Pillow processes under the decode time limit; a decoder of one's own
        without it: :func:`decode_file` in this process)."""
        self.stack = decoder.stack
        vanished: list[int] = []
        try:
            for pos, decoded in decoder.decode([self.path(i) for i in misses]):
                self._take(misses[pos], decoded, vanished)
                self.progress()
            if vanished:
                for pos, decoded in _decode_again(decoder, [self.path(i) for i in vanished]):
                    self._take(vanished[pos], decoded, None)
                    self.progress()
            self._flush()
            self.progress()
        except BaseException:
            decoder.terminate()
            raise
        decoder.close()

    def changed(self, i: int, seen: tuple[int, int] | None) -> bool:
        """Whether the bytes decoded for file i came from a file of another size or modification time
        than the walk listed (``seen``: what the library door opened; None: not said); such a file is
        reported, and never cached under the stat the walk saw."""
        if seen is None or tuple(seen) == self.files.stat_of(i):
            return False
        self.fail(i, CHANGED_WHILE_READ)
        return True

    def _take(self, i: int, decoded: Decoded, vanished: list[int] | None) -> None:
        """File i's decode result: failed, a vector the cache holds, or pixels for the next batch. A file
        the decoder did not decode because its digest was cached, whose vector is gone now, goes on
        ``vanished`` (None: it was already decoded again)."""
        if decoded.digest is None:
            self.fail(i, decoded.reason or "cannot decode")
            return
        if self.changed(i, decoded.seen):
            return
        if decoded.taken is not None:
            self.take_date(i, decoded.digest, decoded.taken)
        if self.take_known(i, decoded.digest):  # the same bytes were seen before (moved, renamed, touched)
            if self.moved >= MOVED_FLUSH * self.batch_size and not self.batch:
                self._flush()
            return
        if decoded.pixels is None:
            if vanished is None:
                self.fail(i, "decoded again without pixels")
            else:
                vanished.append(i)
            return
        if isinstance(decoded.pixels, video.ClipFrames):  # a clip's frames: a batch of their own
            encode = lambda frames: self.encode(self.stack(list(frames)))  # noqa: E731
            self.take_vector(i, decoded.digest, self.clips.take(i, decoded.digest, decoded.pixels, encode))
            return
        self.batch.append((i, decoded.digest, decoded.pixels))
        if len(self.batch) >= self.batch_size:
            self._flush()

    def _flush(self) -> None:
        """Run the model on the batch and write it, with the waiting moved files, in one transaction."""
        if self.batch:
            pixels = self.stack([b[2] for b in self.batch])  # (B, 224, 224, 3) uint8
            out = np.asarray(self.encode(pixels), dtype=np.float32)  # (B, dim)
            if out.shape != (len(self.batch), self.dim):
                raise RuntimeError(f"extractor returned {out.shape}, expected {(len(self.batch), self.dim)}")
            for (i, digest, _), vec in zip(self.batch, out, strict=True):
                self.take_vector(i, digest, vec)
            self.batch = []
        self.commit()

    # -- results, however they were made

    def take_vector(self, i: int, digest: str, vec: np.ndarray) -> None:
        """File i's bytes (``digest``) made ``vec`` in the model: kept and queued for the next commit,
        unless it holds NaN or infinity (then file i fails)."""
        if np.all(np.isfinite(vec)):
            if self.stored is not None:
                vec = self.stored(vec)
            self._fill(i, vec)
            self.extracted += 1
            self.again += digest in self.former_kind
            self.rows.append((self.files[i], digest, vec))
        else:
            self.fail(i, "model produced non-finite values")

    def take_known(self, i: int, digest: str) -> bool:
        """File i has bytes whose vector the cache holds (a moved, renamed or touched file): reuse it and
        record it under the file's new path at the next commit. False when the cache lacks it."""
        known = self.cache.get_many_by_digest([digest])[0]
        if not self._fits(known) or not self.clips.current(i, digest, self.cache):
            return False
        self._fill(i, known)
        self.from_cache += 1
        self.rows.append((self.files[i], digest, known))
        self.moved += 1
        return True

    def take_date(self, i: int, digest: str, taken: Taken) -> None:
        """File i's capture date as its decode read it: kept for the result, and stored beside its vector
        in the next commit (the cache's dates table, keyed by the same digest)."""
        self.taken[i] = taken
        self.dated.append(row_of(digest, taken))

    def fail(self, i: int, reason: str) -> None:
        """File i cannot be read: reported now, listed in the result, never cached."""
        self.reasons[i] = reason
        if self.on_failure is not None:
            self.on_failure(self.files[i].path, reason)

    def path(self, i: int) -> str:
        """File i's path, as a string for a decoder."""
        return os.fsdecode(self.files.raw_path(i))

    def commit(self) -> None:
        """Write the queued rows in one transaction, and their capture dates (a cache that cannot be
        written: warn once, go on)."""
        rows, self.rows, self.moved = self.rows, [], 0
        dated, self.dated = self.dated, []
        if not rows or not self.cache_writable:
            return
        try:
            self.cache.put_many(rows)
            self.cache.put_dates(dated)
            self.clips.write(self.cache)
        except CacheError as err:
            self.cache_writable = False
            self.warn(f"{err}; going on without caching")

    def warn(self, message: str) -> None:
        """One line through ``on_warning`` (a Python warning without it)."""
        if self.on_warning is not None:
            self.on_warning(message)
        else:
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def progress(self) -> None:
        """The one place progress is reported: files resolved (found, extracted or failed) so far."""
        resolved = self.from_cache + self.extracted + len(self.reasons)
        if self.on_progress is not None and resolved != self.reported:
            self.on_progress(resolved, len(self.files))
        self.reported = resolved

    # -- bookkeeping

    def _fits(self, vec: np.ndarray | None) -> bool:
        return vec is not None and np.shape(vec) == (self.dim,)

    def _fill(self, i: int, vec: np.ndarray) -> None:
        if self.matrix is not None:
            self.matrix[i] = vec
        self.done[i] = True

    def result(self) -> Extraction:
        """What the extraction made; first the one notice of photos extracted again (:meth:`retire`)."""
        if self.again:
            self.warn(
                f"{self.again:,} photo{'s were' if self.again != 1 else ' was'} extracted again: the "
                "cache held only their classifier output (an earlier version's), and novelfind now keeps "
                "the pooled vector (one per photo)"
            )
        keep = np.flatnonzero(self.done)
        features = self.matrix
        if features is not None and len(keep) < len(self.files):
            features = features[keep]  # (N_ok, dim)
        head = getattr(self.extractor, "head", None)
        if features is not None and head is not None:
            features = _apply(head, features)  # (N_ok, extractor.dim)
        return Extraction(
            files=self.files if len(keep) == len(self.files) else self.files.take(keep),
            features=features,
            failures=[(self.files[i].path, self.reasons[i]) for i in sorted(self.reasons)],
            from_cache=self.from_cache,
            extracted=self.extracted,
            clips=self.clips.result(self.cache, keep),
            taken=[self.taken[i] for i in keep],
        )


def _apply(head: Callable[[np.ndarray], np.ndarray], stored: np.ndarray) -> np.ndarray:
    """float32 (N, dim) features from (N, stored_dim) stored vectors, ``HEAD_CHUNK`` rows at a time."""
    parts = [
        np.asarray(head(stored[s : s + HEAD_CHUNK]), np.float32) for s in range(0, len(stored), HEAD_CHUNK)
    ]
    return np.concatenate(parts) if parts else np.asarray(head(stored), np.float32)


class FeaturedStore:
    """A store whose ``rows_by_stat`` gives the features ``extractor`` makes (its ``head`` applied to the
    stored vectors): what ranking from the cache reads. Everything else is the store's own."""

    def __init__(self, store: Any, extractor: Extractor):
        self.store, self.extractor = store, extractor

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def rows_by_stat(self, files: Sequence[Any], chunk: int = STAT_CHUNK) -> Iterator[np.ndarray]:
        head = self.extractor.head  # type: ignore[attr-defined]
        for rows in self.store.rows_by_stat(files, chunk):
            yield np.asarray(head(rows), np.float32)  # (C, dim)


def featured(store: Any, extractor: Extractor) -> Any:
    """``store``, or when the extractor's feature is computed from what is stored (logits from the pooled
    vector) a :class:`FeaturedStore` over it, so that reading vectors back gives the features."""
    if getattr(extractor, "head", None) is None:
        return store
    return FeaturedStore(store, extractor)
