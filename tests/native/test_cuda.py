"""CUDA handlers of the codec: error bound, edge cases, CPU <-> GPU agreement, fuzzed frames.

Every test here carries the ``gpu`` marker (``pytest -m gpu``) and is skipped, with the reason,
when JAX sees no CUDA device or the extension was built without the CUDA handlers. The contract
checked is the one of ``xla_ffi/format.h``: the GPU writes the same frames as the CPU, byte for
byte (so each side decodes the other's frames to the same values), every finite value comes back
within ``eb_abs``, NaN and Inf come back bit-exact, and a corrupt frame yields the same per-frame
status on both sides, never a fault (run this file under ``compute-sanitizer --tool memcheck``
to check the last point; ``bench/gpu_check.sh`` does).

The dictionary forms ("auto", "dedup", "entropy") run fully in parallel on the GPU (code-row
dedup with a hash table in scratch, Huffman tables from a block-wide histogram, segment-parallel
Huffman decoding); the tests below check them byte for byte against the CPU on hot-row data like
the real pooled-embedding dumps, on the dumps themselves (``JLC_DATA_DIR`` or ../shared/data),
on the DLRM exchange shape, on large code alphabets and on empty chunks.

``JLC_GPU_TESTS_ON_CPU=1`` runs the same tests with the CPU standing in for the GPU: a dry run of
the test logic on machines without a GPU (it proves nothing about the CUDA code).
"""

from __future__ import annotations

import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_lossy_comm as jlc
from jax_lossy_comm.frame import frame_capacity, frame_info, header_bytes, raw_frame_bytes

CPU = jax.devices("cpu")[0]
#: The GPU under test (tests/conftest.py's ``gpu`` fixture: the CPU with JLC_GPU_TESTS_ON_CPU=1),
#: set before the first test of this module runs; every test is skipped, saying why, without one.
GPU = None
pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _on_gpu(gpu):
    global GPU
    GPU = gpu


DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
CODECS = ("auto", "raw", "fixed", "dedup", "entropy")
DICT_CODECS = ("auto", "dedup", "entropy")
DATA = Path(os.environ.get("JLC_DATA_DIR", Path(__file__).resolve().parents[3] / "shared" / "data"))
DUMPS = DATA / "emb_dumps"


# ------------------------------------------------------------------------------------ helpers
def _put(a, dev):
    return jax.device_put(a, dev)


def compress_on(dev, x, eb, **kw):
    with jax.default_device(dev):
        f, nb = jlc.compress(_put(x, dev), _put(np.asarray(eb, np.float32), dev), **kw)
    return np.asarray(f), np.asarray(nb)


def decompress_on(dev, frames, nbytes, shape, dtype, **kw):
    with jax.default_device(dev):
        x, st = jlc.decompress_with_status(
            _put(frames, dev), _put(nbytes, dev), shape=shape, dtype=dtype, **kw
        )
    return np.asarray(x), np.asarray(st)


def status_on(dev, frames, nbytes, shape, dtype):
    with jax.default_device(dev):
        return np.asarray(
            jlc.frame_status(_put(frames, dev), _put(nbytes, dev), shape=shape, dtype=dtype)
        )


def bits_of(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint16)


def _fmix32(h: np.ndarray) -> np.ndarray:
    m = np.uint64(0xFFFFFFFF)
    h = h ^ (h >> np.uint64(16))
    h = (h * np.uint64(0x85EBCA6B)) & m
    h = h ^ (h >> np.uint64(13))
    h = (h * np.uint64(0xC2B2AE35)) & m
    return h ^ (h >> np.uint64(16))


def frame_checksum(b: bytes) -> int:
    """lc_checksum of checksum.h: sum of fmix32(word_i ^ i * 0x9E3779B9), word 1 read as zero."""
    n = len(b)
    w = np.frombuffer(b + bytes(-n % 4), "<u4").astype(np.uint64)
    if w.size > 1:
        w[1] = 0
    i = np.arange(w.size, dtype=np.uint64)
    x = w ^ ((i * np.uint64(0x9E3779B9)) & np.uint64(0xFFFFFFFF))
    seed = _fmix32(np.array([(n * 0x27D4EB2F + 0x165667B1) & 0xFFFFFFFF], np.uint64))[0]
    return int((int(seed) + int(_fmix32(x).sum())) & 0xFFFFFFFF)


