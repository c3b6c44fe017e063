"""Flax (NNX) DLRM: bottom MLP, sum-pooled embedding tables, dot or DCN-v2 interaction, top MLP.

Follows the reference DLRM (Naumov et al., "Deep Learning Recommendation Model for
Personalization and Recommendation Systems", arXiv 1906.00091; facebookresearch/dlrm
``dlrm_s_pytorch.py``): ``arch-interaction-op=dot`` without self-interaction, ReLU MLPs,
sigmoid output (here the logit; the loss applies the sigmoid). The DCN-v2 interaction
(``interaction="dcn"``, MLPerf Training's DLRM-DCNv2) follows TorchRec's ``DLRM_DCN``
(meta-pytorch/torchrec: ``torchrec/models/dlrm.py``, ``InteractionDCNArch``) and its
``LowRankCrossNet`` (``torchrec/modules/crossnet.py``): Wang et al., "DCN V2: Improved Deep &
Cross Network", arXiv 2008.13535, Eq. 1 with the low-rank ``W = U V^T`` of Sec. 5.

This module holds no training code. The embedding-parallel wiring (lookup on the owning
device, all-to-all of pooled embeddings, data-parallel head) is in ``train.py``; this file
gives the pieces:

* ``DLRMHead``: bottom MLP, interaction (``interact`` or ``LowRankCrossNet``) and top MLP,
  run data-parallel.
* ``ShardedEmbedding``: all tables in one ``float32[P, R, dim]`` buffer placed by
  ``sharding.plan_tables``; ``lookup`` runs inside ``shard_map`` on one device's slice.
* ``ReferenceEmbedding``: one parameter per table, the single-device oracle for tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from models.dlrm.sharding import TablePlacement


class MLP(nnx.Module):
    """Dense layers with ReLU; the last layer is linear unless ``relu_last``.

    Init as the reference DLRM: kernel N(0, sqrt(2 / (fan_in + fan_out))) (Glorot normal),
    bias N(0, sqrt(1 / fan_out)).
    """

    def __init__(self, in_features: int, features, *, relu_last: bool, rngs: nnx.Rngs):
        self.num_layers = len(features)
        self.relu_last = relu_last
        for i, (m, n) in enumerate(zip((in_features,) + tuple(features[:-1]), features)):
            setattr(
                self,
                f"dense_{i}",
                nnx.Linear(
                    m,
                    n,
                    kernel_init=nnx.initializers.glorot_normal(),
                    bias_init=nnx.initializers.normal(stddev=float(np.sqrt(1.0 / n))),
                    rngs=rngs,
                ),
            )

    def __call__(self, x: jax.Array) -> jax.Array:
        for i in range(self.num_layers):
            x = getattr(self, f"dense_{i}")(x)
            if i + 1 < self.num_layers or self.relu_last:
                x = jax.nn.relu(x)
        return x


def interact(dense: jax.Array, emb: jax.Array) -> jax.Array:
    """Dot-product feature interaction (DLRM ``interact_features``, op "dot").

    Args:
      dense: float32[b, dim], bottom MLP output.
      emb: float32[b, T, dim], pooled embeddings in table order.

    Returns:
      float32[b, dim + (T + 1) * T / 2]: ``dense`` followed by the strictly lower triangle
      of the pairwise dot products of the T + 1 vectors.
    """
    z = jnp.concatenate([dense[:, None, :], emb], axis=1)
    zz = jnp.einsum("bid,bjd->bij", z, z)
    li, lj = np.tril_indices(z.shape[1], k=-1)
    return jnp.concatenate([dense, zz[:, li, lj]], axis=1)


class LowRankCrossNet(nnx.Module):
    """DCN-v2 cross network with low-rank cross matrices (TorchRec ``LowRankCrossNet``).

    Layer l maps ``x_l`` to ``x_{l+1} = x_0 * (U_l (V_l x_l) + b_l) + x_l`` (``*``
    elementwise), with ``U_l`` float32[N, r], ``V_l`` float32[r, N] and ``b_l`` float32[N].
    Init as TorchRec: ``U_l``, ``V_l`` Glorot (Xavier) normal, ``b_l`` zeros.

    Args:
      in_features: N, width of the input (DLRM-DCN: ``(T + 1) * dim``).
      num_layers: cross layers (>= 1; MLPerf DLRM-DCNv2: 3).
      low_rank: r (>= 1; MLPerf: 512).

    Raises:
      ValueError: ``num_layers`` or ``low_rank`` below 1.

    References:
      Wang et al., arXiv 2008.13535, Eq. 1 and Sec. 5 (low-rank DCN);
      meta-pytorch/torchrec: ``torchrec/modules/crossnet.py`` (``LowRankCrossNet``).
    """

    def __init__(self, in_features: int, num_layers: int, low_rank: int, *, rngs: nnx.Rngs):
        if num_layers < 1 or low_rank < 1:
            raise ValueError(
                f"LowRankCrossNet needs num_layers >= 1 and low_rank >= 1, got {num_layers}, "
                f"{low_rank}"
            )
        init = nnx.initializers.glorot_normal()
        self.num_layers = num_layers
        n, r = in_features, low_rank
        self.u = nnx.Param(jnp.stack([init(rngs.params(), (n, r)) for _ in range(num_layers)]))
        self.v = nnx.Param(jnp.stack([init(rngs.params(), (r, n)) for _ in range(num_layers)]))
        self.bias = nnx.Param(jnp.zeros((num_layers, n), jnp.float32))

    def __call__(self, x0: jax.Array) -> jax.Array:
        """float32[b, N] -> float32[b, N]."""
        u, v, bias = self.u.get_value(), self.v.get_value(), self.bias.get_value()
        x = x0
        for layer in range(self.num_layers):
            x = x0 * ((x @ v[layer].T) @ u[layer].T + bias[layer]) + x
        return x


#: ``DLRMHead`` interactions (``Config.interaction``): the reference DLRM's dot product or
#: the DCN-v2 cross network of MLPerf's DLRM-DCNv2.
INTERACTIONS = ("dot", "dcn")


class DLRMHead(nnx.Module):
    """The data-parallel part: bottom MLP, interaction, top MLP -> click logit.

    ``interaction="dot"``: ``interact`` (reference DLRM). ``"dcn"``: the bottom MLP output
    and the T pooled embeddings concatenated to ``float32[b, (T + 1) * dim]`` go through a
    ``LowRankCrossNet`` of ``dcn_num_layers`` layers of rank ``dcn_low_rank_dim``, then the
    top MLP (TorchRec ``DLRM_DCN``: ``InteractionDCNArch`` and ``OverArch``).

    Raises:
      ValueError: ``bottom_mlp`` does not end in ``embedding_dim``, or an unknown
        ``interaction``.
    """

    def __init__(
        self,
        num_dense: int,
        num_tables: int,
        embedding_dim: int,
        bottom_mlp,
        top_mlp,
        *,
        interaction: str = "dot",
        dcn_num_layers: int = 3,
        dcn_low_rank_dim: int = 512,
        rngs: nnx.Rngs,
    ):
        if bottom_mlp[-1] != embedding_dim:
            raise ValueError(f"bottom MLP must end in embedding_dim={embedding_dim}: {bottom_mlp}")
        if interaction not in INTERACTIONS:
            raise ValueError(f"interaction must be one of {INTERACTIONS}, got {interaction!r}")
        self.interaction = interaction
        self.bottom = MLP(num_dense, tuple(bottom_mlp), relu_last=True, rngs=rngs)
        if interaction == "dcn":
            n_int = (num_tables + 1) * embedding_dim
            self.cross = LowRankCrossNet(n_int, dcn_num_layers, dcn_low_rank_dim, rngs=rngs)
        else:
            n_int = embedding_dim + (num_tables + 1) * num_tables // 2
        self.top = MLP(n_int, tuple(top_mlp), relu_last=False, rngs=rngs)

    def __call__(self, dense: jax.Array, emb: jax.Array) -> jax.Array:
        """float32[b, num_dense], float32[b, T, dim] -> float32[b] logits."""
        x = self.bottom(dense)
        if self.interaction == "dcn":
            z = jnp.concatenate([x[:, None, :], emb], axis=1)
            return self.top(self.cross(z.reshape(z.shape[0], -1)))[:, 0]
        return self.top(interact(x, emb))[:, 0]


def pooled_lookup(table: jax.Array, rows: jax.Array, valid: jax.Array) -> jax.Array:
    """Sum-pooled EmbeddingBag lookup.

    Args:
      table: float32[R, dim].
      rows: int32[..., H], row indices into ``table`` (clipped to range).
      valid: bool[..., H], False entries contribute nothing (padding of multi-hot bags).

    Returns:
      ``table.dtype[..., dim]``, the sum over H of the valid rows: accumulated in float32,
      then rounded once to the table's dtype (a bfloat16/float16 table's pooled embeddings are
      what the exchange sends, in that dtype).
    """
    vecs = jnp.take(table, jnp.clip(rows, 0, table.shape[0] - 1), axis=0)
    pooled = jnp.sum(jnp.where(valid[..., None], vecs, 0.0), axis=-2, dtype=jnp.float32)
    return pooled.astype(table.dtype)


def _init_buffer(key, placement: TablePlacement, dtype=jnp.float32) -> jax.Array:
    """Uniform(-1/sqrt(rows_t), 1/sqrt(rows_t)) per table (reference DLRM), zero padding.

    Drawn in float32 and rounded once to ``dtype`` (the same draws for every dtype).

    ``rows_t`` is the whole table's rows, also for a piece of a row-wise split table. The
    per-row scale is computed on the devices from the ``[P, L]`` slot plan (a host-built
    ``float32[P, R]`` would be a table-sized constant copied to every device: about 1 GB for
    the terabyte preset).
    """
    p, r, dim = placement.num_devices, placement.rows_per_device, placement.dim
    rows_t = np.asarray(placement.table_rows, np.float64)[placement.slot_table]
    slot_scale = np.where(placement.slot_rows > 0, 1.0 / np.sqrt(rows_t), 0.0)  # [P, L]
    lo = jnp.asarray(placement.offsets, jnp.int32)[:, :, None]  # [P, L, 1]
    hi = lo + jnp.asarray(placement.slot_rows, jnp.int32)[:, :, None]
    row = jax.lax.broadcasted_iota(jnp.int32, (1, 1, r), 2)
    inside = (row >= lo) & (row < hi)  # [P, L, R]; a row is in at most one slot
    scale = jnp.sum(jnp.where(inside, jnp.asarray(slot_scale, jnp.float32)[:, :, None], 0.0), 1)
    u = jax.random.uniform(key, (p, r, dim), jnp.float32, -1.0, 1.0)
    return (u * scale[..., None]).astype(dtype)


class ShardedEmbedding(nnx.Module):
    """All tables (or their row-wise pieces) of a ``TablePlacement`` in one parameter
    ``dtype[P, R, dim]`` (``Config.embedding_dtype``: float32, bfloat16 or float16).

    Shard the parameter on axis 0 over the table axis of the mesh; inside ``shard_map``
    each device sees ``dtype[1, R, dim]`` and calls ``lookup``.
    """

    def __init__(self, placement: TablePlacement, *, dtype=jnp.float32, rngs: nnx.Rngs):
        # Static plan pieces as tuples (hashable graph metadata; numpy arrays are not).
        self.offsets = tuple(tuple(int(v) for v in row) for row in placement.offsets)
        self.slot_rows = tuple(tuple(int(v) for v in row) for row in placement.slot_rows)
        self.table = nnx.Param(_init_buffer(rngs.params(), placement, dtype))

    def lookup(self, ids: jax.Array, device_index: jax.Array) -> jax.Array:
        """Pooled lookup of this device's L local tables for the whole global batch.

        Args:
          ids: int32[B, L, H], per-slot ids relative to the slot's first row; ids outside
            ``[0, slot rows)`` count as empty (-1: padding, a dummy slot, or an id in another
            piece of a row-wise split table).
          device_index: int32 scalar, this device's index on the table axis
            (``jax.lax.axis_index``).

        Returns:
          ``table.dtype[B, L, dim]`` pooled embeddings; zeros for dummy slots.
        """
        offsets = jnp.asarray(self.offsets, jnp.int32)[device_index]  # [L]
        slot_rows = jnp.asarray(self.slot_rows, jnp.int32)[device_index]  # [L]
        valid = (ids >= 0) & (ids < slot_rows[None, :, None])
        rows = ids + offsets[None, :, None]
        return pooled_lookup(self.table.get_value()[0], rows, valid)


class ReferenceEmbedding(nnx.Module):
    """One ``float32[rows_t, dim]`` parameter per table, looked up on one device."""

    def __init__(self, tables):
        self.num_tables = len(tables)
        for t, tab in enumerate(tables):
            setattr(self, f"table_{t}", nnx.Param(jnp.asarray(tab)))

    def __call__(self, ids: jax.Array) -> jax.Array:
        """int32[b, T, H] ids (-1 = empty) -> float32[b, T, dim] pooled embeddings."""
        out = [
            pooled_lookup(getattr(self, f"table_{t}").get_value(), ids[:, t], ids[:, t] >= 0)
            for t in range(self.num_tables)
        ]
        return jnp.stack(out, axis=1)
