"""The one place where the DLRM calls the embedding all-to-all.

``embedding_exchange`` moves pooled embeddings from table owners to sample owners inside
``shard_map``: ``float32[B, L, dim]`` (this device's L tables for the global batch) ->
``float32[B / P, P * L, dim]`` (this device's samples, all tables, device-major order).
With ``compression="on"`` it is ``jax_lossy_comm.compressed_all_to_all`` (Feng et al.,
SC24, arXiv 2407.04272, Sec. 3), with ``"off"`` the exact ``jax.lax.all_to_all``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class ExchangeStats(NamedTuple):
  """Per-device statistics of one forward exchange (all float32).

  Attributes:
    raw_bytes: scalar, this device's payload as raw float32 bytes.
    frame_bytes: scalar, sum of the compressed frame sizes (== raw_bytes when exact).
    moved_bytes: scalar, bytes the chosen path really moved.
    compression_ratio: float32[P, L], raw / frame bytes of each (peer, local table) chunk.
    fallback: float32 scalar, 1 when the library fell back to the exact exchange (a frame
      overflowed its static capacity), else 0.
  """

  raw_bytes: jax.Array
  frame_bytes: jax.Array
  moved_bytes: jax.Array
  compression_ratio: jax.Array
  fallback: jax.Array


def _compressed_all_to_all():
  try:
    from jax_lossy_comm import compressed_all_to_all
  except ImportError as e:  # the library piece is not built/installed yet
    raise ImportError(
        "--compression on needs jax_lossy_comm.compressed_all_to_all, which could not be "
        f"imported ({e}); run with --compression off for the exact exchange") from e
  return compressed_all_to_all


def compression_available() -> bool:
  """True when ``jax_lossy_comm.compressed_all_to_all`` can be imported."""
  try:
    _compressed_all_to_all()
    return True
  except ImportError:
    return False


def embedding_exchange(pooled: jax.Array, error_bound: jax.Array, *, compression: str,
                       codec: str, axis_name: str) -> tuple[jax.Array, ExchangeStats]:
  """Forward all-to-all of pooled embeddings; the backward is the transposed exchange.

  Call inside ``shard_map`` over ``axis_name`` (P devices).

  Args:
    pooled: float32[B, L, dim], this device's L local tables for the global batch B.
    error_bound: float32[L], relative error bound (REL: ``eb_abs = eb_rel * (max - min)``
      of each chunk) of each local table; traced, so changing it does not recompile.
      Ignored when ``compression == "off"``.
    compression: "on" (``compressed_all_to_all``) or "off" (exact ``all_to_all``).
    codec: codec name for ``compressed_all_to_all`` ("auto" = library's choice).
    axis_name: mesh axis of the exchange.

  Returns:
    ``(y, stats)``: y float32[B / P, P * L, dim] (column ``d * L + j`` = slot j of device
    d), and this device's ``ExchangeStats``.

  Raises:
    ImportError: ``compression == "on"`` and the library is unavailable.
    ValueError: unknown ``compression``.
  """
  p = jax.lax.axis_size(axis_name)
  raw_bytes = jnp.float32(pooled.size * pooled.dtype.itemsize)
  if compression == "off":
    y = jax.lax.all_to_all(pooled, axis_name, 0, 1, tiled=True)
    stats = ExchangeStats(raw_bytes, raw_bytes, raw_bytes,
                          jnp.ones((p, pooled.shape[1]), jnp.float32), jnp.float32(0))
    return y, stats
  if compression != "on":
    raise ValueError(f"compression must be 'on' or 'off', got {compression!r}")
  y, s = _compressed_all_to_all()(
      pooled, axis_name, 0, 1, error_bound=error_bound, table_axis=1, tiled=True, mode="rel",
      codec=codec, backward="exact", return_stats=True)
  stats = ExchangeStats(jnp.asarray(s.raw_bytes, jnp.float32),
                        jnp.asarray(s.frame_bytes, jnp.float32),
                        jnp.asarray(s.moved_bytes, jnp.float32),
                        jnp.asarray(s.compression_ratio, jnp.float32),
                        jnp.asarray(getattr(s, "fallback", 0), jnp.float32))
  return y, stats
