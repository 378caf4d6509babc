"""``ADSConfig``: the solver's settings, the paper's defaults, one limit each, and a refusal that names
the setting. Importing it must not import torch: the command line reads its defaults and limits."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from novelfind.ranking.adsconfig import ADS_LIMITS, ADSConfig


def test_the_defaults_are_the_papers():
    cfg = ADSConfig()
    assert (cfg.epochs, cfg.partners, cfg.lr, cfg.momentum, cfg.seed, cfg.restarts, cfg.block) == (
        20,
        16,
        1e-3,
        0.9,
        0,
        1,
        1024,
    )


def test_every_setting_has_its_limit_and_every_default_is_within_it():
    names = [f.name for f in dataclasses.fields(ADSConfig)]
    assert list(ADS_LIMITS) == names
    for name in names:
        ADS_LIMITS[name].check(name, getattr(ADSConfig(), name))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epochs": 0}, "ADSConfig.epochs must be at least 1, got 0"),
        ({"epochs": 100_001}, "ADSConfig.epochs must be at most 100000, got 100001"),
        ({"restarts": 1001}, "ADSConfig.restarts must be at most 1000, got 1001"),
        ({"lr": 0}, "ADSConfig.lr must be greater than 0, got 0"),
        ({"lr": float("inf")}, "ADSConfig.lr must be a finite number, got inf"),
        ({"momentum": 1.0}, "ADSConfig.momentum must be less than 1, got 1.0"),
        ({"seed": -1}, "ADSConfig.seed must be at least 0, got -1"),
        ({"epochs": 2.0}, "ADSConfig.epochs must be an integer, got 2.0"),
        ({"partners": True}, "ADSConfig.partners must be an integer, got True"),
        ({"lr": "0.1"}, "ADSConfig.lr must be a number, got '0.1'"),
        ({"momentum": False}, "ADSConfig.momentum must be a number, got False"),
    ],
)
def test_a_value_outside_its_limit_or_of_the_wrong_type_is_refused_by_name(kwargs, message):
    with pytest.raises(ValueError) as err:
        ADSConfig(**kwargs)
    assert str(err.value) == message


def test_the_ends_of_the_ranges_are_taken():
    cfg = ADSConfig(epochs=100_000, partners=1, lr=1e-12, momentum=0.0, seed=2**40, restarts=1000, block=1)
    assert cfg.momentum == 0.0 and cfg.seed == 2**40
    assert ADSConfig(lr=1).lr == 1  # an integer is a number


def test_a_config_is_a_frozen_value():
    assert ADSConfig(seed=3) == ADSConfig(seed=3) != ADSConfig(seed=4)
    assert hash(ADSConfig(seed=3)) == hash(ADSConfig(seed=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        ADSConfig().seed = 1  # type: ignore[misc]
    assert dataclasses.replace(ADSConfig(), epochs=5).epochs == 5


def test_importing_it_leaves_torch_out():
    code = "import sys, novelfind.ranking.adsconfig; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
