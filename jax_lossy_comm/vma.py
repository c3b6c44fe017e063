"""Varying-manual-axes (vma) typing inside ``shard_map``: which mesh axes a value varies over.

``jax.ffi.ffi_call`` types its outputs as invariant over the mesh axes, which makes a later
``psum`` transpose into a sum of every device's cotangent (gradients silently multiplied by the
axis size); these helpers read a value's varying axes and re-mark values varying
(``jax.lax.pcast(..., to="varying")``). Outside ``shard_map`` or with ``check_vma=False`` no
value varies and they do nothing.
"""

from __future__ import annotations

import jax

__all__ = ["as_varying", "typed_like", "vary_over", "varying_axes"]


def varying_axes(x) -> frozenset:
    """Mesh axes ``x`` is typed as varying over inside ``shard_map`` (empty outside it or
    with ``check_vma=False``)."""
    t = jax.typeof(x)
    vma = getattr(t, "vma", None)
    if vma is None:
        mat = getattr(t, "manual_axis_type", None)
        vma = getattr(mat, "varying", None)
    return frozenset(vma or ())


def typed_like(outputs, *inputs):
    """``pcast`` each output to varying over every axis some input varies over (FFI outputs
    are typed as invariant inside ``shard_map``; DESIGN.md pitfalls)."""
    want = frozenset().union(*(varying_axes(a) for a in inputs))

    def one(y):
        missing = want - varying_axes(y)
        return jax.lax.pcast(y, tuple(sorted(missing)), to="varying") if missing else y

    return jax.tree.map(one, outputs)


def vary_over(v, axis_name):
    """``v`` typed as varying over every axis of ``axis_name`` when it varies over some
    (``jax.lax.psum`` over the tuple refuses a partly varying value); else ``v``."""
    have = varying_axes(v)
    missing = tuple(a for a in axis_name if a not in have)
    return jax.lax.pcast(v, missing, to="varying") if have and missing else v


def as_varying(x, axis_name):
    """``x`` typed as varying over every axis of ``axis_name`` (a name or a tuple of them):
    a value that is the same on every device (``in_specs=P()``) is re-marked varying, as a
    collective's result over those axes is; a no-op without ``check_vma``."""
    axes = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    missing = tuple(a for a in axes if a not in varying_axes(x))
    return jax.lax.pcast(x, missing, to="varying") if missing else x
