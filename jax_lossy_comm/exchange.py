"""Compressed all-to-all for ``shard_map``: compress per destination, exchange frames, decode.

``compressed_all_to_all`` is a drop-in for ``jax.lax.all_to_all`` inside ``shard_map`` that
returns the same array within an error bound while moving fewer bytes: the block bound for
each peer is cut into chunks ``[rows, dim]`` (one per peer, or one per (peer, table)), all
chunks are compressed in one :func:`jax_lossy_comm.compress` call, the frames travel, and the
receiver decodes them (Feng et al., SC24, arXiv 2407.04272, sec. 3 and 4). Its gradient is
the transposed exchange of the cotangent (straight-through estimator, sec. 3), exact or
compressed with its own error bound.

Exchange paths (``path=``):

* ``"ragged"`` (default where ``jax.lax.ragged_all_to_all`` is implemented, i.e. GPU): every
  frame is one slice of ``ragged_all_to_all``, ``nbytes`` long, written at its ``[source,
  table]`` place in the receiver's buffer, so only used bytes move; the int32 byte counts
  travel first in a tiny ``all_to_all``. The capacity is the raw size: every codec fits.
* ``"dense"`` (default elsewhere: XLA:CPU has no ``ragged_all_to_all``): a dense ``all_to_all``
  moves the static capacity of every frame, so the capacity, not the frame size, decides the
  bytes moved. The dense path sizes frames with fixed-rate quantization codes for the
  smallest REL bound in use (``min_error_bound``; :func:`jax_lossy_comm.frame_capacity`) plus
  room for ``DEFAULT_OUTLIERS`` exact outliers; ``codec="auto"`` still writes the smallest form
  that fits. REL 0.01 gives 6-bit codes: 5.33x fewer bytes than raw float32 for [2048, 64]
  chunks. ABS mode has no static code width: its dense capacity is the raw size unless
  ``capacity=`` is given.

* ``"packed"``: dense collectives that move (about) the used bytes, for backends without
  ``ragged_all_to_all``. Frames are compressed at the dense path's capacity; each device packs
  its frames for a destination back to back behind their int32 byte counts; one scalar
  ``pmax`` (the same one that detects overflow) agrees on the largest packed destination,
  and ``lax.switch`` runs the dense ``all_to_all`` of the smallest static bucket that holds
  it (buckets shrink by ``PACKED_BUCKET_STEP`` from the full capacity). Bucket rounding,
  the spread between destinations and devices whose tables compress worse decide the
  overhead over ``frame_bytes``; values are bit-identical to the dense path.

Frames that do not fit (NaN/Inf beyond the outlier room, a bound below ``min_error_bound``, a
too small ``capacity=``) are never dropped or truncated: the count of overflowed frames is
``pmax``-ed over the axis (one scalar, so every device agrees) and, if any, the whole exchange
runs as the exact ``jax.lax.all_to_all`` of ``x`` (lossless) under ``lax.cond``;
``overflow_count`` and ``fallback`` in :class:`ExchangeStats` record it. Only ``all_to_all``,
``ragged_all_to_all`` and a scalar ``pmax`` are used (no ``psum_scatter``, which gloo gets
wrong on chunks of about 4 MiB and up, jax issue 40830), so the same code runs across
processes started with ``jax.distributed.initialize`` (gloo on CPU, NCCL on GPU).

Decision (measured by ``bench/exchange_bench.py`` on the Terabyte dumps, 8 devices): the
dense default is the fixed-rate capacity (5.33x at REL 0.01; at bounds >= ``min_error_bound``
it overflows only on chunks with more than ``DEFAULT_OUTLIERS`` NaN/Inf or unquantizable
values). A speculative capacity (``capacity=``, e.g. the largest
frame seen in calibration x 1.25) moved 17x fewer bytes on the same data, but one chunk whose
rows stop repeating sends the whole step raw, so it is opt-in. The variable-size (ragged)
exchange moved 71x fewer bytes there (padding slots and hot-row tables included).

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

from jax_lossy_comm import frame as _frame
from jax_lossy_comm.codec import compress, concrete_error_bound, decompress

#: REL bound that sizes the dense capacity when ``error_bound`` is traced and no
#: ``min_error_bound`` is given (the paper's tightest tier, sec. 5).
DEFAULT_MIN_ERROR_BOUND = 0.01
#: Exact outlier values reserved in each dense frame (7 bytes each for 2048x64 float32 chunks),
#: so that the odd value at the quantizer's edge does not send the step down the fallback.
DEFAULT_OUTLIERS = 16
#: Packed path: bucket sizes (bytes per destination) shrink from the full capacity by this
#: factor per step (2 ** 0.5: at most 29% of a bucket is padding) ...
PACKED_BUCKET_STEP = 2.0**0.5
#: ... down to this fraction of the full capacity (smaller needs use the smallest bucket).
PACKED_MIN_FRACTION = 1.0 / 64
PATHS = ("auto", "dense", "packed", "ragged")
BACKWARDS = ("exact", "compressed")


class ExchangeStats(NamedTuple):
    """Per-device statistics of one :func:`compressed_all_to_all` (forward exchange).

    Attributes:
      raw_bytes: float32 scalar, this device's payload ``x`` as raw bytes (``x.size *
        itemsize``; every block, the one kept for itself included).
      frame_bytes: float32 scalar, sum of this device's frame sizes (what a variable-size
        exchange moves; an overflowed frame counts with the size it needed).
      moved_bytes: float32 scalar, bytes the chosen path really sent: dense, ``chunks *
        capacity`` plus the int32 byte counts; ragged, ``frame_bytes`` plus the byte counts;
        after a fallback, ``raw_bytes``.
      compression_ratio: float32[P] or float32[P, T], raw / frame bytes of each chunk
        (destination peer, table).
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


