"""Compressed all-to-all for ``shard_map``: encode per destination, exchange, decode.

:func:`compressed_all_to_all` is a drop-in for ``jax.lax.all_to_all`` inside ``shard_map`` (same
arguments and defaults; arrays or pytrees, leaf by leaf, any dtype) that returns the same
values within an error bound (default REL ``DEFAULT_ERROR_BOUND``) while moving fewer
bytes; :func:`compressed_all_to_all_with_stats` also returns :class:`ExchangeStats`. The block bound for each peer is cut into chunks ``[rows, dim]`` (one
per peer, or one per (peer, table); :class:`jax_lossy_comm.Layout`), all chunks are encoded in
one call of the codec (:class:`jax_lossy_comm.CommCodec`; default the library's
:class:`jax_lossy_comm.FrameCodec`), the frames travel, and the receiver decodes them (Feng
et al., SC24, arXiv 2407.04272, sec. 3 and 4). Its gradient is the transposed exchange of the
cotangent (straight-through estimator, sec. 3), exact or through a backward codec with its
own error bound. The static settings are one frozen :class:`ExchangeConfig`.

Codecs of fixed size (``Int8Rowwise``, ``FP8Rowwise``, ``MX4``, ``FP16``, ``BF16``) travel in one
dense ``all_to_all``. The wire paths of variable-size frames (dense, packed, ragged) are
described in :mod:`jax_lossy_comm.wire`.

Frames that do not fit (NaN/Inf beyond the outlier room, a bound below ``min_error_bound``, a
too small ``capacity``) are never dropped or truncated: the count of overflowed frames is
``pmax``-ed over the axis (so every device agrees) and the chunks concerned travel as the
exact ``jax.lax.all_to_all`` of ``x`` (lossless): with a table axis on the flat topology, the
tables with an overflowing frame (the ``pmax`` carries a flag per table; the other tables
stay coded), otherwise the whole exchange under ``lax.cond``; ``overflow_count`` and
``fallback`` in :class:`ExchangeStats` record it. Only ``all_to_all``,
``ragged_all_to_all`` and a small int32 ``pmax`` are used (no ``psum_scatter``, which gloo gets
wrong on chunks of about 4 MiB and up, jax-ml/jax#40830), so the same code runs across
processes started with ``jax.distributed.initialize`` (gloo on CPU, NCCL on GPU).

Hierarchical exchange (``ExchangeConfig(topology="hierarchical")``): on a
two-level mesh ``axis_name=(node_axis, local_axis)`` (N nodes x L devices, device ``n * L + l``
as ``jax.lax.all_to_all`` numbers a tuple of axes, node-major) only blocks whose destination
is on another node are coded; devices of one node talk over NVLink-class links where coding
costs more time than it saves. As HugeCTR's and NCCL-based stacks' hierarchical all-to-all
(which compress nothing), it runs in two stages: (1) over the node axis, every device sends
each other node, in one message, the blocks for all L devices of that node, coded as frames;
its own node's blocks are not coded (zeroed before the codec, so their frames are headers that
never leave the device, and taken exact after); (2) an exact ``all_to_all`` over the local
axis hands every device its blocks (those from other nodes pass through their node-peer with
the same local index). The result is ``jax.lax.all_to_all(x, (node_axis, local_axis), ...)``
with own-node blocks bit-equal and other-node blocks bit-equal to the flat compressed
exchange's (the same chunks, bounds and codec give the same frames). Chunks stay one per
(destination device, table), so a ``[P, T]`` bound keeps its meaning per (peer, table) and
each chunk its own REL range (grouping a node's L blocks into one chunk would widen the range
and merge L bounds into one); only the messages are per node. Fixed-size codecs (one chunk
per destination) code one chunk per destination node. Overflow agrees over both axes (one
``pmax``): every device falls back together. The gradient is the transposed hierarchical
exchange: exact, or the backward codec across nodes only.

Measured by ``bench/training/exchange_bench.py`` on the Terabyte dumps, 8 devices: the dense capacity
is the fixed-rate size (5.33x at REL 0.01; at bounds >= ``min_error_bound`` it overflows only
on chunks with more than ``DEFAULT_OUTLIERS`` NaN/Inf or unquantizable values). A speculative
capacity (``FrameCodec(capacity=...)``, e.g. the largest frame seen in calibration x 1.25)
moved 17x fewer bytes on the same data, but one chunk whose rows stop repeating sends the
whole step raw, so it is opt-in. The variable-size (ragged) exchange moved 71x fewer bytes
there (padding slots and hot-row tables included).

References:
  S. Feng et al., "Accelerating Communication in Deep Learning Recommendation Model Training
  with Dual-Level Adaptive Lossy Compression", SC24, arXiv 2407.04272, 2024, sec. 3-4.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jax_lossy_comm.array_exchange import (
    TOPOLOGIES,
    ExchangeConfig,
    Plan,
    codec_bound,
    exchange_array,
)
from jax_lossy_comm.comm_codec import (
    DEFAULT_ERROR_BOUND,
    DEFAULT_MIN_ERROR_BOUND,
    DEFAULT_OUTLIERS,
)
from jax_lossy_comm.frame import DTYPES
from jax_lossy_comm.layout import make_layout
from jax_lossy_comm.stats import ExchangeStats, node_bytes
from jax_lossy_comm.vma import as_varying
from jax_lossy_comm.wire import (
    PACKED_CHUNKS,
    PACKED_SUBCHUNKS,
    PATHS,
    packed_chunks,
    resolve_path,
)

# Moved to jax_lossy_comm.wire; still importable from here as before.
from jax_lossy_comm.wire import RAGGED_ROW_BYTES as RAGGED_ROW_BYTES
from jax_lossy_comm.wire import SentFrames as SentFrames
from jax_lossy_comm.wire import chunk_counts as chunk_counts
from jax_lossy_comm.wire import pack_frames as pack_frames
from jax_lossy_comm.wire import ragged_rows as ragged_rows
from jax_lossy_comm.wire import run_chunked as run_chunked
from jax_lossy_comm.wire import unpack_frames as unpack_frames

__all__ = [
    "CODED_DTYPES",
    "DEFAULT_ERROR_BOUND",
    "DEFAULT_MIN_ERROR_BOUND",
    "DEFAULT_OUTLIERS",
    "PACKED_CHUNKS",
    "PACKED_SUBCHUNKS",
    "PATHS",
    "ExchangeConfig",
    "ExchangeStats",
    "TOPOLOGIES",
    "compressed_all_to_all",
    "compressed_all_to_all_with_stats",
    "node_bytes",
    "packed_chunks",
    "resolve_path",
]

#: dtypes whose leaves are coded; leaves of every other dtype (float64, integer, bool,
#: complex, ...) are exchanged exactly by ``jax.lax.all_to_all``.
CODED_DTYPES = tuple(DTYPES)


def compressed_all_to_all_with_stats(
    x,
    axis_name,
    split_axis: int,
    concat_axis: int,
    *,
    axis_index_groups=None,
    tiled: bool = False,
    error_bound=None,
    backward_error_bound=None,
    config: ExchangeConfig | None = None,
):
    """:func:`compressed_all_to_all` that also returns this device's :class:`ExchangeStats`.

    Arguments (the same, with the same defaults), errors and references as
    :func:`compressed_all_to_all`.

    Returns:
      ``(y, ExchangeStats)``: ``y`` as ``jax.lax.all_to_all`` returns it (``x``'s structure
      and dtypes), the statistics of the forward exchange (scalars per device;
      ``compression_ratio`` ``float32[P]`` or ``float32[P, T]``). For a pytree ``x`` one
      :class:`ExchangeStats` for all leaves: bytes and ``overflow_count`` summed over the
      leaves (exact leaves count raw), ``fallback`` and ``capacity_bytes`` their maximum,
      ``compression_ratio`` ``float32[P]``: raw / frame bytes of all leaves' blocks per
      destination peer (per leaf: call it per leaf). Exact exchanges (other dtypes,
      ``axis_index_groups``, a vmap axis) report ratio 1 and ``capacity_bytes`` 0.

    Examples:
      >>> import jax, jax.numpy as jnp, numpy as np
      >>> from jax.sharding import PartitionSpec as P
      >>> import jax_lossy_comm as jlc
      >>> mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
      >>> cfg = jlc.ExchangeConfig(jlc.FrameCodec(min_error_bound=0.01), path="dense")
      >>> def f(x):
      ...     y, s = jlc.compressed_all_to_all_with_stats(
      ...         x, "i", 0, 1, tiled=True, error_bound=0.01, config=cfg)
      ...     return s.raw_bytes[None], s.moved_bytes[None]
      >>> x = jnp.sin(jnp.arange(8 * 256 * 64, dtype=jnp.float32)).reshape(8 * 256, 64)
      >>> raw, moved = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("i"),
      ...                                    out_specs=(P("i"), P("i"))))(x)
      >>> int(raw[0]), int(moved[0]), round(float(raw[0] / moved[0]), 2)  # 6-bit codes
      (65536, 13344, 4.91)
    """
    return _exchange_with_stats(
        x,
        axis_name,
        split_axis,
        concat_axis,
        axis_index_groups=axis_index_groups,
        tiled=tiled,
        error_bound=error_bound,
        backward_error_bound=backward_error_bound,
        config=config,
    )


def _check_hierarchical(axis_name, config: ExchangeConfig) -> None:
    if not (isinstance(axis_name, tuple) and len(axis_name) == 2):
        raise ValueError(
            "ExchangeConfig(topology='hierarchical') needs axis_name=(node_axis, local_axis), "
            f"got {axis_name!r}"
        )
    for what in ("forward", "backward"):
        codec = getattr(config, what)
        if codec is not None and codec.variable_size and not codec.per_table:
            raise ValueError(
                f"ExchangeConfig.{what}: the hierarchical exchange codes variable-size frames "
                f"per (peer, table) chunk; {type(codec).__name__} has per_table=False"
            )


def _exchange_with_stats(
    x,
    axis_name,
    split_axis,
    concat_axis,
    *,
    axis_index_groups,
    tiled,
    error_bound,
    backward_error_bound,
    config,
):
    """The one core of both public functions: ``(y, ExchangeStats)``; a pytree leaf by leaf
    (each leaf its own exchange, as ``jax.lax.all_to_all`` maps over the leaves)."""
    config = ExchangeConfig() if config is None else config
    if not isinstance(config, ExchangeConfig):
        raise TypeError(f"config must be an ExchangeConfig, got {config!r}")
    if config.topology == "hierarchical":
        _check_hierarchical(axis_name, config)
    one = functools.partial(
        _leaf_exchange,
        axis_name=axis_name,
        split_axis=split_axis,
        concat_axis=concat_axis,
        tiled=tiled,
        groups=axis_index_groups,
        config=config,
    )
    leaves, treedef = jax.tree.flatten(x)
    if treedef.num_leaves == 1 and jax.tree_util.treedef_is_leaf(treedef):
        return one(leaves[0], error_bound, backward_error_bound)
    error_bounds = _leaf_bounds(error_bound, x, treedef, "error_bound")
    backward_error_bounds = _leaf_bounds(backward_error_bound, x, treedef, "backward_error_bound")
    outs = [one(*a) for a in zip(leaves, error_bounds, backward_error_bounds)]
    y = treedef.unflatten([o[0] for o in outs])
    if not outs:  # no leaves (None, an empty tuple): nothing moves
        return y, _exact_stats(0.0, axis_name, axis_index_groups)
    return y, _total_stats([o[1] for o in outs])


def _is_one_bound(bound) -> bool:
    """Whether ``bound`` is one value for every leaf (an array or scalar), not a pytree."""
    return bound is None or isinstance(bound, (jax.Array, np.ndarray, np.generic, float, int))


def _leaf_bounds(bound, x, treedef, what) -> list:
    """One bound per leaf of ``x``: ``bound`` itself when it is one value (or None), else
    ``bound`` is a pytree prefix of ``x`` whose every leaf (an array, a scalar or None) is the
    bound of all the leaves of ``x`` below it."""
    if _is_one_bound(bound):
        return [bound] * treedef.num_leaves
    flat, prefix = jax.tree.flatten(bound, is_leaf=lambda v: v is None)
    try:
        subtrees = prefix.flatten_up_to(x)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"{what} must be one value for every leaf (a float or an array; a per-table "
            f"bound as an array, not a list) or a pytree prefix of x's structure "
            f"{treedef}: {e}"
        ) from None
    return [b for b, sub in zip(flat, subtrees) for _ in range(len(jax.tree.leaves(sub)))]


def _mesh_axes(axis_name) -> bool:
    """Whether every axis of ``axis_name`` is a manual axis of the enclosing ``shard_map``
    (False for a ``jax.vmap(axis_name=...)`` axis: nothing crosses devices there)."""
    get_mesh = getattr(jax.sharding, "get_abstract_mesh", None)
    if get_mesh is None:  # an older JAX: every named axis is taken as a mesh axis
        return True
    manual = getattr(get_mesh(), "manual_axes", None)
    if manual is None:
        return True
    axes = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    return all(a in manual for a in axes)


_UNSUPPORTED_NESTING = (
    "compressed_all_to_all cannot code here ({where}): the coded exchange runs only where "
    "every mesh axis is Manual (inside the shard_map) or Auto, and the operand is not batched "
    "over a mesh axis outside the shard_map. Supported: a shard_map "
    "manual over every mesh axis the operand is batched or sharded over (put the vmapped "
    "axis into the shard_map's in_specs, e.g. in_specs=P('j', 'i'), instead of "
    "jax.vmap(..., spmd_axis_name='j')); a partial shard_map(axis_names=...) on a mesh of "
    "AxisType.Auto axes; a jax.vmap(axis_name=...) axis as axis_name (exchanged exactly); or "
    "jax.lax.all_to_all, exact"
)


def _exact_stats(raw_bytes, axis_name, groups) -> ExchangeStats:
    """Statistics of a leaf exchanged exactly by ``jax.lax.all_to_all`` (ratio 1 per peer;
    with ``axis_index_groups`` only the peers of this device's group receive bytes)."""
    p = jax.lax.axis_size(axis_name)
    if groups is None:
        return ExchangeStats.exact(raw_bytes, (p,), capacity_bytes=0.0, axis_name=axis_name)
    g = jnp.asarray(np.asarray(groups, np.int32))  # [groups, G]
    mine = g[jnp.argmax(jnp.any(g == jax.lax.axis_index(axis_name), axis=1))]
    per_peer = jnp.where(jnp.isin(jnp.arange(p), mine), raw_bytes / g.shape[1], 0.0)
    intra, inter = node_bytes(per_peer, axis_name)
    stats = ExchangeStats.exact(raw_bytes, (g.shape[1],), capacity_bytes=0.0)
    return stats._replace(
        intra_node_bytes=intra, inter_node_raw_bytes=inter, inter_node_moved_bytes=inter
    )


def _total_stats(stats: list) -> ExchangeStats:
    """The statistics of a pytree's exchange: byte counts and overflows summed over the
    leaves, ``fallback`` and ``capacity_bytes`` their maximum, ``compression_ratio``
    ``float32[P]`` per destination peer (raw / frame bytes of all leaves' blocks for it)."""

    def total(field):
        v = [getattr(s, field) for s in stats]
        return None if any(a is None for a in v) else sum(v[1:], v[0])

    raw_peer = frame_peer = jnp.float32(0.0)
    for s in stats:
        r = s.compression_ratio
        p = r.shape[0]
        raw_peer = raw_peer + jnp.full((p,), s.raw_bytes / p, jnp.float32)
        if r.size:  # each chunk's frame bytes: its raw bytes / its ratio
            frame_peer = frame_peer + (s.raw_bytes / r.size / r).reshape(p, -1).sum(axis=1)
    ratio = jnp.where(frame_peer > 0, raw_peer / jnp.maximum(frame_peer, 1e-30), 1.0)
    return ExchangeStats(
        raw_bytes=total("raw_bytes"),
        frame_bytes=total("frame_bytes"),
        moved_bytes=total("moved_bytes"),
        compression_ratio=ratio.astype(jnp.float32),
        overflow_count=total("overflow_count"),
        fallback=functools.reduce(jnp.maximum, [s.fallback for s in stats]),
        capacity_bytes=functools.reduce(jnp.maximum, [s.capacity_bytes for s in stats]),
        intra_node_bytes=total("intra_node_bytes"),
        inter_node_raw_bytes=total("inter_node_raw_bytes"),
        inter_node_moved_bytes=total("inter_node_moved_bytes"),
    )


def _leaf_exchange(
    x,
    error_bound,
    backward_error_bound,
    *,
    axis_name,
    split_axis,
    concat_axis,
    tiled,
    groups,
    config,
):
    """One array's exchange: ``(y, ExchangeStats)``. Coded when its dtype is one the codec
    supports and ``axis_name`` is ``shard_map``'s; else the exact ``jax.lax.all_to_all``."""
    x = jnp.asarray(x)
    if groups is not None or np.dtype(x.dtype) not in CODED_DTYPES or not _mesh_axes(axis_name):
        y = jax.lax.all_to_all(
            x, axis_name, split_axis, concat_axis, axis_index_groups=groups, tiled=tiled
        )
        return y, _exact_stats(float(x.size * x.dtype.itemsize), axis_name, groups)
    explicit = tuple(getattr(jax.sharding.get_abstract_mesh(), "explicit_axes", ()))
    if explicit:
        raise ValueError(_UNSUPPORTED_NESTING.format(where=f"with Explicit mesh axes {explicit}"))
    dtype = np.dtype(x.dtype)
    p = jax.lax.axis_size(axis_name)
    lay = make_layout(x.shape, p, split_axis, concat_axis, config.table_axis, tiled)
    if x.size == 0:  # nothing to compress (e.g. no tables on this shard): the exact empty result
        # The layout's axes, normalised (a negative axis on a size-0 operand crashed XLA).
        y = jax.lax.all_to_all(x, axis_name, lay.split, lay.concat, tiled=tiled)
        return y, ExchangeStats.exact(0.0, lay.grid, capacity_bytes=0.0, axis_name=axis_name)
    x = as_varying(x, axis_name)  # x the same on every device (in_specs=P()): as y is
    path = resolve_path(config.path)
    dense = path in ("dense", "packed")
    fwd, bwd = config.forward, config.backward
    # Each bound as the traced float32 operand and, where it is known at trace time, its
    # static value (which sizes the frames' capacity). The backward bound defaults to the
    # caller's forward bound, else to the backward codec's own default.
    given = error_bound
    error_bound, static_bound = codec_bound(fwd, error_bound, lay.grid, "error_bound")
    if backward_error_bound is None and given is not None:
        backward_error_bound, backward_static_bound = error_bound, static_bound
    else:
        backward_error_bound, backward_static_bound = codec_bound(
            bwd, backward_error_bound, lay.transposed().grid, "backward_error_bound"
        )

    def capacity(codec, table_lay, bound):
        lay_ = table_lay if codec.per_table else table_lay.per_peer()
        return codec.capacity_bytes(lay_.chunk_shape, dtype, dense=dense, error_bound=bound)

    cap = capacity(fwd, lay, static_bound)
    bcap = 0 if bwd is None else capacity(bwd, lay.transposed(), backward_static_bound)
    plan = Plan(axis_name, lay, dtype, path, fwd, cap, bwd, bcap, config.topology)
    try:
        return exchange_array(plan, x, error_bound, backward_error_bound)
    except ValueError as e:  # jax.vmap(shard_map(...), spmd_axis_name=...) of an Auto axis
        if "varying manual axes to match" not in str(e):
            raise
        where = "under jax.vmap(spmd_axis_name=...)"
        raise ValueError(_UNSUPPORTED_NESTING.format(where=where)) from e


def compressed_all_to_all(
    x,
    axis_name,
    split_axis: int,
    concat_axis: int,
    *,
    axis_index_groups=None,
    tiled: bool = False,
    error_bound=None,
    backward_error_bound=None,
    config: ExchangeConfig | None = None,
):
    """``jax.lax.all_to_all`` of ``x`` with error-bounded lossy compression of the payload.

    Call inside ``shard_map`` over ``axis_name`` (P devices). Positional arguments,
    ``axis_index_groups`` and ``tiled`` (default False) are ``jax.lax.all_to_all``'s. The
    block ``x`` sends to peer ``d`` is cut into codec chunks ``[rows, dim]``: ``dim`` is the
    block's last axis (``x``'s last axis unless it is the tiled split axis; untiled, the split
    axis is removed first); with ``config.table_axis`` each index along that axis is its own
    chunk (one chunk per (peer, table), each with its own bound and REL range), and all other
    axes are flattened into ``rows`` in C order. Chunks are encoded in one call of
    ``config.forward``, exchanged, decoded and reassembled into what
    ``jax.lax.all_to_all(x, axis_name, split_axis, concat_axis, tiled=tiled)`` returns.

    DLRM use (sec. 3): pooled embeddings ``float32[global_batch, L, dim]``, ``split_axis=0``,
    ``concat_axis=1``, ``tiled=True``, ``ExchangeConfig(table_axis=1)``, ``error_bound``
    ``float32[L]`` -> ``float32[global_batch / P, P * L, dim]``; each (peer, table) block
    ``[global_batch / P, dim]`` is one chunk.

    Args:
      x: an array or a pytree of arrays (tuple, list, dict, registered dataclass), as
        ``jax.lax.all_to_all`` takes: each leaf is its own exchange with the same axes.
        ``float32 | bfloat16 | float16`` leaves (``CODED_DTYPES``) are coded, each in its own
        chunks (its own REL range); leaves of every other dtype (float64, integer, bool,
        complex, float8) travel exactly through ``jax.lax.all_to_all``.
      axis_name: the ``shard_map`` mesh axis or a tuple of them (static). A
        ``jax.vmap(axis_name=...)`` axis is accepted: nothing crosses devices there, the
        exchange is ``jax.lax.all_to_all``'s, exact.
      split_axis, concat_axis: as in ``jax.lax.all_to_all`` (static ints, negative allowed).
      axis_index_groups: as in ``jax.lax.all_to_all``; when given, every leaf is exchanged
        exactly by ``jax.lax.all_to_all`` within its group (no coding; to code a group, make
        it a mesh axis of its own, e.g. a ``(2, 4)`` mesh for two groups of four).
      tiled: as in ``jax.lax.all_to_all``.
      error_bound: float, traced or concrete, broadcastable to the chunk grid ``[P]`` (no
        table axis) or ``[P, T]`` (a ``[T]`` vector gives one bound per table); for a pytree
        ``x`` one such value for every coded leaf, or a pytree prefix of ``x`` (e.g.
        ``{"emb": 0.01, "aux": 0.0}``; a leaf of the prefix is the bound of every leaf below
        it, None its default; a per-table vector inside it is an array, not a list). None
        (default, ``jax.lax.all_to_all``'s call): the codec's ``default_error_bound``,
        ``DEFAULT_ERROR_BOUND`` (REL 0.01, the paper's tightest tier) for the default
        :class:`jax_lossy_comm.FrameCodec`; ABS mode has none (required). Ignored by the
        TorchRec baselines (``Int8Rowwise``, ``FP8Rowwise``, ``MX4``, ``FP16``, ``BF16``).
        REL (``FrameCodec(mode="rel")``): ``eb_abs = error_bound * (max - min)`` of each
        chunk; ABS: absolute. Every finite value of the result is within ``eb_abs`` of the
        exact result (0: bit-equal); NaN/Inf arrive bit-exact. Changing a traced bound does
        not recompile.
      backward_error_bound: bound of the backward exchange when ``config.backward`` is a
        codec, broadcastable to its chunk grid (same ``[P, T]`` shape; a pytree as
        ``error_bound``); default ``error_bound`` if given, else the backward codec's
        default.
      config: the static :class:`ExchangeConfig` (codecs, table axis, wire path, topology),
        the same for every leaf; default ``ExchangeConfig()``. ``topology="hierarchical"``
        needs ``axis_name=(node_axis, local_axis)``.

    Returns:
      ``y`` with ``jax.lax.all_to_all``'s structure, shapes and dtypes.

    Derivatives:
      Straight-through (sec. 3): as if the exchange were exact. With ``config.backward=None``
      (default) the derivative is the exact, linear ``jax.lax.all_to_all``, so reverse mode
      (the cotangent's transposed all-to-all), forward mode (``jax.jvp``, ``jax.linearize``,
      ``jax.jacfwd``) and higher orders (``jax.grad`` of ``jax.grad``, ``jax.jvp`` of
      ``jax.grad``) all work as through ``jax.lax.all_to_all``. With a backward codec, the
      cotangent travels through it: first-order reverse mode only (``jax.grad``,
      ``jax.vjp``); forward mode raises JAX's ``TypeError`` ("can't apply forward-mode
      autodiff (jvp) to a custom_vjp function") and a second-order derivative (``jax.grad``
      of ``jax.grad``, ``jax.jvp`` of ``jax.grad``) raises ``NotImplementedError``. The error bounds and statistics have zero derivative.

    Raises:
      ValueError: a hierarchical topology without an ``axis_name`` pair (or with a
        variable-size codec that is not per table), bad axes, a split axis not divisible by
        (tiled) or not equal to (untiled) the
        axis size, a table axis that is the last axis, an error bound that does not broadcast
        to the chunk grid, a concrete negative or non-finite error bound, a missing bound for
        an error-bounded codec without a default (ABS mode), an ``error_bound`` pytree that
        is not a prefix of ``x``, a block the codec cannot encode (``Int8Rowwise``: size not
        a multiple of ``row_dim``), a coded leaf inside ``jax.vmap(shard_map(...),
        spmd_axis_name=...)`` or on a mesh with Explicit axes outside the ``shard_map`` (the
        message names what is supported: put the vmapped axis into ``in_specs``, Auto axes,
        or ``jax.lax.all_to_all``).
      TypeError: a ``config`` that is not an :class:`ExchangeConfig`.
      NotImplementedError: a higher-order derivative through a
        backward codec (Derivatives); or (an XLA error) ``path="ragged"`` on a backend
        without ``ragged_all_to_all`` (XLA:CPU).

    Examples:
      Pooled embeddings ``[global_batch, tables, dim]``, one bound per table, 8 devices:

      >>> import jax, jax.numpy as jnp, numpy as np
      >>> from jax.sharding import PartitionSpec as P
      >>> import jax_lossy_comm as jlc
      >>> mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
      >>> cfg = jlc.ExchangeConfig(jlc.FrameCodec(min_error_bound=0.01), table_axis=1)
      >>> def f(x, error_bound):
      ...     y = jlc.compressed_all_to_all(x, "i", 0, 1, tiled=True, error_bound=error_bound,
      ...                                   config=cfg)
      ...     return y, jax.lax.all_to_all(x, "i", 0, 1, tiled=True)
      >>> g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("i"), P()),
      ...                           out_specs=(P("i"), P("i"))))
      >>> x = jnp.sin(jnp.arange(8 * 64 * 2 * 16, dtype=jnp.float32)).reshape(8 * 64, 2, 16)
      >>> error_bound = jnp.array([0.01, 0.05])  # REL bound per table
      >>> y, exact = g(x, error_bound)
      >>> y.shape
      (64, 16, 16)
      >>> bool(jnp.abs(y - exact).max() <= 0.05 * 2.0)  # within eb_abs = error_bound * (max - min)
      True

      Hierarchical on 2 nodes x 4 devices: blocks within a node arrive exact, the others
      as from the flat exchange:

      >>> mesh2 = jax.make_mesh((2, 4), ("node", "local"),
      ...                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
      >>> ax = ("node", "local")
      >>> hcfg = jlc.ExchangeConfig(jlc.FrameCodec(min_error_bound=0.01), table_axis=1,
      ...                           topology="hierarchical")
      >>> def h(x, error_bound):
      ...     y = jlc.compressed_all_to_all(x, ax, 0, 1, tiled=True, error_bound=error_bound,
      ...                                   config=hcfg)
      ...     return y, jax.lax.all_to_all(x, ax, 0, 1, tiled=True)
      >>> gh = jax.jit(jax.shard_map(h, mesh=mesh2, in_specs=(P(ax), P()),
      ...                            out_specs=(P(ax), P(ax))))
      >>> y, exact = gh(x, error_bound)  # column 2 * source + table: sources 0-3 are node 0
      >>> y0, e0 = np.asarray(y[:8]), np.asarray(exact[:8])  # device 0's [8, 8 * 2, 16]
      >>> bool((y0[:, :8] == e0[:, :8]).all()), bool((y0[:, 8:] == e0[:, 8:]).all())
      (True, False)

    References:
      Feng et al., SC24, arXiv 2407.04272, sec. 3 (exchange, straight-through backward) and
      sec. 4 (quantization without prediction, REL bound). Hierarchical all-to-all: NVIDIA
      HugeCTR (``HierAll2Allv``), NCCL-based two-stage intra/inter-node exchanges.
    """
    y, _ = _exchange_with_stats(
        x,
        axis_name,
        split_axis,
        concat_axis,
        axis_index_groups=axis_index_groups,
        tiled=tiled,
        error_bound=error_bound,
        backward_error_bound=backward_error_bound,
        config=config,
    )
    return y