def reseal(frame: np.ndarray, nbytes: int) -> np.ndarray:
    """Rewrites the checksum of a (corrupted) frame so the decoder reads its sections."""
    f = frame.copy()
    if 8 <= nbytes <= f.size:
        f[4:8] = np.frombuffer(frame_checksum(f[:nbytes].tobytes()).to_bytes(4, "little"), np.uint8)
    return f


def make_data(kind: str, shape, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    if kind == "dup":  # hot ids: few distinct rows per chunk
        idx = rng.integers(0, 4, size=shape[:-1])
        x = np.take_along_axis(x, idx[..., None].repeat(shape[-1], -1), axis=-2)
    elif kind == "special":
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, 7)] = np.nan
        flat[rng.integers(0, flat.size, 3)] = np.inf
        flat[rng.integers(0, flat.size, 3)] = -np.inf
        flat[rng.integers(0, flat.size, 5)] = -0.0
    elif kind == "constant":
        x[...] = 1.25
    elif kind == "zeros":
        x[...] = 0.0
        x.reshape(-1)[::3] = -0.0
    elif kind == "nan":
        x[...] = np.nan
    elif kind == "subnormal":  # below 2^-126: neither side may flush them to zero
        x = (x * np.float32(1e-39)).astype(np.float32)
    elif kind == "wide":  # large range, tiny and huge magnitudes
        x = (x * 10.0 ** rng.integers(-30, 30, shape)).astype(np.float32)
    return x


def _check_same(cpu, gpu, what):
    np.testing.assert_array_equal(gpu, cpu, err_msg=f"GPU and CPU differ: {what}")


def hot_rows(shape, seed: int = 0, pool_div: int = 8) -> np.ndarray:
    """Pooled embeddings of hot ids: rows drawn (skewed) from a pool of rows/pool_div + 2."""
    rng = np.random.default_rng(seed)
    *batch, rows, dim = shape
    pool = rows // pool_div + 2
    base = (rng.standard_normal((*batch, pool, dim)) * 0.05).astype(np.float32)
    pick = (pool * rng.random((*batch, rows)) ** 3).astype(np.int64) % pool
    return np.take_along_axis(base, pick[..., None].repeat(dim, -1), axis=-2)


def same_on_both(x, eb, shape2, dtype, codec, cap=None, mode="rel"):
    """Compresses x on the CPU and the GPU (frames and nbytes must match), decodes each side's
    frames on the other (statuses and values must match); returns the frame infos."""
    fc, nc = compress_on(CPU, x, eb, codec=codec, capacity=cap, mode=mode)
    fg, ng = compress_on(GPU, x, eb, codec=codec, capacity=cap, mode=mode)
    _check_same(nc, ng, f"nbytes {codec} eb={eb}")
    _check_same(fc, fg, f"frames {codec} eb={eb}")
    yc, sc = decompress_on(CPU, fg, ng, shape2, dtype)
    yg, sg = decompress_on(GPU, fc, nc, shape2, dtype)
    _check_same(sc, sg, f"status {codec}")
    _check_same(bits_of(yc), bits_of(yg), f"decoded values {codec}")
    vg = status_on(GPU, fc, nc, shape2, dtype)
    _check_same(sc, vg, f"frame_status {codec}")
    return frame_info(fc, nc)


