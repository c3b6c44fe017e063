"""Tests of the TorchRec/FBGEMM quantized-comm baselines (jax_lossy_comm/qcomm.py), run as
codec objects through ``compressed_all_to_all``.

Correctness only: INT8 row-wise codes, scale and bias against a numpy reference of FBGEMM's
``FloatToFused8BitRowwiseQuantized``; FP8 row-wise, MX4 and FP16 bit for bit against numpy
transliterations of FBGEMM's ``quantize_fp8_rowwise.cu`` / ``float_to_hfp8``, the Triton
``_kernel_quantize_mx4`` and ``fp32_to_fp16_with_clamp`` (and against FBGEMM itself when
``fbgemm_gpu`` is installed), byte counts per row and edge cases; the fused row layout, the exchanges against ``jax.lax.all_to_all`` of the
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


# ------------------------------------------------- numpy transliterations of FBGEMM (FP8, MX4)
FP8 = {"e4m3": (4, 15, 0.9375), "e5m2": (5, 31, 0.875)}  # quantize_fp8_rowwise.cu


def _u32(a):
    return np.asarray(a, np.uint32)


def np_float_to_hfp8(v, ebits, bias, max_pos):
    """``float_to_hfp8`` (fbgemm_gpu/include/fbgemm_gpu/quantize_ops_utils.h), line by line in
    float32 numpy (IEEE adds, subnormals kept): the bouncer rounds, then the bits are moved."""
    mbits = 7 - ebits
    bits = np.asarray(v, np.float32).view(np.uint32)
    sign = bits & _u32(0x80000000)
    val = np.fmin((bits & _u32(0x7FFFFFFF)).view(np.float32), np.float32(max_pos))
    smallest_normal = _u32((127 - bias + 1) << 23).view(np.float32)
    bouncer = ((val.view(np.uint32) & _u32(0xFF800000)) + _u32((23 - mbits) << 23)).view(np.float32)
    r = ((bouncer + val) - bouncer).view(np.uint32)
    r = (r - _u32((127 - bias) << 23)) << _u32(8 - ebits)
    normal = ((r | sign) >> _u32(24)) & _u32(0xFF)
    sub_bouncer = _u32((127 + (23 + (1 - bias - mbits))) << 23).view(np.float32)
    sub = ((sub_bouncer + val).view(np.uint32) | (sign >> _u32(24))) & _u32(0xFF)
    return np.where(val >= smallest_normal, normal, sub).astype(np.uint8)


def np_hfp8_to_float(code, ebits, bias):
    """``hfp8_to_float`` (quantize_ops_utils.h) in float32 numpy."""
    c = np.asarray(code, np.uint32)
    sign = (c & _u32(0x80)) << _u32(24)
    val = ((c & _u32(0x7F)) << _u32(24 - (8 - ebits))).view(np.float32)
    mult = _u32((127 + (127 - bias)) << 23).view(np.float32)
    return ((val * mult).view(np.uint32) | sign).view(np.float32)


def np_fp8_rowwise(x, row_dim=32, fmt="e4m3"):
    """``_get_FP8_qparam_cuda_kernel`` + ``_compute_FP8_quantize_cuda_kernel`` +
    ``_FP8rowwise_to_float_cuda_kernel``: (codes uint8[g, row_dim], scale float32[g], x_hat)."""
    ebits, bias, max_pos = FP8[fmt]
    eps = np.float32(1e-20)
    r = np.asarray(x, np.float32).reshape(-1, row_dim)
    top = np.fmax.reduce(np.fmax(np.abs(r), eps), axis=1)  # fmaxf: NaN left out
    scale = (np.float32(max_pos) / (eps + top)).astype(np.float32)
    with np.errstate(invalid="ignore"):  # Inf * 0
        v = r * scale[:, None]
    v = np.where(np.isnan(v), _u32(0x7FFFFFFF).view(np.float32), v)  # the GPU's canonical NaN
    codes = np_float_to_hfp8(v, ebits, bias, max_pos)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np_hfp8_to_float(codes, ebits, bias) / scale[:, None]
    return codes, scale, y.astype(np.float32).reshape(-1)


E2M1 = np.float32([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def np_mx4(x, group_size=32):
    """``_kernel_quantize_mx4`` (fbgemm_gpu/triton/quantize.py, RoundingMode.even, no
    stochastic casting) in numpy int64/float32, and ``py_dequantize_mx4``: (packed
    uint8[G, group_size / 2 + 1], x_hat float32[n]). A NaN divided by the scale is the GPU's
    canonical NaN 0x7FFFFFFF."""
    a = np.asarray(x, np.float32).reshape(-1)
    n = a.size
    a = np.concatenate([a, np.zeros(-n % group_size, np.float32)]).reshape(-1, group_size)
    gmax = np.fmax.reduce(np.abs(a), axis=1)  # tl.max: NaN left out
    gmax = np.where(gmax == 0, np.float32(2.0**-126), gmax).astype(np.float32)
    e = (((gmax.view(np.int32).astype(np.int64) + (1 << 21) - 1) & 0x7F800000) >> 23) - 127
    s = np.clip(e - 2, -127, 125)
    scale = np.where(
        s >= -126, ((s + 127) << 23).astype(np.uint32).view(np.float32), np.float32(2.0**-127)
    ).astype(np.float32)
    scaled = (a / scale[:, None]).astype(np.float32)
    scaled = np.where(np.isnan(scaled), _u32(0x7FFFFFFF).view(np.float32), scaled)
    v = scaled.view(np.uint32).astype(np.int64)
    sign = (v >> 31) & 1
    biased_exp = (v & 0x7F800000) >> 23
    trailing = v & 0x7FFFFF
    new_exp = biased_exp - 127 + 1
    exp_diff = np.minimum(np.where(new_exp <= 0, 1 - new_exp, 0), 24)
    is_sub = biased_exp == 0
    mant = np.where(is_sub, trailing, trailing + (1 << 23))
    mant = mant >> (np.where(is_sub, 23, 24) + exp_diff - 2 - 1)
    mant = (mant + 1) >> 1
    overflow = mant > 3
    mant = np.where(overflow & ~is_sub, mant >> 1, mant)
    new_exp = np.where((new_exp <= 0) & (mant == 2), 1, new_exp)
    mant = mant & 1
    new_exp = np.where(overflow, new_exp + 1, new_exp)
    mant = np.where(new_exp > 3, 1, mant)
    code = (np.clip(new_exp, 0, 3) << 1) | mant | (sign << 3)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).astype(np.uint8)
    packed = np.concatenate([packed, (s + 127).astype(np.uint8)[:, None]], axis=1)
    y = E2M1[code].astype(np.float64) * np.exp2(s.astype(np.float64))[:, None]
    return packed, y.astype(np.float32).reshape(-1)[:n]


def np_fp16(x):
    """``fp32_to_fp16_with_clamp`` then ``fp16_to_fp32``."""
    return np.clip(np.asarray(x, np.float32), -65504.0, 65504.0).astype(np.float16)


def _bits(a):
    return np.asarray(a, np.float32).view(np.uint32)


def _assert_same_bits(got, want):
    """float32 arrays equal bit for bit (NaN payloads, the sign of zero)."""
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _wide_data(shape, seed):
    """Rows of very different magnitudes (1e-30 to 1e30), with zeros and negative zeros."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 10.0 ** rng.integers(-30, 31, shape[:-1] + (1,))
    x[..., ::7] = 0.0
    x[..., 3::11] = -0.0
    return x.astype(np.float32)


