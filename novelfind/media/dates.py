"""When each photo was taken: the capture date read from the file's own metadata, its XMP sidecar, or
(where it can be trusted) its file time; the rules are in ``docs/dates.md``.

This module holds the readers, one per source, and is the one place each source is parsed; of the
package it imports only the library door (:mod:`novelfind.base.door`, through which every file here is
opened), so the decoders can call it. What the file itself says (the reader of
its kind: :func:`image_date`, :func:`raw_date`, :func:`clip_date`) depends on its bytes only, so it is
read once, when the file is decoded for the model (``novelfind.extract.dating``), and kept in the feature
cache beside the vector, keyed by the same content digest (``FeatureCache.put_dates``).
Reading it costs a header parse, never a pixel decode: Pillow's ``Image.open`` + ``getexif()`` for an
image, the TIFF structure (or the embedded Exif block) of a RAW file, the container's ``creation_time``
for a clip. A sidecar (which the user's tools edit) and the file time (which a copy changes) are looked
at on every scan, for the photos whose own bytes carry no usable date only.

One date per photo, as a float of seconds since the epoch (NaN: unknown) and its ``source``:

* ``exif``: ``DateTimeOriginal`` (else ``DateTimeDigitized``, else IFD0 ``DateTime``) with its
  ``OffsetTimeOriginal``: the true UTC instant.
* ``exif-local``: the same without an offset: the camera's wall clock, read as if it were UTC (the local
  time of the place, unconverted: gaps between photos of one camera stay right; a DST change is a 1 h
  jump, shorter than any event gap).
* ``raw``: the same tags in a RAW file (TIFF-based RAWs, the Exif block of others); local or UTC as the
  offset says.
* ``clip``: a clip's container (else its video stream) ``creation_time``, UTC.
* ``xmp``: ``photoshop:DateCreated`` / ``exif:DateTimeOriginal`` / ``xmp:CreateDate`` of a sidecar, for a
  photo whose bytes carry no date or an invalid one (a date corrected in Lightroom wins over a reset clock).
* ``file``: the file's modification time (UTC), for a photo with no date of its own, and only when the
  scan's file times look original (:func:`file_times_trusted`).
* ``invalid``: a date before ``EARLIEST`` (a clock reset to 2000-01-01 or to the 1970 epoch) or more than
  ``FUTURE_SLACK_S`` in the future: unknown, and never replaced by the file time.
* ``none``: nothing usable.
"""

from __future__ import annotations

import calendar
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from novelfind.base import door

SOURCES = ("exif", "exif-local", "raw", "clip", "xmp", "file", "invalid", "none")
# What the report says of each source, after the date.
SOURCE_WORDS = {
    "exif": "EXIF, with its time zone",
    "exif-local": "EXIF, the camera's local time",
    "raw": "the RAW file's EXIF",
    "clip": "the clip's creation time",
    "xmp": "the XMP sidecar",
    "file": "the file's modification time",
    "invalid": "the camera's clock was not set: a date before 2000-01-02 or in the future",
    "none": "no date in the file or a sidecar, and file times that cannot be trusted",
}
EMBEDDED = ("exif", "exif-local", "raw", "clip", "invalid", "none")  # what the cache keeps (bytes only)

# A capture date before this is a clock that was reset (cameras restart at 2000-01-01 00:00, some at the
# 1970 epoch); digital photos of 2000-01-01 itself are too few to keep at the price of every reset clock.
EARLIEST = calendar.timegm((2000, 1, 2, 0, 0, 0))  # 2000-01-02T00:00:00, seconds
# A date later than now by more than this is a wrong clock (a day allows for every time zone).
FUTURE_SLACK_S = 86400.0

# File times. A copy or a download gives every file the time of the copy; a camera or phone writes the file
# when it takes the photo. The file time of a photo without a date of its own is used when the scan's file
# times look original:
# 1. With at least EVIDENCE_MIN photos that have both a capture date and a file time, by those: the file
#    times are trusted when at most UNTRUSTED_SHARE of them are more than AGREE_S away from the capture date
#    (2 days: a naive local date differs from UTC by up to 14 h, and a card is often emptied the next day).
# 2. Otherwise, by the undated photos themselves: from COPY_MIN_FILES of them on, they are not trusted when
#    more than UNTRUSTED_SHARE of their file times fall within one COPY_WINDOW_S (a copied archive).
EVIDENCE_MIN = 10
AGREE_S = 2 * 86400.0
UNTRUSTED_SHARE = 0.5
COPY_MIN_FILES = 10
COPY_WINDOW_S = 86400.0

