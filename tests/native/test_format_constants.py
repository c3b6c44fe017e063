"""The Python view of the frame format against the compiled extension's (``xla_ffi/format.h``).

``jax_lossy_comm.frame`` reads the format from the extension when it is built and falls back to
its own :data:`~jax_lossy_comm.frame.FORMAT_TABLE` without it (the pure-jax reference install);
the size functions are Python in both cases. Here the table, the enums and every size function
are checked against the extension's exports, the sizes over a grid of shapes, bounds, dtypes,
bit widths and outlier counts.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jax_lossy_comm import _ffi, frame

pytestmark = pytest.mark.skipif(not _ffi.available(), reason="compiled extension absent")

SCALARS = (
    "MAGIC",
    "VERSION",
    "HEADER_FIXED_BYTES",
    "CHECKSUM_OFFSET",
    "MAX_BITS",
    "HALF_STEP_FLOOR",
    "MAX_HUFFMAN_LENGTH",
    "MAX_HUFFMAN_SYMBOLS",
    "SEGMENT_SYMBOLS",
    "MAX_FRAME_BYTES",
)
TABLES = ("FORMS", "FLAGS", "CODECS", "MODES", "DTYPES")

ROWS = (0, 1, 2, 127, 128, 255, 256, 1000, 16383, 16384, 2**21 + 5)
DIMS = (0, 1, 7, 64, 127, 128, 300)
BOUNDS = (1.0, 0.5, 0.1, 0.05, 0.03, 0.02, 0.01, 1e-3, 2e-4, 1e-5, 3e-8, 2.9802322e-08, 1e-9, 0.0)


def test_fallback_table_equals_the_extension():
    ext = _ffi._ext
    for name in SCALARS:
        assert frame.FORMAT_TABLE[name] == getattr(ext, name), name
    for name in TABLES:
        assert frame.FORMAT_TABLE[name] == dict(getattr(ext, name)), name
    assert frame.FORMAT_TABLE["STATUS"] == [tuple(s) for s in ext.STATUS]


def test_module_constants_and_enums_come_from_the_extension():
    ext = _ffi._ext
    for name in SCALARS:
        assert getattr(frame, name) == getattr(ext, name), name
    assert frame.CODECS == dict(ext.CODECS)
    assert frame.MODES == dict(ext.MODES)
    assert {str(k): v for k, v in frame.DTYPES.items()} == dict(ext.DTYPES)
    assert [(s.name, int(s), s.description) for s in frame.Status] == [tuple(s) for s in ext.STATUS]
    assert frame.STATUS == {code: text for _, code, text in ext.STATUS}
    assert (frame.STATUS_OK, frame.STATUS_OVERFLOW) == (frame.Status.OK, frame.Status.OVERFLOW)
    assert {m.name: int(m) for m in frame.Form} == dict(ext.FORMS)
    assert {m.name: int(m) for m in frame.Flag} == dict(ext.FLAGS)
    assert (frame.FORM_RAW, frame.FORM_QUANT) == (ext.FORMS["RAW"], ext.FORMS["QUANT"])
    assert frame.FLAG_DEDUP == ext.FLAGS["DEDUP"]
    assert frame.FLAG_CODES_HUFFMAN == ext.FLAGS["CODES_HUFFMAN"]
    assert frame.FLAG_INDEX_HUFFMAN == ext.FLAGS["INDEX_HUFFMAN"]
    assert frame.Codec.ENTROPY == 4 and frame.Codec(2) is frame.Codec.FIXED
    assert frame.Status(7).description == "checksum mismatch"
    assert all(m.description for m in (*frame.Codec, *frame.Mode, *frame.Status))


def test_removed_exports_stay_removed():
    assert not hasattr(_ffi._ext, "FRAME_VERSION")
    assert not hasattr(_ffi._ext, "workspace_bytes")


def test_header_and_raw_sizes_match_the_extension():
    ext = _ffi._ext
    for rows, dim in itertools.product(ROWS, DIMS):
        assert frame.header_bytes(rows, dim) == ext.header_bytes(rows, dim), (rows, dim)
        for dt, code in frame.DTYPES.items():
            assert frame.raw_frame_bytes(rows, dim, dt) == ext.raw_frame_bytes(rows, dim, code)
        n = rows * dim
        assert frame.pos_bytes(n) == ext.pos_bytes_for(n), n
    for n in (0, 1, 0x100, 0x101, 0x10000, 0x10001, 0x1000000, 0x1000001, 2**31 - 1):
        assert frame.pos_bytes(n) == ext.pos_bytes_for(n), n


def test_fixed_frame_sizes_match_the_extension():
    ext = _ffi._ext
    for rows, dim in itertools.product(ROWS, DIMS):
        for dt, code in frame.DTYPES.items():
            for bits in (0, 1, 3, 6, 8, 13, 24):
                for outliers in (0, 1, 127, 128, 5000):
                    want = ext.fixed_frame_bytes(rows, dim, bits, code, outliers)
                    got = frame.fixed_frame_bytes(rows, dim, bits, dt, outliers)
                    assert got == want, (rows, dim, dt, bits, outliers)


def test_rel_code_bits_match_the_extension():
    ext = _ffi._ext
    grid = list(BOUNDS) + list(np.geomspace(1e-8, 0.5, 200))
    grid += [1 / (2 * (2**b - 1)) for b in range(1, 25)]  # at the edges of each width
    for eb in grid:
        assert frame.rel_code_bits(eb) == ext.rel_bits_for(float(eb)), eb
        for dt, code in frame.DTYPES.items():  # half types: the width of HALF_STEP_FLOOR * eb
            assert frame.rel_code_bits(eb, dt) == ext.rel_bits_for(float(eb), code), (eb, dt)
    assert frame.rel_code_bits(0.01) == 6 and frame.rel_code_bits(1e-9) == 32
    assert frame.HALF_STEP_FLOOR == ext.HALF_STEP_FLOOR


def test_frame_capacity_uses_the_shared_sizes():
    """The capacity is the extension's frame size rounded up to 16 bytes (every frame of a
    batch 16-byte aligned)."""
    ext = _ffi._ext

    def up16(v):
        return (v + 15) // 16 * 16

    for (rows, dim), eb in itertools.product([(256, 64), (1, 1), (3000, 4)], BOUNDS[:-1]):
        for dt, code in frame.DTYPES.items():
            raw = ext.raw_frame_bytes(rows, dim, code)
            bits = ext.rel_bits_for(eb, code)
            fixed = ext.fixed_frame_bytes(rows, dim, bits, code, 3)
            auto = frame.frame_capacity((rows, dim), dt, "auto", eb, outliers=3)
            assert auto == up16(min(raw, fixed))
            assert frame.frame_capacity((rows, dim), dt, "fixed", eb, outliers=3) == up16(fixed)
            assert frame.frame_capacity((rows, dim), dt, "entropy", eb) == up16(raw)
            assert auto % 16 == 0 and auto - min(raw, fixed) < 16
    # At the frame limit the rounding stops at MAX_FRAME_BYTES (an int32 byte count).
    rows = (frame.MAX_FRAME_BYTES - frame.header_bytes(1 << 29, 1)) // 4
    raw = frame.raw_frame_bytes(rows, 1, np.float32)
    assert 0 < frame.MAX_FRAME_BYTES - raw < 16 and up16(raw) > frame.MAX_FRAME_BYTES
    assert frame.frame_capacity((rows, 1)) == frame.MAX_FRAME_BYTES


def test_status_descriptions_name_every_code():
    assert frame.describe_status(np.arange(11)) == [s.description for s in frame.Status]
    assert frame.describe_status([99]) == ["unknown status 99"]
