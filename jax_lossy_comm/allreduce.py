"""Compressed all-reduce for ``shard_map``: ``jax.lax.psum`` of gradients with error-bounded
frames, and error feedback.

:func:`compressed_psum` sums ``x`` (an array or a pytree of arrays) over a mesh axis like
``jax.lax.psum``, with the exchange's codecs (:class:`jax_lossy_comm.CommCodec`: the library's
:class:`jax_lossy_comm.FrameCodec` by default, or the ``BF16`` / ``Int8Rowwise`` baselines) and
the exchange's collectives, in two phases:

1. reduce-scatter: the leaves are flattened into one buffer (padded with its last value to
   ``P * rows * dim``), cut into one chunk ``[rows, dim]`` per peer
   (:class:`jax_lossy_comm.Layout`), encoded, and sent as in :func:`compressed_all_to_all`
   (:func:`jax_lossy_comm.wire.send_frames`: dense, packed or ragged path); each device
   decodes the P contributions to its chunk and sums them in float32;
2. all-gather: each device encodes its reduced chunk once, cut into up to ``SHARD_CHUNKS``
   chunks of whole rows (so that a GPU runs many blocks and asks for little scratch), and
   every device receives all P devices' reduced frames (``all_gather``s of the static
   chunks that cover the largest frames, as the packed path moves its buffers; the whole
   capacity on the dense path) and decodes them: every device ends with the same,
   bit-identical sum.

No ``psum_scatter`` (gloo gets it wrong on chunks of about 4 MiB and up, jax-ml/jax#40830):
only ``all_to_all``, ``all_gather``, ``ragged_all_to_all`` (ragged path) and two scalar
``pmax`` run, so it works across processes (gloo on CPU, NCCL on GPU).

Error bound (every finite element of the result, chunk ``c`` of the flattened buffer, with
``x_i`` device ``i``'s contribution and ``R_i`` the value range ``max - min`` of its chunk
``c``; ``R_s`` the range of the reduced chunk before its re-compression, an upper bound of
the range of each of its re-compressed parts)::

    |y - sum_i x_i| <= sum_i eb_abs(i) + eb_abs(s) + rounding
      ABS:  eb_abs = eb                  ->  (P + 1) * eb
      REL:  eb_abs(i) = eb * R_i,  eb_abs(s) = eb * R_s <= eb * (1 + 2 eb) * sum_i R_i
            ->  eb * (2 + 2 eb) * sum_i R_i  <=  2 eb (1 + eb) * P * max_i R_i

``rounding`` is float32 rounding of the P-term sum, at most ``(P - 1) * 2**-24 * sum_i |x_i|``
per element (the order of what ``jax.lax.psum`` itself rounds), plus, for bfloat16/float16
inputs, one rounding of the float32 sum to the input dtype (half an ulp). The first term is
the reduce-scatter (each of the P contributions within its own bound), the second the
re-compression of the reduced chunk. NaN and Inf travel bit-exactly as outliers while they
fit; a frame that does not fit the capacity (too many NaN/Inf or unquantizable values, a bound
below ``FrameCodec.min_error_bound``, a too small ``capacity``) is never dropped: its count is
``pmax``-ed and the whole call returns ``jax.lax.psum(x)`` bit for bit under ``lax.cond``
(``fallback`` and ``overflow_count`` in the statistics); with ``AllReduceConfig(slices=S)``
only the slice that holds such a frame, as ``jax.lax.psum`` of the slice of the flattened
buffer (float leaves promoted to their common dtype, so bfloat16 leaves beside float32 ones
are summed in float32 there).

Gradient: straight-through, ``jax.lax.psum``'s own rule applied to the cotangent (inside
``shard_map`` with ``check_vma=True``, the default, the invariant sum's cotangent is copied to
every device, no communication; with ``check_vma=False`` its transpose is a ``psum``).

Error feedback (:func:`jax_lossy_comm.error_feedback`): each device keeps what compression removed from its
own contribution (its reduce-scatter chunks, plus for the chunk it reduced the error of the
re-compression) and adds it to its next gradient. The errors telescope: the sum of the
transmitted results over steps equals the sum of the exact gradients minus the residuals
still held, which stay within one step's bound, so deterministic (biased) quantization does
not accumulate (Seide et al. 2014; Karimireddy et al. 2019).

References:
  F. Seide, H. Fu, J. Droppo, G. Li, D. Yu, "1-Bit Stochastic Gradient Descent and its
  Application to Data-Parallel Distributed Training of Speech DNNs", Interspeech 2014.
  S. P. Karimireddy, Q. Rebjock, S. U. Stich, M. Jaggi, "Error Feedback Fixes SignSGD and
  other Gradient Compression Schemes", ICML 2019 (EF-SGD, Algorithm 2).
  J. Huang, S. Di, X. Yu, et al., "gZCCL: Compression-Accelerated Collective Communication
  Framework for GPU Clusters", ICS 2024 (error-bounded compressed all-reduce).
  S. Feng et al., SC24, arXiv 2407.04272, sec. 4 (the codec: quantization, REL bound).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jax_lossy_comm import precondition
from jax_lossy_comm._compat import all_gather_invariant
from jax_lossy_comm.codec import check_dtype, concrete_error_bound
from jax_lossy_comm.comm_codec import CommCodec, FrameCodec
from jax_lossy_comm.frame import header_bytes
from jax_lossy_comm.layout import Layout, make_layout
from jax_lossy_comm.stats import ExchangeStats
from jax_lossy_comm.vma import as_varying
from jax_lossy_comm.wire import (
    PACKED_CHUNKS,
    PATHS,
    TEST_PATHS,
    SentFrames,
    chunk_counts,
    pack_frames,
    packed_chunks,
    resolve_path,
    run_chunked,
    send_frames,
    unpack_frames,
)

__all__ = [
    "CHUNK_DIM",
    "AllReduceConfig",
    "chunk_geometry",
    "compressed_psum",
    "compressed_psum_with_stats",
]

#: Values per codec row of the flattened buffer: each peer's chunk is ``[rows, CHUNK_DIM]``
#: (a multiple of ``Int8Rowwise``'s row of 32; at most ``CHUNK_DIM - 1`` padding per peer).
CHUNK_DIM = 256

#: The reduced shard ``[rows, CHUNK_DIM]`` is re-compressed as up to this many chunks of at
#: least ``SHARD_CHUNK_ROWS`` rows (:func:`_shard_chunks`): a GPU encoder runs a block or more
#: per chunk (an H200 holds 132 SMs x 7 encoder blocks = 924), and a chunk's workspace (4
#: bytes a value for the codes) stays far below the frames' capacity. One chunk of a 1 GiB
#: gradient's shard over 8 devices asked for 143 MiB of scratch.
SHARD_CHUNKS = 1024
SHARD_CHUNK_ROWS = 64  # 16,384 values: 4 tiles of the fixed-rate code, the exchange's chunk


@dataclasses.dataclass(frozen=True)
class AllReduceConfig:
    """Static settings of one :func:`compressed_psum`, checked once on construction.

    Frozen and hashable; the error bound is a traced argument of the call (no recompile).

    Attributes:
      codec: the :class:`jax_lossy_comm.CommCodec` of both phases: the library's
        error-bounded :class:`jax_lossy_comm.FrameCodec` (default), or a baseline without a
        bound, ``BF16()`` (PyTorch DDP's bf16 compression hook) or ``Int8Rowwise()``.
      path: how the reduce-scatter's variable-size frames travel, as
        :class:`jax_lossy_comm.ExchangeConfig.path`; the all-gather moves the static chunks
        that cover the largest frame, or on ``"dense"`` the whole capacity. ``"auto"``:
        ``"ragged"`` where ``jax.lax.ragged_all_to_all`` is implemented, else ``"dense"``
        (:func:`resolve_path` with ``fills_capacity``: gradient frames fill most of their
        capacity; on 2 processes x 2 CPU devices over gloo a 3 MB gradient took 47 ms dense
        and 74 ms packed, which saved 22% of the bytes).
      slices: the all-reduce runs as this many all-reduces of equal contiguous slices of the
        flattened buffer, one after the other (a ``jax.lax.scan``), each with its own frames
        and its own fallback. XLA's scratch is then one slice's: temp + output of a
        4M-float gradient on 8 CPU devices, against ``jax.lax.psum``'s (which works in
        place), is 1.56x whole and 1.15x in 16 slices (bench/training/exchange_memory.py;
        the scratch per slice is about 2.4x the slice's bytes, so fewer than about 12 slices
        save little). A frame that does not fit its capacity sends only its own slice
        through ``jax.lax.psum``. The price is ``slices`` rounds of collectives instead of
        one, a fixed latency each: worth it for large gradients where memory is short, not
        for small ones. Each slice holds whole ``CHUNK_DIM`` rows per peer, so fewer slices
        run where the buffer has fewer rows per peer than asked for (none is padding only).
        A ``FrameCodec(capacity=C)`` is per chunk of a slice. Default 1.

    Raises:
      TypeError: a codec that is not a :class:`jax_lossy_comm.CommCodec`.
      ValueError: an unknown ``path``, ``slices`` not a positive int.

    Examples:
      >>> from jax_lossy_comm import AllReduceConfig, BF16
      >>> AllReduceConfig(BF16())
      AllReduceConfig(codec=BF16(), path='auto', slices=1)
      >>> AllReduceConfig(path="ring")
      Traceback (most recent call last):
      ...
      ValueError: AllReduceConfig.path must be one of ('auto', 'dense', 'packed', 'ragged'), \
