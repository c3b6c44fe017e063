"""What crosses the wire, read from the compiled program: every collective of the exchange
(dense, packed; flat and hierarchical) and of the all-reduce (dense, packed), for every codec
(the FrameCodec forms, Int8Rowwise, FP8Rowwise, MX4, FP16, BF16) and float32 / bfloat16 /
float16 inputs, has the element type and the byte size the statistics count.

XLA:CPU widens bfloat16 collectives (the optimized HLO of an ``all_to_all`` or ``all_gather``
of a bfloat16 array has float32 operands: 4 bytes per value cross, jax 0.10.2), so a program
that looks right when traced can move twice the bytes its statistics claim. The checks read
``jax.jit(...).lower(...).compile().as_text()``, not the traced program: the 16-bit casts'
wire is ``uint16`` (their bits) and the exact paths of a 16-bit float input (the fallback,
the hierarchical exchange's intra-node stage) send its bits as ``uint16`` too.

Byte size of a collective: its result (all shards of a tuple ``all-to-all``; the ``P`` pieces
of an ``all-gather``), the device's own slot included, as the statistics count it.
"""

from __future__ import annotations

import itertools
import re
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jax_lossy_comm as jlc
from jax_lossy_comm.array_exchange import FALLBACK_PIECES
from jax_lossy_comm.wire import PACKED_CHUNKS, exact_all_to_all, packed_chunks, slice_count

NDEV, NODES, LOCAL = 8, 2, 4
T, ROWS, DIM = 2, 8, 32  # the exchange: [NDEV * ROWS, T, DIM] per device, split 0 / concat 1
EB = 0.01

