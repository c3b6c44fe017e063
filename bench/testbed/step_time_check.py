"""The step-time model (``models.dlrm.cluster.step_time``) checked against the two-node testbed, and its
projections for GPU clusters.

Subcommands (run from the repository root)::

    python -m bench.testbed.step_time_check check      # -> results/step_time_check.{json,md}
    python -m bench.testbed.step_time_check project    # -> results/step_time_projections.{json,md,png}
    python -m bench.testbed.step_time_check predict --preset mlperf-dcnv2 --nodes 8 --nic-gbit 200

``check`` reads only committed files: the two-node runs (``results/netns_two_node.json``,
``results/netns_two_node_rates.json``), the codec benchmark (``results/codec.json``). Inputs
per run file, measured apart from the points predicted:

* compute: the file's unlimited ``exact`` step (median of its rounds), less the model's
  communication at the unlimited link: :func:`models.dlrm.cluster.step_time.calibrate_compute`.
* codec speed: ``codec.json``'s median compress / decompress throughput over the Terabyte
  dumps and error bounds, ``jlc-auto`` for the exchange and the ``auto`` gradient codec,
  ``jlc-fixed`` for ``--grad-codec fixed``.
* bytes: the exchange statistics each mode's run recorded (raw pooled-embedding bytes, the
  inter-node raw / moved bytes, the gradient all-reduce's raw / moved bytes) give ``X``, ``S``
  and the compression ratios; the backward exchange is taken at the forward's ratio (it is not
  recorded apart).
* links: each rate's TCP probe (``probe_gbits``, payload bit/s through the veth pair); the
  loopback (the in-process level) at the unlimited probe; 50 us per message (assumed).
* layout: 2 nodes (processes) x ``devices_per_process``; 2 cores for 2 processes, so
  ``serial_devices`` = devices per process (one core each).

It also writes predictions for points not yet run ("predicted, not yet measured") with the
command that measures them. Everything ``project`` writes is a projection of the model.

Results are rounded (6 significant digits) and carry no time stamp, so ``check`` regenerates
the committed JSON byte for byte from the committed inputs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from models.dlrm.cluster import step_time as st

RESULTS = Path(__file__).resolve().parents[1] / "results"
#: The committed two-node run files, each with the codec benchmark it is predicted with: the
#: runs made before the CPU codec stopped using pext/pdep on AMD Zen 1/2 with codec.json (the
#: nearest measurement then, an Intel Xeon VM); the runs made after it with codec_testbed.json
#: (the library's codecs measured on the testbed's own machine, with the code of those runs).
CHECK_FILES = (
    ("netns_two_node.json", "codec.json"),
    ("netns_two_node_rates.json", "codec.json"),
    ("netns_two_node_500mbit.json", "codec_testbed.json"),
    ("netns_two_node_2x4.json", "codec_testbed.json"),
)
#: why the points predicted ahead from the 2 x 2 inputs miss on 2 x 4 (docs/step_time.md)
AHEAD_MISSES = (
    "The misses are the 2 x 4 layout's: its unlimited exact step took 242 ms where the 2 x 2 "
    "calibration predicted 186 ms. Four devices per core in each process cost more than the "
    "model's compute term, which only scales the 2 x 2 FLOP/s by the devices sharing a core "
    "(per-device dispatch and the in-process collectives' rendezvous of 4 devices are not in "
    "it); the compressed modes add the codec's own per-device calls. Calibrated on that "
    "layout's own unlimited exact run (the table above), all 15 of its points are within 13%."
)
#: the run file that measured each group of NEW_POINTS (predicted before it was run)
NEW_POINT_FILES = {
    "2x2 at 500 Mbit/s": "netns_two_node_500mbit.json",
    "2x4": "netns_two_node_2x4.json",
}
CHECK_OUT = "step_time_check"
PROJ_OUT = "step_time_projections"
TARGET = 0.15  # the bound on each point's relative error
LATENCY_TESTBED_S = 50e-6  # TCP message latency on the veth / loopback (assumed)
#: machine balance splitting a measured compute time into parts (assumption): CPU core, H100
CPU_FLOPS_PER_BYTE = 5.0
#: library trainer modes (bench/testbed/netns_bench.py) -> (model mode, gradient codec)
BENCH_MODES = {
    "exact": ("exact", None),
    "compressed-flat": ("flat", None),
    "compressed-hierarchical": ("hierarchical", None),
    "compressed-hierarchical-ar": ("hierarchical-ar", "jlc-auto"),
    "compressed-hierarchical-ar-fixed": ("hierarchical-ar", "jlc-fixed"),
}
NOT_PREDICTED = (
    "TorchRec's stack (torchrec-*): its compute is not the library trainer's (calibrating it "
    "needs its own unlimited run, and its step at 1 Gbit/s was faster than without a limit: "
    "fp32 390 vs 476 ms, which no model whose time grows with bytes can meet within 15%), and it "
    "records no exchange statistics (the bytes input the check uses)"
)
DCN_NOT_PREDICTED = (
    "netns_two_node_dcn.json: TorchRec DLRM-DCN at 1 Gbit/s only; no unlimited run to take "
    "its compute from, and no exchange statistics"
)
#: the new points: (file stem, devices per process, rates); measured by the command below
NEW_POINTS = (
    ("2x2 at 500 Mbit/s", 2, ("500mbit",)),
    ("2x4", 4, ("unlimited", "1gbit", "500mbit", "250mbit")),
)
NEW_MODES = tuple(m for m in BENCH_MODES if m != "compressed-flat")


def new_point_command(devices: int, rates: Sequence[str], out: str) -> str:
    return (
        f"sudo python -m bench.testbed.netns_bench --testbed two-node --devices-per-process {devices} "
        f"--rates {' '.join(('unlimited', *[r for r in rates if r != 'unlimited']))} "
        f"--rounds 2 --steps 20 --log-every 5 --modes {' '.join(NEW_MODES)} "
        f"--shards /tmp/jlc_two_node_data --workdir /tmp/sweep_two_node --out {out}"
    )


# ------------------------------------------------------------------------------ helpers
def _round(x: Any) -> Any:
    if isinstance(x, float):
        if not math.isfinite(x) or x == 0:
            return x if math.isfinite(x) else str(x)
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_round(v) for v in x]
    return x


def _sha256(path: Path) -> str:
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


def _rate_name_bits(rate: str) -> float:
    if rate == "unlimited":
        return math.inf
    units = {"gbit": 1e9, "mbit": 1e6}
    for u, f in units.items():
        if rate.endswith(u):
            return float(rate[: -len(u)]) * f
    raise ValueError(f"rate {rate!r}: expected NNgbit, NNmbit or unlimited")


def _median_runs(runs: Sequence[dict]) -> dict[tuple[str, str], dict]:
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
    devices: int, probe_bits: float, loopback_bits: float, cores: int = 2, processes: int = 2
) -> st.Cluster:
    """The two-node testbed: one veth per node (process) shared by its devices, one loopback
    per node, ``devices`` devices per process on ``cores / processes`` cores each."""
    return st.Cluster(
        nodes=processes,
        devices_per_node=devices,
        intra_bandwidth=loopback_bits / 8 / devices,
        inter_bandwidth=probe_bits / 8 / devices,
        intra_latency=LATENCY_TESTBED_S,
        inter_latency=LATENCY_TESTBED_S,
        serial_devices=max(1.0, devices * processes / cores),
        intra_shared=True,
    )


def _stats_inputs(run: dict, devices: int) -> dict[str, float]:
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
    return {
        "exchange_bytes_per_device": x,
        "gradient_bytes_per_device": run["allreduce_raw_bytes_per_step"] / (2 * devices),
        "exchange_ratio": ratio,
        "gradient_ratio": run["allreduce_raw_bytes_per_step"]
        / run["allreduce_moved_bytes_per_step"],
    }


def _codecs(
    speeds: dict[str, dict], ratio: float, grad_codec: str | None, grad_ratio: float
) -> st.Codecs:
    ex = speeds["jlc-auto"]
    gr = speeds[grad_codec or "jlc-auto"]
    return st.Codecs(
        forward=st.CodecSpec(ex["compress_bytes_per_s"], ex["decompress_bytes_per_s"], ratio),
        gradient=st.CodecSpec(gr["compress_bytes_per_s"], gr["decompress_bytes_per_s"], grad_ratio),
    )


# -------------------------------------------------------------------------------- check
def check_file(path: Path, speeds: dict[str, dict], model: st.ModelSpec) -> dict[str, Any]:
    """Predicted vs measured step of every library (mode, rate) point of one run file."""
    data = json.loads(path.read_text())
    devices_pp = data["params"]["devices_per_process"]
    cores = data["environment"]["cpu_count"]
    p = 2 * devices_pp
    med = _median_runs(data["runs"])
    probes = {r["rate"]: r["probe_gbits"] * 1e9 for r in data["runs"] if r.get("probe_gbits")}
    loop_bits = probes["unlimited"]
    base = med[("unlimited", "exact")]
    base_in = _stats_inputs(base, p)
    if abs(base_in["exchange_bytes_per_device"] - model.exchange_bytes(p)) > 1:
        raise ValueError(f"{path.name}: recorded exchange bytes differ from the model's")
    cal_cluster = testbed_cluster(devices_pp, probes["unlimited"], loop_bits, cores)
    dummy = _codecs(speeds, 1.0, None, 1.0)
    computes = {
        ov: st.calibrate_compute(
            model,
            cal_cluster,
            dummy,
            base["step_time_s"],
            flops_per_byte=CPU_FLOPS_PER_BYTE,
            overlap=ov,
        )
        for ov in (False, True)
    }
    points = []
    for (rate, mode), run in sorted(med.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if mode not in BENCH_MODES:
            continue
        mmode, gcodec = BENCH_MODES[mode]
        inp = _stats_inputs(run, p)
        codecs = _codecs(speeds, inp["exchange_ratio"], gcodec, inp["gradient_ratio"])
        cl = testbed_cluster(devices_pp, probes[rate], loop_bits, cores)
        pred = {ov: st.predict(model, cl, computes[ov], codecs, mmode) for ov in (False, True)}
        meas = run["step_time_s"]
        point = {
            "file": path.name,
            "rate": rate,
            "mode": mode,
            "model_mode": mmode,
            "calibration_point": (rate, mode) == ("unlimited", "exact"),
            "measured_step_s": meas,
            "measured_round_step_s": run["round_times_s"],
            "predicted_step_s": pred[True].step_overlap_s,
            "error": pred[True].step_overlap_s / meas - 1,
            "predicted_serial_step_s": pred[False].step_s,
            "error_serial": pred[False].step_s / meas - 1,
            "predicted_link_bytes_per_step": pred[True].inter_bytes * p,  # all devices
            "measured_link_bytes_per_step": run["link_bytes_per_step"],
            "link_probe_gbits": probes[rate] / 1e9,
            "inputs": inp,
            "parts_s": {
                k: v
                for k, v in pred[True].as_dict().items()
                if k.endswith("_s") and k not in ("step_s", "step_overlap_s")
            },
        }
        points.append(point)
    return {
        "file": path.name,
        "sha256": _sha256(path),
        "layout": f"2 processes x {devices_pp} devices",
        "calibration": {
            "unlimited_exact_step_s": base["step_time_s"],
            "compute_overlap": {"flops_per_s": computes[True].flops_per_s},
            "compute_serial": {"flops_per_s": computes[False].flops_per_s},
            "flops_per_byte": CPU_FLOPS_PER_BYTE,
        },
        "points": points,
    }


def predict_new(
    file_result: dict, base_file: Path, speeds: dict[str, dict], model: st.ModelSpec
) -> list[dict]:
    """The points not yet run, from the inputs of ``base_file`` (the rates sweep)."""
    data = json.loads(base_file.read_text())
    med = _median_runs(data["runs"])
    probes = {r["rate"]: r["probe_gbits"] * 1e9 for r in data["runs"] if r.get("probe_gbits")}
    frac = probes["1gbit"] / 1e9  # TCP payload / tbf rate, measured at 1 Gbit/s
    cores = data["environment"]["cpu_count"]
    flops = file_result["calibration"]["compute_overlap"]["flops_per_s"]
    compute = st.Compute(flops, flops / CPU_FLOPS_PER_BYTE)
    out = []
    for label, dpp, rates in NEW_POINTS:
        p = 2 * dpp
        for mode in NEW_MODES:
            mmode, gcodec = BENCH_MODES[mode]
            inp = _stats_inputs(med[("unlimited", mode)], 2 * data["params"]["devices_per_process"])
            codecs = _codecs(speeds, inp["exchange_ratio"], gcodec, inp["gradient_ratio"])
            for rate in rates:
                bits = probes.get(rate) or _rate_name_bits(rate) * frac
                cl = testbed_cluster(dpp, bits, probes["unlimited"], cores)
                t = st.predict(model, cl, compute, codecs, mmode)
                out.append(
                    {
                        "status": "predicted, not yet measured",
                        "points": label,
                        "layout": f"2 processes x {dpp} devices",
                        "rate": rate,
                        "mode": mode,
                        "predicted_step_s": t.step_overlap_s,
                        "predicted_serial_step_s": t.step_s,
                        "predicted_link_bytes_per_step": t.inter_bytes * p,
                        "link_gbits_assumed": bits / 1e9,
                        "command": new_point_command(
                            dpp,
                            rates,
                            f"bench/results/netns_two_node_{'500mbit' if dpp == 2 else '2x4'}.json",
                        ),
                    }
                )
    return out


def build_check(results: Path = RESULTS) -> dict[str, Any]:
    """The whole check (pure function of the committed inputs)."""
    codec_json = {c: json.loads((results / c).read_text()) for _, c in CHECK_FILES}
    speeds_by = {
        c: {k: codec_speeds(j, k) for k in ("jlc-auto", "jlc-fixed")} for c, j in codec_json.items()
    }
    model = st.terabyte_spec()
    files = [
        check_file(results / f, speeds_by[c], model) | {"codec_file": c} for f, c in CHECK_FILES
    ]
    points = [pt for f in files for pt in f["points"]]
    scored = [pt for pt in points if not pt["calibration_point"]]
    worst = max(scored, key=lambda pt: abs(pt["error"]))
    within = sum(abs(pt["error"]) <= TARGET for pt in scored)
    within_serial = sum(abs(pt["error_serial"]) <= TARGET for pt in scored)
    # The new points as predicted before they were run (the rates file's inputs), then
    # their measurement where it is committed.
    new = predict_new(files[1], results / CHECK_FILES[1][0], speeds_by["codec.json"], model)
    measured = {(pt["file"], pt["rate"], pt["mode"]): pt for pt in points}
    for pt in new:
        m = measured.get((NEW_POINT_FILES[pt["points"]], pt["rate"], pt["mode"]))
        if m is not None:
            pt["status"] = "predicted before it was measured"
            pt["measured_step_s"] = m["measured_step_s"]
            pt["error"] = pt["predicted_step_s"] / m["measured_step_s"] - 1
            pt["error_serial"] = pt["predicted_serial_step_s"] / m["measured_step_s"] - 1
    ahead = [pt for pt in new if "error" in pt]
    return {
        "benchmark": "step-time model vs the two-node testbed (models/dlrm/cluster/step_time.py)",
        "model": "models.dlrm.cluster.step_time.predict, exchange overlapped with the bottom MLP "
        "(predicted_step_s); without overlap: predicted_serial_step_s",
        "inputs": {
            "codec": [
                {
                    "file": c,
                    "sha256": _sha256(results / c),
                    "speeds": speeds_by[c],
                    "machine": codec_json[c]["environment"]["cpu_model"],
                }
                for c in sorted(speeds_by)
            ],
            "testbed_machine": json.loads((results / CHECK_FILES[0][0]).read_text())["environment"][
                "cpu_model"
            ],
            "latency_s": LATENCY_TESTBED_S,
            "flops_per_byte": CPU_FLOPS_PER_BYTE,
            "model": model.__dict__ | {"dense_params": model.dense_params()},
        },
        "files": [{k: v for k, v in f.items() if k != "points"} for f in files],
        "points": points,
        "summary": {
            "points": len(scored),
            "within_target": within,
            "within_target_serial": within_serial,
            "target": TARGET,
            "worst": {k: worst[k] for k in ("file", "rate", "mode", "error")},
            "max_abs_error": max(abs(pt["error"]) for pt in scored),
            "max_abs_error_serial": max(abs(pt["error_serial"]) for pt in scored),
            "median_abs_error": statistics.median(abs(pt["error"]) for pt in scored),
            "predicted_ahead": len(ahead),
            "predicted_ahead_within_target": sum(abs(pt["error"]) <= TARGET for pt in ahead),
            "predicted_ahead_max_abs_error": max((abs(pt["error"]) for pt in ahead), default=None),
        },
        "not_predicted": [NOT_PREDICTED, DCN_NOT_PREDICTED],
        "new_points": new,
    }


def _ms(x: float) -> str:
    return f"{x * 1e3:.0f} ms"


def render_check(res: dict[str, Any]) -> str:
    s = res["summary"]

    def speeds(c: dict) -> str:
        a, f = c["speeds"]["jlc-auto"], c["speeds"]["jlc-fixed"]
        return (
            f"{c['file']} on an {c['machine']}: jlc-auto {a['compress_bytes_per_s'] / 1e9:.2f} / "
            f"{a['decompress_bytes_per_s'] / 1e9:.2f} GB/s compress / decompress, jlc-fixed "
            f"{f['compress_bytes_per_s'] / 1e9:.2f} / {f['decompress_bytes_per_s'] / 1e9:.2f} GB/s"
        )

    by_codec = {f["file"]: f["codec_file"] for f in res["files"]}
    lines = [
        "# Step-time model vs the two-node testbed",
        "",
        "Predictions of `models.dlrm.cluster.step_time` (exchange overlapped with the bottom MLP; the "
        "serial column without overlap) against every committed two-node step of the library's "
        "trainer (median of the rounds). Regenerate: `python -m bench.testbed.step_time_check check`; the "
        "formulas and inputs: docs/step_time.md.",
        "",
        "Inputs: compute from each file's unlimited `exact` run (marked *calibration*, not "
        "scored); codec speed, medians over the Terabyte dumps, from "
        + "; ".join(speeds(c) for c in res["inputs"]["codec"])
        + f" (the testbed is an {res['inputs']['testbed_machine']}; the runs made before the "
        "CPU codec's pext/pdep fix for AMD Zen 1/2 use codec.json, the later ones "
        "codec_testbed.json: "
        + ", ".join(f"{f.removesuffix('.json')} {c}" for f, c in by_codec.items())
        + "); bytes and ratios from each run's exchange statistics; link speed from each "
        "rate's TCP probe.",
        "",
        f"**{s['within_target']} of {s['points']} points within {s['target']:.0%}** (serial model: "
        f"{s['within_target_serial']}); largest error {s['worst']['error']:+.1%} "
        f"({s['worst']['mode']} at {s['worst']['rate']}, {s['worst']['file']}), median "
        f"{s['median_abs_error']:.1%}.",
        "",
        "| file | link | mode | measured | predicted | error | serial | error | link MiB meas. / pred. |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for pt in res["points"]:
        tag = " (calibration)" if pt["calibration_point"] else ""
        lines.append(
            f"| {pt['file'].removesuffix('.json')} | {pt['rate']} | {pt['mode']}{tag} | "
            f"{_ms(pt['measured_step_s'])} | {_ms(pt['predicted_step_s'])} | {pt['error']:+.1%} | "
            f"{_ms(pt['predicted_serial_step_s'])} | {pt['error_serial']:+.1%} | "
            f"{pt['measured_link_bytes_per_step'] / 2**20:.1f} / "
            f"{pt['predicted_link_bytes_per_step'] / 2**20:.1f} |"
        )
    lines += [
        "",
        "Not predicted: " + "; ".join(res["not_predicted"]) + ".",
        "",
        "## Predicted before they were run",
        "",
        "A rate and a layout not in the first two files, predicted from the rates file's "
        "inputs (its compute, bytes and ratios; codec.json) before they were run, then "
        "measured (the files of these points; above they are also checked with their own "
        f"calibration): **{s['predicted_ahead_within_target']} of {s['predicted_ahead']} within "
        f"{s['target']:.0%}**"
        + (
            f", largest error {s['predicted_ahead_max_abs_error']:.1%}."
            if s["predicted_ahead_max_abs_error"] is not None
            else "."
        ),
        "",
        "| layout | link | mode | predicted | serial | measured | error | serial error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pt in res["new_points"]:
        meas = (
            f"{_ms(pt['measured_step_s'])} | {pt['error']:+.1%} | {pt['error_serial']:+.1%}"
            if "error" in pt
            else "not yet | | "
        )
        lines.append(
            f"| {pt['layout']} | {pt['rate']} | {pt['mode']} | {_ms(pt['predicted_step_s'])} | "
            f"{_ms(pt['predicted_serial_step_s'])} | {meas} |"
        )
    lines += ["", AHEAD_MISSES, "", "Commands that measure them (root, the two-node testbed):", ""]
    for cmd in sorted({pt["command"] for pt in res["new_points"]}):
        lines.append(f"    {cmd}")
    return "\n".join(lines) + "\n"


def _dump(obj: Any) -> str:
    return json.dumps(_round(obj), indent=1, sort_keys=True) + "\n"


# -------------------------------------------------------------------------- projections
#: GPU cluster assumptions of the projections (stated in docs/step_time.md)
GPU = {
    "flops_per_s": 200e12,  # dense MLP FLOP/s achieved per GPU (about 20% of H100 BF16 peak)
    "memory_bytes_per_s": 2.5e12,  # HBM bytes/s of row gathers / updates (75% of 3.35 TB/s)
    "nvlink_bytes_per_s": 450e9,  # per GPU and direction (900 GB/s both directions)
    "intra_latency_s": 3e-6,
    "inter_latency_s": 10e-6,
    "cast_bytes_per_s": 2e12,  # fixed-precision cast (INT8 row-wise on an H100)
}
#: GPU codec throughput brackets, raw bytes/s (compress, decompress)
BRACKETS = {
    "low": (0.33e12, 0.51e12),  # cuSZp2 on an A100 (its paper)
    "high": (2e12, 2e12),  # INT8 row-wise quantization on an H100
}
NODES = (2, 8, 32, 128)
GPUS_PER_NODE = 8
NIC_GBIT = (100, 200, 400)
PROJ_MODES = (
    "hierarchical-exact",
    "flat",
    "hierarchical",
    "hierarchical-ar",
    "bf16",
    "fp8",
    "int8",
    "mx4",
)
HEAT_MODES = ("hierarchical-exact", "flat", "hierarchical", "hierarchical-ar", "int8")
CONFIGS = {
    "terabyte": lambda batch: st.terabyte_spec(batch),
    "mlperf-dcnv2": lambda batch: st.mlperf_dcnv2_spec(batch),
}


def gpu_cluster(nodes: int, nic_gbit: float, gpus: int = GPUS_PER_NODE) -> st.Cluster:
    return st.Cluster(
        nodes=nodes,
        devices_per_node=gpus,
        intra_bandwidth=GPU["nvlink_bytes_per_s"],
        inter_bandwidth=nic_gbit * 1e9 / 8,
        intra_latency=GPU["intra_latency_s"],
        inter_latency=GPU["inter_latency_s"],
        tree_allreduce=True,
    )


def gpu_codecs(bracket: str, forward_ratio: float, gradient_ratio: float) -> st.Codecs:
    c, d = BRACKETS[bracket]
    return st.Codecs(
        forward=st.CodecSpec(c, d, forward_ratio),
        backward=st.CodecSpec(c, d, gradient_ratio),
        gradient=st.CodecSpec(c, d, gradient_ratio),
        cast_bytes_per_s=GPU["cast_bytes_per_s"],
    )


def build_projections(results: Path = RESULTS, global_batch: int = st.MLPERF_GLOBAL_BATCH) -> dict:
    """Projected speedup of each mode over exact on GPU clusters (a model, not a measurement)."""
    codec_json = json.loads((results / "codec.json").read_text())
    fwd_ratio = codec_speeds(codec_json, "jlc-auto", eb_rel=0.01)["ratio"]
    rates = json.loads((results / CHECK_FILES[1][0]).read_text())
    ar = _median_runs(rates["runs"])[("1gbit", "compressed-hierarchical-ar")]
    grad_ratio = ar["allreduce_raw_bytes_per_step"] / ar["allreduce_moved_bytes_per_step"]
    compute = st.Compute(GPU["flops_per_s"], GPU["memory_bytes_per_s"])
    rows = []
    for name, make in CONFIGS.items():
        model = make(global_batch)
        for nodes in NODES:
            for nic in NIC_GBIT:
                cl = gpu_cluster(nodes, nic)
                for bracket in BRACKETS:
                    codecs = gpu_codecs(bracket, fwd_ratio, grad_ratio)
                    ex = st.predict(model, cl, compute, codecs, "exact")
                    row = {
                        "config": name,
                        "nodes": nodes,
                        "gpus": cl.devices,
                        "nic_gbit": nic,
                        "codec_bracket": bracket,
                        "exact_step_s": ex.step_overlap_s,
                        "exact_exchange_share": (ex.exchange_forward_s + ex.exchange_backward_s)
                        / ex.step_s,
                        "exact_allreduce_share": ex.allreduce_s / ex.step_s,
                        "speedup": {},
                        "step_s": {},
                    }
                    for mode in PROJ_MODES:
                        t = st.predict(model, cl, compute, codecs, mode)
                        row["speedup"][mode] = ex.step_overlap_s / t.step_overlap_s
                        row["step_s"][mode] = t.step_overlap_s
                    best = max(row["speedup"], key=row["speedup"].get)
                    row["best_mode"] = best if row["speedup"][best] > 1 else "exact"
                    rows.append(row)
    return {
        "benchmark": "PROJECTIONS of the step-time model (models/dlrm/cluster/step_time.py), not "
        "measurements: predicted speedup of each mode over exact on GPU clusters",
        "assumptions": {
            "gpu": GPU,
            "codec_brackets_bytes_per_s": BRACKETS,
            "forward_ratio": fwd_ratio,
            "forward_ratio_source": "codec.json jlc-auto on the Terabyte dumps at REL 0.01 "
            "(sum raw / sum compressed)",
            "gradient_ratio": grad_ratio,
            "gradient_ratio_source": "netns_two_node_rates.json compressed-hierarchical-ar at "
            "1gbit (head gradients, REL 0.01, synthetic data); also the backward exchange's",
            "global_batch": global_batch,
            "overlap": "exchange overlapped with the bottom MLP",
            "gpus_per_node": GPUS_PER_NODE,
        },
        "rows": rows,
    }


def render_projections(res: dict) -> str:
    a = res["assumptions"]
    lines = [
        "# Step-time projections for GPU clusters (a model, not measurements)",
        "",
        "**Projections of `models.dlrm.cluster.step_time`**, not measured on any GPU: the predicted "
        "speedup of each mode over the exact exchange, exchange overlapped with the bottom MLP. "
        f"{a['gpus_per_node']} GPUs per node, NVLink 900 GB/s per GPU (450 GB/s each direction), "
        f"one NIC per GPU; dense {a['gpu']['flops_per_s'] / 1e12:.0f} TFLOP/s and HBM "
        f"{a['gpu']['memory_bytes_per_s'] / 1e12:.1f} TB/s achieved per GPU (assumed); global "
        f"batch {a['global_batch']}; error-bounded codec at cuSZp2's 0.33 / 0.51 TB/s (low) or "
        "2 TB/s (high), fixed-precision casts at 2 TB/s; forward compression ratio "
        f"{a['forward_ratio']:.1f}x (Terabyte dumps, REL 0.01), gradients and backward "
        f"{a['gradient_ratio']:.1f}x (testbed). Cells: low / high codec bracket. "
        "Regenerate: `python -m bench.testbed.step_time_check project`; assumptions: docs/step_time.md.",
        "",
        "| config | nodes x 8 | NIC | exact step | exchange share | "
        + " | ".join(PROJ_MODES)
        + " | best |",
        "|---|---|---|---|---|" + "---|" * len(PROJ_MODES) + "---|",
    ]
    by = {(r["config"], r["nodes"], r["nic_gbit"], r["codec_bracket"]): r for r in res["rows"]}
    for name in CONFIGS:
        for nodes in NODES:
            for nic in NIC_GBIT:
                lo, hi = by[(name, nodes, nic, "low")], by[(name, nodes, nic, "high")]
                cells = [f"{lo['speedup'][m]:.2f} / {hi['speedup'][m]:.2f}" for m in PROJ_MODES]
                lines.append(
                    f"| {name} | {nodes} | {nic} Gbit/s | {_ms(lo['exact_step_s'])} | "
                    f"{lo['exact_exchange_share']:.0%} | "
                    + " | ".join(cells)
                    + f" | {lo['best_mode']} / {hi['best_mode']} |"
                )
    return "\n".join(lines) + "\n"


def plot_projections(res: dict, path: Path) -> None:
    """Heat map: speedup over exact per (nodes, NIC), one panel per config and mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    by = {(r["config"], r["nodes"], r["nic_gbit"], r["codec_bracket"]): r for r in res["rows"]}
    fig, axes = plt.subplots(
        len(CONFIGS), len(HEAT_MODES), figsize=(3.2 * len(HEAT_MODES), 3.0 * len(CONFIGS))
    )
    from matplotlib.colors import TwoSlopeNorm

    speeds = [r["speedup"][m] for r in res["rows"] for m in HEAT_MODES]
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(0.5, min(speeds)), vmax=max(2.0, max(speeds)))
    for i, name in enumerate(CONFIGS):
        for j, mode in enumerate(HEAT_MODES):
            ax = axes[i][j]
            lo = np.array(
                [[by[(name, n, c, "low")]["speedup"][mode] for c in NIC_GBIT] for n in NODES]
            )
            hi = np.array(
                [[by[(name, n, c, "high")]["speedup"][mode] for c in NIC_GBIT] for n in NODES]
            )
            im = ax.imshow(lo, cmap="RdYlGn", norm=norm, aspect="auto")
            for a in range(len(NODES)):
                for b in range(len(NIC_GBIT)):
                    ax.text(
                        b,
                        a,
                        f"{lo[a, b]:.2f}\n({hi[a, b]:.2f})",
                        ha="center",
                        va="center",
                        fontsize=7,
                    )
            ax.set_xticks(range(len(NIC_GBIT)), [f"{c}G" for c in NIC_GBIT])
            ax.set_yticks(range(len(NODES)), [f"{n}x8" for n in NODES])
            ax.set_title(f"{name}: {mode}", fontsize=9)
            if j == 0:
                ax.set_ylabel("nodes x GPUs")
            if i == len(CONFIGS) - 1:
                ax.set_xlabel("NIC per GPU (Gbit/s)")
    fig.colorbar(im, ax=axes, shrink=0.6, label="speedup over exact")
    fig.suptitle(
        "PROJECTION of a step-time model (not measured): speedup over exact, "
        "codec low bracket (high in brackets)",
        fontsize=10,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------- CLI
def _predict_cmd(args) -> dict:
    model = CONFIGS[args.preset](args.global_batch)
    cl = gpu_cluster(args.nodes, args.nic_gbit, args.gpus_per_node)
    if args.nvlink_gbyte:
        cl = st.Cluster(**{**cl.__dict__, "intra_bandwidth": args.nvlink_gbyte * 1e9 / 2})
    codecs = gpu_codecs(args.bracket, args.forward_ratio, args.gradient_ratio)
    compute = st.Compute(args.tflops * 1e12, args.hbm_tbyte * 1e12)
    out = {}
    for mode in st.MODES:
        t = st.predict(model, cl, compute, codecs, mode)
        out[mode] = t.as_dict()
        print(
            f"{mode:<16} step {t.step_overlap_s * 1e3:9.3f} ms (serial {t.step_s * 1e3:9.3f}) "
            f"compute {t.compute_s * 1e3:8.3f}  a2a fwd {t.exchange_forward_s * 1e3:7.3f} "
            f"bwd {t.exchange_backward_s * 1e3:7.3f}  all-reduce {t.allreduce_s * 1e3:7.3f}  "
            f"codec {(t.compress_s + t.decompress_s) * 1e3:7.3f}"
        )
    print("(a projection of the step-time model, not a measurement)")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.testbed.step_time_check",
        description="Step-time model: check against the two-node testbed, GPU projections, "
        "one prediction (docs/step_time.md).",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="predicted vs measured two-node steps -> results/")
    c.add_argument("--results", type=Path, default=RESULTS, help="folder of the inputs and outputs")
    c.add_argument("--stdout", action="store_true", help="print the JSON instead of writing")
    pr = sub.add_parser("project", help="GPU cluster projections -> results/ (JSON, md, PNG)")
    pr.add_argument("--results", type=Path, default=RESULTS)
    pr.add_argument("--global-batch", type=int, default=st.MLPERF_GLOBAL_BATCH)
    pr.add_argument("--no-plot", action="store_true", help="skip the heat map PNG")
    pd = sub.add_parser("predict", help="print one cluster's predicted step per mode")
    pd.add_argument("--preset", choices=sorted(CONFIGS), default="mlperf-dcnv2")
    pd.add_argument("--global-batch", type=int, default=st.MLPERF_GLOBAL_BATCH)
    pd.add_argument("--nodes", type=int, default=2)
    pd.add_argument("--gpus-per-node", type=int, default=GPUS_PER_NODE)
    pd.add_argument("--nic-gbit", type=float, default=200, help="NIC per GPU, Gbit/s")
    pd.add_argument(
        "--nvlink-gbyte",
        type=float,
        default=0,
        help="NVLink per GPU, GB/s both directions (0: 900)",
    )
    pd.add_argument("--tflops", type=float, default=GPU["flops_per_s"] / 1e12)
    pd.add_argument("--hbm-tbyte", type=float, default=GPU["memory_bytes_per_s"] / 1e12)
    pd.add_argument("--bracket", choices=sorted(BRACKETS), default="low")
    pd.add_argument("--forward-ratio", type=float, default=50.0)
    pd.add_argument("--gradient-ratio", type=float, default=9.5)
    args = ap.parse_args(argv)
    if args.cmd == "check":
        res = build_check(args.results)
        if args.stdout:
            sys.stdout.write(_dump(res))
            return 0
        (args.results / f"{CHECK_OUT}.json").write_text(_dump(res))
        (args.results / f"{CHECK_OUT}.md").write_text(render_check(_round(res)))
        s = res["summary"]
        print(
            f"{s['within_target']} of {s['points']} points within {s['target']:.0%}; "
            f"max |error| {s['max_abs_error']:.1%}"
        )
    elif args.cmd == "project":
        res = build_projections(args.results, args.global_batch)
        (args.results / f"{PROJ_OUT}.json").write_text(_dump(res))
        (args.results / f"{PROJ_OUT}.md").write_text(render_projections(res))
        if not args.no_plot:
            plot_projections(res, args.results / f"{PROJ_OUT}.png")
        print(f"wrote {PROJ_OUT}.json/.md" + ("" if args.no_plot else "/.png") + " (projections)")
    else:
        _predict_cmd(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
