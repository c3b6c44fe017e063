"""Frame format constants, enums, static sizes and host-side header parsing.

``xla_ffi/format.h`` is the one description of the byte layout; the compiled extension exports
its constants, enums and status codes, and this module turns them into Python names and
:class:`enum.IntEnum` classes (:class:`Codec`, :class:`Mode`, :class:`DType`, :class:`Form`,
:class:`Flag`, :class:`Status`). Without the extension (a pure-jax reference install) the same
values come from :data:`FORMAT_TABLE`, which ``tests/native/test_format_constants.py`` checks against
the extension, together with the size functions here (:func:`header_bytes`,
:func:`raw_frame_bytes`, :func:`fixed_frame_bytes`, :func:`rel_code_bits`, :func:`pos_bytes`)
against their C++ counterparts. :func:`frame_info` reads frame headers on the host for tests and
benchmarks. Nothing here is traced.

>>> Status(7).name, Status.BAD_CHECKSUM.description
('BAD_CHECKSUM', 'checksum mismatch')
>>> CODECS["fixed"] == Codec.FIXED == 2
True
"""

from __future__ import annotations

import enum
import math
import types
from typing import NamedTuple

import numpy as np

from jax_lossy_comm import _ffi

#: The format of ``xla_ffi/format.h`` as Python values, used when the compiled extension is
#: absent; with the extension, its exports (the same keys) are used instead.
FORMAT_TABLE = {
    "MAGIC": 0xE5,
    "VERSION": 1,
    "HEADER_FIXED_BYTES": 8,
    "CHECKSUM_OFFSET": 4,
    "MAX_BITS": 24,
    "HALF_STEP_FLOOR": 0.4921875,
    "MAX_HUFFMAN_LENGTH": 12,
    "MAX_HUFFMAN_SYMBOLS": 4096,
    "SEGMENT_SYMBOLS": 1024,
    "MAX_FRAME_BYTES": 2**31 - 1,
    "FORMS": {"RAW": 0, "QUANT": 1},
    "FLAGS": {"ABS": 4, "DEDUP": 8, "CODES_HUFFMAN": 16, "INDEX_HUFFMAN": 32},
    "CODECS": {"auto": 0, "raw": 1, "fixed": 2, "dedup": 3, "entropy": 4},
    "MODES": {"rel": 0, "abs": 1},
    "DTYPES": {"float32": 0, "bfloat16": 1, "float16": 2},
    "STATUS": [
        ("OK", 0, "ok"),
        (
            "OVERFLOW",
            1,
            "overflow: the encoder needed more bytes than the capacity (nbytes < 0)",
        ),
        ("TRUNCATED", 2, "truncated: nbytes out of range or a section runs past the end"),
        ("BAD_MAGIC", 3, "bad magic byte"),
        ("BAD_VERSION", 4, "unsupported frame version"),
        ("BAD_HEADER", 5, "bad header field"),
        ("SHAPE_MISMATCH", 6, "shape or dtype differs from the expected one"),
        ("BAD_CHECKSUM", 7, "checksum mismatch"),
        ("CORRUPT", 8, "corrupt section (code table, code or index out of range)"),
        ("TRAILING_BYTES", 9, "trailing bytes after the last section"),
        ("UNSUPPORTED_FORM", 10, "form not supported by the pure-jax reference decoder"),
    ],
}


def _format_source():
    """The extension module when it is built, else :data:`FORMAT_TABLE` as a namespace."""
    ext = _ffi._ext
    return ext if ext is not None else types.SimpleNamespace(**FORMAT_TABLE)


_F = _format_source()

