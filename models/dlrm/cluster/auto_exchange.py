"""``Config.compression = "auto"``: the embedding exchange chosen by the step-time model.

Pure Python (no jax): the decision from a model, a cluster, a compute throughput and a codec
(:func:`decide`), the lines the trainer logs at the start and the end of a run, and the
end-of-run comparison of the measured step with the predicted one (:func:`compare`). The
measurements that feed it (the link per level, the codec, the compute throughput) are taken on
the run's mesh by :mod:`models.dlrm.cluster.exchange_probe`.

Decision rule. The candidates are the trainer's exchanges, as modes of
:func:`models.dlrm.cluster.step_time.predict`:

* ``exact``: ``jax.lax.all_to_all`` (``compression="off"``);
* ``flat``: every block compressed (``compression="on"``, ``exchange_topology="flat"``);
* ``hierarchical``: exact within a node, compressed across nodes (``exchange_topology=
  "hierarchical"``); only where the mesh has more than one node of more than one device.

An explicit ``exchange_topology`` (``"flat"`` or ``"hierarchical"``) keeps only that
compressed candidate. Each candidate's step is predicted (with the exchange's communication
overlapped with the bottom MLP, the convention of the testbed check in ``docs/step_time.md``,
or serial); the fastest compressed candidate is chosen when its predicted step is at least
``margin`` (``Config.auto_margin``, default 5%) shorter than the exact one's, else ``exact``:
compress only where it pays by more than the model's own error.

Reference: Feng et al., SC24, arXiv 2407.04272 (the compressed exchange); the cost model and
its sources: :mod:`models.dlrm.cluster.step_time`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from models.dlrm.cluster import step_time as st
from models.dlrm.metrics import format_bytes

#: trainer exchanges the decision picks from (step_time modes)
CANDIDATES = ("exact", "flat", "hierarchical")
#: mode -> (Config.compression, Config.exchange_topology)
TRAINER_SETTINGS = {
    "exact": ("off", "flat"),
    "flat": ("on", "flat"),
    "hierarchical": ("on", "hierarchical"),
}
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
      notes: how each was measured or assumed (one line each, for the log).
      seconds: wall time of the probe.
    """

    intra: Link
    inter: Link
    codec: st.CodecSpec
    compute: st.Compute
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

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


@dataclasses.dataclass(frozen=True)
class Decision:
    """The chosen exchange and why.

    Attributes:
      mode: the chosen candidate (``CANDIDATES``).
      compression: its ``Config.compression`` ("on" / "off").
      topology: its ``Config.exchange_topology`` ("flat" / "hierarchical").
      reason: one sentence with the predicted gain.
      predictions: candidate -> the predicted :class:`models.dlrm.cluster.step_time.StepTime`.
      margin: the gain a compressed candidate had to reach (fraction of the exact step).
      overlap: the predicted steps overlap the exchange with the bottom MLP.
    """

    mode: str
    compression: str
    topology: str
    reason: str
    predictions: dict[str, st.StepTime]
    margin: float
    overlap: bool

    def step_s(self, mode: str | None = None) -> float:
        """The predicted step of ``mode`` (default: the chosen one), seconds."""
        return self.predictions[mode or self.mode].step(self.overlap)


def candidates(cluster: st.Cluster, topology: str = "auto") -> tuple[str, ...]:
    """The candidates on ``cluster`` for ``Config.exchange_topology`` ``topology``.

    ``"auto"``: exact, flat, and hierarchical where there are several nodes of several
    devices; ``"flat"``: exact and flat; ``"hierarchical"``: exact and hierarchical (exact
    alone on one node, where the hierarchical exchange is the exact one).

    Raises:
      ValueError: an unknown topology.
    """
    two_level = cluster.nodes > 1 and cluster.devices_per_node > 1
    if topology == "auto":
        return ("exact", "flat", "hierarchical") if two_level else ("exact", "flat")
    if topology == "flat":
        return ("exact", "flat")
    if topology == "hierarchical":
        return ("exact", "hierarchical") if cluster.nodes > 1 else ("exact",)
    raise ValueError(f"topology must be auto, flat or hierarchical, got {topology!r}")


def codecs_for(codec: st.CodecSpec, *, backward_compressed: bool) -> st.Codecs:
    """The step-time model's Codecs of a run: ``codec`` on the forward exchange, on the
    backward one only when ``Config.exchange_backward`` is "compressed" (else free, ratio 1:
    the exact transposed exchange); the gradient all-reduce exact (free, ratio 1)."""
    free = st.CodecSpec(math.inf, math.inf, 1.0)
    return st.Codecs(forward=codec, gradient=free, backward=codec if backward_compressed else free)


