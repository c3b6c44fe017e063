"""Static configuration of the dual-level adaptive error bound (no flag parsing here).

:class:`ErrorBoundConfig` is frozen and hashable: the table tiers, the schedule and the automatic
policy's settings, validated on construction (``ValueError`` naming the field; never a silent
rewrite). It reads and writes plain mappings (JSON/YAML) and files; command-line flags belong to
the trainer (``models/dlrm/flags.py``), which builds a config and overrides fields with
:meth:`ErrorBoundConfig.from_file` (``base=``) and :meth:`ErrorBoundConfig.replace`. :func:`table_bounds` and :func:`min_error_bound` turn a config
into static numbers (the per-table tier bounds; the smallest bound, which sizes codec buffers).

References:
  Feng et al., SC24, https://arxiv.org/abs/2407.04272, 2024, table-wise adaptive error bound.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from jax_lossy_comm.error_bound._checks import is_int, is_real, positive, require
from jax_lossy_comm.error_bound.schedules import SCHEDULE_KINDS, Schedule
from jax_lossy_comm.optional_deps import import_optional

POLICIES = ("tiers", "auto")


class Tier(NamedTuple):
    """A set of tables that share one relative error bound."""

    name: str  # e.g. "tighten", "loosen"
    value: float  # relative error bound (eb_rel) of these tables, > 0
    tables: tuple[int, ...]  # table ids in [0, num_tables), sorted, unique


def _parse_tier(name, spec) -> Tier:
    """Tier from ``(value, ids)``, ``{"value": v, "tables": ids}`` or a ``Tier``."""
    field = f"tiers[{name!r}]"
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"value", "tables"}
        require(
            not unknown and "value" in spec and "tables" in spec,
            field,
            "must have exactly the keys 'value' and 'tables'",
            dict(spec),
        )
        value, tables = spec["value"], spec["tables"]
    else:
        require(
            isinstance(spec, Sequence) and len(spec) == 2, field, "must be (value, table ids)", spec
        )
        value, tables = spec
    positive(f"{field}.value", value)
    require(
        isinstance(tables, (Sequence, set, frozenset))
        and not isinstance(tables, str)
        and all(is_int(i) for i in tables),
        f"{field}.tables",
        "must be a collection of integer table ids",
        tables,
    )
    return Tier(str(name), float(value), tuple(sorted({int(i) for i in tables})))


def _parse_tiers(tiers) -> tuple[Tier, ...]:
    if isinstance(tiers, Mapping):
        return tuple(_parse_tier(name, spec) for name, spec in tiers.items())
    require(
        isinstance(tiers, Sequence) and not isinstance(tiers, str),
        "tiers",
        "must be a mapping name -> (value, table ids) or a sequence of Tier",
        tiers,
    )
    parsed = []
    for tier in tiers:
        require(
            isinstance(tier, Sequence) and len(tier) == 3,
            "tiers",
            "entries must be Tier(name, value, tables)",
            tier,
        )
        parsed.append(_parse_tier(tier[0], tier[1:]))
    return tuple(parsed)


@dataclasses.dataclass(frozen=True)
class ErrorBoundConfig:
    """Static (hashable) configuration of the dual-level adaptive error bound.

    Nothing here is traced: pass the config to :func:`init`, :func:`error_bounds` and
    :func:`update` by closure or as a static argument. Every bound that changes during
    training lives in :class:`ErrorBoundState`.

    Raises:
      ValueError: on construction, for any invalid field; the message starts with
        ``ErrorBoundConfig.<field>``.
    """

    # Number of embedding tables (length of every per-table array).
    num_tables: int
    # Relative error bound of tables in no tier (paper Kaggle: 0.03).
    base: float = 0.03
    # Table-wise tiers: a mapping name -> (value, table ids) or
    # {"value": v, "tables": ids}; stored as a tuple of Tier. A table is in at most one.
    tiers: tuple[Tier, ...] = ()
    # Iteration-wise schedule: one of SCHEDULE_KINDS or a callable step -> multiplier.
    schedule: str | Schedule = "linear"
    # Multiplier at step 0 of the built-in schedules (paper: 2).
    eb_constant: float = 2.0
    # Steps until the built-in schedules reach 1 (paper: 65536).
    early_stage: int = 65536
    # Table-wise policy: "tiers" (fixed per-table bounds) or "auto" (auto_table_bounds).
    policy: str = "tiers"
    # Auto policy: smallest and largest per-table bound (before the schedule multiplier).
    tightest: float = 0.01
    loosest: float = 0.05
    # Auto policy: re-evaluate the per-table bounds every `update_every` steps.
    update_every: int = 1024
    # Auto policy: fraction of the way (in log space) moved toward the new target at each
    # re-evaluation, in (0, 1]; 1 jumps to the target.
    smoothing: float = 0.5
    # Auto policy: decay of the exponential moving average of the statistics, in [0, 1).
    stats_decay: float = 0.99
    # Auto policy: exponent of the distinct-vector share in the rule (0 ignores it).
    distinct_power: float = 0.5

    def __post_init__(self):
        require(
            is_int(self.num_tables) and self.num_tables >= 1,
            "num_tables",
            "must be an integer >= 1",
            self.num_tables,
        )
        positive("base", self.base)
        object.__setattr__(self, "tiers", _parse_tiers(self.tiers))
        owner: dict[int, str] = {}
        for tier in self.tiers:
            for table in tier.tables:
                require(
                    0 <= table < self.num_tables,
                    f"tiers[{tier.name!r}].tables",
                    f"table ids must be in [0, {self.num_tables})",
                    table,
                )
                require(
                    table not in owner,
                    "tiers",
                    f"tiers {owner.get(table)!r} and {tier.name!r} overlap on table",
                    table,
                )
                owner[table] = tier.name
        require(
            len({t.name for t in self.tiers}) == len(self.tiers),
            "tiers",
            "tier names must be unique",
            [t.name for t in self.tiers],
        )
        require(
            callable(self.schedule) or self.schedule in SCHEDULE_KINDS,
            "schedule",
            f"must be one of {SCHEDULE_KINDS} or a callable",
            self.schedule,
        )
        positive("eb_constant", self.eb_constant)
        require(
            is_int(self.early_stage) and self.early_stage > 0,
            "early_stage",
            "must be an integer > 0",
            self.early_stage,
        )
        require(self.policy in POLICIES, "policy", f"must be one of {POLICIES}", self.policy)
        positive("tightest", self.tightest)
        positive("loosest", self.loosest)
        require(
            self.tightest <= self.loosest,
            "loosest",
            f"must be >= tightest ({self.tightest})",
            self.loosest,
        )
        require(
            is_int(self.update_every) and self.update_every >= 1,
            "update_every",
            "must be an integer >= 1",
            self.update_every,
        )
        require(
            is_real(self.smoothing) and 0 < self.smoothing <= 1,
            "smoothing",
            "must be in (0, 1]",
            self.smoothing,
        )
        require(
            is_real(self.stats_decay) and 0 <= self.stats_decay < 1,
            "stats_decay",
            "must be in [0, 1)",
            self.stats_decay,
        )
        require(
            is_real(self.distinct_power) and 0 <= self.distinct_power < math.inf,
            "distinct_power",
            "must be a finite number >= 0",
            self.distinct_power,
        )
        if self.policy == "auto":
            for field, value in [("base", self.base)] + [
                (f"tiers[{t.name!r}].value", t.value) for t in self.tiers
            ]:
                require(
                    self.tightest <= value <= self.loosest,
                    field,
                    f"must lie in [tightest, loosest] = [{self.tightest}, {self.loosest}] "
                    "when policy is 'auto'",
                    value,
                )

    # ---- serialisation -----------------------------------------------------------------

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ErrorBoundConfig:
        """Builds a config from a plain mapping (as read from JSON or YAML).

        Args:
          d: keys are field names; ``tiers`` maps a tier name to ``{"value": float,
            "tables": [int, ...]}`` or ``[value, [ids]]``. A mapping with the single key
            ``"error_bound"`` is unwrapped first.

        Returns:
          The validated config.

        Raises:
          ValueError: unknown key (named) or invalid field (named).
        """
        require(isinstance(d, Mapping), "<root>", "must be a mapping", d)
        d = _unwrap(d)
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ValueError(
                f"ErrorBoundConfig: unknown field(s) {unknown}; known: {sorted(fields)}"
            )
        require("num_tables" in d, "num_tables", "is required", None)
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-serialisable mapping that :meth:`from_dict` reads back.

        Raises:
          ValueError: if ``schedule`` is a callable (it cannot be serialised).
        """
        require(
            isinstance(self.schedule, str),
            "schedule",
            "a callable schedule cannot be serialised",
            self.schedule,
        )
        d = dataclasses.asdict(self)
        d["tiers"] = {t.name: {"value": t.value, "tables": list(t.tables)} for t in self.tiers}
        return d

    def replace(self, **fields) -> ErrorBoundConfig:
        """A copy with ``fields`` changed, validated like a new config.

        Args:
          **fields: :class:`ErrorBoundConfig` fields, e.g. ``early_stage=75`` (``tiers`` in
            any form the constructor takes).

        Returns:
          The new config (this one is unchanged).

        Raises:
          ValueError: an unknown field (named) or an invalid value (field named).

        Examples:
          >>> from jax_lossy_comm.error_bound import paper_kaggle_config
          >>> c = paper_kaggle_config().replace(early_stage=75)
          >>> c.early_stage, c.schedule, c.base
          (75, 'log', 0.03)
          >>> c.replace(smoothing=0.0)
          Traceback (most recent call last):
          ...
          ValueError: ErrorBoundConfig.smoothing: must be in (0, 1], got 0.0
          >>> c.replace(eb_const=2.0)
          Traceback (most recent call last):
          ...
          ValueError: ErrorBoundConfig: unknown field(s) ['eb_const']; known: [...]
        """
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ValueError(
                f"ErrorBoundConfig: unknown field(s) {unknown}; known: {sorted(known)}"
            )
        return dataclasses.replace(self, **fields)

    @classmethod
    def from_file(
        cls, path: str | os.PathLike, base: ErrorBoundConfig | None = None
    ) -> ErrorBoundConfig:
        """Reads a config from a ``.json``, ``.yaml`` or ``.yml`` file (see :meth:`from_dict`).

        Args:
          path: the file: a mapping of fields, optionally under one key ``error_bound``.
          base: None: the file holds a whole config (``num_tables`` required). A config: the
            file may set only some fields; the others are ``base``'s (:meth:`replace`), as a
            trainer's ``--eb-config`` over its preset does.

        Raises:
          ValueError: unsupported extension, content that is not a mapping, or invalid
            content (field named).
          OSError: the file cannot be read.
        """
        content = _read_mapping(path)
        if base is None:
            return cls.from_dict(content)
        require(isinstance(content, Mapping), "<root>", "must be a mapping", content)
        return base.replace(**_unwrap(content))


