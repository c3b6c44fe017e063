#!/usr/bin/env bash
# GPU check in one shot, on a machine with an NVIDIA GPU: build the CUDA handlers (or install a
# prebuilt wheel), then a smoke test, the GPU tests of the codec, the exchange and the trainer,
# a quick benchmark and compute-sanitizer; each stage under its own time limit, every result in
# OUTDIR as soon as it exists, and a summary of what ran, passed, failed or was skipped, with
# times. docs/gpu.md says the same at more length.
#
#   bash bench/gpu_check.sh [OUTDIR]             # about 8 minutes at most (the stage limits)
#   bash bench/gpu_check.sh [OUTDIR] --dry-run   # on a CPU (also with JLC_CUDA=OFF): the same
#                                                # pytest command lines, the CPU standing in
# OUTDIR defaults to $GPU_CHECK_OUT, else ./gpu_check_out.
#
# What the machine needs (docs/gpu.md, "What to install"): the NVIDIA driver; Python with jax
# and its CUDA plugin (pip install 'jax[cuda13]<0.13'), this checkout's test dependencies
# (pip install -e '.[test]' installs them and builds the package), nanobind, scikit-build-core,
# cmake and ninja for the build; the CUDA toolkit's nvcc (CUDA 13) and compute-sanitizer. The
# package is built with --no-build-isolation --no-deps against the jax installed there, so the
# run fetches nothing. Optional: JLC_DATA_DIR, a folder holding emb_dumps/ (the real embedding
# dumps the dump tests and the benchmark read; default ./shared/data, else ../shared/data;
# without them those tests are skipped and the benchmark uses synthetic data); a prebuilt wheel
# in GPU_CHECK_WHEEL_DIR (default ./.whl, e.g. from tools/wheel.sh), installed only when the
# build fails.
#
# Stages, in order (limit in seconds, overridable by GPU_CHECK_LIMIT_<STAGE>_S; a stage whose
# limit does not fit in what is left of GPU_CHECK_BUDGET_S runs with what is left, and is
# skipped with under 20 s left). Before each stage summary.txt gets a "started" line, so a
# run killed from outside still says where it stopped.
#   env        interpreter, packages and tool versions, jax.devices() with JAX_PLATFORMS unset
#              (under a time limit), /dev/nvidia*, Python.h, commit          ENV 20 (~8 s)
#   build      pip install . with JLC_CUDA=ON (nvcc, sm_80 + sm_90); if that fails, pip
#              install --no-index --no-deps of the one prebuilt wheel for this Python in
#              GPU_CHECK_WHEEL_DIR; the import check; kernel registers / spills (cuobjdump)
#                                                                            BUILD 100 (~80 s)
#   smoke      one compress/decompress per codec and dtype against the CPU's frames, one
#              1-GPU ragged exchange, 3 trainer steps                        SMOKE 45 (~30 s)
#   tests      pytest -m gpu on tests/native/test_cuda.py, library/test_exchange_gpu.py, model/test_train_gpu.py:
#              --maxfail=20, --timeout per test (pytest-timeout), -n 4 (pytest-xdist); a skip
#              for "no CUDA device" or "built without the CUDA handlers" fails it
#                                                                            TESTS 145 (~100 s)
#   bench      python -m bench.codecs.codec_bench_gpu --quick: fixed and auto on the DLRM exchange
#              shape, the same chunks tiled to 512 MiB (beyond L2) and every real dump, each
#              beside a device-to-device copy of the same buffer             BENCH 70 (~50 s)
#   memcheck   compute-sanitizer --tool memcheck on the short fuzz run and the hot-row
#              dictionary tests                                              MEMCHECK 60 (~40 s)
#   racecheck  compute-sanitizer --tool racecheck on the short fuzz run      RACECHECK 40 (~30 s)
# Sanitizers run with --report-api-errors no (CUDA API errors of XLA's own runtime are not the
# codec's) and --kernel-name kns=code_ (encode_* / decode_* kernels only) where supported; a
# stage fails on a report naming the codec's kernels (lc::gpu::encode_* / decode_*) or on a
# failing test, other reports are counted in the detail. Total of the limits: 480 s.
#
# Files written to OUTDIR (8 plain files, no folders: one folder to copy off the machine or to
# attach to a report):
#   summary.txt  "started" and result lines per stage (status, limit, time taken, detail), the
#                benchmark's figures, then the overall line
#   env.txt  build.log  smoke.log  tests.log  bench.log  bench.json  sanitizer.log
# Reading summary.txt: each stage's line says passed / failed / timeout / skipped (why) /
# dry-run; a "started" line with no result line after it is where the run was killed. The
# detail names the log to read: tests.log ends with pytest's short summary (-rfEs) of every
# failure, error and skip, and the 15 slowest tests.
#
# The dry run (--dry-run or JLC_CUDA=OFF) skips the build and the sanitizer itself but runs
# every pytest selection (smoke, tests, memcheck, racecheck) with the GPU mode's command line
# and JLC_GPU_TESTS_ON_CPU=1 (the CPU standing in for the GPU), prints the pip and
# compute-sanitizer command lines it would run, and runs the benchmark on the CPU
# (--allow-cpu, tiny tiles; figures meaningless). Stage limits are not enforced in the dry
# run (GPU_CHECK_DRY_LIMIT_S each, default 900); the summary shows the GPU mode's.
# Exit status: 0 when no stage failed.
# Environment: PYTHON (default python3), GPU_CHECK_OUT (OUTDIR when none is given),
# JLC_DATA_DIR, GPU_CHECK_BUDGET_S, GPU_CHECK_LIMIT_<STAGE>_S, GPU_CHECK_TEST_TIMEOUT_S (per
# test; default 120, dry run 600), GPU_CHECK_WORKERS (xdist; default 4, fewer on fewer cores),
# GPU_CHECK_SELECT (a -k expression ANDed to every selection, e.g. "not trainer" for a quicker
# dry run), GPU_CHECK_WHEEL_DIR (default ./.whl).
set -u
usage() { echo "usage: bash bench/gpu_check.sh [OUTDIR] [--dry-run]" >&2; exit 2; }
DEST="" DRY=0
for a in "$@"; do
  case "$a" in
    --dry-run) DRY=1 ;;
    -h | --help) sed -n '2,72p' "$0"; exit 0 ;;
    -*) usage ;;
    *) [ -z "$DEST" ] || usage; DEST=$a ;;
  esac
