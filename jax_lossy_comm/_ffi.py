"""Loads the compiled extension and registers its XLA FFI targets, once per process, at import.

Registering at import (not at the first codec call) is what lets a process that only imports
the library call a deserialized ``jax.export`` of a function that uses the codec. Registration
needs no JAX backend: ``jax.ffi.register_ffi_target`` queues the handlers until the backend
starts, so ``import jax_lossy_comm`` stays cheap and starts none. Without the extension nothing
is registered and the pure-jax reference codec serves (the import warns).
"""

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

#: The version in the FFI target names (``jax_lossy_comm_compress_v1``): bumped, with new
#: names, by any change a serialized program would notice (operands, attributes, results, or
#: the frame format version they write and read, :data:`TARGET_FRAME_VERSION`); docs/export.md
#: states the promise.
TARGET_VERSION = 1

#: The frame format version the targets of :data:`TARGET_VERSION` write and read
#: (``frame.VERSION``, from xla_ffi/format.h; tests/library/test_export.py fails when the two
#: part, so that a new frame version comes with new target names).
TARGET_FRAME_VERSION = 1

#: The XLA FFI targets of the library's ``jax.ffi.ffi_call`` sites (:mod:`jax_lossy_comm.codec`),
#: by operation: the names a lowered or exported program holds.
TARGETS = {
    op: f"jax_lossy_comm_{op}_v{TARGET_VERSION}"
    for op in ("compress", "decompress", "frame_status")
}

_registered = False


def available() -> bool:
    """True when the compiled codec (CPU, and CUDA if built) can be called."""
    return _ext is not None


def has_cuda() -> bool:
    """True when the extension was built with the CUDA handlers."""
    return _ext is not None and bool(_ext.HAS_CUDA)


def register() -> None:
    """Registers the library's XLA FFI targets with JAX for every platform the extension was
    built for (public as ``jax_lossy_comm.register``).

    ``import jax_lossy_comm`` already calls it, so a process that imports the library can run
    the codec and call a deserialized ``jax.export`` that uses it; calling it again does
    nothing. It starts no JAX backend (JAX registers queued targets when the backend starts).
    Registers ``TARGETS`` (``jax_lossy_comm_compress_v1``, ``..._decompress_v1``,
    ``..._frame_status_v1``) on ``cpu`` and, when built with CUDA, on ``CUDA``.

    Raises:
      RuntimeError: the compiled extension is not importable (not built, or failed to load):
        the message says why and what to run. The library's own calls then use the pure-jax
        reference codec, which needs no targets; an exported program that holds the targets
        cannot run in this process.

    Examples:
      >>> import jax_lossy_comm as jlc
      >>> jlc.register()  # done at import already: a no-op
    """
    global _registered
    if _ext is None:
        what, fix = extension_problem(IMPORT_ERROR, EXTENSION_FOUND)
        raise RuntimeError(
            f"jax_lossy_comm.register(): {what}, so there are no XLA FFI handlers to "
            f"register; {fix}"
        )
    if _registered:
        return
    for platform, targets in _ext.registrations().items():
        for op, capsule in (targets or {}).items():
            # The extension's own key (lc_compress) is registered too, for callers that issue
            # ffi_calls themselves (bench/codecs/codec_bench_gpu.py): not promised stable.
            versioned = TARGETS.get(op.removeprefix("lc_"))
            for name in (versioned, op) if versioned else (op,):
                jax.ffi.register_ffi_target(name, capsule, platform=platform)
    _registered = True


def registered() -> bool:
    """True once :func:`register` has registered the targets in this process."""
    return _registered


def ensure_registered() -> None:
    """:func:`register` when the extension is available; nothing otherwise."""
    if _ext is not None:
        register()


def export_safety_checks() -> list:
    """The ``disabled_checks`` that let ``jax.export`` serialize a function that uses the
    codec, the exchanges or the all-reduce (public as ``jax_lossy_comm.export_safety_checks``).

    ``jax.export`` refuses custom calls that are not on JAX's own list of stable targets;
    ``TARGETS`` are the library's, versioned (docs/export.md states what is promised).

    Returns:
      ``[jax.export.DisabledSafetyCheck.custom_call(name) for name in TARGETS.values()]``,
      one per target, whether or not this process has the extension (a function traced
      without it holds no custom calls, and the entries are then unused).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> import jax_lossy_comm as jlc
      >>> f = jax.jit(lambda x: jlc.decompress(*jlc.compress(x, 0.01), shape=x.shape))
      >>> exp = jax.export.export(f, disabled_checks=jlc.export_safety_checks())(
      ...     jax.ShapeDtypeStruct((4, 8), jnp.float32))
      >>> exp.out_avals
      (ShapedArray(float32[4,8]),)
    """
    from jax import export

    return [export.DisabledSafetyCheck.custom_call(name) for name in TARGETS.values()]


_GPU_PLATFORMS = ("gpu", "cuda", "rocm")


def check_platform(platform: str | None = None) -> None:
    """Raises where the compiled codec would run on a GPU without its CUDA handlers.

    Args:
      platform: where the call runs; default ``jax.default_backend()`` (the platform of a
        jitted call without placed inputs).

    Raises:
      RuntimeError: the extension was built without the CUDA handlers (no nvcc at build time,
        or ``JLC_CUDA=OFF``) and the call would run on a GPU, where XLA would otherwise fail
        at compile time with "no registered implementation" for ``jax_lossy_comm_compress_v1``.
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
      :func:`jax_lossy_comm.describe_implementation` gives the same in a phrase for logs.

    Examples:
      >>> import jax_lossy_comm as jlc
      >>> jlc.implementations()["cpu"]  # a build of the extension (pip install / the wheel)
      'compiled'
    """
    if _ext is None:
        return dict.fromkeys(PLATFORMS, "reference")
    return {"cpu": "compiled", "gpu": "compiled" if has_cuda() else "unavailable"}


# Registered at import: a deserialized export needs the handlers before its first call, and
# the library may not be called in that process at all. Without the extension there is
# nothing to register (the import warned above).
ensure_registered()
