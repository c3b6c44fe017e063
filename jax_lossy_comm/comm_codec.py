"""Communication codecs: what an exchange does to each chunk before and after it travels.

A codec object (TorchRec's comm-codec pattern: encode, decode, quantized size) is chosen per
direction by :class:`jax_lossy_comm.ExchangeConfig`; :func:`jax_lossy_comm.compressed_all_to_all`
runs every codec through the same layout, exchange, straight-through gradient and statistics.

* :class:`CommCodec`: the protocol.
* :class:`FrameCodec`: the library's error-bounded frames (:func:`jax_lossy_comm.compress`),
  variable size, per (peer, table) chunk.
* ``Int8Rowwise``, ``FP8Rowwise``, ``MX4``, ``FP16`` and ``BF16`` (:mod:`jax_lossy_comm.qcomm`):
  TorchRec/FBGEMM's quantized communication, fixed size, no error bound; baselines for the
  benchmarks.
* :func:`jax_lossy_comm.get_comm_codec` (:mod:`jax_lossy_comm.codec_factory`): any of them by
  name (the codec's forms, the baselines, TorchRec's precision names).

Vocabulary: *the codec* is the library's error-bounded frame codec (``xla_ffi``,
:func:`jax_lossy_comm.compress`); :class:`FrameCodec` and the baselines are *CommCodecs*.

References:
  S. Feng et al., "Accelerating Communication in Deep Learning Recommendation Model Training
  with Dual-Level Adaptive Lossy Compression", SC24, arXiv 2407.04272, sec. 3-4. TorchRec:
  ``torchrec/distributed/fbgemm_qcomm_codec.py`` (codec objects chosen by a frozen config).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

import jax
import numpy as np

from jax_lossy_comm import frame as _frame
from jax_lossy_comm.codec import compress_checked, decompress

#: REL bound that sizes the dense capacity when ``error_bound`` is traced and no
#: ``min_error_bound`` is given (the paper's tightest tier, sec. 5).
DEFAULT_MIN_ERROR_BOUND = 0.01
#: Exact outlier values reserved in each dense frame (7 bytes each for 2048x64 float32 chunks),
#: so that the odd value at the quantizer's edge does not send the step down the fallback.
DEFAULT_OUTLIERS = 16
#: REL bound a :class:`FrameCodec` (mode ``"rel"``) uses when the caller passes no
#: ``error_bound`` (``compressed_all_to_all`` called with ``jax.lax.all_to_all``'s arguments
#: only): the paper's tightest tier (sec. 5), also ``DEFAULT_MIN_ERROR_BOUND``.
DEFAULT_ERROR_BOUND = 0.01


@runtime_checkable
class CommCodec(Protocol):
    """What :func:`jax_lossy_comm.compressed_all_to_all` needs from a codec.

    Implementations are hashable (frozen dataclasses): they are static settings of a jitted
    exchange. Chunks are ``[G..., rows, dim]`` with the chunk grid ``G = (P,)`` or ``(P, T)``
    (:class:`jax_lossy_comm.Layout`); ``wire`` is any array with the grid's leading ``P``.

    Attributes:
      per_table: True: one chunk per (peer, table) (own range and bound per table); False:
        one chunk per peer, the peer's block in C order.
      variable_size: True: a chunk may use fewer bytes than the capacity (``nbytes`` travel
        with the frames) or more (``nbytes < 0``: overflow, the exchange falls back to the
        exact one); False: every chunk takes exactly the capacity.
      error_bounded: True: ``encode`` needs an error bound and every finite value decodes
        within it.

    Optional: ``default_error_bound`` (float or None): the bound used when the caller gives
    none; None (or absent) makes the bound required by an error-bounded codec.
    """

    per_table: bool
    variable_size: bool
    error_bounded: bool

    def capacity_bytes(self, chunk_shape, dtype, *, dense: bool, error_bound=None) -> int:
        """Static wire bytes of one chunk ``(rows, dim)`` of ``dtype`` (TorchRec's quantized
        size). ``dense``: the frames travel at full capacity (not ragged); ``error_bound``:
        the bound as float64 numpy when concrete, else None. Raises ValueError if the codec
        cannot encode such chunks."""
        ...

    def encode(self, chunks, error_bound, capacity: int):
        """``chunks [G..., rows, dim]``, ``error_bound float32[G...]`` (or None) ->
        ``(wire [P, ...], nbytes int32[G...])``."""
        ...

    def decode(self, wire, nbytes, *, shape, dtype):
        """Received ``(wire, nbytes)`` -> ``chunks [G..., rows, dim]`` of ``dtype``."""
        ...


@dataclasses.dataclass(frozen=True)
class FrameCodec:
    """The library's error-bounded frames as a :class:`CommCodec` (the default codec).

    Each (peer, table) chunk is one :func:`jax_lossy_comm.compress` frame: every finite value
    decodes within ``eb_abs`` (REL: ``error_bound * (max - min)`` of the chunk), NaN/Inf
    bit-exact. The fields are :func:`jax_lossy_comm.compress`'s static arguments, checked once
    here.

    Capacity per chunk: ``capacity`` when given (a speculative size; frames that do not fit
    make the exchange fall back to the exact one). Otherwise the raw frame size on the ragged
    path (every frame fits) and, on the dense and packed paths in REL mode with codec
    ``"auto"``/``"fixed"``, the fixed-rate size for the smallest bound in use
    (:func:`jax_lossy_comm.frame_capacity` at ``min_error_bound``, else the minimum of a
    concrete ``error_bound``, else ``DEFAULT_MIN_ERROR_BOUND``) with room for
    ``DEFAULT_OUTLIERS`` exact outliers; ABS mode and the other codecs use the raw size.

    Default bound: an exchange called without ``error_bound`` codes under
    ``DEFAULT_ERROR_BOUND`` (REL 0.01) in REL mode; ABS mode requires a bound.

    Attributes:
      mode: ``"rel"`` or ``"abs"``.
      codec: ``"auto" | "raw" | "fixed" | "dedup" | "entropy"`` (``frame.CODECS``).
      min_error_bound: smallest REL bound the traced ``error_bound`` takes (> 0), or None.
      capacity: bytes per frame, or None (sized as above).

    Raises:
      ValueError: unknown mode or codec, a non-positive ``min_error_bound``, a capacity
        outside ``[1, frame.MAX_FRAME_BYTES]``.

    Examples:
      >>> import numpy as np
      >>> from jax_lossy_comm import FrameCodec
      >>> c = FrameCodec(min_error_bound=0.01)
      >>> c.capacity_bytes((256, 64), np.float32, dense=True)  # 6-bit codes + 16 outliers, 16 B units
      12416
      >>> c.capacity_bytes((256, 64), np.float32, dense=False)  # ragged: raw size
      65547
      >>> FrameCodec(mode="relative")
      Traceback (most recent call last):
      ...
      ValueError: FrameCodec.mode must be 'rel' or 'abs', got 'relative'
    """

    mode: str = "rel"
    codec: str = "auto"
    min_error_bound: float | None = None
    capacity: int | None = None

    per_table = True
    variable_size = True
    error_bounded = True

    @property
    def default_error_bound(self) -> float | None:
        """The bound used when the caller passes none. In REL mode ``DEFAULT_ERROR_BOUND``
        (REL 0.01), or ``min_error_bound`` when that is larger (the frames are sized for bounds
        at least ``min_error_bound``: a smaller default would overflow every dense frame and
        fall back to the exact exchange); None in ABS mode (an absolute bound has no
        scale-free default: required)."""
        if self.mode != "rel":
            return None
        return max(DEFAULT_ERROR_BOUND, self.min_error_bound or 0.0)

    def __post_init__(self):
        if self.mode not in _frame.MODES:
            raise ValueError(f"FrameCodec.mode must be 'rel' or 'abs', got {self.mode!r}")
        if self.codec not in _frame.CODECS:
            raise ValueError(
                f"FrameCodec.codec must be one of {sorted(_frame.CODECS)}, got {self.codec!r}"
            )
        if self.min_error_bound is not None:
            _frame.check_min_error_bound(self.min_error_bound)
        if self.capacity is not None and not (
            isinstance(self.capacity, (int, np.integer))
            and 1 <= self.capacity <= _frame.MAX_FRAME_BYTES
        ):
            raise ValueError(
                f"FrameCodec.capacity must be an int in [1, {_frame.MAX_FRAME_BYTES}], "
                f"got {self.capacity!r}"
            )

    def capacity_bytes(self, chunk_shape, dtype, *, dense: bool, error_bound=None) -> int:
        """Static bytes per frame (see the class docstring).

        Raises:
          ValueError: a chunk over 2 GiB, a capacity smaller than the frame header, or
            ``codec="fixed"`` on a dense path in ABS mode without ``capacity``.
        """
        rows, dim = chunk_shape
        _frame.check_chunk_size(rows, dim, dtype)
        cap = self._capacity(rows, dim, np.dtype(dtype), dense, error_bound)
        if cap < _frame.header_bytes(rows, dim):
            raise ValueError(f"capacity {cap} is smaller than a frame header")
        return cap

    def _capacity(self, rows, dim, dtype, dense, error_bound) -> int:
        if self.capacity is not None:
            return int(self.capacity)
        raw = _frame.raw_frame_bytes(rows, dim, dtype)
        if not dense or self.mode != "rel" or self.codec not in ("auto", "fixed"):
            if self.codec == "fixed" and dense and self.mode != "rel":
                raise ValueError("codec='fixed' on the dense path needs mode='rel' or capacity=")
            return raw
        min_eb = self.min_error_bound
        if min_eb is None:
            if error_bound is not None:
                m = float(np.min(error_bound)) if error_bound.size else DEFAULT_MIN_ERROR_BOUND
                if not m > 0:
                    return raw
                min_eb = m
            else:
                min_eb = DEFAULT_MIN_ERROR_BOUND
        return _frame.frame_capacity(
            (rows, dim), dtype, self.codec, float(min_eb), self.mode, outliers=DEFAULT_OUTLIERS
        )

    def encode(self, chunks, error_bound, capacity: int):
        """``compress`` of every chunk: ``(frames uint8[G..., capacity], nbytes int32[G...])``."""
        return compress_checked(
            chunks, error_bound, mode=self.mode, codec=self.codec, capacity=capacity
        )

    def decode(self, wire, nbytes, *, shape, dtype) -> jax.Array:
        """``decompress`` of every frame: ``dtype[G..., rows, dim]`` (codec ``"fixed"`` /
        ``"raw"``: with ``fixed_rate``, no dictionary workspace on CUDA)."""
        fixed_rate = self.codec in ("fixed", "raw")
        return decompress(wire, nbytes, shape=shape, dtype=dtype, fixed_rate=fixed_rate)
