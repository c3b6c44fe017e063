"""The compressed all-reduce in preconditioned coordinates (``scale=``,
jax_lossy_comm.precondition) on 8 virtual CPU devices: Adagrad's update from the reduced
gradient is within the bound the scaled coordinates give, error feedback still telescopes,
and ``adagrad_scale`` reads optax's state.

The bound on the update (derived here, checked in float64): with ``s = 1 / sqrt(v + eps)``
(``v`` the accumulator before the step, the same on every device) the all-reduce codes
``g_i * s``; the module docstring of ``allreduce`` bounds the scaled sum's error per element
of chunk c by ``B_s(c) = eb * (2 + 2 eb) * sum_i R_i(c)`` (``R_i`` the range of device i's
scaled chunk: its P contributions, each within ``eb * R_i``, plus the re-compression of the
reduced shard, within ``eb * R_s <= eb * (1 + 2 eb) * sum_i R_i``), so the reduced gradient is
within ``B_s / s``. Adagrad's update ``u(g) = lr * g / sqrt(v + g**2 + eps)`` has
``|du/dg| = lr * (v + eps) / (v + g**2 + eps)**1.5 <= lr * s``, so the update (its accumulator
updated from the reduced gradient too) is within ``lr * s * B_s / s = lr * B_s``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.flatten_util import ravel_pytree
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc
from jax_lossy_comm import allreduce as ar

NDEV = 8
AX = "i"
MESH = jax.make_mesh((NDEV,), (AX,), axis_types=(jax.sharding.AxisType.Auto,))
LR, EPS, EB = 0.01, 1e-8, 0.01


def _problem(seed: int):
    """Per-device gradients whose coordinates differ by orders of magnitude within every
    chunk (as a DLRM head's do: weights, biases, cross layers), with an Adagrad state whose
    accumulator follows them: ``(g [P, ...] leaves, params, opt_state)``."""
    rng = np.random.default_rng(seed)
    n_w, n_b = 3000, 200
    mag_w = 10.0 ** rng.uniform(-4, 0, n_w)  # per-coordinate magnitude, interleaved
    mag_b = 10.0 ** rng.uniform(-3, -1, n_b)
    g = {
        "w": (rng.standard_normal((NDEV, n_w)) * mag_w).astype(np.float32),
        "b": (rng.standard_normal((NDEV, n_b)) * mag_b).astype(np.float32),
    }
    params = {"w": jnp.zeros(n_w), "b": jnp.zeros(n_b)}
    tx = optax.adagrad(LR, initial_accumulator_value=0.0, eps=EPS)
    state = tx.init(params)
    # an accumulator of past steps' squared gradients of the same magnitudes
    past = {"w": (30 * mag_w**2).astype(np.float32), "b": (30 * mag_b**2).astype(np.float32)}
    state = (optax.ScaleByRssState(jax.tree.map(jnp.asarray, past)),) + tuple(state[1:])
    return g, tx, params, state


def _reduce(g, scale):
    def f(g, scale):
        loc = jax.tree.map(lambda v: v[0], g)
        return jlc.compressed_psum(loc, AX, error_bound=EB, scale=scale)

    spec = jax.tree.map(lambda _: P(AX), g)
    run = jax.jit(jax.shard_map(f, mesh=MESH, in_specs=(spec, P()), out_specs=P()))
    return run(g, scale)


def _scaled_bound(g, scale):
    """Per element of the flattened pytree: ``B_s`` (module docstring) plus float32 rounding
    of the scaled sum, from each device's scaled contribution in float64."""
    flats = [
        np.asarray(ravel_pytree(jax.tree.map(lambda v, s: v[i] * s, g, scale))[0], np.float64)
        for i in range(NDEV)
    ]
    n = flats[0].size
    rows, dim = ar.chunk_geometry(n, NDEV)
    padded = [np.pad(f, (0, NDEV * rows * dim - n), mode="edge") for f in flats]
    ranges = np.stack([np.ptp(p.reshape(NDEV, -1), axis=1) for p in padded])  # [dev, chunk]
    per_chunk = EB * (2 + 2 * EB) * ranges.sum(axis=0) * (1 + 1e-5)
    rounding = 4 * NDEV * 2.0**-24 * np.sum(np.abs(flats), axis=0) + 1e-30
    return np.repeat(per_chunk, rows * dim)[:n] + rounding


def test_adagrad_update_within_the_scaled_bound():
    g, tx, params, state = _problem(0)
    s = jlc.adagrad_scale(state, EPS)
    exact_g = jax.tree.map(lambda v: jnp.asarray(v.astype(np.float64).sum(0), jnp.float32), g)
    exact_u = tx.update(exact_g, state, params)[0]

    y = _reduce(g, s)
    u = tx.update(y, state, params)[0]
    b_s = _scaled_bound(g, s)
    flat = lambda t: np.asarray(ravel_pytree(t)[0], np.float64)  # noqa: E731
    # the reduced gradient: within B_s / s of the exact sum
    err_g = np.abs(flat(y) - flat(exact_g))
    assert np.all(err_g <= b_s / flat(s)), (err_g * flat(s) / b_s).max()
    # the update: within lr * B_s (plus float32 rounding of optax's arithmetic, <= lr * 1e-6)
    err_u = np.abs(flat(u) - flat(exact_u))
    bound_u = LR * b_s + LR * 1e-6
    assert np.all(err_u <= bound_u), (err_u / bound_u).max()
    assert (err_u / bound_u).max() > 0.02  # the data really went through the codec
    assert np.abs(flat(exact_u)).max() > 2 * bound_u.max()  # and the bound says something

    # Without the scale the same REL bound holds for the gradient, not for the update: the
    # coordinates with small gradients and accumulators get errors several times lr * B_s
    # (5.5x here: their gradients code to zero, so the error is their whole update).
    u0 = tx.update(_reduce(g, None), state, params)[0]
    assert (np.abs(flat(u0) - flat(exact_u)) / bound_u).max() > 3


def test_scale_is_exact_in_real_arithmetic_and_keeps_dtypes_and_int_leaves():
    rng = np.random.default_rng(3)
    g = {
        "w": rng.standard_normal((NDEV, 64, 8)).astype(np.float32),
        "h": rng.standard_normal((NDEV, 100)).astype(jnp.bfloat16),
        "n": np.arange(NDEV, dtype=np.int32)[:, None],
    }
    scale = {"w": jnp.full((8,), 4.0), "h": jnp.float32(0.5), "n": jnp.float32(3.0)}

    def f(g, scale):
        loc = jax.tree.map(lambda v: v[0], g)
        y = jlc.compressed_psum(loc, AX, error_bound=EB, scale=scale)
        y1 = jlc.compressed_psum(loc, AX, error_bound=EB, scale=2.0)  # one scale for all
        y0 = jlc.compressed_psum(loc, AX, error_bound=EB)
        return y, y1, y0, jax.lax.psum(loc, AX)

    spec = jax.tree.map(lambda _: P(AX), g)
    y, y1, y0, ex = jax.jit(jax.shard_map(f, mesh=MESH, in_specs=(spec, P()), out_specs=P()))(
        g, scale
    )
    for k in g:
        assert y[k].dtype == ex[k].dtype and y[k].shape == ex[k].shape, k
    assert np.asarray(y["n"]).tolist() == np.asarray(ex["n"]).tolist()  # summed exactly
    # a scale the same everywhere (a power of two: exact) changes nothing in a REL frame
    for k in g:
        np.testing.assert_array_equal(np.asarray(y1[k]), np.asarray(y0[k]))


def test_error_feedback_residual_in_gradient_coordinates_telescopes():
    """``update(..., scale=s_t)`` with a scale that changes every step: the transmitted sum
    plus the residuals still held equals the exact sum of the gradients at every step, and
    the drift stays within about one step's error."""
    rng = np.random.default_rng(5)
    mag = 10.0 ** rng.uniform(-3, 0, 4000)
    ef = jlc.error_feedback(AX)

    def step(g, res, s):
        y, st = ef.update(g[0], jlc.ErrorFeedbackState(res[0]), error_bound=0.05, scale=s)
        return y, st.residual[None]

    run = jax.jit(
        jax.shard_map(step, mesh=MESH, in_specs=(P(AX), P(AX), P()), out_specs=(P(), P(AX)))
    )
    res = jnp.zeros((NDEV, mag.size), jnp.float32)
    total, exact, v = np.zeros(mag.size), np.zeros(mag.size), np.zeros(mag.size)
    for t in range(12):
        g = (rng.standard_normal((NDEV, mag.size)) * mag + 0.5 * mag).astype(np.float32)
        s = jnp.asarray(1.0 / np.sqrt(v + EPS), jnp.float32)
        y, res = run(g, res, s)
        total += np.asarray(y, np.float64)
        exact += g.astype(np.float64).sum(0)
        v += np.asarray(y, np.float64) ** 2
        held = np.asarray(res, np.float64).sum(0)
        tele = np.abs(total + held - exact)  # float32 rounding of y and of each residual
        scale_of = np.abs(total) + np.abs(np.asarray(res, np.float64)).sum(0) + np.abs(exact)
        assert np.all(tele <= 1e-6 * (t + 1) * scale_of), t
    drift = np.abs(total - exact) * np.asarray(s)  # in the last step's scaled coordinates
    one_step = 0.05 * 2.1 * NDEV * 2 * (4 * 2 * np.abs(np.asarray(s) * mag).max())
    assert drift.max() <= one_step
    assert np.abs(np.asarray(res)).max() > 0


def test_gradient_through_scaled_psum_is_psums_rule():
    x = jnp.asarray(np.random.default_rng(2).standard_normal((NDEV, 300)), jnp.float32)
    w = jnp.linspace(-1.0, 1.0, 300)
    s = jnp.asarray(10.0 ** np.linspace(-3, 3, 300), jnp.float32)

    def loss(x, reduce):
        def f(x):
            return (reduce(x[0]) * w).sum()[None]

        out = jax.shard_map(f, mesh=MESH, in_specs=P(AX), out_specs=P(AX))(x)
        return out[0]

    g = jax.grad(loss)(x, lambda v: jlc.compressed_psum(v, AX, error_bound=EB, scale=s))
    g_exact = jax.grad(loss)(x, lambda v: jax.lax.psum(v, AX))
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_exact), rtol=1e-6)


