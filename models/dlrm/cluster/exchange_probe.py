"""The short probe behind ``Config.compression = "auto"``, run on the trainer's mesh before the
train step is compiled, and the choice it feeds (:mod:`models.dlrm.cluster.auto_exchange`).

What is timed (every device busy at once, so a host's cores and loopback shared among its
devices are in the figures; median of ``REPS`` runs after ``WARMUP`` warm-up runs, each a
jitted program on the whole mesh, so every process runs the same sequence):

* the link per level: an exact ``jax.lax.all_to_all`` over the intra-node mesh axis
  (``"local"``, or ``"devices"`` on a 1-D mesh) and over the inter-node axis (``"nodes"``) at
  two sizes per peer (``LINK_SMALL_BYTES``, ``LINK_CHAIN`` of them back to back in one
  program as the step runs its collectives, and a size near the exchange's own, 64 KiB to
  4 MiB), fitted to ``peers * (latency + bytes / bandwidth)`` (:func:`probe_result.fit_link`).
  The links are timed in ``LINK_WINDOWS`` windows spread over the probe (before the matmul,
  after it, after the exchange codec and after the gradient codecs, the last two back to back
  where none is timed) and each size's time is the mean of the windows' medians: a
  step's time is the sum of its collectives', so it pays the mean cost per message, and on a
  shared host that cost alternates between states that last seconds (two processes of 2 CPU
  devices on 2 cores, gloo: about 0.1-0.3 ms or 4-8 ms for a 1 KiB all-to-all); the median of
  one window picks one of them by chance;
* the codec: the run's exchange codec (``Config.codec`` at the error-bound preset's base REL
  bound, the run's wire path) encoding and decoding one block of the forward exchange's shape
  per device, ``[P, L, B / P, dim]`` of uniform random values in [-1, 1] (no repeated rows:
  the ratio is below what the dedup of hot ids gives on real data); ratio = raw / frame bytes
  (raw / capacity on the dense path);
* with ``Config.grad_allreduce = "auto"`` (SGD), the compressed gradient all-reduce's codec on
  one block of the head gradients' size per device, once per gradient codec that competes
  (``auto_exchange.grad_codec_variants``: the entropy-coded and the fixed-rate frames, or the
  fixed-rate alone with ``Config.grad_codec = "fixed"``; :func:`time_gradient_codec`);
* compute: a jitted ``[B / P, k] x [k, n]`` matmul of the top MLP's first layer, ``MATMUL_REPS``
  times in one program, for the dense FLOP/s; the memory bytes/s of embedding rows is not
  measured but assumed from a machine balance (``probe_result.MACHINE_BALANCE``).

On several processes, process 0's timings are broadcast so that every process takes the same
decision. ``Config.auto_inter_gbits`` > 0 replaces the measured inter-node bandwidth (a what-if
and the tests' way to put a slow link under a fast one); the latency stays measured.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jax_lossy_comm import ExchangeConfig, resolve_path
from jax_lossy_comm.allreduce import chunk_geometry
from models.dlrm import grad_allreduce
from models.dlrm.cluster import auto_exchange, auto_report, probe_result
from models.dlrm.cluster import step_time as st
from models.dlrm.configs import Config
from models.dlrm.mesh import batch_axis, resolve_topology
from models.dlrm.pooled_all_to_all import (
    QCOMM_CODECS,
    EmbeddingExchange,
    create_exchange,
    exchange_config,
)

REPS = 5
WARMUP = 2
MATMUL_REPS = 16
LINK_SMALL_BYTES = 1024
LINK_LARGE_BYTES = (64 << 10, 4 << 20)  # the large size's range
LINK_CHAIN = 8  # small all-to-alls per timed program: its dispatch spread over them
LINK_WINDOWS = 4


def _median_seconds(*calls, warmup: int = WARMUP) -> list[float]:
    """Median wall seconds of each ``(fn, *args)`` call (blocked on) over ``REPS`` runs after
    ``warmup`` warm-up runs, the calls taken in turn, so that drift and a busy moment of the
    machine fall on all of them alike."""
    for _ in range(warmup):
        for fn, *args in calls:
            jax.block_until_ready(fn(*args))
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(REPS):
        for t_list, (fn, *args) in zip(times, calls):
            t = time.perf_counter()
            jax.block_until_ready(fn(*args))
            t_list.append(time.perf_counter() - t)
    return [statistics.median(t) for t in times]


def _levels(mesh) -> tuple[tuple[str, str, int], tuple[str, str, int]]:
    """((level, axis, axis size), ...) of the intra- and the inter-node level of ``mesh``."""
    if len(mesh.axis_names) == 1:
        return ("intra-node", mesh.axis_names[0], mesh.size), ("inter-node", "-", 1)
    nodes, local = mesh.devices.shape
    return ("intra-node", mesh.axis_names[1], local), ("inter-node", mesh.axis_names[0], nodes)


def _sharded(mesh, shape, fill=np.ones, dtype=np.float32):
    """A global array of ``shape`` sharded on its first axis over the batch axis, each
    device's block ``fill(block shape)`` (numpy; no program to compile)."""
    sh = NamedSharding(mesh, P(batch_axis(mesh)))

    def block(index):
        return np.asarray(fill(tuple(len(range(*i.indices(n))) for i, n in zip(index, shape))))

    return jax.make_array_from_callback(shape, sh, lambda i: block(i).astype(dtype))


