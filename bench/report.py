"""The one report generator: runs the benchmarks, then renders every table and figure.

Runs, each in its own subprocess (so each gets its own JAX/XLA settings):

1. ``python -m bench.codec_bench --suite peers`` -> bench/results/peers.json (the library's
   codec forms and the peers, on every real dump and its tiling; needs the peers' packages
   in ``--peers-python``; peers that are missing are reported as skipped).
2. ``python -m bench.codec_bench --suite targets`` -> bench/results/codec.json (issue 2's
   targets, side by side).
3. ``python -m bench.train_compare`` -> bench/results/train_compare.json.
4. ``python -m bench.netns_bench`` -> bench/results/netns.json (root only; skipped otherwise).
5. ``python -m bench.netns_bench --testbed two-node ...`` -> bench/results/netns_two_node.json
   (issue 16: the library's exact, flat and hierarchical compressed exchanges and TorchRec
   with ``--torchrec-python``; root only).

then renders from the JSON results (`render`): the figures (`bench.figures`),
bench/results/RESULTS.md, bench/results/codec.md, and the README's two result sections
(between ``<!-- codec-results:begin/end -->`` and ``<!-- bench-results:begin/end -->``),
bench/results/two_node.md and the README's ``<!-- two-node-results:begin/end -->``, and
prints the summary: the Pareto verdict per real dump at REL 0.01, bound violations, the
training table and the netns speedups. A part that is skipped keeps its previous JSON (if
any) in the report.

Usage (from the repo root)::

    python -m bench.report --peers-python /path/to/venv-with-peers/bin/python
    python -m bench.report --skip-peers --skip-codec --skip-netns    # training only
    python -m bench.report --report-only                             # re-render from JSON
    python -m bench.report --quick                                   # minutes: no tilings,
                                                                     # short training and netns
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import bench_util as bu
from bench import figures, netns_bench, pareto, train_compare

REPO = bu.REPO_ROOT
RESULTS = bu.RESULTS_DIR
README = REPO / "README.md"
BEGIN = "<!-- bench-results:begin -->"
END = "<!-- bench-results:end -->"
CODEC_BEGIN = "<!-- codec-results:begin -->"
CODEC_END = "<!-- codec-results:end -->"
TWO_NODE_BEGIN = "<!-- two-node-results:begin -->"
TWO_NODE_END = "<!-- two-node-results:end -->"
RATES_BEGIN = "<!-- two-node-rates:begin -->"
RATES_END = "<!-- two-node-rates:end -->"


# ------------------------------------------------------------------------------------ render
def _gbps(x: float) -> str:
    return bu.fmt(x, ".3f" if x < 1 else ".2f")


def verdict_rows(peers: dict[str, Any], eb_rel: float = 0.01) -> list[dict[str, Any]]:
    """Pareto analysis of the real dumps at ``eb_rel`` (see ``pareto.pareto_analysis``), plus
    ``jit_floor_us`` (the compress time of the jitted jax-bf16 cast on the same input, when
    that input is small: the per-call cost any jitted codec pays) and ``auto.compress_us``."""
    out = pareto.pareto_analysis(peers.get("rows", []), eb_rel, tiled=False)
    rows = [
        r
        for r in peers.get("rows", [])
        if r.get("status") == "ok" and not r.get("tiled") and math.isclose(r["eb_rel"], eb_rel)
    ]
    for a in out:
        rs = {r["codec"]: r for r in rows if r["dump"] == a["dump"]}
        cast, auto = rs.get("jax-bf16"), rs.get(pareto.AUTO)
        a["jit_floor_us"] = None
        if auto is not None and a["auto"] is not None:
            a["auto"]["compress_us"] = auto["compress"]["median_s"] * 1e6
            if cast is not None and auto["raw_bytes"] <= (64 << 10):
                a["jit_floor_us"] = cast["compress"]["median_s"] * 1e6
    return out


def violations(peers: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows over their bound: error-bounded codecs (violations) and others (exceed)."""
    return [r for r in peers.get("rows", []) if r.get("status") == "ok" and not r["bound_ok"]]


