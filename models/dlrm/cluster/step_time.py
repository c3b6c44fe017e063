"""A step-time model of embedding-parallel DLRM training: compute, exchange, all-reduce, codec.

Pure Python + numpy (no jax import), so a trainer, a benchmark or a notebook can ask "what does
a step cost on this cluster, in this mode" before compiling anything. Every number it returns is
a prediction of a cost model, not a measurement.

Its inputs (``ModelSpec``, ``Cluster``, ``Compute``, ``CodecSpec``, ``Codecs``) and the model
presets are :mod:`models.dlrm.cluster.step_time_inputs`' (re-exported here); the collective
cost formulas :mod:`models.dlrm.cluster.collective_cost`'s.

Layout. ``P = N * G`` devices: ``N`` nodes (``Cluster.nodes``) of ``G`` devices
(``Cluster.devices_per_node``), node-major (devices ``n*G .. n*G+G-1`` are node ``n``). Each
device owns ``slots / P`` embedding-table slots (table-wise sharding; ``slots`` is the table count
rounded up to a multiple of ``P``, as ``models.dlrm.sharding`` pads) and runs the data-parallel
head (bottom MLP, interaction, top MLP) on ``B / P`` samples of the global batch ``B``.

Bytes (per device, per step):

* forward exchange: ``X = B * (slots / P) * dim * value_bytes`` (the pooled embeddings of the
  device's tables for the whole batch; ``X / P`` to each device, its own block included). The
  backward exchange moves the same shapes back (the cotangents).
* gradient all-reduce: ``S = dense_params * 4`` (float32 head gradients).
* a codec of compression ratio ``r`` (raw / wire bytes) divides the bytes it covers by ``r``;
  fixed-precision codecs have ``r = value_bytes / bytes_per_value`` (``FIXED_BYTES_PER_VALUE``:
  FP16 and BF16 2, FP8 1, INT8 row-wise ``1 + 8 / dim`` (fp32 scale and bias per row, FBGEMM's
  fused row-wise layout), MX4 ``0.5 + 1 / 32`` (4-bit values, one 8-bit shared exponent per 32,
  OCP Microscaling v1.0)).

Collective costs (``alpha`` = latency per message, ``beta`` = 1 / bandwidth, ``n`` = bytes):

* pairwise-exchange all-to-all (Thakur, Rabenseifner & Gropp 2005, sec. 4.5): ``(p - 1) *
  alpha + (p - 1) / p * n * beta`` for ``n`` bytes per rank, ``n / p`` to each peer.
  :func:`pairwise_all_to_all_time` takes the bytes per peer and the peer count.
* ring all-reduce (ibid. sec. 4.4, reduce-scatter + all-gather; Patarasuk & Yuan 2009):
  ``2 (p - 1) alpha + 2 (p - 1) / p * n * beta`` (:func:`ring_all_reduce_time`).
* ring all-gather (ibid. sec. 4.1): ``(p - 1) alpha + (p - 1) / p * n * beta``, ``n`` the
  gathered size (:func:`ring_all_gather_time`).
* NCCL's bus bandwidth (nccl-tests ``doc/PERFORMANCE.md``): ``algbw = n / t``; ``busbw = algbw
  * 2 (p - 1) / p`` (all-reduce), ``* (p - 1) / p`` (all-to-all, all-gather, reduce-scatter):
  the factors above, so ``t = n * factor / busbw`` (:func:`bus_bandwidth`).

Two levels. Intra-node links have ``Cluster.intra_bandwidth`` per device and direction (NVLink:
NVIDIA's 900 GB/s per H100 is both directions together, 450 GB/s each), inter-node links
``Cluster.inter_bandwidth`` per device and direction (one NIC per GPU; the node's NICs together
carry ``G * inter_bandwidth``). Per mode:

* ``exact``, flat all-to-all (``jax.lax.all_to_all``, NCCL's send/recv all-to-all): every
  device sends ``X / P`` to ``G - 1`` node peers and ``P - G`` remote peers at once; time
  ``max(t_intra, t_inter)`` with ``t_intra = pairwise(X / P, G - 1, intra)``, ``t_inter =
  pairwise(X / P, P - G, inter)``.
* ``flat`` (compressed): the same with ``X / P / r`` per peer; compress ``X``, decompress ``X``.
* ``hierarchical``: an exact intra-node stage ``pairwise(X / G, G - 1, intra)`` (the node's
  blocks regrouped by destination local rank), then a compressed inter-node stage among the
  ``N`` devices of the same local rank ``pairwise(X / N / r, N - 1, inter)``; the stages are
  sequential. Compress and decompress ``X (N - 1) / N``.
* ``hierarchical-exact``: the same two stages without a codec (``r = 1``): what the topology
  alone gives (fewer inter-node messages: ``N - 1`` instead of ``P - G``).
* ``hierarchical-ar``: ``hierarchical`` plus the compressed gradient all-reduce of the library
  (``jax_lossy_comm.compressed_psum``): a reduce-scatter as an all-to-all of frames (``S / r_g``
  per device) then a ring all-gather of the reduced frames (``S / r_g`` gathered, or at
  ``Codecs.gradient_gather_ratio`` where the re-coded sums' ratio is known); compress
  ``S (1 + 1 / P)``, decompress ``2 S (P - 1) / P``. ``exact-ar`` and ``flat-ar``: the same
  all-reduce beside the ``exact`` and the ``flat`` exchange (``AR_MODES``).
* ``fp16``, ``bf16``, ``fp8``, ``int8``, ``mx4``: the flat exchange, forward and backward, at the
  codec's bytes per value (TorchRec's quantized comms); cast cost ``2 X`` (encode + decode of
  every block) at ``Codecs.cast_bytes_per_s`` per direction.
* The gradient all-reduce is the exact ring in every mode but the ``-ar`` ones:
  ``t = 2 (p - 1) alpha + max(ring_intra, ring_inter)``; on a node-major ring (one ring per NIC,
  as NCCL lays out its channels) each node's NICs carry ``2 (p - 1) / p * S`` in each direction,
  so ``ring_inter = 2 (p - 1) / p * S / (G * inter)``; ``ring_intra = 2 (p - 1) / p * S /
  intra`` (``intra_shared``: ``(G - 1) / G`` of it, one link shared by the node's devices, as a
  host's loopback). With ``Cluster.tree_allreduce`` (NCCL, which picks ring or tree by size;
  Sanders, Speck & Traeff 2009, double binary trees): ``min(ring, tree)``, ``tree = 2
  ceil(log2 p) alpha + max(2 S / intra, 2 S / (G * inter))`` (reduce up, broadcast down; each
  node's NICs carry ``S`` each way per phase).

Compute (per device, ``b = B / P`` samples, ``F`` = forward FLOPs per sample, two per MAC; the
backward pass is twice the forward's FLOPs):

* bottom MLP ``b F_bottom / flops``; interaction + top MLP ``b F_top / flops`` (dot interaction
  ``(T + 1)^2 dim``; DCN-v2 low-rank cross layers ``4 in rank + 3 in`` each);
* embedding lookup ``B (T / P) bag dim value_bytes / mem`` (``bag``: mean ids per bag, sum
  pooling); its update reads and writes the rows (SGD 2x the lookup bytes, Adagrad 4x with the
  accumulator);
* dense optimizer ``dense_params * 4 * (3 SGD | 5 Adagrad) / mem``.
* ``Cluster.serial_devices`` devices share one processor (a CPU testbed with more devices than
  cores): compute and codec times are multiplied by it.
* a token-bucket link (``Cluster.inter_burst_bytes``, the testbed's ``tc tbf``): each
  collective's inter-node transfer passes up to the bucket's bytes per node at no cost (the
  bucket refills between a step's collectives): its time less ``min(bytes, burst) /
  bandwidth`` of the node's link.
* fixed host costs per device and step (``overhead_s``): ``Compute.device_overhead_s`` (program
  dispatch, the rendezvous of the device's collectives) in every mode, plus
  ``Codecs.exchange_overhead_s`` (codec calls, frame packing, the overflow agreement) in the
  modes with a compressed exchange (``LIBRARY_MODES``: once a step, ``exact-ar``'s compressed
  all-reduce alone adds none); times ``serial_devices``. Both 0 unless given: the testbed check
  fits them (docs/step_time.md); the GPU projections assume them (no device overhead, 50 us per
  compressed exchange).

Step. Without overlap, the sum of every part. With overlap of the exchange with the bottom MLP
(the bottom MLP does not depend on the exchange; ``overlap=True``), the forward exchange's
communication hides behind the bottom MLP's forward and the backward exchange's behind the
bottom MLP's backward: ``max(a2a, bottom)`` each; codec kernels do not overlap (they need the
same processor). The gradient all-reduce is not overlapped in either.

References:
  R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication Operations in
  MPICH", IJHPCA 19(1), 2005.
  P. Patarasuk, X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
  workstations", JPDC 69(2), 2009.
  NVIDIA nccl-tests, doc/PERFORMANCE.md (algorithm and bus bandwidth).
  P. Sanders, J. Speck, J. L. Traeff, "Two-tree algorithms for full bandwidth broadcast,
  reduction and scan", Parallel Computing 35(12), 2009 (NCCL's double binary trees).
  Feng et al., SC24, arXiv 2407.04272 (the compressed exchange modelled here).
  OCP Microscaling Formats (MX) Specification v1.0, 2023 (MX4 bytes per value).
"""

