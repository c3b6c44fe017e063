"""Bit-level helpers of the pure-jax.numpy reference codec (:mod:`jax_lossy_comm.reference`).

Floats and their bit patterns as ``xla_ffi/values.h`` handles them (half types through the
integer converters, the REL bound and the half step of half types), and bytes as
``xla_ffi/format.h`` writes them (little-endian fields, varints, the frame checksum, bit-packed
codes). Everything is ``jax.numpy``/``lax`` with static shapes. Internal to the package: the
names are public so that the reference codec can import them, not an API.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_lossy_comm import frame

U32, I32, U8 = jnp.uint32, jnp.int32, jnp.uint8
F32, BF16, F16 = int(frame.DType.FLOAT32), int(frame.DType.BFLOAT16), int(frame.DType.FLOAT16)
NAN_BITS = {F32: 0x7FC00000, BF16: 0x7FC0, F16: 0x7E00}  # store_value(u2f(0x7fc00000))
MIN_FRAME_BYTES = frame.HEADER_FIXED_BYTES + 2  # format.h parse_header: kHeaderFixed + 2
VARINT_WRITE_BYTES = 5  # put_varint of a value < 2**32
VARINT_READ_BYTES = 9  # Reader::varint fails at a 9th continuation
S = frame.Status


# ---------------------------------------------------------------- bits and floats (values.h)
def u32(x):
    """Bit pattern of float32 values: uint32, same shape."""
    return lax.bitcast_convert_type(x, U32)


def f32(u):
    """float32 values of uint32 bit patterns."""
    return lax.bitcast_convert_type(u, jnp.float32)


def dtype_bits(x: jax.Array, code: int) -> jax.Array:
    """Bit patterns of float32/bfloat16/float16 values ``x`` as uint32 (dtype ``code``)."""
    if code == F32:
        return u32(x)
    return lax.bitcast_convert_type(x, jnp.uint16).astype(U32)


def from_dtype_bits(u: jax.Array, dtype: np.dtype) -> jax.Array:
    """Values of ``dtype`` from uint32 bit patterns (the low 16 bits for 2-byte types)."""
    if dtype.itemsize == 4:
        return f32(u)
    return lax.bitcast_convert_type(u.astype(jnp.uint16), dtype)


def to_f32(h: jax.Array, code: int) -> jax.Array:
    """values.h ``load_value``: uint32 bits of a dtype ``code`` value -> float32 (exact)."""
    if code == F32:
        return f32(h)
    if code == BF16:
        return f32(h << 16)
    sign = (h & 0x8000) << 16
    exp, man = (h >> 10) & 0x1F, h & 0x3FF
    inf_nan = sign | 0x7F800000 | (man << 13)
    subnormal = sign | u32(man.astype(jnp.float32) * np.float32(2.0**-24))  # man * 2^-24, exact
    normal = sign | ((exp + 112) << 23) | (man << 13)
    return f32(jnp.where(exp == 0x1F, inf_nan, jnp.where(exp == 0, subnormal, normal)))


def round_half_even_shift(m, shift):
    """``m >> shift`` rounded to nearest even (uint32, 1 <= shift <= 31)."""
    r = m >> shift
    rem = m & ((jnp.uint32(1) << shift) - 1)
    half = jnp.uint32(1) << (shift - 1)
    return r + ((rem > half) | ((rem == half) & ((r & 1) == 1))).astype(U32)


def from_f32(f: jax.Array, code: int) -> jax.Array:
    """values.h ``f32_to_bf16`` / ``f32_to_f16`` (round to nearest even): float32 -> uint32 bits."""
    u = u32(f)
    if code == F32:
        return u
    if code == BF16:
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        return jnp.where(nan, (u >> 16) | 0x40, (u + 0x7FFF + ((u >> 16) & 1)) >> 16)
    sign, a = (u >> 16) & 0x8000, u & 0x7FFFFFFF
    nan = sign | 0x7E00 | ((a >> 13) & 0x3FF)
    shift = jnp.clip(126 - (a >> 23).astype(I32), 1, 31).astype(U32)  # 14 + (113 - e) - 1
    subnormal = sign | round_half_even_shift((a & 0x7FFFFF) | 0x800000, shift)
    normal = sign | round_half_even_shift(a - 0x38000000, jnp.uint32(13))  # rebias by -112
    return jnp.where(
        a > 0x7F800000,
        nan,
        jnp.where(
            a >= 0x477FF000,
            sign | 0x7C00,  # rounds to Inf
            jnp.where(
                a < 0x33000000,
                sign,  # below 2^-25: 0
                jnp.where(a < 0x38800000, subnormal, normal),
            ),
        ),
    )


def round_to_dtype(f: jax.Array, code: int) -> jax.Array:
    """values.h ``round_to_dtype``: float32 rounded to dtype ``code`` and back to float32."""
    return f if code == F32 else to_f32(from_f32(f, code), code)


def product(a, b):
    """``a * b`` rounded to float32, kept out of fused multiply-adds.

    XLA:CPU/GPU (LLVM) contract ``a * b + c`` into an FMA, the C++ codec (``-ffp-contract=off``) does
    not. OR-ing the product's bit pattern with its own NaN flag changes no number (a NaN stays a
    NaN) but the add no longer sees a multiply.
    """
    p = a * b
    return f32(u32(p) | jnp.isnan(p).astype(U32))


def dequantize(base, q, step, code: int):
    """values.h: ``round_to_dtype(base + (float)q * step)``, all float32, q float32 codes."""
    return round_to_dtype(base + product(q, step), code)


def prev_toward_zero(v, step):
    """quant.h ``prev_toward_zero``: the float32 below ``v >= 0`` where ``step``."""
    down = step & (v > 0) & jnp.isfinite(v)
    return jnp.where(down, f32(u32(v) - jnp.uint32(1)), v)


def rel_bound(eb, vmin, vmax):
    """quant.h ``rel_bound``: ``eb * (vmax - vmin)`` never above the exact product, float32.

    The range rounded toward zero (TwoSum), then the product (Dekker's split: every partial
    product is exact, so a fused multiply-add cannot change them).
    """
    r = vmax - vmin
    bb = r - vmax
    r = prev_toward_zero(r, ((vmax - (r - bb)) + ((-vmin) - bb)) < 0)
    p = product(eb, r)
    c = jnp.float32(4097)

    def split(a):
        t = product(c, a)
        hi = t - (t - a)
        return hi, a - hi

    ah, al = split(eb)
    bh, bl = split(r)
    ep = ((product(ah, bh) - p) + product(ah, bl) + product(al, bh)) + product(al, bl)
    in_range = (
        (p >= jnp.float32(2.0**-60)) & (r <= jnp.float32(2.0**100)) & (eb <= jnp.float32(2.0**100))
    )
    return prev_toward_zero(p, ~(ep >= 0) | ~in_range)


def exponent_of(f):
    """values.h ``exponent_of``: the unbiased float32 exponent, int32."""
    return ((u32(f) >> 23) & 0xFF).astype(I32) - 127


def half_step(eb_abs, vmin, vmax, code: int):
    """quant.h ``half_step``: the stored half step ``h <= eb_abs`` (``eb_abs`` for float32).

    ``(eb_abs - U/2) (1 - 2^-8)`` with ``U`` the spacing of the dtype's values in the binade of
    ``max(|vmin|, |vmax|) + eb_abs`` when ``U <= 3/4 eb_abs``, never below
    ``frame.HALF_STEP_FLOOR * eb_abs`` (either step leaves no outlier; the proof is at quant.h).
    """
    if code == F32:
        return eb_abs
    mbits, emin = (7, -126) if code == BF16 else (10, -14)
    k = exponent_of(jnp.maximum(jnp.abs(vmin), jnp.abs(vmax)) + eb_abs)
    e = jnp.maximum(jnp.maximum(k, emin) - mbits, -126)
    u = f32(((e + 127) << 23).astype(U32))
    h = product(eb_abs - product(jnp.float32(0.5), u), jnp.float32(1 - 1 / 256))
    lo = product(eb_abs, jnp.float32(frame.HALF_STEP_FLOOR))
    h = jnp.where((u <= product(jnp.float32(0.75), eb_abs)) & (h > lo), h, lo)
    ok = (eb_abs > 0) & jnp.isfinite(eb_abs)
    return jnp.where(ok, h, eb_abs)


def within_bound(x, y, eb):
    """values.h ``within_bound``: ``|x - y| <= eb`` decided exactly (TwoSum), float32 -> bool."""
    s = x - y
    bb = s - x
    err = (x - (s - bb)) + ((-y) - bb)
    a = jnp.abs(s)
    return (a < eb) | ((a == eb) & jnp.where(s > 0, err <= 0, err >= 0))


# ---------------------------------------------------------------- bytes, varints, checksum
def le_bytes(u: jax.Array, k: int) -> jax.Array:
    """Low ``k`` little-endian bytes of uint32 ``u[...]``: uint8[..., k]."""
    return jnp.stack([(u >> (8 * j)) & 0xFF for j in range(k)], axis=-1).astype(U8)


def varint_size(v):
    """format.h ``varint_size`` of uint32 ``v`` (traced): int32 in 1..5."""
    return 1 + sum((v >= (1 << (7 * k))).astype(I32) for k in range(1, VARINT_WRITE_BYTES))


def varint(v):
    """format.h ``put_varint`` of uint32 ``v``: (uint8[5] bytes, int32 length)."""
    v = jnp.asarray(v, U32)
    size = varint_size(v)
    k = jnp.arange(VARINT_WRITE_BYTES, dtype=I32)
    more = jnp.where(k < size - 1, 0x80, 0).astype(U32)
    return ((v >> (7 * k).astype(U32)) & 0x7F | more).astype(U8), size


def fmix32(h):
    """MurmurHash3 finalizer on uint32 (format.h ``fmix32``)."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def checksum(buf: jax.Array, nbytes) -> jax.Array:
    """checksum.h ``lc_checksum`` of ``buf[:nbytes]`` (uint8[m], traced nbytes <= m): uint32.

    Bytes 4..7 (the checksum field) and bytes past ``nbytes`` read as zero; only the first
    ``ceil(nbytes / 4)`` words are summed.
    """
    words = -(-buf.shape[0] // 4)
    pos = jnp.arange(4 * words, dtype=I32)
    b = jnp.pad(buf, (0, 4 * words - buf.shape[0])).astype(U32)
    b = jnp.where((pos < nbytes) & ((pos < 4) | (pos >= 8)), b, 0).reshape(words, 4)
    w = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)
    i = jnp.arange(words, dtype=U32)
    h = jnp.where(pos[::4] < nbytes, fmix32(w ^ (i * jnp.uint32(0x9E3779B9))), 0)
    seed = fmix32(jnp.asarray(nbytes).astype(U32) * jnp.uint32(0x27D4EB2F) + jnp.uint32(0x165667B1))
    return seed + jnp.sum(h, dtype=U32)


