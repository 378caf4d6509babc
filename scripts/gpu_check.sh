#!/usr/bin/env bash
# The GPU machine's one prepared run: install novelfind and the carried wheels without network, run the
# CUDA tests, compare `novelfind scan --device cuda` with `--device cpu`, time the CLI itself, and
# benchmark. Results go into OUTDIR as they are made; the whole run keeps to a deadline
# (GPU_CHECK_SECONDS, default 540 s).
#
#   bash scripts/gpu_wheels.sh                       # first, where pip works (see its header): fills .whl/
#   bash scripts/gpu_check.sh docs/bench/gpu-NAME    # on the GPU machine, with .whl/ copied next to the tree
#
# Without CUDA (a CPU machine) the same steps run at toy sizes on the CPU, every result marked
# "no CUDA", to debug this script before GPU time is spent; `pip install -e .` is skipped there.
# Each part runs under `timeout` within what is left of the deadline; a part that fails or runs out of
# time is recorded and the next one runs. A rerun can pick parts (environment and install always run):
#   GPU_CHECK_ONLY="cuda-tests throughput" GPU_CHECK_SECONDS=200 bash scripts/gpu_check.sh OUTDIR
# Parts: cuda-tests compare-example compare-12mp cli host throughput model ads rank.
#   cli         `novelfind scan` itself on 192 and on all 1,536 12 MP JPEGs, --device cpu, cuda and auto, each
#               in a fresh process and cache: start-up seconds and marginal photos/s per device
#   host        scripts/bench_host.py on the same files: the host's ceiling (stand-in decoder and model)
#   throughput  local.extract (novelfind.extract.engines): CPU decoding, the GPU decoder alone, both at once ("auto" on CUDA), and
#               the decoders alone
# summary.json's "criteria" compares the CLI's marginal rate on CUDA with the GPU decoder alone.
#
# OUTDIR (6 files): summary.json (each part's status and seconds, the headline figures, the criteria),
# gpu_check.log (everything printed), pytest.xml (JUnit; measured differences as properties),
# bench_gpu.json (scan comparisons, CLI timings and benchmarks), bench_host.json (the host's ceiling),
# env.txt (GPU, driver, package versions).
set -uo pipefail

