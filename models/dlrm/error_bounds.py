"""The trainer's one boundary with the adaptive error bound (``jax_lossy_comm.error_bound``).

Every model file that needs the error-bound config or state goes through here: the presets
(the paper's Kaggle and Terabyte tiers), field overrides from flags or a file, and
``ErrorBoundHook``, which wraps the library's ``init`` / ``error_bounds`` / ``update`` for the
train step. The state lives in the train state (checkpointed, traced through the jitted
step), so a change of bound never recompiles.

Reference: Feng et al., SC24, arXiv 2407.04272 (dual-level adaptive error bound); the
authors' artifact for the tiers (``kaggle_train_with_compress_adaptive.sh``; Terabyte table
groups tight {0,9,10,19,20,21,22} and loose {5,8,12,15,16,17,18,24,25}).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import jax

from jax_lossy_comm import error_bound as _eb
from jax_lossy_comm._optional import import_optional

ErrorBoundConfig = _eb.ErrorBoundConfig
SCHEDULE_KINDS = _eb.SCHEDULE_KINDS
POLICIES = _eb.POLICIES

#: Names accepted by ``preset`` (and ``--eb-preset``).
PRESETS = ("paper_kaggle", "paper_terabyte", "uniform")

# The paper artifact's Terabyte table groups; the bounds (tighten 0.01, loosen 0.05, base
# 0.03) and the log schedule are the Kaggle ones: the artifact does not record others.
_TERABYTE_TIERS = {
    "tighten": (0.01, (0, 9, 10, 19, 20, 21, 22)),
    "loosen": (0.05, (5, 8, 12, 15, 16, 17, 18, 24, 25)),
}


def preset(name: str, num_tables: int = 26) -> ErrorBoundConfig:
    """A named error-bound setting for ``num_tables`` tables.

    Args:
      name: ``"paper_kaggle"`` (tighten 0.01 for {2,3,9,11,15,20,23,25}, loosen 0.05 for
        {8,16,19,21,22,24}, base 0.03, log schedule x2 over 65536 steps),
        ``"paper_terabyte"`` (the same bounds and schedule on the Terabyte tables: tighten
        {0,9,10,19,20,21,22}, loosen {5,8,12,15,16,17,18,24,25}) or ``"uniform"`` (base
        0.03 for every table, no tiers, the library's default linear schedule).
      num_tables: tables of the model; the paper presets need at least 26.

    Returns:
      The validated config.

    Raises:
      ValueError: unknown ``name``, or too few tables for the preset's tier ids.
    """
    if name == "paper_kaggle":
        return _eb.paper_kaggle_config(num_tables)
    if name == "paper_terabyte":
        return _eb.paper_kaggle_config(num_tables, tiers=_TERABYTE_TIERS)
    if name == "uniform":
        return ErrorBoundConfig(num_tables=num_tables, base=0.03)
    raise ValueError(f"unknown error-bound preset {name!r}; expected one of {PRESETS}")


def read_overrides(path: str | os.PathLike) -> dict[str, Any]:
    """The fields set by a JSON or YAML error-bound file (not validated; see ``override``).

    The file is a mapping of ``ErrorBoundConfig`` fields, optionally under one key
    ``error_bound``; it may set only some fields.

    Raises:
      ValueError: not ``.json``/``.yaml``/``.yml``, or the content is not a mapping.
      OSError: the file cannot be read.
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".json", ".yaml", ".yml"):
        raise ValueError(f"error-bound config file must end in .json, .yaml or .yml: {path}")
    with open(path, encoding="utf-8") as f:
        if ext == ".json":
            content = json.load(f)
        else:
            yaml = import_optional("yaml", "pyyaml", "train", f"reading the YAML file {path}")
            content = yaml.safe_load(f)
    if isinstance(content, Mapping) and set(content) == {"error_bound"}:
        content = content["error_bound"]
    if not isinstance(content, Mapping):
        raise ValueError(f"{path} must hold a mapping of error-bound fields, got {content!r}")
    return dict(content)


def override(config: ErrorBoundConfig, fields: Mapping[str, Any]) -> ErrorBoundConfig:
    """``config`` with ``fields`` replaced, validated; every other field stays.

    ``tiers`` is one field: a mapping ``name -> (value, table ids)`` replaces all tiers.

    Raises:
      ValueError: an unknown field (named) or an invalid value (the library's message).
    """
    return config.replace(**fields)


def to_dict(config: ErrorBoundConfig) -> dict[str, Any]:
    """A JSON-serialisable mapping of ``config`` (a callable schedule is written as its repr)."""
    if callable(config.schedule):
        return {
            **to_dict(config.replace(schedule="linear")),
            "schedule": repr(config.schedule),
        }
    return config.to_dict()


class ErrorBoundHook:
    """Per-table relative error bounds for the exchange, from the run's error-bound config
    (the library's ``adaptive_error_bound`` bundle, with the step's statistics as a dict).

    Args:
      config: the run's ``ErrorBoundConfig`` (``Config.error_bound``).
    """

    def __init__(self, config: ErrorBoundConfig):
        self.config = config
        self.num_tables = config.num_tables
        self._bundle = _eb.adaptive_error_bound(config)

    def describe(self) -> str:
        """One line for the log: base, tiers, schedule, policy."""
        c = self.config
        return (
            f"adaptive: base {c.base}, tiers {[(t.name, t.value, list(t.tables)) for t in c.tiers]}, "
            f"schedule {c.schedule} x{c.eb_constant} over {c.early_stage} steps, policy {c.policy}"
        )

    def min_error_bound(self) -> float | None:
        """Static smallest relative bound the step can use: sizes the dense exchange's frames.

        None when unknown (a callable schedule): the library then assumes its default.
        """
        try:
            return _eb.min_error_bound(self.config)
        except ValueError:
            return None

    @property
    def needs_stats(self) -> bool:
        """True when ``update`` uses the per-table statistics (the automatic policy); the tiers
        policy ignores them, so the step need not compute them."""
        return self.config.policy == "auto"

    def init(self):
        """The initial state (a pytree of arrays)."""
        return self._bundle.init()

    def bounds(self, state) -> jax.Array:
        """float32[T] relative error bounds for the current step."""
        return self._bundle.bounds(state)

    def update(self, state, stats: dict[str, jax.Array] | None):
        """Next state from this step's per-table stats (each float32[T], replicated; None when
        ``needs_stats`` is False)."""
        if stats is not None:
            stats = _eb.TableStats(
                cotangent_abs_mean=stats["cotangent_abs_mean"],
                value_range=stats["value_range"],
                distinct_fraction=stats["distinct_fraction"],
            )
        return self._bundle.update(state, stats)
