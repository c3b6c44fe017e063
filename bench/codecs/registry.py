"""The one codec registry of the benchmarks: jax_lossy_comm beside its peers, one interface.

Every entry compresses one input `float32[..., rows, dim]` (a pooled-embedding chunk of the
all-to-all, or a batch of them) given an absolute error bound `eb_abs`, and decompresses it
back to float32. Codecs that are not error-bounded (casts, FBGEMM quantized comm, the copy)
ignore `eb_abs`; the benchmark still measures their max error against it.

Entries are optional: each family's package is probed when `registry()` is called, and a
missing or broken package gives an entry with `available=False` and the reason, never an
exception. Importing this module needs only numpy and the standard library.

Entries (names as in `registry()`):
  zstd-1                 zstd level 1 on the raw float32 bytes (lossless baseline).
  quant-codes            error-bounded quantization without prediction (bench/codecs/quant_codes.py),
                         codes stored fixed-rate (uint8, uint16 or uint32: the narrowest).
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
  jax-qcomm-int8-rowwise / -bf16 / -fp16 / -fp8-rowwise / -mx4
                         jax_lossy_comm's JAX versions of TorchRec's quantized-comm codecs
                         (`jax_lossy_comm.qcomm`: Int8Rowwise, BF16, FP16, FP8Rowwise, MX4),
                         jitted, the whole input as one peer's block.
  jlc-auto / -fixed / -dedup / -entropy
                         jax_lossy_comm's codec (`compress(codec=...)`, REL mode, jitted), the
                         library's one adapter (`library_codecs`).
  memcpy                 a numpy copy of the buffer (the speed of light of this machine).

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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench.codecs import quant_codes

Shape = tuple[int, ...]


def _identity(x: Any) -> Any:
    return x


def _to_numpy(y: Any) -> np.ndarray:
    return np.asarray(y, dtype=np.float32)


def _len_bytes(blob: Any) -> int:
    return len(blob)


@dataclasses.dataclass(frozen=True)
class Codec:
    """One codec of the benchmarks, with a uniform interface.

    Attributes:
      name: unique short name (table row label), e.g. `sz3-nopred`.
      family: group label: `lossless`, `quantization`, `sz3`, `zfp`, `fbgemm-qcomm`,
        `cast`, `jax_lossy_comm`, `copy`.
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
            raise RuntimeError(f"codec {self.name} unavailable: {self.skip_reason}")
        xp = self.prepare(x)
        blob = self.compress(xp, eb_abs)
        y = self.to_numpy(self.decompress(blob, tuple(x.shape)))
        return np.asarray(y, dtype=np.float32).reshape(x.shape), int(self.nbytes(blob))


