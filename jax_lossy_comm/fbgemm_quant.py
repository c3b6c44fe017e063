"""FBGEMM's quantize and dequantize functions of TorchRec's QComms precisions, in JAX.

The functional layer under :mod:`jax_lossy_comm.qcomm` (whose docstring gives each format's
definition and sources): INT8 row-wise (``FloatToFused8BitRowwiseQuantized``), FP8 row-wise
(``FloatToFP8RowwiseQuantized``), MX4 (``fp32_to_mx4``) and the FP16/BF16 casts, each bit for bit
with FBGEMM's definition, with the byte counts per row or group. Shapes: float32 values in, the
wire bytes (uint8) out, and back.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

#: TorchRec's default INT8 row length (``fbgemm_gpu.quantize_comm.ROW_DIM_DEFAULT``).
ROW_DIM_DEFAULT = 32
#: FBGEMM's epsilon in ``255 / (range + eps)`` (QuantUtils.cc, ``kEpsilon``).
INT8_EPSILON = 1e-8
#: Bytes of the two float32 (INT8: scale and bias; FP8: scale and 0.0) appended to each row.
INT8_SCALE_BIAS_BYTES = 8
#: FBGEMM's epsilon of the FP8 row-wise scale (quantize_fp8_rowwise.cu, ``kEpsilon``).
FP8_EPSILON = 1e-20
#: FP8 row-wise formats: name -> (exponent bits, exponent bias, max_pos). FBGEMM's
#: ``forward=True`` (1-4-3) and ``forward=False`` (1-5-2) settings.
FP8_FORMATS = {"e4m3": (4, 15, 0.9375), "e5m2": (5, 31, 0.875)}
#: Values per MX4 group (``fbgemm_gpu.quantize_comm.MX_GROUP_SIZE_DEFAULT``).
MX4_GROUP_SIZE = 32
#: Magnitudes of the FP4 E2M1 codes 0..7 (code 8..15: the same, negative).
MX4_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def int8_row_bytes(row_dim: int = ROW_DIM_DEFAULT) -> int:
    """Wire bytes of one INT8 or FP8 row-wise row of ``row_dim`` values: ``ceil4(row_dim) + 8``."""
    return (int(row_dim) + 3) // 4 * 4 + INT8_SCALE_BIAS_BYTES


def mx4_bytes(n: int, group_size: int = MX4_GROUP_SIZE) -> int:
    """Wire bytes of ``n`` values in MX4: ``ceil(n / group_size) * (group_size / 2 + 1)``."""
    return -(-int(n) // group_size) * (group_size // 2 + 1)


def _rows(x, row_dim: int):
    """``x[..., n]`` -> ``float32[..., n // row_dim, row_dim]``; ValueError if not divisible."""
    x = jnp.asarray(x)
    n = x.shape[-1]
    if row_dim < 1 or n % row_dim:
        raise ValueError(f"last axis {n} is not a multiple of row_dim={row_dim}")
    return x.astype(jnp.float32).reshape(x.shape[:-1] + (n // row_dim, row_dim))


def _fuse_rows(codes, first, second):
    """FBGEMM's fused row: ``uint8 codes[..., g, row_dim]``, zero padding to a multiple of 4,
    then two float32 ``[..., g, 1]`` as little-endian bytes."""
    row_dim = codes.shape[-1]
    pad = (row_dim + 3) // 4 * 4 - row_dim
    if pad:
        codes = jnp.concatenate([codes, jnp.zeros(codes.shape[:-1] + (pad,), jnp.uint8)], axis=-1)
    sb = jax.lax.bitcast_convert_type(jnp.concatenate([first, second], axis=-1), jnp.uint8)
    return jnp.concatenate([codes, sb.reshape(sb.shape[:-2] + (INT8_SCALE_BIAS_BYTES,))], axis=-1)


def _split_rows(packed, row_dim: int):
    """Inverse of :func:`_fuse_rows`: ``(codes uint8[..., g, row_dim], first, second)``."""
    w = int8_row_bytes(row_dim)
    if packed.shape[-1] != w:
        raise ValueError(f"packed rows have {packed.shape[-1]} bytes, row_dim={row_dim} needs {w}")
    sb = packed[..., w - INT8_SCALE_BIAS_BYTES :]
    sb = jax.lax.bitcast_convert_type(sb.reshape(sb.shape[:-1] + (2, 4)), jnp.float32)
    return packed[..., :row_dim], sb[..., 0:1], sb[..., 1:2]


def _divide(a, b):
    """``a / b`` correctly rounded, ``b`` broadcast to ``a``'s shape: XLA rewrites a division
    by a broadcast into a multiplication by its reciprocal (1 ulp off), the barrier stops it."""
    return a / jax.lax.optimization_barrier(jnp.broadcast_to(b, a.shape))


def _unrows(y, dtype):
    """``[..., g, row_dim]`` -> ``dtype[..., g * row_dim]``."""
    return y.reshape(y.shape[:-2] + (y.shape[-2] * y.shape[-1],)).astype(dtype)


# ------------------------------------------------------------------------------------- codecs
def int8_rowwise_quantize(x, row_dim: int = ROW_DIM_DEFAULT):
    """FBGEMM ``FloatToFused8BitRowwiseQuantized`` of ``x[..., n]`` in rows of ``row_dim``.

    Args:
      x: ``float32 | bfloat16 | float16 [..., n]``, ``n % row_dim == 0``.
      row_dim: values per row (static).

    Returns:
      ``uint8[..., n // row_dim, ceil4(row_dim) + 8]``: codes, zero padding, then scale and bias
      as little-endian float32 bytes (FBGEMM's fused row layout).

    Small rows: the codes are ``rint((x - min) * 255 / (range + 1e-8))``, FBGEMM's epsilon
    included, so a row whose range is not far above 1e-8 uses fewer than 256 codes and its
    error grows from ``range / 510`` towards ``range`` (below about 1e-10 every value decodes
    as the row minimum): FBGEMM's own behaviour, kept bit for bit. A row of float32
    subnormals (``|x| < 2^-126``): XLA:CPU flushes subnormals to zero, so its minimum, scale
    and decoded values are 0, where FBGEMM on the CPU decodes the row minimum; the error is
    below ``2^-126`` either way.

    Raises:
      ValueError: ``n`` not a multiple of ``row_dim``, or ``row_dim < 1``.
    """
    r = _rows(x, row_dim)
    lo = jnp.min(r, axis=-1, keepdims=True)
    hi = jnp.max(r, axis=-1, keepdims=True)
    rng = hi - lo
    scale = rng / jnp.float32(255.0)
    inv = jnp.float32(255.0) / (rng + jnp.float32(INT8_EPSILON))
    q = jnp.clip(jnp.rint((r - lo) * inv), 0, 255).astype(jnp.uint8)
    return _fuse_rows(q, scale, lo)


def int8_rowwise_dequantize(packed, row_dim: int = ROW_DIM_DEFAULT, dtype=jnp.float32):
    """Inverse of :func:`int8_rowwise_quantize` (FBGEMM ``Fused8BitRowwiseQuantizedToFloat``).

    Args:
      packed: ``uint8[..., g, ceil4(row_dim) + 8]``.
      row_dim: values per row (static).
      dtype: output dtype.

    Returns:
      ``dtype[..., g * row_dim]``: ``q * scale + bias`` computed in float32.

    Raises:
      ValueError: the last axis is not ``ceil4(row_dim) + 8``.
    """
    q, scale, bias = _split_rows(packed, row_dim)
    return _unrows(q.astype(jnp.float32) * scale + bias, dtype)


def fp8_format(fmt: str):
    if fmt not in FP8_FORMATS:
        raise ValueError(f"FP8 format must be one of {sorted(FP8_FORMATS)}, got {fmt!r}")
    return FP8_FORMATS[fmt]


def _f32_bits(v):
    return jax.lax.bitcast_convert_type(jnp.asarray(v, jnp.float32), jnp.uint32)


def _bits_f32(b):
    return jax.lax.bitcast_convert_type(b.astype(jnp.uint32), jnp.float32)


def hfp8_encode(v, fmt: str = "e4m3"):
    """FBGEMM ``float_to_hfp8(v, ebits, bias, max_pos)`` of float32 ``v`` (any shape) -> uint8.

    Magnitudes are clamped to ``max_pos`` (NaN -> ``+max_pos``: ``fminf``; a NaN's sign is
    dropped, as the GPU's canonical NaN of ``x * scale`` has none), rounded to nearest even on
    the ``7 - ebits`` mantissa bits (FBGEMM's bouncer addition, done here on the bits), below
    ``2^(1 - bias)`` to multiples of ``2^(1 - bias - mbits)`` (gradual underflow); the sign is
    kept otherwise (``-0`` -> ``0x80``).

    Raises:
      ValueError: ``fmt`` not in ``FP8_FORMATS``.
    """
    ebits, bias, max_pos = fp8_format(fmt)
    mbits = 7 - ebits
    bits = _f32_bits(v)
    sign = jnp.where(jnp.isnan(v), jnp.uint32(0), bits & jnp.uint32(0x80000000))
    mag = jnp.fmin(_bits_f32(bits & jnp.uint32(0x7FFFFFFF)), jnp.float32(max_pos))
    a = _f32_bits(mag)
    shift = 23 - mbits
    rounded = (a + jnp.uint32((1 << (shift - 1)) - 1) + ((a >> shift) & 1)) & jnp.uint32(
        ~((1 << shift) - 1) & 0xFFFFFFFF
    )
    normal = (((rounded - jnp.uint32((127 - bias) << 23)) << (8 - ebits)) | sign) >> 24
    k = jnp.round(mag * jnp.float32(2.0 ** (bias + mbits - 1))).astype(jnp.uint32)
    sub = k | (sign >> 24)
    return jnp.where(mag >= jnp.float32(2.0 ** (1 - bias)), normal, sub).astype(jnp.uint8)


def _hfp8_table(fmt: str) -> np.ndarray:
    """``hfp8_to_float`` of the 256 codes as float32 (computed in numpy, subnormals exact)."""
    ebits, bias, _ = fp8_format(fmt)
    c = np.arange(256, dtype=np.uint32)
    frac = ((c & 0x7F) << (24 - (8 - ebits))).view(np.float32).astype(np.float64)
    v = (frac * 2.0 ** (127 - bias)).astype(np.float32)
    return np.where(c & 0x80, -v, v).astype(np.float32)


def fp8_rowwise_quantize(x, row_dim: int = ROW_DIM_DEFAULT, fmt: str = "e4m3"):
    """FBGEMM ``FloatToFP8RowwiseQuantized`` of ``x[..., n]`` in rows of ``row_dim``.

    Args:
      x: ``float32 | bfloat16 | float16 [..., n]``, ``n % row_dim == 0``.
      row_dim: values per row (static; TorchRec's ``fp8_quantize_dim``).
      fmt: ``"e4m3"`` (FBGEMM ``forward=True``, TorchRec's forward) or ``"e5m2"``.

    Returns:
      ``uint8[..., n // row_dim, ceil4(row_dim) + 8]``: FP8 codes, zero padding, then the
      float32 scale ``max_pos / (1e-20 + max(1e-20, max |row|))`` and 0.0, little-endian.

    Raises:
      ValueError: ``n`` not a multiple of ``row_dim``, ``row_dim < 1``, or an unknown ``fmt``.
    """
    _, _, max_pos = fp8_format(fmt)
    r = _rows(x, row_dim)
    eps = jnp.float32(FP8_EPSILON)
    top = jnp.max(jnp.fmax(jnp.abs(r), eps), axis=-1, keepdims=True)  # fmaxf: NaN left out
    scale = jnp.float32(max_pos) / (eps + top)
    codes = hfp8_encode(r * scale, fmt)
    return _fuse_rows(codes, scale, jnp.zeros_like(scale))


def fp8_rowwise_dequantize(
    packed, row_dim: int = ROW_DIM_DEFAULT, fmt: str = "e4m3", dtype=jnp.float32
):
    """Inverse of :func:`fp8_rowwise_quantize` (FBGEMM ``FP8RowwiseQuantizedToFloat``).

    Args:
      packed: ``uint8[..., g, ceil4(row_dim) + 8]``.
      row_dim: values per row (static).
      fmt: the format it was encoded with.
      dtype: output dtype.

    Returns:
      ``dtype[..., g * row_dim]``: ``hfp8_to_float(code) / scale`` computed in float32.

    Raises:
      ValueError: the last axis is not ``ceil4(row_dim) + 8``, or an unknown ``fmt``.
    """
    codes, scale, _ = _split_rows(packed, row_dim)
    table = jnp.asarray(_hfp8_table(fmt))
    return _unrows(_divide(table[codes.astype(jnp.int32)], scale), dtype)


def mx4_check_group(group_size: int) -> None:
    if not isinstance(group_size, (int, np.integer)) or group_size < 2 or group_size % 2:
        raise ValueError(f"MX4 group_size must be an even int >= 2, got {group_size!r}")


def _e2m1_codes(scaled_bits):
    """FP4 E2M1 codes (0..7) of the float32 magnitudes ``scaled_bits`` (uint32 bits), as
    FBGEMM's ``_kernel_quantize_mx4``: one rounding bit, ties away from zero, beyond 6 -> 6."""
    i32 = jnp.int32
    biased_exp = (scaled_bits >> 23).astype(i32)
    trailing = (scaled_bits & jnp.uint32(0x7FFFFF)).astype(i32)
    new_exp = biased_exp - 127 + 1
    exp_diff = jnp.minimum(jnp.where(new_exp <= 0, 1 - new_exp, 0), 24)
    is_sub = biased_exp == 0
    mant = jnp.where(is_sub, trailing, trailing + (1 << 23))
    shift = jnp.where(is_sub, 23, 24) + exp_diff - 2 - 1
    mant = jax.lax.shift_right_logical(mant, shift.astype(i32))  # >= 32 -> 0
    mant = (mant + 1) >> 1
    overflow = mant > 3
    mant = jnp.where(overflow & ~is_sub, mant >> 1, mant)
    new_exp = jnp.where((new_exp <= 0) & (mant == 2), 1, new_exp)
    mant = mant & 1
    new_exp = jnp.where(overflow, new_exp + 1, new_exp)
    mant = jnp.where(new_exp > 3, 1, mant)
    return (jnp.clip(new_exp, 0, 3) << 1) | mant


def mx4_quantize(x, group_size: int = MX4_GROUP_SIZE):
    """FBGEMM ``fp32_to_mx4(x, group_size, rounding_mode=RoundingMode.even)`` of ``x[..., n]``.

    Args:
      x: ``float32 | bfloat16 | float16 [..., n]``; the last axis is zero-padded to a multiple
        of ``group_size``.
      group_size: values per shared exponent (static, even; TorchRec's ``mx4_quantize_dim``).

    Returns:
      ``uint8[..., ceil(n / group_size), group_size / 2 + 1]``: per group the packed FP4 codes
      (element ``2i`` in the low nibble of byte ``i``) and then the E8M0 exponent byte
      ``s + 127`` (module docstring).

    Raises:
      ValueError: ``group_size`` odd or < 2.
    """
    mx4_check_group(group_size)
    x = jnp.asarray(x).astype(jnp.float32)
    n = x.shape[-1]
    pad = -n % group_size
    if pad:
        x = jnp.concatenate([x, jnp.zeros(x.shape[:-1] + (pad,), jnp.float32)], axis=-1)
    r = x.reshape(x.shape[:-1] + ((n + pad) // group_size, group_size))
    bits = _f32_bits(r)
    mag = bits & jnp.uint32(0x7FFFFFFF)
    nan = mag > jnp.uint32(0x7F800000)
    gmax = jnp.max(jnp.where(nan, jnp.uint32(0), mag), axis=-1, keepdims=True)
    gmax = jnp.where(gmax == 0, jnp.uint32(0x00800000), gmax)  # FP32_MIN_NORMAL
    e = ((gmax + jnp.uint32(0x1FFFFF)) >> 23).astype(jnp.int32) - 127  # RoundingMode.even
    s = jnp.clip(e - 2, -127, 125)
    # x / 2^s on the bits (exact where the result is a normal float32; smaller results
    # encode as 0 either way): normalize subnormal inputs, subtract s from the exponent.
    field = (mag >> 23).astype(jnp.int32)
    frac = mag & jnp.uint32(0x7FFFFF)
    top = 31 - jax.lax.clz(frac.astype(jnp.int32))  # leading bit of a subnormal's mantissa
    sub_frac = jax.lax.shift_left(frac, (23 - top).astype(jnp.uint32)) & jnp.uint32(0x7FFFFF)
    field, frac = jnp.where(field == 0, top - 22, field), jnp.where(field == 0, sub_frac, frac)
    new_field = field - s
    finite = mag < jnp.uint32(0x7F800000)
    scaled = jnp.where(
        new_field >= 1,
        (jnp.clip(new_field, 1, 254).astype(jnp.uint32) << 23) | frac,
        jnp.uint32(0),
    )
    scaled = jnp.where(finite & (mag > 0), scaled, jnp.where(finite, jnp.uint32(0), mag))
    sign = jnp.where(nan, 0, (bits >> 31).astype(jnp.int32))  # NaN: +6 (a canonical NaN)
    codes = (_e2m1_codes(scaled) | (sign << 3)).astype(jnp.uint8)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return jnp.concatenate([packed, (s + 127).astype(jnp.uint8)], axis=-1)


def mx4_dequantize(packed, n: int, group_size: int = MX4_GROUP_SIZE, dtype=jnp.float32):
    """Inverse of :func:`mx4_quantize` (FBGEMM ``mx4_to_float``): ``value(code) * 2^(byte -
    127)``, built on the bits (exact also where the result is a float32 subnormal).

    Args:
      packed: ``uint8[..., g, group_size / 2 + 1]``.
      n: values to return (``<= g * group_size``; the padding is dropped), static.
      group_size: as encoded (static).
      dtype: output dtype.

    Returns:
      ``dtype[..., n]``.

    Raises:
      ValueError: a group width other than ``group_size / 2 + 1``, ``n`` outside ``[0, g *
        group_size]``, or a bad ``group_size``.
    """
    mx4_check_group(group_size)
    w = group_size // 2 + 1
    if packed.shape[-1] != w:
        raise ValueError(f"MX4 groups have {packed.shape[-1]} bytes, group_size={group_size} "
                         f"needs {w}")  # fmt: skip
    if not 0 <= n <= packed.shape[-2] * group_size:
        raise ValueError(f"n={n} does not fit {packed.shape[-2]} groups of {group_size}")
    nib = packed[..., :-1].astype(jnp.int32)
    codes = jnp.stack([nib & 0xF, nib >> 4], axis=-1).reshape(nib.shape[:-1] + (group_size,))
    c = codes & 7
    t = jnp.where(c == 1, -1, (c >> 1) - 1) + packed[..., -1:].astype(jnp.int32) - 127
    frac = jnp.where((c >= 2) & ((c & 1) == 1), 1 << 22, 0)
    normal = ((jnp.clip(t, -126, 127) + 127) << 23) | frac
    sub = jax.lax.shift_right_logical((1 << 23) | frac, jnp.clip(-126 - t, 0, 31))
    mag = jnp.where(t >= -126, normal, sub)
    mag = jnp.where(t > 127, 0x7F800000, mag)  # bytes above 252 are never written
    mag = jnp.where(c == 0, 0, mag)
    y = _bits_f32(mag.astype(jnp.uint32) | ((codes >> 3).astype(jnp.uint32) << 31))
    y = y.reshape(y.shape[:-2] + (y.shape[-2] * group_size,))
    return y[..., :n].astype(dtype)


def clamped_cast(x, dtype):
    """Clamp to the finite range of ``dtype`` (NaN kept), round to nearest even."""
    fi = jnp.finfo(dtype)
    x = jnp.asarray(x).astype(jnp.float32)
    return jnp.clip(x, float(fi.min), float(fi.max)).astype(dtype)


def bf16_encode(x):
    """FBGEMM ``fp32_to_bf16_with_clamp``: clamp to +-bfloat16 max, round to nearest even."""
    return clamped_cast(x, jnp.bfloat16)


def fp16_encode(x):
    """FBGEMM ``fp32_to_fp16_with_clamp``: clamp to +-65504, round to nearest even."""
    return clamped_cast(x, jnp.float16)
