"""A decode that runs past its time limit is stopped, reported, and the scan goes on.

The stalling decoder (tests/stalling.py) sleeps in its worker on files named "stuck"; the limit is
a few seconds here. Nothing below bounds how long anything takes: a missing limit shows as a wrong
reason (the stalled worker wakes up after two minutes and says so), not as a slow test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import make_photo
from stalling import NOT_STOPPED, SLOW_S, StallingDecoder

import novelfind
from novelfind import pipeline
from novelfind.cli import cli
from novelfind.pipeline import ProcessDecoder, decode_file

LIMIT_S = 8.0  # far above a test photo's decode (milliseconds) and SLOW_S, even on a busy machine
STOPPED = f"decoding took longer than {LIMIT_S:g} s; stopped"


def _photos(root: Path, names: list[str]) -> list[str]:
    return [str(make_photo(root / n, (40 + 7 * i, 90, 200 - 5 * i), seed=i, size=(64, 48)))
            for i, n in enumerate(names)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "workers, names",
    [
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
            assert pipeline._gone(pid), f"the worker stuck on {name} still runs"  # exited (a zombie counts)
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
    decoder = pipeline.load(pipeline.DECODERS["pillow"])(workers=2, window=4)
    assert isinstance(decoder, ProcessDecoder) and decoder.timeout == pipeline.DECODE_TIMEOUT_S > 0


@pytest.mark.slow
def test_a_scan_reports_the_stuck_photo_and_ranks_the_rest(tmp_path, fake_extractor, monkeypatch):
    root = tmp_path / "photos"
    ordinary = _photos(root, [f"IMG_{i:02d}.png" for i in range(12)])
    stuck = _photos(root / "sub", ["stuck.png"])[0]
    monkeypatch.setattr(pipeline, "ProcessDecoder", StallingDecoder)  # what the "auto" decoder builds
    cache = tmp_path / "c.sqlite"
    args = ["scan", str(root), "--k", "20", "--workers", "2", "--cache", str(cache), "--format", "members",
            "--decode-timeout", str(LIMIT_S)]
    for _ in range(2):  # the stuck photo is not cached: the next scan tries it again, with the same result
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 3, result.output  # 3: some photos could not be read
        assert result.stderr.splitlines().count(f"warning: cannot read {stuck}: {STOPPED}") == 1
        assert sorted(result.stdout.splitlines()) == sorted(ordinary)


@pytest.mark.parametrize("decoder", ["auto", "pillow"])
@pytest.mark.parametrize(("options", "limit"), [({}, 120.0), ({"decode_timeout": 7.5}, 7.5)])
def test_decode_timeout_reaches_the_decoding_processes(library, fake_extractor, monkeypatch, decoder, options,
                                                       limit):
    made = []

    class Recording(ProcessDecoder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self.timeout)

    monkeypatch.setattr(pipeline, "ProcessDecoder", Recording)
    novelfind.scan(library["root"], 2, workers=2, decoder=decoder, cache=False, **options)
    assert made == [limit]


def test_decode_timeout_must_be_positive(library, fake_extractor):
    with pytest.raises(novelfind.InputError, match=r"^decode_timeout must be greater than 0, got 0.0$"):
        novelfind.scan(library["root"], decode_timeout=0)
    result = CliRunner().invoke(cli, ["scan", str(library["root"]), "--decode-timeout", "0"])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "error: Invalid value for '--decode-timeout': 0.0 is not in the range x>0.\n"
    assert fake_extractor.images == 0
