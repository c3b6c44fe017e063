"""compressed_all_to_all under every JAX transformation that jax.lax.all_to_all allows: forward
mode and higher orders through the exact straight-through exchange, a clear error where a
backward codec cannot follow; and an empty operand with negative axes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc

NDEV = 8
pytestmark = pytest.mark.skipif(
    jax.device_count() < NDEV, reason=f"needs {NDEV} devices (XLA_FLAGS set in conftest.py)"
)
EB = 0.02


def _rand(shape, seed):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _compressed(split, concat, tiled, backward=None):
    cfg = jlc.ExchangeConfig(jlc.FrameCodec(min_error_bound=0.01), backward=backward)
    return lambda x: jlc.compressed_all_to_all(
        x, "i", split, concat, tiled=tiled, error_bound=EB, config=cfg
    )


def _exact(split, concat, tiled):
    return lambda x: jax.lax.all_to_all(x, "i", split % x.ndim, concat % x.ndim, tiled=tiled)


def _run(mesh, f, n_in):
    return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("i"),) * n_in, out_specs=P("i")))


# (local shape, split, concat, tiled)
JVP_CASES = [((16, 3, 8), 0, 1, True), ((NDEV, 4, 8), 0, 1, False), ((4, NDEV, 8), -2, -1, False)]


@pytest.mark.parametrize("shape,split,concat,tiled", JVP_CASES)
def test_jvp_and_linearize_tangent_is_the_exact_all_to_all(mesh, shape, split, concat, tiled):
    """jax.jvp and jax.linearize: the tangent is all_to_all of the input's tangent bit for bit
    (before: "can't apply forward-mode autodiff (jvp) to a custom_vjp function")."""
    x = _rand((NDEV * shape[0],) + shape[1:], 1)
    v = _rand(x.shape, 2)
    comp, exact = _compressed(split, concat, tiled), _exact(split, concat, tiled)

    def jvps(x, v):
        y, t = jax.jvp(comp, (x,), (v,))
        y_lin, lin = jax.linearize(comp, x)
        return t, lin(v), y - y_lin, jax.jvp(exact, (x,), (v,))[1]

    t, t_lin, dy, t_exact = jax.jit(
        jax.shard_map(jvps, mesh=mesh, in_specs=(P("i"),) * 2, out_specs=(P("i"),) * 4)
    )(x, v)
    np.testing.assert_array_equal(np.asarray(t), np.asarray(t_exact))
    np.testing.assert_array_equal(np.asarray(t_lin), np.asarray(t_exact))
    assert not np.asarray(dy).any()  # the primal of jvp and linearize: the compressed result


def _second_order(mesh, exchange):
    """jvp of grad and grad of grad of f = psum(sum(w * y**2) / 2), y the exchange of x:
    both are A^T (w * A v) with A the exact all-to-all (straight-through), whatever y is."""
    x, v = _rand((NDEV * 16, 3, 8), 3), _rand((NDEV * 16, 3, 8), 4)
    w = _rand((NDEV * 2, NDEV * 3, 8), 5)

    def local(x, v, w):
        def f(x):
            return jax.lax.psum(jnp.sum(w * exchange(x) ** 2) / 2, "i")

        hvp_fwd = jax.jvp(jax.grad(f), (x,), (v,))[1]
        hvp_rev = jax.grad(lambda x: jax.lax.psum(jnp.sum(jax.grad(f)(x) * v), "i"))(x)
        return hvp_fwd, hvp_rev

    sm = jax.shard_map(local, mesh=mesh, in_specs=(P("i"),) * 3, out_specs=(P("i"),) * 2)
    return [np.asarray(a) for a in jax.jit(sm)(x, v, w)]


def test_jvp_of_grad_and_grad_of_grad_match_all_to_all(mesh):
    """Higher orders (before: "The FFI call to lc_compress cannot be differentiated")."""
    fwd, rev = _second_order(mesh, _compressed(0, 1, True))
    fwd_exact, rev_exact = _second_order(mesh, _exact(0, 1, True))
    assert np.abs(fwd_exact).max() > 0
    np.testing.assert_allclose(fwd, fwd_exact, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(rev, rev_exact, rtol=1e-6, atol=1e-6)


def test_compressed_backward_refuses_forward_mode_and_second_order(mesh):
    """A backward codec: first-order reverse mode works; forward mode is JAX's TypeError and a
    second order a NotImplementedError that names the way out."""
    comp = _compressed(0, 1, True, backward=jlc.FrameCodec(min_error_bound=0.01))
    x = _rand((NDEV * 16, 3, 8), 6)
    grad = _run(mesh, jax.grad(lambda x: jnp.sum(comp(x) ** 2) / 2), 1)(x)
    assert np.isfinite(np.asarray(grad)).all() and np.abs(np.asarray(grad)).max() > 0
    loss_grad = jax.grad(lambda x: jnp.sum(comp(x) ** 2))
    with pytest.raises(TypeError, match="forward-mode"):
        _run(mesh, lambda x: jax.jvp(comp, (x,), (x,))[1], 1)(x)
    for second_order in (
        lambda x: jax.jvp(loss_grad, (x,), (x,))[1],
        jax.grad(lambda x: jnp.sum(loss_grad(x))),
    ):
        with pytest.raises(NotImplementedError, match=r"first-order.*ExchangeConfig\(backward="):
            _run(mesh, second_order, 1)(x)


@pytest.mark.parametrize("split,concat", [(-2, 0), (-2, -3), (1, 0)])
def test_empty_operand_with_negative_axes(mesh, split, concat):
    """A zero-size untiled operand, global (40, 8, 0) with split_axis=-2: the empty result
    jax.lax.all_to_all gives for the positive axes (before: a segmentation fault)."""
    x = jnp.zeros((40, NDEV, 0), jnp.float32)
    y = _run(mesh, _compressed(split, concat, False), 1)(x)
    ye = _run(mesh, _exact(split % 3, concat % 3, False), 1)(x)
    assert y.shape == ye.shape == (NDEV * NDEV, 5, 0) and y.dtype == ye.dtype