done
DEST=${DEST:-${GPU_CHECK_OUT:-gpu_check_out}}
[ "${JLC_CUDA:-}" = "OFF" ] && DRY=1
mkdir -p "$DEST" && DEST=$(cd "$DEST" && pwd) || exit 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
PY=${PYTHON:-python3}
# The wheel tag of the interpreter (cp312): a prebuilt wheel must match it.
PY_TAG=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])' 2>/dev/null || echo cp3)
BUDGET=${GPU_CHECK_BUDGET_S:-480}
L_ENV=${GPU_CHECK_LIMIT_ENV_S:-20}
L_BUILD=${GPU_CHECK_LIMIT_BUILD_S:-100}
L_SMOKE=${GPU_CHECK_LIMIT_SMOKE_S:-45}
L_TESTS=${GPU_CHECK_LIMIT_TESTS_S:-145}
L_BENCH=${GPU_CHECK_LIMIT_BENCH_S:-70}
L_MEMCHECK=${GPU_CHECK_LIMIT_MEMCHECK_S:-60}
L_RACECHECK=${GPU_CHECK_LIMIT_RACECHECK_S:-40}
L_DRY=${GPU_CHECK_DRY_LIMIT_S:-900}
# Per-test limit: 120 s on the GPU; the CPU standing in is far slower (the trainer's tests).
TEST_TIMEOUT=${GPU_CHECK_TEST_TIMEOUT_S:-$([ $DRY = 1 ] && echo 600 || echo 120)}
NPROC=$(nproc 2>/dev/null || echo 4)
WORKERS=${GPU_CHECK_WORKERS:-$(( NPROC < 4 ? NPROC : 4 ))}
# An extra -k expression ANDed to every stage's selection (checks of this script itself).
SELECT=${GPU_CHECK_SELECT:-}
# The GPU tests and the selections (pytest -k) of the smoke and sanitizer stages.
GPU_TESTS=(tests/native/test_cuda.py tests/library/test_exchange_gpu.py tests/model/test_train_gpu.py)
K_SMOKE="(frames_identical_and_cross_decode and normal and not subnormal) or (exchange_forward_and_gradients and ragged) or trainer_compressed"
K_MEMCHECK="fuzz_small or (dictionary_forms_hot_rows and float32 and (auto or entropy)) or (decompress_fixed_rate and float32)"
K_RACECHECK="fuzz_small"
# A sanitizer report names the codec's kernels in its "at" / "Race reported between" lines.
CODEC_KERNELS='lc::gpu::(en|de)code_[a-z_]*kernel'
T0=$(date +%s)
SUMMARY="$DEST/summary.txt"
FILES=(summary.txt env.txt build.log smoke.log tests.log bench.log bench.json sanitizer.log)
# A rerun into the same folder leaves nothing of the run before.
for f in "${FILES[@]}" bench.json.tmp; do rm -f "${DEST:?}/$f"; done
N_PASS=0 N_FAIL=0 N_SKIP=0 N_DRY=0
# The installed package, not the checkout, must be imported on the GPU run: python -P keeps the
# checkout off sys.path, pytest's importlib mode does not put it back, and the bench package
# alone is reached through a link in a temporary folder (outside OUTDIR). The dry run uses the
# same command lines (its editable install or the source are found the same way).
LINKS=$(mktemp -d) && ln -s "$ROOT/bench" "$LINKS/bench"
trap 'rm -rf "$LINKS"' EXIT
PYTEST=("$PY" -P -m pytest --import-mode=importlib -p no:cacheprovider -q)
if [ $DRY = 1 ]; then
  export JLC_GPU_TESTS_ON_CPU=1  # the gpu tests run with the CPU standing in for the GPU
