"""Shared test helpers: the real data beside the checkout. The 8 virtual CPU devices are set
in the repository's root conftest.py, before JAX starts."""

from pathlib import Path

import numpy as np
import pytest

#: The multi-process tests' worker scripts (``_*.py``) set XLA_FLAGS when imported; the test
#: command's --doctest-modules would import them while collecting, before the test modules
#: start JAX, and every test would then see the worker's device count.
collect_ignore_glob = ["_*.py"]

#: ../shared/data beside the checkout (real dumps and Criteo rows), or None when absent.
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
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
