"""Small clips made with PyAV for the tests: from numpy frames, with the codec, pixel format, rotation
and keyframe interval a test asks for, plus damaged and audio-only files."""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np


def write_clip(
    path: Path,
    frames: Iterable[np.ndarray],
    *,
    fps: int = 10,
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    gop: int = 5,
    rotation: int | None = None,
    gaps_ms: list[int] | None = None,
) -> Path:
    """Encode uint8 (H, W, 3) RGB ``frames`` (all one size) into ``path``; a keyframe every ``gop``
    frames; ``rotation``: the display matrix's counter-clockwise degrees (a phone's portrait clip: -90);
    ``gaps_ms``: a variable frame rate, each frame shown this many milliseconds (cycled)."""
    frames = list(frames)
    h, w = frames[0].shape[:2]
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
        stream.codec_context.gop_size = gop
        if codec == "libx265":
            stream.options = {"x265-params": "log-level=error"}
        if rotation is not None:
            stream.set_display_rotation(rotation)
        if gaps_ms is not None:
            stream.codec_context.time_base = stream.time_base = Fraction(1, 1000)
        pts = 0
        for i, f in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")
            if gaps_ms is not None:
                frame.pts, frame.time_base = pts, Fraction(1, 1000)
                pts += gaps_ms[i % len(gaps_ms)]
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def flat(colour: tuple[int, int, int], size=(96, 64), *, seed: int = 0) -> np.ndarray:
    """A (H, W, 3) frame of one colour with a little noise."""
    rng = np.random.default_rng(seed)
    w, h = size
    a = np.empty((h, w, 3), np.float32)
    a[:] = colour
    a += rng.normal(0, 6, a.shape)
    return np.clip(a, 0, 255).astype(np.uint8)


def pan(colour: tuple[int, int, int], n: int = 20, size=(96, 64), *, seed: int = 0) -> list[np.ndarray]:
    """``n`` frames of a camera moving across a striped scene of ``colour``."""
    w, h = size
    scene = flat(colour, (w * 2, h), seed=seed)
    scene[:, (np.arange(w * 2) // 12) % 2 == 0] //= 2
    return [scene[:, i * w // n : i * w // n + w] for i in range(n)]


def write_audio_only(path: Path) -> Path:
    """An .mp4 with an AAC track and no picture."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=8000)
        for i in range(8):
            frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            frame.sample_rate, frame.pts = 8000, i * 1024
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def claiming_png(w: int, h: int, rows: int = 8) -> bytes:
    """A PNG whose header claims ``w`` x ``h`` RGB pixels, holding only ``rows`` rows of them: a few hundred
    bytes that a decoder sizes its frame by (16000 x 16000: 768 MB) before it finds the data short."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer = zlib.compressobj(9)
    data = b"".join(packer.compress(b"\0" * (3 * w + 1)) for _ in range(rows)) + packer.flush()
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def write_png_clip(path: Path, size: tuple[int, int], frame: bytes, n: int = 3) -> Path:
    """A .mov of ``n`` PNG frames (the bytes ``frame``, as they are: not encoded here) whose stream says its
    frames are ``size`` (w, h): the container and the frames may disagree."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format="mov") as container:
        stream = container.add_stream("png", rate=1)
        stream.width, stream.height = size
        stream.pix_fmt = "rgb24"
        stream.time_base = Fraction(1, 1)
        for i in range(n):
            packet = av.Packet(frame)
            packet.stream, packet.pts, packet.dts, packet.duration = stream, i, i, 1
            packet.time_base, packet.is_keyframe = stream.time_base, True
            container.mux(packet)
    return path


def write_two_stream_clip(path: Path, hidden: bytes, *, creation_time: str | None = None) -> Path:
    """A .mov of a small H.264 clip (96 x 64) followed by a second video stream of PNG frames (the bytes
    ``hidden``) that says its frames are 64 x 64: what a clip's first stream is read for never needs the
    second, which only the opening of the file may decode. ``creation_time`` is kept as written (MOV
    metadata keys: ``movflags=use_metadata_tags``), however long."""
    path.parent.mkdir(parents=True, exist_ok=True)
    options = {"movflags": "use_metadata_tags"} if creation_time is not None else {}
    with av.open(str(path), "w", format="mov", options=options) as container:
        if creation_time is not None:
            container.metadata["creation_time"] = creation_time
        video = container.add_stream("libx264", rate=10)
        video.width, video.height, video.pix_fmt = 96, 64, "yuv420p"
        png = container.add_stream("png", rate=1)
        png.width, png.height, png.pix_fmt = 64, 64, "rgb24"
        png.time_base = Fraction(1, 1)
        for i in range(10):
            frame = av.VideoFrame.from_ndarray(flat((200, 40, 40), seed=i), format="rgb24")
            for packet in video.encode(frame):
                container.mux(packet)
        for packet in video.encode():
            container.mux(packet)
        for i in range(2):
            packet = av.Packet(hidden)
            packet.stream, packet.pts, packet.dts, packet.duration = png, i, i, 1
            packet.time_base, packet.is_keyframe = png.time_base, True
            container.mux(packet)
    return path
