"""The model, the optimizer, the initial ``TrainState`` and the step's context, from a Config.

The one place where the run's ``Config`` becomes the pieces the train step closes over
(``step.StepContext``): the table placement, the Flax NNX graph definitions, the optax
optimizer and its learning-rate schedule, the error-bound hook, the gradient all-reduce and
the embedding exchange. After the Flax imagenet example's ``create_model`` /
``create_learning_rate_fn`` / ``create_train_state``.

Reference: Naumov et al., arXiv 1906.00091 (DLRM).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_lossy_comm import ExchangeConfig
from models.dlrm import grad_allreduce, models, sharding
from models.dlrm import mesh as mesh_lib
from models.dlrm.configs import Config
from models.dlrm.error_bound_hook import ErrorBoundHook
from models.dlrm.pooled_all_to_all import create_exchange
from models.dlrm.step import StepContext, TrainState


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


def plan_tables(config: Config, mesh: jax.sharding.Mesh) -> sharding.TablePlacement:
    """The tables of ``config`` placed on the devices of ``mesh`` (``sharding.plan_tables``;
    ``Config.split_rows`` < 0: the default split)."""
    return sharding.plan_tables(
        config.table_rows(),
        config.embedding_dim,
        mesh.size,
        None if config.split_rows < 0 else config.split_rows,
    )


def init_state_fn(
    config: Config,
    mesh: jax.sharding.Mesh,
    placement: sharding.TablePlacement,
    tx: optax.GradientTransformation,
    eb_hook: ErrorBoundHook,
    allreduce: grad_allreduce.HeadGradAllReduce,
):
    """The initial ``TrainState`` as a function and its shardings.

    Returns:
      ``(init_state, shardings)``: ``init_state() -> TrainState`` (step 0, the seeded
      parameters, zero optimizer state, the error-bound hook's initial state, zero
      error-feedback residuals; jit it with ``out_shardings=shardings``) and the
      TrainState's NamedShardings (tables on the device axis, the head replicated, the
      residuals one block per device).
    """
    table_shape = (mesh.size, placement.rows_per_device, config.embedding_dim)

    def init_state():
        _, params = create_model(config, placement, config.seed)
        grad_ef = grad_allreduce.init_state(allreduce, params["head"], mesh.size)
        # The optimizer's state is float32 whatever Config.embedding_dtype (its arithmetic
        # runs in float32: step.py hands it float32 gradients and parameters).
        opt_state = tx.init(jax.tree.map(lambda a: a.astype(jnp.float32), params))
        return TrainState(jnp.zeros((), jnp.int32), params, opt_state, eb_hook.init(), grad_ef)

    shard = mesh_lib.state_shardings(jax.eval_shape(init_state), mesh, table_shape)
    # error-feedback residuals: one block per device, never gathered
    ef_axis = mesh_lib.batch_axis(mesh)
    ef_shard = jax.tree.map(lambda _: NamedSharding(mesh, P(ef_axis)), shard.grad_ef)
    return init_state, shard._replace(grad_ef=ef_shard)


def create_step_context(
    config: Config,
    mesh: jax.sharding.Mesh,
    placement: sharding.TablePlacement,
    *,
    tx: optax.GradientTransformation,
    eb_hook: ErrorBoundHook,
    exchange: ExchangeConfig | None,
    allreduce: grad_allreduce.HeadGradAllReduce,
    bag_sizes: tuple[int, ...] | None,
) -> StepContext:
    """The ``StepContext`` of a run, built once: the model's graph definitions and the
    learning-rate schedule from ``config``, the rest as given (``exchange``: the decided
    embedding exchange, None for the exact one; ``bag_sizes``: the data's,
    ``data.Data.bag_sizes``)."""
    graphdefs, _ = create_model(config, placement, config.seed, abstract=True)
    return StepContext(
        placement=placement,
        mesh=mesh,
        graphdefs=graphdefs,
        tx=tx,
        eb_hook=eb_hook,
        lr_schedule=learning_rate_schedule(config),
        exchange=exchange,
        grad_allreduce=allreduce,
        sparse_update=config.optimizer == "sgd" and config.sparse_embedding_update,
        bag_sizes=bag_sizes,
    )


def setup(config: Config, mesh: jax.sharding.Mesh, *, bag_sizes: tuple[int, ...] | None = None):
    """The step's context and the initial state of ``config`` on ``mesh`` at once, for a
    ``Config.compression`` of "on" or "off" (the run itself, ``run_setup.setup_run``,
    decides "auto" and builds the context after its data).

    Returns:
      ``(ctx, init_state, shardings)``: the StepContext, ``() -> TrainState`` and the
      TrainState's NamedShardings (``init_state_fn``).

    Raises:
      ValueError: as ``pooled_all_to_all.create_exchange`` (compression "auto", ...).
    """
    placement = plan_tables(config, mesh)
    tx = create_optimizer(config)
    eb_hook = ErrorBoundHook(config.error_bound)
    allreduce = grad_allreduce.from_config(config)
    exchange = create_exchange(config, mesh, min_error_bound=eb_hook.min_error_bound())
    init_state, shard = init_state_fn(config, mesh, placement, tx, eb_hook, allreduce)
    ctx = create_step_context(
        config,
        mesh,
        placement,
        tx=tx,
        eb_hook=eb_hook,
        exchange=exchange.config,
        allreduce=allreduce,
        bag_sizes=bag_sizes,
    )
    return ctx, init_state, shard


def params_checksum(state: TrainState, mesh: jax.sharding.Mesh) -> float:
    """Sum of ``|x|`` over every parameter (float32 on the devices): a bit-level resume check."""
    total = jax.jit(
        lambda p: sum(jnp.sum(jnp.abs(x), dtype=jnp.float32) for x in jax.tree.leaves(p)),
        out_shardings=NamedSharding(mesh, P()),
    )(state.params)
    return float(mesh_lib.to_host(total))
