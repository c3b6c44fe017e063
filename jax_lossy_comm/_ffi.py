"""Loads the compiled extension and registers its XLA FFI targets once per process."""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path

import jax

#: Where the package's modules are (the compiled extension ``_ext*.so`` belongs beside them).
_PACKAGE_DIR = Path(__file__).resolve().parent


def extension_problem(error: BaseException | None, found: bool) -> tuple[str, str]:
    """Why the compiled extension did not import, and what to run: ``(what, fix)``.

    Args:
      error: the ``ImportError`` the import raised.
      found: whether a ``jax_lossy_comm/_ext*`` file exists (so it failed to load) or not
        (never built: a source tree without a build, or an install without the extension).
    """
    if found:
        what = (
            f"the compiled extension in {_PACKAGE_DIR} failed to load ({error}); it may be "
            "built for another Python or jaxlib, or a library it needs is missing"
        )
        fix = "rebuild it with `pip install --force-reinstall --no-deps -e .` in the checkout"
    else:
        what = (
            f"the compiled extension is not built (no jax_lossy_comm/_ext*.so in "
            f"{_PACKAGE_DIR}: a source tree without a build, or an install without it)"
        )
        fix = (
            "build it with `pip install -e .` in the checkout, or install the wheel "
            "(docs/install.md)"
        )
    return what, fix


def extension_failure(error: BaseException | None, found: bool) -> str:
    """The import-time warning without the extension (:func:`extension_problem`)."""
    what, fix = extension_problem(error, found)
    return (
        f"jax_lossy_comm: {what}. Using the pure-jax reference codec: raw and fixed-rate "
        "frames only (codec='dedup' and 'entropy' then write fixed-rate frames, with a "
        f"warning). To use the compiled codec, {fix}; JLC_REQUIRE_EXTENSION=1 makes this an "
        "error."
    )


try:  # the extension is optional: without it the pure-jax reference serves (raw/fixed forms)
    from jax_lossy_comm import _ext
except ImportError as e:
    _ext = None
    IMPORT_ERROR: ImportError | None = e
    #: Whether an ``_ext`` file exists beside the modules (it then failed to load).
    EXTENSION_FOUND = importlib.util.find_spec("jax_lossy_comm._ext") is not None
    if os.environ.get("JLC_REQUIRE_EXTENSION") == "1":
        what, fix = extension_problem(e, EXTENSION_FOUND)
        raise ImportError(f"jax_lossy_comm: JLC_REQUIRE_EXTENSION=1, but {what}; {fix}") from e
    warnings.warn(extension_failure(e, EXTENSION_FOUND), RuntimeWarning, stacklevel=2)
else:
    IMPORT_ERROR = None
    EXTENSION_FOUND = True

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
    """Which codec implementation runs on ``platform`` ("cpu", "gpu"), in one phrase for logs
    (public as ``jax_lossy_comm.describe_implementation``): the compiled handlers, the missing
    CUDA handlers, or the pure-jax reference; :func:`implementations` gives the same as data.

    Examples:
      >>> import jax_lossy_comm as jlc
      >>> jlc.describe_implementation("cpu")  # a build of the extension
      'compiled codec, CPU handlers on cpu'
    """
    if _ext is None:
        return f"pure-jax reference codec on {platform} (compiled extension not importable)"
    if platform in _GPU_PLATFORMS:
        if has_cuda():
            return f"compiled codec, CUDA handlers on {platform}"
        return f"compiled codec without CUDA handlers: no CUDA handlers for {platform}"
    return f"compiled codec, CPU handlers on {platform}"


#: The platforms :func:`implementations` reports (JAX's names).
PLATFORMS = ("cpu", "gpu")


def implementations() -> dict[str, str]:
    """Which codec implementation :func:`jax_lossy_comm.compress` and the exchanges run on
    each platform, decided by what this installation holds.

    Returns:
      ``{"cpu": kind, "gpu": kind}`` with ``kind`` one of ``"compiled"`` (the XLA FFI
      handlers of the compiled extension: CPU handlers, or CUDA handlers built with nvcc),
      ``"reference"`` (the pure-jax reference codec: raw and fixed-rate frames only; the
      extension did not import, see the import warning) or ``"unavailable"`` (GPU only: an
      extension built without its CUDA handlers; a call on a GPU raises ``RuntimeError``).
      :func:`describe` gives the same in a phrase for logs.

    Examples:
      >>> import jax_lossy_comm as jlc
      >>> jlc.implementations()["cpu"]  # a build of the extension (pip install / the wheel)
      'compiled'
    """
    if _ext is None:
        return dict.fromkeys(PLATFORMS, "reference")
    return {"cpu": "compiled", "gpu": "compiled" if has_cuda() else "unavailable"}
