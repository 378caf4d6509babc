"""Where the model and the solver run: the one reading of a device name (``resolve_device``), and when
``auto`` takes CUDA (``auto_cuda_min_photos``). torch is imported only to ask for CUDA, and only when the
answer matters: importing it costs ~2.6 s and ~300 MB, more than a whole re-scan of cached photos."""

from __future__ import annotations

import math
import os

DEVICES = ("auto", "cpu", "cuda")  # "cuda:N" is accepted too

# When ``--device auto`` takes CUDA. A scan on CUDA starts slower (CUDA context, cuDNN autotuning, the GPU
# JPEG decoder's start-up check) and then extracts faster, so CUDA pays only past a number of photos:
# start-up excess / (CPU s per photo - GPU s per photo). Figures from the H200 run (docs/bench/gpu-h200/,
# 12 MP JPEGs, 16 cores): `novelfind scan` of 192 photos took 16.13 s on CUDA against 7.04 s on the CPU;
# the GPU path extracts 293-310 photos/s, the CPU decoders 239/s (15 a core), so the CUDA start-up is
# (16.13 - 192/300) - (7.04 - 192/239) = 9.3 s longer. On 16 cores: 9.3 / (1/240 - 1/300) = 11,160 photos;
# on 4 cores (60/s) 700. A CPU at least as fast as the GPU path never gives way. The estimate favours the
# CPU (its decoders alone, not the slower whole CPU scan, set its rate), so `auto` is never the slower
# choice by these figures; scripts/gpu_check.sh measures both start-ups and rates again.
AUTO_CUDA_STARTUP_S = 9.3
AUTO_CPU_PHOTOS_PER_S_PER_CORE = 15.0
AUTO_GPU_PHOTOS_PER_S = 300.0


def auto_cuda_min_photos(cpus: int | None = None) -> int | None:
    """The fewest photos to extract (or rank) for which ``auto`` takes CUDA on a machine with ``cpus``
    cores (default: this one's); None when the CPU is never slower."""
    cpu_rate = AUTO_CPU_PHOTOS_PER_S_PER_CORE * (cpus or available_cpus())
    if cpu_rate >= AUTO_GPU_PHOTOS_PER_S:
        return None
    return math.ceil(round(AUTO_CUDA_STARTUP_S / (1 / cpu_rate - 1 / AUTO_GPU_PHOTOS_PER_S), 6))


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (imports torch)."""
    import torch

    return torch.cuda.is_available()


def resolve_device(device: str, photos: int | None = None) -> str:
    """The one reading of a device name: ``auto`` is ``cuda`` when torch sees a CUDA device and ``photos``
    (the photos the work is for; None: unknown) are at least ``auto_cuda_min_photos()``, else ``cpu``;
    anything else is returned as given. Imports torch only for ``auto``, and only when ``photos`` are
    unknown or enough for CUDA: a re-scan with nothing to extract asks nothing of torch."""
    if device != "auto":
        return device
    if photos is not None:
        least = auto_cuda_min_photos()
        if least is None or photos < least:
            return "cpu"
    return "cuda" if cuda_available() else "cpu"


def available_cpus() -> int:
    """CPUs this process may run on (affinity-aware)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
