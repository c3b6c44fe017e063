"""Codec primitives: error bound, edge cases, sizes, jit/vmap behaviour, bad input."""

from __future__ import annotations

import os
import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from support import DUMPS, EIGHT_DEVICES, load_dump, requires_dumps

import jax_lossy_comm as lc
from jax_lossy_comm import frame

DTYPES = [np.float32, ml_dtypes.bfloat16, np.float16]
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def roundtrip(x, eb, **kw):
    frames, nbytes = lc.compress(x, eb, **kw)
    y, status = lc.decompress_with_status(frames, nbytes, shape=x.shape[-2:], dtype=x.dtype)
    return np.asarray(frames), np.asarray(nbytes), np.asarray(y), np.asarray(status)


def expected_eb_abs(chunk: np.ndarray, eb: float, mode: str) -> np.float64:
    """The bound as the user states it, in float64: REL ``eb * (max - min)``
    of the chunk's finite values, ABS ``eb`` (the float32 the codec receives)."""
    v = chunk.astype(np.float64).ravel()
    v = v[np.isfinite(v)]
    e = np.float64(np.float32(eb))
    return e * (v.max() - v.min()) if mode == "rel" and v.size else e * (mode == "abs")


def assert_within_bound(x, y, infos, eb, mode):
    """Every finite value within the stated bound (float64); non-finite values bit-exact. The
    frame's stored half step is at most the bound (equal to the float32 product or less than
    three float32 steps below it for float32 chunks, as xla_ffi/quant.h's rel_bound derives;
    lower for half types)."""
    nchunks = int(np.prod(x.shape[:-2], dtype=np.int64))
    xs = x.reshape(nchunks, *x.shape[-2:])
    ys = y.reshape(nchunks, *x.shape[-2:])
    for xc, yc, info in zip(xs, ys, infos):
        assert info.form in ("raw", "quantized"), info
        fin = np.isfinite(xc.astype(np.float32))
        if info.form == "raw":
            assert xc.tobytes() == yc.tobytes()
            continue
        bound = expected_eb_abs(xc, eb, mode)
        assert info.eb_abs <= bound
        if xc.dtype == np.float32:
            assert bound - info.eb_abs < 3 * np.spacing(np.float32(bound))
        err = np.abs(xc.astype(np.float64)[fin] - yc.astype(np.float64)[fin])
        assert np.all(err <= bound), (err.max(), bound)
        bits = np.dtype(xc.dtype).itemsize * 8
        view = np.dtype(f"u{bits // 8}")
        assert np.array_equal(xc[~fin].view(view), yc[~fin].view(view))


@st.composite
def chunks(draw):
    dtype = draw(st.sampled_from(DTYPES))
    batch = draw(st.lists(st.integers(0, 3), min_size=0, max_size=2))
    rows = draw(st.integers(0, 40))
    dim = draw(st.integers(0, 24))
    scale = 10.0 ** draw(st.integers(-30, 30 if dtype == np.float32 else 3))
    offset = draw(st.sampled_from([0.0, 1.0, -1e3, 1e6]))
    hot = draw(st.integers(1, 6))  # distinct rows to draw from: duplicates like hot ids
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    base = offset + scale * rng.standard_normal((hot, dim))
    pick = rng.integers(0, hot, size=(*batch, rows))
    x = base[pick]
    fresh = rng.random(x.shape) < draw(st.sampled_from([0.0, 0.1, 1.0]))
    x = np.where(fresh, offset + scale * rng.standard_normal(x.shape), x)
    special = rng.random(x.shape)
    x = np.where(special < 0.02, np.nan, x)
    x = np.where((special >= 0.02) & (special < 0.03), np.inf, x)
    x = np.where((special >= 0.03) & (special < 0.04), -np.inf, x)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@SETTINGS
@given(
    x=chunks(),
    eb=st.sampled_from([0.0, 1e-4, 0.01, 0.03, 0.05, 0.3]),
    mode=st.sampled_from(["rel", "abs"]),
    codec=st.sampled_from(["auto", "raw", "fixed", "dedup", "entropy"]),
)
def test_error_bound_holds_for_every_codec(x, eb, mode, codec):
    cap = frame.raw_frame_bytes(x.shape[-2], x.shape[-1], x.dtype)  # always fits
    frames, nbytes, y, status = roundtrip(x, eb, mode=mode, codec=codec, capacity=cap)
    assert frames.shape == x.shape[:-2] + (cap,)
    assert np.all(status == 0) and np.all(nbytes > 0)
    assert_within_bound(x, y, lc.frame_info(frames, nbytes), eb, mode)
    # bytes past nbytes are zero (XLA does not zero outputs)
    flat = frames.reshape(-1, cap)
    for row, n in zip(flat, nbytes.reshape(-1)):
        assert not row[n:].any()