def _smap(mesh, fn, out_specs):
    bax = batch_axis(mesh)
    return jax.jit(
        jax.shard_map(fn, mesh=mesh, in_specs=P(bax), out_specs=out_specs, check_vma=False)
    )


def _all_to_all_chain(mesh, axis: str, chain: int):
    """A jitted program of ``chain`` exact all-to-alls over ``axis``, each on the last's output
    (a loop, so that XLA cannot fold two of them into the identity)."""

    def body(b):
        step = lambda i, x: jax.lax.all_to_all(x, axis, 0, 0, tiled=True)  # noqa: E731
        return jax.lax.fori_loop(0, chain, step, b) if chain > 1 else step(0, b)

    return _smap(mesh, body, P(batch_axis(mesh)))


class LinkTimer:
    """Times the exact all-to-all of every level of ``mesh`` at ``sizes`` (bytes per peer,
    ascending), one window per :meth:`window` call; the programs are compiled once.

    The smallest size runs ``LINK_CHAIN`` all-to-alls per program, the others one (a chain of
    them would take seconds on a slow link); their time carries one program's dispatch, which
    the chained figure spreads over ``LINK_CHAIN``, so the fitted bandwidth reads low by that
    much (about 0.1 ms on the CPU testbed, against 0.3-300 ms of transfer).
    """

    def __init__(self, mesh, sizes: tuple[int, ...]):
        self.mesh, self.sizes, self.windows = mesh, sizes, []
        self.calls = []  # per level: [(fn, x, all-to-alls per call)] per size; None: no peers
        for _, axis, size in _levels(mesh):
            if size == 1:
                self.calls.append(None)
                continue
            chains = [LINK_CHAIN if i == 0 else 1 for i in range(len(sizes))]
            self.calls.append(
                [
                    (
                        _all_to_all_chain(mesh, axis, k),
                        _sharded(mesh, (mesh.size * size, max(1, n // 4))),
                        k,
                    )
                    for n, k in zip(sizes, chains)
                ]
            )

    def window(self) -> list[float]:
        """One window: seconds per all-to-all of each level and size (level-major; 0 for a
        level without peers), each the median of ``REPS`` runs (warm-up runs in the first
        window only); also kept in ``windows``."""
        out = []
        for calls in self.calls:
            if calls is None:
                out += [0.0] * len(self.sizes)
                continue
            warmup = WARMUP if not self.windows else 0
            times = _median_seconds(*[(f, x) for f, x, _ in calls], warmup=warmup)
            out += [t / k for t, (_, _, k) in zip(times, calls)]
        self.windows.append(out)
        return out

    def describe(self) -> str:
        """One log line: the smallest size's time per all-to-all in each window, per level."""
        per_level = []
        for i, ((level, _, _), calls) in enumerate(zip(_levels(self.mesh), self.calls)):
            if calls is not None:
                ms = "/".join(f"{w[i * len(self.sizes)] * 1e3:.3g}" for w in self.windows)
                per_level.append(f"{level} {ms} ms")
        return (
            f"links: each size the mean of {len(self.windows)} windows' medians; "
            f"{self.sizes[0]} B per peer ({LINK_CHAIN} all-to-alls per program) window by "
            f"window, this process: {', '.join(per_level) or 'no peers'}"
        )

    def mean(self) -> list[float]:
        """The mean over the windows of each figure of :meth:`window` (module docstring)."""
        return [float(v) for v in np.mean(np.asarray(self.windows), axis=0)]


def time_matmul(mesh, rows: int, k: int, n: int) -> float:
    """Dense FLOP/s per device of a ``float32[rows, k] x [k, n]`` matmul, ``MATMUL_REPS`` in one
    jitted program on every device at once."""
    x = _sharded(mesh, (mesh.size * rows, k))

    def body(xb):
        w = jnp.full((k, n), 0.5, jnp.float32)

        def one(i, acc):
            return acc + jnp.dot(xb * (i + 1).astype(xb.dtype), w)

        return jax.lax.fori_loop(0, MATMUL_REPS, one, jnp.zeros((xb.shape[0], n), xb.dtype))

    [t] = _median_seconds((_smap(mesh, body, P(batch_axis(mesh))), x))
    return 2.0 * rows * k * n * MATMUL_REPS / t


def _time_frames(
    mesh, codec, path: str, x, grid, chunk, error_bound: float, dtype, *, sized_by_bound=False
):
    """(encode seconds, decode seconds, wire bytes per device) of ``codec`` on ``x`` (a global
    array whose device blocks reshape to ``grid + chunk``), every device at once; the wire
    bytes of this process's first device: fixed-size codecs their output, the dense path the
    capacity, a variable-size path the frames' bytes. ``sized_by_bound``: the capacity is
    sized by ``error_bound`` itself, as the all-reduce sizes it (the exchange's codec carries
    its own smallest bound)."""
    bound = np.asarray(error_bound, np.float64) if sized_by_bound else None
    cap = codec.capacity_bytes(chunk, dtype, dense=path in ("dense", "packed"), error_bound=bound)

    def encode(xb):
        bounds = jnp.full(grid, error_bound, jnp.float32) if codec.variable_size else None
        return codec.encode(xb.reshape(grid + chunk), bounds, cap)

    bax = P(batch_axis(mesh))
    enc = _smap(mesh, encode, (bax, bax))
    dec = jax.jit(
        jax.shard_map(
            lambda w, nb: codec.decode(w, nb, shape=chunk, dtype=dtype),
            mesh=mesh,
            in_specs=(bax, bax),
            out_specs=bax,
            check_vma=False,
        )
    )
    wire, nbytes = enc(x)
    t_enc, t_dec = _median_seconds((enc, x), (dec, wire, nbytes))
    if not codec.variable_size:
        wire_bytes = float(wire.addressable_shards[0].data.size * wire.dtype.itemsize)
    elif path == "dense":
        wire_bytes = float(cap * np.prod(grid))
    else:
        wire_bytes = float(np.abs(np.asarray(nbytes.addressable_shards[0].data)).sum())
    return t_enc, t_dec, wire_bytes


def time_codec(
    mesh,
    exchange: ExchangeConfig,
    model: st.ModelSpec,
    *,
    error_bound: float,
    dtype: str,
    codec_name: str,
    seed: int,
) -> tuple[st.CodecSpec, str]:
    """The exchange codec's compress / decompress throughput (raw bytes/s per device) and its
    ratio on one random block of the forward exchange's shape per device (module docstring).

    Args:
      mesh: the run's mesh.
      exchange: the compressed candidate's ``ExchangeConfig`` (its forward codec and path).
      model: the step-time model's shapes (batch, table slots, dim, value bytes).
      error_bound: the relative (REL) bound the codec is timed at (the error-bound
        preset's base).
      dtype: the embedding dtype (``Config.embedding_dtype``), what the exchange sends.
      codec_name: ``Config.codec``, for the note.
      seed: seeds the random block.

    Returns:
      ``(CodecSpec, note)``: the note says what was timed, for the log.
    """
    p = mesh.size
    slots, rows, dim = model.table_slots(p) // p, model.global_batch // p, model.embedding_dim
    codec, dtype = exchange.forward, jnp.dtype(dtype)
    path = resolve_path(exchange.path)
    chunk = (rows, dim) if codec.per_table else (slots * rows, dim)
    grid = (p, slots) if codec.per_table else (p,)
    rng = np.random.default_rng(seed)
    x = _sharded(mesh, (p * p, slots, rows, dim), lambda s: rng.uniform(-1, 1, s), dtype)
    t_enc, t_dec, wire_bytes = _time_frames(mesh, codec, path, x, grid, chunk, error_bound, dtype)
    raw = float(p * slots * rows * dim * dtype.itemsize)  # per device
    name = codec_name if codec_name in QCOMM_CODECS else f"{codec_name} at REL {error_bound}"
    note = (
        f"codec: {name}, {path} path, on a uniform random block {dtype.name}[{p}, {slots}, "
        f"{rows}, {dim}] per device (every device at once)"
    )
    spec = st.CodecSpec(raw / t_enc, raw / t_dec, raw / max(wire_bytes, 1.0))
    return spec, note


def time_gradient_codec(
    mesh, config: Config, model: st.ModelSpec, grad_codec: str
) -> tuple[st.CodecSpec, str]:
    """The compressed gradient all-reduce's codec (``grad_codec``, a ``Config.grad_codec``
    value, at REL ``Config.grad_error_bound``, the all-reduce's wire path) on one block of the
    head gradients' size per device, ``[P, *chunk_geometry(...)]`` (the all-reduce's chunk per
    peer) of Laplace(0, 1) values: heavier-tailed than a Gaussian, as gradients are; real
    gradients may compress better still (the same block for every ``grad_codec``). Returns
    ``(CodecSpec, note)`` as :func:`time_codec`."""
    ar = grad_allreduce.from_config(
        dataclasses.replace(config, grad_allreduce="compressed", grad_codec=grad_codec)
    )
    codec = ar.allreduce.codec
    path = resolve_path(ar.allreduce.path, fills_capacity=True)
    p = mesh.size
    chunk, grid = chunk_geometry(model.dense_params(), p), (p,)
    rng = np.random.default_rng(config.seed + 1)
    x = _sharded(mesh, (p * p, *chunk), lambda s: rng.laplace(0.0, 1.0, s))
    t_enc, t_dec, wire_bytes = _time_frames(
        mesh, codec, path, x, grid, chunk, ar.error_bound, jnp.dtype(jnp.float32),
        sized_by_bound=True,
    )  # fmt: skip
    raw = float(p * chunk[0] * chunk[1] * 4)
    note = (
        f"gradient codec: {grad_codec} at REL {ar.error_bound}, {path} path, on a "
        f"Laplace(0, 1) block float32[{p}, {chunk[0]}, {chunk[1]}] per device"
    )
    return st.CodecSpec(raw / t_enc, raw / t_dec, raw / max(wire_bytes, 1.0)), note


def measure(
    config: Config,
    mesh,
    model: st.ModelSpec,
    exchange: ExchangeConfig,
    *,
    gradient_codecs: Sequence[str] = (),
) -> probe_result.Probe:
    """Runs the probe on ``mesh`` (every process the same programs; process 0's figures for
    all, one float array broadcast) and returns what it measured, ``Config.auto_inter_gbits``
    applied; the codec timed is ``exchange``'s (the compressed candidate), and the compressed
    gradient all-reduce's with each of ``gradient_codecs`` (``Config.grad_codec`` values;
    :func:`time_gradient_codec`)."""
    t0 = time.perf_counter()
    p = mesh.size
    per_peer = model.exchange_bytes(p) / p
    large = int(min(max(4 * per_peer, LINK_LARGE_BYTES[0]), LINK_LARGE_BYTES[1]))
    sizes = (LINK_SMALL_BYTES, large)
    timer = LinkTimer(mesh, sizes)
    timer.window()
    k, n = model.interaction_width(), model.top_mlp[0]
    flops = time_matmul(mesh, model.global_batch // p, k, n)
    timer.window()
    codec, codec_note = time_codec(
        mesh,
        exchange,
        model,
        error_bound=float(config.error_bound.base),
        dtype=config.embedding_dtype,
        codec_name=config.codec,
        seed=config.seed,
    )
    timer.window()
    grads = [time_gradient_codec(mesh, config, model, name) for name in gradient_codecs]
    while len(timer.windows) < LINK_WINDOWS:
        timer.window()
    values = [*timer.mean(), flops]
    values += [codec.compress_bytes_per_s, codec.decompress_bytes_per_s, codec.ratio]
    for g, _ in grads:  # 3 figures per gradient codec, in the order of gradient_codecs
        values += [g.compress_bytes_per_s, g.decompress_bytes_per_s, g.ratio]
    values = np.array(values, np.float32)
    if jax.process_count() > 1:  # one decision for all: process 0's figures
        from jax.experimental import multihost_utils

        values = np.asarray(multihost_utils.broadcast_one_to_all(values), np.float64)
    values = [float(v) for v in values]
    links = []
    for i, (level, axis, size) in enumerate(_levels(mesh)):
        links.append(probe_result.fit_link(level, axis, size - 1, sizes, values[2 * i : 2 * i + 2]))
    intra, inter = links
    if config.auto_inter_gbits > 0 and inter.peers:
        inter = dataclasses.replace(
            inter, bandwidth=config.auto_inter_gbits * 1e9 / 8, override=True
        )
    platform = mesh.devices.flat[0].platform
    balance = probe_result.MACHINE_BALANCE["cpu" if platform == "cpu" else "gpu"]
    flops = values[4]
    notes = (
        timer.describe(),
        f"compute: a [{model.global_batch // p}, {k}] x [{k}, {n}] float32 matmul (the top MLP's "
        f"first layer) {MATMUL_REPS} times per device; memory bytes/s assumed at "
        f"{balance:g} FLOP per byte (not measured)",
        codec_note,
        *(note for _, note in grads),
    )
    probe = probe_result.Probe(
        intra=intra,
        inter=inter,
        codec=st.CodecSpec(values[5], values[6], values[7]),
        gradient_codecs={
            name: st.CodecSpec(*values[8 + 3 * i : 11 + 3 * i])
            for i, name in enumerate(gradient_codecs)
        },
        compute=st.Compute(flops, flops / balance),
        notes=notes,
        seconds=time.perf_counter() - t0,
    )
    return probe


def choose_exchange(
    config: Config, mesh, *, min_error_bound: float | None
) -> tuple[EmbeddingExchange, auto_report.AutoChoice | None]:
    """The run's embedding exchange and, with ``config.compression == "auto"``, the
    :class:`auto_report.AutoChoice` behind it (module docstring; :func:`auto_exchange.decide`)
    for the logs; ``(pooled_all_to_all.create_exchange(...), None)`` otherwise (no probe).

    The compressed candidate's ``ExchangeConfig`` is built once, timed by the probe and, when
    chosen, returned with the chosen topology. An explicit ``exchange_topology`` ("flat" /
    "hierarchical") is kept: only that compressed candidate competes with exact.

    Args:
      config: the run's Config.
      mesh: the run's mesh (the probe runs on it).
      min_error_bound: the static smallest relative bound of the run
        (``ErrorBoundHook.min_error_bound``); sizes the dense exchange's frames.

    Raises:
      ValueError: as ``pooled_all_to_all.create_exchange``.
    """
    if config.compression != "auto":
        return create_exchange(config, mesh, min_error_bound=min_error_bound), None
    model = st.ModelSpec.from_config(config)
    candidate = exchange_config(
        dataclasses.replace(config, compression="on"),
        topology="flat",
        min_error_bound=min_error_bound,
    )
    # the compressed all-reduce competes only where grad_allreduce is auto and the optimizer
    # allows it (auto_exchange.COMPRESSED_ALLREDUCE_OPTIMIZERS), with each gradient codec
    # Config.grad_codec lets compete (auto_exchange.grad_codec_variants)
    allreduce = (
        config.grad_allreduce == "auto"
        and config.optimizer in auto_exchange.COMPRESSED_ALLREDUCE_OPTIMIZERS
        and mesh.size > 1
    )
    grad_codecs = auto_exchange.grad_codec_variants(config.grad_codec) if allreduce else ()
    probe = measure(config, mesh, model, candidate, gradient_codecs=grad_codecs)
    nodes, local = (1, mesh.size) if len(mesh.axis_names) == 1 else mesh.devices.shape
    platform = mesh.devices.flat[0].platform
    cluster = probe.cluster(nodes, local, tree_allreduce=platform != "cpu")
    codecs = auto_exchange.codecs_for(
        probe.codec, backward_compressed=config.exchange_backward == "compressed"
    )
    decision = auto_exchange.decide(
        model,
        cluster,
        probe.compute,
        codecs,
        modes=auto_exchange.candidates(cluster, config.exchange_topology, grad_codecs=grad_codecs),
        margin=config.auto_margin,
        topology=config.exchange_topology,
        gradient_codecs=probe.gradient_codecs,
    )
    topology = resolve_topology(decision.topology, mesh)
    chosen = (
        dataclasses.replace(candidate, topology=topology) if decision.compression == "on" else None
    )
    exchange = EmbeddingExchange(decision.compression, topology, chosen)
    return exchange, auto_report.AutoChoice(probe, decision, model, cluster, codecs)
