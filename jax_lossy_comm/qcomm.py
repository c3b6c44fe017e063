"""Quantized-communication baselines of TorchRec/FBGEMM for the embedding all-to-all, in JAX.

Five :class:`jax_lossy_comm.CommCodec` objects, the precisions TorchRec offers to shrink the
same exchange (``QCommsConfig`` with ``fbgemm_gpu.quantize_comm.QuantizedCommCodec``), run
through the same :func:`jax_lossy_comm.compressed_all_to_all` as the library's error-bounded
frames (``ExchangeConfig(forward=Int8Rowwise())``). They are baselines for the benchmarks
(bench/training/train_compare.py, bench/testbed/netns_bench.py); they make no error-bound promise. Bytes per 32
float32 values (128 raw): FP16 and BF16 64, INT8 and FP8 row-wise 40, MX4 17.

* :class:`Int8Rowwise` -- ``SparseType.INT8``: FBGEMM's ``FloatToFused8BitRowwiseQuantized``
  on each peer's block viewed as rows of ``row_dim`` values (TorchRec's
  ``QuantizationContext.row_dim``, default 32). Per row::

      bias  = min(row)                                    (float32)
      scale = (max(row) - min(row)) / 255                 (float32)
      q     = lrint((x - bias) * (255 / (max - min + 1e-8)))   uint8, round half to even
      x_hat = q * scale + bias

  The wire row is ``ceil4(row_dim)`` uint8 codes followed by scale and bias as little-endian
  float32 (8 bytes): FBGEMM's ``Fused8BitRowwise`` layout (``calc_quantized_size``: ``ncols =
  (row_dim + 3) // 4 * 4 + 2 * 4``). Scale and bias are float32, not float16: TorchRec's qcomm
  INT8 calls ``FloatToFused8BitRowwiseQuantized`` (the SBFloat variant); the float16
  ``...SBHalf`` variant is FBGEMM's format for quantized *embedding tables*, not for comm.
* :class:`FP8Rowwise` -- ``SparseType.FP8`` with ``QCommsConfig.fp8_quantize_dim = row_dim``:
  FBGEMM's ``FloatToFP8RowwiseQuantized`` (CUDA only in FBGEMM). Per row of ``row_dim``::

      scale = max_pos / (1e-20 + max(1e-20, max |row|))   float32, NaN left out of the max
      code  = float_to_hfp8(x * scale)                    uint8, round half to even
      x_hat = hfp8_to_float(code) / scale

  Forward format 1-4-3 (4 exponent bits, bias 15, ``max_pos`` 0.9375: the row maximum lands on
  the largest code; gradual underflow down to 2^-17); TorchRec's backward default is 1-5-2
  (bias 31, ``max_pos`` 0.875; ``fmt="e5m2"``). The wire row is the INT8 layout: codes, zero
  padding to ``ceil4(row_dim)``, the scale and a 0.0 as little-endian float32 (FBGEMM leaves
  the padding bytes unset; ``calc_quantized_size`` counts FP8 row-wise as INT8).
* :class:`MX4` -- ``SparseType.MX4``: FBGEMM's ``fp32_to_mx4`` (OCP Microscaling FP4 E2M1
  with an E8M0 shared exponent per group of 32, ``RoundingMode.even``, TorchRec's default).
  Per group::

      e     = exponent field of (bits(max |group|) + 0x1FFFFF) - 127   (2^-126 for an all-zero
              group; "even" pre-rounding: a max whose mantissa is above 1.75 goes up one binade)
      s     = clip(e - 2, -127, 125)                       shared exponent, byte s + 127
      code  = E2M1(x / 2^s)    {0, .5, 1, 1.5, 2, 3, 4, 6} x sign, ties away from zero,
                               beyond 6 -> 6
      x_hat = value(code) * 2^s

  Two codes per byte (element ``2i`` in the low nibble, ``2i + 1`` in the high nibble), the 16
  packed bytes of a group followed by its exponent byte: 17 bytes per group, groups back to
  back (``calc_quantized_size``: ``n / 2 + n / 32``). A block whose size is not a multiple of
  32 is zero-padded at its end to whole groups (``py_quantize_mx4`` pads the last axis it is
  given; TorchRec pads each sample's ``dim_sum`` row instead, the same when it is a multiple of
  32 as in the DLRM presets here).
* :class:`FP16` -- ``SparseType.FP16``: ``fp32_to_fp16_with_clamp`` (clamp to +-65504, round
  to nearest even), exchange the ``float16`` bits as ``uint16``, cast back (2x smaller).
* :class:`BF16` -- ``SparseType.BF16``: ``fp32_to_bf16_with_clamp`` (clamp to the finite
  bfloat16 range, round to nearest even), exchange the bfloat16 bits as ``uint16``, cast back
  (2x smaller; a bfloat16 operand would cross XLA:CPU's collectives as float32).

The payload is grouped per destination peer (``per_table = False``): a row of ``row_dim``
values never straddles two peers (each peer's block is flattened in C order, as TorchRec
flattens each rank's buffer); for the row-wise codecs the block size must be a multiple of
``row_dim`` (TorchRec asserts the same).

Non-finite values follow FBGEMM's GPU kernels (the path TorchRec trains on): FP8 row-wise
leaves NaN out of the row maximum and encodes it as the largest positive code (it decodes to
the row's max magnitude); an Inf row maximum makes the scale 0 (``Inf * 0`` is a NaN), so
that row decodes to NaN with +Inf where the Inf was. MX4 leaves NaN out of the group maximum (``tl.max``) and encodes
NaN as +6, +-Inf as +-6 with the shared exponent 125 (the Inf group's finite values decode to
0). FBGEMM's CPU reference ``py_quantize_mx4`` differs on such groups (``torch.max``
propagates NaN and the group decodes to zeros) and takes ``floor(torch.log2(.))`` in float32,
which can land one binade higher when the pre-rounded maximum is a few ulps below a power of
two. Float32 subnormal inputs encode as their values say (integer arithmetic, independent of a
backend that flushes subnormals).

References:
  J. Yang et al., "Training Deep Learning Recommendation Model with Quantized Collective
  Communications", DLP-KDD 2020. OCP Microscaling Formats (MX) Specification v1.0, 2023.
  FBGEMM (pytorch/FBGEMM): ``fbgemm_gpu/fbgemm_gpu/quantize_comm.py`` (codecs, sizes,
  ``fp8 ebits, mbits, bias = 4, 3, 15``, ``MX_GROUP_SIZE_DEFAULT``),
  ``fbgemm_gpu/fbgemm_gpu/quantize_utils.py`` (``fp32_to_fp16_with_clamp``,
  ``fp32_to_bf16_with_clamp``, ``fp32_to_mx4``), ``fbgemm_gpu/src/quantize_ops/QuantUtils.cc``
  (``FloatToFused8BitRowwiseQuantizedSBFloatRef``),
  ``fbgemm_gpu/src/quantize_ops/quantize_fp8_rowwise.cu`` (``_get_FP8_qparam_cuda_kernel``,
  ``_compute_FP8_quantize_cuda_kernel``), ``fbgemm_gpu/include/fbgemm_gpu/quantize_ops_utils.h``
  (``float_to_hfp8``, ``hfp8_to_float``), ``fbgemm_gpu/fbgemm_gpu/triton/quantize.py``
  (``_kernel_quantize_mx4``) and ``fbgemm_gpu/fbgemm_gpu/triton/quantize_ref.py``
  (``py_quantize_mx4``, ``py_dequantize_mx4``). TorchRec (pytorch/torchrec):
  ``torchrec/distributed/fbgemm_qcomm_codec.py`` (``QCommsConfig``, ``get_qcomm_codecs``),
  ``torchrec/distributed/comm_ops.py`` (``All2All_Pooled_Req``: padding and split sizes).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from jax_lossy_comm.fbgemm_quant import (  # noqa: F401  (re-exported: qcomm.X keeps working)
    FP8_EPSILON,
    FP8_FORMATS,
    INT8_EPSILON,
    INT8_SCALE_BIAS_BYTES,
    MX4_E2M1_VALUES,
    MX4_GROUP_SIZE,
    ROW_DIM_DEFAULT,
    bf16_encode,
    clamped_cast,
    fp8_format,
    fp8_rowwise_dequantize,
    fp8_rowwise_quantize,
    fp16_encode,
    hfp8_encode,
    int8_row_bytes,
    int8_rowwise_dequantize,
    int8_rowwise_quantize,
    mx4_bytes,
    mx4_check_group,
    mx4_dequantize,
    mx4_quantize,
)


# ------------------------------------------------------------------------------ codec objects
def _fixed_size(wire, chunks):
    """``(wire, nbytes)``: every chunk of the grid takes the same bytes."""
    per_chunk = wire.size * wire.dtype.itemsize // chunks.shape[0]
    return wire, jnp.full(chunks.shape[:1], per_chunk, jnp.int32)


class _PerPeer:
    """What every TorchRec baseline shares: one chunk per peer, fixed size, no bound."""

    per_table = False
    variable_size = False
    error_bounded = False


class _Rowwise(_PerPeer):
    """Row-wise codecs in FBGEMM's fused row layout (INT8, FP8): ``row_dim`` checks, sizes."""

    def _check_row_dim(self):
        if not isinstance(self.row_dim, (int, np.integer)) or self.row_dim < 1:
            raise ValueError(
                f"{type(self).__name__}.row_dim must be an int >= 1, got {self.row_dim!r}"
            )

    def capacity_bytes(self, chunk_shape, dtype, *, dense: bool = True, error_bound=None) -> int:
        """Wire bytes of one peer's block: ``rows * (ceil4(row_dim) + 8)``."""
        del dtype, dense, error_bound
        n = math.prod(chunk_shape)
        if n % self.row_dim:
            raise ValueError(
                f"each peer's block has {n} values, not a multiple of "
                f"row_dim={self.row_dim} (TorchRec asserts the same)"
            )
        return n // self.row_dim * int8_row_bytes(self.row_dim)


