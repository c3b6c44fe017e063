"""Loads the compiled extension and registers its XLA FFI targets once per process."""

from __future__ import annotations

import os
import warnings

import jax

try:  # the extension is optional: without it the pure-jax reference serves (raw/fixed forms)
    from jax_lossy_comm import _ext
except ImportError as e:  # pragma: no cover - exercised only on broken installs
    _ext = None
    IMPORT_ERROR: ImportError | None = e
    if os.environ.get("JLC_REQUIRE_EXTENSION") == "1":
        raise ImportError(
            "jax_lossy_comm's compiled extension is required (JLC_REQUIRE_EXTENSION=1) "
            "but could not be imported; install with `pip install -e .` from the "
            "checkout, or run from outside it"
        ) from e
    warnings.warn(
        f"jax_lossy_comm: compiled codec not found ({e}); using the pure-jax reference "
        "codec (raw and fixed-rate forms only). A source checkout on sys.path without a "
        "build shadows an installed package: install it with `pip install -e .`.",
        RuntimeWarning,
        stacklevel=2,
    )
else:
    IMPORT_ERROR = None

_registered = False


def available() -> bool:
    """True when the compiled codec (CPU, and CUDA if built) can be called."""
    return _ext is not None


def has_cuda() -> bool:
    """True when the extension was built with the CUDA handlers."""
    return _ext is not None and bool(_ext.HAS_CUDA)


def ensure_registered() -> None:
    """Registers lc_compress / lc_decompress / lc_frame_status for every built platform."""
    global _registered
    if _registered or _ext is None:
        return
    for platform, targets in _ext.registrations().items():
        if not targets:
            continue
        for name, capsule in targets.items():
            jax.ffi.register_ffi_target(name, capsule, platform=platform)
    _registered = True