# ----------------------------------------------------------------------------------- FP8, MX4
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("row_dim", [32, 30])
def test_fp8_rowwise_matches_fbgemm_definition(fmt, row_dim):
    x = _wide_data((96, row_dim * 2), seed=row_dim)
    x[0, :row_dim] = np.float32(2.0 ** -np.arange(row_dim))  # every binade down to underflow
    packed = np.asarray(jax.jit(lambda v: qcomm.fp8_rowwise_quantize(v, row_dim, fmt))(x))
    w = (row_dim + 3) // 4 * 4
    assert packed.shape == (96, 2, w + 8) and qcomm.int8_row_bytes(row_dim) == w + 8
    codes, scale, y_ref = np_fp8_rowwise(x, row_dim, fmt)
    flat = packed.reshape(-1, w + 8)
    np.testing.assert_array_equal(flat[:, :row_dim], codes)
    assert not flat[:, row_dim:w].any()  # padding zeroed (FBGEMM leaves it unset)
    sb = np.ascontiguousarray(flat[:, w:]).view("<f4")
    _assert_same_bits(sb[:, 0], scale)
    np.testing.assert_array_equal(sb[:, 1], 0.0)
    y = np.asarray(qcomm.fp8_rowwise_dequantize(jnp.asarray(packed), row_dim, fmt))
    _assert_same_bits(y.reshape(-1), y_ref)
    # known error: half a unit in the last of 3 (e4m3) or 2 (e5m2) mantissa bits of x * scale,
    # or half the smallest step 2^(1 - bias - mbits) below 2^(1 - bias) (1/scale >= 1e-20)
    mb = 7 - FP8[fmt][0]
    under = np.repeat(2.0 ** (1 - FP8[fmt][1] - mb - 1) / scale, row_dim).reshape(x.shape)
    err = np.abs(y.astype(np.float64) - x)
    assert np.all(err <= np.maximum(2.0 ** -(mb + 1) * np.abs(x), under) * 1.0001)
    big = np.abs(x).reshape(-1, row_dim).max(1) > 1e-15  # the max lands on the largest code
    np.testing.assert_array_equal((codes & 0x7F).max(1)[big], 0x77 if mb == 3 else 0x7B)


