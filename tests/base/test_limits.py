"""``Limit``: the one range check behind the scan's parameters and the solver's settings, and the words
the API doc shows for it."""

from __future__ import annotations

import math

import pytest

from novelfind.base.limits import Limit
from novelfind.errors import InputError


def test_closed_bounds_take_their_ends_and_refuse_beyond_them():
    limit = Limit(1, 100)
    for value in (1, 50, 100, 1.0, 100.0):
        limit.check("k", value)
    with pytest.raises(InputError) as low:
        limit.check("k", 0)
    assert str(low.value) == "k must be at least 1, got 0"
    with pytest.raises(InputError) as high:
        limit.check("k", 101)
    assert str(high.value) == "k must be at most 100, got 101"


def test_open_bounds_refuse_their_ends():
    limit = Limit(0, 1, low_open=True, high_open=True)
    limit.check("beta", 0.5)
    limit.check("beta", 1e-12)
    with pytest.raises(InputError) as low:
        limit.check("beta", 0)
    assert str(low.value) == "beta must be greater than 0, got 0"
    with pytest.raises(InputError) as high:
        limit.check("beta", 1.0)
    assert str(high.value) == "beta must be less than 1, got 1.0"


def test_a_missing_bound_does_not_limit_that_side():
    Limit(0).check("x", 10**18)
    Limit(high=5).check("x", -(10**18))
    Limit().check("x", -1e300)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_number_that_is_not_finite_is_refused_even_without_bounds(value):
    with pytest.raises(InputError) as err:
        Limit().check("alpha", value)
    assert str(err.value) == f"alpha must be a finite number, got {value}"


def test_bounds_are_written_without_needless_decimals():
    with pytest.raises(InputError, match=r"^t must be at least 0\.25, got 0\.2$"):
        Limit(0.25).check("t", 0.2)
    with pytest.raises(InputError, match=r"^n must be at most 1e\+06, got 1000001$"):
        Limit(high=1_000_000).check("n", 1_000_001)


def test_the_error_is_an_input_error_and_a_value_error():
    with pytest.raises(ValueError):
        Limit(1).check("k", 0)


@pytest.mark.parametrize(
    ("limit", "words"),
    [
        (Limit(1, 100000), "1-100000"),
        (Limit(0), ">= 0"),
        (Limit(0, low_open=True), "> 0"),
        (Limit(high=1), "<= 1"),
        (Limit(high=1, high_open=True), "< 1"),
        (Limit(0, 1, high_open=True), "0 <= beta < 1"),
        (Limit(0, 1, low_open=True), "0 < beta <= 1"),
        (Limit(0.5, 2, low_open=True, high_open=True), "0.5 < beta < 2"),
    ],
)
def test_describe_writes_the_range_in_words(limit, words):
    assert limit.describe("beta") == words


def test_limits_are_values():
    assert Limit(0, 1) == Limit(0.0, 1.0)
    assert Limit(0, 1) != Limit(0, 1, high_open=True)
    with pytest.raises(AttributeError):
        Limit(0, 1).low = 2  # type: ignore[misc]
