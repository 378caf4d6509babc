"""The feature cache's store: :class:`FeatureCache` (the one open file, with each table's lookups and
writes), :class:`Store` (what a scan needs of a store), :class:`NullCache` (no cache) and
:func:`open_store` (the store a scan uses).

``FeatureCache`` is composed of a part per table, each in its own module over the shared connection
(:class:`~novelfind.cache.connection.CacheFile`): :mod:`~novelfind.cache.vectors` (files and vectors),
:mod:`~novelfind.cache.models`, :mod:`~novelfind.cache.dates`, :mod:`~novelfind.cache.clips`,
:mod:`~novelfind.cache.rankings`, :mod:`~novelfind.cache.failures` and :mod:`~novelfind.cache.upkeep`
(info, prune, clear). ``NullCache`` is made of the same modules' null parts, so a table's null behaviour
is written beside its real one.

Each ``put_many`` is one transaction, so a run killed at any moment loses at most the batch in
flight. WAL mode and a busy timeout let several runs share one cache. The file's format is
:mod:`novelfind.cache.schema`; a damaged file and a busy one are handled by
:mod:`novelfind.cache.recovery`.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from novelfind.base import dirs
from novelfind.cache.clips import Clips, NullClips
from novelfind.cache.dates import Date, Dates, NullDates
from novelfind.cache.failures import Failures, KnownFailure, NullFailures
from novelfind.cache.models import Models
from novelfind.cache.rankings import NullRankings, Rankings
from novelfind.cache.recovery import BUSY_TIMEOUT_S
from novelfind.cache.upkeep import NullUpkeep, Upkeep
from novelfind.cache.vectors import DEFAULT_DTYPE, DEFAULT_MAX_NORM, DTYPES, DigestSet, NullVectors, Vectors
from novelfind.errors import CacheError

if TYPE_CHECKING:
    from novelfind.media.walk import ImageFile


class FeatureCache(Vectors, Models, Dates, Clips, Rankings, Failures, Upkeep):
    """Vectors made by one model (``model_key``), stored in the SQLite file at ``path``.

    Raises ``CacheError`` when the file cannot be opened or created (a read-only or missing
    location, a database of another program, a cache from a newer novelfind). ``model_key`` may
    be None for the maintenance commands (``info``, ``prune``, ``clear``); lookups and writes then
    raise ``ValueError``.

    ``on_warning(message)`` receives survivable problems (a damaged cache moved aside); without it
    they go to ``warnings.warn`` as ``CacheWarning``. ``recovered_from`` is where a damaged file
    was moved, or None.

    ``dtype``: how new vectors are stored, ``"float16"`` (2 bytes a value) or ``"float32"``; vectors
    already stored are read in whichever they were written. :meth:`stored` gives a vector as it will
    read back, so a scan ranks the same values the first time as when it reads them again.

    Vectors read back are checked (the file can be edited by anyone who can write it, or damaged on
    disk): one with a NaN or infinite value, a norm above ``max_norm`` (the model's bound, say), or a value
    below ``min_value`` (MobileNet-V2's pooled values are never negative) is treated as a damaged row.
    Lookups do not find it, it is deleted from the cache so that the photo is extracted again, and
    ``on_warning`` names the photo once.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        model_key: str | None = None,
        *,
        on_warning: Callable[[str], None] | None = None,
        busy_timeout: float = BUSY_TIMEOUT_S,
        dtype: str = DEFAULT_DTYPE,
        max_norm: float = DEFAULT_MAX_NORM,
        min_value: float | None = None,
    ):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        self.path = Path(os.fspath(path)).expanduser().absolute()
        self.model_key = model_key
        self.dtype = dtype
        self.max_norm = float(max_norm)
        self.min_value = None if min_value is None else float(min_value)
        self._cookie: int | None = None  # the schema version check_schema last passed
        self.writes_disabled = False
        self.recovered_from: Path | None = None
        self._busy_timeout = busy_timeout
        self._on_warning = on_warning
        self._lock = threading.Lock()
        self._conn = self._open_or_recover()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        model_key: str | None = None,
        *,
        create: bool = True,
        on_warning: Callable[[str], None] | None = None,
        dtype: str = DEFAULT_DTYPE,
        max_norm: float = DEFAULT_MAX_NORM,
        min_value: float | None = None,
    ) -> FeatureCache:
        """The cache at ``path``; None means the user's cache (``$NOVELFIND_CACHE``, else
        ``~/.cache/novelfind/features.sqlite``: :func:`novelfind.base.dirs.feature_cache_path`).

        With ``create`` False a missing file is ``CacheError("no cache at PATH")`` instead of a new,
        empty cache. Use it as a context manager, or call :meth:`close`::

            with novelfind.Cache.open() as cache:
                print(cache.info()["entries"], "vectors")
                cache.prune()
        """
        path = Path(os.fspath(path)).expanduser() if path is not None else dirs.feature_cache_path()
        if not create and not path.exists():
            raise CacheError(f"no cache at {path}")
        return cls(
            path, model_key, on_warning=on_warning, dtype=dtype, max_norm=max_norm, min_value=min_value
        )

    def __enter__(self) -> FeatureCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FeatureCache({str(self.path)!r}, {self.model_key!r})"