def test_fp8_rowwise_edge_cases():
    eps = np.float32(1e-20)
    x = np.zeros((6, 32), np.float32)  # row 0: zeros
    x[1] = np.linspace(-3, 3, 32)
    x[1, 5], x[1, 6] = np.nan, -np.nan  # NaN: out of the max, encodes as +max_pos
    x[2] = np.linspace(-1, 1, 32)
    x[2, 7] = -np.inf  # scale 0: the row decodes to NaN, the Inf to +inf
    x[3] = np.float32(1e-40) * np.arange(-16, 16)  # float32 subnormals: below FP8's range
    x[4] = np.float32(np.finfo(np.float32).max / 1e4) * np.linspace(-1, 1, 32)  # large
    x[5] = np.float32(2.0**-17) * np.arange(32) * (np.float32(0.9375) / 31)  # gradual underflow
    packed = np.asarray(qcomm.fp8_rowwise_quantize(x))[:, 0]
    codes, scale, y_ref = np_fp8_rowwise(x)
    np.testing.assert_array_equal(packed[:, :32], codes)
    y = np.asarray(qcomm.fp8_rowwise_dequantize(jnp.asarray(packed))).reshape(x.shape)
    _assert_same_bits(y.reshape(-1), y_ref)
    assert scale[0] == np.float32(0.9375) / (eps + eps) and not codes[0].any()
    np.testing.assert_array_equal(y[0], 0.0)
    assert codes[1, 5] == codes[1, 6] == 0x77
    np.testing.assert_array_equal(y[1, 5:7], [3.0, 3.0])
    assert scale[2] == 0 and y[2, 7] == np.inf  # -inf * 0: a NaN, +max_pos
    assert np.isnan(np.delete(y[2], 7)).all()
    np.testing.assert_array_equal(codes[3], np.where(x[3] < 0, 0x80, 0))  # sign kept
    np.testing.assert_array_equal(np.abs(y[4]).max(), np.abs(x[4]).max())
    assert np.all(np.abs(y[4] - x[4]) <= np.abs(x[4]) / 16 * 1.0001)


