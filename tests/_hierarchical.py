"""Checks of the hierarchical exchange shared by tests/library/test_exchange_hierarchical.py (8 virtual
devices as 2 nodes x 4) and tests/_multiprocess_hierarchical_worker.py (2 processes x 4
devices): one shard_map runs the hierarchical and the flat compressed exchange, the exact
``jax.lax.all_to_all`` and their gradients; the host compares every addressable shard.

What must hold, block by block (a block = the elements one source device sent, per table):
the hierarchical result's blocks from the own node are bit-equal to the exact exchange's,
its blocks from other nodes bit-equal to the flat compressed exchange's (the same chunk,
bound and codec give the same frame) and within the bound of the exact values (float64); the
same for the gradients (exact backward: bit-equal to the exact exchange's gradient).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc

AX = ("node", "local")
#: ExchangeStats fields in ``run_exchanges``'s ``stats`` (last axis)
STATS = (
    "raw_bytes",
    "frame_bytes",
    "moved_bytes",
    "intra_node_bytes",
    "inter_node_raw_bytes",
    "inter_node_moved_bytes",
)


def hierarchical_mesh(nodes: int, local: int) -> jax.sharding.Mesh:
    """Mesh ``("node", "local")`` of shape ``(nodes, local)`` over every device, process-major
    (a process's devices are one node when ``local`` is its device count)."""
    devs = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return jax.sharding.Mesh(
        np.array(devs, dtype=object).reshape(nodes, local),
        AX,
        axis_types=(jax.sharding.AxisType.Auto,) * 2,
    )


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(np.uint16 if np.asarray(a).dtype.itemsize == 2 else np.uint32)


def _global(mesh, a: np.ndarray, spec) -> jax.Array:
    return jax.make_array_from_callback(a.shape, NamedSharding(mesh, spec), lambda i: a[i])


def run_exchanges(
    mesh, xg, eb, *, split=0, concat=1, tiled=True, table_axis=1, path="dense", backward=True,
    forward=None, wg=None,
):  # fmt: skip
    """The outputs of one jitted shard_map over ``mesh`` (global arrays sharded on axis 0).

    Args:
      xg: the global operand (numpy), sharded over both axes on axis 0.
      eb: the error bound (numpy, replicated), ``[T]`` or ``[P, T]``.
      backward: also compute the gradients of ``sum(y * w)`` (exact backward, and through the
        forward codec with the bound ``0.01``).
      forward: the forward codec (default ``FrameCodec(min_error_bound=0.01)``).
      wg: the weights ``w`` (numpy, like ``y``); default standard normal.

    Returns:
      dict of global arrays: ``hier``, ``flat``, ``exact``, ``src`` (the source device of each
      element of ``y``), ``table`` (its table index), the statistics ``stats``
      (``float32[P, 2, 6]``: hierarchical then flat, the fields ``STATS``), ``fallback``
      (hierarchical) and ``ratio`` (its ``compression_ratio``, ``[P, P, T or 1]``); with
      ``backward``: ``g_exact``, ``g_hier``, ``g_flat_c``, ``g_hier_c``.
    """
    fwd = jlc.FrameCodec(min_error_bound=0.01) if forward is None else forward
    spec = P(AX)

    def cfg(topology, back=None):
        return jlc.ExchangeConfig(fwd, back, table_axis=table_axis, path=path, topology=topology)

    def labels(x):
        me = jax.lax.axis_index(AX)
        src = jnp.full(x.shape, me, jnp.int32)
        t = table_axis if table_axis is not None else x.ndim - 1
        tab = jax.lax.broadcasted_iota(jnp.int32, x.shape, t % x.ndim)
        if table_axis is None:
            tab = jnp.zeros_like(tab)
        a2a = lambda v: jax.lax.all_to_all(v, AX, split, concat, tiled=tiled)  # noqa: E731
        return a2a(src), a2a(tab)

    def fwd_body(x, e):
        yh, s = jlc.compressed_all_to_all_with_stats(
            x, AX, split, concat, tiled=tiled, error_bound=e, config=cfg("hierarchical")
        )
        yf, sf = jlc.compressed_all_to_all_with_stats(
            x, AX, split, concat, tiled=tiled, error_bound=e, config=cfg("flat")
        )
        ye = jax.lax.all_to_all(x, AX, split, concat, tiled=tiled)
        src, tab = labels(x)
        st = jnp.stack([jnp.stack([getattr(v, k) for k in STATS]) for v in (s, sf)])
        ratio = s.compression_ratio.reshape(s.compression_ratio.shape[0], -1)
        return yh, yf, ye, src, tab, st[None], s.fallback[None], ratio[None]

    x = _global(mesh, np.asarray(xg), spec)
    e = jax.device_put(jnp.asarray(eb), NamedSharding(mesh, P()))
    names = ("hier", "flat", "exact", "src", "table", "stats", "fallback", "ratio")
    outs = jax.jit(jax.shard_map(fwd_body, mesh=mesh, in_specs=(spec, P()), out_specs=(spec,) * 8))(
        x, e
    )
    res = dict(zip(names, outs))
    if not backward:
        return res
    if wg is None:
        wg = np.random.default_rng(7).standard_normal(res["exact"].shape).astype(np.float32)
    w = _global(mesh, np.asarray(wg).astype(np.asarray(xg).dtype), spec)

    def grad(kind):
        def h(x, w, e):
            if kind == "exact":
                y = jax.lax.all_to_all(x, AX, split, concat, tiled=tiled)
            else:
                topo, comp = kind.split("_")
                c = cfg(topo, fwd if comp == "c" else None)
                y = jlc.compressed_all_to_all(
                    x, AX, split, concat, tiled=tiled, error_bound=e,
                    backward_error_bound=0.01, config=c,
                )  # fmt: skip
            return jax.lax.psum(jnp.sum(y.astype(jnp.float32) * w.astype(jnp.float32)), AX)

        sm = jax.shard_map(h, mesh=mesh, in_specs=(spec, spec, P()), out_specs=P())
        return jax.jit(jax.grad(sm))(x, w, e)

    res.update(
        g_exact=grad("exact"), g_hier=grad("hierarchical_x"),
        g_flat_c=grad("flat_c"), g_hier_c=grad("hierarchical_c"),
    )  # fmt: skip
    return res


def _shards(a: jax.Array, mesh) -> dict:
    """device position in the mesh (node-major) -> this process's shard as numpy."""
    pos = {d: i for i, d in enumerate(mesh.devices.flat)}
    return {pos[s.device]: np.asarray(s.data) for s in a.addressable_shards}


def check_exchanges(
    res: dict, mesh, eb, *, local: int, grads: bool = True, bounded: bool = True
) -> dict:
    """Asserts the module docstring's properties on this process's shards of ``res``
    (:func:`run_exchanges`); returns a summary (largest error / bound, shards checked).
    ``bounded`` False: a codec without an error bound (Int8Rowwise, BF16), no bound check."""
    ndev = mesh.size
    eb = np.asarray(eb, np.float64)
    eb_grid = np.broadcast_to(eb, (ndev, eb.shape[-1]) if eb.ndim else (ndev, 1))
    sh = {k: _shards(res[k], mesh) for k in ("hier", "flat", "exact", "src", "table")}
    worst, checked = 0.0, 0
    for d, yh in sh["hier"].items():
        yf, ye, src, tab = (sh[k][d] for k in ("flat", "exact", "src", "table"))
        same = src // local == d // local
        assert np.array_equal(_bits(yh)[same], _bits(ye)[same]), f"device {d}: own node"
        assert np.array_equal(_bits(yh)[~same], _bits(yf)[~same]), f"device {d}: vs flat"
        assert not np.array_equal(_bits(yh)[~same], _bits(ye)[~same]), "nothing compressed"
        y64, e64 = yh.astype(np.float64), ye.astype(np.float64)
        for s_ in np.unique(src[~same]) if bounded else ():
            for t in np.unique(tab):
                m = (src == s_) & (tab == t)
                rng = e64[m].max() - e64[m].min()
                # the sender's bound for (this destination, table t)
                bound = eb_grid[d, t if eb_grid.shape[1] > 1 else 0] * rng
                err = np.abs(y64[m] - e64[m]).max()
                assert err <= bound * (1 + 1e-6), (d, int(s_), int(t), err, bound)
                worst = max(worst, err / bound if bound else 0.0)
        checked += 1
    assert checked, "no addressable shard"
    for d, f in _shards(res["fallback"], mesh).items():
        assert int(f[0]) == 0, f"device {d} fell back"
    if grads:
        _check_grads(res, mesh, local, bounded)
    return {"max_err_over_bound": worst, "shards": checked}


def _check_grads(res: dict, mesh, local: int, bounded: bool) -> None:
    """Gradients w.r.t. x: exact backward bit-equal to the exact exchange's; compressed
    backward: blocks sent to the own node exact, to other nodes bit-equal to the flat
    compressed backward's and within 0.01 x the range of the cotangent block."""
    ndev = mesh.size
    g = {k: _shards(res[k], mesh) for k in ("g_exact", "g_hier", "g_flat_c", "g_hier_c")}
    for d, ge in g["g_exact"].items():
        assert np.array_equal(_bits(g["g_hier"][d]), _bits(ge)), f"device {d}: exact backward"
        # split axis 0 of x: block i of the first axis went to peer i (tiled or not)
        gh, gf = g["g_hier_c"][d], g["g_flat_c"][d]
        blocks = ge.shape[0] // ndev
        for i in range(ndev):
            sl = slice(i * blocks, (i + 1) * blocks)
            if i // local == d // local:
                assert np.array_equal(_bits(gh[sl]), _bits(ge[sl])), (d, i)
            else:
                assert np.array_equal(_bits(gh[sl]), _bits(gf[sl])), (d, i)
                # the exact gradient's block holds the cotangent chunks (one per table) that
                # travelled coded: each within 0.01 x its range <= the block's range
                e64 = ge[sl].astype(np.float64)
                err = np.abs(gh[sl].astype(np.float64) - e64).max()
                assert not bounded or err <= 0.01 * np.ptp(e64) * (1 + 1e-6), (d, i, err)
