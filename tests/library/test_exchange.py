"""Tests of ``compressed_all_to_all`` on 8 virtual CPU devices (tests/conftest.py).

Correctness only: the result equals ``jax.lax.all_to_all`` within the error bound (checked in
float64) for several split/concat axes, tiled and untiled; per-table bounds hold chunk by
chunk; the gradient through ``shard_map`` (with a ``psum``, the vma trap) equals the exact
one; the compressed backward stays within its bound's effect; NaN/Inf survive, frames that
do not fit fall back to the exact exchange and are counted; changing the bound does not
recompile; the ragged layout (emulated) and the packed path decode to the same values as
the dense one.
"""

from __future__ import annotations

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


def _smap(mesh, f, n_in, out_specs):
    return jax.jit(
        jax.shard_map(f, mesh=mesh, in_specs=(P("i"),) + (P(),) * (n_in - 1), out_specs=out_specs)
    )


def _cfg(table_axis=None, *, path="auto", backward=None, **frame):
    """ExchangeConfig with the library's FrameCodec(**frame) forward; backward="compressed"
    sends the cotangent through the same codec."""
    codec = jlc.FrameCodec(**frame)
    back = codec if backward == "compressed" else None
    return jlc.ExchangeConfig(codec, back, table_axis=table_axis, path=path)


def _expand(stats):
    return jax.tree.map(lambda a: a[None], stats)


def _data(shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * rng.uniform(0.1, 2.0)).astype(np.float32)


# -------------------------------------------------------------------------- equality vs lax
CASES = [  # (local shape, split, concat, tiled, table_axis)
    ((16, 3, 8), 0, 1, True, 1),  # DLRM: [global_batch, tables, dim]
    ((16, 3, 8), 0, 0, True, None),
    ((4, 16, 8), 1, 0, True, 0),
    ((4, 6, 16), 2, 1, True, None),  # split on the last axis
    ((8, 5, 4), 0, 1, False, 1),  # untiled
    ((3, 8, 4), 1, 2, False, None),  # untiled, concat after the split
    ((2, 8, 3, 4), 1, 3, True, 2),
]


@pytest.mark.parametrize("shape,split,concat,tiled,table", CASES)
def test_matches_all_to_all_within_bound(mesh, shape, split, concat, tiled, table):
    eb_rel = 0.02
    xg = _data((NDEV * shape[0],) + shape[1:], seed=len(shape) + split)
    x = jnp.asarray(xg)

    def f(x, eb):
        y, s = jlc.compressed_all_to_all_with_stats(
            x, "i", split, concat, tiled=tiled, error_bound=eb, config=_cfg(table)
        )
        return y, jax.lax.all_to_all(x, "i", split, concat, tiled=tiled), _expand(s)

    y, ye, s = _smap(mesh, f, 2, (P("i"), P("i"), P("i")))(x, jnp.float32(eb_rel))
    assert y.shape == ye.shape and y.dtype == ye.dtype
    # Every chunk's range is at most the global range: a valid (looser) bound everywhere.
    bound = eb_rel * (float(xg.max()) - float(xg.min()))
    err = np.abs(np.asarray(y, np.float64) - np.asarray(ye, np.float64))
    assert err.max() <= bound * (1 + 1e-6), (err.max(), bound)
    assert err.max() > 0  # it really was lossy
    assert int(np.asarray(s.fallback).max()) == 0


def test_per_table_bound_chunk_by_chunk(mesh):
    """DLRM call: float32[B, L, dim], one bound per local table; check each (peer, table)
    chunk against eb_rel[t] * (max - min) of that chunk, in float64."""
    rows, L, dim = 32, 3, 16
    xg = _data((NDEV * NDEV * rows, L, dim), seed=3)
    xg[:, 1] *= 40.0  # tables with different ranges
    ebs = np.array([0.01, 0.05, 0.002], np.float32)

    def f(x, eb):
        return jlc.compressed_all_to_all(
            x, "i", 0, 1, tiled=True, error_bound=eb, config=_cfg(1, min_error_bound=0.002)
        )

    y = np.asarray(_smap(mesh, f, 2, P("i"))(jnp.asarray(xg), jnp.asarray(ebs)), np.float64)
    y = y.reshape(NDEV, rows, NDEV * L, dim)  # [dest d, rows, src*L + t, dim]
    xs = xg.reshape(NDEV, NDEV, rows, L, dim)  # [src i, dest d, rows, t, dim]
    for i in range(NDEV):
        for d in range(NDEV):
            for t in range(L):
                c = xs[i, d, :, t].astype(np.float64)
                eb_abs = float(np.float32(ebs[t]) * np.float32(c.max() - c.min()))
                err = np.abs(y[d, :, i * L + t] - c).max()
                assert err <= eb_abs * (1 + 1e-6), (i, d, t, err, eb_abs)


