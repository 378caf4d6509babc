"""The decoded-pixels budget (``--max-decode-pixels``) holds for clips and for anything named like one, and a
decode process cannot grow past its memory share (docs/security.md, "Clips").

Clips that claim 16000 x 16000 frames are made small (tests/support/clips.py: a PNG header that claims them, a
few rows of data): a decoder sizes its frame by the claim before it finds the data short, so the memory they
cost without the budget is the claim's (0.77 GB in a fresh process), at no cost to make. Memory is checked as
a fresh process's peak RSS.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from clips import claiming_png, flat, pan, write_clip, write_png_clip, write_two_stream_clip
from common import make_photo

from novelfind.cli.group import cli
from novelfind.extract.decoders.pillow import ProcessDecoder
from novelfind.extract.stage import Decoded, decode_file, guarded
from novelfind.media import decode

pytest.importorskip("av")

HUGE = (16000, 16000)
BUDGET = 1_000_000  # pixels: a 96 x 64 clip fits, a 16000 x 16000 frame does not
ROOT = Path(__file__).resolve().parents[2]
ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}  # this tree's novelfind in a fresh process


def hostile_clips(folder: Path) -> dict[str, Path]:
    return {
        "claims": write_png_clip(folder / "claims.mov", HUGE, claiming_png(*HUGE)),  # says so in its stream
        "lies": write_png_clip(folder / "lies.mov", (64, 64), claiming_png(*HUGE)),  # says 64 x 64
        "still": _written(folder / "clip.mp4", claiming_png(*HUGE)),  # a PNG named like a clip
    }


def _written(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


_PEAK = """
import json, resource, sys
from novelfind.media import decode
from novelfind.extract.stage import decode_file
from novelfind.extract.dating import embedded_date
if sys.argv[2] != "default":
    decode.set_pixel_budget(int(sys.argv[2]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if sys.argv[3] == "date":
    taken, reason = embedded_date(sys.argv[1]), None
else:
    got = decode_file(sys.argv[1], frozenset())
    taken, reason = got.taken, got.reason
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"reason": reason, "source": taken and taken.source, "grown_mb": grown / 1024}))
"""


def decoded_in_a_fresh_process(path: Path, budget: int | str, what: str = "decode") -> dict:
    """What ``decode_file`` (``what="date"``: ``embedded_date``) makes of ``path`` in a fresh process with
    the decoded-pixels ``budget``, and how much that process grew."""
    out = subprocess.run(
        [sys.executable, "-c", _PEAK, str(path), str(budget), what],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=ENV,
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", ["claims", "lies", "still"])
def test_a_clip_over_the_budget_is_refused_before_its_frames_are_decoded(tmp_path, name):
    path = hostile_clips(tmp_path)[name]
    got = decoded_in_a_fresh_process(path, BUDGET)
    assert got["reason"].startswith("refused:") and "max_decode_pixels" in got["reason"], got
    assert got["grown_mb"] < 100, got  # the claim costs 768 MB when decoded (below)


@pytest.mark.parametrize("what", ["decode", "date"])
def test_a_clip_s_date_is_read_within_the_budget(tmp_path, what):
    """The date's reading opens the clip as its decode does: a second stream that says 64 x 64 and holds
    16000 x 16000 frames, decoded while the file is opened, is refused there (0.75 GB without it)."""
    clip = write_two_stream_clip(
        tmp_path / "two.mov", claiming_png(*HUGE), creation_time="2024-05-01T10:00:00Z"
    )
    got = decoded_in_a_fresh_process(clip, BUDGET, what)
    assert got["reason"] is None and got["source"] == "clip", got  # its first stream is read, and its date
    assert got["grown_mb"] < 100, got


def test_clips_within_the_budget_decode_as_before(tmp_path):
    clip = write_clip(tmp_path / "ok.mp4", pan((220, 40, 40), n=10))
    with decode.pixel_budget_of(BUDGET):
        got = decode_file(str(clip), frozenset())
    assert got.reason is None and got.pixels.pixels.shape[1:] == (224, 224, 3)
    with decode.pixel_budget_of(96 * 64 - 1):  # one pixel short: refused, by the stream's size
        got = decode_file(str(clip), frozenset())
    assert got.reason == "refused: 96 x 64 pixels a frame, over the budget of 6143 (max_decode_pixels)"


def test_a_scan_names_each_refused_clip_and_ranks_the_rest(tmp_path, fake_extractor):
    root = tmp_path / "lib"
    clips = hostile_clips(root)
    write_clip(root / "fine.mp4", [flat((40, 200, 60))] * 5)
    for i in range(4):
        make_photo(root / f"IMG_{i}.jpg", (40 + 50 * i, 90, 200 - 40 * i), seed=i, size=(64, 48))
    args = ["scan", root, "--k", 5, "--format", "paths", "--max-decode-pixels", BUDGET]
    args += ["--cache", tmp_path / "c.sqlite"]
    result = CliRunner().invoke(cli, [str(a) for a in args])
    assert result.exit_code == 3, result.stderr
    refused = [line for line in result.stderr.splitlines() if "refused" in line]
    assert sorted(Path(p).name for p in clips.values() if any(str(p) in line for line in refused)) == sorted(
        p.name for p in clips.values()
    )
    assert len(refused) == 3
    assert len(result.stdout.splitlines()) == 5 and "fine.mp4" in result.stdout


# --------------------------------------------------------------------------- decode processes' address space

GREEDY = "greedy"


def allocate_or_decode(path: str) -> Decoded:
    """A decoder that, for a file named "greedy", asks for far more than a decode process's share (address
    space only: numpy's zeros are not touched, so without a limit this costs nothing and succeeds)."""
    if GREEDY in path:
        share = decode.decode_memory_share(1) + decode.ADDRESS_SPACE_HEADROOM
        return guarded(lambda: ("greedy", np.zeros(share + (4 << 30), np.uint8)))
    return decode_file(path)


class GreedyDecoder(ProcessDecoder):
    decode_one = staticmethod(allocate_or_decode)


def test_a_decode_past_the_process_share_fails_alone_and_normal_decodes_go_on(tmp_path):
    photo = make_photo(tmp_path / "a.jpg", (200, 40, 40), seed=1, size=(640, 480))
    clip = write_clip(tmp_path / "b.mp4", pan((40, 60, 200), n=10))
    greedy = _written(tmp_path / f"{GREEDY}.png", b"")
    decoder = GreedyDecoder(workers=1, window=4)
    try:
        results = dict(decoder.decode([str(photo), str(greedy), str(clip), str(photo)]))
    finally:
        decoder.terminate()
    assert results[1].digest is None and results[1].reason == "out of memory while decoding"
    for i in (0, 2, 3):
        assert results[i].reason is None and results[i].pixels is not None, results[i].reason


def test_the_address_space_limit_is_the_baseline_plus_the_share(tmp_path):
    script = (
        "import resource; from novelfind.media import decode; "
        "base = decode._address_space(); limit = decode.limit_address_space(1 << 30); "
        "print(base, limit, resource.getrlimit(resource.RLIMIT_AS)[0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT, env=ENV
    )
    base, limit, applied = map(int, out.stdout.split())
    assert limit == applied == base + (1 << 30) + decode.ADDRESS_SPACE_HEADROOM