fi

now() { date +%s; }
left() { echo $(( BUDGET - ($(now) - T0) )); }
# The limit a stage runs under: its own (or what is left of the budget when that is less);
# in the dry run, GPU_CHECK_DRY_LIMIT_S (the CPU is no measure of the GPU's time).
limit_of() {
  local l
  [ $DRY = 1 ] && { echo "$L_DRY"; return; }
  l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"
}
# started STAGE LIMIT: the line written before a stage runs.
started() { printf '%-9s %-9s limit %4ss  at   +%ss\n' "$1" started "$2" $(( $(now) - T0 )) >> "$SUMMARY"; }
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
# dry_status RC: a dry-run stage's status (dry-run when its command passed).
dry_status() { [ "$1" = 0 ] && echo dry-run || status_of "$1"; }
# selection K: the -k expression of a stage whose own selection is K (empty: all tests).
selection() {
  if [ -n "$1" ] && [ -n "$SELECT" ]; then echo "($1) and ($SELECT)"; else echo "${1:-$SELECT}"; fi
}
# pytest_tail LOG: pytest's last result line in LOG ("3 passed, 1 skipped in 9.1s").
pytest_tail() { grep -E '[0-9]+ (passed|failed|error|skipped|deselected)' "$1" | tail -n 1; }
# gpu_skips LOG: whether LOG holds a test skipped for want of a GPU or of the CUDA build.
gpu_skips() { grep -q -E "SKIPPED.*(no CUDA device|built without the CUDA)" "$1"; }

{
  echo "gpu_check $(date -u +%FT%TZ) mode=$([ $DRY = 1 ] && echo dry-run || echo gpu) budget=${BUDGET}s"
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  printf '%-9s %-9s %-11s %-10s %s\n' stage status limit took detail
} > "$SUMMARY"

# ------------------------------------------------------------------ env
s0=$(now)
started env "$L_ENV"
if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin /opt/cuda/bin; do
    [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
  done
fi
NVCC=$(command -v nvcc || true)
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -z "${JLC_DATA_DIR:-}" ]; then
  for d in "$ROOT/shared/data" "$ROOT/../shared/data"; do
    [ -f "$d/emb_dumps/manifest.json" ] && JLC_DATA_DIR=$(cd "$d" && pwd) && export JLC_DATA_DIR && break
  done