from __future__ import annotations

import dataclasses
import math

from models.dlrm.cluster.collective_cost import (  # noqa: F401  (re-exported)
    bus_bandwidth,
    check_link,
    pairwise_all_to_all_time,
    ring_all_gather_time,
    ring_all_reduce_time,
)
from models.dlrm.cluster.step_time_inputs import (  # noqa: F401  (re-exported)
    MLPERF_BAG_SIZES,
    MLPERF_GLOBAL_BATCH,
    TERABYTE_TABLES,
    Cluster,
    Codecs,
    CodecSpec,
    Compute,
    ModelSpec,
    mlperf_dcnv2_spec,
    terabyte_spec,
)

#: modes :func:`predict` knows (module docstring)
MODES = (
    "exact",
    "hierarchical-exact",
    "flat",
    "hierarchical",
    "hierarchical-ar",
    "exact-ar",
    "flat-ar",
    "fp16",
    "bf16",
    "fp8",
    "int8",
    "mx4",
)
#: error-bounded (library) modes
LIBRARY_MODES = ("flat", "hierarchical", "hierarchical-ar", "flat-ar")
#: modes with the library's compressed gradient all-reduce -> their exchange's mode
AR_MODES = {"exact-ar": "exact", "flat-ar": "flat", "hierarchical-ar": "hierarchical"}
#: fixed-precision exchange codecs (name -> function of the embedding dim -> bytes per value)
FIXED_BYTES_PER_VALUE = {
    "fp16": lambda dim: 2.0,
    "bf16": lambda dim: 2.0,
    "fp8": lambda dim: 1.0,
    "int8": lambda dim: 1.0 + 8.0 / dim,
    "mx4": lambda dim: 0.5 + 1.0 / 32.0,
}