MAGIC: int = _F.MAGIC
VERSION: int = _F.VERSION
HEADER_FIXED_BYTES: int = _F.HEADER_FIXED_BYTES
CHECKSUM_OFFSET: int = _F.CHECKSUM_OFFSET
MAX_BITS: int = _F.MAX_BITS
#: bfloat16/float16 chunks: the quantizer's half step is at least this fraction of ``eb_abs``
#: (room for the decoder's rounding to the half type; 63/128 leaves no outlier), which sets
#: their code width.
HALF_STEP_FLOOR: float = _F.HALF_STEP_FLOOR
MAX_HUFFMAN_LENGTH: int = _F.MAX_HUFFMAN_LENGTH
MAX_HUFFMAN_SYMBOLS: int = _F.MAX_HUFFMAN_SYMBOLS
SEGMENT_SYMBOLS: int = _F.SEGMENT_SYMBOLS
#: Largest frame: byte counts travel as int32 (and outlier positions as uint32).
MAX_FRAME_BYTES: int = _F.MAX_FRAME_BYTES


class _Described(enum.IntEnum):
    """An IntEnum whose members also carry a one-line ``description``."""

    def __new__(cls, value: int, description: str = ""):
        member = int.__new__(cls, value)
        member._value_ = value
        member.description = description
        return member


_CODEC_TEXT = {
    "auto": "per chunk, the smallest of the forms below",
    "raw": "values stored verbatim (lossless; the fallback for data that cannot be quantized)",
    "fixed": "fixed-rate quantization codes, bits per value, no dictionary; the frame size is "
    "known from the shape and the smallest error bound (static exchange capacity)",
    "dedup": "dictionary of distinct code rows plus one bit-packed index per row",
    "entropy": "dedup with canonical Huffman coding of the dictionary codes and the indices, "
    "each where it is smaller than bit-packing",
}
_MODE_TEXT = {
    "rel": "error bound relative to the chunk's value range: eb_abs = eb * (max - min)",
    "abs": "absolute error bound: eb_abs = eb",
}

#: Codec ids of ``xla_ffi/format.h`` (``lc::Codec``); names in :data:`CODECS`.
Codec = _Described(
    "Codec", [(k.upper(), (v, _CODEC_TEXT[k])) for k, v in _F.CODECS.items()], module=__name__
)
#: Error-bound modes (``lc::Mode``).
Mode = _Described(
    "Mode", [(k.upper(), (v, _MODE_TEXT[k])) for k, v in _F.MODES.items()], module=__name__
)
#: Value dtype codes of the frame's flags byte (``lc::DType``).
DType = _Described("DType", [(k.upper(), (v, k)) for k, v in _F.DTYPES.items()], module=__name__)
#: Frame forms, the low nibble of byte 1 (``lc::Form``).
Form = enum.IntEnum("Form", dict(_F.FORMS), module=__name__)
#: Bits of the frame's flags byte besides the dtype (``lc::Flag``).
Flag = enum.IntEnum("Flag", dict(_F.FLAGS), module=__name__)
#: Per-frame status codes returned by :func:`jax_lossy_comm.frame_status` (``lc::Status``).
Status = _Described(
    "Status", [(name, (code, text)) for name, code, text in _F.STATUS], module=__name__
)

FORM_RAW, FORM_QUANT = int(Form.RAW), int(Form.QUANT)
FLAG_ABS, FLAG_DEDUP = int(Flag.ABS), int(Flag.DEDUP)
FLAG_CODES_HUFFMAN, FLAG_INDEX_HUFFMAN = int(Flag.CODES_HUFFMAN), int(Flag.INDEX_HUFFMAN)

#: Codec names accepted by :func:`jax_lossy_comm.compress`, with their handler ids
#: (:class:`Codec`; each member's ``description`` says what the codec writes).
CODECS = {m.name.lower(): int(m) for m in Codec}
MODES = {m.name.lower(): int(m) for m in Mode}
DTYPES = {np.dtype(m.description): int(m) for m in DType}
_DTYPE_BY_CODE = {v: k for k, v in DTYPES.items()}

#: Per-frame status codes returned by :func:`jax_lossy_comm.frame_status` (0 = valid), with
#: their descriptions (:class:`Status`).
STATUS = {int(s): s.description for s in Status}
STATUS_OK, STATUS_OVERFLOW = int(Status.OK), int(Status.OVERFLOW)


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


