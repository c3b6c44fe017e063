#!/usr/bin/env bash
# GPU check of the CUDA codec in one shot (issue 18, item 4): build, GPU tests, a quick
# benchmark, compute-sanitizer; each stage under its own time limit, every result in OUTDIR as
# soon as it exists, and a summary of what ran, passed, failed or was skipped, with times.
#
#   bash bench/gpu_check.sh OUTDIR             # on the GPU machine (about 5 minutes, at most 8)
#   bash bench/gpu_check.sh OUTDIR --dry-run   # on a CPU (also: JLC_CUDA=OFF): no build, no GPU
#
# Meant for the H200 image without a package index (Python 3.12, jax 0.11.2 + the CUDA 13
# plugin, pytest, nanobind, scikit-build-core, cmake, ninja, nvcc, compute-sanitizer): the
# package is built with --no-build-isolation --no-deps against the jaxlib installed there and
# nothing is fetched from the network.
#
# Stages (limit in seconds, overridable; expected on the H200 with 16 cores; a stage whose
# limit does not fit in what is left of GPU_CHECK_BUDGET_S runs with what is left, and is
# skipped with under 20 s left):
#   env        interpreter, packages, nvidia-smi, nvcc, commit             (no limit, ~3 s)
#   build      pip install . with JLC_CUDA=ON (nvcc, sm_80 + sm_90), the import check, the
#              kernels' registers / spills (cuobjdump)      GPU_CHECK_LIMIT_BUILD_S=150 (~90 s)
#   tests      pytest -m gpu tests/test_cuda.py -x (stops at the first failure; a skip for
#              "no GPU" or "built without CUDA" fails the stage)
#                                                           GPU_CHECK_LIMIT_TESTS_S=140 (~90 s)
#   bench      python -m bench.codec_bench_gpu --quick: fixed and auto on the DLRM exchange
#              shape and every real dump (64 MiB tiles), beside a device-to-device copy
#                                                           GPU_CHECK_LIMIT_BENCH_S=75  (~55 s)
#   memcheck   compute-sanitizer --tool memcheck on the short fuzz run and the hot-row
#              dictionary tests (auto, entropy; float32)    GPU_CHECK_LIMIT_MEMCHECK_S=70 (~40 s)
#   racecheck  compute-sanitizer --tool racecheck on the short fuzz run (dictionary and Huffman
#              frames, corrupted ones included)             GPU_CHECK_LIMIT_RACECHECK_S=45 (~30 s)
# Both sanitizer runs check only the codec's kernels (--kernel-name kns=code_: encode_* and
# decode_*) where this compute-sanitizer has the option, so XLA's own kernels run at full speed.
# Total of the limits: 480 s (GPU_CHECK_BUDGET_S, default 480).
#
# Files written to OUTDIR (at most 8, no folders: what the device machine sends back):
#   summary.txt    one line per stage: status, limit, time taken, detail; then the overall line
#   env.txt        environment;  build.log  build, import check, kernel resources
#   tests.log      pytest output;  bench.log, bench.json  the benchmark (JSON after every case)
#   sanitizer.log  memcheck, then racecheck
# The dry run (--dry-run or JLC_CUDA=OFF) skips the build and every GPU run but checks what it
# can on the CPU: the test selections of each pytest stage are collected (a selection of no
# tests fails), the benchmark runs on the CPU (--allow-cpu, tiny tiles; figures meaningless),
# and the summary shows each stage's limit. Exit status: 0 when no stage failed.
# Environment: PYTHON (default python3), JLC_DATA_DIR (folder of emb_dumps/; default
# ../shared/data or ./shared/data), GPU_CHECK_BUDGET_S, GPU_CHECK_LIMIT_<STAGE>_S.
set -u
usage() { echo "usage: bash bench/gpu_check.sh OUTDIR [--dry-run]" >&2; exit 2; }
OUT="" DRY=0
for a in "$@"; do
  case "$a" in
    --dry-run) DRY=1 ;;
    -h | --help) sed -n '2,44p' "$0"; exit 0 ;;
    -*) usage ;;
    *) [ -z "$OUT" ] || usage; OUT=$a ;;
  esac
