"""The package without its compiled extension, as a user meets it: a source tree without a
build, or a build that fails to load. The import warning says which and what to run, the
reference codec serves, ``dedup``/``entropy`` warn that they write fixed-rate frames, and
:func:`jax_lossy_comm.implementations` reports the reference on every platform."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import jax_lossy_comm as jlc

PACKAGE = Path(jlc.__file__).resolve().parent

#: Imports the package from argv[1] (not the installed one: the editable finder is dropped),
#: compresses with codec="dedup" and prints the warnings and implementations() as JSON.
PROBE = r"""
import json, sys, warnings
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__]
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as w:
    import jax.numpy as jnp
    import jax_lossy_comm as jlc
    frames, nbytes = jlc.compress(jnp.ones((4, 8), jnp.float32), 0.01, codec="dedup",
                                  min_error_bound=0.01)
    status = int(jlc.frame_status(frames, nbytes, shape=(4, 8)))
print(json.dumps({"file": jlc.__file__, "impl": jlc.implementations(), "status": status,
                  "warnings": [str(m.message) for m in w if m.category is RuntimeWarning]}))
"""


def _probe(tmp_path: Path, ext_bytes: bytes | None) -> dict:
    src = tmp_path / "src"
    shutil.copytree(
        PACKAGE, src / "jax_lossy_comm", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    if ext_bytes is not None:  # a build for another platform: not an ELF file at all
        (src / "jax_lossy_comm" / Path(jlc._ffi._ext.__file__).name).write_bytes(ext_bytes)
    env = {k: v for k, v in os.environ.items() if k != "JLC_REQUIRE_EXTENSION"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(src)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(str(src))  # the copy, not the installed package
    return got


@pytest.mark.skipif(not jlc._ffi.available(), reason="needs the built extension to copy around")
@pytest.mark.parametrize("broken", [False, True], ids=["not_built", "fails_to_load"])
def test_without_the_extension_the_warnings_say_what_happened(tmp_path, broken):
    got = _probe(tmp_path, b"not a shared object" if broken else None)
    first, dedup = got["warnings"][0], got["warnings"][1]
    assert "circular import" not in first
    if broken:
        assert "failed to load (" in first and Path(jlc._ffi._ext.__file__).name in first
        assert "--force-reinstall" in first
    else:
        assert "is not built" in first and "`pip install -e .`" in first
        assert "docs/install.md" in first
    assert "pure-jax reference codec" in first and "JLC_REQUIRE_EXTENSION=1" in first
    assert "codec='dedup'" in dedup and "fixed-rate frames instead" in dedup
    assert ("failed to load" if broken else "is not built") in dedup
    assert got["status"] == 0  # a valid frame all the same
    assert got["impl"] == {"cpu": "reference", "gpu": "reference"}


def test_implementations_report_the_compiled_codec():
    impl = jlc.implementations()
    assert set(impl) == {"cpu", "gpu"}
    if jlc._ffi.available():
        assert impl["cpu"] == "compiled"
        assert impl["gpu"] == ("compiled" if jlc._ffi.has_cuda() else "unavailable")
    else:
        assert impl == {"cpu": "reference", "gpu": "reference"}


def test_extension_problem_names_the_cause_and_the_fix():
    what, fix = jlc._ffi.extension_problem(ImportError("undefined symbol: foo"), True)
    assert "failed to load (undefined symbol: foo)" in what and "--force-reinstall" in fix
    what, fix = jlc._ffi.extension_problem(ImportError("cannot import name '_ext'"), False)
    assert "is not built" in what and "circular" not in what


def _decompress_call(frames, nbytes, rows, dim, **attrs):
    """``lc_decompress`` called directly, with any attributes (:func:`jlc.decompress` passes
    only ``fixed_rate=1``, for ``fixed_rate=True``)."""
    import jax
    import jax.numpy as jnp

    from jax_lossy_comm import _ffi

    _ffi.ensure_registered()
    call = jax.ffi.ffi_call(
        "lc_decompress",
        (
            jax.ShapeDtypeStruct(nbytes.shape + (rows, dim), jnp.float32),
            jax.ShapeDtypeStruct(nbytes.shape, jnp.int32),
        ),
        vmap_method="broadcast_all",
    )
    return call(frames, nbytes, **attrs)


@pytest.mark.skipif(jlc.implementations()["cpu"] != "compiled", reason="no compiled extension")
def test_decompress_fixed_rate_attribute():
    """``fixed_rate=1`` (xla_ffi/ffi_args.h): fixed-rate and raw frames decode as without it, a
    dictionary frame decodes to NaN with status UNSUPPORTED_FORM (on CUDA: one launch, no
    dictionary workspace); any other attribute or value is an error naming the target."""
    import jax.numpy as jnp
    import numpy as np

    x = jnp.tile(jnp.linspace(-1.0, 1.0, 16, dtype=jnp.float32), (3, 8, 1))  # repeated rows
    fixed, nb_fixed = jlc.compress(x, 0.01, codec="fixed", min_error_bound=0.01)
    dedup, nb_dedup = jlc.compress(x, 0.01, codec="dedup")
    want, st = _decompress_call(fixed, nb_fixed, 8, 16)
    got, st1 = _decompress_call(fixed, nb_fixed, 8, 16, fixed_rate=np.int32(1))
    assert st.tolist() == st1.tolist() == [0, 0, 0]
    assert np.array_equal(np.asarray(got), np.asarray(want))
    _, st0 = _decompress_call(dedup, nb_dedup, 8, 16, fixed_rate=np.int32(0))
    assert st0.tolist() == [0, 0, 0]
    bad, st2 = _decompress_call(dedup, nb_dedup, 8, 16, fixed_rate=np.int32(1))
    assert st2.tolist() == [10, 10, 10]  # UNSUPPORTED_FORM
    assert bool(jnp.isnan(bad).all())
    for attrs in ({"fixed_rate": np.int32(2)}, {"codec": np.int32(2)}):
        with pytest.raises(Exception, match="lc_decompress"):
            _decompress_call(fixed, nb_fixed, 8, 16, **attrs)[1].block_until_ready()


@pytest.mark.skipif(jlc.implementations()["cpu"] != "compiled", reason="no compiled extension")
def test_cuda_targets_are_stage_bundles():
    """CUDA: each target is ``{"instantiate", "execute"}`` (XLA's instantiate stage loads the
    kernels before the first step, docs/gpu.md); CPU: one execute capsule."""
    from jax_lossy_comm import _ffi

    regs = _ffi._ext.registrations()
    assert set(regs["cpu"]) == {"lc_compress", "lc_decompress", "lc_frame_status"}
    assert all(type(c).__name__ == "PyCapsule" for c in regs["cpu"].values())
    if not _ffi.has_cuda():
        assert regs["CUDA"] == {}
        return
    assert set(regs["CUDA"]) == set(regs["cpu"])
    for bundle in regs["CUDA"].values():
        assert set(bundle) == {"instantiate", "execute"}
        assert all(type(c).__name__ == "PyCapsule" for c in bundle.values())


@pytest.mark.skipif(jlc.implementations()["cpu"] != "compiled", reason="no compiled extension")
def test_a_stage_bundle_registers_and_runs_on_cpu():
    """jaxlib takes the dict form :func:`jax_lossy_comm.register` passes for CUDA: the CPU
    compress handler as ``{"execute": ...}`` (plus, in a CUDA build, the CUDA instantiate
    handler, which finds no device in use here and loads nothing) compiles, runs and writes the
    frames of the registered target (XLA:CPU runs an instantiate handler at compile time)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jax_lossy_comm import _ffi

    regs = _ffi._ext.registrations()
    bundle = {"execute": regs["cpu"]["lc_compress"]}
    if _ffi.has_cuda():
        bundle["instantiate"] = regs["CUDA"]["lc_compress"]["instantiate"]
    jax.ffi.register_ffi_target("jlc_test_stage_bundle_compress", bundle, platform="cpu")
    x = jnp.linspace(-1.0, 1.0, 4 * 8, dtype=jnp.float32).reshape(4, 8)
    frames, nbytes = jlc.compress(x, 0.01, codec="auto", min_error_bound=0.01)
    call = jax.ffi.ffi_call(
        "jlc_test_stage_bundle_compress",
        (
            jax.ShapeDtypeStruct(frames.shape, jnp.uint8),
            jax.ShapeDtypeStruct(nbytes.shape, jnp.int32),
        ),
    )
    got = jax.jit(lambda x, eb: call(x, eb, mode=np.int32(0), codec=np.int32(0)))(
        x, jnp.full(nbytes.shape, 0.01, jnp.float32)
    )
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(nbytes))
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(frames))
