"""The memory budget: when a library is ranked from the cache in chunks, and which methods refuse."""

from __future__ import annotations

import pytest

from novelfind.errors import InputError
from novelfind.ranking import budget
from novelfind.ranking.methods import DEFAULT_METHOD, METHODS


def test_a_set_budget_is_used_as_given_and_fits_is_inclusive(monkeypatch):
    monkeypatch.setattr(budget, "MATRIX_BUDGET", 4000)
    assert budget.matrix_budget() == 4000
    assert budget.fits_in_memory(10, 100)  # 10 x 100 x 4 bytes = 4000: exactly the budget
    assert not budget.fits_in_memory(11, 100)
    assert budget.fits_in_memory(0, 100)


def test_without_sysconf_the_budget_is_the_floor(monkeypatch):
    def broken(name):
        raise ValueError(name)

    monkeypatch.setattr(budget, "MATRIX_BUDGET", None)
    monkeypatch.setattr(budget.os, "sysconf", broken)
    assert budget.matrix_budget() == budget.MATRIX_BUDGET_MIN == 2 << 30


def test_within_the_budget_no_method_reads_in_chunks(monkeypatch):
    monkeypatch.setattr(budget, "MATRIX_BUDGET", 1000 * 8 * 4)
    assert all(not budget.read_in_chunks(name, 1000, 8) for name in METHODS)


def test_over_the_budget_the_chunking_methods_read_in_chunks(monkeypatch):
    monkeypatch.setattr(budget, "MATRIX_BUDGET", 1000 * 8 * 4 - 1)
    chunking = [name for name, m in METHODS.items() if m.chunks]
    assert DEFAULT_METHOD in chunking
    assert all(budget.read_in_chunks(name, 1000, 8) for name in chunking)


def test_a_method_that_needs_the_matrix_says_how_much_memory(monkeypatch):
    monkeypatch.setattr(budget, "MATRIX_BUDGET", 1 << 30)  # 1.0 GiB
    n, dim = 1_000_000, 1000  # 4e9 bytes = 3.7 GiB of float32
    whole = [name for name, m in METHODS.items() if not m.chunks]
    assert whole, "some method needs the matrix in memory"
    for name in whole:
        with pytest.raises(InputError) as err:
            budget.read_in_chunks(name, n, dim)
        assert str(err.value) == (
            f"method {name} ranks all 1,000,000 feature vectors in memory (3.7 GiB of float32, more "
            f"than the 1.0 GiB novelfind holds); the default method ({DEFAULT_METHOD}) ranks a library "
            "of this size from the cache"
        )


def test_a_method_with_a_row_limit_refuses_one_row_more_whatever_the_memory(monkeypatch):
    monkeypatch.setattr(budget, "MATRIX_BUDGET", 1 << 40)
    limited = {name: m.max_rows for name, m in METHODS.items() if m.max_rows is not None}
    assert limited
    for name, limit in limited.items():
        assert budget.read_in_chunks(name, limit, 4) is False  # the limit itself is allowed
        with pytest.raises(InputError, match=rf"^method {name} ranks at most {limit:,} photos") as err:
            budget.read_in_chunks(name, limit + 1, 4)
        assert f"{limit + 1:,} would take hours" in str(err.value)
        assert str(err.value).endswith(f"the default method ({DEFAULT_METHOD}) ranks any size")