def test_dense_moves_5x_fewer_bytes_at_rel_001(mesh):
    rows, L, dim = 256, 2, 64
    x = jnp.asarray(_data((NDEV * NDEV * rows, L, dim), seed=4))

    def f(x, eb):
        _, s = jlc.compressed_all_to_all_with_stats(
            x, "i", 0, 1, tiled=True, error_bound=eb, config=_cfg(1, path="dense")
        )
        return _expand(s)

    s = _smap(mesh, f, 2, P("i"))(x, jnp.float32(0.01))
    raw, moved = np.asarray(s.raw_bytes), np.asarray(s.moved_bytes)
    assert np.all(raw == NDEV * rows * L * dim * 4)
    assert np.all(raw / moved >= 5.0), raw / moved
    assert np.all(np.asarray(s.frame_bytes) <= moved)
    assert s.compression_ratio.shape == (NDEV, NDEV, L)
    assert int(np.asarray(s.overflow_count).sum()) == 0


@pytest.mark.parametrize("path", ["dense", "packed"])
@pytest.mark.parametrize("shape,split,concat,tiled,table", CASES)
def test_fallback_matches_all_to_all_bitwise(mesh, shape, split, concat, tiled, table, path):
    """16-byte frames hold no chunk here (NaN outliers in each): the exact fallback
    (all_to_all of the codec's chunks, then the inverse layout) equals lax.all_to_all bit
    for bit, NaN payloads included."""
    xg = _data((NDEV * shape[0],) + shape[1:], seed=3 + split)
    xg.reshape(-1)[::7] = np.nan  # payload bits survive only an exact exchange

    def f(x, eb):
        y, s = jlc.compressed_all_to_all_with_stats(
            x,
            "i",
            split,
            concat,
            tiled=tiled,
            error_bound=eb,
            config=_cfg(table, capacity=16, path=path),
        )
        return y, jax.lax.all_to_all(x, "i", split, concat, tiled=tiled), _expand(s)

    y, ye, s = _smap(mesh, f, 2, (P("i"), P("i"), P("i")))(jnp.asarray(xg), jnp.float32(0.01))
    assert y.shape == ye.shape
    assert np.array_equal(np.asarray(y).view(np.uint32), np.asarray(ye).view(np.uint32))
    assert np.all(np.asarray(s.fallback) == 1)


# ------------------------------------------------------------------------------ gradients
def _weights(shape):
    return jnp.asarray(np.random.default_rng(9).standard_normal(shape).astype(np.float32))


def _untiled_via_tiled(x):
    """all_to_all(x, "i", 0, 1, tiled=False) for x[P, a, b], built from the tiled one: the
    gradient of the untiled lax.all_to_all fails in jax 0.10.2 (cotangent shape mismatch)."""
    return jnp.moveaxis(jax.lax.all_to_all(x[:, None], "i", 0, 1, tiled=True)[0], 0, 1)


@pytest.mark.parametrize("shape,split,concat,tiled,table", [CASES[0], CASES[4]])
def test_grad_exact_backward_matches_all_to_all(mesh, shape, split, concat, tiled, table):
    x = jnp.asarray(_data((NDEV * shape[0],) + shape[1:], seed=5))
    if tiled:

        def reference(x):
            return jax.lax.all_to_all(x, "i", split, concat, tiled=True)
    else:
        assert (split, concat) == (0, 1)
        reference = _untiled_via_tiled

    def run(exchange):
        def h(x, w):
            y = exchange(x)
            return jax.lax.psum(jnp.sum(y * w), "i")  # psum: the vma trap of DESIGN.md

        out_shape = jax.eval_shape(
            jax.shard_map(reference, mesh=mesh, in_specs=P("i"), out_specs=P("i")), x
        ).shape
        w = _weights(out_shape)
        sm = jax.shard_map(h, mesh=mesh, in_specs=(P("i"), P("i")), out_specs=P())
        return jax.jit(jax.grad(sm))(x, w)

    g_exact = run(reference)
    g = run(
        lambda x: jlc.compressed_all_to_all(
            x, "i", split, concat, tiled=tiled, error_bound=0.02, config=_cfg(table)
        )
    )
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_exact), rtol=1e-6, atol=1e-6)


