"""Int8Rowwise (FBGEMM's INT8 row-wise) on rows of tiny range and of float32 subnormals: the
error fbgemm_quant.int8_rowwise_quantize documents."""

from __future__ import annotations

import jax
import numpy as np

from jax_lossy_comm import fbgemm_quant as fq


def _roundtrip(x):
    f = jax.jit(lambda v: fq.int8_rowwise_dequantize(fq.int8_rowwise_quantize(v)))
    return np.asarray(f(x), np.float64)


def test_small_range_rows_error_at_most_the_range():
    """FBGEMM's epsilon (1e-8) in 255 / (range + eps): a row of range 1e-9 uses about 23
    codes, one of range 1e-12 decodes as its minimum; the error stays within the range."""
    rng = np.random.default_rng(0)
    for width in (1e-6, 1e-9, 1e-12):
        x = (1.0 + rng.uniform(0, width, 32)).astype(np.float32)
        err = np.abs(_roundtrip(x) - x.astype(np.float64)).max()
        assert err <= float(x.max()) - float(x.min()) + 2.0**-23, (width, err)


def test_subnormal_rows_within_the_smallest_normal():
    """A row of float32 subnormals decodes within 2^-126 (XLA:CPU flushes them to zero)."""
    x = (np.float32(1e-40) * np.arange(-16, 16)).astype(np.float32)
    y = _roundtrip(x)
    assert np.abs(y - x.astype(np.float64)).max() < 2.0**-126
