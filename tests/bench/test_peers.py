"""Tests of the codec registry of the benchmarks (bench/codecs/registry.py, bench/codecs/quant_codes.py) and
of the codec benchmark's measurement (bench/codecs/codec_bench.py).

Correctness only, no timing: error-bounded codecs that are installed (the library's forms
included) honour |x - x_hat| <= eb_abs (checked in float64) on a real dump, the quantization +
zstd peer round-trips within the bound (also on NaN/Inf, constant and zero-bound inputs), the
library's entries size their frames as asked, and a codec whose package is missing is
reported as unavailable with a reason instead of raising.

These tests need no optional peer: missing peers are skipped.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import bench_util as bu
from bench.codecs import codec_bench, codec_entry, jax_codecs, quant_codes, registry
from jax_lossy_comm.codec_factory import BASELINES

DATA = Path(__file__).parents[3] / "shared" / "data"
LIBRARY = tuple(f"jlc-{f}" for f in jax_codecs.LIBRARY_FORMS)
ERROR_BOUNDED = (
    "zstd-1",
    "quant-codes",
    "quant-codes+zstd-1",
    "quant-codes+zstd-19",
    "sz3-default",
    "sz3-nopred",
    "zfp-accuracy",
    *LIBRARY,
)
HAVE_DATA = (DATA / "emb_dumps" / "manifest.json").is_file()
needs_data = pytest.mark.skipif(
    not HAVE_DATA, reason=f"real dumps absent: {DATA / 'emb_dumps' / 'manifest.json'}"
)


@pytest.fixture(scope="module")
def codecs():
    return {c.name: c for c in registry.registry()}


@pytest.fixture(scope="module")
def dumps():
    if not HAVE_DATA:
        pytest.skip(f"real dumps absent: {DATA}")
    return {d.name: d for d in bu.iter_dumps(DATA)}


def test_registry_lists_every_codec_with_a_reason_when_unavailable(codecs):
    expected = set(ERROR_BOUNDED) | {
        "fbgemm-fp16",
        "fbgemm-bf16",
        "fbgemm-int8-rowwise",
        "fbgemm-mx4",
        "fbgemm-hfp8",
        "jax-bf16",
        "jax-fp8-e4m3",
        *jax_codecs.JAX_QCOMM,
        "memcpy",
    }
    assert expected <= set(codecs), expected - set(codecs)
    assert tuple(jax_codecs.JAX_QCOMM.values()) == tuple(BASELINES)  # the factory's names
    assert {n for n, c in codecs.items() if c.error_bounded} == set(ERROR_BOUNDED)
    assert [n for n in codecs if n.startswith("jlc-")] == list(LIBRARY)  # the library once
    for c in codecs.values():
        if c.available:
            assert c.compress is not None and c.decompress is not None and not c.skip_reason
        else:
            assert c.skip_reason, c.name
            assert c.compress is None


@pytest.mark.parametrize(
    "module, names",
    [
        ("pysz", ("sz3-default", "sz3-nopred")),
        ("zfpy", ("zfp-accuracy",)),
        ("fbgemm_gpu", ("fbgemm-fp16", "fbgemm-int8-rowwise", "fbgemm-mx4")),
        ("zstandard", ("zstd-1", "quant-codes+zstd-1", "quant-codes+zstd-19")),
        ("jax_lossy_comm", LIBRARY),
        ("jax_lossy_comm", tuple(jax_codecs.JAX_QCOMM)),
    ],
)
def test_missing_package_gives_skipped_entries(monkeypatch, module, names):
    # None in sys.modules makes `import module` raise ImportError, as if not installed.
    monkeypatch.setitem(sys.modules, module, None)
    for sub in [m for m in sys.modules if m.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, sub, None)
    reg = {c.name: c for c in registry.registry()}
    for name in names:
        assert not reg[name].available
        assert "Error" in reg[name].skip_reason, reg[name].skip_reason
        with pytest.raises(RuntimeError, match="unavailable"):
            reg[name].roundtrip(np.zeros((4, 32), np.float32), 0.1)
    assert reg["quant-codes"].available  # numpy only: never skipped


@needs_data
@pytest.mark.parametrize("eb_rel", [0.01, 0.05])
@pytest.mark.parametrize("name", ERROR_BOUNDED)
def test_error_bounded_codec_honours_bound_on_real_dump(codecs, dumps, name, eb_rel):
    codec = codecs[name]
    if not codec.available:
        pytest.skip(f"{name} unavailable: {codec.skip_reason}")
    for dump_name in ("terabyte_table01", "kaggle_table05"):
        x = dumps[dump_name].array
        eb_abs = bu.eb_abs_from_rel(x, eb_rel)
        y, nbytes = codec.roundtrip(x, eb_abs)
        assert y.shape == x.shape and y.dtype == np.float32
        err = np.abs(x.astype(np.float64) - y.astype(np.float64)).max()
        assert err <= eb_abs, (name, dump_name, err / eb_abs)
        assert 0 < nbytes < x.nbytes  # every error-bounded peer compresses these dumps


@needs_data
def test_quant_zstd_roundtrip_within_eb_float64(dumps):
    pytest.importorskip("zstandard")
    (codec,) = registry.registry(["quant-codes+zstd-1"])
    for dump in dumps.values():
        x = dump.array
        for eb_rel in (0.001, 0.01, 0.03, 0.05):  # 0.001 needs uint16 codes
            eb_abs = bu.eb_abs_from_rel(x, eb_rel)
            blob = codec.compress(x, eb_abs)
            y = codec.decompress(blob, x.shape)
            err = np.abs(x.astype(np.float64) - y.astype(np.float64))
            assert err.max() <= eb_abs, (dump.name, eb_rel, err.max() / eb_abs)
            assert quant_codes.code_width(blob) == (2 if eb_rel < 0.002 else 1)
    # the Kaggle table-8 dump has 2 distinct rows: codes + zstd-1 squeeze it to ~100 bytes
    x = dumps["kaggle_table08"].array
    assert codec.nbytes(codec.compress(x, bu.eb_abs_from_rel(x, 0.01))) < 300


def test_quant_special_values_and_constant_chunks():
    zstandard = pytest.importorskip("zstandard")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 32)).astype(np.float32)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    for level in (None, 1):
        blob = quant_codes.encode(x, 0.01, level=level, zstd_module=zstandard)
        y = quant_codes.decode(blob, x.shape, zstd_module=zstandard)
        fin = np.isfinite(x)
        assert np.abs(x[fin].astype(np.float64) - y[fin].astype(np.float64)).max() <= 0.01
        assert np.array_equal(x[~fin].view(np.uint32), y[~fin].view(np.uint32))  # bit-exact
        assert quant_codes.outliers(blob) >= 3
        # constant chunk: eb_abs = 0 from REL mode, header-sized, exact
        c = np.full((16, 32), 0.25, np.float32)
        cb = quant_codes.encode(c, bu.eb_abs_from_rel(c, 0.01), level=level, zstd_module=zstandard)
        assert np.array_equal(quant_codes.decode(cb, c.shape, zstd_module=zstandard), c)
        # zero bound on varying data: lossless fallback
        zb = quant_codes.encode(x, 0.0, level=level, zstd_module=zstandard)
        z = quant_codes.decode(zb, x.shape, zstd_module=zstandard)
        assert np.array_equal(z.view(np.uint32), x.view(np.uint32))
    assert len(quant_codes.encode(c, 0.0, level=1, zstd_module=zstandard)) < 64


def test_quant_decode_rejects_bad_blobs():
    x = np.linspace(-1, 1, 128, dtype=np.float32).reshape(4, 32)
    blob = quant_codes.encode(x, 0.01, level=None)
    with pytest.raises(ValueError):
        quant_codes.decode(blob[:-1], x.shape)
    with pytest.raises(ValueError):
        quant_codes.decode(b"XYZ" + blob[3:], x.shape)
    with pytest.raises(ValueError):
        quant_codes.decode(blob, (8, 32))


@needs_data
def test_library_entries_size_frames_as_asked(dumps):
    import jax_lossy_comm as jlc

    x = dumps["terabyte_table01"].array
    eb_abs = bu.eb_abs_from_rel(x, 0.01)
    r = jax_codecs.rel_bound_within(float(x.min()), float(x.max()), eb_abs)
    raw = jlc.frame_capacity(x.shape, np.float32, "raw")
    for capacity, expected in (
        ("raw", raw),
        ("bound", jlc.frame_capacity(x.shape, np.float32, "fixed", r)),
    ):
        (fixed,) = registry.library_codecs(["fixed"], capacity=capacity)
        frames, nbytes = fixed.compress(fixed.prepare(x), eb_abs)
        assert frames.shape == (expected,) and 0 < int(nbytes) <= expected
    assert expected < raw / 4  # REL 0.01: 6-bit codes
    # a batch of chunks is one call: frames per chunk, decoded back to the batch's shape
    (auto,) = registry.library_codecs(["auto"], capacity="bound")
    batch = np.stack([x, x[::-1]])
    blob = auto.compress(auto.prepare(batch), eb_abs)
    assert blob[0].shape[0] == 2 and auto.nbytes(blob) == 2 * int(np.asarray(blob[1])[0])
    y = auto.to_numpy(auto.decompress(blob, batch.shape))
    assert y.shape == batch.shape and bu.max_abs_error(batch, y) <= eb_abs
    (bad,) = registry.library_codecs(["nope"])
    assert not bad.available and "unknown codec" in bad.skip_reason
    with pytest.raises(ValueError):
        registry.library_codecs(capacity="huge")


@needs_data
def test_bench_codec_reports_skipped_and_measures(dumps):
    x = dumps["kaggle_table05"].array
    eb_abs = bu.eb_abs_from_rel(x, 0.01)
    missing = codec_entry.unavailable("fake", "lossless", True, "ImportError: no fake")
    row = codec_bench.bench_codec(missing, x, eb_abs)
    assert row["status"] == "skipped" and row["skip_reason"] == "ImportError: no fake"
    (quant,) = registry.registry(["quant-codes"])
    row = codec_bench.bench_codec(quant, x, eb_abs, warmup=1, repeats=2, min_repeats=1)
    assert row["status"] == "ok" and row["bound_ok"] and not row["bound_violated"]
    assert math.isclose(row["ratio"], x.nbytes / row["compressed_bytes"])
    assert row["code_bytes"] == 1 and row["compress_gbps"] > 0
    table = codec_bench.format_table([row, codec_bench.bench_codec(missing, x, eb_abs)])
    assert "skipped: ImportError: no fake" in table
