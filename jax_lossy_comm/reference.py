"""Pure-jax.numpy reference codec: the raw and fixed-rate frames of ``xla_ffi/format.h``.

The test oracle of the compiled codec and the path :mod:`jax_lossy_comm.codec` takes when the
extension is absent (or on a backend without handlers). Everything is ``jax.numpy``/``lax``
with static shapes: it runs under ``jit`` and ``vmap``; the frame capacity is static, while the
code width, the outlier count and every section offset are traced per chunk. One chunk is coded
by a single-chunk function vmapped over the flattened leading dimensions.

Bit-identical to the C++ codec (``encode_chunk`` / ``decode_frame`` in ``xla_ffi/encoder.h`` / ``decoder.h``):

* ``codec="raw"`` and ``codec="fixed"``: the same frame bytes and byte counts, capacity handling
  included (a frame over capacity falls back to raw when raw fits, else ``nbytes = -needed``
  and an all-zero frame).
* Decoding raw and fixed-rate frames: the same values (NaN/Inf bit-exact) and, on a bad frame,
  the same status, with every output value NaN.

Differences, by design:

* ``codec="auto"`` picks the smaller of the raw and the fixed-rate frame; the compiled codec
  also tries its dictionary (dedup) and Huffman forms, so its frames can be smaller.
  ``codec="dedup"`` and ``"entropy"`` write the fixed-rate form. Both give valid frames that the
  C++ decoder reads.
* The decoder does not read dictionary (dedup) or Huffman sections: a frame with those flags
  gets status 10 (:attr:`jax_lossy_comm.frame.Status.UNSUPPORTED_FORM`) and NaN values. Every check that
  ``decode_frame`` makes before those sections still gives the C++ status.
* Subnormal (denormal) float32 and bfloat16 inputs are outside the bit-identity guarantee:
  XLA:CPU runs with flush-to-zero and denormals-are-zero, and so does the C++ handler called from
  XLA's threads, but which bit pattern a min/max or select returns for a flushed operand depends
  on the instructions each compiler chose (and the CUDA build keeps subnormals). Subnormal
  *intermediates* of normal inputs (a tiny ``eb_abs`` or step) are flushed alike on both sides.
* Offsets are int32: a chunk needs ``24 * rows * dim < 2**31``.

Floating point: the C++ codec is built with ``-ffp-contract=off``, but XLA:CPU and XLA:GPU contract
``a * b + c`` into one fused multiply-add (one rounding instead of two), and neither
``reduce_precision`` nor ``optimization_barrier`` stops it. :func:`_product` hides the multiply
from the contraction. Rounding to bfloat16/float16 uses the integer converters of values.h, not
XLA's ``convert``.

References:
  S. Feng et al., "Accelerating Communication in Deep Learning Recommendation Model Training
  with Dual-Level Adaptive Lossy Compression", SC24, arXiv 2407.04272, sec. 4.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_lossy_comm import frame

_U32, _I32, _U8 = jnp.uint32, jnp.int32, jnp.uint8
_F32, _BF16, _F16 = int(frame.DType.FLOAT32), int(frame.DType.BFLOAT16), int(frame.DType.FLOAT16)
_NAN_BITS = {_F32: 0x7FC00000, _BF16: 0x7FC0, _F16: 0x7E00}  # store_value(u2f(0x7fc00000))
_MIN_FRAME_BYTES = frame.HEADER_FIXED_BYTES + 2  # format.h parse_header: kHeaderFixed + 2
_VARINT_WRITE_BYTES = 5  # put_varint of a value < 2**32
_VARINT_READ_BYTES = 9  # Reader::varint fails at a 9th continuation
_S = frame.Status


# ---------------------------------------------------------------- bits and floats (values.h)
def _u32(x):
    """Bit pattern of float32 values: uint32, same shape."""
    return lax.bitcast_convert_type(x, _U32)


def _f32(u):
    """float32 values of uint32 bit patterns."""
    return lax.bitcast_convert_type(u, jnp.float32)


def _dtype_bits(x: jax.Array, code: int) -> jax.Array:
    """Bit patterns of float32/bfloat16/float16 values ``x`` as uint32 (dtype ``code``)."""
    if code == _F32:
        return _u32(x)
    return lax.bitcast_convert_type(x, jnp.uint16).astype(_U32)


def _from_dtype_bits(u: jax.Array, dtype: np.dtype) -> jax.Array:
    """Values of ``dtype`` from uint32 bit patterns (the low 16 bits for 2-byte types)."""
    if dtype.itemsize == 4:
        return _f32(u)
    return lax.bitcast_convert_type(u.astype(jnp.uint16), dtype)


def _to_f32(h: jax.Array, code: int) -> jax.Array:
    """values.h ``load_value``: uint32 bits of a dtype ``code`` value -> float32 (exact)."""
    if code == _F32:
        return _f32(h)
    if code == _BF16:
        return _f32(h << 16)
    sign = (h & 0x8000) << 16
    exp, man = (h >> 10) & 0x1F, h & 0x3FF
    inf_nan = sign | 0x7F800000 | (man << 13)
    subnormal = sign | _u32(man.astype(jnp.float32) * np.float32(2.0**-24))  # man * 2^-24, exact
    normal = sign | ((exp + 112) << 23) | (man << 13)
    return _f32(jnp.where(exp == 0x1F, inf_nan, jnp.where(exp == 0, subnormal, normal)))


def _round_half_even_shift(m, shift):
    """``m >> shift`` rounded to nearest even (uint32, 1 <= shift <= 31)."""
    r = m >> shift
    rem = m & ((jnp.uint32(1) << shift) - 1)
    half = jnp.uint32(1) << (shift - 1)
    return r + ((rem > half) | ((rem == half) & ((r & 1) == 1))).astype(_U32)


def _from_f32(f: jax.Array, code: int) -> jax.Array:
    """values.h ``f32_to_bf16`` / ``f32_to_f16`` (round to nearest even): float32 -> uint32 bits."""
    u = _u32(f)
    if code == _F32:
        return u
    if code == _BF16:
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        return jnp.where(nan, (u >> 16) | 0x40, (u + 0x7FFF + ((u >> 16) & 1)) >> 16)
    sign, a = (u >> 16) & 0x8000, u & 0x7FFFFFFF
    nan = sign | 0x7E00 | ((a >> 13) & 0x3FF)
    shift = jnp.clip(126 - (a >> 23).astype(_I32), 1, 31).astype(_U32)  # 14 + (113 - e) - 1
    subnormal = sign | _round_half_even_shift((a & 0x7FFFFF) | 0x800000, shift)
    normal = sign | _round_half_even_shift(a - 0x38000000, jnp.uint32(13))  # rebias by -112
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


def _round_to_dtype(f: jax.Array, code: int) -> jax.Array:
    """values.h ``round_to_dtype``: float32 rounded to dtype ``code`` and back to float32."""
    return f if code == _F32 else _to_f32(_from_f32(f, code), code)


def _product(a, b):
    """``a * b`` rounded to float32, kept out of fused multiply-adds.

    XLA:CPU/GPU (LLVM) contract ``a * b + c`` into an FMA, the C++ codec (``-ffp-contract=off``) does
    not. OR-ing the product's bit pattern with its own NaN flag changes no number (a NaN stays a
    NaN) but the add no longer sees a multiply.
    """
    p = a * b
    return _f32(_u32(p) | jnp.isnan(p).astype(_U32))


def _dequantize(base, q, step, code: int):
    """values.h: ``round_to_dtype(base + (float)q * step)``, all float32, q float32 codes."""
    return _round_to_dtype(base + _product(q, step), code)


def _prev_toward_zero(v, step):
    """quant.h ``prev_toward_zero``: the float32 below ``v >= 0`` where ``step``."""
    down = step & (v > 0) & jnp.isfinite(v)
    return jnp.where(down, _f32(_u32(v) - jnp.uint32(1)), v)


def _rel_bound(eb, vmin, vmax):
    """quant.h ``rel_bound``: ``eb * (vmax - vmin)`` never above the exact product, float32.

    The range rounded toward zero (TwoSum), then the product (Dekker's split: every partial
    product is exact, so a fused multiply-add cannot change them).
    """
    r = vmax - vmin
    bb = r - vmax
    r = _prev_toward_zero(r, ((vmax - (r - bb)) + ((-vmin) - bb)) < 0)
    p = _product(eb, r)
    c = jnp.float32(4097)

    def split(a):
        t = _product(c, a)
        hi = t - (t - a)
        return hi, a - hi

    ah, al = split(eb)
    bh, bl = split(r)
    ep = ((_product(ah, bh) - p) + _product(ah, bl) + _product(al, bh)) + _product(al, bl)
    in_range = (
        (p >= jnp.float32(2.0**-60)) & (r <= jnp.float32(2.0**100)) & (eb <= jnp.float32(2.0**100))
    )
    return _prev_toward_zero(p, ~(ep >= 0) | ~in_range)


def _exponent_of(f):
    """values.h ``exponent_of``: the unbiased float32 exponent, int32."""
    return ((_u32(f) >> 23) & 0xFF).astype(_I32) - 127


def _half_step(eb_abs, vmin, vmax, code: int):
    """quant.h ``half_step``: the stored half step ``h <= eb_abs`` (``eb_abs`` for float32).

    ``(eb_abs - U/2) (1 - 2^-8)`` with ``U`` the spacing of the dtype's values in the binade of
    ``max(|vmin|, |vmax|) + eb_abs`` when ``U <= 3/4 eb_abs``, never below
    ``frame.HALF_STEP_FLOOR * eb_abs`` (either step leaves no outlier; the proof is at quant.h).
    """
    if code == _F32:
        return eb_abs
    mbits, emin = (7, -126) if code == _BF16 else (10, -14)
    k = _exponent_of(jnp.maximum(jnp.abs(vmin), jnp.abs(vmax)) + eb_abs)
    e = jnp.maximum(jnp.maximum(k, emin) - mbits, -126)
    u = _f32(((e + 127) << 23).astype(_U32))
    h = _product(eb_abs - _product(jnp.float32(0.5), u), jnp.float32(1 - 1 / 256))
    lo = _product(eb_abs, jnp.float32(frame.HALF_STEP_FLOOR))
    h = jnp.where((u <= _product(jnp.float32(0.75), eb_abs)) & (h > lo), h, lo)
    ok = (eb_abs > 0) & jnp.isfinite(eb_abs)
    return jnp.where(ok, h, eb_abs)


def _within_bound(x, y, eb):
    """values.h ``within_bound``: ``|x - y| <= eb`` decided exactly (TwoSum), float32 -> bool."""
    s = x - y
    bb = s - x
    err = (x - (s - bb)) + ((-y) - bb)
    a = jnp.abs(s)
    return (a < eb) | ((a == eb) & jnp.where(s > 0, err <= 0, err >= 0))


# ---------------------------------------------------------------- bytes, varints, checksum
def _le_bytes(u: jax.Array, k: int) -> jax.Array:
    """Low ``k`` little-endian bytes of uint32 ``u[...]``: uint8[..., k]."""
    return jnp.stack([(u >> (8 * j)) & 0xFF for j in range(k)], axis=-1).astype(_U8)


def _varint_size(v):
    """format.h ``varint_size`` of uint32 ``v`` (traced): int32 in 1..5."""
    return 1 + sum((v >= (1 << (7 * k))).astype(_I32) for k in range(1, _VARINT_WRITE_BYTES))


def _varint(v):
    """format.h ``put_varint`` of uint32 ``v``: (uint8[5] bytes, int32 length)."""
    v = jnp.asarray(v, _U32)
    size = _varint_size(v)
    k = jnp.arange(_VARINT_WRITE_BYTES, dtype=_I32)
    more = jnp.where(k < size - 1, 0x80, 0).astype(_U32)
    return ((v >> (7 * k).astype(_U32)) & 0x7F | more).astype(_U8), size


def _fmix32(h):
    """MurmurHash3 finalizer on uint32 (format.h ``fmix32``)."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def _checksum(buf: jax.Array, nbytes) -> jax.Array:
    """checksum.h ``lc_checksum`` of ``buf[:nbytes]`` (uint8[m], traced nbytes <= m): uint32.

    Bytes 4..7 (the checksum field) and bytes past ``nbytes`` read as zero; only the first
    ``ceil(nbytes / 4)`` words are summed.
    """
    words = -(-buf.shape[0] // 4)
    pos = jnp.arange(4 * words, dtype=_I32)
    b = jnp.pad(buf, (0, 4 * words - buf.shape[0])).astype(_U32)
    b = jnp.where((pos < nbytes) & ((pos < 4) | (pos >= 8)), b, 0).reshape(words, 4)
    w = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)
    i = jnp.arange(words, dtype=_U32)
    h = jnp.where(pos[::4] < nbytes, _fmix32(w ^ (i * jnp.uint32(0x9E3779B9))), 0)
    seed = _fmix32(
        jnp.asarray(nbytes).astype(_U32) * jnp.uint32(0x27D4EB2F) + jnp.uint32(0x165667B1)
    )
    return seed + jnp.sum(h, dtype=_U32)


