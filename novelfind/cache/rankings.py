"""The ``rankings`` table: how each library (its folders) was last ranked, so that a scan ranking it
another way says so once.

A library is named by :func:`ranking_root`. A cache written before the table was kept has one row under
``b""``: what that version ranked with (``schema.EARLIER_RANKING``). :class:`Rankings` is
``FeatureCache``'s part for the table; :class:`NullRankings` is the same for no cache.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from novelfind.cache.connection import CacheFile, short_text


def ranking_root(paths: Iterable[str | os.PathLike[str]]) -> bytes:
    """What names a library in the ``rankings`` table: its folders, absolute, sorted, NUL-separated."""
    return b"\0".join(sorted(os.fsencode(Path(os.fspath(p)).absolute()) for p in paths))


class Rankings(CacheFile):
    """``FeatureCache``'s record of the libraries' last rankings (the ``rankings`` table)."""

    def last_ranking(self, root: bytes) -> tuple[str, str, bool] | None:
        """(method, novelfind version, inferred) of the last ranking of the library ``root``
        (:func:`ranking_root`), or None when none is recorded. ``inferred``: there is no record of the
        library, but the file was written before records were kept (``EARLIER_RANKING``)."""
        with self._reading() as conn:
            rows = dict(
                (bytes(r[0]), r[1:])
                for r in conn.execute(
                    "SELECT root, method, version FROM rankings WHERE root IN (?, ?) "
                    f"AND {short_text('method')} AND {short_text('version')}",
                    (root, b""),
                )
            )
        if root in rows:
            return (*rows[root], False)
        return (*rows[b""], True) if b"" in rows else None

    def note_ranking(self, root: bytes, method: str, version: str) -> None:
        """Record that ``version`` ranked the library ``root`` with ``method`` (one small row per library)."""
        with self._writing() as conn:
            conn.execute("INSERT OR REPLACE INTO rankings VALUES (?, ?, ?)", (root, method, version))


class NullRankings:
    """:class:`Rankings` for no cache: no library's ranking is known, and none is noted."""

    def last_ranking(self, root: bytes) -> tuple[str, str, bool] | None:
        return None

    def note_ranking(self, root: bytes, method: str, version: str) -> None:
        return None
