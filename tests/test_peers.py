"""Tests of the peer codecs of the codec comparison (bench/peers.py, bench/peer_bench.py).

Correctness only, no timing: error-bounded peers that are installed honour |x - x_hat| <=
eb_abs (checked in float64) on a real dump, the quantization + zstd peer round-trips within
the bound (also on NaN/Inf, constant and zero-bound inputs), and a peer whose package is
missing is reported as unavailable with a reason instead of raising.

These tests need neither jax_lossy_comm nor any optional peer: missing peers are skipped.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parents[2] / "shared" / "data"
sys.path.insert(0, str(REPO / "bench"))

import bench_util as bu  # noqa: E402
import peers  # noqa: E402

ERROR_BOUNDED = (
    "zstd-1",
    "quant-codes",
    "quant-codes+zstd-1",
    "quant-codes+zstd-19",
    "sz3-default",
    "sz3-nopred",
    "zfp-accuracy",
)
HAVE_DATA = (DATA / "emb_dumps" / "manifest.json").is_file()
needs_data = pytest.mark.skipif(
    not HAVE_DATA, reason=f"real dumps absent: {DATA / 'emb_dumps' / 'manifest.json'}"
)


@pytest.fixture(scope="module")
def registry():
    return {c.name: c for c in peers.registry()}


@pytest.fixture(scope="module")
def dumps():
    if not HAVE_DATA:
        pytest.skip(f"real dumps absent: {DATA}")
    return {d.name: d for d in bu.iter_dumps(DATA)}


def test_registry_lists_every_peer_with_a_reason_when_unavailable(registry):
    expected = set(ERROR_BOUNDED) | {
        "fbgemm-fp16",
        "fbgemm-bf16",
        "fbgemm-int8-rowwise",
        "fbgemm-mx4",
        "fbgemm-hfp8",
        "jax-bf16",
        "jax-fp8-e4m3",
    }
    assert expected <= set(registry), expected - set(registry)
    assert {n for n, c in registry.items() if c.error_bounded} == set(ERROR_BOUNDED)
    for c in registry.values():
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
    ],
)
def test_missing_package_gives_skipped_entries(monkeypatch, module, names):
    # None in sys.modules makes `import module` raise ImportError, as if not installed.
    monkeypatch.setitem(sys.modules, module, None)
    for sub in [m for m in sys.modules if m.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, sub, None)
    reg = {c.name: c for c in peers.registry()}
    for name in names:
        assert not reg[name].available
        assert "Error" in reg[name].skip_reason, reg[name].skip_reason
        with pytest.raises(RuntimeError, match="unavailable"):
            reg[name].roundtrip(np.zeros((4, 32), np.float32), 0.1)
    assert reg["quant-codes"].available  # numpy only: never skipped


@needs_data
@pytest.mark.parametrize("eb_rel", [0.01, 0.05])
@pytest.mark.parametrize("name", ERROR_BOUNDED)
def test_error_bounded_peer_honours_bound_on_real_dump(registry, dumps, name, eb_rel):
    codec = registry[name]
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
    codec = {c.name: c for c in peers.registry(["quant-codes+zstd-1"])}["quant-codes+zstd-1"]
    for dump in dumps.values():
        x = dump.array
        for eb_rel in (0.001, 0.01, 0.03, 0.05):  # 0.001 needs uint16 codes
            eb_abs = bu.eb_abs_from_rel(x, eb_rel)
            blob = codec.compress(x, eb_abs)
            y = codec.decompress(blob, x.shape)
            err = np.abs(x.astype(np.float64) - y.astype(np.float64))
            assert err.max() <= eb_abs, (dump.name, eb_rel, err.max() / eb_abs)
            assert peers.quantize_code_width(blob) == (2 if eb_rel < 0.002 else 1)
    # the Kaggle table-8 dump has 2 distinct rows: codes + zstd-1 squeeze it to ~100 bytes
    x = dumps["kaggle_table08"].array
    assert codec.nbytes(codec.compress(x, bu.eb_abs_from_rel(x, 0.01))) < 300


def test_quant_special_values_and_constant_chunks():
    zstandard = pytest.importorskip("zstandard")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 32)).astype(np.float32)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    for level in (None, 1):
        blob = peers.quantize_encode(x, 0.01, level=level, zstd_module=zstandard)
        y = peers.quantize_decode(blob, x.shape, zstd_module=zstandard)
        fin = np.isfinite(x)
        assert np.abs(x[fin].astype(np.float64) - y[fin].astype(np.float64)).max() <= 0.01
        assert np.array_equal(x[~fin].view(np.uint32), y[~fin].view(np.uint32))  # bit-exact
        assert peers.quantize_outliers(blob) >= 3
        # constant chunk: eb_abs = 0 from REL mode, header-sized, exact
        c = np.full((16, 32), 0.25, np.float32)
        cb = peers.quantize_encode(
            c, bu.eb_abs_from_rel(c, 0.01), level=level, zstd_module=zstandard
        )
        assert np.array_equal(peers.quantize_decode(cb, c.shape, zstd_module=zstandard), c)
        # zero bound on varying data: lossless fallback
        zb = peers.quantize_encode(x, 0.0, level=level, zstd_module=zstandard)
        z = peers.quantize_decode(zb, x.shape, zstd_module=zstandard)
        assert np.array_equal(z.view(np.uint32), x.view(np.uint32))
    assert len(peers.quantize_encode(c, 0.0, level=1, zstd_module=zstandard)) < 64


def test_quant_decode_rejects_bad_blobs():
    x = np.linspace(-1, 1, 128, dtype=np.float32).reshape(4, 32)
    blob = peers.quantize_encode(x, 0.01, level=None)
    with pytest.raises(ValueError):
        peers.quantize_decode(blob[:-1], x.shape)
    with pytest.raises(ValueError):
        peers.quantize_decode(b"XYZ" + blob[3:], x.shape)
    with pytest.raises(ValueError):
        peers.quantize_decode(blob, (8, 32))


@needs_data
def test_bench_codec_reports_skipped_and_measures(monkeypatch, dumps):
    # importing peer_bench sets single-thread environment variables: restore them afterwards
    for var in (
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "XLA_FLAGS",
    ):
        if var in os.environ:
            monkeypatch.setenv(var, os.environ[var])
        else:
            monkeypatch.delenv(var, raising=False)
    import peer_bench

    x = dumps["kaggle_table05"].array
    eb_abs = bu.eb_abs_from_rel(x, 0.01)
    missing = peers.unavailable("fake", "lossless", True, "ImportError: no fake")
    row = peer_bench.bench_codec(missing, x, eb_abs)
    assert row["status"] == "skipped" and row["skip_reason"] == "ImportError: no fake"
    quant = peers.registry(["quant-codes"])[0]
    row = peer_bench.bench_codec(quant, x, eb_abs, warmup=1, repeats=2, min_repeats=1)
    assert row["status"] == "ok" and row["bound_ok"] and not row["bound_violated"]
    assert math.isclose(row["ratio"], x.nbytes / row["compressed_bytes"])
    assert row["code_bytes"] == 1 and row["compress_gbps"] > 0
    table = peer_bench.format_table([row, peer_bench.bench_codec(missing, x, eb_abs)])
    assert "skipped: ImportError: no fake" in table
