"""What the trainer logs about ``--compression auto``: the start block, the end-of-run
comparison of the measured step with the predicted one (``compare``), the choice made again
with the compute the measured step implies (``hindsight``), the JSON of the final record
(``to_json``) and ``AutoChoice``, all of it for one run.

Pure Python (no jax). Units: seconds, bytes per device and step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from models.dlrm.cluster import step_time as st
from models.dlrm.cluster.auto_exchange import CANDIDATE_MODES, Decision, candidate_codecs, decide
from models.dlrm.cluster.probe_result import Probe
from models.dlrm.metrics import format_bytes


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
    """The block the trainer logs before compiling: links, codec, the gradient codecs timed,
    compute, each candidate's predicted split and the choice."""
    c = probe.codec
    grad_codec = f", gradient codec {decision.grad_codec}" if decision.grad_codec else ""
    lines = [
        f"auto exchange: probe {probe.seconds:.2f} s",
        "  link " + probe.intra.describe(),
        "  link " + probe.inter.describe(),
        f"  codec: compress {c.compress_bytes_per_s / 1e9:.3g} GB/s, decompress "
        f"{c.decompress_bytes_per_s / 1e9:.3g} GB/s per device, compression ratio {c.ratio:.3g}x",
        *(
            f"  gradient codec {name}: compress {g.compress_bytes_per_s / 1e9:.3g} GB/s, "
            f"decompress {g.decompress_bytes_per_s / 1e9:.3g} GB/s per device, "
            f"compression ratio {g.ratio:.3g}x"
            for name, g in probe.gradient_codecs.items()
        ),
        f"  compute: {probe.compute.flops_per_s / 1e9:.3g} GFLOP/s, memory "
        f"{probe.compute.memory_bytes_per_s / 1e9:.3g} GB/s per device",
        *("  " + n for n in probe.notes),
        *(
            "  predicted " + describe_split(t, decision.overlap)
            for t in decision.predictions.values()
        ),
        f"  choice: {decision.mode} (compression {decision.compression}, topology "
        f"{decision.topology}, gradient all-reduce {decision.grad_allreduce}{grad_codec}): "
        f"{decision.reason}",
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
    mode, _ = CANDIDATE_MODES[decision.mode]
    intra, inter = st.forward_exchange_bytes(model, cluster, mode, ratio)
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
    (links and codecs as probed, the chosen one's gradient codec from
    ``decision.gradient_codecs``, the probe's machine balance ``flops_per_byte``), and every
    candidate is predicted and decided again with it, as the testbed check calibrates.

    Returns:
      ``{"compute_flops_per_s", "predicted_step_s": {mode: s}, "choice", "agrees",
      "reason"}``, or None where the measured step is not above the predicted communication
      and codec time (no compute fits it).
    """
    mode, chosen = candidate_codecs(codecs, decision.gradient_codecs, decision.mode)
    try:
        compute = st.calibrate_compute(
            model,
            cluster,
            chosen,
            measured_step_s,
            flops_per_byte=flops_per_byte,
            mode=mode,
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
        gradient_codecs=decision.gradient_codecs,
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
            "gradient_codecs": {
                name: {k: finite(v) for k, v in dataclasses.asdict(g).items()}
                for name, g in probe.gradient_codecs.items()
            },
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
        "grad_allreduce": decision.grad_allreduce,
        "grad_codec": decision.grad_codec,
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
