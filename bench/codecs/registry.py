"""The one codec registry of the benchmarks: jax_lossy_comm beside its peers, one interface.

Every entry compresses one input `float32[..., rows, dim]` (a pooled-embedding chunk of the
all-to-all, or a batch of them) given an absolute error bound `eb_abs`, and decompresses it
back to float32. Codecs that are not error-bounded (casts, FBGEMM quantized comm, the copy)
ignore `eb_abs`; the benchmark still measures their max error against it.

Entries are optional: each family's package is probed when `registry()` is called, and a
missing or broken package gives an entry with `available=False` and the reason, never an
exception. Importing this module needs only numpy and the standard library. The entry type is
`codec_entry.Codec`; `peer_codecs` makes the peers' entries, `jax_codecs` the JAX casts', the
library's baselines' (`JAX_QCOMM`) and the library's (`library_codecs`).

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

from collections.abc import Callable, Sequence

from bench.codecs.codec_entry import Codec, import_reason, unavailable
from bench.codecs.jax_codecs import jax_cast_peers, jax_qcomm_peers, library_codecs
from bench.codecs.peer_codecs import (
    fbgemm_peers,
    memcpy_peers,
    quant_peers,
    sz3_peers,
    zfp_peers,
    zstd_raw_peers,
)

# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------
_FACTORIES: tuple[Callable[[], list[Codec]], ...] = (
    zstd_raw_peers,
    quant_peers,
    sz3_peers,
    zfp_peers,
    fbgemm_peers,
    jax_cast_peers,
    jax_qcomm_peers,
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
    factories = (*_FACTORIES, lambda: library_codecs(capacity=library_capacity), memcpy_peers)
    out: list[Codec] = []
    for factory in factories:
        try:
            out.extend(factory())
        except Exception as e:  # noqa: BLE001 - a factory bug must not hide the others
            out.append(unavailable(factory.__name__.strip("_"), "unknown", False, import_reason(e)))
    return out if wanted is None else [c for c in out if c.name in wanted]


def available(codecs: Sequence[Codec] | None = None) -> list[Codec]:
    """The available entries of `codecs` (default: the whole registry)."""
    return [c for c in (registry() if codecs is None else codecs) if c.available]
