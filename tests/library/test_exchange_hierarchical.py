"""The hierarchical compressed exchange (ExchangeConfig(topology="hierarchical")): exact among
the devices of a node, coded across nodes, the same result and gradients as the flat exchange
. 8 virtual devices as 2 nodes x 4, and 2 processes x 4 devices
(tests/_multiprocess_hierarchical_worker.py); the checks are tests/_hierarchical.py's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _hierarchical import AX, STATS, check_exchanges, hierarchical_mesh, run_exchanges
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc

NODES, LOCAL = 2, 4
NDEV = NODES * LOCAL


@pytest.fixture(scope="module")
def mesh():
    return hierarchical_mesh(NODES, LOCAL)


def _data(shape, dtype=np.float32, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    x[..., 1, :] *= 10.0  # table 1: another range than table 0
    return x.astype(dtype)


def test_tiled_per_table_bound_with_gradients(mesh):
    # DLRM shape: pooled [global_batch, T, dim] per device, split 0 / concat 1, tiled
    xg = _data((NDEV * NDEV * 8, 3, 16))
    eb = np.array([0.01, 0.03, 0.02], np.float32)
    res = run_exchanges(mesh, xg, eb, path="dense")
    out = check_exchanges(res, mesh, eb, local=LOCAL)
    assert 0.0 < out["max_err_over_bound"] <= 1.0 and out["shards"] == NDEV


def test_untiled_bound_grid_with_gradients(mesh):
    # untiled: x [P, rows, T, dim] per device, a [P, T] bound grid (one per (peer, table))
    xg = _data((NDEV * NDEV, 8, 2, 16), seed=1)
    eb = np.linspace(0.01, 0.05, NDEV * 2, dtype=np.float32).reshape(NDEV, 2)
    res = run_exchanges(mesh, xg, eb, split=0, concat=0, tiled=False, table_axis=2, path="dense")
    check_exchanges(res, mesh, eb, local=LOCAL)


def test_bfloat16_on_the_ragged_path(mesh):
    # ragged offsets over the node axis (emulated with dense collectives on the CPU)
    xg = _data((NDEV * NDEV * 8, 2, 16), dtype=jnp.bfloat16, seed=2)
    eb = np.array([0.02, 0.01], np.float32)
    res = run_exchanges(mesh, xg, eb, path="_ragged_emulated", backward=False)
    assert res["hier"].dtype == jnp.bfloat16
    check_exchanges(res, mesh, eb, local=LOCAL, grads=False)


@pytest.mark.parametrize("codec", [jlc.Int8Rowwise(), jlc.BF16()], ids=["int8", "bf16"])
def test_fixed_size_codecs(mesh, codec):
    # one chunk per destination node; values as the flat exchange's, own node exact
    xg = _data((NDEV * NDEV * 8, 2, 16), seed=3)
    eb = np.float32(0.01)  # ignored by the codec
    grads = isinstance(codec, jlc.BF16)
    res = run_exchanges(mesh, xg, eb, forward=codec, backward=grads)
    check_exchanges(res, mesh, eb, local=LOCAL, grads=grads, bounded=False)
    st = np.asarray(res["stats"])  # [P, 2 (hier, flat), 6]
    hier, flat = (dict(zip(STATS, st[:, i].T)) for i in range(2))
    np.testing.assert_array_equal(hier["inter_node_moved_bytes"], flat["inter_node_moved_bytes"])
    ratio = np.asarray(res["ratio"]).reshape(NDEV, NDEV, -1)
    for d in range(NDEV):
        same = np.arange(NDEV) // LOCAL == d // LOCAL
        assert (ratio[d, same] == 1.0).all() and (ratio[d, ~same] > 1.5).all()


def test_statistics_split_intra_and_inter_node_bytes(mesh):
    xg = _data((NDEV * NDEV * 8, 2, 16), seed=4)
    eb = np.array([0.01, 0.02], np.float32)
    res = run_exchanges(mesh, xg, eb, path="dense", backward=False)
    st = np.asarray(res["stats"], np.float64)  # [P, 2, 6]
    hier, flat = (dict(zip(STATS, st[:, i].T)) for i in range(2))
    raw = xg.nbytes / NDEV
    for s in (hier, flat):
        np.testing.assert_array_equal(s["raw_bytes"], raw)
        np.testing.assert_array_equal(s["inter_node_raw_bytes"], raw / 2)  # half the peers
    # the dense path moves the static capacity: the same frames cross the nodes
    np.testing.assert_array_equal(hier["inter_node_moved_bytes"], flat["inter_node_moved_bytes"])
    assert (hier["inter_node_moved_bytes"] < raw / 2 / 2).all()  # 6-bit codes + headers
    # hierarchical: the intra-node stage is exact (3/4 of this device's data leaves it)
    np.testing.assert_array_equal(hier["intra_node_bytes"], raw * (LOCAL - 1) / LOCAL)
    np.testing.assert_allclose(
        hier["moved_bytes"], hier["intra_node_bytes"] + hier["inter_node_moved_bytes"]
    )
    # flat: every block coded; own block's share (1/P of the dense bytes) counts in neither
    np.testing.assert_allclose(
        flat["intra_node_bytes"] + flat["inter_node_moved_bytes"],
        flat["moved_bytes"] * (NDEV - 1) / NDEV,
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        flat["intra_node_bytes"], flat["moved_bytes"] * (LOCAL - 1) / NDEV, rtol=1e-6
    )
    # frame bytes: coded frames to the other node + own node's blocks raw
    assert (hier["frame_bytes"] > raw / 2).all() and (hier["frame_bytes"] < raw).all()
    ratio = np.asarray(res["ratio"]).reshape(NDEV, NDEV, 2)
    for d in range(NDEV):
        same = np.arange(NDEV) // LOCAL == d // LOCAL
        assert (ratio[d, same] == 1.0).all() and (ratio[d, ~same] > 3.0).all()


def test_overflow_falls_back_to_the_exact_exchange(mesh):
    # a chunk full of NaN on device 6 (node 1) for device 1 (node 0): no outlier room left
    xg = _data((NDEV * NDEV * 8, 2, 16), seed=5)
    xg[6 * NDEV * 8 + 1 * 8 : 6 * NDEV * 8 + 2 * 8, 0] = np.nan
    res = run_exchanges(mesh, xg, np.float32(0.01), path="packed", backward=False)
    assert (np.asarray(res["fallback"]) == 1).all()  # every device, both nodes
    np.testing.assert_array_equal(
        np.asarray(res["hier"]).view(np.uint32), np.asarray(res["exact"]).view(np.uint32)
    )
    st = np.asarray(res["stats"])[:, 0]
    s = dict(zip(STATS, st.T))
    np.testing.assert_array_equal(s["inter_node_moved_bytes"], s["inter_node_raw_bytes"])


def test_nan_in_an_own_node_block_needs_no_fallback(mesh):
    # a block whose destination is on the own node is never coded: NaN there travels exact
    xg = _data((NDEV * NDEV * 8, 2, 16), seed=6)
    xg[6 * NDEV * 8 + 5 * 8 : 6 * NDEV * 8 + 6 * 8, 0] = np.nan  # device 6 -> device 5
    res = run_exchanges(mesh, xg, np.float32(0.01), path="dense", backward=False)
    assert (np.asarray(res["fallback"]) == 0).all()
    assert np.isnan(np.asarray(res["hier"])).sum() == 8 * 16


def test_one_node_is_the_exact_exchange():
    mesh1 = hierarchical_mesh(1, NDEV)
    xg = _data((NDEV * NDEV * 4, 2, 8), seed=7)
    res = run_exchanges(mesh1, xg, np.float32(0.01), backward=False)
    np.testing.assert_array_equal(np.asarray(res["hier"]), np.asarray(res["exact"]))
    s = dict(zip(STATS, np.asarray(res["stats"])[:, 0].T))
    assert (s["inter_node_moved_bytes"] == 0).all() and (s["inter_node_raw_bytes"] == 0).all()


def test_flat_exchange_over_one_axis_is_one_node():
    m = jax.make_mesh((NDEV,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    x = jnp.asarray(_data((NDEV * NDEV * 4, 2, 8), seed=8))

    def f(x):
        _, s = jlc.compressed_all_to_all_with_stats(
            x, "i", 0, 1, tiled=True, error_bound=0.01, config=jlc.ExchangeConfig(path="dense")
        )
        return jnp.stack([s.moved_bytes, s.intra_node_bytes, s.inter_node_moved_bytes])[None]

    st = np.asarray(jax.jit(jax.shard_map(f, mesh=m, in_specs=P("i"), out_specs=P("i")))(x))
    np.testing.assert_allclose(st[:, 1], st[:, 0] * (NDEV - 1) / NDEV, rtol=1e-6)
    assert (st[:, 2] == 0).all()


def test_errors(mesh):
    with pytest.raises(ValueError, match="ExchangeConfig.topology"):
        jlc.ExchangeConfig(topology="tree")
    x = jnp.zeros((NDEV * 8, 2, 8), jnp.float32)
    cfg = jlc.ExchangeConfig(table_axis=1, topology="hierarchical")

    def call(axis):
        def f(x):
            return jlc.compressed_all_to_all(
                x, axis, 0, 1, tiled=True, error_bound=0.01, config=cfg
            )

        return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P(AX), out_specs=P(AX)))(x)

    with pytest.raises(ValueError, match=r"axis_name=\(node_axis, local_axis\), got 'local'"):
        call("local")
    call(AX)  # the pair works


@pytest.mark.slow
def test_two_processes_of_four_devices():
    import json

    from _multiprocess import run_processes

    outs = run_processes("_multiprocess_hierarchical_worker.py", nproc=2, timeout_s=120)
    reps = [json.loads(o[o.index("OK ") + 3 :].splitlines()[0]) for o in outs]
    assert [r["shards"] for r in reps] == [4, 4]  # each process checked its 4 devices
    assert all(0.0 < r["max_err_over_bound"] <= 1.0 for r in reps)
    # every device: 3/4 of its raw bytes to its node's other devices, coded across nodes
    for r in reps:
        for intra, inter_raw, inter_moved, raw in r["bytes"]:
            assert intra == raw * 3 / 4 and inter_raw == raw / 2 and 0 < inter_moved < raw / 2 / 2
