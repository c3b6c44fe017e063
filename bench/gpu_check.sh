#!/usr/bin/env bash
# GPU check of the CUDA codec (issue 7): build with CUDA, run the GPU tests, the GPU codec
# benchmark (compress / decompress GB/s of every codec form, incl. the parallel dictionary and
# Huffman kernels, beside a device copy) and a compute-sanitizer memcheck of a small fuzz run
# (which includes corrupted dictionary/Huffman frames); every log goes to OUTDIR.
#
#   bash bench/gpu_check.sh OUTDIR
#
# Meant for one GPU machine without a package index (e.g. an H200 image with Python 3.12,
# jax + the CUDA plugin, nanobind, scikit-build-core, cmake, ninja and nvcc): the package is
# built with --no-build-isolation against the jaxlib installed there. Budget: about 8 minutes;
# each stage has a time limit and the script reports what it skipped. Environment knobs:
#   PYTHON        interpreter (default: python3)
#   JLC_DATA_DIR  folder holding emb_dumps/ (default: ../shared/data or ./shared/data)
#   GPU_CHECK_BUDGET_S  total seconds (default 470)
set -u
OUT=${1:?usage: bash bench/gpu_check.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET_S:-470}
T0=$(date +%s)
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
log() { echo "[gpu_check +$(( $(date +%s) - T0 ))s] $*" | tee -a "$SUMMARY"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

# ------------------------------------------------------------------ environment
{
  date -u
  nvidia-smi 2>&1 || echo "nvidia-smi not available"
  "$PY" --version
  "$PY" -m pip list 2>/dev/null | grep -i -E "^(jax|jaxlib|jax-cuda|nanobind|scikit-build|numpy|pytest|ml.dtypes)" || true
  git -C "$ROOT" rev-parse HEAD 2>/dev/null || true
} > "$OUT/env.txt" 2>&1

if ! command -v nvcc >/dev/null 2>&1; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin /opt/cuda/bin; do
    [ -x "$d/nvcc" ] && export PATH="$d:$PATH" && break
  done
fi
if command -v nvcc >/dev/null 2>&1; then
  export CUDACXX=${CUDACXX:-$(command -v nvcc)}
  log "nvcc: $CUDACXX ($(nvcc --version | tail -n 1))"
else
  log "FAIL: no nvcc found (PATH, /usr/local/cuda/bin); cannot build the CUDA handlers"
  exit 1
fi

if [ -z "${JLC_DATA_DIR:-}" ]; then
  for d in "$ROOT/../shared/data" "$ROOT/shared/data"; do
    [ -f "$d/emb_dumps/manifest.json" ] && export JLC_DATA_DIR=$(cd "$d" && pwd) && break
  done
fi
log "data: ${JLC_DATA_DIR:-none found (the benchmark uses synthetic data of the dump shapes)}"

# ------------------------------------------------------------------ build
log "build: pip install --no-build-isolation --no-deps -v . (JLC_CUDA=ON)"
export JLC_CUDA=ON
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 8)}
b0=$(date +%s)
if ! "$PY" -m pip install --no-build-isolation --no-deps -v . > "$OUT/build.log" 2>&1; then
  log "FAIL: build (see build.log)"; tail -n 40 "$OUT/build.log"; exit 1
fi
log "build ok in $(( $(date +%s) - b0 ))s: $(grep -m1 'compiling CUDA kernels' "$OUT/build.log" | sed 's/^ *//')"
# -P: do not put the checkout first on sys.path, so the installed package (with _ext) is used.
if ! "$PY" -P -c "import jax, jax_lossy_comm._ext as e; assert e.HAS_CUDA, 'built without CUDA'; print(e.__file__, jax.__version__, jax.devices())" > "$OUT/import.txt" 2>&1; then
  log "FAIL: the installed extension has no CUDA handlers or no GPU is visible"; cat "$OUT/import.txt"; exit 1
