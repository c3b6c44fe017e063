"""Table-wise level and state of the adaptive error bound: the policy and its pytree state.

Everything that changes during training lives in :class:`ErrorBoundState`, a pytree of arrays
carried through the jitted step (``step``, ``table_bound``, running statistics), so the bounds
change every step without recompiling and are saved with the training checkpoint. The relative
bound of table ``i`` at step ``t`` is ``eb_rel[i](t) = multiplier(t) * table_bound[i]``: the
schedule (:mod:`~jax_lossy_comm.error_bound.schedules`) times the tier bound or, with the
automatic policy, a bound re-derived from statistics measured inside the step
(:func:`auto_table_bounds`).

:func:`adaptive_error_bound` bundles ``init`` / ``bounds`` / ``update`` closed over one config
(optax's ``GradientTransformation`` pattern); the functions :func:`init`, :func:`error_bounds`
and :func:`update` take the config explicitly.

References:
  Feng et al., SC24, https://arxiv.org/abs/2407.04272, 2024, dual-level adaptive error bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jax_lossy_comm.error_bound.config import ErrorBoundConfig, table_bounds
from jax_lossy_comm.error_bound.schedules import make_schedule

# Floor for statistics before taking logs: zero sensitivity means "loosest".
_TINY = 1e-30


class TableStats(NamedTuple):
    """Per-table statistics the trainer measures inside its step (replicated).

    The automatic policy uses all three; see :func:`auto_table_bounds`.
    """

    cotangent_abs_mean: jax.Array  # float32[num_tables]: mean |dL/d pooled embedding|
    #   of the table's pooled output over batch and dim (sensitivity of the loss).
    value_range: jax.Array  # float32[num_tables]: max - min of the pooled embeddings
    #   (the range REL mode multiplies eb_rel by), >= 0.
    distinct_fraction: jax.Array  # float32[num_tables]: distinct rows / rows of the
    #   pooled embeddings, in (0, 1].


class ErrorBoundState(NamedTuple):
    """Traced state of the adaptive error bound, carried through the jitted step.

    A pytree of arrays: save it with the training checkpoint. Restore it with a target, so
    that the checkpointer rebuilds this NamedTuple rather than plain dicts, e.g. with
    orbax-checkpoint::

        ckptr = ocp.StandardCheckpointer()
        ckptr.save(path, state)
        state = ckptr.restore(path, eb.init())  # target: a state of the same config

    A restore without a target gives ``{"step": ..., "table_bound": ..., ...}``;
    :func:`error_bounds` and :func:`update` refuse it with a ``TypeError`` naming the fix.
    """

    step: jax.Array  # int32[]: training iterations done (number of update calls).
    table_bound: jax.Array  # float32[num_tables]: table-wise relative bound, before the
    #   iteration-wise multiplier.
    stats: TableStats  # each float32[num_tables]: exponential moving average of the
    #   measured statistics (not bias-corrected).
    stats_count: jax.Array  # int32[]: number of statistics folded into `stats`.


def init(config: ErrorBoundConfig) -> ErrorBoundState:
    """Initial state: step 0, tier bounds, empty statistics.

    Args:
      config: the static config.

    Returns:
      ErrorBoundState with ``step`` int32[], ``table_bound`` float32[num_tables] (from
      :func:`table_bounds`), zero ``stats`` and ``stats_count``.
    """
    zeros = jnp.zeros((config.num_tables,), jnp.float32)
    return ErrorBoundState(
        step=jnp.zeros((), jnp.int32),
        table_bound=jnp.asarray(table_bounds(config)),
        stats=TableStats(zeros, zeros, zeros),
        stats_count=jnp.zeros((), jnp.int32),
    )


def _check_state(state) -> ErrorBoundState:
    """``state`` if it is an :class:`ErrorBoundState`; else a ``TypeError`` saying why."""
    if isinstance(state, ErrorBoundState):
        return state
    if isinstance(state, dict) and set(ErrorBoundState._fields) <= set(state):
        raise TypeError(
            "the error-bound state came back as a dict (a checkpoint restored without a "
            "target): restore it with a target, e.g. orbax's "
            "`StandardCheckpointer().restore(path, eb.init())`, so that it is an "
            "ErrorBoundState"
        )
    raise TypeError(f"state must be an ErrorBoundState, got {type(state).__name__}")


def error_bounds(state: ErrorBoundState, config: ErrorBoundConfig) -> jax.Array:
    """Per-table relative error bounds for the current step.

    .. math:: eb\\_rel_i = m(step) \\cdot table\\_bound_i

    Args:
      state: the current state (``state.step`` is the step being trained).
      config: the static config (gives the schedule).

    Returns:
      ``eb_rel`` per table, ``float32[num_tables]``; ``eb_abs = eb_rel * (max - min)``.

    Raises:
      TypeError: ``state`` is not an :class:`ErrorBoundState` (e.g. the dicts of a
        checkpoint restored without a target; see :class:`ErrorBoundState`).

    References:
      Feng et al., SC24, arXiv 2407.04272, dual-level adaptive error bound.
    """
    state = _check_state(state)
    schedule = make_schedule(
        config.schedule, eb_constant=config.eb_constant, early_stage=config.early_stage
    )
    multiplier = jnp.asarray(schedule(state.step), jnp.float32)
    # Tiers come from the config, so a resumed run with changed tiers uses the new ones; the
    # automatic policy's bounds are state (they depend on statistics seen so far).
    table = state.table_bound if config.policy == "auto" else jnp.asarray(table_bounds(config))
    return multiplier * table


def _centred_log(x: jax.Array) -> jax.Array:
    """``log x - median(log x)`` with ``x`` floored at a tiny positive value."""
    log_x = jnp.log(jnp.maximum(x, _TINY))
    return log_x - jnp.median(log_x)


def auto_table_bounds(stats: TableStats, config: ErrorBoundConfig) -> jax.Array:
    r"""Target per-table bounds of the automatic policy from (averaged) statistics.

    First-order model: an error ``e_i`` in table ``i``'s pooled output moves the loss by
    about ``<g_i, e_i>`` (``g_i`` its cotangent), and REL mode gives
    ``|e_i| <= eb_i * range_i``. So table ``i``'s sensitivity to its relative bound is

    .. math:: s_i = \overline{|g_i|} \cdot range_i .

    Choosing bounds that minimise the bits sent, about ``sum_i d_i log2(1 / eb_i)`` with
    ``d_i`` the distinct-vector share (repeated vectors cost almost nothing), under a
    fixed total loss perturbation ``sum_i s_i^2 eb_i^2``, gives (Lagrange; the classical
    high-rate bit allocation, Gersho & Gray 1992, ch. 8) ``eb_i ~ sqrt(d_i) / s_i``.
    Anchored so that the median table gets ``base`` and clipped:

    .. math:: eb_i = \mathrm{clip}\left(base \cdot \exp\left(-(\ln s_i - \mathrm{med}_j
       \ln s_j) + \gamma (\ln d_i - \mathrm{med}_j \ln d_j)\right),
       tightest, loosest\right)

    with ``gamma = distinct_power`` (0.5 from the derivation; 0 ignores ``d``). A table
    whose loss is more sensitive (larger cotangent or range) gets a tighter bound; one
    with no sensitivity (zero cotangent or constant values) gets ``loosest``.

    Args:
      stats: TableStats, each float32[num_tables] (use averaged statistics).
      config: the static config (base, tightest, loosest, distinct_power).

    Returns:
      float32[num_tables] target relative bounds in ``[tightest, loosest]``.

    References:
      A. Gersho, R. M. Gray, "Vector Quantization and Signal Compression", Kluwer, 1992,
      ch. 8 (bit allocation); Feng et al., SC24, arXiv 2407.04272 (table-wise bounds).
    """
    sensitivity = stats.cotangent_abs_mean * stats.value_range
    distinct = jnp.clip(stats.distinct_fraction, _TINY, 1.0)
    log_rel = -_centred_log(sensitivity) + config.distinct_power * _centred_log(distinct)
    target = config.base * jnp.exp(log_rel)
    return jnp.clip(target, config.tightest, config.loosest).astype(jnp.float32)


def _check_stats(stats: TableStats, config: ErrorBoundConfig) -> TableStats:
    if not isinstance(stats, TableStats):
        raise TypeError(f"stats must be a TableStats, got {type(stats).__name__}")
    for name, x in zip(TableStats._fields, stats):
        if jnp.shape(x) != (config.num_tables,):
            raise ValueError(
                f"TableStats.{name} must have shape ({config.num_tables},), got {jnp.shape(x)}"
            )
    return TableStats(*(jnp.asarray(x, jnp.float32) for x in stats))


def update(
    state: ErrorBoundState, stats: TableStats | None, config: ErrorBoundConfig
) -> ErrorBoundState:
    """Advances the state by one training step; pure and jit/shard_map-safe.

    1. ``step += 1``.
    2. If ``stats`` is given, fold it into the moving average
       ``avg = stats_decay * avg + (1 - stats_decay) * stats`` (entries that are not
       finite keep the previous average).
    3. With ``policy == "auto"``, when ``step % update_every == 0``: compute the target
       :func:`auto_table_bounds` of the bias-corrected average
       ``avg / (1 - stats_decay ** stats_count)`` and move there geometrically,
       ``table_bound = table_bound ** (1 - smoothing) * target ** smoothing``.
       With ``policy == "tiers"`` the table bounds do not change.

    Inside ``shard_map`` pass the state and ``stats`` replicated (``P()``; reduce the
    per-device statistics with ``psum``/``all_gather`` first) so every device holds the
    same state.

    Args:
      state: current ErrorBoundState.
      stats: TableStats of float32[num_tables] measured in this step, or None.
      config: the static config.

    Returns:
      The next ErrorBoundState (same shapes and dtypes).

    Raises:
      TypeError: ``stats`` is not a TableStats; ``state`` is not an
        :class:`ErrorBoundState` (e.g. the dicts of a restore without a target).
      ValueError: a statistic does not have shape ``(num_tables,)``.

    References:
      Feng et al., SC24, arXiv 2407.04272, dual-level adaptive error bound.
    """
    state = _check_state(state)
    step = state.step + 1
    avg, count = state.stats, state.stats_count
    if stats is not None:
        stats = _check_stats(stats, config)
        decay = config.stats_decay
        avg = jax.tree.map(
            lambda a, x: jnp.where(jnp.isfinite(x), decay * a + (1.0 - decay) * x, a), avg, stats
        )
        count = count + 1
    table_bound = state.table_bound
    if config.policy == "auto":
        correction = 1.0 - jnp.power(jnp.float32(config.stats_decay), count.astype(jnp.float32))
        debiased = jax.tree.map(lambda a: a / jnp.maximum(correction, _TINY), avg)
        target = auto_table_bounds(TableStats(*debiased), config)
        eta = config.smoothing
        moved = jnp.exp((1.0 - eta) * jnp.log(table_bound) + eta * jnp.log(target))
        moved = jnp.clip(moved, config.tightest, config.loosest)
        due = (step % config.update_every == 0) & (count > 0)
        table_bound = jnp.where(due, moved, table_bound)
    return ErrorBoundState(
        step.astype(jnp.int32),
        table_bound.astype(jnp.float32),
        TableStats(*avg),
        count.astype(jnp.int32),
    )


class AdaptiveErrorBound(NamedTuple):
    """``init`` / ``bounds`` / ``update`` of the adaptive error bound, closed over a config.

    Attributes:
      init: ``() -> ErrorBoundState``, the initial state (:func:`init`).
      bounds: ``state -> float32[num_tables]``, this step's relative bounds
        (:func:`error_bounds`).
      update: ``(state, stats: TableStats | None) -> ErrorBoundState``, the next state
        (:func:`update`).
      config: the static :class:`ErrorBoundConfig` they close over.
    """

    init: Callable[[], ErrorBoundState]
    bounds: Callable[[ErrorBoundState], jax.Array]
    update: Callable[[ErrorBoundState, TableStats | None], ErrorBoundState]
    config: ErrorBoundConfig


def adaptive_error_bound(config: ErrorBoundConfig) -> AdaptiveErrorBound:
    """The dual-level adaptive error bound of ``config`` as an ``(init, bounds, update)`` bundle.

    Like an optax transformation: the config is static and closed over, the state is a pytree
    passed through the jitted step, the functions are pure (jit and ``shard_map`` safe).

    Args:
      config: the static :class:`ErrorBoundConfig`.

    Returns:
      :class:`AdaptiveErrorBound` (a NamedTuple: ``init``, ``bounds``, ``update``, ``config``).

    Raises:
      TypeError: ``config`` is not an :class:`ErrorBoundConfig`.

    Examples:
      >>> import jax
      >>> from jax_lossy_comm.error_bound import adaptive_error_bound, paper_kaggle_config
      >>> eb = adaptive_error_bound(paper_kaggle_config(early_stage=100))
      >>> state = eb.init()
      >>> [round(float(b), 4) for b in eb.bounds(state)[:4]]  # 2 x the tiers at step 0
      [0.06, 0.06, 0.02, 0.02]
      >>> step = jax.jit(lambda s: eb.update(s, None))
      >>> for _ in range(100):
      ...     state = step(state)
      >>> int(state.step), [round(float(b), 4) for b in eb.bounds(state)[:4]]
      (100, [0.03, 0.03, 0.01, 0.01])

    References:
      Feng et al., SC24, arXiv 2407.04272, dual-level adaptive error bound; optax
      (``GradientTransformation``: an ``(init, update)`` pair closing over its settings).
    """
    if not isinstance(config, ErrorBoundConfig):
        raise TypeError(f"config must be an ErrorBoundConfig, got {type(config).__name__}")
    return AdaptiveErrorBound(
        init=lambda: init(config),
        bounds=lambda state: error_bounds(state, config),
        update=lambda state, stats=None: update(state, stats, config),
        config=config,
    )
