"""compressed_psum and error feedback (jax_lossy_comm.allreduce) on 8 virtual CPU devices, and
across 2 processes (tests/_multiprocess_allreduce_worker.py).

The bound checked is the one the module documents, per element of chunk c of the flattened
buffer, against the exact sum in float64: REL ``eb * (2 + 2 eb) * sum_i R_i(c)`` (R_i the range
of device i's chunk), ABS ``(P + 1) * eb``, plus float32 rounding of the P-term sum.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _multiprocess import run_processes
from jax.flatten_util import ravel_pytree
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc
from jax_lossy_comm import allreduce as ar

NDEV = 8
AX = "i"
MESH = jax.make_mesh((NDEV,), (AX,), axis_types=(jax.sharding.AxisType.Auto,))


def _tree(seed: int, nan: bool = False):
    """Per-device gradient-like leaves of odd sizes (n = 2100 + 185 + 3 + 1 = 2289 per device,
    not divisible by 8 or by the chunk): global arrays with a leading device axis."""
    rng = np.random.default_rng(seed)
    t = {
        "big": (rng.standard_normal((NDEV * 300, 7)) * 0.02).astype(np.float32),
        "w": (rng.standard_normal((NDEV * 37, 5)) * 3.0).astype(np.float32),
        "b": rng.uniform(-1, 1, (NDEV * 3,)).astype(np.float32),
        "s": rng.standard_normal((NDEV,)).astype(np.float32),  # a scalar leaf per device
    }
    return t


def _local(t, i):
    """Device i's pytree as compressed_psum sees it (the scalar leaf 0-d)."""
    loc = {k: v.reshape((NDEV, -1) + v.shape[1:])[i] for k, v in t.items()}
    loc["s"] = loc["s"][0]
    return loc


def _run(t, eb, config=None, check_vma=True):
    def f(tree, eb):
        tree = {**tree, "s": tree["s"][0]}
        y, st = jlc.compressed_psum_with_stats(tree, AX, error_bound=eb, config=config)
        return y, jax.lax.psum(tree, AX), jax.tree.map(lambda v: v[None], st)

    spec = {k: P(AX) for k in t}
    g = jax.jit(
        jax.shard_map(
            f, mesh=MESH, in_specs=(spec, P()), out_specs=(P(), P(), P(AX)), check_vma=check_vma
        )
    )
    return g(t, jnp.float32(eb))


def _flat_bound(t, eb, mode):
    """(exact float64 sum, bound per element) of the flattened buffer, as documented."""
    flats = [np.asarray(ravel_pytree(_local(t, i))[0], np.float64) for i in range(NDEV)]
    n = flats[0].size
    rows, dim = ar.chunk_geometry(n, NDEV)
    total = NDEV * rows * dim
    exact = np.sum(flats, axis=0)
    rounding = (NDEV - 1) * 2.0**-24 * np.sum(np.abs(flats), axis=0) + 1e-30
    if mode == "abs":
        return exact, (NDEV + 1) * eb * (1 + 1e-5) + rounding
    padded = [np.pad(f, (0, total - n), mode="edge").reshape(NDEV, rows * dim) for f in flats]
    ranges = np.stack(
        [[np.ptp(c[np.isfinite(c)]) if np.isfinite(c).any() else 0.0 for c in p] for p in padded]
    )  # [device, chunk]
    per_chunk = eb * (2 + 2 * eb) * ranges.sum(axis=0) * (1 + 1e-5)
    return exact, np.repeat(per_chunk, rows * dim)[:n] + rounding


def _flat(tree):
    return np.asarray(ravel_pytree(jax.tree.map(np.asarray, tree))[0], np.float64)


