"""Compressed all-to-all for ``shard_map``: encode per destination, exchange, decode.

:func:`compressed_all_to_all` is a drop-in for ``jax.lax.all_to_all`` inside ``shard_map`` (same
positional arguments and defaults) that returns the same array within an error bound while
moving fewer bytes; :func:`compressed_all_to_all_with_stats` also returns
:class:`ExchangeStats`. The block bound for each peer is cut into chunks ``[rows, dim]`` (one
per peer, or one per (peer, table); :class:`jax_lossy_comm.Layout`), all chunks are encoded in
one call of the codec (:class:`jax_lossy_comm.CommCodec`; default the library's
:class:`jax_lossy_comm.FrameCodec`), the frames travel, and the receiver decodes them (Feng
et al., SC24, arXiv 2407.04272, sec. 3 and 4). Its gradient is the transposed exchange of the
cotangent (straight-through estimator, sec. 3), exact or through a backward codec with its
own error bound. The static settings are one frozen :class:`ExchangeConfig`.

Codecs of fixed size (``Int8Rowwise``, ``BF16``) travel in one dense ``all_to_all``.
Variable-size frames take one of these paths (``ExchangeConfig.path``):

* ``"ragged"`` (``"auto"`` where ``jax.lax.ragged_all_to_all`` is implemented, i.e. GPU):
  every frame is one slice of ``ragged_all_to_all``, its ``nbytes`` rounded up to rows of
  ``RAGGED_ROW_BYTES`` (16), written at its ``[source, table]`` place in the receiver's
  buffer, so only used bytes (and at most 15 more per frame) move; the int32 byte counts travel
  first in a tiny ``all_to_all``. The operand is ``uint8[rows, 16]`` (XLA's one-shot kernel
  copies whole rows, not single bytes) and the offsets count rows, so they stay within int32
  up to 32 GiB of frames per device (``ragged_rows`` refuses more). The capacity is the raw
  size: every codec fits.
* ``"dense"``: a dense ``all_to_all`` moves the static capacity of every frame, so the
  capacity, not the frame size, decides the bytes moved. The dense path sizes frames with
  fixed-rate quantization codes for the smallest REL bound in use (``min_error_bound``;
  :func:`jax_lossy_comm.frame_capacity`) plus room for ``DEFAULT_OUTLIERS`` exact outliers;
  ``codec="auto"`` still writes the smallest form that fits. REL 0.01 gives 6-bit codes: 5.33x
  fewer bytes than raw float32 for [2048, 64] chunks. ABS mode has no static code width: its
  dense capacity is the raw size unless ``FrameCodec(capacity=...)`` is given.
* ``"packed"`` (``"auto"`` elsewhere: XLA:CPU has no ``ragged_all_to_all``): dense
  collectives that move (about) the used bytes. Frames are compressed at the dense path's
  capacity; each device packs its frames for a destination back to back behind their int32
  byte counts; one scalar ``pmax`` (the same one that detects overflow) agrees on the largest
  packed destination, and ``lax.switch`` runs the dense ``all_to_all`` of the smallest static
  bucket that holds it (buckets shrink by ``PACKED_BUCKET_STEP`` from the full capacity).
  Bucket rounding, the spread between destinations and devices whose tables compress worse
  decide the overhead over ``frame_bytes``; values are bit-identical to the dense path.

Why ``"auto"`` means packed without ``ragged_all_to_all`` (decided in :func:`resolve_path`
only): its largest bucket is the dense path's bytes, so it never moves more, and on the DLRM
exchange it moved about 4x fewer bytes than the dense frames for the same values (netns
benchmark, issue 6; repeated embedding rows make most frames much smaller than the fixed-rate
capacity). It costs a pack/unpack copy and one more int32 in the ``pmax``.

Frames that do not fit (NaN/Inf beyond the outlier room, a bound below ``min_error_bound``, a
too small ``capacity``) are never dropped or truncated: the count of overflowed frames is
``pmax``-ed over the axis (one scalar, so every device agrees) and, if any, the whole exchange
runs as the exact ``jax.lax.all_to_all`` of ``x`` (lossless) under ``lax.cond``;
``overflow_count`` and ``fallback`` in :class:`ExchangeStats` record it. Only ``all_to_all``,
``ragged_all_to_all`` and a scalar ``pmax`` are used (no ``psum_scatter``, which gloo gets
wrong on chunks of about 4 MiB and up, jax issue 40830), so the same code runs across
processes started with ``jax.distributed.initialize`` (gloo on CPU, NCCL on GPU).

Measured by ``bench/exchange_bench.py`` on the Terabyte dumps, 8 devices: the dense capacity
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

import dataclasses
import functools
import inspect
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_lossy_comm.codec import _varying_axes, check_dtype, concrete_error_bound
from jax_lossy_comm.comm_codec import (
    DEFAULT_MIN_ERROR_BOUND,
    DEFAULT_OUTLIERS,
    CommCodec,
    FrameCodec,
)
from jax_lossy_comm.layout import Layout, make_layout

__all__ = [
    "DEFAULT_MIN_ERROR_BOUND",
    "DEFAULT_OUTLIERS",
    "PACKED_BUCKET_STEP",
    "PACKED_MIN_FRACTION",
    "PATHS",
    "ExchangeConfig",
    "ExchangeStats",
    "compressed_all_to_all",
    "compressed_all_to_all_with_stats",
    "packed_buckets",
    "resolve_path",
]

#: Packed path: bucket sizes (bytes per destination) shrink from the full capacity by this
#: factor per step (2 ** 0.5: at most 29% of a bucket is padding) ...
PACKED_BUCKET_STEP = 2.0**0.5
#: ... down to this fraction of the full capacity (smaller needs use the smallest bucket).
PACKED_MIN_FRACTION = 1.0 / 64
PATHS = ("auto", "dense", "packed", "ragged")
_TEST_PATHS = ("_ragged_emulated",)  # ragged offsets through dense collectives (CPU tests)


class ExchangeStats(NamedTuple):
    """Per-device statistics of one forward exchange (:func:`compressed_all_to_all_with_stats`)
    or all-reduce (:func:`jax_lossy_comm.compressed_psum_with_stats`, both phases together).

    Attributes:
      raw_bytes: float32 scalar, this device's payload ``x`` as raw bytes (``x.size *
        itemsize``; every block, the one kept for itself included).
      frame_bytes: float32 scalar, sum of this device's frame sizes (what a variable-size
        exchange moves; an overflowed frame counts with the size it needed).
      moved_bytes: float32 scalar, bytes the chosen path really sent: dense, ``chunks *
        capacity`` plus the int32 byte counts; packed, the agreed bucket times P; ragged,
        ``frame_bytes`` plus the byte counts; a fixed-size codec, its wire bytes (no counts);
        after a fallback, ``raw_bytes``.
      compression_ratio: float32[P] or float32[P, T], raw / frame bytes of each chunk
        (destination peer, table); :func:`jax_lossy_comm.compressed_psum_with_stats`:
        float32[2], its reduce-scatter and all-gather phases.
      overflow_count: int32 scalar, this device's frames that did not fit the capacity.
      fallback: int32 scalar, 1 when the exchange ran as the exact ``all_to_all`` because a
        frame on some device overflowed (the same on every device), else 0.
      capacity_bytes: float32 scalar, the static frame capacity of the chosen path.
    """

    raw_bytes: jax.Array
    frame_bytes: jax.Array
    moved_bytes: jax.Array
    compression_ratio: jax.Array
    overflow_count: jax.Array
    fallback: jax.Array
    capacity_bytes: jax.Array


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
        library's error-bounded :class:`jax_lossy_comm.FrameCodec` (default) or a baseline,
        ``Int8Rowwise()`` / ``BF16()``.
      backward: codec of the cotangent's transposed exchange, or None (default): the exact
        transposed ``all_to_all`` (straight-through estimator, the paper's setting).
        TorchRec's ``QCommsConfig`` has the same pair (forward and backward precision).
      table_axis: axis of ``x`` whose indices are separate chunks, each with its own bound
        and REL range (static; not the last axis), or None: one chunk per peer. With a
        per-peer codec (``Int8Rowwise``, ``BF16``) it only shapes ``compression_ratio``.
      path: how variable-size frames travel: ``"auto"`` (:func:`resolve_path`), ``"dense"``,
        ``"packed"`` or ``"ragged"`` (module docstring). Fixed-size codecs ignore it.

    Raises:
      TypeError: a codec that is not a :class:`jax_lossy_comm.CommCodec`.
      ValueError: unknown ``path``, a ``table_axis`` that is not an int or None.

    Examples:
      >>> from jax_lossy_comm import ExchangeConfig, FrameCodec, Int8Rowwise
      >>> ExchangeConfig(forward=FrameCodec(min_error_bound=0.01), table_axis=1)
      ExchangeConfig(forward=FrameCodec(mode='rel', codec='auto', min_error_bound=0.01, \
capacity=None), backward=None, table_axis=1, path='auto')
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

    def __post_init__(self):
        _check_codec("forward", self.forward, optional=False)
        _check_codec("backward", self.backward, optional=True)
        if self.table_axis is not None and (
            isinstance(self.table_axis, bool) or not isinstance(self.table_axis, (int, np.integer))
        ):
            raise ValueError(
                f"ExchangeConfig.table_axis must be an int or None, got {self.table_axis!r}"
            )
        if self.path not in PATHS + _TEST_PATHS:
            raise ValueError(f"ExchangeConfig.path must be one of {PATHS}, got {self.path!r}")


def _ragged_supported() -> bool:
    try:
        return jax.devices()[0].platform in ("gpu", "cuda", "rocm")
    except RuntimeError:
        return False


def resolve_path(path: str = "auto") -> str:
    """The wire path a variable-size exchange takes: the one place ``"auto"`` is decided.

    Args:
      path: ``"auto"`` or a path of ``PATHS``.

    Returns:
      ``path`` itself, or for ``"auto"``: ``"ragged"`` where ``jax.lax.ragged_all_to_all`` is
      implemented (the default backend is a GPU), else ``"packed"`` (never more bytes than
      ``"dense"``, about 4x fewer on the DLRM exchange; module docstring).

    Raises:
      ValueError: an unknown path.

    Examples:
      >>> from jax_lossy_comm import resolve_path
      >>> resolve_path("auto")  # on the CPU
      'packed'
      >>> resolve_path("dense")
      'dense'
    """
    if path not in PATHS + _TEST_PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    if path != "auto":
        return path
    return "ragged" if _ragged_supported() else "packed"


class _Plan(NamedTuple):
    """Static (hashable) plan of one exchange call: config resolved against ``x``."""

    axis_name: object
    layout: Layout  # with the config's table axis (the statistics' grid)
    dtype: object
    path: str  # resolved: "dense" | "packed" | "ragged" | "_ragged_emulated"
    forward: CommCodec
    capacity: int
    backward: CommCodec | None
    backward_capacity: int


# --------------------------------------------------------------------------- wire paths
def _emulated_ragged_all_to_all(
    operand,
    output,
    input_offsets,
    send_sizes,
    output_offsets,
    recv_sizes,
    *,
    axis_name,
    max_size: int,
):
    """``jax.lax.ragged_all_to_all``'s documented semantics with dense collectives (slices of
    at most ``max_size`` rows of the operand's first axis); lets CPU tests check the ragged
    path's offsets. Checks its precondition, which XLA does not: every device's
    ``send_sizes`` equal ``all_to_all(recv_sizes)`` (what its peers expect), else the
    computation fails with a ValueError naming both."""
    jax.debug.callback(
        _check_ragged_sizes,
        send_sizes,
        jax.lax.all_to_all(recv_sizes, axis_name, 0, 0, tiled=True),
    )
    j = jnp.arange(max_size, dtype=jnp.int32)
    src = jnp.clip(input_offsets[:, None] + j, 0, operand.shape[0] - 1)
    keep = (j < send_sizes[:, None]).reshape(send_sizes.shape + j.shape + (1,) * (operand.ndim - 1))
    sl = jnp.where(keep, operand[src], 0).astype(operand.dtype)  # [N, max, *row]
    got = jax.lax.all_to_all(sl, axis_name, 0, 0, tiled=True)
    offs = jax.lax.all_to_all(output_offsets, axis_name, 0, 0, tiled=True)
    dst = jnp.where(j < recv_sizes[:, None], offs[:, None] + j, output.shape[0])
    return output.at[dst.reshape(-1)].set(got.reshape((-1,) + operand.shape[1:]), mode="drop")


RAGGED_ROW_BYTES = 16
"""Bytes per row of the ragged path's operand: its sizes and offsets count these rows."""


