"""pytest setup for tests/ and the doctests of jax_lossy_comm/: 8 virtual CPU devices, set
before JAX starts its backends, so multi-device examples and tests run on any machine.

On a GPU machine the CPU stays JAX's default platform (``JAX_PLATFORMS=cpu,cuda``): the
multi-device tests run on the 8 virtual CPU devices as everywhere else, and the GPU tests
(``tests/native/test_cuda.py``, marker ``gpu``) reach the GPU through ``jax.devices("gpu")``. Without
a CUDA plugin or a visible GPU only the CPU starts. Whether a GPU is visible is asked of JAX
itself, in a subprocess with a time limit (a device file such as /dev/nvidia0 can exist without
a usable GPU, or be absent in a container that has one); the answer is passed on to pytest-xdist
workers and test subprocesses through ``JAX_PLATFORMS``. GPU memory is allocated on demand (the
test subprocesses share the GPU). A ``JAX_PLATFORMS`` set by the caller is kept.
"""

import importlib.util
import os
import subprocess
import sys

#: Seconds the GPU probe may take (a JAX start with the CUDA plugin takes a few).
GPU_PROBE_TIMEOUT_S = 60


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


def gpu_visible(timeout_s: float = GPU_PROBE_TIMEOUT_S) -> bool:
    """Whether JAX sees a CUDA device: ``jax.devices()`` under ``JAX_PLATFORMS=cuda`` in a
    subprocess (this process's JAX must not start yet), False after ``timeout_s`` seconds."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    env = {**os.environ, "JAX_PLATFORMS": "cuda"}
    probe = "import jax; print('gpus', len(jax.devices()))"
    try:
        run = subprocess.run(
            [sys.executable, "-c", probe],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    words = run.stdout.split()
    return run.returncode == 0 and words[:1] == ["gpus"] and int(words[1]) > 0


if not os.environ.get("JAX_PLATFORMS"):
    _plugin = _cuda_plugin()
    os.environ["JAX_PLATFORMS"] = jax_platforms_for_tests(
        os.environ, _plugin, _plugin and gpu_visible()
    )
if "cuda" in os.environ["JAX_PLATFORMS"]:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
