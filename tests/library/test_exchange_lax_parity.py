"""compressed_all_to_all as a drop-in for jax.lax.all_to_all, on 8 CPU devices.

The cases JAX's own all_to_all tests cover (shapes and ranks, every split/concat pair, tiled
and untiled, negative axes, dtypes, a tuple of axis names, pytrees, axis_index_groups, a
vmap axis, gradients, jvp), written here against the exchange: at error bound 0 the result
is lax's bit for bit; at REL 0.01 every float leaf is within the bound of lax's (checked in
float64) and every other leaf is lax's exactly; the gradient equals lax's. Several cases
share one jitted program, so the file compiles a handful of programs.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc

NDEV = 8
pytestmark = pytest.mark.skipif(
    jax.device_count() < NDEV, reason=f"needs {NDEV} devices (XLA_FLAGS set in conftest.py)"
)
FLOATS = (np.float32, jnp.bfloat16, np.float16)

# (global shape, split_axis, concat_axis, tiled): the local block is shape[0] / 8 along axis 0.
CASES = [
    ((NDEV * 8,), 0, 0, True),  # rank 1
    ((NDEV * 8, 6), 0, 1, True),
    ((NDEV * 2, 8 * 3), 1, 0, True),  # split on the last axis
    ((NDEV * 4, 5, 8), -1, -3, True),  # negative axes
    ((NDEV * 8, 3, 4), 0, 2, False),  # untiled, concat after the split axis's removal
    ((NDEV * 3, 8, 4), 1, 0, False),
    ((NDEV * 2, 4, 8), 2, 1, False),
]
SLOW_CASES = [((NDEV * 8, 8), s, c, True) for s in (0, 1) for c in (0, 1) if (s, c) != (0, 1)] + [
    ((NDEV * 2, 3, 8, 2), 2, c, False) for c in (0, 1, 3)
]


def _data(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return jnp.asarray(rng.standard_normal(shape) > 0)
    if np.issubdtype(np.dtype(dtype), np.integer):
        return jnp.asarray(rng.integers(-1000, 1000, shape), dtype)
    return jnp.asarray(rng.standard_normal(shape) * rng.uniform(0.5, 3.0), dtype)


def _mesh():
    return jax.make_mesh((NDEV,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))


def _check(y, ye, error_bound, x):
    """Leaf by leaf: same shape and dtype; bound 0 or a non-float leaf: bit-equal; else
    within error_bound * (the leaf's global range), a bound every chunk satisfies."""
    ly, lye, lx = jax.tree.leaves(y), jax.tree.leaves(ye), jax.tree.leaves(x)
    assert jax.tree.structure(y) == jax.tree.structure(ye)
    for a, e, xi in zip(ly, lye, lx):
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, e.shape, a.dtype, e.dtype)
        a, e = np.asarray(a), np.asarray(e)
        if error_bound == 0 or np.dtype(a.dtype) not in jlc.exchange.CODED_DTYPES:
            assert a.tobytes() == e.tobytes(), a.dtype
        else:
            xf = np.asarray(xi, np.float64)
            bound = np.float64(np.float32(error_bound)) * (xf.max() - xf.min())
            err = np.abs(a.astype(np.float64) - e.astype(np.float64)).max()
            assert err <= bound * (1 + 1e-6), (a.dtype, err, bound)


def _run_cases(cases, error_bound, dtype):
    """All cases in one jitted shard_map: the exchange's result and lax's."""
    xs = [_data(shape, dtype, k) for k, (shape, *_) in enumerate(cases)]

    def f(*xs):
        ys, yes = [], []
        for x, (_, s, c, tiled) in zip(xs, cases):
            kw = dict(tiled=tiled)
            ys.append(jlc.compressed_all_to_all(x, "i", s, c, error_bound=error_bound, **kw))
            # lax's reference with the axes normalised: jax 0.10.2's lax.all_to_all mis-sizes
            # the split of a negative axis (an MLIR error); the exchange takes either.
            yes.append(jax.lax.all_to_all(x, "i", s % x.ndim, c % x.ndim, **kw))
        return ys, yes

    # out_specs: the device-local results concatenated along axis 0 (untiled: a new axis).
    ys, yes = jax.jit(jax.shard_map(f, mesh=_mesh(), in_specs=P("i"), out_specs=P("i")))(*xs)
    return xs, ys, yes


@pytest.mark.parametrize("error_bound", [0.0, 0.01])
def test_lax_cases(error_bound):
    xs, ys, yes = _run_cases(CASES, error_bound, np.float32)
    for x, y, ye in zip(xs, ys, yes):
        _check(y, ye, error_bound, x)