fi
{
  date -u
  nvidia-smi 2>&1 || echo "nvidia-smi not available"
  echo "--- ls /dev/nvidia*"; ls -l /dev/nvidia* 2>&1
  "$PY" --version
  echo "--- packages"
  "$PY" -m pip list 2>/dev/null | grep -i -E "^(jax|jaxlib|jax-cuda|nanobind|scikit.build|cmake|ninja|numpy|pytest|ml.dtypes|flax|optax|orbax|isal|zstandard|pyarrow) " || true
  echo "cmake: $(cmake --version 2>/dev/null | head -n 1 || echo none)"
  echo "nvcc: ${NVCC:-none} $([ -n "$NVCC" ] && nvcc --version | tail -n 1)"
  echo "compute-sanitizer: ${SAN:-none} $([ -n "$SAN" ] && "$SAN" --version 2>/dev/null | tail -n 1)"
  echo "Python.h: $("$PY" -c 'import os, sysconfig; p = os.path.join(sysconfig.get_paths()["include"], "Python.h"); print(p, "exists" if os.path.exists(p) else "MISSING")')"
  echo "data: ${JLC_DATA_DIR:-none (the dump tests are skipped, the benchmark uses synthetic data)}"
  echo "wheel: $(ls "${GPU_CHECK_WHEEL_DIR:-$ROOT/.whl}"/jax_lossy_comm-*-"$PY_TAG"-*.whl 2>/dev/null || echo "no prebuilt $PY_TAG wheel")"
  echo "--- jax.devices() with JAX_PLATFORMS unset (limit 15 s)"
  env -u JAX_PLATFORMS timeout 15 "$PY" -P -c "import jax; print(jax.__version__, jax.devices())" 2>&1 | tail -n 3
  git -C "$ROOT" rev-parse HEAD 2>/dev/null || true
} > "$DEST/env.txt" 2>&1
record env passed "$L_ENV" $(( $(now) - s0 )) "env.txt; $(grep -m1 '^--- jax' -A1 "$DEST/env.txt" | tail -n 1 | cut -c1-80); nvcc ${NVCC:-none}; data ${JLC_DATA_DIR:-synthetic}"

# ------------------------------------------------------------------ build
BUILD_OK=0
s0=$(now)
t=$(limit_of "$L_BUILD")
started build "$L_BUILD"
: > "$DEST/build.log"
BUILD=(env JLC_CUDA=ON "$PY" -m pip install --no-build-isolation --no-deps -v .)
WHEEL_GLOB="${GPU_CHECK_WHEEL_DIR:-$ROOT/.whl}/jax_lossy_comm-*-$PY_TAG-*.whl"
IMPORT_CHECK=("$PY" -P -c "import jax, jax_lossy_comm._ext as e; assert e.HAS_CUDA, 'built without CUDA'; print('import:', e.__file__, jax.__version__, jax.devices('gpu'))")
if [ $DRY = 1 ]; then
  {
    echo "dry run: would run"
    echo "  ${BUILD[*]}"
    echo "  and if that fails: $PY -m pip install --no-index --no-deps --force-reinstall $WHEEL_GLOB ($(ls $WHEEL_GLOB 2>/dev/null || echo 'no such file here'))"
    echo "  then the import check: ${IMPORT_CHECK[*]}"
  } | tee -a "$DEST/build.log"
  record build dry-run "$L_BUILD" 0 "pip command lines in build.log (not run)"