@SETTINGS
@given(x=chunks(), eb=st.sampled_from([0.01, 0.05]))
def test_auto_is_never_larger_than_any_single_form(x, eb):
    sizes = {
        c: roundtrip(x, eb, codec=c, capacity=frame.raw_frame_bytes(*x.shape[-2:], x.dtype))[1]
        for c in ("auto", "raw", "fixed", "dedup", "entropy")
    }
    for c in ("raw", "fixed", "dedup", "entropy"):
        assert np.all(sizes["auto"] <= sizes[c]), c


def test_constant_chunk_costs_a_header():
    x = np.full((2, 64, 16), 0.7, np.float32)
    frames, nbytes, y, status = roundtrip(x, 0.01)
    info = lc.frame_info(frames, nbytes)[0]
    assert info.form == "quantized" and info.bits == 0 and info.eb_abs == 0.0
    assert int(nbytes[0]) == frame.header_bytes(64, 16) + 8 + 1  # eb, base, zero outliers
    assert np.array_equal(y, x)


def test_empty_chunks():
    for shape in [(0, 8), (8, 0), (3, 0, 0), (0, 4, 4)]:
        x = np.zeros(shape, np.float32)
        frames, nbytes, y, status = roundtrip(x, 0.01)
        assert y.shape == shape and np.all(status == 0)
        raw = frame.raw_frame_bytes(shape[-2], shape[-1], np.float32)
        assert frames.shape == shape[:-2] + ((raw + 15) // 16 * 16,)  # capacity: 16-byte units


def test_non_finite_values_round_trip_bit_exactly():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 16)).astype(np.float32)
    payload_nan = np.array([0x7FC01234, 0xFFA00001], np.uint32).view(np.float32)
    x[0, :2] = payload_nan
    x[1, 3], x[2, 5], x[3, 7] = np.inf, -np.inf, -0.0
    for codec in ("auto", "fixed", "dedup", "entropy"):
        frames, nbytes, y, status = roundtrip(x, 0.01, codec=codec, capacity=4096)
        assert status == 0
        fin = np.isfinite(x)
        assert np.array_equal(x[~fin].view(np.uint32), y[~fin].view(np.uint32))
        assert lc.frame_info(frames, nbytes)[0].n_outliers == 4  # two NaN, +Inf, -Inf


def test_all_nan_chunk_is_stored_raw():
    x = np.full((4, 4), np.nan, np.float32)
    frames, nbytes, y, status = roundtrip(x, 0.01)
    assert lc.frame_info(frames, nbytes)[0].form == "raw"
    assert np.array_equal(x.view(np.uint32), y.view(np.uint32))


def test_offset_data_finer_than_float_spacing_uses_outliers_not_violations():
    # eb_abs is far below the float32 spacing at 1e4: quantization cannot honour it
    x = (1e4 + 1e-3 * np.random.default_rng(1).standard_normal((16, 8))).astype(np.float32)
    frames, nbytes, y, status = roundtrip(x, 1e-6, mode="abs")
    info = lc.frame_info(frames, nbytes)[0]
    err = np.abs(x.astype(np.float64) - y.astype(np.float64))
    assert np.all(err <= 1e-6 if info.form == "quantized" else err == 0)


@pytest.mark.parametrize("eb", [0.01, 0.03, 0.05, 0.1])
@pytest.mark.parametrize("shape", [(256, 64), (16, 32), (1, 7)])
def test_fixed_rate_size_is_static(eb, shape):
    x = np.random.default_rng(2).standard_normal((5, *shape)).astype(np.float32)
    cap = lc.frame_capacity(shape, np.float32, "fixed", min_error_bound=eb)
    fixed = frame.fixed_frame_bytes(*shape, frame.rel_code_bits(eb))
    frames, nbytes, y, status = roundtrip(x, eb, codec="fixed", capacity=cap)
    assert np.all(nbytes == fixed) and np.all(status == 0)
    assert cap == (fixed + 15) // 16 * 16  # capacities come in 16-byte units
    # "auto" sized by the same bound never needs more
    frames, nbytes, y, status = roundtrip(x, eb, min_error_bound=eb)
    raw = frame.raw_frame_bytes(*shape, np.float32)
    assert frames.shape[-1] == (min(fixed, raw) + 15) // 16 * 16
    assert np.all((nbytes > 0) & (nbytes <= frames.shape[-1]))


