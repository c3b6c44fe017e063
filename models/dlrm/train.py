"""Embedding-parallel DLRM training and evaluation (Flax NNX + optax + orbax).

Layout after the Flax imagenet example: ``train_step`` / ``eval_step`` /
``compute_metrics`` / ``train_and_evaluate``; flags live in ``main.py``
(``python -m models.dlrm.train`` delegates there).

Parallelism, all inside one ``jax.jit`` around one ``jax.shard_map`` over the mesh axis
``"devices"`` (P devices, all processes):

1. Inputs are batch-sharded: each device gets ``b = B / P`` samples (dense, ids, labels).
2. Ids all-to-all (int32, small): each device sends every table owner the ids of that
   owner's tables for its ``b`` samples and receives ``int32[B, L, H]``, the ids of its L
   local tables for the global batch (``sharding.plan_tables`` places tables).
3. Local sum-pooled lookups -> pooled embeddings ``float32[B, L, dim]``.
4. The embedding exchange (``exchange.embedding_exchange``: ``compressed_all_to_all`` or
   the exact ``all_to_all``) -> ``float32[b, P * L, dim]``; the backward pass sends the
   cotangents back through the transposed exchange.
5. Data-parallel head (bottom MLP, dot interaction, top MLP) on the local ``b`` samples;
   head gradients are summed over devices with ``psum`` (the loss is already divided by
   the global batch, so the sum is the gradient of the global mean loss); table
   gradients stay on their owner.
6. The optax update runs in the same jit on the sharded parameters (GSPMD keeps the
   table and its optimizer state sharded, the head replicated).

Reference: Naumov et al., arXiv 1906.00091 (DLRM); Feng et al., SC24, arXiv 2407.04272.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from models.dlrm import exchange, input_pipeline, models, sharding, synthetic
from models.dlrm import metrics as metrics_lib
from models.dlrm.configs import Config
from models.dlrm.error_bounds import ErrorBoundHook

AXIS = "devices"


class TrainState(NamedTuple):
    """Everything a checkpoint holds besides the data position.

    Attributes:
      step: int32[], completed training steps.
      params: {"head": DLRMHead params (replicated), "embedding": {"table":
        float32[P, R, dim] sharded on axis 0}}.
      opt_state: optax state of ``params`` (same sharding rule).
      eb_state: the adaptive error-bound state (``error_bounds.ErrorBoundHook``).
    """

    step: jax.Array
    params: Any
    opt_state: Any
    eb_state: Any


# ------------------------------------------------------------------------------------
# Model, optimizer, mesh
# ------------------------------------------------------------------------------------


def make_mesh(devices=None) -> jax.sharding.Mesh:
    """1-D mesh ``("devices",)`` over ``devices`` (default: all), Auto axis type."""
    devices = list(jax.devices() if devices is None else devices)
    return jax.make_mesh(
        (len(devices),), (AXIS,), axis_types=(jax.sharding.AxisType.Auto,), devices=devices
    )


def select_devices(per_process: int | None = None) -> list:
    """The first ``per_process`` devices of every process (all when None), process-major."""
    by_proc: dict[int, list] = {}
    for d in jax.devices():
        by_proc.setdefault(d.process_index, []).append(d)
    return [d for p in sorted(by_proc) for d in by_proc[p][: per_process or None]]


def create_model(
    config: Config, placement: sharding.TablePlacement, seed: int, abstract: bool = False
):
    """Builds the model. Returns ``(graphdefs, params)``; params as in ``TrainState``.

    With ``abstract`` the params are ``ShapeDtypeStruct``s (nothing is computed).
    """

    def build():
        rngs = nnx.Rngs(params=seed)
        head = models.DLRMHead(
            config.num_dense,
            config.num_tables,
            config.embedding_dim,
            config.bottom_mlp,
            config.top_mlp,
            rngs=rngs,
        )
        return head, models.ShardedEmbedding(placement, rngs=rngs)

    head, emb = nnx.eval_shape(build) if abstract else build()
    head_gd, head_p = nnx.split(head, nnx.Param)
    emb_gd, emb_p = nnx.split(emb, nnx.Param)
    return (head_gd, emb_gd), {
        "head": nnx.to_pure_dict(head_p),
        "embedding": nnx.to_pure_dict(emb_p),
    }


def learning_rate_schedule(config: Config) -> optax.Schedule:
    """Linear warm-up to ``learning_rate``, constant, then polynomial (power 2) decay.

    Same shape as the reference DLRM's ``LRPolicyScheduler`` (warm-up steps, decay start
    step, decay steps).
    """
    lr = config.learning_rate
    parts, bounds = [], []
    if config.warmup_steps > 0:
        parts.append(optax.linear_schedule(0.0, lr, config.warmup_steps))
        bounds.append(config.warmup_steps)
    if config.decay_start_step > 0 and config.decay_steps > 0:
        start = max(config.decay_start_step, config.warmup_steps)
        parts.append(optax.constant_schedule(lr))
        bounds.append(start)
        parts.append(
            optax.polynomial_schedule(lr, 0.0, power=2, transition_steps=config.decay_steps)
        )
    else:
        parts.append(optax.constant_schedule(lr))
    if len(parts) == 1:
        return parts[0]
    return optax.join_schedules(parts, bounds)


def create_optimizer(config: Config) -> optax.GradientTransformation:
    """SGD (reference DLRM) or Adagrad with ``learning_rate_schedule``."""
    sched = learning_rate_schedule(config)
    if config.optimizer == "sgd":
        return optax.sgd(sched)
    return optax.adagrad(sched, initial_accumulator_value=0.0, eps=1e-8)


def state_shardings(abstract_state, mesh, table_shape):
    """NamedShardings for a TrainState: arrays shaped like the table are sharded on axis 0."""

    def one(x):
        spec = P(AXIS) if tuple(x.shape) == tuple(table_shape) else P()
        return NamedSharding(mesh, spec)

    return jax.tree.map(one, abstract_state)


# ------------------------------------------------------------------------------------
# The sharded step
# ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StepContext:
    """Static pieces the step functions close over."""

    config: Config
    placement: sharding.TablePlacement
    mesh: jax.sharding.Mesh
    graphdefs: Any
    tx: optax.GradientTransformation
    eb_hook: ErrorBoundHook
    lr_schedule: Any = None

    @property
    def sparse_update(self) -> bool:
        """Embedding rows are updated in place by sparse SGD (``Config.sparse_embedding_update``)."""
        return self.config.optimizer == "sgd" and self.config.sparse_embedding_update

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
    cfg, pl = ctx.config, ctx.placement
    p = pl.num_devices
    st = pl.slot_table_flat
    src = np.maximum(st, 0)
    dummy = jnp.asarray(st < 0)
    slot_lo = jnp.asarray(pl.slot_lo_flat)
    table_pieces = pl.table_pieces  # [T, K]
    min_eb = ctx.eb_hook.min_error_bound()  # static: sizes the dense exchange's frames

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
        """table float32[1, R, dim] minus lr x the row gradients of the looked-up rows (the
        dense gradient is zero elsewhere; repeated rows accumulate, as in a scatter-add)."""
        valid = (ids_local >= 0) & (ids_local < slot_rows[di][None, :, None])  # [B, L, H]
        rows = jnp.where(valid, ids_local + slot_offsets[di][None, :, None], table.shape[1])
        upd = jnp.broadcast_to((-lr * g_pooled)[:, :, None, :], rows.shape + (pl.dim,))
        return table.at[0, rows.reshape(-1)].add(upd.reshape(-1, pl.dim), mode="drop")

    def body(head_p, table, eb_slots, dense, ids, label, lr=None):
        # dense float32[b, 13], ids int32[b, T, H], label float32[b], table float32[1, R, dim],
        # eb_slots float32[L], lr float32[] (sparse update only).
        b = dense.shape[0]
        global_b = b * p
        di = jax.lax.axis_index(AXIS)
        ids_src = ids[:, src]  # [b, P*L, H]
        # Relative to the slot's piece (row-wise split); the lookup masks ids past its end.
        ids_slots = jnp.where(
            dummy[None, :, None] | (ids_src < slot_lo[None, :, None]),
            -1,
            ids_src - slot_lo[None, :, None],
        )
        ids_local = jax.lax.all_to_all(ids_slots, AXIS, 1, 0, tiled=True)  # [B, L, H]

        def local_loss(head_p, table, probe):
            emb = nnx.merge(emb_gd, {"table": table})
            pooled = emb.lookup(ids_local, di) + probe  # [B, L, dim]
            y, stats = exchange.embedding_exchange(
                pooled,
                eb_slots,
                compression=cfg.compression,
                codec=cfg.codec,
                axis_name=AXIS,
                min_error_bound=min_eb,
                backward=cfg.exchange_backward,
                path=cfg.exchange_path,
            )
            emb_all = gather_tables(y)  # [b, T, dim]
            logits = nnx.merge(head_gd, head_p)(dense, emb_all)  # [b]
            loss = jnp.sum(optax.sigmoid_binary_cross_entropy(logits, label)) / global_b
            return loss, (logits, stats, pooled)

        # Varying like the pooled embeddings it is added to: an invariant probe's cotangent
        # would be summed over the devices (shard_map's transpose of an invariant input).
        probe = jax.lax.pcast(
            jnp.zeros((global_b, pl.local_tables, pl.dim), jnp.float32), AXIS, to="varying"
        )
        if not compute_grads:
            loss, (logits, stats, pooled) = local_loss(head_p, table, probe)
            return jax.lax.psum(loss, AXIS), logits
        head_v = jax.lax.pcast(head_p, AXIS, to="varying")
        if sparse:  # d loss / d pooled (the probe) gives the row gradients; no dense grad
            (loss, (logits, stats, pooled)), (g_head, g_probe) = jax.value_and_grad(
                local_loss, argnums=(0, 2), has_aux=True
            )(head_v, table, probe)
            g_table = sparse_sgd(table, ids_local, di, g_probe, lr)  # the updated table
        else:
            (loss, (logits, stats, pooled)), (g_head, g_table, g_probe) = jax.value_and_grad(
                local_loss, argnums=(0, 1, 2), has_aux=True
            )(head_v, table, probe)
        g_head = jax.lax.psum(g_head, AXIS)
        loss = jax.lax.psum(loss, AXIS)
        slot_stats = {"compression_ratio": stats.compression_ratio[None]}  # [1, P, L]
        if need_stats:  # per local slot, float32[1, L]; only the automatic policy uses them
            slot_stats.update(
                value_range=(pooled.max(axis=(0, 2)) - pooled.min(axis=(0, 2)))[None],
                cotangent_abs_mean=jnp.mean(jnp.abs(g_probe), axis=(0, 2))[None],
                distinct_fraction=_distinct_fraction(ids_local)[None],
            )
        byte_stats = {
            k: jax.lax.psum(getattr(stats, k), AXIS)
            for k in ("raw_bytes", "frame_bytes", "moved_bytes")
        }
        byte_stats["fallback"] = jax.lax.pmax(stats.fallback.astype(jnp.float32), AXIS)
        return loss, logits, g_head, g_table, slot_stats, byte_stats

    return body


def make_train_step(ctx: StepContext):
    """Returns ``train_step(state, batch) -> (state, metrics)``, jitted.

    ``batch``: global arrays sharded on the batch axis: ``dense`` float32[B, 13], ``ids``
    int32[B, T, H], ``label`` float32[B]. ``metrics``: ``loss`` (global mean BCE),
    ``logits`` float32[B], per-table ``compression_ratio``/``error_bound`` float32[T],
    ``raw_bytes``/``frame_bytes``/``moved_bytes`` (all devices, this step).
    """
    body = _sharded_forward_backward(ctx, compute_grads=True)
    head_spec = P()
    slot = P(AXIS)
    sparse = ctx.sparse_update
    smap = jax.shard_map(
        body,
        mesh=ctx.mesh,
        in_specs=(head_spec, P(AXIS), slot, P(AXIS), P(AXIS), P(AXIS)) + ((P(),) if sparse else ()),
        out_specs=(P(), P(AXIS), head_spec, P(AXIS), P(AXIS), P()),
        check_vma=True,
    )

    def train_step(state: TrainState, batch):
        eb_t = ctx.eb_hook.bounds(state.eb_state)  # [T]
        eb_slots = _slots_from_tables(ctx, eb_t, jnp.max(eb_t))
        lr = (jnp.asarray(ctx.lr_schedule(state.step), jnp.float32),) if sparse else ()
        loss, logits, g_head, g_table, slot_stats, byte_stats = smap(
            state.params["head"],
            state.params["embedding"]["table"],
            eb_slots,
            batch["dense"],
            batch["ids"],
            batch["label"],
            *lr,
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
            grads = {"head": g_head, "embedding": {"table": g_table}}
            updates, opt_state = ctx.tx.update(grads, state.opt_state, state.params)
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
            error_bound=eb_t,
            compression_ratio=ratio_t,
            **{f"stat_{k}": v for k, v in (table_stats or {}).items()},
        )
        # Replicated, so every process can read them (multi-host: see _host).
        replicated = NamedSharding(ctx.mesh, P())
        metrics = {k: jax.lax.with_sharding_constraint(v, replicated) for k, v in metrics.items()}
        metrics["logits"] = logits
        return TrainState(state.step + 1, params, opt_state, eb_state), metrics

    return train_step


def make_eval_step(ctx: StepContext):
    """Returns ``eval_step(state, batch) -> logits float32[B]`` (batch-sharded)."""
    body = _sharded_forward_backward(ctx, compute_grads=False)
    smap = jax.shard_map(
        body,
        mesh=ctx.mesh,
        in_specs=(P(), P(AXIS), P(AXIS), P(AXIS), P(AXIS), P(AXIS)),
        out_specs=(P(), P(AXIS)),
        check_vma=True,
    )

    def eval_step(state: TrainState, batch):
        eb_t = ctx.eb_hook.bounds(state.eb_state)
        eb_slots = _slots_from_tables(ctx, eb_t, jnp.max(eb_t))
        _, logits = smap(
            state.params["head"],
            state.params["embedding"]["table"],
            eb_slots,
            batch["dense"],
            batch["ids"],
            batch["label"],
        )
        return logits

    return eval_step


def setup(config: Config, mesh, eb_args=None):
    """Placement, model, optimizer and error-bound hook for ``mesh``.

    Returns:
      ``(ctx, init_state, shardings)``: the StepContext, a function ``() -> TrainState``
      (jit it with ``out_shardings=shardings``) and the TrainState's NamedShardings.
    """
    placement = sharding.plan_tables(
        config.table_rows(),
        config.embedding_dim,
        mesh.size,
        None if config.split_rows < 0 else config.split_rows,
    )
    graphdefs, _ = create_model(config, placement, config.seed, abstract=True)
    tx = create_optimizer(config)
    eb_hook = ErrorBoundHook(config.num_tables, eb_args, config.placeholder_eb_rel)
    ctx = StepContext(
        config, placement, mesh, graphdefs, tx, eb_hook, learning_rate_schedule(config)
    )
    table_shape = (mesh.size, placement.rows_per_device, config.embedding_dim)

    def init_state():
        _, params = create_model(config, placement, config.seed)
        return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params), eb_hook.init())

    shard = state_shardings(jax.eval_shape(init_state), mesh, table_shape)
    return ctx, init_state, shard


# ------------------------------------------------------------------------------------
# Metrics, data placement
# ------------------------------------------------------------------------------------


def compute_metrics(labels: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    """AUC, log loss and accuracy (threshold 0.5) with scikit-learn.

    Args:
      labels: float[n] in {0, 1}; logits: float[n].

    Returns:
      ``{"auc", "logloss", "accuracy", "rows"}``; ``auc`` is NaN when only one class occurs.
    """
    from sklearn import metrics as skm

    labels = np.asarray(labels, np.float64)
    prob = 1.0 / (1.0 + np.exp(-np.asarray(logits, np.float64)))
    prob = np.clip(prob, 1e-7, 1 - 1e-7)
    auc = skm.roc_auc_score(labels, prob) if 0 < labels.sum() < len(labels) else float("nan")
    return {
        "auc": float(auc),
        "logloss": float(skm.log_loss(labels, prob, labels=[0, 1])),
        "accuracy": float(skm.accuracy_score(labels, prob > 0.5)),
        "rows": int(len(labels)),
    }


def _to_global(batch_local: dict, mesh, global_rows: int) -> dict:
    """Process-local numpy rows -> global jax arrays sharded on the batch axis."""
    sh = NamedSharding(mesh, P(AXIS))
    return {
        k: jax.make_array_from_process_local_data(sh, v, (global_rows,) + v.shape[1:])
        for k, v in batch_local.items()
    }


def _host(x: jax.Array) -> np.ndarray:
    """A replicated array as numpy, also when it spans several processes."""
    return np.asarray(x if x.is_fully_addressable else x.addressable_data(0))


def _local_rows(x: jax.Array) -> np.ndarray:
    """This process's rows of a batch-sharded global array, in global order."""
    shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.concatenate([np.asarray(s.data) for s in shards])


