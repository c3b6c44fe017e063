"""Resuming on another number of devices (models/dlrm/reshard.py): every table row and its
optimizer state keep their values exactly while the plan changes; error-feedback residuals
keep their sum; the run goes on to its last step (8 -> 4 -> 8 devices in one process, and
2 processes x 2 devices -> 1 process x 4 -> 2 processes x 4)."""

import dataclasses
import json
import os

import numpy as np
import pytest
from support import require_eight_devices

from models.dlrm import reshard, sharding

ROWS = (1000, 37, 500, 9, 2048, 300, 77)


def _tables_like(placement, rng, dtype=np.float32):
    return [rng.standard_normal((r, placement.dim)).astype(dtype) for r in placement.table_rows]


@pytest.mark.parametrize("split", [None, 0, 400])
@pytest.mark.parametrize("old_p,new_p", [(8, 4), (4, 8), (3, 5), (8, 1)])
def test_a_move_keeps_every_table_row_under_the_new_plan(old_p, new_p, split):
    old = sharding.plan_tables(ROWS, 4, old_p, split)
    new = sharding.plan_tables(ROWS, 4, new_p, split)
    rng = np.random.default_rng(0)
    tables = _tables_like(old, rng)
    buffer = sharding.join_tables(old, tables)
    move = reshard.plan_move(buffer.shape, {"placement": reshard.placement_record(old)}, new)
    assert move is not None and move.old.num_devices == old_p
    moved = sharding.join_tables(move.new, sharding.split_tables(move.old, buffer))
    assert moved.shape == (new_p, new.rows_per_device, 4)
    for a, b in zip(sharding.split_tables(new, moved), tables):
        np.testing.assert_array_equal(a, b)


def test_placement_record_round_trips_through_json():
    p = sharding.plan_tables(ROWS, 8, 4, 400)
    back = reshard.placement_from_record(json.loads(json.dumps(reshard.placement_record(p))))
    assert reshard.placement_record(back) == reshard.placement_record(p)
    assert back.table_rows == p.table_rows and back.slot_piece.dtype == np.int32
    np.testing.assert_array_equal(back.offsets, p.offsets)


def test_the_same_plan_needs_no_move_and_join_keeps_the_dtype():
    p = sharding.plan_tables(ROWS, 4, 4)
    assert (
        reshard.plan_move((4, p.rows_per_device, 4), {"placement": reshard.placement_record(p)}, p)
        is None
    )
    ml_dtypes = pytest.importorskip("ml_dtypes")
    tabs = _tables_like(p, np.random.default_rng(1), ml_dtypes.bfloat16)
    buf = sharding.join_tables(p, tabs, dtype=ml_dtypes.bfloat16)
    assert buf.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(sharding.split_tables(p, buf)[4], tabs[4])


def test_what_cannot_move_is_an_error_naming_both_layouts():
    old = sharding.plan_tables(ROWS, 4, 8)
    new = sharding.plan_tables(ROWS[:-1], 4, 4)
    with pytest.raises(ValueError, match=r"8 devices, 7 tables.*4 devices, 6 tables"):
        reshard.plan_move(
            (8, old.rows_per_device, 4), {"placement": reshard.placement_record(old)}, new
        )
    # written before plans were recorded: only the saved shape itself can resume
    with pytest.raises(ValueError, match=r"resume it on 8 devices"):
        reshard.plan_move((8, old.rows_per_device, 4), {"data_position": {}}, new)
    assert reshard.plan_move((4, new.rows_per_device, 4), None, new) is None
    with pytest.raises(ValueError, match="needs the fields"):
        reshard.placement_from_record({"num_devices": 2})
    # a record of a later release, with a field this one does not know, still reads
    later = {**reshard.placement_record(new), "planner": "v2"}
    assert reshard.placement_from_record(later).rows_per_device == new.rows_per_device


# --- the trainer: 8 -> 4 -> 8 devices -------------------------------------------------------


def _config(devices: int, steps: int, **kw):
    from models.dlrm.configs import get_config

    config = dataclasses.replace(
        get_config("tiny"),
        devices_per_process=devices,
        steps=steps,
        optimizer="adagrad",
        grad_allreduce="compressed",
        grad_error_feedback=True,
        split_rows=600,
        checkpoint_every=2,
        eval_every=0,
        log_every=2,
        eval_rows=256,
    )
    return dataclasses.replace(config, **kw)


def _saved_tables(workdir, step):
    """Per-table arrays of the checkpoint at ``step`` as written (its own plan): the tables,
    every optimizer-state leaf that mirrors them, and the residuals' sum over devices."""
    import jax
    import orbax.checkpoint as ocp

    from models.dlrm import checkpoints

    mngr = checkpoints.manager(str(workdir), 3)
    meta = mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    tree = mngr.item_metadata(step)["state"].tree
    item = jax.tree.map(lambda m: np.empty(m.shape, m.dtype), tree)
    state = mngr.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(item)))
    return _per_table(state["state"], reshard.placement_from_record(meta["placement"]))


def _per_table(state, placement):
    """``{"params": [tables], "opt_state": [tables of each mirroring leaf, in tree order],
    "grad_ef": [each residual summed over the devices]}`` of a state (a dict of fields)."""
    import jax

    out = {"params": [], "opt_state": [], "grad_ef": []}
    for name in out:
        for path, x in jax.tree_util.tree_flatten_with_path(state[name])[0]:
            if name == "grad_ef":
                out[name].append(np.asarray(x).sum(0))
            elif "embedding" in jax.tree_util.keystr(path) and np.ndim(x) == 3:
                out[name].append(sharding.split_tables(placement, np.asarray(x)))
    return out


