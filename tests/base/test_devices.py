"""The one reading of a device name and the CPUs a process may use. (When ``auto`` takes CUDA for how
much work is in tests/model/test_auto_device.py.) CUDA's presence is monkeypatched: no GPU is needed."""

from __future__ import annotations

import os

import pytest

from novelfind.base import devices
from novelfind.base.devices import DEVICES, auto_cuda_min_photos, available_cpus, resolve_device


@pytest.mark.parametrize("name", ["cpu", "cuda", "cuda:0", "cuda:3", "mps"])
def test_names_other_than_auto_are_returned_as_given_without_asking_for_cuda(monkeypatch, name):
    def never() -> bool:
        raise AssertionError("asked torch for CUDA")

    monkeypatch.setattr(devices, "cuda_available", never)
    assert resolve_device(name) == name
    assert resolve_device(name, 10**9) == name


def test_auto_without_cuda_is_the_cpu_however_large_the_work(monkeypatch):
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    monkeypatch.setattr(devices, "available_cpus", lambda: 1)
    assert resolve_device("auto") == "cpu"
    assert resolve_device("auto", 10**9) == "cpu"


def test_auto_with_cuda_takes_it_for_unknown_or_enough_work(monkeypatch):
    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    monkeypatch.setattr(devices, "available_cpus", lambda: 2)
    least = auto_cuda_min_photos()
    assert least == auto_cuda_min_photos(2)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("auto", least) == "cuda"
    assert resolve_device("auto", least - 1) == "cpu"
    assert resolve_device("auto", 0) == "cpu"


def test_auto_with_cuda_stays_on_a_cpu_as_fast_as_the_gpu(monkeypatch):
    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    monkeypatch.setattr(devices, "available_cpus", lambda: 64)
    assert auto_cuda_min_photos() is None
    assert resolve_device("auto", 10**9) == "cpu"
    assert resolve_device("auto") == "cuda"  # the work unknown: CUDA when there is one


def test_the_threshold_rises_with_the_cores_since_a_faster_cpu_needs_more_work_to_lose():
    counts = [auto_cuda_min_photos(cpus) for cpus in (1, 2, 4, 8, 16)]
    assert all(isinstance(n, int) and n > 0 for n in counts)
    assert counts == sorted(counts)
    assert auto_cuda_min_photos(1) < auto_cuda_min_photos(19)


def test_the_names_offered():
    assert DEVICES == ("auto", "cpu", "cuda")


def test_available_cpus_follows_the_affinity(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5})
    assert available_cpus() == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set())
    assert available_cpus() == 1  # never zero


def test_available_cpus_without_affinity_falls_back_to_the_count(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert available_cpus() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert available_cpus() == 1
