"""Peer codecs for the side-by-side codec comparison (issue 6), behind one interface.

Every peer compresses one chunk `float32[rows, dim]` (a pooled-embedding block of the
all-to-all) given an absolute error bound `eb_abs`, and decompresses it back to float32.
Codecs that are not error-bounded (casts, FBGEMM quantized comm) ignore `eb_abs`; the
benchmark still measures their max error against it.

Peers are optional: each entry probes its package when `registry()` is called, and a missing
or broken package gives an entry with `available=False` and the reason, never an exception.
Importing this module needs only numpy and the standard library.

Peers (names as in `registry()`):
  zstd-1                 zstd level 1 on the raw float32 bytes (lossless baseline).
  quant-codes            error-bounded quantization without prediction, codes stored
                         fixed-rate (uint8, uint16 or uint32: the narrowest that holds them).
  quant-codes+zstd-1     the same codes + zstd level 1.
  quant-codes+zstd-19    the same codes + zstd level 19.
  sz3-default            SZ3 (pysz), ABS mode, default algorithm (interpolation+Lorenzo).
  sz3-nopred             SZ3 (pysz), ABS mode, szAlgorithm.NOPRED (quantization, Huffman,
                         zstd; no prediction).
  zfp-accuracy           ZFP (zfpy) fixed-accuracy mode, tolerance = eb_abs.
  fbgemm-fp16 / -bf16 / -int8-rowwise / -mx4 / -hfp8
                         TorchRec's quantized-comm codecs from fbgemm_gpu.quantize_comm
                         (QuantizedCommCodec; INT8 uses TorchRec's default row_dim 32; MX4
                         group 32, runs the python reference on CPU; HFP8 = FP8 e4m3 bias 15).
  jax-bf16 / jax-fp8-e4m3
                         jitted casts float32 -> bfloat16 / float8_e4m3fn -> float32 in JAX.

The quantization scheme (the paper's "quantization without prediction"):
  q = round((x - min) / (2 eb_abs));  x_hat = float32(q) * float32(2 eb_abs) + float32(min)
so |x - x_hat| <= eb_abs up to float32 rounding; the encoder recomputes x_hat exactly as the
decoder does and stores every value that still misses the bound (and every non-finite value)
as an outlier (index + raw float32), so the bound holds exactly, checked in float64.

References:
  Feng et al., SC24, arXiv 2407.04272, Sec. 3 (quantization without prediction + lossless).
  Liang et al., "SZ3: A Modular Framework for Composing Prediction-Based Error-Bounded Lossy
    Compressors", IEEE TBD 2022 (SZ3). Lindstrom, "Fixed-Rate Compressed Floating-Point
    Arrays", IEEE TVCG 2014 (ZFP). Yang et al., "Training Deep Learning Recommendation Model
    with Quantized Collective Communications", DLP-KDD 2020 (FBGEMM/TorchRec qcomm).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Shape = tuple[int, ...]


def _identity(x: Any) -> Any:
    return x


def _to_numpy(y: Any) -> np.ndarray:
    return np.asarray(y, dtype=np.float32)


def _len_bytes(blob: Any) -> int:
    return len(blob)


@dataclasses.dataclass(frozen=True)
class PeerCodec:
    """One codec in the comparison, with a uniform interface.

    Attributes:
      name: unique short name (table row label), e.g. `sz3-nopred`.
      family: group label: `lossless`, `quantization`, `sz3`, `zfp`, `fbgemm-qcomm`,
        `cast`, `jax_lossy_comm`.
      error_bounded: True if the codec promises |x - x_hat| <= eb_abs for every value.
      available: False when its package is missing or broken; then the callables are None.
      skip_reason: why it is unavailable ("" when available).
      package: distribution and version that implements it (e.g. `pysz 1.1.0`).
      compress: `(x_prepared, eb_abs: float) -> blob`; x_prepared is `prepare(x)`.
      decompress: `(blob, shape: tuple) -> y` in the codec's native container.
      nbytes: `(blob) -> int`, the bytes that would travel on the wire.
      prepare: `(x: np.ndarray float32[rows, dim]) -> x_prepared`, untimed (e.g. device_put,
        torch.from_numpy). Default identity.
      to_numpy: `(y) -> np.ndarray float32[rows, dim]`, untimed. Default np.asarray.
      notes: free text for the results (settings used).
    """

    name: str
    family: str
    error_bounded: bool
    available: bool
    skip_reason: str = ""
    package: str = ""
    compress: Callable[[Any, float], Any] | None = None
    decompress: Callable[[Any, Shape], Any] | None = None
    nbytes: Callable[[Any], int] = _len_bytes
    prepare: Callable[[np.ndarray], Any] = _identity
    to_numpy: Callable[[Any], np.ndarray] = _to_numpy
    notes: str = ""

    def roundtrip(self, x: np.ndarray, eb_abs: float) -> tuple[np.ndarray, int]:
        """Compress and decompress `x` (float32[rows, dim]) once.

        Returns:
          (x_hat float32[rows, dim], compressed size in bytes).

        Raises:
          RuntimeError: the codec is unavailable (with its skip_reason).
        """
        if not self.available:
            raise RuntimeError(f"peer {self.name} unavailable: {self.skip_reason}")
        xp = self.prepare(x)
        blob = self.compress(xp, eb_abs)
        y = self.to_numpy(self.decompress(blob, tuple(x.shape)))
        return np.asarray(y, dtype=np.float32).reshape(x.shape), int(self.nbytes(blob))


def unavailable(
    name: str, family: str, error_bounded: bool, reason: str, package: str = "", notes: str = ""
) -> PeerCodec:
    """An entry that is reported as skipped with `reason`."""
    return PeerCodec(
        name=name,
        family=family,
        error_bounded=error_bounded,
        available=False,
        skip_reason=reason,
        package=package,
        notes=notes,
    )


def _version(dist: str) -> str:
    try:
        return f"{dist} {importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return dist


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


# --------------------------------------------------------------------------------------------
# zstd on raw float32
# --------------------------------------------------------------------------------------------
def _zstd_raw_peers() -> list[PeerCodec]:
    try:
        import zstandard
    except Exception as e:  # noqa: BLE001 - any import failure means "skip"
        return [unavailable("zstd-1", "lossless", True, _reason(e), "zstandard")]
    cctx = zstandard.ZstdCompressor(level=1)  # threads=0: single thread
    dctx = zstandard.ZstdDecompressor()

    def compress(x: np.ndarray, eb_abs: float) -> bytes:
        del eb_abs
        return cctx.compress(np.ascontiguousarray(x, dtype=np.float32).data)

    def decompress(blob: bytes, shape: Shape) -> np.ndarray:
        return np.frombuffer(dctx.decompress(blob), dtype=np.float32).reshape(shape)

    return [
        PeerCodec(
            "zstd-1",
            "lossless",
            True,
            True,
            package=_version("zstandard"),
            compress=compress,
            decompress=decompress,
            notes="zstd level 1 on raw float32 bytes (lossless)",
        )
    ]


# --------------------------------------------------------------------------------------------
# Error-bounded quantization without prediction (+ zstd)
# --------------------------------------------------------------------------------------------
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


def quantize_encode(
    x: np.ndarray, eb_abs: float, *, level: int | None, zstd_module: Any = None
) -> bytes:
    """Error-bounded quantization without prediction; optional zstd on the codes.

    Args:
      x: float32[...], any shape (flattened in C order).
      eb_abs: absolute error bound (> 0 for lossy; 0 gives a lossless raw fallback).
      level: zstd level for the codes section, or None for fixed-rate codes.
      zstd_module: the imported `zstandard` module (required when level is not None).

    Returns:
      bytes of the blob (see the layout comment above); decode with `quantize_decode`.
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