@dataclasses.dataclass(frozen=True)
class Int8Rowwise(_Rowwise):
    """TorchRec/FBGEMM INT8 row-wise quantized communication as a :class:`CommCodec`.

    Each peer's block (C order) is cut into rows of ``row_dim`` values, quantized to uint8
    with a float32 scale and bias per row (module docstring), sent as ``uint8[P, rows,
    ceil4(row_dim) + 8]`` in one ``all_to_all`` and dequantized. The error is at most
    ``scale / 2 = (max - min) / 510`` of each row (plus float32 rounding); no bound is
    enforced, ``error_bound`` is ignored.

    Attributes:
      row_dim: values per quantization row (TorchRec default 32), >= 1.

    Raises:
      ValueError: ``row_dim < 1``; from ``capacity_bytes``, a block size that is not a
        multiple of ``row_dim``.

    Examples:
      >>> import numpy as np
      >>> from jax_lossy_comm import Int8Rowwise
      >>> c = Int8Rowwise()
      >>> c.capacity_bytes((16, 64), np.float32, dense=True)  # 32 rows x (32 + 8) bytes
      1280
      >>> wire, nbytes = c.encode(np.ones((2, 16, 64), np.float32), None, 1280)
      >>> wire.shape, nbytes.tolist()
      ((2, 32, 40), [1280, 1280])
      >>> float(c.decode(wire, nbytes, shape=(16, 64), dtype=np.float32).max())
      1.0

    References:
      Yang et al., DLP-KDD 2020; FBGEMM ``quantize_comm.py`` (``SparseType.INT8``).
    """

    row_dim: int = ROW_DIM_DEFAULT

    def __post_init__(self):
        self._check_row_dim()

    def encode(self, chunks, error_bound, capacity: int):
        """``float[P, rows, dim]`` -> ``(uint8[P, g, ceil4(row_dim) + 8], nbytes int32[P])``."""
        del error_bound, capacity
        wire = int8_rowwise_quantize(chunks.reshape(chunks.shape[0], -1), self.row_dim)
        return _fixed_size(wire, chunks)

    def decode(self, wire, nbytes, *, shape, dtype):
        """``uint8[P, g, ceil4(row_dim) + 8]`` -> ``dtype[P, rows, dim]``."""
        del nbytes
        y = int8_rowwise_dequantize(wire, self.row_dim, dtype)
        return y.reshape((wire.shape[0],) + tuple(shape))