def evaluate(ctx: StepContext, eval_step, state, eval_set: dict, eval_batch: int) -> dict:
    """Runs ``eval_step`` over the whole (replicated on the host) evaluation set."""
    n = len(eval_set["label"])
    nproc, pid = jax.process_count(), jax.process_index()
    logits_all = []
    for lo in range(0, n, eval_batch):
        chunk = {k: v[lo : lo + eval_batch] for k, v in eval_set.items()}
        m = len(chunk["label"])
        if m < eval_batch:  # pad the last batch; padding rows are dropped below
            chunk = {
                k: np.concatenate([v, np.repeat(v[-1:], eval_batch - m, 0)])
                for k, v in chunk.items()
            }
        lb = eval_batch // nproc
        local = {k: v[pid * lb : (pid + 1) * lb] for k, v in chunk.items()}
        logits = eval_step(state, _to_global(local, ctx.mesh, eval_batch))
        if nproc > 1:
            from jax.experimental import multihost_utils

            logits = multihost_utils.process_allgather(logits, tiled=True)
        logits_all.append(np.asarray(logits)[:m])
    return compute_metrics(eval_set["label"], np.concatenate(logits_all))


# ------------------------------------------------------------------------------------
# Data sources
# ------------------------------------------------------------------------------------


def make_data(config: Config, local_batch: int, position: dict | None):
    """Returns ``(train_stream, eval_set, description)`` for this process."""
    rows = config.table_rows()
    pid, nproc = jax.process_index(), jax.process_count()
    if not config.data:
        gen = synthetic.SyntheticCriteo(
            rows, config.num_dense, config.synthetic_multi_hot, config.synthetic_zipf_a, config.seed
        )
        stream = input_pipeline.SyntheticStream(
            gen, local_batch * nproc, process_index=pid, num_processes=nproc, position=position
        )
        eval_set = gen.eval_set(config.eval_rows)
        desc = (
            f"SYNTHETIC Criteo-like data (project generator, not real Criteo): "
            f"{len(rows)} tables, Zipf a={config.synthetic_zipf_a}, "
            f"{config.eval_rows} held-out rows"
        )
        return stream, eval_set, desc
    paths = input_pipeline.expand_paths(config.data)
    holdout = 0 if config.eval_data else config.holdout_every
    stream = input_pipeline.CriteoFileStream(
        paths,
        config.data_format,
        rows,
        local_batch,
        skip_bad_lines=config.skip_bad_lines,
        holdout_every=holdout,
        process_index=pid,
        num_processes=nproc,
        position=position,
    )
    eval_paths = input_pipeline.expand_paths(config.eval_data) if config.eval_data else paths
    eval_set, bad = input_pipeline.read_eval_set(
        eval_paths,
        config.data_format,
        rows,
        config.eval_rows,
        skip_bad_lines=config.skip_bad_lines,
        holdout_every=holdout,
    )
    desc = (
        f"{config.data_format} files {paths[:3]}{'...' if len(paths) > 3 else ''}; eval "
        f"{len(eval_set['label'])} rows from "
        f"{f'held-out lines (every {holdout}-th)' if holdout else eval_paths[:3]}"
        f"{f'; {bad} bad eval lines skipped' if bad else ''}"
    )
    return stream, eval_set, desc


