"""Shared pytest setup: 8 virtual CPU devices for multi-device tests (set before JAX starts)."""

import os

if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
