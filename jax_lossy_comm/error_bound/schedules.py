"""Iteration-wise level of the adaptive error bound: schedules of the bound's multiplier.

A schedule is ``Callable[[step], float32 multiplier]`` in optax style (jit-safe, ``jnp.where``
joins): it starts at ``eb_constant`` (2 in the paper), reaches 1 at ``early_stage`` (65536 in
the paper) and stays 1 after it. The built-in shapes are linear, log, step (10 stairs) and
constant; any callable (an optax schedule) works in their place.

References:
  Feng et al., "Accelerating Communication in Deep Learning Recommendation Model Training with
  Dual-Level Adaptive Lossy Compression", SC24, https://arxiv.org/abs/2407.04272, 2024,
  iteration-wise adaptive error bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jax_lossy_comm.error_bound._checks import is_int, is_real

__all__ = [
    "SCHEDULE_KINDS",
    "Schedule",
    "constant_schedule",
    "linear_schedule",
    "log_schedule",
    "make_schedule",
    "schedule_multiplier",
    "step_schedule",
]

Schedule = Callable[[Any], jax.Array]
"""A schedule maps a (possibly traced) integer step to a float32 scalar multiplier."""

SCHEDULE_KINDS = ("linear", "log", "step", "constant")


def _check_schedule_args(eb_constant: float, early_stage: int) -> None:
    """Raises ValueError naming the field when schedule parameters are invalid."""
    if not is_real(eb_constant) or not math.isfinite(eb_constant) or eb_constant <= 0:
        raise ValueError(f"eb_constant must be a finite number > 0, got {eb_constant!r}")
    if not is_int(early_stage) or early_stage <= 0:
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

    Examples:
      >>> from jax_lossy_comm.error_bound import linear_schedule
      >>> s = linear_schedule(eb_constant=2.0, early_stage=100)
      >>> [round(float(s(t)), 3) for t in (0, 50, 100, 1000)]
      [2.0, 1.5, 1.0, 1.0]

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

    Examples:
      >>> from jax_lossy_comm.error_bound import log_schedule
      >>> s = log_schedule(eb_constant=2.0, early_stage=100)
      >>> [round(float(s(t)), 3) for t in (0, 50, 100)]  # below linear's 1.5 at mid-stage
      [2.0, 1.38, 1.0]

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

    Examples:
      >>> from jax_lossy_comm.error_bound import step_schedule
      >>> s = step_schedule(eb_constant=2.0, early_stage=100, num_steps=10)
      >>> [round(float(s(t)), 3) for t in (0, 9, 10, 55, 100)]
      [2.0, 2.0, 1.9, 1.5, 1.0]

    References:
      Feng et al., SC24, arXiv 2407.04272, iteration-wise adaptive error bound.
    """
    if not is_int(num_steps) or num_steps < 1:
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
      A schedule ``step -> float32 multiplier`` (``c`` before ``T``, then 1), jit-safe.

    Raises:
      ValueError: if ``eb_constant <= 0`` or ``early_stage <= 0`` (names the field).

    Examples:
      >>> import jax.numpy as jnp
      >>> from jax_lossy_comm.error_bound import constant_schedule
      >>> constant_schedule(3.0, 10)(jnp.array([0, 9, 10]))
      Array([3., 3., 1.], dtype=float32)

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

    Examples:
      >>> from jax_lossy_comm.error_bound import make_schedule
      >>> float(make_schedule("step", eb_constant=3.0, early_stage=10)(0))
      3.0
      >>> float(make_schedule(lambda t: 1.5)(7))  # a callable is used as it is
      1.5

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

    Examples:
      >>> import jax.numpy as jnp
      >>> from jax_lossy_comm.error_bound import schedule_multiplier
      >>> schedule_multiplier("linear", jnp.arange(0, 5), eb_constant=2.0, early_stage=4)
      Array([2.  , 1.75, 1.5 , 1.25, 1.  ], dtype=float32)

    References:
      Feng et al., SC24, arXiv 2407.04272, iteration-wise adaptive error bound.
    """
    return make_schedule(kind, eb_constant=eb_constant, early_stage=early_stage)(step)
