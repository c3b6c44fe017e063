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
* A chunk holding a subnormal (denormal) float32 or bfloat16 value is stored raw (lossless):
  XLA:CPU runs with flush-to-zero and denormals-are-zero, so jax.numpy arithmetic would see
  such values as zero and could not honour their bound. The C++ codec clears those modes for
  its handler (and the CUDA build keeps subnormals) and quantizes them like any other chunk.
  Subnormal *intermediates* of normal inputs (a tiny ``eb_abs`` or step) are flushed here, and
  the C++ codec keeps them: a chunk whose step is subnormal is outside the bit identity.
* Offsets are int32: a chunk needs ``24 * rows * dim < 2**31``.

Floating point: the C++ codec is built with ``-ffp-contract=off``, but XLA:CPU and XLA:GPU contract
``a * b + c`` into one fused multiply-add (one rounding instead of two), and neither
``reduce_precision`` nor ``optimization_barrier`` stops it. :func:`jax_lossy_comm.refbits.product` hides the multiply
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
from jax_lossy_comm import refbits as rb


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


def _code_width(maxcode):
    """format.h ``bits_for``: bits of codes up to ``maxcode`` (float32 below 2**24), int32."""
    return (32 - lax.clz(jnp.minimum(maxcode, 2.0**24).astype(rb.U32))).astype(rb.I32)


def _zero_on_grid(vmin, vmax, mc, step, inv, shrink, code: int):
    """quant.h ``zero_on_grid``: ``(base, maxcode)``, float32 scalars.

    Where the range contains zero (``vmin < 0 <= vmax``) and the step did not shrink, the base
    is the multiple ``-k * step`` of the step at or just below ``vmin``, so that zero is a
    reconstruction and the errors of values around zero have mean about zero; else ``vmin``
    (also where the base would widen the code or its x_hat, or the top one, round to Inf).
    """
    k = lax.round(-vmin * inv, lax.RoundingMethod.TO_NEAREST_EVEN)
    b = -rb.product(k, step)
    k = jnp.where(b > vmin, k + 1, k)
    b = -rb.product(k, step)
    mc2 = lax.round((vmax - b) * inv, lax.RoundingMethod.TO_NEAREST_EVEN)
    top = rb.dequantize(b, mc2, step, code)
    use = (
        ~shrink
        & (vmin < 0)
        & (vmax >= 0)
        & (b <= vmin)
        & (mc2 <= mc + 1)
        & (_code_width(mc2) == _code_width(mc))
        & jnp.isfinite(rb.round_to_dtype(b, code))
        & jnp.isfinite(top)
    )
    return jnp.where(use, b, vmin), jnp.where(use, mc2, mc)


def _quantize(v, finite, base, inv, step, maxcode, eb_abs, code: int):
    """encoder.h ``quantize_verify`` and the neighbour retry: codes uint32[n], outliers bool[n].

    ``q = rint((v - base) * inv)`` clamped to ``[0, maxcode]`` (NaN to 0, non-finite v to 0).
    A value whose reconstruction ``base + q * step``, rounded to the input dtype, misses the
    bound tries the neighbouring code (v at a rounding midpoint), else it is an outlier and
    keeps q. A constant chunk has ``inv = maxcode = 0``.
    """
    qf = lax.round((v - base) * inv, lax.RoundingMethod.TO_NEAREST_EVEN)  # rint_nonneg
    qf = jnp.where(qf >= 0, qf, jnp.float32(0))
    qf = jnp.where(qf <= maxcode, qf, maxcode)
    qf = jnp.where(finite, qf, jnp.float32(0))
    rec = rb.dequantize(base, qf, step, code)
    ok = finite & rb.within_bound(v, rec, eb_abs)
    q2 = qf + jnp.where(v > rec, jnp.float32(1), jnp.float32(-1))
    ok2 = (
        finite
        & ~ok
        & (q2 >= 0)
        & (q2 <= maxcode)
        & rb.within_bound(v, rb.dequantize(base, q2, step, code), eb_abs)
    )
    return jnp.where(ok2, q2, qf).astype(rb.U32), ~(ok | ok2)


