"""The step-time check's inputs, read from the committed results, and the form of its outputs.

Shared by ``step_time_check`` (the model against the two-node testbed) and
``step_time_projections`` (GPU clusters): the codec benchmark's speeds and ratios
(:func:`codec_speeds`), a run file's median step per (rate, mode) (:func:`median_runs`) and
each run's bytes and ratios (:func:`stats_inputs`), the testbed as a cluster of the model
(:func:`testbed_cluster`) with the codecs of a run (:func:`testbed_codecs`). Results are
rounded to 6 significant digits (:func:`rounded`, :func:`dump_json`) and carry no time stamp,
so they regenerate byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from models.dlrm.cluster import step_time as st

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: the two-node rates sweep (2 x 2 devices): the check's second file, the inputs of the points
#: predicted ahead and the projections' gradient compression ratio
RATES_FILE = "netns_two_node_rates.json"
LATENCY_TESTBED_S = 50e-6  # TCP message latency on the veth / loopback (assumed)
#: The committed two-node run files, each with the codec benchmark it is predicted with: the
#: runs made before the CPU codec stopped using pext/pdep on AMD Zen 1/2 with codec.json (the
#: nearest measurement then, an Intel Xeon VM); the runs made after it with codec_testbed.json
#: (the library's codecs measured on the testbed's own machine, with the code of those runs).
CHECK_FILES = (
    ("netns_two_node.json", "codec.json"),
    (RATES_FILE, "codec.json"),
    ("netns_two_node_500mbit.json", "codec_testbed.json"),
    ("netns_two_node_2x4.json", "codec_testbed.json"),
)
#: library trainer modes (bench/testbed/netns_bench.py) -> (model mode, gradient codec)
BENCH_MODES = {
    "exact": ("exact", None),
    "compressed-flat": ("flat", None),
    "compressed-hierarchical": ("hierarchical", None),
    "compressed-hierarchical-ar": ("hierarchical-ar", "jlc-auto"),
    "compressed-hierarchical-ar-fixed": ("hierarchical-ar", "jlc-fixed"),
}


def rounded(x: Any) -> Any:
    """``x`` with every float rounded to 6 significant digits (non-finite ones as strings),
    through dicts, lists and tuples."""
    if isinstance(x, float):
        if not math.isfinite(x) or x == 0:
            return x if math.isfinite(x) else str(x)
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [rounded(v) for v in x]
    return x


def sha256(path: Path) -> str:
    """The hex SHA-256 of a file (the check records the inputs it read)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def codec_speeds(
    codec_json: dict, codec: str, preset: str = "terabyte", eb_rel: float | None = None
) -> dict[str, float]:
    """Median compress / decompress throughput (bytes/s of raw float32) and the ratio
    ``sum raw / sum compressed`` of ``codec`` over the ``preset`` dumps in ``codec.json`` (all
    error bounds, or only ``eb_rel``).

    Raises:
      ValueError: no ok row of that codec on those dumps.
    """
    rows = [
        r
        for r in codec_json["rows"]
        if r.get("codec") == codec
        and str(r.get("dump", "")).startswith(preset)
        and r.get("status") == "ok"
        and (eb_rel is None or r.get("eb_rel") == eb_rel)
    ]
    if not rows:
        raise ValueError(f"codec.json has no ok row of {codec!r} on {preset} dumps")
    return {
        "compress_bytes_per_s": statistics.median(r["compress_gbps"] for r in rows) * 1e9,
        "decompress_bytes_per_s": statistics.median(r["decompress_gbps"] for r in rows) * 1e9,
        "ratio": sum(r["raw_bytes"] for r in rows) / sum(r["compressed_bytes"] for r in rows),
        "rows": len(rows),
    }


def rate_name_bits(rate: str) -> float:
    """Bit/s of a rate name (``1gbit``, ``500mbit``; ``unlimited`` is infinite)."""
    if rate == "unlimited":
        return math.inf
    units = {"gbit": 1e9, "mbit": 1e6}
    for u, f in units.items():
        if rate.endswith(u):
            return float(rate[: -len(u)]) * f
    raise ValueError(f"rate {rate!r}: expected NNgbit, NNmbit or unlimited")


