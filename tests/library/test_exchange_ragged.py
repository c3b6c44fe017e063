"""The ragged wire path (``jax.lax.ragged_all_to_all``, the GPU's): lowered on the CPU without
compiling (XLA:CPU has no ragged_all_to_all), forward and gradient with a compressed backward,
so tracing and typing errors of the GPU path show up here; its rows of 16
bytes, the int32 offset limit, and the size precondition checked by the CPU emulation."""

from __future__ import annotations

import re

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


def test_emulation_checks_send_sizes_against_what_the_peers_expect(mesh):
    # one slice per peer, rows of 2 bytes; device d sends d % 3 + 1 rows to every peer
    rows, row = 4, 2
    operand = np.arange(NDEV * NDEV * rows * row, dtype=np.uint8).reshape(-1, row)
    sizes = np.repeat(np.arange(NDEV) % 3 + 1, NDEV).astype(np.int32)  # [d * NDEV + peer]

    def run(send, recv):
        def local(op, s, r):
            me = jax.lax.axis_index("i")
            slot = jnp.arange(NDEV, dtype=jnp.int32) * rows
            out_off = jnp.full((NDEV,), me * rows, jnp.int32)
            return wire.emulated_ragged_all_to_all(
                op, jnp.zeros_like(op), slot, s, out_off, r, axis_name="i", max_size=rows
            )

        return np.asarray(_smap(mesh, local, 3)(operand, send, recv))

    recv = sizes.reshape(NDEV, NDEV).T.reshape(-1)  # what device d gets from each peer
    got = run(sizes, recv).reshape(NDEV, NDEV, rows, row)  # [receiver, source, rows, row]
    src = operand.reshape(NDEV, NDEV, rows, row)  # [sender, dest, rows, row]
    for d in range(NDEV):
        for s in range(NDEV):
            n = s % 3 + 1
            np.testing.assert_array_equal(got[d, s, :n], src[s, d, :n])
            assert not got[d, s, n:].any()
    bad = recv.copy()
    bad[3] += 1  # device 0 expects one row more from device 3 than device 3 sends
    with pytest.raises(Exception, match="ragged_all_to_all precondition broken"):
        run(sizes, bad)
    # Every device's check failed; the runtime raised the first and keeps the others, which
    # its exit handler would print after the session. Drop them (jax has no public call).
    from jax._src import dispatch

    dispatch.runtime_tokens.clear()


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