done
[ -n "$OUT" ] || usage
[ "${JLC_CUDA:-}" = "OFF" ] && DRY=1
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET_S:-480}
L_BUILD=${GPU_CHECK_LIMIT_BUILD_S:-150}
L_TESTS=${GPU_CHECK_LIMIT_TESTS_S:-140}
L_BENCH=${GPU_CHECK_LIMIT_BENCH_S:-75}
L_MEMCHECK=${GPU_CHECK_LIMIT_MEMCHECK_S:-70}
L_RACECHECK=${GPU_CHECK_LIMIT_RACECHECK_S:-45}
# Test selections (pytest -k) of the sanitizer stages: small runs of the dictionary forms.
K_MEMCHECK="fuzz_small or (dictionary_forms_hot_rows and float32 and (auto or entropy))"
K_RACECHECK="fuzz_small"
T0=$(date +%s)
SUMMARY="$OUT/summary.txt"
# A rerun into the same folder leaves nothing of the run before.
rm -f "$OUT"/{summary.txt,env.txt,build.log,tests.log,bench.log,bench.json,bench.json.tmp,sanitizer.log}
N_PASS=0 N_FAIL=0 N_SKIP=0 N_DRY=0
# The installed package, not the checkout, must be imported on the GPU run: python -P keeps the
# checkout off sys.path, pytest's importlib mode does not put it back, and the bench package
# alone is reached through a link in a temporary folder (outside OUTDIR).
LINKS=$(mktemp -d) && ln -s "$ROOT/bench" "$LINKS/bench"
trap 'rm -rf "$LINKS"' EXIT
PYTEST=("$PY" -P -m pytest --import-mode=importlib -p no:cacheprovider -q)
if [ $DRY = 1 ]; then  # the checkout's own environment (an editable install or the source)
  PYTEST=("$PY" -m pytest -p no:cacheprovider -q)
fi

now() { date +%s; }
left() { echo $(( BUDGET - ($(now) - T0) )); }
# The limit of a stage: its own, or what is left of the budget when that is less.
limit_of() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }
# record STAGE STATUS LIMIT SECONDS DETAIL: one line of the summary, written at once.
record() {
  printf '%-9s %-9s limit %4ss  took %4ss  %s\n' "$1" "$2" "$3" "$4" "$5" >> "$SUMMARY"
  case "$2" in
    passed) N_PASS=$((N_PASS + 1)) ;; failed | timeout) N_FAIL=$((N_FAIL + 1)) ;;
    dry-run) N_DRY=$((N_DRY + 1)) ;; *) N_SKIP=$((N_SKIP + 1)) ;;
  esac
  echo "[gpu_check +$(( $(now) - T0 ))s] $1: $2 ($5)"
}
# run_limited LIMIT LOG CMD...: runs CMD under `timeout`, output appended to LOG; its status.
run_limited() {
  local t=$1 log=$2; shift 2
  echo "\$ $*  # limit ${t}s" >> "$log"
  timeout --kill-after=10 "$t" "$@" >> "$log" 2>&1
}
status_of() { [ "$1" = 0 ] && echo passed || { [ "$1" = 124 ] || [ "$1" = 137 ] && echo timeout || echo failed; }; }

{
  echo "gpu_check $(date -u +%FT%TZ) mode=$([ $DRY = 1 ] && echo dry-run || echo gpu) budget=${BUDGET}s"
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  printf '%-9s %-9s %-11s %-10s %s\n' stage status limit took detail
} > "$SUMMARY"

# ------------------------------------------------------------------ env
s0=$(now)
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin /opt/cuda/bin; do
    [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
  done
fi
NVCC=$(command -v nvcc || true)
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -z "${JLC_DATA_DIR:-}" ]; then
  for d in "$ROOT/../shared/data" "$ROOT/shared/data"; do
    [ -f "$d/emb_dumps/manifest.json" ] && JLC_DATA_DIR=$(cd "$d" && pwd) && export JLC_DATA_DIR && break
  done
fi
{
  date -u
  nvidia-smi 2>&1 || echo "nvidia-smi not available"
  "$PY" --version
  "$PY" -m pip list 2>/dev/null | grep -i -E "^(jax|jaxlib|jax-cuda|nanobind|scikit-build|numpy|pytest|ml.dtypes)" || true
  echo "nvcc: ${NVCC:-none} $([ -n "$NVCC" ] && nvcc --version | tail -n 1)"
  echo "compute-sanitizer: ${SAN:-none}"
  echo "data: ${JLC_DATA_DIR:-none (the benchmark uses synthetic data of the dump shapes)}"
  git -C "$ROOT" rev-parse HEAD 2>/dev/null || true
} > "$OUT/env.txt" 2>&1
record env passed - $(( $(now) - s0 )) "env.txt; nvcc ${NVCC:-none}; data ${JLC_DATA_DIR:-synthetic}"