@pytest.mark.parametrize(
    "mode,eb,path",
    [
        ("rel", 0.01, "packed"),
        ("rel", 0.03, "dense"),
        ("rel", 0.01, "_ragged_emulated"),
        ("abs", 1e-3, "packed"),
    ],
)
def test_matches_psum_within_documented_bound(mode, eb, path):
    t = _tree(1)
    cfg = jlc.AllReduceConfig(jlc.FrameCodec(mode=mode, capacity=None), path=path)
    y, ex, st = _run(t, eb, cfg)
    assert jax.tree.structure(y) == jax.tree.structure(ex)
    for k in y:
        assert y[k].shape == ex[k].shape and y[k].dtype == ex[k].dtype, k
    exact, bound = _flat_bound(t, eb, mode)
    err = np.abs(_flat(y) - exact)
    assert np.all(err <= bound), (err / bound).max()
    assert (err / bound).max() > 0.05  # the data really went through the codec
    # against jax.lax.psum itself (float32 rounding on both sides)
    assert np.all(np.abs(_flat(y) - _flat(ex)) <= 2 * bound)
    assert np.asarray(st.fallback).tolist() == [0] * NDEV
    assert np.asarray(st.overflow_count).tolist() == [0] * NDEV
    raw, moved = np.asarray(st.raw_bytes), np.asarray(st.moved_bytes)
    rows, dim = ar.chunk_geometry(_flat(y).size, NDEV)
    assert raw.tolist() == [2.0 * NDEV * rows * dim * 4] * NDEV
    if mode == "rel":  # fixed-rate capacity at least; entropy coding does better
        assert np.all(moved < raw / 3), (moved, raw)
    assert np.asarray(st.compression_ratio).shape == (NDEV, 2)
    # the bytes of each phase: their sum is moved_bytes, and each carries at least its
    # frames (raw / 2 per phase over the phase's ratio: the reduce-scatter's frames, the
    # all-gather's P copies of the reduced chunk's frame)
    phase, ratio = np.asarray(st.phase_moved_bytes), np.asarray(st.compression_ratio)
    assert phase.shape == (NDEV, 2)
    np.testing.assert_allclose(phase.sum(axis=1), moved, rtol=1e-6)
    assert np.all(phase >= raw[:, None] / 2 / ratio * (1 - 1e-6)), (phase, raw, ratio)


def test_gradient_frames_take_one_dense_collective_on_auto():
    """Gradient frames fill most of their fixed-rate capacity, so without ragged_all_to_all
    "auto" sends them in one dense collective per phase, not in the packed path's chunk
    loops (while loops in the program): the same values and bytes as the dense path, with
    the fixed-rate and with the adaptive codec; "packed" stays available."""
    if jax.devices()[0].platform != "cpu":
        pytest.skip("the CPU's choice (a GPU takes the ragged path)")
    t = _tree(3)
    spec = {k: P(AX) for k in t}

    def step(codec, path):
        def f(tree):
            tree = {**tree, "s": tree["s"][0]}
            cfg = jlc.AllReduceConfig(codec, path=path)
            y, st = jlc.compressed_psum_with_stats(tree, AX, error_bound=0.01, config=cfg)
            return y, jax.tree.map(lambda v: v[None], st)

        return jax.jit(jax.shard_map(f, mesh=MESH, in_specs=(spec,), out_specs=(P(), P(AX))))

    fixed = jlc.FrameCodec(codec="fixed", min_error_bound=0.01)
    text = {p: step(fixed, p).lower(t).as_text() for p in ("auto", "dense", "packed")}
    assert "stablehlo.while" in text["packed"]
    assert "stablehlo.while" not in text["auto"] and "stablehlo.while" not in text["dense"]
    assert "stablehlo.while" not in step(jlc.FrameCodec(), "auto").lower(t).as_text()
    assert "stablehlo.while" in step(jlc.FrameCodec(), "packed").lower(t).as_text()
    (ya, sa), (yd, sd) = step(fixed, "auto")(t), step(fixed, "dense")(t)
    np.testing.assert_array_equal(_flat(ya), _flat(yd))
    np.testing.assert_array_equal(np.asarray(sa.moved_bytes), np.asarray(sd.moved_bytes))


def test_same_result_on_every_device_and_every_path():
    t = _tree(2)
    outs = [
        _run(t, 0.02, jlc.AllReduceConfig(path=p))[0]
        for p in ("dense", "packed", "_ragged_emulated")
    ]
    for o in outs[1:]:  # the path moves bytes differently, the frames are the same
        for k in o:
            assert np.array_equal(np.asarray(o[k]), np.asarray(outs[0][k])), k

    def f(x):
        return jlc.compressed_psum(x, AX, error_bound=0.02)[None]

    x = jnp.asarray(_tree(2)["big"])
    per_dev = jax.jit(jax.shard_map(f, mesh=MESH, in_specs=P(AX), out_specs=P(AX)))(x)
    per_dev = np.asarray(per_dev)
    assert all(np.array_equal(per_dev[0], per_dev[i]) for i in range(NDEV))