def decide(
    model: st.ModelSpec,
    cluster: st.Cluster,
    compute: st.Compute,
    codecs: st.Codecs,
    *,
    modes: Sequence[str] = CANDIDATES,
    margin: float = 0.05,
    overlap: bool = True,
    topology: str = "auto",
) -> Decision:
    """Chooses the exchange (module docstring): the fastest predicted compressed candidate
    of ``modes`` if it beats ``exact`` by at least ``margin``, else ``exact``.

    Args:
      model, cluster, compute, codecs: the step-time model's inputs
        (:func:`models.dlrm.cluster.step_time.predict`).
      modes: the candidates (``candidates(cluster, topology)``); must hold ``"exact"``.
      margin: the least predicted gain, a fraction of the exact step in ``[0, 1)``.
      overlap: compare the overlapped steps (``StepTime.step_overlap_s``), else the serial.
      topology: ``Config.exchange_topology``: the topology an ``exact`` choice keeps when it
        was given (``"flat"`` when ``"auto"``: exact is one flat all-to-all).

    Returns:
      A :class:`Decision`.

    Raises:
      ValueError: ``modes`` without ``"exact"`` or with a mode not in ``CANDIDATES``, a
        margin outside ``[0, 1)``.
    """
    if "exact" not in modes or set(modes) - set(CANDIDATES):
        raise ValueError(f"modes must hold 'exact' and only {CANDIDATES}, got {tuple(modes)}")
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    preds = {m: st.predict(model, cluster, compute, codecs, m) for m in modes}
    exact = preds["exact"].step(overlap)
    compressed = sorted((preds[m].step(overlap), m) for m in modes if m != "exact")
    if compressed:
        best_t, best = compressed[0]
        gain = 1.0 - best_t / exact
        if gain >= margin:
            mode = best
            reason = (
                f"{best} is predicted {gain:.1%} faster than exact (at least the {margin:.0%} "
                "margin)"
            )
        else:
            mode = "exact"
            how = f"{gain:.1%} faster" if gain >= 0 else f"{-gain:.1%} slower"
            reason = (
                f"the best compressed candidate, {best}, is predicted {how} than exact (less "
                f"than the {margin:.0%} margin)"
            )
    else:
        mode, reason = "exact", "no compressed candidate on this mesh"
    compression, topo = TRAINER_SETTINGS[mode]
    if mode == "exact" and topology != "auto":
        topo = topology
    return Decision(mode, compression, topo, reason, preds, margin, overlap)


# ------------------------------------------------------------------------------ the log
def describe_split(t: st.StepTime, overlap: bool) -> str:
    """One predicted step, milliseconds: the step and its parts (compute, the forward and
    backward exchange per level, the gradient all-reduce, compress, decompress)."""

    def ms(x: float) -> str:
        return f"{x * 1e3:.3g}"

    return (
        f"{t.mode}: step {ms(t.step(overlap))} ms = compute {ms(t.compute_s)} + exchange fwd "
        f"{ms(t.exchange_forward_s)} (intra {ms(t.exchange_forward_intra_s)}, inter "
        f"{ms(t.exchange_forward_inter_s)}) + bwd {ms(t.exchange_backward_s)} (intra "
        f"{ms(t.exchange_backward_intra_s)}, inter {ms(t.exchange_backward_inter_s)}) + "
        f"all-reduce {ms(t.allreduce_s)} + compress {ms(t.compress_s)} + decompress "
        f"{ms(t.decompress_s)}" + (" (exchange overlapped with the bottom MLP)" if overlap else "")
    )


def start_lines(probe: Probe, decision: Decision) -> list[str]:
    """The block the trainer logs before compiling: links, codec, compute, each candidate's
    predicted split and the choice."""
    c = probe.codec
    lines = [
        f"auto exchange: probe {probe.seconds:.2f} s",
        "  link " + probe.intra.describe(),
        "  link " + probe.inter.describe(),
        f"  codec: compress {c.compress_bytes_per_s / 1e9:.3g} GB/s, decompress "
        f"{c.decompress_bytes_per_s / 1e9:.3g} GB/s per device, compression ratio {c.ratio:.3g}x",
        f"  compute: {probe.compute.flops_per_s / 1e9:.3g} GFLOP/s, memory "
        f"{probe.compute.memory_bytes_per_s / 1e9:.3g} GB/s per device",
        *("  " + n for n in probe.notes),
        *(
            "  predicted " + describe_split(t, decision.overlap)
            for t in decision.predictions.values()
        ),
        f"  choice: {decision.mode} (compression {decision.compression}, topology "
        f"{decision.topology}): {decision.reason}",
    ]
    return lines


