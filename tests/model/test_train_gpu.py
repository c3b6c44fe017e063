"""The DLRM trainer on one GPU: ``--preset tiny --devices 1``, a few steps, exact and compressed.

Marker ``gpu`` (tests/conftest.py's ``gpu`` fixture). The trainer runs as its command line does,
in a subprocess whose only platform is the device under test (``JAX_PLATFORMS=cuda``, so
``--exchange-path auto`` resolves to the ragged path as on any GPU run; ``cpu`` with
``JLC_GPU_TESTS_ON_CPU=1``, where auto is the packed path). Checked from metrics.jsonl: a
finite loss every step and the exchange statistics (exact: every raw byte moved; compressed:
frames several times smaller than raw, no fallback, and on the GPU the ragged path's moved
bytes: the frames plus at most 15 bytes of row padding and a 4-byte count per frame).

The subprocess runs ``python -P`` with only the checkout's ``models`` package reachable (a link
in a temporary folder), so ``jax_lossy_comm`` is the installed one, as in the other GPU tests
under ``bench/gpu_check.sh``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
TABLES = 26  # the tiny preset's tables: one frame per (peer, table), one peer


def train(gpu, out: Path, *flags: str) -> tuple[list[dict], str]:
    """Runs the trainer for STEPS steps on ``gpu``; its train records and its output."""
    links = out.parent / f"{out.name}_path"
    links.mkdir()
    (links / "models").symlink_to(ROOT / "models")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # --devices decides
    env.update(JAX_PLATFORMS="cpu" if gpu.platform == "cpu" else "cuda", PYTHONPATH=str(links))
    argv = ["--preset", "tiny", "--devices", "1", "--steps", str(STEPS), "--log-every", "1"]
    argv += ["--eval-every", "0", "--eval-rows", "256", "--checkpoint-every", "0"]
    run = subprocess.run(
        [sys.executable, "-P", "-m", "models.dlrm.main", *argv, "--out", str(out)]
        + ["--no-progress", *flags],
        cwd=out.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = run.stdout + run.stderr
    assert run.returncode == 0, text[-4000:]
    if gpu.platform != "cpu":  # the trainer's own line: it ran on the GPU
        assert "1 local gpu devices" in run.stderr or "1 local cuda devices" in run.stderr, text
    lines = (out / "metrics.jsonl").read_text().splitlines()
    records = [r for r in map(json.loads, lines) if r.get("kind") == "train"]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1)), text[-3000:]
    assert all(math.isfinite(r["loss"]) and 0 < r["loss"] < 5 for r in records), records
    return records, text


def test_trainer_exact_exchange(gpu, tmp_path):
    records, _ = train(gpu, tmp_path / "exact", "--compression", "off")
    for r in records:
        assert r["exchange"] == "off" and r["raw_bytes"] > 0, r
        assert r["moved_bytes"] == r["raw_bytes"] and r["fallback_steps"] == 0, r


def test_trainer_compressed_exchange(gpu, tmp_path):
    records, text = train(gpu, tmp_path / "compressed", "--compression", "on")
    for r in records:
        assert r["exchange"] == "on" and r["fallback_steps"] == 0, r
        assert 0 < r["frame_bytes"] < r["raw_bytes"] / 4, r  # the synthetic data's hot rows
        assert r["frame_bytes"] <= r["moved_bytes"] < r["raw_bytes"], r
        assert len(r["ratio_per_table"]) == TABLES and min(r["ratio_per_table"]) > 1, r
        if gpu.platform != "cpu":  # auto is the ragged path on a GPU: only used bytes move
            assert r["moved_bytes"] <= r["frame_bytes"] + (15 + 4) * TABLES, r
    assert "exchange ratio (raw/frames)" in text