@dataclasses.dataclass(frozen=True)
class FP8Rowwise(_Rowwise):
    """TorchRec/FBGEMM FP8 row-wise quantized communication as a :class:`CommCodec`.

    ``QCommsConfig(forward_precision=CommType.FP8, fp8_quantize_dim=row_dim)``: each peer's
    block (C order) is cut into rows of ``row_dim`` values, each row scaled so that its max
    magnitude lands on the largest FP8 code, sent as ``uint8[P, rows, ceil4(row_dim) + 8]``
    (codes, padding, float32 scale, 0.0; module docstring) in one ``all_to_all`` and decoded
    as ``hfp8_to_float(code) / scale``. 1-4-3 (``"e4m3"``, bias 15) keeps 4 significant bits:
    relative error <= 2^-4 per value above ``2^-14 / scale``, absolute error <= ``2^-18 /
    scale`` below (gradual underflow, then 0), ``1 / scale = (1e-20 + max(1e-20, max |row|)) /
    0.9375``: rows whose max is near or below 1e-20 are coarser. No bound is enforced,
    ``error_bound`` is ignored. TorchRec's default backward FP8 is ``fmt="e5m2"``. Rows whose
    max exceeds about 8e37 get a float32-subnormal scale; XLA:CPU flushes it to zero (such
    rows decode to NaN there, not on GPUs).

    Attributes:
      row_dim: values per row (TorchRec's ``fp8_quantize_dim``; 32 here, like INT8), >= 1.
      fmt: ``"e4m3"`` (1-4-3, bias 15, FBGEMM ``forward=True``) or ``"e5m2"`` (1-5-2, bias
        31).

    Raises:
      ValueError: ``row_dim < 1`` or an unknown ``fmt``; from ``capacity_bytes``, a block size
        that is not a multiple of ``row_dim``.

    Examples:
      >>> import numpy as np
      >>> from jax_lossy_comm import FP8Rowwise
      >>> c = FP8Rowwise()
      >>> c.capacity_bytes((16, 64), np.float32, dense=True)  # 32 rows x (32 + 8) bytes
      1280
      >>> x = np.linspace(-1.0, 2.0, 2 * 16 * 64, dtype=np.float32).reshape(2, 16, 64)
      >>> wire, nbytes = c.encode(x, None, 1280)
      >>> wire.shape, nbytes.tolist()
      ((2, 32, 40), [1280, 1280])
      >>> y = c.decode(wire, nbytes, shape=(16, 64), dtype=np.float32)
      >>> float(y.max()), bool(np.abs(y - x).max() <= 2.0 / 16)
      (2.0, True)

    References:
      FBGEMM ``quantize_comm.py`` (``SparseType.FP8`` with ``row_dim > 0``),
      ``quantize_fp8_rowwise.cu``; TorchRec ``fbgemm_qcomm_codec.py``.
    """

    row_dim: int = ROW_DIM_DEFAULT
    fmt: str = "e4m3"

    def __post_init__(self):
        self._check_row_dim()
        fp8_format(self.fmt)

    def encode(self, chunks, error_bound, capacity: int):
        """``float[P, rows, dim]`` -> ``(uint8[P, g, ceil4(row_dim) + 8], nbytes int32[P])``."""
        del error_bound, capacity
        x = chunks.reshape(chunks.shape[0], -1)
        return _fixed_size(fp8_rowwise_quantize(x, self.row_dim, self.fmt), chunks)

    def decode(self, wire, nbytes, *, shape, dtype):
        """``uint8[P, g, ceil4(row_dim) + 8]`` -> ``dtype[P, rows, dim]``."""
        del nbytes
        y = fp8_rowwise_dequantize(wire, self.row_dim, self.fmt, dtype)
        return y.reshape((wire.shape[0],) + tuple(shape))