def _packed_bytes(count: int, bits):
    """format.h ``packed_bytes``: bytes of ``count`` codes of ``bits`` bits (int32, traced)."""
    return (count * bits + 7) // 8


def _pack(codes: jax.Array, bits) -> jax.Array:
    """bitio.h ``write_packed``: uint32 codes[n] of ``bits`` (traced, 0..24) bits, LSB first.

    Returns uint8[3 n], the section in its first ``_packed_bytes(n, bits)`` bytes.
    """
    n = codes.shape[0]
    bitpos = jnp.arange(n, dtype=_I32) * bits
    word = codes << (bitpos & 7).astype(_U32)  # < 2**31: spans at most 4 bytes
    k = jnp.arange(4, dtype=_I32)
    parts = (word[:, None] >> (8 * k).astype(_U32)) & 0xFF
    out = jnp.zeros(3 * n + 4, _U32).at[(bitpos >> 3)[:, None] + k].add(parts)  # disjoint bits
    return out[: 3 * n].astype(_U8)


def _assemble(pieces, capacity: int):
    """Concatenates byte pieces of traced lengths into uint8[capacity], zero past the end.

    Args:
      pieces: list of ``(content uint8[m_k], length)`` with traced ``0 <= length <= m_k``.
      capacity: static output size; bytes past it are dropped.

    Returns:
      ``(buffer uint8[capacity], total int32)``, total the sum of the lengths.
    """
    lengths = jnp.stack([jnp.asarray(length, _I32) for _, length in pieces])
    starts = jnp.cumsum(lengths, dtype=_I32) - lengths
    offsets = jnp.asarray(np.cumsum([0] + [c.shape[0] for c, _ in pieces[:-1]]), _I32)
    src = jnp.concatenate([c for c, _ in pieces] + [jnp.zeros(1, _U8)])
    p = jnp.arange(capacity, dtype=_I32)
    k = jnp.sum(p[:, None] >= starts[None, :], axis=1, dtype=_I32) - 1
    idx = jnp.clip(offsets[k] + p - starts[k], 0, src.shape[0] - 1)
    total = jnp.sum(lengths, dtype=_I32)
    return jnp.where(p < total, src[idx], 0).astype(_U8), total