@pytest.mark.parametrize("n", [32 * 40, 100])
def test_mx4_matches_fbgemm_definition(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-20, 21, n)).astype(np.float32)
    # group 0: max 7 = 1.75 * 2^2, "even" pre-rounding keeps 2^2 (s = 0); ties away from zero;
    # 7 -> 6. Group 1: max above 1.75 * 2^0 goes up a binade (s = -1).
    x[:8] = [1.75, 2.5, -2.5, 0.25, 0.2499, 5.0, 7.0, -0.75]
    x[8:32] = rng.uniform(-1.0, 1.0, 24)
    x[32:64] = np.float32(1.7500001) * rng.choice([-1.0, 1.0], 32)
    packed = np.asarray(jax.jit(qcomm.mx4_quantize)(x))
    groups = -(-n // 32)
    assert packed.shape == (groups, 17) and qcomm.mx4_bytes(n) == packed.size
    ref, y_ref = np_mx4(x)
    np.testing.assert_array_equal(packed, ref)
    assert packed[0, -1] == 127 and packed[1, -1] == 127 - 1
    y = np.asarray(jax.jit(lambda p: qcomm.mx4_dequantize(p, n))(jnp.asarray(packed)))
    _assert_same_bits(y, y_ref)
    np.testing.assert_array_equal(y[:8], [2.0, 3.0, -3.0, 0.5, 0.0, 6.0, 6.0, -1.0])
    # known error: at most 2^s per value, 2^s < max |group| / 3.5
    xp = np.concatenate([x, np.zeros(-n % 32, np.float32)]).reshape(-1, 32)
    tol = np.repeat(np.abs(xp).max(1) / 3.5, 32)[:n]
    assert np.all(np.abs(y.astype(np.float64) - x) <= tol)


def test_mx4_edge_cases():
    big = np.finfo(np.float32).max
    x = np.zeros((7, 32), np.float32)  # group 0: zeros
    x[1] = np.linspace(-1, 1, 32)
    x[1, 3], x[1, 4] = np.nan, -np.nan  # NaN: out of the group max, encodes as +6
    x[2] = np.linspace(-1, 1, 32)
    x[2, 5], x[2, 6] = np.inf, -np.inf  # Inf: shared exponent 125, +-6 * 2^125
    x[3] = np.float32(2.0**-131) * np.arange(-16, 16)  # subnormals: shared exponent -127
    x[4] = big * np.linspace(-1, 1, 32, dtype=np.float32)  # the largest finite values
    x[5] = np.float32(2.0**-149) * np.arange(32)  # the smallest subnormals
    x[6] = np.float32(2.0**-126) * np.linspace(-7, 7, 32)  # around the smallest normal
    packed = np.asarray(qcomm.mx4_quantize(x))[:, 0]
    ref, y_ref = np_mx4(x)
    np.testing.assert_array_equal(packed, ref)
    y = np.asarray(qcomm.mx4_dequantize(jnp.asarray(packed), x.size)).reshape(x.shape)
    _assert_same_bits(y.reshape(-1), y_ref)
    exp = packed[:, -1]
    assert exp[0] == 0 and not packed[0, :-1].any() and not y[0].any()
    assert exp[1] == 127 - 2 and y[1, 3] == y[1, 4] == 1.5  # 6 * 2^-2
    assert exp[2] == 252 and y[2, 5] == -y[2, 6] == np.float32(6 * 2.0**125)
    assert not np.delete(y[2], [5, 6]).any()
    assert exp[3] == 0 and y[3].any() and np.abs(y[3] - x[3]).max() <= 2.0**-129
    assert exp[4] == 252 and np.isfinite(y[4]).all() and np.abs(y[4]).max() == 6 * 2.0**125
    assert exp[5] == 0 and np.abs(y[5] - x[5]).max() <= 2.0**-128
    assert np.all(np.abs(y[6] - x[6]) <= 2.0**-126)  # 2^s, s = -126 (7 -> 6)


def test_fp16_matches_fbgemm_clamp_and_cast():
    x = _wide_data((4, 256), seed=5).reshape(-1)
    x[:8] = [1.0 + 2**-11, 65520.0, -7e4, np.inf, -np.inf, 2.0**-25, 3 * 2.0**-26, 2.0**-24]
    x[8] = np.nan
    w = np.asarray(qcomm.fp16_encode(x))
    assert w.dtype == np.float16
    np.testing.assert_array_equal(w.view(np.uint16)[:8], np_fp16(x).view(np.uint16)[:8])
    np.testing.assert_array_equal(w.view(np.uint16)[9:], np_fp16(x).view(np.uint16)[9:])
    assert np.isnan(w[8])
    np.testing.assert_array_equal(w[:8].astype(np.float32),
                                  [1.0, 65504.0, -65504.0, 65504.0, -65504.0, 0.0,
                                   2.0**-24, 2.0**-24])  # fmt: skip


@pytest.mark.parametrize(
    "codec,shape,nbytes",
    [  # FBGEMM calc_quantized_size: fp16 2n; fp8 row-wise n/row_dim*(ceil4(row_dim)+8);
        # mx4 n/2 + n/32 (after padding to whole groups)
        (qcomm.FP16(), (16, 64), 2 * 16 * 64),
        (qcomm.FP8Rowwise(), (16, 64), 32 * 40),
        (qcomm.FP8Rowwise(row_dim=30), (4, 15), 2 * 40),
        (qcomm.FP8Rowwise(row_dim=64, fmt="e5m2"), (16, 64), 16 * 72),
        (qcomm.MX4(), (16, 64), 16 * 64 // 2 + 16 * 64 // 32),
        (qcomm.MX4(), (3, 5), 16 + 1),
        (qcomm.MX4(group_size=16), (16, 64), 16 * 64 // 2 + 16 * 64 // 16),
    ],
)
def test_wire_bytes_per_block(codec, shape, nbytes):
    assert codec.capacity_bytes(shape, np.float32, dense=True) == nbytes
    wire, counts = jax.jit(lambda v: codec.encode(v, None, nbytes))(_data((2,) + shape, seed=1))
    assert wire.size * wire.dtype.itemsize == 2 * nbytes
    np.testing.assert_array_equal(np.asarray(counts), [nbytes, nbytes])


def test_new_baselines_bad_arguments():
    with pytest.raises(ValueError, match="row_dim"):
        qcomm.FP8Rowwise(row_dim=0)
    with pytest.raises(ValueError, match="format"):
        qcomm.FP8Rowwise(fmt="e4m3fn")
    with pytest.raises(ValueError, match="group_size"):
        qcomm.MX4(group_size=31)
    with pytest.raises(ValueError, match="row_dim=32"):
        qcomm.FP8Rowwise().capacity_bytes((3, 5), np.float32)
    with pytest.raises(ValueError, match="bytes"):
        qcomm.fp8_rowwise_dequantize(jnp.zeros((2, 39), jnp.uint8))
    with pytest.raises(ValueError, match="17"):
        qcomm.mx4_dequantize(jnp.zeros((2, 16), jnp.uint8), 32)
    with pytest.raises(ValueError, match="does not fit"):
        qcomm.mx4_dequantize(jnp.zeros((2, 17), jnp.uint8), 65)


def test_fp16_fp8_mx4_match_fbgemm_when_installed():
    torch = pytest.importorskip("torch", reason="torch with fbgemm_gpu is not installed")
    pytest.importorskip("fbgemm_gpu", reason="fbgemm_gpu is not installed")
    from fbgemm_gpu.quantize_utils import (
        fp32_to_fp16_with_clamp,
        fp32_to_hfp8_with_clamp,
        fp32_to_mx4,
        mx4_to_fp32,
    )

    x = _data((64, 64), seed=9)
    t = torch.from_numpy(x.reshape(-1))
    np.testing.assert_array_equal(
        np.asarray(qcomm.fp16_encode(x)).reshape(-1), fp32_to_fp16_with_clamp(t).numpy()
    )
    # FP8: the per-value encoding of FBGEMM's CPU op on the scaled rows (the row-wise op
    # itself is CUDA only in FBGEMM); the whole op where a GPU is there
    _, scale, _ = np_fp8_rowwise(x)
    v = torch.from_numpy(x.reshape(-1, 32) * scale[:, None])  # FBGEMM's op takes 2-D input
    got = np.asarray(qcomm.fp8_rowwise_quantize(x)).reshape(-1, 40)[:, :32]
    np.testing.assert_array_equal(got, fp32_to_hfp8_with_clamp(v, 4, 3, 15).numpy())
    if torch.cuda.is_available():
        ref = torch.ops.fbgemm.FloatToFP8RowwiseQuantized(
            torch.from_numpy(x.reshape(-1, 32)).cuda(), True
        )
        ref = ref.cpu().numpy()
        np.testing.assert_array_equal(got, ref[:, :32])
        np.testing.assert_array_equal(
            np.asarray(qcomm.fp8_rowwise_quantize(x)).reshape(-1, 40)[:, 32:36], ref[:, 32:36]
        )
    # MX4: FBGEMM's CPU path (py_quantize_mx4), finite data
    ref = fp32_to_mx4(t, 32).numpy().reshape(-1, 17)
    np.testing.assert_array_equal(np.asarray(qcomm.mx4_quantize(x.reshape(-1))), ref)
    y_ref = mx4_to_fp32(torch.from_numpy(ref.reshape(-1)), 32).numpy().reshape(-1)
    y = np.asarray(qcomm.mx4_dequantize(jnp.asarray(ref), x.size))
    np.testing.assert_array_equal(y, y_ref)


# ------------------------------------------------------------------------------- the exchange
def _smap(mesh, f, out_specs):
    return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("i"),), out_specs=out_specs))