@pytest.mark.slow
def test_eight_to_four_to_eight_devices_moves_tables_and_optimizer_state(tmp_path, caplog):
    import jax

    from models.dlrm import checkpoints, train, train_state
    from models.dlrm.run_setup import create_mesh, restore_latest

    require_eight_devices()
    work = tmp_path / "run"
    train.train_and_evaluate(_config(8, 2), str(work), progress=False)
    saved = _saved_tables(work, 2)
    # the tables, Adagrad's accumulator of them, one residual per head parameter
    assert [len(saved[k]) for k in ("params", "opt_state")] == [1, 1]
    assert len(saved["grad_ef"]) > 4

    # what the 4-device run restores: every table row and optimizer row as saved
    config = _config(4, 4)
    mesh = create_mesh(config)
    setup = train_state.setup(config, mesh)
    placement = setup[0].placement
    assert placement.num_devices == 4
    mngr = checkpoints.manager(str(work), 3)
    with caplog.at_level("WARNING", logger="dlrm"):
        state, meta = restore_latest(config, mngr, setup[1], setup[2], placement)
    assert "moved from the plan it was written under (8 devices" in caplog.text
    assert meta["step"] == 2 and int(state.step) == 2
    restored = _per_table(jax.device_get(state._asdict()), placement)
    for key in ("params", "opt_state"):
        for got, want in zip(restored[key], saved[key], strict=True):
            assert len(got) == len(want) == len(placement.table_rows)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
    assert np.abs(np.concatenate([r.ravel() for r in saved["grad_ef"]])).max() > 0
    for a, b in zip(restored["grad_ef"], saved["grad_ef"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-9)  # spread: the same sum
    assert state.params["embedding"]["table"].sharding == setup[2].params["embedding"]["table"]

    # and the run goes on: to step 4 on 4 devices, to step 6 on 8 with the exact all-reduce
    # (the residuals are then re-initialized while the tables move)
    train.train_and_evaluate(config, str(work), progress=False)
    caplog.clear()
    with caplog.at_level("WARNING", logger="dlrm"):
        result = train.train_and_evaluate(
            _config(8, 6, grad_allreduce="exact"), str(work), progress=False
        )
    assert "moved from the plan it was written under (4 devices" in caplog.text
    assert "grad_ef re-initialized" in caplog.text and "residuals spread" not in caplog.text
    assert result["step"] == 6 and np.isfinite(result["logloss"]), result
    with open(work / "metrics.jsonl") as f:
        steps = [r["step"] for r in map(json.loads, f) if r.get("kind") == "train"]
    assert steps == [2, 4, 6], steps


@pytest.mark.slow
def test_two_processes_of_two_resume_as_one_of_four_then_as_two_of_four(tmp_path):
    import subprocess
    import sys

    import jax
    from _multiprocess import run_trainers

    run = tmp_path / "run"
    args = ["--preset", "tiny", "--optimizer", "adagrad", "--eval-every", "0", "--eval-rows", "64"]
    args += ["--grad-allreduce", "compressed", "--checkpoint-every", "2", "--no-progress"]
    args += ["--out", str(run)]
    for i, (rc, out) in enumerate(run_trainers([*args, "--devices", "2", "--steps", "2"])):
        assert rc == 0, f"process {i}:\n{out[-3000:]}"
    saved = _saved_tables(run, 2)
    # one process of 4 devices restores what 2 x 2 wrote: every row as saved
    from models.dlrm import checkpoints, flags, train_state
    from models.dlrm.run_setup import create_mesh, restore_latest

    require_eight_devices()
    parser = flags.build_parser()
    config = flags.config_from_flags(parser.parse_args([*args, "--devices", "4", "--steps", "4"]))
    ctx, init_state, shard = train_state.setup(config, create_mesh(config))
    mngr = checkpoints.manager(str(run), 3)
    state, _ = restore_latest(config, mngr, init_state, shard, ctx.placement)
    restored = _per_table(jax.device_get(state._asdict()), ctx.placement)
    for key in ("params", "opt_state"):
        for got, want in zip(restored[key], saved[key], strict=True):
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b)
    del state, mngr
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    one = subprocess.run(
        [sys.executable, "-m", "models.dlrm.main", *args, "--devices", "4", "--steps", "4"],
        cwd=root, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
    assert "resumed from step 2" in one.stdout + one.stderr
    # 4 devices either way: the same plan, nothing moved; orbax re-places the shards
    assert "moved from the plan" not in one.stdout + one.stderr
    assert sorted(d for d in os.listdir(run / "checkpoints") if d.isdigit()) == ["2", "4"]
    later = _saved_tables(run, 4)
    # the run went on from the saved tables: they were trained further, none lost its shape
    changed = [not np.array_equal(a, b) for a, b in zip(later["params"][0], saved["params"][0])]
    assert [a.shape for a in later["params"][0]] == [b.shape for b in saved["params"][0]]
    assert sum(changed) > len(changed) // 2, changed
    # and on 2 processes of 4 devices: the tables move to 8 devices, each process placing its
    # own shards of the moved arrays
    runs = run_trainers([*args, "--devices", "4", "--steps", "6"])
    for i, (rc, out) in enumerate(runs):
        assert rc == 0, f"process {i}:\n{out[-3000:]}"
    assert "moved from the plan it was written under (4 devices" in runs[0][1], runs[0][1][-3000:]
    assert "resumed from step 4" in runs[0][1]
    final = _saved_tables(run, 6)
    assert [a.shape for a in final["params"][0]] == [b.shape for b in later["params"][0]]
