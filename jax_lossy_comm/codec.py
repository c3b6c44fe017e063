"""Codec primitives as XLA FFI calls: ``compress``, ``decompress`` / ``decompress_with_status``
and ``frame_status``.

These are the only ``jax.ffi.ffi_call`` sites of the library. Chunks are the last two
dimensions ``[rows, dim]`` of the input (e.g. the pooled embeddings a table owner sends to one
peer); leading dimensions are independent chunks, each with its own error bound. The format is
described in ``xla_ffi/format.h`` (the quantizer in ``xla_ffi/quant.h``); sizes and names in
:mod:`jax_lossy_comm.frame`. The FFI targets carry a version in their names
(``jax_lossy_comm_compress_v1``) and are registered when the library is imported, so a
``jax.export`` of a function that uses them can be reloaded (docs/export.md).

Inside ``shard_map`` the outputs are typed like the inputs: ``jax.ffi.ffi_call`` types its
outputs as invariant over the mesh axes, which makes a later ``psum`` transpose into a sum of
every device's cotangent (gradients silently multiplied by the axis size); each primitive
re-marks its outputs varying over the axes its inputs vary over (``jax.lax.pcast``).

References:
  S. Feng et al., "Accelerating Communication in Deep Learning Recommendation Model Training
  with Dual-Level Adaptive Lossy Compression", SC24, arXiv 2407.04272, sec. 4.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jax_lossy_comm import _ffi, frame
from jax_lossy_comm.frame import CODECS, DTYPES, MODES, frame_capacity
from jax_lossy_comm.vma import typed_like

_SUPPORTED = tuple(DTYPES)


def check_dtype(dtype, what: str = "x") -> np.dtype:
    """The numpy dtype of ``dtype`` if the codec supports it (float32, bfloat16, float16).

    Raises:
      TypeError: any other dtype (the message names ``what``).
    """
    dt = np.dtype(dtype)
    if dt not in _SUPPORTED:
        raise TypeError(f"{what} must be float32, bfloat16 or float16, got {dt}")
    return dt


def concrete_error_bound(error_bound, what: str = "error_bound") -> np.ndarray | None:
    """The bound as float64 numpy when it is concrete, None when traced.

    Raises:
      ValueError: a concrete bound with a negative or non-finite value.
    """
    try:
        concrete = np.asarray(error_bound, dtype=np.float64)
    except (TypeError, jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None
    if not np.all(np.isfinite(concrete)) or np.any(concrete < 0):
        raise ValueError(f"{what} must be finite and >= 0, got {error_bound}")
    return concrete


def _check_error_bound(error_bound, batch_shape: tuple[int, ...]) -> jax.Array:
    """Broadcasts the bound to one float32 per chunk; checks concrete values eagerly."""
    concrete_error_bound(error_bound)
    eb = jnp.asarray(error_bound, dtype=jnp.float32)
    try:
        return jnp.broadcast_to(eb, batch_shape)
    except ValueError:
        raise ValueError(
            f"error_bound of shape {eb.shape} does not broadcast to the chunk grid "
            f"{batch_shape} (the input's leading dimensions)"
        ) from None


def compress(
    x: jax.Array,
    error_bound,
    *,
    mode: str = "rel",
    codec: str = "auto",
    capacity: int | None = None,
    min_error_bound: float | None = None,
):
    """Compresses each chunk ``x[..., rows, dim]`` into a frame with a hard error bound.

    Per chunk: quantization without prediction (codes ``q = rint((x - base) / (2 eb_abs))``,
    ``base`` the chunk's minimum or, where its range contains zero, the multiple of the step just
    below it, so that zero decodes to zero), then the form ``codec`` names (see
    :data:`jax_lossy_comm.CODECS`). Every finite value decodes within ``eb_abs``; values the
    quantizer cannot honour (NaN, Inf, float rounding at the edge) are stored exactly as outliers;
    a constant chunk costs a header only.

    Args:
      x: ``float32 | bfloat16 | float16 [..., rows, dim]``; leading dims are chunks.
      error_bound: scalar or array broadcastable to ``x.shape[:-2]``, float; may be traced
        (changing it does not recompile). ``mode="rel"``: ``eb_abs = error_bound * (max - min)``
        over the chunk (SZ's REL mode, as in the paper); ``mode="abs"``: ``eb_abs = error_bound``.
        Every finite value comes back, in ``x``'s dtype, within ``eb_abs`` computed in float64
        (the stored float32 bound is rounded toward zero; bfloat16/float16 chunks leave room for
        the rounding to their dtype). A negative or non-finite traced bound stores the chunk raw
        (lossless).
      mode: ``"rel"`` or ``"abs"`` (static).
      codec: ``"auto" | "raw" | "fixed" | "dedup" | "entropy"`` (static). Without the
        compiled extension (:func:`jax_lossy_comm.implementations`) the pure-jax reference
        codec writes raw and fixed-rate frames only: ``"auto"`` picks the smaller of them, and
        ``"dedup"``/``"entropy"`` write the fixed-rate frame with a ``RuntimeWarning`` at
        trace time (the frames stay valid and within the bound; set
        ``JLC_REQUIRE_EXTENSION=1`` to refuse to run without the extension).
      capacity: static bytes per frame; default :func:`frame_capacity` of the shape, dtype,
        codec and ``min_error_bound``.
      min_error_bound: static smallest REL bound the traced ``error_bound`` will take; sizes the
        fixed-rate capacity (required for ``codec="fixed"`` unless ``capacity`` is given).

    Returns:
      ``(frames uint8[..., capacity], nbytes int32[...])``. Bytes past ``nbytes`` are zero. A
      frame that does not fit in ``capacity`` is never truncated: its ``nbytes`` is the negative
      of the size it needs and its bytes are zero (status ``1``, overflow).

    Raises:
      TypeError: an unsupported dtype (not float32, bfloat16 or float16).
      ValueError: rank < 2, an unknown mode or codec, a concrete negative or non-finite
        error bound, a capacity too small for any header, a chunk over 2 GiB
        (``frame.MAX_FRAME_BYTES``), or a missing ``min_error_bound`` for ``codec="fixed"``.

    Examples:
      Three chunks ``[256, 16]``, REL bound 0.01 (``max - min = 2``: ``eb_abs = 0.02``):

      >>> import jax.numpy as jnp
      >>> import jax_lossy_comm as jlc
      >>> x = jnp.sin(jnp.arange(3 * 256 * 16, dtype=jnp.float32)).reshape(3, 256, 16)
      >>> frames, nbytes = jlc.compress(x, 0.01, min_error_bound=0.01)
      >>> frames.shape, frames.dtype, nbytes.tolist()  # 16 KiB chunks in ~2.8 KiB frames
      ((3, 3104), dtype('uint8'), [2873, 2874, 2874])
      >>> x_hat = jlc.decompress(frames, nbytes, shape=(256, 16))
      >>> bool(jnp.abs(x_hat - x).max() <= 0.01 * 2)
      True

    References:
      Feng et al., SC24, arXiv 2407.04272, sec. 4 (quantization without prediction, REL
      bound); S. Di, F. Cappello, "Fast Error-bounded Lossy HPC Data Compression with SZ",
      IPDPS 2016 (REL mode).
    """
    x = jnp.asarray(x)
    dt = check_dtype(x.dtype, "x")
    if x.ndim < 2:
        raise ValueError(f"x must have shape [..., rows, dim], got {x.shape}")
    if mode not in MODES:
        raise ValueError(f"mode must be 'rel' or 'abs', got {mode!r}")
    if codec not in CODECS:
        raise ValueError(f"codec must be one of {sorted(CODECS)}, got {codec!r}")
    if min_error_bound is not None:
        frame.check_min_error_bound(min_error_bound)
    frame.check_chunk_size(x.shape[-2], x.shape[-1], dt)
    if capacity is None:
        capacity = frame_capacity(x.shape, dt, codec, min_error_bound, mode)
    capacity = int(capacity)
    if capacity > frame.MAX_FRAME_BYTES:
        raise ValueError(f"capacity {capacity} exceeds {frame.MAX_FRAME_BYTES} bytes")
    if capacity < frame.header_bytes(x.shape[-2], x.shape[-1]):
        raise ValueError(f"capacity {capacity} is smaller than a frame header")
    eb = _check_error_bound(error_bound, x.shape[:-2])
    return compress_checked(x, eb, mode=mode, codec=codec, capacity=capacity)


def compress_checked(x: jax.Array, eb: jax.Array, *, mode: str, codec: str, capacity: int):
    """:func:`compress` after its checks: the one ``compress`` FFI call (``_ffi.TARGETS``).

    For callers that validated the settings once (the exchange's
    :class:`jax_lossy_comm.FrameCodec`): ``x`` a supported ``[..., rows, dim]`` array, ``eb``
    ``float32`` of shape ``x.shape[:-2]``, ``mode``/``codec`` valid names, ``capacity`` an int
    in range. Returns what :func:`compress` returns, typed like ``x`` and ``eb``.
    """
    batch = x.shape[:-2]
    if not _ffi.available():
        from jax_lossy_comm import reference

        if codec in ("dedup", "entropy"):
            what, fix = _ffi.extension_problem(_ffi.IMPORT_ERROR, _ffi.EXTENSION_FOUND)
            warnings.warn(
                f"jax_lossy_comm: codec={codec!r} needs the compiled extension, which is not "
                "available; the pure-jax reference codec writes fixed-rate frames instead "
                f"(valid and within the bound, but larger): {what}; to use it, {fix}",
                RuntimeWarning,
                stacklevel=3,
            )

        out = reference.compress(x, eb, mode=mode, codec=codec, capacity=capacity)
        return typed_like(out, x, eb)
    _ffi.check_platform()
    call = jax.ffi.ffi_call(
        _ffi.TARGETS["compress"],
        (
            jax.ShapeDtypeStruct(batch + (capacity,), jnp.uint8),
            jax.ShapeDtypeStruct(batch, jnp.int32),
        ),
        vmap_method="broadcast_all",
    )
    out = call(x, eb, mode=np.int32(MODES[mode]), codec=np.int32(CODECS[codec]))
    return typed_like(out, x, eb)


def _chunk_shape(frames: jax.Array, shape: Sequence[int]) -> tuple[int, int]:
    shape = tuple(int(s) for s in shape)
    lead = tuple(frames.shape[:-1])
    if any(s < 0 for s in shape):
        raise ValueError(f"shape must have sizes >= 0, got {shape}")
    if len(shape) == 2:
        return shape
    if len(shape) == len(lead) + 2 and shape[:-2] == lead:
        return shape[-2:]
    raise ValueError(
        f"shape must be (rows, dim) or frames.shape[:-1] + (rows, dim) = {lead} + "
        f"(rows, dim), got {shape}"
    )


def _check_frames(frames, nbytes):
    frames, nbytes = jnp.asarray(frames), jnp.asarray(nbytes)
    if frames.dtype != jnp.uint8 or frames.ndim < 1:
        raise TypeError(f"frames must be uint8[..., capacity], got {frames.dtype}{frames.shape}")
    if nbytes.dtype != jnp.int32 or nbytes.shape != frames.shape[:-1]:
        raise TypeError(
            f"nbytes must be int32{frames.shape[:-1]}, got {nbytes.dtype}{nbytes.shape}"
        )
    return frames, nbytes


def decompress_with_status(
    frames: jax.Array,
    nbytes: jax.Array,
    *,
    shape: Sequence[int],
    dtype=jnp.float32,
    fixed_rate: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Decodes frames made by :func:`compress` (on any platform) and reports each frame's status.

    Args:
      frames: ``uint8[..., capacity]``.
      nbytes: ``int32[...]`` byte counts (negative: overflow).
      shape: chunk shape ``(rows, dim)`` (or the full output shape); static.
      dtype: output dtype, the input dtype of ``compress`` (static).
      fixed_rate: static; True declares every frame fixed-rate or raw (``compress`` with
        ``codec="fixed"`` or ``"raw"``): the CUDA decoder then runs one kernel and asks for
        no dictionary workspace. With the compiled codec (CPU and CUDA) a frame of another
        form decodes to NaN with status ``UNSUPPORTED_FORM`` (10); the pure-jnp reference
        (no extension) ignores the flag and decodes every form.

    Returns:
      ``(x_hat, status)``: ``x_hat [..., rows, dim]`` of ``dtype`` and ``status int32[...]``
      (0 valid; see :data:`jax_lossy_comm.STATUS`). A frame that is malformed,
      truncated, corrupt or of another shape decodes to NaN, never to garbage.

    Raises:
      TypeError: ``frames`` or ``nbytes`` of the wrong dtype or shape, or an unsupported
        ``dtype``.
      ValueError: a ``shape`` with a negative size, or neither ``(rows, dim)`` nor
        ``frames.shape[:-1] + (rows, dim)``.

    Examples:
      >>> import jax.numpy as jnp
      >>> import jax_lossy_comm as jlc
      >>> x = jnp.linspace(-1.0, 1.0, 2 * 8 * 4, dtype=jnp.float32).reshape(2, 8, 4)
      >>> frames, nbytes = jlc.compress(x, 0.05)
      >>> x_hat, status = jlc.decompress_with_status(frames, nbytes, shape=(8, 4))
      >>> x_hat.shape, status.tolist(), bool(jnp.abs(x_hat - x).max() <= 0.05 * 1.0)
      ((2, 8, 4), [0, 0], True)
      >>> bad = frames.at[1, 0].set(0)  # a corrupt magic byte in the second frame
      >>> x_bad, status = jlc.decompress_with_status(bad, nbytes, shape=(8, 4))
      >>> status.tolist(), bool(jnp.isnan(x_bad[1]).all()), bool((x_bad[0] == x_hat[0]).all())
      ([0, 3], True, True)
    """
    frames, nbytes = _check_frames(frames, nbytes)
    rows, dim = _chunk_shape(frames, shape)
    dt = check_dtype(dtype, "dtype")
    if not _ffi.available():
        from jax_lossy_comm import reference

        x, status = reference.decompress(frames, nbytes, shape=(rows, dim), dtype=dt)
    else:
        _ffi.check_platform()
        call = jax.ffi.ffi_call(
            _ffi.TARGETS["decompress"],
            (
                jax.ShapeDtypeStruct(nbytes.shape + (rows, dim), dt),
                jax.ShapeDtypeStruct(nbytes.shape, jnp.int32),
            ),
            vmap_method="broadcast_all",
        )
        attrs = {"fixed_rate": np.int32(1)} if fixed_rate else {}
        x, status = call(frames, nbytes, **attrs)
    return typed_like((x, status), frames, nbytes)


def decompress(
    frames: jax.Array,
    nbytes: jax.Array,
    *,
    shape: Sequence[int],
    dtype=jnp.float32,
    return_status: bool = False,
    fixed_rate: bool = False,
):
    """Decodes frames made by :func:`compress` (on any platform) back to values.

    Args:
      frames: ``uint8[..., capacity]``.
      nbytes: ``int32[...]`` byte counts (negative: overflow).
      shape: chunk shape ``(rows, dim)`` (or the full output shape); static.
      dtype: output dtype, the input dtype of ``compress`` (static).
      return_status: deprecated (a DeprecationWarning): True returns ``(x_hat, status)``;
        call :func:`decompress_with_status` for the status.
      fixed_rate: static; True declares every frame fixed-rate or raw (as
        :func:`decompress_with_status`: no dictionary workspace on CUDA; other forms NaN).

    Returns:
      ``x_hat [..., rows, dim]`` of ``dtype``. A frame that is malformed, truncated, corrupt
      or of another shape decodes to NaN, never to garbage (:func:`decompress_with_status`
      tells which).

    Raises:
      TypeError: ``frames`` or ``nbytes`` of the wrong dtype or shape, or an unsupported
        ``dtype``.
      ValueError: a ``shape`` with a negative size, or neither ``(rows, dim)`` nor
        ``frames.shape[:-1] + (rows, dim)``.

    Examples:
      >>> import jax.numpy as jnp
      >>> import jax_lossy_comm as jlc
      >>> x = jnp.linspace(-1.0, 1.0, 2 * 8 * 4, dtype=jnp.float32).reshape(2, 8, 4)
      >>> frames, nbytes = jlc.compress(x, 0.05)
      >>> x_hat = jlc.decompress(frames, nbytes, shape=(8, 4))
      >>> x_hat.shape, bool(jnp.abs(x_hat - x).max() <= 0.05 * 1.0)
      ((2, 8, 4), True)
    """
    x, status = decompress_with_status(
        frames, nbytes, shape=shape, dtype=dtype, fixed_rate=fixed_rate
    )
    if return_status:
        warnings.warn(
            "decompress(return_status=True) is deprecated; call decompress_with_status(...), "
            "which returns (x_hat, status)",
            DeprecationWarning,
            stacklevel=2,
        )
        return x, status
    return x


def frame_status(
    frames: jax.Array, nbytes: jax.Array, *, shape: Sequence[int], dtype=jnp.float32
) -> jax.Array:
    """Checks frames fully without writing values: ``int32[...]``, 0 = valid.

    Args as :func:`decompress`; the status codes are in :data:`jax_lossy_comm.STATUS`
    (1 overflow, 2 truncated, 7 checksum, 8 corrupt, ...).

    Raises:
      TypeError: ``frames`` or ``nbytes`` of the wrong dtype or shape, or an unsupported
        ``dtype``.
      ValueError: a ``shape`` with a negative size, or neither ``(rows, dim)`` nor
        ``frames.shape[:-1] + (rows, dim)``.

    Examples:
      >>> import jax.numpy as jnp
      >>> import jax_lossy_comm as jlc
      >>> frames, nbytes = jlc.compress(jnp.ones((2, 8, 4)), 0.01)
      >>> jlc.frame_status(frames, nbytes, shape=(8, 4)).tolist()
      [0, 0]
      >>> status = jlc.frame_status(frames, nbytes - 1, shape=(8, 4))  # one byte short
      >>> status.tolist(), jlc.describe_status(status)[0]
      ([7, 7], 'checksum mismatch')
    """
    frames, nbytes = _check_frames(frames, nbytes)
    rows, dim = _chunk_shape(frames, shape)
    dt = check_dtype(dtype, "dtype")
    if not _ffi.available():
        return decompress_with_status(frames, nbytes, shape=(rows, dim), dtype=dt)[1]
    _ffi.check_platform()
    call = jax.ffi.ffi_call(
        _ffi.TARGETS["frame_status"],
        jax.ShapeDtypeStruct(nbytes.shape, jnp.int32),
        vmap_method="broadcast_all",
    )
    status = call(
        frames, nbytes, rows=np.int64(rows), dim=np.int64(dim), dtype=np.int32(DTYPES[dt])
    )
    return typed_like(status, frames, nbytes)
