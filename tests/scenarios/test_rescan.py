"""A re-scan with nothing new builds no model: with every photo in the cache, the default method on the
CPU imports neither torch nor onnxruntime (together seconds and hundreds of MB, more than the re-scan
itself); the model is built the moment a photo needs it. The scans run as the user runs them, in a
fresh process each, with the real weights."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from common import child_env, make_photo

HEAVY = {"torch", "onnxruntime"}


def imported(stderr: str) -> set[str]:
    """Top-level modules a ``python -X importtime`` run imported, from its stderr."""
    lines = (
        line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")
    )
    return {name.split(".")[0] for name in lines}


def cli(args: list[str], env: dict[str, str], cwd) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "novelfind", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.mark.slow  # the real model extracts the library once
def test_a_rescan_with_nothing_new_imports_neither_torch_nor_onnxruntime(tmp_path, library, real_weights):
    env = child_env(tmp_path)
    scan = ["scan", str(library["root"]), "--k", "3", "--format", "paths"]
    first = cli([*scan, "--backend", "torch"], env, tmp_path)  # fills the cache (eager PyTorch: no export)
    assert "torch" in imported(first.stderr)  # the check below can see an import

    again = cli(scan, env, tmp_path)  # the defaults: --device auto, --backend auto, cosine-knn
    assert again.stdout == first.stdout and again.stdout.count("\n") == 3
    assert "33 read from cache, 0 extracted" in again.stderr
    assert not imported(again.stderr) & HEAVY, imported(again.stderr) & HEAVY

    # the library's call: the same, and its result says nothing was extracted
    code = (
        "import json, sys, novelfind\n"
        f"r = novelfind.scan({str(library['root'])!r}, k=3)\n"
        "print(json.dumps([r.counts.extracted, sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{sorted(HEAVY)!r})]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [0, []]


@pytest.mark.slow
def test_the_model_is_built_when_the_first_new_photo_needs_it(tmp_path, library, real_weights):
    env = child_env(tmp_path)
    scan = ["scan", str(library["root"]), "--k", "40", "--format", "paths", "--backend", "torch"]
    cli(scan, env, tmp_path)
    new = make_photo(library["root"] / "new" / "odd_yellow.jpg", (240, 230, 20), seed=7)
    again = cli(scan, env, tmp_path)
    assert "33 read from cache, 1 extracted" in again.stderr
    assert str(new) in again.stdout.splitlines()
    assert "torch" in imported(again.stderr)  # the model, built for the one new photo


# The library's re-scan, as a program runs it: what it counted, whether it imported the model's
# libraries, and how many files it gave a decoder (a counter around the Pillow decoder's ``decode``).
RESCAN = """
import json, sys
import novelfind
from novelfind.extract.decoders import pillow
given = []
decode = pillow.ProcessDecoder.decode
def counted(self, paths):
    given.extend(paths)
    return decode(self, paths)
pillow.ProcessDecoder.decode = counted
r = novelfind.scan(sys.argv[1], k=3)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "onnxruntime"))
c = r.counts
print(json.dumps([c.extracted, c.failed, c.known_failed, c.ignored, len(given), heavy, r.warnings]))
"""


@pytest.mark.slow  # the real model extracts the library once
def test_a_known_or_ignored_unreadable_file_is_not_decoded_again_nor_loads_the_model(
    tmp_path, library, real_weights
):
    env = child_env(tmp_path)
    broken = library["root"] / "trip0" / "IMG_9999.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0" + bytes(200))  # a JPEG's start, then nothing
    scan = ["scan", str(library["root"]), "--k", "3", "--format", "paths", "-q"]
    first = subprocess.run(  # fills the cache, reports the broken file (exit code 3) and remembers it
        [sys.executable, "-m", "novelfind", *scan, "--backend", "torch"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert first.returncode == 3 and str(broken) in first.stderr, first.stderr[-2000:]

    def rescan() -> list:
        done = subprocess.run(
            [sys.executable, "-c", RESCAN, str(library["root"])],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
        return json.loads(done.stdout)

    # extracted, failed, known failed, ignored, files decoded, heavy modules, warnings
    assert rescan() == [0, 1, 1, 0, 0, [], []]  # known: counted, not decoded, no model
    cli(["ignore", str(broken)], env, tmp_path)
    assert rescan() == [0, 0, 0, 1, 0, [], []]  # ignored: skipped silently, still not decoded
    assert rescan() == [0, 0, 0, 1, 0, [], []]  # and so it stays
