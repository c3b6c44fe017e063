"""Quantized-communication baselines of TorchRec/FBGEMM for the embedding all-to-all, in JAX.

Two drop-ins for :func:`jax_lossy_comm.compressed_all_to_all` (same call, same return
conventions, :class:`jax_lossy_comm.ExchangeStats`) that implement the codecs TorchRec uses to
shrink the same exchange (``QCommsConfig`` with ``fbgemm_gpu.quantize_comm.QuantizedCommCodec``).
They are baselines for the benchmarks (bench/train_compare.py, bench/netns_bench.py); they
make no error-bound promise.

* :func:`int8_rowwise_all_to_all` -- ``SparseType.INT8``: FBGEMM's
  ``FloatToFused8BitRowwiseQuantized`` on the flattened payload viewed as rows of
  ``row_dim`` values (TorchRec's ``QuantizationContext.row_dim``, default 32). Per row::

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
* :func:`bf16_all_to_all` -- ``SparseType.BF16``: ``fp32_to_bf16_with_clamp`` (clamp to the
  finite bfloat16 range, round to nearest even), exchange bfloat16, cast back (2x smaller).

Backward (straight-through estimator, as in ``compressed_all_to_all``): the cotangent goes
back through the exact transposed ``all_to_all`` (``backward="exact"``, default) or through the
same codec (``backward="compressed"``, TorchRec's ``backward_precision``).

The payload is grouped per destination peer: a row of ``row_dim`` values never straddles two
peers (each peer's block is flattened in C order, as TorchRec flattens each rank's buffer);
the block size must be a multiple of ``row_dim`` (TorchRec asserts the same).

References:
  J. Yang et al., "Training Deep Learning Recommendation Model with Quantized Collective
  Communications", DLP-KDD 2020. FBGEMM: ``fbgemm_gpu/quantize_comm.py``,
  ``src/QuantUtils.cc`` (``FloatToFused8BitRowwiseQuantizedSBFloatRef``). TorchRec:
  ``torchrec/distributed/fbgemm_qcomm_codec.py``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_lossy_comm.exchange import ExchangeStats, _Layout, _make_layout

#: TorchRec's default INT8 row length (``fbgemm_gpu.quantize_comm.ROW_DIM_DEFAULT``).
ROW_DIM_DEFAULT = 32
#: FBGEMM's epsilon in ``255 / (range + eps)`` (QuantUtils.cc, ``kEpsilon``).
INT8_EPSILON = 1e-8
#: Bytes of scale + bias (two float32) appended to each INT8 row.
INT8_SCALE_BIAS_BYTES = 8
BACKWARDS = ("exact", "compressed")
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


# ------------------------------------------------------------------------------------ exchange
class _Config(NamedTuple):
    axis_name: object
    layout: _Layout  # data layout: one chunk per peer (C order of each block)
    grid: tuple  # shape of compression_ratio: [P] or [P, T] (table_axis)
    dtype: object
    codec: str  # "int8-rowwise" | "bf16"
    row_dim: int
    backward: str


def _encode(cfg: _Config, blocks):
    """float[P, N] -> wire array [P, ...]."""
    if cfg.codec == "bf16":
        return bf16_encode(blocks)
    return int8_rowwise_quantize(blocks, cfg.row_dim)


def _decode(cfg: _Config, wire, dtype):
    if cfg.codec == "bf16":
        return wire.astype(dtype)
    return int8_rowwise_dequantize(wire, cfg.row_dim, dtype)


def _forward_impl(cfg: _Config, x, *, backward_pass: bool = False):
    lay = cfg.layout.transposed() if backward_pass else cfg.layout
    ax = cfg.axis_name
    rows, dim = lay.chunk_shape
    blocks = lay.to_chunks(x).reshape(lay.p, rows * dim)  # one row per peer
    wire = _encode(cfg, blocks)
    recv = jax.lax.all_to_all(wire, ax, 0, 0, tiled=True)
    y = lay.from_chunks(_decode(cfg, recv, x.dtype).reshape((lay.p,) + lay.chunk_shape))
    raw_bytes = jnp.float32(math.prod(lay.shape) * np.dtype(x.dtype).itemsize)
    moved = jnp.float32(wire.size * wire.dtype.itemsize)
    stats = ExchangeStats(
        raw_bytes=raw_bytes,
        frame_bytes=moved,
        moved_bytes=moved,
        compression_ratio=jnp.full(cfg.grid, raw_bytes / moved, jnp.float32),
        overflow_count=jnp.int32(0),
        fallback=jnp.int32(0),
        capacity_bytes=jnp.float32(wire.size * wire.dtype.itemsize / lay.p),
    )
    return y, stats


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _exchange(cfg: _Config, x):
    return _forward_impl(cfg, x)


def _exchange_fwd(cfg, x):
    return _forward_impl(cfg, x), None


def _exchange_bwd(cfg, res, cts):
    del res
    ct_y = cts[0]
    lay = cfg.layout
    if cfg.backward == "exact":
        ct_x = jax.lax.all_to_all(ct_y, cfg.axis_name, lay.concat, lay.split, tiled=lay.tiled)
    else:
        ct_x, _ = _forward_impl(cfg, ct_y.astype(cfg.dtype), backward_pass=True)
    return (ct_x.astype(cfg.dtype),)


_exchange.defvjp(_exchange_fwd, _exchange_bwd)


def _qcomm_all_to_all(
    codec,
    x,
    axis_name,
    split_axis,
    concat_axis,
    *,
    table_axis,
    tiled,
    row_dim,
    backward,
    return_stats,
):
    if backward not in BACKWARDS:
        raise ValueError(f"backward must be one of {BACKWARDS}, got {backward!r}")
    x = jnp.asarray(x)
    if np.dtype(x.dtype) not in (
        np.dtype(np.float32),
        np.dtype(jnp.bfloat16),
        np.dtype(np.float16),
    ):
        raise TypeError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
    p = jax.lax.axis_size(axis_name)
    grid = _make_layout(x.shape, p, split_axis, concat_axis, table_axis, tiled).grid
    lay = _make_layout(x.shape, p, split_axis, concat_axis, None, tiled)
    if codec == "int8-rowwise":
        row_dim = int(row_dim)
        for l in (lay, lay.transposed()):
            n = math.prod(l.chunk_shape)
            if row_dim < 1 or n % row_dim:
                raise ValueError(
                    f"each peer's block has {n} values, not a multiple of "
                    f"row_dim={row_dim} (TorchRec asserts the same)"
                )
    cfg = _Config(axis_name, lay, grid, np.dtype(x.dtype), codec, int(row_dim), backward)
    y, stats = _exchange(cfg, x)
    return (y, stats) if return_stats else y


_COMPAT_DOC = """
      error_bound, mode, codec, min_error_bound, capacity, path, backward_error_bound:
        accepted so that the call is a drop-in for ``compressed_all_to_all``; ignored (the
        codec has no error bound and one static size).
