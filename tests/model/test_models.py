"""DLRM model tests: placement plan, sharded forward/gradient vs a single-device reference
model (exact exchange), one training step decreases the loss."""

import os

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    )

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from models.dlrm import mesh as mesh_lib
from models.dlrm import models, sharding, train_state
from models.dlrm import step as step_lib
from models.dlrm.configs import get_config
from models.dlrm.data import synthetic

# The tests share the built models and states of ``_built`` (one compile each): one worker.
pytestmark = pytest.mark.xdist_group("dlrm_models")


def test_plan_tables_places_every_table_once_and_balances():
    rows = get_config("kaggle").table_rows()
    pl = sharding.plan_tables(rows, 32, 8)
    assert pl.local_tables == 4
    placed = sorted(int(t) for t in pl.slot_table.reshape(-1) if t >= 0)
    assert placed == list(range(26))
    assert (pl.slot_table >= 0).sum(axis=1).max() <= pl.local_tables
    assert pl.imbalance() < 1.5
    # gather_index points at the right column and slot sizes match the tables.
    np.testing.assert_array_equal(pl.slot_table_flat[pl.gather_index], np.arange(26))
    for t, r in enumerate(rows):
        assert pl.slot_rows[pl.device_of[t], pl.slot_of[t]] == r
    buf = np.random.default_rng(0).normal(size=(8, pl.rows_per_device, 32)).astype(np.float32)
    tabs = sharding.split_tables(pl, buf)
    np.testing.assert_array_equal(
        sharding.split_tables(pl, sharding.join_tables(pl, tabs))[7], tabs[7]
    )


def test_plan_tables_splits_big_tables_row_wise():
    rows = (1000, 30, 20, 10)
    pl = sharding.plan_tables(rows, 4, 4)  # fair share 265 rows -> table 0 in 4 pieces
    assert pl.num_pieces == 7 and (pl.piece_table == 0).sum() == 4
    assert len({int(pl.device_of[v]) for v in np.flatnonzero(pl.piece_table == 0)}) == 4
    assert pl.imbalance() < 1.2 and "split row-wise" in pl.describe()
    np.testing.assert_array_equal(pl.table_pieces[1:, 1:], -1)
    tabs = [
        np.random.default_rng(t).normal(size=(r, 4)).astype(np.float32) for t, r in enumerate(rows)
    ]
    for a, b in zip(sharding.split_tables(pl, sharding.join_tables(pl, tabs)), tabs):
        np.testing.assert_array_equal(a, b)
    assert sharding.plan_tables(rows, 4, 4, split_rows=0).num_pieces == 4


def test_plan_tables_more_devices_than_tables_and_errors():
    pl = sharding.plan_tables([5, 3], 4, 4, split_rows=0)
    assert pl.local_tables == 1 and (pl.slot_table >= 0).sum() == 2
    pl = sharding.plan_tables([5, 3], 4, 4)  # fair share 2 rows: both tables split
    assert pl.num_pieces == 5 and pl.slot_rows.sum() == 8
    with pytest.raises(ValueError):
        sharding.plan_tables([], 4, 2)
    with pytest.raises(ValueError):
        sharding.plan_tables([0, 3], 4, 2)


def test_interact_matches_explicit_pairs():
    rng = np.random.default_rng(0)
    x, e = rng.normal(size=(2, 3)), rng.normal(size=(2, 4, 3))
    out = np.asarray(models.interact(jnp.asarray(x), jnp.asarray(e)))
    z = np.concatenate([x[:, None], e], 1)
    want = np.concatenate(
        [x, np.stack([np.sum(z[:, i] * z[:, j], -1) for i in range(5) for j in range(i)], 1)], 1
    )
    assert out.shape == (2, 3 + 10)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@functools.cache
def _built(lr, split_rows=-1):
    cfg = dataclasses.replace(
        get_config("tiny"), compression="off", learning_rate=lr, split_rows=split_rows
    )
    mesh = mesh_lib.make_mesh()
    ctx, init_state, shard = train_state.setup(cfg, mesh)
    return cfg, mesh, ctx, jax.jit(init_state, out_shardings=shard)(), shard