def unavailable(
    name: str, family: str, error_bounded: bool, reason: str, package: str = "", notes: str = ""
) -> Codec:
    """An entry that is reported as skipped with `reason`."""
    return Codec(
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
def _zstd_raw_peers() -> list[Codec]:
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
        Codec(
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
# Error-bounded quantization without prediction (+ zstd): bench/codecs/quant_codes.py
# --------------------------------------------------------------------------------------------
def _quant_peers() -> list[Codec]:
    note = (
        "q = round((x-min)/(2 eb_abs)), narrowest uint that holds the codes "
        "(uint8 at REL >= ~0.002), outliers raw"
    )
    out = [
        Codec(
            "quant-codes",
            "quantization",
            True,
            True,
            package="numpy " + np.__version__,
            compress=lambda x, eb: quant_codes.encode(x, eb, level=None),
            decompress=lambda b, s: quant_codes.decode(b, s),
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
            Codec(
                f"quant-codes+zstd-{lvl}",
                "quantization",
                True,
                True,
                package=_version("zstandard"),
                compress=(
                    lambda x, eb, _l=lvl: quant_codes.encode(x, eb, level=_l, zstd_module=zstandard)
                ),
                decompress=lambda b, s: quant_codes.decode(b, s, zstd_module=zstandard),
                notes=note + f"; zstd level {lvl} on the codes",
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# SZ3 through pysz
# --------------------------------------------------------------------------------------------
def _sz3_peers() -> list[Codec]:
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
            Codec(
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
def _zfp_peers() -> list[Codec]:
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
        Codec(
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


def _fbgemm_peers() -> list[Codec]:
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

    def qcomm(prec: str):
        """(compress, decompress) of one precision."""
        if prec == "HFP8":
            return (
                lambda t, eb: fp32_to_hfp8_with_clamp(t, 4, 3, 15),
                lambda q, s: hfp8_to_fp32(q, 4, 15).view(s),
            )
        codec = QuantizedCommCodec(getattr(SparseType, prec))

        def compress(t, eb_abs):
            del eb_abs
            ctx = codec.create_context()
            return codec.encode(t.view(-1), ctx), ctx

        def decompress(blob, shape):
            q, ctx = blob
            return codec.decode(q, ctx).view(shape)

        return compress, decompress

    for name, prec, note in _FBGEMM_NAMES:
        compress, decompress = qcomm(prec)
        out.append(
            Codec(
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
# JAX casts (jitted) and a helper for any jittable JAX codec
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
) -> Codec:
    """Wrap jittable JAX functions as a Codec (the casts use it).

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
    return Codec(
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


def _jax_cast_peers() -> list[Codec]:
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


#: jax_lossy_comm's TorchRec/FBGEMM baselines: entry name -> their name in the library's codec
#: factory (``jax_lossy_comm.get_comm_codec``, ``codec_factory.BASELINES``; written out here
#: so that importing this module needs no JAX).
JAX_QCOMM = {f"jax-qcomm-{n}": n for n in ("int8-rowwise", "bf16", "fp16", "fp8-rowwise", "mx4")}


def _jax_qcomm_peers() -> list[Codec]:
    """The library's quantized-comm baselines (``jax_lossy_comm.CommCodec`` objects), each
    input ``[rows, dim]`` coded as one peer's block (``encode`` of ``[1, rows, dim]``)."""
    try:
        import jax_lossy_comm as jlc
    except Exception as e:  # noqa: BLE001
        return [unavailable(n, "jax-qcomm", False, _reason(e)) for n in JAX_QCOMM]
    out = []
    for name, precision in JAX_QCOMM.items():
        codec = jlc.get_comm_codec(precision)
        out.append(
            jax_codec(
                name,
                "jax-qcomm",
                False,
                lambda x, _c=codec: _c.encode(x[None], None, 0)[0],
                lambda w, shape, _c=codec: _c.decode(w, None, shape=shape, dtype=np.float32)[0],
                nbytes=lambda b: int(b.size * b.dtype.itemsize),
                package=_version("jax_lossy_comm"),
                eb_traced=False,
                notes=f"jax_lossy_comm.{type(codec).__name__}() (TorchRec/FBGEMM definition), jitted",
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# Baseline: a numpy copy
# --------------------------------------------------------------------------------------------
def _memcpy() -> list[Codec]:
    return [
        Codec(
            "memcpy",
            "copy",
            False,
            True,
            package="numpy " + np.__version__,
            compress=lambda x, _eb: x.copy(),
            decompress=lambda b, _s: b.copy(),
            nbytes=lambda b: int(b.nbytes),
            notes="numpy copy of the buffer",
        )
    ]


# --------------------------------------------------------------------------------------------
# The library: jax_lossy_comm's codec, one adapter
# --------------------------------------------------------------------------------------------
#: Library codec forms benchmarked by default: the automatic choice, the fixed-rate codes
#: (static size, what the dense exchange sends), the dictionary of distinct code rows, and
#: dictionary + Huffman.
LIBRARY_FORMS = ("auto", "fixed", "dedup", "entropy")
#: How the library entries size the static frame capacity: "raw" = the raw frame size (always
#: fits), "bound" = sized by the error bound (the fixed-rate size for auto and fixed, as the
#: dense exchange sizes it from its ``min_error_bound``; raw for the other forms).
CAPACITIES = ("raw", "bound")


def rel_bound_within(x_min: float, x_max: float, eb_abs: float) -> float:
    """REL bound whose float32 `eb_abs` (as the library computes it) is <= `eb_abs`.

    The library computes, in float32, `range = max - min` and `eb_abs32 = eb_rel * range`
    (xla_ffi/quant.h, plan_quant). The harness checks `max |x - x_hat| <= eb_abs` in float64, so the
    REL bound passed is the largest float32 `eb_rel` with `float32(eb_rel * range) <= eb_abs`
    (it differs from `eb_abs / range` by at most a few float32 ulps).

    Returns:
      float eb_rel (0.0 for a constant input or a non-positive bound).
    """
    rng = np.float32(np.float32(x_max) - np.float32(x_min))
    if not (rng > 0) or not (eb_abs > 0):
        return 0.0
    r = np.float32(eb_abs / float(rng))
    while float(np.float32(r * rng)) > eb_abs:
        r = np.nextafter(r, np.float32(0))
    return float(r)


def library_codecs(forms: Sequence[str] = LIBRARY_FORMS, capacity: str = "raw") -> list[Codec]:
    """Entries for jax_lossy_comm's codec, one per `codec=` form, jitted, REL mode.

    Calls `jax_lossy_comm.compress(x, eb_rel, mode="rel", codec=form, capacity=...)` ->
    (frames uint8[..., capacity], nbytes int32[...]) and `jax_lossy_comm.decompress(frames,
    nbytes, shape=(rows, dim))`; each `[rows, dim]` of the input is one chunk, as the exchange
    calls it (a leading batch dimension gives a batch of chunks in one call). The harness's
    absolute bound is turned into the REL bound the library takes (`rel_bound_within`: never
    looser than eb_abs); it is a traced scalar on the device (no recompile per bound). The
    compress time includes the library's own range scan. Wire bytes are the sum of `|nbytes|`
    (what a variable-size exchange moves; the dense exchange moves the static capacity).

    Args:
      forms: names in `jax_lossy_comm.CODECS`.
      capacity: one of `CAPACITIES` (see there); "raw" is what peers.json was measured with,
        "bound" what codec.json was measured with.

    Returns:
      one entry per form, named `jlc-{form}`; if the library cannot be imported, one skipped
      entry per form with the reason.

    Raises:
      ValueError: `capacity` not in `CAPACITIES`.
    """
    if capacity not in CAPACITIES:
        raise ValueError(f"capacity must be one of {CAPACITIES}, got {capacity!r}")
    try:
        import jax
        import jax.numpy as jnp

        import jax_lossy_comm as jlc

        jlc.compress, jlc.decompress, jlc.frame_capacity  # noqa: B018 - the API must be there
    except Exception as e:  # noqa: BLE001
        return [unavailable(f"jlc-{f}", "jax_lossy_comm", True, _reason(e)) for f in forms]
    package = _version("jax_lossy_comm")

    def prepare(x: np.ndarray):
        fin = x[np.isfinite(x)]
        lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (0.0, 0.0)
        return jax.device_put(np.ascontiguousarray(x, dtype=np.float32)), lo, hi

    def nbytes(blob) -> int:
        return int(np.sum(np.abs(np.asarray(blob[1]))))

    def entry(form: str) -> Codec:
        def frame_bytes(shape: Shape, eb_rel: float) -> int:
            sized = capacity == "bound" and form in ("auto", "fixed") and eb_rel > 0
            if sized:
                return jlc.frame_capacity(shape, np.float32, form, eb_rel)
            return jlc.frame_capacity(shape, np.float32, "raw")

        cfn = jax.jit(
            lambda x, eb, cap: jlc.compress(x, eb, mode="rel", codec=form, capacity=cap),
            static_argnums=2,
        )
        dfn = jax.jit(
            lambda f, n, shape: jlc.decompress(f, n, shape=shape, dtype=jnp.float32),
            static_argnums=2,
        )
        bounds: dict[tuple, tuple[Any, int]] = {}  # (lo, hi, eb_abs, shape) -> (eb_rel, cap)

        def compress(xp, eb_abs):
            x, lo, hi = xp
            key = (lo, hi, eb_abs, x.shape)
            if key not in bounds:  # untimed after the warm-up: a device scalar, one capacity
                r = rel_bound_within(lo, hi, eb_abs)
                bounds[key] = (jax.device_put(np.float32(r)), frame_bytes(x.shape, r))
            eb, cap = bounds[key]
            return cfn(x, eb, cap)

        return Codec(
            f"jlc-{form}",
            "jax_lossy_comm",
            True,
            True,
            package=package,
            compress=compress,
            decompress=lambda b, s: dfn(b[0], b[1], tuple(s[-2:])),
            nbytes=nbytes,
            prepare=prepare,
            to_numpy=lambda y: np.asarray(jax.device_get(y), dtype=np.float32),
            notes=f"jax_lossy_comm.compress(codec={form!r}, mode='rel') under jit, one chunk "
            f"per [rows, dim], eb_rel traced, capacity {capacity}",
        )

    return [
        entry(f)
        if f in jlc.CODECS
        else unavailable(f"jlc-{f}", "jax_lossy_comm", True, f"unknown codec {f!r}", package)
        for f in forms
    ]


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------
_FACTORIES: tuple[Callable[[], list[Codec]], ...] = (
    _zstd_raw_peers,
    _quant_peers,
    _sz3_peers,
    _zfp_peers,
    _fbgemm_peers,
    _jax_cast_peers,
    _jax_qcomm_peers,
)


def registry(names: Sequence[str] | None = None, *, library_capacity: str = "raw") -> list[Codec]:
    """Every codec of the benchmarks, available or not (unavailable ones carry `skip_reason`).

    Each family's package is imported here (not at module import), inside a guard: a missing
    or broken package yields `available=False` entries, never an exception.

    Args:
      names: keep only these names (in registry order); None keeps all.
      library_capacity: how the library's entries size their frames (`CAPACITIES`).

    Returns:
      list of Codec in a fixed order: lossless, quantization, SZ3, ZFP, FBGEMM, casts, the
      library's quantized-comm baselines (`JAX_QCOMM`), the library's forms
      (`LIBRARY_FORMS`), memcpy.
    """
    wanted = None if names is None else set(names)
    factories = (*_FACTORIES, lambda: library_codecs(capacity=library_capacity), _memcpy)
    out: list[Codec] = []
    for factory in factories:
        try:
            out.extend(factory())
        except Exception as e:  # noqa: BLE001 - a factory bug must not hide the others
            out.append(unavailable(factory.__name__.strip("_"), "unknown", False, _reason(e)))
    return out if wanted is None else [c for c in out if c.name in wanted]


def available(codecs: Sequence[Codec] | None = None) -> list[Codec]:
    """The available entries of `codecs` (default: the whole registry)."""
    return [c for c in (registry() if codecs is None else codecs) if c.available]
