"""Fixtures of the library's tests: the 8-device mesh of the exchange and all-reduce tests."""

import jax
import pytest


@pytest.fixture(scope="module")
def mesh():
    """The 8 virtual CPU devices (the root conftest.py) as a 1-D mesh ``("i",)`` with Auto
    axes (inputs need no explicit sharding). A module with other devices defines its own."""
    return jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
