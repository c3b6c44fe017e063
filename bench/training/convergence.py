"""Fidelity of long runs: paired AUC differences with their 95% intervals, the seeds a
+/-0.0005 interval would take, whether the exact run has converged, the bytes of the
exchange and of the gradient all-reduce, and the learning curves.

Reads a ``train_compare --seeds`` result (its runs' ``curves`` and byte counts) and renders
``<result>.md`` and ``<result>.png`` (``bench.reports.report`` re-renders every
``bench/results/convergence_*.json`` the same way)::

    python -m bench.training.train_compare --preset dcnv2_small --seeds 0 1 2 --steps 20000 \
        --eval-every 1000 --eval-rows 100000 --checkpoint-every 1000 \
        --runs exact jlc-paper-ar-adagrad-eb0.008 jlc-paper-ar-adagrad-eb0.005 \
        --workdir /tmp/conv_dcn --out bench/results/convergence_dcnv2_small.json
    python -m bench.training.convergence bench/results/convergence_dcnv2_small.json

Converged: the exact run's eval AUC gains less than ``CONVERGED_GAIN`` over the last fifth of
its steps (on every seed). Intervals: Student's t over the paired differences (each run minus
the exact run of its own seed).

References:
  Feng et al., SC24, arXiv 2407.04272, sec. 6 (accuracy against exact).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: the half-width a paired 95% interval should reach (the 0.05% AUC target)
TARGET_HALF_WIDTH = 5e-4
#: the exact run has converged when its AUC gains less than this over the last fifth
CONVERGED_GAIN = 5e-4
MIB = 2**20


def t_half_width(diffs: Sequence[float]) -> float | None:
    """Half-width of the two-sided 95% Student's t interval of the mean of ``diffs`` (None
    below two values)."""
    from scipy.stats import t

    n = len(diffs)
    if n < 2:
        return None
    return float(t.ppf(0.975, n - 1) * statistics.stdev(diffs) / math.sqrt(n))


def seeds_needed(std: float, half: float = TARGET_HALF_WIDTH, most: int = 10_000) -> int:
    """The fewest seeds whose 95% t interval is at most ``half`` wide on each side, at a
    standard deviation ``std`` of the paired differences (``most`` if none up to it)."""
    from scipy.stats import t

    for n in range(2, most):
        if t.ppf(0.975, n - 1) * std / math.sqrt(n) <= half:
            return n
    return most


def last_fifth_gain(steps: Sequence[int], auc: Sequence[float], total: int) -> float | None:
    """AUC at the last eval minus AUC at the last eval at or before 80% of ``total`` steps
    (None without both)."""
    before = [a for s, a in zip(steps, auc) if s <= 0.8 * total]
    if not before or not auc or steps[-1] <= 0.8 * total:
        return None
    return float(auc[-1] - before[-1])


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """Per run name: paired AUC differences with the 95% interval and the seeds for
    +/-``TARGET_HALF_WIDTH``, bytes per step (all devices) of the forward exchange and the
    gradient all-reduce (over every seed the run finished; the AUC over those paired with a
    finished exact run); and the exact run's gain over the last fifth per seed."""
    runs = [r for r in result["runs"] if r.get("status") == "ok"]
    total = result["params"]["steps"]
    exact = {r["seed"]: r for r in runs if r["name"] == "exact"}
    gains = {
        str(s): last_fifth_gain(r["curves"]["eval_step"], r["curves"]["eval_auc"], total)
        for s, r in sorted(exact.items())
    }
    out: dict[str, Any] = {}
    for name in dict.fromkeys(r["name"] for r in runs):
        every = [r for r in runs if r["name"] == name]  # bytes: every seed that finished
        rs = [r for r in every if r["seed"] in exact]  # AUC: the seeds paired with exact
        d = [r["auc"] - exact[r["seed"]]["auc"] for r in rs]
        mean = statistics.fmean(d) if d else None
        half = t_half_width(d)
        std = statistics.stdev(d) if len(d) > 1 else None

        def per_step(key, every=every):  # over the runs that recorded it
            vals = [r[key] for r in every if r.get(key) is not None]
            return statistics.fmean(vals) if vals else 0.0

        out[name] = {
            "seeds": [r["seed"] for r in rs],
            "auc_diff_by_seed": {str(r["seed"]): x for r, x in zip(rs, d)},
            "auc_diff_mean": mean,
            "auc_diff_std": std,
            "ci95_half_width": half,
            "seeds_for_target": None if not std else seeds_needed(std),
            "exchange_raw": per_step("raw_bytes_per_step"),
            "exchange_moved": per_step("moved_bytes_per_step"),
            "exchange_frames": per_step("frame_bytes_per_step"),
            "allreduce_raw": per_step("allreduce_raw_bytes_per_step"),
            "allreduce_moved": per_step("allreduce_moved_bytes_per_step"),
            "allreduce_frames": per_step("allreduce_frame_bytes_per_step"),
        }
    known = [g for g in gains.values() if g is not None]
    return {
        "exact_gain_last_fifth": gains,
        "converged": bool(known) and all(g < CONVERGED_GAIN for g in known),
        "runs": out,
    }


