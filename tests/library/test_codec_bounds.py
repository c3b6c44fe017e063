"""Error bounds as the user states them, half-type capacity, overflow sizes and argument checks
.

The bound is checked in float64 against the user's definition: REL ``eb * (max - min)`` of the
chunk's finite values, ABS ``eb`` (``eb`` the float32 the codec receives), on the value the
user gets back in the user's dtype.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import DUMPS, load_dump

import jax_lossy_comm as lc
from bench.codecs.half_type_capacity import band_chunks
from jax_lossy_comm import frame, reference

HALF = [ml_dtypes.bfloat16, np.float16]


def bound64(x: np.ndarray, eb: float, mode: str = "rel") -> np.ndarray:
    """The stated bound per chunk of ``x[..., rows, dim]`` in float64."""
    e = np.float64(np.float32(eb))
    if mode == "abs":
        return np.full(x.shape[:-2], e)
    v = x.astype(np.float64)
    fin = np.isfinite(v)
    hi = np.where(fin, v, -np.inf).max(axis=(-2, -1))
    lo = np.where(fin, v, np.inf).min(axis=(-2, -1))
    return e * np.where(hi >= lo, hi - lo, 0.0)


def max_error64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Largest |x - y| per chunk over finite x, float64 (non-finite must match bitwise)."""
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    fin = np.isfinite(xf)
    return np.where(fin, np.abs(xf - yf), 0.0).max(axis=(-2, -1))


def half_type_chunks(dtype, seed: int, per_shape: int):
    """Chunks of mixed shapes and scales (standard normal times 10^U(-3, 3)) in ``dtype``,
    with the real Terabyte dumps cast to it where present; yields ``(shape, x[k, rows, dim])``."""
    rng = np.random.default_rng(seed)
    for shape, k in (((2048, 64), 1), ((128, 32), 4), ((16, 32), 10), ((64, 8), 10), ((3, 5), 4)):
        k *= per_shape
        x = rng.standard_normal((k, *shape)) * 10.0 ** rng.uniform(-3, 3, (k, 1, 1))
        if shape == (2048, 64) and DUMPS is not None:
            names = [f"terabyte_table{t:02d}_iter20_2048x64_f32.bin" for t in (1, 5, 8)]
            x = np.concatenate([x, np.stack([load_dump(n) for n in names])])
        yield shape, x.astype(dtype)


