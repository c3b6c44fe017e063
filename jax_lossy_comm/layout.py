"""Geometry of an all-to-all: how ``x`` becomes per-peer codec chunks and back.

``jax.lax.all_to_all(x, axis_name, split_axis, concat_axis, tiled=...)`` sends block ``d`` of
``x`` (its split of ``split_axis``) to peer ``d`` and concatenates the received blocks along
``concat_axis``. A :class:`Layout` cuts each block into codec chunks ``[rows, dim]``: ``dim`` is
the block's last axis; with a table axis, each index along it is its own chunk (one chunk per
(peer, table)); every other axis is flattened into ``rows`` in C order. ``to_chunks`` and
``from_chunks`` are pure reshapes and transposes, so an exchange of the chunks followed by
``from_chunks`` is exactly ``jax.lax.all_to_all``. Every exchange of the library (the
error-bounded frames and the INT8/BF16 baselines) uses this one layout.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp


class Layout(NamedTuple):
    """Static geometry of one exchange: how ``x`` becomes ``[P, (T,) rows, dim]`` chunks.

    Build it with :func:`make_layout`. Hashable (usable as a static argument).

    Attributes:
      shape: ``x.shape`` (this device's operand).
      p: the axis size P.
      split: the split axis, in ``[0, x.ndim)``.
      concat: the concat axis (``[0, x.ndim)``; untiled, of the block with P inserted).
      table: the table axis in block coordinates, or None (one chunk per peer).
      tiled: as in ``jax.lax.all_to_all``.

    Examples:
      >>> from jax_lossy_comm import make_layout
      >>> lay = make_layout((16, 3, 8), 8, split_axis=0, concat_axis=1, table_axis=1, tiled=True)
      >>> lay.grid, lay.chunk_shape, lay.out_shape
      ((8, 3), (2, 8), (2, 24, 8))
      >>> lay.transposed().grid
      (8, 3)
    """

    shape: tuple
    p: int
    split: int
    concat: int
    table: int | None
    tiled: bool

    @property
    def block_shape(self) -> tuple:
        """Shape of the block sent to one peer."""
        s = list(self.shape)
        if self.tiled:
            s[self.split] //= self.p
        else:
            del s[self.split]
        return tuple(s)

    @property
    def chunk_shape(self) -> tuple:
        """Codec chunk ``(rows, dim)``."""
        b = self.block_shape
        dim = b[-1] if b else 1
        n = math.prod(b)
        if self.table is not None:
            n //= b[self.table]
        return (n // dim if dim else 0, dim)

    @property
    def grid(self) -> tuple:
        """The chunk grid, ``(P,)`` or ``(P, T)`` with a table axis."""
        b = self.block_shape
        return (self.p,) if self.table is None else (self.p, b[self.table])

    @property
    def out_shape(self) -> tuple:
        """Shape of the all-to-all's result."""
        b = list(self.block_shape)
        if self.tiled:
            b[self.concat] *= self.p
        else:
            b.insert(self.concat, self.p)
        return tuple(b)

    def to_chunks(self, x):
        """``x`` -> ``[P, (T,) rows, dim]``: the block for peer ``d`` is chunk row ``d``."""
        if self.tiled:
            s = self.shape
            x = x.reshape(s[: self.split] + (self.p, s[self.split] // self.p) + s[self.split + 1 :])
        x = jnp.moveaxis(x, self.split, 0)
        if self.table is not None:
            x = jnp.moveaxis(x, 1 + self.table, 1)
        return x.reshape(self.grid + self.chunk_shape)

    def from_chunks(self, c):
        """Received chunks ``[P_src, (T,) rows, dim]`` -> the all-to-all's result."""
        b = self.block_shape
        if self.table is not None:
            bt = (b[self.table],) + b[: self.table] + b[self.table + 1 :]
            c = jnp.moveaxis(c.reshape((self.p,) + bt), 1, 1 + self.table)
        else:
            c = c.reshape((self.p,) + b)
        c = jnp.moveaxis(c, 0, self.concat)
        return c.reshape(self.out_shape)

    def per_peer(self) -> Layout:
        """The same exchange with one chunk per peer (the block in C order, no table axis)."""
        return self._replace(table=None)

    def transposed(self) -> Layout:
        """Layout of the cotangent's exchange (split and concat swapped).

        Block coordinates are the same in both directions (a tiled block, or the untiled block
        with the P axis removed), so the table axis carries over.
        """
        return Layout(self.out_shape, self.p, self.concat, self.split, self.table, self.tiled)


def make_layout(
    shape, axis_size: int, split_axis: int, concat_axis: int, table_axis=None, tiled=False
) -> Layout:
    """The :class:`Layout` of ``jax.lax.all_to_all(x, ..., split_axis, concat_axis, tiled)``.

    Args:
      shape: ``x.shape`` (ints).
      axis_size: P, the size of the exchange's mesh axis.
      split_axis, concat_axis: as in ``jax.lax.all_to_all`` (negative allowed).
      table_axis: axis of ``x`` whose indices are separate chunks, or None.
      tiled: as in ``jax.lax.all_to_all``.

    Returns:
      The validated layout.

    Raises:
      ValueError: rank 0, an axis out of range, a split axis not divisible by (tiled) or not
        equal to (untiled) P, a ``table_axis`` that is the last axis (the codec's ``dim``) or,
        untiled, the split axis.
    """
    nd = len(shape)
    if nd < 1:
        raise ValueError("x must have at least one dimension")

    def norm(a, what, n):
        a = int(a)
        if not -n <= a < n:
            raise ValueError(f"{what}={a} out of range for rank {n}")
        return a % n

    p = int(axis_size)
    split = norm(split_axis, "split_axis", nd)
    concat = norm(concat_axis, "concat_axis", nd)
    if tiled and shape[split] % p:
        raise ValueError(
            f"x.shape[split_axis]={shape[split]} is not divisible by the axis size {p} (tiled=True)"
        )
    if not tiled and shape[split] != p:
        raise ValueError(
            f"x.shape[split_axis]={shape[split]} must equal the axis size {p} (tiled=False)"
        )
    table = None
    if table_axis is not None:
        t = norm(table_axis, "table_axis", nd)
        if t == nd - 1 or (not tiled and t == split):
            raise ValueError(
                f"table_axis={table_axis} cannot be the last axis (the codec's dim) "
                f"or, untiled, the split axis"
            )
        table = t if tiled else t - (t > split)
    lay = Layout(tuple(int(s) for s in shape), p, split, concat, table, bool(tiled))
    if not tiled and concat > len(lay.block_shape):
        raise ValueError(f"concat_axis={concat_axis} out of range (tiled=False)")
    return lay
