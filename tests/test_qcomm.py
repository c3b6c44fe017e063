"""Tests of the TorchRec/FBGEMM quantized-comm baselines (jax_lossy_comm/qcomm.py), run as
codec objects through ``compressed_all_to_all``.

Correctness only: INT8 row-wise codes, scale and bias against a numpy reference of FBGEMM's
``FloatToFused8BitRowwiseQuantized`` (and against FBGEMM itself when ``fbgemm_gpu`` is
installed), the fused row layout, the exchanges against ``jax.lax.all_to_all`` of the
reference round trip on 8 virtual CPU devices, straight-through gradients (exact and
quantized backward), and the byte statistics.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc
from jax_lossy_comm import qcomm

NDEV = 8
needs_devices = pytest.mark.skipif(
    jax.device_count() < NDEV, reason=f"needs {NDEV} devices (XLA_FLAGS in conftest.py)"
)


def np_int8_rowwise(x: np.ndarray, row_dim: int = 32):
    """numpy reference of FBGEMM FloatToFused8BitRowwiseQuantizedSBFloatRef (QuantUtils.cc).

    Returns (codes uint8[g, row_dim], scale float32[g], bias float32[g], x_hat float32[g*row_dim]).
    """
    r = np.asarray(x, np.float32).reshape(-1, row_dim)
    lo = r.min(axis=1)
    hi = r.max(axis=1)
    rng = (hi - lo).astype(np.float32)
    scale = (rng / np.float32(255.0)).astype(np.float32)
    inv = (np.float32(255.0) / (rng + np.float32(1e-8))).astype(np.float32)
    q = np.rint((r - lo[:, None]) * inv[:, None]).astype(np.uint8)  # lrintf: half to even
    y = (q.astype(np.float32) * scale[:, None] + lo[:, None]).astype(np.float32)
    return q, scale, lo, y.reshape(-1)


def _unpack(packed: np.ndarray, row_dim: int):
    w = qcomm.int8_row_bytes(row_dim)
    packed = np.asarray(packed).reshape(-1, w)
    sb = np.ascontiguousarray(packed[:, w - 8 :]).view("<f4")
    return packed[:, :row_dim], packed[:, row_dim : w - 8], sb[:, 0], sb[:, 1]


def _data(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * rng.uniform(0.1, 3.0, shape[-1])).astype(np.float32)


# ---------------------------------------------------------------------------------- the codec
@pytest.mark.parametrize("row_dim", [32, 16, 30])
def test_int8_codes_scale_bias_match_fbgemm_formula(row_dim):
    x = _data((64, row_dim * 4), seed=row_dim)
    packed = np.asarray(jax.jit(lambda v: qcomm.int8_rowwise_quantize(v, row_dim))(x))
    assert packed.dtype == np.uint8
    assert packed.shape == (64, 4, (row_dim + 3) // 4 * 4 + 8)
    codes, pad, scale, bias = _unpack(packed, row_dim)
    q, s_ref, b_ref, y_ref = np_int8_rowwise(x, row_dim)
    np.testing.assert_array_equal(bias, b_ref)
    # XLA:CPU divides through a reciprocal: the scale may differ from the correctly rounded
    # quotient by one ulp; the codes may flip at an exact .5 tie.
    np.testing.assert_array_max_ulp(scale, s_ref, maxulp=1)
    assert np.abs(codes.astype(int) - q.astype(int)).max() <= 1
    assert np.mean(codes == q) >= 0.999
    assert not pad.any()
    y = np.asarray(jax.jit(lambda p: qcomm.int8_rowwise_dequantize(p, row_dim))(packed))
    assert y.shape == x.shape
    step = np.repeat(s_ref, row_dim).reshape(x.shape)
    assert np.all(np.abs(y - y_ref.reshape(x.shape)) <= step * 1.0001 + 1e-6)
    # quantization error: at most half a step (+ float32 rounding)
    assert np.all(np.abs(y - x) <= 0.5 * step * 1.001 + 1e-6)


def test_int8_constant_rows_and_bad_row_dim():
    x = np.full((2, 32), 1.5, np.float32)
    packed = qcomm.int8_rowwise_quantize(x)
    codes, _, scale, bias = _unpack(np.asarray(packed), 32)
    assert not codes.any() and np.all(scale == 0) and np.all(bias == 1.5)
    np.testing.assert_array_equal(np.asarray(qcomm.int8_rowwise_dequantize(packed)), x)
    with pytest.raises(ValueError, match="row_dim"):
        qcomm.int8_rowwise_quantize(np.zeros((3, 20), np.float32), 32)
    with pytest.raises(ValueError, match="bytes"):
        qcomm.int8_rowwise_dequantize(jnp.zeros((2, 39), jnp.uint8), 32)


def test_int8_matches_fbgemm_when_installed():
    torch = pytest.importorskip("torch")
    pytest.importorskip("fbgemm_gpu")
    x = _data((128, 32), seed=3)
    ref = torch.ops.fbgemm.FloatToFused8BitRowwiseQuantized(torch.from_numpy(x)).numpy()
    got = np.asarray(qcomm.int8_rowwise_quantize(x.reshape(-1))).reshape(ref.shape)
    assert np.mean(got[:, :32] == ref[:, :32]) >= 0.999
    np.testing.assert_array_equal(got[:, 36:], ref[:, 36:])  # bias bytes
    y_ref = torch.ops.fbgemm.Fused8BitRowwiseQuantizedToFloat(torch.from_numpy(ref)).numpy()
    y = np.asarray(qcomm.int8_rowwise_dequantize(jnp.asarray(got))).reshape(y_ref.shape)
    np.testing.assert_allclose(
        y,
        y_ref,
        rtol=0,
        atol=float(np.abs(x).max()) * 2e-6 + 1e-3 * float((x.max(1) - x.min(1)).max()) / 255,
    )


def test_bf16_encode_clamps_and_rounds_to_nearest_even():
    big = float(jnp.finfo(jnp.bfloat16).max)
    x = np.array([1.0, 1.00390625, 1.01171875, 3.4e38, -3.4e38, np.inf, -np.inf], np.float32)
    y = np.asarray(qcomm.bf16_encode(x).astype(jnp.float32))
    # ties to even: 1 + 2^-8 -> 1.0, 1 + 3 * 2^-8 -> 1 + 2^-6; beyond the bfloat16 range
    # (3.4e38 would round to inf): clamped to +-max
    np.testing.assert_array_equal(y[:3], [1.0, 1.0, 1.015625])
    np.testing.assert_array_equal(y[3:], [big, -big, big, -big])


# ------------------------------------------------------------------------------- the exchange
@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((NDEV,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))


def _smap(mesh, f, out_specs):
    return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("i"),), out_specs=out_specs))


CASES = [  # (local shape, split, concat, tiled, table_axis); each peer block % 32 == 0
    ((16, 4, 32), 0, 1, True, 1),  # DLRM [global_batch, tables, dim]
    ((16, 2, 64), 0, 1, True, 1),
    ((8, 16, 32), 1, 0, True, None),
    ((8, 4, 16), 0, 1, False, 1),  # untiled
]


CODECS = {"int8-rowwise": qcomm.Int8Rowwise(), "bf16": qcomm.BF16()}


def _exchange(which, *, stats=False, backward=False, table_axis=None, tiled=True, **kw):
    """The baseline ``which`` through compressed_all_to_all (x, axis, split, concat)."""
    codec = CODECS[which] if isinstance(which, str) else which
    cfg = jlc.ExchangeConfig(codec, codec if backward else None, table_axis=table_axis)
    fn = jlc.compressed_all_to_all_with_stats if stats else jlc.compressed_all_to_all
    return lambda *a: fn(*a, tiled=tiled, config=cfg, **kw)


def _reference_exchange(x_global, split, concat, tiled, roundtrip):
    """jax.lax.all_to_all semantics applied to each device's per-peer blocks after the
    codec's round trip `roundtrip(float32[n]) -> float32[n]` (numpy)."""
    local = np.split(x_global, NDEV)
    lay = jlc.make_layout(local[0].shape, NDEV, split, concat, None, tiled)
    sent = np.stack(
        [
            np.stack(
                [roundtrip(b) for b in np.asarray(lay.to_chunks(jnp.asarray(x))).reshape(NDEV, -1)]
            )
            for x in local
        ]
    )  # [src, dst, n]
    return np.concatenate(
        [
            np.asarray(lay.from_chunks(jnp.asarray(sent[:, d].reshape((NDEV,) + lay.chunk_shape))))
            for d in range(NDEV)
        ]
    )