def _verdict_note(a: dict[str, Any]) -> str:
    au = a["auto"]
    if au is None:
        return "jlc-auto did not run"
    parts = []
    if au["higher_ratio_peers"]:
        parts.append("higher ratio: " + ", ".join(au["higher_ratio_peers"]))
    if au["faster_peers"]:
        fp = au["faster_peers"]
        low = [p for p in fp if p["ratio"] <= 8]
        high = [p for p in fp if p["ratio"] > 8]
        if low:
            parts.append(
                f"faster at <= 8x ratio: {', '.join(p['codec'] for p in low)} (up to "
                f"{_gbps(max(p['compress_gbps'] for p in low))} GB/s: casts, fixed-rate "
                "quantization or ZFP, without auto's range scan, per-value bound check "
                "and lossless stage)"
            )
        if high:
            parts.append(
                "faster at a lower ratio: "
                + ", ".join(
                    f"{p['codec']} ({_gbps(p['compress_gbps'])} GB/s at {bu.fmt(p['ratio'], '.1f')}x)"
                    for p in high
                )
            )
        floor = a.get("jit_floor_us")
        if floor is not None and floor <= au.get("compress_us", 0.0):
            parts.append(
                f"why: {floor:.0f} us of jlc-auto's {au['compress_us']:.0f} us per "
                "call is the fixed cost of any jitted call on this input (jax-bf16, a "
                "jitted cast, takes that long); the peers are called directly"
            )
        elif high:
            parts.append("why: " + "; ".join(sorted({p["why"] for p in high})))
    if au["dominated_by"]:
        parts.append("DOMINATED by " + ", ".join(au["dominated_by"]))
    if au["dominated_by_library_forms"]:
        parts.append(
            "its own forms "
            + ", ".join(au["dominated_by_library_forms"])
            + " reach the same ratio slightly faster (auto tries every form)"
        )
    return "; ".join(parts) or "ahead of every peer on both axes"


