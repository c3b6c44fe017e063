"""Helpers shared by the tests: the real data beside the checkout, the 8-device skip, the
device of the GPU tests. Imported as ``support`` (tests/conftest.py puts tests/ on sys.path),
also under pytest's importlib mode (bench/gpu_check.sh)."""

import os
from pathlib import Path

import numpy as np
import pytest

#: The data folder: $JLC_DATA_DIR (bench/gpu_check.sh sets it to ./shared/data on a machine
#: where only the checkout travels), else ../shared/data beside the checkout (real dumps and
#: Criteo rows). DUMPS is None when its emb_dumps/ is absent.
DATA = Path(os.environ.get("JLC_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
DUMPS = DATA / "emb_dumps" if (DATA / "emb_dumps" / "manifest.json").is_file() else None
requires_dumps = pytest.mark.skipif(
    DUMPS is None, reason=f"real embedding dumps absent ({DATA}/emb_dumps)"
)


#: Why a multi-device test is skipped: a run with XLA_FLAGS of its own (fewer devices).
EIGHT_DEVICES = "needs 8 devices in this process (the root conftest.py sets them)"


def require_eight_devices() -> None:
    """Skips the calling test unless JAX has 8 devices (imports JAX only when called)."""
    import jax

    if jax.device_count() < 8:
        pytest.skip(EIGHT_DEVICES)


def load_dump(name: str) -> np.ndarray:
    """A real pooled-embedding dump as float32[rows, dim] (shape from manifest.json)."""
    import json

    manifest = {
        e["file"].split("/")[-1]: e for e in json.loads((DUMPS / "manifest.json").read_text())
    }
    return np.fromfile(DUMPS / name, "<f4").reshape(manifest[name]["shape"])


def gpu_device():
    """``(device, None)``, or ``(None, why)`` when the ``gpu`` tests cannot run here.

    The device is JAX's first CUDA device, when the extension has the CUDA handlers; with
    ``JLC_GPU_TESTS_ON_CPU=1`` the CPU stands in for it (a run of the tests' logic, and of the
    exchange and trainer paths, on machines without a GPU; it proves nothing about CUDA code).
    The reasons name "no CUDA device" or "built without the CUDA handlers" (bench/gpu_check.sh
    fails its test stage on such skips).
    """
    import jax

    from jax_lossy_comm import _ffi

    if os.environ.get("JLC_GPU_TESTS_ON_CPU") == "1":
        return jax.devices("cpu")[0], None
    try:
        devs = jax.devices("gpu")
    except RuntimeError as e:  # no GPU backend in this jaxlib, or no device
        return None, f"no CUDA device visible to JAX (jax.devices('gpu'): {e})"
    if not devs:
        return None, "no CUDA device visible to JAX"
    if not _ffi.has_cuda():
        return None, (
            "jax_lossy_comm was built without the CUDA handlers (nvcc not found at build "
            "time, or JLC_CUDA=OFF); rebuild with JLC_CUDA=ON"
        )
    return devs[0], None
