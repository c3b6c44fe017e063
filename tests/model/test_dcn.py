"""DLRM-DCNv2 tests: the low-rank cross layer against its NumPy formula, the synthetic
multi-hot bags (per-table sizes, MLPerf's rule), and one Adagrad training step of the sharded
DCN model on multi-hot bags against an unsharded single-device reference."""

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
from models.dlrm.configs.default import MLPERF_DCNV2_MULTI_HOT_SIZES
from models.dlrm.data import synthetic


def test_low_rank_cross_net_matches_numpy_formula():
    """x_{l+1} = x_0 * (U_l (V_l x_l) + b_l) + x_l (DCN-v2 Eq. 1, W = U V), float64 NumPy."""
    n, r, layers = 12, 3, 3
    net = models.LowRankCrossNet(n, layers, r, rngs=nnx.Rngs(params=0))
    rng = np.random.default_rng(1)
    u = rng.normal(size=(layers, n, r)).astype(np.float32)
    v = rng.normal(size=(layers, r, n)).astype(np.float32)
    b = rng.normal(size=(layers, n)).astype(np.float32)
    net.u.set_value(jnp.asarray(u))
    net.v.set_value(jnp.asarray(v))
    net.bias.set_value(jnp.asarray(b))
    x0 = rng.normal(size=(5, n)).astype(np.float32) * 0.5
    x = x0.astype(np.float64)
    for layer in range(layers):
        w = u[layer].astype(np.float64) @ v[layer].astype(np.float64)  # [N, N], rank r
        x = x0 * (x @ w.T + b[layer]) + x
    got = np.asarray(net(jnp.asarray(x0)))
    np.testing.assert_allclose(got, x, rtol=1e-4, atol=1e-4 * np.abs(x).max())


def test_cross_net_init_and_errors():
    net = models.LowRankCrossNet(10, 2, 4, rngs=nnx.Rngs(params=0))
    assert net.u.get_value().shape == (2, 10, 4) and net.v.get_value().shape == (2, 4, 10)
    np.testing.assert_array_equal(np.asarray(net.bias.get_value()), 0.0)  # TorchRec: zeros
    x = jnp.ones((2, 10))
    np.testing.assert_allclose(np.asarray(net(0 * x)), 0.0)  # x0 = 0 is a fixed point
    with pytest.raises(ValueError, match="low_rank >= 1"):
        models.LowRankCrossNet(10, 2, 0, rngs=nnx.Rngs(params=0))
    with pytest.raises(ValueError, match="interaction must be one of"):
        models.DLRMHead(13, 2, 4, (4,), (1,), interaction="cat", rngs=nnx.Rngs(params=0))
    head = models.DLRMHead(13, 2, 4, (8, 4), (6, 1), interaction="dcn", rngs=nnx.Rngs(params=0))
    assert head.top.dense_0.kernel.get_value().shape == (3 * 4, 6)  # (T + 1) * dim features
    assert head(jnp.ones((5, 13)), jnp.ones((5, 2, 4))).shape == (5,)


def test_synthetic_bags_follow_per_table_sizes_and_the_mlperf_rule():
    rows = [50] * 20 + [5000] * 6
    sizes = MLPERF_DCNV2_MULTI_HOT_SIZES
    gen = synthetic.SyntheticCriteo(rows, bag_sizes=sizes, multi_hot_rule="mlperf", seed=2)
    ids = gen.batch(0, 512)["ids"]
    assert ids.shape == (512, 26, 100)
    np.testing.assert_array_equal((ids >= 0).sum(axis=2), np.broadcast_to(sizes, (512, 26)))
    assert ids.max(axis=(0, 2)).tolist() < rows and ids[:, :, 0].min() >= 0
    for t in (0, 20, 21):  # a bag is a function of its first id: it repeats exactly as often
        bags = {tuple(b) for b in ids[:, t]}
        assert len(bags) == len(set(ids[:, t, 0].tolist()))
    # ... and the same first id gives the same bag in another batch
    other = gen.batch(7, 512)["ids"][:, 20]
    first = {int(b[0]): tuple(b) for b in ids[:, 20]}
    assert all(first[int(b[0])] == tuple(b) for b in other if int(b[0]) in first)
    # the independent rule draws every id: far more distinct bags than first ids
    ind = synthetic.SyntheticCriteo(rows, bag_sizes=sizes, seed=2).batch(0, 512)["ids"][:, 20]
    assert len({tuple(b) for b in ind}) > 2 * len(set(ids[:, 20, 0].tolist()))
    with pytest.raises(ValueError, match="bag_sizes must be 26 ints"):
        synthetic.SyntheticCriteo(rows, bag_sizes=(1, 2))
    with pytest.raises(ValueError, match="multi_hot_rule"):
        synthetic.SyntheticCriteo(rows, multi_hot_rule="zipf")