def _header_pieces(form, flags, bits, rows: int, dim: int):
    """Magic, version|form, flags, bits, zero checksum, varint rows and dim (format.h ``write_header``)."""
    fixed = jnp.stack(
        [jnp.uint32(frame.MAGIC), (frame.VERSION << 4) | form, flags, bits, *[jnp.uint32(0)] * 4]
    ).astype(rb.U8)
    return [(fixed, frame.HEADER_FIXED_BYTES), rb.varint(rows), rb.varint(dim)]


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
    xbits = rb.dtype_bits(x.reshape(n), code)
    v = rb.to_f32(xbits, code)
    finite = jnp.isfinite(v)

    # 1. Range over finite values. 2. Feasibility. 3. Quantize and verify.
    vmin, vmax = _value_range(v, finite)
    value_range = vmax - vmin
    eb_abs = jnp.where(mode == frame.MODES["rel"], rb.rel_bound(eb, vmin, vmax), eb)
    half = rb.half_step(eb_abs, vmin, vmax, code)
    step = half * jnp.float32(2)
    inv = jnp.float32(1) / step
    mc = lax.round(value_range * inv, lax.RoundingMethod.TO_NEAREST_EVEN)
    if code != rb.F32:  # quant.h: a top x_hat rounding to Inf shrinks the step to range / maxcode
        shrink = (mc > 0) & ~jnp.isfinite(rb.dequantize(vmin, mc, step, code))
        half = jnp.where(shrink, rb.product(value_range / mc, jnp.float32(0.5)), half)
        step = half * jnp.float32(2)
        inv = jnp.float32(1) / step
    else:
        shrink = jnp.bool_(False)
    base, mc = _zero_on_grid(vmin, vmax, mc, step, inv, shrink, code)
    constant = value_range == 0
    spans = jnp.isfinite(step) & (step > 0) & jnp.isfinite(inv) & (mc < 2.0**frame.MAX_BITS)
    # values.h: exponent bits zero, mantissa not (XLA would flush them: the docstring)
    vbits = lax.bitcast_convert_type(v, rb.U32)
    subnormal = jnp.any(((vbits & 0x7F800000) == 0) & ((vbits & 0x007FFFFF) != 0))
    quant_ok = (
        ~subnormal
        & (codec != frame.CODECS["raw"])
        & jnp.bool_(n > 0)
        & (eb >= 0)
        & jnp.isfinite(eb)
        & (constant | spans)
        & jnp.isfinite(eb_abs)
    )
    maxcode = jnp.where(quant_ok & ~constant, mc, jnp.float32(0))
    inv = jnp.where(constant, jnp.float32(0), inv)
    codes, outlier = _quantize(v, finite, base, inv, step, maxcode, eb_abs, code)
    outlier = outlier & quant_ok
    n_out = jnp.sum(outlier, dtype=rb.I32)
    bits = _code_width(maxcode)

    # 4. Sizes and the form (raw when the chosen form does not fit but raw does).
    raw_bytes = frame.raw_frame_bytes(rows, dim, dt)
    packed = rb.packed_bytes(n, bits)
    fixed_bytes = (
        frame.header_bytes(rows, dim)
        + 8
        + rb.varint_size(n_out.astype(rb.U32))
        + packed
        + n_out * (pb + isz)
    )
    quant = quant_ok & ((codec != frame.CODECS["auto"]) | (fixed_bytes < raw_bytes))
    quant = quant & ((fixed_bytes <= capacity) | (raw_bytes >= fixed_bytes))
    best = jnp.where(quant, fixed_bytes, raw_bytes)

    # 5. Write it (each piece has length 0 when its form is not chosen).
    form = quant.astype(rb.U32)
    abs_flag = jnp.where(mode == int(frame.Mode.ABS), frame.FLAG_ABS, 0)
    flags = jnp.where(quant, code | abs_flag, code).astype(rb.U32)
    rank = jnp.cumsum(outlier, dtype=rb.I32) - 1  # outlier positions in increasing order
    pos = (
        jnp.zeros(n, rb.U32)
        .at[jnp.where(outlier, rank, n)]
        .set(jnp.arange(n, dtype=rb.U32), mode="drop", unique_indices=True)
    )
    xbytes = rb.le_bytes(xbits, isz)

    def when(q, length):
        return jnp.where(q, length, 0)

    n_out_bytes, n_out_len = rb.varint(n_out.astype(rb.U32))
    pieces = _header_pieces(form, flags, when(quant, bits).astype(rb.U32), rows, dim) + [
        (xbytes.reshape(-1), when(~quant, n * isz)),
        (rb.le_bytes(rb.u32(jnp.stack([half, base])), 4).reshape(-1), when(quant, 8)),
        (n_out_bytes, when(quant, n_out_len)),
        (rb.pack(codes, bits), when(quant, packed)),
        (rb.le_bytes(pos, pb).reshape(-1), when(quant, n_out * pb)),
        (xbytes[pos].reshape(-1), when(quant, n_out * isz)),
    ]
    buf, used = rb.assemble(pieces, capacity)
    buf = buf.at[4:8].set(rb.le_bytes(rb.checksum(buf, used), 4))
    over = best > capacity
    return jnp.where(over, jnp.uint8(0), buf), jnp.where(over, -best, used).astype(rb.I32)