def test_bad_scale():
    x = jnp.ones((NDEV, 10))

    def call(scale):
        return jax.shard_map(
            lambda v: jlc.compressed_psum(v[0], AX, error_bound=EB, scale=scale),
            mesh=MESH,
            in_specs=P(AX),
            out_specs=P(),
        )(x)

    with pytest.raises(ValueError, match="positive"):
        call(jnp.zeros(10))
    with pytest.raises(ValueError, match="positive"):
        call(-1.0)
    with pytest.raises(ValueError, match="broadcast"):
        call(jnp.ones(3))
    with pytest.raises(ValueError, match="structure"):
        call({"a": jnp.ones(10), "b": jnp.ones(10)})
    with pytest.raises(TypeError, match="floating"):
        call(jnp.ones(10, jnp.int32))


def test_adagrad_scale_finds_optax_state():
    params = {"head": {"w": jnp.ones((2, 3))}, "table": jnp.ones(4)}
    grads = jax.tree.map(lambda p: 0.5 * p, params)
    for tx in (
        optax.adagrad(0.1, initial_accumulator_value=0.0, eps=1e-8),
        optax.inject_hyperparams(optax.adagrad)(learning_rate=0.1),
        optax.chain(optax.clip_by_global_norm(1.0), optax.adagrad(0.1)),
        optax.MultiSteps(optax.adagrad(0.1), every_k_schedule=2),
    ):
        state = tx.init(params)
        state = tx.update(grads, state, params)[1]
        s = jlc.adagrad_scale(state, 1e-8)
        assert jax.tree.structure(s) == jax.tree.structure(params)
        v = jax.tree.leaves(state, is_leaf=lambda n: isinstance(n, optax.ScaleByRssState))
        v = next(n for n in v if isinstance(n, optax.ScaleByRssState)).sum_of_squares
        for a, b in zip(jax.tree.leaves(s), jax.tree.leaves(v)):
            assert a.dtype == jnp.float32
            np.testing.assert_allclose(np.asarray(a), 1 / np.sqrt(np.asarray(b) + 1e-8), rtol=1e-6)
    with pytest.raises(ValueError, match="no optax.ScaleByRssState"):
        jlc.adagrad_scale(optax.sgd(0.1).init(params))
    with pytest.raises(ValueError, match="no optax.ScaleByRssState"):
        jlc.adagrad_scale(optax.adam(0.1).init(params))
    two = (optax.adagrad(0.1).init(params), optax.adagrad(0.1).init(params))
    with pytest.raises(ValueError, match="ambiguous"):
        jlc.adagrad_scale(two)
    with pytest.raises(ValueError, match="eps"):
        jlc.adagrad_scale(two[0], 0.0)
