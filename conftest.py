"""pytest setup for tests/ and the doctests of jax_lossy_comm/: 8 virtual CPU devices, set
before JAX starts its backends, so multi-device examples and tests run on any machine.

On a GPU machine the CPU stays JAX's default platform (``JAX_PLATFORMS=cpu,cuda``): the
multi-device tests run on the 8 virtual CPU devices as everywhere else, and the GPU tests
(``tests/test_cuda.py``, marker ``gpu``) reach the GPU through ``jax.devices("gpu")``. Without
a CUDA plugin or a visible GPU only the CPU starts. GPU memory is allocated on demand (the
test subprocesses share the GPU). A ``JAX_PLATFORMS`` set by the caller is kept.
"""

import importlib.util
import os


def jax_platforms_for_tests(environ, cuda_plugin: bool, gpu_visible: bool) -> str:
    """The ``JAX_PLATFORMS`` of a test run: the caller's, else CPU first, CUDA when usable."""
    if environ.get("JAX_PLATFORMS"):
        return environ["JAX_PLATFORMS"]
    return "cpu,cuda" if cuda_plugin and gpu_visible else "cpu"


def _cuda_plugin() -> bool:
    return any(
        importlib.util.find_spec(name) is not None
        for name in ("jax_cuda13_plugin", "jax_cuda12_plugin")
    )


def _gpu_visible() -> bool:
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return os.path.exists("/dev/nvidia0") or os.path.exists("/dev/dxg")


os.environ["JAX_PLATFORMS"] = jax_platforms_for_tests(os.environ, _cuda_plugin(), _gpu_visible())
if "cuda" in os.environ["JAX_PLATFORMS"]:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
