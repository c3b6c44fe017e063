"""Quantized-communication baselines of TorchRec/FBGEMM for the embedding all-to-all, in JAX.

Two :class:`jax_lossy_comm.CommCodec` objects, the codecs TorchRec uses to shrink the same
exchange (``QCommsConfig`` with ``fbgemm_gpu.quantize_comm.QuantizedCommCodec``), run through
the same :func:`jax_lossy_comm.compressed_all_to_all` as the library's error-bounded frames
(``ExchangeConfig(forward=Int8Rowwise())``). They are baselines for the benchmarks
(bench/train_compare.py, bench/netns_bench.py); they make no error-bound promise.

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
  Bytes on the wire: 40 per 32 float32 values (3.2x smaller).
* :class:`BF16` -- ``SparseType.BF16``: ``fp32_to_bf16_with_clamp`` (clamp to the finite
  bfloat16 range, round to nearest even), exchange bfloat16, cast back (2x smaller).

The payload is grouped per destination peer (``per_table = False``): a row of ``row_dim``
values never straddles two peers (each peer's block is flattened in C order, as TorchRec
flattens each rank's buffer); the block size must be a multiple of ``row_dim`` (TorchRec
asserts the same).

References:
  J. Yang et al., "Training Deep Learning Recommendation Model with Quantized Collective
  Communications", DLP-KDD 2020. FBGEMM: ``fbgemm_gpu/quantize_comm.py``,
  ``src/QuantUtils.cc`` (``FloatToFused8BitRowwiseQuantizedSBFloatRef``). TorchRec:
  ``torchrec/distributed/fbgemm_qcomm_codec.py``.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

#: TorchRec's default INT8 row length (``fbgemm_gpu.quantize_comm.ROW_DIM_DEFAULT``).
ROW_DIM_DEFAULT = 32
#: FBGEMM's epsilon in ``255 / (range + eps)`` (QuantUtils.cc, ``kEpsilon``).
INT8_EPSILON = 1e-8
#: Bytes of scale + bias (two float32) appended to each INT8 row.
INT8_SCALE_BIAS_BYTES = 8
_BF16 = jnp.finfo(jnp.bfloat16)


def int8_row_bytes(row_dim: int = ROW_DIM_DEFAULT) -> int:
    """Wire bytes of one INT8 row of ``row_dim`` values: ``ceil4(row_dim) + 8``."""
    return (int(row_dim) + 3) // 4 * 4 + INT8_SCALE_BIAS_BYTES


# ------------------------------------------------------------------------------------- codecs
def int8_rowwise_quantize(x, row_dim: int = ROW_DIM_DEFAULT):
    """FBGEMM ``FloatToFused8BitRowwiseQuantized`` of ``x[..., n]`` in rows of ``row_dim``.

    Args:
      x: ``float32 | bfloat16 | float16 [..., n]``, ``n % row_dim == 0``.
      row_dim: values per row (static).

    Returns:
      ``uint8[..., n // row_dim, ceil4(row_dim) + 8]``: codes, zero padding, then scale and bias
      as little-endian float32 bytes (FBGEMM's fused row layout).

    Raises:
      ValueError: ``n`` not a multiple of ``row_dim``, or ``row_dim < 1``.
    """
    x = jnp.asarray(x)
    n = x.shape[-1]
    if row_dim < 1 or n % row_dim:
        raise ValueError(f"last axis {n} is not a multiple of row_dim={row_dim}")
    r = x.astype(jnp.float32).reshape(x.shape[:-1] + (n // row_dim, row_dim))
    lo = jnp.min(r, axis=-1, keepdims=True)
    hi = jnp.max(r, axis=-1, keepdims=True)
    rng = hi - lo
    scale = rng / jnp.float32(255.0)
    inv = jnp.float32(255.0) / (rng + jnp.float32(INT8_EPSILON))
    q = jnp.clip(jnp.rint((r - lo) * inv), 0, 255).astype(jnp.uint8)
    pad = (row_dim + 3) // 4 * 4 - row_dim
    if pad:
        q = jnp.concatenate([q, jnp.zeros(q.shape[:-1] + (pad,), jnp.uint8)], axis=-1)
    sb = jnp.concatenate([scale, lo], axis=-1)  # float32[..., g, 2]
    sb = jax.lax.bitcast_convert_type(sb, jnp.uint8)  # uint8[..., g, 2, 4]
    sb = sb.reshape(sb.shape[:-2] + (INT8_SCALE_BIAS_BYTES,))
    return jnp.concatenate([q, sb], axis=-1)


def int8_rowwise_dequantize(packed, row_dim: int = ROW_DIM_DEFAULT, dtype=jnp.float32):
    """Inverse of :func:`int8_rowwise_quantize` (FBGEMM ``Fused8BitRowwiseQuantizedToFloat``).

    Args:
      packed: ``uint8[..., g, ceil4(row_dim) + 8]``.
      row_dim: values per row (static).
      dtype: output dtype.

    Returns:
      ``dtype[..., g * row_dim]``: ``q * scale + bias`` computed in float32.

    Raises:
      ValueError: the last axis is not ``ceil4(row_dim) + 8``.
    """
    w = int8_row_bytes(row_dim)
    if packed.shape[-1] != w:
        raise ValueError(f"packed rows have {packed.shape[-1]} bytes, row_dim={row_dim} needs {w}")
    q = packed[..., :row_dim].astype(jnp.float32)
    sb = packed[..., w - INT8_SCALE_BIAS_BYTES :]
    sb = jax.lax.bitcast_convert_type(sb.reshape(sb.shape[:-1] + (2, 4)), jnp.float32)
    y = q * sb[..., 0:1] + sb[..., 1:2]
    return y.reshape(y.shape[:-2] + (y.shape[-2] * row_dim,)).astype(dtype)


def bf16_encode(x):
    """FBGEMM ``fp32_to_bf16_with_clamp``: clamp to +-bfloat16 max, round to nearest even."""
    x = jnp.asarray(x)
    return jnp.clip(x.astype(jnp.float32), float(_BF16.min), float(_BF16.max)).astype(jnp.bfloat16)


# ------------------------------------------------------------------------------ codec objects
def _fixed_size(wire, chunks):
    """``(wire, nbytes)``: every chunk of the grid takes the same bytes."""
    per_chunk = wire.size * wire.dtype.itemsize // chunks.shape[0]
    return wire, jnp.full(chunks.shape[:1], per_chunk, jnp.int32)


@dataclasses.dataclass(frozen=True)
class Int8Rowwise:
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

    per_table = False
    variable_size = False
    error_bounded = False

    def __post_init__(self):
        if not isinstance(self.row_dim, (int, np.integer)) or self.row_dim < 1:
            raise ValueError(f"Int8Rowwise.row_dim must be an int >= 1, got {self.row_dim!r}")

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
class BF16:
    """TorchRec/FBGEMM BF16 communication as a :class:`CommCodec`.

    FBGEMM ``fp32_to_bf16_with_clamp`` (clamp to the finite bfloat16 range, round to nearest
    even), exchange ``bfloat16``, cast back to the input dtype. Relative error <= 2^-9 per
    value (values beyond the bfloat16 range are clamped); no bound is enforced,
    ``error_bound`` is ignored.

    Examples:
      >>> import numpy as np
      >>> from jax_lossy_comm import BF16
      >>> BF16().capacity_bytes((16, 64), np.float32, dense=True)  # 2 bytes per value
      2048
      >>> wire, nbytes = BF16().encode(np.full((2, 1, 2), 1.00390625, np.float32), None, 4)
      >>> str(wire.dtype), nbytes.tolist()
      ('bfloat16', [4, 4])
      >>> BF16().decode(wire, nbytes, shape=(1, 2), dtype=np.float32).tolist()  # ties to even
      [[[1.0, 1.0]], [[1.0, 1.0]]]

    References:
      Yang et al., DLP-KDD 2020; FBGEMM ``quantize_utils.fp32_to_bf16_with_clamp``.
    """

    per_table = False
    variable_size = False
    error_bounded = False

    def capacity_bytes(self, chunk_shape, dtype, *, dense: bool = True, error_bound=None) -> int:
        """Wire bytes of one peer's block: 2 per value."""
        del dtype, dense, error_bound
        return 2 * math.prod(chunk_shape)

    def encode(self, chunks, error_bound, capacity: int):
        """``float[P, rows, dim]`` -> ``(bfloat16[P, rows, dim], nbytes int32[P])``."""
        del error_bound, capacity
        return _fixed_size(bf16_encode(chunks), chunks)

    def decode(self, wire, nbytes, *, shape, dtype):
        """``bfloat16[P, rows, dim]`` -> ``dtype[P, rows, dim]``."""
        del nbytes
        return wire.astype(dtype).reshape((wire.shape[0],) + tuple(shape))