def test_dcn_presets_and_config_errors():
    big, small = get_config("dcnv2"), get_config("dcnv2_small")
    big.validate()
    small.validate()
    assert big.interaction == small.interaction == "dcn" and big.optimizer == "adagrad"
    assert (big.embedding_dim, big.bottom_mlp, big.top_mlp) == (
        128,
        (512, 256, 128),
        (1024, 1024, 512, 256, 1),
    )
    assert (big.dcn_num_layers, big.dcn_low_rank_dim, big.batch_size) == (3, 512, 65536)
    assert big.bag_sizes() == MLPERF_DCNV2_MULTI_HOT_SIZES and sum(big.bag_sizes()) == 214
    assert max(big.table_rows()) == 40_000_000 and max(small.table_rows()) == 20_000
    assert get_config("kaggle").bag_sizes() == (1,) * 26
    with pytest.raises(ValueError, match="synthetic_multi_hot_sizes must be 26 ints"):
        dataclasses.replace(small, synthetic_multi_hot_sizes=(1, 2)).validate()
    with pytest.raises(ValueError, match="interaction must be"):
        dataclasses.replace(small, interaction="cat").validate()
    with pytest.raises(ValueError, match="dcn_num_layers"):
        dataclasses.replace(small, dcn_num_layers=0).validate()


def _tiny_dcn(compression="off"):
    """dcnv2_small shrunk for a test: 500-row tables, dim 8, rank 4, batch 64."""
    return dataclasses.replace(
        get_config("dcnv2_small"),
        max_ind_range=500,
        embedding_dim=8,
        bottom_mlp=(16, 8),
        top_mlp=(16, 1),
        dcn_low_rank_dim=4,
        batch_size=64,
        compression=compression,
    )


@functools.cache
def _built(compression="off"):
    cfg = _tiny_dcn(compression)
    mesh = mesh_lib.make_mesh()
    ctx, init_state, shard = train_state.setup(cfg, mesh)
    state = jax.jit(init_state, out_shardings=shard)()
    gen = synthetic.SyntheticCriteo(
        cfg.table_rows(), bag_sizes=cfg.bag_sizes(), multi_hot_rule="mlperf", seed=1
    )
    return cfg, mesh, ctx, shard, state, gen.batch(0, cfg.batch_size)


@pytest.mark.slow
def test_dcn_adagrad_step_equals_unsharded_reference():
    """One sharded step (8 devices, table-wise sharding, exact exchange) gives the loss and
    the Adagrad-updated head and tables of the same model on one device (ReferenceEmbedding
    with one parameter per table, optax.adagrad from ``train_state.create_optimizer``)."""
    cfg, mesh, ctx, shard, state, batch = _built()
    params0 = jax.device_get(state.params)
    tabs0 = sharding.split_tables(ctx.placement, np.asarray(params0["embedding"]["table"]))
    ids = jnp.asarray(batch["ids"])
    assert (batch["ids"] < 0).any()  # padded multi-hot bags are exercised

    def ref_loss(p):
        head = nnx.merge(ctx.graphdefs[0], p["head"])
        logits = head(jnp.asarray(batch["dense"]), models.ReferenceEmbedding(p["tables"])(ids))
        return jnp.mean(optax.sigmoid_binary_cross_entropy(logits, jnp.asarray(batch["label"])))

    ref0 = {"head": params0["head"], "tables": [jnp.asarray(t) for t in tabs0]}
    loss_ref, grads = jax.value_and_grad(ref_loss)(ref0)
    tx = train_state.create_optimizer(cfg)
    updates, _ = tx.update(grads, tx.init(ref0), ref0)
    ref1 = jax.device_get(optax.apply_updates(ref0, updates))

    step = jax.jit(step_lib.make_train_step(ctx), in_shardings=(shard, None))
    new_state, m = step(jax.tree.map(jnp.copy, state), mesh_lib.to_global(batch, mesh, 64))
    params1 = jax.device_get(new_state.params)
    np.testing.assert_allclose(float(m["loss"]), float(loss_ref), rtol=1e-5)
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
        params1["head"],
        ref1["head"],
    )
    assert "cross" in params1["head"]  # the cross network's U, V, b were updated too
    got = sharding.split_tables(ctx.placement, np.asarray(params1["embedding"]["table"]))
    moved = 0.0
    for a, b, t0 in zip(got, ref1["tables"], tabs0):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
        moved = max(moved, float(np.abs(a - t0).max()))
    assert moved > 0.5 * cfg.learning_rate  # Adagrad's first step moves a row by ~lr