@pytest.mark.slow
@pytest.mark.parametrize("error_bound", [0.0, 0.01])
@pytest.mark.parametrize("dtype", FLOATS)
def test_lax_cases_more(error_bound, dtype):
    xs, ys, yes = _run_cases(CASES + SLOW_CASES, error_bound, dtype)
    for x, y, ye in zip(xs, ys, yes):
        _check(y, ye, error_bound, x)


# --------------------------------------------------------------------------------- pytrees
@dataclasses.dataclass
class _Pair:  # a dataclass pytree
    u: jax.Array
    v: jax.Array


jax.tree_util.register_dataclass(_Pair, data_fields=["u", "v"], meta_fields=[])


def _tree(kind):
    n = NDEV * 8
    leaves = [
        _data((n, 4, 8), np.float32, 1),
        _data((n, 16), jnp.bfloat16, 2),
        _data((n, 3), np.int32, 3),
        _data((n, 2), np.bool_, 4),
    ]
    if kind == "tuple":
        return tuple(leaves)
    if kind == "dict":
        return {"f32": leaves[0], "bf16": leaves[1], "nested": {"i32": leaves[2], "b": leaves[3]}}
    return [_Pair(leaves[0], leaves[2]), _Pair(leaves[1], leaves[3])]  # list of dataclasses


@pytest.mark.parametrize(
    "kind", ["tuple", "dict", pytest.param("dataclass", marks=pytest.mark.slow)]
)
def test_pytree_leaf_by_leaf(kind):
    """A tuple (the issue's case: stacked into one array before), a dict (numpy's error
    before) and dataclasses of float32, bfloat16, int32 and bool leaves: lax's leaf by leaf
    at bound 0 and within REL 0.01; statistics summed over the leaves."""
    x = _tree(kind)

    def f(x):
        out = []
        for eb in (0.0, 0.01):
            y, s = jlc.compressed_all_to_all_with_stats(x, "i", 0, 1, tiled=True, error_bound=eb)
            out.append((y, jax.tree.map(lambda a: a[None], s)))
        return out, jax.lax.all_to_all(x, "i", 0, 1, tiled=True)

    sm = jax.shard_map(f, mesh=_mesh(), in_specs=P("i"), out_specs=P("i"))
    ((y0, s0), (y1, s1)), ye = jax.jit(sm)(x)
    _check(y0, ye, 0.0, x)
    _check(y1, ye, 0.01, x)
    raw = sum(v.size * v.dtype.itemsize for v in jax.tree.leaves(x)) / NDEV
    assert np.all(np.asarray(s1.raw_bytes) == raw)
    assert s1.compression_ratio.shape == (NDEV, NDEV)  # per device, per destination peer
    assert np.all(np.asarray(s1.moved_bytes) < raw)  # the float leaves were coded
    assert np.all(np.asarray(s1.fallback) == 0) and np.all(np.asarray(s0.fallback) == 0)


def test_pytree_bounds_per_leaf_and_default():
    """error_bound as a pytree prefix (a subtree's leaves share its bound; None: the codec's
    default), one value for all leaves, or absent (lax's call unchanged: the default REL
    DEFAULT_ERROR_BOUND)."""
    x = _tree("dict")

    def f(x):
        per_leaf = jlc.compressed_all_to_all(
            x, "i", 0, 0, tiled=True, error_bound={"f32": 0.0, "bf16": None, "nested": 0.05}
        )
        default = jlc.compressed_all_to_all(x, "i", 0, 0, tiled=True)  # lax's call
        return per_leaf, default, jax.lax.all_to_all(x, "i", 0, 0, tiled=True)

    sm = jax.shard_map(f, mesh=_mesh(), in_specs=P("i"), out_specs=P("i"))
    per_leaf, default, ye = jax.jit(sm)(x)
    _check(per_leaf["f32"], ye["f32"], 0.0, x["f32"])
    _check(per_leaf["bf16"], ye["bf16"], jlc.exchange.DEFAULT_ERROR_BOUND, x["bf16"])
    _check(per_leaf["nested"], ye["nested"], 0.0, x["nested"])  # int and bool: exact
    _check(default, ye, jlc.exchange.DEFAULT_ERROR_BOUND, x)
    assert np.asarray(default["f32"]).tobytes() != np.asarray(ye["f32"]).tobytes()  # coded
    with pytest.raises(ValueError, match="pytree prefix"):
        jax.shard_map(
            lambda x: jlc.compressed_all_to_all(x, "i", 0, 0, tiled=True, error_bound=[0.01, 0.02]),
            mesh=_mesh(),
            in_specs=P("i"),
            out_specs=P("i"),
        )(x)