# ------------------------------------------------------------------------------------ layout
class _Layout(NamedTuple):
    """Static geometry of one exchange: how ``x`` becomes ``[P, (T,) rows, dim]`` chunks."""

    shape: tuple  # x.shape
    p: int  # axis size
    split: int
    concat: int
    table: int | None  # table axis in block coordinates (None: one chunk per peer)
    tiled: bool

    @property
    def block_shape(self) -> tuple:
        s = list(self.shape)
        if self.tiled:
            s[self.split] //= self.p
        else:
            del s[self.split]
        return tuple(s)

    @property
    def chunk_shape(self) -> tuple:
        b = self.block_shape
        dim = b[-1] if b else 1
        n = math.prod(b)
        if self.table is not None:
            n //= b[self.table]
        return (n // dim if dim else 0, dim)

    @property
    def grid(self) -> tuple:
        b = self.block_shape
        return (self.p,) if self.table is None else (self.p, b[self.table])

    @property
    def out_shape(self) -> tuple:
        b = list(self.block_shape)
        if self.tiled:
            b[self.concat] *= self.p
        else:
            b.insert(self.concat, self.p)
        return tuple(b)

    def to_chunks(self, x):
        """x -> float[P, (T,) rows, dim]: block for peer d is chunk row d."""
        if self.tiled:
            s = self.shape
            x = x.reshape(s[: self.split] + (self.p, s[self.split] // self.p) + s[self.split + 1 :])
            x = jnp.moveaxis(x, self.split, 0)
        else:
            x = jnp.moveaxis(x, self.split, 0)
        if self.table is not None:
            x = jnp.moveaxis(x, 1 + self.table, 1)
        return x.reshape(self.grid + self.chunk_shape)

    def from_chunks(self, c):
        """Received chunks float[P_src, (T,) rows, dim] -> the all_to_all result."""
        b = self.block_shape
        if self.table is not None:
            bt = (b[self.table],) + b[: self.table] + b[self.table + 1 :]
            c = jnp.moveaxis(c.reshape((self.p,) + bt), 1, 1 + self.table)
        else:
            c = c.reshape((self.p,) + b)
        c = jnp.moveaxis(c, 0, self.concat)
        return c.reshape(self.out_shape)

    def transposed(self) -> _Layout:
        """Layout of the cotangent's exchange (split and concat swapped)."""
        table = None
        if self.table is not None:
            # Block coordinates are the same in both directions (a tiled block or the untiled
            # block with the P axis removed), so the table axis index carries over.
            table = self.table
        return _Layout(self.out_shape, self.p, self.concat, self.split, table, self.tiled)


def _make_layout(shape, p, split_axis, concat_axis, table_axis, tiled) -> _Layout:
    nd = len(shape)
    if nd < 1:
        raise ValueError("x must have at least one dimension")

    def norm(a, what, n):
        a = int(a)
        if not -n <= a < n:
            raise ValueError(f"{what}={a} out of range for rank {n}")
        return a % n

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
    lay = _Layout(tuple(int(s) for s in shape), int(p), split, concat, table, bool(tiled))
    if not tiled and concat > len(lay.block_shape):
        raise ValueError(f"concat_axis={concat_axis} out of range (tiled=False)")
    return lay


# ------------------------------------------------------------------------------------ config
class _Config(NamedTuple):
    """Static (hashable) settings of one exchange."""

    axis_name: object
    layout: _Layout
    dtype: object
    mode: str
    codec: str
    capacity: int
    path: str  # "dense" | "ragged" | "_ragged_emulated" (tests)
    backward: str
    backward_capacity: int


def _varying_axes(x) -> frozenset:
    t = jax.typeof(x)
    vma = getattr(t, "vma", None)
    if vma is None:
        mat = getattr(t, "manual_axis_type", None)
        vma = getattr(mat, "varying", None)
    return frozenset(vma or ())


def _match_varying(y, like):
    """pcast ``y`` to varying over the axes ``like`` varies over (FFI outputs are typed as
    invariant inside ``shard_map``; see DESIGN.md pitfalls)."""
    missing = _varying_axes(like) - _varying_axes(y)
    if missing:
        y = jax.lax.pcast(y, tuple(sorted(missing)), to="varying")
    return y


def _ragged_supported() -> bool:
    try:
        return jax.devices()[0].platform in ("gpu", "cuda", "rocm")
    except RuntimeError:
        return False


def _capacity(lay: _Layout, dtype, codec, mode, path, min_eb, capacity, concrete_eb) -> int:
    rows, dim = lay.chunk_shape
    if capacity is not None:
        return int(capacity)
    raw = _frame.raw_frame_bytes(rows, dim, dtype)
    if path != "dense" or mode != "rel" or codec not in ("auto", "fixed"):
        if codec == "fixed" and path == "dense" and mode != "rel":
            raise ValueError("codec='fixed' on the dense path needs mode='rel' or capacity=")
        return raw
    if min_eb is None:
        if concrete_eb is not None:
            m = float(np.min(concrete_eb)) if concrete_eb.size else DEFAULT_MIN_ERROR_BOUND
            if not m > 0:
                return raw
            min_eb = m
        else:
            min_eb = DEFAULT_MIN_ERROR_BOUND
    return _frame.frame_capacity(
        (rows, dim), dtype, codec, float(min_eb), mode, outliers=DEFAULT_OUTLIERS
    )


# ------------------------------------------------------------------------------ the exchange
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
    at most ``max_size`` elements); lets CPU tests check the ragged path's offsets."""
    n = input_offsets.shape[0]
    j = jnp.arange(max_size, dtype=jnp.int32)
    src = jnp.clip(input_offsets[:, None] + j, 0, operand.shape[0] - 1)
    sl = jnp.where(j < send_sizes[:, None], operand[src], 0).astype(operand.dtype)  # [N, max]
    got = jax.lax.all_to_all(sl, axis_name, 0, 0, tiled=True)
    offs = jax.lax.all_to_all(output_offsets, axis_name, 0, 0, tiled=True)
    dst = jnp.where(j < recv_sizes[:, None], offs[:, None] + j, output.shape[0])
    del n
    return output.at[dst.reshape(-1)].set(got.reshape(-1), mode="drop")


def _exchange_frames(cfg: _Config, frames, nbytes):
    """Moves frames ``uint8[P, (T,) cap]`` to their destinations; returns the received frames
    and byte counts indexed by source peer.

    Dense: one ``all_to_all`` of the whole capacity. Ragged: each frame is one slice of
    ``ragged_all_to_all`` (``P * T`` slices, ``nbytes`` long), written at the same
    ``[source, table]`` position of the receiver's ``[P, T, cap]`` buffer, so no packing is
    needed and only used bytes move; the byte counts go first in a tiny ``all_to_all``.
    """
    ax = cfg.axis_name
    rnb = jax.lax.all_to_all(nbytes, ax, 0, 0, tiled=True)
    if cfg.path == "dense":
        return jax.lax.all_to_all(frames, ax, 0, 0, tiled=True), rnb
    p, cap = frames.shape[0], frames.shape[-1]
    t = nbytes.size // p
    flat = frames.reshape(-1)
    slot = jnp.arange(p * t, dtype=jnp.int32) * cap  # [P*T], (dest, table)
    send_sizes = jnp.maximum(nbytes.reshape(-1), 0).astype(jnp.int32)
    recv_sizes = jnp.maximum(rnb.reshape(-1), 0).astype(jnp.int32)
    me = jax.lax.axis_index(ax).astype(jnp.int32)
    # Frame (dest d, table k) lands in d's buffer at (me, k).
    output_offsets = (me * t + jnp.arange(p * t, dtype=jnp.int32) % t) * cap
    out = jnp.zeros_like(flat)
    if cfg.path == "_ragged_emulated":
        recv = _emulated_ragged_all_to_all(
            flat, out, slot, send_sizes, output_offsets, recv_sizes, axis_name=ax, max_size=cap
        )
    else:
        recv = jax.lax.ragged_all_to_all(
            flat, out, slot, send_sizes, output_offsets, recv_sizes, axis_name=ax
        )
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


def _pack(frames, nbytes, size: int):
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


def _unpack(buf, t: int, cap: int):
    """Inverse of :func:`_pack` on the receiver: ``uint8[P, size]`` -> frames
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


def _forward_impl(cfg: _Config, x, eb, *, backward_pass: bool = False):
    lay = cfg.layout.transposed() if backward_pass else cfg.layout
    cap = cfg.backward_capacity if backward_pass else cfg.capacity
    ax = cfg.axis_name
    rows, dim = lay.chunk_shape
    chunks = lay.to_chunks(x)
    eb = jnp.broadcast_to(eb, lay.grid)
    frames, nbytes = compress(chunks, eb, mode=cfg.mode, codec=cfg.codec, capacity=cap)
    frames, nbytes = _match_varying(frames, x), _match_varying(nbytes, x)
    over = nbytes < 0
    n_over = over.sum().astype(jnp.int32)
    if cfg.path == "packed":
        # Two phases in one step: a pmax of (overflows, largest packed destination) picks
        # the smallest static bucket that holds every device's frames, then one dense
        # all_to_all of that bucket carries counts and frames together.
        p_, t_ = frames.shape[0], nbytes.size // frames.shape[0]
        fr3, nb2 = frames.reshape(p_, t_, cap), nbytes.reshape(p_, t_)
        need = (4 * t_ + jnp.maximum(nb2, 0).sum(axis=1)).max().astype(jnp.int32)
        agg = jax.lax.pmax(jnp.stack([n_over, need]), ax)
        any_over = agg[0] > 0
        buckets = packed_buckets(t_, cap)
        k = jnp.minimum(
            jnp.searchsorted(jnp.asarray(buckets, jnp.int32), agg[1]), len(buckets) - 1
        ).astype(jnp.int32)

        top = buckets[-1]

        def branch(size):
            def go(buf):  # only the first `size` bytes per destination travel
                got = jax.lax.all_to_all(buf[:, :size], ax, 0, 0, tiled=True)
                return jnp.pad(got, ((0, 0), (0, top - size)))

            return go

        def compressed(_):
            buf = _pack(fr3, nb2, top)
            rbuf = jax.lax.switch(k, [branch(b) for b in buckets], buf)
            rf, rnb = _unpack(rbuf, t_, cap)
            rf, rnb = rf.reshape(frames.shape), rnb.reshape(nbytes.shape)
            xr = decompress(rf, rnb, shape=(rows, dim), dtype=x.dtype)
            return _match_varying(lay.from_chunks(xr), x)
    else:
        any_over = jax.lax.pmax(n_over, ax) > 0

        def compressed(_):
            rf, rnb = _exchange_frames(cfg, frames, nbytes)
            xr = decompress(rf, rnb, shape=(rows, dim), dtype=x.dtype)
            return _match_varying(lay.from_chunks(xr), x)

    def exact(_):
        # From the chunks the codec read, not from x: XLA would otherwise materialize x a
        # second time (the producer's fusion recomputed for the cond operand).
        got = jax.lax.all_to_all(chunks, ax, 0, 0, tiled=True)
        return _match_varying(lay.from_chunks(got), x)

    y = jax.lax.cond(any_over, exact, compressed, None)

    chunk_raw = float(rows * dim * np.dtype(x.dtype).itemsize)
    fb = jnp.abs(nbytes).astype(jnp.float32)
    raw_bytes = jnp.float32(math.prod(lay.shape) * np.dtype(x.dtype).itemsize)
    frame_bytes = fb.sum()
    nb_bytes = 4.0 * nbytes.size
    if cfg.path == "dense":
        comp_moved = jnp.float32(frames.size + nb_bytes)
    elif cfg.path == "packed":
        comp_moved = jnp.asarray(buckets, jnp.float32)[k] * frames.shape[0]
    else:
        comp_moved = frame_bytes + nb_bytes
    moved = jnp.where(any_over, raw_bytes, comp_moved)
    stats = ExchangeStats(
        raw_bytes=raw_bytes,
        frame_bytes=frame_bytes,
        moved_bytes=moved.astype(jnp.float32),
        compression_ratio=(chunk_raw / jnp.maximum(fb, 1.0)).astype(jnp.float32),
        overflow_count=n_over,
        fallback=any_over.astype(jnp.int32),
        capacity_bytes=jnp.float32(cap),
    )
    return y, stats


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _exchange(cfg: _Config, x, eb, beb):
    return _forward_impl(cfg, x, eb)


def _exchange_fwd(cfg, x, eb, beb):
    return _forward_impl(cfg, x, eb), (eb, beb)


def _exchange_bwd(cfg, res, cts):
    eb, beb = res
    ct_y = cts[0]
    lay = cfg.layout
    if cfg.backward == "exact":
        ct_x = jax.lax.all_to_all(ct_y, cfg.axis_name, lay.concat, lay.split, tiled=lay.tiled)
    else:
        ct_x, _ = _forward_impl(cfg, ct_y.astype(cfg.dtype), beb, backward_pass=True)
    return ct_x.astype(cfg.dtype), jnp.zeros_like(eb), jnp.zeros_like(beb)


_exchange.defvjp(_exchange_fwd, _exchange_bwd)


def compressed_all_to_all(
    x,
    axis_name,
    split_axis: int,
    concat_axis: int,
    *,
    error_bound,
    table_axis: int | None = None,
    tiled: bool = True,
    mode: str = "rel",
    codec: str = "auto",
    min_error_bound: float | None = None,
    capacity: int | None = None,
    path: str = "auto",
    backward: str = "exact",
    backward_error_bound=None,
    return_stats: bool = False,
):
    """``jax.lax.all_to_all`` of ``x`` with error-bounded lossy compression of the payload.

    Call inside ``shard_map`` over ``axis_name`` (P devices). The block ``x`` sends to peer
    ``d`` (``jax.lax.all_to_all``'s split of ``split_axis``) is cut into codec chunks
    ``[rows, dim]``: ``dim`` is the block's last axis (``x``'s last axis unless it is the
    tiled split axis; untiled, the split axis is removed first); with ``table_axis`` each index
    along that axis is its own chunk (one chunk per (peer, table), each with its own bound and
    REL range), and all other axes are flattened into ``rows`` in C order. Chunks are
    compressed in one call, exchanged, decoded and reassembled into what
    ``jax.lax.all_to_all(x, axis_name, split_axis, concat_axis, tiled=tiled)`` returns.

    DLRM use (sec. 3): pooled embeddings ``float32[global_batch, L, dim]``, ``split_axis=0``,
    ``concat_axis=1``, ``table_axis=1``, ``error_bound`` ``float32[L]`` -> ``float32[global_batch
    / P, P * L, dim]``; each (peer, table) block ``[global_batch / P, dim]`` is one chunk.

    Args:
      x: ``float32 | bfloat16 | float16`` array, varying over ``axis_name``.
      axis_name: the ``shard_map`` mesh axis (static).
      split_axis, concat_axis: as in ``jax.lax.all_to_all`` (static ints, negative allowed).
      error_bound: float, traced or concrete, broadcastable to the chunk grid ``[P]`` (no
        ``table_axis``) or ``[P, T]`` (a ``[T]`` vector gives one bound per table). REL
        (``mode="rel"``): ``eb_abs = error_bound * (max - min)`` of each chunk; ABS: absolute.
        Every finite value of the result is within ``eb_abs`` of the exact result; NaN/Inf
        arrive bit-exact. Changing a traced bound does not recompile.
      table_axis: axis of ``x`` whose indices are separate chunks (static; not the last axis).
      tiled: as in ``jax.lax.all_to_all``.
      mode: ``"rel"`` or ``"abs"``.
      codec: ``"auto" | "raw" | "fixed" | "dedup" | "entropy"`` (see ``frame.CODECS``).
      min_error_bound: static float, the smallest REL bound ``error_bound`` will take; sizes
        the dense capacity (fixed-rate codes). Default: the minimum of a concrete
        ``error_bound``, else ``DEFAULT_MIN_ERROR_BOUND`` (0.01). Smaller bounds still give
        correct results, through the fallback when a frame does not fit.
      capacity: static bytes per frame, overriding the path's default (a speculative
        capacity; frames that do not fit trigger the exact fallback).
      path: ``"auto"`` (ragged on GPU, dense elsewhere), ``"dense"``, ``"packed"`` (dense
        collectives, used bytes in size buckets) or ``"ragged"``.
      backward: ``"exact"``: the cotangent goes back through the exact transposed
        ``all_to_all``; ``"compressed"``: through a compressed one with
        ``backward_error_bound`` (same mode, codec and path).
      backward_error_bound: bound for the backward exchange, broadcastable to its chunk grid
        (same ``[P, T]`` shape); default ``error_bound``. Capacity for it is sized from
        ``min_error_bound`` likewise.
      return_stats: also return :class:`ExchangeStats`.

    Returns:
      ``y`` with ``jax.lax.all_to_all``'s shape and ``x``'s dtype, or ``(y, ExchangeStats)``.

    Raises:
      ValueError: bad axes, a split axis not divisible by (tiled) or not equal to (untiled) the
        axis size, a ``table_axis`` that is the last axis, an error bound that does not
        broadcast to the chunk grid, a concrete negative or non-finite error bound, unknown
        ``path``/``backward``/``mode``/``codec``, a non-positive ``min_error_bound``.
      TypeError: unsupported dtype (from :func:`jax_lossy_comm.compress`).
      NotImplementedError or an XLA error: ``path="ragged"`` on a backend without
        ``ragged_all_to_all`` (XLA:CPU).

    Examples:
      Inside ``jax.shard_map(..., mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"))``::

        y, stats = compressed_all_to_all(pooled, "i", 0, 1, error_bound=eb_per_table,
                                         table_axis=1, min_error_bound=0.01,
                                         return_stats=True)
        # stats.moved_bytes / stats.raw_bytes: 1 / 5.33 on the dense path at REL 0.01

    References:
      Feng et al., SC24, arXiv 2407.04272, sec. 3 (exchange, straight-through backward) and
      sec. 4 (quantization without prediction, REL bound).
    """
    if min_error_bound is not None:
        _frame.check_min_error_bound(min_error_bound)
    if path not in PATHS + ("_ragged_emulated",):
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    if backward not in BACKWARDS:
        raise ValueError(f"backward must be one of {BACKWARDS}, got {backward!r}")
    if mode not in _frame.MODES:
        raise ValueError(f"mode must be 'rel' or 'abs', got {mode!r}")
    if codec not in _frame.CODECS:
        raise ValueError(f"codec must be one of {sorted(_frame.CODECS)}, got {codec!r}")
    x = jnp.asarray(x)
    p = jax.lax.axis_size(axis_name)
    lay = _make_layout(x.shape, p, split_axis, concat_axis, table_axis, tiled)
    if path == "auto":
        path = "ragged" if _ragged_supported() else "dense"
    cap_path = "dense" if path in ("dense", "packed") else "ragged"

    def prep(bound, grid, what):
        c = concrete_error_bound(bound, what)  # raises on a negative or non-finite value
        e = jnp.asarray(bound, jnp.float32)
        try:
            np.broadcast_shapes(e.shape, grid)
        except ValueError:
            raise ValueError(
                f"{what} of shape {e.shape} does not broadcast to the chunk grid "
                f"{grid} (peers, tables)"
            ) from None
        return e, c

    eb, eb_c = prep(error_bound, lay.grid, "error_bound")
    if backward_error_bound is None:
        beb, beb_c = eb, eb_c
    else:
        beb, beb_c = prep(backward_error_bound, lay.transposed().grid, "backward_error_bound")
    dtype = np.dtype(x.dtype)
    cap = _capacity(lay, dtype, codec, mode, cap_path, min_error_bound, capacity, eb_c)
    bcap = _capacity(
        lay.transposed(), dtype, codec, mode, cap_path, min_error_bound, capacity, beb_c
    )
    cfg = _Config(axis_name, lay, dtype, mode, codec, cap, path, backward, bcap)
    y, stats = _exchange(cfg, x, eb, beb)
    return (y, stats) if return_stats else y
