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
