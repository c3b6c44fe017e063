"""The CUDA kernels, run on the CPU: frames, values and statuses identical to the CPU codec.

``tests/cuda_emu/check_kernels.cc`` includes ``xla_ffi/codec_cuda.cu`` with
``LC_CUDA_EMULATION`` (``tests/cuda_emu/emu.h`` maps thread blocks to CPU threads, barriers and
shuffles to a block-wide exchange) and compares every kernel with ``frame.h``'s CPU codec:
encoded frames byte for byte (fixed/raw: the parallel kernel; auto/dedup/entropy: the serial
one), decoded values and statuses of valid and corrupted frames, under AddressSanitizer and
UBSan (which also flags misaligned word accesses). No GPU needed, so CI runs it; it checks the
kernels' logic, not the GPU memory model or nvcc (``tests/test_cuda.py`` does that on a GPU).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CXX = shutil.which("g++") or shutil.which("clang++")


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) on PATH")
def test_cuda_kernels_under_cpu_emulation(tmp_path):
    exe = tmp_path / "check_kernels"
    cmd = [CXX, "-std=c++20", "-O1", "-g", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=undefined", "-pthread", "-DLC_CUDA_EMULATION",
           "-Wno-unknown-pragmas", "-include", str(ROOT / "tests/cuda_emu/emu.h"),
           f"-I{ROOT / 'xla_ffi'}", str(ROOT / "tests/cuda_emu/check_kernels.cc"), "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run([str(exe), "quick"], capture_output=True, text=True, timeout=900,
                         env={"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-4000:])
    assert "0 failures" in run.stdout
