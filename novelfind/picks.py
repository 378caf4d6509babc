"""The pick record: a selected moment (``Pick``), the other photos of its moment (``Member``), what the
model takes it for (``Label``), a file that could not be read (``Failure``), and ``picks_of``, which
turns a ranking into picks.

Every output (the list formats in :mod:`novelfind.outputs.formats`, the copies in
:mod:`novelfind.outputs.placement`, the HTML report, the XMP sidecars) reads these records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from novelfind.media.video import ClipInfo


@dataclass(frozen=True)
class Member:
    """Another photo of a pick's moment (``novelfind.ranking.moments``): a frame of its burst or batch."""

    path: Path  # absolute, as found by the walk
    size: int
    mtime_ns: int
    distance: float  # to the pick, between feature vectors scaled to unit length
    also: tuple[Path, ...] = ()  # the photo's other files (a RAW + JPEG pair)
    taken: str | None = None  # when it was taken, ISO 8601 (with its offset when known; None: unknown)
    taken_source: str = "none"  # where that date came from (``novelfind.media.dates.SOURCES``)

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.path, *self.also)


class Label(NamedTuple):
    """One of the ImageNet classes MobileNet-V2 gives a pick, with its softmax probability: what the
    photo looks like to a model trained on those 1000 classes (``weights.top_classes``), not the truth."""

    label: str  # an ImageNet class name: "telescope", "tabby", "lakeside"
    p: float  # 0..1


@dataclass(frozen=True)
class Pick:
    """One selected moment, shown by its most typical photo; ``rank`` 1 is the most novel."""

    rank: int
    score: float  # the ranking's score: higher = more novel; comparable within one run only
    path: Path  # absolute, as found by the walk (symbolic links kept)
    size: int  # bytes, when it was scanned
    mtime_ns: int  # modification time when it was scanned, ns since the epoch
    neighbour: Path | None = None  # nearest other image in the library (None when it is alone)
    distance: float | None = None  # distance to it in the feature space: the reason it is novel
    also: tuple[Path, ...] = ()  # the photo's other files (the RAW of a RAW + JPEG pair), not read
    clip: ClipInfo | None = None  # a clip: its length, the frames read and the moment that is its vector
    members: tuple[Member, ...] = ()  # the other photos of its moment, nearest first; () for a photo alone
    taken: str | None = None  # when it was taken, ISO 8601: ``2025-03-02T22:31:07+01:00`` with the offset
    #                           when known, else local time without one; None when unknown (docs/dates.md)
    taken_source: str = "none"  # exif, exif-local, raw, clip, xmp, file, invalid or none
    # the model's most likely ImageNet classes for the photo, most likely first (MobileNet-V2 features
    # only; () for another extractor): a hint at what it shows, not the truth
    labels: tuple[Label, ...] = ()
    # the first and last capture time of the moment's dated photos (seconds, as the ranking was given
    # them); None when none is dated or the ranking had no capture times
    span: tuple[float, float] | None = None

    @property
    def kind(self) -> str:
        """``"clip"`` or ``"photo"``."""
        return "photo" if self.clip is None else "clip"

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file of the photo, ``path`` first: what ``--copy-to`` places and ``--xmp`` tags."""
        return (self.path, *self.also)

    @property
    def mtime(self) -> datetime:
        """The modification time as an aware UTC datetime (microsecond precision)."""
        return utc_datetime(self.mtime_ns)


def picks_of(
    ranking: Any,
    files: Sequence[Any],
    photos: Sequence[Any],
    clips: Mapping[Path, ClipInfo] | None = None,
    dates: Any = None,
    labels: Sequence[Sequence[tuple[str, float]]] | None = None,
) -> list[Pick]:
    """The picks of a ``novelfind.ranking.driver.Ranking`` of the rows of ``files`` (``ImageFile`` records),
    best first, each with the members of its moment; ``photos[i].also`` are row i's other files (a
    RAW + JPEG pair); ``clips`` the records of the clips among ``files``, by path; ``dates`` when each
    row was taken (``novelfind.media.dates.Dates``); ``labels`` each pick's (class, probability) pairs, in the
    order of the ranking (None: none)."""
    clips = clips or {}
    named = [()] * len(ranking.indices) if labels is None else labels

    def taken(row: int) -> dict[str, Any]:
        if dates is None:
            return {}
        return {"taken": dates.iso(row), "taken_source": dates.sources[row]}

    def member(row: int, distance: float) -> Member:
        f = files[row]
        return Member(
            f.path, f.size, f.mtime_ns, float(distance), tuple(t.path for t in photos[row].also), **taken(row)
        )

    picks = []
    spans = getattr(ranking, "spans", None)
    for j, (index, score, neighbour, distance, rows, far, classes) in enumerate(
        zip(
            ranking.indices,
            ranking.scores,
            ranking.neighbour,
            ranking.distance,
            ranking.members,
            ranking.member_distance,
            named,
            strict=True,
        )
    ):
        span = (
            None
            if spans is None or not np.isfinite(spans[j]).all()
            else (float(spans[j][0]), float(spans[j][1]))
        )
        f, found = files[int(index)], int(neighbour) >= 0
        picks.append(
            Pick(
                rank=len(picks) + 1,
                score=float(score),
                path=f.path,
                size=f.size,
                mtime_ns=f.mtime_ns,
                neighbour=files[int(neighbour)].path if found else None,
                distance=float(distance) if found else None,
                also=tuple(twin.path for twin in photos[int(index)].also),
                clip=clips.get(f.path),
                members=tuple(member(int(r), d) for r, d in zip(rows, far, strict=True)),
                **taken(int(index)),
                labels=tuple(Label(str(name), float(p)) for name, p in classes),
                span=span,
            )
        )
    return picks


class Failure(NamedTuple):
    """A file that could not be read, and why (one line)."""

    path: Path
    reason: str


def utc_datetime(mtime_ns: int) -> datetime:
    """An aware UTC datetime for a nanosecond timestamp (microsecond precision)."""
    seconds, rest = divmod(int(mtime_ns), 1_000_000_000)
    return datetime.fromtimestamp(seconds, tz=timezone.utc).replace(microsecond=rest // 1000)


def iso_utc(mtime_ns: int) -> str:
    """``2024-05-01T12:34:56.123456Z`` for a nanosecond timestamp (microsecond precision)."""
    return utc_datetime(mtime_ns).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