def test_grad_compressed_backward_within_bound(mesh):
    rows, L, dim = 16, 3, 8
    x = jnp.asarray(_data((NDEV * NDEV * rows, L, dim), seed=6))
    w = _weights((NDEV * rows, NDEV * L, dim))
    beb = 0.01

    def run(backward):
        def h(x, w, eb):
            if backward is None:
                y = jax.lax.all_to_all(x, "i", 0, 1, tiled=True)
            else:
                y = jlc.compressed_all_to_all(
                    x,
                    "i",
                    0,
                    1,
                    tiled=True,
                    error_bound=eb,
                    backward_error_bound=beb,
                    config=_cfg(1, backward=backward),
                )
            return jax.lax.psum(jnp.sum(y * w), "i")

        sm = jax.shard_map(h, mesh=mesh, in_specs=(P("i"), P("i"), P()), out_specs=P())
        return np.asarray(jax.jit(jax.grad(sm))(x, w, jnp.float32(0.02)), np.float64)

    g_exact, g = run(None), run("compressed")
    # d loss / d x = w, moved back through the transposed exchange: each value within
    # beb * (range of its cotangent chunk) <= beb * (range of w).
    wn = np.asarray(w)
    err = np.abs(g - g_exact).max()
    assert 0 < err <= beb * (wn.max() - wn.min()) * (1 + 1e-6)


# ------------------------------------------------------------------ overflow and fallback
def test_few_nonfinite_values_are_outliers_not_fallback(mesh):
    rows, L, dim = 16, 2, 8
    xg = _data((NDEV * NDEV * rows, L, dim), seed=7)
    xg[3, 0, 2], xg[40, 1, 5], xg[200, 0, 0] = np.nan, np.inf, -np.inf

    def f(x, eb):
        y, s = jlc.compressed_all_to_all_with_stats(
            x, "i", 0, 1, tiled=True, error_bound=eb, config=_cfg(1)
        )
        return y, jax.lax.all_to_all(x, "i", 0, 1, tiled=True), _expand(s)

    y, ye, s = _smap(mesh, f, 2, (P("i"), P("i"), P("i")))(jnp.asarray(xg), jnp.float32(0.01))
    y, ye = np.asarray(y), np.asarray(ye)
    fin = np.isfinite(ye)
    assert np.array_equal(np.isnan(y), np.isnan(ye))
    assert np.array_equal(y[~fin & ~np.isnan(ye)], ye[~fin & ~np.isnan(ye)])
    assert int(np.asarray(s.fallback).max()) == 0


