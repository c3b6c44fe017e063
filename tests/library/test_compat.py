"""jax_lossy_comm._compat: the supported-range check on both sides of each end (the running
JAX takes one branch; the others are checked through the selection function), and the
invariant all-gather on the running JAX."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from jax_lossy_comm import _compat


@pytest.mark.parametrize(
    "version,problem",
    [
        ("0.10.1", "older than the oldest supported"),
        ("0.10.2", None),
        ("0.11.2", None),
        ("0.12.0.1", None),
        ("0.12.9.dev20260101", None),
        ("0.13.0", "newer than the releases it was checked with"),
        ("1.0rc1", "newer than the releases it was checked with"),
    ],
)
def test_jax_version_problem(version, problem):
    got = _compat.jax_version_problem(version)
    assert got is None if problem is None else problem in got


def test_running_jax_is_in_the_supported_range():
    assert _compat.jax_version_problem(jax.__version__) is None
    with pytest.raises(ValueError, match="not a jax version"):
        _compat.jax_version_problem("main")


def test_all_gather_invariant_is_invariant_and_transposes_to_a_slice():
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices")
    mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    x = jnp.arange(8 * 3, dtype=jnp.float32).reshape(8, 3)

    def f(v):
        g = _compat.all_gather_invariant(v[0], "i")  # [8, 3] on every device
        grad = jax.grad(lambda v: jnp.sum(_compat.all_gather_invariant(v, "i")[2] * 5.0))(v[0])
        return g, grad[None]

    # out_specs=P() for g: accepted only for a value typed invariant over "i"
    g, grad = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=(P(), P("i"))))(x)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(x))
    expected = np.zeros((8, 3), np.float32)
    expected[2] = 5.0  # the cotangent of row 2 reaches device 2 only: a slice, not a sum
    np.testing.assert_array_equal(np.asarray(grad), expected)