CASES = [  # (local shape, split, concat, tiled, table_axis); each peer block % 32 == 0
    ((16, 4, 32), 0, 1, True, 1),  # DLRM [global_batch, tables, dim]
    ((16, 2, 64), 0, 1, True, 1),
    ((8, 16, 32), 1, 0, True, None),
    ((8, 4, 16), 0, 1, False, 1),  # untiled
]


CODECS = {
    "int8-rowwise": qcomm.Int8Rowwise(),
    "bf16": qcomm.BF16(),
    "fp16": qcomm.FP16(),
    "fp8-rowwise": qcomm.FP8Rowwise(),
    "mx4": qcomm.MX4(),
}
#: numpy round trips of the bit-exact baselines, and their known error given |x| and max |x|
ROUNDTRIPS = {
    "fp16": (lambda b: np_fp16(b).astype(np.float32), lambda a, m: a * 2.0**-11 + 2.0**-25),
    "fp8-rowwise": (lambda b: np_fp8_rowwise(b)[2], lambda a, m: a / 16 + 2.0**-18 * m / 0.9375),
    "mx4": (lambda b: np_mx4(b)[1], lambda a, m: np.full_like(a, m / 3.5)),
}


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
@pytest.mark.parametrize("which", list(CODECS))
def test_exchange_matches_all_to_all_of_roundtrip(mesh, shape, split, concat, tiled, table, which):
    fn = _exchange(which, tiled=tiled, table_axis=table, error_bound=0.01)
    x = _data((NDEV * shape[0],) + shape[1:], seed=7)
    y = _smap(mesh, lambda v: fn(v, "i", split, concat), P("i"))(x)
    exact = _smap(mesh, lambda v: jax.lax.all_to_all(v, "i", split, concat, tiled=tiled), P("i"))(x)
    assert y.shape == exact.shape and y.dtype == x.dtype
    if which in ROUNDTRIPS:  # bit for bit, and within the codec's known error
        rt, err = ROUNDTRIPS[which]
        ref = _reference_exchange(x, split, concat, tiled, rt)
        _assert_same_bits(np.asarray(y), ref)
        e = np.asarray(exact, np.float64)
        assert np.all(np.abs(np.asarray(y) - e) <= err(np.abs(e), np.abs(e).max()) * 1.0001)
    elif which == "bf16":
        rt = lambda b: b.astype(jnp.bfloat16).astype(np.float32)  # noqa: E731
        ref = _reference_exchange(x, split, concat, tiled, lambda b: np.asarray(rt(b)))
        np.testing.assert_array_equal(np.asarray(y), ref)
    else:
        ref = _reference_exchange(x, split, concat, tiled, lambda b: np_int8_rowwise(b, 32)[3])
        tol = (np.abs(np.asarray(exact)).max() * 2 / 255) * 1.001
        np.testing.assert_allclose(np.asarray(y), ref, rtol=0, atol=tol / 2 * 1e-3 + 1e-6)


@needs_devices
@pytest.mark.parametrize(
    "which,ratio",
    [("int8-rowwise", 3.2), ("bf16", 2.0), ("fp16", 2.0), ("fp8-rowwise", 3.2), ("mx4", 128 / 17)],
)
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
@pytest.mark.parametrize("which", list(CODECS))
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
    # An int32 operand is exchanged exactly, as by jax.lax.all_to_all (TypeError before).
    xi = np.arange(NDEV * 8 * 3 * 5, dtype=np.int32).reshape(NDEV * 8, 3, 5)
    yi = _smap(mesh, lambda v: _exchange("bf16")(v, "i", 0, 1), P("i"))(xi)
    ye = _smap(mesh, lambda v: jax.lax.all_to_all(v, "i", 0, 1, tiled=True), P("i"))(xi)
    np.testing.assert_array_equal(np.asarray(yi), np.asarray(ye))


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
