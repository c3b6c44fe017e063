"""Preconditioned coordinates for the compressed all-reduce: ``scale=`` of
:func:`jax_lossy_comm.compressed_psum` and :func:`jax_lossy_comm.error_feedback`, and
:func:`adagrad_scale`, Adagrad's scale from an optax state.

The compressed all-reduce bounds each element's error relative to the value range of the
chunk it was coded in (REL mode, module docstring of ``allreduce``). An adaptive optimizer
then multiplies each coordinate by its own step size; Adagrad (Duchi et al. 2011) applies
``lr * g / sqrt(v + eps)``, and the step sizes ``1 / sqrt(v + eps)`` of one chunk can differ
by orders of magnitude. A coordinate whose gradient (and accumulator) is small next to its
chunk's range gets a gradient error of the same absolute size as every other coordinate of
the chunk, which its large step size turns into a large error of its *update*.

With a ``scale`` ``s`` that is the same on every device of the axis, the all-reduce codes
``x_i * s`` and returns ``sum_i (x_i * s) / s``, the same sum in real arithmetic; a bound in
the scaled coordinates is a bound on ``sum_i x_i * s``. With ``s = 1 / sqrt(v_prev + eps)``
(``v_prev`` the accumulator before this step, identical on every device since every device
applied the same reduced gradients) that is Adagrad's update up to the factor
``lr * sqrt(v_prev + eps) / sqrt(v_new + eps) <= lr``: the update's error is bounded
relative to the range of the chunk's *updates*, whatever the spread of the step sizes.

References:
  J. Duchi, E. Hazan, Y. Singer, "Adaptive Subgradient Methods for Online Learning and
  Stochastic Optimization", JMLR 12, 2011 (Adagrad).
  S. Feng et al., SC24, arXiv 2407.04272, sec. 4 (the REL bound, relative to a chunk's range).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["adagrad_scale"]


def is_coded(leaf) -> bool:
    """Whether a leaf is coded (a floating dtype) or summed exactly (integer, bool)."""
    return bool(jnp.issubdtype(jnp.result_type(leaf), jnp.floating))


def _check_positive(s) -> None:
    """Raises ValueError on a concrete scale that is not finite and positive (a traced scale
    cannot be checked)."""
    try:
        a = np.asarray(s, np.float64)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return
    if a.size and not (np.all(np.isfinite(a)) and np.all(a > 0)):
        raise ValueError("scale must be finite and positive everywhere")


def scale_leaves(x, scale) -> list:
    """Per leaf of ``x`` (``jax.tree.leaves`` order) its scale (None for integer and bool
    leaves, which are summed exactly and never scaled), broadcast to the leaf's shape.

    ``scale``: a pytree with ``x``'s structure (leaves broadcastable to ``x``'s), or one
    array or number for every leaf.

    Raises:
      ValueError: a structure that matches neither, a leaf that does not broadcast, a
        concrete scale that is not finite and positive.
      TypeError: a scale leaf that is not a floating-point array or a number.
    """
    leaves, treedef = jax.tree.flatten(x)
    s_leaves, s_def = jax.tree.flatten(scale)
    if s_def.num_leaves == 1 and s_def.num_nodes == 1:  # one array or number for all leaves
        s_leaves = s_leaves * len(leaves)
    elif s_def != treedef:
        raise ValueError(f"scale must have x's structure {treedef} or be one array, got {s_def}")
    out = []
    for v, s in zip(leaves, s_leaves):
        if not is_coded(v):
            out.append(None)
            continue
        if not jnp.issubdtype(jnp.result_type(s), jnp.floating) and not isinstance(s, int):
            raise TypeError(f"scale leaves must be floating point, got {jnp.result_type(s)}")
        _check_positive(s)
        try:
            s = jnp.broadcast_to(jnp.asarray(s, jnp.float32), jnp.shape(v))
        except ValueError as e:
            raise ValueError(
                f"scale of shape {jnp.shape(s)} does not broadcast to {jnp.shape(v)}"
            ) from e
        out.append(jax.lax.stop_gradient(s))
    return out


def apply(x, scales, inverse: bool = False):
    """``x * scale`` (or ``x / scale`` with ``inverse``) leaf by leaf in float32, rounded to
    each leaf's dtype; leaves without a scale (``None``) unchanged."""
    leaves, treedef = jax.tree.flatten(x)
    out = []
    for v, s in zip(leaves, scales):
        if s is None:
            out.append(v)
        else:
            v32 = jnp.asarray(v).astype(jnp.float32)
            out.append((v32 / s if inverse else v32 * s).astype(jnp.result_type(v)))
    return treedef.unflatten(out)