# ---------------------------------------------------------------- encoder
def _value_range(v: jax.Array, finite: jax.Array):
    """encoder.h ``encode_chunk`` step 1: (vmin, vmax) float32 over the finite values of v[n].

    Both 0 when there is no finite value; a zero is +0.0 whatever the signs in the chunk.
    """
    if v.shape[0] == 0:
        return jnp.float32(0), jnp.float32(0)
    lo = jnp.min(jnp.where(finite, v, jnp.inf))
    hi = jnp.max(jnp.where(finite, v, -jnp.inf))
    any_finite = jnp.any(finite)
    # ``x + 0.0f`` in quant.h ``plan_quant``; XLA may fold an add of zero, so the sign is cleared explicitly.
    return tuple(jnp.where(any_finite & (m != 0), m, jnp.float32(0)) for m in (lo, hi))


def _quantize(v, finite, vmin, inv, step, maxcode, eb_abs, code: int):
    """encoder.h ``quantize_verify`` and the neighbour retry: codes uint32[n], outliers bool[n].

    ``q = rint((v - vmin) * inv)`` clamped to ``[0, maxcode]`` (NaN to 0, non-finite v to 0).
    A value whose reconstruction ``vmin + q * step``, rounded to the input dtype, misses the
    bound tries the neighbouring code (v at a rounding midpoint), else it is an outlier and
    keeps q. A constant chunk has ``inv = maxcode = 0``.
    """
    qf = lax.round((v - vmin) * inv, lax.RoundingMethod.TO_NEAREST_EVEN)  # rint_nonneg
    qf = jnp.where(qf >= 0, qf, jnp.float32(0))
    qf = jnp.where(qf <= maxcode, qf, maxcode)
    qf = jnp.where(finite, qf, jnp.float32(0))
    rec = _dequantize(vmin, qf, step, code)
    ok = finite & _within_bound(v, rec, eb_abs)
    q2 = qf + jnp.where(v > rec, jnp.float32(1), jnp.float32(-1))
    ok2 = (
        finite
        & ~ok
        & (q2 >= 0)
        & (q2 <= maxcode)
        & _within_bound(v, _dequantize(vmin, q2, step, code), eb_abs)
    )
    return jnp.where(ok2, q2, qf).astype(_U32), ~(ok | ok2)


