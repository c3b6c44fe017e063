"""The sharded DLRM train and eval steps (one ``jax.jit`` around one ``jax.shard_map``).

Parallelism, over all P devices of all processes (the mesh axis ``"devices"``, or the pair
``("nodes", "local")`` on a two-level mesh: ``mesh.batch_axis``):

1. Inputs are batch-sharded: each device gets ``b = B / P`` samples (dense, ids, labels).
2. Ids all-to-all (int32): each device sends every table owner the ids of that owner's
   tables for its ``b`` samples, each bag at its own size (``ids_wire_layout``: no padding
   to the largest bag on the wire), and rebuilds ``int32[B, L, H]``, the ids of its L local
   tables for the global batch, -1 padded (``sharding.plan_tables`` places tables).
3. Local sum-pooled lookups -> pooled embeddings ``float32[B, L, dim]``.
4. The embedding exchange (``pooled_all_to_all.embedding_exchange``: ``compressed_all_to_all`` or
   the exact ``all_to_all``; flat or hierarchical: the topology of ``StepContext.exchange``) ->
   ``float32[b, P * L, dim]``; the backward pass sends the cotangents back through the
   transposed exchange.
5. Data-parallel head (bottom MLP, dot interaction, top MLP) on the local ``b`` samples;
   head gradients are summed over devices (the loss is already divided by the global
   batch, so the sum is the gradient of the global mean loss) by ``psum`` or, with
   ``Config.grad_allreduce``, the library's compressed all-reduce
   (``grad_allreduce.reduce_head_grads``); table gradients stay on their owner.
6. The optax update runs in the same jit on the sharded parameters (GSPMD keeps the
   table and its optimizer state sharded, the head replicated).

Reference: Naumov et al., arXiv 1906.00091 (DLRM); Feng et al., SC24, arXiv 2407.04272.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_lossy_comm import ExchangeConfig
from models.dlrm import grad_allreduce, pooled_all_to_all, profiling, sharding
from models.dlrm.error_bound_hook import ErrorBoundHook
from models.dlrm.mesh import batch_axis


class TrainState(NamedTuple):
    """Everything a checkpoint holds besides the data position.

    Attributes:
      step: int32[], completed training steps.
      params: {"head": DLRMHead params (replicated), "embedding": {"table":
        float32[P, R, dim] sharded on axis 0}}.
      opt_state: optax state of ``params`` (same sharding rule).
      eb_state: the adaptive error-bound state (``ErrorBoundHook``).
      grad_ef: the gradient all-reduce's error feedback (``jax_lossy_comm.ErrorFeedbackState``):
        each device's residual of the head gradients, leaves ``float32[P, *shape]`` sharded
        on axis 0 (``grad_allreduce.init_state``); ``residual={}`` without feedback.
    """

    step: jax.Array
    params: Any
    opt_state: Any
    eb_state: Any
    grad_ef: Any


@dataclasses.dataclass(frozen=True)
class StepContext:
    """The static pieces the step functions close over, each built once before the step is
    made (``train_state.create_step_context``); the step sees these, never the whole
    ``Config``.

    Attributes:
      placement: where each table lives (``sharding.plan_tables``).
      mesh: the device mesh (``mesh.batch_axis`` is the axis of every collective).
      graphdefs: ``(head, embedding)`` Flax NNX graph definitions (``train_state.create_model``).
      tx: the optax optimizer (``train_state.create_optimizer``).
      eb_hook: the adaptive error bound (:class:`ErrorBoundHook`).
      lr_schedule: step -> learning rate (``train_state.learning_rate_schedule``), read by
        the sparse table update.
      exchange: the embedding exchange (``pooled_all_to_all.EmbeddingExchange.config``);
        None: the exact ``all_to_all``.
      grad_allreduce: how the head gradients are summed (``grad_allreduce.from_config``).
      sparse_update: embedding rows are updated in place by sparse SGD (SGD with
        ``Config.sparse_embedding_update``); False: the dense optax update.
      bag_sizes: ids per bag of each table in the batches (``data.Data.bag_sizes``); None:
        every table fills the batch's bag axis.
    """

    placement: sharding.TablePlacement
    mesh: jax.sharding.Mesh
    graphdefs: Any
    tx: optax.GradientTransformation
    eb_hook: ErrorBoundHook
    lr_schedule: Any
    exchange: ExchangeConfig | None
    grad_allreduce: grad_allreduce.HeadGradAllReduce
    sparse_update: bool
    bag_sizes: tuple[int, ...] | None = None

    @property
    def num_devices(self) -> int:
        return self.placement.num_devices


def _slots_from_tables(ctx: StepContext, x_t, fill):
    """[T, ...] per-table values -> [P * L, ...] in slot order (dummy slots = fill)."""
    st = ctx.placement.slot_table_flat
    out = jnp.asarray(x_t)[np.maximum(st, 0)]
    mask = jnp.asarray(st >= 0).reshape((-1,) + (1,) * (out.ndim - 1))
    return jnp.where(mask, out, fill)


def _tables_from_slots(ctx: StepContext, x_slots):
    """[P * L, ...] slot order -> [T, ...] table order (a split table: its first piece)."""
    return x_slots[ctx.placement.gather_index]


def ids_wire_layout(
    slot_table: np.ndarray, num_devices: int, bag_sizes, bag_axis: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Where each id goes in the ids all-to-all, with bags at their own sizes.

    The batch holds every bag padded to the largest (``bag_axis`` ids, -1 past the bag's
    end): MLPerf DLRM-DCNv2's bags are 1-100 ids, 214 in all per sample, but 26 x 100 padded.
    On the wire each owner's block holds only its tables' ids, bag after bag, padded to the
    widest owner's ``W`` ids.

    Args:
      slot_table: int[P * L], the table of each slot (-1: a dummy slot), device-major
        (``TablePlacement.slot_table_flat``).
      num_devices: P.
      bag_sizes: ids per bag of each table (each in ``1..bag_axis``).
      bag_axis: H, the batch's bag axis.

    Returns:
      ``(send, recv, W)``: ``send`` int32[P * W] indexes a sender's slot ids flattened to
      ``[P * L * H]`` with one -1 appended (index ``P * L * H``: padding), giving its
      ``[P * W]`` wire ids (owner ``p``: ``[p * W, (p + 1) * W)``); ``recv`` int32[P, L * H]
      indexes an owner's ``[W]`` received ids of one sample with one -1 appended (index
      ``W``), row ``p`` for owner ``p``, giving its ``[L, H]`` ids back.

    Raises:
      ValueError: ``bag_sizes`` is not one size in ``1..H`` per table of ``slot_table``.
    """
    st = np.asarray(slot_table)
    tables = int(st.max()) + 1 if st.size else 0
    sizes = np.asarray(bag_sizes, np.int64)
    if sizes.shape != (tables,):
        raise ValueError(f"bag_sizes must hold one size per table ({tables}), got {list(sizes)}")
    if sizes.size and (sizes.min() < 1 or sizes.max() > bag_axis):
        raise ValueError(
            f"bag sizes must be in 1..{bag_axis} (the batch's bag axis), got {list(sizes)}"
        )
    slots = len(st) // num_devices
    h = np.where(st >= 0, sizes[np.maximum(st, 0)], 0).reshape(num_devices, slots)
    start = np.cumsum(h, axis=1) - h  # each slot's first column in its owner's block
    width = max(int(h.sum(axis=1).max()), 1)
    send = np.full((num_devices, width), num_devices * slots * bag_axis, np.int32)
    recv = np.full((num_devices, slots * bag_axis), width, np.int32)
    for d in range(num_devices):
        for l in range(slots):
            k = np.arange(h[d, l])
            send[d, start[d, l] + k] = (d * slots + l) * bag_axis + k
            recv[d, l * bag_axis + k] = start[d, l] + k
    return send.reshape(-1), recv, width


