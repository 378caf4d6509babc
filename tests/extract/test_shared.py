"""shared.SharedDecoder and the "both" decoder on the CPU: two decoders fed from one queue, a stand-in
taking the GPU's place. Same results in the same order as one decoder, failures reported once, both sides
taking work, a failing side's files decoded by the other, Ctrl-C and close leaving nothing running."""

from __future__ import annotations

import multiprocessing
import sys
import threading

import numpy as np
import pytest
from stage_fakes import DictCache, MeanColour, make_library

from novelfind.extract import decoders, stage
from novelfind.extract.decoders import gpu as gpu_decode
from novelfind.extract.decoders.pillow import ProcessDecoder
from novelfind.extract.engines.local import extract
from novelfind.extract.shared import SharedDecoder
from novelfind.extract.stage import decode_file


class StandInGpu:
    """Takes the GPU decoder's place: decodes in the calling thread as the CPU path does (so results can
    be compared exactly). Its first claim waits until ``cpu_started`` is set, so that both sides take
    work; ``fail_on_call`` makes that call raise after yielding part of its claim."""

    stack = staticmethod(np.stack)

    def __init__(self, cpu_started: threading.Event | None = None, fail_on_call: int | None = None):
        self.cpu_started = cpu_started
        self.fail_on_call = fail_on_call
        self.calls = 0
        self.terminated = self.closed = False

    def decode(self, paths):
        self.calls += 1
        if self.calls == 1 and self.cpu_started is not None:
            self.cpu_started.wait(timeout=60)
        for i, p in enumerate(paths):
            if self.fail_on_call == self.calls and i == len(paths) // 2:
                raise RuntimeError("device lost")
            yield i, decode_file(p, frozenset())

    def terminate(self):
        self.terminated = True

    def close(self):
        self.closed = True


class SignallingCpu(ProcessDecoder):
    """ProcessDecoder that sets an event when it takes its first claim."""

    def __init__(self, *args, started: threading.Event, **kwargs):
        super().__init__(*args, **kwargs)
        self.first_claim = started

    def decode(self, paths):
        self.first_claim.set()
        yield from super().decode(paths)


def shared(workers: int = 0, claim: int = 3, **gpu_kw) -> tuple[SharedDecoder, StandInGpu]:
    started = threading.Event()
    gpu = StandInGpu(started, **gpu_kw)
    cpu = SignallingCpu(workers, 8, started=started)
    warnings: list[str] = []
    dec = SharedDecoder(
        {"gpu": gpu, "cpu": cpu},
        claims={"gpu": claim, "cpu": claim},
        ahead=4 * claim,
        on_warning=warnings.append,
    )
    dec.warnings = warnings  # type: ignore[attr-defined]
    return dec, gpu


@pytest.mark.parametrize("workers", [0, 2])
def test_same_results_in_input_order_and_both_sides_take_work(tmp_path, workers):
    files = make_library(tmp_path, 23, bad=(4, 17))
    paths = [str(f.path) for f in files]
    dec, gpu = shared(workers)
    got = list(dec.decode(paths))
    dec.close()
    assert [i for i, _ in got] == list(range(len(paths)))
    want = [decode_file(p, frozenset()) for p in paths]
    for (_, g), w in zip(got, want, strict=True):
        assert (g.digest, g.reason) == (w.digest, w.reason)
        if w.pixels is not None:
            np.testing.assert_array_equal(g.pixels, w.pixels)
    assert dec.warnings == []
    assert dec.taken["gpu"] > 0 and dec.taken["cpu"] > 0
    assert dec.taken["gpu"] + dec.taken["cpu"] == len(paths)
    assert gpu.closed and not dec.threads
    assert not multiprocessing.active_children()


def test_extract_with_both_reports_each_failure_once(tmp_path, monkeypatch):
    files = make_library(tmp_path, 30, bad=(3, 11, 29))
    made: list[SharedDecoder] = []

    def both(workers, window, known, extractor, on_warning):
        dec, _ = shared(0, claim=4)
        made.append(dec)
        return dec

    monkeypatch.setitem(decoders.DECODERS, "stand-in-both", f"{__name__}:_factory")
    monkeypatch.setattr(sys.modules[__name__], "_factory", both)
    failed: list = []
    progress: list[int] = []
    res = extract(
        files,
        MeanColour(),
        DictCache(),
        batch_size=4,
        workers=0,
        decoder="stand-in-both",
        on_failure=lambda p, r: failed.append(p),
        on_progress=lambda d, n: progress.append(d),
    )
    alone = extract(files, MeanColour(), DictCache(), batch_size=4, workers=0, decoder="pillow")
    assert failed == [files[i].path for i in (3, 11, 29)]
    assert res.failures == alone.failures
    assert [f.path for f in res.files] == [f.path for f in alone.files]
    np.testing.assert_array_equal(res.features, alone.features)
    assert progress[-1] == len(files)
    assert made[0].taken["gpu"] > 0 and made[0].taken["cpu"] > 0


def test_a_failing_side_gives_its_claim_to_the_other(tmp_path):
    files = make_library(tmp_path, 20, bad=(6,))
    paths = [str(f.path) for f in files]
    dec, gpu = shared(0, claim=4, fail_on_call=2)
    got = list(dec.decode(paths))
    dec.close()
    assert [i for i, _ in got] == list(range(len(paths)))  # each file once, none lost
    assert [d.reason is not None for _, d in got] == [i == 6 for i in range(len(paths))]
    assert dec.warnings == ["gpu decoding stopped (RuntimeError: device lost); the other decoders go on"]
    assert gpu.calls == 2 and dec.taken["cpu"] == len(paths) - dec.taken["gpu"]