def pareto_table(peers: dict[str, Any], eb_rel: float = 0.01) -> str:
    lines = [
        "| dump | shape | jlc-auto ratio | compress GB/s | decompress GB/s | max err / eb "
        "| best peer ratio | on the front (bound honoured) | jlc-auto on front | notes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [r for r in peers.get("rows", []) if r.get("status") == "ok"]
    for a in verdict_rows(peers, eb_rel):
        au = a["auto"] or {}
        ps = [
            r
            for r in rows
            if r["dump"] == a["dump"]
            and not r["codec"].startswith("jlc-")
            and math.isclose(r["eb_rel"], eb_rel)
            and r["bound_ok"]
        ]
        best = max(ps, key=lambda r: r["ratio"]) if ps else None
        lines.append(
            f"| {a['dump']} | {a['shape']} | {bu.fmt(au.get('ratio'), '.1f')} | "
            f"{_gbps(au.get('compress_gbps', float('nan')))} | "
            f"{_gbps(au.get('decompress_gbps', float('nan')))} | "
            f"{bu.fmt(au.get('max_err_over_eb'), '.4f')} | "
            + (f"{best['ratio']:.1f} ({best['codec']})" if best else "-")
            + f" | {', '.join(a['front_bounded'])} | "
            + ("**yes**" if au.get("on_front") else "NO")
            + f" | {_verdict_note(a)} |"
        )
    return "\n".join(lines)


def codec_table(peers: dict[str, Any], dump: str, eb_rel: float) -> str:
    rows = [
        r for r in peers.get("rows", []) if r["dump"] == dump and math.isclose(r["eb_rel"], eb_rel)
    ]
    a = next(
        (
            a
            for a in pareto.pareto_analysis(
                peers["rows"], eb_rel, tiled=bool(rows and rows[0].get("tiled"))
            )
            if a["dump"] == dump
        ),
        None,
    )
    front = set(a["front_bounded"]) if a else set()
    lines = [
        "| codec | ratio | max err / eb | compress GB/s | decompress GB/s | bound | front |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['codec']} | {bu.not_run(r, 80)} | | | | | |")
            continue
        bound = bu.bound_label(r)
        lines.append(
            f"| {'**' + r['codec'] + '**' if r['codec'] == 'jlc-auto' else r['codec']} "
            f"| {r['ratio']:.2f} | {r['max_err_over_eb']:.4f} | "
            f"{_gbps(r['compress_gbps'])} | {_gbps(r['decompress_gbps'])} | {bound} | "
            f"{'*' if r['codec'] in front else ''} |"
        )
    return "\n".join(lines)


def ratio_matrix(peers: dict[str, Any], tiled: bool) -> str:
    """codec x (dump, eb_rel) compression ratios; '!' marks a bound exceeded."""
    rows = [
        r
        for r in peers.get("rows", [])
        if r.get("status") == "ok" and bool(r.get("tiled")) == tiled
    ]
    cols = list(dict.fromkeys((r["dump"], r["eb_rel"]) for r in rows))
    codecs = list(dict.fromkeys(r["codec"] for r in rows))
    lines = [
        "| codec | " + " | ".join(f"{d} {e}" for d, e in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for c in codecs:
        cells = []
        for d, e in cols:
            r = next(
                (r for r in rows if r["codec"] == c and r["dump"] == d and r["eb_rel"] == e), None
            )
            cells.append("-" if r is None else f"{r['ratio']:.1f}" + ("" if r["bound_ok"] else "!"))
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mib(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:.2f} MiB"


def netns_table(netns: dict[str, Any]) -> str:
    """The netns benchmark's table: one row per (rate, mode), medians over rounds; the
    speedup against each mode's baseline (``netns_bench.baseline``); an in-process bytes
    column where the runs measured it (two-node testbed)."""
    if netns.get("status") == "skipped":
        return f"Skipped: {netns.get('skip_reason')}"
    runs = netns_bench.median_runs(netns.get("runs", []))
    sp = netns_bench.paired_speedups(netns.get("runs", []))
    per_round = netns_bench.speedups_per_round(netns.get("runs", []))
    inproc = any(r.get("inprocess_bytes_per_step") is not None for r in runs)
    lines = [
        "| link | exchange | step time | samples/s | forward bytes moved / step | "
        "link bytes / step | "
        + ("in-process bytes / step | " if inproc else "")
        + "speedup | AUC | log loss |",
        "|---|---|---|---|---|---|---|---|---|" + ("---|" if inproc else ""),
    ]
    for r in runs:
        base = netns_bench.baseline(r["mode"])
        s = 1.0 if r["mode"] == base else sp.get(r["rate"], {}).get(r["mode"])
        probe = f" (measured {r['probe_gbits']:.2f} Gbit/s)" if r.get("probe_gbits") else ""
        lines.append(
            f"| {r['rate']}{probe} | {r['mode']} | {r['step_time_s'] * 1e3:.0f} ms | "
            f"{r['samples_per_s']:.0f} | {_mib(r.get('moved_bytes_per_step'))} | "
            f"{_mib(r.get('link_bytes_per_step'))} | "
            + (f"{_mib(r.get('inprocess_bytes_per_step'))} | " if inproc else "")
            + f"{bu.fmt(s, '.3f')}x"
            + ("" if base == "exact" else f" (vs {base})")
            + f" | {bu.fmt(r['auc'], '.5f')} | {bu.fmt(r['logloss'], '.5f')} |"
        )
    lt = netns_bench.link_times(runs)
    if lt:
        lines += [
            "",
            "Time the limited link adds to a step (step time minus the unlimited run's): "
            + "; ".join(
                f"{rate}: " + ", ".join(f"{mode} {t * 1e3:.0f} ms" for mode, t in m.items())
                for rate, m in lt.items()
            )
            + ".",
        ]
    if any(len(v) > 1 for m in per_round.values() for v in m.values()):
        lines += [
            "",
            "Speedup in each interleaved round: "
            + "; ".join(
                f"{rate} {mode}: " + ", ".join(f"{x:.3f}x" for x in v)
                for rate, m in per_round.items()
                for mode, v in m.items()
            ),
        ]
    bad = [r for r in netns.get("runs", []) if r.get("status") != "ok"]
    for r in bad:
        lines.append(f"| {r['rate']} | {r['mode']} | {r.get('status')} | | | | | |")
    return "\n".join(lines)


def _two_node_targets(res: dict[str, Any], rate: str = "1gbit", target: float = 1.5) -> str:
    """Issue 16's targets on the two-node testbed: hierarchical compressed >= ``target`` x
    the library's exact exchange at ``rate``, and its speedup >= the best TorchRec quantized
    comm's speedup over TorchRec fp32, at equal or better AUC."""
    runs = res.get("runs", [])
    sp = netns_bench.paired_speedups(runs).get(rate, {})
    med = {(r["rate"], r["mode"]): r for r in netns_bench.median_runs(runs)}
    hier = sp.get("compressed-hierarchical")
    tr = {m: v for m, v in sp.items() if m.startswith("torchrec-") and "-dcn-" not in m}
    parts = []
    if hier is None:
        parts.append(f"hierarchical compressed at {rate}: no measurement")
    else:
        parts.append(
            f"hierarchical compressed {hier:.2f}x our exact at {rate} (target >= {target}x: "
            + ("met" if hier >= target else "MISSED")
            + ")"
        )
    flat = sp.get("compressed-flat")
    if flat is not None:
        parts.append(f"flat compressed {flat:.2f}x")
    if tr:
        best = max(tr, key=tr.get)
        auc = {m: med.get((rate, m), {}).get("auc") for m in ("compressed-hierarchical", best)}
        base_auc = {
            m: med.get((rate, b), {}).get("auc")
            for m, b in (("compressed-hierarchical", "exact"), (best, "torchrec-fp32"))
        }
        parts.append(
            f"best TorchRec quantized comm {best} {tr[best]:.2f}x TorchRec fp32"
            + "".join(f"; {m} {v:.2f}x" for m, v in tr.items() if m != best)
        )
        if hier is not None:
            d_ours = (auc["compressed-hierarchical"] or 0) - (
                base_auc["compressed-hierarchical"] or 0
            )
            d_tr = (auc[best] or 0) - (base_auc[best] or 0)
            parts.append(
                "speedup target (hierarchical >= best TorchRec quantized): "
                + ("met" if hier >= tr[best] else "MISSED")
                + f"; AUC change vs own baseline: hierarchical {d_ours:+.5f}, {best} {d_tr:+.5f}"
            )
    eff = {
        r["mode"]: r.get("qcomm_effective")
        for r in runs
        if r.get("qcomm_effective") and r["mode"].startswith("torchrec-")
    }
    if eff:
        parts.append(
            "TorchRec precisions as run (forward/backward): "
            + ", ".join(f"{m} {'/'.join(v)}" for m, v in eff.items())
        )
    return "Targets (issue 16): " + "; ".join(parts) + "."


def two_node_markdown(res: dict[str, Any]) -> str:
    """The two-node section (bench/results/two_node.md and the README's
    ``<!-- two-node-results:begin/end -->``) from a ``--testbed two-node`` netns result."""
    if res.get("status") == "skipped":
        return f"Skipped: {res.get('skip_reason')}\n"
    p = res.get("params", {})
    info = res.get("testbed_info", {})
    qdisc = next(
        (r["qdisc"] for r in res.get("runs", []) if r.get("qdisc") not in (None, "none")), "-"
    )
    out = [
        f"Run: {_env_line(res)}; preset {p.get('preset')}, 2 processes x "
        f"{p.get('devices_per_process')} CPU devices, {p.get('steps')} steps (first "
        f"{p.get('log_every')} = compile / warm-up, dropped), interleaved rounds: "
        f"{p.get('rounds')}; one network namespace per process joined by a veth pair "
        f"({', '.join(info.get('addresses', []))}) limited with tc on both ends ("
        + qdisc.split(" |")[0].split("\n")[0][:90]
        + "); in-process traffic on each namespace's own loopback. Gloo pinned to the veth: "
        + str(info.get("gloo_address", "-"))
        + ". Same synthetic data (shards written once), table sizes, dims, MLPs, batch and "
        "SGD for the library's trainer and TorchRec (DistributedModelParallel, table-wise, "
        "gloo). Link bytes: what crossed the veth per step (both directions); in-process: "
        "what the two loopbacks carried. Speedup: median over rounds of the baseline's / "
        "the mode's step time in the same round (our modes vs `exact`, TorchRec's vs "
        "`torchrec-fp32`). **CPU speed is not GPU speed**: both stacks run on 2 shared CPU "
        "cores here, so the absolute samples/s say nothing of a GPU cluster; the ratios show "
        "what each stack's exchange saves on a limited link."
        + (f" {res['note'][:1].upper() + res['note'][1:]}." if res.get("note") else ""),
        "",
        netns_table(res),
        "",
        _two_node_targets(res),
        "",
    ]
    return "\n".join(out)


def rate_sweep_markdown(res: dict[str, Any], target: float = 1.5) -> str:
    """The two-node link-rate sweep (``netns_two_node_rates.json``): the table, then per rate
    each compressed mode's speedup over our exact and the ceiling any codec has there, the
    exact step at that rate over the exact step without a limit (a codec that cost nothing
    and moved nothing)."""
    if res.get("status") == "skipped":
        return f"Skipped: {res.get('skip_reason')}\n"
    p = res.get("params", {})
    runs = res.get("runs", [])
    med = {(r["rate"], r["mode"]): r for r in netns_bench.median_runs(runs)}
    sp = netns_bench.paired_speedups(runs)
    free = med.get(("unlimited", "exact"))
    rows = []
    for rate in p.get("rates", []):
        if rate == "unlimited" or rate not in sp:
            continue
        ex = med.get((rate, "exact"))
        ceiling = f"; ceiling {ex['step_time_s'] / free['step_time_s']:.2f}x" if ex and free else ""
        modes = ", ".join(f"{m} {v:.2f}x" for m, v in sp[rate].items())
        rows.append(f"{rate}: {modes}{ceiling}")
    met: dict[str, list[str]] = {}
    for rate, v in sp.items():
        for m, x in v.items():
            if rate != "unlimited" and x >= target:
                met.setdefault(m, []).append(rate)
    return "\n".join(
        [
            f"Run: {_env_line(res)}; the testbed above, preset {p.get('preset')}, 2 processes "
            f"x {p.get('devices_per_process')} CPU devices, {p.get('steps')} steps, "
            f"interleaved rounds: {p.get('rounds')}."
            + (f" {res['note'][:1].upper() + res['note'][1:]}." if res.get("note") else ""),
            "",
            netns_table(res),
            "",
            "Speedup over our exact by link rate (median of the rounds; ceiling: our exact at "
            "that rate / our exact without a limit, what a codec that cost nothing and moved "
            "nothing could give): "
            + "; ".join(rows)
            + f". {target}x reached by: "
            + ("; ".join(f"{m} at {', '.join(r)}" for m, r in met.items()) if met else "no mode")
            + ".",
            "",
        ]
    )


def _netns_target(netns: dict[str, Any], rate: str = "1gbit", target: float = 1.5) -> str:
    """The issue's target line: >= 1.5x step time at 1 Gbit/s (the paper: 1.38x), for the
    best compressed mode measured, with the link-time floor of each mode (link bytes / rate)
    and the unlimited step (compute) that explain it."""
    if netns.get("status") == "skipped":
        return ""
    runs = netns.get("runs", [])
    sp = netns_bench.paired_speedups(runs).get(rate, {})
    sp = {m: v for m, v in sp.items() if m.startswith("compressed")}
    if not sp:
        return f"Target (>= {target}x at {rate}): no measurement."
    best = max(sp, key=sp.get)
    med = {(r["rate"], r["mode"]): r for r in netns_bench.median_runs(runs)}
    bits = netns_bench.rate_bits(rate)

    def floor(mode):
        r = med.get((rate, mode), {})
        b = r.get("link_bytes_per_step")
        return f"{b * 8 / bits * 1e3:.0f} ms ({b / 2**20:.1f} MiB)" if b else "-"

    def comp(mode):
        r = med.get(("unlimited", mode))
        return f"{r['step_time_s'] * 1e3:.0f} ms" if r else "-"

    line = (
        f"Target: >= {target}x step-time speedup at {rate} (the paper reports 1.38x on its "
        f"cluster). Measured: {sp[best]:.2f}x ({best}"
        + "".join(f"; {m} {v:.2f}x" for m, v in sp.items() if m != best)
        + ") -- "
        + ("met." if sp[best] >= target else "MISSED.")
        + f" Link-time floor per step at {rate} (bytes that crossed the link / rate): "
        f"exact {floor('exact')}, {best} {floor(best)}; step without a limit: exact "
        f"{comp('exact')}, {best} {comp(best)}."
    )
    m = netns_bench.serial_model(runs, rate, best, target)
    if m:
        r_t = m["rate_for_target"]
        where = {
            "always": "at every rate",
            "never": "at no rate (the compressed mode saves too few link bytes)",
            "slower": f"at {(r_t or 0) / 1e6:.0f} Mbit/s or slower",
            "faster": f"at {(r_t or 0) / 1e6:.0f} Mbit/s or faster",
        }[m["reached"]]
        measured = "; ".join(
            f"{r} {v[best]:.2f}x"
            for r, v in netns_bench.paired_speedups(runs).items()
            if r != "unlimited" and best in v
        )
        line += (
            f" Serial model from the same runs (step = step without a limit + link "
            f"bytes / rate, no overlap): exact {m['compute_exact_s'] * 1e3:.0f} + "
            f"{m['link_exact_s'] * 1e3:.0f} ms, {best} {m['compute_mode_s'] * 1e3:.0f} + "
            f"{m['link_mode_s'] * 1e3:.0f} ms: {m['model']:.2f}x at {rate}; with a codec "
            f"that cost nothing, {m['free_codec']:.2f}x (the uncompressed data-parallel "
            f"all-reduce stays on the link); the model reaches {target}x {where}. "
            f"Measured {best} by rate: {measured}."
        )
    if netns.get("breakdown_note"):
        line += " " + netns["breakdown_note"]
    return line


def _env_line(res: dict[str, Any]) -> str:
    e = res.get("environment", {})
    return (
        f"{e.get('utc', '?')}, {e.get('cpu_model', '?')} ({e.get('cpu_count', '?')} "
        f"cores, shared), commit {str(e.get('git_commit'))[:10]}"
    )


def render_markdown(
    peers: dict[str, Any] | None,
    train: dict[str, Any] | None,
    netns: dict[str, Any] | None,
    *,
    full: bool = True,
) -> str:
    """The results as Markdown: RESULTS.md (``full``) or the README section (``full=False``:
    verdicts, training and netns tables, links)."""
    out = []
    if full:
        out += [
            "# Issue-6 results: codecs, training, rate-limited link",
            "",
            "Generated by `python -m bench.report` from bench/results/*.json; "
            "do not edit by hand. Timings are single-threaded on a shared, loaded 2-core "
            "machine: compare codecs within one table (same run), not across runs.",
            "",
        ]
    if peers:
        out += [
            '### Codecs at REL 0.01 on the real dumps: is `codec="auto"` on the Pareto '
            "front (ratio vs compress GB/s)?",
            "",
            f"Run: {_env_line(peers)}. Ratio = raw float32 bytes / compressed bytes "
            "(jax_lossy_comm: the frame's bytes, what a variable-size exchange moves); "
            "max err / eb in float64; jitted JAX codecs timed after warm-up with "
            "`block_until_ready`, median of repeats. The library enters the front as "
            "jlc-auto; its fixed/dedup/entropy forms are listed in the full tables.",
            "",
            pareto_table(peers),
            "",
        ]
        v = violations(peers)
        vb = [r for r in v if r["error_bounded"]]
        out += [
            (
                "**Bound violations (error-bounded codecs over their bound): "
                + (
                    ", ".join(f"{r['codec']} on {r['dump']} REL {r['eb_rel']}" for r in vb)
                    if vb
                    else "none"
                )
                + ".** "
                + "Codecs without a bound that went over it on some input: "
                + (", ".join(sorted({r["codec"] for r in v if not r["error_bounded"]})) or "none")
                + "."
            ),
            "",
        ]
        skipped = [c for c in peers.get("codecs", []) if not c.get("available")]
        if skipped:
            out += [
                "Skipped (not installed): "
                + ", ".join(f"{c['name']} ({c['skip_reason']})" for c in skipped),
                "",
            ]
    if full and peers:
        for tiled, title in (
            (False, "real dumps"),
            (True, "tilings (each dump stacked to about 32 MiB)"),
        ):
            out += [
                f"### Compression ratio, {title} ('!' = over the bound)",
                "",
                ratio_matrix(peers, tiled),
                "",
            ]
        for dump in dict.fromkeys(r["dump"] for r in peers["rows"]):
            for eb in peers["params"]["eb_rels"]:
                if any(r["dump"] == dump and r["eb_rel"] == eb for r in peers["rows"]):
                    out += [f"#### {dump}, REL {eb}", "", codec_table(peers, dump, eb), ""]
    if train:
        p = train.get("params", {})
        out += [
            "### DLRM training: exact vs compressed vs quantized-comm exchange",
            "",
            f"Run: {_env_line(train)}; preset {p.get('preset')}, {p.get('steps')} steps, "
            f"seed {p.get('seed')}, {p.get('devices')} virtual CPU devices, data "
            f"{train.get('data')}, eval on {p.get('eval_rows')} held-out rows. Bytes are "
            "the forward exchange of all devices per step (the library on CPU uses the "
            "dense path: it moves the static fixed-rate capacity; `frames` is what a "
            "variable-size exchange would move). jlc-paper: tiers 0.01/0.03/0.05 and log "
            f"schedule x2 over {p.get('early_stage_frac')} of the run; jlc-auto: the "
            "automatic per-table policy.",
            "",
            train_compare.markdown_table(train.get("runs", [])),
            "",
        ]
    if netns:
        p = netns.get("params", {})
        out += [
            f"### Rate-limited link: 2 processes x {p.get('devices_per_process')} CPU "
            f"device(s) in a network namespace",
            "",
            f"Run: {_env_line(netns)}; preset {p.get('preset')}, {p.get('steps')} "
            f"steps (first {p.get('log_every')} = compile, dropped), gloo over the "
            "namespace's 127.0.0.1 limited with tc ("
            + (netns["runs"][0]["qdisc"].split("\n")[0][:140] if netns.get("runs") else "-")
            + "). "
            + (f"{netns['note'][:1].upper() + netns['note'][1:]}. " if netns.get("note") else "")
            + "Step time: median over rounds of each run's median step (compile interval "
            "dropped); speedup: median over rounds of exact / compressed step time of the "
            "same round (rounds interleave the modes); forward bytes: the forward exchange "
            "of all devices (compressed-bwd also compresses the backward exchange, the "
            "other modes send it raw); link bytes: everything the namespace sent per step "
            "(both exchanges, the ids all-to-all, the data-parallel gradient all-reduce), "
            "from /proc/net/dev.",
            "",
            netns_table(netns),
            "",
            _netns_target(netns),
            "",
        ]
    if full:
        out += [
            "### Plots",
            "",
            "![Pareto](pareto_rel0.01.png)",
            "",
            "![ratio per table](ratio_bars_rel0.01.png)",
            "",
            "![accuracy](accuracy_curves.png)",
            "",
        ]
    else:
        out += [
            "Full tables: [bench/results/RESULTS.md](bench/results/RESULTS.md); plots: "
            "[Pareto](bench/results/pareto_rel0.01.png), "
            "[ratio per table](bench/results/ratio_bars_rel0.01.png), "
            "[accuracy curves](bench/results/accuracy_curves.png).",
            "",
        ]
    return "\n".join(out)


def codec_markdown(result: dict[str, Any]) -> str:
    """codec.md and the README's codec section: every row of a ``--suite targets`` result and
    issue 2's checks."""
    rows, env = result["rows"], result["environment"]
    cpu = env.get("cpu_model", "?")
    lines = [
        f"Single thread, {cpu}; jax {env.get('packages', {}).get('jax', '?')}. "
        "Ratio = raw float32 bytes / frame bytes; GB/s of raw float32; "
        "err/eb = max |x - x_hat| / eb_abs (float64). Generated by "
        "`python -m bench.codec_bench --suite targets`.",
        "",
        "| dump | REL | codec | ratio | err/eb | compress GB/s | decompress GB/s |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r["status"] != "ok":
            continue
        err = "-" if r["codec"] == "memcpy" else f"{r['max_err_over_eb']:.3f}"
        lines.append(
            f"| {r['dump']} | {r['eb_rel']} | {r['codec']} | {r['ratio']:.2f} | {err} | "
            f"{r['compress_gbps']:.2f} | {r['decompress_gbps']:.2f} |"
        )
    lines += [
        "",
        "Targets of issue 2 at REL 0.01 (measured in the same run):",
        "",
        "| dump | check | measured | target | met | note |",
        "|---|---|---:|---:|---|---|",
    ]
    for c in result.get("checks", []):
        lines.append(
            f"| {c['dump']} | {c['what']} | {c['value']:.3g} | {c['target']:g} | "
            f"{'yes' if c['ok'] else '**no**'} | {c.get('note', '')} |"
        )
    return "\n".join(lines) + "\n"


def summary(peers, train, netns) -> str:
    """The printed summary: Pareto verdicts, violations, training table, netns speedups."""
    lines = []
    if peers:
        lines.append(
            "== Pareto verdict per real dump at REL 0.01 (ratio vs compress GB/s, bound honoured)"
        )
        for a in verdict_rows(peers):
            au = a["auto"] or {}
            lines.append(
                f"  {a['dump']:<18} jlc-auto {bu.fmt(au.get('ratio'), '.1f')}x "
                f"{_gbps(au.get('compress_gbps', float('nan')))} GB/s  "
                f"{'ON the front' if au.get('on_front') else 'NOT on the front'}; "
                f"front: {', '.join(a['front_bounded'])}; {_verdict_note(a)}"
            )
        vb = [r for r in violations(peers) if r["error_bounded"]]
        lines.append(
            "== Bound violations by error-bounded codecs: "
            + (
                ", ".join(f"{r['codec']}@{r['dump']}/REL{r['eb_rel']}" for r in vb)
                if vb
                else "none"
            )
        )
        ex = sorted({r["codec"] for r in violations(peers) if not r["error_bounded"]})
        lines.append(
            "   (codecs without a bound that exceeded eb_abs somewhere: "
            + (", ".join(ex) or "none")
            + ")"
        )
    if train:
        lines.append("== Training comparison")
        lines.append(train_compare.markdown_table(train.get("runs", [])))
    if netns:
        lines.append("== Rate-limited link (netns)")
        lines.append(netns_bench.format_summary(netns))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- run
def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _update_readme(sections: Sequence[tuple[str, str, str]]) -> None:
    """Replaces each ``(begin, end, text)`` section of README.md that has its markers."""
    text = README.read_text()
    for begin, end, new in sections:
        try:
            text = bu.replace_between_markers(text, new, begin, end)
            print(f"updated {README} between {begin} and {end}")
        except ValueError as e:
            print(f"README not updated: {e}")
    README.write_text(text)


def render(results: Path = RESULTS, *, readme: bool = True) -> int:
    """Renders everything from the JSON results in ``results``: the figures, RESULTS.md,
    codec.md and (``readme``) the README's two result sections; prints the summary.

    Returns:
      0, or 1 if the figures failed (the tables are written all the same).
    """
    rc = 0
    peers = _load(results / "peers.json")
    train = _load(results / "train_compare.json")
    netns = _load(results / "netns.json")
    codec = _load(results / "codec.json")
    two_node = _load(results / "netns_two_node.json")
    rates = _load(results / "netns_two_node_rates.json")
    try:
        for p in figures.plot_all(results):
            print(f"wrote {p}")
    except Exception as e:  # noqa: BLE001 - a figure must not lose the tables
        print(f"figures failed: {type(e).__name__}: {e}")
        rc = 1
    (results / "RESULTS.md").write_text(render_markdown(peers, train, netns, full=True) + "\n")
    print(f"wrote {results / 'RESULTS.md'}")
    sections = [(BEGIN, END, render_markdown(peers, train, netns, full=False))]
    if codec:
        (results / "codec.md").write_text(codec_markdown(codec))
        print(f"wrote {results / 'codec.md'}")
        sections.insert(0, (CODEC_BEGIN, CODEC_END, codec_markdown(codec)))
    if two_node:
        (results / "two_node.md").write_text(two_node_markdown(two_node))
        print(f"wrote {results / 'two_node.md'}")
        sections.append((TWO_NODE_BEGIN, TWO_NODE_END, two_node_markdown(two_node)))
    if rates:
        (results / "two_node_rates.md").write_text(rate_sweep_markdown(rates))
        print(f"wrote {results / 'two_node_rates.md'}")
        sections.append((RATES_BEGIN, RATES_END, rate_sweep_markdown(rates)))
    if readme and README.is_file():
        _update_readme(sections)
    print()
    print(summary(peers, train, netns))
    if two_node:
        print("== Two-node testbed (netns_two_node.json)")
        print(netns_bench.format_summary(two_node))
    return rc


def _step(name: str, python: str, module: str, out: str, extra: Sequence[str]) -> int:
    cmd = [python, "-m", module, "--out", str(RESULTS / out), *extra]
    print(f"\n### {name}: {shlex.join(cmd)}", flush=True)
    t0 = _dt.datetime.now()
    rc = subprocess.call(cmd, cwd=REPO)
    print(
        f"### {name}: exit {rc} after {(_dt.datetime.now() - t0).total_seconds():.0f} s", flush=True
    )
    return rc


def two_node_args(torchrec_python: str, quick: bool = False) -> list[str]:
    """The two-node step's flags (issue 16's acceptance run): 2 processes x 2 devices at
    1 Gbit/s and unlimited, 2 interleaved rounds, the library's exact / flat / hierarchical
    exchanges and, given ``torchrec_python``, TorchRec fp32 and each quantized comm."""
    modes = ["exact", "compressed-flat", "compressed-hierarchical"]
    if torchrec_python:
        modes += ["torchrec-fp32", "torchrec-fp16", "torchrec-bf16", "torchrec-int8"]
    out = ["--testbed", "two-node", "--devices-per-process", "2", "--modes", *modes]
    out += ["--rates", "1gbit"] if quick else ["--rates", "1gbit", "unlimited", "--rounds", "2"]
    out += ["--steps", "9"] if quick else []
    return out + (["--torchrec-python", torchrec_python] if torchrec_python else [])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.report", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--peers-python",
        default=os.environ.get("JLC_PEERS_PYTHON", sys.executable),
        help="interpreter with the peers (pysz, zfpy, torch, fbgemm-gpu-cpu) and "
        "jax_lossy_comm installed",
    )
    ap.add_argument(
        "--train-python", default=sys.executable, help="interpreter with jax_lossy_comm[train]"
    )
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--skip-codec", action="store_true", help="skip the issue-2 targets suite")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-netns", action="store_true")
    ap.add_argument(
        "--skip-two-node",
        action="store_true",
        help="skip the two-node testbed with TorchRec (issue 16)",
    )
    ap.add_argument(
        "--torchrec-python",
        default=os.environ.get("JLC_TORCHREC_PYTHON", ""),
        help="interpreter of the TorchRec venv (see bench/torchrec_peer.py); without it the "
        "two-node step runs the library's modes only",
    )
    ap.add_argument("--two-node-args", default="", help="extra flags for the two-node step")
    ap.add_argument("--report-only", action="store_true", help="only re-render from the JSON")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="no tilings, 3 repeats, 60 training steps, netns at 1gbit only with 9 steps",
    )
    ap.add_argument("--peer-args", default="", help="extra flags for the peers suite")
    ap.add_argument("--codec-args", default="", help="extra flags for the targets suite")
    ap.add_argument("--train-args", default="", help="extra flags for bench.train_compare")
    ap.add_argument("--netns-args", default="", help="extra flags for bench.netns_bench")
    ap.add_argument("--no-readme", action="store_true", help="do not touch README.md")
    args = ap.parse_args(argv)
    rc = 0
    quick = ["--quick"] if args.quick else []
    steps = [
        ("codec comparison", args.skip_peers, args.peers_python, "bench.codec_bench",
         "peers.json", ["--suite", "peers", "--no-report", *quick], args.peer_args),
        ("codec targets", args.skip_codec, args.peers_python, "bench.codec_bench",
         "codec.json", ["--suite", "targets", "--no-report", *quick], args.codec_args),
        ("training comparison", args.skip_train, args.train_python, "bench.train_compare",
         "train_compare.json",
         ["--steps", "60", "--eval-every", "20", "--log-every", "10"] if args.quick else [],
         args.train_args),
        ("rate-limited link", args.skip_netns, args.train_python, "bench.netns_bench",
         "netns.json", ["--rates", "1gbit", "--steps", "9"] if args.quick else [],
         args.netns_args),
        ("two-node testbed", args.skip_two_node, args.train_python, "bench.netns_bench",
         "netns_two_node.json", two_node_args(args.torchrec_python, args.quick),
         args.two_node_args),
    ]  # fmt: skip
    for name, skip, python, module, out, extra, more in steps:
        if not (skip or args.report_only):
            rc |= _step(name, python, module, out, [*extra, *shlex.split(more)])
    return rc | render(RESULTS, readme=not args.no_readme)


if __name__ == "__main__":
    sys.exit(main())