@pytest.mark.parametrize("path", ["dense", "packed", "_ragged_emulated"])
@pytest.mark.parametrize("what", ["nan_chunk", "bound_below_min"])
def test_an_overflowing_table_goes_exact_alone_and_is_counted(mesh, what, path):
    """A frame that does not fit sends its table exact (every peer's chunk of it, bit for
    bit, NaN and Inf included); the other tables stay coded. Every table overflowing is the
    exact exchange. The ragged path's default capacity holds any frame (the raw size), so
    there it gets the dense path's fixed-rate capacity to overflow."""
    rows, L, dim = 16, 2, 8
    cap = {}
    if path == "_ragged_emulated":
        cap = {"capacity": jlc.frame_capacity((rows, dim), min_error_bound=0.01, outliers=16)}
    xg = _data((NDEV * NDEV * rows, L, dim), seed=8)
    eb = 0.01
    if what == "nan_chunk":
        xg[rows * NDEV * 2 + rows : rows * NDEV * 2 + 2 * rows, 1] = np.nan  # device 2 -> peer 1
        xg[rows * NDEV * 2 + rows, 1, :4] = np.inf
    else:
        eb = 1e-5  # needs 16-bit codes; capacity is sized for 0.01 (6 bits): every frame

    def f(x, e):
        y, s = jlc.compressed_all_to_all_with_stats(
            x,
            "i",
            0,
            1,
            tiled=True,
            error_bound=e,
            config=_cfg(1, min_error_bound=0.01, path=path, **cap),
        )
        return y, jax.lax.all_to_all(x, "i", 0, 1, tiled=True), _expand(s)

    y, ye, s = _smap(mesh, f, 2, (P("i"), P("i"), P("i")))(jnp.asarray(xg), jnp.float32(eb))
    y, ye = np.asarray(y), np.asarray(ye)  # [NDEV * rows, NDEV * L, dim]: table t at t::L
    exact_tables = [1] if what == "nan_chunk" else [0, 1]
    for t in exact_tables:
        assert np.array_equal(y[:, t::L].view(np.uint32), ye[:, t::L].view(np.uint32)), t
    fb, over = np.asarray(s.fallback), np.asarray(s.overflow_count)
    raw, moved = np.asarray(s.raw_bytes), np.asarray(s.moved_bytes)
    assert np.all(fb == 1)
    if what == "nan_chunk":
        assert over.tolist() == [0, 0, 1, 0, 0, 0, 0, 0]
        coded = np.abs(y[:, 0::L] - ye[:, 0::L])
        assert 0 < coded.max() <= eb * np.ptp(xg[:, 0]) * (1 + 1e-5)  # table 0: still coded
        # its frames plus table 1's raw half: less than the exact exchange
        assert np.all((raw / 2 < moved) & (moved < raw)), moved / raw
    else:
        assert np.all(over == NDEV * L)
        assert np.all(moved == raw)  # every table exact: the exact exchange alone


# ----------------------------------------------------------------------- traced bound, paths
def test_changing_error_bound_does_not_recompile(mesh):
    x = jnp.asarray(_data((NDEV * 16, 3, 8), seed=10))

    def f(x, eb):
        return jlc.compressed_all_to_all(x, "i", 0, 1, tiled=True, error_bound=eb, config=_cfg(1))

    g = _smap(mesh, f, 2, P("i"))
    ys = [g(x, jnp.asarray(e, jnp.float32)) for e in ([0.01, 0.02, 0.05], [0.05, 0.05, 0.1])]
    assert g._cache_size() == 1
    ye = _smap(mesh, lambda x, e: jax.lax.all_to_all(x, "i", 0, 1, tiled=True), 2, P("i"))(x, 0)
    e0, e1 = (float(np.abs(np.asarray(y) - np.asarray(ye)).max()) for y in ys)
    assert e1 > e0  # the looser bound really was used


def test_ragged_path_decodes_like_dense(mesh):
    """The ragged path's offsets and sizes, run through a dense emulation of
    ragged_all_to_all's documented semantics (XLA:CPU has no ragged_all_to_all), give the
    dense path's values."""
    x = jnp.asarray(_data((NDEV * 16, 3, 16), seed=11))
    x = x.at[:32, 2].set(1.0)  # constant chunks: header-only frames

    def f(path):
        def g(x, eb):
            y, s = jlc.compressed_all_to_all_with_stats(
                x, "i", 0, 1, tiled=True, error_bound=eb, config=_cfg(1, codec="entropy", path=path)
            )
            return y, _expand(s)

        return _smap(mesh, g, 2, (P("i"), P("i")))(x, jnp.float32(0.01))

    (yd, sd), (yr, sr) = f("dense"), f("_ragged_emulated")
    assert np.array_equal(np.asarray(yd), np.asarray(yr))
    # each of the NDEV * 3 frames moves as whole rows of 16 bytes, plus its int32 count
    rows_bytes = np.asarray(sr.moved_bytes) - 4 * NDEV * 3
    pad = rows_bytes - np.asarray(sr.frame_bytes)
    assert np.all(rows_bytes % ex.RAGGED_ROW_BYTES == 0), rows_bytes
    assert np.all((0 <= pad) & (pad < ex.RAGGED_ROW_BYTES * NDEV * 3)), pad
    assert np.all(np.asarray(sr.moved_bytes) < np.asarray(sd.moved_bytes))