def test_overflow_is_reported_not_truncated():
    x = np.random.default_rng(3).standard_normal((3, 64, 16)).astype(np.float32)
    cap = lc.frame_capacity(x.shape, np.float32, "fixed", min_error_bound=0.05)
    frames, nbytes, y, status = roundtrip(x, 0.001, codec="fixed", capacity=cap)  # needs more bits
    assert np.all(nbytes < 0) and np.all(-nbytes > cap)
    assert np.all(status == frame.STATUS_OVERFLOW)
    assert not frames.any() and np.isnan(y).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduced_precision_inputs_decode_to_their_dtype(dtype):
    x = np.random.default_rng(4).standard_normal((64, 32)).astype(dtype)
    frames, nbytes, y, status = roundtrip(x, 0.01)
    assert y.dtype == np.dtype(dtype) and status == 0
    assert_within_bound(x, y, lc.frame_info(frames, nbytes), 0.01, "rel")


@requires_dumps
@pytest.mark.parametrize(
    "name,min_ratio",
    [
        ("terabyte_table01_iter20_2048x64_f32.bin", 21.0),
        ("terabyte_table05_iter20_2048x64_f32.bin", 1000.0),
        ("terabyte_table08_iter20_2048x64_f32.bin", 300.0),
        ("kaggle_table05_iter20_128x32_f32.bin", 1.0),
        ("kaggle_table08_iter20_128x32_f32.bin", 1.0),
    ],
)
def test_real_dumps_ratio_and_bound(name, min_ratio):
    zstandard = pytest.importorskip("zstandard")
    x = load_dump(name)
    frames, nbytes, y, status = roundtrip(x, 0.01)
    assert status == 0
    assert_within_bound(x, y, lc.frame_info(frames, nbytes), 0.01, "rel")
    ratio = x.nbytes / int(nbytes)
    assert ratio >= min_ratio
    # never below int8 quantization codes + zstd level 1 (the simple peer)
    lo, hi = x.min(), x.max()
    codes = np.rint((x - lo) / (2 * 0.01 * (hi - lo))).astype(np.int8)
    peer = len(zstandard.ZstdCompressor(level=1).compress(codes.tobytes()))
    assert int(nbytes) < peer


def test_changing_the_error_bound_does_not_recompile():
    traces = []

    @jax.jit
    def step(x, eb):
        traces.append(1)
        f, n = lc.compress(x, eb)
        return lc.decompress(f, n, shape=x.shape[-2:])

    x = jnp.asarray(np.random.default_rng(5).standard_normal((4, 32, 8)), jnp.float32)
    for eb in [0.01, 0.02, 0.05, 0.1, 0.2]:
        y = step(x, jnp.float32(eb))
        assert float(jnp.max(jnp.abs(y - x))) <= eb * float(x.max() - x.min())
    per_chunk = step(x, jnp.linspace(0.01, 0.04, 4, dtype=jnp.float32))
    assert per_chunk.shape == x.shape
    assert len(traces) == 2  # scalar bound, then per-chunk bound: one trace each


def test_per_chunk_error_bounds():
    x = np.random.default_rng(6).standard_normal((3, 64, 8)).astype(np.float32)
    eb = np.array([0.001, 0.01, 0.1], np.float32)
    frames, nbytes, y, status = roundtrip(x, eb)
    infos = lc.frame_info(frames, nbytes)
    for c in range(3):
        bound = expected_eb_abs(x[c], eb[c], "rel")
        assert bound - 3 * np.spacing(np.float32(bound)) < infos[c].eb_abs <= bound
    assert nbytes[0] > nbytes[1] > nbytes[2]