@needs_devices
@pytest.mark.parametrize("shape,split,concat,tiled,table", CASES)
@pytest.mark.parametrize("which", ["int8-rowwise", "bf16"])
def test_exchange_matches_all_to_all_of_roundtrip(mesh, shape, split, concat, tiled, table, which):
    fn = _exchange(which, tiled=tiled, table_axis=table, error_bound=0.01)
    x = _data((NDEV * shape[0],) + shape[1:], seed=7)
    y = _smap(mesh, lambda v: fn(v, "i", split, concat), P("i"))(x)
    exact = _smap(mesh, lambda v: jax.lax.all_to_all(v, "i", split, concat, tiled=tiled), P("i"))(x)
    assert y.shape == exact.shape and y.dtype == x.dtype
    if which == "bf16":
        rt = lambda b: b.astype(jnp.bfloat16).astype(np.float32)  # noqa: E731
        ref = _reference_exchange(x, split, concat, tiled, lambda b: np.asarray(rt(b)))
        np.testing.assert_array_equal(np.asarray(y), ref)
    else:
        ref = _reference_exchange(x, split, concat, tiled, lambda b: np_int8_rowwise(b, 32)[3])
        tol = (np.abs(np.asarray(exact)).max() * 2 / 255) * 1.001
        np.testing.assert_allclose(np.asarray(y), ref, rtol=0, atol=tol / 2 * 1e-3 + 1e-6)