got 'ring'
    """

    codec: CommCodec = FrameCodec()
    path: str = "auto"
    slices: int = 1

    def __post_init__(self):
        if not isinstance(self.codec, CommCodec):
            raise TypeError(f"AllReduceConfig.codec must be a CommCodec, got {self.codec!r}")
        if self.path not in PATHS + TEST_PATHS:
            raise ValueError(f"AllReduceConfig.path must be one of {PATHS}, got {self.path!r}")
        s = self.slices
        if not isinstance(s, numbers.Integral) or isinstance(s, (bool, np.bool_)) or s < 1:
            raise ValueError(f"AllReduceConfig.slices must be an int >= 1, got {s!r}")
        object.__setattr__(self, "slices", int(s))


class _Plan(NamedTuple):
    """Static (hashable) plan of one call: the config resolved against the buffer."""

    axis_name: object
    layout: Layout  # the padded buffer [P * rows, dim], one chunk [rows, dim] per peer
    dtype: object
    path: str  # resolved: "dense" | "packed" | "ragged" | "_ragged_emulated"
    codec: CommCodec
    capacity: int
    shard_chunks: tuple  # (k, rows_k): the reduced shard's chunks (_shard_chunks)
    shard_capacity: int  # capacity of each of them
    feedback: bool  # compute the residual (error feedback)
    n: int  # values of x in one slice (the slice's unpadded length)
    unravel: object  # float[n] -> x's pytree (ravel_pytree's inverse); a slice: itself
    slices: int  # the buffer is `slices` slices of layout.shape, reduced one after the other


def chunk_geometry(n: int, p: int) -> tuple[int, int]:
    """``(rows, CHUNK_DIM)``: each peer's chunk of a buffer of ``n`` values over ``p`` devices
    (the shape each reduce-scatter frame codes; a cost model sizes the all-reduce with it)."""
    return max(1, -(-n // (p * CHUNK_DIM))), CHUNK_DIM


def _shard_chunks(rows: int) -> tuple[int, int]:
    """``(k, rows_k)``: the reduced shard of ``rows`` rows is coded as ``k`` chunks of
    ``rows_k`` rows, the last padded with its last row (``k * rows_k - rows < k`` rows, no
    new value, so no chunk's range grows). Each chunk's range is at most the shard's, so the
    REL bound of the re-compression (module docstring, ``eb * R_s``) still holds."""
    k = max(1, min(SHARD_CHUNKS, rows // SHARD_CHUNK_ROWS))
    return k, -(-rows // k)


def _sum_peers(x):
    """``x.sum(axis=0)`` as a pairwise tree of adds over the leading (peer) axis.

    XLA:CPU of jax 0.10 runs a reduce over a short leading axis about 50x slower than the
    adds (float32[2, 1489, 256]: 2.5 ms vs 0.05 ms on this project's 2-core testbed; jax 0.12
    0.1 ms): the sum of the decoded chunks was 3 ms of a 100 ms train step. The adds fuse
    into one elementwise loop on every backend."""
    parts = [x[i] for i in range(x.shape[0])]
    while len(parts) > 1:
        parts = [a + b for a, b in zip(parts[::2], parts[1::2])] + parts[len(parts) & ~1 :]
    return parts[0]


def _send_fixed(axis_name, wire, nbytes) -> SentFrames:
    """A fixed-size codec's wire: one dense ``all_to_all``, nothing can overflow."""

    def receive():
        return jax.lax.all_to_all(wire, axis_name, 0, 0, tiled=True), nbytes

    moved = jnp.float32(wire.size * wire.dtype.itemsize)
    return SentFrames(receive, moved, jnp.int32(0), None)


def _gather_frames(plan: _Plan, frames, nbytes):
    """All-gather of the ``K`` variable-size frames ``uint8[K, cap]`` + ``int32[K]`` counts of
    each device: ``(frames uint8[P, K, cap], nbytes int32[P, K], moved_bytes, n_over,
    any_over)``; the gathered arrays are invariant over the axis (every device holds the
    same)."""
    ax, cap = plan.axis_name, plan.shard_capacity
    k = frames.shape[0]
    n_over = (nbytes < 0).astype(jnp.int32).sum()
    agg = jax.lax.pmax(jnp.stack([n_over, 4 * k + jnp.maximum(nbytes, 0).sum()]), ax)

    def gather(b):
        return all_gather_invariant(b, ax)

    if plan.path == "dense":
        buf = pack_frames(frames[None], nbytes[None], k * (4 + cap))[0]
        per_peer, collect = jnp.float32(k * (4 + cap)), gather
    else:
        chunks = packed_chunks(k, cap)
        counts = chunk_counts(chunks, agg[1])
        buf = pack_frames(frames[None], nbytes[None], PACKED_CHUNKS * chunks[0])[0]
        per_peer = (counts * jnp.asarray(chunks, jnp.int32)).sum().astype(jnp.float32)

        def collect(b):
            out = jnp.zeros((plan.layout.p,) + b.shape, b.dtype)
            return run_chunked(gather, b, out, counts, chunks)

    def receive():
        return unpack_frames(collect(buf), k, cap)

    moved = per_peer * plan.layout.p
    return receive, moved, n_over, agg[0] > 0


def _allreduce(plan: _Plan, buf, eb):
    """The two phases on the padded buffer ``buf`` (1-D): ``(y, ExchangeStats, residual)``."""
    ax, codec, lay, dt = plan.axis_name, plan.codec, plan.layout, plan.dtype
    p, chunk = lay.p, lay.chunk_shape
    chunks = lay.to_chunks(buf.reshape(lay.shape))  # [P, rows, dim]
    eb1 = jnp.broadcast_to(eb, (p,)) if codec.error_bounded else None
    wire, nbytes = codec.encode(chunks, eb1, plan.capacity)
    if codec.variable_size:
        sent = send_frames(ax, plan.path, wire, nbytes)
    else:
        sent = _send_fixed(ax, wire, nbytes)

    def reduce_scatter(_):
        rw, rnb = sent.receive()
        s = _sum_peers(codec.decode(rw, rnb, shape=chunk, dtype=dt).astype(jnp.float32))
        own = codec.decode(wire, nbytes, shape=chunk, dtype=dt) if plan.feedback else chunks
        return s.astype(dt), own

    def skipped(_):  # some frame overflowed: the result is psum's, nothing to send
        return jnp.zeros_like(chunks[0]), chunks

    over1 = sent.any_overflow
    s, own = (
        reduce_scatter(None)
        if over1 is None
        else jax.lax.cond(over1, skipped, reduce_scatter, None)
    )
    k, rows_k = plan.shard_chunks
    s_k = jnp.pad(s, ((0, k * rows_k - chunk[0]), (0, 0)), mode="edge")
    s_k = s_k.reshape(k, rows_k, chunk[1])
    wire2, nb2 = codec.encode(
        s_k, None if eb1 is None else jnp.broadcast_to(eb, (k,)), plan.shard_capacity
    )

    def shard(y_k):  # [P, K, rows_k, dim] -> [P, rows, dim]
        return y_k.reshape(p, k * rows_k, chunk[1])[:, : chunk[0]]

    if codec.variable_size:
        receive2, moved2, over2_n, over2 = _gather_frames(plan, wire2, nb2)
        fallback = over1 | over2

        def gathered(_):
            rf, rnb = receive2()
            return shard(codec.decode(rf, rnb, shape=(rows_k, chunk[1]), dtype=dt))

        def exact(_):
            # jax.lax.psum of x's own leaves (not of the buffer): the same all-reduce the
            # caller would run, so the same summation order on every backend (gloo's ring
            # order depends on the buffer's layout).
            exact_flat = ravel_pytree(jax.lax.psum(plan.unravel(buf[: plan.n]), ax))[0]
            padded = jnp.pad(exact_flat.astype(dt), (0, buf.size - plan.n))
            return lay.to_chunks(padded.reshape(lay.shape))

        y = jax.lax.cond(fallback, exact, gathered, None)
        raw = jnp.float32(2 * buf.size * np.dtype(dt).itemsize)
        # per phase; the exact psum of a fallback counts half its raw bytes to each, and a
        # reduce-scatter's frames already sent before an all-gather overflow count too
        scatter = jnp.where(over1, raw / 2, sent.moved_bytes + jnp.where(over2, raw / 2, 0.0))
        gather = jnp.where(fallback, raw / 2, moved2)
        n_over = sent.overflow_count + over2_n
    else:
        rw2 = all_gather_invariant(wire2, ax)
        nb2_all = jnp.broadcast_to(nb2, (p, k))
        y = shard(codec.decode(rw2, nb2_all, shape=(rows_k, chunk[1]), dtype=dt))
        fallback = jnp.asarray(False)
        scatter = sent.moved_bytes
        gather = p * jnp.float32(wire2.size * wire2.dtype.itemsize)
        n_over = jnp.int32(0)
    # This device's untransmitted error: its contributions' coding error, and on the chunk it
    # reduced the re-compression's error; zero after the exact fallback.
    me = jax.lax.axis_index(ax)
    mine = (jnp.arange(p) == me)[:, None, None]
    err2 = jnp.where(mine, s.astype(jnp.float32) - y[me].astype(jnp.float32), 0.0)
    residual = (chunks.astype(jnp.float32) - own.astype(jnp.float32)) + err2
    residual = jnp.where(fallback, 0.0, residual).astype(dt)
    fb1 = jnp.abs(nbytes).astype(jnp.float32).sum()
    fb2 = jnp.abs(nb2).astype(jnp.float32).sum()
    item = np.dtype(dt).itemsize
    stats = ExchangeStats(
        raw_bytes=jnp.float32(2 * buf.size * item),
        frame_bytes=fb1 + p * fb2,
        moved_bytes=(scatter + gather).astype(jnp.float32),
        compression_ratio=jnp.stack(
            [buf.size * item / jnp.maximum(fb1, 1.0), buf.size // p * item / jnp.maximum(fb2, 1.0)]
        ).astype(jnp.float32),
        overflow_count=n_over.astype(jnp.int32),
        fallback=jnp.asarray(fallback, jnp.int32),
        capacity_bytes=jnp.float32(plan.capacity),
        phase_moved_bytes=jnp.stack([scatter, gather]).astype(jnp.float32),
    )
    return lay.from_chunks(y).reshape(-1), stats, residual.reshape(-1)


def _in_slices(plan: _Plan, buf, eb):
    """``_allreduce`` of each of the plan's slices of ``buf``, one after the other (a scan:
    XLA's buffers are one slice's); the statistics of all slices together."""
    if plan.slices == 1:
        return _allreduce(plan, buf, eb)
    _, (y, st, residual) = jax.lax.scan(
        lambda carry, part: (carry, _allreduce(plan, part, eb)),
        None,
        buf.reshape(plan.slices, -1),
    )
    stats = ExchangeStats(
        raw_bytes=st.raw_bytes.sum(),
        frame_bytes=st.frame_bytes.sum(),
        moved_bytes=st.moved_bytes.sum(),
        # equal raw bytes per slice: raw / frame bytes of all slices of a phase together
        compression_ratio=plan.slices / (1.0 / st.compression_ratio).sum(axis=0),
        overflow_count=st.overflow_count.sum(),
        fallback=st.fallback.max(),
        capacity_bytes=st.capacity_bytes[0],
        phase_moved_bytes=st.phase_moved_bytes.sum(axis=0),
    )
    return y.reshape(-1), stats, residual.reshape(-1)


def _identity(v):
    return v


# ---------------------------------------------------------- the straight-through gradient
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _psum(plan: _Plan, buf, eb):
    return _in_slices(plan, buf, eb)


def _psum_fwd(plan, buf, eb):
    # An empty slice of buf carries its type (varying or not) to the backward pass for free.
    return _in_slices(plan, buf, eb), (buf[:0], eb)


def _psum_bwd(plan, res, cts):
    empty, eb = res
    # jax.lax.psum's own cotangent rule, at a (zero) point typed like the buffer: a copy
    # under shard_map's check_vma, a psum without it.
    like = jnp.zeros(plan.slices * math.prod(plan.layout.shape), plan.dtype) + empty.sum()
    ct = jax.vjp(lambda v: jax.lax.psum(v, plan.axis_name), like)[1](cts[0])[0]
    return ct.astype(plan.dtype), jnp.zeros_like(eb)


_psum.defvjp(_psum_fwd, _psum_bwd)


# ------------------------------------------------------------------------------ public API
def _prepare(x, axis_name, axis_index_groups, error_bound, config, feedback):
    """Checks the call, flattens ``x``: ``(plan, buf, eb, n, unravel)`` (plan None: empty)."""
    if axis_index_groups is not None:
        raise NotImplementedError("compressed_psum: axis_index_groups is not supported")
    config = AllReduceConfig() if config is None else config
    if not isinstance(config, AllReduceConfig):
        raise TypeError(f"config must be an AllReduceConfig, got {config!r}")
    flat, unravel = ravel_pytree(x)
    dt = check_dtype(flat.dtype, "x")
    codec = config.codec
    if error_bound is None:
        if codec.error_bounded:
            raise ValueError(f"error_bound is required by {type(codec).__name__}")
        error_bound = 0.0
    eb_c = concrete_error_bound(error_bound)  # raises on a negative or non-finite value
    eb = jnp.asarray(error_bound, jnp.float32)
    if eb.shape != ():
        raise ValueError(f"error_bound must be a scalar, got shape {eb.shape}")
    n = flat.size
    if n == 0:
        return None, flat, eb, n, unravel
    p = jax.lax.axis_size(axis_name)
    # slices of whole rows per peer, as many as asked for but none of padding only
    rows_total, dim = chunk_geometry(n, p)
    rows = -(-rows_total // config.slices)
    slices = -(-rows_total // rows)
    lay = make_layout((p * rows, dim), p, 0, 0, None, tiled=True)
    # Gradient frames fill most of their fixed-rate capacity (all of it with codec="fixed",
    # about 78% with "auto" on gradients), so packing them saves little and costs a chunk
    # loop of collectives per phase (resolve_path).
    path = resolve_path(config.path, fills_capacity=True)
    cap = codec.capacity_bytes(
        lay.chunk_shape, dt, dense=path in ("dense", "packed"), error_bound=eb_c
    )
    # Per-table codecs code any grid of chunks; the per-peer baselines (BF16, Int8Rowwise: no
    # FFI, no scratch) keep the shard whole.
    k, rows_k = _shard_chunks(rows) if codec.per_table else (1, rows)
    if isinstance(codec, FrameCodec) and codec.capacity is not None:
        # a given (speculative) capacity is per chunk of the layout: each of the shard's k
        # chunks gets the same payload bytes per value plus a header of its own
        h_full, h_k = header_bytes(rows, dim), header_bytes(rows_k, dim)
        cap2 = h_k + max(0, -(-(codec.capacity - h_full) * rows_k // rows))
    else:
        cap2 = codec.capacity_bytes(
            (rows_k, dim), dt, dense=path in ("dense", "packed"), error_bound=eb_c
        )
    # the edge value keeps each chunk's range
    buf = jnp.pad(flat, (0, slices * p * rows * dim - n), mode="edge")
    buf = as_varying(buf, axis_name)  # psum of a value invariant over the axis: P * x
    # a slice's fallback sums the slice itself (the whole call's: x's own leaves)
    n_s, unravel_s = (n, unravel) if slices == 1 else (p * rows * dim, _identity)
    plan = _Plan(
        axis_name, lay, dt, path, codec, cap, (k, rows_k), cap2, feedback, n_s, unravel_s, slices
    )
    return plan, buf, eb, n, unravel


def run_allreduce(x, axis_name, axis_index_groups, error_bound, config, feedback, scale=None):
    """``(y, stats, residual)``: the float leaves of ``x`` through the compressed all-reduce,
    the others (counts, masks) summed exactly by ``jax.lax.psum`` (bool to int32 counts, as
    psum does) and kept out of the float leaves' chunks, so of their value ranges. With
    ``scale``: ``x * scale`` is coded, ``y`` and the residual are divided by it (both in
    ``x``'s coordinates)."""
    if scale is not None:
        scales = precondition.scale_leaves(x, scale)
        y, stats, residual = run_allreduce(
            precondition.apply(x, scales),
            axis_name,
            axis_index_groups,
            error_bound,
            config,
            feedback,
        )
        unscale = functools.partial(precondition.apply, scales=scales, inverse=True)
        return unscale(y), stats, unscale(residual)
    leaves, treedef = jax.tree.flatten(x)
    coded = [precondition.is_coded(v) for v in leaves]
    floats = [v for v, c in zip(leaves, coded) if c]
    plan, buf, eb, n, unravel = _prepare(
        floats, axis_name, axis_index_groups, error_bound, config, feedback
    )
    if plan is None:
        stats = ExchangeStats.exact(0.0, (2,), capacity_bytes=0.0)
        y_f, res_f = floats, floats
    else:
        y, stats, residual = _psum(plan, buf, eb)
        y_f, res_f = unravel(y[:n]), unravel(jax.lax.stop_gradient(residual[:n]))
    others = [v for v, c in zip(leaves, coded) if not c]
    exact = iter(jax.lax.psum(others, axis_name) if others else [])
    y_f, res_f = iter(y_f), iter(res_f)
    y = [next(y_f) if c else next(exact) for c in coded]
    residual = [next(res_f) if c else jnp.zeros_like(v) for v, c in zip(leaves, coded)]
    return treedef.unflatten(y), stats, treedef.unflatten(residual)


def compressed_psum_with_stats(
    x, axis_name, *, axis_index_groups=None, error_bound=None, config=None, scale=None
):
    """:func:`compressed_psum` that also returns this device's statistics.

    Arguments, errors and references as :func:`compressed_psum`.

    Returns:
      ``(y, ExchangeStats)``: ``y`` as :func:`compressed_psum` returns it; the statistics of
      both phases together (:class:`jax_lossy_comm.ExchangeStats`, scalars per device):
      ``raw_bytes`` twice the padded buffer (what the exact reduce-scatter + all-gather built
      from the same collectives moves), ``frame_bytes`` this device's frames (its P
      reduce-scatter frames plus P copies of its all-gather frame), ``moved_bytes`` what the
      path sent (after a fallback ``raw_bytes``, plus the reduce-scatter's bytes when only the
      all-gather overflowed), ``compression_ratio`` ``float32[2]`` (raw / frame bytes of the
      reduce-scatter and of the all-gather frame), ``overflow_count``, ``fallback`` (1 when
      the result is ``jax.lax.psum``'s; in slices: of any slice), ``capacity_bytes`` (per frame),
      ``phase_moved_bytes`` ``float32[2]`` (``moved_bytes`` split into the reduce-scatter's and
      the all-gather's; a fallback's psum half to each).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from jax.sharding import PartitionSpec as P
      >>> import jax_lossy_comm as jlc
      >>> mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
      >>> def f(g):
      ...     y, s = jlc.compressed_psum_with_stats(g, "i", error_bound=0.01)
      ...     return s.raw_bytes[None], s.moved_bytes[None], s.fallback[None]
      >>> g = jnp.sin(jnp.arange(8 * 4096, dtype=jnp.float32))
      >>> raw, moved, fb = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("i"),
      ...                                        out_specs=(P("i"),) * 3))(g)
      >>> int(raw[0]), int(fb[0]), bool(moved[0] < raw[0] / 3.9)
      (32768, 0, True)
    """
    y, stats, _ = run_allreduce(x, axis_name, axis_index_groups, error_bound, config, False, scale)
    return y, stats


def compressed_psum(
    x, axis_name, *, axis_index_groups=None, error_bound=None, config=None, scale=None
):
    """``jax.lax.psum`` of ``x`` over ``axis_name`` with error-bounded lossy compression.

    Call inside ``shard_map``. Like ``jax.lax.psum``, ``x`` is an array or a pytree of arrays
    and the result has its structure, shapes and dtypes, the same on every device (invariant
    over ``axis_name``); a value invariant over the axis sums to ``P * x``, as in psum. The
    float leaves are flattened into one buffer (``jax.flatten_util.ravel_pytree``, mixed float
    dtypes promoted), padded with its last value to ``P * rows * dim``, reduce-scattered
    through ``config.codec`` (an all-to-all of one compressed chunk ``[rows, dim]`` per peer
    and a float32 sum of the P decoded contributions), all-gathered compressed, decoded and
    unflattened (module docstring).

    Args:
      x: ``float32 | bfloat16 | float16`` array or pytree of them (e.g. gradients), varying
        over ``axis_name``. Leaves of other dtypes (integer counts, bool masks of a metrics
        pytree) are summed exactly by ``jax.lax.psum`` (bool to int32 counts, as psum does),
        outside the compressed buffer, so they neither lose precision nor widen the float
        chunks' value ranges.
      axis_name: the ``shard_map`` mesh axis (static).
      axis_index_groups: must be None (not supported; the parameter is ``jax.lax.psum``'s).
      error_bound: float scalar, traced or concrete (changing a traced bound does not
        recompile); required by :class:`jax_lossy_comm.FrameCodec`, ignored by ``BF16`` and
        ``Int8Rowwise``. REL (``FrameCodec(mode="rel")``, default): per chunk, ``eb_abs =
        error_bound * (max - min)`` of the chunk coded; ABS: ``eb_abs = error_bound``.
        Every finite element is within ``(P + 1) * error_bound`` (ABS) or ``error_bound *
        (2 + 2 error_bound) * sum_i R_i`` (REL; ``R_i`` the range of device i's chunk) of the
        exact sum, plus float32 rounding of the sum (module docstring). A traced bound below
        the capacity's ``min_error_bound`` (default 0.01, REL) overflows into the fallback.
      config: the static :class:`AllReduceConfig` (codec, path, slices); default
        ``AllReduceConfig()``.
      scale: None, or positive finite float values, the same on every device of the axis
        (invariant, e.g. from the optimizer state of replicated parameters): a pytree with
        ``x``'s structure whose leaves broadcast to ``x``'s, or one array or number for all
        leaves. The call codes ``x * scale`` and returns ``sum / scale`` (float32
        arithmetic, rounded to each leaf's dtype; integer leaves are never scaled): the same
        sum in real arithmetic, with the bound above holding for ``y * scale`` (ranges
        ``R_i`` of the scaled chunks), so ``|y - sum_i x_i| <= bound / scale`` per element.
        :func:`jax_lossy_comm.adagrad_scale` gives Adagrad's step sizes, which make it a
        bound on the optimizer's update (``jax_lossy_comm.precondition``).

    Returns:
      ``y``: the sum, with ``x``'s structure, shapes and dtypes. When any frame on any device
      does not fit its capacity (e.g. more NaN/Inf than the outlier room), ``y`` is
      ``jax.lax.psum(x)`` bit for bit (never silent: counted in the statistics of
      :func:`compressed_psum_with_stats`); with ``scale``, ``psum(x * scale) / scale``.
      With ``config.slices > 1`` this holds per slice: only the slices of the flattened
      buffer with such a frame are ``jax.lax.psum``'s (of the slice).

    Gradient:
      Straight-through: ``jax.lax.psum``'s rule applied to the cotangent (a copy to every
      device under ``check_vma=True``, a psum under ``check_vma=False``), as if the sum were
      exact.

    Raises:
      ValueError: a missing bound for an error-bounded codec, a non-scalar bound, a concrete
        negative or non-finite bound, a chunk the codec cannot encode (``Int8Rowwise``: size
        not a multiple of ``row_dim``).
        A ``scale`` whose structure or shapes do not match ``x``, a concrete ``scale``
        that is not finite and positive.
      TypeError: a leaf dtype the codec does not support (after promotion), a ``config`` that
        is not an :class:`AllReduceConfig`, a ``scale`` that is not floating point.
      NotImplementedError: ``axis_index_groups`` given.

    Examples:
      Gradients of two parameters on 8 devices, REL bound 0.01:

      >>> import jax, jax.numpy as jnp
      >>> from jax.sharding import PartitionSpec as P
      >>> import jax_lossy_comm as jlc
      >>> mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
      >>> def f(w, b):
      ...     g = {"w": w, "b": b}
      ...     return jlc.compressed_psum(g, "i", error_bound=0.01), jax.lax.psum(g, "i")
      >>> w = jnp.cos(jnp.arange(8 * 64 * 32, dtype=jnp.float32)).reshape(8 * 64, 32)
      >>> b = jnp.linspace(-1.0, 1.0, 8 * 3, dtype=jnp.float32)
      >>> y, exact = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("i"), P("i")),
      ...                                  out_specs=P()))(w, b)
      >>> y["w"].shape, y["b"].shape
      ((64, 32), (3,))
      >>> bound = 0.01 * (2 + 2 * 0.01) * 8 * 2.0  # every chunk's range is at most 2
      >>> bool(jnp.abs(y["w"] - exact["w"]).max() <= bound)
      True

    References:
      gZCCL (Huang et al., ICS 2024): compressed reduce-scatter + all-gather; Feng et al.,
      SC24, arXiv 2407.04272, sec. 4 (the codec).
    """
    y, _, _ = run_allreduce(x, axis_name, axis_index_groups, error_bound, config, False, scale)
    return y