# ------------------------------------------------------------------------------ results
@dataclasses.dataclass(frozen=True)
class StepTime:
    """One predicted step, seconds (per device; ``*_bytes``: per device and step).

    ``step_s``: everything serial; ``step_overlap_s``: the exchanges' communication hidden
    behind the bottom MLP (module docstring).
    """

    mode: str
    lookup_s: float
    bottom_forward_s: float
    top_forward_s: float
    bottom_backward_s: float
    top_backward_s: float
    embedding_update_s: float
    optimizer_s: float
    exchange_forward_intra_s: float
    exchange_forward_inter_s: float
    exchange_forward_s: float
    exchange_backward_intra_s: float
    exchange_backward_inter_s: float
    exchange_backward_s: float
    allreduce_intra_s: float
    allreduce_inter_s: float
    allreduce_s: float
    compress_s: float
    decompress_s: float
    overhead_s: float
    intra_bytes: float
    inter_bytes: float
    step_s: float
    step_overlap_s: float

    @property
    def compute_s(self) -> float:
        return (
            self.lookup_s
            + self.bottom_forward_s
            + self.top_forward_s
            + self.bottom_backward_s
            + self.top_backward_s
            + self.embedding_update_s
            + self.optimizer_s
        )

    def step(self, overlap: bool) -> float:
        return self.step_overlap_s if overlap else self.step_s

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["compute_s"] = self.compute_s
        return d


