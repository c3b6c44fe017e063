"""The ragged wire path (``jax.lax.ragged_all_to_all``, the GPU's): lowered on the CPU without
compiling (XLA:CPU has no ragged_all_to_all), forward and gradient with a compressed backward,
so tracing and typing errors of the GPU path show up here; its rows of 16
bytes, the int32 offset limit, and the size precondition checked by the CPU emulation."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc
from jax_lossy_comm import exchange as ex
from jax_lossy_comm import wire

NDEV = 8
pytestmark = pytest.mark.skipif(
    jax.device_count() < NDEV, reason=f"needs {NDEV} devices (XLA_FLAGS set in conftest.py)"
)


def _ragged_ops(text: str) -> list[str]:
    """The lines of the StableHLO text that call ragged_all_to_all."""
    return [ln for ln in text.splitlines() if "ragged_all_to_all" in ln and "=" in ln]


def _loss(mesh, backward):
    codec = jlc.FrameCodec(codec="entropy")
    config = jlc.ExchangeConfig(codec, codec if backward else None, table_axis=1, path="ragged")

    def local(x, w):
        y = jlc.compressed_all_to_all(
            x, "i", 0, 1, tiled=True, error_bound=0.01, backward_error_bound=0.02, config=config
        )
        return jax.lax.psum(jnp.sum(y * w), "i")

    return jax.shard_map(local, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=P())


def test_ragged_path_lowers_forward_and_gradient_with_rows_of_16_bytes(mesh):
    rows, tables, dim = 16, 3, 8
    x = jnp.zeros((NDEV * NDEV * rows, tables, dim), jnp.float32)
    w = jnp.zeros((NDEV * rows, NDEV * tables, dim), jnp.float32)
    fwd = jax.jit(_loss(mesh, backward=True)).lower(x, w).as_text()
    grad = jax.jit(jax.value_and_grad(_loss(mesh, backward=True))).lower(x, w).as_text()
    assert len(_ragged_ops(fwd)) == 1, _ragged_ops(fwd)
    ops = _ragged_ops(grad)
    assert len(ops) == 2, ops  # the forward and the compressed backward exchange
    for op in ops:
        # operand and output: rows of 16 bytes (not a 1-D uint8 buffer, copied byte by byte
        # by XLA's one-shot kernel); offsets and sizes: int32 counts of rows, P * T of them
        types = re.findall(r"tensor<([0-9x]+)x(ui8|i32)>", op.split("->")[0])
        assert [t for _, t in types] == ["ui8", "ui8", "i32", "i32", "i32", "i32"], op
        rows_shape = [int(v) for v in types[0][0].split("x")]
        assert len(rows_shape) == 2 and rows_shape[1] == 16, op
        assert all(int(s) == NDEV * tables for s, _ in types[2:]), op
    # exact backward: one ragged exchange (the forward), the cotangent's is a dense all_to_all
    plain = jax.jit(jax.value_and_grad(_loss(mesh, backward=False))).lower(x, w).as_text()
    assert len(_ragged_ops(plain)) == 1


def _smap(mesh, f, n_in):
    return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("i"),) * n_in, out_specs=P("i")))


ROWS, ROW = 4, 2  # one slice of at most 4 rows of 2 bytes per peer
OPERAND = np.arange(NDEV * NDEV * ROWS * ROW, dtype=np.uint8).reshape(-1, ROW)
SEND = np.repeat(np.arange(NDEV) % 3 + 1, NDEV).astype(np.int32)  # d sends d % 3 + 1 rows
RECV = SEND.reshape(NDEV, NDEV).T.reshape(-1)  # what device d gets from each peer


def _emulated(send, recv):
    """``emulated_ragged_all_to_all`` of ``OPERAND`` over every device, one slice per peer."""

    def local(op, s, r):
        me = jax.lax.axis_index("i")
        slot = jnp.arange(NDEV, dtype=jnp.int32) * ROWS
        out_off = jnp.full((NDEV,), me * ROWS, jnp.int32)
        return wire.emulated_ragged_all_to_all(
            op, jnp.zeros_like(op), slot, s, out_off, r, axis_name="i", max_size=ROWS
        )

    mesh = jax.make_mesh((NDEV,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    return np.asarray(_smap(mesh, local, 3)(OPERAND, send, recv))


def test_emulation_moves_each_slice_to_its_peer():
    got = _emulated(SEND, RECV).reshape(NDEV, NDEV, ROWS, ROW)  # [receiver, source, ...]
    src = OPERAND.reshape(NDEV, NDEV, ROWS, ROW)  # [sender, dest, rows, row]
    for d in range(NDEV):
        for s in range(NDEV):
            n = s % 3 + 1
            np.testing.assert_array_equal(got[d, s, :n], src[s, d, :n])
            assert not got[d, s, n:].any()


def test_emulation_checks_send_sizes_against_what_the_peers_expect():
    # Device 0 expects one row more from device 3 than device 3 sends. Run in a process of
    # its own: each device's failed check is kept by the runtime (jax has no public call to
    # drop them) and would be printed at this session's exit.
    code = (
        f"import sys; sys.path += [{str(Path(__file__).parent)!r}]\n"
        "from test_exchange_ragged import RECV, SEND, _emulated\n"
        "bad = RECV.copy(); bad[3] += 1\n"
        "_emulated(SEND, bad)\n"
    )
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={NDEV}"}
    p = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert p.returncode != 0, p.stdout + p.stderr
    assert (
        "ragged_all_to_all precondition broken: this device's send_sizes "
        "[1, 1, 1, 1, 1, 1, 1, 1] differ from the recv_sizes its peers expect "
        "[2, 1, 1, 1, 1, 1, 1, 1]"
    ) in p.stderr, p.stderr[-3000:]


def test_offsets_past_int32_are_refused_with_a_clear_error(mesh):
    assert ex.ragged_rows(NDEV * 26, 16) == 1
    assert ex.ragged_rows(NDEV * 26, 17) == 2
    # 8 peers x 26 tables of 256 MiB: 52 GiB of frames per device; byte offsets in int32
    # wrapped at 2 GiB, row offsets fit up to 32 GiB
    assert ex.ragged_rows(NDEV * 26, 2**26) == 2**22
    with pytest.raises(ValueError, match="exceed ragged_all_to_all's int32 offsets"):
        ex.ragged_rows(NDEV * 26, 2**28)

    def local(frames, nbytes):
        return wire.exchange_frames("i", "ragged", frames, nbytes)[0]

    frames = jax.ShapeDtypeStruct((NDEV * NDEV, 26, 2**28), jnp.uint8)  # never allocated
    nbytes = jax.ShapeDtypeStruct((NDEV * NDEV, 26), jnp.int32)
    with pytest.raises(ValueError, match="exceed ragged_all_to_all's int32 offsets"):
        jax.eval_shape(_smap(mesh, local, 2), frames, nbytes)
