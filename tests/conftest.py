"""Test session setup: tests/ on sys.path for the shared helpers (tests/support.py, the
multi-process runner) and the ``gpu`` fixture. The 8 virtual CPU devices are set in the
repository's root conftest.py, before JAX starts.

Layout: tests/library (jax_lossy_comm), tests/native (xla_ffi: CUDA, emulation, fuzzing,
golden frames), tests/model (models/dlrm), tests/bench (bench/), tests/docs (README, docs).
"""

import sys
from pathlib import Path

import pytest

# Appended, not prepended: a tests/ folder must never shadow the repository's bench/ or docs/.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parent))

from support import gpu_device  # noqa: E402

#: The multi-process tests' worker scripts (``_*.py``) set XLA_FLAGS when imported; the test
#: command's --doctest-modules would import them while collecting, before the test modules
#: start JAX, and every test would then see the worker's device count.
collect_ignore_glob = ["_*.py", "support.py"]


@pytest.fixture(scope="session")
def gpu():
    """The device of the ``gpu`` tests (:func:`gpu_device`); skips the test, saying why, when
    there is none."""
    dev, why = gpu_device()
    if dev is None:
        pytest.skip(why)
    return dev
