"""Checkpoints of a training run (orbax): the train state plus the data position.

A checkpoint at step ``s`` lives in ``<workdir>/checkpoints/<s>/`` with two items: ``state``
(the ``step.TrainState``: step, parameters, optimizer state, error-bound state; sharded
arrays are saved and restored with their shardings) and ``meta`` (JSON, ``meta_of``: ``step``,
``data_position``, where the input stream resumes, and ``placement``, the table plan). A
checkpoint of another plan (another number of devices) is moved to this run's (``reshard``).
Orbax writes a step to a temporary folder and renames it when complete, so a listed step is a whole one; but its pruning of old steps
deletes a listed folder in place, and a kill during it leaves a half-deleted step that orbax
still lists. ``manager`` removes such incomplete steps (``remove_incomplete``) and ``restore``
falls back to the next older step when one cannot be read. ``max_checkpoints`` most recent
steps are kept.

A checkpoint stays restorable across the changes that only touch ``TrainState.grad_ef`` (the
error-feedback residuals of the compressed gradient all-reduce): one written before
that field existed, or under another ``--grad-allreduce`` / ``--grad-error-feedback``, restores
every other field exactly and starts ``grad_ef`` at zero, as a new run does (``restore``
reads the saved tree's metadata first and leaves the field out of the orbax restore). Any other
mismatch (the parameters or optimizer state of another model or config) is a
``CheckpointError``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import threading
from collections.abc import Callable

import jax
import numpy as np
import orbax.checkpoint as ocp

from models.dlrm import reshard
from models.dlrm.mesh import to_host
from models.dlrm.sharding import TablePlacement
from models.dlrm.step import TrainState

log = logging.getLogger("dlrm")


class CheckpointError(ValueError):
    """A checkpoint that exists but cannot be restored (the message names it)."""


# What every complete step folder holds (orbax 0.12: the step's metadata, the state's
# PyTree metadata and OCDBT manifest, the meta item's JSON).
_REQUIRED = ("_CHECKPOINT_METADATA", "state/_METADATA", "state/manifest.ocdbt", "meta/metadata")


def _step_folders(directory: str):
    """``(step, folder, missing required files)`` of every step folder, ascending."""
    if not os.path.isdir(directory):
        return
    for name in sorted((n for n in os.listdir(directory) if n.isdigit()), key=int):
        step_dir = os.path.join(directory, name)
        yield (
            int(name),
            step_dir,
            [f for f in _REQUIRED if not os.path.exists(os.path.join(step_dir, f))],
        )


def complete_steps(workdir: str) -> list[int]:
    """The complete checkpoint steps of a run's ``workdir`` (ascending), read from the file
    system alone (no orbax manager, no collective: safe after a peer process died)."""
    directory = os.path.abspath(os.path.join(workdir, "checkpoints"))
    return [step for step, _, missing in _step_folders(directory) if not missing]


def remove_incomplete(directory: str) -> list[int]:
    """Deletes the step folders of ``directory`` that lack a file every complete step has
    (``_REQUIRED``): what a kill during orbax's pruning leaves. Only process 0 deletes.

    Returns:
      The steps removed (ascending), each also logged as a warning.
    """
    removed = []
    for step, step_dir, missing in _step_folders(directory):
        if missing:
            _remove_step(step_dir, f"it lacks {missing}")
            removed.append(step)
    return removed


def _remove_step(step_dir: str, why: str) -> None:
    log.warning(
        "checkpoint %s is incomplete (%s; a kill while it was deleted?): removed", step_dir, why
    )
    if jax.process_index() == 0:
        shutil.rmtree(step_dir, ignore_errors=True)


def _missing_file(e: BaseException) -> bool:
    """True when a restore failed on a missing file (tensorstore says NOT_FOUND)."""
    return isinstance(e, FileNotFoundError) or "NOT_FOUND" in str(e)


def manager(workdir: str, max_to_keep: int) -> ocp.CheckpointManager:
    """The run's checkpoint manager over ``<workdir>/checkpoints`` (created if missing),
    after removing incomplete step folders (``remove_incomplete``)."""
    remove_incomplete(os.path.abspath(os.path.join(workdir, "checkpoints")))
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    # Handlers named up front (not inferred from the first save/restore's args), so that
    # ``item_metadata`` can read a step's saved tree before it is restored (``restore``).
    return ocp.CheckpointManager(
        os.path.abspath(os.path.join(workdir, "checkpoints")),
        options=options,
        item_handlers={
            "state": ocp.StandardCheckpointHandler(),
            "meta": ocp.JsonCheckpointHandler(),
        },
    )


@contextlib.contextmanager
def interrupt_after():
    """Holds back Ctrl-C (SIGINT) inside the block and raises ``KeyboardInterrupt`` after it.

    Ctrl-C during an orbax save interrupted ``wait_until_finished``: orbax logged its
    threads' tracebacks, the step stayed a ``.orbax-checkpoint-tmp`` folder and Python's
    shutdown failed its rename with one more traceback. Only where SIGINT has Python's
    default handler, on the main thread (elsewhere the block runs as it is).

    >>> with interrupt_after():
    ...     pass
    """
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    caught = []
    signal.signal(signal.SIGINT, lambda *_: caught.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if caught:
        raise KeyboardInterrupt


def meta_of(data_position: dict, step: int, placement: TablePlacement) -> dict:
    """A checkpoint's ``meta`` item: where the input stream resumes, the step, and the table
    plan the state was written under (``reshard.placement_record``)."""
    return {
        "data_position": data_position,
        "step": step,
        "placement": reshard.placement_record(placement),
    }


def save(mngr: ocp.CheckpointManager, state: TrainState, meta: dict) -> None:
    """Saves ``state`` and the JSON ``meta`` at step ``state.step`` and waits until written;
    a Ctrl-C meanwhile is raised once the step is complete (``interrupt_after``)."""
    step = int(to_host(state.step))
    with interrupt_after():
        mngr.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state._asdict()), meta=ocp.args.JsonSave(meta)
            ),
        )
        mngr.wait_until_finished()


# TrainState fields that a checkpoint may lack, or hold in another structure, and that then
# start from their fresh value (with why that is sound). Every other field must match.
REINITIALIZABLE = {
    "grad_ef": (
        "the error-feedback residuals of the gradient all-reduce are a correction carried "
        "between steps, not model state; a new run starts them at zero too"
    ),
}


def _leaf_specs(tree) -> dict:
    """``{key path: (shape, dtype)}`` of a saved metadata tree or an abstract (sub)tree."""
    return {
        k: (tuple(v.shape), np.dtype(v.dtype))
        for k, v in ocp.tree.to_flat_dict(tree).items()
        if hasattr(v, "shape")
    }


def _check_same_leaves(abstract: dict, saved: dict) -> None:
    """Raises ``ValueError`` naming the leaves (key path, saved and wanted shape and dtype)
    where ``saved`` differs from ``abstract`` outside ``REINITIALIZABLE``: found here from the
    metadata, before orbax starts reading (a restore that fails part way leaves orbax's reads
    to finish after its event loop closed, and Python prints their tracebacks at exit)."""
    diffs = []
    for name in abstract:
        if name in REINITIALIZABLE or name not in saved:
            continue
        have, want = _leaf_specs(saved[name]), _leaf_specs(abstract[name])
        for key in sorted(set(have) | set(want)):
            if have.get(key) != want.get(key):
                show = [f"{s[0]} {s[1]}" if s else "none" for s in (have.get(key), want.get(key))]
                diffs.append(f"{'/'.join((name, *key))}: saved {show[0]}, this run {show[1]}")
    if diffs:
        more = f" (and {len(diffs) - 3} more)" if len(diffs) > 3 else ""
        raise ValueError("; ".join(diffs[:3]) + more)


def _restore_target(abstract: dict, saved: dict | None) -> tuple[dict, dict[str, str]]:
    """The item to restore a step with, and the fields to re-initialize (name: why).

    ``saved`` is the step's saved tree (orbax metadata: nested dicts of ``ArrayMetadata``),
    ``None`` when it cannot be read (the restore then reports why). A ``REINITIALIZABLE``
    field missing from it is left out of the item; one saved with other leaves (key paths,
    shapes or dtypes) is restored into throwaway single-device arrays (orbax's
    ``StandardRestore`` matches the whole saved tree) and replaced. Every other field stays
    as ``abstract`` has it, so orbax's own check raises on any other mismatch.
    """
    if saved is None:
        return abstract, {}
    _check_same_leaves(abstract, saved)
    item, reinit = dict(abstract), {}
    for name in REINITIALIZABLE:
        if name not in abstract:
            continue
        if name not in saved:
            del item[name]
            reinit[name] = "the checkpoint has none (written by a release before that field)"
            continue
        have, want = _leaf_specs(saved[name]), _leaf_specs(abstract[name])
        if have != want:
            dev = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
            item[name] = jax.tree.map(
                lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=dev), saved[name]
            )
            reinit[name] = (
                f"the checkpoint holds {len(have)} arrays there and this run {len(want)}"
                " (another --grad-allreduce or --grad-error-feedback?)"
                if set(have) != set(want)
                else "the checkpoint holds its arrays in other shapes or dtypes"
            )
    return item, reinit


def _plan_move(mngr, step: int, saved: dict | None, placement) -> reshard.Move | None:
    """The re-placement checkpoint ``step`` needs to resume under ``placement``
    (``reshard.plan_move``); None without a plan or saved tables to compare."""
    try:
        table = saved["params"]["embedding"]["table"]
    except (KeyError, TypeError):
        return None
    if placement is None:
        return None
    meta = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    return reshard.plan_move(table.shape, meta, placement)


def restore(
    mngr: ocp.CheckpointManager,
    abstract_state: TrainState,
    init_state: Callable[[], TrainState] | None = None,
    placement: TablePlacement | None = None,
) -> tuple[TrainState | None, dict | None]:
    """The latest checkpoint, or ``(None, None)`` when there is none.

    Args:
      mngr: from ``manager``.
      abstract_state: a TrainState of ``jax.ShapeDtypeStruct`` with shardings: where and how
        the arrays are placed when read.
      init_state: ``() -> TrainState``, the state a new run starts from (traceable: only the
        fields re-initialized are computed, under ``jax.jit`` with ``abstract_state``'s
        shardings). Without it a checkpoint that lacks a ``REINITIALIZABLE`` field, or holds
        it in another structure, is a ``CheckpointError``.
      placement: this run's table plan. A checkpoint written under another plan (another
        number of devices, or other split settings) has its tables, their optimizer state and
        the error-feedback residuals moved to this one (``reshard``); None: the checkpoint's
        shapes must be this run's.

    Returns:
      ``(state, meta)`` of the newest step that can be read; a step with a missing file is
      removed (logged) and the next older one tried. A ``REINITIALIZABLE`` field (``grad_ef``)
      that the step lacks or holds in another structure (e.g. a run with another
      ``--grad-allreduce``) is ``init_state``'s, with one warning that names it and why;
      every other field is the checkpoint's, exactly.

    Raises:
      CheckpointError: a step that cannot be restored for another reason (e.g. the shapes of
        another config), naming the step and the way out (``--restart``).
    """
    abstract = abstract_state._asdict()
    for step in sorted(mngr.all_steps(), reverse=True):
        try:
            saved = getattr(mngr.item_metadata(step).get("state"), "tree", None)
            move = _plan_move(mngr, step, saved, placement)
            item, reinit = _restore_target(move.saved_item(abstract) if move else abstract, saved)
            if reinit and init_state is None:
                why = "; ".join(f"{name}: {why}" for name, why in reinit.items())
                raise ValueError(f"{why} (and no init_state to start it from)")
            out = mngr.restore(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(item), meta=ocp.args.JsonRestore()
                ),
            )
        except (OSError, ValueError) as e:
            if not _missing_file(e):  # e.g. another model's shapes: never delete it
                raise CheckpointError(
                    f"cannot restore checkpoint {step} in {mngr.directory}: {e} (a run with "
                    "another config? --restart removes it and starts over)"
                ) from e
            _remove_step(os.path.join(os.fspath(mngr.directory), str(step)), f"{e}"[:200])
            mngr.reload()
            continue
        fields = out["state"]
        if move:
            fields = move.place(fields, abstract, skip=reinit)
            if jax.process_index() == 0:
                spread = move.resized and "grad_ef" not in reinit
                spread = spread and jax.tree.leaves(fields.get("grad_ef", ()))
                log.warning(
                    "checkpoint %d: tables and their optimizer state moved from the plan it was "
                    "written under (%s) to this run's (%s)%s",
                    step,
                    reshard.describe_layout(move.old),
                    reshard.describe_layout(move.new),
                    "; error-feedback residuals spread over the new devices" if spread else "",
                )
        for name, why in reinit.items():
            shardings = jax.tree.map(lambda a: a.sharding, getattr(abstract_state, name))
            fields[name] = jax.jit(
                lambda name=name: getattr(init_state(), name), out_shardings=shardings
            )()
            if jax.process_index() == 0:
                log.warning(
                    "checkpoint %d: %s re-initialized to a new run's value, because %s (%s)",
                    step,
                    name,
                    why,
                    REINITIALIZABLE[name],
                )
        return TrainState(**fields), out["meta"]
    return None, None


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