def ragged_rows(slices: int, capacity: int) -> int:
    """Rows of ``RAGGED_ROW_BYTES`` per frame of the ragged path: ``ceil(capacity / 16)``.

    Args:
      slices: frames per device (``P * T``), each one slice of ``ragged_all_to_all``.
      capacity: bytes of each frame's buffer.

    Raises:
      ValueError: the int32 row offsets (``slice x rows``) of ``slices`` frames would not fit
        (more than ``2**31 - 1`` rows, 32 GiB, per device).

    Examples:
      >>> from jax_lossy_comm.exchange import ragged_rows
      >>> ragged_rows(8 * 26, 8193)  # 8 peers x 26 tables of up to 8193 bytes
      513
    """
    rows = -(-capacity // RAGGED_ROW_BYTES)
    if slices * rows > np.iinfo(np.int32).max:
        raise ValueError(
            f"ragged path: {slices} frames of {capacity} bytes ({slices * rows} rows of "
            f"{RAGGED_ROW_BYTES} bytes) per device exceed ragged_all_to_all's int32 offsets; "
            "exchange fewer rows per call (split the batch) or use path='packed'"
        )
    return rows


def _check_ragged_sizes(send_sizes, expected):
    if not np.array_equal(np.asarray(send_sizes), np.asarray(expected)):
        raise ValueError(
            "ragged_all_to_all precondition broken: this device's send_sizes "
            f"{np.asarray(send_sizes).tolist()} differ from the recv_sizes its peers expect "
            f"{np.asarray(expected).tolist()}"
        )


def _exchange_frames(axis_name, path: str, frames, nbytes):
    """Moves frames ``uint8[P, (T,) cap]`` to their destinations; returns the received frames
    and byte counts indexed by source peer.

    Dense: one ``all_to_all`` of the whole capacity. Ragged: each frame is one slice of
    ``ragged_all_to_all`` (``P * T`` slices of ``ceil(nbytes / 16)`` rows of 16 bytes; the
    capacity padded to whole rows), written at the same ``[source, table]`` position of the
    receiver's buffer, so no packing is needed and only used rows move; the byte counts go
    first in a tiny ``all_to_all``. Received bytes past a frame's ``nbytes`` are zero, as on
    the other paths.

    Raises:
      ValueError: (ragged) offsets past int32 (``ragged_rows``).
    """
    ax = axis_name
    rnb = jax.lax.all_to_all(nbytes, ax, 0, 0, tiled=True)
    if path == "dense":
        return jax.lax.all_to_all(frames, ax, 0, 0, tiled=True), rnb
    p, cap = frames.shape[0], frames.shape[-1]
    t = nbytes.size // p
    row = RAGGED_ROW_BYTES
    rows = ragged_rows(p * t, cap)
    by_slice = frames.reshape(p * t, cap)
    if rows * row != cap:
        by_slice = jnp.pad(by_slice, ((0, 0), (0, rows * row - cap)))
    flat = by_slice.reshape(p * t * rows, row)  # uint8[P*T*rows, 16]
    slot = jnp.arange(p * t, dtype=jnp.int32) * rows  # [P*T], (dest, table)

    def in_rows(n):
        return (jnp.maximum(n.reshape(-1), 0).astype(jnp.int32) + row - 1) // row

    send_sizes, recv_sizes = in_rows(nbytes), in_rows(rnb)
    me = jax.lax.axis_index(ax).astype(jnp.int32)
    # Frame (dest d, table k) lands in d's buffer at (me, k).
    output_offsets = (me * t + jnp.arange(p * t, dtype=jnp.int32) % t) * rows
    out = jnp.zeros_like(flat)
    if path == "_ragged_emulated":
        recv = _emulated_ragged_all_to_all(
            flat, out, slot, send_sizes, output_offsets, recv_sizes, axis_name=ax, max_size=rows
        )
    else:
        recv = jax.lax.ragged_all_to_all(
            flat, out, slot, send_sizes, output_offsets, recv_sizes, axis_name=ax
        )
    recv = recv.reshape(p * t, rows * row)[:, :cap]
    used = jnp.maximum(rnb.reshape(-1, 1), 0)  # the sender's bytes past nbytes in its last row
    recv = jnp.where(jnp.arange(cap, dtype=jnp.int32) < used, recv, jnp.uint8(0))
    return recv.reshape(frames.shape), rnb


def packed_buckets(tables: int, capacity: int) -> tuple:
    """Static bucket sizes (bytes per destination, ascending) of the packed path.

    A destination's packed buffer holds ``4 * tables`` header bytes (the int32 byte counts)
    then the frames back to back; the largest bucket fits every frame at full ``capacity``,
    the others shrink by ``PACKED_BUCKET_STEP`` down to ``PACKED_MIN_FRACTION`` of it.
    Sizes are multiples of 64 bytes (at least the header plus 64).
    """
    hdr = 4 * tables
    top = hdr + tables * int(capacity)
    out, b = {top}, float(top)
    floor = max(hdr + 64, top * PACKED_MIN_FRACTION)
    while True:
        b /= PACKED_BUCKET_STEP
        if b < floor:
            break
        out.add(min(top, hdr + 64 * math.ceil((b - hdr) / 64)))
    return tuple(sorted(out))


def pack_frames(frames, nbytes, size: int):
    """``uint8[P, T, cap]`` frames + ``int32[P, T]`` counts -> ``uint8[P, size]``: per
    destination the counts (4 bytes each) then the used bytes of every frame back to back,
    zero padded. ``size`` must be at least ``4 * T + T * cap`` (the largest bucket).

    Each frame is written whole (its bytes and its zero-filled rest of the capacity) at its
    offset, in table order, so the next frame overwrites the previous one's padding: P x T
    in-place ``dynamic_update_slice`` copies instead of a byte-wise gather.
    """
    p, t, cap = frames.shape
    used = jnp.clip(nbytes, 0, cap)
    off = 4 * t + jnp.cumsum(used, axis=1) - used  # [P, T]
    header = jax.lax.bitcast_convert_type(nbytes.astype(jnp.int32), jnp.uint8).reshape(p, 4 * t)
    buf = jnp.zeros((p, size), jnp.uint8).at[:, : 4 * t].set(header)
    for d in range(p):
        for k in range(t):
            buf = jax.lax.dynamic_update_slice(buf, frames[d, k][None], (d, off[d, k]))
    return buf


def unpack_frames(buf, t: int, cap: int):
    """Inverse of :func:`pack_frames` on the receiver: ``uint8[P, size]`` -> frames
    ``uint8[P, T, cap]`` (zero past each frame's bytes) and counts ``int32[P, T]``."""
    p, size = buf.shape
    nb = jax.lax.bitcast_convert_type(buf[:, : 4 * t].reshape(p, t, 4), jnp.int32)
    used = jnp.clip(nb, 0, cap)
    off = 4 * t + jnp.cumsum(used, axis=1) - used  # [P, T]
    fr = jnp.stack(
        [
            jnp.stack([jax.lax.dynamic_slice(buf, (d, off[d, k]), (1, cap))[0] for k in range(t)])
            for d in range(p)
        ]
    )
    i = jnp.arange(cap, dtype=jnp.int32)
    return jnp.where(i < used[:, :, None], fr, jnp.uint8(0)), nb


def bucket_index(buckets: tuple, need):
    """Index (int32 scalar) of the smallest static bucket that holds ``need`` bytes (the
    largest bucket when none does); ``need`` must be the same on every device (pmax-ed)."""
    b = jnp.asarray(buckets, jnp.int32)
    return jnp.minimum(jnp.searchsorted(b, need), len(buckets) - 1).astype(jnp.int32)


def run_bucketed(collective, buf, k, buckets: tuple):
    """``collective`` of the first ``buckets[k]`` bytes of ``buf``'s last axis (one static
    branch per bucket under ``lax.switch``), zero padded back to ``buckets[-1]``.

    ``buf``: ``uint8[..., buckets[-1]]``; ``k``: :func:`bucket_index`, the same on every device.
    Only the bucket's bytes travel. Used by the packed path and the all-reduce's all-gather.
    """
    top = buckets[-1]

    def branch(size):
        def go(b):
            got = collective(b[..., :size])
            return jnp.pad(got, [(0, 0)] * (got.ndim - 1) + [(0, top - size)])

        return go

    return jax.lax.switch(k, [branch(b) for b in buckets], buf)


class SentFrames(NamedTuple):
    """Variable-size frames handed to :func:`send_frames`.

    Attributes:
      receive: ``() -> (frames, nbytes)`` received, indexed by source peer (shapes of the
        sent ones); call it only where ``any_overflow`` is False (it runs the collectives).
      moved_bytes: float32 scalar, bytes the path moves (dense, packed or ragged; module
        docstring).
      overflow_count: int32 scalar, this device's frames that did not fit (``nbytes < 0``).
      any_overflow: bool scalar, some device's frame did not fit (a ``pmax``: the same on
        every device).
    """

    receive: object
    moved_bytes: jax.Array
    overflow_count: jax.Array
    any_overflow: jax.Array


def send_frames(axis_name, path: str, frames, nbytes) -> SentFrames:
    """Agrees on overflow (one scalar ``pmax``) and prepares the exchange of variable-size
    frames ``uint8[P, (T,) cap]`` with byte counts ``int32[P, (T,)]`` over ``path``
    (``"dense" | "packed" | "ragged" | "_ragged_emulated"``). Shared by the exchange and the
    all-reduce's reduce-scatter."""
    ax = axis_name
    cap = frames.shape[-1]
    n_over = (nbytes < 0).sum().astype(jnp.int32)
    if path == "packed":
        # Two phases in one step: a pmax of (overflows, largest packed destination) picks
        # the smallest static bucket that holds every device's frames, then one dense
        # all_to_all of that bucket carries counts and frames together.
        p_, t_ = frames.shape[0], nbytes.size // frames.shape[0]
        fr3, nb2 = frames.reshape(p_, t_, cap), nbytes.reshape(p_, t_)
        need = (4 * t_ + jnp.maximum(nb2, 0).sum(axis=1)).max().astype(jnp.int32)
        agg = jax.lax.pmax(jnp.stack([n_over, need]), ax)
        any_over = agg[0] > 0
        buckets = packed_buckets(t_, cap)
        k = bucket_index(buckets, agg[1])

        def a2a(buf):
            return jax.lax.all_to_all(buf, ax, 0, 0, tiled=True)

        def receive():
            rbuf = run_bucketed(a2a, pack_frames(fr3, nb2, buckets[-1]), k, buckets)
            rf, rnb = unpack_frames(rbuf, t_, cap)
            return rf.reshape(frames.shape), rnb.reshape(nbytes.shape)

        comp_moved = jnp.asarray(buckets, jnp.float32)[k] * frames.shape[0]
    else:
        any_over = jax.lax.pmax(n_over, ax) > 0

        def receive():
            return _exchange_frames(ax, path, frames, nbytes)

        counts = 4.0 * nbytes.size
        if path == "dense":
            comp_moved = jnp.float32(frames.size + counts)
        else:  # ragged: whole rows of RAGGED_ROW_BYTES
            row = RAGGED_ROW_BYTES
            used = (jnp.abs(nbytes).astype(jnp.int32) + row - 1) // row * row
            comp_moved = used.astype(jnp.float32).sum() + counts
    return SentFrames(receive, comp_moved, n_over, any_over)


# ---------------------------------------------------------------------------- one direction
def _variable_size(plan: _Plan, codec, lay: Layout, cap: int, x, chunks, eb):
    """Frames of a variable-size codec over ``plan.path``, with the overflow fallback.

    Returns ``(y, moved_bytes of the compressed path, n_over, any_over, chunk byte
    counts)``."""
    ax = plan.axis_name
    frames, nbytes = codec.encode(chunks, jnp.broadcast_to(eb, lay.grid), cap)
    sent = send_frames(ax, plan.path, frames, nbytes)

    def compressed(_):
        rf, rnb = sent.receive()
        return lay.from_chunks(codec.decode(rf, rnb, shape=lay.chunk_shape, dtype=x.dtype))

    def exact(_):
        # From the chunks the codec read, not from x: XLA would otherwise materialize x a
        # second time (the producer's fusion recomputed for the cond operand).
        return lay.from_chunks(jax.lax.all_to_all(chunks, ax, 0, 0, tiled=True))

    y = jax.lax.cond(sent.any_overflow, exact, compressed, None)
    return y, sent.moved_bytes, sent.overflow_count, sent.any_overflow, nbytes


def _one_way(plan: _Plan, x, eb, *, backward_pass: bool = False):
    """One exchange of ``x`` (the forward, or the cotangent's with ``backward_pass``) through
    its codec: ``(y, ExchangeStats)``."""
    codec = plan.backward if backward_pass else plan.forward
    cap = plan.backward_capacity if backward_pass else plan.capacity
    table_lay = plan.layout.transposed() if backward_pass else plan.layout
    lay = table_lay if codec.per_table else table_lay.per_peer()
    chunks = lay.to_chunks(x)
    raw_bytes = jnp.float32(math.prod(lay.shape) * np.dtype(x.dtype).itemsize)
    if codec.variable_size:
        y, comp_moved, n_over, any_over, nbytes = _variable_size(
            plan, codec, lay, cap, x, chunks, eb
        )
        fb = jnp.abs(nbytes).astype(jnp.float32)
        moved = jnp.where(any_over, raw_bytes, comp_moved)
        ratio = math.prod(lay.chunk_shape) * np.dtype(x.dtype).itemsize / jnp.maximum(fb, 1.0)
        fallback = any_over.astype(jnp.int32)
    else:
        wire, nbytes = codec.encode(chunks, None, cap)
        recv = jax.lax.all_to_all(wire, plan.axis_name, 0, 0, tiled=True)
        y = lay.from_chunks(codec.decode(recv, nbytes, shape=lay.chunk_shape, dtype=x.dtype))
        fb = moved = jnp.float32(wire.size * wire.dtype.itemsize)
        ratio = jnp.full(table_lay.grid, raw_bytes / moved, jnp.float32)
        n_over = fallback = jnp.int32(0)
    stats = ExchangeStats(
        raw_bytes=raw_bytes,
        frame_bytes=fb.sum(),
        moved_bytes=moved.astype(jnp.float32),
        compression_ratio=ratio.astype(jnp.float32),
        overflow_count=n_over,
        fallback=fallback,
        capacity_bytes=jnp.float32(cap),
    )
    return y, stats


# ---------------------------------------------------------- the straight-through gradient
@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _exchange(plan: _Plan, x, eb, beb):
    return _one_way(plan, x, eb)


def _exchange_fwd(plan, x, eb, beb):
    return _one_way(plan, x, eb), (eb, beb)


def _exchange_bwd(plan, res, cts):
    eb, beb = res
    ct_y = cts[0]
    lay = plan.layout
    if plan.backward is None:
        ct_x = jax.lax.all_to_all(ct_y, plan.axis_name, lay.concat, lay.split, tiled=lay.tiled)
    else:
        ct_x, _ = _one_way(plan, ct_y.astype(plan.dtype), beb, backward_pass=True)
    return ct_x.astype(plan.dtype), jnp.zeros_like(eb), jnp.zeros_like(beb)


_exchange.defvjp(_exchange_fwd, _exchange_bwd)


# ------------------------------------------------------------------------------ public API
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


def _codec_bound(codec, bound, grid, what):
    if bound is None:
        if codec is not None and codec.error_bounded:
            raise ValueError(f"{what} is required by {type(codec).__name__}")
        return jnp.zeros((), jnp.float32), None
    return _prepare_bound(bound, grid, what)


def compressed_all_to_all_with_stats(x, axis_name, split_axis, concat_axis, **kwargs):
    """:func:`compressed_all_to_all` that also returns this device's :class:`ExchangeStats`.

    Arguments (bound against :func:`compressed_all_to_all`'s signature, so the keyword
    arguments and their defaults are the same), errors and references as
    :func:`compressed_all_to_all`.

    Returns:
      ``(y, ExchangeStats)``: ``y`` as ``jax.lax.all_to_all`` returns it (``x``'s dtype),
      the statistics of the forward exchange (scalars per device; ``compression_ratio``
      ``float32[P]`` or ``float32[P, T]``).

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
      (65536, 13240, 4.95)
    """
    args = inspect.signature(compressed_all_to_all).bind(
        x, axis_name, split_axis, concat_axis, **kwargs
    )
    args.apply_defaults()
    return _exchange_with_stats(**args.arguments)


def _exchange_with_stats(
    x,
    axis_name,
    split_axis,
    concat_axis,
    axis_index_groups,
    tiled,
    error_bound,
    backward_error_bound,
    config,
):
    if axis_index_groups is not None:
        raise NotImplementedError("compressed_all_to_all: axis_index_groups is not supported")
    config = ExchangeConfig() if config is None else config
    if not isinstance(config, ExchangeConfig):
        raise TypeError(f"config must be an ExchangeConfig, got {config!r}")
    x = jnp.asarray(x)
    dtype = check_dtype(x.dtype, "x")
    p = jax.lax.axis_size(axis_name)
    lay = make_layout(x.shape, p, split_axis, concat_axis, config.table_axis, tiled)
    if x.size == 0:  # nothing to compress (e.g. no tables on this shard): the exact empty result
        y = jax.lax.all_to_all(x, axis_name, split_axis, concat_axis, tiled=tiled)
        zero = jnp.float32(0)
        ratio = jnp.ones(lay.grid, jnp.float32)
        return y, ExchangeStats(zero, zero, zero, ratio, jnp.int32(0), jnp.int32(0), zero)
    axes = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    missing = tuple(a for a in axes if a not in _varying_axes(x))
    if missing:  # x the same on every device (in_specs=P()): typed as varying, as the
        x = jax.lax.pcast(x, missing, to="varying")  # exchange's result is (no-op w/o check_vma)
    path = resolve_path(config.path)
    dense = path in ("dense", "packed")
    fwd, bwd = config.forward, config.backward
    eb, eb_c = _codec_bound(fwd, error_bound, lay.grid, "error_bound")
    if backward_error_bound is None:
        beb, beb_c = eb, eb_c
    else:
        beb, beb_c = _prepare_bound(
            backward_error_bound, lay.transposed().grid, "backward_error_bound"
        )

    def capacity(codec, table_lay, bound):
        lay_ = table_lay if codec.per_table else table_lay.per_peer()
        return codec.capacity_bytes(lay_.chunk_shape, dtype, dense=dense, error_bound=bound)

    cap = capacity(fwd, lay, eb_c)
    bcap = 0 if bwd is None else capacity(bwd, lay.transposed(), beb_c)
    if (
        bwd is not None
        and bwd.error_bounded
        and error_bound is None
        and backward_error_bound is None
    ):
        raise ValueError(f"backward_error_bound is required by {type(bwd).__name__}")
    plan = _Plan(axis_name, lay, dtype, path, fwd, cap, bwd, bcap)
    return _exchange(plan, x, eb, beb)


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
      x: ``float32 | bfloat16 | float16`` array, varying over ``axis_name``.
      axis_name: the ``shard_map`` mesh axis (static).
      split_axis, concat_axis: as in ``jax.lax.all_to_all`` (static ints, negative allowed).
      axis_index_groups: must be None (not supported; the parameter is
        ``jax.lax.all_to_all``'s).
      tiled: as in ``jax.lax.all_to_all``.
      error_bound: float, traced or concrete, broadcastable to the chunk grid ``[P]`` (no
        table axis) or ``[P, T]`` (a ``[T]`` vector gives one bound per table); required by
        the default :class:`jax_lossy_comm.FrameCodec`, ignored by ``Int8Rowwise`` and
        ``BF16``. REL (``FrameCodec(mode="rel")``): ``eb_abs = error_bound * (max - min)`` of
        each chunk; ABS: absolute. Every finite value of the result is within ``eb_abs`` of
        the exact result; NaN/Inf arrive bit-exact. Changing a traced bound does not
        recompile.
      backward_error_bound: bound of the backward exchange when ``config.backward`` is a
        codec, broadcastable to its chunk grid (same ``[P, T]`` shape); default
        ``error_bound``.
      config: the static :class:`ExchangeConfig` (codecs, table axis, wire path); default
        ``ExchangeConfig()``.

    Returns:
      ``y`` with ``jax.lax.all_to_all``'s shape and ``x``'s dtype.

    Raises:
      ValueError: bad axes, a split axis not divisible by (tiled) or not equal to (untiled) the
        axis size, a table axis that is the last axis, an error bound that does not broadcast
        to the chunk grid, a concrete negative or non-finite error bound, a missing bound for
        an error-bounded codec, a block the codec cannot encode (``Int8Rowwise``: size not a
        multiple of ``row_dim``).
      TypeError: unsupported dtype, a ``config`` that is not an :class:`ExchangeConfig`.
      NotImplementedError: ``axis_index_groups`` given; or (an XLA error) ``path="ragged"``
        on a backend without ``ragged_all_to_all`` (XLA:CPU).

    Examples:
      Pooled embeddings ``[global_batch, tables, dim]``, one bound per table, 8 devices:

      >>> import jax, jax.numpy as jnp, numpy as np
      >>> from jax.sharding import PartitionSpec as P
      >>> import jax_lossy_comm as jlc
      >>> mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
      >>> cfg = jlc.ExchangeConfig(jlc.FrameCodec(min_error_bound=0.01), table_axis=1)
      >>> def f(x, eb):
      ...     y = jlc.compressed_all_to_all(x, "i", 0, 1, tiled=True, error_bound=eb,
      ...                                   config=cfg)
      ...     return y, jax.lax.all_to_all(x, "i", 0, 1, tiled=True)
      >>> g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("i"), P()),
      ...                           out_specs=(P("i"), P("i"))))
      >>> x = jnp.sin(jnp.arange(8 * 64 * 2 * 16, dtype=jnp.float32)).reshape(8 * 64, 2, 16)
      >>> eb = jnp.array([0.01, 0.05])  # REL bound per table
      >>> y, exact = g(x, eb)
      >>> y.shape
      (64, 16, 16)
      >>> bool(jnp.abs(y - exact).max() <= 0.05 * 2.0)  # within eb_abs = eb * (max - min)
      True

    References:
      Feng et al., SC24, arXiv 2407.04272, sec. 3 (exchange, straight-through backward) and
      sec. 4 (quantization without prediction, REL bound).
    """
    args = (axis_index_groups, tiled, error_bound, backward_error_bound, config)
    return _exchange_with_stats(x, axis_name, split_axis, concat_axis, *args)[0]
