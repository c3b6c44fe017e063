"""The one place where the DLRM sums its data-parallel head gradients over the devices.

``Config.grad_allreduce`` chooses the all-reduce of the bottom/top MLP gradients inside the
train step's ``shard_map``:

* ``"exact"``: ``jax.lax.psum``;
* ``"bf16"``: ``jax_lossy_comm.compressed_psum`` with the ``BF16`` codec (PyTorch DDP's bf16
  compression hook; no bound, no feedback);
* ``"compressed"``: ``compressed_psum`` with the library's error-bounded frames (REL
  ``Config.grad_error_bound``, codec ``Config.grad_codec``) and, with ``Config.grad_error_feedback``, error feedback
  (``jax_lossy_comm.error_feedback``): each device's residual lives in ``TrainState.grad_ef``
  with a leading device axis ``[P, ...]`` sharded over the mesh, and is checkpointed with it.
  With ``Config.grad_precondition == "adagrad"`` the frames code the gradients times Adagrad's
  step sizes (``scale=`` of the library, ``jax_lossy_comm.adagrad_scale`` of the head's
  accumulator before the step), so the REL bound bounds the update; the residual stays in
  the gradients' coordinates (the same ``TrainState.grad_ef``).

Byte counts follow ``jax_lossy_comm.ExchangeStats``: ``raw_bytes`` is twice the gradient
bytes (a reduce-scatter plus an all-gather of the raw values, what the exact all-reduce
moves), ``moved_bytes`` what the chosen all-reduce sent.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jax_lossy_comm import (
    BF16,
    AllReduceConfig,
    ErrorFeedbackState,
    ExchangeStats,
    FrameCodec,
    adagrad_scale,
    compressed_psum_with_stats,
    error_feedback,
)

MODES = ("exact", "bf16", "compressed")


@dataclasses.dataclass(frozen=True)
class HeadGradAllReduce:
    """How the train step sums the head gradients, built once from the run's ``Config``
    (:func:`from_config`); frozen and hashable, a static part of the step.

    Attributes:
      mode: ``"exact"`` (``jax.lax.psum``), ``"bf16"`` or ``"compressed"`` (``MODES``).
      allreduce: the library's ``AllReduceConfig`` of ``compressed_psum`` (None for "exact").
      error_bound: the relative (REL) bound of the "compressed" mode's frames, a float in
        (0, 1); None for the other modes (the BF16 cast has no bound).
      error_feedback: each device keeps the residual of its head gradients
        (``TrainState.grad_ef``); only with "compressed".
      adagrad_eps: with "compressed" and ``Config.grad_precondition == "adagrad"``, the
        ``eps`` of :func:`head_scale` (Adagrad's), else None (raw gradients are coded).

    Raises:
      ValueError: an unknown mode.
    """

    mode: str = "exact"
    allreduce: AllReduceConfig | None = None
    error_bound: float | None = None
    error_feedback: bool = False
    adagrad_eps: float | None = None

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"grad_allreduce must be one of {MODES}, got {self.mode!r}")


def from_config(config) -> HeadGradAllReduce:
    """The run's :class:`HeadGradAllReduce` from its ``Config`` (``grad_allreduce``,
    ``grad_codec``, ``grad_error_bound``, ``grad_error_feedback``, ``grad_precondition``).

    Raises:
      ValueError: an unknown ``grad_allreduce``, or ``"auto"`` (the run's probe resolves it
        first: ``models.dlrm.cluster.exchange_probe.choose_exchange``).
    """
    mode = config.grad_allreduce
    if mode == "auto":
        raise ValueError(
            "grad_allreduce 'auto' is decided by the run's probe (compression auto) before the "
            "all-reduce is built"
        )
    if mode == "bf16":
        return HeadGradAllReduce(mode, AllReduceConfig(BF16()))
    if mode != "compressed":
        return HeadGradAllReduce(mode)
    # The fixed-rate codec's capacity is sized statically by the (static) bound.
    bound = config.grad_error_bound if config.grad_codec == "fixed" else None
    codec = FrameCodec(mode="rel", codec=config.grad_codec, min_error_bound=bound)
    eps = config.adagrad_eps if config.grad_precondition == "adagrad" else None
    return HeadGradAllReduce(
        mode, AllReduceConfig(codec), config.grad_error_bound, config.grad_error_feedback, eps
    )


def head_scale(allreduce: HeadGradAllReduce, opt_state):
    """The ``scale`` of the head gradients' all-reduce (outside ``shard_map``, from the
    optimizer state before the step): Adagrad's ``1 / sqrt(v + eps)`` of the head
    (``jax_lossy_comm.adagrad_scale``), or None (raw gradients)."""
    if allreduce.adagrad_eps is None:
        return None
    return adagrad_scale(opt_state, allreduce.adagrad_eps)["head"]


def init_state(allreduce: HeadGradAllReduce, head_params, num_devices: int) -> ErrorFeedbackState:
    """The ``TrainState.grad_ef`` of a new run: zero residuals ``[P, *shape]`` (each head
    parameter's dtype, P = ``num_devices``) with error feedback, else an empty state
    (``residual={}``)."""
    if not allreduce.error_feedback:
        return ErrorFeedbackState({})
    return ErrorFeedbackState(
        jax.tree.map(lambda x: jnp.zeros((num_devices,) + x.shape, x.dtype), head_params)
    )


def reduce_head_grads(
    allreduce: HeadGradAllReduce, g_head, grad_ef: ErrorFeedbackState, axis_name, scale=None
):
    """Sums ``g_head`` over ``axis_name`` (inside ``shard_map``) as ``allreduce`` says.

    Args:
      allreduce: the run's :class:`HeadGradAllReduce`.
      g_head: this device's head gradients (pytree of float32, varying over the axis).
      grad_ef: this device's block of ``TrainState.grad_ef`` (residual leaves ``[1, ...]``).
      axis_name: the mesh axis.
      scale: :func:`head_scale` (invariant over the axis), or None.

    Returns:
      ``(g, new_grad_ef, stats)``: the summed gradients (invariant), the new residual block
      (``[1, ...]`` leaves; empty without feedback) and this device's ``ExchangeStats``.
    """
    if allreduce.mode == "exact":
        g = jax.lax.psum(g_head, axis_name)
        nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(g_head))
        stats = ExchangeStats.exact(2 * nbytes, (2,), capacity_bytes=2 * nbytes)
        return g, grad_ef, stats
    cfg, error_bound = allreduce.allreduce, allreduce.error_bound
    if not allreduce.error_feedback:
        g, stats = compressed_psum_with_stats(
            g_head, axis_name, error_bound=error_bound, config=cfg, scale=scale
        )
        return g, grad_ef, stats
    ef = error_feedback(axis_name, config=cfg)
    local = ErrorFeedbackState(jax.tree.map(lambda r: r[0], grad_ef.residual))
    g, new, stats = ef.update_with_stats(g_head, local, error_bound, scale)
    return g, ErrorFeedbackState(jax.tree.map(lambda r: r[None], new.residual)), stats