def test_dcn_compressed_step_reports_per_table_stats_and_stays_close():
    pytest.importorskip("jax_lossy_comm")
    _, mesh, ctx_off, shard_off, state, batch = _built()
    cfg, _, ctx, shard, _, _ = _built("on")
    gbatch = mesh_lib.to_global(batch, mesh, cfg.batch_size)
    _, m_on = jax.jit(step_lib.make_train_step(ctx), in_shardings=(shard, None))(
        jax.tree.map(jnp.copy, state), gbatch
    )
    _, m_off = jax.jit(step_lib.make_train_step(ctx_off), in_shardings=(shard_off, None))(
        jax.tree.map(jnp.copy, state), gbatch
    )
    assert abs(float(m_on["loss"]) - float(m_off["loss"])) < 1e-2
    ratio = np.asarray(m_on["compression_ratio"])
    assert ratio.shape == (26,) and (ratio > 1.0).all()
    assert float(m_on["moved_bytes"]) < float(m_on["raw_bytes"]) == float(m_off["raw_bytes"])
    assert float(m_on["fallback"]) == 0.0


def _emulated_ids_all_to_all(ids, slot_table, num_devices, bag_sizes):
    """What every owner rebuilds from ``ids_wire_layout``'s wire: int32[P, b, P*L, H] per
    sender -> [P, P*b, L, H] per owner, the all-to-all done in NumPy."""
    send, recv, w = step_lib.ids_wire_layout(slot_table, num_devices, bag_sizes, ids.shape[-1])
    p, b = ids.shape[:2]
    flat = np.concatenate([ids.reshape(p, b, -1), np.full((p, b, 1), -1)], axis=2)
    wire = flat[:, :, send].reshape(p, b, p, w)  # [sender, b, owner, W]
    got = wire.transpose(2, 0, 1, 3).reshape(p, p * b, w)  # [owner, sender * b, W]
    got = np.concatenate([got, np.full((p, p * b, 1), -1)], axis=2)
    out = np.stack([got[d][:, recv[d]] for d in range(p)])
    return out.reshape(p, p * b, -1, ids.shape[-1]), w


def test_ids_wire_layout_sends_each_bag_at_its_size_and_rebuilds_the_padded_ids():
    # 3 devices, 2 slots each: tables 0..4 and one dummy slot; bags 3, 1, 2, 1, 3 (H = 3)
    slot_table = np.array([0, 1, 2, 3, 4, -1])
    bags = (3, 1, 2, 1, 3)
    rng = np.random.default_rng(0)
    p, b, h = 3, 4, 3
    ids = np.full((p, b, 6, h), -1, np.int64)
    for s, t in enumerate(slot_table):
        if t >= 0:
            ids[:, :, s, : bags[t]] = rng.integers(0, 100, (p, b, bags[t]))
    got, w = _emulated_ids_all_to_all(ids, slot_table, p, bags)
    assert w == 4  # owners hold 3+1, 2+1, 3 ids per sample: the widest is 4, not 2 x 3
    # the plain all-to-all of the padded ids: owner d gets slots [2d, 2d+2) of every sender
    want = np.stack([ids[:, :, 2 * d : 2 * d + 2].reshape(p * b, 2, h) for d in range(p)])
    np.testing.assert_array_equal(got, want)
    send, recv, _ = step_lib.ids_wire_layout(slot_table, p, bags, h)
    assert send.shape == (p * w,) and recv.shape == (p, 2 * h)
    assert send[-1] == p * 2 * h  # the last owner holds 3 of its 4: one padding id
    # a table split row-wise over two slots (table 0 on devices 0 and 1): each piece travels
    slot_table = np.array([0, 1, 0, 2])
    bags = (2, 1, 2)
    ids = rng.integers(-1, 50, (2, 3, 4, 2))
    ids[:, :, 1, 1] = -1  # table 1's bag holds one id
    got, w = _emulated_ids_all_to_all(ids, slot_table, 2, bags)
    assert w == 4  # device 0: 2 + 1 ids, device 1: 2 + 2
    want = np.stack([ids[:, :, 2 * d : 2 * d + 2].reshape(6, 2, 2) for d in range(2)])
    np.testing.assert_array_equal(got, want)
    # full bags everywhere and no dummy slot: the wire is the padded ids in their own order
    full, _, wf = step_lib.ids_wire_layout(np.arange(6), 3, (2,) * 6, 2)
    np.testing.assert_array_equal(full, np.arange(12))
    assert wf == 4