#: HLO element types: bytes per element.
HLO_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4}
HLO_BYTES.update({"u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8})
#: The collectives the parser reads (the library uses the first three).
KINDS = ("all-to-all", "all-gather", "all-reduce", "reduce-scatter", "collective-permute")
_OP = re.compile(
    r"^\s*(?:ROOT )?%\S+ = (?P<type>.+?) (?P<kind>" + "|".join(KINDS) + r")(?P<start>-start)?\("
)
_SHAPE = re.compile(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]")

#: The wire element type of each codec; the exact paths' per input dtype.
CODECS = {
    "frame-auto": (jlc.FrameCodec(min_error_bound=EB), "u8"),
    "frame-fixed": (jlc.FrameCodec(codec="fixed", min_error_bound=EB), "u8"),
    "frame-raw": (jlc.FrameCodec(codec="raw"), "u8"),
    "frame-dedup": (jlc.FrameCodec(codec="dedup"), "u8"),
    "frame-entropy": (jlc.FrameCodec(codec="entropy"), "u8"),
    "int8-rowwise": (jlc.Int8Rowwise(), "u8"),
    "fp8-rowwise": (jlc.FP8Rowwise(), "u8"),
    "mx4": (jlc.MX4(), "u8"),
    "fp16": (jlc.FP16(), "u16"),
    "bf16": (jlc.BF16(), "u16"),
}
FIXED = ("int8-rowwise", "fp8-rowwise", "mx4", "fp16", "bf16")
EXACT = {"float32": "f32", "bfloat16": "u16", "float16": "u16"}
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


class Collective(NamedTuple):
    """One collective op of an optimized HLO module."""

    kind: str  # "all-to-all", "all-gather", ...
    dtype: str  # HLO element type ("u8", "f32", ...), the same for every tuple element
    nbytes: int  # bytes of the result (every element of a tuple)
    group: int  # devices per replica group


def _group_size(line: str) -> int:
    m = re.search(r"replica_groups=\{\{([0-9,]*)\}", line)
    if m:
        return len(m.group(1).split(","))
    m = re.search(r"replica_groups=\[([0-9,]+)\]<=", line)  # iota form [groups, size]<=[N]
    if m:
        return int(m.group(1).split(",")[-1])
    # mesh form (newer XLA): replica_groups=mesh['nodes'=2,'local'=4] {'local'}: a group
    # spans the listed axes
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
    assert m, f"no replica groups in {line!r}"
    sizes = {k: int(v) for k, v in re.findall(r"'([^']+)'=(\d+)", m.group(1))}
    return int(np.prod([sizes[a] for a in re.findall(r"'([^']+)'", m.group(2))]))


def collectives(hlo: str) -> list[Collective]:
    """The collective ops of an optimized HLO module's text (``compile().as_text()``)."""
    out = []
    for line in hlo.splitlines():
        m = _OP.match(line)
        if not m:
            continue
        assert not m.group("start"), f"async collective, not parsed: {line.strip()[:120]}"
        shapes = _SHAPE.findall(m.group("type"))
        dtypes = {dt for dt, _ in shapes}
        assert len(dtypes) == 1, f"mixed element types in one collective: {line.strip()[:160]}"
        nbytes = sum(
            HLO_BYTES[dt] * int(np.prod([int(d) for d in dims.split(",") if d]))
            for dt, dims in shapes
        )
        out.append(Collective(m.group("kind"), dtypes.pop(), nbytes, _group_size(line)))
    return out


def test_collectives_parses_tuple_all_to_all_and_all_gather():
    hlo = """
  %all-to-all = (u16[1,2,32]{2,1,0}, /*index=1*/u16[1,2,32]{2,1,0}) all-to-all(%a, %b), channel_id=1, replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={0}
  ROOT %all_gather.3 = u8[8,296]{1,0} all-gather(%p), channel_id=2, replica_groups=[1,8]<=[8], dimensions={0}
  %get-tuple-element.1 = u16[1,2,32]{2,1,0} get-tuple-element(%all-to-all), index=1
  %all-to-all.2 = u8[8,40]{1,0} all-to-all(%c), channel_id=3, replica_groups=mesh['nodes'=2,'local'=4] {'local'}, dimensions={0}
  %all-to-all.3 = u8[8,40]{1,0} all-to-all(%d), channel_id=4, replica_groups=mesh['nodes'=2,'local'=4] {'nodes','local'}, dimensions={0}
"""
    assert collectives(hlo) == [
        Collective("all-to-all", "u16", 256, 2),
        Collective("all-gather", "u8", 2368, 8),
        Collective("all-to-all", "u8", 320, 4),
        Collective("all-to-all", "u8", 320, 8),
    ]


def _packed_sums(chunks_per_phase, p: int) -> set:
    """Every byte count whole chunks of the packed path can move: ``p * (a * coarse + b *
    fine)`` per phase, ``0 <= a, b <= PACKED_CHUNKS`` (chunk_counts' range)."""
    per_phase = [
        {p * (a * c + b * f) for a, b in itertools.product(range(PACKED_CHUNKS + 1), repeat=2)}
        for c, f in chunks_per_phase
    ]
    return {sum(t) for t in itertools.product(*per_phase)}


# ---------------------------------------------------------------------------- the exchange
def _exchange(codec, path, topology, dtype):
    """``(collectives, stats)`` of one exchange of ``[NDEV * ROWS, T, DIM]`` per device."""
    hier = topology == "hierarchical"
    if hier:
        ax = ("n", "l")
        mesh = jax.make_mesh((NODES, LOCAL), ax, axis_types=(jax.sharding.AxisType.Auto,) * 2)
    else:
        ax = "i"
        mesh = jax.make_mesh((NDEV,), (ax,), axis_types=(jax.sharding.AxisType.Auto,))
    cfg = jlc.ExchangeConfig(codec, table_axis=1, path=path, topology=topology)

    def f(x):
        y, s = jlc.compressed_all_to_all_with_stats(
            x, ax, 0, 1, tiled=True, error_bound=EB, config=cfg
        )
        return y, jax.tree.map(lambda v: v[None], s)  # y returned: its collectives stay

    spec = P(ax)
    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=spec, out_specs=(spec, spec)))
    n = NDEV * NDEV * ROWS * T * DIM
    x = jnp.sin(jnp.arange(n, dtype=jnp.float32) * 0.37).reshape(-1, T, DIM).astype(dtype)
    stats = jax.tree.map(lambda v: np.asarray(v)[0], g(x)[1])
    assert int(stats.fallback) == 0
    return collectives(g.lower(x).compile().as_text()), stats


def _bytes(ops, dtype=None, group=None, kind=None) -> int:
    return sum(
        o.nbytes
        for o in ops
        if (dtype is None or o.dtype == dtype)
        and (group is None or o.group == group)
        and (kind is None or o.kind == kind)
    )


def _check_agreement(ops):
    """The overflow ``pmax`` (int32: the overflow count, the packed path's largest
    destination, a flag per table on the flat exchange) is the only all-reduce; the
    statistics leave it out."""
    for o in ops:
        if o.kind == "all-reduce":
            assert o.dtype == "s32" and o.nbytes <= 4 * (2 + T), o
        else:
            assert o.kind in ("all-to-all", "all-gather"), o


