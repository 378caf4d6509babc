"""Research baselines the benchmarks compare novelfind's rankings against (not shipped in the package).

- ``power_scores``: the principal eigenvector of the full Euclidean distance matrix by power iteration:
  the exact relaxation ADS approximates. O(N^2) time, so only for benchmark-sized sets.
- ``iforest_scores``: scikit-learn's IsolationForest (needs scikit-learn, a test-only dependency).

Both return float32 (N,) scores, higher = more novel, for a finite (N, M) feature matrix.
"""

from __future__ import annotations

import numpy as np

POWER_MAX_N = 20_000  # N^2 distances per iteration: beyond this, hours


def power_scores(x: np.ndarray, iters: int = 100, tol: float = 1e-7, chunk: int = 2048) -> np.ndarray:
    """Principal eigenvector of the Euclidean distance matrix (power iteration, D s chunked) -> (N,)."""
    import torch

    n = x.shape[0]
    if n > POWER_MAX_N:
        raise ValueError(f"power iteration is O(N^2); N={n} > {POWER_MAX_N}")
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).double()
    s = torch.full((n,), 1 / np.sqrt(n), dtype=torch.float64)
    for _ in range(iters):
        new = torch.empty_like(s)
        for i in range(0, n, chunk):
            new[i : i + chunk] = torch.cdist(xt[i : i + chunk], xt) @ s  # (C,)
        new /= new.norm().clamp_min(1e-300)
        done = (new - s).norm() < tol
        s = new
        if done:
            break
    return s.float().numpy()


def iforest_scores(x: np.ndarray, seed: int = 0) -> np.ndarray:
    """Negated IsolationForest score (200 trees): higher = isolated sooner = more novel -> (N,)."""
    from sklearn.ensemble import IsolationForest

    forest = IsolationForest(n_estimators=200, random_state=seed).fit(x)
    return (-forest.score_samples(x)).astype(np.float32)


BASELINES = {
    "power": lambda x, seed: power_scores(x),
    "iforest": iforest_scores,
}
