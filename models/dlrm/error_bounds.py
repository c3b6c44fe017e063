"""The trainer's one hook into the adaptive error bound (``jax_lossy_comm.error_bound``).

The state lives in the train state (checkpointed, traced through the jitted step), so a
change of bound never recompiles. ``ErrorBoundHook`` wraps the library's
``init`` / ``error_bounds`` / ``update``; when that module cannot be imported it falls back
to a fixed per-table vector (``placeholder_eb_rel``) so the trainer still runs.

Reference: Feng et al., SC24, arXiv 2407.04272 (dual-level adaptive error bound).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

try:  # the library piece; see jax_lossy_comm/error_bound.py
    from jax_lossy_comm import error_bound as _eb
except ImportError:  # pragma: no cover - only before the library lands
    _eb = None


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Adds the library's ``--eb-*`` flags (when available) to ``parser``."""
    if _eb is not None:
        _eb.ErrorBoundConfig.add_flags(parser)


class ErrorBoundHook:
    """Per-table relative error bounds for the exchange.

    Args:
      num_tables: T.
      args: parsed flags (``--error-bound-config`` and the library's ``--eb-*``), or None
        for the paper's Kaggle setting (``paper_kaggle_config`` when T >= 26, else the base
        0.03 for every table).
      placeholder_eb_rel: the fixed bound used when the library is unavailable.
    """

    def __init__(
        self,
        num_tables: int,
        args: argparse.Namespace | None = None,
        placeholder_eb_rel: float = 0.03,
    ):
        self.num_tables = num_tables
        self.placeholder_eb_rel = float(placeholder_eb_rel)
        self.config = None
        if _eb is None:
            return
        given = args is not None and (
            getattr(args, "error_bound_config", "")
            or any(getattr(args, k) not in (None, False) for k in vars(args) if k.startswith("eb_"))
        )
        if given:
            if getattr(args, "error_bound_config", ""):
                args.eb_config = args.eb_config or args.error_bound_config
            self.config = _eb.ErrorBoundConfig.from_flags(args, num_tables=num_tables)
        elif num_tables >= 26:
            self.config = _eb.paper_kaggle_config(num_tables)
        else:
            self.config = _eb.ErrorBoundConfig(num_tables=num_tables, base=0.03)
        if self.config.num_tables != num_tables:
            raise ValueError(
                f"error-bound config has {self.config.num_tables} tables, "
                f"the model has {num_tables}"
            )

    @property
    def library(self) -> bool:
        """True when the adaptive library drives the bounds (False: fixed placeholder)."""
        return self.config is not None

    def describe(self) -> str:
        if self.config is None:
            return f"fixed placeholder eb_rel {self.placeholder_eb_rel} (jax_lossy_comm.error_bound missing)"
        c = self.config
        return (
            f"adaptive: base {c.base}, tiers {[(t.name, t.value, list(t.tables)) for t in c.tiers]}, "
            f"schedule {c.schedule} x{c.eb_constant} over {c.early_stage} steps, policy {c.policy}"
        )

    def min_error_bound(self) -> float | None:
        """Static smallest relative bound the step can use: sizes the dense exchange's frames.

        None when unknown (a callable schedule): the library then assumes its default.
        """
        if self.config is None:
            return self.placeholder_eb_rel
        try:
            return _eb.min_error_bound(self.config)
        except ValueError:
            return None

    @property
    def needs_stats(self) -> bool:
        """True when ``update`` uses the per-table statistics (the automatic policy); the tiers
        policy and the fixed placeholder ignore them, so the step need not compute them."""
        return self.config is not None and self.config.policy == "auto"

    def init(self):
        """The initial state (a pytree of arrays)."""
        if self.config is None:
            return {"eb_rel": jnp.full((self.num_tables,), self.placeholder_eb_rel, jnp.float32)}
        return _eb.init(self.config)

    def bounds(self, state) -> jax.Array:
        """float32[T] relative error bounds for the current step."""
        if self.config is None:
            return state["eb_rel"]
        return _eb.error_bounds(state, self.config)

    def update(self, state, stats: dict[str, jax.Array] | None):
        """Next state from this step's per-table stats (each float32[T], replicated; None when
        ``needs_stats`` is False)."""
        if self.config is None:
            return state
        if stats is None:
            return _eb.update(state, None, self.config)
        return _eb.update(
            state,
            _eb.TableStats(
                cotangent_abs_mean=stats["cotangent_abs_mean"],
                value_range=stats["value_range"],
                distinct_fraction=stats["distinct_fraction"],
            ),
            self.config,
        )
