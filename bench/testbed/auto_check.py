"""``--compression auto --grad-allreduce auto`` on the testbed, beside every fixed choice run in
the same file, rate and interleaved rounds: what it chose, its step against the best fixed
step and against exact's, its own prediction and its hindsight choice.

Three sets of runs: the files of the step-time rounds 1 and 2
(``step_time_rounds.ROUNDS_1_2``, auto's first rule: the fastest predicted candidate);
``AUTO_FILES_ONE_WINDOW``, measured after the rule changed (``models.dlrm.cluster.auto_exchange``:
the least codec work within the margin, the fixed-rate gradient codec a candidate) with the
probe timing each link in one window; and ``AUTO_FILES``, the same configurations run again
with the windowed probe (``models.dlrm.cluster.exchange_probe``: the mean of 4 windows, the
1 KiB all-to-all chained). Rendered into ``step_time_check.md`` by
:mod:`bench.testbed.step_time_check`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bench.testbed.testbed_inputs import fmt_ms, median_runs

#: runs of ``auto`` with the windowed probe: (label, rates, file), every fixed choice beside it;
#: the configurations of ``AUTO_FILES_ONE_WINDOW`` run again
AUTO_FILES = (
    ("2x2 DCNv2, 4 rounds", ("250mbit",), "netns_auto_windows_dcnv2_250mbit.json"),
    ("2x2 DCNv2", ("1gbit", "250mbit"), "netns_auto_windows_dcnv2.json"),
    ("2x2", ("300mbit",), "netns_auto_windows_2x2_300mbit.json"),
    ("2x3", ("400mbit",), "netns_auto_windows_2x3_400mbit.json"),
    ("2x4", ("300mbit",), "netns_auto_windows_2x4_300mbit.json"),
    ("2x2", ("200mbit",), "netns_auto_windows_2x2_200mbit.json"),
    ("2x4", ("200mbit",), "netns_auto_windows_2x4_200mbit.json"),
    ("2x2", ("100mbit",), "netns_auto_windows_2x2_100mbit.json"),
    ("2x4", ("100mbit",), "netns_auto_windows_2x4_100mbit.json"),
    ("2x3", ("unlimited",), "netns_auto_windows_2x3_unlimited.json"),
    ("2x2", ("500mbit",), "netns_auto_windows_2x2_500mbit.json"),
    ("2x3", ("150mbit",), "netns_auto_windows_2x3_150mbit.json"),
    ("2x4", ("400mbit",), "netns_auto_windows_2x4_400mbit.json"),
    ("2x4, 4 rounds", ("400mbit",), "netns_auto_windows_2x4_400mbit_4rounds.json"),  # rerun
    ("2x1 loopback", ("unlimited", "1gbit"), "netns_auto_windows_loopback.json"),
)
#: runs of ``auto`` after its rule changed, the probe timing each link in one window
AUTO_FILES_ONE_WINDOW = (
    ("2x1 loopback", ("unlimited", "1gbit"), "netns.json"),
    ("2x2", ("200mbit",), "netns_auto_2x2_200mbit.json"),
    ("2x4", ("200mbit",), "netns_auto_2x4_200mbit.json"),
    ("2x3", ("unlimited",), "netns_auto_2x3.json"),
    ("2x2", ("100mbit",), "netns_auto_2x2_100mbit.json"),
    ("2x4", ("100mbit",), "netns_auto_2x4_100mbit.json"),
    ("2x2 at 500 Mbit/s", ("500mbit",), "netns_two_node_2x2_500mbit.json"),  # round 3's files
    ("2x3 at 150 Mbit/s", ("150mbit",), "netns_two_node_2x3_150mbit.json"),
    ("2x4 at 400 Mbit/s", ("400mbit",), "netns_two_node_2x4_400mbit.json"),
    ("2x2 at 300 Mbit/s", ("300mbit",), "netns_two_node_2x2_300mbit.json"),  # round 4's
    ("2x3 at 400 Mbit/s", ("400mbit",), "netns_two_node_2x3_400mbit.json"),
    ("2x4 at 300 Mbit/s", ("300mbit",), "netns_two_node_2x4_300mbit.json"),
    # DCNv2 (Adagrad): beside auto the modes it may choose, the all-reduce exact
    ("2x2 DCNv2", ("1gbit", "250mbit"), "netns_auto_dcnv2.json"),
    ("2x2 DCNv2, 4 rounds", ("250mbit",), "netns_auto_dcnv2_250mbit.json"),  # the miss rerun
)
TARGET = 0.05  # within 5% of the best fixed choice, never more than 5% slower than exact


def round_groups(rounds) -> list[tuple[str, Sequence[str], str]]:
    """(label, rates, file) of every group of the step-time rounds."""
    return [(g[0], g[2], g[3]) for r in rounds for g in r.groups]


def auto_rows(results: Path, groups: Iterable[tuple[str, Sequence[str], str]]) -> list[dict]:
    """One row per (file, rate) of ``groups`` with an ``auto`` run: its choice and step, the
    best of the other library modes run beside it (median of the rounds), exact's; files not
    yet measured are left out."""
    out = []
    for label, rates, file in groups:
        path = results / file
        if not path.exists():
            continue
        runs = json.loads(path.read_text())["runs"]
        med = median_runs(runs)
        for rate in rates:
            auto = med.get((rate, "auto"))
            fixed = {
                m: r["step_time_s"]
                for (r_, m), r in med.items()
                if r_ == rate and m != "auto" and not m.startswith("torchrec")
            }
            if auto is None or not fixed:
                continue
            best = min(fixed, key=fixed.get)
            out.append(
                {
                    "points": label,
                    "rate": rate,
                    "choice": auto.get("auto_choice"),  # the first round's
                    "choices": [
                        r.get("auto_choice")
                        for r in runs
                        if (r["rate"], r["mode"]) == (rate, "auto") and r.get("status") == "ok"
                    ],
                    "auto_step_s": auto["step_time_s"],
                    "auto_predicted_step_s": auto.get("auto_predicted_step_s"),
                    "hindsight_choice": auto.get("auto_hindsight_choice"),
                    "best_fixed": best,
                    "best_fixed_step_s": fixed[best],
                    "vs_best": auto["step_time_s"] / fixed[best] - 1,
                    "vs_exact": auto["step_time_s"] / fixed["exact"] - 1
                    if "exact" in fixed
                    else None,
                    "fixed_steps_s": fixed,
                }
            )
    return out


def _table(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = [
        "| layout | link | auto chose | auto | its prediction | best fixed | vs best | "
        "vs exact | hindsight |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in rows:
        ve = "" if a["vs_exact"] is None else f"{a['vs_exact']:+.1%}"
        choices = a.get("choices") or [a["choice"]]
        chose = a["choice"] if len(set(choices)) == 1 else ", ".join(choices) + " (by round)"
        pred = a["auto_predicted_step_s"]
        lines.append(
            f"| {a['points']} | {a['rate']} | {chose} | {fmt_ms(a['auto_step_s'])} | "
            f"{'' if pred is None else fmt_ms(pred)} | {a['best_fixed']} "
            f"{fmt_ms(a['best_fixed_step_s'])} | {a['vs_best']:+.1%} | {ve} | "
            f"{a.get('hindsight_choice') or ''} |"
        )
    return lines


def _tally(rows: Sequence[dict[str, Any]]) -> str:
    near = sum(a["vs_best"] <= TARGET for a in rows)
    vs_exact = [a["vs_exact"] for a in rows if a["vs_exact"] is not None]
    return (
        f"Within {TARGET:.0%} of the best fixed choice (or faster) on **{near} of {len(rows)}**; "
        f"against exact at worst {max(vs_exact):+.1%}."
        if vs_exact
        else ""
    )


def render_auto(
    before: Sequence[dict], after: Sequence[dict], windows: Sequence[dict] = ()
) -> list[str]:
    """The auto section of ``step_time_check.md`` (Markdown lines): ``windows`` (the windowed
    probe), ``after`` (the rule of today, the one-window probe), ``before`` (the first rule);
    empty without rows."""
    if not (before or after or windows):
        return []
    lines = [
        "### `--compression auto` beside the fixed choices",
        "",
        "Same file, rate and interleaved rounds (median of the rounds); auto (`--compression "
        "auto --grad-allreduce auto`) chooses the exchange (exact, flat, hierarchical) and the "
        "gradient all-reduce (exact, compressed) from its probe; its own prediction of the "
        "step it chose, and the choice it would make again with the compute its measured "
        "step implies (hindsight, the trainer's end block). The DCNv2 preset trains with "
        "Adagrad, whose head gradients auto keeps on the exact all-reduce (the accuracy "
        "guidance, docs/benchmarks/fidelity.md): beside it ran the modes it chooses among.",
        "",
    ]
    if windows:
        lines += [
            "With the windowed probe (each link the mean of 4 windows spread over the probe, "
            "the 1 KiB all-to-all 8 to a program), the configurations of the next table run "
            "again: " + _tally(windows),
            "",
            *_table(windows),
            "",
        ]
    if after:
        lines += [
            "After the rule changed (the least codec work among the candidates within the "
            "margin of the fastest; the fixed-rate gradient codec a candidate, `-ar-fixed`), "
            "the probe timing each link in one window: " + _tally(after),
            "",
            *_table(after),
            "",
        ]
    if before:
        lines += [
            "With the first rule (the fastest predicted candidate; the entropy-coded gradient "
            "codec only), in the rounds' files: " + _tally(before),
            "",
            *_table(before),
        ]
    return lines[:-1] if lines[-1] == "" else lines
