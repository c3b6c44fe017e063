"""One process of tests/library/test_allreduce.py's two-process test: 4 CPU devices, gloo collectives.

Usage: python _multiprocess_allreduce_worker.py PROCESS_ID NUM_PROCESSES PORT

Runs compressed_psum of a pytree with odd sizes over all processes' devices (8 with two
processes) and checks this process's copies of the result against the host's float64 sum
within the documented REL bound (eb (2 + 2 eb) sum_i R_i per chunk, plus float32 rounding),
that every local copy is bit-identical, the gradient of a linear loss against jax.lax.psum's
(bit for bit), that a NaN chunk on the last process sends every process to the exact
fallback (bit-exact jax.lax.psum), and three error-feedback steps (the transmitted sums plus
the residuals add up to the exact sums); prints one line "OK {json}" with a digest of the
result (the test compares it between processes) and exits 0, or raises.
"""

from __future__ import annotations

import hashlib
import os
import sys

LOCAL_DEVICES = 4
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={LOCAL_DEVICES}"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _multiprocess import distributed_mesh, report_ok  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

EB = 0.01


def main(pid: int, nproc: int, port: int) -> None:
    import jax_lossy_comm as jlc
    from jax_lossy_comm import allreduce as ar

    mesh = distributed_mesh(pid, nproc, port, LOCAL_DEVICES)
    ndev = mesh.size
    rng = np.random.default_rng(0)  # same global data in every process
    host = {
        "a": (rng.standard_normal((ndev * 1000, 3)) * 0.05).astype(np.float32),
        "b": rng.uniform(-2, 2, (ndev * 5,)).astype(np.float32),
    }
    sh = NamedSharding(mesh, P("i"))

    def put(t):
        return {
            k: jax.make_array_from_callback(v.shape, sh, lambda i, v=v: v[i]) for k, v in t.items()
        }

    spec = {"a": P("i"), "b": P("i")}

    def f(t):
        y, st = jlc.compressed_psum_with_stats(t, "i", error_bound=EB)
        return y, jax.lax.psum(t, "i"), st.fallback[None], st.moved_bytes[None]

    run = jax.jit(
        jax.shard_map(f, mesh=mesh, in_specs=(spec,), out_specs=(P(), P(), P("i"), P("i")))
    )
    y, ex, fb, moved = run(put(host))

    # Host: device i's flattened buffer, the chunk ranges, the documented bound.
    def local(t, i):
        return {k: v.reshape((ndev, -1) + v.shape[1:])[i] for k, v in t.items()}

    flats = [np.asarray(ravel_pytree(local(host, i))[0], np.float64) for i in range(ndev)]
    n = flats[0].size
    rows, dim = ar.chunk_geometry(n, ndev)
    padded = [np.pad(v, (0, ndev * rows * dim - n), mode="edge").reshape(ndev, -1) for v in flats]
    ranges = np.ptp(np.stack(padded), axis=2)  # [device, chunk]
    bound = np.repeat(EB * (2 + 2 * EB) * ranges.sum(0) * (1 + 1e-5), rows * dim)[:n]
    bound += (ndev - 1) * 2.0**-24 * np.sum(np.abs(flats), axis=0)
    exact = np.sum(flats, axis=0)
    copies = []
    for sa, sb in zip(y["a"].addressable_shards, y["b"].addressable_shards):
        got = np.concatenate([np.asarray(sa.data).ravel(), np.asarray(sb.data).ravel()])
        copies.append(got)
        err = np.abs(got.astype(np.float64) - exact)
        assert np.all(err <= bound), (pid, float((err / bound).max()))
    assert all(np.array_equal(c.view(np.uint32), copies[0].view(np.uint32)) for c in copies)
    assert all(int(np.asarray(s.data)[0]) == 0 for s in fb.addressable_shards)
    max_ratio = float((np.abs(copies[0] - exact) / bound).max())

    # Gradient of a linear loss: psum's rule, bit for bit.
    w = {
        "a": rng.standard_normal((1000, 3)).astype(np.float32),
        "b": rng.standard_normal((5,)).astype(np.float32),
    }

    def grad_of(reduce):
        def h(t, w):
            y = reduce(t)
            return sum(jnp.sum(y[k] * w[k]) for k in y)

        return jax.jit(jax.grad(jax.shard_map(h, mesh=mesh, in_specs=(spec, P()), out_specs=P())))

    x = put(host)
    ga = grad_of(lambda t: jlc.compressed_psum(t, "i", error_bound=EB))(x, w)
    gb = grad_of(lambda t: jax.lax.psum(t, "i"))(x, w)
    for k in host:
        for a, b in zip(ga[k].addressable_shards, gb[k].addressable_shards):
            assert np.array_equal(np.asarray(a.data), np.asarray(b.data)), k

    # NaN beyond the outlier room on the last process: every process falls back together.
    bad = {k: v.copy() for k, v in host.items()}
    bad["a"][-300:, :] = np.nan
    y2, ex2, fb2, _ = run(put(bad))
    for k in host:
        for a, b in zip(y2[k].addressable_shards, ex2[k].addressable_shards):
            aa, bb = np.asarray(a.data), np.asarray(b.data)
            assert np.array_equal(aa.view(np.uint32), bb.view(np.uint32)), (pid, k)
    assert all(int(np.asarray(s.data)[0]) == 1 for s in fb2.addressable_shards)

    # Error feedback: sum_t y_t + sum_i residual_i,T == T * exact (the errors telescope).
    ef = jlc.error_feedback("i")
    res_spec = jlc.ErrorFeedbackState(spec)

    def step(t, st):
        return ef.update(t, st, error_bound=0.05)

    ef_run = jax.jit(
        jax.shard_map(step, mesh=mesh, in_specs=(spec, res_spec), out_specs=(P(), res_spec))
    )
    state = jlc.ErrorFeedbackState(put({k: np.zeros_like(v) for k, v in host.items()}))
    total = np.zeros(n)
    for _ in range(3):
        yt, state = ef_run(x, state)
        total += np.concatenate(
            [np.asarray(yt[k].addressable_shards[0].data, np.float64).ravel() for k in host]
        )
    # residuals of this process's devices, summed with the other process's through a psum
    res_sum = jax.jit(
        jax.shard_map(lambda r: jax.lax.psum(r, "i"), mesh=mesh, in_specs=(spec,), out_specs=P())
    )(state.residual)
    rs = np.concatenate(
        [np.asarray(res_sum[k].addressable_shards[0].data, np.float64).ravel() for k in host]
    )
    tele = np.abs(total + rs - 3 * exact).max()
    assert tele <= 1e-4 * np.abs(exact).max() + 1e-5, tele
    drift = np.abs(total - 3 * exact).max()
    assert drift <= 0.05 * 2.1 * ranges.sum(0).max() * 1.25, drift
    report_ok(
        {
            "process": pid,
            "devices": ndev,
            "max_err_over_bound": max_ratio,
            "digest": hashlib.sha256(copies[0].tobytes()).hexdigest(),
            "moved_bytes": [float(np.asarray(s.data)[0]) for s in moved.addressable_shards],
            "ef_drift": float(drift),
        }
    )


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
