"""``jax.export`` of functions that use the library (docs/export.md): exported with
:func:`jax_lossy_comm.export_safety_checks`, serialized, then deserialized and called in a
fresh process that only imports jax and the library (the targets are registered at import),
bit for bit as ``jit`` in this process; :func:`jax_lossy_comm.register` is idempotent and
says why when the extension is missing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc
from jax_lossy_comm import _ffi

NDEV = 8
pytestmark = [
    pytest.mark.skipif(not _ffi.available(), reason="compiled extension absent: no FFI targets"),
    pytest.mark.skipif(jax.device_count() < NDEV, reason=f"needs {NDEV} devices (conftest.py)"),
]
serialization = pytest.importorskip("flatbuffers", reason="jax.export serialization needs it")

#: The loading process: imports jax and the library only (no call of it), deserializes each
#: ``NAME.bin`` of argv[1] (with its inputs NAME.in.npz), calls it and saves NAME.out.npz.
#: With argv[2] == "no-import" it skips ``import jax_lossy_comm`` and reports the error.
LOADER = r"""
import json, sys
from pathlib import Path
import jax, numpy as np
if sys.argv[2] != "no-import":
    import jax_lossy_comm
report = {}
for blob in sorted(Path(sys.argv[1]).glob("*.bin")):
    name = blob.stem
    exp = jax.export.deserialize(bytearray(blob.read_bytes()))
    inputs = np.load(blob.with_suffix(".in.npz"))
    args = [inputs[f"arr_{i}"] for i in range(len(inputs.files))]
    if exp.nr_devices > 1:  # placed as exported: the exporter's mesh, rebuilt here
        auto = (jax.sharding.AxisType.Auto,)
        mesh = jax.make_mesh((exp.nr_devices,), ("i",), axis_types=auto)
        args = [jax.device_put(a, s) for a, s in zip(args, exp.in_shardings_jax(mesh))]
    try:
        out = jax.tree.leaves(exp.call(*args))
    except Exception as e:  # what a process without the targets meets
        report[name] = f"{type(e).__name__}: {e}"
        continue
    np.savez(blob.with_suffix(".out.npz"), *[np.asarray(o) for o in out])
    report[name] = {"devices": exp.nr_devices, "n_out": len(out)}
