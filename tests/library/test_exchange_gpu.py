"""The exchange and the all-reduce on one GPU: every wire path against the exact collectives.

On a mesh of the one GPU (marker ``gpu``; tests/conftest.py's ``gpu`` fixture), each wire path
of :func:`jax_lossy_comm.compressed_all_to_all` is run against ``jax.lax.all_to_all``: the
forward values within the bound of every (peer, table) chunk, the exchange statistics, the
gradient with the exact backward (bit-equal to the exact exchange's) and with a compressed
backward (within the backward bound of the cotangent's chunks). ``"ragged"`` is asked for by
name: under the test conftest's ``JAX_PLATFORMS=cpu,cuda`` the default backend is the CPU, so
``"auto"`` would resolve to the packed path even on a GPU mesh. On the GPU the ragged path
runs XLA's ``ragged_all_to_all`` (checked in the lowered program); XLA:CPU has none, so with
``JLC_GPU_TESTS_ON_CPU=1`` (the CPU standing in, as in CI) it runs its emulation through
dense collectives, the same frames and offsets. Then :func:`jax_lossy_comm.compressed_psum`
against ``jax.lax.psum`` on each path, and the hierarchical exchange on a (1, 1) mesh (one
node: nothing crosses nodes, so the result and its gradients are bit-equal to the exact
exchange's).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc

pytestmark = pytest.mark.gpu

ROWS, TABLES, DIM = 256, 3, 64  # one device: chunks [256, 64] per table, the DLRM block shape
EB, BEB = 0.01, 0.02  # forward and backward REL error bounds
PATHS = ("ragged", "dense", "packed")
AUTO = jax.sharding.AxisType.Auto


def wire(gpu, path: str) -> str:
    """The path asked for: on the CPU stand-in the ragged path is its emulation."""
    return "_ragged_emulated" if path == "ragged" and gpu.platform == "cpu" else path


def hot_rows(shape, seed: int) -> np.ndarray:
    """float32 pooled embeddings with repeated rows per table (hot ids), like the dumps."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    pick = rng.integers(0, 16, size=shape[:-1])  # 16 distinct rows per table
    return np.take_along_axis(x, pick[..., None].repeat(shape[-1], -1), axis=0)


def table_bound(a: np.ndarray, eb: float) -> np.ndarray:
    """REL ``eb_abs`` of each table's chunk of ``a [rows, tables, dim]``: float64[1, T, 1]."""
    a = a.astype(np.float64)
    return eb * (a.max(axis=(0, 2)) - a.min(axis=(0, 2)))[None, :, None]


@pytest.fixture(scope="module")
def mesh(gpu):
    return jax.sharding.Mesh(np.array([gpu]), ("i",), axis_types=(AUTO,))


def _on(mesh, a, spec=None):
    return jax.device_put(a, NamedSharding(mesh, P("i") if spec is None else spec))


