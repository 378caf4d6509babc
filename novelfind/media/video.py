"""Clips: a few frames per video file, read from keyframes, and the rule that makes them one vector.

A clip is one item of the library, ranked with the photos on the same scale: its vector is the pooled
vector of one of its own frames, made by the same model from the same 224 x 224 input as a photo's.

What is decoded. ``FRAMES`` times evenly spaced over the clip (the middles of ``FRAMES`` equal parts);
for each, the container seeks to the keyframe at or before it and decodes that one packet. (At or before,
not after: the first keyframe is the first frame, so every part is seen from its start; seeking forward
from the middle of the first part skips it whenever keyframes are a part's length apart, and finds
nothing after the last keyframe.) A keyframe decodes alone, so a clip costs ``FRAMES`` small decodes
whatever its length: of a 2 GB clip, five keyframes are decoded. Two times that land on one
keyframe give one frame. Each frame is scaled by FFmpeg straight to the model's short side (a 4K
frame is never converted at full size), turned upright by the stream's display matrix (phones record
portrait clips sideways and say so there), and converted to 8-bit RGB (10-bit and HDR clips too; an
HDR clip's colours are not tone-mapped, which the model barely notices at 224 px).

The rule (``RULE``): the clip's vector is the frame farthest, in cosine distance, from the mean of its
frames' unit vectors; that frame is "the moment" the outputs show. A clip with one striking moment among
ordinary frames is that moment, and is found as often as an odd photo (the mean of its frames, or the
frame nearest it, is an ordinary picture: such clips were never found that way); a clip of an ordinary
scene is a real picture of that scene, however the camera moves, and ranks among the ordinary photos.
docs/video.md has the measurement (``scripts/bench_video.py rule``).

Identity. A clip's digest is made from its size and samples of its bytes (the first and last MiB and
``SAMPLES`` blocks between), not from every byte, so a moved or renamed 2 GB clip is recognised after
reading about 3 MB; the cache and the ignore list know a clip by it, as they know a photo by the digest
of all its bytes. The cache keeps, beside a clip's vector, the rule that made it (``ClipInfo.rule``): a
vector made under another rule is not reused, whether the clip is found by its path or by its bytes.

PyAV (``pip install 'novelfind[video]'``) is imported only when a clip is decoded.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Container, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from novelfind.base import door, extras, safe_load
from novelfind.errors import DecodeError
from novelfind.media.decode import RESIZE_SIZE, pixel_budget, to_model_input, unreadable
from novelfind.media.extensions import VIDEO_EXTENSIONS

INSTALL_HINT = "pip install 'novelfind[video]'"
FRAMES = 5  # frames decoded per clip: a 1080p clip then costs about 9 photos' decoding (docs/video.md)
RULE = f"farthest-of-{FRAMES}-keyframes/1"  # changes whenever the frames or the rule change
HEAD_BYTES = 1 << 20  # the digest reads the first and the last MiB (the container's index lives there)
SAMPLES = 16  # and this many blocks between them
SAMPLE_BYTES = 1 << 16
CLIP_RECORD_BYTES = 1 << 16  # a clip's record in the cache (info_to_text): some hundred bytes


@dataclass(frozen=True)
class ClipInfo:
    """What the outputs say of a clip: its length, the times of the frames read, which one is its
    vector (``moment``, an index into ``times``) and the rule that chose it."""

    duration: float  # seconds
    times: tuple[float, ...]  # seconds from the start, ascending
    moment: int
    rule: str

    @property
    def moment_time(self) -> float:
        return self.times[self.moment]

    def as_json(self) -> dict[str, Any]:
        return {
            "duration": round(self.duration, 3),
            "frame_times": [round(t, 3) for t in self.times],
            "moment": round(self.moment_time, 3),
        }


@dataclass(frozen=True)
class ClipFrames:
    """A clip read for the model: uint8 (F, 224, 224, 3) frames at ``times`` (seconds), in order."""

    pixels: np.ndarray
    times: tuple[float, ...]
    duration: float

    def info(self, moment: int) -> ClipInfo:
        return ClipInfo(self.duration, self.times, moment, RULE)

    def vector(self, encode: Any) -> tuple[np.ndarray, ClipInfo]:
        """The clip's one vector by the frame rule (:func:`combine`) and its record, from ``encode``:
        uint8 (F, 224, 224, 3) -> (F, dim), the model wherever it runs (this process, a cluster's worker)."""
        vector, moment = combine(np.asarray(encode(self.pixels), dtype=np.float32))
        return vector, self.info(moment)


def installed() -> bool:
    """Whether PyAV can be found, without importing it: the walk offers clips then (``walk.py``)."""
    return extras.installed("av")


def available() -> bool:
    """Whether PyAV is installed (and imports)."""
    return extras.available("av")


# --------------------------------------------------------------------------- identity


def clip_digest(path: str | os.PathLike[str], *, expect: tuple[int, int] | None = None) -> str:
    """The clip's content identity: blake2b-128 of its size, first and last MiB and ``SAMPLES`` evenly
    spaced 64 KiB blocks (all of a small clip). ``expect``: the size and modification time in ns the file
    must still have. Raises DecodeError (FileRefused for the library door's refusal) when it cannot be
    read."""
    try:
        fd, st = door.open_fd(path, expect=expect)
    except OSError as e:
        raise unreadable(e) from None
    try:
        size = st.st_size
        if size == 0:
            raise DecodeError("empty file")
        h = hashlib.blake2b(digest_size=16, person=b"novelfind-clip")
        h.update(f"{size}:".encode())
        if size <= 2 * HEAD_BYTES + SAMPLES * SAMPLE_BYTES:
            h.update(_read_at(fd, 0, size))
        else:
            h.update(_read_at(fd, 0, HEAD_BYTES))
            span = size - 2 * HEAD_BYTES - SAMPLE_BYTES
            for k in range(SAMPLES):
                h.update(_read_at(fd, HEAD_BYTES + span * k // max(1, SAMPLES - 1), SAMPLE_BYTES))
            h.update(_read_at(fd, size - HEAD_BYTES, HEAD_BYTES))
        return h.hexdigest()
    except OSError as e:
        raise DecodeError(e.strerror or str(e)) from None
    finally:
        os.close(fd)


def _read_at(fd: int, offset: int, length: int) -> bytes:
    parts, got = [], 0
    while got < length:
        block = os.pread(fd, length - got, offset + got)
        if not block:
            break
        parts.append(block)
        got += len(block)
    return b"".join(parts)


# --------------------------------------------------------------------------- decoding


def _av() -> Any:
    try:
        return extras.load("av")
    except Exception:  # noqa: BLE001 - ImportError or a broken wheel: the same advice
        raise DecodeError(f"PyAV is not installed; {INSTALL_HINT}") from None


@contextmanager
def _video_stream(
    path: str | os.PathLike[str], expect: tuple[int, int] | None = None
) -> Iterator[tuple[Any, Any]]:
    """(container, its first video stream) of the clip at ``path`` (``expect``: the size and modification
    time in ns it must still have), closed afterwards; FFmpeg's and the file system's errors become
    DecodeError with the reason (FileRefused for the library door's refusal).

    The decoded-pixels budget (``--max-decode-pixels``, :func:`novelfind.media.decode.pixel_budget`) holds for
    clips as for photos, before a frame is decoded: FFmpeg's ``max_pixels`` is set for the decoding that
    opening the file does (``avformat_find_stream_info`` decodes a frame of a stream that does not say its
    size: a 16000 x 16000 PNG named ``clip.mp4`` took 0.77 GB there), the frame size the stream and its
    codec give is checked against the budget, and the decoder itself refuses a frame larger than the
    budget (a stream that claims a small size and holds large frames).
    """
    av = _av()
    budget = pixel_budget()
    limit = {"max_pixels": str(budget)}
    with ExitStack() as held:
        try:
            # FFmpeg reads through the library door's descriptor, never by the name
            handle = held.enter_context(door.opened(path, expect=expect))
            container = av.open(handle, metadata_errors="ignore", options=limit)
        except av.FFmpegError as e:
            raise DecodeError(_reason(e, "not a clip FFmpeg can read")) from None
        except OSError as e:
            raise unreadable(e) from None
        with _closing(container):
            yield _checked_stream(container, budget, limit, av)


@contextmanager
def _closing(container: Any) -> Iterator[None]:
    """Close ``container`` after the block; FFmpeg's errors in it become DecodeError."""
    av = _av()
    try:
        yield
    except av.FFmpegError as e:
        raise DecodeError(_reason(e, "cannot decode the clip")) from None
    finally:
        container.close()


def _checked_stream(container: Any, budget: int, limit: dict[str, str], av: Any) -> tuple[Any, Any]:
    """(container, its first video stream), checked against the pixel budget. Raises DecodeError."""
    try:
        if not container.streams.video:
            raise DecodeError("no video stream (audio only?)")
        stream = container.streams.video[0]
        if stream.codec_context is None:
            raise DecodeError("a codec FFmpeg cannot decode")
        w, h = stream.codec_context.width, stream.codec_context.height
        if w <= 0 or h <= 0:  # the decoding on opening gave no size: refused by max_pixels, or none
            raise DecodeError(
                f"refused: no frame size within the budget of {budget} pixels (max_decode_pixels)"
            )
        if w * h > budget:
            raise DecodeError(
                f"refused: {w} x {h} pixels a frame, over the budget of {budget} (max_decode_pixels)"
            )
        stream.codec_context.options = limit  # applied when the decoder opens, at the first frame
        stream.thread_type = "NONE"  # one keyframe at a time: threads only add start-up cost
        return container, stream
    except av.FFmpegError as e:
        raise DecodeError(_reason(e, "cannot decode the clip")) from None


def read_frames(
    path: str | os.PathLike[str], count: int = FRAMES
) -> tuple[list[Image.Image], list[float], float]:
    """Up to ``count`` frames of the clip at ``path``: (upright RGB images with a short side of
    ``RESIZE_SIZE``, their times in seconds, the clip's duration). Raises DecodeError with the reason."""
    with _video_stream(path) as (container, stream):
        duration = _duration(container, stream)
        images: list[Image.Image] = []
        times: list[float] = []
        for k in range(count):
            got = _keyframe_at(container, stream, duration * (k + 0.5) / count)
            if got is not None and (not times or got[1] > times[-1] + 1e-6):
                images.append(got[0])
                times.append(got[1])
    if not images:
        raise DecodeError("no frame could be decoded (truncated or damaged clip?)")
    return images, times, duration


def _duration(container: Any, stream: Any) -> float:
    """Seconds: the stream's own duration, else the container's; DecodeError when it has none."""
    if stream.duration and stream.time_base:
        seconds = float(stream.duration * stream.time_base)
    elif container.duration:
        seconds = container.duration / 1_000_000  # AV_TIME_BASE
    else:
        seconds = 0.0
    if not seconds > 0:
        raise DecodeError("zero-length clip")
    return seconds


def _keyframe_at(container: Any, stream: Any, seconds: float) -> tuple[Image.Image, float] | None:
    """The frame of the keyframe at or before ``seconds`` and its time, or None when it does not decode."""
    base = stream.time_base
    start = stream.start_time or 0
    try:
        container.seek(round(seconds / base) + start, stream=stream, backward=True, any_frame=False)
    except _av().FFmpegError:  # a damaged index: the other times may still seek
        return None
    frame = _first_frame(container, stream)
    if frame is None:
        return None
    time = float((frame.pts - start) * base) if frame.pts is not None else seconds
    return _upright_rgb(frame), max(0.0, time)


def _first_frame(container: Any, stream: Any) -> Any:
    """Decode the first packets after a seek until one frame comes out; the decoder is reset after."""
    codec = stream.codec_context
    try:
        for packets, packet in enumerate(container.demux(stream)):
            if packets >= 64:  # a damaged stream that never yields a picture
                return None
            if packet.size == 0:
                continue
            # a decoder that holds frames back (B-frames) gives them up when drained (None)
            frames = codec.decode(packet) or codec.decode(None)
            if frames:
                return frames[0]
        return None
    finally:
        codec.flush_buffers()


def _upright_rgb(frame: Any) -> Image.Image:
    """The frame as 8-bit RGB with a short side of ``RESIZE_SIZE`` (scaled by FFmpeg), turned as its
    display matrix says (``rotation``: degrees counter-clockwise)."""
    w, h = frame.width, frame.height
    if w <= 0 or h <= 0:
        raise DecodeError("a frame without pixels")
    scale = RESIZE_SIZE / min(w, h)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    img = frame.reformat(width=size[0], height=size[1], format="rgb24", interpolation="AREA").to_image()
    turn = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}
    rotation = round(getattr(frame, "rotation", 0) or 0) % 360
    return img.transpose(turn[rotation]) if rotation in turn else img


def _reason(e: BaseException, default: str) -> str:
    text = getattr(e, "strerror", None) or str(e)
    return f"{default} ({text})" if text else default


def read_clip_for_model(
    path: str | os.PathLike[str], known: Container[str] = frozenset()
) -> tuple[str, ClipFrames | None]:
    """(the clip's digest, its frames for the model); the frames are None when the digest is in
    ``known`` (a clip whose vector the cache holds: moved, renamed or touched). Raises DecodeError."""
    digest = clip_digest(path)
    if digest in known:
        return digest, None
    images, times, duration = read_frames(path)
    pixels = np.stack([to_model_input(img) for img in images])  # (F, 224, 224, 3)
    return digest, ClipFrames(pixels, tuple(times), duration)


def poster(
    path: str | os.PathLike[str], seconds: float, *, expect: tuple[int, int] | None = None
) -> tuple[Image.Image, tuple[int, int]]:
    """The clip's frame at the keyframe at or before ``seconds``, upright RGB, scaled to a short side of
    ``RESIZE_SIZE``: the picture a report shows for a clip (at its moment, a keyframe's time, that frame
    itself); and the frames' own size, upright (width, height). ``expect``: the size and modification
    time in ns the clip must still have. Raises DecodeError (FileRefused)."""
    with _video_stream(path, expect) as (container, stream):
        got = _keyframe_at(container, stream, seconds)
        size = (int(stream.codec_context.width), int(stream.codec_context.height))
    if got is None:
        raise DecodeError("no frame could be decoded")
    img = got[0]
    if (img.width > img.height) != (size[0] > size[1]):  # turned upright by its display matrix
        size = (size[1], size[0])
    return img, size


# --------------------------------------------------------------------------- the rule


def combine(vectors: np.ndarray) -> tuple[np.ndarray, int]:
    """The clip's vector from its frames' (F, dim) vectors, and which frame it is: the frame farthest in
    cosine distance from the mean of the unit frame vectors (the first of equals)."""
    v = np.asarray(vectors, dtype=np.float32)  # (F, dim)
    unit = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)  # (F, dim)
    mean = unit.mean(axis=0)  # (dim,)
    mean /= max(float(np.linalg.norm(mean)), 1e-12)
    distance = 1.0 - unit @ mean  # (F,)
    moment = int(np.argmax(distance > distance.max() - 1e-6))
    return v[moment], moment


_CLIP_SUFFIXES = frozenset(os.fsencode(e) for e in VIDEO_EXTENSIONS)


def clip_rows(files: Any) -> list[int]:
    """Indices of the clips among ``files`` (a ``walk.FileList``), from the paths' bytes (1 to 3 s for a
    million files): ``kinds.kind_of``'s rule for ``kinds.CLIP``, without decoding a million paths."""
    split = os.path.splitext
    return [i for i, (path, _, _) in enumerate(files.records()) if split(path)[1].lower() in _CLIP_SUFFIXES]


def info_to_text(info: ClipInfo) -> str:
    """A clip's record as the cache keeps it (JSON)."""
    return json.dumps(
        {"rule": info.rule, "duration": info.duration, "times": info.times, "moment": info.moment}
    )


def info_from_text(text: str | None) -> ClipInfo | None:
    """The record ``info_to_text`` made, or None for none, one that does not parse, or one whose values
    are out of range (a time or duration not finite or negative, a moment that is not one of the times):
    the clip is then read again, as for a cached vector that fails its checks."""
    try:
        d = safe_load.load_json(text, max_bytes=CLIP_RECORD_BYTES) if text else None
        info = ClipInfo(
            float(d["duration"]), tuple(float(t) for t in d["times"]), int(d["moment"]), str(d["rule"])
        )
    except (TypeError, ValueError, KeyError, OverflowError, RecursionError):
        return None
    values = (info.duration, *info.times)
    if not all(math.isfinite(v) and v >= 0 for v in values):
        return None
    return info if 0 <= info.moment < len(info.times) else None


class ClipBook:
    """The clips of one extraction (``extract.stage.Stage``): which files are clips, what each clip's vector
    was made from, and the records waiting to be written to the store with the next commit."""

    def __init__(self, files: Any) -> None:
        self.files = files
        self.rows = clip_rows(files)  # file indices
        self.rowset = frozenset(self.rows)
        self.infos: dict[int, ClipInfo] = {}  # file index -> record, for the clips read in this run
        self.pending: list[tuple[str, str]] = []  # (digest, record) for the next commit

    def stale(self, store: Any, done: np.ndarray) -> list[int]:
        """The clips found by stat whose vector was made under another rule (or has no record): the
        stage reads them again."""
        hits = [i for i in self.rows if done[i]]
        get = getattr(store, "get_clips", None)
        if not hits or get is None:
            return []
        digests = store.digests_by_stat(self.files.take(hits))
        records = get([d or "" for d in digests])
        return [
            i
            for i, record in zip(hits, records, strict=True)
            if (info := info_from_text(record)) is None or info.rule != RULE
        ]

    def take(self, i: int, digest: str, clip: ClipFrames, encode: Any) -> np.ndarray:
        """Clip i's vector from its frames (``encode``: uint8 (F, 224, 224, 3) -> (F, dim)); its record
        is kept and queued for the store."""
        vector, info = clip.vector(encode)
        self.keep(i, digest, info)
        return vector

    def keep(self, i: int, digest: str, info: ClipInfo) -> None:
        """Clip i's record, made where its frames were encoded (here, or on a cluster's worker): kept for
        the result and queued for the store."""
        self.infos[i] = info
        self.pending.append((digest, info_to_text(info)))

    def current(self, i: int, digest: str, store: Any) -> bool:
        """Whether file i's vector found by its bytes (``digest``) may be reused: always for a photo; for a
        clip when the store's record says it was made under this rule (the record is kept for the result)."""
        if i not in self.rowset:
            return True
        get = getattr(store, "get_clips", None)
        info = info_from_text(get([digest])[0]) if get is not None else None
        if info is None or info.rule != RULE:
            return False
        self.infos[i] = info
        return True

    def write(self, store: Any) -> None:
        """Write the waiting records to ``store`` (after their vectors: a record without its vector is
        never read, a vector without its record is read again)."""
        rows, self.pending = self.pending, []
        put = getattr(store, "put_clips", None)
        if rows and put is not None:
            put(rows)

    def result(self, store: Any, kept: np.ndarray) -> dict[Path, ClipInfo]:
        """The records of the clips among the ``kept`` file indices, by path: those read in this run,
        the rest from the store."""
        kept_set = set(kept.tolist())
        rows = [i for i in self.rows if i in kept_set]
        out: dict[Path, ClipInfo] = {}
        missing = [i for i in rows if i not in self.infos]
        if missing and getattr(store, "get_clips", None) is not None:
            digests = store.digests_by_stat(self.files.take(missing))
            for i, record in zip(missing, store.get_clips([d or "" for d in digests]), strict=True):
                info = info_from_text(record)
                if info is not None:
                    self.infos[i] = info
        for i in rows:
            if i in self.infos:
                out[self.files[i].path] = self.infos[i]
        return out


def stale_note(n: int) -> str:
    """The one notice for clips read again because the rule changed."""
    return (
        f"{n:,} clip{'s are' if n != 1 else ' is'} read again: the cache held vectors made by another "
        f"frame rule, and novelfind now uses {RULE}"
    )