def _burst_saving(inter_bytes: float, cl: Cluster) -> float:
    """Seconds one collective's ``inter_bytes`` per device save through the link's token
    bucket (``Cluster.inter_burst_bytes`` per node, shared by its devices)."""
    if not cl.inter_burst_bytes or not math.isfinite(cl.inter_bandwidth):
        return 0.0
    return min(inter_bytes, cl.inter_burst_bytes / cl.devices_per_node) / cl.inter_bandwidth


def _all_to_all_flat(x: float, cl: Cluster, ratio: float) -> tuple[float, float, float, float]:
    """(t_intra, t_inter, intra bytes, inter bytes) of a flat all-to-all of ``x`` per device."""
    p, g = cl.devices, cl.devices_per_node
    per_peer = x / p / ratio
    ti = pairwise_all_to_all_time(per_peer, g - 1, cl.intra_bandwidth, cl.intra_latency)
    te = pairwise_all_to_all_time(per_peer, p - g, cl.inter_bandwidth, cl.inter_latency)
    te -= _burst_saving(per_peer * (p - g), cl)
    return ti, te, per_peer * (g - 1), per_peer * (p - g)


def _all_to_all_hierarchical(
    x: float, cl: Cluster, ratio: float
) -> tuple[float, float, float, float]:
    n, g = cl.nodes, cl.devices_per_node
    ti = pairwise_all_to_all_time(x / g, g - 1, cl.intra_bandwidth, cl.intra_latency)
    te = pairwise_all_to_all_time(x / n / ratio, n - 1, cl.inter_bandwidth, cl.inter_latency)
    te -= _burst_saving(x / n / ratio * (n - 1), cl)
    return ti, te, x / g * (g - 1), x / n / ratio * (n - 1)