@dataclasses.dataclass(frozen=True)
class MX4(_PerPeer):
    """TorchRec/FBGEMM MX4 (OCP MX FP4 E2M1, E8M0 shared exponent) as a :class:`CommCodec`.

    ``QCommsConfig(forward_precision=CommType.MX4)``: each peer's block (C order, zero-padded
    to whole groups) is cut into groups of ``group_size`` values sharing one power-of-two
    scale, each value a 4-bit E2M1 code (module docstring), sent as ``uint8[P, groups,
    group_size / 2 + 1]`` in one ``all_to_all`` and decoded. The error of a value is at most
    half a code step at its magnitude: ``2^(s - 2)`` below ``2^(s + 1)``, ``2^(s - 1)`` up to
    ``2^(s + 2)``, ``2^s`` up to ``6 * 2^s`` (``2^s``: between ``max |group| / 8`` and ``max
    |group| / 3.5``). No bound is enforced, ``error_bound`` is ignored.

    Attributes:
      group_size: values per shared exponent (TorchRec's ``mx4_quantize_dim``, default 32),
        even, >= 2.

    Raises:
      ValueError: ``group_size`` odd or < 2.

    Examples:
      >>> import numpy as np
      >>> from jax_lossy_comm import MX4
      >>> c = MX4()
      >>> c.capacity_bytes((16, 64), np.float32, dense=True)  # 32 groups x (16 + 1) bytes
      544
      >>> x = np.tile(np.float32([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, -4.0, 6.0]), 256)
      >>> wire, nbytes = c.encode(x.reshape(2, 16, 64), None, 544)
      >>> wire.shape, nbytes.tolist(), int(wire[0, 0, -1])  # exponent byte: 2^0
      ((2, 32, 17), [544, 544], 127)
      >>> y = c.decode(wire, nbytes, shape=(16, 64), dtype=np.float32)
      >>> bool((y.reshape(-1) == x).all())
      True

    References:
      OCP Microscaling Formats (MX) v1.0; FBGEMM ``quantize_comm.py`` (``SparseType.MX4``),
      ``triton/quantize.py``, ``triton/quantize_ref.py``; TorchRec ``fbgemm_qcomm_codec.py``.
    """

    group_size: int = MX4_GROUP_SIZE

    def __post_init__(self):
        mx4_check_group(self.group_size)

    def capacity_bytes(self, chunk_shape, dtype, *, dense: bool = True, error_bound=None) -> int:
        """Wire bytes of one peer's block: ``ceil(n / group_size) * (group_size / 2 + 1)``."""
        del dtype, dense, error_bound
        return mx4_bytes(math.prod(chunk_shape), self.group_size)

    def encode(self, chunks, error_bound, capacity: int):
        """``float[P, rows, dim]`` -> ``(uint8[P, groups, group_size / 2 + 1], nbytes int32[P])``."""
        del error_bound, capacity
        return _fixed_size(mx4_quantize(chunks.reshape(chunks.shape[0], -1), self.group_size),
                           chunks)  # fmt: skip

    def decode(self, wire, nbytes, *, shape, dtype):
        """``uint8[P, groups, group_size / 2 + 1]`` -> ``dtype[P, rows, dim]``."""
        del nbytes
        y = mx4_dequantize(wire, math.prod(shape), self.group_size, dtype)
        return y.reshape((wire.shape[0],) + tuple(shape))


