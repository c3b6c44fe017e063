"""compressed_all_to_all where jax.lax.all_to_all works: bfloat16
input at the fixed-rate capacity, input that does not vary over the axis, an empty table axis."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc
from jax_lossy_comm import frame
from jax_lossy_comm.comm_codec import DEFAULT_OUTLIERS

NDEV = 8
pytestmark = pytest.mark.skipif(
    jax.device_count() < NDEV, reason=f"needs {NDEV} devices (XLA_FLAGS set in conftest.py)"
)


def _stats(x, eb, cfg):
    y, s = jlc.compressed_all_to_all_with_stats(
        x, "i", 0, 1, tiled=True, error_bound=eb, config=cfg
    )
    return y, jax.tree.map(lambda a: a[None], s), jax.lax.all_to_all(x, "i", 0, 1, tiled=True)


def _assert_rel_bound(y, exact, rows, tables, dim, error_bound):
    """Every (device, peer, table) chunk of ``y`` within REL ``error_bound`` of ``exact``'s."""
    xs = np.asarray(exact, np.float64).reshape(NDEV, rows, NDEV, tables, dim)
    ys = np.asarray(y, np.float64).reshape(NDEV, rows, NDEV, tables, dim)
    for d in range(NDEV):
        for i in range(NDEV):
            for t in range(tables):
                c = xs[d, :, i, t]
                eb = np.float64(np.float32(error_bound)) * (c.max() - c.min())
                assert np.abs(ys[d, :, i, t] - c).max() <= eb, (d, i, t)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_half_type_exchange_moves_the_fixed_rate_capacity(mesh, dtype):
    """[2048, 64]-row chunks of standard normal x 3 (the issue's case: 199/256 bfloat16 frames
    overflowed and every step fell back to the exact exchange): no fallback, the dense path
    moves the fixed-rate capacity, the bound holds on the decoded values."""
    rows, L, dim = 256, 2, 64
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.standard_normal((NDEV * NDEV * rows, L, dim)) * 3, dtype)
    cfg = jlc.ExchangeConfig(
        jlc.FrameCodec(codec="fixed", min_error_bound=0.01), table_axis=1, path="dense"
    )
    f = jax.jit(
        jax.shard_map(
            lambda x, eb: _stats(x, eb, cfg),
            mesh=mesh,
            in_specs=(P("i"), P()),
            out_specs=(P("i"), P("i"), P("i")),
        )
    )
    y, s, ye = f(x, jnp.float32(0.01))
    assert int(np.asarray(s.fallback).sum()) == 0
    assert int(np.asarray(s.overflow_count).sum()) == 0
    cap = frame.frame_capacity((rows, dim), dtype, "fixed", 0.01, outliers=DEFAULT_OUTLIERS)
    moved = np.asarray(s.moved_bytes)
    assert np.all(moved == NDEV * L * cap + 4 * NDEV * L), (moved, cap)
    _assert_rel_bound(y, ye, rows, L, dim, 0.01)


@pytest.mark.parametrize("path", ["dense", "packed"])
def test_input_invariant_over_the_axis_is_accepted(mesh, path):
    """in_specs=P(): every device holds the same x, typed as not varying over "i";
    jax.lax.all_to_all accepts it and so does compressed_all_to_all (before: a lax.cond
    branch-type TypeError)."""
    x = jnp.asarray(np.random.default_rng(1).standard_normal((NDEV * 4, 16)), jnp.float32)
    cfg = jlc.ExchangeConfig(jlc.FrameCodec(min_error_bound=0.01), path=path)

    def f(x):
        y = jlc.compressed_all_to_all(x, "i", 0, 0, tiled=True, error_bound=0.01, config=cfg)
        return y, jax.lax.all_to_all(x, "i", 0, 0, tiled=True)

    y, ye = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P(), out_specs=(P("i"), P("i"))))(x)
    y, ye = np.asarray(y, np.float64), np.asarray(ye, np.float64)
    assert y.shape == ye.shape
    for c in range(NDEV * NDEV):
        e, a = ye[4 * c : 4 * c + 4], y[4 * c : 4 * c + 4]
        assert np.abs(a - e).max() <= np.float64(np.float32(0.01)) * (e.max() - e.min())

    def grads(x):  # the gradient too (before: the custom_vjp's cotangent type did not match)
        w = jnp.arange(x.size, dtype=jnp.float32).reshape(x.shape)

        def loss(fn):
            return lambda x: (fn(x) * w).sum()

        comp = loss(
            lambda x: jlc.compressed_all_to_all(
                x, "i", 0, 0, tiled=True, error_bound=0.01, config=cfg
            )
        )
        exact = loss(lambda x: jax.lax.all_to_all(x, "i", 0, 0, tiled=True))
        return jax.grad(comp)(x), jax.grad(exact)(x)

    g, ge = jax.jit(jax.shard_map(grads, mesh=mesh, in_specs=P(), out_specs=(P(), P())))(x)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(ge))


@pytest.mark.parametrize("table_axis", [1, None])
def test_empty_table_axis_returns_the_empty_result(mesh, table_axis):
    """A [batch, 0, dim] input (no tables on this shard): the empty result with the shape
    jax.lax.all_to_all gives (before: ZeroDivisionError)."""
    x = jnp.zeros((NDEV * NDEV * 2, 0, 8), jnp.float32)
    cfg = jlc.ExchangeConfig(jlc.FrameCodec(min_error_bound=0.01), table_axis=table_axis)

    def f(x):
        y = jlc.compressed_all_to_all(x, "i", 0, 1, tiled=True, error_bound=0.01, config=cfg)
        return y, jax.lax.all_to_all(x, "i", 0, 1, tiled=True)

    y, ye = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=(P("i"), P("i"))))(x)
    assert y.shape == ye.shape and y.dtype == ye.dtype


@pytest.mark.parametrize("path", ["dense", "packed"])
def test_a_quiet_table_of_subnormal_values_keeps_the_exchange_compressed(mesh, path):
    """One table barely used (every value below float32's normal range, 1e-39): its chunks
    are quantized like the others', no step falls back to the exact exchange, the bound holds
    on every chunk and the other table's frames are the bytes they are without it."""
    rows, L, dim = 128, 2, 32
    rng = np.random.default_rng(9)
    x = rng.standard_normal((NDEV * NDEV * rows, L, dim)).astype(np.float32)
    quiet = x.copy()
    quiet[:, 1] *= np.float32(1e-39)
    cfg = jlc.ExchangeConfig(
        jlc.FrameCodec(codec="fixed", min_error_bound=0.01), table_axis=1, path=path
    )
    f = jax.jit(
        jax.shard_map(
            lambda x, eb: _stats(x, eb, cfg),
            mesh=mesh,
            in_specs=(P("i"), P()),
            out_specs=(P("i"), P("i"), P("i")),
        )
    )
    y, s, ye = f(jnp.asarray(quiet), jnp.float32(0.01))
    y0, s0, _ = f(jnp.asarray(x), jnp.float32(0.01))
    assert int(np.asarray(s.fallback).sum()) == 0
    assert int(np.asarray(s.overflow_count).sum()) == 0
    np.testing.assert_array_equal(np.asarray(s.moved_bytes), np.asarray(s0.moved_bytes))
    _assert_rel_bound(y, ye, rows, L, dim, 0.01)
    # the loud table decodes to what it decodes to without the quiet one
    np.testing.assert_array_equal(
        np.asarray(y).reshape(NDEV, rows, NDEV, L, dim)[..., 0, :],
        np.asarray(y0).reshape(NDEV, rows, NDEV, L, dim)[..., 0, :],
    )