"""


def int8_rowwise_all_to_all(
    x,
    axis_name,
    split_axis: int,
    concat_axis: int,
    *,
    error_bound=None,
    table_axis: int | None = None,
    tiled: bool = True,
    mode: str = "rel",
    codec: str = "auto",
    min_error_bound: float | None = None,
    capacity: int | None = None,
    path: str = "auto",
    backward: str = "exact",
    backward_error_bound=None,
    return_stats: bool = False,
    row_dim: int = ROW_DIM_DEFAULT,
):
    (
        """``jax.lax.all_to_all`` of ``x`` with TorchRec's INT8 row-wise quantized communication.

    Call inside ``shard_map`` over ``axis_name`` (P devices). Each peer's block is flattened,
    cut into rows of ``row_dim`` values, quantized to uint8 with a float32 scale and bias per
    row (FBGEMM ``FloatToFused8BitRowwiseQuantized``, module docstring), the packed
    ``uint8[P, rows, ceil4(row_dim) + 8]`` travels in one ``all_to_all``, and the receiver
    dequantizes. The error is at most ``scale / 2 = (max - min) / 510`` of each row (plus
    float32 rounding); no bound is enforced.

    Args:
      x: ``float32 | bfloat16 | float16`` array, varying over ``axis_name``.
      axis_name, split_axis, concat_axis, tiled: as in ``jax.lax.all_to_all``.
      table_axis: only shapes ``compression_ratio`` (``[P, T]``), as in
        ``compressed_all_to_all``.
      backward: ``"exact"`` (transposed exact ``all_to_all`` of the cotangent) or
        ``"compressed"`` (the cotangent is INT8-quantized too).
      return_stats: also return :class:`ExchangeStats` (``moved_bytes`` = packed bytes of all
        P blocks, the one kept for itself included; ``fallback`` and ``overflow_count`` 0).
      row_dim: values per quantization row (static; TorchRec default 32)."""
        + _COMPAT_DOC
        + """
    Returns:
      ``y`` with ``jax.lax.all_to_all``'s shape and ``x``'s dtype, or ``(y, ExchangeStats)``.

    Raises:
      ValueError: bad axes or sizes (as ``compressed_all_to_all``), a block size that is not a
        multiple of ``row_dim``, unknown ``backward``. TypeError: unsupported dtype.

    References:
      Yang et al., DLP-KDD 2020; FBGEMM ``quantize_comm.py`` (``SparseType.INT8``).
    """
    )
    del error_bound, mode, codec, min_error_bound, capacity, path, backward_error_bound
    return _qcomm_all_to_all(
        "int8-rowwise",
        x,
        axis_name,
        split_axis,
        concat_axis,
        table_axis=table_axis,
        tiled=tiled,
        row_dim=row_dim,
        backward=backward,
        return_stats=return_stats,
    )


def bf16_all_to_all(
    x,
    axis_name,
    split_axis: int,
    concat_axis: int,
    *,
    error_bound=None,
    table_axis: int | None = None,
    tiled: bool = True,
    mode: str = "rel",
    codec: str = "auto",
    min_error_bound: float | None = None,
    capacity: int | None = None,
    path: str = "auto",
    backward: str = "exact",
    backward_error_bound=None,
    return_stats: bool = False,
):
    (
        """``jax.lax.all_to_all`` of ``x`` sent as bfloat16 (TorchRec ``SparseType.BF16``).

    FBGEMM ``fp32_to_bf16_with_clamp`` (clamp to the finite bfloat16 range, round to nearest
    even), exchange ``bfloat16``, cast back to ``x.dtype``. Relative error <= 2^-9 per value
    (values beyond the bfloat16 range are clamped); no bound is enforced.

    Args:
      x, axis_name, split_axis, concat_axis, table_axis, tiled, backward, return_stats: as in
        :func:`int8_rowwise_all_to_all` (``moved_bytes`` = 2 bytes per value)."""
        + _COMPAT_DOC
        + """
    Returns:
      ``y`` with ``jax.lax.all_to_all``'s shape and ``x``'s dtype, or ``(y, ExchangeStats)``.

    Raises:
      ValueError: bad axes or sizes, unknown ``backward``. TypeError: unsupported dtype.

    References:
      Yang et al., DLP-KDD 2020; FBGEMM ``quantize_utils.fp32_to_bf16_with_clamp``.
    """
    )
    del error_bound, mode, codec, min_error_bound, capacity, path, backward_error_bound
    return _qcomm_all_to_all(
        "bf16",
        x,
        axis_name,
        split_axis,
        concat_axis,
        table_axis=table_axis,
        tiled=tiled,
        row_dim=ROW_DIM_DEFAULT,
        backward=backward,
        return_stats=return_stats,
    )
