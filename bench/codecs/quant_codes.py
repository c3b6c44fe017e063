"""The quantization-without-prediction peer codec (numpy, optional zstd on the codes).

The paper's scheme without its lossless dictionary stage, as a simple, strong peer for the
codec benchmark (`quant-codes`, `quant-codes+zstd-1`, `quant-codes+zstd-19` in
`bench.codecs.registry`):

  q = round((x - min) / (2 eb_abs));  x_hat = float32(q) * float32(2 eb_abs) + float32(min)

so |x - x_hat| <= eb_abs up to float32 rounding; the encoder recomputes x_hat exactly as the
decoder does and stores every value that still misses the bound (and every non-finite value)
as an outlier (index + raw float32), so the bound holds exactly, checked in float64. Codes are
stored fixed-rate in the narrowest unsigned type that holds them (uint8, uint16 or uint32).

References:
  Feng et al., SC24, arXiv 2407.04272, Sec. 3 (quantization without prediction + lossless).
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

Shape = tuple[int, ...]

# Blob layout (little-endian): header struct, codes section, outlier indices, outlier values.
#   magic b"QC1", code width in bytes (0 = lossless raw float32 fallback), lossless level
#   (0 = none), float32 base (min), float32 step (2 eb_abs), uint32 elements, uint32 outliers,
#   uint32 codes-section bytes.
_QHDR = struct.Struct("<3sBBffIII")
_QMAGIC = b"QC1"


def _dequantize(codes: np.ndarray, base: np.float32, step: np.float32) -> np.ndarray:
    """x_hat = float32(q) * step + base, in float32, two separate ufuncs (no fused multiply-add),
    so encoder and decoder get bit-identical values."""
    y = codes.astype(np.float32)
    y *= step
    y += base
    return y


def encode(x: np.ndarray, eb_abs: float, *, level: int | None, zstd_module: Any = None) -> bytes:
    """Error-bounded quantization without prediction; optional zstd on the codes.

    Args:
      x: float32[...], any shape (flattened in C order).
      eb_abs: absolute error bound (> 0 for lossy; 0 gives a lossless raw fallback).
      level: zstd level for the codes section, or None for fixed-rate codes.
      zstd_module: the imported `zstandard` module (required when level is not None).

    Returns:
      bytes of the blob (see the layout comment above); decode with `decode`.
    """
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    n = flat.size
    all_finite = bool(np.isfinite(flat.min(initial=0.0)) and np.isfinite(flat.max(initial=0.0)))
    finite = None if all_finite else np.isfinite(flat)
    fin_vals = flat if all_finite else flat[finite]
    lo = np.float32(fin_vals.min()) if fin_vals.size else np.float32(0.0)
    hi = np.float32(fin_vals.max()) if fin_vals.size else np.float32(0.0)
    lvl = 0 if level is None else int(level)

    def pack(
        width: int,
        base: float,
        step: float,
        codes_bytes: bytes,
        out_idx: np.ndarray,
        out_val: np.ndarray,
    ) -> bytes:
        section = codes_bytes
        if level is not None:
            section = zstd_module.ZstdCompressor(level=lvl).compress(codes_bytes)
        hdr = _QHDR.pack(_QMAGIC, width, lvl, base, step, n, out_idx.size, len(section))
        return b"".join(
            (hdr, section, out_idx.astype("<u4").tobytes(), out_val.astype("<f4").tobytes())
        )

    empty_i = np.zeros(0, np.uint32)
    if not (eb_abs > 0) or not np.isfinite(eb_abs):
        if hi == lo and all_finite:
            # constant chunk: header + codes that are all 0
            return pack(
                1, float(lo), 0.0, np.zeros(n, np.uint8).tobytes(), empty_i, np.zeros(0, np.float32)
            )
        # zero error bound on non-constant data: lossless fallback (raw float32)
        return pack(0, 0.0, 0.0, flat.tobytes(), empty_i, np.zeros(0, np.float32))
    step = np.float32(2.0 * eb_abs)
    src = flat if all_finite else np.where(finite, flat, lo)
    # codes in float32 (fast); any value they miss is caught below and stored as an outlier
    qf = np.rint((src - lo) * np.float32(1.0 / float(step)))
    qmax = float(qf.max()) if n else 0.0
    if qmax <= 0xFF:
        codes = qf.astype(np.uint8)
    elif qmax <= 0xFFFF:
        codes = qf.astype(np.uint16)
    elif qmax < 2.0**32:
        codes = qf.astype(np.uint32)
    else:  # error bound too small for 32-bit codes: lossless fallback
        return pack(0, 0.0, 0.0, flat.tobytes(), empty_i, np.zeros(0, np.float32))
    y = _dequantize(codes, lo, step)
    # float32 |x - y| is correctly rounded (relative error <= 2^-24), so d <= eb (1 - 2^-20)
    # proves |x - y| < eb exactly; only the rest (and NaN/Inf) are checked in float64.
    d = np.abs(flat - y)
    suspect = np.flatnonzero(~(d <= np.float32(float(eb_abs) * (1.0 - 2.0**-20))))
    exact_ok = np.abs(flat[suspect].astype(np.float64) - y[suspect].astype(np.float64)) <= float(
        eb_abs
    )  # NaN compares False: an outlier too
    out_idx = suspect[~exact_ok].astype(np.uint32)
    return pack(
        codes.dtype.itemsize, float(lo), float(step), codes.tobytes(), out_idx, flat[out_idx]
    )


def decode(blob: bytes, shape: Shape, *, zstd_module: Any = None) -> np.ndarray:
    """Inverse of `encode`: float32[shape].

    Raises:
      ValueError: bad magic, sizes inconsistent with `shape` or with the blob length.
    """
    mv = memoryview(blob)
    if len(mv) < _QHDR.size:
        raise ValueError("quantized blob shorter than its header")
    magic, width, lvl, base, step, n, n_out, sec = _QHDR.unpack_from(mv, 0)
    if magic != _QMAGIC:
        raise ValueError(f"bad magic {magic!r}")
    if n != int(np.prod(shape)):
        raise ValueError(f"blob holds {n} values, shape {shape} needs {int(np.prod(shape))}")
    off = _QHDR.size
    if off + sec + 8 * n_out != len(mv):
        raise ValueError("quantized blob length does not match its header")
    section = bytes(mv[off : off + sec])
    if lvl:
        section = zstd_module.ZstdDecompressor().decompress(section)
    off += sec
    if width == 0:
        out = np.frombuffer(section, dtype="<f4").astype(np.float32)
    else:
        dt = {1: "<u1", 2: "<u2", 4: "<u4"}.get(width)
        if dt is None:
            raise ValueError(f"bad code width {width}")
        codes = np.frombuffer(section, dtype=dt)
        if codes.size != n:
            raise ValueError("codes section does not hold n codes")
        out = _dequantize(codes, np.float32(base), np.float32(step))
    if n_out:
        idx = np.frombuffer(mv[off : off + 4 * n_out], dtype="<u4")
        vals = np.frombuffer(mv[off + 4 * n_out : off + 8 * n_out], dtype="<f4")
        if idx.size and int(idx.max()) >= n:
            raise ValueError("outlier index out of range")
        out[idx] = vals
    return out.reshape(shape)


def code_width(blob: bytes) -> int:
    """Bytes per quantization code in an `encode` blob (0: lossless fallback)."""
    return _QHDR.unpack_from(blob, 0)[1]


def outliers(blob: bytes) -> int:
    """Number of outliers stored raw in an `encode` blob."""
    return _QHDR.unpack_from(blob, 0)[6]