def _setup(multi_hot=1, lr=1.0, split_rows=-1):
    cfg, mesh, ctx, state, shard = _built(lr, split_rows)
    state = jax.tree.map(jnp.copy, state)  # steps donate nothing here, but stay safe
    gen = synthetic.SyntheticCriteo(cfg.table_rows(), multi_hot=multi_hot, seed=1)
    batch = gen.batch(0, cfg.batch_size)
    if multi_hot > 1:  # ragged bags: empty some slots
        batch["ids"][::3, :, -1] = -1
    return cfg, mesh, ctx, state, shard, batch


def _reference_logits(ctx, params, batch):
    head = nnx.merge(ctx.graphdefs[0], params["head"])
    ref = models.ReferenceEmbedding(
        sharding.split_tables(ctx.placement, np.asarray(params["embedding"]["table"]))
    )
    return head(jnp.asarray(batch["dense"]), ref(jnp.asarray(batch["ids"])))


@pytest.mark.parametrize("multi_hot,split_rows", [(1, -1), (3, -1), (1, 200)])
def test_sharded_forward_equals_single_device_reference(multi_hot, split_rows):
    cfg, mesh, ctx, state, shard, batch = _setup(multi_hot, split_rows=split_rows)
    if split_rows > 0 and jax.device_count() > 1:
        assert ctx.placement.num_pieces > 26  # row-wise split tables are exercised
    assert mesh.size == jax.device_count()
    eval_step = jax.jit(step_lib.make_eval_step(ctx), in_shardings=(shard, None))
    got = eval_step(state, mesh_lib.to_global(batch, mesh, cfg.batch_size))
    want = _reference_logits(ctx, jax.device_get(state.params), batch)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("split_rows", [-1, 200])
