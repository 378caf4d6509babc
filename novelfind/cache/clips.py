"""The ``clips`` table: what a clip's vector was made from (``video.ClipInfo`` as JSON: the rule, the
frames' times, the moment), kept per digest and model beside the vector.

:class:`Clips` is ``FeatureCache``'s part for the table; :class:`NullClips` is the same for no cache.
"""

from __future__ import annotations

from collections.abc import Sequence

from novelfind.cache.connection import CacheFile

MAX_CLIP_RECORD = 1 << 16  # bytes of a clip's record (video.ClipInfo as JSON: some hundred)


class Clips(CacheFile):
    """``FeatureCache``'s clip records (the ``clips`` table)."""

    def get_clips(self, digests: Sequence[str]) -> list[str | None]:
        """The records ``put_clips`` stored for this model and these digests (None where there is none)."""
        key = self._require_key()
        found: dict[str, str] = {}
        sql = (
            "SELECT digest, info FROM clips WHERE model_key = ? AND typeof(info) = 'text' "
            f"AND length(info) <= {MAX_CLIP_RECORD} AND digest IN ({{marks}})"
        )
        with self._reading():
            found.update(self._select_in(sql, (key,), digests))
        return [found.get(d) for d in digests]

    def put_clips(self, rows: Sequence[tuple[str, str]]) -> None:
        """Store (digest, record) rows for this model in one transaction: what a clip's vector was made
        from (``video.ClipInfo``). CacheWriteError when they cannot be written; the store then takes no
        more writes, as after a batch of vectors that could not be written."""
        key = self._require_key()
        if self.writes_disabled or not rows:
            return
        with self._writing(stop=True) as conn:
            conn.executemany(
                "INSERT INTO clips (digest, model_key, info) VALUES (?, ?, ?) "
                "ON CONFLICT (digest, model_key) DO UPDATE SET info = excluded.info",
                [(digest, key, info) for digest, info in rows],
            )


class NullClips:
    """:class:`Clips` for no cache: no record is known, and none is kept."""

    def get_clips(self, digests: Sequence[str]) -> list[str | None]:
        return [None] * len(digests)

    def put_clips(self, rows: Sequence[tuple[str, str]]) -> None:
        return None
