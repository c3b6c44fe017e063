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


_GPU_PLATFORMS = ("gpu", "cuda", "rocm")


def check_platform(platform: str | None = None) -> None:
    """Raises where the compiled codec would run on a GPU without its CUDA handlers.

    Args:
      platform: where the call runs; default ``jax.default_backend()`` (the platform of a
        jitted call without placed inputs).

    Raises:
      RuntimeError: the extension was built without the CUDA handlers (no nvcc at build time,
        or ``JLC_CUDA=OFF``) and the call would run on a GPU, where XLA would otherwise fail
        at compile time with "no registered implementation" for ``lc_compress``.
    """
    if _ext is None or has_cuda():
        return
    platform = platform or jax.default_backend()
    if platform in _GPU_PLATFORMS:
        raise RuntimeError(
            f"jax_lossy_comm was built without its CUDA handlers, and this call runs on "
            f"{platform!r}: rebuild on a machine with nvcc (CUDA toolkit) with "
            "`JLC_CUDA=ON pip install -e .` from the checkout, or run the codec on the CPU "
            "(JAX_PLATFORMS=cpu)"
        )


def describe(platform: str) -> str:
    """Which codec implementation runs on ``platform`` ("cpu", "gpu"), in one phrase (for
    logs): the compiled handlers, the missing CUDA handlers, or the pure-jax reference."""
    if _ext is None:
        return f"pure-jax reference codec on {platform} (compiled extension not importable)"
    if platform in _GPU_PLATFORMS:
        if has_cuda():
            return f"compiled codec, CUDA handlers on {platform}"
        return f"compiled codec without CUDA handlers: no CUDA handlers for {platform}"
    return f"compiled codec, CPU handlers on {platform}"