# ---------------------------------------------------------------- decoder
class _Bytes:
    """Bounds-safe byte reads from a frame ``f[:nbytes]``; bytes past nbytes read as zero."""

    def __init__(self, f: jax.Array, nbytes):
        cap = f.shape[0]
        masked = jnp.where(jnp.arange(cap, dtype=rb.I32) < nbytes, f, 0).astype(rb.U32)
        self.buf = jnp.concatenate([masked, jnp.zeros(1, rb.U32)])

    def __call__(self, idx):
        """uint32 byte values at int32 positions ``idx`` (any shape)."""
        return self.buf[jnp.clip(idx, 0, self.buf.shape[0] - 1)]

    def word(self, idx, k: int = 4):
        """Little-endian ``k``-byte unsigned integers starting at ``idx``: uint32."""
        j = jnp.arange(k, dtype=rb.I32)
        b = self(jnp.asarray(idx, rb.I32)[..., None] + j)
        return jnp.sum(b << (8 * j).astype(rb.U32), axis=-1, dtype=rb.U32)  # disjoint bytes


def _read_varint(get: _Bytes, p, end, vmax: int):
    """format.h ``Reader::varint(max)`` at ``p`` in ``[p, end)``: (value uint32, next p, ok).

    Fails (ok False) past ``end``, at a 9th continuation byte, or when the value exceeds
    ``vmax``; the value is correct when ok.
    """
    k = jnp.arange(rb.VARINT_READ_BYTES, dtype=rb.I32)
    b = get(p + k)
    term = (b & 0x80) == 0
    t = jnp.argmax(term).astype(rb.I32)
    inside = k <= t
    payload = b & 0x7F
    low = jnp.sum(
        jnp.where(inside & (k < 5), payload << (7 * jnp.minimum(k, 4)).astype(rb.U32), 0),
        dtype=rb.U32,
    )
    high_mask = jnp.asarray([0, 0, 0, 0, 0x70] + [0x7F] * 4, rb.U32)  # bits at 2^32 and up
    high = jnp.any(inside & ((payload & high_mask) != 0))
    ok = jnp.any(term) & jnp.all(~inside | (p + k < end)) & ~high & (low <= vmax)
    return low, p + t + 1, ok


class _Reader:
    """format.h ``Reader`` as traced state: position ``p`` and ``ok`` (sticky once False)."""

    def __init__(self, get: _Bytes, p, end):
        self.get, self.p, self.end, self.ok = get, jnp.asarray(p, rb.I32), end, jnp.bool_(True)

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
        (nbytes < 0, rb.S.OVERFLOW),
        ((nbytes > f.shape[0]) | (nbytes < rb.MIN_FRAME_BYTES), rb.S.TRUNCATED),
        (get(0) != frame.MAGIC, rb.S.BAD_MAGIC),
        ((b1 >> 4) != frame.VERSION, rb.S.BAD_VERSION),
        (get.word(frame.CHECKSUM_OFFSET) != rb.checksum(f, nbytes), rb.S.BAD_CHECKSUM),
        (
            (form > frame.FORM_QUANT)
            | ((flags & 3) > 2)
            | ((flags & 0xC0) != 0)
            | (bits > frame.MAX_BITS)
            | ((form == frame.FORM_RAW) & (((flags & ~3) | bits) != 0)),
            rb.S.BAD_HEADER,
        ),
        (~r.ok, rb.S.TRUNCATED),
        ((h_rows != rows) | (h_dim != dim) | ((flags & 3) != code), rb.S.SHAPE_MISMATCH),
    ]


