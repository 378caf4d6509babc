"""``Limit``: the allowed range of a number, one type for the scan's parameters and the solver's settings.

The command line turns each limit into a Click range type (``novelfind.cli``), ``ScanParameters`` and
``ADSConfig`` check values against it, and ``describe`` writes it into the API doc, so a range is
written once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from novelfind.errors import InputError


@dataclass(frozen=True)
class Limit:
    """The allowed range of a numeric parameter (the command line turns it into a Click range type)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is not allowed
    high_open: bool = False

    def check(self, name: str, value: float) -> None:
        """InputError naming ``name`` and the value when ``value`` is outside the range or not finite."""
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{name} must be a finite number, got {value}")
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            bound = "greater than" if self.low_open else "at least"
            raise InputError(f"{name} must be {bound} {self.low:g}, got {value}")
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            bound = "less than" if self.high_open else "at most"
            raise InputError(f"{name} must be {bound} {self.high:g}, got {value}")

    def describe(self, symbol: str) -> str:
        """The range in words for the API doc: ``1-100000``, ``>= 0``, ``> 0``, ``0 <= beta < 1``."""
        low, high = self.low, self.high
        if low is not None and high is not None and not (self.low_open or self.high_open):
            return f"{low:g}-{high:g}"
        if high is None:
            return f"{'>' if self.low_open else '>='} {low:g}"
        if low is None:
            return f"{'<' if self.high_open else '<='} {high:g}"
        return f"{low:g} {'<' if self.low_open else '<='} {symbol} {'<' if self.high_open else '<='} {high:g}"