# ------------------------------------------------------------------ build
BUILD_OK=0
s0=$(now)
t=$(limit_of "$L_BUILD")
if [ $DRY = 1 ]; then
  echo "dry run: would run JLC_CUDA=ON $PY -m pip install --no-build-isolation --no-deps -v ." > "$OUT/build.log"
  record build dry-run "$L_BUILD" 0 "skipped in the dry run (pip install . with JLC_CUDA=ON)"
elif [ -z "$NVCC" ]; then
  record build failed "$t" 0 "no nvcc (PATH, /usr/local/cuda/bin)"
else
  export CUDACXX=${CUDACXX:-$NVCC}
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 8)}
  : > "$OUT/build.log"
  run_limited "$t" "$OUT/build.log" env JLC_CUDA=ON "$PY" -m pip install --no-build-isolation --no-deps -v .
  rc=$?
  if [ $rc = 0 ]; then
    run_limited 60 "$OUT/build.log" "$PY" -P -c "import jax, jax_lossy_comm._ext as e; assert e.HAS_CUDA, 'built without CUDA'; print('import:', e.__file__, jax.__version__, jax.devices('gpu'))"
    rc=$?
    [ $rc = 0 ] || echo "the installed extension has no CUDA handlers or no GPU is visible" >> "$OUT/build.log"
  fi
  if [ $rc = 0 ]; then
    BUILD_OK=1
    EXT=$("$PY" -P -c "import jax_lossy_comm._ext as e; print(e.__file__)" 2>/dev/null)
    # Registers, shared memory and spills of every kernel as built.
    command -v cuobjdump >/dev/null 2>&1 && [ -n "$EXT" ] &&
      { echo "--- cuobjdump --dump-resource-usage"; cuobjdump --dump-resource-usage "$EXT"; } >> "$OUT/build.log" 2>&1
  fi
  record build "$(status_of $rc)" "$t" $(( $(now) - s0 )) "build.log: $(grep -m1 -o 'compiling CUDA kernels.*' "$OUT/build.log" || tail -n 1 "$OUT/build.log")"
fi

export XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONUNBUFFERED=1  # logs hold every line printed before a stage's time limit hit

# gpu_stage NAME LIMIT: whether the GPU stage NAME runs (records a skip and says no otherwise).
gpu_stage() {
  if [ $DRY = 0 ] && [ $BUILD_OK = 0 ]; then record "$1" skipped "$2" 0 "no build"; return 1; fi
  if [ "$(left)" -lt 20 ]; then record "$1" skipped "$2" 0 "out of budget"; return 1; fi
  return 0
}
# collect LOG K: the number of gpu tests of test_cuda.py that `-k K` selects (dry run).
collect() {
  local n
  n=$("${PYTEST[@]}" --collect-only tests/test_cuda.py -m gpu ${2:+-k "$2"} 2>>"$1" | tee -a "$1" | grep -c '::')
  echo "$n"
}

# ------------------------------------------------------------------ GPU tests
s0=$(now)
t=$(limit_of "$L_TESTS")
: > "$OUT/tests.log"
if [ $DRY = 1 ]; then
  n=$(collect "$OUT/tests.log" "")
  [ "$n" -gt 0 ] && st=dry-run || st=failed
  record tests "$st" "$L_TESTS" $(( $(now) - s0 )) "dry run: $n tests collected (pytest -m gpu tests/test_cuda.py -x)"
elif gpu_stage tests "$t"; then
  xdist=()  # 4 workers where pytest-xdist is installed (-x still stops at the first failure)
  "$PY" -P -c "import xdist" 2>/dev/null && xdist=(-n 4)
  run_limited "$t" "$OUT/tests.log" env XLA_PYTHON_CLIENT_MEM_FRACTION=0.15 "${PYTEST[@]}" -x \
    -rfEs --durations=15 "${xdist[@]}" tests/test_cuda.py -m gpu
  rc=$?
  if [ $rc = 0 ] && grep -q -E "SKIPPED.*(no CUDA device|built without the CUDA)" "$OUT/tests.log"; then
    rc=1 && echo "gpu_check: tests were skipped for want of a GPU or of the CUDA build" >> "$OUT/tests.log"
  fi
  record tests "$(status_of $rc)" "$t" $(( $(now) - s0 )) "tests.log: $(grep -E '(passed|failed|error)' "$OUT/tests.log" | tail -n 1)"