class _Cast(_PerPeer):
    """Clamped casts (BF16, FP16): the 16-bit values travel as their bits (``uint16``), cast
    back on arrival.

    The wire is ``uint16``, not the float type: XLA:CPU widens bfloat16 collectives (the
    optimized HLO of an ``all_to_all`` or ``all_gather`` of bfloat16 has float32 operands,
    4 bytes per value; jax 0.10.2), and XLA may move a cast across a collective on GPUs
    (jax-ml/jax#23543). An integer bitcast keeps the 2 bytes per value that ``capacity_bytes``
    and the statistics count on every backend."""

    def capacity_bytes(self, chunk_shape, dtype, *, dense: bool = True, error_bound=None) -> int:
        """Wire bytes of one peer's block: 2 per value."""
        del dtype, dense, error_bound
        return 2 * math.prod(chunk_shape)

    def encode(self, chunks, error_bound, capacity: int):
        """``float[P, rows, dim]`` -> ``(uint16[P, rows, dim], nbytes int32[P])``: the bits of
        the 16-bit float values."""
        del error_bound, capacity
        bits = jax.lax.bitcast_convert_type(clamped_cast(chunks, self.wire_dtype), jnp.uint16)
        return _fixed_size(bits, chunks)

    def decode(self, wire, nbytes, *, shape, dtype):
        """``uint16[P, rows, dim]`` (the 16-bit float bits) -> ``dtype[P, rows, dim]``."""
        del nbytes
        values = jax.lax.bitcast_convert_type(jnp.asarray(wire, jnp.uint16), self.wire_dtype)
        return values.astype(dtype).reshape((wire.shape[0],) + tuple(shape))


