"""Per-device statistics of an exchange or all-reduce, and their split by node.

:class:`ExchangeStats` is what :func:`jax_lossy_comm.compressed_all_to_all_with_stats` and
:func:`jax_lossy_comm.compressed_psum_with_stats` return; :func:`node_bytes` splits a
device's per-destination byte counts into intra-node and inter-node sums.

References:
  S. Feng et al., "Accelerating Communication in Deep Learning Recommendation Model Training
  with Dual-Level Adaptive Lossy Compression", SC24, arXiv 2407.04272, 2024, sec. 3-4.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["ExchangeStats", "node_bytes"]


class ExchangeStats(NamedTuple):
    """Per-device statistics of one forward exchange (:func:`compressed_all_to_all_with_stats`)
    or all-reduce (:func:`jax_lossy_comm.compressed_psum_with_stats`, both phases together).

    Attributes:
      raw_bytes: float32 scalar, this device's payload ``x`` as raw bytes (``x.size *
        itemsize``; every block, the one kept for itself included).
      frame_bytes: float32 scalar, sum of this device's frame sizes (what a variable-size
        exchange moves; an overflowed frame counts with the size it needed; hierarchical: the
        blocks for its own node count raw, they are not coded).
      moved_bytes: float32 scalar, bytes the chosen path really sent: dense, ``chunks *
        capacity`` plus the int32 byte counts; packed, the agreed chunks' bytes times P; ragged,
        ``frame_bytes`` plus the byte counts; a fixed-size codec, its wire bytes (no counts);
        after a whole-exchange fallback, ``raw_bytes``; plus the raw bytes of the tables sent
        exact (flat, with a table axis); hierarchical: ``intra_node_bytes +
        inter_node_moved_bytes``.
      compression_ratio: float32[P] or float32[P, T], raw / frame bytes of each chunk
        (destination peer, table; hierarchical: 1 for the peers on the own node);
        :func:`jax_lossy_comm.compressed_psum_with_stats`: float32[2], its reduce-scatter and
        all-gather phases.
      overflow_count: int32 scalar, this device's frames that did not fit the capacity.
      fallback: int32 scalar, 1 when a frame on some device overflowed and its chunks ran
        as the exact ``all_to_all`` (the same on every device): the tables with such a frame
        (flat, with a table axis), else the whole exchange; 0 otherwise.
      capacity_bytes: float32 scalar, the static frame capacity of the chosen path.
      intra_node_bytes: float32 scalar, bytes this device sent to the other devices of its
        node (its own block never counts). Flat: their share of ``moved_bytes`` (compressed
        like every block); hierarchical: the exact intra-node stage, ``raw_bytes * (L - 1) /
        L`` (blocks from other nodes pass through it too). None from the all-reduce.
      inter_node_raw_bytes: float32 scalar, raw bytes of the blocks whose destination is on
        another node (what the exact exchange sends across nodes). None from the all-reduce.
      inter_node_moved_bytes: float32 scalar, bytes this device really sent across nodes
        (after a fallback: ``inter_node_raw_bytes``). None from the all-reduce.
      phase_moved_bytes: float32[2] from :func:`jax_lossy_comm.compressed_psum_with_stats`:
        the bytes its reduce-scatter and its all-gather moved (their sum is ``moved_bytes``;
        an exact fallback counts half of its raw bytes to each). None from the exchange.

    Nodes: with ``axis_name=(node_axis, local_axis)`` (or a longer tuple) a node is one index
    of the first axis; with a single axis name the whole axis is one node (the inter-node
    fields are 0). The flat exchange's ``moved_bytes`` also counts the device's own block, so
    ``intra_node_bytes + inter_node_moved_bytes`` is ``moved_bytes`` less that block's share;
    the hierarchical exchange's ``moved_bytes`` is that sum (own blocks never move).
    """

    raw_bytes: jax.Array
    frame_bytes: jax.Array
    moved_bytes: jax.Array
    compression_ratio: jax.Array
    overflow_count: jax.Array
    fallback: jax.Array
    capacity_bytes: jax.Array
    intra_node_bytes: jax.Array | None = None
    inter_node_raw_bytes: jax.Array | None = None
    inter_node_moved_bytes: jax.Array | None = None
    phase_moved_bytes: jax.Array | None = None

    @classmethod
    def exact(cls, raw_bytes, ratio_shape, *, capacity_bytes, axis_name=None) -> ExchangeStats:
        """Statistics of an exchange that moved its payload exactly (nothing coded).

        Args:
          raw_bytes: float, the payload's raw bytes (``raw_bytes``, ``frame_bytes`` and
            ``moved_bytes`` all take it).
          ratio_shape: shape of ``compression_ratio`` (all ones), e.g. ``(P, T)`` for the
            exchange, ``(2,)`` for the all-reduce.
          capacity_bytes: float, the ``capacity_bytes`` to report.
          axis_name: the exchange's mesh axis (inside ``shard_map``): the node fields split
            ``raw_bytes`` evenly over its P destinations (:func:`node_bytes`); None (the
            all-reduce): the node fields are None and ``phase_moved_bytes`` halves
            ``raw_bytes`` (a reduce-scatter and an all-gather of the raw values).

        Returns:
          :class:`ExchangeStats` with ``overflow_count`` and ``fallback`` 0.
        """
        raw = jnp.asarray(raw_bytes, jnp.float32)
        zero = jnp.int32(0)
        intra = inter = None
        phases = jnp.stack([raw / 2, raw / 2])
        if axis_name is not None:
            p = jax.lax.axis_size(axis_name)
            intra, inter = node_bytes(jnp.full(p, raw / p), axis_name)
            phases = None
        return cls(
            raw_bytes=raw,
            frame_bytes=raw,
            moved_bytes=raw,
            compression_ratio=jnp.ones(ratio_shape, jnp.float32),
            overflow_count=zero,
            fallback=zero,
            capacity_bytes=jnp.asarray(capacity_bytes, jnp.float32),
            intra_node_bytes=intra,
            inter_node_raw_bytes=inter,
            inter_node_moved_bytes=inter,
            phase_moved_bytes=phases,
        )


def node_bytes(per_peer, axis_name):
    """Splits per-destination byte counts into intra-node and inter-node sums.

    Call inside ``shard_map`` over ``axis_name``. Nodes: with a tuple of two or more axis
    names, a node is one index of the first (device ``d`` of the flattened axis, node-major
    as ``jax.lax.all_to_all`` numbers them, is on node ``d // L``, L devices per node); a
    single axis name is one node. The device's own entry counts in neither sum (it does not
    leave the device).

    Args:
      per_peer: float ``[P]``, bytes this device sends to each device of ``axis_name``.
      axis_name: a mesh axis name or a tuple of them (static).

    Returns:
      ``(intra_node, inter_node)``: float32 scalars, the bytes sent to the other devices of
      this device's node and to the devices of other nodes.

    Raises:
      ValueError: ``per_peer`` is not ``[P]`` with P the size of ``axis_name``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from jax.sharding import PartitionSpec as P
      >>> from jax_lossy_comm import node_bytes
      >>> mesh = jax.make_mesh((2, 4), ("node", "local"),
      ...                      axis_types=(jax.sharding.AxisType.Auto,) * 2)
      >>> def f():  # 100 bytes to every device of the 2 x 4 mesh
      ...     intra, inter = node_bytes(jnp.full(8, 100.0), ("node", "local"))
      ...     return intra[None], inter[None]
      >>> intra, inter = jax.shard_map(f, mesh=mesh, in_specs=(),
      ...                              out_specs=(P(("node", "local")),) * 2)()
      >>> float(intra[0]), float(inter[0])  # 3 local peers, 4 peers on the other node
      (300.0, 400.0)
    """
    per_peer = jnp.asarray(per_peer, jnp.float32)
    p = jax.lax.axis_size(axis_name)
    if per_peer.shape != (p,):
        raise ValueError(f"per_peer must have shape ({p},) (the axis size), got {per_peer.shape}")
    multi = isinstance(axis_name, tuple) and len(axis_name) >= 2
    local = p // jax.lax.axis_size(axis_name[0]) if multi else p
    me = jax.lax.axis_index(axis_name)
    d = jnp.arange(p)
    same = d // local == me // local
    intra = jnp.where(same & (d != me), per_peer, 0.0).sum()
    inter = jnp.where(same, 0.0, per_peer).sum()
    return intra, inter