def _header_pieces(form, flags, bits, rows: int, dim: int):
    """Magic, version|form, flags, bits, zero checksum, varint rows and dim (format.h ``write_header``)."""
    fixed = jnp.stack(
        [jnp.uint32(frame.MAGIC), (frame.VERSION << 4) | form, flags, bits, *[jnp.uint32(0)] * 4]
    ).astype(_U8)
    return [(fixed, frame.HEADER_FIXED_BYTES), _varint(rows), _varint(dim)]


def _encode_chunk(x: jax.Array, eb, mode, codec, *, capacity: int):
    """encoder.h ``encode_chunk`` for one chunk (raw and fixed-rate forms only).

    Args:
      x: ``float32 | bfloat16 | float16 [rows, dim]``.
      eb: float32 scalar, relative (mode rel) or absolute (mode abs) error bound.
      mode, codec: int32 scalars, ids in :data:`frame.MODES` and :data:`frame.CODECS` (traced,
        so one compiled program serves every mode and codec).
      capacity: static bytes of the frame.

    Returns:
      ``(frame uint8[capacity], nbytes int32)``.
    """
    rows, dim = x.shape
    n = rows * dim
    dt = np.dtype(x.dtype)
    code, isz, pb = frame.DTYPES[dt], dt.itemsize, frame.pos_bytes(n)
    xbits = _dtype_bits(x.reshape(n), code)
    v = _to_f32(xbits, code)
    finite = jnp.isfinite(v)

    # 1. Range over finite values. 2. Feasibility. 3. Quantize and verify.
    vmin, vmax = _value_range(v, finite)
    value_range = vmax - vmin
    eb_abs = jnp.where(mode == frame.MODES["rel"], _rel_bound(eb, vmin, vmax), eb)
    half = _half_step(eb_abs, vmin, vmax, code)
    step = half * jnp.float32(2)
    inv = jnp.float32(1) / step
    mc = lax.round(value_range * inv, lax.RoundingMethod.TO_NEAREST_EVEN)
    if code != _F32:  # quant.h: a top x_hat rounding to Inf shrinks the step to range / maxcode
        shrink = (mc > 0) & ~jnp.isfinite(_dequantize(vmin, mc, step, code))
        half = jnp.where(shrink, _product(value_range / mc, jnp.float32(0.5)), half)
        step = half * jnp.float32(2)
        inv = jnp.float32(1) / step
    constant = value_range == 0
    spans = jnp.isfinite(step) & (step > 0) & jnp.isfinite(inv) & (mc < 2.0**frame.MAX_BITS)
    quant_ok = (
        (codec != frame.CODECS["raw"])
        & jnp.bool_(n > 0)
        & (eb >= 0)
        & jnp.isfinite(eb)
        & (constant | spans)
        & jnp.isfinite(eb_abs)
    )
    maxcode = jnp.where(quant_ok & ~constant, mc, jnp.float32(0))
    inv = jnp.where(constant, jnp.float32(0), inv)
    codes, outlier = _quantize(v, finite, vmin, inv, step, maxcode, eb_abs, code)
    outlier = outlier & quant_ok
    n_out = jnp.sum(outlier, dtype=_I32)
    bits = (32 - lax.clz(maxcode.astype(_U32))).astype(_I32)

    # 4. Sizes and the form (raw when the chosen form does not fit but raw does).
    raw_bytes = frame.raw_frame_bytes(rows, dim, dt)
    packed = _packed_bytes(n, bits)
    fixed_bytes = (
        frame.header_bytes(rows, dim)
        + 8
        + _varint_size(n_out.astype(_U32))
        + packed
        + n_out * (pb + isz)
    )
    quant = quant_ok & ((codec != frame.CODECS["auto"]) | (fixed_bytes < raw_bytes))
    quant = quant & ((fixed_bytes <= capacity) | (raw_bytes >= fixed_bytes))
    best = jnp.where(quant, fixed_bytes, raw_bytes)

    # 5. Write it (each piece has length 0 when its form is not chosen).
    form = quant.astype(_U32)
    abs_flag = jnp.where(mode == int(frame.Mode.ABS), frame.FLAG_ABS, 0)
    flags = jnp.where(quant, code | abs_flag, code).astype(_U32)
    rank = jnp.cumsum(outlier, dtype=_I32) - 1  # outlier positions in increasing order
    pos = (
        jnp.zeros(n, _U32)
        .at[jnp.where(outlier, rank, n)]
        .set(jnp.arange(n, dtype=_U32), mode="drop", unique_indices=True)
    )
    xbytes = _le_bytes(xbits, isz)

    def when(q, length):
        return jnp.where(q, length, 0)

    n_out_bytes, n_out_len = _varint(n_out.astype(_U32))
    pieces = _header_pieces(form, flags, when(quant, bits).astype(_U32), rows, dim) + [
        (xbytes.reshape(-1), when(~quant, n * isz)),
        (_le_bytes(_u32(jnp.stack([half, vmin])), 4).reshape(-1), when(quant, 8)),
        (n_out_bytes, when(quant, n_out_len)),
        (_pack(codes, bits), when(quant, packed)),
        (_le_bytes(pos, pb).reshape(-1), when(quant, n_out * pb)),
        (xbytes[pos].reshape(-1), when(quant, n_out * isz)),
    ]
    buf, used = _assemble(pieces, capacity)
    buf = buf.at[4:8].set(_le_bytes(_checksum(buf, used), 4))
    over = best > capacity
    return jnp.where(over, jnp.uint8(0), buf), jnp.where(over, -best, used).astype(_I32)


