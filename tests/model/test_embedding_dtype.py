"""``Config.embedding_dtype`` / ``--embedding-dtype``:
bfloat16 tables and pooled embeddings train, the exchange moves the fixed-rate capacity of a
bfloat16 chunk with no fallback, the raw bytes are 2 per element, a bfloat16 table round-trips
through the checkpoint, and a bad value of the flag exits 2 with one line."""

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support import EIGHT_DEVICES

from models.dlrm import checkpoints, main, models, run_setup, train, train_log, train_state
from models.dlrm.configs import get_config
from models.dlrm.error_bound_hook import ErrorBoundHook
from models.dlrm.pooled_all_to_all import create_exchange

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason=EIGHT_DEVICES)


def _config(**over):
    # dense path: every frame moves the static capacity, so moved bytes are predictable
    base = dict(
        devices_per_process=8,
        batch_size=512,
        steps=20,
        log_every=5,
        eval_every=0,
        checkpoint_every=0,
        exchange_path="dense",
        embedding_dtype="bfloat16",
        learning_rate=0.5,
    )
    return dataclasses.replace(get_config("tiny"), **{**base, **over})


def _records(out, kind):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r.get("kind") == kind]


def test_pooled_lookup_sums_in_float32_and_rounds_once_to_the_table_dtype():
    rng = np.random.default_rng(0)
    tab32 = rng.normal(size=(50, 8)).astype(np.float32)
    rows = rng.integers(0, 50, size=(16, 3, 7)).astype(np.int32)
    valid = rng.random((16, 3, 7)) < 0.8
    for dt in (jnp.bfloat16, jnp.float16):
        tab = jnp.asarray(tab32, dt)
        got = models.pooled_lookup(tab, jnp.asarray(rows), jnp.asarray(valid))
        assert got.dtype == dt and got.shape == (16, 3, 8)
        exact = np.where(valid[..., None], np.asarray(tab, np.float64)[rows], 0.0).sum(-2)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(jnp.asarray(exact, dt)))


@pytest.mark.slow
def test_bfloat16_run_trains_at_the_fixed_rate_capacity_without_fallback(tmp_path):
    config = _config()
    mesh = run_setup.create_mesh(config)
    ctx, init_state, shard = train_state.setup(config, mesh)
    state = jax.jit(init_state, out_shardings=shard)()
    table = state.params["embedding"]["table"]
    assert table.dtype == jnp.bfloat16
    # the head and the optimizer's state stay float32
    assert {a.dtype for a in jax.tree.leaves(state.params["head"])} == {jnp.dtype(jnp.float32)}
    assert {a.dtype for a in jax.tree.leaves(state.opt_state)} <= {
        jnp.dtype(jnp.float32),
        jnp.dtype(jnp.int32),
    }
    # the start-of-run placement line names the tables' dtype (it said float32)
    exchange = create_exchange(config, mesh, min_error_bound=ctx.eb_hook.min_error_bound())
    placement = train_log.describe_run(config, exchange, ctx, "synthetic")[-1]
    assert f"x {config.embedding_dim} bfloat16 per device" in placement, placement

    out = str(tmp_path / "bf16")
    result = train.train_and_evaluate(config, out, progress=False)
    recs = _records(out, "train")
    assert [r["step"] for r in recs] == [5, 10, 15, 20]
    losses = [r["loss"] for r in recs]
    assert all(np.isfinite(losses)) and np.isfinite(result["auc"])
    assert losses[-1] < losses[0] - 0.01, losses
    assert [r["fallback_steps"] for r in recs] == [0, 0, 0, 0]

    p, pl, dim = 8, ctx.placement, config.embedding_dim
    b = config.batch_size // p  # rows of one (peer, table) chunk
    elements = p * config.batch_size * pl.local_tables * dim  # pooled values, all devices
    from jax_lossy_comm import frame_capacity
    from jax_lossy_comm.comm_codec import DEFAULT_OUTLIERS

    cap = frame_capacity(
        (b, dim),
        jnp.bfloat16,
        "auto",
        min_error_bound=ErrorBoundHook(config.error_bound).min_error_bound(),
        outliers=DEFAULT_OUTLIERS,
    )
    assert cap < b * dim * 2  # the fixed-rate size, smaller than the raw bfloat16 chunk
    # dense path: every device sends P * L frames of the capacity plus their int32 counts
    moved_per_step = p * p * pl.local_tables * (cap + 4)
    for r in recs:
        assert r["raw_bytes"] == 5 * elements * 2  # 2 bytes per bfloat16 element, 5 steps
        assert r["moved_bytes"] == 5 * moved_per_step
        assert r["frame_bytes"] <= r["moved_bytes"]

    # the bfloat16 table round-trips through the checkpoint written at the end
    mngr = checkpoints.manager(out, config.max_checkpoints)
    restored, meta = run_setup.restore_latest(config, mngr, init_state, shard)
    assert meta["step"] == 20 and restored.params["embedding"]["table"].dtype == jnp.bfloat16
    assert train_state.params_checksum(restored, mesh) == result["params_checksum"]


@pytest.mark.slow
def test_bfloat16_resume_continues_the_run_exactly(tmp_path):
    whole = train.train_and_evaluate(_config(steps=10), str(tmp_path / "a"), progress=False)
    part = str(tmp_path / "b")
    train.train_and_evaluate(_config(steps=5), part, progress=False)
    resumed = train.train_and_evaluate(_config(steps=10), part, progress=False)
    assert resumed == whole


def test_embedding_dtype_flag_sets_the_config_and_a_bad_value_exits_2_with_one_line(capsys):
    from models.dlrm import flags

    args = flags.build_parser().parse_args(["--preset", "tiny", "--embedding-dtype", "float16"])
    assert flags.config_from_flags(args).embedding_dtype == "float16"
    assert get_config("kaggle").embedding_dtype == "float32"
    with pytest.raises(SystemExit) as e:
        main.main(["--preset", "tiny", "--embedding-dtype", "int8"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    assert "argument --embedding-dtype: invalid choice: 'int8'" in errors[0]
    assert all(d in errors[0] for d in ("float32", "bfloat16", "float16"))
    assert "Traceback" not in err
    with pytest.raises(ValueError, match="embedding_dtype must be one of float32, bfloat16"):
        dataclasses.replace(get_config("tiny"), embedding_dtype="float64").validate()
