"""compressed_psum in slices (``AllReduceConfig(slices=S)``) on 8 virtual CPU devices: the
sum within each slice's bound, a fallback confined to its slice, error feedback and the
gradient through the scan, and the slice count's checks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc
from jax_lossy_comm import allreduce as ar

NDEV = 8
AX = "i"
MESH = jax.make_mesh((NDEV,), (AX,), axis_types=(jax.sharding.AxisType.Auto,))
EB = 0.01
SLICE = NDEV * 256 * 3  # values of one slice: 3 rows per peer
PER_DEV = 4 * SLICE - 77  # 4 slices, the last one padded


def _grads(seed: int = 0) -> np.ndarray:
    """Per-device gradients with a different scale in each slice (so the slices' ranges
    differ): float32[NDEV * PER_DEV]."""
    rng = np.random.default_rng(seed)
    scale = np.array([0.01, 1.0, 0.1, 3.0])[np.arange(PER_DEV) // SLICE]
    return (rng.standard_normal((NDEV, PER_DEV)) * scale).astype(np.float32).reshape(-1)


def _run(g, config):
    def f(v):
        y, st = jlc.compressed_psum_with_stats(v, AX, error_bound=EB, config=config)
        return y, jax.lax.psum(v, AX), jax.tree.map(lambda s: s[None], st)

    return jax.jit(jax.shard_map(f, mesh=MESH, in_specs=P(AX), out_specs=(P(), P(), P(AX))))(g)


def _slice_bound(g: np.ndarray, slices: int) -> tuple[np.ndarray, np.ndarray]:
    """(exact float64 sum, the documented REL bound per element) on the sliced geometry:
    chunk c of slice s is the values ``[s * P * r * 256 + c * r * 256, ...)`` of the padded
    buffer, with ``r`` rows per peer of one slice."""
    flats = np.asarray(g, np.float64).reshape(NDEV, -1)
    n = flats.shape[1]
    rows, dim = ar.chunk_geometry(-(-n // slices), NDEV)
    chunk = rows * dim
    padded = np.pad(flats, ((0, 0), (0, slices * NDEV * chunk - n)), mode="edge")
    ranges = np.ptp(padded.reshape(NDEV, -1, chunk), axis=2).sum(axis=0)  # [chunks]
    bound = np.repeat(EB * (2 + 2 * EB) * ranges * (1 + 1e-5), chunk)[:n]
    rounding = (NDEV - 1) * 2.0**-24 * np.abs(flats).sum(0) + 1e-30
    return flats.sum(0), bound + rounding


def test_each_slice_is_summed_within_its_own_bound():
    g = _grads(1)
    y, ex, st = _run(g, jlc.AllReduceConfig(slices=4))
    exact, bound = _slice_bound(g, 4)
    err = np.abs(np.asarray(y, np.float64) - exact)
    assert np.all(err <= bound), (err / bound).max()
    assert (err / bound).max() > 0.05  # really coded
    # each slice is coded at its own range: the quiet first quarter's error is ~100x below
    # the loud second quarter's, which one range for the whole chunk would not give
    assert err[:SLICE].max() < 0.05 * err[SLICE : 2 * SLICE].max()
    assert np.asarray(st.fallback).tolist() == [0] * NDEV
    raw, moved = np.asarray(st.raw_bytes), np.asarray(st.moved_bytes)
    assert raw.tolist() == [2.0 * 4 * SLICE * 4] * NDEV
    assert np.all(moved < raw / 3)
    # the statistics' ratio is raw / frame bytes of all four slices together
    ratio = np.asarray(st.compression_ratio)
    assert ratio.shape == (NDEV, 2) and np.all(ratio > 3)
    assert np.all(np.asarray(st.frame_bytes) < raw / 3)


def test_one_slice_with_an_overflowing_frame_falls_back_alone():
    g = _grads(2).reshape(NDEV, PER_DEV)
    lo = 2 * SLICE + 100  # inside the third slice, on device 5: far more NaN than outlier room
    g[5, lo : lo + 500] = np.nan
    g = g.reshape(-1)
    y, ex, st = _run(g, jlc.AllReduceConfig(slices=4))
    y, ex = np.asarray(y), np.asarray(ex)
    s0, s1 = 2 * SLICE, 3 * SLICE  # the third slice's values
    assert np.array_equal(y[s0:s1].view(np.uint32), ex[s0:s1].view(np.uint32))
    exact, bound = _slice_bound(np.nan_to_num(g), 4)
    rest = np.r_[0:s0, s1:PER_DEV]
    err = np.abs(y[rest].astype(np.float64) - exact[rest])
    assert np.all(err <= bound[rest]) and err.max() > 0  # the other slices stay coded
    assert np.asarray(st.fallback).tolist() == [1] * NDEV
    assert np.asarray(st.overflow_count)[5] >= 1
    # the three coded slices still save bytes: three quarters at a ratio > 3, one raw
    raw, moved = np.asarray(st.raw_bytes), np.asarray(st.moved_bytes)
    assert np.all(moved < 0.5 * raw), moved / raw
    # per phase, summed over the slices: the fallen-back slice's psum half in each
    phase = np.asarray(st.phase_moved_bytes)
    np.testing.assert_allclose(phase.sum(axis=1), moved, rtol=1e-6)
    assert np.all(phase[:, 1] >= raw / 4 / 2), (phase, raw)


def test_slices_are_cut_to_the_buffers_rows_and_invalid_counts_raise():
    g = np.linspace(-1, 1, NDEV * 100, dtype=np.float32)  # one row per peer: one slice
    y, ex, st = _run(g, jlc.AllReduceConfig(slices=16))
    y1, _, st1 = _run(g, jlc.AllReduceConfig())
    assert np.array_equal(np.asarray(y), np.asarray(y1))  # the same single all-reduce
    assert np.asarray(st.raw_bytes).tolist() == np.asarray(st1.raw_bytes).tolist()
    # 17 rows per peer in 16 slices: 2 rows each, so 9 slices (none of padding only)
    g = np.linspace(-1, 1, NDEV * NDEV * 256 * 17, dtype=np.float32)
    _, _, st = _run(g, jlc.AllReduceConfig(slices=16))
    assert np.asarray(st.raw_bytes).tolist() == [2.0 * 9 * NDEV * 2 * 256 * 4] * NDEV
    assert jlc.AllReduceConfig(slices=np.int64(4)).slices == 4
    for bad in (0, -2, 1.5, True, "4"):
        with pytest.raises(ValueError, match="slices must be an int >= 1"):
            jlc.AllReduceConfig(slices=bad)


def test_error_feedback_and_the_gradient_through_the_slices():
    cfg = jlc.AllReduceConfig(slices=3)
    ef = jlc.error_feedback(AX, config=cfg)
    g = jnp.asarray(_grads(3))

    def step(v, res):
        y, state = ef.update(v, jlc.ErrorFeedbackState(res), error_bound=EB)
        return y, state.residual

    run = jax.jit(jax.shard_map(step, mesh=MESH, in_specs=(P(AX), P(AX)), out_specs=(P(), P(AX))))
    exact = np.asarray(g, np.float64).reshape(NDEV, -1).sum(0)
    res, total = ef.init(g).residual, 0.0
    for t in range(6):  # transmitted + still held == exact at every step (telescoping)
        y, res = run(g, res)
        total = total + np.asarray(y, np.float64)
        held = np.asarray(res, np.float64).reshape(NDEV, -1).sum(0)
        assert np.abs(total + held - (t + 1) * exact).max() <= 1e-5 * (t + 1) * 3 * NDEV * 10
    assert np.abs(np.asarray(res)).max() > 0
    # straight-through: psum's own rule, d/dx_i sum(psum(x) * w) = w on every device
    w = jnp.asarray(np.random.default_rng(4).standard_normal(PER_DEV).astype(np.float32))

    def loss(v):
        return (jlc.compressed_psum(v, AX, error_bound=EB, config=cfg) * w).sum()

    grad = jax.jit(jax.grad(jax.shard_map(loss, mesh=MESH, in_specs=P(AX), out_specs=P())))(g)
    assert np.allclose(np.asarray(grad).reshape(NDEV, -1), np.asarray(w)[None], rtol=1e-6)