@pytest.mark.parametrize("path", PATHS)
def test_exchange_forward_and_gradients_against_all_to_all(gpu, mesh, path):
    codec = jlc.FrameCodec(min_error_bound=EB)
    fwd_only = jlc.ExchangeConfig(codec, table_axis=1, path=wire(gpu, path))
    both = jlc.ExchangeConfig(codec, codec, table_axis=1, path=wire(gpu, path))
    x, w = hot_rows((ROWS, TABLES, DIM), 0), hot_rows((ROWS, TABLES, DIM), 1)

    def forward(x):
        y, s = jlc.compressed_all_to_all_with_stats(
            x, "i", 0, 1, tiled=True, error_bound=EB, config=fwd_only
        )
        stats = jnp.stack([s.raw_bytes, s.frame_bytes, s.moved_bytes, s.fallback.astype(float)])
        return y, jax.lax.all_to_all(x, "i", 0, 1, tiled=True), stats[None]

    run = jax.jit(jax.shard_map(forward, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    y, exact, stats = (np.asarray(a) for a in run(_on(mesh, x)))
    if gpu.platform == "gpu" and path == "ragged":  # XLA's own collective, not an emulation
        assert "ragged_all_to_all" in run.lower(_on(mesh, x)).as_text()
    np.testing.assert_array_equal(exact, x)  # one device: the exact exchange is the identity
    err = np.abs(y.astype(np.float64) - exact)
    assert np.all(err <= table_bound(exact, EB)), (err / table_bound(exact, EB)).max()
    assert err.max() > 0  # the values went through the codec
    raw, frames, moved, fallback = stats[0]
    assert raw == x.nbytes and fallback == 0
    assert 0 < frames < raw / 8, (frames, raw)  # 16 distinct rows per table
    assert frames <= moved < raw, (frames, moved, raw)  # dense: the fixed-rate capacity

    def loss(config, compressed):
        def local(x, w):
            if compressed:
                y = jlc.compressed_all_to_all(
                    x, "i", 0, 1, tiled=True, error_bound=EB, backward_error_bound=BEB,
                    config=config,
                )  # fmt: skip
            else:
                y = jax.lax.all_to_all(x, "i", 0, 1, tiled=True)
            return jax.lax.psum(jnp.sum(y * w), "i")

        f = jax.shard_map(local, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=P())
        return jax.jit(jax.grad(f))

    args = (_on(mesh, x), _on(mesh, w))
    g_exact = np.asarray(loss(None, False)(*args))
    np.testing.assert_array_equal(g_exact, w)
    # exact backward (straight-through): the transposed exact exchange of the cotangent
    np.testing.assert_array_equal(np.asarray(loss(fwd_only, True)(*args)), g_exact)
    # compressed backward: within the backward bound of each cotangent chunk
    g = np.asarray(loss(both, True)(*args)).astype(np.float64)
    gerr = np.abs(g - g_exact)
    assert np.all(gerr <= table_bound(w, BEB)), (gerr / table_bound(w, BEB)).max()
    assert gerr.max() > 0


@pytest.mark.parametrize("path", PATHS)
def test_compressed_psum_against_psum(gpu, mesh, path):
    rng = np.random.default_rng(2)
    tree = {
        "w": rng.standard_normal((512, 64)).astype(np.float32) * 0.1,
        "b": rng.standard_normal((33,)).astype(np.float32),
    }
    config = jlc.AllReduceConfig(jlc.FrameCodec(), path=wire(gpu, path))

    def local(t):
        y, s = jlc.compressed_psum_with_stats(t, "i", error_bound=EB, config=config)
        stats = jnp.stack([s.raw_bytes, s.moved_bytes, s.fallback.astype(float)])
        return y, jax.lax.psum(t, "i"), stats

    run = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P(), out_specs=P(), check_vma=False))
    y, exact, stats = run(jax.device_put(tree, NamedSharding(mesh, P())))
    flat = lambda t: np.asarray(ravel_pytree(jax.tree.map(np.asarray, t))[0], np.float64)
    for k in tree:
        assert y[k].shape == tree[k].shape and y[k].dtype == tree[k].dtype, k
    np.testing.assert_array_equal(flat(exact), flat(tree))  # psum over one device
    values = flat(tree)
    # one device, one chunk: the documented REL bound eb * (2 + 2 eb) * range
    bound = EB * (2 + 2 * EB) * (values.max() - values.min())
    err = np.abs(flat(y) - values)
    assert np.all(err <= bound), err.max() / bound
    assert err.max() > 0
    raw, moved, fallback = np.asarray(stats)
    assert fallback == 0 and 0 < moved < raw, (moved, raw)


@pytest.mark.parametrize("path", PATHS)
def test_hierarchical_exchange_on_one_node_is_the_exact_exchange(gpu, path):
    mesh = jax.sharding.Mesh(np.array([[gpu]]), ("node", "local"), axis_types=(AUTO, AUTO))
    ax = ("node", "local")
    codec = jlc.FrameCodec(min_error_bound=EB)
    config = jlc.ExchangeConfig(
        codec, codec, table_axis=1, path=wire(gpu, path), topology="hierarchical"
    )
    x, w = hot_rows((ROWS, TABLES, DIM), 3), hot_rows((ROWS, TABLES, DIM), 4)

    def local(x, w):
        y, s = jlc.compressed_all_to_all_with_stats(
            x, ax, 0, 1, tiled=True, error_bound=EB, backward_error_bound=BEB, config=config
        )
        exact = jax.lax.all_to_all(x, ax, 0, 1, tiled=True)
        stats = jnp.stack([s.inter_node_raw_bytes, s.inter_node_moved_bytes, s.moved_bytes])
        return y, exact, stats[None]

    spec = P(ax)
    run = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec, spec), out_specs=spec))
    args = (_on(mesh, x, spec), _on(mesh, w, spec))
    y, exact, stats = (np.asarray(a) for a in run(*args))
    np.testing.assert_array_equal(y, exact)  # own-node blocks are never coded
    np.testing.assert_array_equal(stats[0], [0.0, 0.0, 0.0])  # and nothing leaves the device

    def loss(x, w):
        y = jlc.compressed_all_to_all(
            x, ax, 0, 1, tiled=True, error_bound=EB, backward_error_bound=BEB, config=config
        )
        return jax.lax.psum(jnp.sum(y * w), ax)

    grad = jax.jit(jax.grad(jax.shard_map(loss, mesh=mesh, in_specs=(spec, spec), out_specs=P())))
    np.testing.assert_array_equal(np.asarray(grad(*args)), w)  # the compressed backward too
