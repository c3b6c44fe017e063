"""The DLRM trainer as the training benchmarks run it: its command, its environment, and the
steps of its logging intervals.

``trainer_cmd`` runs ``python -m models.dlrm.main`` with the options the benchmarks share
(``bench.training.train_compare``, ``bench.testbed.netns_bench``), ``trainer_env`` gives its
subprocess the repository on PYTHONPATH; ``interval_steps`` counts the steps of each logging
interval of its metrics.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from bench import bench_util as bu


def interval_steps(steps: Sequence[int]) -> list[int]:
    """Steps in each logging interval, from the intervals' last steps (ascending): the first
    counts from step 0; each counts at least 1."""
    return [max(1, s - (steps[i - 1] if i else 0)) for i, s in enumerate(steps)]


TRAINER = "models.dlrm.main"
"""The DLRM trainer's module (``python -m TRAINER``), run by the training benchmarks."""


def trainer_cmd(
    out_dir: str | os.PathLike[str], args: Any, *flags: str, checkpoint_every: int = 0
) -> list[str]:
    """The trainer command of one run: this interpreter, ``-m TRAINER``, the options the
    training benchmarks share (from ``args``: preset, steps, seed, log_every, eval_rows;
    the progress bar off; outputs into ``out_dir``), then ``flags``. With ``checkpoint_every``
    0 checkpoints are off and ``--restart`` removes an earlier run in ``out_dir``; with K > 0
    the run checkpoints every K steps and the same command resumes an interrupted run from
    its last checkpoint (the trainer resumes a workdir by default)."""
    keep = ["--checkpoint-every", str(checkpoint_every)]
    return [
        sys.executable,
        "-m",
        TRAINER,
        "--preset",
        args.preset,
        "--steps",
        str(args.steps),
        "--seed",
        str(args.seed),
        "--log-every",
        str(args.log_every),
        "--eval-rows",
        str(args.eval_rows),
        *(keep if checkpoint_every > 0 else [*keep, "--restart"]),
        "--no-progress",
        "--out",
        str(out_dir),
        *flags,
    ]


def trainer_env() -> dict[str, str]:
    """Environment for a trainer subprocess (``python -m TRAINER``): this
    one's, with the repository on PYTHONPATH and XLA_FLAGS removed (``--devices`` decides)."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["PYTHONPATH"] = str(bu.REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env