@dataclasses.dataclass(frozen=True)
class BF16(_Cast):
    """TorchRec/FBGEMM BF16 communication as a :class:`CommCodec`.

    FBGEMM ``fp32_to_bf16_with_clamp`` (clamp to the finite bfloat16 range, round to nearest
    even), exchange its bits as ``uint16`` (2 bytes per value on every backend), cast back to
    the input dtype. Relative error <= 2^-9 per value (values beyond the bfloat16 range are
    clamped); no bound is enforced, ``error_bound`` is ignored.

    Examples:
      >>> import numpy as np
      >>> from jax_lossy_comm import BF16
      >>> BF16().capacity_bytes((16, 64), np.float32, dense=True)  # 2 bytes per value
      2048
      >>> wire, nbytes = BF16().encode(np.full((2, 1, 2), 1.00390625, np.float32), None, 4)
      >>> str(wire.dtype), nbytes.tolist()  # the bfloat16 bits
      ('uint16', [4, 4])
      >>> BF16().decode(wire, nbytes, shape=(1, 2), dtype=np.float32).tolist()  # ties to even
      [[[1.0, 1.0]], [[1.0, 1.0]]]

    References:
      Yang et al., DLP-KDD 2020; FBGEMM ``quantize_utils.fp32_to_bf16_with_clamp``.
    """

    wire_dtype = jnp.bfloat16


@dataclasses.dataclass(frozen=True)
class FP16(_Cast):
    """TorchRec/FBGEMM FP16 communication as a :class:`CommCodec`.

    FBGEMM ``fp32_to_fp16_with_clamp`` (clamp to +-65504, round to nearest even; float16
    subnormals below 2^-14, values below 2^-25 to 0), exchange its bits as ``uint16``, cast
    back to the input dtype. Relative error <= 2^-11 per value in the normal float16 range;
    no bound is enforced, ``error_bound`` is ignored. (TorchRec's optional ``forward_loss_scale``
    multiplies before the cast; not modelled.)

    Examples:
      >>> import numpy as np
      >>> from jax_lossy_comm import FP16
      >>> FP16().capacity_bytes((16, 64), np.float32, dense=True)  # 2 bytes per value
      2048
      >>> x = np.float32([[[1.0 + 2**-11, 7e4, -np.inf]]])
      >>> wire, nbytes = FP16().encode(x, None, 6)
      >>> str(wire.dtype), FP16().decode(wire, nbytes, shape=(1, 3), dtype=np.float32).tolist()
      ('uint16', [[[1.0, 65504.0, -65504.0]]])

    References:
      Yang et al., DLP-KDD 2020; FBGEMM ``quantize_utils.fp32_to_fp16_with_clamp``.
    """

    wire_dtype = jnp.float16
