"""Frame format constants, static sizes and host-side header parsing.

This mirrors ``xla_ffi/frame.h`` (the normative description of the byte layout) for Python:
codec names, status codes, the static capacity of a frame, and :func:`frame_info`, which reads
frame headers on the host for tests and benchmarks. Nothing here is traced.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

MAGIC = 0xE5
VERSION = 1
HEADER_FIXED_BYTES = 8
MAX_BITS = 24
MAX_HUFFMAN_SYMBOLS = 4096
SEGMENT_SYMBOLS = 1024

FORM_RAW, FORM_QUANT = 0, 1
FLAG_DEDUP, FLAG_CODES_HUFFMAN, FLAG_INDEX_HUFFMAN = 8, 16, 32

#: Codec names accepted by :func:`jax_lossy_comm.compress`, with their handler ids.
#:
#: * ``"auto"``: per chunk, the smallest of the forms below.
#: * ``"raw"``: values stored verbatim (lossless; the fallback for data that cannot be quantized).
#: * ``"fixed"``: fixed-rate quantization codes, ``bits`` per value, no dictionary; the frame
#:   size is known from the shape and the smallest error bound (static exchange capacity).
#: * ``"dedup"``: dictionary of distinct code rows plus one bit-packed index per row.
#: * ``"entropy"``: ``"dedup"`` with canonical Huffman coding of the dictionary codes and the
#:   indices, each where it is smaller than bit-packing.
CODECS = {"auto": 0, "raw": 1, "fixed": 2, "dedup": 3, "entropy": 4}
MODES = {"rel": 0, "abs": 1}
DTYPES = {np.dtype(np.float32): 0, np.dtype("bfloat16"): 1, np.dtype(np.float16): 2}
_DTYPE_BY_CODE = {v: k for k, v in DTYPES.items()}

#: Per-frame status codes returned by :func:`jax_lossy_comm.frame_status` (0 = valid).
STATUS = {
    0: "ok",
    1: "overflow: the encoder needed more bytes than the capacity (nbytes < 0)",
    2: "truncated: nbytes out of range or a section runs past the end",
    3: "bad magic byte",
    4: "unsupported frame version",
    5: "bad header field",
    6: "shape or dtype differs from the expected one",
    7: "checksum mismatch",
    8: "corrupt section (code table, code or index out of range)",
    9: "trailing bytes after the last section",
    10: "form not supported by the pure-jax reference decoder",
}
STATUS_OK, STATUS_OVERFLOW = 0, 1


def _varint_size(v: int) -> int:
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def _dtype_size(dtype) -> int:
    return np.dtype(dtype).itemsize


def header_bytes(rows: int, dim: int) -> int:
    """Bytes of the fixed header plus the varint shape of a ``[rows, dim]`` chunk."""
    return HEADER_FIXED_BYTES + _varint_size(rows) + _varint_size(dim)


def raw_frame_bytes(rows: int, dim: int, dtype) -> int:
    """Size of the raw (verbatim) frame: the largest any codec writes for this chunk."""
    return header_bytes(rows, dim) + rows * dim * _dtype_size(dtype)


def rel_code_bits(min_error_bound: float) -> int:
    """Bits of a quantization code in REL mode for relative bounds >= ``min_error_bound``.

    The largest code is ``range / (2 * eb_rel * range) = 1 / (2 eb_rel)`` (plus one for float
    rounding), so the width depends on the bound alone (Feng et al., SC24, sec. 4.1).
    """
    m = 1.0 / (2.0 * float(min_error_bound))
    if not m < 2**MAX_BITS:
        return 32
    return int(int(m) + 1).bit_length()


def pos_bytes(n: int) -> int:
    """Bytes of one outlier position in a chunk of ``n`` values."""
    return 1 if n <= 0x100 else 2 if n <= 0x10000 else 3 if n <= 0x1000000 else 4


def fixed_frame_bytes(rows: int, dim: int, bits: int, dtype=np.float32, outliers: int = 0) -> int:
    """Size of a fixed-rate frame with ``bits``-bit codes and ``outliers`` exact values."""
    n = rows * dim
    return (
        header_bytes(rows, dim)
        + 8
        + _varint_size(outliers)
        + (n * bits + 7) // 8
        + outliers * (pos_bytes(n) + _dtype_size(dtype))
    )


#: Largest frame: byte counts travel as int32 (and outlier positions as uint32).
MAX_FRAME_BYTES = 2**31 - 1


def check_min_error_bound(min_error_bound) -> float:
    """``min_error_bound`` as a float; raises ValueError unless finite and > 0."""
    eb = float(min_error_bound)
    if not (math.isfinite(eb) and eb > 0):
        raise ValueError(f"min_error_bound must be finite and > 0, got {min_error_bound}")
    return eb


def check_chunk_size(rows: int, dim: int, dtype) -> None:
    """Raises ValueError when a ``[rows, dim]`` chunk's raw frame would not fit an int32 count."""
    if raw_frame_bytes(rows, dim, dtype) > MAX_FRAME_BYTES:
        raise ValueError(
            f"a chunk of [{rows}, {dim}] {np.dtype(dtype)} values exceeds the "
            f"{MAX_FRAME_BYTES}-byte frame limit: split it into smaller chunks"
        )