# ---------------------------------------------------------------- decoder
class _Bytes:
    """Bounds-safe byte reads from a frame ``f[:nbytes]``; bytes past nbytes read as zero."""

    def __init__(self, f: jax.Array, nbytes):
        cap = f.shape[0]
        masked = jnp.where(jnp.arange(cap, dtype=_I32) < nbytes, f, 0).astype(_U32)
        self.buf = jnp.concatenate([masked, jnp.zeros(1, _U32)])

    def __call__(self, idx):
        """uint32 byte values at int32 positions ``idx`` (any shape)."""
        return self.buf[jnp.clip(idx, 0, self.buf.shape[0] - 1)]

    def word(self, idx, k: int = 4):
        """Little-endian ``k``-byte unsigned integers starting at ``idx``: uint32."""
        j = jnp.arange(k, dtype=_I32)
        b = self(jnp.asarray(idx, _I32)[..., None] + j)
        return jnp.sum(b << (8 * j).astype(_U32), axis=-1, dtype=_U32)  # disjoint bytes


def _read_varint(get: _Bytes, p, end, vmax: int):
    """format.h ``Reader::varint(max)`` at ``p`` in ``[p, end)``: (value uint32, next p, ok).

    Fails (ok False) past ``end``, at a 9th continuation byte, or when the value exceeds
    ``vmax``; the value is correct when ok.
    """
    k = jnp.arange(_VARINT_READ_BYTES, dtype=_I32)
    b = get(p + k)
    term = (b & 0x80) == 0
    t = jnp.argmax(term).astype(_I32)
    inside = k <= t
    payload = b & 0x7F
    low = jnp.sum(
        jnp.where(inside & (k < 5), payload << (7 * jnp.minimum(k, 4)).astype(_U32), 0), dtype=_U32
    )
    high_mask = jnp.asarray([0, 0, 0, 0, 0x70] + [0x7F] * 4, _U32)  # bits at 2^32 and up
    high = jnp.any(inside & ((payload & high_mask) != 0))
    ok = jnp.any(term) & jnp.all(~inside | (p + k < end)) & ~high & (low <= vmax)
    return low, p + t + 1, ok