def test_vmap_matches_batched_call():
    x = jnp.asarray(np.random.default_rng(7).standard_normal((5, 3, 16, 8)), jnp.float32)
    eb = jnp.linspace(0.01, 0.05, 5, dtype=jnp.float32)
    f_v, n_v = jax.vmap(lambda xi, e: lc.compress(xi, e))(x, eb)
    f_b, n_b = lc.compress(x, eb[:, None])
    assert np.array_equal(f_v, f_b) and np.array_equal(n_v, n_b)
    y_v = jax.vmap(lambda f, n: lc.decompress(f, n, shape=(16, 8)))(f_v, n_v)
    assert np.array_equal(y_v, lc.decompress(f_b, n_b, shape=(16, 8)))
    s_v = jax.vmap(lambda f, n: lc.frame_status(f, n, shape=(16, 8)))(f_v, n_v)
    assert not np.asarray(s_v).any()


def test_traced_negative_bound_stores_lossless():
    x = jnp.asarray(np.random.default_rng(8).standard_normal((8, 8)), jnp.float32)
    f, n = jax.jit(lambda x, e: lc.compress(x, e))(x, jnp.float32(-1.0))
    assert lc.frame_info(f, n)[0].form == "raw"
    assert np.array_equal(lc.decompress(f, n, shape=(8, 8)), x)


@pytest.mark.parametrize(
    "bad,exc",
    [
        (dict(error_bound=-0.1), ValueError),
        (dict(error_bound=float("nan")), ValueError),
        (dict(error_bound=np.array([0.1, 0.2, 0.3])), ValueError),  # does not broadcast to (2,)
        (dict(mode="relative"), ValueError),
        (dict(codec="zstd"), ValueError),
        (dict(codec="fixed"), ValueError),  # needs min_error_bound
        (dict(min_error_bound=0.0), ValueError),
        (dict(capacity=4), ValueError),
    ],
)
def test_bad_arguments_raise_clear_errors(bad, exc):
    x = np.zeros((2, 8, 8), np.float32)
    kw = dict(error_bound=0.01)
    kw.update(bad)
    eb = kw.pop("error_bound")
    with pytest.raises(exc):
        lc.compress(x, eb, **kw)


def test_bad_dtypes_and_shapes_raise():
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        lc.compress(np.zeros((4, 4), np.int32), 0.01)
    with pytest.raises(ValueError, match="rows, dim"):
        lc.compress(np.zeros((4,), np.float32), 0.01)
    f, n = lc.compress(np.zeros((2, 4, 4), np.float32), 0.01)
    with pytest.raises(TypeError):
        lc.decompress(f, n.astype(jnp.float32), shape=(4, 4))
    with pytest.raises(ValueError):
        lc.decompress(f, n, shape=(3, 4, 4))


def test_shape_and_dtype_mismatch_give_status():
    x = np.random.default_rng(9).standard_normal((16, 8)).astype(np.float32)
    f, n = lc.compress(x, 0.01)
    assert int(lc.frame_status(f, n, shape=(8, 16))) == 6
    assert int(lc.frame_status(f, n, shape=(16, 8), dtype=jnp.float16)) == 6
    assert int(lc.frame_status(f, n, shape=(16, 8))) == 0


# ---------------------------------------------------------------- malformed frames
def _valid_frames():
    rng = np.random.default_rng(10)
    hot = rng.standard_normal((6, 32)).astype(np.float32)
    x = hot[rng.integers(0, 6, (4, 128))]
    x[1] = rng.standard_normal((128, 32))
    x[2, 5, 7] = np.nan
    out = []
    for codec in ("raw", "fixed", "dedup", "entropy"):
        f, n = lc.compress(
            x, 0.01, codec=codec, capacity=frame.raw_frame_bytes(128, 32, np.float32)
        )
        out.append((np.asarray(f), np.asarray(n)))
    return out


VALID = None


def valid_frames():
    global VALID
    if VALID is None:
        VALID = _valid_frames()
    return VALID


