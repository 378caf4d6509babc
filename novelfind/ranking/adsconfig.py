"""``ADSConfig``: the ADS solver's settings, their defaults and their limits, in one place.

Apart from ``novelfind.ranking.solver`` (torch code), so that ``novelfind.params`` can take the scan's ADS
defaults and limits from here, and the command line can start, without importing torch. The solver
itself re-exports it (``novelfind.ranking.solver.ADSConfig``).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field, fields
from typing import Any

from novelfind.base.limits import Limit


def _setting(default: Any, limit: Limit) -> Any:
    return field(default=default, metadata={"limit": limit})


@dataclass(frozen=True)
class ADSConfig:
    """Solver settings; defaults are the paper's (Algorithm 1) unless noted."""

    epochs: int = _setting(20, Limit(1, 100_000))  # E: SGD steps; K^t shrinks linearly from N to K over them
    partners: int = _setting(16, Limit(1, 100_000))  # J: partners sampled per image per step
    lr: float = _setting(1e-3, Limit(0, low_open=True))  # alpha: learning rate
    momentum: float = _setting(0.9, Limit(0, 1, high_open=True))  # beta: weight of the previous partner sum
    seed: int = _setting(0, Limit(0))  # explicit seed: same seed + same device -> same result
    # >1: average the weights of several seeds (the paper's suggested smoothing)
    restarts: int = _setting(1, Limit(1, 1000))
    # fast path only: most rows sharing one partner draw (1 = literal sampling, slow)
    block: int = _setting(1024, Limit(1))

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            number = numbers.Integral if f.type == "int" else numbers.Real
            if isinstance(value, bool) or not isinstance(value, number):
                kind = "an integer" if f.type == "int" else "a number"
                raise ValueError(f"ADSConfig.{f.name} must be {kind}, got {value!r}")
            ADS_LIMITS[f.name].check(f"ADSConfig.{f.name}", value)


ADS_LIMITS: dict[str, Limit] = {f.name: f.metadata["limit"] for f in fields(ADSConfig)}