print(json.dumps(report))
"""


def _rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _codec_fn():
    """compress (traced bound), decompress, frame_status: every target of the library."""

    def f(x, eb):
        frames, nbytes = jlc.compress(x, eb, min_error_bound=0.005)
        x_hat = jlc.decompress(frames, nbytes, shape=x.shape[-2:])
        return x_hat, frames, nbytes, jlc.frame_status(frames, nbytes, shape=x.shape[-2:])

    return jax.jit(f), (_rand((3, 64, 16), 0), np.float32(0.01))


def _exchange_fn(mesh, backward):
    """compressed_all_to_all under shard_map over the 8 devices, and its gradient (the exact
    straight-through one, or the coded backward exchange: custom_jvp / custom_vjp)."""
    cfg = jlc.ExchangeConfig(
        jlc.FrameCodec(min_error_bound=0.005),
        backward=jlc.FrameCodec(min_error_bound=0.005) if backward else None,
    )

    def local(x, eb):
        return jlc.compressed_all_to_all(x, "i", 0, 1, tiled=True, error_bound=eb, config=cfg)

    exchange = jax.shard_map(local, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"))

    def f(x, eb, w):
        y = exchange(x, eb)
        grad = jax.grad(lambda x: jnp.sum(w * exchange(x, eb) ** 2))(x)
        return y, grad

    x = jax.device_put(_rand((NDEV * 16, 3, 8), 1), NamedSharding(mesh, P("i")))
    w = jax.device_put(_rand((NDEV * 2, NDEV * 3, 8), 2), NamedSharding(mesh, P("i")))
    return jax.jit(f), (x, np.float32(0.02), w)


def _psum_fn(mesh):
    """compressed_psum under shard_map over the 8 devices."""

    def local(x, eb):
        return jlc.compressed_psum(x, "i", error_bound=eb)

    f = jax.shard_map(local, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"))
    x = jax.device_put(_rand((NDEV * 4, 256), 3), NamedSharding(mesh, P("i")))
    return jax.jit(f), (x, np.float32(0.01))


def _load(folder: Path, import_library: bool = True) -> dict:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={NDEV}"}
    env["JAX_PLATFORMS"] = "cpu"
    run = subprocess.run(
        [sys.executable, "-c", LOADER, str(folder), "import" if import_library else "no-import"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def _save(folder: Path, name: str, fn, args, platforms=None) -> tuple:
    checks = jlc.export_safety_checks()
    exp = jax.export.export(fn, platforms=platforms, disabled_checks=checks)(*args)
    (folder / f"{name}.bin").write_bytes(exp.serialize())
    np.savez(folder / f"{name}.in.npz", *[np.asarray(a) for a in args])
    return exp, tuple(np.asarray(o) for o in jax.tree.leaves(fn(*args)))


#: name -> (function and arguments from the 8-device mesh, platforms, devices).
CASES = {
    # Lowering for CUDA needs no GPU; the CPU-only export in the next test.
    "codec_cpu_cuda": (lambda mesh: _codec_fn(), ("cpu", "cuda"), 1),
    "exchange": (lambda mesh: _exchange_fn(mesh, backward=False), None, NDEV),
    "exchange_coded_backward": (lambda mesh: _exchange_fn(mesh, backward=True), None, NDEV),
    "psum": (_psum_fn, None, NDEV),
}


def _assert_outputs(folder: Path, name: str, want: tuple) -> None:
    got = np.load(folder / f"{name}.out.npz")
    assert len(got.files) == len(want)
    for i, w in enumerate(want):
        np.testing.assert_array_equal(got[f"arr_{i}"], w, err_msg=f"{name} output {i}")


@pytest.mark.parametrize("name", CASES)
def test_exports_reload_bit_exact_in_a_fresh_process(tmp_path, mesh, name):
    """The codec, the exchange with its gradient (exact and coded backward: custom_jvp and
    custom_vjp) and compressed_psum, the last three under shard_map over 8 devices: the
    fresh process's results equal jit's here bit for bit."""
    make, platforms, devices = CASES[name]
    exp, want = _save(tmp_path, name, *make(mesh), platforms)
    assert re.search(r"custom_call @jax_lossy_comm_compress_v1\b", exp.mlir_module())
    assert exp.nr_devices == devices
    assert _load(tmp_path)[name] == {"devices": devices, "n_out": len(want)}
    _assert_outputs(tmp_path, name, want)


def test_the_import_registers_the_targets(tmp_path):
    """A fresh process finds the handlers after ``import jax_lossy_comm`` (no library call;
    all three targets), and without the import it meets JAX's NOT_FOUND for the versioned
    target."""
    fn, args = _codec_fn()
    assert "jax_lossy_comm_frame_status_v1" in fn.lower(*args).as_text()
    _, want = _save(tmp_path, "codec", fn, args)
    assert _load(tmp_path)["codec"] == {"devices": 1, "n_out": 4}
    _assert_outputs(tmp_path, "codec", want)
    missing = _load(tmp_path, import_library=False)["codec"]
    assert "NOT_FOUND" in missing and "jax_lossy_comm_compress_v1" in missing


def test_register_is_idempotent():
    assert _ffi.registered()  # at import
    jlc.register()
    jlc.register()
    assert _ffi.registered()
    x = jnp.ones((2, 8, 4))
    np.testing.assert_array_equal(jlc.decompress(*jlc.compress(x, 0.01), shape=(8, 4)), x)


def test_export_without_the_checks_names_the_targets():
    """JAX's refusal names the library's target; export_safety_checks lists every target."""
    fn, args = _codec_fn()
    with pytest.raises(ValueError, match="jax_lossy_comm_compress_v1"):
        jax.export.export(fn)(*args)
    checks = jlc.export_safety_checks()
    assert checks == [
        jax.export.DisabledSafetyCheck.custom_call(name) for name in _ffi.TARGETS.values()
    ]
    assert sorted(_ffi.TARGETS.values()) == [
        "jax_lossy_comm_compress_v1",
        "jax_lossy_comm_decompress_v1",
        "jax_lossy_comm_frame_status_v1",
    ]


def test_target_version_follows_the_frame_version():
    """A new frame format version needs new target names (docs/export.md): this fails until
    TARGET_VERSION and TARGET_FRAME_VERSION are bumped with it."""
    assert int(_ffi._ext.VERSION) == jlc.frame.VERSION == _ffi.TARGET_FRAME_VERSION
    assert all(name.endswith(f"_v{_ffi.TARGET_VERSION}") for name in _ffi.TARGETS.values())


def test_register_without_the_extension_says_why(monkeypatch):
    monkeypatch.setattr(_ffi, "_ext", None)
    monkeypatch.setattr(_ffi, "IMPORT_ERROR", ImportError("cannot import name '_ext'"))
    monkeypatch.setattr(_ffi, "EXTENSION_FOUND", False)
    with pytest.raises(RuntimeError, match=r"register\(\).*is not built.*pip install -e \."):
        jlc.register()
    # The reference codec then serves: an export holds no custom calls and needs no targets.
    fn, args = _codec_fn()
    text = jax.export.export(fn)(*args).mlir_module()
    assert "custom_call" not in text


def test_the_import_starts_no_backend_and_registers():
    """Registration queues the handlers: ``import jax_lossy_comm`` starts no JAX backend (an
    unknown platform would fail at start-up) and still registers."""
    probe = "import jax_lossy_comm as j; print(j._ffi.registered())"
    env = {**os.environ, "JAX_PLATFORMS": "no_such_platform"}
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[-1] == "True"