def test_packed_path_decodes_like_dense_and_moves_used_bytes(mesh):
    """The packed path (two phases: pmax of the largest packed destination, then dense
    all_to_alls of the static chunks that cover it) gives the dense path's values bit for
    bit, forward and compressed backward, and moves whole fine chunks per destination."""
    rows, L, dim = 32, 3, 16
    xg = _data((NDEV * NDEV * rows, L, dim), seed=13)
    xg[:, 1] = xg[:1, 1]  # repeated rows: small frames
    xg[:, 2] = 0.0  # constant chunks: header-only frames
    w = _weights((NDEV * rows, NDEV * L, dim))

    def f(path):
        def g(x, eb):
            y, s = jlc.compressed_all_to_all_with_stats(
                x,
                "i",
                0,
                1,
                tiled=True,
                error_bound=eb,
                config=_cfg(1, path=path, backward="compressed"),
            )
            return y, _expand(s)

        def loss(x, eb):
            return jnp.sum(_smap(mesh, g, 2, (P("i"), P("i")))(x, eb)[0] * w)

        x, eb = jnp.asarray(xg), jnp.float32(0.01)
        return _smap(mesh, g, 2, (P("i"), P("i")))(x, eb), jax.grad(loss)(x, eb)

    ((yd, sd), gd), ((yp, sp), gp) = f("dense"), f("packed")
    assert np.array_equal(np.asarray(yd), np.asarray(yp))
    assert np.array_equal(np.asarray(gd), np.asarray(gp))
    np.testing.assert_array_equal(np.asarray(sd.frame_bytes), np.asarray(sp.frame_bytes))
    moved = np.asarray(sp.moved_bytes)
    assert np.all(moved == moved[0])  # the same agreed chunks for every device
    coarse, fine = ex.packed_chunks(L, int(np.asarray(sd.capacity_bytes)[0]))
    assert moved[0] / NDEV % fine == 0
    need = 4 * L + np.asarray(sp.frame_bytes).max() / NDEV  # a rough lower bound
    most = 4 * L + np.asarray(sp.frame_bytes).max() + fine  # every frame to one destination
    assert need * NDEV <= moved[0] < min(np.asarray(sd.moved_bytes)[0] / 2, most * NDEV)
    assert int(np.asarray(sp.fallback).max()) == 0


def test_packed_chunks_tile_the_packed_buffer():
    coarse, fine = ex.packed_chunks(4, 1000)  # 4,016 bytes per destination at most
    assert (coarse, fine) == (ex.PACKED_SUBCHUNKS * 64, 64)
    assert ex.PACKED_CHUNKS * coarse >= 4 * 4 + 4 * 1000 > (ex.PACKED_CHUNKS - 1) * coarse
    assert ex.packed_chunks(26, 8193) == (8 * 3344, 3344)  # fine: 1/64 of the top, 16-aligned


@pytest.mark.parametrize(
    "need, counts",
    [(1, (0, 1)), (16, (0, 1)), (17, (0, 2)), (128, (1, 0)), (129, (1, 1)), (1023, (7, 8))],
)
def test_chunk_counts_cover_the_need_with_less_than_one_fine_chunk_spare(need, counts):
    chunks = (128, 16)
    got = np.asarray(ex.chunk_counts(chunks, jnp.int32(need)))
    assert tuple(got) == counts
    assert need <= got @ np.asarray(chunks) < need + 16


def test_run_chunked_moves_exactly_the_covered_prefix(mesh):
    """Each device's rows for every destination: the first ``counts @ chunks`` bytes arrive
    as a dense all_to_all delivers them, the rest are zero."""
    chunks, size = (128, 16), 8 * 128
    rng = np.random.default_rng(3)
    bufs = rng.integers(1, 256, (NDEV * NDEV, size)).astype(np.uint8)

    def f(buf, need):
        counts = ex.chunk_counts(chunks, need)

        def a2a(b):
            return jax.lax.all_to_all(b, "i", 0, 0, tiled=True)

        return ex.run_chunked(a2a, buf, jnp.zeros_like(buf), counts, chunks), a2a(buf)

    for need, moved in [(300, 304), (129, 144), (1024, 1024), (5, 16)]:
        got, full = _smap(mesh, f, 2, (P("i"), P("i")))(jnp.asarray(bufs), jnp.int32(need))
        want = np.where(np.arange(size) < moved, np.asarray(full), 0)
        np.testing.assert_array_equal(np.asarray(got), want)


