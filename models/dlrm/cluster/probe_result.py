"""What the probe behind ``--compression auto`` measured, as the step-time model's inputs.

Pure Python (no jax): a link per level fitted from two timed exact all-to-alls (``Link``,
``fit_link``), and the ``Probe`` (links, codecs, compute) that
:mod:`models.dlrm.cluster.exchange_probe` measures on the run's mesh and
:mod:`models.dlrm.cluster.auto_exchange` decides from. Units: bytes, seconds, bytes/s per
device and direction.

Reference: R. Thakur, R. Rabenseifner, W. Gropp, IJHPCA 19(1), 2005, sec. 4.5 (the pairwise
all-to-all the fit assumes).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from models.dlrm.cluster import step_time as st

#: FLOP per byte of memory traffic assumed to split compute into MLP and embedding-row time
#: (the machine balance): a CPU core as in the testbed check (bench/testbed/step_time_check.py), a GPU as in
#: its projections (200 TFLOP/s achieved over 2.5 TB/s of HBM)
MACHINE_BALANCE = {"cpu": 5.0, "gpu": 80.0}


@dataclasses.dataclass(frozen=True)
class Link:
    """One level's measured link: an alpha-beta fit of timed exact all-to-alls.

    Attributes:
      level: ``"intra-node"`` or ``"inter-node"``.
      axis: the mesh axis the all-to-alls ran over.
      peers: the other devices of that axis (``axis size - 1``; 0: no link at this level).
      bandwidth: bytes/s per device and direction (``math.inf`` when not measurable).
      latency: seconds per message (>= 0).
      sizes: the bytes per peer timed.
      seconds: the median seconds of each size.
      override: True where ``Config.auto_inter_gbits`` replaced the measured bandwidth.
    """

    level: str
    axis: str
    peers: int
    bandwidth: float
    latency: float
    sizes: tuple[int, ...] = ()
    seconds: tuple[float, ...] = ()
    override: bool = False

    def describe(self) -> str:
        if self.peers == 0:
            return f"{self.level}: no peers"
        bw = "unbounded" if math.isinf(self.bandwidth) else f"{self.bandwidth / 1e9:.3g} GB/s"
        told = " (--auto-inter-gbits, not measured)" if self.override else ""
        timed = ", ".join(f"{n} B {t * 1e3:.3g} ms" for n, t in zip(self.sizes, self.seconds))
        peers = f"{self.peers} peer" + ("s" if self.peers > 1 else "")
        return (
            f"{self.level} ({self.axis}, {peers}): {bw}{told} per device, latency "
            f"{self.latency * 1e6:.3g} us (all-to-all per peer {timed})"
        )


def fit_link(
    level: str, axis: str, peers: int, sizes: Sequence[int], seconds: Sequence[float]
) -> Link:
    """Bandwidth and latency of ``peers`` pairwise messages per all-to-all from two timings.

    The pairwise all-to-all takes ``t(n) = peers * (latency + n / bandwidth)`` for ``n`` bytes
    per peer (Thakur, Rabenseifner & Gropp 2005, sec. 4.5); the two sizes give the slope and
    the intercept. A slope <= 0 (the bytes cost nothing measurable) gives an unbounded
    bandwidth and the shorter time's latency; a negative intercept a latency of 0.

    Args:
      level, axis: names for the log.
      peers: other devices of the axis (0: no link; the timings are ignored).
      sizes: two sizes, bytes per peer, ascending.
      seconds: the median time of an all-to-all at each size.

    Raises:
      ValueError: not two ascending sizes with one time each.
    """
    if len(sizes) != 2 or len(seconds) != 2 or not sizes[0] < sizes[1]:
        raise ValueError(f"two ascending sizes with a time each, got {sizes}, {seconds}")
    if peers == 0:
        return Link(level, axis, 0, math.inf, 0.0, tuple(sizes), tuple(seconds))
    slope = (seconds[1] - seconds[0]) / (peers * (sizes[1] - sizes[0]))  # s per byte
    bandwidth = 1.0 / slope if slope > 0 else math.inf
    latency = max(0.0, seconds[0] / peers - sizes[0] * slope) if slope > 0 else min(seconds) / peers
    return Link(level, axis, peers, bandwidth, latency, tuple(sizes), tuple(seconds))


@dataclasses.dataclass(frozen=True)
class Probe:
    """What the trainer measured before choosing (:mod:`models.dlrm.cluster.exchange_probe`).

    Attributes:
      intra: the intra-node link (the whole 1-D mesh on one node).
      inter: the inter-node link (``peers`` 0 on one node).
      codec: the exchange codec's throughput per device and its compression ratio.
      compute: dense FLOP/s and memory bytes/s per device.
      gradient_codecs: ``Config.grad_codec`` -> the compressed gradient all-reduce's codec
        with it, for each one timed (``grad_allreduce="auto"``; empty where none was).
      notes: how each was measured or assumed (one line each, for the log).
      seconds: wall time of the probe.
    """

    intra: Link
    inter: Link
    codec: st.CodecSpec
    compute: st.Compute
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    gradient_codecs: dict[str, st.CodecSpec] = dataclasses.field(default_factory=dict)

    def cluster(self, nodes: int, devices_per_node: int, *, tree_allreduce: bool) -> st.Cluster:
        """The step-time model's Cluster of ``nodes`` x ``devices_per_node`` at these links.

        The links and throughputs were measured with every device busy at once, so the
        sharing of a host's cores and loopback among its devices is in the figures
        (``serial_devices`` 1, ``intra_shared`` False)."""
        return st.Cluster(
            nodes=nodes,
            devices_per_node=devices_per_node,
            intra_bandwidth=self.intra.bandwidth,
            inter_bandwidth=self.inter.bandwidth,
            intra_latency=self.intra.latency,
            inter_latency=self.inter.latency,
            tree_allreduce=tree_allreduce,
        )
