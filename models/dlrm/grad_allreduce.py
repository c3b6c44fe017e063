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

Byte counts follow ``jax_lossy_comm.ExchangeStats``: ``raw_bytes`` is twice the gradient
bytes (a reduce-scatter plus an all-gather of the raw values, what the exact all-reduce
moves), ``moved_bytes`` what the chosen all-reduce sent.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_lossy_comm import (
    BF16,
    AllReduceConfig,
    ErrorFeedbackState,
    ExchangeStats,
    FrameCodec,
    compressed_psum_with_stats,
    error_feedback,
)

MODES = ("exact", "bf16", "compressed")


def uses_feedback(config) -> bool:
    """Whether the run keeps error-feedback residuals (``TrainState.grad_ef``)."""
    return config.grad_allreduce == "compressed" and config.grad_error_feedback


def _allreduce_config(config) -> AllReduceConfig:
    if config.grad_allreduce == "bf16":
        return AllReduceConfig(BF16())
    # The fixed-rate codec's capacity is sized statically by the (static) bound.
    bound = config.grad_error_bound if config.grad_codec == "fixed" else None
    return AllReduceConfig(FrameCodec(mode="rel", codec=config.grad_codec, min_error_bound=bound))


def init_state(config, head_params, num_devices: int) -> ErrorFeedbackState:
    """The ``TrainState.grad_ef`` of a new run: zero residuals ``[P, *shape]`` per head
    parameter with feedback, else an empty state (``residual={}``)."""
    if not uses_feedback(config):
        return ErrorFeedbackState({})
    return ErrorFeedbackState(
        jax.tree.map(lambda x: jnp.zeros((num_devices,) + x.shape, x.dtype), head_params)
    )


def reduce_head_grads(config, g_head, grad_ef: ErrorFeedbackState, axis_name):
    """Sums ``g_head`` over ``axis_name`` (inside ``shard_map``) as ``config`` says.

    Args:
      config: the run's ``Config`` (``grad_allreduce``, ``grad_error_bound``,
        ``grad_error_feedback``).
      g_head: this device's head gradients (pytree of float32, varying over the axis).
      grad_ef: this device's block of ``TrainState.grad_ef`` (residual leaves ``[1, ...]``).
      axis_name: the mesh axis.

    Returns:
      ``(g, new_grad_ef, stats)``: the summed gradients (invariant), the new residual block
      (``[1, ...]`` leaves; empty without feedback) and this device's ``ExchangeStats``.
    """
    mode = config.grad_allreduce
    if mode not in MODES:
        raise ValueError(f"grad_allreduce must be one of {MODES}, got {mode!r}")
    if mode == "exact":
        g = jax.lax.psum(g_head, axis_name)
        nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(g_head))
        stats = ExchangeStats.exact(2 * nbytes, (2,), capacity_bytes=2 * nbytes)
        return g, grad_ef, stats
    cfg = _allreduce_config(config)
    eb = config.grad_error_bound if mode == "compressed" else None
    if not uses_feedback(config):
        g, stats = compressed_psum_with_stats(g_head, axis_name, error_bound=eb, config=cfg)
        return g, grad_ef, stats
    ef = error_feedback(axis_name, config=cfg)
    local = ErrorFeedbackState(jax.tree.map(lambda r: r[0], grad_ef.residual))
    g, new, stats = ef.update_with_stats(g_head, local, eb)
    return g, ErrorFeedbackState(jax.tree.map(lambda r: r[None], new.residual)), stats
