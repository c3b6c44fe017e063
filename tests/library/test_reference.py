"""Tests of the pure-jax reference codec (jax_lossy_comm/reference.py) against the C++ codec.

* Frames: for codec "raw" and "fixed" the reference writes the C++ frames byte for byte (and the
  same nbytes) over hypothesis-drawn shapes, scales, modes, error bounds (0, negative, NaN, Inf
  included), dtypes, NaN/Inf, constant, signed-zero and empty chunks, batched leading dims; on
  the real embedding dumps; and on overflow.
* Decoding: on those frames and on truncated, bit-flipped and re-checksummed corrupt frames the
  reference gives the C++ values (bitwise, NaN payloads included) and statuses.
* The reference's own "auto"/"dedup"/"entropy" frames, its error bound, jit, vmap, and the
  no-extension path of jax_lossy_comm.compress.

Inputs avoid float32 subnormals (reference.py documents why). Subnormal float16 values are
normal in float32 and are included.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import jax_lossy_comm as jlc
from jax_lossy_comm import _ffi, codec, frame
from jax_lossy_comm import reference as ref

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
DTYPES = (np.dtype(np.float32), np.dtype(jnp.bfloat16), np.dtype(np.float16))
TINY = np.finfo(np.float32).tiny
KINDS = ("normal", "grid", "specials", "constant", "nonfinite", "zeros")
ROWS, DIM = 8, 16  # chunk shape shared by most tests: one compilation per dtype

needs_ext = pytest.mark.skipif(
    not _ffi.available(), reason="compiled extension absent: no C++ codec to compare with"
)
needs_dumps = pytest.mark.skipif(
    not (DATA / "emb_dumps" / "manifest.json").is_file(),
    reason=f"real dumps absent: {DATA / 'emb_dumps' / 'manifest.json'}",
)

# jit so that negative and non-finite bounds reach the C++ encoder as traced values.
_cpp_compress = jax.jit(jlc.compress, static_argnames=("mode", "codec", "capacity"))


# ---------------------------------------------------------------- helpers
def bits(x) -> np.ndarray:
    """Bit patterns of a float array (uint32 or uint16), for NaN-aware bitwise comparison."""
    x = np.asarray(x)
    return x.view(np.uint32 if x.dtype.itemsize == 4 else np.uint16)


def make_chunks(specs, rows: int, dim: int, dtype: np.dtype, seed: int):
    """Chunks [len(specs), rows, dim] of dtype and their (rel, abs) error bounds, float32.

    Each spec is (offset exponent, spread exponent, offset sign, kind, eb); the values are
    ``sign * 10^offset + 10^spread * z`` with z normal or on a half-integer grid, plus NaN/Inf,
    constant, all non-finite or signed-zero chunks. Float32 subnormals are flushed to zero.
    """
    rng = np.random.default_rng(seed)
    shrink = 5 / 30 if dtype == np.float16 else 1.0  # keep float16 chunks mostly finite
    xs, ebs, eb_abs = [], [], []
    for off_exp, spread_exp, sign, kind, eb in specs:
        spread = 10.0 ** (spread_exp * shrink)
        z = (
            rng.integers(-4, 5, (rows, dim)) * 0.5
            if kind == "grid"
            else rng.standard_normal((rows, dim))
        )
        with np.errstate(over="ignore"):
            x = (sign * 10.0 ** (off_exp * shrink) + spread * z).astype(np.float32)
        flat = x.reshape(-1)
        if kind == "specials" and flat.size:
            flat[rng.integers(0, flat.size, 3)] = rng.choice([np.nan, np.inf, -np.inf], 3)
        elif kind == "constant" and flat.size:
            flat[:] = flat[0]
        elif kind == "nonfinite":
            flat[:] = rng.choice([np.nan, np.inf, -np.inf], flat.size)
        elif kind == "zeros":
            flat[:] = rng.choice([0.0, -0.0], flat.size)
        flat[np.abs(flat) < TINY] *= 0.0  # flush subnormals, keep the sign of zero
        with np.errstate(over="ignore"):  # float16: large values become +-Inf
            xs.append(x.astype(dtype))
        ebs.append(eb)
        eb_abs.append(eb * spread)
    with np.errstate(over="ignore", invalid="ignore"):
        return (np.stack(xs), np.asarray(ebs, np.float32), np.asarray(eb_abs, np.float32))


def both_compress(x, eb, mode: str, codec_name: str, capacity: int):
    """(C++ frames, C++ nbytes, reference frames, reference nbytes) as numpy arrays."""
    f_c, n_c = _cpp_compress(x, eb, mode=mode, codec=codec_name, capacity=capacity)
    f_r, n_r = ref.compress(x, eb, mode=mode, codec=codec_name, capacity=capacity)
    return tuple(np.asarray(a) for a in (f_c, n_c, f_r, n_r))


def assert_same_frames(f_c, n_c, f_r, n_r, what: str):
    np.testing.assert_array_equal(n_r, n_c, err_msg=f"nbytes differ ({what})")
    diff = np.argwhere(f_r != f_c)
    assert diff.size == 0, f"frames differ ({what}) at [chunk..., byte] {diff[:8].tolist()}"


def assert_same_decode(frames, nbytes, rows: int, dim: int, dtype: np.dtype, what: str):
    """Both decoders on the same frames: equal statuses and bitwise-equal values."""
    x_c, s_c = jlc.decompress_with_status(frames, nbytes, shape=(rows, dim), dtype=dtype)
    x_r, s_r = ref.decompress(frames, nbytes, shape=(rows, dim), dtype=dtype)
    np.testing.assert_array_equal(np.asarray(s_r), np.asarray(s_c), err_msg=f"statuses ({what})")
    np.testing.assert_array_equal(bits(x_r), bits(x_c), err_msg=f"values ({what})")
    return np.asarray(s_c)


def np_checksum(frame_bytes: bytes) -> int:
    """checksum.h lc_checksum (format.h: checksum_seed + checksum_word), written independently
    in numpy (to re-seal corrupted frames)."""
    m = 0xFFFFFFFF

    def fmix(h):
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & m
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & m
        return h ^ (h >> 16)

    n = len(frame_bytes)
    b = bytearray(frame_bytes) + bytes(-n % 4)
    b[4:8] = bytes(4)
    h = fmix((n * 0x27D4EB2F + 0x165667B1) & m)
    for i, w in enumerate(np.frombuffer(bytes(b), "<u4")):
        h = (h + fmix(int(w) ^ ((i * 0x9E3779B9) & m))) & m
    return h


def seal(frame_row: np.ndarray, nbytes: int) -> np.ndarray:
    """A copy of frame_row with a valid checksum over its first nbytes bytes."""
    out = frame_row.copy()
    out[4:8] = np.frombuffer(np.uint32(np_checksum(out[:nbytes].tobytes())).tobytes(), np.uint8)
    return out


# ---------------------------------------------------------------- frames and values vs C++
SPEC = st.tuples(
    st.floats(-30, 30),
    st.floats(-30, 30),
    st.sampled_from([-1.0, 0.0, 1.0]),
    st.sampled_from(KINDS),
    st.one_of(
        st.sampled_from([0.0, 0.5, 0.25, 0.1, 1e-6, -1.0, np.inf, np.nan]), st.floats(1e-8, 2.0)
    ),
)


@needs_ext
@settings(max_examples=4, deadline=None)  # each example compiles for its shape (about 3 s)
@given(
    rows=st.integers(0, 64),
    dim=st.integers(0, 64),
    dtype=st.sampled_from(DTYPES),
    specs=st.lists(SPEC, min_size=6, max_size=6),
    seed=st.integers(0, 2**32 - 1),
)
@example(rows=0, dim=5, dtype=DTYPES[0], specs=[(0.0, 0.0, 1.0, "normal", 0.01)] * 6, seed=0)
@example(rows=7, dim=0, dtype=DTYPES[2], specs=[(0.0, 0.0, 1.0, "normal", 0.01)] * 6, seed=0)
def test_frames_and_values_match_cpp(rows, dim, dtype, specs, seed):
    x, eb_rel, eb_abs = make_chunks(specs, rows, dim, dtype, seed)
    x = x.reshape(2, 3, rows, dim)  # two leading dims
    capacity = frame.raw_frame_bytes(rows, dim, dtype)
    for mode, eb in (("rel", eb_rel.reshape(2, 3)), ("abs", eb_abs.reshape(2, 3))):
        for codec_name in ("raw", "fixed"):
            what = f"{dtype} {mode} {codec_name} [{rows}, {dim}]"
            f_c, n_c, f_r, n_r = both_compress(x, eb, mode, codec_name, capacity)
            assert_same_frames(f_c, n_c, f_r, n_r, what)
            assert_same_decode(f_c, n_c, rows, dim, dtype, what)


@needs_ext
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_many_random_chunks_match_cpp(dtype):
    """3000 chunks per dtype at all scales: catches last-bit differences (FMA, rounding)."""
    rng = np.random.default_rng(7)
    specs = [
        (
            rng.uniform(-30, 30),
            rng.uniform(-30, 30),
            rng.choice([-1.0, 0.0, 1.0]),
            KINDS[rng.choice(6, p=[0.45, 0.35, 0.1, 0.04, 0.03, 0.03])],
            float(10.0 ** rng.uniform(-7, 0.3)),
        )
        for _ in range(1500)
    ]
    x, eb_rel, eb_abs = make_chunks(specs, ROWS, DIM, dtype, seed=11)
    capacity = frame.raw_frame_bytes(ROWS, DIM, dtype)
    for mode, eb in (("rel", eb_rel), ("abs", eb_abs)):
        f_c, n_c, f_r, n_r = both_compress(x, eb, mode, "fixed", capacity)
        assert_same_frames(f_c, n_c, f_r, n_r, f"{dtype} {mode}")
        assert (f_c[:, 1] & 15 == frame.FORM_QUANT).mean() > 0.5  # mostly quantized frames
        assert_same_decode(f_c, n_c, ROWS, DIM, dtype, f"{dtype} {mode}")


def edge_chunks() -> tuple[np.ndarray, np.ndarray]:
    """12 float32 chunks [ROWS, DIM] at the edges of the quantizer, with an ABS bound each."""
    rng = np.random.default_rng(12)
    base = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    big = np.float32(3e38)
    chunks = [
        (np.full((ROWS, DIM), 2.5, np.float32), big),  # constant, step = Inf
        (np.where(rng.random((ROWS, DIM)) < 0.5, 0.0, -0.0).astype(np.float32), 0.1),  # +-0
        (np.full((ROWS, DIM), np.nan, np.float32), 0.1),  # no finite value
        (np.clip(base, -1, 1) * big, 1.0),  # range overflows
        (base, np.float32(1.5e-7)),  # maxcode near 2^24
        (base, np.float32(3e-8)),  # maxcode >= 2^24: raw
        (np.float32(1e30) + base * np.float32(1e23), np.float32(1e22)),  # huge offset
        (base * np.float32(1e-30), np.float32(1e-32)),  # tiny spread
        (np.round(base * 4) / 4, np.float32(0.125)),  # exact midpoints
        (base, np.inf),
        (base, -0.0),
        (base, np.nan),
    ]
    return (np.stack([c for c, _ in chunks]), np.asarray([eb for _, eb in chunks], np.float32))


@needs_ext
def test_edge_cases_match_cpp():
    x, eb_abs = edge_chunks()
    capacity = frame.raw_frame_bytes(ROWS, DIM, np.float32)
    for mode, eb in (("abs", eb_abs), ("rel", np.float32(0.01) * np.isfinite(eb_abs))):
        for codec_name in ("raw", "fixed"):
            f_c, n_c, f_r, n_r = both_compress(x, eb, mode, codec_name, capacity)
            assert_same_frames(f_c, n_c, f_r, n_r, f"edges {mode} {codec_name}")
            assert_same_decode(f_c, n_c, ROWS, DIM, DTYPES[0], f"edges {mode} {codec_name}")


@needs_ext
def test_overflow_matches_cpp():
    """Frames over capacity: raw when raw fits, else nbytes = -needed and zero bytes."""
    specs = [
        (0.0, 0.0, 1.0, "specials", 1e-3),
        (0.0, 0.0, 1.0, "normal", 0.3),
        (0.0, 0.0, 1.0, "nonfinite", 0.3),
        (0.0, 0.0, 1.0, "constant", 0.0),
    ]
    x, eb, _ = make_chunks(specs, ROWS, DIM, DTYPES[0], seed=3)
    capacity = frame.frame_capacity(x.shape, np.float32, "fixed", min_error_bound=0.05)
    assert capacity < frame.raw_frame_bytes(ROWS, DIM, np.float32)  # raw never fits here
    for codec_name, fits in (("raw", [False] * 4), ("fixed", [False, True, False, True])):
        f_c, n_c, f_r, n_r = both_compress(x, eb, "rel", codec_name, capacity)
        assert_same_frames(f_c, n_c, f_r, n_r, f"overflow {codec_name}")
        np.testing.assert_array_equal(n_c > 0, fits)
        assert not f_c[~np.asarray(fits)].any()


@needs_ext
@needs_dumps
def test_real_dumps_match_cpp():
    manifest = json.loads((DATA / "emb_dumps" / "manifest.json").read_text())
    by_shape: dict[tuple, list] = {}
    for entry in manifest:
        x = np.fromfile(DATA / entry["file"], "<f4").reshape(entry["shape"])
        by_shape.setdefault(tuple(entry["shape"]), []).append(x)
    for (rows, dim), xs in by_shape.items():
        for dtype in DTYPES[:1]:  # float32, as dumped
            x = np.stack(xs).astype(dtype)
            capacity = frame.raw_frame_bytes(rows, dim, dtype)
            for mode, eb in (("rel", 0.01), ("rel", 0.05), ("abs", 1e-3)):
                eb = np.full(len(xs), eb, np.float32)
                for codec_name in ("raw", "fixed"):
                    what = f"dumps {rows}x{dim} {dtype} {mode} {eb[0]} {codec_name}"
                    f_c, n_c, f_r, n_r = both_compress(x, eb, mode, codec_name, capacity)
                    assert_same_frames(f_c, n_c, f_r, n_r, what)
                    assert (assert_same_decode(f_c, n_c, rows, dim, dtype, what) == 0).all()


# ---------------------------------------------------------------- corrupt frames
def corrupt_variants(frames: np.ndarray, nbytes: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """Truncated, extended, bit-flipped and re-sealed variants of valid frames."""
    out_f, out_n = [], []

    def add(f, n):
        out_f.append(f)
        out_n.append(n)

    cap = frames.shape[1]
    for f, n in zip(frames, nbytes):
        n = int(n)
        add(f, n)
        for bad_n in (-3, 0, 9, cap + 1, n - 1):
            add(f, bad_n)
        for k in (1, 2, 5, n // 2):  # truncated but re-sealed: sections past the end
            add(seal(f, n - k), n - k)
        ext = f.copy()
        if n + 3 <= cap:  # trailing bytes, re-sealed
            ext[n : n + 3] = 0
            add(seal(ext, n + 3), n + 3)
        junk = f.copy()
        junk[n:] = 0xAB  # bytes past nbytes are not part of the frame
        add(junk, n)
        for byte, value in (
            (0, 0xE4),
            (1, 0x21),
            (1, 0x12),
            (2, f[2] | 0x40),
            (2, f[2] ^ 3),
            (2, f[2] ^ 1),
            (2, f[2] | 8),
            (2, f[2] | 16),
            (2, f[2] | 32),
            (2, f[2] | 4),
            (3, 25),
            (3, f[3] + 1),
            (8, f[8] + 1),
            (9, f[9] ^ 0x80),
            (8, 0x80),
        ):
            g = f.copy()
            g[byte] = value & 0xFF
            add(g, n)
            add(seal(g, n), n)
        for at, value in ((8, [0x80] * 9), (8, [0xFF] * 4 + [0x0F]), (8, [0x80, 0x00])):
            g = f.copy()  # rows varint: 9 continuation bytes, > 2^31 - 1, overlong
            g[at : at + len(value)] = value
            add(seal(g, n), n)
        for _ in range(24):  # random bit flips, raw and re-sealed
            g = f.copy()
            g[rng.integers(0, n)] ^= np.uint8(1 << rng.integers(0, 8))
            add(g, n)
            add(seal(g, n), n)
        if (f[1] & 15) == frame.FORM_QUANT:  # outlier positions / counts out of range
            info = frame.frame_info(f[None], np.int32([n]))[0]
            if info.n_outliers:
                isz, pb = info.dtype.itemsize, frame.pos_bytes(info.rows * info.dim)
                for at in (n - info.n_outliers * isz - 1, n - info.n_outliers * (isz + pb)):
                    g = f.copy()
                    g[at] = 0xFF
                    add(seal(g, n), n)
            head = frame.header_bytes(info.rows, info.dim) + 8
            for value in (0xFF, 0x7F, 0x00):
                g = f.copy()
                g[head] = value  # n_outliers varint
                add(seal(g, n), n)
    return np.stack(out_f), np.asarray(out_n, np.int32)


@needs_ext
@pytest.mark.parametrize("dtype", [DTYPES[0], DTYPES[2]], ids=str)
def test_corrupt_frames_statuses_match_cpp(dtype):
    rows, dim = ROWS, DIM
    specs = [
        (0.0, 0.0, 1.0, "specials", 0.01),
        (0.0, 0.0, 1.0, "normal", 0.0),
        (0.0, 0.0, 1.0, "constant", 0.01),
        (0.0, 0.0, -1.0, "normal", 0.2),
    ]
    x, eb, _ = make_chunks(specs, rows, dim, dtype, seed=5)
    capacity = frame.raw_frame_bytes(rows, dim, dtype)
    frames, nbytes = (
        np.asarray(a) for a in _cpp_compress(x, eb, mode="rel", codec="fixed", capacity=capacity)
    )
    bad_f, bad_n = corrupt_variants(frames, nbytes, np.random.default_rng(1))
    x_c, s_c = jlc.decompress_with_status(bad_f, bad_n, shape=(rows, dim), dtype=dtype)
    x_r, s_r = ref.decompress(bad_f, bad_n, shape=(rows, dim), dtype=dtype)
    s_c, s_r = np.asarray(s_c), np.asarray(s_r)
    # Frames with dictionary/Huffman flags: the reference stops at those sections (status 10).
    unsupported = s_r == 10
    assert (bad_f[unsupported, 2] & (frame.FLAG_DEDUP | frame.FLAG_CODES_HUFFMAN)).all()
    assert set(s_c[unsupported]) <= {0, 2, 8, 9}
    np.testing.assert_array_equal(s_r[~unsupported], s_c[~unsupported])
    np.testing.assert_array_equal(bits(x_r)[~unsupported], bits(x_c)[~unsupported])
    assert np.isnan(np.asarray(x_r, np.float32)[s_r != 0]).all()
    assert {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10} <= set(s_r.tolist()), sorted(set(s_r.tolist()))


# ---------------------------------------------------------------- reference-only properties
@needs_ext
def test_cpp_dictionary_frames_get_status_10():
    """C++ "auto"/"entropy" frames of repeated rows use dedup/Huffman: status 10 here."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((12, 2, DIM)).astype(np.float32)[:, rng.integers(0, 2, ROWS)]
    for codec_name in ("auto", "entropy"):
        f, n = (
            np.asarray(a)
            for a in _cpp_compress(
                x,
                0.02,
                mode="rel",
                codec=codec_name,
                capacity=frame.raw_frame_bytes(ROWS, DIM, np.float32),
            )
        )
        assert (f[:, 2] & frame.FLAG_DEDUP).all()
        x_r, s_r = ref.decompress(f, n, shape=(ROWS, DIM), dtype=np.float32)
        assert (np.asarray(s_r) == 10).all() and np.isnan(np.asarray(x_r)).all()