def quantize_decode(blob: bytes, shape: Shape, *, zstd_module: Any = None) -> np.ndarray:
    """Inverse of `quantize_encode`: float32[shape].

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


def quantize_code_width(blob: bytes) -> int:
    """Bytes per quantization code in a `quantize_encode` blob (0: lossless fallback)."""
    return _QHDR.unpack_from(blob, 0)[1]


def quantize_outliers(blob: bytes) -> int:
    """Number of outliers stored raw in a `quantize_encode` blob."""
    return _QHDR.unpack_from(blob, 0)[6]


def _quant_peers() -> list[PeerCodec]:
    note = (
        "q = round((x-min)/(2 eb_abs)), narrowest uint that holds the codes "
        "(uint8 at REL >= ~0.002), outliers raw"
    )
    out = [
        PeerCodec(
            "quant-codes",
            "quantization",
            True,
            True,
            package="numpy " + np.__version__,
            compress=lambda x, eb: quantize_encode(x, eb, level=None),
            decompress=lambda b, s: quantize_decode(b, s),
            notes=note + "; fixed-rate codes, no lossless stage",
        )
    ]
    try:
        import zstandard
    except Exception as e:  # noqa: BLE001
        for lvl in (1, 19):
            out.append(
                unavailable(
                    f"quant-codes+zstd-{lvl}", "quantization", True, _reason(e), "zstandard"
                )
            )
        return out
    for lvl in (1, 19):
        out.append(
            PeerCodec(
                f"quant-codes+zstd-{lvl}",
                "quantization",
                True,
                True,
                package=_version("zstandard"),
                compress=(
                    lambda x, eb, _l=lvl: quantize_encode(x, eb, level=_l, zstd_module=zstandard)
                ),
                decompress=lambda b, s: quantize_decode(b, s, zstd_module=zstandard),
                notes=note + f"; zstd level {lvl} on the codes",
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# SZ3 through pysz
# --------------------------------------------------------------------------------------------
def _sz3_peers() -> list[PeerCodec]:
    names = (
        (
            "sz3-default",
            None,
            "SZ3 default algorithm (INTERP_LORENZO: SZ3 picks "
            "interpolation or Lorenzo per input), ABS mode, openmp off",
        ),
        (
            "sz3-nopred",
            "NOPRED",
            "SZ3 szAlgorithm.NOPRED (no prediction: quantization + "
            "Huffman + zstd), ABS mode, openmp off",
        ),
    )
    try:
        from pysz import sz, szAlgorithm, szConfig, szErrorBoundMode
    except Exception as e:  # noqa: BLE001
        return [unavailable(n, "sz3", True, _reason(e), "pysz") for n, _, _ in names]
    out = []
    for name, algo, note in names:

        def compress(x: np.ndarray, eb_abs: float, _algo=algo) -> np.ndarray:
            conf = szConfig()
            conf.errorBoundMode = szErrorBoundMode.ABS
            conf.absErrorBound = float(eb_abs)
            if _algo is not None:
                conf.cmprAlgo = getattr(szAlgorithm, _algo)
            conf.openmp = False
            blob, _ = sz.compress(np.ascontiguousarray(x, dtype=np.float32), conf)
            return blob

        def decompress(blob: np.ndarray, shape: Shape) -> np.ndarray:
            y, _ = sz.decompress(blob, np.float32, tuple(shape))
            return y

        out.append(
            PeerCodec(
                name,
                "sz3",
                True,
                True,
                package=_version("pysz"),
                compress=compress,
                decompress=decompress,
                nbytes=lambda b: int(b.nbytes),
                notes=note,
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# ZFP through zfpy
# --------------------------------------------------------------------------------------------
def _zfp_peers() -> list[PeerCodec]:
    try:
        import zfpy
    except Exception as e:  # noqa: BLE001
        return [unavailable("zfp-accuracy", "zfp", True, _reason(e), "zfpy")]

    def compress(x: np.ndarray, eb_abs: float) -> bytes:
        return zfpy.compress_numpy(
            np.ascontiguousarray(x, dtype=np.float32), tolerance=float(eb_abs)
        )

    def decompress(blob: bytes, shape: Shape) -> np.ndarray:
        return zfpy.decompress_numpy(blob).reshape(shape)

    return [
        PeerCodec(
            "zfp-accuracy",
            "zfp",
            True,
            True,
            package=_version("zfpy"),
            compress=compress,
            decompress=decompress,
            notes="ZFP fixed-accuracy, tolerance = eb_abs, 2-D [rows, dim], "
            "header included, serial",
        )
    ]


# --------------------------------------------------------------------------------------------
# FBGEMM / TorchRec quantized-comm codecs
# --------------------------------------------------------------------------------------------
_FBGEMM_NAMES = (
    ("fbgemm-fp16", "FP16", "fp32_to_fp16_with_clamp"),
    ("fbgemm-bf16", "BF16", "fp32_to_bf16_with_clamp"),
    (
        "fbgemm-int8-rowwise",
        "INT8",
        "FloatToFused8BitRowwiseQuantized, row_dim 32 "
        "(TorchRec default): uint8 codes + fp32 scale and bias per 32 values",
    ),
    ("fbgemm-mx4", "MX4", "fp32_to_mx4, group 32, RoundingMode.even (python reference on CPU)"),
    (
        "fbgemm-hfp8",
        "HFP8",
        "fp32_to_hfp8_with_clamp(ebits 4, mbits 3, bias 15), "
        "TorchRec FP8 without row_dim (the row-wise FP8 op is GPU only)",
    ),
)


def _fbgemm_peers() -> list[PeerCodec]:
    try:
        import fbgemm_gpu  # noqa: F401 - registers torch.ops.fbgemm
        import torch
        from fbgemm_gpu.quantize_comm import QuantizedCommCodec
        from fbgemm_gpu.quantize_utils import fp32_to_hfp8_with_clamp, hfp8_to_fp32
        from fbgemm_gpu.split_embedding_configs import SparseType
    except Exception as e:  # noqa: BLE001 - missing, or an ABI mismatch with torch
        return [
            unavailable(n, "fbgemm-qcomm", False, _reason(e), "fbgemm-gpu-cpu", note)
            for n, _, note in _FBGEMM_NAMES
        ]
    pkg = f"{_version('fbgemm-gpu-cpu')}, {_version('torch')}"
    out = []

    def prepare(x: np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))

    def to_numpy(y):
        return y.float().numpy()

    def tensor_nbytes(blob) -> int:
        q = blob[0] if isinstance(blob, tuple) else blob
        return int(q.numel() * q.element_size())

    for name, prec, note in _FBGEMM_NAMES:
        if prec == "HFP8":
            out.append(
                PeerCodec(
                    name,
                    "fbgemm-qcomm",
                    False,
                    True,
                    package=pkg,
                    compress=lambda t, eb: fp32_to_hfp8_with_clamp(t, 4, 3, 15),
                    decompress=lambda q, s: hfp8_to_fp32(q, 4, 15).view(s),
                    nbytes=tensor_nbytes,
                    prepare=prepare,
                    to_numpy=to_numpy,
                    notes=note,
                )
            )
            continue
        codec = QuantizedCommCodec(getattr(SparseType, prec))

        def compress(t, eb_abs, _c=codec):
            del eb_abs
            ctx = _c.create_context()
            return _c.encode(t.view(-1), ctx), ctx

        def decompress(blob, shape, _c=codec):
            q, ctx = blob
            return _c.decode(q, ctx).view(shape)

        out.append(
            PeerCodec(
                name,
                "fbgemm-qcomm",
                False,
                True,
                package=pkg,
                compress=compress,
                decompress=decompress,
                nbytes=tensor_nbytes,
                prepare=prepare,
                to_numpy=to_numpy,
                notes=note,
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# JAX casts (jitted) and a helper for JAX-native codecs (the library's codec plugs in here)
# --------------------------------------------------------------------------------------------
def jax_codec(
    name: str,
    family: str,
    error_bounded: bool,
    compress_fn: Callable[..., Any],
    decompress_fn: Callable[..., Any],
    *,
    nbytes: Callable[[Any], int],
    package: str = "",
    notes: str = "",
    eb_traced: bool = True,
) -> PeerCodec:
    """Wrap jittable JAX functions as a PeerCodec.

    Args:
      compress_fn: `(x: f32[rows, dim], eb_abs: f32[]) -> blob pytree` if `eb_traced`, else
        `(x) -> blob`. Jitted here; eb_abs is passed as a traced float32 scalar so changing
        the bound does not recompile.
      decompress_fn: `(blob) -> f32[rows, dim]`; the shape must be static inside, so it is
        called as `decompress_fn(blob, shape)` with `shape` static under jit.
      nbytes: `(blob) -> int` bytes on the wire (e.g. the sum of the int32 byte counts).

    The input is moved to the device by `prepare` (untimed); outputs are awaited with
    `block_until_ready` by the timing helper.
    """
    import jax
    import jax.numpy as jnp

    if eb_traced:
        cfn = jax.jit(compress_fn)
        compress = lambda x, eb: cfn(x, jnp.float32(eb))  # noqa: E731
    else:
        cfn = jax.jit(compress_fn)
        compress = lambda x, eb: cfn(x)  # noqa: E731
    dfn = jax.jit(decompress_fn, static_argnums=1)
    return PeerCodec(
        name,
        family,
        error_bounded,
        True,
        package=package,
        compress=compress,
        decompress=lambda b, s: dfn(b, tuple(s)),
        nbytes=nbytes,
        prepare=lambda x: jax.device_put(np.asarray(x)),
        to_numpy=lambda y: np.asarray(jax.device_get(y), dtype=np.float32),
        notes=notes,
    )


def _jax_cast_peers() -> list[PeerCodec]:
    names = (("jax-bf16", "bfloat16"), ("jax-fp8-e4m3", "float8_e4m3fn"))
    try:
        import jax.numpy as jnp
    except Exception as e:  # noqa: BLE001
        return [unavailable(n, "cast", False, _reason(e), "jax") for n, _ in names]
    out = []
    for name, dt in names:
        try:
            dtype = getattr(jnp, dt)
        except AttributeError as e:
            out.append(unavailable(name, "cast", False, _reason(e), _version("jax")))
            continue
        out.append(
            jax_codec(
                name,
                "cast",
                False,
                lambda x, _d=dtype: x.astype(_d),
                lambda y, shape: y.astype(jnp.float32).reshape(shape),
                nbytes=lambda b: int(b.size * b.dtype.itemsize),
                package=f"{_version('jax')}, {_version('jaxlib')}",
                eb_traced=False,
                notes=f"jit(x.astype({dt})) and back to float32 (round to nearest even)",
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------
_FACTORIES: tuple[Callable[[], list[PeerCodec]], ...] = (
    _zstd_raw_peers,
    _quant_peers,
    _sz3_peers,
    _zfp_peers,
    _fbgemm_peers,
    _jax_cast_peers,
)


def registry(names: Sequence[str] | None = None) -> list[PeerCodec]:
    """All peer codecs, available or not (unavailable ones carry `skip_reason`).

    Each family's package is imported here (not at module import), inside a guard: a missing
    or broken package yields `available=False` entries, never an exception.

    Args:
      names: keep only these names (in registry order); None keeps all.

    Returns:
      list of PeerCodec in a fixed order: lossless, quantization, SZ3, ZFP, FBGEMM, casts.
    """
    out: list[PeerCodec] = []
    for factory in _FACTORIES:
        try:
            out.extend(factory())
        except Exception as e:  # noqa: BLE001 - a factory bug must not hide the others
            out.append(unavailable(factory.__name__.strip("_"), "unknown", False, _reason(e)))
    if names is not None:
        wanted = set(names)
        out = [c for c in out if c.name in wanted]
    return out


def available(codecs: Sequence[PeerCodec] | None = None) -> list[PeerCodec]:
    """The available entries of `codecs` (default: the whole registry)."""
    return [c for c in (registry() if codecs is None else codecs) if c.available]