@runtime_checkable
class Store(Protocol):
    """What a scan needs of a feature store: ``FeatureCache`` and ``NullCache`` have it.

    The lookups line up with what they are given (one answer per file or digest, None where there is
    none); the writes take a batch in one transaction, or drop it when the store keeps nothing. The
    maintenance of a cache file (``info``, ``prune``, ``upgrade``, ...) is ``FeatureCache``'s alone.
    """

    path: Path | None  # where the vectors are kept (None: nowhere)
    model_key: str | None
    writes_disabled: bool  # True once the store stopped taking vectors (a full disk, say)
    recovered_from: Path | None  # where a damaged file was moved, or None

    # files and vectors (vectors.py)
    def get_many_by_stat(self, files: Sequence[ImageFile]) -> list[np.ndarray | None]: ...
    def has_many_by_stat(self, files: Sequence[ImageFile], dim: int) -> np.ndarray: ...
    def rows_by_stat(self, files: Sequence[ImageFile], chunk: int = ...) -> Iterator[np.ndarray]: ...
    def digests_by_stat(self, files: Sequence[ImageFile]) -> list[str | None]: ...
    def known_digests(self) -> DigestSet: ...
    def get_many_by_digest(self, digests: Sequence[str]) -> list[np.ndarray | None]: ...
    def put_many(self, rows: Sequence[tuple[ImageFile, str, np.ndarray]]) -> None: ...
    def stored(self, vectors: np.ndarray) -> np.ndarray: ...

    # capture dates (dates.py), clip records (clips.py), rankings (rankings.py), failures (failures.py)
    def dates_by_stat(self, files: Sequence[ImageFile]) -> list[tuple[str | None, Date | None]]: ...
    def put_dates(self, rows: Sequence[tuple[str, float | None, int | None, str]]) -> None: ...
    def get_clips(self, digests: Sequence[str]) -> list[str | None]: ...
    def put_clips(self, rows: Sequence[tuple[str, str]]) -> None: ...
    def last_ranking(self, root: bytes) -> tuple[str, str, bool] | None: ...
    def note_ranking(self, root: bytes, method: str, version: str) -> None: ...
    def known_failures(self) -> dict[bytes, KnownFailure]: ...
    def record_failures(
        self, rows: Sequence[tuple[bytes, int, int, str]], forget: Sequence[bytes] = ...
    ) -> None: ...

    def close(self) -> None: ...


class NullCache(NullVectors, NullDates, NullClips, NullRankings, NullFailures, NullUpkeep):
    """The cache interface, storing nothing: for ``--no-cache`` and unusable cache locations.

    Each table's null part lives beside the table (``NullVectors`` in vectors.py, ...), so a lookup
    added to a table gets its null answer there; ``tests/cache/test_store.py`` checks that this class keeps
    up with :class:`Store` and with ``FeatureCache``.
    """

    path = None
    model_key = None
    writes_disabled = True
    recovered_from = None

    def close(self) -> None:
        return None

    def __enter__(self) -> NullCache:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __repr__(self) -> str:
        return "NullCache()"


@contextmanager
def open_store(
    choice: bool | str | os.PathLike[str] | FeatureCache,
    model_key: str,
    *,
    dtype: str = DEFAULT_DTYPE,
    streamed: bool = False,
    on_warning: Callable[[str], None] | None = None,
    max_norm: float = DEFAULT_MAX_NORM,
    min_value: float | None = None,
) -> Iterator[Store]:
    """The feature store a scan uses, as a context manager that closes it.

    ``choice`` is ``scan()``'s ``cache``: True for the user's cache, False for none, a path, or a
    :class:`FeatureCache` (its file and dtype are used). A cache that cannot be opened is reported
    through ``on_warning`` and a :class:`NullCache` stands in. With ``streamed`` (the vectors are read
    back from the store, the library being too large to hold them) there must be a real store: without
    a cache it is a temporary file, deleted afterwards, and one that cannot be opened is a CacheError.
    ``max_norm``, ``min_value``: the model's bounds on a vector's norm and values (see :class:`FeatureCache`).
    """
    import tempfile

    if choice is False:
        if not streamed:
            yield NullCache()
            return
        with tempfile.TemporaryDirectory(prefix="novelfind-") as folder:
            temporary = Path(folder) / "features.sqlite"
            with FeatureCache(
                temporary, model_key, dtype=dtype, max_norm=max_norm, min_value=min_value
            ) as store:
                yield store
        return
    path = None
    if isinstance(choice, FeatureCache):
        path, dtype = choice.path, choice.dtype
    elif choice is not True:
        path = choice
    try:
        store = FeatureCache.open(
            path, model_key, on_warning=on_warning, dtype=dtype, max_norm=max_norm, min_value=min_value
        )
    except CacheError as err:
        if streamed:
            raise CacheError(f"{err}; a library this large is ranked from the cache") from None
        if on_warning is not None:
            on_warning(f"{err}; running without the cache")
        else:
            warnings.warn(f"{err}; running without the cache", RuntimeWarning, stacklevel=3)
        yield NullCache()
        return
    with store:
        yield store