@settings(max_examples=200, deadline=None)
@given(
    which=st.integers(0, 15),
    pos=st.integers(0, 2**20),
    bit=st.integers(0, 7),
    cut=st.integers(-40, 0),
    mode=st.sampled_from(["flip", "truncate", "extend", "garbage"]),
)
def test_corrupt_frames_give_status_and_nan_never_a_crash(which, pos, bit, cut, mode):
    f, n = valid_frames()[which // 4]
    f, n = f[which % 4].copy(), n[which % 4].copy()
    size = int(n)
    if mode == "flip":
        f[pos % size] ^= np.uint8(1 << bit)
    elif mode == "truncate":
        n = np.int32(max(size + cut - 1, 0))
    elif mode == "extend":
        n = np.int32(min(size - cut + 1, f.shape[0]))
        assume(int(n) != size)  # a frame that fills its capacity cannot grow
    else:
        f[:] = np.random.default_rng(pos).integers(0, 256, f.shape[0], dtype=np.uint8)
        f[0], f[1] = frame.MAGIC, (frame.VERSION << 4) | (bit & 1)
        n = np.int32(pos % f.shape[0])
    y, status = lc.decompress_with_status(f, n, shape=(128, 32))
    assert int(status) != 0
    assert np.isnan(np.asarray(y)).all()
    assert int(lc.frame_status(f, n, shape=(128, 32))) == int(status)


def test_status_text_is_available():
    assert lc.describe_status([0, 7]) == [frame.STATUS[0], frame.STATUS[7]]
    assert "unknown" in lc.describe_status([99])[0]


def test_decompress_return_status_is_deprecated_and_still_works():
    x = jnp.linspace(-1.0, 1.0, 3 * 8 * 4, dtype=jnp.float32).reshape(3, 8, 4)
    frames, nbytes = lc.compress(x, 0.05)
    bad = frames.at[2, 0].set(0)  # the third frame's magic byte
    want_x, want_status = lc.decompress_with_status(bad, nbytes, shape=(8, 4))
    assert np.asarray(want_status).tolist() == [0, 0, 3]
    with pytest.warns(DeprecationWarning, match="decompress_with_status"):
        got_x, got_status = lc.decompress(bad, nbytes, shape=(8, 4), return_status=True)
    np.testing.assert_array_equal(np.asarray(got_status), np.asarray(want_status))
    np.testing.assert_array_equal(np.asarray(got_x), np.asarray(want_x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no flag: the values alone, no warning
        plain = lc.decompress(bad, nbytes, shape=(8, 4))
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(want_x))


def test_dumps_fixture_points_at_shared_data():
    if DUMPS is None:
        pytest.skip("../shared/data is absent")
    assert (DUMPS / "manifest.json").is_file()


@pytest.mark.parametrize("mode", ["abs", "rel"])
def test_subnormal_inputs_keep_the_bound(mode):
    # XLA:CPU runs with flush-to-zero; the handler must still see IEEE subnormals
    x = np.array([[1e-39, 3e-39, 5e-39, -2e-40]], np.float32)
    for codec in ("auto", "fixed", "entropy"):
        frames, nbytes, y, status = roundtrip(x, 0.0, mode=mode, codec=codec, capacity=64)
        assert status == 0 and np.array_equal(x.view(np.uint32), y.view(np.uint32)), codec
    frames, nbytes, y, status = roundtrip(x, 0.1, mode=mode, capacity=64)
    assert_within_bound(x, y, lc.frame_info(frames, nbytes), 0.1, mode)


def test_compiled_extension_is_what_runs():
    from jax_lossy_comm import _ffi

    if os.environ.get("JLC_REQUIRE_EXTENSION") != "1" and not _ffi.available():
        pytest.skip(f"extension not built: {_ffi.IMPORT_ERROR}")
    assert _ffi.available()
    f, n = lc.compress(
        np.zeros((4, 4), np.float32) + np.arange(4, dtype=np.float32), 0.01, codec="entropy"
    )
    assert lc.frame_info(f, n)[0].form == "quantized"  # the reference has no entropy form


def test_chunks_over_two_gib_are_refused_up_front():
    with pytest.raises(ValueError, match="2147483647-byte frame limit"):
        lc.frame_capacity((1 << 16, 1 << 14), np.float32)
    f = jnp.zeros((1, 64), jnp.uint8)
    n = jnp.zeros((1,), jnp.int32)
    with pytest.raises(Exception, match="smaller than 2 GiB"):
        jax.block_until_ready(lc.frame_status(f, n, shape=(1 << 30, 1 << 30)))


def test_exchange_rejects_a_concrete_negative_bound():
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    fn = jax.shard_map(
        lambda v: lc.compressed_all_to_all(v, "x", 0, 0, error_bound=-1.0),
        mesh=mesh,
        in_specs=P("x"),
        out_specs=P("x"),
    )
    with pytest.raises(ValueError, match="error_bound must be finite and >= 0"):
        fn(jnp.zeros((4, 8), jnp.float32))


# ------------------------------------------------------------------- inside shard_map (vma)
@pytest.mark.skipif(jax.device_count() < 8, reason=EIGHT_DEVICES)
def test_outputs_are_typed_like_inputs_inside_shard_map():
    """compress, decompress and frame_status return values typed as varying over the axes
    their inputs vary over, so a straight-through round trip written by a user inside
    shard_map gets the exact gradient after a psum (untyped FFI outputs would make the
    psum's transpose sum every device's cotangent: the DESIGN.md pitfall)."""
    from jax.sharding import PartitionSpec as P

    from jax_lossy_comm.vma import varying_axes  # jax.typeof(v).vma

    mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    rows, dim = 16, 8

    @jax.custom_vjp
    def lossy(x):  # decompress(compress(x)), identity gradient (straight-through)
        frames, nbytes = lc.compress(x, 0.01)
        return lc.decompress(frames, nbytes, shape=(rows, dim))

    lossy.defvjp(lambda x: (lossy(x), None), lambda _, g: (g,))
    seen = {}

    def body(x, w):
        frames, nbytes = lc.compress(jax.lax.stop_gradient(x), 0.01)
        status = lc.frame_status(frames, nbytes, shape=(rows, dim))
        x_hat = lc.decompress(frames, nbytes, shape=(rows, dim))
        for name, v in (("frames", frames), ("nbytes", nbytes), ("status", status)):
            seen[name] = varying_axes(v)
        seen["x_hat"] = varying_axes(x_hat)
        return jax.lax.psum(jnp.sum(lossy(x) * w), "i")

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((8 * 2, rows, dim)).astype(np.float32))
    w = jnp.asarray(rng.standard_normal((8 * 2, rows, dim)).astype(np.float32))
    f = jax.shard_map(body, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=P())
    g = jax.jit(jax.grad(f))(x, w)
    assert seen == dict.fromkeys(("frames", "nbytes", "status", "x_hat"), frozenset({"i"}))
    # d/dx sum(lossy(x) * w) = w exactly (straight-through); 8 * w (or the sum over devices)
    # is what the untyped outputs gave.
    np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_decompress_fixed_rate(dtype):
    """``fixed_rate=True`` (static): fixed-rate and raw frames decode to the same values and
    statuses as without it; a dictionary frame decodes to NaN with UNSUPPORTED_FORM (10), on
    the compiled codec and on the reference alike. ``FrameCodec(codec="fixed"/"raw")`` passes
    it (the custom call carries ``fixed_rate = 1``: on CUDA one kernel, no dictionary
    workspace), ``codec="auto"`` does not."""
    x = np.tile(np.linspace(-1.0, 1.0, 16, dtype=np.float32), (3, 8, 1)).astype(dtype)
    x[1, 2, 3] = np.nan
    for codec in ("fixed", "raw"):
        cap = frame.raw_frame_bytes(8, 16, dtype)  # room for the NaN outlier
        f, nb = lc.compress(jnp.asarray(x), 0.01, codec=codec, capacity=cap)
        want, st = lc.decompress_with_status(f, nb, shape=(8, 16), dtype=dtype)
        got, st1 = lc.decompress_with_status(f, nb, shape=(8, 16), dtype=dtype, fixed_rate=True)
        assert np.asarray(st).tolist() == np.asarray(st1).tolist() == [0, 0, 0]
        assert np.array_equal(
            np.asarray(got).view(np.uint16 if dtype != np.float32 else np.uint32),
            np.asarray(want).view(np.uint16 if dtype != np.float32 else np.uint32),
        )
        y = lc.decompress(f, nb, shape=(8, 16), dtype=dtype, fixed_rate=True)
        assert np.array_equal(np.asarray(y), np.asarray(got), equal_nan=True)
    f, nb = lc.compress(jnp.asarray(x), 0.01, codec="dedup")
    bad, st = lc.decompress_with_status(f, nb, shape=(8, 16), dtype=dtype, fixed_rate=True)
    assert np.asarray(st).tolist() == [frame.Status.UNSUPPORTED_FORM] * 3
    assert bool(jnp.isnan(bad).all())
    if lc.implementations()["cpu"] == "compiled":
        for codec, carries in (("fixed", True), ("raw", True), ("auto", False)):
            fc = lc.FrameCodec(codec=codec, min_error_bound=0.01)
            text = (
                jax.jit(lambda w, n, fc=fc: fc.decode(w, n, shape=(8, 16), dtype=dtype))
                .lower(f, nb)
                .as_text()
            )
            assert ("fixed_rate = 1" in text) == carries, (codec, text[-2000:])
