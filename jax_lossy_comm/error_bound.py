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

Typical use in a training step::

    config = paper_kaggle_config()
    state = init(config)

    @jax.jit
    def train_step(params, batch, eb_state):
        eb_rel = error_bounds(eb_state, config)      # float32[num_tables]
        ...                                          # compress with eb_rel, measure stats
        return params, update(eb_state, stats, config)

This module does not import the codec or the exchange.

References:
  Feng, Zhang, Ye, Si, Chu, Tian, Yin, Deng, Hao, Balaji, Geng, Tao, "Accelerating
  Communication in Deep Learning Recommendation Model Training with Dual-Level Adaptive
  Lossy Compression", SC24, https://arxiv.org/abs/2407.04272, 2024, section on the
  dual-level (table-wise and iteration-wise) adaptive error bound.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "SCHEDULE_KINDS",
    "POLICIES",
    "Schedule",
    "Tier",
    "TableStats",
    "ErrorBoundState",
    "ErrorBoundConfig",
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

Schedule = Callable[[Any], jax.Array]
"""A schedule maps a (possibly traced) integer step to a float32 scalar multiplier."""

SCHEDULE_KINDS = ("linear", "log", "step", "constant")
POLICIES = ("tiers", "auto")

# Floor for statistics before taking logs: zero sensitivity means "loosest".
_TINY = 1e-30


# --------------------------------------------------------------------------------------
# Iteration-wise schedules
# --------------------------------------------------------------------------------------


def _check_schedule_args(eb_constant: float, early_stage: int) -> None:
    """Raises ValueError naming the field when schedule parameters are invalid."""
    if not _is_real(eb_constant) or not math.isfinite(eb_constant) or eb_constant <= 0:
        raise ValueError(f"eb_constant must be a finite number > 0, got {eb_constant!r}")
    if not _is_int(early_stage) or early_stage <= 0:
        raise ValueError(f"early_stage must be an integer > 0, got {early_stage!r}")


def _decay_schedule(
    shape: Callable[[jax.Array, float], jax.Array], eb_constant: float, early_stage: int
) -> Schedule:
    """Builds ``t -> shape(clip(t / T, 0, 1), c)`` for ``t < T`` and ``1`` for ``t >= T``."""
    _check_schedule_args(eb_constant, early_stage)
    c = float(eb_constant)

    def schedule(step):
        step = jnp.asarray(step)
        progress = jnp.clip(step.astype(jnp.float32) / early_stage, 0.0, 1.0)
        value = shape(progress, c)
        return jnp.where(step >= early_stage, 1.0, value).astype(jnp.float32)

    return schedule


def linear_schedule(eb_constant: float = 2.0, early_stage: int = 65536) -> Schedule:
    r"""Linear decay of the error-bound multiplier from ``c`` to 1 over the early stage.

    .. math:: m(t) = c \left(1 - \frac{t}{T}\left(1 - \frac{1}{c}\right)\right),
       \quad t < T; \qquad m(t) = 1, \quad t \ge T.

    Args:
      eb_constant: ``c`` > 0, the multiplier at step 0 (paper: 2).
      early_stage: ``T`` > 0, steps until the multiplier reaches 1 (paper: 65536).

    Returns:
      A schedule ``step (int, any shape) -> float32 multiplier`` (same shape), jit-safe.

    Raises:
      ValueError: if ``eb_constant <= 0`` or ``early_stage <= 0`` (names the field).

    References:
      Feng et al., SC24, arXiv 2407.04272, iteration-wise adaptive error bound.
    """
    return _decay_schedule(lambda p, c: c * (1.0 - p * (1.0 - 1.0 / c)), eb_constant, early_stage)


def log_schedule(eb_constant: float = 2.0, early_stage: int = 65536) -> Schedule:
    r"""Logarithmic decay: fast at the start of the early stage, slow near its end.

    .. math:: s = 1 - \ln\left(1 + \frac{t}{T}(e - 1)\right), \quad
       m(t) = c \left(s\left(1 - \frac{1}{c}\right) + \frac{1}{c}\right),
       \quad t < T; \qquad m(t) = 1, \quad t \ge T.

    ``s`` falls from 1 at ``t = 0`` to 0 at ``t = T``, so ``m`` goes from ``c`` to 1.

    Args:
      eb_constant: ``c`` > 0, the multiplier at step 0 (paper: 2).
      early_stage: ``T`` > 0, steps until the multiplier reaches 1 (paper: 65536).

    Returns:
      A schedule ``step -> float32 multiplier``, jit-safe.

    Raises:
      ValueError: if ``eb_constant <= 0`` or ``early_stage <= 0`` (names the field).

    References:
      Feng et al., SC24, arXiv 2407.04272, iteration-wise adaptive error bound.
    """

    def shape(p, c):
        s = 1.0 - jnp.log1p(p * (math.e - 1.0))
        return c * (s * (1.0 - 1.0 / c) + 1.0 / c)

    return _decay_schedule(shape, eb_constant, early_stage)


