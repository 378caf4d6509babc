"""The feature cache: one SQLite file that remembers every vector the model has made.

An unchanged file is found by its stat alone, without reading it; a moved or renamed file is found
by its digest; a vector made by another model, weights or preprocessing never matches, because
``model_key`` says what made it. A damaged cache file is moved aside and a fresh one is started,
with a warning.

One concern a module: :mod:`~novelfind.cache.schema` (the file's tables, its mark and the tables
added to older files), :mod:`~novelfind.cache.recovery` (damage, moving a file aside, retries while
busy), :mod:`~novelfind.cache.connection` (the open file the tables share: lock, transactions), a
module per table (:mod:`~novelfind.cache.vectors`, :mod:`~novelfind.cache.models`,
:mod:`~novelfind.cache.dates`, :mod:`~novelfind.cache.clips`, :mod:`~novelfind.cache.rankings`,
:mod:`~novelfind.cache.failures`: the files scans could not read, so each is reported once),
:mod:`~novelfind.cache.upkeep` (info, prune, clear) and :mod:`~novelfind.cache.store` (``FeatureCache``
composed of them, the ``Store`` protocol, ``NullCache``, ``open_store``). The names below are the
package's interface.
"""

from novelfind.cache.rankings import ranking_root
from novelfind.cache.recovery import (
    BUSY_TIMEOUT_S,
    CacheWarning,
    CacheWriteError,
    damage,
    remove_damaged,
)
from novelfind.cache.schema import (
    APPLICATION_ID,
    EARLIER_RANKING,
    SCHEMA_VERSION,
    foreign_schema,
    not_ours,
)
from novelfind.cache.store import FeatureCache, NullCache, open_store
from novelfind.cache.vectors import DEFAULT_DTYPE, DEFAULT_MAX_NORM, DTYPES, DigestSet

__all__ = [
    "APPLICATION_ID",
    "BUSY_TIMEOUT_S",
    "DEFAULT_DTYPE",
    "DEFAULT_MAX_NORM",
    "DTYPES",
    "EARLIER_RANKING",
    "SCHEMA_VERSION",
    "CacheWarning",
    "CacheWriteError",
    "DigestSet",
    "FeatureCache",
    "NullCache",
    "damage",
    "foreign_schema",
    "not_ours",
    "open_store",
    "ranking_root",
    "remove_damaged",
]