def test_other_dtypes_exact():
    """Integer, bool, complex, float64-free unsigned and int8 arrays: exchanged exactly as by
    lax (TypeError before)."""
    n = NDEV * 8
    x = (
        _data((n, 4), np.int8, 1),
        _data((n, 4), np.uint32, 2),
        jnp.asarray(np.arange(n * 2).reshape(n, 2) * (1 + 2j), jnp.complex64),
        _data((n,), np.bool_, 3),
    )

    def f(x):
        return jlc.compressed_all_to_all(x, "i", 0, 0, tiled=True, error_bound=0.01), (
            jax.lax.all_to_all(x, "i", 0, 0, tiled=True)
        )

    y, ye = jax.jit(jax.shard_map(f, mesh=_mesh(), in_specs=P("i"), out_specs=P("i")))(x)
    _check(y, ye, 0.01, x)


# ------------------------------------------------------------------------------ gradients
@pytest.mark.parametrize("error_bound", [pytest.param(0.0, marks=pytest.mark.slow), 0.01])
def test_pytree_grad_and_jvp_equal_lax(error_bound):
    """The gradient of a loss through the exchange (a psum after it: the vma trap) of a dict
    of float32 and bfloat16 leaves with an int32 leaf alongside, and jax.jvp: lax's."""
    x = _tree("dict")
    n = NDEV * 8
    w = (
        _data((n // NDEV, NDEV * 4, 8), np.float32, 7),
        _data((n // NDEV, NDEV * 16), np.float32, 8),
    )

    def loss(exchange):
        def h(floats, ints, w):
            y = exchange({"f32": floats[0], "bf16": floats[1], "i32": ints})
            s = jnp.sum(y["f32"] * w[0]) + jnp.sum(y["bf16"].astype(jnp.float32) * w[1])
            return jax.lax.psum(s + jnp.sum(y["i32"]).astype(jnp.float32) * 0.0, "i")

        return jax.shard_map(h, mesh=_mesh(), in_specs=P("i"), out_specs=P())

    floats, ints = (x["f32"], x["bf16"]), x["nested"]["i32"]
    comp = loss(
        lambda t: jlc.compressed_all_to_all(t, "i", 0, 1, tiled=True, error_bound=error_bound)
    )
    exact = loss(lambda t: jax.lax.all_to_all(t, "i", 0, 1, tiled=True))
    g = jax.jit(jax.grad(comp))(floats, ints, w)
    ge = jax.jit(jax.grad(exact))(floats, ints, w)
    for a, e in zip(jax.tree.leaves(g), jax.tree.leaves(ge)):
        assert a.dtype == e.dtype and np.asarray(a).tobytes() == np.asarray(e).tobytes()

    def tangent(exchange):
        def h(x, t):
            return jax.jvp(exchange, (x,), (t,))[1]

        return jax.jit(jax.shard_map(h, mesh=_mesh(), in_specs=P("i"), out_specs=P("i")))

    t = (_data((n, 4, 8), np.float32, 9), _data((n, 16), jnp.bfloat16, 10))
    tc = tangent(lambda v: jlc.compressed_all_to_all(v, "i", 0, 1, tiled=True, error_bound=0.01))
    te = tangent(lambda v: jax.lax.all_to_all(v, "i", 0, 1, tiled=True))
    for a, e in zip(jax.tree.leaves(tc(floats, t)), jax.tree.leaves(te(floats, t))):
        assert np.asarray(a).tobytes() == np.asarray(e).tobytes()


# -------------------------------------------------------------------------- axes and groups
def test_tuple_axis_name():
    """axis_name a tuple of mesh axes (2 x 4, the flattened axis node-major as lax numbers
    it): within the bound of lax's result."""
    mesh2 = jax.make_mesh((2, 4), ("d", "m"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    ax = ("d", "m")
    x = _data((NDEV * 16, 3, 8), np.float32, 11)

    def f(x):
        y = jlc.compressed_all_to_all(x, ax, 0, 1, tiled=True, error_bound=0.01)
        return y, jax.lax.all_to_all(x, ax, 0, 1, tiled=True)

    y, ye = jax.jit(jax.shard_map(f, mesh=mesh2, in_specs=P(ax), out_specs=P(ax)))(x)
    _check(y, ye, 0.01, x)


def test_axis_index_groups_exchanged_exactly():
    """axis_index_groups (NotImplementedError before): lax's exchange within each group,
    exact; the statistics have one ratio (1) per peer of the group."""
    groups = [[0, 2, 4, 6], [1, 3, 5, 7]]
    x = _data((NDEV * 8, 3), np.float32, 14)

    def f(x):
        y, s = jlc.compressed_all_to_all_with_stats(
            x, "i", 0, 0, tiled=True, axis_index_groups=groups
        )
        ye = jax.lax.all_to_all(x, "i", 0, 0, tiled=True, axis_index_groups=groups)
        return y, ye, s.compression_ratio[None], s.intra_node_bytes[None]

    sm = jax.shard_map(f, mesh=_mesh(), in_specs=P("i"), out_specs=P("i"))
    y, ye, ratio, intra = jax.jit(sm)(x)
    assert np.asarray(y).tobytes() == np.asarray(ye).tobytes()
    assert ratio.shape == (NDEV, 4) and np.all(np.asarray(ratio) == 1.0)
    assert np.all(np.asarray(intra) == 3 * 3 * 4 * 2)  # 3 other group members, [2, 3] float32


def test_vmap_axis_is_exchanged_exactly():
    """axis_name a jax.vmap(axis_name=...) axis (a bare AssertionError from pcast before):
    nothing crosses devices, the exchange is lax's, under jit too."""
    x = _data((4, 4, 6), np.float32, 12)

    def f(x):
        return jlc.compressed_all_to_all(x, "v", 0, 1), jax.lax.all_to_all(x, "v", 0, 1)

    y, ye = jax.jit(jax.vmap(f, axis_name="v"))(x)
    assert np.asarray(y).tobytes() == np.asarray(ye).tobytes()


@pytest.mark.parametrize("axis_type", ["Auto", "Explicit"])
def test_vmap_spmd_axis_name_error_names_the_alternative(axis_type):
    """jax.vmap(shard_map(...), spmd_axis_name=...) (ShardingTypeError or a vma error from
    inside the frame packing before): a ValueError that says what is supported."""
    t = getattr(jax.sharding.AxisType, axis_type)
    mesh = jax.make_mesh((2, 4), ("j", "i"), axis_types=(t, t))
    x = jax.device_put(
        _data((2, 32, 8), np.float32, 13), jax.sharding.NamedSharding(mesh, P("j", "i"))
    )
    sm = jax.shard_map(
        lambda x: jlc.compressed_all_to_all(x, "i", 0, 0, tiled=True, error_bound=0.01),
        mesh=mesh,
        in_specs=P("i"),
        out_specs=P("i"),
    )
    with jax.set_mesh(mesh), pytest.raises(ValueError, match="spmd_axis_name|Explicit"):
        jax.jit(jax.vmap(sm, spmd_axis_name="j"))(x)


@pytest.mark.parametrize("min_error_bound, expected", [(None, 0.01), (0.05, 0.05), (0.001, 0.01)])
def test_default_bound_fits_the_frames_min_error_bound(min_error_bound, expected):
    """Without error_bound the codec codes under max(DEFAULT_ERROR_BOUND, min_error_bound):
    frames sized for min_error_bound never overflow on the default (a smaller default sent
    every dense exchange down the exact fallback)."""
    codec = jlc.FrameCodec(min_error_bound=min_error_bound)
    assert codec.default_error_bound == expected
    cfg = jlc.ExchangeConfig(codec, path="dense")
    x = jnp.sin(jnp.arange(NDEV * 256 * 64, dtype=jnp.float32)).reshape(NDEV * 256, 64)

    def f(x):
        y, s = jlc.compressed_all_to_all_with_stats(x, "i", 0, 1, tiled=True, config=cfg)
        return y, s.fallback[None], s.moved_bytes[None], s.raw_bytes[None]

    sm = jax.shard_map(f, mesh=_mesh(), in_specs=P("i"), out_specs=(P("i"),) * 4)
    y, fallback, moved, raw = jax.jit(sm)(x)
    ye = jax.jit(
        jax.shard_map(
            lambda x: jax.lax.all_to_all(x, "i", 0, 1, tiled=True),
            mesh=_mesh(),
            in_specs=P("i"),
            out_specs=P("i"),
        )
    )(x)
    assert np.all(np.asarray(fallback) == 0)
    assert np.all(np.asarray(moved) < np.asarray(raw))
    _check(y, ye, expected, x)