HEAD_BYTES = 256 * 1024  # what is read of a RAW file to find its Exif block (it sits near the start)
SIDECAR_MAX_BYTES = 1 << 20  # a sidecar larger than this is not read (a packet is a few KB)

_EXIF_IFD = 0x8769
_ORIGINAL, _DIGITIZED, _IFD0_DATETIME = 0x9003, 0x9004, 0x0132
_SUBSEC = {_ORIGINAL: 0x9291, _DIGITIZED: 0x9292, _IFD0_DATETIME: 0x9290}
_OFFSET = {_ORIGINAL: 0x9011, _DIGITIZED: 0x9012, _IFD0_DATETIME: 0x9010}


@dataclass(frozen=True)
class Taken:
    """One photo's capture date: ``seconds`` since the epoch (NaN: unknown; for a local date, the wall
    clock read as UTC), its ``source`` (:data:`SOURCES`) and its UTC offset in seconds when known."""

    seconds: float = math.nan
    source: str = "none"
    offset: int | None = None

    @property
    def known(self) -> bool:
        return not math.isnan(self.seconds)


NONE = Taken()
INVALID = Taken(source="invalid")


def valid(seconds: float, now: float | None = None) -> bool:
    """Whether a capture instant is believable: from ``EARLIEST`` to ``FUTURE_SLACK_S`` after now."""
    now = time.time() if now is None else now
    return EARLIEST <= seconds <= now + FUTURE_SLACK_S


def _checked(seconds: float, source: str, offset: int | None, now: float | None = None) -> Taken:
    return Taken(seconds, source, offset) if valid(seconds, now) else INVALID


# --------------------------------------------------------------------------------------------- parsing

# Numbers read from a file are bounded by these patterns before they are converted: a fraction of a second
# has at most FRACTION_DIGITS digits (nanoseconds), and a date's text at most DATE_TEXT_MAX characters
# (``2025-03-02T22:31:07.123456789+01:00`` has 35). A longer one is no date: ``int()`` of a 5,000-digit
# fraction raises, and a pattern run over megabytes of blanks takes quadratic time.
FRACTION_DIGITS = 9
DATE_TEXT_MAX = 64
_EXIF_DATE = re.compile(r"\s*(\d{4}):(\d{2}):(\d{2})[ T](\d{2}):(\d{2}):(\d{2})")
_SUBSEC_DIGITS = re.compile(rf"[0-9]{{1,{FRACTION_DIGITS}}}")
_OFFSET_TEXT = re.compile(r"\s*([+-])(\d{2}):?(\d{2})\s*$")
_ISO = re.compile(
    r"\s*(\d{4})(?:-(\d{2})(?:-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})"
    rf"(?:[.,]([0-9]{{1,{FRACTION_DIGITS}}}))?)?)?)?)?"
    r"\s*(Z|[+-]\d{2}:?\d{2})?\s*$"
)


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str):
        return value.strip("\x00 ").strip() or None
    return None


def _date_text(value: Any) -> str | None:
    """:func:`_text`, None when it is longer than any date is written (``DATE_TEXT_MAX``)."""
    text = _text(value)
    return text if text is not None and len(text) <= DATE_TEXT_MAX else None


def parse_offset(text: Any) -> int | None:
    """Seconds east of UTC from ``"+01:00"`` / ``"-0530"`` / ``"Z"``; None for anything else."""
    text = _date_text(text)
    if text is None:
        return None
    if text.upper() == "Z":
        return 0
    m = _OFFSET_TEXT.match(text)
    if m is None:
        return None
    sign, hours, minutes = m.groups()
    seconds = int(hours) * 3600 + int(minutes) * 60
    if seconds > 14 * 3600 or int(minutes) >= 60:
        return None
    return -seconds if sign == "-" else seconds