OUT=${1:?usage: gpu_check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
PY=${PYTHON:-python3}
START=$(date +%s)
LOG=$OUT/gpu_check.log
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

HAS_CUDA=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
if [ "$HAS_CUDA" = 1 ]; then
  BUDGET=${GPU_CHECK_SECONDS:-540}
  DISTINCT=192 COPIES=8 WIDTH=4000 HEIGHT=3000  # 1536 files of 12 MP (~6 GB), 192 different photos
  ADS_SIZES="1000000 10000000" ADS_M=1000 RANK_N=1000000 MODEL_BATCHES="32 128" MODEL_S=2
  COMPARE_K=20 DECODE_IMAGES=256 CLI_SMALL=192
else
  echo "no CUDA: dry run of the script on the CPU at toy sizes (no figure from it means anything)"
  BUDGET=${GPU_CHECK_SECONDS:-1500}
  DISTINCT=4 COPIES=2 WIDTH=4000 HEIGHT=3000
  ADS_SIZES="2000 5000" ADS_M=64 RANK_N=3000 MODEL_BATCHES="4" MODEL_S=0.5
  COMPARE_K=2 DECODE_IMAGES=4 CLI_SMALL=2
fi
NPROC=$(nproc)
WORK=${GPU_CHECK_WORK:-/tmp/novelfind-gpu-check}
rm -rf "$WORK"
mkdir -p "$WORK/site" "$WORK/cache"
export XDG_CACHE_HOME=$WORK/cache  # ONNX graphs and feature caches of this run only
export PYTHONPATH=$WORK/site:$REPO
export PYTHONUNBUFFERED=1
BENCH="$PY scripts/bench_gpu.py"
JSON=$OUT/bench_gpu.json
PARTS=$WORK/parts.tsv
: >"$PARTS"
rm -f "$JSON" "$OUT/pytest.xml" "$OUT/summary.json"

summarise() {
  $BENCH summary --parts "$PARTS" --junit "$OUT/pytest.xml" --bench "$JSON" --out "$OUT/summary.json" \
    --elapsed $(($(date +%s) - START)) "$@" || echo "summary failed"
}

# part NAME MAX_SECONDS COMMAND...: run COMMAND (a program, or one of the check_* functions below) under
# a limit of min(MAX, time left), and record the outcome
wanted() { [ -z "${GPU_CHECK_ONLY:-}" ] || [[ " $GPU_CHECK_ONLY " == *" $1 "* ]]; }

part() {
  local name=$1 max=$2 left t rc began
  shift 2
  if ! wanted "$name" && [ "$name" != environment ] && [ "$name" != install ] && [ "$name" != make-jpegs ]; then
    return 0
  fi
  left=$((START + BUDGET - $(date +%s)))
  t=$((max < left ? max : left))
  if [ "$t" -lt 5 ]; then
    echo "=== $name: skipped, no time left"
    printf '%s\t%s\t%s\n' "$name" "no time" 0 >>"$PARTS"
    summarise >/dev/null
    return 0
  fi
  echo "=== $name (limit ${t}s) $(date +%T)"
  began=$(date +%s)
  if [ "$(type -t "$1")" = function ]; then
    timeout --kill-after=5 "$t" bash -c "$*"
  else
    timeout --kill-after=5 "$t" "$@"
  fi
  rc=$?
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "=== $name: stopped at its ${t}s limit"
  printf '%s\t%s\t%s\n' "$name" "$rc" $(($(date +%s) - began)) >>"$PARTS"
  summarise >/dev/null
  return 0
}

check_environment() {
  {
    echo "date: $(date -Is)  host: $(hostname)  cpus: $NPROC  cuda: $HAS_CUDA"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
    "$PY" - <<'EOF'
import importlib.metadata as md, platform, sys, torch
print("python", platform.python_version(), sys.executable)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("gpu", p.name, f"{p.total_memory / 2**30:.1f} GiB", p.multi_processor_count, "SMs")
for n in ["torchvision", "numpy", "pillow", "onnxruntime", "onnx", "click", "tqdm", "filelock", "setuptools",
          "scikit-image", "scikit-learn", "hypothesis", "pytest", "faiss-cpu", "platformdirs"]:
    try:
        print(n, md.version(n))
    except md.PackageNotFoundError:
        print(n, "-")
EOF
    ls /usr/local/cuda/lib64/libnvjpeg* 2>/dev/null || echo "no system libnvjpeg in /usr/local/cuda/lib64"
    df -h /tmp | tail -1
    free -g | head -2
  } >"$OUT/env.txt" 2>&1
  cat "$OUT/env.txt"
}

check_install() {
  local wheels=("$REPO"/.whl/*.whl)
  if [ -e "${wheels[0]}" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" "${wheels[@]}" \
      || return 1
  else
    echo "no wheels in .whl/ (run scripts/gpu_wheels.sh first): using what is installed"
  fi
  if [ "$HAS_CUDA" = 1 ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . \
      || echo "editable install failed; novelfind runs from PYTHONPATH"
  else
    echo "dry run: editable install skipped (novelfind runs from PYTHONPATH)"
  fi
  "$PY" - <<'EOF'
import faiss, novelfind
from novelfind.extract.decoders import gpu as gpu_decode
from novelfind.model.weights import resolve_weights
print("novelfind", novelfind.__file__)
print("faiss", faiss.__version__)
print("weights", resolve_weights(download=False))
print("nvImageCodec installed:", gpu_decode.library_installed())
try:
    gpu = gpu_decode.open_gpu_decoder("cuda")
    print("GPU decoding ready: nvImageCodec", gpu.backend.version, gpu.backend.notes[:300])
except gpu_decode.GpuDecodeUnavailable as e:
    print("GPU decoding unavailable:", e)
EOF
}

check_tests() {
  local extra=()
  [ "$HAS_CUDA" = 1 ] && extra+=(--require-cuda)
  "$PY" -c 'import pytest_timeout' 2>/dev/null && extra+=(--timeout=100)  # a hang fails one test, not all
  local files
  files=$(grep -l "mark.cuda" tests/test_*.py)  # the modules with CUDA tests, whatever their names
  # shellcheck disable=SC2086
  "$PY" -m pytest -m cuda $files -p no:cacheprovider -q -rA --junitxml="$OUT/pytest.xml" "${extra[@]}"
}

check_jpegs_made() {  # waits for the background maker; its exit status
  while [ ! -e "$WORK/make-jpegs.rc" ]; do sleep 1; done
  cat "$WORK/make-jpegs.log"
  return "$(cat "$WORK/make-jpegs.rc")"
}

export -f check_environment check_install check_tests check_jpegs_made
export PY OUT WORK REPO HAS_CUDA NPROC

echo "novelfind GPU check: $(git -C "$REPO" log -1 --format='%h %s' 2>/dev/null), deadline ${BUDGET}s"
part environment 30 check_environment
part install 120 check_install
# the 12 MP photos are made while the tests run (both need the CPUs only in part)
if wanted compare-12mp || wanted throughput || wanted cli || wanted host; then
  (
    timeout 180 $BENCH make-jpegs "$WORK/jpegs" --distinct $DISTINCT --copies $COPIES --procs "$NPROC" \
      --width $WIDTH --height $HEIGHT --out "$JSON" >"$WORK/make-jpegs.log" 2>&1
    echo $? >"$WORK/make-jpegs.rc"
  ) &
fi
part cuda-tests 180 check_tests
if wanted compare-12mp || wanted throughput || wanted cli || wanted host; then
  part make-jpegs 150 check_jpegs_made
fi
if [ -d "$REPO/.whl/example" ] || ! wanted compare-example; then
  part compare-example 90 $BENCH compare "$REPO/.whl/example" --k 5 --key compare_example --out "$JSON"
else
  echo "=== compare-example: skipped, no .whl/example (scripts/gpu_wheels.sh makes it)"
fi
part compare-12mp 90 $BENCH compare "$WORK/jpegs/set0" --k $COMPARE_K --key compare_12mp --out "$JSON"
part cli 150 $BENCH cli "$WORK/jpegs" --small $CLI_SMALL --out "$JSON"
part host 60 "$PY" scripts/bench_host.py --dir "$WORK/jpegs" --repeats 3 --out "$OUT/bench_host.json"
part throughput 150 $BENCH throughput "$WORK/jpegs" --workers "$NPROC" --decode-images $DECODE_IMAGES --out "$JSON"
part model 60 $BENCH model --batches $MODEL_BATCHES --seconds $MODEL_S --out "$JSON"
part ads 120 $BENCH ads --sizes $ADS_SIZES --m $ADS_M --k 100 --out "$JSON"
part rank 170 $BENCH rank --n $RANK_N --m $ADS_M --k 100 --out "$JSON"
summarise --print
echo "done in $(($(date +%s) - START))s; results in $OUT"
rm -rf "$WORK/jpegs"
