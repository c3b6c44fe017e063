"""What a result of ``bench.testbed.netns_bench`` says: each mode's baseline, the speedups (per
round and paired), the medians over rounds, the time the limited link adds, a serial model of
compute plus link time, and the printed summaries.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from bench import bench_util as bu
from bench.testbed.netns_testbed import rate_bits


def baseline(mode: str) -> str:
    """The mode a ``mode``'s speedup is measured against: ``torchrec-fp32`` for TorchRec's
    DLRM, ``torchrec-dcn-fp32`` for its DLRM-DCN, ``exact`` for the library's modes."""
    if mode.startswith("torchrec-dcn-"):
        return "torchrec-dcn-fp32"
    return "torchrec-fp32" if mode.startswith("torchrec-") else "exact"


def paired_speedups(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{rate: {mode: median over rounds of baseline / mode step time of the same round}}``
    (``baseline(mode)``): pairing each run with the baseline run of its own round cancels
    slow drifts of the shared machine's load; falls back to the ratio of the medians where
    no round has both."""
    out = speedups(median_runs(runs))
    for rate, m in speedups_per_round(runs).items():
        for mode, v in m.items():
            out.setdefault(rate, {})[mode] = statistics.median(v)
    return out


def speedups(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{rate: {mode: step_time(baseline(mode)) / step_time(mode)}}`` for the successful
    runs (a rate appears where a baseline ran)."""
    out: dict[str, dict[str, float]] = {}
    for rate in dict.fromkeys(r["rate"] for r in runs):
        by = {r["mode"]: r for r in runs if r["rate"] == rate and r.get("status") == "ok"}
        for m, r in by.items():
            base = by.get(baseline(m), {}).get("step_time_s")
            if m != baseline(m) and base and r.get("step_time_s"):
                out.setdefault(rate, {})[m] = base / r["step_time_s"]
    return out


def median_runs(runs):
    """One entry per (rate, mode) over its rounds: the first successful run's record with
    ``step_time_s`` = median of the rounds' step times (``round_step_times_s`` lists them)."""
    out = []
    for key in dict.fromkeys((r["rate"], r["mode"]) for r in runs):
        ok = [
            r
            for r in runs
            if (r["rate"], r["mode"]) == key and r.get("status") == "ok" and r.get("step_time_s")
        ]
        if ok:
            times = [r["step_time_s"] for r in ok]
            m = dict(ok[0], step_time_s=statistics.median(times), round_step_times_s=times)
            m["samples_per_s"] = ok[0]["samples_per_s"] * ok[0]["step_time_s"] / m["step_time_s"]
            out.append(m)
    return out


def link_times(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{rate: {mode: step_time(rate) - step_time(unlimited)}}`` in seconds: the part of
    the step the limited link adds (needs an ``unlimited`` run of the same mode)."""
    by = {
        (r["rate"], r["mode"]): r["step_time_s"]
        for r in runs
        if r.get("status") == "ok" and r.get("step_time_s")
    }
    out: dict[str, dict[str, float]] = {}
    for (rate, mode), t in by.items():
        base = by.get(("unlimited", mode))
        if rate != "unlimited" and base is not None:
            out.setdefault(rate, {})[mode] = t - base
    return out


def serial_model(
    runs: Sequence[dict[str, Any]], rate: str, mode: str, target: float = 1.5
) -> dict[str, Any] | None:
    """What the measured compute and link bytes give at ``rate`` if nothing overlaps.

    ``C`` = a mode's step time without a limit (compute, codec, unlimited collectives),
    ``L`` = its link bytes per step x 8 / rate. Returns ``model`` = (C_exact + L_exact) /
    (C_mode + L_mode); ``free_codec`` = (C_exact + L_exact) / (C_exact + L_mode), the same
    for a codec that costs nothing; ``rate_for_target`` (bit/s) and ``reached``: where
    ``model`` >= ``target`` -- "slower" (at that rate or slower), "faster" (at that rate or
    faster), "always" or "never" (rate None for the last two). The model is an estimate: the
    two processes overlap some link time with compute. None without the four runs.
    """
    med = {(r["rate"], r["mode"]): r for r in median_runs(runs)}
    cu = [med.get(("unlimited", m)) for m in ("exact", mode)]
    lim = [med.get((rate, m)) for m in ("exact", mode)]
    if None in cu or any(r is None or not r.get("link_bytes_per_step") for r in lim):
        return None
    ce, cm = cu[0]["step_time_s"], cu[1]["step_time_s"]
    be, bm = lim[0]["link_bytes_per_step"] * 8, lim[1]["link_bytes_per_step"] * 8
    bits = rate_bits(rate)
    le, lm = be / bits, bm / bits
    # model(x = 1 / R) = (ce + be x) / (cm + bm x) >= t  <=>  x (be - t bm) >= t cm - ce
    den, num = be - target * bm, target * cm - ce
    if num <= 0 and den >= 0:
        reached, r_t = "always", None
    elif num > 0 and den > 0:
        reached, r_t = "slower", den / num
    elif num < 0 and den < 0:
        reached, r_t = "faster", den / num
    else:
        reached, r_t = "never", None
    return {
        "compute_exact_s": ce,
        "compute_mode_s": cm,
        "link_exact_s": le,
        "link_mode_s": lm,
        "model": (ce + le) / (cm + lm),
        "free_codec": (ce + le) / (ce + lm),
        "rate_for_target": r_t,
        "reached": reached,
    }


def speedups_per_round(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """``{rate: {mode: [baseline / mode step time of each round]}}`` (interleaved rounds;
    ``baseline(mode)``)."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        if r.get("status") != "ok" or r["mode"] == baseline(r["mode"]):
            continue
        ex = next(
            (
                e
                for e in runs
                if e["rate"] == r["rate"]
                and e["mode"] == baseline(r["mode"])
                and e.get("round") == r.get("round")
                and e.get("status") == "ok"
            ),
            None,
        )
        if ex and r.get("step_time_s"):
            out.setdefault(r["rate"], {}).setdefault(r["mode"], []).append(
                ex["step_time_s"] / r["step_time_s"]
            )
    return out


def _mib(x: float | None, spec: str = "7.2f") -> str:
    return bu.fmt(None if x is None else x / 2**20, spec)


def format_run(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"{r['rate']:>9} {r['mode']:<13} {r.get('status')}: {r.get('log_tail', '')[-300:]}"
    inproc = r.get("inprocess_bytes_per_step")
    return (
        f"{r['rate']:>9} {r['mode']:<13} step {r['step_time_s'] * 1e3:8.1f} ms  "
        f"{r['samples_per_s']:8.0f} samples/s  moved/step {_mib(r.get('moved_bytes_per_step'))}"
        f" MiB (x{r.get('moved_ratio') or 0:.2f})  all-reduce/step "
        f"{_mib(r.get('allreduce_moved_bytes_per_step') or 0, '6.2f')} MiB  link/step "
        f"{_mib(r.get('link_bytes_per_step') or 0, '6.2f')} MiB"
        + (f"  in-process/step {_mib(inproc, '6.2f')} MiB" if inproc is not None else "")
        + (
            f"  exchange inter-node/step {_mib(r['inter_node_moved_bytes_per_step'], '6.2f')} "
            f"MiB intra-node {_mib(r['intra_node_bytes_per_step'], '6.2f')} MiB"
            if r.get("inter_node_moved_bytes_per_step") is not None
            else ""
        )
        + f"  AUC {r['auc']:.5f}  logloss {r['logloss']:.5f}"
    )


def format_summary(result: dict[str, Any]) -> str:
    if result.get("status") == "skipped":
        return f"netns benchmark skipped: {result['skip_reason']}"
    lines = [
        "rate       mode                     step ms  samples/s  MiB/step  link MiB  AUC      "
        "log loss  speedup (step ms: median over rounds; speedup: median of per-round "
        "baseline/mode; baseline: exact, TorchRec: torchrec-fp32)"
    ]
    runs = median_runs(result["runs"])
    sp = paired_speedups(result["runs"])
    for r in runs:
        s = 1.0 if r["mode"] == baseline(r["mode"]) else sp.get(r["rate"], {}).get(r["mode"])
        lines.append(
            f"{r['rate']:<10} {r['mode']:<23} {r['step_time_s'] * 1e3:8.1f} "
            f"{r['samples_per_s']:10.0f} {_mib(r.get('moved_bytes_per_step'), '9.2f')} "
            f"{_mib(r.get('link_bytes_per_step'), '9.2f')}  "
            f"{r['auc']:.5f}  {r['logloss']:.5f}  " + (f"{s:.3f}x" if s else "-")
        )
    for rate, m in link_times(runs).items():
        if "exact" in m:
            lines.append(
                f"  {rate}: time the link adds to a step (vs unlimited): "
                + ", ".join(f"{mode} {t * 1e3:.0f} ms" for mode, t in m.items())
            )
    for rate, m in speedups_per_round(result["runs"]).items():
        for mode, v in m.items():
            if len(v) > 1:
                lines.append(
                    f"  {rate} {mode}: per-round speedup " + ", ".join(f"{x:.3f}x" for x in v)
                )
    return "\n".join(lines)