def parse_exif_date(value: Any, subsec: Any = None, offset: Any = None) -> tuple[float, int | None] | None:
    """(seconds, offset) of an Exif ``YYYY:MM:DD HH:MM:SS`` with its sub-seconds and offset tags: the UTC
    instant when the offset is known, else the wall clock read as UTC (offset None). None when it is not
    a date (blank, ``0000:00:00 00:00:00``, out of range). Sub-seconds of more than ``FRACTION_DIGITS``
    digits, or not ASCII digits, are left out."""
    text = _text(value)
    if text is None:
        return None
    m = _EXIF_DATE.match(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = map(int, m.groups())
    try:
        wall = datetime(year, month, day, hour, minute, min(second, 59), tzinfo=timezone.utc)
    except ValueError:
        return None
    seconds = calendar.timegm(wall.timetuple())
    digits = _text(subsec)
    if digits is not None and _SUBSEC_DIGITS.fullmatch(digits):
        seconds += int(digits) / 10 ** len(digits)
    shift = parse_offset(offset)
    if shift is not None:
        seconds -= shift
    return float(seconds), shift


def parse_iso_date(text: Any) -> tuple[float, int | None] | None:
    """(seconds, offset) of an ISO 8601 / XMP date (``2025-03-02T22:31:07.4+01:00``, ``2025-03-02``,
    ``2025-03-02T22:31:07Z``); without an offset, the wall clock read as UTC (offset None). None for
    anything else, a fraction of more than ``FRACTION_DIGITS`` digits or a text of more than
    ``DATE_TEXT_MAX`` characters included."""
    text = _date_text(text)
    if text is None:
        return None
    m = _ISO.match(text)
    if m is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    try:
        wall = datetime(
            int(year),
            int(month or 1),
            int(day or 1),
            int(hour or 0),
            int(minute or 0),
            min(int(second or 0), 59),
            tzinfo=timezone.utc,
        )
    except ValueError:
        return None
    seconds = float(calendar.timegm(wall.timetuple()))
    if fraction:
        seconds += int(fraction) / 10 ** len(fraction)
    shift = parse_offset(zone) if zone else None
    if shift is not None:
        seconds -= shift
    return seconds, shift


def exif_iso(value: Any, offset: Any = None) -> str | None:
    """An Exif date as the report's header line shows it: ``'2021:06:01 12:30:05'`` ->
    ``'2021-06-01T12:30:05'``, with an ``OffsetTime`` of the form ``+HH:MM`` appended as written; None
    when it is not a date. The wall clock as written: no conversion, no validity window."""
    text = _text(value)
    if text is None or len(text) < 19 or text[4] != ":" or text[7] != ":" or text[10] not in " T":
        return None
    day, clock = text[:10].replace(":", "-"), text[11:19]
    try:
        datetime.strptime(f"{day}T{clock}", "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    out = f"{day}T{clock}"
    if isinstance(offset, bytes):
        offset = offset.decode("ascii", "replace")
    if isinstance(offset, str):
        offset = offset.strip("\x00 ")
        if len(offset) == 6 and offset[0] in "+-" and offset[3] == ":":
            out += offset
    return out


def original_iso(exif: Any) -> str | None:
    """:func:`exif_iso` of a Pillow ``Image.Exif``'s ``DateTimeOriginal`` with its ``OffsetTimeOriginal``
    (both in the Exif IFD): the date the report shows beside a photo's size."""
    sub = exif.get_ifd(_EXIF_IFD)
    return exif_iso(sub.get(_ORIGINAL), sub.get(_OFFSET[_ORIGINAL]))


def libraw_iso(timestamp: Any) -> str | None:
    """LibRaw's capture time of a RAW (rawpy's ``other.timestamp``, a ``datetime``) as the report shows
    it: the camera's local time to the second, ``2021-06-01T12:30:05``; None when unknown (LibRaw's 0,
    the epoch)."""
    if timestamp is None or timestamp.year <= 1970:
        return None
    return timestamp.replace(tzinfo=None, microsecond=0).isoformat()


# ------------------------------------------------------------------------------------ what a file says


def _from_exif(exif: Any, source: str, now: float | None) -> Taken:
    """The date of a Pillow ``Image.Exif``: DateTimeOriginal, else DateTimeDigitized (both in the Exif
    IFD, or in IFD0 where a CR3's CMT2 block puts them), else IFD0's DateTime."""
    try:
        sub = exif.get_ifd(_EXIF_IFD) if _EXIF_IFD in exif else {}
    except Exception:  # noqa: BLE001 - a damaged Exif IFD: IFD0 may still say
        sub = {}
    found = False
    for tag, where in (
        (_ORIGINAL, sub),
        (_ORIGINAL, exif),
        (_DIGITIZED, sub),
        (_DIGITIZED, exif),
        (_IFD0_DATETIME, exif),
    ):
        value = where.get(tag)
        if value is None:
            continue
        found = True
        subsec = where.get(_SUBSEC[tag], sub.get(_SUBSEC[tag]))
        offset = where.get(_OFFSET[tag], sub.get(_OFFSET[tag]))
        parsed = parse_exif_date(value, subsec, offset)
        if parsed is None:
            continue
        seconds, shift = parsed
        kind = source if shift is not None or source != "exif" else "exif-local"
        return _checked(seconds, kind, shift, now)
    return INVALID if found else NONE  # a date tag that is no date ("0000:00:00 ...") is a reset clock


def image_date(path: str | os.PathLike[str], now: float | None = None) -> Taken:
    """The Exif capture date of an image, from its header only (no pixel is decoded)."""
    from PIL import Image

    try:
        with door.opened(path) as handle, Image.open(handle) as img:
            if img.format == "PNG":  # getexif() of a PNG may decode it to reach a late eXIf chunk
                raw = img.info.get("exif")
                if not raw:
                    return NONE
                exif = Image.Exif()
                exif.load(raw)
            else:
                exif = img.getexif()
            return _from_exif(exif, "exif", now)
    except Exception:  # noqa: BLE001 - a file Pillow cannot parse has no date we can read
        return NONE


_TIFF_MAGIC = {b"II": b"II*\x00", b"MM": b"MM\x00*"}


def raw_date(path: str | os.PathLike[str], now: float | None = None) -> Taken:
    """The capture date of a camera RAW file, from its first ``HEAD_BYTES``: the TIFF structure most RAWs
    are (DNG, CR2, NEF, ARW, PEF, ORF and RW2 with their own magic number), else the first Exif block in
    it (RAF's embedded JPEG) or a CR3's CMT2 box."""
    from PIL import Image

    try:
        head = door.read_head(path, HEAD_BYTES)
    except OSError:
        return NONE
    blobs = []
    if head[:2] in _TIFF_MAGIC:
        blobs.append(_TIFF_MAGIC[head[:2]] + head[4:])
    at = head.find(b"Exif\x00\x00")
    if at >= 0:
        blobs.append(head[at + 6 :])
    at = head.find(b"CMT2")
    if at >= 0 and head[at + 4 : at + 6] in _TIFF_MAGIC:
        blobs.append(head[at + 4 :])
    for blob in blobs:
        try:
            exif = Image.Exif()
            exif.load(blob)
            taken = _from_exif(exif, "raw", now)
        except Exception:  # noqa: BLE001 - not a TIFF after all, or damaged
            continue
        if taken.source != "none":
            return taken
    return NONE


def clip_date(path: str | os.PathLike[str], now: float | None = None, *, max_pixels: int) -> Taken:
    """A clip's ``creation_time``: the container's, else its first video stream's (UTC, as ISO 8601).

    Metadata only, under the decoded-pixels budget (``max_pixels``: the process's,
    ``novelfind.media.decode.pixel_budget()``) as a clip's decode is: no packet is read or decoded here,
    and the frame FFmpeg decodes while opening a stream that does not say its size is refused past the
    budget (FFmpeg's ``max_pixels``); a clip with a video stream that claims more than the budget has no
    date read (its frames are refused too: ``novelfind.media.video``)."""
    try:
        from novelfind.base import extras

        av = extras.load("av")
    except Exception:  # noqa: BLE001 - without PyAV clips are not read at all
        return NONE
    budget = max(1, int(max_pixels))
    try:
        with (
            door.opened(path) as handle,
            av.open(handle, metadata_errors="ignore", options={"max_pixels": str(budget)}) as container,
        ):
            for stream in container.streams.video:
                codec = stream.codec_context
                if codec is not None and codec.width * codec.height > budget:
                    return NONE
            values = [container.metadata.get("creation_time")]
            values += [s.metadata.get("creation_time") for s in container.streams.video]
    except Exception:  # noqa: BLE001 - a clip FFmpeg cannot open
        return NONE
    for value in values:
        parsed = parse_iso_date(value)
        if parsed is not None:
            seconds, shift = parsed
            return _checked(seconds, "clip", 0 if shift is None else shift, now)
    return INVALID if any(v for v in values) else NONE


_XMP_DATE = re.compile(
    rb"(photoshop:DateCreated|exif:DateTimeOriginal|xmp:CreateDate)"
    rb"""(?:\s*=\s*["']([^"'<>]{4,40})["']|\s*>\s*([^<>]{4,40})\s*<)"""
)
_XMP_ORDER = (b"photoshop:DateCreated", b"exif:DateTimeOriginal", b"xmp:CreateDate")


def sidecar_date(
    paths: Sequence[str | os.PathLike[str]],
    candidates: Callable[[str | os.PathLike[str]], Iterable[Path]],
    now: float | None = None,
) -> Taken:
    """The capture date in the first XMP sidecar of ``paths`` (a photo's files) that has one, read as
    text (at most ``SIDECAR_MAX_BYTES``, no XML parser): ``photoshop:DateCreated``, else
    ``exif:DateTimeOriginal``, else ``xmp:CreateDate``, as attribute or element. ``candidates(path)``:
    the sidecar names a file may have (the XMP writer's rule), passed in so that this module, which the
    decoders import, imports none of them."""
    seen: set[Path] = set()
    for photo in paths:
        for candidate in candidates(photo):
            if candidate in seen:
                continue
            seen.add(candidate)
            try:
                data = door.read_head(candidate, SIDECAR_MAX_BYTES)
            except OSError:
                continue
            found = {m.group(1): m.group(2) or m.group(3) for m in _XMP_DATE.finditer(data)}
            for key in _XMP_ORDER:
                if key in found:
                    parsed = parse_iso_date(found[key].decode("utf-8", "replace"))
                    if parsed is not None:
                        return _checked(parsed[0], "xmp", parsed[1], now)
    return NONE


# ---------------------------------------------------------------------------------------- a library


def file_times_trusted(taken: np.ndarray, sources: Sequence[str], mtimes: np.ndarray) -> bool:
    """Whether the file times (``mtimes``: seconds, one per photo) of this scan can stand in for the
    capture date of the photos whose source is ``none`` (see the constants' comment)."""
    dated = np.isfinite(taken)
    if int(dated.sum()) >= EVIDENCE_MIN:
        apart = np.abs(mtimes[dated] - taken[dated]) > AGREE_S
        return float(apart.mean()) <= UNTRUSTED_SHARE
    undated = np.array([s == "none" for s in sources], bool)
    times = np.sort(mtimes[undated])
    if len(times) < COPY_MIN_FILES:
        return True
    # the most file times within one window: for each time, how many follow within COPY_WINDOW_S
    ends = np.searchsorted(times, times + COPY_WINDOW_S, side="right")
    densest = int((ends - np.arange(len(times))).max())
    return densest / len(times) <= UNTRUSTED_SHARE


@dataclass
class Dates:
    """The capture dates of a scan's photos, row i for photo i: ``taken`` float64 seconds (NaN:
    unknown), ``sources`` (:data:`SOURCES`), ``offsets`` float64 seconds east of UTC (NaN: local time or
    unknown), and whether the file times were trusted."""

    taken: np.ndarray
    sources: list[str]
    offsets: np.ndarray
    file_times_trusted: bool = False

    def __len__(self) -> int:
        return len(self.sources)

    def take(self, rows: Sequence[int] | np.ndarray) -> Dates:
        rows = np.asarray(rows, dtype=np.int64)
        return Dates(
            self.taken[rows],
            [self.sources[int(r)] for r in rows],
            self.offsets[rows],
            self.file_times_trusted,
        )

    def iso(self, row: int) -> str | None:
        """Row ``row``'s date in ISO 8601: with its offset when known, else local time without one."""
        offset = self.offsets[row]
        return iso(self.taken[row], None if math.isnan(offset) else int(offset))

    def instants(self) -> np.ndarray:
        """float64 (N,): the dates as UTC instants, the local ones converted through this machine's time
        zone (for ``since``, which is an instant)."""
        out = self.taken.copy()
        for i in np.flatnonzero(np.isfinite(self.taken) & np.isnan(self.offsets)):
            fields = time.gmtime(int(math.floor(self.taken[i])))[:8] + (-1,)
            try:
                out[i] = time.mktime(fields) + (self.taken[i] - math.floor(self.taken[i]))
            except (OverflowError, ValueError):
                pass
        return out


def iso(seconds: float, offset: int | None) -> str | None:
    """``2025-03-02T22:31:07.400+01:00`` (``offset`` known) or ``2025-03-02T22:31:07.400`` (local time),
    milliseconds only when there are some; None for NaN."""
    if seconds is None or math.isnan(seconds):
        return None
    zone = timezone(timedelta(seconds=offset)) if offset is not None else timezone.utc
    when = datetime.fromtimestamp(round(seconds, 3), tz=zone)
    text = when.isoformat(timespec="milliseconds" if when.microsecond else "seconds")
    if offset is None:
        text = text[: -len("+00:00")]
    return text


def library_dates(
    paths: Sequence[str],
    mtimes_ns: np.ndarray,
    *,
    read: Callable[[str], Taken],
    sidecars: Callable[[str | os.PathLike[str]], Iterable[Path]],
    cached: Sequence[Taken | None] = (),
    twins: Callable[[int], Sequence[str]] | None = None,
    on_read: Callable[[int, Taken], None] | None = None,
    now: float | None = None,
) -> Dates:
    """The capture dates of one scan's photos (``paths``, the files read, with their ``mtimes_ns``).

    ``cached[i]``: what is already known of photo i's bytes (the decode's date, or the cache's; None or
    missing: read the file's header with ``read``, the reader of its kind, and hand the result to
    ``on_read(i, taken)`` to be stored). ``twins(i)``: photo i's other files (a RAW + JPEG pair), whose
    sidecars (named by ``sidecars(path)``) count too.
    """
    n = len(paths)
    found: list[Taken] = []
    for i, path in enumerate(paths):
        hit = cached[i] if i < len(cached) else None
        if hit is None:
            hit = read(path)
            if on_read is not None:
                on_read(i, hit)
        found.append(hit)
    listed: dict[str, frozenset[str]] = {}  # folder -> its .xmp names: one listing, not 4 opens a photo

    def may_have_sidecar(path: str) -> bool:
        folder, name = os.path.split(path)
        if folder not in listed:
            try:
                names = os.listdir(folder or ".")
            except OSError:
                names = []
            listed[folder] = frozenset(n.lower() for n in names if n.lower().endswith(".xmp"))
        stem = os.path.splitext(name)[0]
        return bool(listed[folder]) and bool({f"{name}.xmp".lower(), f"{stem}.xmp".lower()} & listed[folder])

    for i, hit in enumerate(found):
        if hit.source in ("none", "invalid"):
            files = [paths[i], *(twins(i) if twins is not None else ())]
            if not any(may_have_sidecar(os.fspath(f)) for f in files):
                continue
            side = sidecar_date(files, sidecars, now)
            if side.known:
                found[i] = side
    taken = np.array([t.seconds for t in found], dtype=np.float64).reshape(n)
    offsets = np.array([math.nan if t.offset is None else t.offset for t in found], np.float64).reshape(n)
    sources = [t.source for t in found]
    mtimes = np.asarray(mtimes_ns, dtype=np.float64) / 1e9
    trusted = file_times_trusted(taken, sources, mtimes)
    if trusted:
        for i in (i for i, s in enumerate(sources) if s == "none"):
            if valid(mtimes[i], now):
                taken[i], offsets[i], sources[i] = mtimes[i], 0.0, "file"
    return Dates(taken, sources, offsets, trusted)


def since_mask(dates: Dates, mtimes_ns: np.ndarray, since: datetime | None) -> np.ndarray:
    """bool (N,): the photos taken at or after ``since`` (their capture date when known, else their file
    time); all of them for None."""
    if since is None:
        return np.ones(len(mtimes_ns), bool)
    threshold = since.timestamp()
    when = dates.instants()
    unknown = np.isnan(when)
    when[unknown] = np.asarray(mtimes_ns, dtype=np.float64)[unknown] / 1e9
    return when >= threshold