fi
log "import: $(tail -n 1 "$OUT/import.txt")"
# Registers / shared memory / spills of every kernel, as built (the dictionary encoder is bounded
# to 4 resident blocks per SM: kDictMinBlocks in xla_ffi/cuda_common.cuh).
EXT=$("$PY" -P -c "import jax_lossy_comm._ext as e; print(e.__file__)" 2>/dev/null)
if command -v cuobjdump >/dev/null 2>&1 && [ -n "$EXT" ]; then
  cuobjdump --dump-resource-usage "$EXT" > "$OUT/kernel_resources.txt" 2>&1 || true
  log "kernel resources: kernel_resources.txt ($(grep -c 'Function' "$OUT/kernel_resources.txt") functions)"
fi

export XLA_PYTHON_CLIENT_PREALLOCATE=false
rc_all=0

# ------------------------------------------------------------------ GPU tests
t=$(( $(left) - 200 )); [ $t -gt 200 ] && t=200
if [ $t -gt 30 ]; then
  log "tests: pytest -m gpu tests/test_cuda.py (limit ${t}s)"
  xdist=""
  "$PY" -P -c "import xdist" 2>/dev/null && xdist="-n 4"
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.15 timeout "$t" "$PY" -P -m pytest tests/test_cuda.py -m gpu -q $xdist \
    -p no:cacheprovider --junitxml="$OUT/pytest_gpu.xml" -rs > "$OUT/pytest_gpu.log" 2>&1
  rc=$?
  log "tests: rc=$rc: $(tail -n 1 "$OUT/pytest_gpu.log")"
  [ $rc -ne 0 ] && rc_all=1
else
  log "tests: SKIPPED, out of time"; rc_all=1
fi

# ------------------------------------------------------------------ benchmark
t=$(( $(left) - 60 )); [ $t -gt 180 ] && t=180
if [ $t -gt 30 ]; then
  quick=""
  [ $t -lt 120 ] && quick="--quick"
  log "bench: python -m bench.codec_bench_gpu $quick (limit ${t}s)"
  # -P keeps the checkout off sys.path (the installed package has the CUDA build); the bench
  # package alone is put on it through a link.
  mkdir -p "$OUT/path" && ln -sfn "$ROOT/bench" "$OUT/path/bench"
  timeout "$t" env PYTHONPATH="$OUT/path" "$PY" -P -m bench.codec_bench_gpu --out "$OUT" $quick \
    > "$OUT/bench.log" 2>&1
  rc=$?
  log "bench: rc=$rc"
  grep -E "GB/s|copy" "$OUT/bench.log" | tee -a "$SUMMARY" > /dev/null
  [ $rc -ne 0 ] && rc_all=1
else
  log "bench: SKIPPED, out of time"; rc_all=1
fi

# ------------------------------------------------------------------ compute-sanitizer
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
t=$(( $(left) - 5 )); [ $t -gt 120 ] && t=120
if [ -z "$SAN" ]; then
  log "memcheck: SKIPPED, compute-sanitizer not found"
elif [ $t -gt 30 ]; then
  log "memcheck: compute-sanitizer --tool memcheck pytest -k fuzz_small (limit ${t}s)"
  # The platform allocator gives each buffer its own allocation, so an access past a frame or
  # past the output is caught (inside XLA's pooled allocator it would not be).
  XLA_PYTHON_CLIENT_ALLOCATOR=platform timeout "$t" "$SAN" --tool memcheck --error-exitcode 99 \
    --print-limit 50 --target-processes all \
    "$PY" -P -m pytest tests/test_cuda.py -m gpu -q -k fuzz_small -p no:cacheprovider \
    > "$OUT/memcheck.log" 2>&1
  rc=$?
  log "memcheck: rc=$rc: $(grep -E 'ERROR SUMMARY|passed|failed|not supported' "$OUT/memcheck.log" | tail -n 2 | tr '\n' ' ')"
  [ $rc -ne 0 ] && rc_all=1
else
  log "memcheck: SKIPPED, out of time"
fi

log "done in $(( $(date +%s) - T0 ))s, overall rc=$rc_all (logs in $OUT)"
exit $rc_all
