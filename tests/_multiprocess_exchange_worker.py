"""One process of tests/library/test_exchange_multiprocess.py: 4 CPU devices, gloo collectives.

Usage: python _multiprocess_exchange_worker.py PROCESS_ID NUM_PROCESSES PORT

Runs the DLRM-shaped compressed_all_to_all over all processes' devices (8 with two
processes), checks this process's shards of the result against the exact all_to_all (within
each chunk's REL bound, float64), the gradient with backward="exact" against the exact
exchange's gradient, the gradient with backward="compressed" within its bound, and that a
NaN/Inf chunk on one process sends every process down the exact fallback; prints
one line "OK {json}" and exits 0, or raises (non-zero exit).
"""

from __future__ import annotations

import os
import sys

LOCAL_DEVICES = 4
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={LOCAL_DEVICES}"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _multiprocess import distributed_mesh, report_ok  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def main(pid: int, nproc: int, port: int) -> None:
    import jax_lossy_comm as jlc

    mesh = distributed_mesh(pid, nproc, port, LOCAL_DEVICES)
    ndev = mesh.size
    rows, L, dim = 16, 2, 32
    rng = np.random.default_rng(0)  # same global data in every process
    xg = rng.standard_normal((ndev * ndev * rows, L, dim)).astype(np.float32)
    xg[:, 1] *= 10.0
    wg = rng.standard_normal((ndev * rows, ndev * L, dim)).astype(np.float32)
    ebs = np.array([0.01, 0.03], np.float32)
    sh = NamedSharding(mesh, P("i"))
    x = jax.make_array_from_callback(xg.shape, sh, lambda idx: xg[idx])
    w = jax.make_array_from_callback(wg.shape, sh, lambda idx: wg[idx])
    eb = jax.device_put(jnp.asarray(ebs), NamedSharding(mesh, P()))

    def fwd(x, eb):
        y, s = jlc.compressed_all_to_all_with_stats(
            x, "i", 0, 1, tiled=True, error_bound=eb, config=jlc.ExchangeConfig(table_axis=1)
        )
        return (
            y,
            jax.lax.all_to_all(x, "i", 0, 1, tiled=True),
            s.moved_bytes[None],
            s.raw_bytes[None],
            s.fallback[None],
        )

    y, ye, moved, raw, fb = jax.jit(
        jax.shard_map(fwd, mesh=mesh, in_specs=(P("i"), P()), out_specs=(P("i"),) * 5)
    )(x, eb)

    def loss(backward):
        def h(x, w, eb):
            if backward is None:
                yy = jax.lax.all_to_all(x, "i", 0, 1, tiled=True)
            else:
                back = jlc.FrameCodec() if backward == "compressed" else None
                yy = jlc.compressed_all_to_all(
                    x,
                    "i",
                    0,
                    1,
                    tiled=True,
                    error_bound=eb,
                    backward_error_bound=0.01,
                    config=jlc.ExchangeConfig(backward=back, table_axis=1),
                )
            return jax.lax.psum(jnp.sum(yy * w), "i")

        return jax.jit(
            jax.grad(jax.shard_map(h, mesh=mesh, in_specs=(P("i"), P("i"), P()), out_specs=P()))
        )(x, w, eb)

    g_ref, g_exact, g_comp = loss(None), loss("exact"), loss("compressed")

    # Expected result on the host: y on device d, column i*L + t = chunk (src i -> d, table t).
    xs = xg.reshape(ndev, ndev, rows, L, dim).astype(np.float64)
    max_ratio = 0.0
    for shard, shard_e in zip(y.addressable_shards, ye.addressable_shards):
        d = shard.index[0].start // rows
        yd = np.asarray(shard.data, np.float64).reshape(rows, ndev, L, dim)
        exact = xs[:, d].transpose(1, 0, 2, 3)  # [rows, src, L, dim]
        assert np.array_equal(np.asarray(shard_e.data, np.float64).reshape(exact.shape), exact)
        for i in range(ndev):
            for t in range(L):
                c = xs[i, d, :, t]
                eb_abs = float(np.float32(ebs[t]) * np.float32(c.max() - c.min()))
                err = np.abs(yd[:, i, t] - c).max()
                assert err <= eb_abs * (1 + 1e-6), (pid, d, i, t, err, eb_abs)
                max_ratio = max(max_ratio, err / eb_abs)
    wrange = float(wg.max() - wg.min())
    for a, b, c in zip(
        g_ref.addressable_shards, g_exact.addressable_shards, g_comp.addressable_shards
    ):
        ra, rb, rc = (np.asarray(s.data, np.float64) for s in (a, b, c))
        np.testing.assert_allclose(rb, ra, rtol=1e-6, atol=1e-6)
        assert np.abs(rc - ra).max() <= 0.01 * wrange * (1 + 1e-6)
    moved_l = [float(np.asarray(s.data)[0]) for s in moved.addressable_shards]
    raw_l = [float(np.asarray(s.data)[0]) for s in raw.addressable_shards]
    assert all(int(np.asarray(s.data)[0]) == 0 for s in fb.addressable_shards)
    # A chunk full of NaN/Inf on a device of the last process: every device must send that
    # table exact together (the pmax of the flags crosses processes), bit-exact; the other
    # tables stay coded.
    xn = xg.copy()
    xn[-rows:, 0] = np.nan
    xn[-1, 0, :3] = np.inf
    xb = jax.make_array_from_callback(xn.shape, sh, lambda idx: xn[idx])
    y2, ye2, _, _, fb2 = jax.jit(
        jax.shard_map(fwd, mesh=mesh, in_specs=(P("i"), P()), out_specs=(P("i"),) * 5)
    )(xb, eb)
    assert L > 1
    for a, b in zip(y2.addressable_shards, ye2.addressable_shards):
        ya, yb = (np.asarray(v.data).reshape(rows, ndev, L, dim) for v in (a, b))
        assert np.array_equal(ya[:, :, 0].view(np.uint32), yb[:, :, 0].view(np.uint32))
        assert 0 < np.abs(ya[:, :, 1:] - yb[:, :, 1:]).max()
    assert all(int(np.asarray(s.data)[0]) == 1 for s in fb2.addressable_shards)
    report_ok(
        {
            "process": pid,
            "devices": ndev,
            "max_err_over_bound": max_ratio,
            "moved_bytes": moved_l,
            "raw_bytes": raw_l,
        }
    )


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
