"""Fidelity over seeds: what ``train_compare --seeds`` adds to its result, and its page.

``seed_summary`` gives per run the mean and spread of AUC and log loss over the seeds and the
AUC difference to the exact run of the same seed (paired); ``fidelity_targets`` checks the
library's runs against exact (``AUC_TOLERANCE``) and MX4's bytes; ``seed_table``,
``fidelity_markdown`` and ``write_fidelity_report`` render them (Markdown and a figure).

References:
  Feng et al., SC24, arXiv 2407.04272, sec. 6 (accuracy vs exact).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import bench_util as bu
from bench.reports.wire_notes import bf16_wire_note

#: the library's error-bounded runs (the others are exact or fixed-precision baselines)
LIBRARY_RUNS = (
    "jlc-paper",
    "jlc-auto",
    "jlc-paper-ar",
    "jlc-paper-ar-bf16",
    "jlc-paper-ar-adagrad",
    "jlc-paper-ar-adagrad-eb0.008",
    "jlc-paper-ar-adagrad-eb0.005",
)

#: AUC within which a run counts as equal to exact (0.05%, the paper's accuracy criterion)
AUC_TOLERANCE = 5e-4


def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one value)."""
    return statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else 0.0


def _paired_mean(a: dict[str, float], b: dict[str, float]) -> float | None:
    """Mean of ``a[s] - b[s]`` over the seeds both hold (None if none)."""
    both = [s for s in a if s in b]
    return statistics.fmean(a[s] - b[s] for s in both) if both else None


