"""The CUDA kernels, run on the CPU: frames, values and statuses identical to the CPU codec.

``tests/native/cuda_emu/check_kernels.cc`` includes the kernels (``xla_ffi/encode_kernels.cuh``,
``xla_ffi/decode_kernels.cuh``) with ``LC_CUDA_EMULATION`` (``tests/native/cuda_emu/emu.h`` runs each
thread of a block as a fiber, one barrier phase at a time in a shuffled order; shuffles and
ballots go through a block-wide exchange) and compares every kernel with the CPU codec
(``xla_ffi/codec.h``): encoded frames byte for byte
(fixed/raw: ``encode_fixed_kernel``; auto/dedup/entropy: the parallel dictionary encoder
``encode_dict_kernel``), decoded values and statuses of valid and corrupted frames
(``decode_fast_kernel`` + ``decode_dict_kernel``), under AddressSanitizer and UBSan (which also
flags misaligned word accesses). Shapes include empty chunks, one row, 2048 x 64 chunks, large
code alphabets, hot-row data like the real dumps and, when the dumps are present, the dumps
themselves and the DLRM exchange shape (26 x 8 chunks of 256 x 64) cut from them. No GPU needed,
so CI runs it; it checks the kernels' logic, not the GPU memory model or nvcc
(``tests/native/test_cuda.py`` does that on a GPU).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CXX = shutil.which("g++") or shutil.which("clang++")
DATA = Path(os.environ.get("JLC_DATA_DIR", ROOT.parent / "shared" / "data"))
DUMPS = DATA / "emb_dumps"
#: Digests of the emulated kernels' frames per case (regenerate only on a format change:
#: ``./check_kernels quick golden tests/native/golden/cuda_emu.txt ../shared/data/emb_dumps``).
GOLDEN = ROOT / "tests" / "native" / "golden" / "cuda_emu.txt"


_ENV = {"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"}


def _build(tmp_path, source: str) -> Path:
    """Builds tests/native/cuda_emu/<source>.cc with the kernels emulated, under ASan and UBSan."""
    exe = tmp_path / source
    cmd = [
        CXX,
        "-std=c++20",
        "-O1",
        "-g",
        "-ffp-contract=off",
        "-fsanitize=address,undefined",
        "-fno-sanitize-recover=undefined",
        "-pthread",
        "-DLC_CUDA_EMULATION",
        "-Wno-unknown-pragmas",
        "-include",
        str(ROOT / "tests/native/cuda_emu/emu.h"),
        f"-I{ROOT / 'xla_ffi'}",
        str(ROOT / f"tests/native/cuda_emu/{source}.cc"),
        "-o",
        str(exe),
    ]
    build = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-4000:]
    return exe


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) on PATH")
def test_cuda_kernels_under_cpu_emulation(tmp_path):
    exe = _build(tmp_path, "check_kernels")
    digests = tmp_path / "golden.txt"
    args = [str(exe), "quick", "golden", str(digests)]
    if (DUMPS / "manifest.json").is_file():
        args.append(str(DUMPS))
    run = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=900,
        env=_ENV,
    )
    assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-4000:])
    assert "0 failures" in run.stdout
    # Golden corpus: the same frames, sizes, values and statuses as the committed digests.
    got = digests.read_text().splitlines()
    want = GOLDEN.read_text().splitlines()
    if not (DUMPS / "manifest.json").is_file():
        want = [w for w in want if not w.startswith(("dump ", "exchange "))]
    assert len(got) == len(want)
    diff = [(g, w) for g, w in zip(got, want) if g != w]
    assert not diff, (
        f"{len(diff)} of {len(want)} cases differ from {GOLDEN.name}, first: {diff[:3]}"
    )


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) on PATH")
def test_cuda_host_side_under_cpu_emulation(tmp_path):
    """The CUDA handlers' launch code (``xla_ffi/cuda_launch.h``) against XLA's FFI contract.

    ``tests/native/cuda_emu/check_host.cc`` runs the compress, decompress and frame-status entry points
    (scratch sizing, allocation and carving, grids, launches) with the kernels emulated and
    stand-ins for XLA's scratch allocator (alignment a power of two and at most 16, else no
    memory; 16-aligned blocks only; failures on request) and for the runtime (streams of a
    device other than the current one; launches checked to come on the given stream; device
    queries counted): frames, values and statuses equal the CPU codec's, a zero-size batch
    allocates and launches nothing, a failed allocation is an error and launches nothing,
    device queries are asked once per kernel, and every grid stays within its scratch budget
    (the fixed-rate path's included). ``occupancy_blocks`` gives the blocks per SM that NVIDIA's
    occupancy rules give for sm_80 and sm_90 limits (answers worked by hand), and the fixed
    encoder's parts and grids follow the occupancy of the kernels it launches (a runtime where
    they differ). The 256-byte alignment requested before commit 9fc0403
    gets no memory from the stand-in, as from XLA, and fails here.
    """
    exe = _build(tmp_path, "check_host")
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600, env=_ENV)
    assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-4000:])
    assert run.stdout.rstrip().endswith(" 0 failures"), run.stdout[-4000:]
    assert int(run.stdout.split()[-4]) > 400  # checks made
