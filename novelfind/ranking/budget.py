"""The memory budget: whether a library's features are ranked from a matrix in memory or read from the
cache in chunks (``novelfind.ranking.sources``), decided before anything is extracted. The scores are
the same either way; the budget decides only how the vectors are read, and which methods can run."""

from __future__ import annotations

import os

from novelfind.errors import InputError
from novelfind.ranking.methods import DEFAULT_METHOD, METHODS

# A library whose N x dim float32 feature matrix is larger than this is ranked from the cache, read in
# chunks, instead of from a matrix in memory. None: a third of the machine's memory (the in-memory ranking
# needs about twice the matrix at its peak; 2.2x for the cosine methods, which rank a unit-length copy),
# and never less than 2 GiB (about 536,000 photos of 1000-d
# logits). The scores are the same either way.
MATRIX_BUDGET: int | None = None
MATRIX_BUDGET_MIN = 2 << 30


def matrix_budget() -> int:
    """Bytes of float32 features ranked in memory (``MATRIX_BUDGET``, or a third of physical memory)."""
    if MATRIX_BUDGET is not None:
        return MATRIX_BUDGET
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        physical = 0
    return max(MATRIX_BUDGET_MIN, physical // 3)


def fits_in_memory(n: int, dim: int) -> bool:
    """Whether the N x dim float32 features of a library are within ``matrix_budget()``."""
    return n * dim * 4 <= matrix_budget()


def read_in_chunks(method: str, n: int, dim: int) -> bool:
    """Whether ``method`` should read a library's N x dim features from the cache in chunks (they pass
    the memory budget). A method that cannot (``Method.chunks`` false: ``ads-paper`` draws random rows
    of the matrix): InputError saying how much memory it would need."""
    limit = METHODS[method].max_rows
    if limit is not None and n > limit:
        raise InputError(
            f"method {method} ranks at most {limit:,} photos (its cost grows with the square of the "
            f"library: {n:,} would take hours); the default method ({DEFAULT_METHOD}) ranks any size"
        )
    if fits_in_memory(n, dim):
        return False
    if not METHODS[method].chunks:
        need, budget = n * dim * 4, matrix_budget()
        raise InputError(
            f"method {method} ranks all {n:,} feature vectors in memory ({need / 2**30:.1f} "
            f"GiB of float32, more than the {budget / 2**30:.1f} GiB novelfind holds); the default "
            f"method ({DEFAULT_METHOD}) ranks a library of this size from the cache"
        )
    return True