def test_reference_codecs_and_error_bound():
    """auto = smaller of raw/fixed, dedup = entropy = fixed; decoded values within eb_abs."""
    specs = [(0.0, -2.0, 1.0, k, eb) for k in KINDS for eb in (0.01, 0.3)]
    x, eb, _ = make_chunks(specs, ROWS, DIM, DTYPES[0], seed=9)
    capacity = frame.raw_frame_bytes(ROWS, DIM, np.float32)
    out = {
        c: tuple(np.asarray(a) for a in ref.compress(x, eb, mode="rel", codec=c, capacity=capacity))
        for c in frame.CODECS
    }
    for c in ("dedup", "entropy"):
        np.testing.assert_array_equal(out[c][0], out["fixed"][0])
    use_fixed = (out["fixed"][1] < out["raw"][1])[:, None]
    np.testing.assert_array_equal(
        out["auto"][0], np.where(use_fixed, out["fixed"][0], out["raw"][0])
    )
    f, n = out["fixed"]
    x_hat, status = ref.decompress(f, n, shape=(ROWS, DIM), dtype=np.float32)
    assert (np.asarray(status) == 0).all()
    x_hat = np.asarray(x_hat)
    for i, info in enumerate(frame.frame_info(f, n)):
        finite = np.isfinite(x[i])
        np.testing.assert_array_equal(bits(x_hat[i])[~finite], bits(x[i])[~finite])
        err = np.abs(x[i][finite].astype(np.float64) - x_hat[i][finite].astype(np.float64))
        assert (err <= info.eb_abs).all(), (i, err.max(), info.eb_abs)