else
  how="build"
  rc=1
  if [ -z "$NVCC" ]; then
    echo "no nvcc (PATH, /usr/local/cuda/bin): the build is not tried" >> "$DEST/build.log"
  else
    export CUDACXX=${CUDACXX:-$NVCC}
    export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 8)}
    run_limited $(( t > 40 ? t - 20 : t )) "$DEST/build.log" "${BUILD[@]}"  # 20 s kept for the wheel
    rc=$?
  fi
  if [ $rc != 0 ]; then
    wheels=($WHEEL_GLOB)
    if [ -f "${wheels[0]}" ] && [ ${#wheels[@]} = 1 ]; then
      echo "gpu_check: the build failed (status $rc); installing the prebuilt wheel ${wheels[0]}" >> "$DEST/build.log"
      run_limited 60 "$DEST/build.log" "$PY" -m pip install --no-index --no-deps --force-reinstall "${wheels[0]}"
      rc=$? how="prebuilt wheel ${wheels[0]##*/}"
    else
      echo "gpu_check: the build failed (status $rc) and there is not exactly one prebuilt wheel $WHEEL_GLOB (tools/wheel.sh makes one)" >> "$DEST/build.log"
    fi
  fi
  if [ $rc = 0 ]; then
    run_limited 60 "$DEST/build.log" "${IMPORT_CHECK[@]}"
    rc=$?
    [ $rc = 0 ] || echo "the installed extension has no CUDA handlers or no GPU is visible" >> "$DEST/build.log"
  fi
  if [ $rc = 0 ]; then
    BUILD_OK=1
    EXT=$("$PY" -P -c "import jax_lossy_comm._ext as e; print(e.__file__)" 2>/dev/null)
    # Registers, shared memory and spills of every kernel as built.
    command -v cuobjdump >/dev/null 2>&1 && [ -n "$EXT" ] &&
      { echo "--- cuobjdump --dump-resource-usage"; cuobjdump --dump-resource-usage "$EXT"; } >> "$DEST/build.log" 2>&1
  fi
  record build "$(status_of $rc)" "$t" $(( $(now) - s0 )) "$how; build.log: $(grep -m1 -o 'compiling CUDA kernels.*' "$DEST/build.log" || tail -n 1 "$DEST/build.log" | cut -c1-120)"
fi

export XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONUNBUFFERED=1  # logs hold every line printed before a stage's time limit hit

# gpu_stage NAME LIMIT: whether the GPU stage NAME runs (records a skip and says no otherwise).
gpu_stage() {
  if [ $DRY = 0 ] && [ $BUILD_OK = 0 ]; then record "$1" skipped "$2" 0 "no build"; return 1; fi
  if [ $DRY = 0 ] && [ "$(left)" -lt 20 ]; then record "$1" skipped "$2" 0 "out of budget"; return 1; fi
  return 0
}
# Plugins where installed: a per-test time limit and parallel workers where installed.
PLUGINS=()
"$PY" -P -c "import pytest_timeout" 2>/dev/null && PLUGINS+=(--timeout="$TEST_TIMEOUT")
XDIST=()
"$PY" -P -c "import xdist" 2>/dev/null && XDIST=(-n "$WORKERS")

# pytest_stage NAME LIMIT LOG K ARGS...: the GPU tests selected by -k K (all when K is
# empty), in the same command line in both modes; the status, with a GPU skip as a failure.
pytest_stage() {
  local name=$1 lim=$2 log=$3 k s0 t rc st
  k=$(selection "$4"); shift 4
  s0=$(now)
  t=$(limit_of "$lim")
  started "$name" "$lim"
  : > "$log"
  gpu_stage "$name" "$t" || return 0
  run_limited "$t" "$log" env XLA_PYTHON_CLIENT_MEM_FRACTION=0.15 "${PYTEST[@]}" -rfEs \
    "$@" "${GPU_TESTS[@]}" -m gpu ${k:+-k "$k"}
  rc=$?
  if [ $rc = 0 ] && gpu_skips "$log"; then
    rc=1 && echo "gpu_check: tests were skipped for want of a GPU or of the CUDA build" >> "$log"
  fi
  st=$([ $DRY = 1 ] && dry_status $rc || status_of $rc)
  record "$name" "$st" "$lim" $(( $(now) - s0 )) "${log##*/}: $(pytest_tail "$log")"
}

# ------------------------------------------------------------------ smoke, GPU tests
pytest_stage smoke "$L_SMOKE" "$DEST/smoke.log" "$K_SMOKE" "${PLUGINS[@]}"
pytest_stage tests "$L_TESTS" "$DEST/tests.log" "" --maxfail=20 --durations=15 "${PLUGINS[@]}" "${XDIST[@]}"

# ------------------------------------------------------------------ benchmark
s0=$(now)
t=$(limit_of "$L_BENCH")
started bench "$L_BENCH"
: > "$DEST/bench.log"
BENCH=(env PYTHONPATH="$LINKS" "$PY" -P -m bench.codecs.codec_bench_gpu --quick --json "$DEST/bench.json")
if [ $DRY = 1 ]; then
  run_limited "$t" "$DEST/bench.log" "${BENCH[@]}" --allow-cpu --tile-mb 0.25 --large-mb 1
  rc=$?
  record bench "$(dry_status $rc)" "$L_BENCH" $(( $(now) - s0 )) "dry run on the CPU (figures meaningless): $(grep -c -E '^ +[a-z]+ +compress' "$DEST/bench.log") form results, bench.json"
elif gpu_stage bench "$t"; then
  run_limited "$t" "$DEST/bench.log" "${BENCH[@]}"
  rc=$?
  record bench "$(status_of $rc)" "$t" $(( $(now) - s0 )) "bench.log, bench.json: $(grep -c -E '^ +[a-z]+ +compress' "$DEST/bench.log") form results"
  grep -E "copy|compress" "$DEST/bench.log" | sed 's/  forms {.*//; s/^/    /' >> "$SUMMARY"
fi

# ------------------------------------------------------------------ compute-sanitizer
: > "$DEST/sanitizer.log"
SAN_OPTS=(--report-api-errors no --print-limit 50 --target-processes all)
if [ -n "$SAN" ] && "$SAN" --help 2>/dev/null | grep -q -- "--kernel-name"; then
  SAN_OPTS+=(--kernel-name kns=code_)
fi
# sanitize NAME TOOL LIMIT K: one compute-sanitizer stage over the codec tests selected by K.
sanitize() {
  local name=$1 tool=$2 lim=$3 k s0 t rc n_codec n_all st
  k=$(selection "$4")
  s0=$(now)
  t=$(limit_of "$lim")
  started "$name" "$lim"
  local cmd=("${PYTEST[@]}" "${PLUGINS[@]}" tests/native/test_cuda.py -m gpu -k "$k")
  # The platform allocator gives each buffer its own allocation, so an access past a frame
  # or past the output is caught (inside XLA's pooled allocator it would not be).
  local san=(env XLA_PYTHON_CLIENT_ALLOCATOR=platform "${SAN:-compute-sanitizer}" --tool "$tool" "${SAN_OPTS[@]}")
  echo "=== $name: compute-sanitizer --tool $tool, pytest -k '$k'" >> "$DEST/sanitizer.log"
  if [ $DRY = 1 ]; then
    echo "dry run: would run $(printf '%q ' "${san[@]}" "${cmd[@]}")" | tee -a "$DEST/sanitizer.log"
    echo "dry run: runs the selection without the sanitizer, the CPU standing in" >> "$DEST/sanitizer.log"
    run_limited "$t" "$DEST/sanitizer.log" "${cmd[@]}"
    rc=$?
    record "$name" "$(dry_status $rc)" "$lim" $(( $(now) - s0 )) "dry run (no sanitizer): $(pytest_tail "$DEST/sanitizer.log" | tail -n 1)"
    return 0
  fi
  gpu_stage "$name" "$t" || return 0
  if [ -z "$SAN" ]; then
    record "$name" skipped "$t" 0 "compute-sanitizer not found"
    return 0
  fi
  local log="$LINKS/sanitizer.$name.log"  # outside OUTDIR: a kill leaves no ninth file
  run_limited "$t" "$log" "${san[@]}" "${cmd[@]}"
  rc=$?
  cat "$log" >> "$DEST/sanitizer.log"
  # Reports that name the codec's kernels fail the stage; others (XLA's kernels) are counted.
  n_codec=$(grep -c -E "^=+ .*$CODEC_KERNELS" "$log")
  n_all=$(grep -c -E "^=+ +(Invalid|Race reported|Error|Uninitialized|Barrier|Program hit)" "$log")
  rm -f "$log"
  st=$(status_of $rc)
  [ "$n_codec" -gt 0 ] && [ "$st" = passed ] && st=failed
  record "$name" "$st" "$t" $(( $(now) - s0 )) "sanitizer.log: $n_codec report lines naming the codec's kernels, $n_all reports in all; $(pytest_tail "$DEST/sanitizer.log" | tail -n 1)"
}
sanitize memcheck memcheck "$L_MEMCHECK" "$K_MEMCHECK"
sanitize racecheck racecheck "$L_RACECHECK" "$K_RACECHECK"

# ------------------------------------------------------------------ overall
rm -f "$DEST/bench.json.tmp"
total=$(( $(now) - T0 ))
overall=$([ $N_FAIL = 0 ] && echo passed || echo failed)
limits=$(( L_ENV + L_BUILD + L_SMOKE + L_TESTS + L_BENCH + L_MEMCHECK + L_RACECHECK ))
echo "overall   $overall: $N_PASS passed, $N_FAIL failed, $N_SKIP skipped, $N_DRY dry-run; total ${total}s of ${BUDGET}s; stage limits sum to ${limits}s" >> "$SUMMARY"
cat "$SUMMARY"
[ $N_FAIL = 0 ]