def _read_mapping(path: str | os.PathLike) -> Any:
    """Parsed content of a ``.json``, ``.yaml`` or ``.yml`` file (not validated)."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".json", ".yaml", ".yml"):
        raise ValueError(f"ErrorBoundConfig file must end in .json, .yaml or .yml: {path}")
    with open(path, encoding="utf-8") as f:
        if ext == ".json":
            return json.load(f)
        yaml = import_optional("yaml", "pyyaml", "train", f"reading the YAML file {path}")
        return yaml.safe_load(f)


def _unwrap(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """A mapping ``{"error_bound": {...}}`` (a section of a trainer config) -> ``{...}``."""
    return d["error_bound"] if isinstance(d, Mapping) and set(d) == {"error_bound"} else d


def paper_kaggle_config(num_tables: int = 26, **overrides) -> ErrorBoundConfig:
    """The paper's Criteo Kaggle setting.

    Tiers: tighten 0.01 for tables {2, 3, 9, 11, 15, 20, 23, 25}, loosen 0.05 for
    {8, 16, 19, 21, 22, 24}, base 0.03; log schedule with ``eb_constant`` 2 and
    ``early_stage`` 65536 (the authors' ``kaggle_train_with_compress_adaptive.sh``).

    Args:
      num_tables: number of tables (26 for Criteo); must exceed 25.
      **overrides: any other :class:`ErrorBoundConfig` field.

    Returns:
      The config.

    Raises:
      ValueError: invalid overrides, or ``num_tables`` too small for the tier ids.

    Examples:
      >>> from jax_lossy_comm.error_bound import paper_kaggle_config
      >>> c = paper_kaggle_config()
      >>> [(t.name, t.value, len(t.tables)) for t in c.tiers], c.schedule
      ([('tighten', 0.01, 8), ('loosen', 0.05, 6)], 'log')

    References:
      Feng et al., SC24, arXiv 2407.04272, table-wise adaptive error bound (Kaggle).
    """
    fields = dict(
        num_tables=num_tables,
        base=0.03,
        tiers={
            "tighten": (0.01, (2, 3, 9, 11, 15, 20, 23, 25)),
            "loosen": (0.05, (8, 16, 19, 21, 22, 24)),
        },
        schedule="log",
        eb_constant=2.0,
        early_stage=65536,
    )
    fields.update(overrides)
    return ErrorBoundConfig(**fields)


def table_bounds(config: ErrorBoundConfig) -> np.ndarray:
    """Per-table relative error bounds given by the tiers (base for tables in no tier).

    Returns:
      float32[num_tables] numpy array (static; no schedule multiplier).

    Examples:
      >>> from jax_lossy_comm.error_bound import ErrorBoundConfig, table_bounds
      >>> c = ErrorBoundConfig(num_tables=4, base=0.03, tiers={"tighten": (0.01, [1])})
      >>> [round(float(b), 4) for b in table_bounds(c)]
      [0.03, 0.01, 0.03, 0.03]
    """
    bounds = np.full(config.num_tables, config.base, dtype=np.float32)
    for tier in config.tiers:
        bounds[list(tier.tables)] = tier.value
    return bounds


def min_error_bound(config: ErrorBoundConfig) -> float:
    """Smallest relative bound :func:`error_bounds` can return under ``config``.

    Static (a Python float): use it to size codec buffers (``compress(...,
    min_error_bound=...)``) while the bounds themselves stay traced. It is the smallest
    table bound (``tightest`` for the auto policy, else the smallest tier or base value)
    times the smallest multiplier of the built-in schedule, ``min(1, eb_constant)``.

    Returns:
      float > 0, a relative error bound.

    Raises:
      ValueError: if ``config.schedule`` is a callable (its range is unknown).

    Examples:
      >>> from jax_lossy_comm.error_bound import min_error_bound, paper_kaggle_config
      >>> round(min_error_bound(paper_kaggle_config()), 6)  # the tighten tier x 1
      0.01
    """
    require(
        isinstance(config.schedule, str),
        "schedule",
        "min_error_bound cannot bound a callable schedule",
        config.schedule,
    )
    lowest = config.tightest if config.policy == "auto" else float(table_bounds(config).min())
    # Same float32 product as error_bounds, so the floor is exact, not rounded up.
    return float(np.float32(lowest) * np.float32(min(1.0, config.eb_constant)))