CASES = [(name, "dense", "flat", dt) for name in FIXED for dt in ("float32", "bfloat16")]
# The FrameCodec forms differ in capacity only (uint8 frames): each once, the default twice.
CASES += [("frame-auto", "dense", "flat", "float32"), ("frame-auto", "dense", "flat", "bfloat16")]
CASES += [("frame-fixed", "dense", "flat", "bfloat16"), ("frame-raw", "dense", "flat", "float32")]
CASES += [("frame-dedup", "dense", "flat", "bfloat16")]
CASES += [("frame-entropy", "dense", "flat", "float32")]
CASES += [("frame-auto", "packed", "flat", dt) for dt in ("float32", "bfloat16", "float16")]
CASES += [("frame-auto", "dense", "flat", "float16"), ("bf16", "dense", "flat", "float16")]
CASES += [
    (name, path, "hierarchical", dt)
    for name, path in [("frame-auto", "dense"), ("frame-auto", "packed")]
    + [(n, "dense") for n in FIXED]
    for dt in ("float32", "bfloat16")
]


@pytest.mark.parametrize(("name", "path", "topology", "dtype"), CASES)
def test_exchange_wire_is_what_the_stats_count(name, path, topology, dtype):
    codec, wire = CODECS[name]
    ops, st = _exchange(codec, path, topology, DTYPES[dtype])
    _check_agreement(ops)
    exact = EXACT[dtype]
    raw = float(st.raw_bytes)
    assert raw == NDEV * ROWS * T * DIM * jnp.dtype(DTYPES[dtype]).itemsize
    hier = topology == "hierarchical"
    coded_group = NODES if hier else NDEV
    coded = [o for o in ops if o.group == coded_group]
    payload = [o for o in coded if o.dtype == wire]
    assert payload, ops
    # Every element type is the codec's wire, int32 byte counts, or the exact path's.
    allowed = {wire, "s32", exact}
    assert {o.dtype for o in ops} <= allowed, (ops, allowed)
    if name in FIXED:  # one all-to-all of the wire, nothing else coded, no fallback
        assert coded == payload and len(payload) == 1 and payload[0].kind == "all-to-all"
        comp = float(st.inter_node_moved_bytes) * NODES / (NODES - 1) if hier else st.moved_bytes
        assert payload[0].nbytes == comp
    else:
        exact_ops = [o for o in coded if o.dtype == exact and o.dtype != wire]
        if hier:  # the fallback: x's bytes, in slices of one loop (one all-to-all op)
            slices = slice_count(ROWS * T * DIM, FALLBACK_PIECES)
            assert slices == FALLBACK_PIECES
            assert len(exact_ops) == 1 and exact_ops[0].nbytes * slices == raw
        else:  # a table whose frame overflowed: its values, in a loop over the tables
            assert len(exact_ops) == 1 and exact_ops[0].nbytes * T == raw
        moved = float(st.inter_node_moved_bytes) * NODES / (NODES - 1) if hier else st.moved_bytes
        if path == "dense":
            counts = [o for o in coded if o.dtype == "s32" and o.kind == "all-to-all"]
            assert len(payload) == 1 and len(counts) == 1
            assert payload[0].nbytes + counts[0].nbytes == moved
            assert (
                payload[0].nbytes
                == coded_group * float(st.capacity_bytes) * (NDEV // coded_group) * T
            )
        else:  # packed: whole chunks of the two chunk all-to-alls
            chunks = packed_chunks(T * (NDEV // coded_group), int(st.capacity_bytes))
            assert sorted(o.nbytes for o in payload) == sorted(coded_group * c for c in chunks)
            assert moved in _packed_sums([chunks], coded_group)
    if hier:  # the intra-node stage: x's values, exact, in x's bytes
        local = [o for o in ops if o.group == LOCAL]
        assert len(local) == 1 and local[0].dtype == exact, local
        assert HLO_BYTES[local[0].dtype] == jnp.dtype(DTYPES[dtype]).itemsize
        assert local[0].nbytes == float(st.intra_node_bytes) * LOCAL / (LOCAL - 1) == raw
        assert len(ops) == len(coded) + 1 + (name not in FIXED)  # + the pmax over both axes
    if name in ("fp16", "bf16"):  # 2 bytes per value, as capacity_bytes says
        assert payload[0].nbytes == 2 * raw / jnp.dtype(DTYPES[dtype]).itemsize


# -------------------------------------------------------------------------- the all-reduce
AR_VALUES = NDEV * 2 * 256  # per device: 2 rows of CHUNK_DIM per peer's chunk
AR_CASES = [
    (name, "dense", dt)
    for name in ("frame-auto", "frame-fixed", *FIXED)
    for dt in ("float32", "bfloat16")
]
AR_CASES += [("frame-auto", "packed", dt) for dt in ("float32", "bfloat16")]


def _allreduce(codec, path, dtype):
    """``(collectives, stats)`` of one compressed_psum of ``AR_VALUES`` values per device."""
    mesh = jax.make_mesh((NDEV,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    cfg = jlc.AllReduceConfig(codec, path=path)

    def f(g):
        y, s = jlc.compressed_psum_with_stats(g, "i", error_bound=EB, config=cfg)
        return y, jax.tree.map(lambda v: v[None], s)

    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=(P(), P("i"))))
    x = jnp.cos(jnp.arange(NDEV * AR_VALUES, dtype=jnp.float32) * 0.11).astype(dtype)
    stats = jax.tree.map(lambda v: np.asarray(v)[0], g(x)[1])
    assert int(stats.fallback) == 0
    return collectives(g.lower(x).compile().as_text()), stats


@pytest.mark.parametrize(("name", "path", "dtype"), AR_CASES)
def test_allreduce_wire_is_what_the_stats_count(name, path, dtype):
    codec, wire = CODECS[name]
    ops, st = _allreduce(codec, path, DTYPES[dtype])
    itemsize = jnp.dtype(DTYPES[dtype]).itemsize
    assert float(st.raw_bytes) == 2 * AR_VALUES * itemsize
    cap = int(st.capacity_bytes)
    payload = [o for o in ops if o.dtype == wire]
    assert {o.kind for o in payload} == {"all-to-all", "all-gather"}, ops
    a2a = [o for o in payload if o.kind == "all-to-all"]
    gather = [o for o in payload if o.kind == "all-gather"]
    counts = [o for o in ops if o.kind == "all-to-all" and o.dtype == "s32"]
    reduces = [o for o in ops if o.kind == "all-reduce"]
    assert len(payload) + len(counts) + len(reduces) == len(ops), ops
    if name in FIXED:  # reduce-scatter and all-gather of the wire, nothing else
        assert len(a2a) == len(gather) == 1 and not counts and not reduces
        assert a2a[0].nbytes == gather[0].nbytes == NDEV * cap
        assert a2a[0].nbytes + gather[0].nbytes == st.moved_bytes
        if name in ("fp16", "bf16"):
            assert a2a[0].nbytes == 2 * AR_VALUES  # 2 bytes per value
        return
    # Frames: the agreement (int32 pmax) and the exact fallback, jax.lax.psum of x's leaves:
    # its element type is XLA's psum's (XLA:CPU sums a bfloat16 psum in float32, as it would
    # for the caller's own jax.lax.psum).
    fallback = [o for o in reduces if o.nbytes > 8]
    assert all(o.dtype == "s32" for o in reduces if o not in fallback)
    assert len(fallback) == 1 and fallback[0].nbytes // HLO_BYTES[fallback[0].dtype] == AR_VALUES
    assert fallback[0].dtype in ({"f32"} if dtype == "float32" else {"f32", EXACT[dtype]})
    if path == "dense":
        assert len(a2a) == len(gather) == len(counts) == 1
        assert a2a[0].nbytes == NDEV * cap and counts[0].nbytes == 4 * NDEV
        assert gather[0].nbytes == NDEV * (4 + cap)  # count + frame from every device
        assert a2a[0].nbytes + counts[0].nbytes + gather[0].nbytes == st.moved_bytes
    else:  # packed: whole chunks of each phase's two chunk collectives
        c_rs = c_ag = packed_chunks(1, cap)  # one frame per destination, per phase
        assert sorted(o.nbytes for o in a2a) == sorted(NDEV * c for c in c_rs)
        assert sorted(o.nbytes for o in gather) == sorted(NDEV * c for c in c_ag)
        assert not counts
        assert st.moved_bytes in _packed_sums([c_rs, c_ag], NDEV)


# ---------------------------------------------------------------------- exact_all_to_all
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_exact_all_to_all_is_bit_equal_and_keeps_the_bytes(dtype):
    mesh = jax.make_mesh((NDEV,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    bits = np.random.default_rng(0).integers(0, 2**16, NDEV * NDEV * 4, dtype=np.uint16)
    if dtype == "float32":
        x = jnp.asarray(bits.astype(np.uint32) * 65537).view(jnp.float32)
    else:
        x = jax.lax.bitcast_convert_type(jnp.asarray(bits), DTYPES[dtype])  # NaN payloads too

    def run(fn):
        g = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
        return g, g(x)

    g, y = run(lambda v: exact_all_to_all(v, "i", 0, 0, tiled=True))
    _, ref = run(lambda v: jax.lax.all_to_all(v, "i", 0, 0, tiled=True))
    unsigned = np.uint32 if dtype == "float32" else np.uint16
    assert (
        np.asarray(y).view(unsigned)
        == np.asarray(x).reshape(NDEV, NDEV, 4).transpose(1, 0, 2).reshape(-1).view(unsigned)
    ).all()
    if dtype == "float32":
        assert (np.asarray(y).view(unsigned) == np.asarray(ref).view(unsigned)).all()
    (op,) = collectives(g.lower(x).compile().as_text())
    assert HLO_BYTES[op.dtype] * x.size // NDEV == op.nbytes == x.nbytes // NDEV
