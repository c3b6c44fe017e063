"""pytest setup for tests/ and the doctests of jax_lossy_comm/: 8 virtual CPU devices, set
before JAX starts its backends, so multi-device examples and tests run on any machine."""

import os

if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
