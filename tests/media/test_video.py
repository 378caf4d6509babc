"""Clips: frames read from keyframes, upright and 8-bit; damaged clips give a reason; the rule that makes a
clip one vector; clips in a scan, in the cache (moved, renamed, a new rule), and without PyAV.

Every clip is made here with PyAV (tests/support/clips.py), 96 x 64 to 320 x 240, one to three seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import av
import numpy as np
import pytest
from click.testing import CliRunner
from clips import flat, pan, write_audio_only, write_clip
from common import FakeExtractor, make_photo, sized
from PIL import Image
from stalling import StallingDecoder

import novelfind
from novelfind.cache import FeatureCache
from novelfind.cli.group import cli
from novelfind.errors import DecodeError
from novelfind.extract.decoders import pillow
from novelfind.extract.engines.local import extract
from novelfind.extract.stage import decode_file
from novelfind.media import video
from novelfind.media.walk import FileList, walk

RED, GREEN, BLUE = (220, 40, 40), (40, 200, 60), (40, 60, 200)


# --------------------------------------------------------------------------- frames


def test_frames_come_from_keyframes_spread_over_the_clip(tmp_path):
    clip = write_clip(tmp_path / "pan.mp4", pan(BLUE, n=30), fps=10, gop=5)  # 3 s, a keyframe each 0.5 s
    images, times, duration = video.read_frames(clip)
    assert duration == pytest.approx(3.0, abs=0.05)
    assert len(images) == len(times) and 3 <= len(times) <= video.FRAMES
    assert times == sorted(set(times)) and 0 <= times[0] and times[-1] < duration
    assert all(t * 2 == pytest.approx(round(t * 2), abs=1e-3) for t in times)  # keyframes: multiples of 0.5 s
    assert times[-1] - times[0] >= 1.5  # spread, not the first frames
    assert all(min(im.size) == 256 for im in images)  # scaled by FFmpeg to the model's short side


def test_every_part_of_the_clip_is_seen_when_keyframes_are_a_part_apart(tmp_path):
    clip = write_clip(tmp_path / "five.mp4", pan(BLUE, n=50), fps=10, gop=10)  # 5 s, a keyframe each second
    _, times, duration = video.read_frames(clip)
    assert duration == pytest.approx(5.0, abs=0.05)
    assert len(times) == video.FRAMES and times[0] == 0.0  # the first part too (seeking forward skips it)
    targets = [k + 0.5 for k in range(5)]  # the middles of five one-second parts
    assert all(target - 1.05 < t <= target for t, target in zip(times, targets, strict=True)), times


def test_a_variable_frame_rate_clip_gives_its_frames_at_their_times(tmp_path):
    frames = [flat((40 + 5 * i, 60, 200), seed=i) for i in range(30)]
    clip = write_clip(tmp_path / "vfr.mp4", frames, gop=5, gaps_ms=[250, 20, 20])  # bursts and pauses
    _, times, duration = video.read_frames(clip)
    assert 2.88 <= duration <= 3.0  # the last frame starts at 2.88 s
    assert len(times) >= 4 and times == sorted(times) and times[-1] < duration
    # a frame's time is when it is shown (0, 250, 270 ms into each 290 ms cycle), not its index at a rate
    assert all(round(t * 1000) % 290 in (0, 250, 270) for t in times), times


def test_a_clip_with_one_keyframe_gives_that_frame(tmp_path):
    clip = write_clip(tmp_path / "long_gop.mp4", pan(BLUE, n=20), gop=1000)
    _, times, _ = video.read_frames(clip)
    assert times == [0.0]


@pytest.mark.parametrize("rotation, size", [(-90, (64, 96)), (90, (64, 96)), (180, (96, 64))])
def test_a_rotated_clip_is_turned_upright(tmp_path, rotation, size):
    frame = flat(BLUE, (96, 64))
    frame[:32, :48] = GREEN  # the top-left quarter is green
    clip = write_clip(tmp_path / f"r{rotation}.mp4", [frame] * 10, rotation=rotation)
    img = video.read_frames(clip)[0][0].resize(size)
    pixels = np.asarray(img, np.int32)
    green = pixels[..., 1] > 150
    h, w = green.shape
    quarters = {
        "top-left": green[: h // 2, : w // 2].mean(),
        "top-right": green[: h // 2, w // 2 :].mean(),
        "bottom-left": green[h // 2 :, : w // 2].mean(),
        "bottom-right": green[h // 2 :, w // 2 :].mean(),
    }
    # -90 (counter-clockwise: shown turned clockwise) puts the top-left corner top right
    want = {-90: "top-right", 90: "bottom-left", 180: "bottom-right"}[rotation]
    assert max(quarters, key=quarters.get) == want, quarters


@pytest.mark.parametrize(
    "codec, pix_fmt, name",
    [
        ("libx265", "yuv420p10le", "hdr.mp4"),
        ("ffv1", "yuv420p10le", "ten_bit.mkv"),
        ("mpeg4", "yuv420p", "old.avi"),
    ],
)
def test_ten_bit_and_other_codecs_become_8_bit_rgb(tmp_path, codec, pix_fmt, name):
    if codec not in av.codecs_available:
        pytest.skip(f"this PyAV has no {codec} encoder")  # the wheels bundle it; a system FFmpeg may not
    clip = write_clip(
        tmp_path / name, [flat(RED, (96, 64), seed=i) for i in range(20)], codec=codec, pix_fmt=pix_fmt
    )
    digest, frames = video.read_clip_for_model(clip)
    assert frames.pixels.dtype == np.uint8 and frames.pixels.shape[1:] == (224, 224, 3)
    mean = frames.pixels.reshape(-1, 3).mean(axis=0)
    assert np.allclose(mean, RED, atol=12), mean


def _written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _truncated(tmp_path: Path) -> Path:
    whole = write_clip(tmp_path / "whole.mp4", pan(BLUE, n=20))
    data = whole.read_bytes()
    out = tmp_path / "truncated.mp4"
    out.write_bytes(data[: len(data) // 3])  # mdat cut short, and no index (moov at the end)
    return out


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda d: _written(d / "zero.mp4", b""), "empty file"),
        (lambda d: write_audio_only(d / "voice.m4v"), "no video stream (audio only?)"),
        (lambda d: _written(d / "noise.mov", os.urandom(5000)), "not a clip FFmpeg"),
        (_truncated, "not a clip FFmpeg"),
    ],
    ids=["zero-length", "audio-only", "garbage", "truncated"],
)
def test_a_bad_clip_gives_a_one_line_reason(tmp_path, make, reason):
    path = make(tmp_path)
    with pytest.raises(DecodeError, match=re.escape(reason)):
        video.read_clip_for_model(path)
    got = decode_file(str(path), frozenset())
    assert got.digest is None and got.reason.startswith(reason) and "\n" not in got.reason


def test_a_clip_whose_bytes_are_known_is_not_decoded(tmp_path):
    clip = write_clip(tmp_path / "a.mp4", pan(BLUE))
    digest, frames = video.read_clip_for_model(clip)
    assert frames is not None
    assert video.read_clip_for_model(clip, known={digest}) == (digest, None)


def test_the_digest_reads_samples_of_a_large_clip_and_follows_its_content(tmp_path):
    big = tmp_path / "big.mp4"
    rng = np.random.default_rng(0)
    data = bytearray(rng.integers(0, 256, 8 << 20, dtype=np.uint8).tobytes())
    big.write_bytes(data)
    first = video.clip_digest(big)
    moved = tmp_path / "sub" / "renamed.MOV"
    moved.parent.mkdir()
    shutil.copy(big, moved)
    assert video.clip_digest(moved) == first  # content, not name
    data[video.HEAD_BYTES + 5] ^= 0xFF  # inside the first sampled block after the head
    big.write_bytes(data)
    assert video.clip_digest(big) != first


# --------------------------------------------------------------------------- the rule


def test_the_rule_takes_the_frame_farthest_from_the_clip_mean():
    rng = np.random.default_rng(1)
    ordinary = np.abs(rng.normal(1.0, 0.05, (4, 32))).astype(np.float32)
    striking = np.abs(rng.normal(0, 1, 32)).astype(np.float32) * 3
    frames = np.insert(ordinary, 2, striking, axis=0)  # (5, 32): the third frame stands out
    vector, moment = video.combine(frames)
    assert moment == 2 and np.array_equal(vector, striking)


def test_a_still_clip_is_its_first_frame():
    frame = np.linspace(0.1, 1, 16, dtype=np.float32)
    vector, moment = video.combine(np.stack([frame] * 5))
    assert moment == 0 and np.array_equal(vector, frame)


# --------------------------------------------------------------------------- clips in a scan


def _library(root: Path) -> dict[str, Path]:
    """12 bluish photos, a blue pan and a blue still held (ordinary clips), a blue clip with a red moment."""
    for i in range(12):
        make_photo(root / f"IMG_{i:02d}.jpg", (40, 60 + i, 200), seed=i, size=(96, 64))
    moment = [flat(BLUE, seed=i) for i in range(10)] + [flat(RED, seed=i) for i in range(5)]
    moment += [flat(BLUE, seed=i) for i in range(10, 25)]
    return {
        "pan": write_clip(root / "clips" / "pan.mp4", pan(BLUE, n=30)),
        "still": write_clip(root / "clips" / "still.mov", [flat(BLUE, seed=7)] * 20),
        "moment": write_clip(root / "moment.mp4", moment),
    }


def test_a_clip_is_ranked_with_the_photos_and_its_moment_found(tmp_path, fake_extractor):
    clips = _library(tmp_path / "lib")
    result = novelfind.scan(tmp_path / "lib", k=3, cache=False)
    assert result.picks[0].path == clips["moment"]  # the red moment among blue photos
    assert result.picks[0].kind == "clip" and clips["still"] not in {p.path for p in result.picks}
    assert len(result.files) == 15 and result.counts.failed == 0
    info = result.clips[clips["moment"]]
    assert 1.0 <= info.moment_time < 1.5 and info.duration == pytest.approx(3.0, abs=0.05)
    assert set(result.clips) == set(clips.values())


def test_clips_are_cached_by_content_and_read_again_when_the_rule_changes(tmp_path, monkeypatch):
    clips = _library(tmp_path / "lib")
    files = FileList(walk([tmp_path / "lib"]))
    extractor = FakeExtractor()
    notes: list[str] = []
    with FeatureCache(tmp_path / "c.sqlite", extractor.model_key) as cache:
        first = extract(files, extractor, cache, workers=0, on_warning=notes.append)
        assert first.extracted == 15 and set(first.clips) == set(clips.values())
        # a second scan reads nothing: the clips' records come from the cache
        again = extract(files, extractor, cache, workers=0, on_warning=notes.append)
        assert (again.from_cache, again.extracted) == (15, 0) and again.clips == first.clips
        # a moved and renamed clip is found by its bytes: no frame is decoded
        moved = tmp_path / "lib" / "elsewhere" / "MOMENT_COPY.MP4"
        moved.parent.mkdir()
        clips["moment"].rename(moved)
        calls = extractor.images
        files = FileList(walk([tmp_path / "lib"]))
        third = extract(files, extractor, cache, workers=0, on_warning=notes.append)
        assert (third.from_cache, third.extracted, extractor.images) == (15, 0, calls)
        assert third.clips[moved] == first.clips[clips["moment"]]
        assert notes == []
        # another rule: every clip read again, one notice
        monkeypatch.setattr(video, "RULE", "another-rule/1")
        fourth = extract(files, extractor, cache, workers=0, on_warning=notes.append)
    assert (fourth.from_cache, fourth.extracted) == (12, 3)
    assert notes == [video.stale_note(3)]
    assert "3 clips are read again" in notes[0]
    assert {info.rule for info in fourth.clips.values()} == {"another-rule/1"}


def without_pyav(monkeypatch) -> None:
    """The walk as it is on an installation without PyAV: clips are not offered, but counted."""
    import novelfind.media.extensions
    import novelfind.media.walk

    walked = novelfind.media.walk.WALKED_EXTENSIONS - novelfind.media.extensions.VIDEO_EXTENSIONS
    monkeypatch.setattr(novelfind.media.walk, "WALKED_EXTENSIONS", walked)


def test_without_pyav_clips_are_counted_named_and_the_photos_ranked(tmp_path, fake_extractor, monkeypatch):
    clips = _library(tmp_path / "lib")
    without_pyav(monkeypatch)
    warned: list[str] = []
    result = novelfind.scan(tmp_path / "lib", k=3, cache=False, on_warning=warned.append)
    assert len(result.files) == 12 and not result.clips
    note = [w for w in warned if "clip" in w]
    assert note == [
        "3 clips left out (pan.mp4, still.mov, moment.mp4): reading clips needs PyAV "
        "(pip install 'novelfind[video]')"
    ]
    assert all(p.path not in clips.values() for p in result.picks)


def test_clips_alone_without_pyav_are_an_error_that_says_why(tmp_path, fake_extractor, monkeypatch):
    write_clip(tmp_path / "lib" / "a.mp4", pan(BLUE))
    without_pyav(monkeypatch)
    with pytest.raises(novelfind.NovelfindError, match=r"novelfind\[video\]"):
        novelfind.scan(tmp_path / "lib", k=3, cache=False)


@pytest.mark.slow
def test_a_clip_that_hangs_its_decoder_is_stopped_and_the_scan_goes_on(tmp_path, fake_extractor, monkeypatch):
    _library(tmp_path / "lib")
    stuck = write_clip(tmp_path / "lib" / "stuck.mp4", pan(GREEN))
    monkeypatch.setattr(pillow, "ProcessDecoder", StallingDecoder)  # what the "auto" decoder builds
    failed: list[tuple[Path, str]] = []
    # 16 files: fewer than a pool is started for, but a clip is always decoded in one, under the limit
    result = novelfind.scan(
        tmp_path / "lib", k=3, cache=False, decode_timeout=8.0, on_failure=lambda p, r: failed.append((p, r))
    )
    assert failed == [(stuck, "decoding took longer than 8 s; stopped")]
    assert len(result.files) == 15


# --------------------------------------------------------------------------- clips in the outputs


def test_every_output_knows_a_clip(tmp_path, fake_extractor):
    """The list, JSON, the HTML report and the contact sheet (a poster at the moment, marked), --copy-to,
    the XMP sidecar as digiKam and darktable name it, and the ignore list (by content)."""
    clips = _library(tmp_path / "lib")
    out = tmp_path / "out"
    args = [
        "scan",
        str(tmp_path / "lib"),
        "--k",
        "2",
        "--no-cache",
        "--format",
        "json",
        "--report",
        str(out / "r.html"),
        "--contact-sheet",
        str(out / "sheet.png"),
        "--copy-to",
        str(out / "picks"),
        "--xmp",
        "--ignore-file",
        str(tmp_path / "ignored.json"),
    ]
    out.mkdir()
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "12 photos and 3 clips (15 files) found, 0 read from cache, 15 extracted" in result.stderr
    doc = json.loads(result.stdout)
    assert (doc["run"]["photos_found"], doc["run"]["clips_found"]) == (15, 3)
    first = doc["picks"][0]
    assert (first["path"], first["kind"]) == (str(clips["moment"]), "clip")
    assert 1.0 <= first["clip"]["moment"] < 1.5 and first["clip"]["duration"] == pytest.approx(3.0, abs=0.05)
    assert first["clip"]["moment"] in first["clip"]["frame_times"]
    html = (out / "r.html").read_text()
    assert html.count("▶ clip, moment at 0:01") == 1 and "cannot read" not in html
    card = html.split('id="pick-1"')[1].split("</section>")[0]  # the clip's: its frames' size, not "?"
    assert "<dt>dimensions</dt><dd>96 × 64</dd>" in card
    # the contact sheet shows the clip's red moment, not its blue start
    sheet = np.asarray(Image.open(out / "sheet.png").convert("RGB"), np.int32)
    cell = sheet[8:200, 8:200].reshape(-1, 3).mean(axis=0)
    assert cell[0] > cell[2], cell
    assert (out / "picks" / "001_moment.mp4").read_bytes() == clips["moment"].read_bytes()
    sidecar = clips["moment"].with_name("moment.mp4.xmp")
    assert sidecar.exists() and b"novel" in sidecar.read_bytes()
    # on the ignore list by content: moved and renamed, it is still never picked
    novelfind.IgnoreList(tmp_path / "ignored.json").add([clips["moment"]])
    moved = clips["moment"].rename(tmp_path / "lib" / "clips" / "renamed.MOV")
    later = novelfind.scan(tmp_path / "lib", k=3, cache=False, ignore_file=tmp_path / "ignored.json")
    assert moved not in {p.path for p in later.picks} and later.counts.ignored == 1


def test_a_clip_s_record_is_kept_where_its_frames_were_encoded(tmp_path):
    """``ClipBook.keep``: a clip whose vector was made elsewhere (a cluster's worker) has its record kept
    for the result and queued for the store, as ``take`` does for one made here."""
    clips = _library(tmp_path / "lib")
    files = FileList(walk([tmp_path / "lib"]))
    book = video.ClipBook(files)
    i = next(j for j in book.rows if files[j].path == clips["moment"])
    info = video.ClipInfo(3.0, (0.5, 1.5, 2.5), 1, video.RULE)
    book.keep(i, "d-v", info)
    assert book.infos[i] == info and book.pending == [("d-v", video.info_to_text(info))]
    assert book.result(None, np.arange(len(files)))[clips["moment"]] == info


# --------------------------------------------------------------------------- fuzzing


@pytest.mark.slow
def test_hundreds_of_damaged_clips_decode_or_give_a_one_line_reason(tmp_path):
    """tests/support/clipfuzz.py in its own process (a crash or a hang in FFmpeg ends that process,
    not the tests)."""
    import collections
    import subprocess
    import sys

    runner = Path(__file__).resolve().parents[1] / "support" / "clipfuzz.py"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[2]), str(runner.parent)]),
    )
    rows = []
    for seed in (101, 202):
        proc = subprocess.run(
            [
                sys.executable,
                str(runner),
                "--seed",
                str(seed),
                "--cases",
                str(sized(150, 250)),
                "--workdir",
                str(tmp_path / str(seed)),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=1800,
        )
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        assert proc.returncode == 0 and lines and lines[-1] == {"done": True}, (
            f"FFmpeg crashed or hung after case {lines[-1] if lines else None}: {proc.stderr[-2000:]}"
        )
        rows += lines[:-1]
    assert [r for r in rows if r["fault"]] == []
    outcomes = collections.Counter((r["seed"], r["outcome"]) for r in rows)
    for clip in ("h264.mp4", "portrait.mov", "hevc10.mp4", "ffv1.mkv"):
        assert outcomes[(clip, "decoded")] >= 5 and outcomes[(clip, "reason")] >= 5, outcomes
    assert len({r["reason"] for r in rows if r["reason"]}) >= 4


def test_a_moved_clip_is_not_given_a_vector_of_another_rule(tmp_path, monkeypatch):
    clips = _library(tmp_path / "lib")
    extractor = FakeExtractor()
    notes: list[str] = []
    with FeatureCache(tmp_path / "c.sqlite", extractor.model_key) as cache:
        extract(FileList(walk([tmp_path / "lib"])), extractor, cache, workers=0)
        monkeypatch.setattr(video, "RULE", "another-rule/1")
        moved = clips["moment"].rename(tmp_path / "lib" / "renamed.mp4")
        files = FileList(walk([tmp_path / "lib"]))
        got = extract(files, extractor, cache, workers=0, on_warning=notes.append)
    assert (got.from_cache, got.extracted) == (12, 3)  # the moved clip too, found by its bytes
    assert notes == [video.stale_note(2)]  # the two found by their path
    assert got.clips[moved].rule == "another-rule/1"


def test_a_clip_record_out_of_range_is_not_used():
    good = video.ClipInfo(12.0, (0.0, 3.0, 6.0), 1, video.RULE)
    assert video.info_from_text(video.info_to_text(good)) == good
    for bad in (
        '{"rule": "r", "duration": NaN, "times": [0.0], "moment": 0}',
        '{"rule": "r", "duration": 1.0, "times": [-1.0], "moment": 0}',
        '{"rule": "r", "duration": 1e400, "times": [0.0], "moment": 0}',
        '{"rule": "r", "duration": 1.0, "times": [0.0], "moment": 1}',
        '{"rule": "r", "duration": 1.0, "times": 5, "moment": 0}',
        "[1, 2]",
        "not json",
    ):
        assert video.info_from_text(bad) is None, bad


def test_a_clip_not_as_ranked_is_refused_before_ffmpeg_reads_it(tmp_path):
    """The report's frame and the ignore list's digest read a clip as it was ranked: another size or
    time, or a link renamed over it, is the library door's refusal (``FileRefused``), not a bad clip."""
    from novelfind.errors import FileRefused
    from novelfind.media.video import clip_digest, poster

    clip = write_clip(tmp_path / "a.mp4", pan((200, 40, 40), n=6))
    st = clip.stat()
    listed = (st.st_size, st.st_mtime_ns)
    assert poster(clip, 0.0, expect=listed)[0].size[0] > 0
    assert clip_digest(clip, expect=listed) == clip_digest(clip)
    with pytest.raises(FileRefused, match="changed since it was listed"):
        poster(clip, 0.0, expect=(st.st_size + 1, st.st_mtime_ns))
    with pytest.raises(FileRefused, match="changed since it was listed"):
        clip_digest(clip, expect=(st.st_size, st.st_mtime_ns + 1))
    link = tmp_path / "link.mp4"
    link.symlink_to(clip)
    with pytest.raises(FileRefused, match="symbolic link"):
        poster(link, 0.0)