def median_runs(runs: Sequence[dict]) -> dict[tuple[str, str], dict]:
    """(rate, mode) -> the first ok run plus ``step_time_s`` = the median over its rounds."""
    out: dict[tuple[str, str], dict] = {}
    keys = sorted({(r["rate"], r["mode"]) for r in runs})
    for k in keys:
        ok = [r for r in runs if (r["rate"], r["mode"]) == k and r.get("status") == "ok"]
        if ok and all(r.get("step_time_s") for r in ok):
            times = [r["step_time_s"] for r in ok]
            out[k] = dict(ok[0], step_time_s=statistics.median(times), round_times_s=times)
    return out


def testbed_cluster(
    devices: int,
    probe_bits: float,
    loopback_bits: float,
    cores: int = 2,
    processes: int = 2,
    burst_bytes: float = 0.0,
) -> st.Cluster:
    """The two-node testbed: one veth per node (process) shared by its devices, one loopback
    per node, ``devices`` devices per process on ``cores / processes`` cores each;
    ``burst_bytes`` the rate limiter's token bucket (``netns_testbed.tbf_burst_bytes``; 0:
    not modelled)."""
    return st.Cluster(
        nodes=processes,
        devices_per_node=devices,
        intra_bandwidth=loopback_bits / 8 / devices,
        inter_bandwidth=probe_bits / 8 / devices,
        intra_latency=LATENCY_TESTBED_S,
        inter_latency=LATENCY_TESTBED_S,
        serial_devices=max(1.0, devices * processes / cores),
        intra_shared=True,
        inter_burst_bytes=burst_bytes,
    )


def stats_inputs(run: dict, devices: int) -> dict[str, float]:
    """Bytes input of one run from its exchange statistics (all devices, per step)."""
    x = run["raw_bytes_per_step"] / devices
    inter_raw, inter_moved = (
        run["inter_node_raw_bytes_per_step"],
        run["inter_node_moved_bytes_per_step"],
    )
    if run.get("exchange_topology") == "flat":
        ratio = run["raw_bytes_per_step"] / run["moved_bytes_per_step"]
    else:
        ratio = inter_raw / inter_moved
    out = {
        "exchange_bytes_per_device": x,
        "gradient_bytes_per_device": run["allreduce_raw_bytes_per_step"] / (2 * devices),
        "exchange_ratio": ratio,
        "gradient_ratio": run["allreduce_raw_bytes_per_step"]
        / run["allreduce_moved_bytes_per_step"],
    }
    scatter = run.get("allreduce_scatter_moved_bytes_per_step") or 0.0
    gather = run.get("allreduce_gather_moved_bytes_per_step") or 0.0
    if scatter > 0 and gather > 0:  # recorded apart (runs made after they were): each phase's
        half = run["allreduce_raw_bytes_per_step"] / 2
        out.update(gradient_ratio=half / scatter, gradient_gather_ratio=half / gather)
    return out


def testbed_codecs(
    speeds: dict[str, dict],
    ratio: float,
    grad_codec: str | None,
    grad_ratio: float,
    gather_ratio: float | None = None,
) -> st.Codecs:
    """The testbed's codecs: the exchange at ``jlc-auto``'s speeds and ``ratio``, the gradient
    all-reduce at ``grad_codec``'s (``jlc-auto`` when None), ``grad_ratio`` and its all-gather
    at ``gather_ratio`` (None: ``grad_ratio``)."""
    ex = speeds["jlc-auto"]
    gr = speeds[grad_codec or "jlc-auto"]
    return st.Codecs(
        forward=st.CodecSpec(ex["compress_bytes_per_s"], ex["decompress_bytes_per_s"], ratio),
        gradient=st.CodecSpec(gr["compress_bytes_per_s"], gr["decompress_bytes_per_s"], grad_ratio),
        gradient_gather_ratio=gather_ratio,
    )


def run_codecs(speeds: dict[str, dict], inputs: dict, grad_codec: str | None) -> st.Codecs:
    """:func:`testbed_codecs` at the ratios of one run's :func:`stats_inputs` (the all-gather's
    own where it was recorded)."""
    return testbed_codecs(
        speeds,
        inputs["exchange_ratio"],
        grad_codec,
        inputs["gradient_ratio"],
        inputs.get("gradient_gather_ratio"),
    )


def fmt_ms(x: float) -> str:
    """Seconds as whole milliseconds (``"186 ms"``)."""
    return f"{x * 1e3:.0f} ms"


def dump_json(obj: Any) -> str:
    """The committed JSON form of a result: rounded, indented, keys sorted."""
    return json.dumps(rounded(obj), indent=1, sort_keys=True) + "\n"