def forward_exchange_bytes(
    model: ModelSpec, cluster: Cluster, mode: str, ratio: float = 1.0
) -> tuple[float, float]:
    """(intra-node, inter-node) bytes one device sends in the forward exchange of one step.

    What the trainer's exchange statistics count (``intra_node_bytes`` and
    ``inter_node_moved_bytes`` of ``jax_lossy_comm.ExchangeStats`` per device; the device's
    own block in neither): ``exact`` and the fixed-precision modes the flat all-to-all
    (``ratio`` 1 for exact), ``flat`` the flat one at ``ratio``, the ``hierarchical*`` modes
    the exact intra-node stage ``X (G - 1) / G`` and the inter-node stage ``X (N - 1) / N /
    ratio`` (module docstring).

    Raises:
      ValueError: unknown mode, ``ratio <= 0``.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    if not ratio > 0:
        raise ValueError(f"ratio must be > 0, got {ratio}")
    x = model.exchange_bytes(cluster.devices)
    mode = AR_MODES.get(mode, mode)  # the all-reduce does not change the exchange's bytes
    if mode == "exact":
        ratio = 1.0
    join = _all_to_all_hierarchical if mode.startswith("hierarchical") else _all_to_all_flat
    _, _, intra, inter = join(x, cluster, 1.0 if mode == "hierarchical-exact" else ratio)
    return intra, inter


def _ring_levels(nbytes_per_edge: float, cl: Cluster) -> tuple[float, float]:
    """(intra, inter) seconds of ``nbytes_per_edge`` through every edge of a node-major ring."""
    g, n = cl.devices_per_node, cl.nodes
    share = (g - 1) / g if cl.intra_shared else 1.0
    intra = nbytes_per_edge * share / cl.intra_bandwidth if g > 1 else 0.0
    inter = nbytes_per_edge / (g * cl.inter_bandwidth) if n > 1 else 0.0
    if n > 1:  # the node's edge bytes through its bucket
        inter -= _burst_saving(nbytes_per_edge / g, cl)
    return intra, inter


def _ring_latency(cl: Cluster) -> float:
    return cl.inter_latency if cl.nodes > 1 else cl.intra_latency


def predict(
    model: ModelSpec, cluster: Cluster, compute: Compute, codecs: Codecs, mode: str
) -> StepTime:
    """Predicts one training step of ``model`` on ``cluster`` in ``mode`` (module docstring).

    Args:
      model: the DLRM's shapes.
      cluster: devices and links.
      compute: per-device throughput.
      codecs: codec throughputs and ratios.
      mode: one of ``MODES``.

    Returns:
      A :class:`StepTime` (seconds per part; serial and overlapped step).

    Raises:
      ValueError: unknown mode.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    cl, p, n = cluster, cluster.devices, cluster.nodes
    sd = cl.serial_devices
    b = model.global_batch / p
    f_bottom, f_top = model.forward_flops()
    bottom_f = sd * b * f_bottom / compute.flops_per_s
    top_f = sd * b * f_top / compute.flops_per_s
    lookup_bytes = (
        model.global_batch
        * (model.num_tables / p)
        * model.mean_bag()
        * model.embedding_dim
        * model.value_bytes
    )
    lookup = sd * lookup_bytes / compute.memory_bytes_per_s
    upd = (2 if model.optimizer == "sgd" else 4) * lookup
    opt = sd * model.dense_params() * 4 * (3 if model.optimizer == "sgd" else 5)
    opt /= compute.memory_bytes_per_s

    x = model.exchange_bytes(p)
    s = model.gradient_bytes()
    comp = decomp = 0.0
    compressed_ar = mode in AR_MODES
    exchange = AR_MODES.get(mode, mode)
    if exchange == "exact":
        fwd = bwd = _all_to_all_flat(x, cl, 1.0)
    elif exchange in FIXED_BYTES_PER_VALUE:
        r = model.value_bytes / FIXED_BYTES_PER_VALUE[exchange](model.embedding_dim)
        fwd = bwd = _all_to_all_flat(x, cl, r)
        comp = decomp = 2 * x / codecs.cast_bytes_per_s
    elif exchange == "flat":
        fwd = _all_to_all_flat(x, cl, codecs.forward.ratio)
        bwd = _all_to_all_flat(x, cl, codecs.bwd.ratio)
        for c in (codecs.forward, codecs.bwd):
            dc, dd = c.cost(x, x)
            comp, decomp = comp + dc, decomp + dd
    elif exchange == "hierarchical-exact":
        fwd = bwd = _all_to_all_hierarchical(x, cl, 1.0)
    else:
        fwd = _all_to_all_hierarchical(x, cl, codecs.forward.ratio)
        bwd = _all_to_all_hierarchical(x, cl, codecs.bwd.ratio)
        remote = x * (n - 1) / n
        for c in (codecs.forward, codecs.bwd):
            dc, dd = c.cost(remote, remote)
            comp, decomp = comp + dc, decomp + dd

    if compressed_ar:
        rg = codecs.gradient.ratio
        rs_i, rs_e, bi, be = _all_to_all_flat(s, cl, rg)
        # ring all-gather of the reduced frames (S / its ratio: the reduced sums re-coded)
        ag_edge = (p - 1) / p * s / (codecs.gradient_gather_ratio or rg)
        ag_i, ag_e = _ring_levels(ag_edge, cl)
        ar_i, ar_e = rs_i + ag_i, rs_e + ag_e
        ar = max(rs_i, rs_e) + max(ag_i, ag_e) + (p - 1) * _ring_latency(cl)
        ar_bytes_i, ar_bytes_e = bi + ag_edge * (cl.devices_per_node > 1), be + ag_edge * (n > 1)
        dc, dd = codecs.gradient.cost(s * (1 + 1 / p), 2 * s * (p - 1) / p)
        comp, decomp = comp + dc, decomp + dd
    else:
        edge = 2 * (p - 1) / p * s
        ar_i, ar_e = _ring_levels(edge, cl)
        ar = max(ar_i, ar_e) + (2 * (p - 1) * _ring_latency(cl) if p > 1 else 0.0)
        if cl.tree_allreduce and p > 1:
            tree_i = 2 * s / cl.intra_bandwidth if cl.devices_per_node > 1 else 0.0
            tree_e = 2 * s / (cl.devices_per_node * cl.inter_bandwidth) if n > 1 else 0.0
            tree = max(tree_i, tree_e) + 2 * math.ceil(math.log2(p)) * _ring_latency(cl)
            if tree < ar:
                ar, ar_i, ar_e = tree, tree_i, tree_e
        ar_bytes_i = edge if cl.devices_per_node > 1 else 0.0
        ar_bytes_e = edge / cl.devices_per_node if n > 1 else 0.0

    hier = exchange.startswith("hierarchical")
    join = (lambda a, b: a + b) if hier else max
    t_fwd, t_bwd = join(fwd[0], fwd[1]), join(bwd[0], bwd[1])
    comp, decomp = sd * comp, sd * decomp
    fixed = compute.device_overhead_s + (codecs.exchange_overhead_s if mode in LIBRARY_MODES else 0)
    fixed *= sd
    compute_s = lookup + bottom_f + top_f + 2 * bottom_f + 2 * top_f + upd + opt
    serial = compute_s + t_fwd + t_bwd + ar + comp + decomp + fixed
    overlap = (
        fixed
        + compute_s
        - bottom_f
        - 2 * bottom_f
        + max(t_fwd, bottom_f)
        + max(t_bwd, 2 * bottom_f)
        + ar
        + comp
        + decomp
    )
    return StepTime(
        mode=mode,
        lookup_s=lookup,
        bottom_forward_s=bottom_f,
        top_forward_s=top_f,
        bottom_backward_s=2 * bottom_f,
        top_backward_s=2 * top_f,
        embedding_update_s=upd,
        optimizer_s=opt,
        exchange_forward_intra_s=fwd[0],
        exchange_forward_inter_s=fwd[1],
        exchange_forward_s=t_fwd,
        exchange_backward_intra_s=bwd[0],
        exchange_backward_inter_s=bwd[1],
        exchange_backward_s=t_bwd,
        allreduce_intra_s=ar_i,
        allreduce_inter_s=ar_e,
        allreduce_s=ar,
        compress_s=comp,
        decompress_s=decomp,
        overhead_s=fixed,
        intra_bytes=fwd[2] + bwd[2] + ar_bytes_i,
        inter_bytes=fwd[3] + bwd[3] + ar_bytes_e,
        step_s=serial,
        step_overlap_s=overlap,
    )


