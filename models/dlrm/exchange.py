"""The one place where the DLRM calls the embedding all-to-all.

``embedding_exchange`` moves pooled embeddings from table owners to sample owners inside
``shard_map``: ``float32[B, L, dim]`` (this device's L tables for the global batch) ->
``float32[B / P, P * L, dim]`` (this device's samples, all tables, device-major order).
With ``compression="on"`` it is ``jax_lossy_comm.compressed_all_to_all`` (Feng et al.,
SC24, arXiv 2407.04272, Sec. 3), flat or hierarchical (``topology``: only blocks for other
nodes coded, ``axis_name=("nodes", "local")``), with ``"off"`` the exact ``jax.lax.all_to_all``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_lossy_comm import (
    BF16,
    FP16,
    MX4,
    ExchangeConfig,
    ExchangeStats,
    FP8Rowwise,
    FrameCodec,
    Int8Rowwise,
    compressed_all_to_all_with_stats,
)

#: ``--codec`` names that select a TorchRec/FBGEMM quantized-comm baseline (same call,
#: no error bound; ``jax_lossy_comm.qcomm``) instead of the library's codec.
QCOMM_CODECS = {
    "int8-rowwise": Int8Rowwise(),
    "bf16": BF16(),
    "fp16": FP16(),
    "fp8-rowwise": FP8Rowwise(),
    "mx4": MX4(),
}


def embedding_exchange(
    pooled: jax.Array,
    error_bound: jax.Array,
    *,
    compression: str,
    codec: str,
    axis_name: str,
    min_error_bound: float | None = None,
    backward: str = "exact",
    path: str = "auto",
    topology: str = "flat",
) -> tuple[jax.Array, ExchangeStats]:
    """Forward all-to-all of pooled embeddings; the backward is the transposed exchange.

    Call inside ``shard_map`` over ``axis_name`` (P devices).

    Args:
      pooled: float32[B, L, dim], this device's L local tables for the global batch B.
      error_bound: float32[L], relative error bound (REL: ``eb_abs = eb_rel * (max - min)``
        of each chunk) of each local table; traced, so changing it does not recompile.
        Ignored when ``compression == "off"``.
      compression: "on" (``compressed_all_to_all``) or "off" (exact ``all_to_all``).
      codec: codec name for ``compressed_all_to_all`` ("auto" = library's choice), or a
        baseline of ``QCOMM_CODECS`` ("int8-rowwise", "bf16", "fp16", "fp8-rowwise", "mx4").
      axis_name: mesh axis of the exchange: ``"devices"``, or ``("nodes", "local")`` (the
        statistics then split intra- and inter-node bytes; required by ``"hierarchical"``).
      min_error_bound: static smallest relative bound ``error_bound`` takes over the run; sizes
        the frames of the dense (CPU) exchange (None: the library's default, 0.01). A bound
        below it would send every step down the exact fallback.
      backward: "exact" (the cotangents travel raw through the transposed exchange) or
        "compressed" (that exchange is compressed too, with ``error_bound``).
      path: wire path of ``compressed_all_to_all`` ("dense", "packed", "ragged"; "auto":
        the library's choice, ``jax_lossy_comm.resolve_path``); ignored by the exact exchange
        and the ``QCOMM_CODECS`` baselines.
      topology: ``"flat"`` (every block coded) or ``"hierarchical"`` (blocks for devices of
        the own node exact, only the others coded; ``ExchangeConfig.topology``); the exact
        exchange is the same either way.

    Returns:
      ``(y, stats)``: y float32[B / P, P * L, dim] (column ``d * L + j`` = slot j of device
      d), and this device's ``jax_lossy_comm.ExchangeStats`` (the exact exchange reports raw
      bytes and ratio 1, its intra- and inter-node bytes raw).

    Raises:
      ValueError: unknown ``compression``.
    """
    p = jax.lax.axis_size(axis_name)
    raw_bytes = jnp.float32(pooled.size * pooled.dtype.itemsize)
    if compression == "off":
        y = jax.lax.all_to_all(pooled, axis_name, 0, 1, tiled=True)
        stats = ExchangeStats.exact(
            raw_bytes,
            (p, pooled.shape[1]),
            capacity_bytes=pooled.size * pooled.dtype.itemsize / p,
            axis_name=axis_name,
        )
        return y, stats
    if compression != "on":
        raise ValueError(f"compression must be 'on' or 'off', got {compression!r}")
    if backward not in ("exact", "compressed"):
        raise ValueError(f"backward must be 'exact' or 'compressed', got {backward!r}")
    if codec in QCOMM_CODECS:
        wire = QCOMM_CODECS[codec]
    else:
        wire = FrameCodec(mode="rel", codec=codec, min_error_bound=min_error_bound)
    config = ExchangeConfig(
        wire,
        wire if backward == "compressed" else None,
        table_axis=1,
        path=path,
        topology=topology,
    )
    return compressed_all_to_all_with_stats(
        pooled, axis_name, 0, 1, tiled=True, error_bound=error_bound, config=config
    )