def adagrad_scale(opt_state, eps: float = 1e-7):
    """Adagrad's per-coordinate step size ``1 / sqrt(sum_of_squares + eps)`` from an optax
    optimizer state: the ``scale=`` of :func:`jax_lossy_comm.compressed_psum` and
    :func:`jax_lossy_comm.error_feedback` that bounds the error of the update rather than
    of the raw gradient (module docstring).

    Finds the one ``optax.ScaleByRssState`` in ``opt_state`` (``optax.adagrad``'s, also
    inside chains, ``optax.inject_hyperparams`` or ``optax.MultiSteps``) with
    ``jax.tree_util``; pass the state *before* this step's update (the accumulator
    ``v_prev``), which is the same on every device when the parameters it accumulates are
    replicated and updated from the reduced gradients.

    Args:
      opt_state: an optax state (any pytree) holding exactly one ``optax.ScaleByRssState``,
        or that state itself.
      eps: the positive float added under the square root; pass the optimizer's own
        (``optax.adagrad``'s ``eps``, default ``1e-7``) for the bound on the update. Any
        positive value keeps the all-reduce exact in real arithmetic.

    Returns:
      A pytree like the state's ``sum_of_squares`` (the parameters' structure, e.g. a
      ``{"head": ..., "embedding": ...}`` dict), float32 leaves of the parameters' shapes,
      finite and positive: ``jax.lax.rsqrt(sum_of_squares + eps)``. Select the part that
      matches the gradients you sum (e.g. ``scale["head"]``).

    Raises:
      ValueError: no ``optax.ScaleByRssState`` in ``opt_state`` (not an Adagrad state: SGD,
        Adam), more than one, or a concrete ``eps`` that is not finite and positive.

    Examples:
      >>> import jax.numpy as jnp, optax
      >>> from jax_lossy_comm import adagrad_scale
      >>> params = {"w": jnp.ones(3)}
      >>> tx = optax.adagrad(0.1, initial_accumulator_value=0.0, eps=1e-8)
      >>> state = tx.init(params)
      >>> _, state = tx.update({"w": jnp.array([2.0, 0.5, 0.0])}, state)
      >>> adagrad_scale(state, 1e-8)["w"]  # 1 / sqrt(g**2 + 1e-8)
      Array([5.e-01, 2.e+00, 1.e+04], dtype=float32)
      >>> adagrad_scale(optax.sgd(0.1).init(params))
      Traceback (most recent call last):
      ...
      ValueError: opt_state holds no optax.ScaleByRssState (an Adagrad state); got ...

    References:
      Duchi, Hazan, Singer, JMLR 2011 (Adagrad); optax.scale_by_rss.
    """
    try:
        import optax
    except ImportError:  # no optax: no optax state either
        optax = None
    try:
        _check_positive(eps)
    except ValueError:
        raise ValueError(f"eps must be finite and positive, got {eps}") from None
    cls = getattr(optax, "ScaleByRssState", None)
    found = []
    if cls is not None:
        found = [
            n
            for n in jax.tree_util.tree_leaves(opt_state, is_leaf=lambda n: isinstance(n, cls))
            if isinstance(n, cls)
        ]
    if len(found) != 1:
        what = "no" if not found else f"{len(found)} (ambiguous)"
        raise ValueError(
            f"opt_state holds {what} optax.ScaleByRssState (an Adagrad state); got "
            f"{type(opt_state).__name__}"
        )
    return jax.tree.map(
        lambda v: jax.lax.rsqrt(jnp.asarray(v, jnp.float32) + jnp.float32(eps)),
        found[0].sum_of_squares,
    )
