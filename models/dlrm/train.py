"""Training and evaluation of the embedding-parallel DLRM: small named steps and the loop.

Layout after the Flax imagenet example: ``create_model`` / ``create_optimizer`` / ``setup``,
``evaluate`` / ``compute_metrics`` and ``train_and_evaluate(config, workdir)``, the one entry
point (the command line, ``main.py``, only turns flags into the ``Config``). Elsewhere, one
concern per module: the sharded train and eval steps in ``step.py``, the mesh and host/device
arrays in ``mesh.py``, data selection in ``data.make_data``, checkpoints in
``checkpoints.py``, the metrics.jsonl schema in ``metrics.py``, plots in ``plots.py`` and the
host network counters in ``netdev.py``.

Reference: Naumov et al., arXiv 1906.00091 (DLRM); Feng et al., SC24, arXiv 2407.04272.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_lossy_comm import describe_implementation
from jax_lossy_comm.optional_deps import import_optional
from models.dlrm import checkpoints, grad_allreduce, models, plots, sharding
from models.dlrm import mesh as mesh_lib
from models.dlrm import metrics as metrics_lib
from models.dlrm.cluster import exchange_probe
from models.dlrm.cluster.netdev import net_tx_bytes
from models.dlrm.configs import Config
from models.dlrm.data import sources as data
from models.dlrm.pooled_all_to_all import QCOMM_CODECS, exchange_config
from models.dlrm.step import (
    NODE_BYTES,
    ErrorBoundHook,
    StepContext,
    TrainState,
    make_eval_step,
    make_train_step,
)

log = logging.getLogger("dlrm")

# ------------------------------------------------------------------------------------
# Model, optimizer, state
# ------------------------------------------------------------------------------------


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
            interaction=config.interaction,
            dcn_num_layers=config.dcn_num_layers,
            dcn_low_rank_dim=config.dcn_low_rank_dim,
            rngs=rngs,
        )
        emb = models.ShardedEmbedding(placement, dtype=config.embedding_dtype, rngs=rngs)
        return head, emb

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
    """SGD (reference DLRM) or Adagrad with ``learning_rate_schedule``.

    Adagrad updates the head and the tables alike (MLPerf DLRM-DCNv2's dense
    ``torch.optim.Adagrad`` and TorchRec's fused sparse Adagrad; mlcommons/training:
    ``recommendation_v2/torchrec_dlrm/dlrm_main.py``): accumulator 0 at the start,
    ``Config.adagrad_eps`` (optax adds it under the square root, torch outside).
    """
    sched = learning_rate_schedule(config)
    if config.optimizer == "sgd":
        return optax.sgd(sched)
    return optax.adagrad(sched, initial_accumulator_value=0.0, eps=config.adagrad_eps)


def setup(config: Config, mesh: jax.sharding.Mesh):
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
    eb_hook = ErrorBoundHook(config.error_bound)
    topology = mesh_lib.resolve_topology(config.exchange_topology, mesh)
    ctx = StepContext(
        config,
        placement,
        mesh,
        graphdefs,
        tx,
        eb_hook,
        learning_rate_schedule(config),
        topology,
        # the static smallest bound sizes the dense exchange's frames
        exchange_config(config, topology=topology, min_error_bound=eb_hook.min_error_bound()),
    )
    table_shape = (mesh.size, placement.rows_per_device, config.embedding_dim)

    def init_state():
        _, params = create_model(config, placement, config.seed)
        grad_ef = grad_allreduce.init_state(config, params["head"], mesh.size)
        # The optimizer's state is float32 whatever Config.embedding_dtype (its arithmetic
        # runs in float32: step.py hands it float32 gradients and parameters).
        opt_state = tx.init(jax.tree.map(lambda a: a.astype(jnp.float32), params))
        return TrainState(jnp.zeros((), jnp.int32), params, opt_state, eb_hook.init(), grad_ef)

    shard = mesh_lib.state_shardings(jax.eval_shape(init_state), mesh, table_shape)
    # error-feedback residuals: one block per device, never gathered
    ef_axis = mesh_lib.batch_axis(mesh)
    ef_shard = jax.tree.map(lambda _: NamedSharding(mesh, P(ef_axis)), shard.grad_ef)
    shard = shard._replace(grad_ef=ef_shard)
    return ctx, init_state, shard


# ------------------------------------------------------------------------------------
# Metrics
# ------------------------------------------------------------------------------------


def compute_metrics(labels: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    """AUC, log loss and accuracy (threshold 0.5) with scikit-learn.

    Args:
      labels: float[n] in {0, 1}; logits: float[n].

    Returns:
      ``{"auc", "logloss", "accuracy", "rows"}``; ``auc`` is NaN when only one class occurs.
    """
    skm = import_optional("sklearn.metrics", "scikit-learn", "train", "the evaluation metrics")

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
        logits = eval_step(state, mesh_lib.to_global(local, ctx.mesh, eval_batch))
        if nproc > 1:
            from jax.experimental import multihost_utils

            logits = multihost_utils.process_allgather(logits, tiled=True)
        logits_all.append(np.asarray(logits)[:m])
    logits = np.concatenate(logits_all)
    if not np.isfinite(logits).all():
        raise TrainingDivergedError(
            f"the predictions on the evaluation set are not finite after step "
            f"{int(mesh_lib.to_host(state.step))}: training diverged (a smaller "
            "--learning-rate? non-finite inputs?)"
        )
    return compute_metrics(eval_set["label"], logits)


class TrainingDivergedError(RuntimeError):
    """The training loss is not finite (the message names the step)."""


def _check_loss(step_metrics: list[dict], last_step: int) -> None:
    """Raises TrainingDivergedError at the first step of ``step_metrics`` (the metrics of
    steps ``last_step - len + 1 .. last_step``) whose loss is NaN or infinite."""
    losses = [float(mesh_lib.to_host(m["loss"])) for m in step_metrics]
    for i, loss in enumerate(losses):
        if not np.isfinite(loss):
            raise TrainingDivergedError(
                f"the training loss is {loss} at step {last_step - len(losses) + 1 + i}: "
                "training diverged (a smaller --learning-rate? non-finite inputs?); stopped "
                "before checkpointing it"
            )


def _interval_record(step, interval, seconds, global_batch, **extra) -> metrics_lib.TrainRecord:
    """Aggregates the per-step metrics of one logging interval (syncs with the device)."""
    labels = np.concatenate([lab for lab, _ in interval])
    _check_loss([m for _, m in interval], step)
    ms = [{k: mesh_lib.to_host(v) for k, v in m.items() if k != "logits"} for _, m in interval]
    logits = np.concatenate([mesh_lib.local_rows(m["logits"]) for _, m in interval])
    raw = float(sum(m["raw_bytes"] for m in ms))
    frame = float(sum(m["frame_bytes"] for m in ms))
    moved = float(sum(m["moved_bytes"] for m in ms))
    node_bytes = {k: float(sum(m[k] for m in ms)) for k in NODE_BYTES}
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
        **node_bytes,
        allreduce_raw_bytes=float(sum(m["allreduce_raw_bytes"] for m in ms)),
        allreduce_moved_bytes=float(sum(m["allreduce_moved_bytes"] for m in ms)),
        allreduce_fallback_steps=int(sum(float(m["allreduce_fallback"]) > 0 for m in ms)),
        seconds=float(seconds),
        unix_time=time.time(),
        error_bound=[float(x) for x in ms[-1]["error_bound"]],
        **extra,
    )


# ------------------------------------------------------------------------------------
# The loop
# ------------------------------------------------------------------------------------


class ConfigError(ValueError):
    """A setting that does not fit the run's devices (batch size, node size), found once the
    devices are known; the command line prints it as one line naming the flag (exit 2)."""


def create_mesh(config: Config) -> jax.sharding.Mesh:
    """The mesh over ``config.devices_per_process`` devices of every process (0: all).

    1-D (``"devices"``) on one process with the flat exchange and no
    ``config.node_devices``; else two-level, ``("nodes", "local")`` with
    ``config.node_devices`` devices per node (0: a process's devices, one node per process),
    so the exchange's statistics can tell intra- from inter-node bytes and the hierarchical
    exchange can run (``mesh_lib.resolve_topology``; a forced hierarchical exchange on one
    process without ``node_devices`` is one node: the exact exchange).

    Raises:
      ConfigError: a batch size not divisible by the device or process count; a
        ``node_devices`` that does not divide the devices of a process.
    """
    devices = mesh_lib.select_devices(config.devices_per_process)
    nproc = jax.process_count()
    per_process = len(devices) // nproc
    node = config.node_devices or per_process
    if per_process % node:
        raise ConfigError(
            f"node_devices={config.node_devices} must divide the {per_process} devices of a "
            "process (a node does not straddle processes)"
        )
    flat_1d = nproc == 1 and not config.node_devices and config.exchange_topology != "hierarchical"
    mesh = mesh_lib.make_mesh(devices, None if flat_1d else node)
    for name, b in (("batch_size", config.batch_size), ("eval_batch_size", config.eval_batch_size)):
        if b % mesh.size or b % nproc:
            raise ConfigError(f"{name}={b} must be divisible by the device count {mesh.size}")
    return mesh


def restore_latest(
    config: Config, mngr, init_state, shard
) -> tuple[TrainState | None, dict | None]:
    """The latest checkpoint's ``(state, meta)`` when ``config.resume`` and there is one,
    else ``(None, None)`` (the caller then starts from ``init_state``). First checks that
    every process sees the same checkpoint folder (``checkpoints.check_shared_workdir``)."""
    checkpoints.check_shared_workdir(mngr)
    if config.resume:
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(init_state),
            shard,
        )
        return checkpoints.restore(mngr, abstract, init_state)
    return None, None


MIN_EVAL_ROWS = 1000
"""An evaluation set smaller than this gets a warning next to its AUC (too noisy)."""

RUN_FILES = ("metrics.jsonl", "curves.png", "final.json", "compare.png")
"""The files of a run in its workdir besides ``checkpoints/`` (``start_over`` removes them)."""


def small_eval_warning(config: Config, rows: int) -> str:
    """The note an evaluation on ``rows`` rows gets in the log: "" from ``MIN_EVAL_ROWS`` on,
    else a warning naming what gives more rows: ``--eval-rows``, or, when the evaluation data
    ran out before ``config.eval_rows``, a larger ``--eval-data`` or more held-out lines."""
    if rows >= MIN_EVAL_ROWS:
        return ""
    if rows >= config.eval_rows:
        more = "--eval-rows"
    elif config.eval_data:
        more = "a larger --eval-data"
    else:
        more = f"more --data rows or a --holdout-every below {config.holdout_every}"
    return f" -- warning: only {rows} evaluation rows, the AUC is noisy (use 1,000 or more: {more})"


def start_over(workdir: str) -> str | None:
    """Removes the earlier run in ``workdir`` (``Config.resume`` False, ``--restart``):
    ``checkpoints/`` and ``RUN_FILES``. Process 0 removes, every process waits for it.

    Returns:
      One line naming what was removed (the checkpointed steps included), or None when the
      workdir held no earlier run.
    """
    ckpt_dir = os.path.join(workdir, "checkpoints")
    steps = (
        sorted(int(n) for n in os.listdir(ckpt_dir) if n.isdigit())
        if os.path.isdir(ckpt_dir)
        else []
    )
    files = [f for f in RUN_FILES if os.path.exists(os.path.join(workdir, f))]
    if jax.process_index() == 0:
        if os.path.isdir(ckpt_dir):
            shutil.rmtree(ckpt_dir)
        for f in files:
            os.remove(os.path.join(workdir, f))
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("dlrm start_over")
    if not steps and not files:
        return None
    what = [f"checkpoints of steps {steps}"] if steps else []
    return f"--restart: removed the earlier run in {workdir} ({', '.join(what + files)})"


def params_checksum(state: TrainState, mesh: jax.sharding.Mesh) -> float:
    """Sum of ``|x|`` over every parameter (float32 on the devices): a bit-level resume check."""
    total = jax.jit(
        lambda p: sum(jnp.sum(jnp.abs(x), dtype=jnp.float32) for x in jax.tree.leaves(p)),
        out_shardings=NamedSharding(mesh, P()),
    )(state.params)
    return float(mesh_lib.to_host(total))


def describe_run(config: Config, ctx: StepContext, data_desc: str) -> list[str]:
    """The lines a run prints at its start: devices, data, exchange, error bound, placement."""
    exchange = (
        "compressed_all_to_all codec=" + config.codec
        if config.compression == "on"
        else "exact all_to_all"
    )
    if config.compression == "on" and config.codec not in QCOMM_CODECS:
        exchange += f" ({describe_implementation(ctx.mesh.devices.flat[0].platform)})"
    nodes = ctx.mesh.devices.shape[0] if ctx.mesh.devices.ndim == 2 else 1
    exchange += f", {ctx.topology} over {nodes} node(s) of {ctx.mesh.size // nodes} device(s)" + (
        " (exact within a node)" if ctx.topology == "hierarchical" else ""
    )
    return [
        f"devices: {ctx.mesh.size} x {jax.devices()[0].platform} over {jax.process_count()} "
        f"process(es); data: {data_desc}",
        f"exchange: {exchange}; error bound: {ctx.eb_hook.describe()}",
        f"gradient all-reduce: {config.grad_allreduce}"
        + (
            f" (codec {config.grad_codec}, REL {config.grad_error_bound}, error feedback "
            f"{'on' if config.grad_error_feedback else 'off'})"
            if config.grad_allreduce == "compressed"
            else ""
        ),
        ctx.placement.describe(config.embedding_dtype),
    ]


def open_metrics(
    path: str, config: Config, ctx: StepContext, start: int, *, label: str, data: str
) -> tuple[metrics_lib.MetricsWriter, list[str]]:
    """The run's metrics.jsonl writer (process 0 writes) and the settings changed since the
    run so far (``metrics.changed_settings``; [] for a new run); a run from step 0 starts with its
    ``config`` record, a resumed one keeps the records up to ``start`` and adds a ``config``
    record at ``start`` when its config differs from the one in effect other than in
    ``steps`` (e.g. a rerun with another ``--grad-allreduce``; the same command run longer is
    the same run), so the log says what ran when."""
    writer = metrics_lib.MetricsWriter(
        path, start if config.resume else None, jax.process_index() == 0
    )
    before = [r for r in writer.kept if isinstance(r, metrics_lib.ConfigRecord)]
    now = json.loads(json.dumps(config.to_dict()))  # as read back: lists, not tuples
    changed = metrics_lib.changed_settings(before[-1].config, now) if start and before else []
    if start == 0 or not before or changed:
        writer.write(
            metrics_lib.ConfigRecord(
                step=start,
                config=config.to_dict(),
                devices=ctx.mesh.size,
                processes=jax.process_count(),
                label=label,
                data=data,
                error_bound=ctx.eb_hook.describe(),
            )
        )
    return writer, changed


def _due(step: int, every: int, last: int) -> bool:
    """True at every ``every``-th step (never when 0) and at the last step."""
    return bool(every and step % every == 0) or step == last


def train_and_evaluate(
    config: Config, workdir: str, *, progress: bool = True, label: str = ""
) -> dict:
    """Trains ``config.steps`` steps, evaluating and checkpointing along the way.

    The command line (``python -m models.dlrm.main``) builds the Config from its flags and
    calls this; the same Config gives the same run from Python. ``progress`` and ``label``
    change only what is shown (and the ``label`` of the config record).

    Args:
      config: the run's Config. ``config.resume`` (the default): continue from the latest
        checkpoint in ``workdir`` if there is one; False: remove the earlier run there first
        (``start_over``).
      workdir: output folder: ``metrics.jsonl``, ``checkpoints/``, ``curves.png``.
      progress: show a tqdm progress bar.
      label: name of the run in logs ("exact", "compressed", ...).

    Returns:
      The final evaluation metrics (``auc``, ``logloss``, ``accuracy``, ``rows``) plus
      ``step`` and ``params_checksum``; with ``config.compression`` "auto" also
      ``auto_exchange`` (``exchange_probe.choose_exchange`` decides the exchange before
      anything else is compiled; ``auto_exchange.to_json``).

    Raises:
      ValueError: bad config (``ConfigError``: batch not divisible by devices, ...).
      FileNotFoundError: no data file matches ``config.data`` / ``config.eval_data``.
      MalformedLineError: bad data line without ``skip_bad_lines``.
    """
    tqdm = import_optional("tqdm", "tqdm", "train", "the progress bar").tqdm

    config.validate()
    is_main = jax.process_index() == 0
    os.makedirs(workdir, exist_ok=True)
    mesh = create_mesh(config)
    nproc = jax.process_count()
    config, auto = exchange_probe.choose_exchange(config, mesh)  # (config, None) unless auto
    ctx, init_state, shard = setup(config, mesh)
    removed = None if config.resume else start_over(workdir)
    mngr = checkpoints.manager(workdir, config.max_checkpoints)
    state, meta = restore_latest(config, mngr, init_state, shard)
    position = meta["data_position"] if meta else None
    # Data first: a bad file is reported before anything is compiled.
    run_data = data.make_data(
        config,
        config.batch_size // nproc,
        position,
        process_index=jax.process_index(),
        num_processes=nproc,
    )
    stream, eval_set, data_desc, eval_bad_lines = run_data[:4]
    # the ids all-to-all sends each bag at the data's own sizes
    ctx = dataclasses.replace(ctx, bag_sizes=run_data.bag_sizes)
    if state is None:
        state = jax.jit(init_state, out_shardings=shard)()
    start = int(mesh_lib.to_host(state.step))
    train_step = jax.jit(
        make_train_step(ctx),
        in_shardings=(shard, None),
        out_shardings=(shard, None),
        donate_argnums=(0,),
    )
    eval_step = jax.jit(make_eval_step(ctx), in_shardings=(shard, None))

    tag = f"[{label}] " if label else ""

    def say(text: str) -> None:
        if is_main:
            tqdm.write(tag + text)

    for line in describe_run(config, ctx, data_desc) + (auto.start_lines() if auto else []):
        say(line)
    if removed:
        say(removed)
    if start:
        say(
            f"resumed from step {start} of the run in {workdir} (data position {position}); "
            "--restart starts over"
        )
    metrics_path = os.path.join(workdir, "metrics.jsonl")
    writer, changed = open_metrics(metrics_path, config, ctx, start, label=label, data=data_desc)
    if changed:  # the checkpoint fits, but the run so far ran with other settings
        say(
            f"settings changed since the run so far (from step {start} on; a config record in "
            f"metrics.jsonl): {'; '.join(changed)}"
        )

    def run_eval(step: int) -> dict:
        _check_loss([m for _, m in interval], step)
        ev = evaluate(ctx, eval_step, state, eval_set, config.eval_batch_size)
        say(
            f"eval @ {step}: AUC {ev['auc']:.5f} log loss {ev['logloss']:.5f} "
            f"accuracy {ev['accuracy']:.4f} ({ev['rows']} rows)"
            + small_eval_warning(config, ev["rows"])
        )
        writer.write(metrics_lib.EvalRecord(step=step, **ev, bad_lines=eval_bad_lines))
        return ev

    interval: list[tuple[np.ndarray, dict]] = []
    records: list[metrics_lib.TrainRecord] = []  # this run's intervals
    t_interval, net0 = time.perf_counter(), net_tx_bytes()
    data_wait = 0.0  # seconds of the interval spent in stream.next_batch()
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
        t_data = time.perf_counter()
        batch_local = stream.next_batch()
        data_wait += time.perf_counter() - t_data
        batch = mesh_lib.to_global(batch_local, mesh, config.batch_size)
        if step == start + 1:  # compile before the first interval's clock starts
            t_compile = time.perf_counter()
            train_step = train_step.lower(state, batch).compile()
            say(f"compiled the train step in {time.perf_counter() - t_compile:.1f} s")
            t_interval, net0, data_wait = time.perf_counter(), net_tx_bytes(), 0.0
        state, m = train_step(state, batch)
        interval.append((batch_local["label"], m))
        bar.update(1)
        if _due(step, config.log_every, config.steps):
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
                exchange_topology=ctx.topology,
                grad_allreduce=config.grad_allreduce,
                # this namespace, all processes, the interval
                net_tx_bytes=None if net0 is None or net1 is None else net1 - net0,
                data_wait_s=data_wait,
            )
            net0 = net1
            bar.set_postfix(loss=f"{rec.loss:.4f}", ratio=f"{rec.compression_ratio:.1f}")
            say(metrics_lib.describe_interval(rec))
            say(metrics_lib.describe_tables(rec))
            writer.write(rec)
            records.append(rec)
            interval, t_interval, data_wait = [], time.perf_counter(), 0.0
        if _due(step, config.eval_every, config.steps):
            final_eval = run_eval(step)
            t_interval, net0 = time.perf_counter(), net_tx_bytes()
        if _due(step, config.checkpoint_every, config.steps):
            _check_loss([m for _, m in interval], step)  # never checkpoint a diverged state
            checkpoints.save(mngr, state, {"data_position": stream.position(), "step": step})
            t_interval, net0 = time.perf_counter(), net_tx_bytes()
    bar.close()
    getattr(stream, "close", lambda: None)()  # stops a shard stream's prefetch thread
    mngr.wait_until_finished()
    mngr.close()
    if final_eval is None:  # resumed at the end: evaluate the restored state
        final_eval = evaluate(ctx, eval_step, state, eval_set, config.eval_batch_size)
    result = dict(final_eval, step=step, params_checksum=params_checksum(state, mesh))
    if auto:
        lines, result["auto_exchange"] = auto.finish(records, start)
        for line in lines:
            say(line)
    writer.write(metrics_lib.FinalRecord(**result))
    if is_main:
        try:
            plots.plot_metrics({label or "run": metrics_path}, os.path.join(workdir, "curves.png"))
        except Exception as e:  # plotting must never lose a finished run
            log.warning("plot failed: %s", e)
    return result


def compare_exchanges(config: Config, workdir: str, *, progress: bool = True) -> dict:
    """Trains ``config`` twice from the same seed, with the exact exchange
    (``<workdir>/exact``) and with the compressed one (``<workdir>/compressed``), and plots
    both curves in ``<workdir>/compare.png``.

    Returns:
      ``{"exact": result, "compressed": result}`` (results as ``train_and_evaluate``'s).
    """
    results = {}
    for name, comp in (("exact", "off"), ("compressed", "on")):
        results[name] = train_and_evaluate(
            dataclasses.replace(config, compression=comp),
            os.path.join(workdir, name),
            progress=progress,
            label=name,
        )
    if jax.process_index() == 0:
        out = os.path.join(workdir, "compare.png")
        plots.plot_metrics({n: os.path.join(workdir, n, "metrics.jsonl") for n in results}, out)
        d = results["compressed"]["auc"] - results["exact"]["auc"]
        print(
            f"AUC exact {results['exact']['auc']:.5f} compressed "
            f"{results['compressed']['auc']:.5f} (difference {d:+.5f}); plot {out}"
        )
    return results


if __name__ == "__main__":  # ``python -m models.dlrm.train``: the same command as main
    import runpy

    # Runs main.py as the program (by name: this module imports nothing above it).
    runpy.run_module("models.dlrm.main", run_name="__main__", alter_sys=True)
