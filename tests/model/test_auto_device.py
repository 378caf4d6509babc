"""``--device auto`` is never the slower choice: CUDA only for work large enough to pay its start-up.

CUDA's presence is monkeypatched (``devices.cuda_available``); the models on either side are stand-ins
where the point is which one runs."""

from __future__ import annotations

import numpy as np
import pytest
from stage_fakes import DictCache, MeanColour, make_library

from novelfind.base import devices
from novelfind.base.devices import auto_cuda_min_photos, resolve_device
from novelfind.extract.engines.local import extract
from novelfind.model import features
from novelfind.model.features import AutoDeviceExtractor, build_extractor


def test_threshold_follows_the_start_up_and_the_rates():
    # 16 cores: 240 photos/s on the CPU against 300 on the GPU path; 9.3 s more start-up on CUDA
    assert auto_cuda_min_photos(16) == 11160  # 9.3 / (1/240 - 1/300)
    assert auto_cuda_min_photos(4) == 698  # 9.3 / (1/60 - 1/300) = 697.5
    assert auto_cuda_min_photos(20) is None  # the CPU decoders alone match the GPU path: never CUDA


@pytest.mark.parametrize("cuda", [True, False])
def test_auto_takes_cuda_only_from_the_threshold_on(monkeypatch, cuda):
    monkeypatch.setattr(devices, "cuda_available", lambda: cuda)
    monkeypatch.setattr(devices, "available_cpus", lambda: 4)
    least = auto_cuda_min_photos()
    assert least == 698
    assert resolve_device("auto", least - 1) == "cpu"
    assert resolve_device("auto", least) == ("cuda" if cuda else "cpu")
    assert resolve_device("auto") == ("cuda" if cuda else "cpu")  # the work unknown: as before
    assert resolve_device("cuda", 1) == "cuda" and resolve_device("cpu", 10**9) == "cpu"


def test_build_extractor_defers_the_choice_to_the_scan(monkeypatch):
    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    monkeypatch.setattr(devices, "available_cpus", lambda: 4)
    ex = build_extractor(device="auto", backend="torch")
    assert isinstance(ex, AutoDeviceExtractor)
    assert ex.model_key == build_extractor(device="cpu", backend="torch").model_key
    assert ex.device == "cuda"  # unsettled: as before
    assert ex.settle(697) == "cpu" and ex.device == "cpu"
    ex = build_extractor(device="auto", backend="torch")
    assert ex.settle(698) == "cuda"
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    ex = build_extractor(device="auto", backend="torch")
    assert ex.device == "cpu"  # unsettled, without CUDA: the CPU
    assert build_extractor(device="auto", backend="torch").settle(10**6) == "cpu"


def test_auto_asks_for_cuda_only_when_the_work_could_use_it(monkeypatch):
    """Asking torch for CUDA imports it (seconds, hundreds of MB): a scan with nothing or little to
    extract settles on the CPU without asking."""
    asked: list[int] = []

    def cuda_available() -> bool:
        asked.append(1)
        return True

    monkeypatch.setattr(devices, "cuda_available", cuda_available)
    monkeypatch.setattr(devices, "available_cpus", lambda: 4)
    ex = build_extractor(device="auto")  # building it asks nothing
    assert isinstance(ex, AutoDeviceExtractor) and asked == []
    assert ex.settle(0) == "cpu" and asked == []  # a re-scan with nothing new
    assert resolve_device("auto", 697) == "cpu" and asked == []
    assert resolve_device("auto", 698) == "cuda" and len(asked) == 1
    assert build_extractor(device="auto", backend="onnx").backend == "onnx"  # ONNX runs on the CPU only
    assert len(asked) == 1


class Recording(MeanColour):
    def __init__(self, device: str):
        super().__init__()
        self.device = device


def test_a_small_scan_stays_on_the_cpu_and_a_large_one_takes_cuda(tmp_path, monkeypatch):
    """The pipeline settles the device once the cache has been asked: by the photos the model will see."""
    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    monkeypatch.setattr(devices, "auto_cuda_min_photos", lambda cpus=None: 6)
    files = make_library(tmp_path, 10)

    def scan(subset):
        cache = DictCache()
        extract(files[:4], MeanColour(), cache, batch_size=4, workers=0)  # 4 in the cache already
        cpu, cuda = Recording("cpu"), Recording("cuda")
        ex = AutoDeviceExtractor(cpu, cuda)
        res = extract(subset, ex, cache, batch_size=4, workers=0)
        return ex, cpu, cuda, res

    ex, cpu, cuda, res = scan(files[:9])  # 5 to extract: below the threshold
    assert ex.device == "cpu" and (cpu.images, cuda.images) == (5, 0)
    assert res.extracted == 5
    ex, cpu, cuda, res = scan(files)  # 6 to extract: at the threshold
    assert ex.device == "cuda" and (cpu.images, cuda.images) == (0, 6)
    np.testing.assert_allclose(res.features[4:], MeanColour()(np.stack([_pixels(f) for f in files[4:]])))


def _pixels(f):
    from novelfind.extract.stage import decode_file

    return decode_file(str(f.path), frozenset()).pixels


class Loading(MeanColour):
    """Records when its model was asked to start loading, relative to the decoder's construction."""

    def __init__(self, events: list[str]):
        super().__init__()
        self.events = events

    def start_loading(self):
        self.events.append("load")


def test_the_model_loads_while_the_decoders_start_and_only_for_misses(tmp_path, monkeypatch):
    from novelfind.extract.decoders import pillow

    files = make_library(tmp_path, 6)
    events: list[str] = []
    real = pillow.ProcessDecoder.__init__

    def init(self, *args, **kwargs):
        events.append("decoder")
        real(self, *args, **kwargs)

    monkeypatch.setattr(pillow.ProcessDecoder, "__init__", init)
    cache = DictCache()
    extract(files, Loading(events), cache, batch_size=4, workers=0, decoder="pillow")
    assert events == ["load", "decoder"]
    events.clear()
    extract(files, Loading(events), cache, batch_size=4, workers=0, decoder="pillow")  # all cached
    assert events == []


def test_a_model_that_fails_to_load_in_the_background_fails_at_its_first_call(tmp_path):
    ex = features.TorchExtractor(tmp_path / "missing.pth")
    ex.start_loading().join(timeout=120)
    with pytest.raises(Exception, match="missing.pth|No such file"):
        ex(np.zeros((1, 224, 224, 3), np.uint8))