def test_jit_and_vmap():
    """jit(vmap(compress)) and jit(vmap(decompress)) with traced bounds equal the eager calls."""
    x, eb, _ = make_chunks([(0.0, 0.0, 1.0, "specials", 0.02)] * 12, ROWS, DIM, DTYPES[0], seed=4)
    x, eb = x.reshape(2, 6, ROWS, DIM), eb.reshape(2, 6)
    capacity = frame.raw_frame_bytes(ROWS, DIM, np.float32)
    eager = ref.compress(x, eb, mode="rel", codec="fixed", capacity=capacity)
    mapped = jax.jit(
        jax.vmap(lambda x, eb: ref.compress(x, eb, mode="rel", codec="fixed", capacity=capacity))
    )(x, eb)
    np.testing.assert_array_equal(np.asarray(mapped[0]), np.asarray(eager[0]))
    np.testing.assert_array_equal(np.asarray(mapped[1]), np.asarray(eager[1]))
    x_e, s_e = ref.decompress(*eager, shape=(ROWS, DIM), dtype=np.float32)
    x_v, s_v = jax.jit(
        jax.vmap(lambda f, n: ref.decompress(f, n, shape=(ROWS, DIM), dtype=np.float32))
    )(*eager)
    np.testing.assert_array_equal(bits(x_v), bits(x_e))
    np.testing.assert_array_equal(np.asarray(s_v), np.asarray(s_e))