@needs_devices
@pytest.mark.parametrize("which,ratio", [("int8-rowwise", 3.2), ("bf16", 2.0)])
def test_stats_bytes(mesh, which, ratio):
    fn = _exchange(which, stats=True, table_axis=1, error_bound=jnp.full((4,), 0.01))
    local = (16, 4, 32)
    x = _data((NDEV * local[0],) + local[1:])

    def f(v):
        _, s = fn(v, "i", 0, 1)
        return jax.tree.map(lambda a: a[None], s)

    s = _smap(mesh, f, P("i"))(x)
    raw = np.prod(local) * 4
    np.testing.assert_array_equal(np.asarray(s.raw_bytes), raw)
    np.testing.assert_allclose(np.asarray(s.moved_bytes), raw / ratio)
    np.testing.assert_allclose(np.asarray(s.frame_bytes), raw / ratio)
    assert s.compression_ratio.shape == (NDEV, NDEV, 4)
    np.testing.assert_allclose(np.asarray(s.compression_ratio), ratio, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(s.capacity_bytes), raw / ratio / NDEV)
    assert not np.asarray(s.fallback).any() and not np.asarray(s.overflow_count).any()


@needs_devices
@pytest.mark.parametrize("which", ["int8-rowwise", "bf16"])
def test_gradient_straight_through(mesh, which):
    """Exact backward: the gradient (through a psum, the vma trap) equals the exact
    all_to_all's. Quantized backward: it is the codec's transposed exchange of the cotangent."""
    fn, fn_q = _exchange(which, table_axis=1), _exchange(which, table_axis=1, backward=True)
    x = _data((NDEV * 16, 2, 32), seed=11)  # local [16, 2, 32] -> y local [2, 16, 32]
    w = _data((NDEV * 2, 16, 32), seed=12)

    def loss(xa, exchange):
        def body(v, wv):
            return jax.lax.psum(jnp.sum(exchange(v) * wv), "i")

        return jax.shard_map(body, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=P())(xa, w)

    exact_g = jax.jit(
        jax.grad(lambda a: loss(a, lambda v: jax.lax.all_to_all(v, "i", 0, 1, tiled=True)))
    )(x)
    g = jax.jit(jax.grad(lambda a: loss(a, lambda v: fn(v, "i", 0, 1))))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(exact_g), rtol=1e-6, atol=1e-6)
    gq = jax.jit(jax.grad(lambda a: loss(a, lambda v: fn_q(v, "i", 0, 1))))(x)
    back = _smap(mesh, lambda v: _exchange(which)(v, "i", 1, 0), P("i"))(w)
    np.testing.assert_array_equal(np.asarray(gq), np.asarray(back))
    assert np.abs(np.asarray(gq) - np.asarray(exact_g)).max() > 0


@needs_devices
def test_bad_arguments(mesh):
    x = np.zeros((NDEV * 8, 3, 5), np.float32)  # 15 values per peer block
    with pytest.raises(ValueError, match="row_dim"):
        _smap(mesh, lambda v: _exchange("int8-rowwise")(v, "i", 0, 1), P("i"))(x)
    with pytest.raises(ValueError, match="row_dim"):
        qcomm.Int8Rowwise(row_dim=0)
    with pytest.raises(TypeError, match="backward"):
        jlc.ExchangeConfig(qcomm.BF16(), backward="x")
    with pytest.raises(TypeError):
        _smap(mesh, lambda v: _exchange("bf16")(v, "i", 0, 1), P("i"))(
            np.zeros((NDEV * 8, 3, 5), np.int32)
        )


@needs_devices
def test_mixed_codecs_forward_frames_backward_bf16(mesh):
    """Forward through the error-bounded frames, backward through BF16 (TorchRec's pair of
    forward and backward precision): the gradient is the BF16 exchange of the cotangent."""
    x = _data((NDEV * 16, 2, 32), seed=21)
    w = _data((NDEV * 2, 16, 32), seed=22)
    cfg = jlc.ExchangeConfig(jlc.FrameCodec(), qcomm.BF16(), table_axis=1)

    def loss(xa):
        def body(v, wv):
            y = jlc.compressed_all_to_all(v, "i", 0, 1, tiled=True, error_bound=0.01, config=cfg)
            return jax.lax.psum(jnp.sum(y * wv), "i")

        return jax.shard_map(body, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=P())(xa, w)

    g = jax.jit(jax.grad(loss))(x)
    back = _smap(mesh, lambda v: _exchange("bf16")(v, "i", 1, 0), P("i"))(w)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(back))