def step_schedule(
    eb_constant: float = 2.0, early_stage: int = 65536, num_steps: int = 10
) -> Schedule:
    r"""Staircase decay in ``num_steps`` equal steps (paper: 10).

    .. math:: m(t) = c \max\left(1 - \left\lfloor \frac{n t}{T} \right\rfloor
       \frac{1 - 1/c}{n}, \frac{1}{c}\right), \quad t < T; \qquad m(t) = 1, \quad t \ge T.

    Args:
      eb_constant: ``c`` > 0, the multiplier at step 0 (paper: 2).
      early_stage: ``T`` > 0, steps until the multiplier reaches 1 (paper: 65536).
      num_steps: ``n`` >= 1, number of equal stairs over the early stage.

    Returns:
      A schedule ``step -> float32 multiplier``, jit-safe.

    Raises:
      ValueError: if ``eb_constant <= 0``, ``early_stage <= 0`` or ``num_steps < 1``.

    References:
      Feng et al., SC24, arXiv 2407.04272, iteration-wise adaptive error bound.
    """
    if not _is_int(num_steps) or num_steps < 1:
        raise ValueError(f"num_steps must be an integer >= 1, got {num_steps!r}")

    _check_schedule_args(eb_constant, early_stage)
    c, total = float(eb_constant), int(early_stage)

    def schedule(step):
        # The stair in integers: floor(n t / T) in float32 lands one stair low at exact multiples
        # (t = T/10 gave stair 0). Needs n * T < 2**31.
        step = jnp.asarray(step)
        t = jnp.clip(step, 0, total).astype(jnp.int32)
        stair = ((t * num_steps) // total).astype(jnp.float32)
        value = c * jnp.maximum(1.0 - stair * (1.0 - 1.0 / c) / num_steps, 1.0 / c)
        return jnp.where(step >= total, 1.0, value).astype(jnp.float32)

    return schedule


def constant_schedule(eb_constant: float = 2.0, early_stage: int = 65536) -> Schedule:
    r"""Constant multiplier ``c`` over the early stage, then 1.

    .. math:: m(t) = c, \quad t < T; \qquad m(t) = 1, \quad t \ge T.

    Args:
      eb_constant: ``c`` > 0, the multiplier before ``early_stage`` (paper: 2).
      early_stage: ``T`` > 0, the step at which the multiplier drops to 1.

    Returns:
      A schedule ``step -> float32 multiplier``, jit-safe.

    Raises:
      ValueError: if ``eb_constant <= 0`` or ``early_stage <= 0`` (names the field).

    References:
      Feng et al., SC24, arXiv 2407.04272, iteration-wise adaptive error bound.
    """
    return _decay_schedule(lambda p, c: jnp.full_like(p, c), eb_constant, early_stage)


_BUILDERS = {
    "linear": linear_schedule,
    "log": log_schedule,
    "step": step_schedule,
    "constant": constant_schedule,
}


def make_schedule(
    kind: str | Schedule, *, eb_constant: float = 2.0, early_stage: int = 65536
) -> Schedule:
    """Returns the schedule named ``kind``, or ``kind`` itself when it is a callable.

    Args:
      kind: one of ``SCHEDULE_KINDS`` or a callable ``step -> multiplier`` (for example an
        optax schedule); a callable is returned unchanged and ``eb_constant`` /
        ``early_stage`` are ignored.
      eb_constant: multiplier at step 0, > 0.
      early_stage: steps until the multiplier reaches 1, > 0.

    Returns:
      A schedule ``step -> float32 multiplier``.

    Raises:
      ValueError: unknown ``kind``, or invalid ``eb_constant`` / ``early_stage``.
    """
    if callable(kind):
        return kind
    if kind not in _BUILDERS:
        raise ValueError(f"schedule must be one of {SCHEDULE_KINDS} or a callable, got {kind!r}")
    return _BUILDERS[kind](eb_constant=eb_constant, early_stage=early_stage)


def schedule_multiplier(
    kind: str | Schedule,
    step,
    *,
    eb_constant: float = 2.0,
    early_stage: int = 65536,
) -> jax.Array:
    """Iteration-wise error-bound multiplier at ``step``.

    Args:
      kind: ``"linear"``, ``"log"``, ``"step"``, ``"constant"`` or a callable schedule.
      step: int (Python or traced, any shape), the training iteration.
      eb_constant: multiplier at step 0 (paper: 2), > 0.
      early_stage: steps until the multiplier reaches 1 (paper: 65536), > 0.

    Returns:
      float32 array of ``step``'s shape: the multiplier, ``eb_constant`` at 0 and 1 from
      ``early_stage`` on.

    Raises:
      ValueError: unknown ``kind``, or invalid ``eb_constant`` / ``early_stage``.

    References:
      Feng et al., SC24, arXiv 2407.04272, iteration-wise adaptive error bound.
    """
    return make_schedule(kind, eb_constant=eb_constant, early_stage=early_stage)(step)


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------


class Tier(NamedTuple):
    """A set of tables that share one relative error bound."""

    name: str  # e.g. "tighten", "loosen"
    value: float  # relative error bound (eb_rel) of these tables, > 0
    tables: tuple[int, ...]  # table ids in [0, num_tables), sorted, unique


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _require(ok: bool, field: str, message: str, value) -> None:
    if not ok:
        raise ValueError(f"ErrorBoundConfig.{field}: {message}, got {value!r}")


def _positive(field: str, value) -> None:
    _require(
        _is_real(value) and math.isfinite(value) and value > 0,
        field,
        "must be a finite number > 0",
        value,
    )


def _parse_tier(name, spec) -> Tier:
    """Tier from ``(value, ids)``, ``{"value": v, "tables": ids}`` or a ``Tier``."""
    field = f"tiers[{name!r}]"
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"value", "tables"}
        _require(
            not unknown and "value" in spec and "tables" in spec,
            field,
            "must have exactly the keys 'value' and 'tables'",
            dict(spec),
        )
        value, tables = spec["value"], spec["tables"]
    else:
        _require(
            isinstance(spec, Sequence) and len(spec) == 2, field, "must be (value, table ids)", spec
        )
        value, tables = spec
    _positive(f"{field}.value", value)
    _require(
        isinstance(tables, (Sequence, set, frozenset))
        and not isinstance(tables, str)
        and all(_is_int(i) for i in tables),
        f"{field}.tables",
        "must be a collection of integer table ids",
        tables,
    )
    return Tier(str(name), float(value), tuple(sorted({int(i) for i in tables})))


