"""scripts/bench_host.py on a few small JPEGs: the real pipeline with the stand-ins, every host stage
timed, the stand-in patches undone afterwards. (Its figures come from the script on 12 MP photos.)"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import bench_host  # noqa: E402

from novelfind.cache import FeatureCache  # noqa: E402
from novelfind.extract import decoders, stage  # noqa: E402
from novelfind.extract.decoders import gpu as gpu_decode  # noqa: E402


def test_host_run_times_every_stage_and_undoes_its_patches(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    for i in range(6):
        Image.fromarray(rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)).save(tmp_path / f"p{i}.jpg")
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    monkeypatch.setitem(decoders.DECODERS, "host-bench", "bench_host:StandInGpuDecoder")
    before = (gpu_decode.read_bytes, gpu_decode.file_digest, FeatureCache.put_many, stage.Stage._flush)
    run = bench_host.host_run(tmp_path, "host-bench", workers=2, batch_size=4, expect_failures=1)
    assert run["photos"] == 7 and run["extracted"] == 6
    for step in ("walk", "stat lookup", "read", "digest", "header check", "batching", "cache commit"):
        assert run["stage_cpu_ms_per_photo"][step] >= 0
    assert run["parallel_cpu_ms_per_photo"] > 0 and run["serial_cpu_ms_per_photo"] > 0
    after = (gpu_decode.read_bytes, gpu_decode.file_digest, FeatureCache.put_many, stage.Stage._flush)
    assert after == before
    assert bench_host.projected(run, 16) >= bench_host.projected(run, 2)