# ------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "kind", ["normal", "dup", "special", "constant", "zeros", "nan", "wide", "subnormal"]
)
def test_frames_identical_and_cross_decode(dtype, codec, kind):
    shape = (3, 40, 24)
    x = jnp.asarray(make_data(kind, shape, seed=1), dtype)
    cap = raw_frame_bytes(40, 24, dtype)
    for eb in (0.01, 0.05, 1e-6):
        fc, nc = compress_on(CPU, x, eb, codec=codec, capacity=cap)
        fg, ng = compress_on(GPU, x, eb, codec=codec, capacity=cap)
        _check_same(nc, ng, f"nbytes {codec} {kind} eb={eb}")
        _check_same(fc, fg, f"frames {codec} {kind} eb={eb}")
        # Each side decodes the other's frames (identical here, so also the same values).
        yc, sc = decompress_on(CPU, fg, ng, (40, 24), dtype)
        yg, sg = decompress_on(GPU, fc, nc, (40, 24), dtype)
        _check_same(sc, sg, "status")
        _check_same(bits_of(yc), bits_of(yg), "decoded values")
        assert np.all(sg == 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("mode,eb", [("rel", 0.01), ("rel", 0.05), ("rel", 1e-7), ("abs", 0.003)])
def test_error_bound_on_gpu(dtype, codec, mode, eb):
    x = jnp.asarray(make_data("special", (4, 64, 32), seed=2), dtype)
    cap = raw_frame_bytes(64, 32, dtype)
    f, nb = compress_on(GPU, x, eb, mode=mode, codec=codec, capacity=cap)
    y, st = decompress_on(GPU, f, nb, (64, 32), dtype)
    assert np.all(st == 0) and np.all(nb > 0)
    x64 = np.asarray(x).astype(np.float64)
    y64 = y.astype(np.float64)
    fin = np.isfinite(x64)
    for c, info in enumerate(frame_info(f, nb)):
        err = np.abs(x64[c][fin[c]] - y64[c][fin[c]])
        # The bound as stated, in float64 (the frame stores the half step, lower for half types).
        v = x64[c][fin[c]]
        stated = np.float64(np.float32(eb)) * ((v.max() - v.min()) if mode == "rel" else 1.0)
        bound = 0.0 if info.form == "raw" else stated
        assert info.form == "raw" or info.eb_abs <= stated, (c, info)
        assert err.max(initial=0.0) <= bound, (c, info)
    xb, yb = bits_of(np.asarray(x)), bits_of(y)
    _check_same(xb[~fin], yb[~fin], "non-finite values must round-trip bit-exactly")


@pytest.mark.parametrize(
    "shape", [(1, 1, 1), (2, 3, 5), (5, 1, 7), (1, 1000, 33), (2, 64, 129), (1, 2048, 64)]
)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_shapes_all_codecs(shape, dtype):
    x = jnp.asarray(make_data("special", shape, seed=3), dtype)
    cap = raw_frame_bytes(shape[-2], shape[-1], dtype)
    for codec in CODECS:
        fc, nc = compress_on(CPU, x, 0.02, codec=codec, capacity=cap)
        fg, ng = compress_on(GPU, x, 0.02, codec=codec, capacity=cap)
        _check_same(nc, ng, f"nbytes {shape} {codec}")
        _check_same(fc, fg, f"frames {shape} {codec}")
        yg, sg = decompress_on(GPU, fc, nc, shape[-2:], dtype)
        yc, sc = decompress_on(CPU, fc, nc, shape[-2:], dtype)
        _check_same(sc, sg, "status")
        _check_same(bits_of(yc), bits_of(yg), "decoded values")


def test_many_outliers_two_byte_count():
    # >= 128 outliers: the outlier count takes two varint bytes and the codes shift by one.
    x = make_data("normal", (2, 64, 64), seed=4)
    x.reshape(2, -1)[:, ::17] = np.nan
    x[1, :, :] = np.where(np.arange(64) % 2 == 0, np.inf, x[1])
    cap = raw_frame_bytes(64, 64, np.float32)
    for codec in ("fixed", "auto", "entropy"):
        fc, nc = compress_on(CPU, x, 0.01, codec=codec, capacity=cap)
        fg, ng = compress_on(GPU, x, 0.01, codec=codec, capacity=cap)
        assert all(i.n_outliers >= 128 for i in frame_info(fc, nc) if i.form == "quantized")
        _check_same(nc, ng, codec)
        _check_same(fc, fg, codec)


@pytest.mark.parametrize("codec", CODECS)
def test_overflow_matches_cpu(codec):
    x = make_data("special", (3, 32, 16), seed=5)
    for cap in (12, 40, 200):
        fc, nc = compress_on(CPU, x, 0.01, codec=codec, capacity=cap)
        fg, ng = compress_on(GPU, x, 0.01, codec=codec, capacity=cap)
        _check_same(nc, ng, f"nbytes cap={cap}")
        _check_same(fc, fg, f"frames cap={cap}")
        yg, sg = decompress_on(GPU, fg, ng, (32, 16), np.float32)
        assert np.all((ng >= 0) | (sg == 1))
        assert np.all(np.isnan(yg[sg != 0]))


def test_fixed_capacity_and_dlrm_exchange_shape():
    # The DLRM exchange: 26 tables x 8 peers chunks of [256, 64], one launch per call.
    x = make_data("normal", (26 * 8, 256, 64), seed=6)
    x[::5] = make_data("dup", (42, 256, 64), seed=7)
    for codec, cap in (
        ("fixed", frame_capacity((256, 64), np.float32, "fixed", 0.01, outliers=8)),
        ("auto", None),
        ("entropy", None),
    ):
        fc, nc = compress_on(CPU, x, 0.01, codec=codec, capacity=cap)
        fg, ng = compress_on(GPU, x, 0.01, codec=codec, capacity=cap)
        _check_same(nc, ng, codec)
        _check_same(fc, fg, codec)
        yc, sc = decompress_on(CPU, fg, ng, (256, 64), np.float32)
        yg, sg = decompress_on(GPU, fc, nc, (256, 64), np.float32)
        _check_same(sc, sg, "status")
        _check_same(bits_of(yc), bits_of(yg), "values")


@pytest.mark.parametrize("chunks", [1, 3, 26 * 8])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_decompress_fixed_rate_matches_cpu(chunks, dtype):
    """The one-launch fixed-rate decoder (fixed_rate=True: no dictionary workspace; one part
    per chunk for few chunks, several for many): the same values and statuses as the CPU on
    fixed and raw frames, NaN and UNSUPPORTED_FORM (10) on dictionary frames."""
    for codec in ("fixed", "raw", "dedup"):
        kind = "dup" if codec == "dedup" else "normal"  # repeated rows: dictionary frames
        x = make_data(kind, (chunks, 256, 64), seed=11).astype(dtype)
        fc, nc = compress_on(CPU, x, 0.01, codec=codec, min_error_bound=0.01)
        yc, sc = decompress_on(CPU, fc, nc, (256, 64), dtype, fixed_rate=True)
        yg, sg = decompress_on(GPU, fc, nc, (256, 64), dtype, fixed_rate=True)
        _check_same(sc, sg, f"{codec} status")
        _check_same(bits_of(yc), bits_of(yg), f"{codec} values")
        if codec == "dedup":
            assert np.all(sg == 10) and np.all(np.isnan(np.asarray(yg, np.float32)))
        else:  # every frame that fit decodes (an overflowed one has its own status)
            assert np.all(sg[nc >= 0] == 0) and np.count_nonzero(nc >= 0) > 0


@pytest.mark.parametrize("extra", [0, 1], ids=["aligned", "odd"])
@pytest.mark.parametrize("fixed_rate", [True, False])
def test_stale_checksum_in_each_part_of_a_fixed_frame(extra, fixed_rate):
    """The decoder sums a fixed-rate frame's checksum from the bytes it stages, each block of a
    frame spread over several (few chunks: one per half tile) summing its own units' words and
    reading the rest: a byte changed (checksum left stale) in the header, in any unit's codes, in
    the outliers or in the checksum field gives BAD_CHECKSUM (7) and NaN on every part, as on
    the CPU. ``extra``: capacities a multiple of 16 (every frame 16-aligned: the folded sum) and
    one byte more (odd addresses: the whole-frame sum)."""
    x = make_data("special", (2, 256, 64), seed=21)
    cap = frame_capacity((256, 64), np.float32, "fixed", 0.01, outliers=64)
    cap = (cap + 15) // 16 * 16 + extra
    f, nb = compress_on(CPU, x, 0.01, codec="fixed", capacity=cap)
    info = frame_info(f, nb)[0]
    assert np.all(nb > 0) and info.form == "quantized" and info.n_outliers > 0
    # The codes start after the header, eb_abs, base and the outlier count; a half tile's
    # codes (2048 values) take 256 * bits bytes.
    s0 = header_bytes(256, 64) + 8 + (1 if info.n_outliers < 128 else 2)
    unit = 256 * info.bits
    spots = [9, 4, int(nb[0]) - 1] + [s0 + k * unit + unit // 2 for k in range(8)]
    frames = [f[0], f[1]]
    lens = [nb[0], nb[1]]
    for at in spots:
        g = f[0].copy()
        g[at] ^= 0x5A
        frames.append(g)
        lens.append(nb[0])
    frames, lens = np.stack(frames), np.asarray(lens, np.int32)
    yc, sc = decompress_on(CPU, frames, lens, (256, 64), np.float32, fixed_rate=fixed_rate)
    yg, sg = decompress_on(GPU, frames, lens, (256, 64), np.float32, fixed_rate=fixed_rate)
    _check_same(sc, sg, "status")
    _check_same(bits_of(yc), bits_of(yg), "values")
    assert sg[:2].tolist() == [0, 0] and np.all(sg[2:] == 7)
    assert np.all(np.isnan(yg[2:]))


def test_bad_nbytes_and_shape_statuses():
    x = make_data("normal", (2, 16, 8), seed=8)
    f, nb = compress_on(CPU, x, 0.01, codec="fixed", capacity=raw_frame_bytes(16, 8, np.float32))
    cases = {
        "negative": np.array([-5, nb[1]], np.int32),
        "zero": np.array([0, 3], np.int32),
        "past capacity": np.array([f.shape[-1] + 1, nb[1]], np.int32),
        "short": np.array([nb[0] - 1, nb[1] + 1], np.int32),
    }
    for name, n in cases.items():
        for shape, dt in (((16, 8), np.float32), ((8, 16), np.float32), ((16, 8), np.float16)):
            sc = status_on(CPU, f, n, shape, dt)
            sg = status_on(GPU, f, n, shape, dt)
            _check_same(sc, sg, f"status {name} {shape} {np.dtype(dt).name}")
            yc, _ = decompress_on(CPU, f, n, shape, dt)
            yg, _ = decompress_on(GPU, f, n, shape, dt)
            _check_same(bits_of(yc), bits_of(yg), f"values {name}")


def _fuzz(n_frames: int, seed: int):
    rng = np.random.default_rng(seed)
    rows, dim = 24, 16
    xs = [
        make_data(k, (1, rows, dim), seed=seed + i)
        for i, k in enumerate(["normal", "dup", "special", "constant", "wide"])
    ]
    x = np.concatenate(xs)
    cap = raw_frame_bytes(rows, dim, np.float32) + 16
    frames, nbytes = [], []
    for codec in CODECS:
        f, nb = compress_on(CPU, x, 0.02, codec=codec, capacity=cap)
        frames.append(f)
        nbytes.append(nb)
    frames, nbytes = np.concatenate(frames), np.concatenate(nbytes)
    out_f = np.zeros((n_frames, cap), np.uint8)
    out_n = np.zeros(n_frames, np.int32)
    for k in range(n_frames):
        j = rng.integers(0, len(frames))
        f, nb = frames[j].copy(), int(nbytes[j])
        how = rng.integers(0, 5)
        if how == 0:  # flip bytes, checksum left stale
            f[rng.integers(0, max(nb, 1), rng.integers(1, 4))] ^= rng.integers(
                1, 256, dtype=np.uint8
            )
        elif how == 1:  # flip bytes past the header and re-seal: the sections get parsed
            pos = rng.integers(8, max(nb, 9), rng.integers(1, 6))
            f[pos % cap] ^= rng.integers(1, 256, dtype=np.uint8)
            f = reseal(f, nb)
        elif how == 2:  # wrong length, re-sealed
            nb = int(np.clip(nb + rng.integers(-12, 12), 0, cap))
            f = reseal(f, nb)
        elif how == 3:  # random header bytes, re-sealed
            f[rng.integers(0, 16, 2)] = rng.integers(0, 256, 2, dtype=np.uint8)
            f = reseal(f, nb)
        else:  # garbage with a valid checksum
            nb = int(rng.integers(0, cap + 1))
            f[:nb] = rng.integers(0, 256, nb, dtype=np.uint8)
            f[0] = 0xE5
            f = reseal(f, nb)
        out_f[k], out_n[k] = f, nb
    return out_f, out_n, (rows, dim)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fuzzed_frames_same_status_and_values(seed):
    f, nb, shape = _fuzz(300, seed)
    sc = status_on(CPU, f, nb, shape, np.float32)
    sg = status_on(GPU, f, nb, shape, np.float32)
    _check_same(sc, sg, "frame_status of fuzzed frames")
    yc, dc = decompress_on(CPU, f, nb, shape, np.float32)
    yg, dg = decompress_on(GPU, f, nb, shape, np.float32)
    _check_same(dc, dg, "decompress status of fuzzed frames")
    _check_same(bits_of(yc), bits_of(yg), "decoded fuzzed frames")
    assert len(set(sc.tolist())) > 3  # the fuzzer reached several kinds of failure


def test_fuzz_small():
    """A short fuzz run, the one bench/gpu_check.sh runs under compute-sanitizer memcheck."""
    f, nb, shape = _fuzz(60, 11)
    _ = status_on(GPU, f, nb, shape, np.float32)
    _ = decompress_on(GPU, f, nb, shape, np.float32)
    x = make_data("special", (4, 24, 16), seed=12)
    for codec in CODECS:
        compress_on(GPU, x, 0.02, codec=codec, capacity=raw_frame_bytes(24, 16, np.float32))
        compress_on(GPU, x, 0.02, codec=codec, capacity=30)
    h = hot_rows((3, 2048, 16), 13)  # dictionary and Huffman sections of several segments
    for codec in DICT_CODECS:
        fh, nh = compress_on(GPU, h, 0.01, codec=codec)
        fh = fh.copy()
        _ = decompress_on(GPU, fh, nh, (2048, 16), np.float32)
        fh[:, fh.shape[-1] // 3] ^= 0x10  # corrupt (checksum fails) and re-sealed copies
        _ = status_on(GPU, fh, nh, (2048, 16), np.float32)
        rs = np.stack([reseal(fh[i], int(nh[i])) for i in range(len(fh))])
        _ = decompress_on(GPU, rs, nh, (2048, 16), np.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("codec", DICT_CODECS)
def test_dictionary_forms_hot_rows(dtype, codec):
    # 2048 x 64 chunks of hot ids (index sections of two segments) and 256 x 64 ones, plus rows
    # one ulp apart (different input rows with the same codes) and repeated NaN/Inf rows.
    for shape, seed in (((3, 2048, 64), 20), ((8, 256, 64), 21)):
        x = hot_rows(shape, seed)
        x[0, 1::7] = np.nextafter(x[0, 1::7], np.float32(1))
        x[1, 0, 3], x[1, 1, 5] = np.nan, -np.inf
        x[1, 2:] = x[1, :2].repeat(shape[1] // 2, 0)[: shape[1] - 2]
        x = jnp.asarray(x, dtype)
        for eb in (0.01, 0.05):
            infos = same_on_both(x, eb, shape[1:], dtype, codec)
            if codec != "auto":
                assert all(i.form == "quantized" for i in infos), infos
            if codec == "entropy":
                assert any(i.codes_huffman for i in infos) and any(i.index_huffman for i in infos)
            if codec == "dedup":
                assert all(i.dedup and not i.codes_huffman for i in infos)


@pytest.mark.parametrize("eb", [1e-3, 2e-4, 1e-4])
def test_large_code_alphabets(eb):
    # 501 and 2501 symbols (sort keys in shared memory, then in scratch), 5001 (bit-packed).
    x = np.concatenate([make_data("normal", (2, 256, 32), seed=30), hot_rows((2, 256, 32), 31)])
    for codec in DICT_CODECS:
        same_on_both(x, eb, (256, 32), np.float32, codec)
        same_on_both(x, eb * 3, (256, 32), np.float32, codec, mode="abs")


@pytest.mark.parametrize("segments", [1, 16, 32, 40])
def test_huffman_segments_by_warps_equal_length_codes(segments):
    """Sections of up to 32 segments decode a warp a segment, each lane from a guessed start in
    its window of bits, corrected round by round: four equally frequent values give 2-bit codes,
    which never resynchronise from an odd bit (every round moves a start); 40 segments take one
    thread a segment. The same values and statuses as the CPU, on intact frames and with a bit
    flipped at three places (re-sealed: CORRUPT, or other values)."""
    rows = segments * 1024 // 64
    rng = np.random.default_rng(segments)
    x = (rng.integers(0, 4, (2, rows, 64)) * 0.25).astype(np.float32)
    x[1] = make_data("normal", (rows, 64), seed=segments)  # longer codes, mixed lengths
    fc, nc = compress_on(CPU, x, 0.05, codec="entropy")
    fg, ng = compress_on(GPU, x, 0.05, codec="entropy")
    _check_same(nc, ng, "nbytes")
    _check_same(fc, fg, "frames")
    assert all(i.codes_huffman for i in frame_info(fc, nc))
    frames, lens = [fc[0], fc[1]], [nc[0], nc[1]]
    for c in range(2):
        n = int(nc[c])
        for at in (n // 2, n - 2):
            g = fc[c].copy()
            g[at] ^= 0x04
            frames.append(reseal(g, n))
            lens.append(n)
        g = fc[c].copy()
        g[n // 8] ^= 0x01
        frames.append(reseal(g, n))
        lens.append(n)
    frames, lens = np.stack(frames), np.asarray(lens, np.int32)
    yc, sc = decompress_on(CPU, frames, lens, (rows, 64), np.float32)
    yg, sg = decompress_on(GPU, frames, lens, (rows, 64), np.float32)
    _check_same(sc, sg, "status")
    _check_same(bits_of(yc), bits_of(yg), "values")
    assert sg[:2].tolist() == [0, 0]


def test_empty_and_tiny_chunks_all_codecs():
    for shape in [(2, 0, 8), (2, 8, 0), (3, 1, 1), (2, 1, 300), (4, 2, 3)]:
        x = make_data("special", shape, seed=32) if 0 not in shape else np.zeros(shape, np.float32)
        for codec in CODECS:
            same_on_both(
                x,
                0.02,
                shape[1:],
                np.float32,
                codec,
                cap=raw_frame_bytes(shape[1], shape[2], np.float32),
            )


def _dumps():
    if not (DUMPS / "manifest.json").is_file():
        return []
    import json

    return [
        (e["file"].split("/")[-1], tuple(e["shape"]))
        for e in json.loads((DUMPS / "manifest.json").read_text())
    ]


@pytest.mark.skipif(not _dumps(), reason=f"real embedding dumps absent ({DUMPS})")
@pytest.mark.parametrize("dtype", (jnp.float32, jnp.bfloat16), ids=lambda d: np.dtype(d).name)
def test_real_dumps_and_exchange_shape(dtype):
    chunks = []
    for name, shape in _dumps():
        a = np.fromfile(DUMPS / name, "<f4").reshape(shape)
        x = jnp.asarray(a[None], dtype)
        for codec in DICT_CODECS:
            for eb in (0.01, 0.05):
                same_on_both(x, eb, shape, dtype, codec)
        if shape[1] == 64:
            chunks += [a[r : r + 256] for r in range(0, shape[0] - 255, 256)]
    if chunks:  # the DLRM exchange: 26 tables x 8 peers chunks of [256, 64] in one launch
        x = np.stack([chunks[k % len(chunks)] for k in range(26 * 8)])
        for codec in DICT_CODECS:
            same_on_both(jnp.asarray(x, dtype), 0.01, (256, 64), dtype, codec)


@pytest.mark.parametrize("seed", [3, 4])
def test_fuzzed_dictionary_frames(seed):
    # Bit flips inside the Huffman and index sections of large frames (re-sealed, so the
    # sections get decoded), and lengths one byte off.
    rng = np.random.default_rng(seed)
    x = hot_rows((4, 2048, 16), seed + 40)
    frames, nbytes = [], []
    for codec in DICT_CODECS:
        f, nb = compress_on(CPU, x, 0.01, codec=codec)
        frames.append(f)
        nbytes.append(nb)
    frames, nbytes = np.concatenate(frames), np.concatenate(nbytes)
    cap = frames.shape[-1]
    out_f, out_n = [], []
    for k in range(120):
        j = int(rng.integers(0, len(frames)))
        f, nb = frames[j].copy(), int(nbytes[j])
        if k % 4 == 3:
            nb = int(np.clip(nb + (1 if rng.integers(0, 2) else -1), 0, cap))
        else:
            bit = int(rng.integers(8 * 8, 8 * nb))
            f[bit // 8] ^= np.uint8(1 << (bit % 8))
        out_f.append(reseal(f, nb))
        out_n.append(nb)
    f, nb = np.stack(out_f), np.asarray(out_n, np.int32)
    sc = status_on(CPU, f, nb, (2048, 16), np.float32)
    sg = status_on(GPU, f, nb, (2048, 16), np.float32)
    _check_same(sc, sg, "frame_status of corrupted dictionary frames")
    yc, dc = decompress_on(CPU, f, nb, (2048, 16), np.float32)
    yg, dg = decompress_on(GPU, f, nb, (2048, 16), np.float32)
    _check_same(dc, dg, "decompress status of corrupted dictionary frames")
    _check_same(bits_of(yc), bits_of(yg), "decoded corrupted dictionary frames")
    assert (sc == 8).any()  # some flips reached the sections (kCorrupt)


def test_checksum_helper_matches_frames():
    # The test's own checksum (used to re-seal fuzzed frames) agrees with the codec's.
    f, nb = compress_on(CPU, make_data("normal", (3, 8, 8)), 0.01, codec="entropy")
    for row, n in zip(f, nb):
        assert frame_checksum(row[:n].tobytes()) == int.from_bytes(row[4:8].tobytes(), "little")