def _ratio(raw: float, part: float) -> str:
    return f"{raw / part:.2f}x" if part > 0 else "-"


def unfinished(result: dict[str, Any]) -> dict[str, dict[str, list[int]]]:
    """The runs a partial sweep lacks: name -> status (``missing``: not run yet; ``error``,
    ``timeout``: failed) -> seeds, in the result's order."""
    out: dict[str, dict[str, list[int]]] = {}
    for r in result["runs"]:
        if r.get("status") != "ok":
            out.setdefault(r["name"], {}).setdefault(r.get("status") or "?", []).append(r["seed"])
    return out


def markdown(result: dict[str, Any]) -> str:
    """The page of a long-run sweep: settings, convergence, the paired differences with
    their intervals, the runs a partial sweep lacks, and the bytes."""
    p, s = result["params"], summarize(result)
    gains = ", ".join(
        f"seed {k}: {'-' if g is None else f'{g:+.5f}'}"
        for k, g in s["exact_gain_last_fifth"].items()
    )
    lines = [
        f"# Fidelity of long runs: preset {p['preset']}",
        "",
        f"{p['steps']} steps, seeds {', '.join(map(str, p['seeds']))}, {p['eval_rows']:,} "
        f"held-out rows, {p['devices']} devices. Produced by `python -m "
        f"bench.training.convergence` from `train_compare`'s result "
        f"({(result['environment'].get('git_commit') or '')[:10]}).",
        "",
        f"**Converged: {'yes' if s['converged'] else 'no'}.** The exact run's eval AUC over "
        f"the last fifth of its steps gains {gains} (converged below {CONVERGED_GAIN:g}).",
        "",
        "AUC differences are paired (each run minus the exact run of its seed); the interval "
        "is Student's t at 95%; the last column is the number of seeds that would make it "
        f"+/-{TARGET_HALF_WIDTH:g} at the measured spread.",
        "",
        "| run | seeds | AUC - exact (mean) | 95% interval | per seed | seeds for "
        f"+/-{TARGET_HALF_WIDTH:g} |",
        "|---|---|---:|---|---|---:|",
    ]
    for name, r in s["runs"].items():
        half, m = r["ci95_half_width"], r["auc_diff_mean"]
        if m is None:  # no seed paired with a finished exact run
            lines.append(f"| {name} | 0 | - | - | - | - |")
            continue
        ci = "-" if half is None else f"[{m - half:+.5f}, {m + half:+.5f}] (±{half:.5f})"
        per = " / ".join(f"{x:+.5f}" for x in r["auc_diff_by_seed"].values())
        lines.append(
            f"| {name} | {len(r['seeds'])} | {m:+.5f} | {ci} | {per} | "
            f"{r['seeds_for_target'] or '-'} |"
        )
    if lacking := unfinished(result):

        def seeds_of(by):
            return "; ".join(f"{st}: {', '.join(map(str, seeds))}" for st, seeds in by.items())

        listed = ", ".join(f"{name} ({seeds_of(by)})" for name, by in lacking.items())
        lines += ["", f"**Partial sweep.** Not in the tables, by seed: {listed}."]
    lines += [
        "",
        "Bytes per step, all devices: the forward exchange (moved on the CPU's packed path; "
        "frames, what a GPU's ragged path sends) and the gradient all-reduce (moved on the "
        "CPU's dense path, the capacity; frames as above), each with raw / bytes.",
        "",
        "| run | exchange moved | raw / moved | exchange frames | raw / frames "
        "| all-reduce moved | raw / moved | all-reduce frames | raw / frames |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in s["runs"].items():
        ex, ar = r["exchange_raw"], r["allreduce_raw"]
        lines.append(
            f"| {name} | {r['exchange_moved'] / MIB:.3f} MiB | {_ratio(ex, r['exchange_moved'])} "
            f"| {r['exchange_frames'] / MIB:.3f} MiB | {_ratio(ex, r['exchange_frames'])} "
            f"| {r['allreduce_moved'] / MIB:.3f} MiB | {_ratio(ar, r['allreduce_moved'])} "
            f"| {r['allreduce_frames'] / MIB:.3f} MiB | {_ratio(ar, r['allreduce_frames'])} |"
        )
    return "\n".join(lines) + "\n"


def plot_curves(result: dict[str, Any], path: str | Path) -> Path:
    """Eval AUC against steps, mean over seeds, one line per run; beside it the paired AUC
    difference to exact against steps."""
    from bench.reports.figures import pyplot, save

    plt = pyplot()
    runs = [r for r in result["runs"] if r.get("status") == "ok"]
    exact = {r["seed"]: r["curves"] for r in runs if r["name"] == "exact"}
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.5))
    for k, name in enumerate(dict.fromkeys(r["name"] for r in runs)):
        color = f"C{k % 10}"  # one colour per run in both panels
        mine = [r for r in runs if r["name"] == name]
        curves = [r["curves"] for r in mine]
        steps = curves[0]["eval_step"]
        n = min(len(c["eval_auc"]) for c in curves)
        auc = [statistics.fmean(c["eval_auc"][i] for c in curves) for i in range(n)]
        seeds = ", ".join(str(r["seed"]) for r in mine)
        ax0.plot(steps[:n], auc, marker=".", color=color, label=f"{name} (seeds {seeds})")
        if name == "exact":
            continue
        pairs = [
            (r["curves"], exact[r["seed"]])
            for r in runs
            if r["name"] == name and r["seed"] in exact
        ]
        if not pairs:
            continue
        m = min(min(len(c["eval_auc"]), len(e["eval_auc"])) for c, e in pairs)
        diff = [statistics.fmean(c["eval_auc"][i] - e["eval_auc"][i] for c, e in pairs)
                for i in range(m)]  # fmt: skip
        ax1.plot(steps[:m], diff, marker=".", color=color, label=name)
    ax0.set(xlabel="step", ylabel="eval AUC (mean over seeds)", title="Learning curves")
    ax1.axhspan(-TARGET_HALF_WIDTH, TARGET_HALF_WIDTH, color="0.9", label="±0.0005")
    ax1.set(xlabel="step", ylabel="AUC - exact, paired (mean)", title="Difference to exact")
    for ax in (ax0, ax1):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=9)
    fig.suptitle(f"preset {result['params']['preset']}, {result['params']['steps']} steps")
    return save(fig, path, dpi=120)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result", help="a train_compare --seeds result JSON")
    args = ap.parse_args(argv)
    src = Path(args.result)
    result = json.loads(src.read_text())
    src.with_suffix(".md").write_text(markdown(result))
    print("wrote", src.with_suffix(".md"), plot_curves(result, src.with_suffix(".png")))


if __name__ == "__main__":
    main()
