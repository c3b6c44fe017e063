"""Dual-level adaptive error bound: table-wise policy and iteration-wise schedule.

The relative error bound (``eb_rel``, REL mode: ``eb_abs = eb_rel * (max - min)``)
used to compress table ``i``'s pooled embeddings at training step ``t`` is

    eb_rel[i](t) = multiplier(t) * table_bound[i]

* ``multiplier`` (iteration-wise level) is a schedule ``Callable[[step], float]`` in
  optax style: it starts at ``eb_constant`` (2 in the paper), reaches 1 at
  ``early_stage`` (65536 in the paper) and stays 1 after it.
* ``table_bound`` (table-wise level) comes either from explicit tiers (the paper's
  tighten / base / loosen sets) or from the automatic policy :func:`auto_table_bounds`,
  which re-derives it from statistics measured inside the training step.

Everything that changes during training lives in :class:`ErrorBoundState`, a pytree
of arrays carried through the jitted step (``step``, ``table_bound``, running
statistics), so the bounds change every step without recompiling and are saved with
the training checkpoint. :class:`ErrorBoundConfig` is static and hashable.

Typical use in a training step (:func:`adaptive_error_bound` closes over the config)::

    eb = adaptive_error_bound(paper_kaggle_config())
    state = eb.init()

    @jax.jit
    def train_step(params, batch, eb_state):
        eb_rel = eb.bounds(eb_state)                 # float32[num_tables]
        ...                                          # compress with eb_rel, measure stats
        return params, eb.update(eb_state, stats)

Layout: :mod:`.schedules` (iteration-wise multiplier), :mod:`.config` (the static config,
tiers, files; no flag parsing), :mod:`.policy` (state, automatic policy, ``init`` /
``error_bounds`` / ``update`` and the bundle). This package does not import the codec or the
exchange.

References:
  Feng, Zhang, Ye, Si, Chu, Tian, Yin, Deng, Hao, Balaji, Geng, Tao, "Accelerating
  Communication in Deep Learning Recommendation Model Training with Dual-Level Adaptive
  Lossy Compression", SC24, https://arxiv.org/abs/2407.04272, 2024, section on the
  dual-level (table-wise and iteration-wise) adaptive error bound.
"""

from jax_lossy_comm.error_bound.config import (
    POLICIES,
    ErrorBoundConfig,
    Tier,
    min_error_bound,
    paper_kaggle_config,
    table_bounds,
)
from jax_lossy_comm.error_bound.policy import (
    AdaptiveErrorBound,
    ErrorBoundState,
    TableStats,
    adaptive_error_bound,
    auto_table_bounds,
    error_bounds,
    init,
    update,
)
from jax_lossy_comm.error_bound.schedules import (
    SCHEDULE_KINDS,
    Schedule,
    constant_schedule,
    linear_schedule,
    log_schedule,
    make_schedule,
    schedule_multiplier,
    step_schedule,
)

__all__ = [
    "SCHEDULE_KINDS",
    "POLICIES",
    "Schedule",
    "Tier",
    "TableStats",
    "ErrorBoundState",
    "ErrorBoundConfig",
    "AdaptiveErrorBound",
    "adaptive_error_bound",
    "linear_schedule",
    "log_schedule",
    "step_schedule",
    "constant_schedule",
    "make_schedule",
    "schedule_multiplier",
    "paper_kaggle_config",
    "table_bounds",
    "min_error_bound",
    "auto_table_bounds",
    "init",
    "error_bounds",
    "update",
]