def compare(
    decision: Decision,
    model: st.ModelSpec,
    cluster: st.Cluster,
    ratio: float,
    intervals: Sequence[dict],
) -> dict:
    """The measured step and forward-exchange bytes per level next to the predicted ones.

    Args:
      decision: the run's decision (its chosen mode's prediction).
      model, cluster: as given to :func:`decide`.
      ratio: the compression ratio the prediction used.
      intervals: the run's logged intervals, in order, each ``{"steps", "seconds",
        "intra_node_bytes", "inter_node_moved_bytes"}`` (steps in the interval, its wall
        seconds, the exchange statistics summed over its steps and every device). The first
        is left out when there are more (its steps warm up caches and the input pipeline);
        the train step's compilation is in none of them.

    Returns:
      ``{"mode", "intervals_used", "steps", "measured": {...}, "predicted": {...},
      "error": {...}}`` with ``step_s``, ``intra_node_bytes`` and ``inter_node_bytes`` (per
      device and step, forward exchange) in each of measured and predicted, and ``error`` the
      relative error ``predicted / measured - 1`` of each (None where the measured value is 0).

    Raises:
      ValueError: no interval.
    """
    if not intervals:
        raise ValueError("no logged interval to compare with")
    used = list(intervals[1:] if len(intervals) > 1 else intervals)
    steps = sum(r["steps"] for r in used)
    p = cluster.devices
    measured = {
        "step_s": sum(r["seconds"] for r in used) / steps,
        "intra_node_bytes": sum(r["intra_node_bytes"] for r in used) / (steps * p),
        "inter_node_bytes": sum(r["inter_node_moved_bytes"] for r in used) / (steps * p),
    }
    intra, inter = st.forward_exchange_bytes(model, cluster, decision.mode, ratio)
    predicted = {"step_s": decision.step_s(), "intra_node_bytes": intra, "inter_node_bytes": inter}
    error = {k: (predicted[k] / v - 1.0 if v else None) for k, v in measured.items()}
    return {
        "mode": decision.mode,
        "intervals_used": len(used),
        "steps": steps,
        "measured": measured,
        "predicted": predicted,
        "error": error,
    }


def hindsight(
    decision: Decision,
    model: st.ModelSpec,
    cluster: st.Cluster,
    codecs: st.Codecs,
    measured_step_s: float,
    flops_per_byte: float,
) -> dict | None:
    """The choice made again with the compute the measured step implies.

    The probe times one matmul, not a step, so its compute misses what a real step also
    costs (dispatch, the input pipeline, collectives' fixed work); here the compute is
    :func:`models.dlrm.cluster.step_time.calibrate_compute` of the chosen mode at the measured step
    (links and codec as probed, the probe's machine balance ``flops_per_byte``), and every
    candidate is predicted and decided again with it, as the testbed check calibrates.

    Returns:
      ``{"compute_flops_per_s", "predicted_step_s": {mode: s}, "choice", "agrees",
      "reason"}``, or None where the measured step is not above the predicted communication
      and codec time (no compute fits it).
    """
    try:
        compute = st.calibrate_compute(
            model,
            cluster,
            codecs,
            measured_step_s,
            flops_per_byte=flops_per_byte,
            mode=decision.mode,
            overlap=decision.overlap,
        )
    except ValueError:
        return None
    again = decide(
        model,
        cluster,
        compute,
        codecs,
        modes=tuple(decision.predictions),
        margin=decision.margin,
        overlap=decision.overlap,
    )
    return {
        "compute_flops_per_s": compute.flops_per_s,
        "predicted_step_s": {m: again.step_s(m) for m in again.predictions},
        "choice": again.mode,
        "agrees": again.mode == decision.mode,
        "reason": again.reason,
    }