def test_packed_exchange_holds_no_more_all_to_alls_than_dense():
    """A switch over static buckets held one all_to_all per bucket (XLA:CPU compiles each
    into a program that grows with the device count); the chunk loops hold two."""

    def count(path):
        mesh = jax.make_mesh((NDEV,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
        cfg = _cfg(1, path=path, backward="compressed", min_error_bound=0.01)

        def g(x, ct, eb):
            y, vjp = jax.vjp(
                lambda v: jlc.compressed_all_to_all(
                    v, "i", 0, 1, tiled=True, error_bound=eb, config=cfg
                ),
                x,
            )
            return y, vjp(ct)[0]

        x = jax.ShapeDtypeStruct((NDEV * NDEV * 16, 2, 32), jnp.float32)
        ct = jax.ShapeDtypeStruct((NDEV * 16, NDEV * 2, 32), jnp.float32)
        sm = jax.shard_map(g, mesh=mesh, in_specs=(P("i"), P("i"), P()), out_specs=(P("i"),) * 2)
        eb = jax.ShapeDtypeStruct((), jnp.float32)
        return jax.jit(sm).lower(x, ct, eb).as_text().count('"stablehlo.all_to_all"')

    assert 0 < count("packed") <= count("dense")


def _packed_reference(frames, nbytes, size):
    """The packed layout written out in numpy: per destination the int32 counts, then each
    frame's first nbytes bytes back to back, zeros after."""
    p, t, cap = frames.shape
    buf = np.zeros((p, size), np.uint8)
    for d in range(p):
        buf[d, : 4 * t] = nbytes[d].astype("<i4").view(np.uint8)
        at = 4 * t
        for k in range(t):
            n = int(np.clip(nbytes[d, k], 0, cap))
            buf[d, at : at + n] = frames[d, k, :n]
            at += n
    return buf


@pytest.mark.parametrize("p, t, cap", [(8, 26, 300), (3, 1, 77), (16, 2, 64)])
def test_pack_frames_writes_the_packed_layout_and_unpack_inverts_it(p, t, cap):
    rng = np.random.default_rng(p * t)
    nb = rng.integers(-3, cap + 1, (p, t)).astype(np.int32)  # negative: an overflowed frame
    nb[0, 0], nb[-1, -1] = 0, cap
    frames = rng.integers(1, 256, (p, t, cap)).astype(np.uint8)  # bytes past nbytes not zero
    size = wire.PACKED_CHUNKS * wire.packed_chunks(t, cap)[0]
    buf = np.asarray(jax.jit(wire.pack_frames, static_argnums=2)(frames, nb, size))
    np.testing.assert_array_equal(buf, _packed_reference(frames, nb, size))
    got, got_nb = jax.jit(wire.unpack_frames, static_argnums=(1, 2))(buf, t, cap)
    kept = np.arange(cap) < nb[..., None]
    np.testing.assert_array_equal(np.asarray(got), np.where(kept, frames, 0))
    np.testing.assert_array_equal(np.asarray(got_nb), nb)


def test_pack_and_unpack_programs_do_not_grow_with_peers_or_tables():
    """The packed path's copies are one scatter and one gather, not one op per frame (which
    made the compiled exchange grow with the device count)."""

    def ops(p, t, cap=256):
        size = wire.PACKED_CHUNKS * wire.packed_chunks(t, cap)[0]
        frames = jax.ShapeDtypeStruct((p, t, cap), jnp.uint8)
        nb = jax.ShapeDtypeStruct((p, t), jnp.int32)
        packed = jax.jit(wire.pack_frames, static_argnums=2).lower(frames, nb, size)
        buf = jax.ShapeDtypeStruct((p, size), jnp.uint8)
        unpacked = jax.jit(wire.unpack_frames, static_argnums=(1, 2)).lower(buf, t, cap)
        return [text.as_text().count(" = ") for text in (packed, unpacked)]

    assert ops(8, 2) == ops(256, 2) == ops(8, 26)


def test_bfloat16(mesh):
    xg = _data((NDEV * 16, 2, 8), seed=12)
    x = jnp.asarray(xg, jnp.bfloat16)

    def f(x, eb):
        return (
            jlc.compressed_all_to_all(x, "i", 0, 1, tiled=True, error_bound=eb, config=_cfg(1)),
            jax.lax.all_to_all(x, "i", 0, 1, tiled=True),
        )

    y, ye = _smap(mesh, f, 2, (P("i"), P("i")))(x, jnp.float32(0.02))
    assert y.dtype == jnp.bfloat16
    xf = np.asarray(x, np.float64)
    err = np.abs(np.asarray(y, np.float64) - np.asarray(ye, np.float64)).max()
    assert err <= 0.02 * (xf.max() - xf.min()) * 1.01


def test_errors(mesh):
    x = jnp.zeros((NDEV * 16, 3, 8), jnp.float32)

    def call(table=None, **kw):
        def f(x):
            split = kw.pop("split", 0)
            return jlc.compressed_all_to_all(
                x, "i", split, 1, tiled=kw.pop("tiled", True), **{"config": _cfg(table), **kw}
            )

        return jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(x)

    with pytest.raises(ValueError, match="divisible"):
        call(split=1, error_bound=0.01)
    with pytest.raises(ValueError, match="must equal the axis size"):
        call(error_bound=0.01, tiled=False)  # lax.all_to_all's default: untiled
    with pytest.raises(ValueError, match="broadcast"):
        call(1, error_bound=jnp.ones((5,)))
    with pytest.raises(ValueError, match="path"):
        jlc.ExchangeConfig(path="sideways")
    with pytest.raises(ValueError, match="table_axis"):
        call(2, error_bound=0.01)
    with pytest.raises(ValueError, match="error_bound is required by FrameCodec"):
        call(1, config=jlc.ExchangeConfig(jlc.FrameCodec(mode="abs"), table_axis=1))
    with pytest.raises(ValueError, match="negative|finite"):
        call(error_bound=-0.01)
    with pytest.raises(TypeError, match="CommCodec"):
        jlc.ExchangeConfig(forward="int8")
    with pytest.raises(ValueError, match="FrameCodec.codec"):
        jlc.FrameCodec(codec="zip")
    with pytest.raises(ValueError, match="ExchangeConfig.table_axis"):
        jlc.ExchangeConfig(table_axis=1.0)


@pytest.mark.parametrize("check_vma", [True, False])
def test_two_axis_mesh_and_check_vma(check_vma):
    """Exchange over one axis of a 2 x 4 mesh; values within the bound and the exact-backward
    gradient (after a psum over both axes) equal to the exact all_to_all's, with and without
    check_vma."""
    mesh2 = jax.make_mesh((2, 4), ("d", "m"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    xg = _data((2 * 4 * 4 * 8, 3, 16), seed=13)
    x = jnp.asarray(xg)
    w = _weights((2 * 4 * 8, 4 * 3, 16))
    spec = P(("d", "m"))

    def run(comp):
        def h(x, w):
            y = (
                jlc.compressed_all_to_all(
                    x, "m", 0, 1, tiled=True, error_bound=0.01, config=_cfg(1)
                )
                if comp
                else jax.lax.all_to_all(x, "m", 0, 1, tiled=True)
            )
            return jax.lax.psum(jnp.sum(y * w), ("d", "m")), y

        sm = jax.shard_map(
            h, mesh=mesh2, in_specs=(spec, spec), out_specs=(P(), spec), check_vma=check_vma
        )
        (_, y), g = jax.jit(jax.value_and_grad(lambda x, w: sm(x, w), has_aux=True))(x, w)
        return np.asarray(y, np.float64), np.asarray(g)

    (ye, ge), (y, g) = run(False), run(True)
    assert np.abs(y - ye).max() <= 0.01 * (xg.max() - xg.min()) * (1 + 1e-6)
    np.testing.assert_allclose(g, ge, rtol=1e-6, atol=1e-6)


def test_config_is_frozen_hashable_and_auto_path_is_decided_once():
    """ExchangeConfig is a frozen, hashable static argument; "auto" means packed on the CPU
    (never more bytes than dense) and ragged on a GPU, decided only by resolve_path."""
    import dataclasses

    cfg = _cfg(1, min_error_bound=0.01)
    assert cfg == _cfg(1, min_error_bound=0.01) and hash(cfg) == hash(_cfg(1, min_error_bound=0.01))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.path = "dense"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.forward.mode = "abs"
    on_gpu = jax.devices()[0].platform in ("gpu", "cuda", "rocm")
    assert jlc.resolve_path("auto") == ("ragged" if on_gpu else "packed")
    assert [jlc.resolve_path(p) for p in ("dense", "packed", "ragged")] == [
        "dense",
        "packed",
        "ragged",
    ]
    with pytest.raises(ValueError, match="path"):
        jlc.resolve_path("sideways")
