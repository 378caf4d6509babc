"""The ``local`` engine: the extraction stage on this machine (:func:`extract`).

It drives a ``stage.Stage``: the cache's stat lookups, then the misses through a decoder
(``novelfind.extract.decoders``) and the model in batches, each batch committed to the cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from novelfind.base.devices import available_cpus
from novelfind.extract.decoders import DECODERS
from novelfind.extract.stage import Extraction, FeatureStore, OnFailure, OnProgress, OnWarning, Stage, load
from novelfind.model.features import Extractor

# Fewer misses than this are decoded by one worker process (``workers`` 0) rather than one per core:
# starting a pool of them costs more than a few files take to decode.
POOL_THRESHOLD = 16


def default_workers() -> int:
    """Decode processes: one per available core (inference runs in the parent and overlaps)."""
    return available_cpus()


def extract(
    files: Iterable[Any],
    extractor: Extractor,
    cache: FeatureStore,
    *,
    batch_size: int = 32,
    workers: int | None = None,
    decoder: str = "auto",
    on_progress: OnProgress | None = None,
    on_failure: OnFailure | None = None,
    on_warning: OnWarning | None = None,
    keep_vectors: bool = True,
    decode_timeout: float | None = None,
) -> Extraction:
    """Feature vectors for ``files`` (ImageFile records), from the cache where possible.

    ``extractor``: the model, uint8 (B, 224, 224, 3) -> float32 (B, extractor.dim); the package's store
    their ``encode`` output (the pooled vector) and give ``features`` through their ``head`` (logits,
    say), as :class:`~novelfind.extract.stage.Stage` says. ``workers``: decode processes (None = one
    per core, 0 = one decode process). ``decoder``: a ``decoders.DECODERS`` name. Bad files are
    reported through ``on_failure(path, reason)`` as they happen and listed in ``failures``; they are
    never cached. ``on_progress(done, total)`` follows the files resolved (found, extracted or failed).
    KeyboardInterrupt stops the workers and propagates; batches already written stay in the cache. A
    cache that cannot be written (disk full, I/O error) is reported once through ``on_warning`` and the
    scan goes on without storing more.

    ``keep_vectors`` False: for a library whose N x dim matrix should not sit in memory. The vectors
    go to the cache only (``features`` is None); a file the cache has is checked without reading its
    vector (``has_many_by_stat``). The caller reads them back from the cache, in chunks
    (through ``stage.featured(store, extractor)``, which applies the ``head``).

    ``decode_timeout``: seconds a decoding process may spend on one file (None: the decoder's
    default, ``pillow.DECODE_TIMEOUT_S``).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    if decoder not in DECODERS:
        raise ValueError(f"unknown decoder {decoder!r}; choose from {', '.join(DECODERS)}")
    stage = Stage(files, extractor, cache, batch_size, on_progress, on_failure, on_warning, keep_vectors)
    misses = stage.stat_hits()
    settle = getattr(extractor, "settle", None)  # a device chosen by the work at hand (``--device auto``)
    if settle is not None:
        settle(len(misses))
    if misses:
        start_loading = getattr(extractor, "start_loading", None)  # the model loads while decoding starts
        if start_loading is not None:
            start_loading()
        if workers is None:  # a clip is read in a worker even alone: there its decode has a time limit
            few = len(misses) < POOL_THRESHOLD and not set(stage.clips.rows).intersection(misses)
            workers = 0 if few else default_workers()
        window = max(2 * batch_size, 4 * max(workers, 1))
        limit = {} if decode_timeout is None else {"timeout": decode_timeout}
        decoding = load(DECODERS[decoder])(
            workers=workers,
            window=window,
            known=cache.known_digests(),
            extractor=extractor,
            on_warning=on_warning,
            **limit,
        )
        stage.run(misses, decoding)
    return stage.result()
