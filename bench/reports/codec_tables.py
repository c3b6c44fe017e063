"""The codec tables of ``bench.reports.report``: the Pareto verdict per real dump and the
per-dump codec tables of a ``bench.codecs.codec_bench --suite peers`` result (laid out on a page
by ``bench.reports.pages``), and codec.md (every row and check of a ``--suite targets`` result).
"""

from __future__ import annotations

import math
from typing import Any

from bench import bench_util as bu
from bench.codecs import codec_rows, pareto


def gbps_text(x: float) -> str:
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


#: Why the casts and fixed-rate codecs are faster (said once on the codec page).
FASTER_WHY = (
    "casts, fixed-rate quantization or ZFP, without auto's range scan, per-value bound check "
    "and lossless stage"
)


def verdict_note(a: dict[str, Any], explain: bool = True) -> str:
    """The verdict of one dump in words; ``explain=False`` leaves out :data:`FASTER_WHY`."""
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
                f"{gbps_text(max(p['compress_gbps'] for p in low))} GB/s"
                + (f": {FASTER_WHY})" if explain else ")")
            )
        if high:
            parts.append(
                "faster at a lower ratio: "
                + ", ".join(
                    f"{p['codec']} ({gbps_text(p['compress_gbps'])} GB/s at {bu.fmt(p['ratio'], '.1f')}x)"
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
            lines.append(f"| {r['codec']} | {codec_rows.not_run(r, 80)} | | | | | |")
            continue
        bound = codec_rows.bound_label(r)
        lines.append(
            f"| {'**' + r['codec'] + '**' if r['codec'] == 'jlc-auto' else r['codec']} "
            f"| {r['ratio']:.2f} | {r['max_err_over_eb']:.4f} | "
            f"{gbps_text(r['compress_gbps'])} | {gbps_text(r['decompress_gbps'])} | {bound} | "
            f"{'*' if r['codec'] in front else ''} |"
        )
    return "\n".join(lines)


def codec_markdown(result: dict[str, Any]) -> str:
    """bench/results/codec.md: the checks of a ``--suite targets`` result first (a short table,
    its notes numbered below it), then every row of the run."""
    rows, env = result["rows"], result["environment"]
    cpu = env.get("cpu_model", "?")
    lines = [
        f"Single thread, {cpu}; jax {env.get('packages', {}).get('jax', '?')}. "
        "Ratio = raw float32 bytes / frame bytes; GB/s of raw float32; "
        "err/eb = max |x - x_hat| / eb_abs (float64). Generated by "
        "`python -m bench.codecs.codec_bench --suite targets`.",
        "",
        "Targets at REL 0.01 (measured in the same run):",
        "",
        "| dump | check | measured | target | met |",
        "|---|---|---:|---:|---|",
    ]
    notes: list[str] = []  # each distinct note once, numbered in order of first use
    for c in result.get("checks", []):
        ref = ""
        if c.get("note"):
            if c["note"] not in notes:
                notes.append(c["note"])
            ref = f" [{notes.index(c['note']) + 1}]"
        lines.append(
            f"| {c['dump']} | {c['what']} | {c['value']:.3g} | {c['target']:g} | "
            f"{'yes' if c['ok'] else '**no**'}{ref} |"
        )
    if notes:
        lines += ["", *(f"{k}. {note}" for k, note in enumerate(notes, 1))]
    lines += [
        "",
        "Every row of the run:",
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
    return "\n".join(lines) + "\n"