def _all_to_all_ids(ids_slots, ax, slot_table, num_devices, bag_sizes, me):
    """``all_to_all(ids_slots, ax, 1, 0, tiled=True)`` of int32[b, P * L, H] -> [B, L, H],
    sending each bag at its own size (``ids_wire_layout``); the plain all-to-all when
    that saves nothing (one-hot ids, or bags that fill the bag axis)."""
    b, ps, hh = ids_slots.shape
    tables = int(np.max(slot_table)) + 1
    if bag_sizes is None or hh > max(bag_sizes):  # not the data's layout: send all H
        sizes = (hh,) * tables
    else:  # a one-hot evaluation set of a multi-hot run: min(bag, 1) ids per bag
        sizes = tuple(min(h, hh) for h in bag_sizes)
    send, recv, width = ids_wire_layout(slot_table, num_devices, sizes, hh)
    if width * num_devices >= ps * hh:  # nothing saved: the padded ids as they are
        return jax.lax.all_to_all(ids_slots, ax, 1, 0, tiled=True)
    pad = jnp.full((b, 1), -1, ids_slots.dtype)
    wire = jnp.concatenate([ids_slots.reshape(b, -1), pad], axis=1)[:, send]  # [b, P * W]
    got = jax.lax.all_to_all(wire, ax, 1, 0, tiled=True)  # [B, W]
    got = jnp.concatenate([got, jnp.full((got.shape[0], 1), -1, got.dtype)], axis=1)
    rows = jnp.asarray(recv)[me]  # this owner's [L * H] positions in its block
    return jnp.take(got, rows, axis=1).reshape(got.shape[0], ps // num_devices, hh)


def _distinct_fraction(ids):
    """int32[B, L, H] -> float32[L]: distinct bags / B per slot (bags hashed for H > 1)."""
    key = ids[..., 0].astype(jnp.uint32)
    for h in range(1, ids.shape[-1]):
        key = key * jnp.uint32(2654435761) + ids[..., h].astype(jnp.uint32)
    s = jnp.sort(key, axis=0)
    distinct = 1 + jnp.sum(s[1:] != s[:-1], axis=0)
    return distinct.astype(jnp.float32) / ids.shape[0]


def _sharded_forward_backward(ctx: StepContext, compute_grads: bool):
    """Builds the per-device function run under shard_map (see module docstring)."""
    head_gd, emb_gd = ctx.graphdefs
    pl = ctx.placement
    ax = batch_axis(ctx.mesh)  # the axis of every collective below
    p = pl.num_devices
    st = pl.slot_table_flat
    src = np.maximum(st, 0)
    dummy = jnp.asarray(st < 0)
    slot_lo = jnp.asarray(pl.slot_lo_flat)
    table_pieces = pl.table_pieces  # [T, K]

    def gather_tables(y):
        """[b, P*L, dim] exchanged slots -> [b, T, dim]: the sum of each table's pieces."""
        out = y[:, table_pieces[:, 0]]
        for k in range(1, table_pieces.shape[1]):
            col = table_pieces[:, k]
            out = out + jnp.where(
                jnp.asarray(col >= 0)[None, :, None], y[:, np.maximum(col, 0)], 0.0
            )
        return out

    sparse = compute_grads and ctx.sparse_update
    need_stats = ctx.eb_hook.needs_stats
    slot_offsets = jnp.asarray(pl.offsets, jnp.int32)  # [P, L]
    slot_rows = jnp.asarray(pl.slot_rows, jnp.int32)  # [P, L]

    def sparse_sgd(table, ids_local, di, g_pooled, lr):
        """table dtype[1, R, dim] minus lr x the row gradients of the looked-up rows (the
        dense gradient is zero elsewhere; repeated rows accumulate, as in a scatter-add).

        The arithmetic is float32 (``g_pooled``, in the table's dtype, is cast up). A
        bfloat16/float16 table: each row's updates are summed in float32 and the updated row
        is rounded once to the table's dtype (a scatter-add in that dtype would round after
        every repeated id and lose updates below its spacing one by one)."""
        valid = (ids_local >= 0) & (ids_local < slot_rows[di][None, :, None])  # [B, L, H]
        rows = jnp.where(valid, ids_local + slot_offsets[di][None, :, None], table.shape[1])
        upd = -lr * g_pooled.astype(jnp.float32)
        upd = jnp.broadcast_to(upd[:, :, None, :], rows.shape + (pl.dim,)).reshape(-1, pl.dim)
        rows = rows.reshape(-1)
        if table.dtype == jnp.float32:
            return table.at[0, rows].add(upd, mode="drop")
        uniq, inv = jnp.unique(rows, size=rows.size, fill_value=table.shape[1], return_inverse=True)
        summed = jax.ops.segment_sum(upd, inv.reshape(-1), num_segments=rows.size)
        old = jnp.take(table[0], uniq, axis=0, mode="fill", fill_value=0).astype(jnp.float32)
        return table.at[0, uniq].set((old + summed).astype(table.dtype), mode="drop")

    def body(
        head_p, table, error_bound_slots, dense, ids, label, lr=None, grad_ef=None, scale=None
    ):
        # dense float32[b, 13], ids int32[b, T, H], label float32[b], table float32[1, R, dim],
        # error_bound_slots float32[L] (REL, each local slot's), lr float32[] (sparse update
        # only), grad_ef this device's block of TrainState.grad_ef (training only), scale
        # the head gradients' all-reduce scale (grad_allreduce.head_scale; None: raw).
        b = dense.shape[0]
        global_b = b * p
        di = jax.lax.axis_index(ax)
        ids_src = ids[:, src]  # [b, P*L, H]
        # Relative to the slot's piece (row-wise split); the lookup masks ids past its end.
        ids_slots = jnp.where(
            dummy[None, :, None] | (ids_src < slot_lo[None, :, None]),
            -1,
            ids_src - slot_lo[None, :, None],
        )
        with jax.named_scope(profiling.IDS_SCOPE):
            ids_local = _all_to_all_ids(ids_slots, ax, st, p, ctx.bag_sizes, di)  # [B, L, H]

        def local_loss(head_p, table, probe):
            emb = nnx.merge(emb_gd, {"table": table})
            pooled = emb.lookup(ids_local, di) + probe  # [B, L, dim]
            with jax.named_scope(profiling.EXCHANGE_SCOPE):
                y, stats = pooled_all_to_all.embedding_exchange(
                    pooled, error_bound_slots, ctx.exchange, axis_name=ax
                )
            # The head (MLPs, interaction, loss) is float32: cast the exchanged embeddings up
            # here (a bfloat16/float16 table's cotangents go back down in its dtype).
            emb_all = gather_tables(y.astype(jnp.float32))  # [b, T, dim]
            logits = nnx.merge(head_gd, head_p)(dense, emb_all)  # [b]
            loss = jnp.sum(optax.sigmoid_binary_cross_entropy(logits, label)) / global_b
            return loss, (logits, stats, pooled)

        # Varying like the pooled embeddings it is added to: an invariant probe's cotangent
        # would be summed over the devices (shard_map's transpose of an invariant input).
        probe = jax.lax.pcast(
            jnp.zeros((global_b, pl.local_tables, pl.dim), table.dtype), ax, to="varying"
        )
        if not compute_grads:
            loss, (logits, stats, pooled) = local_loss(head_p, table, probe)
            return jax.lax.psum(loss, ax), logits
        head_v = jax.lax.pcast(head_p, ax, to="varying")
        if sparse:  # d loss / d pooled (the probe) gives the row gradients; no dense grad
            (loss, (logits, stats, pooled)), (g_head, g_probe) = jax.value_and_grad(
                local_loss, argnums=(0, 2), has_aux=True
            )(head_v, table, probe)
            g_table = sparse_sgd(table, ids_local, di, g_probe, lr)  # the updated table
        else:
            (loss, (logits, stats, pooled)), (g_head, g_table, g_probe) = jax.value_and_grad(
                local_loss, argnums=(0, 1, 2), has_aux=True
            )(head_v, table, probe)
        with jax.named_scope(profiling.ALLREDUCE_SCOPE):
            g_head, grad_ef, ar_stats = grad_allreduce.reduce_head_grads(
                ctx.grad_allreduce, g_head, grad_ef, ax, scale
            )
        loss = jax.lax.psum(loss, ax)
        slot_stats = {"compression_ratio": stats.compression_ratio[None]}  # [1, P, L]
        if need_stats:  # per local slot, float32[1, L]; only the automatic policy uses them
            pooled32 = pooled.astype(jnp.float32)  # statistics in float32 for any table dtype
            slot_stats.update(
                value_range=(pooled32.max(axis=(0, 2)) - pooled32.min(axis=(0, 2)))[None],
                cotangent_abs_mean=jnp.mean(jnp.abs(g_probe), axis=(0, 2), dtype=jnp.float32)[None],
                distinct_fraction=_distinct_fraction(ids_local)[None],
            )
        byte_stats = {
            k: jax.lax.psum(getattr(stats, k), ax)
            for k in ("raw_bytes", "frame_bytes", "moved_bytes") + NODE_BYTES
        }
        byte_stats["fallback"] = jax.lax.pmax(stats.fallback.astype(jnp.float32), ax)
        for k in ("raw_bytes", "frame_bytes", "moved_bytes", "phase_moved_bytes"):
            # the all-reduce's, all devices (phases: reduce-scatter, all-gather)
            byte_stats["allreduce_" + k] = jax.lax.psum(getattr(ar_stats, k), ax)
        byte_stats["allreduce_fallback"] = jax.lax.pmax(ar_stats.fallback.astype(jnp.float32), ax)
        return loss, logits, g_head, g_table, slot_stats, byte_stats, grad_ef

    return body


#: the exchange's intra-/inter-node byte counts (``jax_lossy_comm.ExchangeStats``), summed
#: over the devices into the train step's metrics
NODE_BYTES = ("intra_node_bytes", "inter_node_raw_bytes", "inter_node_moved_bytes")


def _in_specs(mesh):
    """in_specs of the step body: head params, table, error_bound_slots, dense, ids, label."""
    ax = batch_axis(mesh)
    return (P(), P(ax), P(ax), P(ax), P(ax), P(ax))


def _step_inputs(ctx: StepContext, state: TrainState, batch: dict):
    """This step's ``error_bound`` float32[T] (REL, per table) and the step body's arguments
    (``_in_specs`` order; the bounds per slot, a dummy slot at the largest)."""
    error_bound = ctx.eb_hook.bounds(state.eb_state)  # [T]
    error_bound_slots = _slots_from_tables(ctx, error_bound, jnp.max(error_bound))
    head, table = state.params["head"], state.params["embedding"]["table"]
    return error_bound, (
        head,
        table,
        error_bound_slots,
        batch["dense"],
        batch["ids"],
        batch["label"],
    )


def make_train_step(ctx: StepContext):
    """Returns ``train_step(state, batch) -> (state, metrics)``, to be jitted by the caller.

    ``batch``: global arrays sharded on the batch axis: ``dense`` float32[B, 13], ``ids``
    int32[B, T, H], ``label`` float32[B]. ``metrics``: ``loss`` (global mean BCE),
    ``logits`` float32[B], per-table ``compression_ratio``/``error_bound`` float32[T],
    ``raw_bytes``/``frame_bytes``/``moved_bytes`` and ``NODE_BYTES`` (all devices, this step).
    """
    body = _sharded_forward_backward(ctx, compute_grads=True)
    sparse = ctx.sparse_update
    ax = batch_axis(ctx.mesh)
    smap = jax.shard_map(
        lambda *a: body(*a[:-3], lr=a[-3] if sparse else None, grad_ef=a[-2], scale=a[-1]),
        mesh=ctx.mesh,
        in_specs=_in_specs(ctx.mesh) + (P(), P(ax), P()),
        out_specs=(P(), P(ax), P(), P(ax), P(ax), P(), P(ax)),
        check_vma=True,
    )

    def train_step(state: TrainState, batch):
        error_bound, args = _step_inputs(ctx, state, batch)
        lr = jnp.asarray(ctx.lr_schedule(state.step) if sparse else 0.0, jnp.float32)
        scale = grad_allreduce.head_scale(ctx.grad_allreduce, state.opt_state)
        loss, logits, g_head, g_table, slot_stats, byte_stats, grad_ef = smap(
            *args, lr, state.grad_ef, scale
        )
        if sparse:  # g_table is the table after its sparse SGD step; optax updates the head
            # (SGD's state is the step count only, the same with or without the table)
            updates, opt_state = ctx.tx.update(
                {"head": g_head}, state.opt_state, {"head": state.params["head"]}
            )
            params = {
                "head": optax.apply_updates(state.params["head"], updates["head"]),
                "embedding": {"table": g_table},
            }
        else:
            # float32 optimizer arithmetic (and state, train_state.init_state_fn) for any table dtype;
            # apply_updates rounds the new table once to its dtype.
            f32 = functools.partial(jax.tree.map, lambda a: a.astype(jnp.float32))
            grads = {"head": g_head, "embedding": {"table": g_table}}
            updates, opt_state = ctx.tx.update(f32(grads), state.opt_state, f32(state.params))
            params = optax.apply_updates(state.params, updates)
        table_stats = (
            {
                k: _tables_from_slots(ctx, slot_stats[k].reshape(-1))
                for k in ("value_range", "cotangent_abs_mean", "distinct_fraction")
            }
            if ctx.eb_hook.needs_stats
            else None
        )
        eb_state = ctx.eb_hook.update(state.eb_state, table_stats)
        # Per-table ratio over all peers: harmonic mean of the per-(peer, table) ratios
        # (every chunk has the same raw size).
        ratio = slot_stats["compression_ratio"]  # [P, P, L]
        inv = jnp.mean(1.0 / jnp.maximum(ratio, 1e-12), axis=1).reshape(-1)  # [P*L]
        tp = ctx.placement.table_pieces  # [T, K]
        inv_t = jnp.sum(jnp.where(jnp.asarray(tp >= 0), inv[np.maximum(tp, 0)], 0.0), axis=1)
        ratio_t = jnp.sum(tp >= 0, axis=1) / inv_t  # split tables: over all their pieces
        metrics = dict(
            byte_stats,
            loss=loss,
            error_bound=error_bound,
            compression_ratio=ratio_t,
            **{f"stat_{k}": v for k, v in (table_stats or {}).items()},
        )
        # Replicated, so every process can read them (multi-host: see mesh.to_host).
        replicated = NamedSharding(ctx.mesh, P())
        metrics = {k: jax.lax.with_sharding_constraint(v, replicated) for k, v in metrics.items()}
        metrics["logits"] = logits
        return TrainState(state.step + 1, params, opt_state, eb_state, grad_ef), metrics

    return train_step


def make_eval_step(ctx: StepContext):
    """Returns ``eval_step(state, batch) -> logits float32[B]`` (batch-sharded; to be jitted;
    ``batch`` as in ``make_train_step``)."""
    body = _sharded_forward_backward(ctx, compute_grads=False)
    smap = jax.shard_map(
        body,
        mesh=ctx.mesh,
        in_specs=_in_specs(ctx.mesh),
        out_specs=(P(), P(batch_axis(ctx.mesh))),
        check_vma=True,
    )

    def eval_step(state: TrainState, batch):
        _, logits = smap(*_step_inputs(ctx, state, batch)[1])
        return logits

    return eval_step
