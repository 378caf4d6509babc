"""The ``local`` engine: its argument checks, how many decode processes it asks for, and that the
decoder, the model's loading and the device's choice are asked only for the files the cache lacks.
(The extraction itself, file by file and batch by batch, is in tests/extract/test_stage.py.)"""

from __future__ import annotations

import os

import numpy as np
import pytest
from stage_fakes import DictCache, MeanColour, make_library, stat

from novelfind.base.devices import available_cpus
from novelfind.cache.failures import KnownFailure
from novelfind.extract.decoders.pillow import ProcessDecoder
from novelfind.extract.engines import local
from novelfind.extract.engines.local import POOL_THRESHOLD, default_workers, extract
from novelfind.extract.stage import RUN_FAILURES, guarded


class Recorded:
    """What ``extract`` asked the decoder for; the files are decoded in this process."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, **kwargs) -> ProcessDecoder:
        self.calls.append(kwargs)
        decoder = ProcessDecoder(kwargs["workers"], kwargs["window"], kwargs["known"])
        decoder.in_process = True
        return decoder


@pytest.fixture
def recorded(monkeypatch) -> Recorded:
    rec = Recorded()
    monkeypatch.setattr(local, "load", lambda name: rec)
    return rec


def test_default_workers_are_the_cpus_this_process_may_use():
    assert default_workers() == available_cpus() >= 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"workers": -1}, "workers must be >= 0, got -1"),
        ({"decoder": "nvjpeg"}, "unknown decoder 'nvjpeg'; choose from auto, pillow, gpu"),
    ],
)
def test_bad_arguments_are_refused_before_the_cache_is_asked(kwargs, message):
    cache = DictCache()
    with pytest.raises(ValueError) as err:
        extract([], MeanColour(), cache, **kwargs)
    assert str(err.value) == message
    assert cache.stat_calls == 0


def test_a_few_files_take_one_worker_and_many_one_per_core(tmp_path, recorded, monkeypatch):
    monkeypatch.setattr(local, "default_workers", lambda: 5)
    few = make_library(tmp_path / "few", POOL_THRESHOLD - 1)
    res = extract(few, MeanColour(), DictCache(), batch_size=4)
    assert res.extracted == POOL_THRESHOLD - 1
    many = make_library(tmp_path / "many", POOL_THRESHOLD)
    extract(many, MeanColour(), DictCache(), batch_size=4)
    assert [c["workers"] for c in recorded.calls] == [0, 5]
    assert [c["window"] for c in recorded.calls] == [8, 20]  # 2 batches, or 4 files a worker
    assert all("timeout" not in c for c in recorded.calls)  # the decoder's own default


def test_given_workers_and_time_limit_reach_the_decoder(tmp_path, recorded):
    files = make_library(tmp_path, 3)
    extract(files, MeanColour(), DictCache(), batch_size=2, workers=3, decode_timeout=7.5)
    (call,) = recorded.calls
    assert (call["workers"], call["window"], call["timeout"]) == (3, 12, 7.5)
    assert isinstance(call["extractor"], MeanColour) and call["known"] == frozenset()


class Settling(MeanColour):
    def __init__(self) -> None:
        super().__init__()
        self.settled: list[int] = []
        self.loading = 0

    def settle(self, photos: int) -> str:
        self.settled.append(photos)
        return "cpu"

    def start_loading(self) -> None:
        self.loading += 1


def test_the_device_is_settled_by_the_misses_and_a_full_cache_decodes_nothing(tmp_path, recorded):
    files = make_library(tmp_path, 6, bad=(2,))
    cache = DictCache()
    extract(files[:4], MeanColour(), cache, batch_size=4, workers=0)  # 3 cached, 1 failed
    model = Settling()
    res = extract(files, model, cache, batch_size=4, workers=0)
    assert model.settled == [3] and model.loading == 1  # the failed one and the two new ones
    assert (res.from_cache, res.extracted, len(res.failures)) == (3, 2, 1)
    calls = len(recorded.calls)
    again = Settling()
    res = extract([f for i, f in enumerate(files) if i != 2], again, cache, batch_size=4)
    assert again.settled == [0] and again.loading == 0 and len(recorded.calls) == calls
    assert (res.from_cache, res.extracted) == (5, 0)
    np.testing.assert_array_equal(res.features[:2], extract(files[:2], MeanColour(), cache).features)


class RecordedFailures(DictCache):
    """A cache with a record of unreadable files (``novelfind failures``), by absolute path."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: dict[bytes, KnownFailure] = {}

    def known_failures(self) -> dict[bytes, KnownFailure]:
        return dict(self.failures)

    def remember(self, f, reason: str) -> None:
        key = os.fsencode(os.path.abspath(f.path))
        self.failures[key] = KnownFailure(key, f.size, f.mtime_ns, reason, "2026-01-01T00:00:00+00:00")


def test_a_known_unreadable_file_is_neither_decoded_nor_a_reason_to_load_the_model(tmp_path, recorded):
    files = make_library(tmp_path, 4, bad=(2,))
    cache = RecordedFailures()
    first = extract(files, MeanColour(), cache, batch_size=4, workers=0)
    ((path, reason),) = first.failures
    cache.remember(files[2], reason)
    calls = len(recorded.calls)
    model, failed = Settling(), []
    again = extract(files, model, cache, batch_size=4, on_failure=lambda p, r: failed.append((p, r)))
    assert len(recorded.calls) == calls  # no decoder made: nothing decoded
    assert model.settled == [0] and model.loading == 0 and model.calls == 0
    assert again.failures == failed == [(path, reason)]  # failed again, with the recorded reason
    assert (again.from_cache, again.extracted, len(again.files)) == (3, 0, 3)


@pytest.mark.parametrize("change", ["touched", "run failure"])
def test_a_changed_file_or_one_failed_by_the_run_is_tried_again(tmp_path, recorded, change):
    files = make_library(tmp_path, 3, bad=(1,))
    cache = RecordedFailures()
    extract(files, MeanColour(), cache, batch_size=4, workers=0)
    if change == "touched":
        remembered = "cannot identify image file"
        cache.remember(files[1], remembered)
        os.utime(files[1].path, ns=(files[1].mtime_ns + 10**9, files[1].mtime_ns + 10**9))
        files[1] = stat(files[1].path)
    else:  # a busy machine, a tight memory budget: not the file's fault
        remembered = ProcessDecoder(1, 1, timeout=5)._too_slow().reason
        cache.remember(files[1], remembered)
    model = Settling()
    again = extract(files, model, cache, batch_size=4, workers=0)
    assert model.settled == [1] and model.loading == 1 and len(recorded.calls) == 2  # decoded again
    ((_, reason),) = again.failures
    assert reason != remembered  # this scan's own reason


def test_the_run_failures_are_the_decoders_own_reasons():
    assert ProcessDecoder(1, 1, timeout=5)._too_slow().reason.startswith(RUN_FAILURES)
    assert guarded(lambda: (_ for _ in ()).throw(MemoryError())).reason.startswith(RUN_FAILURES)