def test_ids_wire_layout_errors():
    with pytest.raises(ValueError, match="one size per table"):
        step_lib.ids_wire_layout(np.array([0, 1]), 2, (1,), 1)
    with pytest.raises(ValueError, match=r"in 1\.\.2"):
        step_lib.ids_wire_layout(np.array([0, 1]), 2, (1, 3), 2)


def test_mlperf_bags_cross_in_under_a_third_of_the_padded_ids():
    """The MLPerf DCNv2 bags on 8 devices: 214 ids per sample, padded to 100 per slot. An
    equal-split all-to-all sends each owner the widest owner's ids (at least the 100-id bag):
    8 x 116 instead of 32 slots x 100."""
    cfg = get_config("dcnv2")
    pl = sharding.plan_tables(cfg.table_rows(), cfg.embedding_dim, 8, None)
    st = pl.slot_table_flat
    _, _, w = step_lib.ids_wire_layout(st, 8, cfg.bag_sizes(), 100)
    padded = len(st) * 100
    assert sum(cfg.bag_sizes()) == 214
    assert w == 116 and 3 * 8 * w <= padded == 3200


@pytest.mark.slow
def test_bag_sized_ids_all_to_all_trains_the_same_step_with_fewer_bytes():
    """The train step with the data's bag sizes equals the padded one exactly (loss, every
    parameter), and its ids all-to-all carries [b, P * W] instead of [b, P * L * H]; a one-hot
    evaluation batch of the multi-hot run still evaluates."""
    cfg, mesh, ctx, shard, state, batch = _built()
    ctx_bags = dataclasses.replace(ctx, bag_sizes=cfg.bag_sizes())
    gbatch = mesh_lib.to_global(batch, mesh, cfg.batch_size)
    outs = {}
    for name, c in (("padded", ctx), ("bags", ctx_bags)):
        fn = jax.jit(step_lib.make_train_step(c), in_shardings=(shard, None))
        text = fn.lower(jax.tree.map(jnp.copy, state), gbatch).as_text()
        new, m = fn(jax.tree.map(jnp.copy, state), gbatch)
        ids_a2a = [ln for ln in text.splitlines() if "all_to_all" in ln and "xi32>" in ln]
        outs[name] = (jax.device_get(new.params), float(m["loss"]), ids_a2a)
    assert outs["bags"][1] == outs["padded"][1]
    jax.tree.map(np.testing.assert_array_equal, outs["bags"][0], outs["padded"][0])
    _, _, w = step_lib.ids_wire_layout(
        ctx.placement.slot_table_flat, 8, cfg.bag_sizes(), batch["ids"].shape[2]
    )
    b = cfg.batch_size // 8
    assert len(outs["bags"][2]) == 1 and f"tensor<{b}x{8 * w}xi32>" in outs["bags"][2][0]
    ps, h = ctx.placement.slot_table_flat.size, batch["ids"].shape[2]  # P * L, H
    assert len(outs["padded"][2]) == 1 and f"tensor<{b}x{ps}x{h}xi32>" in outs["padded"][2][0]
    assert 8 * w * 3 < ps * h
    one_hot = {**batch, "ids": batch["ids"][:, :, :1]}
    ev = jax.jit(step_lib.make_eval_step(ctx_bags), in_shardings=(shard, None))
    ref = jax.jit(step_lib.make_eval_step(ctx), in_shardings=(shard, None))
    g1 = mesh_lib.to_global(one_hot, mesh, cfg.batch_size)
    np.testing.assert_array_equal(np.asarray(ev(state, g1)), np.asarray(ref(state, g1)))