def test_nan_inf_beyond_outlier_room_fall_back_to_psum_bit_exact():
    t = _tree(3)
    t["big"][5 * 300 : 5 * 300 + 40, :] = np.nan  # 280 NaN on device 5: no frame holds them
    t["w"][2 * 37, 0] = np.inf
    y, ex, st = _run(t, 0.01)
    for k in y:
        a, b = np.asarray(y[k]), np.asarray(ex[k])
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), k
    assert np.asarray(st.fallback).tolist() == [1] * NDEV
    assert np.asarray(st.overflow_count)[5] >= 1
    assert np.all(np.asarray(st.moved_bytes) == np.asarray(st.raw_bytes))
    # the exact psum: half its raw bytes in each phase
    half = np.asarray(st.raw_bytes)[:, None] / 2
    assert np.array_equal(np.asarray(st.phase_moved_bytes), np.broadcast_to(half, (NDEV, 2)))


def test_few_nan_inf_travel_as_outliers():
    t = _tree(4)
    t["big"][1 * 300 + 7, 3] = np.nan
    t["w"][4 * 37 + 2, 1] = np.inf
    t["w"][6 * 37 + 9, 4] = -np.inf
    y, ex, st = _run(t, 0.01)
    assert np.asarray(st.fallback).tolist() == [0] * NDEV
    got, want = _flat(y), _flat(ex)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got).sum() == 1
    assert np.array_equal(got[np.isinf(got)], want[np.isinf(want)])
    assert np.isinf(got).sum() == 2
    exact, bound = _flat_bound(t, 0.01, "rel")
    fin = np.isfinite(exact)
    assert np.all(np.abs(got[fin] - exact[fin]) <= bound[fin])


def test_traced_bound_does_not_recompile():
    traces = []

    def f(x, eb):
        traces.append(1)
        y, st = jlc.compressed_psum_with_stats(x, AX, error_bound=eb)
        return y, st.frame_bytes[None]

    g = jax.jit(jax.shard_map(f, mesh=MESH, in_specs=(P(AX), P()), out_specs=(P(), P(AX))))
    x = jnp.asarray(_tree(5)["big"])
    exact = np.asarray(x, np.float64).reshape(NDEV, 300, 7).sum(0)
    errs, sizes = [], []
    for eb in (0.01, 0.02, 0.05, 0.01):
        y, fb = g(x, jnp.float32(eb))
        errs.append(np.abs(np.asarray(y, np.float64) - exact).max())
        sizes.append(float(np.asarray(fb)[0]))
    assert len(traces) == 1 and g._cache_size() == 1
    assert errs[2] > errs[0] and sizes[2] < sizes[1] < sizes[0]  # the bound is really used
    assert errs[3] == errs[0] and sizes[3] == sizes[0]


def _grads(reduce, t, w, check_vma):
    """Gradient of a loss linear in the sum (its cotangent does not depend on the point, so
    the compressed and the exact sum must give the same gradient bit for bit)."""

    def h(tree, w):
        tree = {**tree, "s": tree["s"][0]}
        y = reduce(tree)
        return sum(jnp.sum(y[k] * w[k]) for k in y)

    spec = {k: P(AX) for k in t}
    f = jax.shard_map(h, mesh=MESH, in_specs=(spec, P()), out_specs=P(), check_vma=check_vma)
    return jax.jit(jax.grad(f))(t, w)


