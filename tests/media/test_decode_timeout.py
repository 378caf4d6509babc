"""A decode that runs past its time limit is stopped, reported, and the scan goes on: in a scan of
many photos or a few, with ``--workers 0``, and in the thumbnails of the report and the contact sheet.

The stalling decoders (tests/support/stalling.py) sleep in their workers on files named "stuck"; the limit is
a few seconds here. Nothing below bounds how long anything takes: a missing limit shows as a wrong
reason (the stalled worker wakes up after two minutes and says so), not as a slow test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from common import make_photo
from PIL import Image
from stalling import NOT_STOPPED, SLOW_S, WOKE_UP, StallingDecoder, StallingThumbnails

import novelfind
from novelfind.cli.group import cli
from novelfind.extract import decoders, stage
from novelfind.extract.decoders import pillow
from novelfind.extract.decoders.pillow import ProcessDecoder
from novelfind.extract.engines import local
from novelfind.extract.stage import decode_file
from novelfind.media import decode
from novelfind.outputs import thumbnails

LIMIT_S = 8.0  # far above a test photo's decode (milliseconds) and SLOW_S, even on a busy machine
STOPPED = f"decoding took longer than {LIMIT_S:g} s; stopped"


def _photos(root: Path, names: list[str]) -> list[str]:
    return [
        str(make_photo(root / n, (40 + 7 * i, 90, 200 - 5 * i), seed=i, size=(64, 48)))
        for i, n in enumerate(names)
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers, names",
    [
        (0, ["a.png", "stuck.png", "b.png"]),  # 0: one worker, never this process (it cannot be stopped)
        (1, ["a.png", "stuck.png", "b.png"]),  # the only worker is the stuck one
        # first, two side by side (both workers stuck), last
        (2, ["stuck_1.png", "a.png", "b.png", "stuck_2.png", "stuck_3.png", "c.png", "d.png", "stuck_4.png"]),
    ],
)
def test_a_stuck_decode_is_stopped_and_the_others_are_decoded(tmp_path, workers, names):
    paths = _photos(tmp_path, names)
    decoder = StallingDecoder(workers=workers, window=4, timeout=LIMIT_S)
    try:
        results = list(decoder.decode(paths))
    finally:
        decoder.terminate()
    assert [i for i, _ in results] == list(range(len(paths)))  # every file once, in input order
    for (i, got), name in zip(results, names, strict=True):
        if "stuck" in name:
            assert got.digest is None and got.reason == STOPPED, name
            assert got.reason != NOT_STOPPED
            pid = int(Path(paths[i] + ".pid").read_text())
            assert pillow._gone(pid), f"the worker stuck on {name} still runs"  # exited (a zombie counts)
        else:
            want = decode_file(paths[i], frozenset())
            assert got.digest == want.digest and np.array_equal(got.pixels, want.pixels), name


@pytest.mark.slow
def test_the_limit_counts_from_when_a_worker_takes_the_file(tmp_path):
    # One worker, n files that each take SLOW_S: the last waits n x SLOW_S in the queue, more than the
    # limit; only the time a worker spends on a file counts, so none is stopped.
    n = 10
    paths = _photos(tmp_path, [f"slow_{i}.png" for i in range(n)])
    assert n * SLOW_S > LIMIT_S
    decoder = StallingDecoder(workers=1, window=n, timeout=LIMIT_S)
    try:
        results = list(decoder.decode(paths))
    finally:
        decoder.terminate()
    assert [r.reason for _, r in results] == [None] * n
    assert [r.digest for _, r in results] == [decode_file(p, frozenset()).digest for p in paths]


def test_the_default_limit_applies_to_the_pillow_decoder():
    decoder = stage.load(decoders.DECODERS["pillow"])(workers=2, window=4)
    assert isinstance(decoder, ProcessDecoder) and decoder.timeout == pillow.DECODE_TIMEOUT_S > 0


@pytest.mark.slow
def test_a_scan_reports_the_stuck_photo_and_ranks_the_rest(tmp_path, fake_extractor, monkeypatch):
    root = tmp_path / "photos"
    ordinary = _photos(root, [f"IMG_{i:02d}.png" for i in range(12)])
    stuck = _photos(root / "sub", ["stuck.png"])[0]
    monkeypatch.setattr(pillow, "ProcessDecoder", StallingDecoder)  # what the "auto" decoder builds
    cache = tmp_path / "c.sqlite"
    args = [
        "scan",
        str(root),
        "--k",
        "20",
        "--workers",
        "2",
        "--cache",
        str(cache),
        "--format",
        "members",
        "--decode-timeout",
        str(LIMIT_S),
    ]
    # the stuck photo is not cached: the next scan tries it again, with the same result, which it then
    # counts as a known failure (reported by the first scan; exit code 0)
    for code, told in ((3, 1), (0, 0)):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == code, result.output  # 3: some photos could not be read
        assert result.stderr.splitlines().count(f"warning: cannot read {stuck}: {STOPPED}") == told
        assert sorted(result.stdout.splitlines()) == sorted(ordinary)
    assert ", 0 failed, 1 known unreadable" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["--workers", "0"]], ids=["a few photos", "workers 0"])
def test_a_small_scan_stops_a_stuck_decode(tmp_path, fake_extractor, monkeypatch, workers):
    root = tmp_path / "photos"
    paths = _photos(root, ["IMG_0.png", "IMG_1.png", "stuck.png", "IMG_2.png", "IMG_3.png"])
    assert len(paths) < local.POOL_THRESHOLD  # the scan's own choice: one decode process, not a pool
    monkeypatch.setattr(pillow, "ProcessDecoder", StallingDecoder)
    args = [
        "scan",
        str(root),
        "--k",
        "20",
        "--cache",
        str(tmp_path / "c.sqlite"),
        "--format",
        "members",
        "--decode-timeout",
        str(LIMIT_S),
        *workers,
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 3, result.output
    stuck = paths.pop(2)
    assert result.stderr.splitlines().count(f"warning: cannot read {stuck}: {STOPPED}") == 1
    assert sorted(result.stdout.splitlines()) == sorted(paths)
    assert pillow._gone(int(Path(stuck + ".pid").read_text()))


@pytest.mark.slow
def test_the_report_and_the_contact_sheet_stop_a_stuck_thumbnail(tmp_path, fake_extractor, monkeypatch):
    # The photos decode as usual for the scan; only the thumbnails of "stuck.png" stall.
    root = tmp_path / "photos"
    paths = _photos(root, ["a.png", "b.png", "stuck.png"])
    monkeypatch.setattr(thumbnails, "ThumbnailDecoder", StallingThumbnails)
    report, sheet = tmp_path / "r.html", tmp_path / "s.png"
    args = [
        "scan",
        str(root),
        "--k",
        "3",
        "--dedup",
        "0",
        "--cache",
        str(tmp_path / "c.sqlite"),
        "--format",
        "paths",
        "--decode-timeout",
        str(LIMIT_S),
        "--report",
        str(report),
        "--contact-sheet",
        str(sheet),
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert sorted(result.stdout.splitlines()) == sorted(paths)
    html = report.read_text()
    cards = {
        card.split('<p class="path">')[1].split("</p>")[0]: card.split('<div class="meta">')[0]
        for card in html.split('<section class="pick"')[1:]
    }
    assert sorted(cards) == sorted(paths)
    for path, card in cards.items():  # the stuck pick's thumbnail is the placeholder, the others a photo
        assert ("cannot read image" in card) == ("stuck" in path), card
        assert ("<img" in card) != ("stuck" in path), card
    pixels = np.asarray(Image.open(sheet).convert("RGB")).reshape(-1, 3)
    assert not np.all(pixels == WOKE_UP, axis=1).any()  # no thumbnail from a worker the limit let run
    assert pillow._gone(int(Path(paths[2] + ".pid").read_text()))


@pytest.mark.parametrize("decoder", ["auto", "pillow"])
@pytest.mark.parametrize(("options", "limit"), [({}, 120.0), ({"decode_timeout": 7.5}, 7.5)])
def test_decode_timeout_reaches_the_decoding_processes(
    library, fake_extractor, monkeypatch, decoder, options, limit
):
    made = []

    class Recording(ProcessDecoder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self.timeout)

    monkeypatch.setattr(pillow, "ProcessDecoder", Recording)
    novelfind.scan(library["root"], 2, workers=2, decoder=decoder, cache=False, **options)
    assert made == [limit]


def test_decode_timeout_must_be_positive(library, fake_extractor):
    with pytest.raises(novelfind.InputError, match=r"^decode_timeout must be greater than 0, got 0.0$"):
        novelfind.scan(library["root"], decode_timeout=0)
    result = CliRunner().invoke(cli, ["scan", str(library["root"]), "--decode-timeout", "0"])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "error: Invalid value for '--decode-timeout': 0.0 is not in the range x>0.\n"
    assert fake_extractor.images == 0


@pytest.mark.parametrize(("budget", "processes"), [(500, 1), (250, 3), (100, 9), (2000, 1)])
def test_the_thumbnail_processes_fit_the_decode_budget(monkeypatch, budget, processes):
    # Half the memory holds 1,000 pixels here; the scanning process keeps one budget's share of it.
    monkeypatch.setattr(decode, "_shared_pixels", lambda: 1000.0)
    with decode.pixel_budget_of(budget):
        assert decode.decode_processes_within_budget() == processes
    assert decode.default_pixel_budget(3) == 250  # three workers and the scanning process: (250, 3)


@pytest.mark.slow
def test_a_photo_decoded_again_for_its_pixels_is_held_to_the_limit(tmp_path):
    # Known digests are skipped by the workers; a photo whose cached vector vanished during the scan is
    # decoded again for its pixels (stage.Stage.run) in a decode process too, where a stuck one is stopped.
    paths = _photos(tmp_path, ["a.png", "stuck.png"])
    known = frozenset(decode.file_digest(Path(p).read_bytes()) for p in paths)
    decoder = StallingDecoder(workers=1, window=4, known=known, timeout=LIMIT_S)
    try:
        assert [r.pixels for _, r in decoder.decode(paths[:1])] == [None]  # known: not decoded
        results = list(decoder.decode_again(paths))
    finally:
        decoder.terminate()
    assert [i for i, _ in results] == [0, 1]
    (_, again), (_, stuck) = results
    want = decode_file(paths[0], frozenset())
    assert again.digest == want.digest and np.array_equal(again.pixels, want.pixels)
    assert stuck.digest is None and stuck.reason == STOPPED
    assert pillow._gone(int(Path(paths[1] + ".pid").read_text()))