class _Reader:
    """format.h ``Reader`` as traced state: position ``p`` and ``ok`` (sticky once False)."""

    def __init__(self, get: _Bytes, p, end):
        self.get, self.p, self.end, self.ok = get, jnp.asarray(p, _I32), end, jnp.bool_(True)

    def take(self, size):
        """Skips ``size`` bytes (int32, traced); returns their start."""
        start = self.p
        self.ok = self.ok & (self.end - start >= size)
        self.p = start + size
        return start

    def varint(self, vmax: int, present=True):
        """Reads a varint <= vmax (uint32) if ``present`` (traced bool), else reads nothing."""
        present = jnp.asarray(present, jnp.bool_)
        v, p, ok = _read_varint(self.get, self.p, self.end, vmax)
        self.p = jnp.where(present, p, self.p)
        self.ok = self.ok & (ok | ~present)
        return v

    def u32(self):
        return self.get.word(self.take(4))


def _first_error(checks):
    """Status of the first failing check of ``[(failed bool, status), ...]`` in order, else 0."""
    status = jnp.int32(0)
    for failed, code in reversed(checks):
        status = jnp.where(failed, jnp.int32(int(code)), status)
    return status


def _header_checks(get: _Bytes, f, nbytes, r: _Reader, rows: int, dim: int, code: int):
    """format.h ``parse_header`` and the shape check: [(failed, status), ...] in order."""
    b1, flags, bits = get(1), get(2), get(3)
    form = b1 & 15
    h_rows, h_dim = r.varint(0x7FFFFFFF), r.varint(0x7FFFFFFF)
    return [
        (nbytes < 0, _S.OVERFLOW),
        ((nbytes > f.shape[0]) | (nbytes < _MIN_FRAME_BYTES), _S.TRUNCATED),
        (get(0) != frame.MAGIC, _S.BAD_MAGIC),
        ((b1 >> 4) != frame.VERSION, _S.BAD_VERSION),
        (get.word(frame.CHECKSUM_OFFSET) != _checksum(f, nbytes), _S.BAD_CHECKSUM),
        (
            (form > frame.FORM_QUANT)
            | ((flags & 3) > 2)
            | ((flags & 0xC0) != 0)
            | (bits > frame.MAX_BITS)
            | ((form == frame.FORM_RAW) & (((flags & ~3) | bits) != 0)),
            _S.BAD_HEADER,
        ),
        (~r.ok, _S.TRUNCATED),
        ((h_rows != rows) | (h_dim != dim) | ((flags & 3) != code), _S.SHAPE_MISMATCH),
    ]


def _decode_raw(get: _Bytes, body, nbytes, n: int, isz: int):
    """Raw form body at ``body``: (value bits uint32[n], [(failed, status), ...])."""
    r = _Reader(get, body, nbytes)
    at = r.take(n * isz)
    bits = get.word(at + jnp.arange(n, dtype=_I32) * isz, isz)
    return bits, [(~r.ok, _S.TRUNCATED), (r.p != nbytes, _S.TRAILING_BYTES)]