def test_gradient_is_psums_rule():
    """Straight-through: the gradient is jax.lax.psum's own rule, with shard_map's varying-axes
    checks (the cotangent copied to every device) and without them (a psum of cotangents)."""
    t = _tree(6)
    rng = np.random.default_rng(7)
    w = {k: rng.standard_normal(np.shape(_local(t, 0)[k])).astype(np.float32) for k in t}
    out = {}
    for check_vma in (True, False):
        exact = _grads(lambda tr: jax.lax.psum(tr, AX), t, w, check_vma)
        comp = _grads(lambda tr: jlc.compressed_psum(tr, AX, error_bound=0.01), t, w, check_vma)
        for k in t:
            assert np.array_equal(np.asarray(comp[k]), np.asarray(exact[k])), (check_vma, k)
        out[check_vma] = comp
    # d/dx_i of sum(psum(x) * w) is w on every device, in both modes (without the checks,
    # shard_map divides the unmapped output's cotangent by 8 and psum's transpose sums it)
    for check_vma in (True, False):
        got = np.asarray(out[check_vma]["w"]).reshape(NDEV, 37, 5)
        assert all(np.allclose(got[i], w["w"], rtol=1e-6) for i in range(NDEV)), check_vma


def test_invariant_input_sums_to_p_times_x_and_empty_tree():
    def f(v):
        return jlc.compressed_psum(v, AX, error_bound=0.01), jax.lax.psum(v, AX)

    v = jnp.linspace(-1, 1, 100, dtype=jnp.float32)
    y, ex = jax.jit(jax.shard_map(f, mesh=MESH, in_specs=P(), out_specs=(P(), P())))(v)
    np.testing.assert_allclose(np.asarray(ex), 8 * np.asarray(v), rtol=1e-6)
    assert np.abs(np.asarray(y) - np.asarray(ex)).max() <= 0.01 * 2.02 * 8 * 2.0

    def g(v):
        out = jlc.compressed_psum({}, AX, error_bound=0.01)
        assert out == {}
        return v

    jax.jit(jax.shard_map(g, mesh=MESH, in_specs=P(), out_specs=P()))(v)


@pytest.mark.parametrize("codec", [jlc.BF16(), jlc.Int8Rowwise()])
def test_baseline_codecs(codec):
    t = _tree(9)
    y, ex, st = _run(t, 0.0, jlc.AllReduceConfig(codec))
    got, want = _flat(y), _flat(ex)
    flats = [np.asarray(ravel_pytree(_local(t, i))[0], np.float64) for i in range(NDEV)]
    mag = np.sum(np.abs(flats), axis=0)
    if isinstance(codec, jlc.BF16):  # 2**-9 relative per value, twice (both phases)
        assert np.all(np.abs(got - want) <= 2 * 2.0**-8 * mag + 1e-6)
        assert np.asarray(st.moved_bytes)[0] == np.asarray(st.raw_bytes)[0] / 2
    else:
        assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()
        assert np.asarray(st.moved_bytes)[0] == np.asarray(st.raw_bytes)[0] * 40 / 128
    assert np.asarray(st.fallback).tolist() == [0] * NDEV


def test_bad_arguments():
    def call(**kw):
        def f(x):
            return jlc.compressed_psum(x, AX, **kw)

        return jax.jit(jax.shard_map(f, mesh=MESH, in_specs=P(AX), out_specs=P()))(
            jnp.ones(16, kw.pop("dtype", jnp.float32))
        )

    with pytest.raises(ValueError, match="error_bound is required by FrameCodec"):
        call()
    with pytest.raises(ValueError, match="must be a scalar"):
        call(error_bound=jnp.ones(8))
    with pytest.raises(ValueError, match="finite and >= 0"):
        call(error_bound=-1.0)
    with pytest.raises(NotImplementedError):
        call(error_bound=0.01, axis_index_groups=[[0, 1]])
    with pytest.raises(TypeError, match="AllReduceConfig"):
        call(error_bound=0.01, config=jlc.ExchangeConfig())
    with pytest.raises(TypeError, match="CommCodec"):
        jlc.AllReduceConfig(codec="bf16")
    with pytest.raises(ValueError, match="path must be one of"):
        jlc.AllReduceConfig(path="ring")
    with pytest.raises(TypeError, match="error_feedback|AllReduceConfig"):
        jlc.error_feedback(AX, config=jlc.BF16())