def test_sharded_gradient_equals_reference(split_rows):
    cfg, mesh, ctx, state, shard, batch = _setup(lr=1.0, split_rows=split_rows)
    params0 = jax.device_get(state.params)

    def ref_loss(params):
        return jnp.mean(
            optax.sigmoid_binary_cross_entropy(
                _reference_logits(ctx, params, batch), jnp.asarray(batch["label"])
            )
        )

    # Gradient of the reference model, mapped into the sharded table layout.
    ref_grad = jax.grad(lambda head, tabs: ref_loss_tables(head, tabs), argnums=(0, 1))
    tabs0 = sharding.split_tables(ctx.placement, np.asarray(params0["embedding"]["table"]))

    def ref_loss_tables(head, tabs):
        h = nnx.merge(ctx.graphdefs[0], head)
        ref = models.ReferenceEmbedding(tabs)
        return jnp.mean(
            optax.sigmoid_binary_cross_entropy(
                h(jnp.asarray(batch["dense"]), ref(jnp.asarray(batch["ids"]))),
                jnp.asarray(batch["label"]),
            )
        )

    g_head, g_tabs = ref_grad(params0["head"], [jnp.asarray(t) for t in tabs0])
    step = jax.jit(
        step_lib.make_train_step(ctx), in_shardings=(shard, None), out_shardings=(shard, None)
    )
    new_state, m = step(state, mesh_lib.to_global(batch, mesh, cfg.batch_size))
    params1 = jax.device_get(new_state.params)
    # SGD with lr 1: params1 = params0 - grad.
    got_head = jax.tree.map(lambda a, b: a - b, params0["head"], params1["head"])
    jax.tree.map(
        lambda g, w: np.testing.assert_allclose(g, w, rtol=2e-4, atol=1e-6),
        got_head,
        jax.device_get(g_head),
    )
    got_tabs = sharding.split_tables(
        ctx.placement,
        np.asarray(params0["embedding"]["table"]) - np.asarray(params1["embedding"]["table"]),
    )
    for a, b in zip(got_tabs, g_tabs):
        np.testing.assert_allclose(a, np.asarray(b), rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(float(m["loss"]), float(ref_loss(params0)), rtol=1e-5)
    # The exact exchange reports ratio 1 and moves the raw bytes.
    assert float(m["raw_bytes"]) == float(m["moved_bytes"]) > 0
    np.testing.assert_array_equal(np.asarray(m["compression_ratio"]), 1.0)


def test_one_training_step_decreases_the_loss():
    cfg, mesh, ctx, state, shard, batch = _setup(lr=0.5)
    step = jax.jit(
        step_lib.make_train_step(ctx), in_shardings=(shard, None), out_shardings=(shard, None)
    )
    gbatch = mesh_lib.to_global(batch, mesh, cfg.batch_size)
    state, m0 = step(state, gbatch)
    _, m1 = step(state, gbatch)
    assert float(m1["loss"]) < float(m0["loss"])


def test_compressed_exchange_stays_close_and_reports_stats():
    pytest.importorskip("jax_lossy_comm")
    cfg, mesh, ctx, state, shard, batch = _setup(lr=1.0)
    cfg_on = dataclasses.replace(cfg, compression="on")
    ctx_on, _, shard_on = train_state.setup(cfg_on, mesh)
    gbatch = mesh_lib.to_global(batch, mesh, cfg.batch_size)
    step_on = jax.jit(step_lib.make_train_step(ctx_on), in_shardings=(shard_on, None))
    step_off = jax.jit(step_lib.make_train_step(ctx), in_shardings=(shard, None))
    _, m_on = step_on(jax.tree.map(jnp.copy, state), gbatch)
    _, m_off = step_off(jax.tree.map(jnp.copy, state), gbatch)
    assert abs(float(m_on["loss"]) - float(m_off["loss"])) < 1e-2
    ratio = np.asarray(m_on["compression_ratio"])
    assert ratio.shape == (26,) and (ratio > 1.0).all()
    assert float(m_on["frame_bytes"]) < float(m_on["raw_bytes"])
    eb = np.asarray(m_on["error_bound"])
    assert eb.shape == (26,) and (eb > 0).all()


def test_compressed_backward_exchange_is_used_and_stays_close():
    cfg, mesh, ctx, state, shard, batch = _setup(lr=1.0)
    gbatch = mesh_lib.to_global(batch, mesh, cfg.batch_size)
    new_params = {}
    for backward in ("exact", "compressed"):
        c = dataclasses.replace(cfg, compression="on", exchange_backward=backward)
        ctx_b, _, shard_b = train_state.setup(c, mesh)
        step = jax.jit(step_lib.make_train_step(ctx_b), in_shardings=(shard_b, None))
        new_state, _ = step(jax.tree.map(jnp.copy, state), gbatch)
        new_params[backward] = np.asarray(new_state.params["embedding"]["table"])
    delta = np.abs(new_params["compressed"] - new_params["exact"])
    assert delta.max() > 0  # the cotangents really went through the codec
    moved = np.abs(new_params["exact"] - np.asarray(state.params["embedding"]["table"])).max()
    assert delta.max() < 0.2 * moved  # lossy cotangents, same update within the bound's effect


def test_sparse_embedding_update_equals_dense_optax_update():
    """SGD on the looked-up rows only (the default) gives the dense optax update's table and
    head; multi-hot bags with repeated rows and row-wise split tables included."""
    cfg, mesh, ctx, state, shard, batch = _setup(multi_hot=3, lr=0.5, split_rows=200)
    gbatch = mesh_lib.to_global(batch, mesh, cfg.batch_size)
    out = {}
    for sparse in (True, False):
        c = dataclasses.replace(cfg, sparse_embedding_update=sparse)
        ctx_s, _, shard_s = train_state.setup(c, mesh)
        assert ctx_s.sparse_update == sparse
        step = jax.jit(step_lib.make_train_step(ctx_s), in_shardings=(shard_s, None))
        out[sparse] = jax.device_get(step(jax.tree.map(jnp.copy, state), gbatch)[0].params)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), out[True], out[False]
    )
    moved = np.abs(out[True]["embedding"]["table"] - np.asarray(state.params["embedding"]["table"]))
    assert moved.max() > 0
