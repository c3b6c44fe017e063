"""Shared test helpers: the real data beside the checkout. The 8 virtual CPU devices are set
in the repository's root conftest.py, before JAX starts."""

from pathlib import Path

import numpy as np
import pytest

#: ../shared/data beside the checkout (real dumps and Criteo rows), or None when absent.
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DUMPS = DATA / "emb_dumps" if (DATA / "emb_dumps" / "manifest.json").is_file() else None
requires_dumps = pytest.mark.skipif(
    DUMPS is None, reason=f"real embedding dumps absent ({DATA}/emb_dumps)"
)


def load_dump(name: str) -> np.ndarray:
    """A real pooled-embedding dump as float32[rows, dim] (shape from manifest.json)."""
    import json

    manifest = {
        e["file"].split("/")[-1]: e for e in json.loads((DUMPS / "manifest.json").read_text())
    }
    return np.fromfile(DUMPS / name, "<f4").reshape(manifest[name]["shape"])