def _parse_tiers(tiers) -> tuple[Tier, ...]:
    if isinstance(tiers, Mapping):
        return tuple(_parse_tier(name, spec) for name, spec in tiers.items())
    _require(
        isinstance(tiers, Sequence) and not isinstance(tiers, str),
        "tiers",
        "must be a mapping name -> (value, table ids) or a sequence of Tier",
        tiers,
    )
    parsed = []
    for tier in tiers:
        _require(
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
        _require(
            _is_int(self.num_tables) and self.num_tables >= 1,
            "num_tables",
            "must be an integer >= 1",
            self.num_tables,
        )
        _positive("base", self.base)
        object.__setattr__(self, "tiers", _parse_tiers(self.tiers))
        owner: dict[int, str] = {}
        for tier in self.tiers:
            for table in tier.tables:
                _require(
                    0 <= table < self.num_tables,
                    f"tiers[{tier.name!r}].tables",
                    f"table ids must be in [0, {self.num_tables})",
                    table,
                )
                _require(
                    table not in owner,
                    "tiers",
                    f"tiers {owner.get(table)!r} and {tier.name!r} overlap on table",
                    table,
                )
                owner[table] = tier.name
        _require(
            len({t.name for t in self.tiers}) == len(self.tiers),
            "tiers",
            "tier names must be unique",
            [t.name for t in self.tiers],
        )
        _require(
            callable(self.schedule) or self.schedule in SCHEDULE_KINDS,
            "schedule",
            f"must be one of {SCHEDULE_KINDS} or a callable",
            self.schedule,
        )
        _positive("eb_constant", self.eb_constant)
        _require(
            _is_int(self.early_stage) and self.early_stage > 0,
            "early_stage",
            "must be an integer > 0",
            self.early_stage,
        )
        _require(self.policy in POLICIES, "policy", f"must be one of {POLICIES}", self.policy)
        _positive("tightest", self.tightest)
        _positive("loosest", self.loosest)
        _require(
            self.tightest <= self.loosest,
            "loosest",
            f"must be >= tightest ({self.tightest})",
            self.loosest,
        )
        _require(
            _is_int(self.update_every) and self.update_every >= 1,
            "update_every",
            "must be an integer >= 1",
            self.update_every,
        )
        _require(
            _is_real(self.smoothing) and 0 < self.smoothing <= 1,
            "smoothing",
            "must be in (0, 1]",
            self.smoothing,
        )
        _require(
            _is_real(self.stats_decay) and 0 <= self.stats_decay < 1,
            "stats_decay",
            "must be in [0, 1)",
            self.stats_decay,
        )
        _require(
            _is_real(self.distinct_power) and 0 <= self.distinct_power < math.inf,
            "distinct_power",
            "must be a finite number >= 0",
            self.distinct_power,
        )
        if self.policy == "auto":
            for field, value in [("base", self.base)] + [
                (f"tiers[{t.name!r}].value", t.value) for t in self.tiers
            ]:
                _require(
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
        _require(isinstance(d, Mapping), "<root>", "must be a mapping", d)
        d = _unwrap(d)
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ValueError(
                f"ErrorBoundConfig: unknown field(s) {unknown}; known: {sorted(fields)}"
            )
        _require("num_tables" in d, "num_tables", "is required", None)
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-serialisable mapping that :meth:`from_dict` reads back.

        Raises:
          ValueError: if ``schedule`` is a callable (it cannot be serialised).
        """
        _require(
            isinstance(self.schedule, str),
            "schedule",
            "a callable schedule cannot be serialised",
            self.schedule,
        )
        d = dataclasses.asdict(self)
        d["tiers"] = {t.name: {"value": t.value, "tables": list(t.tables)} for t in self.tiers}
        return d

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> ErrorBoundConfig:
        """Reads a config from a ``.json``, ``.yaml`` or ``.yml`` file (see :meth:`from_dict`).

        Raises:
          ValueError: unsupported extension, or invalid content (field named).
          OSError: the file cannot be read.
        """
        return cls.from_dict(_read_mapping(path))

    # ---- command-line flags ------------------------------------------------------------

    @staticmethod
    def add_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        """Adds ``--eb-*`` flags to a trainer's parser (all default to "not given").

        Flags: ``--eb-config FILE`` (JSON/YAML, read first), ``--eb-preset paper_kaggle``,
        then one flag per field that override it: ``--eb-num-tables``, ``--eb-base``,
        ``--eb-tier NAME=VALUE:ID,ID,...`` (repeatable; replaces the file's tiers),
        ``--eb-schedule``, ``--eb-constant``, ``--eb-early-stage``, ``--eb-policy``,
        ``--eb-tightest``, ``--eb-loosest``, ``--eb-update-every``, ``--eb-smoothing``,
        ``--eb-stats-decay``, ``--eb-distinct-power``.

        Returns:
          ``parser``, for chaining.
        """
        g = parser.add_argument_group("adaptive error bound")
        g.add_argument("--eb-config", help="JSON or YAML file with the error-bound config")
        g.add_argument(
            "--eb-preset",
            choices=["paper_kaggle"],
            help="start from the paper's Criteo Kaggle setting",
        )
        for field, kind, help_ in _FLAG_FIELDS:
            extra = (
                {"choices": SCHEDULE_KINDS}
                if field == "schedule"
                else ({"choices": POLICIES} if field == "policy" else {})
            )
            g.add_argument(
                "--" + _flag_name(field),
                dest="eb_" + field,
                type=kind,
                default=None,
                help=help_,
                **extra,
            )
        g.add_argument(
            "--eb-tier",
            dest="eb_tier",
            action="append",
            default=None,
            metavar="NAME=VALUE:ID,ID,...",
            help="a tier of tables sharing one bound, e.g. tighten=0.01:2,3,9",
        )
        return parser

    @classmethod
    def from_flags(
        cls, args: argparse.Namespace, *, num_tables: int | None = None
    ) -> ErrorBoundConfig:
        """Builds a config from flags added by :meth:`add_flags`.

        Precedence: preset, then ``--eb-config`` file, then individual flags; ``num_tables``
        (the trainer's table count) applies when no source sets it.

        Args:
          args: the parsed namespace.
          num_tables: the trainer's number of tables, used when no flag or file sets it.

        Returns:
          The validated config.

        Raises:
          ValueError: invalid flag value or resulting config (field named).
        """
        num_tables = args.eb_num_tables or num_tables
        d: dict[str, Any] = {}
        if args.eb_preset == "paper_kaggle":
            d.update(paper_kaggle_config(num_tables or 26).to_dict())
        if args.eb_config:
            content = _unwrap(_read_mapping(args.eb_config))
            _require(
                isinstance(content, Mapping),
                "<root>",
                f"{args.eb_config} must hold a mapping",
                content,
            )
            d.update(content)
        if num_tables is not None:
            d.setdefault("num_tables", num_tables)
        for field, _, _ in _FLAG_FIELDS:
            value = getattr(args, "eb_" + field)
            if value is not None:
                d[field] = value
        if args.eb_tier is not None:
            d["tiers"] = dict(_parse_tier_flag(s) for s in args.eb_tier)
        return cls.from_dict(d)


def _flag_name(field: str) -> str:
    return "eb-constant" if field == "eb_constant" else "eb-" + field.replace("_", "-")


_FLAG_FIELDS = (
    ("num_tables", int, "number of embedding tables"),
    ("base", float, "relative error bound of tables in no tier"),
    ("schedule", str, "iteration-wise schedule"),
    ("eb_constant", float, "schedule multiplier at step 0"),
    ("early_stage", int, "steps until the multiplier reaches 1"),
    ("policy", str, "table-wise policy"),
    ("tightest", float, "auto policy: smallest per-table bound"),
    ("loosest", float, "auto policy: largest per-table bound"),
    ("update_every", int, "auto policy: re-evaluate every K steps"),
    ("smoothing", float, "auto policy: step toward the target, in (0, 1]"),
    ("stats_decay", float, "auto policy: EMA decay of the statistics"),
    ("distinct_power", float, "auto policy: exponent of the distinct-vector share"),
)


def _parse_tier_flag(text: str) -> tuple[str, tuple[float, list[int]]]:
    """``"tighten=0.01:2,3,9"`` -> ``("tighten", (0.01, [2, 3, 9]))``."""
    try:
        name, rest = text.split("=", 1)
        value, ids = rest.split(":", 1)
        return name.strip(), (float(value), [int(i) for i in ids.split(",") if i.strip()])
    except ValueError:
        raise ValueError(
            f"ErrorBoundConfig.tiers: --eb-tier must look like NAME=VALUE:ID,ID,..., got {text!r}"
        ) from None


def _read_mapping(path: str | os.PathLike) -> Any:
    """Parsed content of a ``.json``, ``.yaml`` or ``.yml`` file (not validated)."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".json", ".yaml", ".yml"):
        raise ValueError(f"ErrorBoundConfig file must end in .json, .yaml or .yml: {path}")
    with open(path, encoding="utf-8") as f:
        if ext == ".json":
            return json.load(f)
        import yaml  # Optional dependency (jax_lossy_comm[train]).

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
    """
    _require(
        isinstance(config.schedule, str),
        "schedule",
        "min_error_bound cannot bound a callable schedule",
        config.schedule,
    )
    lowest = config.tightest if config.policy == "auto" else float(table_bounds(config).min())
    # Same float32 product as error_bounds, so the floor is exact, not rounded up.
    return float(np.float32(lowest) * np.float32(min(1.0, config.eb_constant)))


# --------------------------------------------------------------------------------------
# State, automatic policy, init / error_bounds / update
# --------------------------------------------------------------------------------------


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
    """Traced state of the adaptive error bound, carried through the jitted step."""

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


def error_bounds(state: ErrorBoundState, config: ErrorBoundConfig) -> jax.Array:
    """Per-table relative error bounds for the current step.

    .. math:: eb\\_rel_i = m(step) \\cdot table\\_bound_i

    Args:
      state: the current state (``state.step`` is the step being trained).
      config: the static config (gives the schedule).

    Returns:
      float32[num_tables]: ``eb_rel`` per table; ``eb_abs = eb_rel * (max - min)``.

    References:
      Feng et al., SC24, arXiv 2407.04272, dual-level adaptive error bound.
    """
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
      TypeError: ``stats`` is not a TableStats.
      ValueError: a statistic does not have shape ``(num_tables,)``.

    References:
      Feng et al., SC24, arXiv 2407.04272, dual-level adaptive error bound.
    """
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
