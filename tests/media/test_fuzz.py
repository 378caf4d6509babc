"""Fuzzed photos: thousands of mutated JPEG, PNG, WebP, GIF, TIFF and HEIC files (tests/support/fuzzing.py).

Each one is decoded or reported with a one-line reason: never another exception, never a crash of
the process, never a hang (a per-case watchdog ends the runner), in bounded memory. Most cases go
straight to the decoder, two runner processes side by side; a smaller batch goes through a real
scan, which must rank or report every file once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from common import child_env, rank_all_as_json, sized
from fuzzing import FORMATS, SUFFIX, cases, claimed_size_bombs
from PIL import Image

from novelfind.errors import DecodeError
from novelfind.media.decode import read_for_model

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tests" / "support" / "fuzzing.py"
FAKE_CLI = ROOT / "tests" / "support" / "fake_cli.py"
CASES_PER_RUNNER = sized(750, 1500)  # NOVELFIND_TESTS=full: 1500 a runner (3,000 files)
WATCHDOG_S = 120  # a hang guard for one case; the slowest case takes well under a second
PEAK_RSS_MB = 1024


@pytest.mark.slow
def test_fuzzed_files_decode_or_give_a_one_line_reason(tmp_path):
    runners = {
        seed: subprocess.Popen(
            [
                sys.executable,
                str(RUNNER),
                "--seed",
                str(seed),
                "--cases",
                str(CASES_PER_RUNNER),
                "--watchdog",
                str(WATCHDOG_S),
                "--workdir",
                str(tmp_path),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(tmp_path, PYTHONDONTWRITEBYTECODE="1"),
        )
        for seed in (101, 202)
    }
    results, peaks = [], []
    for seed, proc in runners.items():
        out, err = proc.communicate(timeout=3600)
        lines = [json.loads(line) for line in out.splitlines()]
        done = [line for line in lines if line.get("done")]
        rows = [line for line in lines if not line.get("done")]
        if proc.returncode != 0 or not done:
            culprit = f"{seed}-{len(rows)}"
            case = next(c for c in cases(seed, len(rows) + 1) if c.id == culprit)
            pytest.fail(
                f"the decoder crashed or hung on case {culprit} ({case.fmt} {case.seed_name}: "
                f"{case.mutation}); exit {proc.returncode}\n{err[-3000:]}"
            )
        assert len(rows) == CASES_PER_RUNNER
        results += rows
        peaks.append(done[0]["peak_rss_kb"] / 1024)

    faults = [r for r in results if r["fault"]]
    assert faults == [], "\n".join(
        f"{r['id']} {r['fmt']} {r['mutation']}: {r['fault']} ({r['reason']})" for r in faults[:20]
    )
    # The mutations must reach the decoders, not only their signature checks: each format has
    # decoded cases and refused ones, with several different reasons.
    outcomes = Counter((r["fmt"], r["outcome"]) for r in results)
    for fmt in FORMATS:
        assert outcomes[(fmt, "decoded")] >= 20 * CASES_PER_RUNNER // 1500, (fmt, outcomes)
        assert outcomes[(fmt, "reason")] >= 100 * CASES_PER_RUNNER // 1500, (fmt, outcomes)
        assert len({r["reason"] for r in results if r["fmt"] == fmt and r["reason"]}) >= 3, fmt
    assert max(peaks) < PEAK_RSS_MB, f"a runner's peak RSS reached {max(peaks):.0f} MB"


@pytest.mark.slow
def test_a_scan_of_fuzzed_files_ranks_or_reports_each_once(tmp_path):
    library = tmp_path / "photos"
    written = []
    for case in cases(303, 240):
        path = library / case.fmt / f"{case.id}{SUFFIX[case.fmt]}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(case.data)
        written.append(str(path))
    args = rank_all_as_json(library, "--cache", tmp_path / "c.sqlite")
    runs = []
    for _ in range(2):  # cold, then from the cache
        proc = subprocess.run(
            [sys.executable, str(FAKE_CLI), *args],
            capture_output=True,
            text=True,
            env=child_env(tmp_path, PYTHONDONTWRITEBYTECODE="1"),
            timeout=900,
        )
        assert proc.returncode in (0, 3), proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
        runs.append((json.loads(proc.stdout), proc.stderr))
    (doc, stderr), (again, _) = runs
    picked = [p["path"] for p in doc["picks"]]
    failed = {f["path"]: f["reason"] for f in doc["failures"]}
    assert len(picked) == len(set(picked)) and len(failed) == len(doc["failures"])
    assert set(picked) | set(failed) == set(written) and not set(picked) & set(failed)
    assert picked and failed  # the batch holds both kinds
    for path, reason in failed.items():
        assert reason.strip() and "\n" not in reason, (path, reason)
        assert stderr.count(f"warning: cannot read {path}: ") == 1, path
    assert [p["path"] for p in again["picks"]] == picked
    assert {f["path"] for f in again["failures"]} == set(failed)
    assert again["run"]["from_cache"] == len(picked)


@pytest.mark.parametrize("name", sorted(claimed_size_bombs()))
def test_a_header_claiming_far_more_pixels_than_the_file_holds_is_refused(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(claimed_size_bombs()[name])
    with pytest.raises(DecodeError, match=r"^refused: .*pixels"):
        read_for_model(path)


def test_a_large_flat_picture_is_not_taken_for_a_bomb(tmp_path):
    """40 MP of one colour: about 350 pixels per byte as PNG, the most a real picture compresses."""
    path = tmp_path / "flat.png"
    Image.new("RGB", (8000, 5000), (30, 140, 200)).save(path)
    _, px = read_for_model(path)
    assert px[112, 112].tolist() == [30, 140, 200]
