"""``bench/gpu_check.sh`` on the CPU: its dry run and its GPU mode's failure paths.

The dry run (``--dry-run``, or ``JLC_CUDA=OFF``) skips the build and the sanitizer itself but
runs every pytest selection (smoke, tests, memcheck, racecheck) through the GPU mode's command
line with the CPU standing in (``JLC_GPU_TESTS_ON_CPU=1``), prints the pip and
compute-sanitizer command lines, and runs the benchmark on the CPU. Checked here: the
"started" and result lines of every stage in order, their limits (total within the 8-minute
budget), the command lines, the files written (8 plain files, no folders: one folder to copy
off the GPU machine), the benchmark's cases (the exchange shape and its tiling beyond L2,
each beside the copy); that a stage past its limit is reported as timed out and the later
stages still run; that without an OUTDIR argument the files go to ``$GPU_CHECK_OUT``; that a
failed build installs the prebuilt wheel of the interpreter's tag, or says there is none, and
skips the GPU stages. The dry run here leaves the trainer's tests out (``GPU_CHECK_SELECT``;
about 2 minutes each on a loaded 2-core machine) and still takes about 4 minutes: ``slow``.
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

ROOT = Path(__file__).resolve().parents[2]
# The wheel tag of this interpreter: the prebuilt wheel the script looks for must match it.
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
SCRIPT = ROOT / "bench" / "gpu_check.sh"
STAGES = ("env", "build", "smoke", "tests", "bench", "memcheck", "racecheck")
LIMITS = dict(zip(STAGES, (20, 100, 45, 145, 70, 60, 40), strict=True))
LINE = re.compile(r"^(\w+)\s+(\S+)\s+limit\s+(\S+)s\s+(?:took|at)\s+\+?(\d+)s\s*(.*)$")
FILES = ["bench.json", "bench.log", "build.log", "env.txt", "sanitizer.log", "smoke.log"]
FILES += ["summary.txt", "tests.log"]

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("timeout") is None,
    reason="needs bash and coreutils timeout",
)


def _run(out: Path | None, *args: str, **env: str):
    full = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JLC_CUDA", "JLC_GPU", "GPU_CHECK"))
    }
    full.update({"PYTHON": sys.executable, **env})
    run = subprocess.run(
        ["bash", str(SCRIPT), *([str(out)] if out else []), *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=full,
        cwd="/",
    )
    lines = (Path(out or env["GPU_CHECK_OUT"]) / "summary.txt").read_text().splitlines()
    rows = [m.groups() for m in map(LINE.match, lines) if m]
    stages = {r[0]: r[1:] for r in rows if r[1] != "started"}
    return run, lines, stages, rows


@pytest.mark.slow
def test_dry_run_runs_every_selection_through_the_gpu_command_line(tmp_path):
    out = tmp_path / "out"
    run, lines, stages, rows = _run(out, "--dry-run", GPU_CHECK_SELECT="not trainer")
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    assert "mode=dry-run budget=480s" in lines[0]
    # a "started" line before each stage's result, in the stage order
    assert [(r[0], r[1] == "started") for r in rows] == [
        (name, started) for name in STAGES for started in (True, False)
    ]
    for name, limit in LIMITS.items():
        status, lim, _, detail = stages[name]
        assert status == ("passed" if name == "env" else "dry-run"), (name, detail)
        assert int(lim) == limit, (name, lim)
    assert sum(LIMITS.values()) <= 480
    assert "stage limits sum to 480s" in lines[-1]
    assert lines[-1].startswith("overall   passed: 1 passed, 0 failed, 0 skipped, 6 dry-run")
    for name, least in (("smoke", 16), ("tests", 230), ("memcheck", 3), ("racecheck", 1)):
        n = int(re.search(r"(\d+) passed", stages[name][3]).group(1))
        assert n >= least and "failed" not in stages[name][3], (name, stages[name][3])
    # the GPU mode's pytest command lines: installed package, importlib mode, no -x
    tests_log = (out / "tests.log").read_text()
    cmd = tests_log.splitlines()[0]
    assert " -P -m pytest --import-mode=importlib -p no:cacheprovider -q -rfEs " in cmd, cmd
    assert "--maxfail=20" in cmd and "--timeout=" in cmd and " -x " not in cmd, cmd
    for f in ("native/test_cuda.py", "library/test_exchange_gpu.py", "model/test_train_gpu.py"):
        assert f"tests/{f}" in cmd, cmd
    assert "test_exchange_gpu.py" in tests_log  # the exchange's GPU tests ran (durations)
    build = (out / "build.log").read_text()
    assert "JLC_CUDA=ON" in build and "pip install --no-build-isolation --no-deps -v ." in build
    assert "pip install --no-index --no-deps --force-reinstall" in build and f"-{TAG}-" in build
    san = (out / "sanitizer.log").read_text()
    for tool in ("memcheck", "racecheck"):
        assert f"compute-sanitizer --tool {tool} --report-api-errors no" in san, san[:2000]
    assert "--error-exitcode" not in san
    # One folder to copy off the machine: 8 plain files, no folders.
    assert {"summary.txt", "env.txt", "tests.log"} <= {p.name for p in out.iterdir()}
    assert all((out / f).is_file() for f in FILES)
    rec = json.loads((out / "bench.json").read_text())
    assert rec["complete"] and rec["quick"] and rec["forms"] == ["fixed", "auto"]
    cases = {r["case"]: r for r in rec["results"]}
    exchange, large = cases["dlrm_exchange_26x8x256x64"], cases["dlrm_exchange_x1"]
    assert large["beyond_l2"] and large["shape"] == exchange["shape"]  # --large-mb 1 here
    for r in (exchange, large):
        assert r["copy"]["gbps"] > 0
        for form in ("fixed", "auto"):
            f = r["forms"][form]
            assert f["compress_gbps"] > 0 and f["decompress_gbps"] > 0
            assert f["bad_status_chunks"] == 0 and f["error_bound_ok_first_64"]


def test_stages_past_their_limit_time_out_and_the_rest_still_run(tmp_path):
    # JLC_CUDA=OFF is a dry run too; every stage gets 1 s and is stopped by `timeout`. No
    # OUTDIR argument: the files go to $GPU_CHECK_OUT.
    out = tmp_path / "out"
    run, lines, stages, _ = _run(
        None, JLC_CUDA="OFF", GPU_CHECK_DRY_LIMIT_S="1", GPU_CHECK_OUT=str(out)
    )
    assert {"summary.txt", "env.txt", "tests.log"} <= {p.name for p in out.iterdir()}
    assert run.returncode == 1, (run.stdout[-3000:], run.stderr[-3000:])
    for name in ("smoke", "tests", "bench", "memcheck", "racecheck"):
        assert stages[name][0] == "timeout", (name, stages[name])
    assert lines[-1].startswith("overall   failed: 1 passed, 5 failed, 0 skipped, 1 dry-run")


def _fake_python(tmp_path, build_rc: int) -> Path:
    """A python3 whose `pip install` is stood in for: the build exits ``build_rc``, a wheel's
    install succeeds; everything else runs this interpreter."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        'case " $* " in\n'
        f'  *" pip install --no-build-isolation "*) echo "build stood in for"; exit {build_rc} ;;\n'
        '  *" pip install --no-index "*) echo "wheel install stood in for"; exit 0 ;;\n'
        "esac\n"
        f'exec "{sys.executable}" "$@"\n'
    )
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize("wheel", [False, True], ids=["no-wheel", "prebuilt-wheel"])
def test_failed_build_tries_the_prebuilt_wheel_then_skips_the_gpu_stages(tmp_path, wheel):
    # The GPU mode on this machine: the build fails; the prebuilt wheel of this interpreter's
    # tag (if any) is installed, then the import check finds no GPU; every later stage is
    # skipped, saying why.
    wheels = tmp_path / "whl"
    wheels.mkdir()
    name = f"jax_lossy_comm-0.1.0-{TAG}-{TAG}-linux_x86_64.whl"
    if wheel:
        (wheels / name).write_bytes(b"stand-in")
    run, lines, stages, _ = _run(
        tmp_path / "out", PYTHON=str(_fake_python(tmp_path, 1)), GPU_CHECK_WHEEL_DIR=str(wheels)
    )
    assert run.returncode == 1, (run.stdout[-3000:], run.stderr[-3000:])
    assert "mode=gpu" in lines[0]
    assert stages["build"][0] == "failed"
    build = (tmp_path / "out" / "build.log").read_text()
    if wheel:
        assert f"installing the prebuilt wheel {wheels / name}" in build, build
        assert (
            "wheel install stood in for" in build and f"prebuilt wheel {name}" in stages["build"][3]
        )
    else:
        assert "not exactly one prebuilt wheel" in build, build
    for stage in ("smoke", "tests", "bench", "memcheck", "racecheck"):
        assert stages[stage][0] == "skipped", (stage, stages[stage])
        assert stages[stage][3] == "no build", stages[stage]
    assert lines[-1].startswith("overall   failed: 1 passed, 1 failed, 5 skipped, 0 dry-run")
