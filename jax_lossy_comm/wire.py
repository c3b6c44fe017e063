"""Wire paths of variable-size frames: how the exchange and the all-reduce move frames.

Shared by :mod:`jax_lossy_comm.exchange` and :mod:`jax_lossy_comm.allreduce`; every name here
is public to the package (the user-facing ones are re-exported by ``jax_lossy_comm`` and
``jax_lossy_comm.exchange``).

Codecs of fixed size (``Int8Rowwise``, ``FP8Rowwise``, ``MX4``, ``FP16``, ``BF16``) travel in one
dense ``all_to_all``.
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
  packed destination, and dense ``all_to_all``s of static chunks cover it: whole coarse
  chunks (1/8 of the full buffer) in one ``lax.while_loop``, then fine chunks (1/64) in a
  second (:func:`run_chunked`). The program holds two ``all_to_all`` ops whatever the bytes
  (a ``lax.switch`` over static buckets held one per bucket, and XLA:CPU's compiled
  ``all_to_all`` grows with the device count); an exchange runs up to 15 of them (about 3
  on the DLRM exchange). Chunk rounding (less than one fine chunk), the spread between
  destinations and devices whose tables compress worse decide the overhead over
  ``frame_bytes``; values are bit-identical to the dense path. Pack, chunk loops and unpack
  are one jitted function, so the exchanges of a step with the same frame shapes (forward and
  backward) share one copy of it in the program.

Why ``"auto"`` means packed without ``ragged_all_to_all`` (decided in :func:`resolve_path`
only): it never moves more than the dense path's bytes plus one fine chunk (1/64 of them),
and on the DLRM exchange it moved about 4x fewer bytes than the dense frames for the same
values (``bench/testbed/netns_bench.py``; repeated embedding rows make most frames much smaller than
the fixed-rate capacity). It costs a pack/unpack copy (one scatter and one gather, whatever
the device count), one more int32 in the ``pmax`` and a few more collective launches. Frames
that fill most of their capacity (the compressed all-reduce's gradients) gain little from
packing: ``"auto"`` sends them dense (``resolve_path(fills_capacity=True)``).

``TEST_PATHS`` holds ``"_ragged_emulated"``: the ragged path's offsets through dense
collectives (:func:`emulated_ragged_all_to_all`), for CPU tests only.

References:
  S. Feng et al., "Accelerating Communication in Deep Learning Recommendation Model Training
  with Dual-Level Adaptive Lossy Compression", SC24, arXiv 2407.04272, 2024, sec. 3-4.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "PACKED_CHUNKS",
    "PACKED_SUBCHUNKS",
    "PATHS",
    "RAGGED_ROW_BYTES",
    "TEST_PATHS",
    "SentFrames",
    "chunk_counts",
    "emulated_ragged_all_to_all",
    "exact_all_to_all",
    "exchange_frames",
    "pack_frames",
    "packed_chunks",
    "ragged_rows",
    "resolve_path",
    "run_chunked",
    "send_frames",
    "unpack_frames",
]

#: Packed path: the padded buffer per destination is cut into this many coarse chunks ...
PACKED_CHUNKS = 8
#: ... each of this many fine chunks (``packed_chunks``): at most ``PACKED_CHUNKS - 1``
#: coarse and ``PACKED_SUBCHUNKS`` fine collectives per exchange, and at most one fine chunk
#: (1/64 of the full buffer) of padding moved.
PACKED_SUBCHUNKS = 8
PATHS = ("auto", "dense", "packed", "ragged")
TEST_PATHS = ("_ragged_emulated",)  # ragged offsets through dense collectives (CPU tests)


def _ragged_supported() -> bool:
    try:
        return jax.devices()[0].platform in ("gpu", "cuda", "rocm")
    except RuntimeError:
        return False


def resolve_path(path: str = "auto", *, fills_capacity: bool = False) -> str:
    """The wire path a variable-size exchange takes: the one place ``"auto"`` is decided.

    Args:
      path: ``"auto"`` or a path of ``PATHS``.
      fills_capacity: the frames fill most of their static capacity (the compressed
        all-reduce's gradient frames: fixed-rate sized, full with ``codec="fixed"``, about
        78% with ``"auto"``): packing would save a small share of the bytes and cost a loop
        of collectives (on 2 processes x 2 CPU devices over gloo, a 3 MB gradient's
        all-reduce took 47 ms dense and 74 ms packed with ``"auto"``, 35 and 82 ms with
        ``"fixed"``).

    Returns:
      ``path`` itself, or for ``"auto"``: ``"ragged"`` where ``jax.lax.ragged_all_to_all`` is
      implemented (the default backend is a GPU), else ``"dense"`` for frames that fill their
      capacity and ``"packed"`` for the others, as the exchange's (never more bytes than
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
    if path not in PATHS + TEST_PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    if path != "auto":
        return path
    if _ragged_supported():
        return "ragged"
    return "dense" if fills_capacity else "packed"