def _decode_quant(get: _Bytes, r: _Reader, nbytes, flags, bits, rows: int, dim: int, code: int):
    """Fixed-rate form body read by ``r``: (value bits uint32[n], [(failed, status), ...]).

    Follows decoder.h ``decode_frame``: eb_abs, base, outlier count (and the dictionary size when
    the dedup flag is set), then ``Status.UNSUPPORTED_FORM`` for dedup/Huffman frames, packed codes, outlier
    positions and values (the last listed value of a repeated position wins).
    """
    n = rows * dim
    isz, pb = (4 if code == _F32 else 2), frame.pos_bytes(n)
    dedup = (flags & frame.FLAG_DEDUP) != 0
    eb_abs, base = _f32(r.u32()), _f32(r.u32())
    n_out = r.varint(n).astype(_I32)
    n_unique = r.varint(rows, present=dedup)
    checks = [
        (~r.ok, _S.TRUNCATED),
        (
            ~jnp.isfinite(eb_abs)
            | (eb_abs < 0)
            | ~jnp.isfinite(base)
            | (dedup & ((n_unique < 1) | (n == 0)))
            | (((flags & frame.FLAG_INDEX_HUFFMAN) != 0) & ~dedup),
            _S.BAD_HEADER,
        ),
        ((flags & (frame.FLAG_DEDUP | frame.FLAG_CODES_HUFFMAN)) != 0, _S.UNSUPPORTED_FORM),
    ]
    bits = jnp.minimum(bits, frame.MAX_BITS).astype(_I32)
    codes_at = r.take(_packed_bytes(n, bits))
    checks.append((~r.ok, _S.TRUNCATED))
    pos_at, vals_at = r.take(n_out * pb), r.take(n_out * isz)
    checks += [(~r.ok, _S.TRUNCATED), (r.p != nbytes, _S.TRAILING_BYTES)]
    k = jnp.arange(n, dtype=_I32)
    listed = k < n_out
    pos = get.word(pos_at + k * pb, pb)
    checks.append((jnp.any(listed & (pos >= n)), _S.CORRUPT))

    bitpos = k * bits
    mask = (jnp.uint32(1) << bits.astype(_U32)) - 1
    q = (get.word(codes_at + (bitpos >> 3)) >> (bitpos & 7).astype(_U32)) & mask
    values = _from_f32(
        _dequantize(base, q.astype(jnp.float32), eb_abs * jnp.float32(2), code), code
    )
    slot = jnp.where(listed & (pos < n), pos, n).astype(_I32)
    last = jnp.full(n, -1, _I32).at[slot].max(k, mode="drop")
    exact = get.word(vals_at + jnp.maximum(last, 0) * isz, isz)
    return jnp.where(last >= 0, exact, values), checks


def _decode_frame(f: jax.Array, nbytes, *, rows: int, dim: int, dtype: np.dtype):
    """decoder.h ``decode_frame`` for raw and fixed-rate frames (no dedup, no Huffman).

    Args:
      f: ``uint8[capacity]``, one frame; nbytes: int32 scalar.
      rows, dim, dtype: static expected chunk shape and dtype.

    Returns:
      ``(x_hat dtype[rows, dim], status int32)``; x_hat is all NaN unless status is 0.
    """
    n, code = rows * dim, frame.DTYPES[dtype]
    get = _Bytes(f, nbytes)
    r = _Reader(get, frame.HEADER_FIXED_BYTES, nbytes)
    checks = _header_checks(get, f, nbytes, r, rows, dim, code)
    raw = (get(1) & 15) == frame.FORM_RAW
    raw_bits, raw_checks = _decode_raw(get, r.p, nbytes, n, dtype.itemsize)
    quant_bits, quant_checks = _decode_quant(get, r, nbytes, get(2), get(3), rows, dim, code)
    checks += [(raw & failed, s) for failed, s in raw_checks]
    checks += [(~raw & failed, s) for failed, s in quant_checks]
    status = _first_error(checks)
    x_bits = jnp.where(
        status != 0, jnp.uint32(_NAN_BITS[code]), jnp.where(raw, raw_bits, quant_bits)
    )
    return _from_dtype_bits(x_bits, dtype).reshape(rows, dim), status


# ---------------------------------------------------------------- public API
def _check_chunk_size(rows: int, dim: int) -> None:
    if 24 * rows * dim >= 2**31:
        raise ValueError(
            f"chunk [{rows}, {dim}] too large for the reference codec's int32 offsets "
            "(needs 24 * rows * dim < 2**31)"
        )


@functools.partial(jax.jit, static_argnames=("capacity",))
def _compress_chunks(x, eb, mode, codec, *, capacity):
    return jax.vmap(functools.partial(_encode_chunk, capacity=capacity))(x, eb, mode, codec)


@functools.partial(jax.jit, static_argnames=("rows", "dim", "dtype"))
def _decompress_chunks(frames, nbytes, *, rows, dim, dtype):
    decode = functools.partial(_decode_frame, rows=rows, dim=dim, dtype=dtype)
    return jax.vmap(decode)(frames, nbytes)


