"""A run's setup, before its first step: the mesh, the exchange, the state, the data, the step.

``setup_run(config, workdir)`` does it in this order: the device mesh (``create_mesh``), the
embedding exchange (decided by the probe with ``--compression auto``,
``cluster.exchange_probe.choose_exchange``), the initial state's function and shardings
(``train_state``), the workdir (``start_over`` with ``--restart``; else the latest checkpoint,
``restore_latest``), the data from the checkpoint's position (a bad file is reported before
anything is compiled) and, with the data's bag sizes known, the one ``StepContext``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil

import jax

from models.dlrm import checkpoints, grad_allreduce, train_state
from models.dlrm import mesh as mesh_lib
from models.dlrm.cluster import auto_report, exchange_probe
from models.dlrm.configs import Config
from models.dlrm.data import sources
from models.dlrm.error_bound_hook import ErrorBoundHook
from models.dlrm.pooled_all_to_all import EmbeddingExchange
from models.dlrm.step import StepContext, TrainState


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


RUN_FILES = ("metrics.jsonl", "curves.png", "final.json", "compare.png")
"""The files of a run in its workdir besides ``checkpoints/`` (``start_over`` removes them)."""


def start_over(workdir: str) -> str | None:
    """Removes the earlier run in ``workdir`` (``Config.resume`` False, ``--restart``):
    ``checkpoints/``, ``profile/`` (``--profile-steps``) and ``RUN_FILES``. Process 0
    removes, every process waits for it.

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
    profile = os.path.join(workdir, "profile")
    folders = [f for f in (ckpt_dir, profile) if os.path.isdir(f)]
    if jax.process_index() == 0:
        for folder in folders:
            shutil.rmtree(folder)
        for f in files:
            os.remove(os.path.join(workdir, f))
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("dlrm start_over")
    what = [f"checkpoints of steps {steps}"] if steps else []
    what += files + (["profile/"] if profile in folders else [])
    if not what:
        return None
    return f"--restart: removed the earlier run in {workdir} ({', '.join(what)})"


def restore_latest(
    config: Config, mngr, init_state, shard, placement=None
) -> tuple[TrainState | None, dict | None]:
    """The latest checkpoint's ``(state, meta)`` when ``config.resume`` and there is one,
    else ``(None, None)`` (the caller then starts from ``init_state``). First checks that
    every process sees the same checkpoint folder (``checkpoints.check_shared_workdir``).
    ``placement``: this run's table plan, to move a checkpoint of another plan to
    (``checkpoints.restore``)."""
    checkpoints.check_shared_workdir(mngr)
    if config.resume:
        abstract = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            jax.eval_shape(init_state),
            shard,
        )
        return checkpoints.restore(mngr, abstract, init_state, placement)
    return None, None


def resolve_auto(config: Config, auto: auto_report.AutoChoice | None) -> Config:
    """``config`` with ``grad_allreduce="auto"`` resolved by the automatic choice ``auto``:
    its ``grad_allreduce`` and, where it chose the compressed all-reduce, its ``grad_codec``
    (``auto_exchange.TRAINER_SETTINGS``); ``config`` itself otherwise (an explicit
    ``grad_allreduce``, or the exact all-reduce chosen: ``grad_codec`` as given).
    ``compression`` stays "auto" (the run's record says what was asked; the exchange is
    ``choose_exchange``'s).

    Raises:
      ValueError: ``grad_allreduce="auto"`` without an automatic choice (``compression`` not
        "auto": ``Config.validate`` rejects it first).
    """
    if config.grad_allreduce != "auto":
        return config
    if auto is None:
        raise ValueError(
            "grad_allreduce auto is chosen with the exchange: it needs compression auto"
        )
    d = auto.decision
    return dataclasses.replace(
        config, grad_allreduce=d.grad_allreduce, grad_codec=d.grad_codec or config.grad_codec
    )


@dataclasses.dataclass
class RunSetup:
    """A run ready for its first step.

    Attributes:
      mesh: the device mesh.
      exchange: the decided embedding exchange (compression, topology, ExchangeConfig).
      auto: the automatic choice behind ``exchange`` (``--compression auto``), else None.
      ctx: the step's context (built once, with the data's bag sizes).
      shard: the TrainState's NamedShardings.
      state: the restored TrainState, or the initial one.
      start: the step the run starts from (the checkpoint's, else 0).
      position: the restored data position (None: a new run).
      data: the run's ``sources.Data`` (stream, evaluation set, description, ...).
      mngr: the orbax CheckpointManager of ``workdir/checkpoints``.
      removed: the line ``start_over`` returned (None: nothing removed).
    """

    mesh: jax.sharding.Mesh
    exchange: EmbeddingExchange
    auto: auto_report.AutoChoice | None
    ctx: StepContext
    shard: TrainState
    state: TrainState
    start: int
    position: dict | None
    data: sources.Data
    mngr: object
    removed: str | None


def setup_run(config: Config, workdir: str) -> RunSetup:
    """Sets up the run of ``config`` in ``workdir`` (module docstring).

    Raises:
      ConfigError: settings that do not fit the devices (``create_mesh``).
      FileNotFoundError, MalformedLineError: as ``sources.make_data``.
      CheckpointError: a checkpoint that cannot be restored (``checkpoints.restore``).
    """
    mesh = create_mesh(config)
    eb_hook = ErrorBoundHook(config.error_bound)
    exchange, auto = exchange_probe.choose_exchange(
        config, mesh, min_error_bound=eb_hook.min_error_bound()
    )  # (the configured exchange, None) unless auto
    config = resolve_auto(config, auto)
    placement = train_state.plan_tables(config, mesh)
    tx = train_state.create_optimizer(config)
    allreduce = grad_allreduce.from_config(config)
    init_state, shard = train_state.init_state_fn(config, mesh, placement, tx, eb_hook, allreduce)
    removed = None if config.resume else start_over(workdir)
    mngr = checkpoints.manager(workdir, config.max_checkpoints)
    state, meta = restore_latest(config, mngr, init_state, shard, placement)
    position = meta["data_position"] if meta else None
    # Data first: a bad file is reported before anything is compiled.
    nproc = jax.process_count()
    data = sources.make_data(
        config,
        config.batch_size // nproc,
        position,
        process_index=jax.process_index(),
        num_processes=nproc,
    )
    ctx = train_state.create_step_context(
        config,
        mesh,
        placement,
        tx=tx,
        eb_hook=eb_hook,
        exchange=exchange.config,
        allreduce=allreduce,
        bag_sizes=data.bag_sizes,  # the ids all-to-all sends each bag at the data's sizes
    )
    if state is None:
        state = jax.jit(init_state, out_shardings=shard)()
    start = int(mesh_lib.to_host(state.step))
    return RunSetup(mesh, exchange, auto, ctx, shard, state, start, position, data, mngr, removed)
