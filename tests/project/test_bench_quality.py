"""The quality benchmark's measures (scripts/bench_quality.py, scripts/quality): group coverage, paired
differences against the baseline, and the rank-fused k-NN scores of the round-three research."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "scripts")]

# The benchmark script pins BLAS and torch to one thread when it is imported (for a busy machine); the
# rest of the suite must not inherit that: a ranking's last digits depend on torch's thread count.
_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_saved_env = {name: os.environ.get(name) for name in _THREAD_VARS}
_saved_threads = torch.get_num_threads()

import bench_quality as B  # noqa: E402
from quality import methods as M  # noqa: E402
from quality import sets  # noqa: E402

torch.set_num_threads(_saved_threads)
for _name, _value in _saved_env.items():
    if _value is None:
        os.environ.pop(_name, None)
    else:
        os.environ[_name] = _value


def _blank(rng):
    return Image.new("RGB", (8, 8))


def test_novelty_groups_batch_class_picture_and_fault():
    fault = sets.with_fault(_blank, ("blur",))
    items = [
        sets.Item(False, "scene-a", _blank),
        sets.Item(True, "code/a.py", _blank),
        sets.Item(True, "doc/b.txt", _blank),  # screenshots and pages of a set: one batch
        sets.Item(True, "digit7", _blank),
        sets.Item(True, "digit7", _blank),  # a digit class: one group
        sets.Item(True, "digit3", _blank),
        sets.Item(True, "scene-a", fault),
        sets.Item(True, "scene-a", fault),  # two failed shots of one scene: two groups
        sets.Item(True, "pic-b", _blank),
        sets.Item(True, "pic-b", _blank),  # the same source picture again: one group
        sets.Item(False, "scene-a", _blank, group=0),
    ]
    g = sets.LabelledSet("t", 0, items).novelty_groups
    assert g[0] == g[10] == -1
    assert g[1] == g[2] and g[3] == g[4] and g[8] == g[9]
    assert len({g[1], g[3], g[5], g[6], g[7], g[8]}) == 6


def test_coverage_counts_groups_with_a_pick():
    groups = np.array([-1, 0, 0, 0, 1, 2, -1, -1])
    assert B.coverage(np.array([1, 2, 3, 6]), groups, 4) == pytest.approx(1 / 3)
    assert B.coverage(np.array([1, 4, 5, 6]), groups, 4) == 1.0
    assert B.coverage(np.array([6, 7, 1, 4]), groups, 2) == 0.0  # only the first k picks count


def _rows(method: str, f1s: dict[str, list[float]]) -> list[dict]:
    return [
        {"set": s, "seed": i, "method": method, "f1": v, "ap": v, "coverage": v}
        for s, vs in f1s.items()
        for i, v in enumerate(vs)
    ]


def test_summarise_pairs_draws_against_the_baseline():
    base = {"a": [0.5, 0.6, 0.4], "b": [0.2, 0.1, 0.3]}
    better = {"a": [0.6, 0.7, 0.5], "b": [0.3, 0.2, 0.4]}  # +0.1 on every draw: a zero-width interval
    noisy = {"a": [0.9, 0.2, 0.4], "b": [0.2, 0.1, 0.3]}
    rows = _rows("knn-cos@po", base) + _rows("better", better) + _rows("noisy", noisy)
    table, summary = B.summarise(rows, ["a", "b"], ["knn-cos@po", "better", "noisy"])
    d = summary["better"]["_mean"]["d_f1"]
    assert d["mean"] == pytest.approx(0.1) and d["lo"] == pytest.approx(0.1) and d["hi"] == pytest.approx(0.1)
    assert summary["better"]["a"]["d_coverage"]["mean"] == pytest.approx(0.1)
    n = summary["noisy"]["_mean"]["d_f1"]
    assert n["lo"] < 0 < n["hi"] and n["draws"] == 3
    assert summary["knn-cos@po"]["_mean"]["d_f1"]["mean"] == 0.0
    assert "+0.100 [+0.100, +0.100]" in table


def _features(rng: np.random.Generator) -> dict:
    """A blob of ordinary vectors, a tight far group of 20 and 5 far singletons (labels True)."""
    ordinary = rng.normal(0, 1, size=(300, 32)) + 6 * np.eye(32)[0]
    group = rng.normal(0, 0.2, size=(20, 32)) + 6 * np.eye(32)[1]
    single = rng.normal(0, 1, size=(5, 32)) + 8 * np.eye(32)[2:7]
    x = np.vstack([ordinary, group, single]).astype(np.float32)
    labels = np.r_[np.zeros(300, bool), np.ones(25, bool)]
    return {"pooled": x, "logits": x, "labels": labels}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_view_one_k_is_the_baseline(seed):
    f = _features(np.random.default_rng(seed))
    a = M.fused_method(("po",), (10,))(f, 25, seed)
    b = M.knn_method("cos:pooled")(f, 25, seed)
    assert np.array_equal(a.picks, b.picks)


def test_fusion_is_the_mean_of_rank_percentiles_over_k_then_views():
    f = _features(np.random.default_rng(0))
    n = len(f["labels"])
    per_k = [np.argsort(np.argsort(M.knn_score(f, "po", k))) + 1 for k in (3, 10, 50)]  # ranks, no ties
    want = np.mean(per_k, axis=0) / n
    assert np.allclose(M.fused_score(f, ("po",), (3, 10, 50)), want)
    f["mid"] = np.random.default_rng(1).normal(size=(n, 752)).astype(np.float32)
    two = M.fused_score(f, ("po", "b16"), (3, 10, 50), fuse="max")
    b16 = M.fused_score(f, ("b16",), (3, 10, 50))
    assert (two >= np.maximum(want, b16) - 1e-12).all() and (two <= np.maximum(want, b16) + 2e-3).all()


def test_cleaning_scores_set_aside_rows_against_the_clean_rest():
    f = _features(np.random.default_rng(0))
    plain = M.knn_score(f, "po", 50)
    cleaned = M.cleaned_score(f, "po", 50, frac=0.04, rounds=3)  # 3 x 13 rows set aside
    group = np.arange(300, 320)
    assert (cleaned[group] > plain[group] + 0.1).all()  # the group no longer is its own neighbourhood
    assert (np.argsort(-cleaned)[:25] >= 300).all()
