"""The one place where the DLRM calls the embedding all-to-all.

``embedding_exchange`` moves pooled embeddings from table owners to sample owners inside
``shard_map``: ``float32[B, L, dim]`` (this device's L tables for the global batch) ->
``float32[B / P, P * L, dim]`` (this device's samples, all tables, device-major order).
With the run's ``ExchangeConfig`` (``exchange_config(config, ...)``, built once from the
``Config``) it is ``jax_lossy_comm.compressed_all_to_all`` (Feng et al., SC24, arXiv
2407.04272, Sec. 3), flat or hierarchical (only blocks for other nodes coded,
``axis_name=("nodes", "local")``); with None (``compression="off"``) the exact
``jax.lax.all_to_all``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jax_lossy_comm import (
    ExchangeConfig,
    ExchangeStats,
    compressed_all_to_all_with_stats,
    get_comm_codec,
)
from jax_lossy_comm.codec_factory import BASELINES, FRAME_CODECS
from models.dlrm.configs import Config
from models.dlrm.mesh import resolve_topology

#: ``--codec`` names that select a TorchRec/FBGEMM quantized-comm baseline (same call,
#: no error bound; ``jax_lossy_comm.get_comm_codec`` makes their codecs).
QCOMM_CODECS = tuple(BASELINES)
#: ``--codec`` names: the library's codec forms, then the baselines.
CODECS = (*FRAME_CODECS, *QCOMM_CODECS)


def exchange_config(
    config: Config, *, topology: str, min_error_bound: float | None
) -> ExchangeConfig | None:
    """The run's ``ExchangeConfig``, built once from its ``Config`` (None: the exact exchange).

    Args:
      config: the run's Config: ``compression`` ("off": None; "auto" must be decided first),
        ``codec`` (a name of ``CODECS``: the library's codec form, "auto" = its choice, or a
        baseline of ``QCOMM_CODECS``; ``jax_lossy_comm.get_comm_codec`` makes the codec),
        ``exchange_backward`` ("exact": the cotangents travel raw through the transposed
        exchange; "compressed": that exchange is compressed too, with the same bounds) and
        ``exchange_path`` (``jax_lossy_comm.resolve_path``; ignored by the baselines).
      topology: ``"flat"`` (every block coded) or ``"hierarchical"`` (blocks for devices of
        the own node exact, only the others coded), resolved (``mesh.resolve_topology``).
      min_error_bound: static smallest relative bound the run's error bounds take; sizes the
        frames of the dense (CPU) exchange (None: the library's default, 0.01). A bound below
        it would send every step down the exact fallback.

    Raises:
      ValueError: a ``codec`` not in ``CODECS``, an unknown ``exchange_path`` or ``topology``
        (``ExchangeConfig``'s message),
        ``compression`` "auto" (not decided yet).
    """
    if config.compression == "auto":
        raise ValueError(
            "compression 'auto' is decided before the exchange is built "
            "(models.dlrm.cluster.exchange_probe.choose_exchange, which the trainer calls)"
        )
    if config.compression == "off":
        return None
    if config.codec not in CODECS:
        raise ValueError(f"Config.codec must be one of {CODECS}, got {config.codec!r}")
    wire = get_comm_codec(config.codec, min_error_bound=min_error_bound)
    return ExchangeConfig(
        wire,
        wire if config.exchange_backward == "compressed" else None,
        table_axis=1,
        path=config.exchange_path,
        topology=topology,
    )


@dataclasses.dataclass(frozen=True)
class EmbeddingExchange:
    """The run's embedding exchange, decided: what the step runs and what the log names.

    Attributes:
      compression: ``"on"`` (compressed) or ``"off"`` (exact); never ``"auto"``: the
        automatic choice (``cluster.exchange_probe.choose_exchange``) returns this decided.
      topology: ``"flat"`` or ``"hierarchical"``, resolved on the mesh
        (``mesh.resolve_topology``).
      config: the ``ExchangeConfig`` the step runs (``exchange_config``); None: the exact
        ``jax.lax.all_to_all``.
    """

    compression: str
    topology: str
    config: ExchangeConfig | None


def create_exchange(
    config: Config, mesh: jax.sharding.Mesh, *, min_error_bound: float | None
) -> EmbeddingExchange:
    """The run's :class:`EmbeddingExchange` for ``Config.compression`` "on" or "off" (the
    topology ``Config.exchange_topology`` resolved on ``mesh``; ``min_error_bound`` as in
    ``exchange_config``).

    Raises:
      ValueError: as ``exchange_config`` and ``mesh.resolve_topology`` (compression "auto",
        an unknown path or topology, "hierarchical" on a 1-D mesh).
    """
    topology = resolve_topology(config.exchange_topology, mesh)
    ex = exchange_config(config, topology=topology, min_error_bound=min_error_bound)
    return EmbeddingExchange(config.compression, topology, ex)


def embedding_exchange(
    pooled: jax.Array,
    error_bound: jax.Array,
    config: ExchangeConfig | None,
    *,
    axis_name: str | tuple[str, str],
) -> tuple[jax.Array, ExchangeStats]:
    """Forward all-to-all of pooled embeddings; the backward is the transposed exchange.

    Call inside ``shard_map`` over ``axis_name`` (P devices).

    Args:
      pooled: float32[B, L, dim], this device's L local tables for the global batch B.
      error_bound: float32[L], relative error bound (REL: ``eb_abs = eb_rel * (max - min)``
        of each chunk) of each local table; traced, so changing it does not recompile.
        Ignored by the exact exchange.
      config: the run's ``exchange_config``: ``compressed_all_to_all`` with it, or None: the
        exact ``jax.lax.all_to_all``.
      axis_name: mesh axis of the exchange: ``"devices"``, or ``("nodes", "local")`` (the
        statistics then split intra- and inter-node bytes; required by a hierarchical
        ``config``).

    Returns:
      ``(y, stats)``: y float32[B / P, P * L, dim] (column ``d * L + j`` = slot j of device
      d), and this device's ``jax_lossy_comm.ExchangeStats`` (the exact exchange reports raw
      bytes and ratio 1, its intra- and inter-node bytes raw).
    """
    p = jax.lax.axis_size(axis_name)
    raw_bytes = jnp.float32(pooled.size * pooled.dtype.itemsize)
    if config is None:
        y = jax.lax.all_to_all(pooled, axis_name, 0, 1, tiled=True)
        stats = ExchangeStats.exact(
            raw_bytes,
            (p, pooled.shape[1]),
            capacity_bytes=pooled.size * pooled.dtype.itemsize / p,
            axis_name=axis_name,
        )
        return y, stats
    return compressed_all_to_all_with_stats(
        pooled, axis_name, 0, 1, tiled=True, error_bound=error_bound, config=config
    )