def packed_bytes(count: int, bits):
    """format.h ``packed_bytes``: bytes of ``count`` codes of ``bits`` bits (int32, traced)."""
    return (count * bits + 7) // 8


def pack(codes: jax.Array, bits) -> jax.Array:
    """bitio.h ``write_packed``: uint32 codes[n] of ``bits`` (traced, 0..24) bits, LSB first.

    Returns uint8[3 n], the section in its first ``packed_bytes(n, bits)`` bytes.
    """
    n = codes.shape[0]
    bitpos = jnp.arange(n, dtype=I32) * bits
    word = codes << (bitpos & 7).astype(U32)  # < 2**31: spans at most 4 bytes
    k = jnp.arange(4, dtype=I32)
    parts = (word[:, None] >> (8 * k).astype(U32)) & 0xFF
    out = jnp.zeros(3 * n + 4, U32).at[(bitpos >> 3)[:, None] + k].add(parts)  # disjoint bits
    return out[: 3 * n].astype(U8)


def assemble(pieces, capacity: int):
    """Concatenates byte pieces of traced lengths into uint8[capacity], zero past the end.

    Args:
      pieces: list of ``(content uint8[m_k], length)`` with traced ``0 <= length <= m_k``.
      capacity: static output size; bytes past it are dropped.

    Returns:
      ``(buffer uint8[capacity], total int32)``, total the sum of the lengths.
    """
    lengths = jnp.stack([jnp.asarray(length, I32) for _, length in pieces])
    starts = jnp.cumsum(lengths, dtype=I32) - lengths
    offsets = jnp.asarray(np.cumsum([0] + [c.shape[0] for c, _ in pieces[:-1]]), I32)
    src = jnp.concatenate([c for c, _ in pieces] + [jnp.zeros(1, U8)])
    p = jnp.arange(capacity, dtype=I32)
    k = jnp.sum(p[:, None] >= starts[None, :], axis=1, dtype=I32) - 1
    idx = jnp.clip(offsets[k] + p - starts[k], 0, src.shape[0] - 1)
    total = jnp.sum(lengths, dtype=I32)
    return jnp.where(p < total, src[idx], 0).astype(U8), total
