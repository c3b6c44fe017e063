"""The JAX entries of the registry: any jitted JAX codec (``jax_codec``), the JAX casts, the
library's TorchRec/FBGEMM baselines (``JAX_QCOMM``) and the library's codec, one adapter
(``library_codecs``, its forms ``LIBRARY_FORMS`` and frame capacities ``CAPACITIES``).

JAX and the library are imported when the entries are made, inside a guard: without them the
entries are ``unavailable`` with the reason. Importing this module needs only numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bench.codecs.codec_entry import Codec, Shape, import_reason, package_version, unavailable


# --------------------------------------------------------------------------------------------
# JAX casts (jitted) and a helper for any jittable JAX codec
# --------------------------------------------------------------------------------------------
def jax_codec(
    name: str,
    family: str,
    error_bounded: bool,
    compress_fn: Callable[..., Any],
    decompress_fn: Callable[..., Any],
    *,
    nbytes: Callable[[Any], int],
    package: str = "",
    notes: str = "",
    eb_traced: bool = True,
) -> Codec:
    """Wrap jittable JAX functions as a Codec (the casts use it).

    Args:
      compress_fn: `(x: f32[rows, dim], eb_abs: f32[]) -> blob pytree` if `eb_traced`, else
        `(x) -> blob`. Jitted here; eb_abs is passed as a traced float32 scalar so changing
        the bound does not recompile.
      decompress_fn: `(blob) -> f32[rows, dim]`; the shape must be static inside, so it is
        called as `decompress_fn(blob, shape)` with `shape` static under jit.
      nbytes: `(blob) -> int` bytes on the wire (e.g. the sum of the int32 byte counts).

    The input is moved to the device by `prepare` (untimed); outputs are awaited with
    `block_until_ready` by the timing helper.
    """
    import jax
    import jax.numpy as jnp

    if eb_traced:
        cfn = jax.jit(compress_fn)
        compress = lambda x, eb: cfn(x, jnp.float32(eb))  # noqa: E731
    else:
        cfn = jax.jit(compress_fn)
        compress = lambda x, eb: cfn(x)  # noqa: E731
    dfn = jax.jit(decompress_fn, static_argnums=1)
    return Codec(
        name,
        family,
        error_bounded,
        True,
        package=package,
        compress=compress,
        decompress=lambda b, s: dfn(b, tuple(s)),
        nbytes=nbytes,
        prepare=lambda x: jax.device_put(np.asarray(x)),
        to_numpy=lambda y: np.asarray(jax.device_get(y), dtype=np.float32),
        notes=notes,
    )


def jax_cast_peers() -> list[Codec]:
    names = (("jax-bf16", "bfloat16"), ("jax-fp8-e4m3", "float8_e4m3fn"))
    try:
        import jax.numpy as jnp
    except Exception as e:  # noqa: BLE001
        return [unavailable(n, "cast", False, import_reason(e), "jax") for n, _ in names]
    out = []
    for name, dt in names:
        try:
            dtype = getattr(jnp, dt)
        except AttributeError as e:
            out.append(unavailable(name, "cast", False, import_reason(e), package_version("jax")))
            continue
        out.append(
            jax_codec(
                name,
                "cast",
                False,
                lambda x, _d=dtype: x.astype(_d),
                lambda y, shape: y.astype(jnp.float32).reshape(shape),
                nbytes=lambda b: int(b.size * b.dtype.itemsize),
                package=f"{package_version('jax')}, {package_version('jaxlib')}",
                eb_traced=False,
                notes=f"jit(x.astype({dt})) and back to float32 (round to nearest even)",
            )
        )
    return out


#: jax_lossy_comm's TorchRec/FBGEMM baselines: entry name -> their name in the library's codec
#: factory (``jax_lossy_comm.get_comm_codec``, ``codec_factory.BASELINES``; written out here
#: so that importing this module needs no JAX).
JAX_QCOMM = {f"jax-qcomm-{n}": n for n in ("int8-rowwise", "bf16", "fp16", "fp8-rowwise", "mx4")}


def jax_qcomm_peers() -> list[Codec]:
    """The library's quantized-comm baselines (``jax_lossy_comm.CommCodec`` objects), each
    input ``[rows, dim]`` coded as one peer's block (``encode`` of ``[1, rows, dim]``)."""
    try:
        import jax_lossy_comm as jlc
    except Exception as e:  # noqa: BLE001
        return [unavailable(n, "jax-qcomm", False, import_reason(e)) for n in JAX_QCOMM]
    out = []
    for name, precision in JAX_QCOMM.items():
        codec = jlc.get_comm_codec(precision)
        out.append(
            jax_codec(
                name,
                "jax-qcomm",
                False,
                lambda x, _c=codec: _c.encode(x[None], None, 0)[0],
                lambda w, shape, _c=codec: _c.decode(w, None, shape=shape, dtype=np.float32)[0],
                nbytes=lambda b: int(b.size * b.dtype.itemsize),
                package=package_version("jax_lossy_comm"),
                eb_traced=False,
                notes=f"jax_lossy_comm.{type(codec).__name__}() (TorchRec/FBGEMM definition), jitted",
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# The library: jax_lossy_comm's codec, one adapter
# --------------------------------------------------------------------------------------------
#: Library codec forms benchmarked by default: the automatic choice, the fixed-rate codes
#: (static size, what the dense exchange sends), the dictionary of distinct code rows, and
#: dictionary + Huffman.
LIBRARY_FORMS = ("auto", "fixed", "dedup", "entropy")
#: How the library entries size the static frame capacity: "raw" = the raw frame size (always
#: fits), "bound" = sized by the error bound (the fixed-rate size for auto and fixed, as the
#: dense exchange sizes it from its ``min_error_bound``; raw for the other forms).
CAPACITIES = ("raw", "bound")


def rel_bound_within(x_min: float, x_max: float, eb_abs: float) -> float:
    """REL bound whose float32 `eb_abs` (as the library computes it) is <= `eb_abs`.

    The library computes, in float32, `range = max - min` and `eb_abs32 = eb_rel * range`
    (xla_ffi/quant.h, plan_quant). The harness checks `max |x - x_hat| <= eb_abs` in float64, so the
    REL bound passed is the largest float32 `eb_rel` with `float32(eb_rel * range) <= eb_abs`
    (it differs from `eb_abs / range` by at most a few float32 ulps).

    Returns:
      float eb_rel (0.0 for a constant input or a non-positive bound).
    """
    rng = np.float32(np.float32(x_max) - np.float32(x_min))
    if not (rng > 0) or not (eb_abs > 0):
        return 0.0
    r = np.float32(eb_abs / float(rng))
    while float(np.float32(r * rng)) > eb_abs:
        r = np.nextafter(r, np.float32(0))
    return float(r)


def library_codecs(forms: Sequence[str] = LIBRARY_FORMS, capacity: str = "raw") -> list[Codec]:
    """Entries for jax_lossy_comm's codec, one per `codec=` form, jitted, REL mode.

    Calls `jax_lossy_comm.compress(x, eb_rel, mode="rel", codec=form, capacity=...)` ->
    (frames uint8[..., capacity], nbytes int32[...]) and `jax_lossy_comm.decompress(frames,
    nbytes, shape=(rows, dim))`; each `[rows, dim]` of the input is one chunk, as the exchange
    calls it (a leading batch dimension gives a batch of chunks in one call). The harness's
    absolute bound is turned into the REL bound the library takes (`rel_bound_within`: never
    looser than eb_abs); it is a traced scalar on the device (no recompile per bound). The
    compress time includes the library's own range scan. Wire bytes are the sum of `|nbytes|`
    (what a variable-size exchange moves; the dense exchange moves the static capacity).

    Args:
      forms: names in `jax_lossy_comm.CODECS`.
      capacity: one of `CAPACITIES` (see there); "raw" is what peers.json was measured with,
        "bound" what codec.json was measured with.

    Returns:
      one entry per form, named `jlc-{form}`; if the library cannot be imported, one skipped
      entry per form with the reason.

    Raises:
      ValueError: `capacity` not in `CAPACITIES`.
    """
    if capacity not in CAPACITIES:
        raise ValueError(f"capacity must be one of {CAPACITIES}, got {capacity!r}")
    try:
        import jax
        import jax.numpy as jnp

        import jax_lossy_comm as jlc

        jlc.compress, jlc.decompress, jlc.frame_capacity  # noqa: B018 - the API must be there
    except Exception as e:  # noqa: BLE001
        return [unavailable(f"jlc-{f}", "jax_lossy_comm", True, import_reason(e)) for f in forms]
    package = package_version("jax_lossy_comm")

    def prepare(x: np.ndarray):
        fin = x[np.isfinite(x)]
        lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (0.0, 0.0)
        return jax.device_put(np.ascontiguousarray(x, dtype=np.float32)), lo, hi

    def nbytes(blob) -> int:
        return int(np.sum(np.abs(np.asarray(blob[1]))))

    def entry(form: str) -> Codec:
        def frame_bytes(shape: Shape, eb_rel: float) -> int:
            sized = capacity == "bound" and form in ("auto", "fixed") and eb_rel > 0
            if sized:
                return jlc.frame_capacity(shape, np.float32, form, eb_rel)
            return jlc.frame_capacity(shape, np.float32, "raw")

        cfn = jax.jit(
            lambda x, eb, cap: jlc.compress(x, eb, mode="rel", codec=form, capacity=cap),
            static_argnums=2,
        )
        dfn = jax.jit(
            lambda f, n, shape: jlc.decompress(f, n, shape=shape, dtype=jnp.float32),
            static_argnums=2,
        )
        bounds: dict[tuple, tuple[Any, int]] = {}  # (lo, hi, eb_abs, shape) -> (eb_rel, cap)

        def compress(xp, eb_abs):
            x, lo, hi = xp
            key = (lo, hi, eb_abs, x.shape)
            if key not in bounds:  # untimed after the warm-up: a device scalar, one capacity
                r = rel_bound_within(lo, hi, eb_abs)
                bounds[key] = (jax.device_put(np.float32(r)), frame_bytes(x.shape, r))
            eb, cap = bounds[key]
            return cfn(x, eb, cap)

        return Codec(
            f"jlc-{form}",
            "jax_lossy_comm",
            True,
            True,
            package=package,
            compress=compress,
            decompress=lambda b, s: dfn(b[0], b[1], tuple(s[-2:])),
            nbytes=nbytes,
            prepare=prepare,
            to_numpy=lambda y: np.asarray(jax.device_get(y), dtype=np.float32),
            notes=f"jax_lossy_comm.compress(codec={form!r}, mode='rel') under jit, one chunk "
            f"per [rows, dim], eb_rel traced, capacity {capacity}",
        )

    return [
        entry(f)
        if f in jlc.CODECS
        else unavailable(f"jlc-{f}", "jax_lossy_comm", True, f"unknown codec {f!r}", package)
        for f in forms
    ]
