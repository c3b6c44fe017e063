"""The peer codecs of the registry that are not JAX: lossless zstd, the quantization peer
(``quant_codes``), SZ3, ZFP, TorchRec/FBGEMM's quantized comm and a numpy copy.

Each ``*_peers()`` returns its ``codec_entry.Codec`` entries (names in ``registry``'s
docstring), importing its package inside a guard: a missing or broken package gives
``unavailable`` entries with the reason, never an exception.
"""

from __future__ import annotations

import numpy as np

from bench.codecs import quant_codes
from bench.codecs.codec_entry import Codec, Shape, import_reason, package_version, unavailable


# --------------------------------------------------------------------------------------------
# zstd on raw float32
# --------------------------------------------------------------------------------------------
def zstd_raw_peers() -> list[Codec]:
    try:
        import zstandard
    except Exception as e:  # noqa: BLE001 - any import failure means "skip"
        return [unavailable("zstd-1", "lossless", True, import_reason(e), "zstandard")]
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
            package=package_version("zstandard"),
            compress=compress,
            decompress=decompress,
            notes="zstd level 1 on raw float32 bytes (lossless)",
        )
    ]


# --------------------------------------------------------------------------------------------
# Error-bounded quantization without prediction (+ zstd): bench/codecs/quant_codes.py
# --------------------------------------------------------------------------------------------
def quant_peers() -> list[Codec]:
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
                    f"quant-codes+zstd-{lvl}", "quantization", True, import_reason(e), "zstandard"
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
                package=package_version("zstandard"),
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
def sz3_peers() -> list[Codec]:
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
        return [unavailable(n, "sz3", True, import_reason(e), "pysz") for n, _, _ in names]
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
                package=package_version("pysz"),
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
def zfp_peers() -> list[Codec]:
    try:
        import zfpy
    except Exception as e:  # noqa: BLE001
        return [unavailable("zfp-accuracy", "zfp", True, import_reason(e), "zfpy")]

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
            package=package_version("zfpy"),
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


def fbgemm_peers() -> list[Codec]:
    try:
        import fbgemm_gpu  # noqa: F401 - registers torch.ops.fbgemm
        import torch
        from fbgemm_gpu.quantize_comm import QuantizedCommCodec
        from fbgemm_gpu.quantize_utils import fp32_to_hfp8_with_clamp, hfp8_to_fp32
        from fbgemm_gpu.split_embedding_configs import SparseType
    except Exception as e:  # noqa: BLE001 - missing, or an ABI mismatch with torch
        return [
            unavailable(n, "fbgemm-qcomm", False, import_reason(e), "fbgemm-gpu-cpu", note)
            for n, _, note in _FBGEMM_NAMES
        ]
    pkg = f"{package_version('fbgemm-gpu-cpu')}, {package_version('torch')}"
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
# Baseline: a numpy copy
# --------------------------------------------------------------------------------------------
def memcpy_peers() -> list[Codec]:
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