@needs_ext
def test_codec_falls_back_to_reference(monkeypatch):
    """jax_lossy_comm.compress/decompress without the extension: the reference, same frames."""
    x, eb, _ = make_chunks([(0.0, 0.0, 1.0, "specials", 0.02)] * 12, ROWS, DIM, DTYPES[0], seed=4)
    capacity = frame.raw_frame_bytes(ROWS, DIM, np.float32)
    expected = jlc.compress(x, eb, codec="fixed", capacity=capacity)
    monkeypatch.setattr(_ffi, "available", lambda: False)
    got = codec.compress(x, eb, codec="fixed", capacity=capacity)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(expected[0]))
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(expected[1]))
    _, status = codec.decompress_with_status(*got, shape=(ROWS, DIM))
    assert (np.asarray(status) == 0).all()
    np.testing.assert_array_equal(np.asarray(codec.frame_status(*got, shape=(ROWS, DIM))), 0)


def test_argument_errors():
    x = jnp.zeros((4, 8), jnp.float32)
    with pytest.raises(TypeError):
        ref.compress(x.astype(jnp.int32), 0.1)
    with pytest.raises(ValueError):
        ref.compress(x[0], 0.1)
    with pytest.raises(ValueError):
        ref.compress(x, 0.1, codec="zstd")
    with pytest.raises(ValueError):
        ref.compress(x, 0.1, capacity=5)
    f, n = jnp.zeros((2, 64), jnp.uint8), jnp.zeros(2, jnp.int32)
    with pytest.raises(TypeError):
        ref.decompress(
            f, n.astype(jnp.int64 if jax.config.jax_enable_x64 else jnp.uint32), shape=(4, 8)
        )
    with pytest.raises(ValueError):
        ref.decompress(f, n, shape=(2, 4, 8))