# ------------------------------------------------------------------- item 1: half types
@pytest.mark.parametrize("dtype", HALF, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("min_eb", [0.01, 0.03, 0.05])
def test_half_type_chunks_fit_the_fixed_rate_capacity(dtype, min_eb):
    """A few hundred chunks per dtype: no frame overflows the fixed-rate capacity at bounds
    >= min_error_bound (before: 759-1479 outliers per 2048x64 bfloat16 chunk) and the bound
    holds on the decoded half-type values."""
    n = over = 0
    for shape, x in half_type_chunks(dtype, seed=int(min_eb * 1000), per_shape=4):
        cap = frame.frame_capacity(shape, dtype, "fixed", min_eb)
        for eb in (min_eb, 2 * min_eb):
            frames, nbytes = lc.compress(jnp.asarray(x), eb, codec="fixed", capacity=cap)
            nb = np.asarray(nbytes)
            over += int((nb < 0).sum())
            n += nb.size
            y = np.asarray(lc.decompress(frames, nbytes, shape=shape, dtype=dtype))
            ok = nb >= 0
            assert np.all(max_error64(x, y)[ok] <= bound64(x, eb)[ok])
    assert n >= 200
    assert over == 0, f"{over} of {n} frames overflowed"


@pytest.mark.parametrize("dtype", HALF, ids=["bfloat16", "float16"])
def test_half_type_reference_encoder_matches_the_compiled_one(dtype):
    """The jax.numpy reference chooses the same half step, codes and bytes."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((12, 64, 16)) * 10.0 ** rng.uniform(-3, 3, (12, 1, 1))).astype(dtype)
    for eb, mode in ((0.01, "rel"), (0.05, "rel"), (0.02, "abs")):
        cap = frame.frame_capacity(x.shape, dtype)
        a = lc.compress(jnp.asarray(x), eb, mode=mode, codec="fixed", capacity=cap)
        b = reference.compress(jnp.asarray(x), eb, mode=mode, codec="fixed", capacity=cap)
        assert np.array_equal(np.asarray(a[1]), np.asarray(b[1]))
        assert np.array_equal(np.asarray(a[0]), np.asarray(b[0]))


def test_half_type_capacity_width():
    """Half types quantize with a step down to HALF_STEP_FLOOR (63/128) of the bound: their
    code width is that of the smaller bound, one bit over float32's at the usual bounds."""
    assert frame.HALF_STEP_FLOOR == 63 / 128
    for eb, bits in ((0.01, 6), (0.02, 5), (0.03, 5), (0.05, 4)):
        assert frame.rel_code_bits(eb) == bits
        for dt in HALF:
            assert frame.rel_code_bits(eb, dt) == bits + 1
    assert frame.rel_code_bits(1 / 61) == 5
    assert frame.rel_code_bits(1 / 61, np.float16) == 6


def decode_at_bare_capacity(x: np.ndarray, eb, min_eb: float) -> tuple[np.ndarray, list]:
    """Compresses ``x[k, rows, dim]`` (half type) with ``codec="fixed"`` into the fixed-rate
    capacity of ``min_eb`` without outlier room, asserts that every frame fits, holds no outlier
    and decodes within the bound in float64; returns the decoded values and the FrameInfos."""
    dtype, shape = x.dtype, x.shape[-2:]
    cap = frame.frame_capacity(shape, dtype, "fixed", min_eb)
    frames, nbytes = lc.compress(jnp.asarray(x), jnp.asarray(eb), codec="fixed", capacity=cap)
    nb = np.asarray(nbytes)
    assert np.all(nb > 0), f"{int((nb < 0).sum())} of {nb.size} frames overflowed"
    infos = frame.frame_info(frames, nbytes)
    assert [i for i, f in enumerate(infos) if f.n_outliers] == []
    y = np.asarray(lc.decompress(frames, nbytes, shape=shape, dtype=dtype))
    assert np.all(max_error64(x, y) <= bound64(x, eb))
    return y, infos


@pytest.mark.parametrize(
    "dtype, ulp",
    [(ml_dtypes.bfloat16, 2.0**-7), (np.float16, 2.0**-10)],
    ids=["bfloat16", "float16"],
)
def test_dense_half_values_need_their_own_codes(dtype, ulp):
    """97 consecutive half-type values 1 + k ulp (k = 0..96) at REL 0.01: eb_abs = 0.96 ulp, so
    no other half-type value is within the bound of one of them and each must decode to itself:
    97 distinct codes, 7 bits. The bare fixed-rate capacity holds them with no outlier (before:
    the 6-bit capacity of the 0.875 floor overflowed)."""
    x = (1.0 + ulp * np.resize(np.arange(97), (4, 16, 32))).astype(dtype)
    y, infos = decode_at_bare_capacity(x, np.float32(0.01), 0.01)
    assert np.array_equal(y.astype(np.float64), x.astype(np.float64))
    assert [(f.form, f.bits) for f in infos] == [("quantized", 7)] * 4


@pytest.mark.parametrize("dtype", HALF, ids=["bfloat16", "float16"])
@pytest.mark.parametrize("min_eb", [0.01, 0.03, 0.05])
def test_half_chunks_have_no_outlier_at_the_bare_capacity(dtype, min_eb):
    """3,000 chunks per dtype and bound at bounds min_eb, 1.5 min_eb and 3 min_eb: narrow bands
    away from zero (bench.codecs.half_type_capacity.band_chunks) and standard normal times 10^U(-3, 3)
    (reconstructions on both sides of zero). No outlier, so no overflow of the fixed-rate
    capacity without outlier room, and the bound holds in float64. Before (half step floored at
    0.875 eb_abs over a binade analysis): about 10% of the narrow bands overflowed."""
    rng = np.random.default_rng(int(min_eb * 1000) + (dtype is np.float16))
    scale = 10.0 ** rng.uniform(-3, 3, (1500, 1, 1))
    x = np.concatenate(
        [band_chunks(rng, 1500, (16, 32)), rng.standard_normal((1500, 16, 32)) * scale]
    ).astype(dtype)
    eb = np.float32(min_eb) * np.float32([1.0, 1.5, 3.0])[np.arange(len(x)) % 3]
    decode_at_bare_capacity(x, eb, min_eb)


def test_reconstructions_around_zero_rounding_outwards():
    """bfloat16 [-0.07666, 0.09082] at REL 0.049588155: the two reconstructions around
    x = -0.0019989 (-0.0102847 and 0.0063092, a step of 1.998 eb_abs apart) round away from
    each other to the bfloat16 grid, 2.0026 eb_abs apart, so x missed both: 10 outliers before
    (a step of 0.999 eb_abs from a binade analysis that assumed x on the grid of the
    reconstructions). The step now leaves room for that rounding: no outlier."""
    x = np.resize(np.float32([-0.07666015625, 0.0908203125, -0.0019989013671875]), (1, 4, 8))
    decode_at_bare_capacity(x.astype(ml_dtypes.bfloat16), np.float32([0.049588155]), 0.04)


def test_float16_top_reconstruction_stays_finite():
    """float16 chunks reaching 65504 (the largest float16) at REL 0.05-0.25: the top code's
    reconstruction, up to half a step above vmax, rounded to Inf (before: 634 outliers and 126
    overflows in 400 chunks). The step shrinks so the top reconstruction is vmax: no outlier."""
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 65504, (400, 16, 32))
    x[:, 0, 0] = 65504
    eb = (np.float32(0.05) * rng.uniform(1, 5, 400)).astype(np.float32)
    y, _ = decode_at_bare_capacity(x.astype(np.float16), eb, 0.05)
    assert np.all(np.isfinite(y.astype(np.float64)))