def seed_summary(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per run name, over its seeds: the statistics of ``--seeds`` sweeps.

    Args:
      runs: ``run_one`` results with a ``seed``; the ``exact`` run of the same seed is the
        reference of the paired AUC and log-loss differences.

    Returns:
      ``{name: {seeds, auc_mean, auc_std, logloss_mean, logloss_std, auc_diff_mean,
      auc_diff_std, paired_seeds, auc_diff_by_seed, auc_diff_min, auc_diff_max,
      logloss_diff_mean, moved_bytes_per_step,
      raw_bytes_per_step, frame_bytes_per_step, moved_ratio, allreduce_moved_bytes_per_step,
      fallback_steps, bytes_vs_mx4, frame_bytes_vs_mx4}}`` with AUC and log loss as in
      ``summarize`` over every seed the run finished, differences as run minus exact over
      ``paired_seeds`` (those whose exact run finished too; positive AUC difference: better
      than exact; std None below two seeds), bytes per step of all devices (mean over seeds; moved: what this run's
      exchange path sent, frames: the variable-size frames a ragged exchange sends) and
      ``bytes_vs_mx4`` / ``frame_bytes_vs_mx4`` = MX4's bytes / this run's (``None``
      without an MX4 run). Runs that failed are left out; a name whose every seed failed
      is absent.
    """
    ok = [r for r in runs if r.get("status") == "ok"]
    exact = {r["seed"]: r for r in ok if r["name"] == "exact"}
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["name"] for r in ok):
        rs = [r for r in ok if r["name"] == name]
        auc, ll = _mean_std([r["auc"] for r in rs]), _mean_std([r["logloss"] for r in rs])
        paired = [r for r in rs if r["seed"] in exact]
        d_auc = [r["auc"] - exact[r["seed"]]["auc"] for r in paired]
        two = len(d_auc) > 1
        d_ll = [r["logloss"] - exact[r["seed"]]["logloss"] for r in paired]
        moved = sum(r["moved_bytes_per_step"] for r in rs) / len(rs)
        raw = sum(r["raw_bytes_per_step"] for r in rs) / len(rs)
        frame = sum(r["frame_bytes_per_step"] for r in rs) / len(rs)
        ar = sum(r.get("allreduce_moved_bytes_per_step") or 0.0 for r in rs) / len(rs)
        out[name] = {
            "seeds": [r["seed"] for r in rs],
            "auc_mean": auc[0],
            "auc_std": auc[1],
            "logloss_mean": ll[0],
            "logloss_std": ll[1],
            "auc_diff_mean": _mean_std(d_auc)[0] if d_auc else None,
            "auc_diff_std": _mean_std(d_auc)[1] if two else None,
            "paired_seeds": [r["seed"] for r in paired],
            "auc_diff_by_seed": {str(r["seed"]): d for r, d in zip(paired, d_auc)},
            "auc_diff_min": min(d_auc) if d_auc else None,
            "auc_diff_max": max(d_auc) if d_auc else None,
            "logloss_diff_mean": _mean_std(d_ll)[0] if d_ll else None,
            "moved_bytes_per_step": moved,
            "raw_bytes_per_step": raw,
            "frame_bytes_per_step": frame,
            "moved_ratio": raw / moved if moved else None,
            "allreduce_moved_bytes_per_step": ar,
            "fallback_steps": sum(r["fallback_steps"] for r in rs),
        }
    mx4 = out.get("mx4", {})
    for s in out.values():
        for key, ref in (("bytes_vs_mx4", "moved"), ("frame_bytes_vs_mx4", "frame")):
            m = mx4.get(f"{ref}_bytes_per_step")
            s[key] = m / s[f"{ref}_bytes_per_step"] if m else None
    return out


def fidelity_targets(
    summary: dict[str, dict[str, Any]], tolerance: float = AUC_TOLERANCE
) -> dict[str, Any]:
    """The targets of the fidelity sweep, judged on the seed means of ``seed_summary``.

    For each library run (``LIBRARY_RUNS``): ``within_tolerance`` (mean paired AUC
    difference to exact >= ``-tolerance``), ``auc_minus_mx4`` (its AUC minus MX4's, mean
    over the seeds both ran), ``no_worse_than_mx4`` (that mean >= 0) and
    ``fewer_bytes_than_mx4`` (MX4 bytes / its bytes); ``met`` when all three hold with at
    least 2x fewer bytes. ``best`` is the met run with the fewest bytes, else the library
    run with the fewest bytes among those within tolerance (``None`` if none is).
    """
    mx4 = summary.get("mx4")
    per: dict[str, dict[str, Any]] = {}
    for name in LIBRARY_RUNS:
        s = summary.get(name)
        if s is None or s["auc_diff_mean"] is None:
            continue
        within = s["auc_diff_mean"] >= -tolerance
        # paired through exact on the seeds both have (their differences to exact share it)
        vs_mx4 = _paired_mean(s["auc_diff_by_seed"], mx4["auc_diff_by_seed"]) if mx4 else None
        no_worse = vs_mx4 is not None and vs_mx4 >= 0.0
        fewer = s["bytes_vs_mx4"]
        per[name] = {
            "auc_diff_mean": s["auc_diff_mean"],
            "auc_minus_mx4": vs_mx4,
            "within_tolerance": within,
            "no_worse_than_mx4": no_worse,
            "fewer_bytes_than_mx4": fewer,
            "met": bool(within and no_worse and fewer is not None and fewer >= 2.0),
        }
    met = [n for n, t in per.items() if t["met"]]
    pool = met or [n for n, t in per.items() if t["within_tolerance"]]
    best = min(pool, key=lambda n: summary[n]["moved_bytes_per_step"]) if pool else None
    return {"tolerance": tolerance, "runs": per, "best": best, "met": bool(met)}


def seed_table(summary: dict[str, dict[str, Any]]) -> str:
    """Markdown table of ``seed_summary``: AUC and log loss (mean +- std over seeds), the
    paired AUC difference to exact (mean +- std, [min, max]), MiB moved per step, raw /
    moved, MX4's bytes / the run's (moved and frames), gradient all-reduce MiB per step."""
    lines = [
        "| exchange | seeds | AUC | AUC - exact (paired) | log loss | bytes moved / step "
        "| raw / moved | MX4 / moved | frames / step | MX4 / frames | grad all-reduce / step |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        d = (
            ""
            if s["auc_diff_mean"] is None
            else f"{s['auc_diff_mean']:+.5f} ± {s['auc_diff_std'] or 0.0:.5f} "
            f"[{s['auc_diff_min']:+.5f}, {s['auc_diff_max']:+.5f}]"
        )
        lines.append(
            f"| {name} | {len(s['seeds'])} | {s['auc_mean']:.5f} ± {s['auc_std']:.5f} | {d} | "
            f"{s['logloss_mean']:.5f} ± {s['logloss_std']:.5f} | "
            f"{s['moved_bytes_per_step'] / 2**20:.3f} MiB | {bu.fmt(s['moved_ratio'])}x | "
            f"{bu.fmt(s['bytes_vs_mx4'])}x | {s['frame_bytes_per_step'] / 2**20:.3f} MiB | "
            f"{bu.fmt(s['frame_bytes_vs_mx4'])}x | "
            f"{s['allreduce_moved_bytes_per_step'] / 2**20:.3f} MiB |"
        )
    return "\n".join(lines)


def fidelity_markdown(result: dict[str, Any]) -> str:
    """The page of a ``--seeds`` result: its settings, ``seed_table`` and the targets."""
    p = result["params"]
    t = result["targets"]
    lines = [
        f"# Fidelity over seeds: preset {p['preset']}",
        "",
        f"{p['steps']} steps, seeds {', '.join(map(str, p['seeds']))}, {p['eval_rows']:,} "
        f"evaluation rows, {p['devices']} devices; bytes per step of all devices. "
        f"Produced by `python -m bench.training.train_compare` "
        f"({(result['environment'].get('git_commit') or '')[:10]}).",
        "",
        seed_table(result["summary"]),
        "",
    ]
    note = bf16_wire_note(result, result.get("runs", []))
    lines += [note, ""] if note else []
    lines += [
        f"Target (AUC within {t['tolerance']} of exact, seed mean, and >= 2x fewer bytes than "
        f"MX4 at no worse AUC): {'met' if t['met'] else 'missed'}; best library run: "
        f"{t['best'] or 'none within the tolerance'}.",
        "",
    ]
    for name, r in t["runs"].items():
        fewer, vs = r["fewer_bytes_than_mx4"], r["auc_minus_mx4"]
        lines.append(
            f"- {name}: AUC - exact {r['auc_diff_mean']:+.5f} "
            f"({'within' if r['within_tolerance'] else 'outside'} the tolerance), "
            f"AUC - MX4 {'?' if vs is None else f'{vs:+.5f}'} "
            f"({'no worse than' if r['no_worse_than_mx4'] else 'below'} MX4), "
            f"{'?' if fewer is None else f'{fewer:.2f}x'} fewer bytes than MX4"
        )
    return "\n".join(lines) + "\n"


def write_fidelity_report(result: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """The rendered table (``out`` with ``.md``) and the plot (``.png``) of a seeds sweep."""
    from bench.reports import figures

    md = out.with_suffix(".md")
    md.write_text(fidelity_markdown(result))
    return md, figures.plot_fidelity([result], out.with_suffix(".png"))