def compress(x, error_bound, *, mode="rel", codec="auto", capacity=None):
    """Encodes each chunk ``x[..., rows, dim]`` into a frame, in pure jax.numpy.

    The frames of ``codec="raw"`` and ``"fixed"`` equal the compiled codec's byte for byte
    (encoder.h ``encode_chunk``): quantization ``q = clip(rint((x - min) / (2 h)), 0,
    maxcode)`` without prediction (``h = eb_abs`` for float32, the half step of quant.h
    ``half_step`` for half types), reconstruction checked exactly against ``eb_abs`` in the
    input dtype (neighbouring code retried), misses, NaN and +-Inf stored exactly as outliers.
    ``"auto"`` takes the smaller of the raw and the fixed-rate frame; ``"dedup"`` and
    ``"entropy"`` write the fixed-rate frame (no dictionary or Huffman forms here).

    Args:
      x: ``float32 | bfloat16 | float16 [..., rows, dim]``; leading dims are chunks.
      error_bound: float, broadcastable to ``x.shape[:-2]``, may be traced. ``mode="rel"``:
        ``eb_abs = error_bound * (max - min)`` over the chunk's finite values, rounded toward
        zero; ``"abs"``: ``eb_abs = error_bound``. Negative or non-finite: the chunk is stored
        raw.
      mode: ``"rel"`` or ``"abs"`` (static).
      codec: a name in :data:`jax_lossy_comm.frame.CODECS` (static).
      capacity: static bytes per frame; default the raw frame size (always fits).

    Returns:
      ``(frames uint8[..., capacity], nbytes int32[...])``; bytes past ``nbytes`` are zero. A
      chunk whose chosen frame exceeds ``capacity`` is stored raw if that fits, else it gets
      ``nbytes = -(bytes needed)`` and all-zero bytes (overflow).

    Raises:
      TypeError: unsupported dtype. ValueError: rank < 2, unknown mode or codec, a capacity
      below the header size, or a chunk too large for int32 offsets.

    References:
      ``xla_ffi/format.h`` (frame layout), ``xla_ffi/encoder.h`` (``encode_chunk``); Feng et al., SC24, sec. 4.
    """
    x = jnp.asarray(x)
    dt = np.dtype(x.dtype)
    if dt not in frame.DTYPES:
        raise TypeError(f"x must be float32, bfloat16 or float16, got {dt}")
    if x.ndim < 2:
        raise ValueError(f"x must have shape [..., rows, dim], got {x.shape}")
    if mode not in frame.MODES:
        raise ValueError(f"mode must be 'rel' or 'abs', got {mode!r}")
    if codec not in frame.CODECS:
        raise ValueError(f"codec must be one of {sorted(frame.CODECS)}, got {codec!r}")
    *batch, rows, dim = x.shape
    _check_chunk_size(rows, dim)
    capacity = frame.raw_frame_bytes(rows, dim, dt) if capacity is None else int(capacity)
    if not frame.header_bytes(rows, dim) <= capacity < 2**31:
        raise ValueError(f"capacity {capacity} is below the frame header or above 2**31 - 1")
    eb = jnp.broadcast_to(jnp.asarray(error_bound, jnp.float32), tuple(batch))
    chunks = math.prod(batch)
    ids = [
        jnp.full(chunks, table[name], _I32)
        for table, name in ((frame.MODES, mode), (frame.CODECS, codec))
    ]
    frames, nbytes = _compress_chunks(
        x.reshape(chunks, rows, dim), eb.reshape(chunks), *ids, capacity=capacity
    )
    return frames.reshape(*batch, capacity), nbytes.reshape(batch)


def decompress(frames: jax.Array, nbytes: jax.Array, *, shape: Sequence[int], dtype=jnp.float32):
    """Decodes raw and fixed-rate frames (decoder.h ``decode_frame``), in pure jax.numpy.

    Args:
      frames: ``uint8[..., capacity]`` from :func:`compress` or the compiled codec.
      nbytes: ``int32[...]`` byte counts (negative: overflow).
      shape: static chunk shape ``(rows, dim)``.
      dtype: static output dtype, float32, bfloat16 or float16.

    Returns:
      ``(x_hat dtype[..., rows, dim], status int32[...])``. Status as the C++ decoder's
      (:data:`jax_lossy_comm.frame.STATUS`), plus 10 for a frame with dictionary (dedup) or
      Huffman sections, which this decoder does not read. x_hat is NaN where status != 0.

    Raises:
      TypeError: frames not uint8, nbytes not int32 of shape ``frames.shape[:-1]``, or an
      unsupported dtype. ValueError: shape not ``(rows, dim)`` or too large.

    References:
      ``xla_ffi/format.h`` (frame layout, ``parse_header``), ``xla_ffi/decoder.h`` (``decode_frame``).
    """
    frames, nbytes = jnp.asarray(frames), jnp.asarray(nbytes)
    dt = np.dtype(dtype)
    if dt not in frame.DTYPES:
        raise TypeError(f"dtype must be float32, bfloat16 or float16, got {dt}")
    if frames.dtype != jnp.uint8 or frames.ndim < 1:
        raise TypeError(f"frames must be uint8[..., capacity], got {frames.dtype}{frames.shape}")
    if nbytes.dtype != jnp.int32 or nbytes.shape != frames.shape[:-1]:
        raise TypeError(
            f"nbytes must be int32{frames.shape[:-1]}, got {nbytes.dtype}{nbytes.shape}"
        )
    if len(shape) != 2:
        raise ValueError(f"shape must be (rows, dim), got {tuple(shape)}")
    rows, dim = (int(s) for s in shape)
    _check_chunk_size(rows, dim)
    *batch, capacity = frames.shape
    chunks = math.prod(batch)
    x, status = _decompress_chunks(
        frames.reshape(chunks, capacity), nbytes.reshape(chunks), rows=rows, dim=dim, dtype=dt
    )
    return x.reshape(*batch, rows, dim), status.reshape(batch)