# ------------------------------------------------------------------------------------
# Checkpoints
# ------------------------------------------------------------------------------------


def _checkpoint_manager(workdir: str, config: Config):
    import orbax.checkpoint as ocp

    options = ocp.CheckpointManagerOptions(max_to_keep=config.max_checkpoints, create=True)
    return ocp.CheckpointManager(
        os.path.abspath(os.path.join(workdir, "checkpoints")),
        options=options,
        item_names=("state", "meta"),
    )


def _save(mngr, state: TrainState, meta: dict):
    import orbax.checkpoint as ocp

    step = int(_host(state.step))
    mngr.save(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(state._asdict()), meta=ocp.args.JsonSave(meta)
        ),
    )


def _restore(mngr, abstract_state: TrainState):
    import orbax.checkpoint as ocp

    step = mngr.latest_step()
    if step is None:
        return None, None
    out = mngr.restore(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state._asdict()), meta=ocp.args.JsonRestore()
        ),
    )
    return TrainState(**out["state"]), out["meta"]


# ------------------------------------------------------------------------------------
# The loop
# ------------------------------------------------------------------------------------


def _fmt_bytes(x: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.1f} {unit}"
        x /= 1024.0
    return f"{x:.1f}"


def train_and_evaluate(
    config: Config,
    workdir: str,
    *,
    resume: bool = False,
    eb_args=None,
    kill_at_step: int = 0,
    progress: bool = True,
    label: str = "",
    devices_per_process: int | None = None,
) -> dict:
    """Trains ``config.steps`` steps, evaluating and checkpointing along the way.

    Args:
      config: the run's Config.
      workdir: output folder: ``metrics.jsonl``, ``checkpoints/``, ``curves.png``.
      resume: continue from the latest checkpoint in ``workdir`` if there is one.
      eb_args: parsed ``--eb-*`` / ``--error-bound-config`` flags (None: paper defaults).
      kill_at_step: testing aid: SIGKILL this process right after step ``kill_at_step``.
      progress: show a tqdm progress bar.
      label: name of the run in logs ("exact", "compressed", ...).
      devices_per_process: use only this many devices of each process (None: all).

    Returns:
      The final evaluation metrics plus ``step`` and ``params_checksum``.

    Raises:
      ValueError: bad config (batch not divisible by devices, ...).
      MalformedLineError: bad data line without ``skip_bad_lines``.
    """
    from tqdm import tqdm

    config.validate()
    is_main = jax.process_index() == 0
    os.makedirs(workdir, exist_ok=True)
    mesh = make_mesh(select_devices(devices_per_process))
    num_devices = mesh.size
    nproc = jax.process_count()
    for name, b in (("batch_size", config.batch_size), ("eval_batch_size", config.eval_batch_size)):
        if b % num_devices or b % nproc:
            raise ValueError(f"{name}={b} must be divisible by the device count {num_devices}")
    ctx, init_state, shard = setup(config, mesh, eb_args)
    placement, eb_hook = ctx.placement, ctx.eb_hook
    mngr = _checkpoint_manager(workdir, config)
    state, meta = (None, None)
    if resume:
        abstract_sharded = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(init_state),
            shard,
        )
        state, meta = _restore(mngr, abstract_sharded)
    position = meta["data_position"] if meta else None
    local_batch = config.batch_size // nproc
    # Data first: a bad file is reported before anything is compiled.
    stream, eval_set, data_desc = make_data(config, local_batch, position)
    if state is None:
        state = jax.jit(init_state, out_shardings=shard)()
    start = int(_host(state.step))
    train_step = jax.jit(
        make_train_step(ctx),
        in_shardings=(shard, None),
        out_shardings=(shard, None),
        donate_argnums=(0,),
    )
    eval_step = jax.jit(make_eval_step(ctx), in_shardings=(shard, None))

    log = logging.getLogger("dlrm")
    say = (lambda s: tqdm.write(s)) if is_main else (lambda s: None)
    tag = f"[{label}] " if label else ""
    say(
        f"{tag}devices: {num_devices} x {jax.devices()[0].platform} over {nproc} process(es); "
        f"data: {data_desc}"
    )
    exchange_desc = (
        "compressed_all_to_all codec=" + config.codec
        if config.compression == "on"
        else "exact all_to_all"
    )
    say(f"{tag}exchange: {exchange_desc}; error bound: {eb_hook.describe()}")
    say(f"{tag}{placement.describe()}")
    if start:
        say(f"{tag}resumed from step {start} (data position {position})")
    writer = metrics_lib.MetricsWriter(
        os.path.join(workdir, "metrics.jsonl"), start if resume else None, is_main
    )
    if start == 0:
        writer.write(
            metrics_lib.ConfigRecord(
                step=start,
                config=dataclasses.asdict(config),
                devices=num_devices,
                processes=nproc,
                label=label,
                data=data_desc,
                error_bound=eb_hook.describe(),
            )
        )

    interval: list[tuple[np.ndarray, np.ndarray, dict]] = []
    t_interval = time.perf_counter()
    net0 = net_tx_bytes()
    bar = tqdm(
        total=config.steps,
        initial=start,
        disable=not (progress and is_main),
        desc=label or "train",
        dynamic_ncols=True,
    )
    final_eval = None
    step = start
    for step in range(start + 1, config.steps + 1):
        batch_local = stream.next_batch()
        state, m = train_step(state, _to_global(batch_local, mesh, config.batch_size))
        interval.append((batch_local["label"], m))
        bar.update(1)
        if step % config.log_every == 0 or step == config.steps:
            # Steps run asynchronously: wait for this one (state included) before reading the
            # clock, so the interval's time covers the device work, not just its dispatch.
            jax.block_until_ready((state, m))
            net1 = net_tx_bytes()
            rec = _interval_record(
                step,
                interval,
                time.perf_counter() - t_interval,
                config.batch_size,
                bad_lines=int(getattr(stream, "bad_lines", 0)),
                exchange=config.compression,
                # this namespace, all processes, the interval
                net_tx_bytes=None if net0 is None or net1 is None else net1 - net0,
            )
            net0 = net1
            bar.set_postfix(loss=f"{rec.loss:.4f}", ratio=f"{rec.compression_ratio:.1f}")
            say(
                f"{tag}step {step}: loss {rec.loss:.4f} train-AUC {rec.auc:.4f} "
                f"{rec.samples_per_s:.0f} samples/s | exchange ratio {rec.compression_ratio:.2f}x, "
                f"moved {_fmt_bytes(rec.moved_bytes)} vs raw {_fmt_bytes(rec.raw_bytes)} "
                f"(frames {_fmt_bytes(rec.frame_bytes)}, {rec.fallback_steps} exact-fallback "
                f"steps) | eb_rel "
                f"[{min(rec.error_bound):.4f}, {max(rec.error_bound):.4f}]"
            )
            say(f"{tag}  per-table ratio: " + " ".join(f"{r:.1f}" for r in rec.ratio_per_table))
            writer.write(rec)
            interval, t_interval = [], time.perf_counter()
        if (config.eval_every and step % config.eval_every == 0) or step == config.steps:
            ev = evaluate(ctx, eval_step, state, eval_set, config.eval_batch_size)
            say(
                f"{tag}eval @ {step}: AUC {ev['auc']:.5f} log loss {ev['logloss']:.5f} "
                f"accuracy {ev['accuracy']:.4f} ({ev['rows']} rows)"
            )
            writer.write(metrics_lib.EvalRecord(step=step, **ev))
            final_eval = ev
            t_interval, net0 = time.perf_counter(), net_tx_bytes()
        if (
            config.checkpoint_every and step % config.checkpoint_every == 0
        ) or step == config.steps:
            _save(mngr, state, {"data_position": stream.position(), "step": step})
            mngr.wait_until_finished()
            t_interval, net0 = time.perf_counter(), net_tx_bytes()
        if kill_at_step and step == kill_at_step:
            mngr.wait_until_finished()
            os.kill(os.getpid(), signal.SIGKILL)
    bar.close()
    mngr.wait_until_finished()
    mngr.close()
    if final_eval is None:  # resumed at the end: evaluate the restored state
        final_eval = evaluate(ctx, eval_step, state, eval_set, config.eval_batch_size)
    checksum = float(
        _host(
            jax.jit(
                lambda p: sum(jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(p)),
                out_shardings=NamedSharding(mesh, P()),
            )(state.params)
        )
    )
    result = dict(
        final_eval, step=step if config.steps > start else start, params_checksum=checksum
    )
    writer.write(metrics_lib.FinalRecord(**result))
    if is_main:
        try:
            plot_metrics(
                {label or "run": os.path.join(workdir, "metrics.jsonl")},
                os.path.join(workdir, "curves.png"),
            )
        except Exception as e:  # plotting must never lose a finished run
            log.warning("plot failed: %s", e)
    return result