def rel_code_bits(min_error_bound: float, dtype=np.float32) -> int:
    """Bits of a quantization code in REL mode for relative bounds >= ``min_error_bound``.

    The largest code is ``range / (2 * eb_rel * range) = 1 / (2 eb_rel)`` (plus one for float
    rounding), so the width depends on the bound alone (Feng et al., SC24, sec. 4.1). 32 (no
    quantization) when that exceeds :data:`MAX_BITS` bits or the bound is not > 0. bfloat16 and
    float16 chunks quantize with a half step down to :data:`HALF_STEP_FLOOR` (63/128) times the
    bound (the decoder rounds to the half type), so their width is that of
    ``HALF_STEP_FLOOR * eb_rel``: about one bit more than float32's, which no quantizer can avoid
    (bfloat16 values ``1 + k/128``, k = 0..96, at REL 0.01 need 97 distinct codes; see
    ``xla_ffi/format.h``). With it no value of a REL bound >= 2**-11 is an outlier.

    >>> rel_code_bits(0.01), rel_code_bits(0.05), rel_code_bits(1e-9)
    (6, 4, 32)
    >>> rel_code_bits(0.01, "bfloat16"), rel_code_bits(0.05, "float16")
    (7, 5)
    """
    eb = float(min_error_bound)
    if np.dtype(dtype) != np.float32:
        eb *= HALF_STEP_FLOOR
    if not eb > 0:
        return 32
    m = 1.0 / (2.0 * eb)
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
      int: bytes per frame; the trailing dimension of ``compress``'s frames. Rounded up to a
      multiple of 16 (at most ``MAX_FRAME_BYTES``), so every frame of a batch starts 16-byte
      aligned and the CUDA codec reads it in 16-byte loads.

    Raises:
      ValueError: unknown codec or mode, a negative size in ``shape``, non-positive
        ``min_error_bound``, or ``codec="fixed"`` without a REL ``min_error_bound``.
      TypeError: ``dtype`` other than float32, bfloat16 or float16.
    """
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {sorted(CODECS)}, got {codec!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be 'rel' or 'abs', got {mode!r}")
    if len(shape) < 2:
        raise ValueError(f"shape must end with (rows, dim), got {tuple(shape)}")
    rows, dim = int(shape[-2]), int(shape[-1])
    if rows < 0 or dim < 0:
        raise ValueError(f"shape must have sizes >= 0, got {tuple(shape)}")
    if np.dtype(dtype) not in DTYPES:
        raise TypeError(f"dtype must be float32, bfloat16 or float16, got {np.dtype(dtype)}")
    check_chunk_size(rows, dim, dtype)
    cap = raw_frame_bytes(rows, dim, dtype)
    if min_error_bound is None or mode != "rel" or codec not in ("auto", "fixed"):
        if codec == "fixed":
            raise ValueError(
                "codec='fixed' needs min_error_bound in mode='rel' to size its frames "
                "statically (or pass capacity= explicitly)"
            )
    else:
        eb = check_min_error_bound(min_error_bound)
        fixed = fixed_frame_bytes(rows, dim, rel_code_bits(eb, dtype), dtype, outliers)
        cap = fixed if codec == "fixed" else min(cap, fixed)
    return min(-(-cap // 16) * 16, MAX_FRAME_BYTES)


class FrameInfo(NamedTuple):
    """Header fields of one frame (see ``xla_ffi/format.h``); ``None`` fields are absent."""

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
    eb_abs: float | None  # the stored half step: eb_abs for float32, lower for half types
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
                "abs" if flags & FLAG_ABS else "rel",
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
    """Human-readable text for each status code in ``status`` (any shape, flattened).

    >>> describe_status([0, 7, 42])
    ['ok', 'checksum mismatch', 'unknown status 42']
    """
    out = []
    for s in np.asarray(status).reshape(-1):
        code = int(s)
        out.append(Status(code).description if code in STATUS else f"unknown status {code}")
    return out