def _decode_raw(get: _Bytes, body, nbytes, n: int, isz: int):
    """Raw form body at ``body``: (value bits uint32[n], [(failed, status), ...])."""
    r = _Reader(get, body, nbytes)
    at = r.take(n * isz)
    bits = get.word(at + jnp.arange(n, dtype=rb.I32) * isz, isz)
    return bits, [(~r.ok, rb.S.TRUNCATED), (r.p != nbytes, rb.S.TRAILING_BYTES)]


def _decode_quant(get: _Bytes, r: _Reader, nbytes, flags, bits, rows: int, dim: int, code: int):
    """Fixed-rate form body read by ``r``: (value bits uint32[n], [(failed, status), ...]).

    Follows decoder.h ``decode_frame``: eb_abs, base, outlier count (and the dictionary size when
    the dedup flag is set), then ``Status.UNSUPPORTED_FORM`` for dedup/Huffman frames, packed codes, outlier
    positions and values (the last listed value of a repeated position wins).
    """
    n = rows * dim
    isz, pb = (4 if code == rb.F32 else 2), frame.pos_bytes(n)
    dedup = (flags & frame.FLAG_DEDUP) != 0
    eb_abs, base = rb.f32(r.u32()), rb.f32(r.u32())
    n_out = r.varint(n).astype(rb.I32)
    n_unique = r.varint(rows, present=dedup)
    checks = [
        (~r.ok, rb.S.TRUNCATED),
        (
            ~jnp.isfinite(eb_abs)
            | (eb_abs < 0)
            | ~jnp.isfinite(base)
            | (dedup & ((n_unique < 1) | (n == 0)))
            | (((flags & frame.FLAG_INDEX_HUFFMAN) != 0) & ~dedup),
            rb.S.BAD_HEADER,
        ),
        ((flags & (frame.FLAG_DEDUP | frame.FLAG_CODES_HUFFMAN)) != 0, rb.S.UNSUPPORTED_FORM),
    ]
    bits = jnp.minimum(bits, frame.MAX_BITS).astype(rb.I32)
    codes_at = r.take(rb.packed_bytes(n, bits))
    checks.append((~r.ok, rb.S.TRUNCATED))
    pos_at, vals_at = r.take(n_out * pb), r.take(n_out * isz)
    checks += [(~r.ok, rb.S.TRUNCATED), (r.p != nbytes, rb.S.TRAILING_BYTES)]
    k = jnp.arange(n, dtype=rb.I32)
    listed = k < n_out
    pos = get.word(pos_at + k * pb, pb)
    checks.append((jnp.any(listed & (pos >= n)), rb.S.CORRUPT))

    bitpos = k * bits
    mask = (jnp.uint32(1) << bits.astype(rb.U32)) - 1
    q = (get.word(codes_at + (bitpos >> 3)) >> (bitpos & 7).astype(rb.U32)) & mask
    values = rb.from_f32(
        rb.dequantize(base, q.astype(jnp.float32), eb_abs * jnp.float32(2), code), code
    )
    slot = jnp.where(listed & (pos < n), pos, n).astype(rb.I32)
    last = jnp.full(n, -1, rb.I32).at[slot].max(k, mode="drop")
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
        status != 0, jnp.uint32(rb.NAN_BITS[code]), jnp.where(raw, raw_bits, quant_bits)
    )
    return rb.from_dtype_bits(x_bits, dtype).reshape(rows, dim), status


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
    (encoder.h ``encode_chunk``): quantization ``q = clip(rint((x - base) / (2 h)), 0, maxcode)``
    without prediction (``h = eb_abs`` for float32, the half step of quant.h ``half_step`` for
    half types; ``base`` the chunk's minimum, or the multiple of ``2 h`` just below it where the
    range contains zero, so that zero is on the grid), reconstruction checked exactly against
    ``eb_abs`` in the input dtype (neighbouring code retried), misses, NaN and +-Inf stored
    exactly as outliers. ``"auto"`` takes the smaller of the raw and the fixed-rate frame;
    ``"dedup"`` and ``"entropy"`` write the fixed-rate frame (no dictionary or Huffman forms
    here).

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
        jnp.full(chunks, table[name], rb.I32)
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