def frame_capacity(
    shape,
    dtype=np.float32,
    codec: str = "auto",
    min_error_bound: float | None = None,
    mode: str = "rel",
    outliers: int = 0,
) -> int:
    """Static frame capacity in bytes for chunks of ``shape[-2:] = (rows, dim)``.

    Args:
      shape: chunk shape ``(rows, dim)`` or any shape ending with it.
      dtype: float32, bfloat16 or float16.
      codec: a name in :data:`CODECS`.
      min_error_bound: the smallest relative error bound the frames will be made with. With it,
        ``"fixed"`` and ``"auto"`` get the fixed-rate size (``"auto"`` never writes more than the
        fixed-rate form); without it every codec gets the raw size, which always fits.
      mode: ``"rel"`` or ``"abs"``; a fixed-rate size needs ``"rel"`` (in ABS mode the code width
        depends on the data's range, unknown statically).
      outliers: exact values to reserve room for in a fixed-rate capacity (NaN, Inf, values at
        the quantizer's edge); frames needing more report overflow rather than truncate.

    Returns:
      int: bytes per frame; the trailing dimension of ``compress``'s frames.

    Raises:
      ValueError: unknown codec or mode, non-positive ``min_error_bound``, or ``codec="fixed"``
        without a REL ``min_error_bound``.
    """
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {sorted(CODECS)}, got {codec!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be 'rel' or 'abs', got {mode!r}")
    if len(shape) < 2:
        raise ValueError(f"shape must end with (rows, dim), got {tuple(shape)}")
    rows, dim = int(shape[-2]), int(shape[-1])
    check_chunk_size(rows, dim, dtype)
    raw = raw_frame_bytes(rows, dim, dtype)
    if min_error_bound is None or mode != "rel" or codec not in ("auto", "fixed"):
        if codec == "fixed":
            raise ValueError(
                "codec='fixed' needs min_error_bound in mode='rel' to size its frames "
                "statically (or pass capacity= explicitly)"
            )
        return raw
    eb = check_min_error_bound(min_error_bound)
    fixed = fixed_frame_bytes(rows, dim, rel_code_bits(eb), dtype, outliers)
    return fixed if codec == "fixed" else min(raw, fixed)


class FrameInfo(NamedTuple):
    """Header fields of one frame (see ``xla_ffi/frame.h``); ``None`` fields are absent."""

    nbytes: int
    form: str  # "raw" or "quantized"; "overflow" when nbytes < 0
    dtype: np.dtype | None
    mode: str | None
    bits: int
    dedup: bool
    codes_huffman: bool
    index_huffman: bool
    rows: int
    dim: int
    eb_abs: float | None
    base: float | None
    n_outliers: int
    n_unique: int


def _read_varint(b: bytes, o: int) -> tuple[int, int]:
    v = s = 0
    while True:
        c = b[o]
        o += 1
        v |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return v, o


def frame_info(frames, nbytes) -> list[FrameInfo]:
    """Parses the headers of a batch of frames on the host.

    Args:
      frames: ``uint8[..., capacity]`` from :func:`jax_lossy_comm.compress`.
      nbytes: ``int32[...]`` byte counts.

    Returns:
      A flat list (C order over the leading dims) of :class:`FrameInfo`.

    Raises:
      ValueError: a frame whose magic or version is wrong (use ``frame_status`` for a full check).
    """
    f = np.asarray(frames).reshape(-1, np.shape(frames)[-1])
    nb = np.asarray(nbytes).reshape(-1)
    out = []
    for row, n in zip(f, nb):
        n = int(n)
        if n < 0:
            out.append(
                FrameInfo(n, "overflow", None, None, 0, False, False, False, 0, 0, None, None, 0, 0)
            )
            continue
        b = row[:n].tobytes()
        if len(b) < HEADER_FIXED_BYTES or b[0] != MAGIC or b[1] >> 4 != VERSION:
            raise ValueError("not a jax_lossy_comm frame (bad magic or version)")
        form, flags, bits = b[1] & 15, b[2], b[3]
        rows, o = _read_varint(b, HEADER_FIXED_BYTES)
        dim, o = _read_varint(b, o)
        dtype = _DTYPE_BY_CODE.get(flags & 3)
        if form == FORM_RAW:
            out.append(
                FrameInfo(
                    n, "raw", dtype, None, 0, False, False, False, rows, dim, None, None, 0, rows
                )
            )
            continue
        eb_abs, base = np.frombuffer(b[o : o + 8], "<f4").astype(float)
        n_out, o = _read_varint(b, o + 8)
        n_unique = rows
        if flags & FLAG_DEDUP:
            n_unique, o = _read_varint(b, o)
        out.append(
            FrameInfo(
                n,
                "quantized",
                dtype,
                "abs" if flags & 4 else "rel",
                bits,
                bool(flags & FLAG_DEDUP),
                bool(flags & FLAG_CODES_HUFFMAN),
                bool(flags & FLAG_INDEX_HUFFMAN),
                rows,
                dim,
                float(eb_abs),
                float(base),
                n_out,
                n_unique,
            )
        )
    return out


def describe_status(status) -> list[str]:
    """Human-readable text for each status code in ``status`` (any shape, flattened)."""
    return [STATUS.get(int(s), f"unknown status {int(s)}") for s in np.asarray(status).reshape(-1)]
