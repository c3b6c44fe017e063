"""Decoder fuzzing in C++ under AddressSanitizer and UBSan (tests/native/fuzz/fuzz_frames.cc).

Builds the harness against xla_ffi/codec.h with the system C++ compiler and runs a short
campaign; ``JLC_FUZZ_ITERATIONS=1000000 python -m pytest tests/native/test_fuzz.py``
runs longer campaigns (or build the binary by hand as the source says).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CXX = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")


@pytest.mark.skipif(CXX is None, reason="no C++ compiler on PATH to build the sanitizer harness")
def test_decoder_survives_mutated_frames_under_asan(tmp_path):
    exe = tmp_path / "fuzz_frames"
    build = subprocess.run(
        [
            CXX,
            "-std=c++17",
            "-O1",
            "-g",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-ffp-contract=off",
            f"-I{ROOT / 'xla_ffi'}",
            str(ROOT / "tests" / "native" / "fuzz" / "fuzz_frames.cc"),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    if build.returncode != 0 and "sanitize" in build.stderr:
        pytest.skip(f"compiler lacks sanitizer runtimes: {build.stderr[-300:]}")
    assert build.returncode == 0, build.stderr
    iterations = os.environ.get("JLC_FUZZ_ITERATIONS", "4000")
    run = subprocess.run(
        [str(exe), iterations, "3"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1"},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rejected = int(run.stdout.split("iterations, ")[1].split()[0])
    assert rejected > int(iterations)  # most mutations must be caught
