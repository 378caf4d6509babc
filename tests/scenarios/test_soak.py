"""A short soak (scripts/soak.py): eight scans at once on one cache, with prune and clear between."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from common import sized

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_short_soak_of_concurrent_scans_with_prune_and_clear(tmp_path):
    out = tmp_path / "soak.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVELFIND_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "soak.py"),
            "--seconds",
            str(sized(10, 25)),  # at least until one prune and one clear have run, whatever it says
            "--photos",
            str(sized(80, 160)),
            "--maintenance-every",
            "4",
            "--out",
            str(out),
            "--workdir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert out.exists(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["failures"] == [], proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert result["scans"] >= 8
    assert set(result["exit_codes"]) <= {"0", "3"}
    assert result["prunes"] >= 1 and result["clears"] >= 1
    assert result["integrity_checks"] >= 3
    assert result["vectors_checked"] > 0