# ------------------------------------------------------------------- item 2: REL in float64
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    eb=st.floats(1e-4, 0.3),
    scale=st.sampled_from([1e-3, 1.0, 7.0, 1e4]),
    offset=st.sampled_from([0.0, 0.5, -3.0, 1e3]),
    mode=st.sampled_from(["rel", "abs"]),
    dtype=st.sampled_from([np.float32, *HALF]),
)
def test_bound_holds_as_stated_in_float64(seed, eb, scale, offset, mode, dtype):
    rng = np.random.default_rng(seed)
    x = (offset + scale * rng.standard_normal((8, 64, 32))).astype(dtype)
    if mode == "abs":
        eb = eb * scale
    frames, nbytes = lc.compress(jnp.asarray(x), eb, mode=mode)
    y = np.asarray(lc.decompress(frames, nbytes, shape=(64, 32), dtype=dtype))
    b = bound64(x, eb, mode)
    assert np.all(max_error64(x, y) <= b), (max_error64(x, y) / b).max()
    for info, bb in zip(frame.frame_info(frames, nbytes), b):
        if info.form == "quantized":
            assert info.eb_abs <= bb  # the stored half step never exceeds the bound


def test_rel_bound_is_rounded_toward_zero():
    """Chunks whose float32 eb * (max - min) rounds up: the stored bound is the float just
    below, so no reconstruction can exceed the stated bound (before: 1.0000000331 x it)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((400, 32, 32)).astype(np.float32)
    eb = np.float32(0.01)
    hi, lo = x.max(axis=(1, 2)).astype(np.float64), x.min(axis=(1, 2)).astype(np.float64)
    exact = np.float64(eb) * (hi - lo)
    rounded_up = np.float32(eb) * (x.max(axis=(1, 2)) - x.min(axis=(1, 2))) > exact
    assert rounded_up.sum() > 100  # the case the fix is about is well represented
    frames, nbytes = lc.compress(
        jnp.asarray(x), eb, codec="fixed", capacity=frame.frame_capacity(x.shape)
    )
    stored = np.array([i.eb_abs for i in frame.frame_info(frames, nbytes)])
    assert np.all(stored <= exact)
    # At most one float32 step below the exact product where max - min is exact in float32
    # (the product's rounding), less than three where it is not (the range's rounding adds
    # eb * ulp(max - min), under two steps of the product; xla_ffi/quant.h, rel_bound).
    assert np.all(exact - stored < 3 * np.spacing(exact.astype(np.float32)).astype(np.float64))
    exact_range = hi - lo == (hi - lo).astype(np.float32)
    one_step = np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert np.all((exact - stored)[exact_range] <= one_step[exact_range])
    kept = (~rounded_up) & (hi - lo == (hi - lo).astype(np.float32))
    assert np.all(stored[kept] == (np.float32(eb) * (hi - lo).astype(np.float32))[kept])
    y = np.asarray(lc.decompress(frames, nbytes, shape=(32, 32)))
    assert np.all(max_error64(x, y) <= exact)
    ref = reference.compress(jnp.asarray(x), eb, codec="fixed", capacity=frames.shape[-1])
    assert np.array_equal(np.asarray(ref[0]), np.asarray(frames))


# ------------------------------------------------------------------- item 3: -nbytes
@pytest.mark.parametrize("dtype", [np.float32, *HALF], ids=["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("impl", ["compiled", "reference"])
def test_overflow_reports_the_smallest_form_that_fits(dtype, impl):
    """A fixed-rate frame larger than raw, in a capacity too small for either: -nbytes is the
    raw size (what a capacity must hold for the frame to fit), not the fixed-rate size."""
    x = np.full((1, 2, 5), np.nan, dtype)
    x[0, 0, 0] = 1.0  # nine non-finite outliers: the fixed-rate frame is larger than raw
    raw = frame.raw_frame_bytes(2, 5, dtype)
    compress = lc.compress if impl == "compiled" else reference.compress
    _, roomy = compress(jnp.asarray(x), 0.01, codec="fixed", capacity=raw + 64)
    assert int(roomy[0]) > raw  # fixed-rate is the larger form here
    frames, nbytes = compress(jnp.asarray(x), 0.01, codec="fixed", capacity=raw - 2)
    assert int(nbytes[0]) == -raw
    assert not np.asarray(frames).any()
    _, fits = compress(jnp.asarray(x), 0.01, codec="fixed", capacity=raw)
    assert int(fits[0]) == raw


# ------------------------------------------------------------------- item 6: argument checks
def test_decompress_rejects_negative_shapes():
    frames, nbytes = lc.compress(jnp.ones((16, 8), jnp.float32), 0.01)
    with pytest.raises(ValueError, match="sizes >= 0"):
        lc.decompress(frames, nbytes, shape=(-16, -8))
    with pytest.raises(ValueError, match="sizes >= 0"):
        lc.frame_status(frames, nbytes, shape=(16, -8))


def test_frame_capacity_rejects_other_dtypes_and_negative_shapes():
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        lc.frame_capacity((16, 8), jnp.int32)
    with pytest.raises(TypeError, match="float32, bfloat16 or float16"):
        lc.frame_capacity((16, 8), np.float64, "fixed", 0.01)
    with pytest.raises(ValueError, match="sizes >= 0"):
        lc.frame_capacity((-16, 8))
    raw = frame.raw_frame_bytes(16, 8, ml_dtypes.bfloat16)
    assert lc.frame_capacity((16, 8), ml_dtypes.bfloat16) == (raw + 15) // 16 * 16


# ------------------------------------------------- quiet chunks: subnormal and tiny ranges
@pytest.mark.parametrize(
    "dtype,scale",
    [(np.float32, 1e-39), (np.float32, 1e-42), (np.float32, 1e-43), (ml_dtypes.bfloat16, 1e-39)],
)
def test_a_subnormal_chunk_compresses_beside_normal_ones(dtype, scale):
    # A table barely used keeps values below float32's normal range (2^-126): its step is
    # subnormal and 1/step overflows. It must still be quantized within the bound and within
    # the fixed-rate capacity, and leave the other chunks' frames as they are.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 256, 64)).astype(np.float32)
    x[1] *= np.float32(scale)
    x = x.astype(dtype)
    assert np.abs(x[1].astype(np.float32)).max() < 2.0**-126
    kw = dict(codec="fixed", min_error_bound=0.01)
    frames, nbytes = lc.compress(jnp.asarray(x), 0.01, **kw)
    infos = frame.frame_info(frames, nbytes)
    assert [i.form for i in infos] == ["quantized"] * 3, infos[1]
    assert infos[1].n_outliers == 0  # and within the capacity: no other form was needed
    y = np.asarray(lc.decompress(frames, nbytes, shape=(256, 64), dtype=dtype))
    b = bound64(x, 0.01)
    assert np.all(max_error64(x, y) <= b), max_error64(x, y) / b
    alone, alone_n = lc.compress(jnp.asarray(x[::2]), 0.01, **kw)
    np.testing.assert_array_equal(np.asarray(frames)[::2], np.asarray(alone))
    np.testing.assert_array_equal(np.asarray(nbytes)[::2], np.asarray(alone_n))


def test_the_reference_codec_stores_a_chunk_with_subnormal_values_raw():
    # XLA:CPU flushes subnormals to zero: jax.numpy would take the chunk for a constant one
    # and break its bound, so the pure-jax codec keeps such a chunk lossless.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 64, 16)).astype(np.float32)
    x[0] *= np.float32(1e-39)
    x[1, 3, 5] = np.float32(3e-41)  # one subnormal value among normal ones
    frames, nbytes = reference.compress(jnp.asarray(x), 0.01, codec="fixed")
    assert [i.form for i in frame.frame_info(frames, nbytes)] == ["raw", "raw"]
    y = np.asarray(reference.decompress(frames, nbytes, shape=(64, 16))[0])
    np.testing.assert_array_equal(y.view(np.uint32), x.view(np.uint32))


def test_rel_bound_more_than_two_steps_below_where_the_range_rounds_up():
    """A chunk (found by hypothesis) whose float32 max - min rounds up by a quarter step: the
    range steps down to 3/4 of a step below its exact value, which costs eb times that (1.2
    steps of the product) before the product's own rounding, so the stored bound lies 2.2
    float32 steps below the exact product, and never above it."""
    row = [-1.30176750e20, -7.57108155e20, -9.52622363e20, -1.08666145e21, -1.43907783e21]
    row += [-8.79979583e20, -2.86140477e20, 2.19123115e20, -1.76499588e21, -7.10312395e19]
    row += [4.00946855e20, -1.18105014e21, -2.14279476e20, -9.92554796e20, -1.28113723e20]
    row += [6.53750614e20, -2.64482280e20, -1.31899188e21]
    x = np.array([[row]], np.float32)
    frames, nbytes = lc.compress(jnp.asarray(x), 1e-4, mode="rel")
    (info,) = frame.frame_info(frames, nbytes)
    v = x.astype(np.float64)
    exact = np.float64(np.float32(1e-4)) * (v.max() - v.min())
    steps = (exact - info.eb_abs) / np.spacing(np.float32(exact))
    assert 2.0 < steps < 3.0, steps
    y = np.asarray(lc.decompress(frames, nbytes, shape=(1, 18)))
    assert np.all(max_error64(x, y) <= exact)