def exact_all_to_all(x, axis_name, split_axis: int, concat_axis: int, *, tiled: bool = False):
    """``jax.lax.all_to_all`` of ``x`` whose values cross in ``x``'s own bytes: a 16-bit float
    (bfloat16, float16) travels as its ``uint16`` bits, bitcast back on arrival (bit-equal).

    XLA:CPU widens bfloat16 collectives (the optimized HLO of an ``all_to_all`` of bfloat16 has
    float32 operands: 4 bytes per value cross; jax 0.10.2), and XLA may move casts across
    collectives on GPUs (jax-ml/jax#23543); the statistics count ``x.size * itemsize``. Used
    by the exchange's exact paths (the fallback, the hierarchical exchange's intra-node
    stage). Not differentiable (the bitcast): the exact derivative stays
    ``jax.lax.all_to_all``'s.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from jax.sharding import PartitionSpec as P
      >>> from jax_lossy_comm.wire import exact_all_to_all
      >>> mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
      >>> f = jax.jit(jax.shard_map(lambda v: exact_all_to_all(v, "i", 0, 0, tiled=True),
      ...                           mesh=mesh, in_specs=P("i"), out_specs=P("i")))
      >>> x = jnp.arange(64, dtype=jnp.bfloat16)
      >>> "u16[" in f.lower(x).compile().as_text()  # not f32
      True
      >>> bool((f(x) == jax.jit(jax.shard_map(
      ...     lambda v: jax.lax.all_to_all(v, "i", 0, 0, tiled=True),
      ...     mesh=mesh, in_specs=P("i"), out_specs=P("i")))(x)).all())
      True
    """
    dtype = jnp.dtype(x.dtype)
    if dtype not in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16)):
        return jax.lax.all_to_all(x, axis_name, split_axis, concat_axis, tiled=tiled)
    bits = jax.lax.bitcast_convert_type(x, jnp.uint16)
    got = jax.lax.all_to_all(bits, axis_name, split_axis, concat_axis, tiled=tiled)
    return jax.lax.bitcast_convert_type(got, dtype)


def slice_count(block: int, pieces: int) -> int:
    """The slices ``exact_all_to_all_in_pieces`` cuts a peer's block of ``block`` values into:
    the largest divisor of ``block`` up to ``pieces`` (1 for a prime block larger than it: the
    slices must be equal for one loop body)."""
    return max(d for d in range(1, max(pieces, 1) + 1) if block % d == 0) if block else 1


