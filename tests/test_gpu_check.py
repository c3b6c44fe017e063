"""``bench/gpu_check.sh`` in its dry run on the CPU (issue 18, item 4).

The dry run (``--dry-run``, or ``JLC_CUDA=OFF``) skips the build and every GPU run but goes
through every stage: the test selections of the GPU test stage and of both compute-sanitizer
stages are collected, the quick benchmark runs on the CPU, and the summary gives each stage's
status, time limit and time taken. Checked here: the summary's lines and limits (their total
within the 8-minute budget), the files written (at most 8 plain files, no folders: what the
device machine sends back), the benchmark's JSON (fixed and auto on the DLRM exchange shape,
beside the copy), and that a stage running past its limit is reported as timed out, fails the
run, and does not stop the later stages.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
STAGES = ("env", "build", "tests", "bench", "memcheck", "racecheck")
LIMITS = {"build": 150, "tests": 140, "bench": 75, "memcheck": 70, "racecheck": 45}
LINE = re.compile(r"^(\w+)\s+(\S+)\s+limit\s+(\S+)s\s+took\s+(\d+)s\s+(.*)$")

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("timeout") is None,
    reason="needs bash and coreutils timeout",
)


def _run(out: Path, *args: str, **env: str):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("JLC_CUDA", "GPU_CHECK"))}
    full.update({"PYTHON": sys.executable, **env})
    run = subprocess.run(
        ["bash", str(SCRIPT), str(out), *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=full,
        cwd="/",
    )
    lines = (out / "summary.txt").read_text().splitlines()
    stages = {m.group(1): m.groups()[1:] for m in map(LINE.match, lines) if m}
    return run, lines, stages


def test_dry_run_summary_limits_and_files(tmp_path):
    run, lines, stages = _run(tmp_path / "out", "--dry-run")
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert "mode=dry-run budget=480s" in lines[0]
    assert list(stages) == list(STAGES)
    for name, limit in LIMITS.items():
        status, lim, took, detail = stages[name]
        assert status == "dry-run", (name, detail)
        assert int(lim) == limit and 0 <= int(took) <= limit, (name, lim, took)
    assert sum(LIMITS.values()) <= 480
    assert stages["env"][0] == "passed"
    for name in ("tests", "memcheck", "racecheck"):  # each selection holds tests
        n = int(re.search(r"(\d+) tests", stages[name][3]).group(1))
        assert n >= (100 if name == "tests" else 1), (name, stages[name][3])
    assert lines[-1].startswith("overall   passed: 1 passed, 0 failed, 0 skipped, 5 dry-run")
    # What comes back from the device machine: at most 8 plain files, no folders.
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert all((tmp_path / "out" / f).is_file() for f in files)
    assert files == sorted(
        [
            "bench.json",
            "bench.log",
            "build.log",
            "env.txt",
            "sanitizer.log",
            "summary.txt",
            "tests.log",
        ]
    )
    rec = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert rec["complete"] and rec["quick"] and rec["forms"] == ["fixed", "auto"]
    n_results = sum(len(r["forms"]) for r in rec["results"])
    assert len(rec["results"]) >= 3 and f" {n_results} form results" in stages["bench"][3]
    first = rec["results"][0]
    assert first["case"] == "dlrm_exchange_26x8x256x64" and first["copy"]["gbps"] > 0
    for form in ("fixed", "auto"):
        f = first["forms"][form]
        assert f["compress_gbps"] > 0 and f["decompress_gbps"] > 0
        assert f["bad_status_chunks"] == 0 and f["error_bound_ok_first_64"]


def test_stage_past_its_limit_fails_the_run_and_the_rest_still_runs(tmp_path):
    # JLC_CUDA=OFF is a dry run too; the benchmark gets 1 s and is stopped by `timeout`.
    run, lines, stages = _run(tmp_path / "out", JLC_CUDA="OFF", GPU_CHECK_LIMIT_BENCH_S="1")
    assert run.returncode == 1, (run.stdout[-3000:], run.stderr[-3000:])
    assert stages["bench"][:2] == ("timeout", "1")
    assert stages["memcheck"][0] == stages["racecheck"][0] == "dry-run"
    assert lines[-1].startswith("overall   failed: 1 passed, 1 failed, 0 skipped, 4 dry-run")


def test_failed_build_skips_the_gpu_stages(tmp_path):
    # The GPU mode on this machine: `pip install .` is stood in for (nothing is installed), and
    # the import check then finds no GPU (or the extension without CUDA handlers, or no nvcc is
    # found at all): the build fails and every later stage is skipped, saying why.
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" pip install "*) echo "pip install stood in for"; exit 0 ;; esac\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    fake.chmod(0o755)
    run, lines, stages = _run(tmp_path / "out", PYTHON=str(fake))
    assert run.returncode == 1, (run.stdout[-3000:], run.stderr[-3000:])
    assert "mode=gpu" in lines[0]
    assert stages["build"][0] == "failed"
    for name in ("tests", "bench", "memcheck", "racecheck"):
        assert stages[name][0] == "skipped", (name, stages[name])
        assert stages[name][3] == "no build", stages[name]
    assert lines[-1].startswith("overall   failed: 1 passed, 1 failed, 4 skipped, 0 dry-run")