def calibrate_compute(
    model: ModelSpec,
    cluster: Cluster,
    codecs: Codecs,
    measured_step_s: float,
    *,
    flops_per_byte: float,
    mode: str = "exact",
    overlap: bool = False,
    device_overhead_s: float = 0.0,
) -> Compute:
    """The :class:`Compute` whose predicted ``mode`` step equals ``measured_step_s``.

    Dense FLOP/s and memory bytes/s keep the ratio ``flops_per_byte`` (the machine balance, an
    assumption: it splits the measured compute into its parts). Solved by bisection on the
    scale (the step decreases monotonically with it). ``device_overhead_s`` is kept as given
    (``Compute.device_overhead_s``), so the FLOP/s take the rest of the step.

    Raises:
      ValueError: ``measured_step_s`` is not above the communication, codec and overhead time
        alone.
    """

    def at(flops: float) -> Compute:
        return Compute(flops, flops / flops_per_byte, device_overhead_s)

    floor = predict(model, cluster, at(1e300), codecs, mode)
    if not measured_step_s > floor.step(overlap):
        raise ValueError(
            f"measured step {measured_step_s} s is not above the predicted communication and "
            f"codec time {floor.step(overlap)} s"
        )
    lo, hi = 1e-6, 1e18  # FLOP/s
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        t = predict(model, cluster, at(mid), codecs, mode)
        if t.step(overlap) > measured_step_s:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    return at(math.sqrt(lo * hi))