def net_tx_bytes() -> float | None:
    """Bytes sent so far by all interfaces of this process's network namespace (Linux
    ``/proc/net/dev``; loopback included), or None where that file does not exist.

    A diagnostic of what really crosses the wire: in the netns benchmark every gloo byte of
    both processes goes through the namespace's rate-limited loopback, so the difference over
    an interval is the link traffic of all devices (other traffic of the namespace included).
    """
    try:
        with open("/proc/net/dev") as f:
            lines = f.readlines()[2:]
    except OSError:
        return None
    return float(sum(int(l.split(":", 1)[1].split()[8]) for l in lines if ":" in l))


def _interval_record(step, interval, seconds, global_batch, **extra) -> metrics_lib.TrainRecord:
    """Aggregates the per-step metrics of one logging interval (syncs with the device)."""
    labels = np.concatenate([l for l, _ in interval])
    ms = [{k: _host(v) for k, v in m.items() if k != "logits"} for _, m in interval]
    logits = np.concatenate([_local_rows(m["logits"]) for _, m in interval])
    raw = float(sum(m["raw_bytes"] for m in ms))
    frame = float(sum(m["frame_bytes"] for m in ms))
    moved = float(sum(m["moved_bytes"] for m in ms))
    per_table = np.mean([m["compression_ratio"] for m in ms], axis=0)
    try:
        auc = compute_metrics(labels, logits)["auc"]
    except ValueError:
        auc = float("nan")
    return metrics_lib.TrainRecord(
        step=step,
        loss=float(np.mean([m["loss"] for m in ms])),
        auc=auc,
        samples_per_s=len(interval) * global_batch / max(seconds, 1e-9),
        compression_ratio=raw / max(frame, 1e-9),
        raw_bytes=raw,
        frame_bytes=frame,
        moved_bytes=moved,
        moved_ratio=raw / max(moved, 1e-9),
        ratio_per_table=[float(x) for x in per_table],
        fallback_steps=int(sum(float(m["fallback"]) > 0 for m in ms)),
        seconds=float(seconds),
        unix_time=time.time(),
        error_bound=[float(x) for x in ms[-1]["error_bound"]],
        **extra,
    )


def plot_metrics(runs: dict[str, str], path: str) -> None:
    """PNG of training loss, eval AUC, exchange ratio and error bounds for one or more runs.

    Args:
      runs: label -> metrics.jsonl path (several labels = side-by-side comparison).
      path: output PNG.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    for name, mpath in runs.items():
        log = metrics_lib.read_metrics(mpath)
        tr, ev = log.train, log.eval
        if tr:
            s = [r.step for r in tr]
            ax[0, 0].plot(s, [r.loss for r in tr], label=name)
            ax[1, 0].plot(s, [r.compression_ratio for r in tr], label=name)
            if tr[-1].exchange != "off":  # the exact exchange uses no bound
                ax[1, 1].plot(s, [np.mean(r.error_bound) for r in tr], label=name)
        if ev:
            ax[0, 1].plot([r.step for r in ev], [r.auc for r in ev], "o-", label=name)
    for a, t in zip(
        ax.flat,
        ("train loss (BCE)", "eval AUC", "exchange compression ratio", "mean relative error bound"),
    ):
        a.set_title(t)
        a.set_xlabel("step")
        a.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    import sys

    from models.dlrm import main as _main

    sys.exit(_main.main())