def exact_all_to_all_in_pieces(x, axis_name, pieces: int):
    """``exact_all_to_all(x, axis_name, 0, 0, tiled=True)`` for ``x [P, ...]`` run as
    ``pieces`` sequential all-to-alls (a loop over slices of each peer's block), so that the
    collective's own buffers are those of one slice: the exchange's fallback runs beside the
    frames, and this keeps its memory within the budget the frames leave (the compressed
    exchange's peak is then not the exact collective's peak plus the frames). ``pieces`` is
    reduced to a divisor of the block's size (``slice_count``); 1 is one all-to-all."""
    n, block = x.shape[0], math.prod(x.shape[1:])
    pieces = slice_count(block, pieces)
    if pieces == 1:
        return exact_all_to_all(x, axis_name, 0, 0, tiled=True)
    flat = x.reshape(n, pieces, block // pieces)

    def body(i, out):
        part = jax.lax.dynamic_index_in_dim(flat, i, axis=1, keepdims=False)
        got = exact_all_to_all(part, axis_name, 0, 0, tiled=True)
        return jax.lax.dynamic_update_index_in_dim(out, got, i, axis=1)

    out = jax.lax.fori_loop(0, pieces, body, jnp.zeros_like(flat))
    return out.reshape(x.shape)


def emulated_ragged_all_to_all(
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
      >>> from jax_lossy_comm.wire import ragged_rows
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


def exchange_frames(axis_name, path: str, frames, nbytes):
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
        recv = emulated_ragged_all_to_all(
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


def packed_chunks(tables: int, capacity: int) -> tuple:
    """Static chunk sizes (bytes per destination) of the packed path: ``(coarse, fine)``.

    A destination's packed buffer holds ``4 * tables`` header bytes (the int32 byte counts)
    then the frames back to back, at most ``top = 4 * tables + tables * capacity`` bytes. The
    buffer is cut into ``PACKED_CHUNKS`` coarse chunks, each of ``PACKED_SUBCHUNKS`` fine ones
    (fine: a multiple of 16 bytes); :func:`run_chunked` moves whole coarse chunks, then whole
    fine ones, so at most one fine chunk (about ``top / 64``) of padding travels.

    Args:
      tables: frames per destination (``T``).
      capacity: bytes of each frame's buffer.

    Returns:
      ``(coarse, fine)`` ints, ``coarse == PACKED_SUBCHUNKS * fine`` and
      ``PACKED_CHUNKS * coarse >= top`` (the padded buffer :func:`pack_frames` writes).

    Examples:
      >>> from jax_lossy_comm.wire import packed_chunks
      >>> packed_chunks(2, 500)  # 1,008 bytes per destination at most
      (128, 16)
    """
    top = 4 * tables + tables * int(capacity)
    fine = 16 * -(-top // (16 * PACKED_CHUNKS * PACKED_SUBCHUNKS))
    return PACKED_SUBCHUNKS * fine, fine


def chunk_counts(chunks: tuple, need):
    """How many chunks of each size :func:`run_chunked` moves for ``need`` bytes: ``int32[2]``,
    whole coarse chunks that fit in ``need``, then the fine chunks that cover the rest.
    ``need`` (int32 scalar, at most ``PACKED_CHUNKS * coarse``) must be the same on every
    device (pmax-ed). Bytes moved per destination: ``counts @ chunks``, below
    ``need + fine``."""
    coarse, fine = chunks
    need = jnp.maximum(need, 1).astype(jnp.int32)
    n_coarse = jax.lax.div(need, jnp.int32(coarse))  # need > 0: truncation is the floor
    n_fine = jax.lax.div(need - n_coarse * coarse + (fine - 1), jnp.int32(fine))
    return jnp.stack([n_coarse, n_fine]).astype(jnp.int32)


def run_chunked(collective, buf, out, counts, chunks: tuple):
    """``collective`` of the first ``counts @ chunks`` bytes of ``buf``'s last axis, written
    into ``out`` (zeros past them): ``counts[0]`` coarse chunks then ``counts[1]`` fine ones,
    each level one ``lax.fori_loop`` (a while loop: the counts are traced) around one
    ``collective`` of a static chunk. The program holds two collective ops whatever the
    bytes; a ``lax.switch`` over static buckets held one per bucket, and XLA:CPU's compiled
    ``all_to_all`` grows with the device count.

    Args:
      collective: maps ``uint8[..., c]`` to ``uint8[..., c]`` (leading axes may change, as
        in an all-gather).
      buf: ``uint8[..., PACKED_CHUNKS * chunks[0]]``, the packed buffer.
      out: zeros of the collective's result over the whole ``buf`` (its shape and, inside
        ``shard_map``, its varying axes: the loop carries it).
      counts: :func:`chunk_counts`, the same on every device (every device runs the same
        number of collectives).
      chunks: :func:`packed_chunks`.

    Used by the packed path and the all-reduce's all-gather.
    """
    start = jnp.int32(0)
    for level, c in enumerate(chunks):

        def body(i, acc, c=c, start=start):
            at = start + i * c  # never negative: no index wrapping in the program
            piece = jax.lax.dynamic_slice_in_dim(
                buf, at, c, axis=buf.ndim - 1, allow_negative_indices=False
            )
            got = collective(piece)
            return jax.lax.dynamic_update_slice_in_dim(
                acc, got, at, axis=acc.ndim - 1, allow_negative_indices=False
            )

        out = jax.lax.fori_loop(0, counts[level], body, out)
        start = start + counts[level] * c
    return out


def _frame_offsets(nbytes, cap: int):
    """``(used, off)``, both ``int32[P, T]``: each frame's bytes (``nbytes`` clipped to
    ``[0, cap]``) and its offset in its destination's packed buffer (behind ``4 * T`` header
    bytes, the frames of lower table index first)."""
    t = nbytes.shape[1]
    used = jax.lax.clamp(jnp.int32(0), nbytes.astype(jnp.int32), jnp.int32(cap))
    return used, 4 * t + jax.lax.cumsum(used, axis=1) - used


def pack_frames(frames, nbytes, size: int):
    """``uint8[P, T, cap]`` frames + ``int32[P, T]`` counts -> ``uint8[P, size]``: per
    destination the counts (4 bytes each) then the used bytes of every frame back to back,
    zero padded. ``size`` must be at least ``4 * T + T * cap`` (every frame full).

    One scatter-add of ``P * T`` whole frames (windows of ``cap`` bytes) at their offsets:
    each frame is zeroed past its ``nbytes`` first, so where a window overlaps the next frame
    it adds zeros and the order of the overlapping writes does not matter. The program's size
    does not depend on P or T (no per-frame copy ops).
    """
    p, t, cap = frames.shape
    used, off = _frame_offsets(nbytes, cap)
    header = jax.lax.bitcast_convert_type(nbytes.astype(jnp.int32), jnp.uint8).reshape(p, 4 * t)
    buf = jax.lax.pad(header, jnp.uint8(0), ((0, 0, 0), (0, size - 4 * t, 0)))
    body = _zero_past(frames, used)
    dest = jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32)[:, None], (p, t))
    dnums = jax.lax.ScatterDimensionNumbers(
        update_window_dims=(2,), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0, 1)
    )
    start = jnp.stack([dest, off.astype(jnp.int32)], axis=-1)  # [P, T, 2]: (row, byte)
    return jax.lax.scatter_add(buf, start, body, dnums, mode=jax.lax.GatherScatterMode.CLIP)


def unpack_frames(buf, t: int, cap: int):
    """Inverse of :func:`pack_frames` on the receiver: ``uint8[P, size]`` -> frames
    ``uint8[P, T, cap]`` (zero past each frame's bytes) and counts ``int32[P, T]``.

    One gather of ``P * T`` windows of ``cap`` bytes (``dynamic_slice`` under ``vmap``: a
    start past ``size - cap`` is clamped, as ``dynamic_slice`` does)."""
    p, size = buf.shape
    nb = jax.lax.bitcast_convert_type(buf[:, : 4 * t].reshape(p, t, 4), jnp.int32)
    used, off = _frame_offsets(nb, cap)
    window = jax.vmap(
        jax.vmap(
            lambda row, o: jax.lax.dynamic_slice(row, (o,), (cap,), allow_negative_indices=False),
            (None, 0),
        )
    )
    return _zero_past(window(buf, off), used), nb  # [P, T, cap]


def _zero_past(frames, used):
    """``frames`` ``uint8[P, T, cap]`` zeroed past each frame's ``used`` bytes."""
    keep = jax.lax.broadcasted_iota(jnp.int32, frames.shape, 2) < used[:, :, None]
    return jax.lax.select(keep, frames, jnp.zeros_like(frames))


@functools.partial(jax.jit, static_argnames=("axis_name", "chunks"))
def _move_packed(frames, nbytes, counts, *, axis_name, chunks: tuple):
    """The packed path's pack, chunked ``all_to_all``s and unpack of ``uint8[P, T, cap]``
    frames: ``(frames, nbytes)`` received, indexed by source peer.

    One jitted function, so that the exchanges of a step with the same frame shapes (the
    forward and the backward of a tiled exchange, the tables of a DLRM) share one lowered
    function in the program instead of a copy each."""
    _, t, cap = frames.shape
    buf = pack_frames(frames, nbytes, PACKED_CHUNKS * chunks[0])

    def a2a(b):
        return jax.lax.all_to_all(b, axis_name, 0, 0, tiled=True)

    rbuf = run_chunked(a2a, buf, jnp.zeros_like(buf), counts, chunks)
    return unpack_frames(rbuf, t, cap)


class SentFrames(NamedTuple):
    """Variable-size frames handed to :func:`send_frames`.

    Attributes:
      receive: ``() -> (frames, nbytes)`` received, indexed by source peer (shapes of the
        sent ones); it runs the collectives, so call it only where ``any_overflow`` is False,
        or with ``by_table`` (an overflowed frame then arrives empty).
      moved_bytes: float32 scalar, bytes the path moves (dense, packed or ragged; module
        docstring).
      overflow_count: int32 scalar, this device's frames that did not fit (``nbytes < 0``).
      any_overflow: bool scalar, some device's frame did not fit (a ``pmax``: the same on
        every device).
      moved_per_peer: float32[P], the share of ``moved_bytes`` sent to each destination (the
        device's own slot included), or None.
      tables_over: bool[T], with ``by_table``: table ``t`` has a frame that did not fit on
        some device (agreed in the same ``pmax``); None without.
    """

    receive: object
    moved_bytes: jax.Array
    overflow_count: jax.Array
    any_overflow: jax.Array
    moved_per_peer: jax.Array | None = None
    tables_over: jax.Array | None = None


def send_frames(
    axis_name, path: str, frames, nbytes, *, agree_axis=None, by_table: bool = False
) -> SentFrames:
    """Agrees on overflow (one ``pmax``) and prepares the exchange of variable-size frames
    ``uint8[P, (T,) cap]`` with byte counts ``int32[P, (T,)]`` over ``path`` (``"dense" |
    "packed" | "ragged" | "_ragged_emulated"``). Shared by the exchange and the all-reduce's
    reduce-scatter. ``agree_axis`` (default ``axis_name``): the axis of the ``pmax``, so every
    device of it takes the same branch (the hierarchical exchange sends over the node axis and
    agrees over both). ``by_table``: the same ``pmax`` also agrees on which tables have a
    frame that did not fit (``SentFrames.tables_over``), and ``receive`` may run with such
    frames: they travel as empty frames (none of their bytes move on the packed and ragged
    paths) and decode as invalid, for the caller to replace."""
    ax = axis_name
    agree = ax if agree_axis is None else agree_axis
    cap = frames.shape[-1]
    n_over = (nbytes < 0).sum().astype(jnp.int32)
    over_t = (nbytes < 0).reshape(frames.shape[0], -1).any(axis=0).astype(jnp.int32)
    extra = [over_t] if by_table else []
    if path == "packed":
        # Two phases in one step: a pmax of (overflows, largest packed destination) sets how
        # many static chunks cover every device's frames, then dense all_to_alls of those
        # chunks carry counts and frames together.
        p_, t_ = frames.shape[0], nbytes.size // frames.shape[0]
        fr3, nb2 = frames.reshape(p_, t_, cap), nbytes.reshape(p_, t_)
        need = (4 * t_ + jnp.maximum(nb2, 0).sum(axis=1)).max().astype(jnp.int32)
        agg = jax.lax.pmax(jnp.concatenate([jnp.stack([n_over, need]), *extra]), agree)
        any_over, tables_over = agg[0] > 0, agg[2:] > 0
        chunks = packed_chunks(t_, cap)
        counts = chunk_counts(chunks, agg[1])

        def receive():
            rf, rnb = _move_packed(fr3, nb2, counts, axis_name=ax, chunks=chunks)
            return rf.reshape(frames.shape), rnb.reshape(nbytes.shape)

        per_dest = (counts * jnp.asarray(chunks, jnp.int32)).sum().astype(jnp.float32)
        comp_moved = per_dest * frames.shape[0]
        per_peer = jnp.full(frames.shape[0], per_dest)
    else:
        agg = jax.lax.pmax(jnp.concatenate([n_over[None], *extra]), agree)
        any_over, tables_over = agg[0] > 0, agg[1:] > 0

        def receive():
            return exchange_frames(ax, path, frames, nbytes)

        p_ = frames.shape[0]
        counts = 4.0 * nbytes.size
        if path == "dense":
            comp_moved = jnp.float32(frames.size + counts)
            per_peer = jnp.full(p_, (frames.size + counts) / p_, jnp.float32)
        else:  # ragged: whole rows of RAGGED_ROW_BYTES
            row = RAGGED_ROW_BYTES
            used = (jnp.maximum(nbytes, 0) + row - 1) // row * row  # overflowed: none
            comp_moved = used.astype(jnp.float32).sum() + counts
            per_peer = used.reshape(p_, -1).astype(jnp.float32).sum(axis=1) + counts / p_
    return SentFrames(
        receive, comp_moved, n_over, any_over, per_peer, tables_over if by_table else None
    )
