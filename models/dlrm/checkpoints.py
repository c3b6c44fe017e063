"""Checkpoints of a training run (orbax): the train state plus the data position.

A checkpoint at step ``s`` lives in ``<workdir>/checkpoints/<s>/`` with two items: ``state``
(the ``step.TrainState``: step, parameters, optimizer state, error-bound state; sharded
arrays are saved and restored with their shardings) and ``meta`` (JSON: ``step`` and
``data_position``, where the input stream resumes). Orbax writes a step to a temporary folder
and renames it when complete, so a listed step is a whole one. ``max_checkpoints`` most recent
steps are kept.
"""

from __future__ import annotations

import os

import jax
import orbax.checkpoint as ocp

from models.dlrm.mesh import to_host
from models.dlrm.step import TrainState


def manager(workdir: str, max_to_keep: int) -> ocp.CheckpointManager:
    """The run's checkpoint manager over ``<workdir>/checkpoints`` (created if missing)."""
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    return ocp.CheckpointManager(
        os.path.abspath(os.path.join(workdir, "checkpoints")),
        options=options,
        item_names=("state", "meta"),
    )


def save(mngr: ocp.CheckpointManager, state: TrainState, meta: dict) -> None:
    """Saves ``state`` and the JSON ``meta`` at step ``state.step`` and waits until written."""
    step = int(to_host(state.step))
    mngr.save(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(state._asdict()), meta=ocp.args.JsonSave(meta)
        ),
    )
    mngr.wait_until_finished()


def restore(
    mngr: ocp.CheckpointManager, abstract_state: TrainState
) -> tuple[TrainState | None, dict | None]:
    """The latest checkpoint, or ``(None, None)`` when there is none.

    Args:
      mngr: from ``manager``.
      abstract_state: a TrainState of ``jax.ShapeDtypeStruct`` with shardings: where and how
        the arrays are placed when read.

    Returns:
      ``(state, meta)``.
    """
    step = mngr.latest_step()
    if step is None:
        return None, None
    out = mngr.restore(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state._asdict()), meta=ocp.args.JsonRestore()
        ),
    )
    return TrainState(**out["state"]), out["meta"]


class WorkdirNotSharedError(ValueError):
    """The processes of a multi-process run do not see the same workdir."""


def check_shared_workdir(mngr: ocp.CheckpointManager) -> None:
    """Checks that every process sees the same checkpoint folder (one shared file system).

    Process 0 writes a random token into ``mngr.directory``; every process reads it back and
    reports its latest checkpointed step. A folder that is not shared (each host its own
    disk) would have one process restore while another starts fresh, and the job hang in its
    first collective; here every process raises instead. One process: nothing to check.

    Raises:
      WorkdirNotSharedError: some process does not see process 0's token, or sees another
        latest step (the message names them).
    """
    if jax.process_count() == 1:
        return
    import secrets

    import numpy as np
    from jax.experimental import multihost_utils

    path = os.path.join(os.fspath(mngr.directory), ".shared_check")
    token = secrets.randbits(31) if jax.process_index() == 0 else 0  # int32: x64 is off
    if jax.process_index() == 0:
        with open(path, "w") as f:
            f.write(str(token))
    token = int(multihost_utils.broadcast_one_to_all(np.int32(token)))
    try:
        with open(path) as f:
            seen = f.read().strip() == str(token)
    except OSError:
        seen = False
    step = mngr.latest_step()
    mine = np.array([int(seen), -1 if step is None else step], np.int32)
    every = np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, 2)
    blind = [i for i, (ok, _) in enumerate(every) if not ok]
    steps = {i: None if s < 0 else int(s) for i, (_, s) in enumerate(every)}
    if blind or len(set(steps.values())) > 1:
        raise WorkdirNotSharedError(
            f"the checkpoint folder {mngr.directory} is not one folder shared by all "
            f"processes: processes {blind or 'all'} see "
            f"{'no' if blind else 'the'} file process 0 wrote there; latest checkpoint step "
            f"per process {steps}. Give --out a folder on a file system every host mounts."
        )