def end_lines(comparison: dict) -> list[str]:
    """The block the trainer logs at the end: measured vs predicted step and bytes."""
    m, p, e = comparison["measured"], comparison["predicted"], comparison["error"]

    def err(k: str) -> str:
        return "n/a" if e[k] is None else f"{e[k]:+.1%}"

    lines = [
        f"auto exchange ({comparison['mode']}), measured vs predicted over "
        f"{comparison['steps']} steps ({comparison['intervals_used']} intervals, the first "
        "left out when there are more):",
        f"  step {m['step_s'] * 1e3:.3g} ms vs {p['step_s'] * 1e3:.3g} ms (error {err('step_s')})",
        f"  forward exchange per device and step: intra-node {format_bytes(m['intra_node_bytes'])}"
        f" vs {format_bytes(p['intra_node_bytes'])} ({err('intra_node_bytes')}), inter-node "
        f"{format_bytes(m['inter_node_bytes'])} vs {format_bytes(p['inter_node_bytes'])} "
        f"({err('inter_node_bytes')})",
    ]
    h = comparison.get("hindsight")
    if h is None:
        return lines + [
            "  hindsight: none (the measured step is shorter than the predicted communication "
            "and codec time alone: no compute fits it)"
        ]
    steps = ", ".join(f"{m} {t * 1e3:.3g} ms" for m, t in h["predicted_step_s"].items())
    verdict = "the same choice" if h["agrees"] else f"{h['choice']} instead"
    return lines + [
        f"  hindsight, with the compute the measured step implies "
        f"({h['compute_flops_per_s'] / 1e9:.3g} GFLOP/s per device): {steps}: {verdict} "
        f"({h['reason']})"
    ]


def to_json(probe: Probe, decision: Decision, comparison: dict | None) -> dict:
    """The probe, the decision and the end-of-run comparison as a JSON-ready dict (the
    ``auto_exchange`` of the run's final record)."""

    def finite(x):
        return x if not isinstance(x, float) or math.isfinite(x) else str(x)

    return {
        "probe": {
            "intra": {k: finite(v) for k, v in dataclasses.asdict(probe.intra).items()},
            "inter": {k: finite(v) for k, v in dataclasses.asdict(probe.inter).items()},
            "codec": {k: finite(v) for k, v in dataclasses.asdict(probe.codec).items()},
            "compute": dataclasses.asdict(probe.compute),
            "notes": list(probe.notes),
            "seconds": probe.seconds,
        },
        "candidates": {
            m: {k: finite(v) for k, v in t.as_dict().items()}
            for m, t in decision.predictions.items()
        },
        "choice": decision.mode,
        "compression": decision.compression,
        "exchange_topology": decision.topology,
        "reason": decision.reason,
        "margin": decision.margin,
        "overlap": decision.overlap,
        "comparison": comparison,
    }


@dataclasses.dataclass(frozen=True)
class AutoChoice:
    """A run's automatic choice: what the trainer logs at its start and compares at its end.

    Attributes:
      probe: the measurements.
      decision: the choice.
      model, cluster, codecs: the step-time model's inputs it was made with.
    """

    probe: Probe
    decision: Decision
    model: st.ModelSpec
    cluster: st.Cluster
    codecs: st.Codecs

    def start_lines(self) -> list[str]:
        return start_lines(self.probe, self.decision)

    def finish(self, records: Sequence, start_step: int) -> tuple[list[str], dict]:
        """The end-of-run lines and the JSON of the probe, decision and comparison.

        Args:
          records: the run's ``metrics.TrainRecord`` (read by attribute: ``step``,
            ``seconds``, ``intra_node_bytes``, ``inter_node_moved_bytes``), in order.
          start_step: the step the run started (or resumed) from.
        """
        intervals, last = [], start_step
        for r in records:
            intervals.append(
                {
                    "steps": r.step - last,
                    "seconds": r.seconds,
                    "intra_node_bytes": r.intra_node_bytes,
                    "inter_node_moved_bytes": r.inter_node_moved_bytes,
                }
            )
            last = r.step
        intervals = [i for i in intervals if i["steps"] > 0]
        comparison = None
        lines = ["auto exchange: no logged interval to compare with"]
        if intervals:
            comparison = compare(
                self.decision, self.model, self.cluster, self.probe.codec.ratio, intervals
            )
            balance = self.probe.compute.flops_per_s / self.probe.compute.memory_bytes_per_s
            comparison["hindsight"] = hindsight(
                self.decision,
                self.model,
                self.cluster,
                self.codecs,
                comparison["measured"]["step_s"],
                balance,
            )
            lines = end_lines(comparison)
        return lines, to_json(self.probe, self.decision, comparison)