# ------------------------------------------------------------------------- error feedback
def _ef_run(g, steps, eb, config, feedback):
    """Sum over ``steps`` of the reduced gradient of the same per-device gradients."""
    ef = jlc.error_feedback(AX, config=config)

    def step(g, res):
        if feedback:
            y, st = ef.update(g, jlc.ErrorFeedbackState(res), error_bound=eb)
            return y, st.residual
        return jlc.compressed_psum(g, AX, error_bound=eb, config=config), res

    run = jax.jit(jax.shard_map(step, mesh=MESH, in_specs=(P(AX), P(AX)), out_specs=(P(), P(AX))))
    state = ef.init(g)
    assert isinstance(state, jlc.ErrorFeedbackState)
    res, total, drift = state.residual, np.zeros(g.shape[0] // NDEV), []
    exact = np.asarray(g, np.float64).reshape(NDEV, -1).sum(0)
    for t in range(steps):
        y, res = run(g, res)
        total = total + np.asarray(y, np.float64)
        drift.append(np.abs(total - (t + 1) * exact).max())
        if feedback:  # the errors telescope: transmitted + still held == exact, every step
            held = np.asarray(res, np.float64).reshape(NDEV, -1).sum(0)
            tele = np.abs(total + held - (t + 1) * exact).max()
            assert tele <= 1e-5 * (t + 1) * np.abs(exact).max(), (t, tele)
    return np.array(drift), res


@pytest.mark.parametrize("config", [jlc.AllReduceConfig(), jlc.AllReduceConfig(jlc.BF16())])
def test_error_feedback_tracks_exact_sum_without_it_drifts(config):
    rng = np.random.default_rng(10)
    g = jnp.asarray((rng.standard_normal(NDEV * 3000) * 0.1 + 0.3).astype(np.float32))
    eb, steps = 0.05, 40
    with_ef, res = _ef_run(g, steps, eb, config, True)
    without, _ = _ef_run(g, steps, eb, config, False)
    # one step's documented bound (REL; for BF16, 2**-8 of the magnitude per phase)
    xs = np.asarray(g, np.float64).reshape(NDEV, -1)
    if config.codec.error_bounded:
        one_step = eb * (2 + 2 * eb) * np.ptp(xs, axis=1).sum()
    else:
        one_step = 2 * 2.0**-8 * np.abs(xs).sum(0).max()
    # with feedback the drift stays within about one step's error at every step ...
    assert with_ef.max() <= 1.25 * one_step, (with_ef.max(), one_step)
    # ... while the same deterministic (biased) codec without it grows linearly
    assert without[-1] >= 0.8 * steps * without[0] > 0
    assert without[-1] >= 10 * with_ef.max()
    # the state is a pytree of the gradient's shape and dtype, one residual per device
    assert res.shape == g.shape and res.dtype == g.dtype
    assert np.abs(np.asarray(res)).max() > 0


def test_error_feedback_pytree_state_and_stats():
    ef = jlc.error_feedback(AX)
    params = {"w": jnp.ones((NDEV * 4, 3)), "b": jnp.zeros((NDEV * 2,), jnp.bfloat16)}
    state = ef.init(params)
    assert jax.tree.structure(state) == jax.tree.structure(jlc.ErrorFeedbackState({"w": 0, "b": 0}))
    leaves, tdef = jax.tree.flatten(state)  # a plain pytree: checkpointable as arrays
    assert [x.dtype for x in leaves] == [jnp.bfloat16, jnp.float32]
    assert jax.tree.unflatten(tdef, [np.asarray(x) for x in leaves]).residual["w"].shape == (
        NDEV * 4,
        3,
    )

    def step(g, st):
        y, new, stats = ef.update_with_stats(g, st, error_bound=0.01)
        return y, new, stats.moved_bytes[None]

    spec = {"w": P(AX), "b": P(AX)}
    y, new, moved = jax.jit(
        jax.shard_map(
            step,
            mesh=MESH,
            in_specs=(spec, jlc.ErrorFeedbackState(spec)),
            out_specs=(P(), jlc.ErrorFeedbackState(spec), P(AX)),
        )
    )(params, state)
    assert y["w"].shape == (4, 3) and y["b"].dtype == jnp.bfloat16  # summed as float32
    assert new.residual["b"].dtype == jnp.bfloat16
    assert float(np.asarray(moved)[0]) > 0


# --------------------------------------------------------------------------- two processes
@pytest.mark.slow
def test_compressed_psum_two_processes():
    outs = run_processes("_multiprocess_allreduce_worker.py", nproc=2, timeout_s=55)
    reports = [json.loads(o[o.index("OK ") + 3 :].splitlines()[0]) for o in outs]
    assert [r["devices"] for r in reports] == [8, 8]
    assert reports[0]["digest"] == reports[1]["digest"]  # the same sum on both processes
    assert 0 < reports[0]["max_err_over_bound"] <= 1


# ------------------------------------------------------------------- integer and bool leaves
def test_integer_and_bool_leaves_are_summed_exactly_like_psum():
    """A metrics pytree: the int32 counts and bool flags summed exactly with psum's dtypes
    (bool -> int32 counts), the float leaf coded alone, within its own range's bound (before:
    counts off by about 1,000, bool all False, the float error 100x larger)."""
    rng = np.random.default_rng(12)
    t = {
        "loss": rng.uniform(0, 1, (NDEV * 32,)).astype(np.float32),
        "n_correct": rng.integers(0, 50_000, (NDEV * 8,)).astype(np.int32),
        "seen": rng.uniform(size=(NDEV * 8,)) < 0.6,
    }
    ef = jlc.error_feedback(AX)

    def f(tree):
        y = jlc.compressed_psum(tree, AX, error_bound=0.01)
        y_ef, st = ef.update(tree, ef.init(tree), error_bound=0.01)
        return y, y_ef, jax.lax.psum(tree, AX), st.residual

    spec = {k: P(AX) for k in t}
    y, y_ef, exact, res = jax.jit(
        jax.shard_map(f, mesh=MESH, in_specs=(spec,), out_specs=(P(), P(), P(), spec))
    )(t)
    loss_range = np.ptp(t["loss"].reshape(NDEV, -1), axis=1).sum()
    for out in (y, y_ef):
        assert out["n_correct"].dtype == exact["n_correct"].dtype == jnp.int32
        assert out["seen"].dtype == exact["seen"].dtype == jnp.int32
        np.testing.assert_array_equal(np.asarray(out["n_correct"]), np.asarray(exact["n_correct"]))
        np.testing.assert_array_equal(np.asarray(out["seen"]), np.asarray(exact["seen"]))
        err = np.abs(np.asarray(out["loss"], np.float64) - np.asarray(exact["loss"])).max()
        assert err <= 0.01 * 2.02 * loss_range, err
    assert np.asarray(exact["seen"]).max() > 1  # counts, not flags
    assert res["n_correct"].dtype == jnp.int32 and not np.asarray(res["n_correct"]).any()
    assert res["seen"].dtype == jnp.bool_ and not np.asarray(res["seen"]).any()


def test_shard_chunks_fill_the_gpu():
    """The reduced shard's split (_shard_chunks): a 1 GiB float32 gradient over 8 devices
    (131,072 rows of 256 per device) is re-compressed as 1,024 chunks of 128 rows, not one
    chunk of 32 Mi values (143 MiB of CUDA scratch, tests/native/cuda_emu/check_host.cc); small
    shards stay one chunk; the padding is fewer rows than chunks."""
    assert ar.chunk_geometry(2**28, 8) == (131072, ar.CHUNK_DIM)
    assert ar._shard_chunks(131072) == (1024, 128)
    assert ar._shard_chunks(1) == (1, 1)
    assert ar._shard_chunks(127) == (1, 127)
    assert ar._shard_chunks(203) == (3, 68)
    for rows in (128, 203, 4097, 65599, 10**6):
        k, rows_k = ar._shard_chunks(rows)
        assert 1 <= k <= ar.SHARD_CHUNKS and rows_k >= ar.SHARD_CHUNK_ROWS
        assert 0 <= k * rows_k - rows < k


@pytest.mark.parametrize(
    "codec,path",
    [
        (jlc.FrameCodec(), "dense"),
        (jlc.FrameCodec(codec="fixed", min_error_bound=0.01), "packed"),
        (jlc.FrameCodec(), "_ragged_emulated"),
        (jlc.BF16(), "auto"),
    ],
)
def test_reduced_shard_in_several_chunks(codec, path):
    """A shard of 203 rows per device is re-compressed as 3 chunks of 68 rows (the last one
    padded by one row): the documented bound holds on every element, every device gets the
    same bits, and the statistics count the 3 frames (dense path: 3 x (4 + capacity of a
    [68, 256] chunk) per device)."""
    n = 203 * NDEV * ar.CHUNK_DIM - 100  # per device; each peer's chunk: 203 rows of 256
    rng = np.random.default_rng(11)
    g = (rng.standard_normal((NDEV, n)) * np.linspace(0.1, 2.0, n)).astype(np.float32)
    g[3, 5] = np.nan  # travels as an outlier through the reduced shard's first chunk
    r, dim = ar.chunk_geometry(n, NDEV)
    k, rows_k = ar._shard_chunks(r) if codec.per_table else (1, r)  # BF16: no FFI, whole
    assert r == 203 and (k, rows_k) == ((3, 68) if codec.per_table else (1, 203))
    eb = 0.01

    def f(x):
        cfg = jlc.AllReduceConfig(codec, path=path)
        y, st = jlc.compressed_psum_with_stats(
            x[0], AX, error_bound=eb if codec.error_bounded else None, config=cfg
        )
        return y[None], jax.tree.map(lambda v: v[None], st)

    run = jax.jit(jax.shard_map(f, mesh=MESH, in_specs=P(AX), out_specs=(P(AX), P(AX))))
    y, st = run(jnp.asarray(g))
    y = np.asarray(y)
    assert all(np.array_equal(y[0].view(np.uint32), y[i].view(np.uint32)) for i in range(NDEV))
    assert np.asarray(st.fallback).tolist() == [0] * NDEV
    exact = g.astype(np.float64).sum(axis=0)
    got = y[0].astype(np.float64)
    assert np.isnan(got[5]) and np.isnan(got).sum() == 1
    fin = np.isfinite(exact)
    if codec.error_bounded:
        flats = [np.asarray(g[i], np.float64) for i in range(NDEV)]
        padded = [np.pad(v, (0, NDEV * r * dim - n), mode="edge").reshape(NDEV, -1) for v in flats]
        ranges = np.stack([[np.ptp(c[np.isfinite(c)]) for c in p] for p in padded])
        bound = np.repeat(eb * (2 + 2 * eb) * ranges.sum(axis=0) * (1 + 1e-5), r * dim)[:n]
        bound += (NDEV - 1) * 2.0**-24 * np.abs(g).astype(np.float64).sum(axis=0) + 1e-30
        err = np.abs(got - exact)
        assert np.all(err[fin] <= bound[fin]), (err[fin] / bound[fin]).max()
        assert (err[fin] / bound[fin]).max() > 0.05
    else:  # bfloat16 twice
        assert np.all(np.abs(got - exact)[fin] <= 2 * 2.0**-8 * np.abs(g).sum(axis=0)[fin] + 1e-6)
    if path == "dense" and codec.variable_size:
        cap = codec.capacity_bytes((r, dim), np.float32, dense=True, error_bound=np.float64(eb))
        cap2 = codec.capacity_bytes(
            (rows_k, dim), np.float32, dense=True, error_bound=np.float64(eb)
        )
        moved = np.asarray(st.moved_bytes)[0]
        assert moved == NDEV * (4 + cap) + NDEV * k * (4 + cap2), (moved, cap, cap2)
    # phase 2's compression ratio counts the bytes of all 3 frames of the shard
    ratio2 = np.asarray(st.compression_ratio)[0, 1]
    fb = np.asarray(st.frame_bytes)[0]
    ratio1 = np.asarray(st.compression_ratio)[0, 0]
    fb1 = NDEV * r * dim * 4 / ratio1
    np.testing.assert_allclose(fb - fb1, NDEV * r * dim * 4 / ratio2, rtol=1e-5)


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 13])
def test_peer_sum_is_the_sum_over_the_leading_axis(p):
    x = np.random.default_rng(p).standard_normal((p, 7, 3)).astype(np.float32)
    got = np.asarray(ar._sum_peers(jnp.asarray(x)))
    assert got.shape == (7, 3)
    np.testing.assert_allclose(got, x.astype(np.float64).sum(0), rtol=0, atol=1e-5)