def test_when_every_side_fails_the_error_reaches_the_scan(tmp_path):
    files = make_library(tmp_path, 8)

    class Broken(StandInGpu):
        def decode(self, paths):
            raise OSError("gone")
            yield  # pragma: no cover

    dec = SharedDecoder({"a": Broken(), "b": Broken()}, claims={"a": 2, "b": 2}, ahead=8)
    with pytest.raises(OSError, match="gone"):
        list(dec.decode([str(f.path) for f in files]))
    dec.terminate()
    assert not dec.threads


def test_claims_stay_within_the_window(tmp_path):
    """A slow side holds back the order; the fast one claims no further than ``ahead`` files past it."""
    files = make_library(tmp_path, 40)
    paths = [str(f.path) for f in files]
    release = threading.Event()
    seen: list[tuple[int, int]] = []  # (start of a claim, files handed on so far)
    handed = [0]

    class Slow(StandInGpu):
        def decode(self, paths_):
            release.wait(timeout=60)
            yield from super().decode(paths_)

    class Fast(StandInGpu):
        def decode(self, paths_):
            seen.append((paths.index(paths_[0]), handed[0]))
            if len(seen) >= 3:  # as far as the window lets it run ahead of the slow side
                release.set()
            yield from super().decode(paths_)

    dec = SharedDecoder({"slow": Slow(), "fast": Fast()}, claims={"slow": 4, "fast": 4}, ahead=16)
    for _ in dec.decode(paths):
        handed[0] += 1
    dec.close()
    assert all(start + 4 <= handed_on + 16 for start, handed_on in seen)
    assert handed[0] == len(paths)


def test_interrupt_stops_both_sides_and_the_workers(tmp_path, monkeypatch):
    files = make_library(tmp_path, 32)
    cache = DictCache()
    made: list = []

    def both(workers, window, known, extractor, on_warning):
        dec, gpu = shared(2, claim=4)
        made.append((dec, gpu))
        return dec

    monkeypatch.setitem(decoders.DECODERS, "stand-in-both", f"{__name__}:_factory")
    monkeypatch.setattr(sys.modules[__name__], "_factory", both)
    with pytest.raises(KeyboardInterrupt):
        extract(
            files, MeanColour(interrupt_on_call=3), cache, batch_size=4, workers=2, decoder="stand-in-both"
        )
    dec, gpu = made[0]
    assert cache.transactions == [4, 4]
    assert gpu.terminated and not dec.threads
    assert not any(t.name.startswith("novelfind-") and t.is_alive() for t in threading.enumerate())
    assert not multiprocessing.active_children()


class OnCuda:
    device = "cuda"


def test_auto_on_cuda_shares_the_work_with_processes(tmp_path, monkeypatch):
    """The "auto" decoder on a CUDA model: the GPU decoder (Pillow standing in for nvImageCodec) and
    Pillow processes take files from one queue; the scan's results are the CPU path's, each failure once."""
    from gpu_fakes import MemoryCache, PillowBackend, TensorFake

    monkeypatch.setattr(gpu_decode, "library_installed", lambda: True)
    monkeypatch.setattr(
        gpu_decode, "open_gpu_decoder", lambda device, **kw: gpu_decode.GpuDecoder(PillowBackend())
    )
    made: list = []
    real = gpu_decode.both_decoder

    def both(*args, **kwargs):
        made.append(real(*args, **kwargs))
        made[-1].shared.claims = {"gpu": 4, "cpu": 4}  # small claims: many of them on a small library
        return made[-1]

    monkeypatch.setattr(gpu_decode, "both_decoder", both)
    files = make_library(tmp_path, 40, bad=(5, 33))
    model = TensorFake()
    model.device = "cuda"
    failed: list = []
    res = extract(
        files, model, MemoryCache(), batch_size=4, workers=3, on_failure=lambda p, r: failed.append(p)
    )
    alone = extract(files, TensorFake(), MemoryCache(), batch_size=4, workers=0, decoder="pillow")
    dec = made[0]
    assert isinstance(dec, gpu_decode.GpuFileDecoder) and dec.shared is not None
    assert dec.shared.decoders["cpu"].workers == 2
    assert failed == [files[5].path, files[33].path]
    assert res.failures == alone.failures
    np.testing.assert_allclose(res.features, alone.features, atol=2.5 / 255)
    assert (
        dec.shared.taken["gpu"] + dec.shared.taken["cpu"] == 40
        and dec.stats["cpu"] == dec.shared.taken["cpu"]
    )
    assert not multiprocessing.active_children()


def test_auto_without_workers_is_the_gpu_decoder_alone(monkeypatch):
    from gpu_fakes import PillowBackend

    monkeypatch.setattr(gpu_decode, "library_installed", lambda: True)
    monkeypatch.setattr(
        gpu_decode, "open_gpu_decoder", lambda device, **kw: gpu_decode.GpuDecoder(PillowBackend())
    )
    auto = stage.load(decoders.DECODERS["auto"])
    assert auto(workers=0, window=1, extractor=OnCuda()).shared is None
    alone = stage.load(decoders.DECODERS["gpu"])(workers=4, window=8, extractor=OnCuda())
    assert alone.shared is None
    shared_ = auto(workers=4, window=8, extractor=OnCuda())
    assert shared_.shared is not None and shared_.shared.decoders["cpu"].workers == 3
    shared_.close()


def test_empty_input_yields_nothing():
    dec = SharedDecoder({"a": StandInGpu()}, claims={"a": 4}, ahead=8)
    assert list(dec.decode([])) == []
    dec.close()


def _factory(*args, **kwargs):  # the decoder factory the tests register; each test sets it
    raise AssertionError("no factory set")
