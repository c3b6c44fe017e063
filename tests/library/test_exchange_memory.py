"""The compressed all-to-all's memory beside jax.lax.all_to_all's: XLA's temp + output per
device, from ``Compiled.memory_analysis()`` (deterministic for a program: no timing).
bench/training/exchange_memory.py reports the same at 16 MiB per device."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc

NDEV = 8
pytestmark = pytest.mark.skipif(jax.device_count() < NDEV, reason=f"needs {NDEV} devices")


def _budget(mesh, fn, shape):
    f = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
    m = f.lower(jax.ShapeDtypeStruct(shape, jnp.float32)).compile().memory_analysis()
    return m.temp_size_in_bytes + m.output_size_in_bytes


@pytest.mark.parametrize("path", ["dense", "packed"])
@pytest.mark.parametrize(("table_axis", "computed"), [(1, False), (1, True), (None, False)])
def test_the_exchange_needs_at_most_1_2x_the_exact_collectives_memory(
    mesh, path, table_axis, computed
):
    # 2 MiB per device: 8 peers x 4 tables of [256, 64] float32 chunks (or one per peer), the
    # program's argument or computed in it (as a model's pooled embeddings are)
    shape = (NDEV * NDEV * 256, 4, 64) if table_axis else (NDEV * NDEV * 1024, 64)
    pre = (lambda a: jnp.tanh(a) * 1.5) if computed else (lambda a: a)
    exact = _budget(mesh, lambda a: jax.lax.all_to_all(pre(a), "i", 0, 0, tiled=True), shape)
    cfg = jlc.ExchangeConfig(
        jlc.FrameCodec(codec="fixed", min_error_bound=0.01), table_axis=table_axis, path=path
    )
    coded = _budget(
        mesh,
        lambda a: jlc.compressed_all_to_all(
            pre(a), "i", 0, 0, tiled=True, error_bound=0.01, config=cfg
        ),
        shape,
    )
    assert coded <= 1.2 * exact, (coded / 2**20, exact / 2**20)


@pytest.mark.parametrize(("block", "slices"), [(12, 4), (6, 3), (7, 1), (0, 1)])
def test_the_fallback_in_slices_is_the_exact_all_to_all(mesh, block, slices):
    from jax_lossy_comm.wire import exact_all_to_all_in_pieces, slice_count

    assert slice_count(block, 4) == slices
    x = jnp.arange(NDEV * NDEV * block, dtype=jnp.float32).reshape(NDEV * NDEV, block)

    def run(fn):
        return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(x)

    got = run(lambda a: exact_all_to_all_in_pieces(a, "i", 4))
    want = run(lambda a: jax.lax.all_to_all(a, "i", 0, 0, tiled=True))
    assert got.shape == want.shape
    assert bool((got == want).all())


def test_the_all_reduce_in_slices_fits_1_2x_of_psums_memory_and_sums_within_the_bound(mesh):
    cfg = jlc.AllReduceConfig(slices=16)

    def psum_in_slices(a):
        return jlc.compressed_psum(a, "i", error_bound=0.01, config=cfg)

    n = 1 << 20  # floats per device
    exact = _budget(mesh, lambda a: jax.lax.psum(a, "i"), (NDEV * n,))
    sliced = _budget(mesh, psum_in_slices, (NDEV * n,))
    whole = _budget(mesh, lambda a: jlc.compressed_psum(a, "i", error_bound=0.01), (NDEV * n,))
    assert sliced <= 1.2 * exact < whole, (sliced / exact, whole / exact)
    g = jnp.sin(jnp.arange(NDEV * n, dtype=jnp.float32) * 0.37)

    def run(fn):
        return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(g)

    got, want = run(psum_in_slices), run(lambda a: jax.lax.psum(a, "i"))
    # within compressed_psum's REL bound of each slice (allreduce.py's module docstring):
    # 2 eb (1 + eb) P max_i R_i, every range R_i at most 2 (a sine), plus float rounding
    err = float(jnp.abs(got - want).max())
    assert 0 < err <= 2 * 0.01 * 1.01 * NDEV * 2.0 * (1 + 1e-5), err
