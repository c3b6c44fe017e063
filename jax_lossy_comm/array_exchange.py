"""The exchange of one array inside ``shard_map``: its static settings (:class:`ExchangeConfig`),
the one-way coded exchange (chunk per destination, encode, send the frames, decode, fall back
to the exact all-to-all together on overflow) and its straight-through derivative (exact:
``custom_jvp``; with a backward codec: ``custom_vjp``). :mod:`jax_lossy_comm.exchange` builds
the public drop-in for ``jax.lax.all_to_all`` (pytrees, every dtype) on :func:`exchange_array`.

Reference: Feng et al., SC24, arXiv 2407.04272, sec. 3 and 4.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_lossy_comm.codec import concrete_error_bound
from jax_lossy_comm.comm_codec import (
    DEFAULT_ERROR_BOUND,
    CommCodec,
    FrameCodec,
)
from jax_lossy_comm.layout import Layout
from jax_lossy_comm.stats import ExchangeStats, node_bytes
from jax_lossy_comm.vma import as_varying, typed_like, vary_over
from jax_lossy_comm.wire import (
    PATHS,
    TEST_PATHS,
    exact_all_to_all,
    exact_all_to_all_in_pieces,
    send_frames,
)

#: Slices the exact fallback's all-to-all runs in (``wire.exact_all_to_all_in_pieces``): its
#: buffers are then a quarter of the block's, so the compressed exchange's peak memory stays
#: within 1.2x of ``jax.lax.all_to_all``'s (bench/training/exchange_memory.py).
FALLBACK_PIECES = 4

#: ``ExchangeConfig.topology`` choices (``jax_lossy_comm.exchange``, "Hierarchical exchange").
TOPOLOGIES = ("flat", "hierarchical")


# --------------------------------------------------------------------------------- config
def _check_codec(what: str, codec, optional: bool) -> None:
    if codec is None and optional:
        return
    if not isinstance(codec, CommCodec):
        raise TypeError(
            f"ExchangeConfig.{what} must be a CommCodec (FrameCodec(), Int8Rowwise(), BF16()"
            f"{', or None' if optional else ''}), got {codec!r}"
        )


@dataclasses.dataclass(frozen=True)
class ExchangeConfig:
    """Static settings of one :func:`compressed_all_to_all`, checked once on construction.

    Frozen and hashable (a static argument of the jitted exchange); the error bounds are not
    here: they are traced arguments of the call, so changing them does not recompile.

    Attributes:
      forward: codec of the forward exchange (:class:`jax_lossy_comm.CommCodec`): the
        library's error-bounded :class:`jax_lossy_comm.FrameCodec` (default) or a TorchRec
        baseline, ``Int8Rowwise()`` / ``FP8Rowwise()`` / ``MX4()`` / ``FP16()`` / ``BF16()``.
      backward: codec of the cotangent's transposed exchange, or None (default): the exact
        transposed ``all_to_all`` (straight-through estimator, the paper's setting).
        TorchRec's ``QCommsConfig`` has the same pair (forward and backward precision).
      table_axis: axis of ``x`` whose indices are separate chunks, each with its own bound
        and REL range (static; not the last axis), or None: one chunk per peer. With a
        per-peer codec (the TorchRec baselines) it only shapes ``compression_ratio``.
      path: how variable-size frames travel: ``"auto"`` (:func:`resolve_path`), ``"dense"``,
        ``"packed"`` or ``"ragged"`` (``jax_lossy_comm.exchange``). Fixed-size codecs ignore it.
      topology: ``"flat"`` (default): one exchange over ``axis_name``, every block coded;
        ``"hierarchical"``: ``axis_name=(node_axis, local_axis)``, only blocks whose
        destination is on another node are coded, exact among the devices of a node
        (``jax_lossy_comm.exchange``, "Hierarchical exchange").

    Raises:
      TypeError: a codec that is not a :class:`jax_lossy_comm.CommCodec`.
      ValueError: unknown ``path`` or ``topology``, a ``table_axis`` that is not an int or
        None.

    Examples:
      >>> from jax_lossy_comm import ExchangeConfig, FrameCodec, Int8Rowwise
      >>> ExchangeConfig(forward=FrameCodec(min_error_bound=0.01), table_axis=1)
      ExchangeConfig(forward=FrameCodec(mode='rel', codec='auto', min_error_bound=0.01, \
capacity=None), backward=None, table_axis=1, path='auto', topology='flat')
      >>> c = ExchangeConfig(forward=Int8Rowwise(), backward=Int8Rowwise())
      >>> hash(c) == hash(ExchangeConfig(forward=Int8Rowwise(), backward=Int8Rowwise()))
      True
      >>> ExchangeConfig(path="sideways")
      Traceback (most recent call last):
      ...
      ValueError: ExchangeConfig.path must be one of ('auto', 'dense', 'packed', 'ragged'), \
got 'sideways'
    """

    forward: CommCodec = FrameCodec()
    backward: CommCodec | None = None
    table_axis: int | None = None
    path: str = "auto"
    topology: str = "flat"

    def __post_init__(self):
        _check_codec("forward", self.forward, optional=False)
        _check_codec("backward", self.backward, optional=True)
        if self.table_axis is not None and (
            isinstance(self.table_axis, bool) or not isinstance(self.table_axis, (int, np.integer))
        ):
            raise ValueError(
                f"ExchangeConfig.table_axis must be an int or None, got {self.table_axis!r}"
            )
        if self.path not in PATHS + TEST_PATHS:
            raise ValueError(f"ExchangeConfig.path must be one of {PATHS}, got {self.path!r}")
        if self.topology not in TOPOLOGIES:
            raise ValueError(
                f"ExchangeConfig.topology must be one of {TOPOLOGIES}, got {self.topology!r}"
            )


class Plan(NamedTuple):
    """Static (hashable) plan of one exchange call: config resolved against ``x``."""

    axis_name: object
    layout: Layout  # with the config's table axis (the statistics' grid)
    dtype: object
    path: str  # resolved: "dense" | "packed" | "ragged" | "_ragged_emulated"
    forward: CommCodec
    capacity: int
    backward: CommCodec | None
    backward_capacity: int
    topology: str  # "flat" | "hierarchical" (axis_name = (node_axis, local_axis))


# ---------------------------------------------------------------------------- one direction
def _one_way(plan: Plan, x, error_bound, *, backward_pass: bool = False):
    """One exchange of ``x`` (the forward, or the cotangent's with ``backward_pass``) through
    its codec: ``(y, ExchangeStats)``.

    The coded exchange runs over ``ax``: the whole axis (flat) or the node axis
    (hierarchical, the chunks grouped per destination node ``[N, L (x T), rows, dim]``, the
    own node's slot zeroed before coding and taken exact after, then an exact
    ``all_to_all`` over the local axis hands every device its blocks)."""
    codec = plan.backward if backward_pass else plan.forward
    cap = plan.backward_capacity if backward_pass else plan.capacity
    table_lay = plan.layout.transposed() if backward_pass else plan.layout
    lay = table_lay if codec.per_table else table_lay.per_peer()
    chunks = lay.to_chunks(x)  # [P, (T,) rows, dim]
    item = np.dtype(x.dtype).itemsize
    raw_bytes = jnp.float32(math.prod(lay.shape) * item)
    hier = plan.topology == "hierarchical"
    ax = plan.axis_name[0] if hier else plan.axis_name
    n = jax.lax.axis_size(ax)  # slots of the coded exchange: nodes, or every peer (flat)
    grid = lay.grid
    # c: the coded exchange's operand, one slot per destination (node); chunk `shape`
    if codec.per_table:
        c = chunks.reshape((n, -1) + lay.chunk_shape) if hier else chunks
        shape = lay.chunk_shape
    else:  # one chunk per destination
        c = chunks.reshape(n, -1, lay.chunk_shape[1])
        shape = c.shape[1:]
    if hier:
        own_slot = jnp.arange(n) == jax.lax.axis_index(ax)  # [N]: the destination is my node
        own_c = own_slot.reshape((n,) + (1,) * (c.ndim - 1))
        send = jnp.where(own_c, jnp.zeros((), c.dtype), c)  # constant chunks: a header each
        local = grid[0] // n  # L, devices per node
        own_peer = jnp.repeat(own_slot, local)  # [P]: the peer is on my node
        own_grid = own_peer.reshape((grid[0],) + (1,) * (len(table_lay.grid) - 1))
    else:
        send = c
    if codec.variable_size:
        chunk_error_bound = jnp.broadcast_to(error_bound, grid).reshape(send.shape[: -len(shape)])
        frames, nbytes = codec.encode(send, chunk_error_bound, cap)
        # Flat, one chunk per (peer, table): a table with an overflowing frame goes exact
        # alone, the other tables stay coded.
        by_table = not hier and len(grid) == 2
        sent = send_frames(
            ax, plan.path, frames, nbytes, agree_axis=plan.axis_name, by_table=by_table
        )

        def received(_):  # the decoded chunks [slot, ..., rows, dim]
            rf, rnb = sent.receive()
            return codec.decode(rf, rnb, shape=shape, dtype=x.dtype)

        def compressed(_):
            r = received(None)
            return r if hier else lay.from_chunks(r.reshape(grid + lay.chunk_shape))

        def exact(_):  # 16-bit floats as uint16, in slices (FALLBACK_PIECES)
            if hier:  # the chunks the codec read: the own node's are taken from them after
                return exact_all_to_all_in_pieces(c, ax, FALLBACK_PIECES)
            # Flat: from x in its own layout, peer-major (a reshape for split_axis 0), not from
            # the chunks: the table-major chunks are a transposed copy of x, and holding them
            # for this branch kept them alive through the decode (the peak).
            peer = table_lay.per_peer()
            return peer.from_chunks(
                exact_all_to_all_in_pieces(peer.to_chunks(x), ax, FALLBACK_PIECES)
            )

        any_over = sent.any_overflow
        if by_table:
            tables_over = sent.tables_over
            # Every table overflowing (a bound below min_error_bound, say): no frame is
            # sent, every table goes exact.
            all_over = tables_over.all()

            def none(_):  # typed as the received chunks: varying as x and over the axis
                return as_varying(typed_like(jnp.zeros(grid + shape, x.dtype), x), ax)

            r = jax.lax.cond(all_over, none, received, None)
            r = lay.from_chunks(_exact_tables(r, x, table_lay, tables_over, ax))
            share = jnp.where(all_over, 1.0, tables_over.sum() / grid[1])  # sent exact
            moved_slot = jnp.where(all_over, 0.0, sent.moved_per_peer) + share * raw_bytes / n
            comp_moved = jnp.where(all_over, 0.0, sent.moved_bytes) + share * raw_bytes
        else:
            r = jax.lax.cond(any_over, exact, compressed, None)
            moved_slot = jnp.where(any_over, raw_bytes / n, sent.moved_per_peer)
            comp_moved = jnp.where(any_over, raw_bytes, sent.moved_bytes)
        fb = jnp.abs(nbytes).astype(jnp.float32).reshape(grid)  # per_table (checked)
        if hier:  # own-node blocks travel exact
            fb = jnp.where(own_grid, jnp.float32(math.prod(lay.chunk_shape) * item), fb)
        ratio = math.prod(lay.chunk_shape) * item / jnp.maximum(fb, 1.0)
        n_over, fallback = sent.overflow_count, any_over.astype(jnp.int32)
        frame_bytes = fb.sum()
    else:
        wire, nbytes = codec.encode(send, None, cap)
        r = codec.decode(
            jax.lax.all_to_all(wire, ax, 0, 0, tiled=True), nbytes, shape=shape, dtype=x.dtype
        )
        comp_moved = frame_bytes = jnp.float32(wire.size * wire.dtype.itemsize)
        moved_slot = jnp.full(n, comp_moved / n)
        ratio = jnp.full(table_lay.grid, raw_bytes / comp_moved, jnp.float32)
        n_over = fallback = jnp.int32(0)
    if hier:
        r = jnp.where(own_c, c, r)  # [N_src, ...]: my own node's blocks, exact
        r = r.reshape((n, local) + grid[1:] + lay.chunk_shape)  # [N_src, L_dest, ...]
        r = exact_all_to_all(r, plan.axis_name[1], 1, 1, tiled=True)  # [N_src, L_src, ...]
        if not codec.variable_size:  # the coded stage's share; own-node blocks exact
            frame_bytes = comp_moved * (n - 1) / n + raw_bytes / n
            ratio = jnp.where(own_grid, 1.0, ratio)
        inter_moved = moved_slot.sum() - jnp.where(own_slot, moved_slot, 0.0).sum()
        inter_raw = raw_bytes * (n - 1) / n
        intra = raw_bytes * (local - 1) / local
        moved = intra + inter_moved
    else:
        intra, inter_moved = node_bytes(moved_slot, ax)
        inter_raw = node_bytes(jnp.full(n, raw_bytes / n), ax)[1]
        moved = comp_moved
    coded_y = codec.variable_size and not hier  # the cond gave the result's layout
    y = r if coded_y else lay.from_chunks(r.reshape(grid + lay.chunk_shape))
    stats = ExchangeStats(
        raw_bytes=raw_bytes,
        frame_bytes=jnp.asarray(frame_bytes, jnp.float32),
        moved_bytes=jnp.asarray(moved, jnp.float32),
        compression_ratio=ratio.astype(jnp.float32),
        overflow_count=n_over,
        fallback=fallback,
        capacity_bytes=jnp.float32(cap),
        intra_node_bytes=jnp.asarray(intra, jnp.float32),
        inter_node_raw_bytes=jnp.asarray(inter_raw, jnp.float32),
        inter_node_moved_bytes=jnp.asarray(inter_moved, jnp.float32),
    )
    if hier:  # statistics varying over the node axis only: over both, as the flat ones
        stats = jax.tree.map(lambda v: vary_over(v, plan.axis_name), stats)
    return y, stats


def _exact_tables(r, x, table_lay: Layout, tables_over, axis_name):
    """The decoded chunks ``r [P, T, rows, dim]`` with every table flagged in
    ``tables_over`` (bool[T], the same on every device) replaced by the exact all-to-all of
    ``x``'s own values of that table, bit for bit: a loop over the tables that runs one
    table's all-to-all where the flag is set (nothing moves for the others). Reads ``x`` in
    its own layout, one table at a time, so no table-major copy of ``x`` is kept."""
    lay, s = table_lay, table_lay.shape
    # x with the peer axis apart (tiled: the split axis as [P, block]), so that the block's
    # table axis is one axis of it (the tiled split axis may be the table axis itself)
    xs = s[: lay.split] + (lay.p, s[lay.split] // lay.p) + s[lay.split + 1 :] if lay.tiled else s
    t_axis = lay.table + (1 if lay.table >= lay.split else 0)

    def patch(t, r):
        part = jax.lax.dynamic_slice_in_dim(x.reshape(xs), t, 1, axis=t_axis)
        sh = part.shape
        if lay.tiled:  # back to x's axes, the table's values only
            sh = sh[: lay.split] + (sh[lay.split] * sh[lay.split + 1],) + sh[lay.split + 2 :]
        c = lay._replace(shape=sh).to_chunks(part.reshape(sh))  # [P, 1, rows, dim]
        got = exact_all_to_all(c, axis_name, 0, 0, tiled=True)
        return jax.lax.dynamic_update_slice_in_dim(r, got, t, axis=1)

    def body(t, r):
        return jax.lax.cond(tables_over[t], functools.partial(patch, t), lambda r: r, r)

    return jax.lax.fori_loop(0, r.shape[1], body, r)


# ---------------------------------------------------------- the straight-through gradient
def exchange_array(plan: Plan, x, error_bound, backward_error_bound):
    """The exchange with its straight-through derivative: ``(y, ExchangeStats)``."""
    if plan.backward is None:
        return _exchange_exact(plan, x, error_bound, backward_error_bound)
    return _exchange_coded(plan, x, error_bound, backward_error_bound)


# Exact backward: a custom_jvp whose tangent is the exact (linear) all-to-all of the input's
# tangent, so forward mode, reverse mode (JAX transposes the all-to-all: split and concat
# swapped) and every higher order work as through jax.lax.all_to_all.
@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _exchange_exact(plan: Plan, x, error_bound, backward_error_bound):
    return _one_way(plan, x, error_bound)


def _exchange_exact_jvp(plan, primals, tangents):
    x, error_bound, backward_error_bound = primals
    # Itself, not _one_way: under an outer derivative (grad of grad) this rule is
    # differentiated too, and the codec's FFI calls must not be.
    y, stats = _exchange_exact(plan, x, error_bound, backward_error_bound)
    # Symbolic zeros: typed like each statistic (float0 for the counts), varying or not.
    stats_dot = jax.custom_derivatives.zero_from_primal(stats, symbolic_zeros=True)
    t = tangents[0]
    if isinstance(t, jax.custom_derivatives.SymbolicZero):  # a derivative in error_bound only
        return (y, stats), (jax.custom_derivatives.zero_from_primal(y, True), stats_dot)
    lay = plan.layout
    if lay.tiled:
        y_dot = jax.lax.all_to_all(t, plan.axis_name, lay.split, lay.concat, tiled=True)
    else:  # the untiled one from the tiled one: jax 0.10.2 mis-shapes the untiled transpose
        t = jax.lax.all_to_all(t, plan.axis_name, lay.split, lay.split, tiled=True)
        y_dot = jnp.moveaxis(t, lay.split, lay.concat)
    return (y, stats), (y_dot.astype(y.dtype), stats_dot)


_exchange_exact.defjvp(_exchange_exact_jvp, symbolic_zeros=True)


# Compressed backward: a custom_vjp (reverse mode, first order only: the coded cotangent
# exchange is not a linear map that JAX could run forward or differentiate again).
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _exchange_coded(plan: Plan, x, error_bound, backward_error_bound):
    return _one_way(plan, x, error_bound)


def _exchange_coded_fwd(plan, x, error_bound, backward_error_bound):
    # Itself, not _one_way: under an outer derivative the codec's FFI calls are not
    # differentiated (JAX then reports the custom_vjp's forward-mode error).
    return _exchange_coded(plan, x, error_bound, backward_error_bound), (
        error_bound,
        backward_error_bound,
    )


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _backward_exchange(plan: Plan, ct_y, backward_error_bound):
    return _one_way(plan, ct_y, backward_error_bound, backward_pass=True)[0]


@_backward_exchange.defjvp
def _backward_exchange_jvp(plan, primals, tangents):
    raise NotImplementedError(
        "compressed_all_to_all with a compressed backward (ExchangeConfig.backward set) has "
        "a first-order reverse-mode derivative only (jax.grad, jax.vjp); a higher-order "
        "derivative would differentiate the coded backward exchange. Use "
        "ExchangeConfig(backward=None) (the exact straight-through exchange, differentiable "
        "to any order and in forward mode)"
    )


def _exchange_coded_bwd(plan, res, cts):
    error_bound, backward_error_bound = res
    ct_x = _backward_exchange(plan, cts[0].astype(plan.dtype), backward_error_bound)
    return (
        ct_x.astype(plan.dtype),
        jnp.zeros_like(error_bound),
        jnp.zeros_like(backward_error_bound),
    )


_exchange_coded.defvjp(_exchange_coded_fwd, _exchange_coded_bwd)


# ------------------------------------------------------------------------------ the bounds
def _prepare_bound(bound, grid, what):
    """float32 bound checked against the chunk grid, and its concrete value (or None)."""
    c = concrete_error_bound(bound, what)  # raises on a negative or non-finite value
    e = jnp.asarray(bound, jnp.float32)
    try:
        np.broadcast_shapes(e.shape, grid)
    except ValueError:
        raise ValueError(
            f"{what} of shape {e.shape} does not broadcast to the chunk grid {grid} (peers, tables)"
        ) from None
    return e, c


def codec_bound(codec, bound, grid, what):
    """``_prepare_bound`` of ``bound``, or of the codec's default bound when it is None."""
    if bound is None:
        if codec is None or not codec.error_bounded:
            return jnp.zeros((), jnp.float32), None
        bound = getattr(codec, "default_error_bound", None)
        if bound is None:
            raise ValueError(
                f"{what} is required by {codec!r} (no default bound: an ABS bound has no "
                f"scale-free default; pass {what}=, or use FrameCodec(mode='rel'), whose "
                f"default is REL {DEFAULT_ERROR_BOUND})"
            )
    return _prepare_bound(bound, grid, what)
