"""The adaptive error bound of the embedding exchange, as the train step uses it.

``ErrorBoundHook`` wraps the library's ``jax_lossy_comm.error_bound.adaptive_error_bound``
bundle for the run's ``ErrorBoundConfig`` (``Config.error_bound``): the state it keeps in
``TrainState.eb_state``, the traced per-table relative bounds of a step (``error_bound``,
float32[T]), the static ``min_error_bound`` that sizes the dense exchange's frames, and the
update from the step's per-table statistics. Names, here and in the step: ``error_bound``
the traced per-table bound, ``error_bound_slots`` the same per device slot, ``min_error_bound``
the static smallest one.

Reference: Feng et al., SC24, arXiv 2407.04272 (the dual-level adaptive error bound).
"""

from __future__ import annotations

import jax

from jax_lossy_comm import error_bound as eb_lib


class ErrorBoundHook:
    """Per-table relative error bounds for the exchange, from the run's error-bound config
    (the library's ``adaptive_error_bound`` bundle, with the step's statistics as a dict).

    Args:
      settings: the run's ``ErrorBoundConfig`` (``Config.error_bound``).
    """

    def __init__(self, settings: eb_lib.ErrorBoundConfig):
        self.settings = settings
        self.num_tables = settings.num_tables
        self._bundle = eb_lib.adaptive_error_bound(settings)

    def describe(self) -> str:
        """One line for the log: base, tiers, schedule, policy."""
        c = self.settings
        return (
            f"adaptive: base {c.base}, tiers {[(t.name, t.value, list(t.tables)) for t in c.tiers]}, "
            f"schedule {c.schedule} x{c.eb_constant} over {c.early_stage} steps, policy {c.policy}"
        )

    def min_error_bound(self) -> float | None:
        """Static smallest relative bound the step can use: sizes the dense exchange's frames.

        None when unknown (a callable schedule): the library then assumes its default.
        """
        try:
            return eb_lib.min_error_bound(self.settings)
        except ValueError:
            return None

    @property
    def needs_stats(self) -> bool:
        """True when ``update`` uses the per-table statistics (the automatic policy); the tiers
        policy ignores them, so the step need not compute them."""
        return self.settings.policy == "auto"

    def init(self):
        """The initial state (a pytree of arrays)."""
        return self._bundle.init()

    def bounds(self, state) -> jax.Array:
        """``error_bound``: float32[T], the relative (REL) bound of each table this step
        (traced: a new bound does not recompile)."""
        return self._bundle.bounds(state)

    def update(self, state, stats: dict[str, jax.Array] | None):
        """Next state from this step's per-table stats (each float32[T], replicated; None when
        ``needs_stats`` is False)."""
        if stats is not None:
            stats = eb_lib.TableStats(
                cotangent_abs_mean=stats["cotangent_abs_mean"],
                value_range=stats["value_range"],
                distinct_fraction=stats["distinct_fraction"],
            )
        return self._bundle.update(state, stats)
