"""The step-time model's constants fitted once on the committed two-node runs, and the points
it predicts ahead of their runs from them.

``step_time_check`` calibrates the compute of each run file on that file's own unlimited exact
run; predicting a layout from another layout's calibration missed by up to 33% (2 x 4 devices
from 2 x 2), because the model had no cost per device: every device's program is dispatched
and its collectives rendezvous on the processor it shares. This module fits three or four
constants shared by every layout and rate (:func:`fit`, least squares on the relative error of
every point of a round's files, :mod:`bench.testbed.step_time_rounds`, calibration points
included):

* ``flops_per_s``: the dense FLOP/s of one device's processor (memory bytes/s at the check's
  machine balance);
* ``device_overhead_s`` (``Compute.device_overhead_s``): per device and step, in every mode;
* ``exchange_overhead_s`` (``Codecs.exchange_overhead_s``): per device and step, added by a
  compressed exchange beyond its codec throughput;
* ``inter_latency_s`` (``Cluster.inter_latency``), in the rounds that fit it
  (``Round.message_latency``): per inter-node message, each remote peer of an all-to-all and
  each step of a ring (else the 0.05 ms assumed by ``testbed_cluster``).

With them it predicts each round's groups: layouts and rates that none of its files has,
before they are run (:func:`predict_ahead`), and scores each against its measurement once the file
named beside it is committed. Nothing here reads a measured point of those files before it is
scored. Bytes and ratios of a new point come from the committed file named as its source; its
link from the rate name times the TCP payload fraction measured at 1 Gbit/s in the rates file
(the unlimited link from the source file's probe); the codec's speed from
``codec_testbed.json`` (the testbed's machine, the current codec).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from bench.testbed import auto_check
from bench.testbed.netns_testbed import tbf_burst_bytes
from bench.testbed.step_time_rounds import ROUNDS, ROUNDS_1_2, Group, Round
from bench.testbed.testbed_inputs import (
    BENCH_MODES,
    LATENCY_TESTBED_S,
    RATES_FILE,
    codec_speeds,
    fmt_ms,
    median_runs,
    rate_name_bits,
    run_codecs,
    stats_inputs,
    testbed_cluster,
)
from models.dlrm.cluster import step_time as st

#: the codec benchmark the points ahead are predicted with: the testbed's machine, the codec
#: of today
AHEAD_CODEC = "codec_testbed.json"
#: the files whose unlimited probe is the loopback of a file without an unlimited run
LOOPBACK_FILES = ("netns_two_node_2x3.json", "netns_two_node_2x4.json")
#: the modes whose steps each round predicts ahead (every one of BENCH_MODES)
AHEAD_MODES = tuple(BENCH_MODES)
TARGET = 0.15


def ahead_command(dpp: int, rates: Sequence[str], out: str, batch: int) -> str:
    """The command that measures one group of a round (root, the two-node testbed)."""
    extra = ""
    if batch != st.terabyte_spec().global_batch:  # the evaluation batch divisible too
        extra = f" --extra --batch-size {batch} --eval-batch-size {2 * batch}"
    return (
        f"sudo python -m bench.testbed.netns_bench --testbed two-node --devices-per-process {dpp} "
        f"--rates {' '.join(rates)} --rounds 2 --steps 20 --log-every 5 "
        f"--modes {' '.join((*AHEAD_MODES, 'auto'))} "
        f"--shards /tmp/jlc_two_node_data --workdir /tmp/sweep_two_node --out bench/results/{out}"
        + extra
    )


def _probes(data: dict) -> dict[str, float]:
    return {r["rate"]: r["probe_gbits"] * 1e9 for r in data["runs"] if r.get("probe_gbits")}


def _speeds(results: Path, codec_file: str) -> dict[str, dict]:
    cj = json.loads((results / codec_file).read_text())
    return {k: codec_speeds(cj, k) for k in ("jlc-auto", "jlc-fixed")}


def _batch(data: dict) -> int:
    """The global batch of a run file (``--extra --batch-size N``, else the preset's)."""
    extra = list(data["params"].get("extra") or [])
    if "--batch-size" in extra:
        return int(extra[extra.index("--batch-size") + 1])
    return st.terabyte_spec().global_batch


def _loopback(results: Path, data: dict) -> float:
    """The unlimited probe of ``data``, else of the first of ``LOOPBACK_FILES`` committed."""
    probes = _probes(data)
    if "unlimited" in probes:
        return probes["unlimited"]
    for name in LOOPBACK_FILES:
        if (results / name).exists():
            return _probes(json.loads((results / name).read_text()))["unlimited"]
    raise ValueError("no unlimited probe to take the loopback from")


def _burst(rate: str, token_bucket: bool) -> float:
    return tbf_burst_bytes(rate) if token_bucket and rate != "unlimited" else 0.0


def fit_points(
    results: Path, files: Sequence[tuple[str, str]], token_bucket: bool = False
) -> list[dict[str, Any]]:
    """Every library point of ``files``: its inputs and measured step (median of rounds)."""
    rows = []
    for name, codec_file in files:
        data = json.loads((results / name).read_text())
        speeds = _speeds(results, codec_file)
        dpp = data["params"]["devices_per_process"]
        probes, loop = _probes(data), _loopback(results, data)
        for (rate, mode), run in sorted(median_runs(data["runs"]).items()):
            if mode not in BENCH_MODES:
                continue
            mmode, gcodec = BENCH_MODES[mode]
            inp = stats_inputs(run, 2 * dpp)
            rows.append(
                {
                    "file": name,
                    "rate": rate,
                    "mode": mode,
                    "model_mode": mmode,
                    "global_batch": _batch(data),
                    "measured_step_s": run["step_time_s"],
                    "cluster": testbed_cluster(
                        dpp,
                        probes[rate],
                        loop,
                        data["environment"]["cpu_count"],
                        burst_bytes=_burst(rate, token_bucket),
                    ),
                    "codecs": run_codecs(speeds, inp, gcodec),
                }
            )
    return rows


def predict_point(
    model: st.ModelSpec, row: dict, constants: dict[str, float], flops_per_byte: float
) -> st.StepTime:
    """One point's prediction with the fitted ``constants`` (``inter_latency_s``, where fitted,
    in place of the cluster's assumed inter-node message latency)."""
    f = constants["flops_per_s"]
    compute = st.Compute(f, f / flops_per_byte, constants["device_overhead_s"])
    model = dataclasses.replace(model, global_batch=row.get("global_batch", model.global_batch))
    codecs = dataclasses.replace(
        row["codecs"], exchange_overhead_s=constants["exchange_overhead_s"]
    )
    cluster = row["cluster"]
    if "inter_latency_s" in constants:
        cluster = dataclasses.replace(cluster, inter_latency=constants["inter_latency_s"])
    return st.predict(model, cluster, compute, codecs, row["model_mode"])


def relative_errors(
    model: st.ModelSpec,
    rows: Sequence[dict],
    constants: dict[str, float],
    flops_per_byte: float,
    overlap: bool = True,
) -> list[float]:
    """Each row's predicted step with ``constants`` relative to its measured one, less 1."""
    return [
        predict_point(model, r, constants, flops_per_byte).step(overlap) / r["measured_step_s"] - 1
        for r in rows
    ]


def fit(
    model: st.ModelSpec,
    rows: Sequence[dict],
    flops_per_byte: float,
    overlap: bool = True,
    message_latency: bool = False,
) -> dict[str, float]:
    """The constants minimizing the squared relative error of ``rows``' predicted steps;
    ``message_latency``: ``inter_latency_s`` (per inter-node message) among them."""
    names = ["device_overhead_s", "exchange_overhead_s"]
    names += ["inter_latency_s"] if message_latency else []

    def constants(x: np.ndarray) -> dict[str, float]:
        return {"flops_per_s": math.exp(x[0])} | {k: float(v) for k, v in zip(names, x[1:])}

    def residuals(x: np.ndarray) -> list[float]:
        return relative_errors(model, rows, constants(x), flops_per_byte, overlap)

    x0 = np.array([math.log(3e9)] + [0.0] * len(names))
    # tolerances at machine precision: the committed JSON (6 significant digits) must not
    # depend on the solver's stopping point
    sol = least_squares(
        residuals,
        x0,
        bounds=([0.0] * len(x0), [60.0] + [1.0] * len(names)),
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
    )
    # a fixed cost at the solver's bound of 0 comes out as 1e-27 s or so, a different tiny
    # number on another numpy/scipy: it is 0
    return {k: 0.0 if k in names and v < 1e-9 else v
            for k, v in constants(sol.x).items()}  # fmt: skip


def _score(errors: Sequence[float]) -> dict[str, Any]:
    return {
        "points": len(errors),
        "within_target": sum(abs(e) <= TARGET for e in errors),
        "max_abs_error": max((abs(e) for e in errors), default=None),
        "median_abs_error": statistics.median(abs(e) for e in errors) if errors else None,
    }


def predict_ahead(
    results: Path,
    groups: Sequence[Group],
    model: st.ModelSpec,
    constants: dict[bool, dict[str, float]],
    flops_per_byte: float,
    token_bucket: bool = False,
) -> list[dict[str, Any]]:
    """The points of ``groups`` from ``constants``, each scored against its file where
    committed."""
    rates_data = json.loads((results / RATES_FILE).read_text())
    frac = _probes(rates_data)["1gbit"] / 1e9  # TCP payload / tbf rate, measured at 1 Gbit/s
    speeds = _speeds(results, AHEAD_CODEC)
    out = []
    for label, dpp, rates, file, source, batch in groups:
        src = json.loads((results / source).read_text())
        src_med = median_runs(src["runs"])
        loop = _loopback(results, src)
        path = results / file
        measured = median_runs(json.loads(path.read_text())["runs"]) if path.exists() else {}
        for mode in AHEAD_MODES:
            mmode, gcodec = BENCH_MODES[mode]
            # the source's run of the mode (its unlimited one where there is one); the flat
            # exchange has the hierarchical one's codec and blocks where no flat run is there
            runs = [
                r
                for (_, m), r in sorted(src_med.items(), key=lambda kv: kv[0][0] != "unlimited")
                if m == mode
            ]
            runs = runs or [src_med[("unlimited", "compressed-hierarchical")]]
            inp = stats_inputs(runs[0], 2 * src["params"]["devices_per_process"])
            codecs = run_codecs(speeds, inp, gcodec)
            for rate in rates:
                bits = loop if rate == "unlimited" else rate_name_bits(rate) * frac
                row = {
                    "model_mode": mmode,
                    "global_batch": batch,
                    "cluster": testbed_cluster(
                        dpp,
                        bits,
                        loop,
                        src["environment"]["cpu_count"],
                        burst_bytes=_burst(rate, token_bucket),
                    ),
                    "codecs": codecs,
                }
                pred = {
                    ov: predict_point(model, row, constants[ov], flops_per_byte).step(ov)
                    for ov in (True, False)
                }
                pt = {
                    "points": label,
                    "layout": f"2 processes x {dpp} devices",
                    "rate": rate,
                    "mode": mode,
                    "predicted_step_s": pred[True],
                    "predicted_serial_step_s": pred[False],
                    "link_gbits_assumed": bits / 1e9,
                    "file": file,
                    "global_batch": batch,
                    "command": ahead_command(dpp, rates, file, batch),
                    "status": "predicted, not yet measured",
                }
                m = measured.get((rate, mode))
                if m is not None:
                    pt["status"] = "predicted before it was measured"
                    pt["measured_step_s"] = m["step_time_s"]
                    pt["measured_round_step_s"] = m["round_times_s"]
                    pt["error"] = pred[True] / m["step_time_s"] - 1
                    pt["error_serial"] = pred[False] / m["step_time_s"] - 1
                out.append(pt)
    return out


def leave_one_file_out(
    model: st.ModelSpec, rows: Sequence[dict], flops_per_byte: float, message_latency: bool
) -> list[float]:
    """Each file's points predicted from the constants fitted on the other files: how the fit
    carries to a file it has not seen, before a round is run."""
    errors = []
    for name in dict.fromkeys(r["file"] for r in rows):
        rest = [r for r in rows if r["file"] != name]
        c = fit(model, rest, flops_per_byte, message_latency=message_latency)
        errors += relative_errors(model, [r for r in rows if r["file"] == name], c, flops_per_byte)
    return errors


def build_round(results: Path, rnd: Round, flops_per_byte: float) -> dict[str, Any]:
    """One round: the fitted constants, their in-sample fit and the points predicted ahead;
    with ``Round.message_latency`` also the fit without the latency and each file's points
    predicted from the other files (:func:`leave_one_file_out`), with and without it."""
    model = st.terabyte_spec()
    if not all((results / f).exists() for f, _ in rnd.fit_files):
        return {"name": rnd.name, "fit_files": [f for f, _ in rnd.fit_files], "pending": True}
    rows = fit_points(results, rnd.fit_files, rnd.token_bucket)
    constants = {
        ov: fit(model, rows, flops_per_byte, ov, rnd.message_latency) for ov in (True, False)
    }
    points = predict_ahead(results, rnd.groups, model, constants, flops_per_byte, rnd.token_bucket)
    scored = [pt["error"] for pt in points if "error" in pt]
    out = {
        "name": rnd.name,
        "fit_files": [f for f, _ in rnd.fit_files],
        "constants": constants[True],
        "constants_serial": constants[False],
        "fit": _score(relative_errors(model, rows, constants[True], flops_per_byte)),
        "points": points,
        "summary": _score(scored) | {"predicted": len(points)},
    }
    if rnd.message_latency:  # what the new constant adds, in sample and on unseen files
        three = fit(model, rows, flops_per_byte)
        out["fit_three_constants"] = _score(relative_errors(model, rows, three, flops_per_byte))
        out["leave_one_file_out"] = {
            n: _score(leave_one_file_out(model, rows, flops_per_byte, lat))
            for n, lat in (("three_constants", False), ("four_constants", True))
        }
    return out


def build_ahead(results: Path, flops_per_byte: float) -> dict[str, Any]:
    """Every round (``ROUNDS``) and auto's rows (:mod:`bench.testbed.auto_check`): in the
    rounds' files, in ``auto_check.AUTO_FILES_ONE_WINDOW`` (after its rule changed) and in
    ``auto_check.AUTO_FILES`` (the windowed probe)."""
    return {
        "rounds": [build_round(results, r, flops_per_byte) for r in ROUNDS],
        "auto": auto_check.auto_rows(results, auto_check.round_groups(ROUNDS_1_2)),
        "auto_after_rule": auto_check.auto_rows(results, auto_check.AUTO_FILES_ONE_WINDOW),
        "auto_windowed_probe": auto_check.auto_rows(results, auto_check.AUTO_FILES),
    }


def _render_round(r: dict[str, Any]) -> list[str]:
    if r.get("pending"):
        return [f"### {r['name']}", "", f"Waiting for {', '.join(r['fit_files'])}.", ""]
    c, f, s = r["constants"], r["fit"], r["summary"]
    lat = c.get("inter_latency_s")
    lines = [
        f"### {r['name']}",
        "",
        f"{'Four' if lat is not None else 'Three'} constants fitted by least squares on the "
        f"relative error of the {f['points']} points of {', '.join(r['fit_files'])}: "
        f"{c['flops_per_s'] / 1e9:.1f} GFLOP/s per processor, a device overhead of "
        f"{c['device_overhead_s'] * 1e3:.1f} ms per device and step (program dispatch, the "
        "rendezvous of its collectives; paid one device after the other on a shared core)"
        + (", " if lat is not None else " and ")
        + f"a compressed exchange's overhead of {c['exchange_overhead_s'] * 1e3:.1f} ms per "
        "device and step beyond its codec throughput"
        + (
            f" and a latency of {lat * 1e3:.2f} ms per inter-node message (each peer of an "
            "all-to-all, each step of a ring; assumed "
            f"{LATENCY_TESTBED_S * 1e3:.2f} ms in the rounds before)"
            if lat is not None
            else ""
        )
        + f". In sample: {f['within_target']} of {f['points']} within {TARGET:.0%}, median "
        f"{f['median_abs_error']:.1%}."
        + (
            f" Without the latency (three constants): {r['fit_three_constants']['within_target']}"
            f" of {f['points']}. Each file predicted from the constants fitted on the others "
            "(leave one file out): "
            + "; ".join(
                f"{n.replace('_', ' ')} {v['within_target']} of {v['points']}, median "
                f"{v['median_abs_error']:.1%}, largest {v['max_abs_error']:.1%}"
                for n, v in r["leave_one_file_out"].items()
            )
            + "."
            if "leave_one_file_out" in r
            else ""
        ),
        "",
        "Predicted from them before they were run: layouts and rates that no fitted file has. "
        + (
            f"**{s['within_target']} of {s['points']} measured points within {TARGET:.0%}**, "
            f"median {s['median_abs_error']:.1%}, largest {s['max_abs_error']:.1%}."
            if s["points"]
            else "None measured yet."
        ),
        "",
        "| layout | link | mode | predicted | serial | measured (rounds) | error | serial error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pt in r["points"]:
        meas = "not yet | | "
        if "error" in pt:
            rounds = ", ".join(f"{x * 1e3:.0f}" for x in pt["measured_round_step_s"])
            meas = (
                f"{fmt_ms(pt['measured_step_s'])} ({rounds}) | {pt['error']:+.1%} | "
                f"{pt['error_serial']:+.1%}"
            )
        lines.append(
            f"| {pt['layout']} | {pt['rate']} | {pt['mode']} | {fmt_ms(pt['predicted_step_s'])} | "
            f"{fmt_ms(pt['predicted_serial_step_s'])} | {meas} |"
        )
    lines += ["", "Commands that measure them (root, the two-node testbed):", ""]
    lines += [f"    {cmd}" for cmd in sorted({pt["command"] for pt in r["points"]})]
    return [*lines, ""]


def render_ahead(res: dict[str, Any]) -> list[str]:
    """The ahead section of ``step_time_check.md`` (Markdown lines)."""
    lines = ["## Fixed costs, and points predicted ahead from them", ""]
    for r in res["rounds"]:
        lines += _render_round(r)
    lines += auto_check.render_auto(
        res["auto"], res.get("auto_after_rule", []), res.get("auto_windowed_probe", [])
    )
    return lines