fi

# ------------------------------------------------------------------ benchmark
s0=$(now)
t=$(limit_of "$L_BENCH")
: > "$OUT/bench.log"
BENCH=(env PYTHONPATH="$LINKS" "$PY" -P -m bench.codec_bench_gpu --quick --json "$OUT/bench.json")
if [ $DRY = 1 ]; then
  run_limited "$L_BENCH" "$OUT/bench.log" "$PY" -m bench.codec_bench_gpu --quick --allow-cpu \
    --tile-mb 0.25 --json "$OUT/bench.json"
  rc=$?
  [ $rc = 0 ] && st=dry-run || st=$(status_of $rc)
  record bench "$st" "$L_BENCH" $(( $(now) - s0 )) "dry run on the CPU (figures meaningless): $(grep -c -E '^ +[a-z]+ +compress' "$OUT/bench.log") form results, bench.json"
elif gpu_stage bench "$t"; then
  run_limited "$t" "$OUT/bench.log" "${BENCH[@]}"
  rc=$?
  record bench "$(status_of $rc)" "$t" $(( $(now) - s0 )) "bench.log, bench.json: $(grep -c -E '^ +[a-z]+ +compress' "$OUT/bench.log") form results"
  grep -E "copy|compress" "$OUT/bench.log" | sed 's/  forms {.*//; s/^/    /' >> "$SUMMARY"
fi

# ------------------------------------------------------------------ compute-sanitizer
: > "$OUT/sanitizer.log"
SAN_OPTS=(--error-exitcode 99 --print-limit 50 --target-processes all)
if [ -n "$SAN" ] && "$SAN" --help 2>/dev/null | grep -q -- "--kernel-name"; then
  SAN_OPTS+=(--kernel-name kns=code_)
fi
# sanitize NAME TOOL LIMIT K: one compute-sanitizer stage.
sanitize() {
  local name=$1 tool=$2 lim=$3 k=$4 s0 t n rc
  s0=$(now)
  t=$(limit_of "$lim")
  echo "=== $name: compute-sanitizer --tool $tool, pytest -k '$k'" >> "$OUT/sanitizer.log"
  if [ $DRY = 1 ]; then
    n=$(collect "$OUT/sanitizer.log" "$k")
    [ "$n" -gt 0 ] && st=dry-run || st=failed
    record "$name" "$st" "$lim" $(( $(now) - s0 )) "dry run: $n tests selected by -k '$k'"
  elif ! gpu_stage "$name" "$t"; then
    :
  elif [ -z "$SAN" ]; then
    record "$name" skipped "$t" 0 "compute-sanitizer not found"
  else
    # The platform allocator gives each buffer its own allocation, so an access past a frame
    # or past the output is caught (inside XLA's pooled allocator it would not be).
    run_limited "$t" "$OUT/sanitizer.log" env XLA_PYTHON_CLIENT_ALLOCATOR=platform \
      "$SAN" --tool "$tool" "${SAN_OPTS[@]}" "${PYTEST[@]}" tests/test_cuda.py -m gpu -k "$k"
    rc=$?
    record "$name" "$(status_of $rc)" "$t" $(( $(now) - s0 )) "sanitizer.log: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed|failed' "$OUT/sanitizer.log" | tail -n 2 | tr '\n' ' ')"
  fi
}
sanitize memcheck memcheck "$L_MEMCHECK" "$K_MEMCHECK"
sanitize racecheck racecheck "$L_RACECHECK" "$K_RACECHECK"

# ------------------------------------------------------------------ overall
total=$(( $(now) - T0 ))
overall=$([ $N_FAIL = 0 ] && echo passed || echo failed)
echo "overall   $overall: $N_PASS passed, $N_FAIL failed, $N_SKIP skipped, $N_DRY dry-run; total ${total}s of ${BUDGET}s" >> "$SUMMARY"
cat "$SUMMARY"
[ $N_FAIL = 0 ]
