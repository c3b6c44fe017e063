"""DLRM training with the exact, compressed and quantized-comm exchanges, side by side.

Runs the trainer CLI (``python -m models.dlrm.main``) once per exchange, all from the same
seed and the same data (synthetic Criteo-like by default, or ``--data``), on 8 virtual CPU
devices in one process each:

  exact          ``--compression off``: ``jax.lax.all_to_all``.
  jlc-paper      ``compressed_all_to_all`` (codec auto) with the paper's table tiers (Kaggle:
                 0.01 / 0.03 / 0.05) and log schedule x2 (``--eb-preset paper_kaggle``); the
                 early stage is scaled to the run (``--early-stage-frac`` of the steps; the
                 paper's 65536 iterations are longer than a short run).
  jlc-auto       the same exchange with the automatic per-table policy (``--eb-policy auto``,
                 re-evaluated every ``steps / 10``).
  int8-rowwise   TorchRec/FBGEMM INT8 row-wise (codec ``jax_lossy_comm.Int8Rowwise``).
  bf16           TorchRec/FBGEMM BF16 (codec ``jax_lossy_comm.BF16``).
  fp16           TorchRec/FBGEMM FP16 (codec ``jax_lossy_comm.FP16``).
  fp8-rowwise    TorchRec/FBGEMM FP8 row-wise, 1-4-3 (codec ``jax_lossy_comm.FP8Rowwise``).
  mx4            TorchRec/FBGEMM MX4, OCP MX FP4 (codec ``jax_lossy_comm.MX4``).
  jlc-paper-ar   jlc-paper plus the compressed gradient all-reduce of the dense MLPs
                 (``--grad-allreduce compressed``: ``compressed_psum`` with error feedback).
  jlc-paper-ar-bf16
                 jlc-paper plus the bf16 gradient all-reduce (PyTorch DDP's bf16 hook).

For each: final AUC and log loss on the held-out set, eval AUC and training loss curves, and
the bytes moved per step by the forward exchange (all devices; the dense path's static
capacity for the library on CPU) and the raw bytes, and the gradient all-reduce's bytes. Results: bench/results/train_compare.json.

With ``--seeds`` every run repeats for each seed (model init and synthetic data both follow
the seed) and the result adds ``summary``: per run the mean and spread of AUC and log loss
over the seeds, the AUC difference to the exact run of the same seed (paired, so the
seed-to-seed spread of the data cancels), bytes moved per step and the bytes relative to
MX4's; and ``targets``: whether the best compressed run is within ``--auc-tolerance`` of
exact and moves at least 2x fewer bytes than MX4 at no worse AUC. ``--workdir`` keeps each
run's result (``compare_run.json``), so an interrupted sweep resumes where it stopped.

Usage (from the repo root)::

    python -m bench.training.train_compare                      # kaggle preset, 150 steps each
    python -m bench.training.train_compare --steps 1000 --runs exact jlc-paper
    python -m bench.training.train_compare --preset dcnv2_small --seeds 0 1 2 --eval-rows 100000 \
        --workdir /tmp/tc_dcn --out bench/results/fidelity_dcnv2_small.json

References:
  Feng et al., SC24, arXiv 2407.04272, sec. 5-6 (tiers, schedule, accuracy vs exact).
  Yang et al., DLP-KDD 2020 (TorchRec/FBGEMM quantized communication).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import bench_util as bu
from jax_lossy_comm.codec_factory import BASELINES
from models.dlrm.metrics import MetricsLog, read_metrics

DEFAULT_OUT = bu.RESULTS_DIR / "train_compare.json"
RUNS = (
    "exact",
    "jlc-paper",
    "jlc-auto",
    *BASELINES,  # int8-rowwise, bf16, fp16, fp8-rowwise, mx4: jax_lossy_comm.get_comm_codec
    "jlc-paper-ar",
    "jlc-paper-ar-bf16",
)
#: runs that add a gradient all-reduce mode to another run
ALLREDUCE_RUNS = {"jlc-paper-ar": "compressed", "jlc-paper-ar-bf16": "bf16"}
#: the library's error-bounded runs (the others are exact or fixed-precision baselines)
LIBRARY_RUNS = ("jlc-paper", "jlc-auto", "jlc-paper-ar", "jlc-paper-ar-bf16")
#: the paper's tiers per preset: Kaggle's tables, or the Terabyte tables (which the DCNv2
#: presets use, in the same table order)
PAPER_EB_PRESETS = {"kaggle": "paper_kaggle", "tiny": "paper_kaggle"}
#: AUC within which a run counts as equal to exact (0.05%, the paper's accuracy criterion)
AUC_TOLERANCE = 5e-4


def run_flags(name: str, steps: int, early_stage_frac: float, preset: str = "kaggle") -> list[str]:
    """Trainer flags of one exchange configuration.

    Raises:
      ValueError: unknown name.
    """
    early = str(max(1, int(steps * early_stage_frac)))
    if name in ALLREDUCE_RUNS:
        base = run_flags("jlc-paper", steps, early_stage_frac, preset)
        return [*base, "--grad-allreduce", ALLREDUCE_RUNS[name]]
    if name == "exact":
        return ["--compression", "off"]
    if name == "jlc-paper":
        return [
            "--compression",
            "on",
            "--codec",
            "auto",
            "--eb-preset",
            PAPER_EB_PRESETS.get(preset, "paper_terabyte"),
            "--eb-early-stage",
            early,
        ]
    if name == "jlc-auto":
        return [
            "--compression",
            "on",
            "--codec",
            "auto",
            "--eb-preset",
            "uniform",
            "--eb-policy",
            "auto",
            "--eb-early-stage",
            early,
            "--eb-update-every",
            str(max(1, steps // 10)),
        ]
    if name in BASELINES:
        return ["--compression", "on", "--codec", name]
    raise ValueError(f"unknown run {name!r}; expected one of {RUNS}")


def summarize(log: MetricsLog) -> dict[str, Any]:
    """Curves and totals of one trainer run (its ``metrics.jsonl``, read by ``read_metrics``).

    Returns:
      dict: ``auc``, ``logloss``, ``accuracy`` (final), ``curves`` (train ``step``/``loss``,
      eval ``eval_step``/``eval_auc``/``eval_logloss``), ``moved_bytes_per_step`` and
      ``raw_bytes_per_step`` (mean over logged intervals, all devices, forward exchange),
      ``frame_bytes_per_step``, ``exchange_ratio`` (raw / frame), ``moved_ratio`` (raw /
      moved), ``fallback_steps``, ``samples_per_s`` (median over intervals after the first),
      ``allreduce_moved_bytes_per_step`` and ``allreduce_raw_bytes_per_step`` (gradient
      all-reduce, all devices), ``allreduce_fallback_steps``.
    """
    train, final = log.train, log.final
    tot = sum(bu.interval_steps([r.step for r in train])) or 1
    moved = sum(r.moved_bytes for r in train) / tot
    raw = sum(r.raw_bytes for r in train) / tot
    frame = sum(r.frame_bytes for r in train) / tot
    sps = sorted(r.samples_per_s for r in train[1:]) or [r.samples_per_s for r in train]
    return {
        "auc": final.auc if final else None,
        "logloss": final.logloss if final else None,
        "accuracy": final.accuracy if final else None,
        "final_step": final.step if final else None,
        "moved_bytes_per_step": moved,
        "raw_bytes_per_step": raw,
        "frame_bytes_per_step": frame,
        "exchange_ratio": raw / frame if frame else None,
        "moved_ratio": raw / moved if moved else None,
        "fallback_steps": sum(r.fallback_steps for r in train),
        "allreduce_moved_bytes_per_step": sum(r.allreduce_moved_bytes for r in train) / tot,
        "allreduce_raw_bytes_per_step": sum(r.allreduce_raw_bytes for r in train) / tot,
        "allreduce_fallback_steps": sum(r.allreduce_fallback_steps for r in train),
        "samples_per_s": sps[len(sps) // 2] if sps else None,
        "curves": {
            "step": [r.step for r in train],
            "loss": [r.loss for r in train],
            "eval_step": [r.step for r in log.eval],
            "eval_auc": [r.auc for r in log.eval],
            "eval_logloss": [r.logloss for r in log.eval],
        },
        "error_bound_last": train[-1].error_bound if train else None,
    }


def run_one(name: str, args, workdir: Path, seed: int | None = None) -> dict[str, Any]:
    """One trainer run in a subprocess; its metrics (or the error).

    With ``seed`` the run's outputs go to ``workdir/name/seed<seed>`` and its result is kept
    there (``compare_run.json``, with the commit it ran at); a kept ok result of the same
    command is returned as it is, whatever the code's version now (start a new workdir to
    measure changed code).
    """
    if seed is None:
        out = workdir / name
    else:
        out = workdir / name / f"seed{seed}"
        args = argparse.Namespace(**{**vars(args), "seed": seed})
    cmd = bu.trainer_cmd(
        out,
        args,
        *("--devices", str(args.devices), "--eval-every", str(args.eval_every)),
        *run_flags(name, args.steps, args.early_stage_frac, args.preset),
    )
    if args.data:
        cmd += ["--data", args.data]
    cmd += args.extra
    kept = out / "compare_run.json"
    if seed is not None and kept.is_file():
        old = json.loads(kept.read_text())
        if old.get("status") == "ok" and old.get("flags") == cmd[3:]:
            return old
    env = bu.trainer_env()
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            cmd, cwd=bu.REPO_ROOT, env=env, capture_output=True, text=True, timeout=args.run_timeout
        )
        rc, log = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, log = (
            None,
            (e.stdout or b"").decode(errors="replace")
            if isinstance(e.stdout, bytes)
            else (e.stdout or ""),
        )
    wall = time.perf_counter() - t0
    res: dict[str, Any] = {"name": name, "flags": cmd[3:], "returncode": rc, "wall_s": wall}
    if seed is not None:
        res["seed"] = seed
    if rc != 0 or not (out / "metrics.jsonl").is_file():
        res.update(status="error" if rc is not None else "timeout", log_tail=log[-2000:])
        return res
    exch = next((l for l in log.splitlines() if "exchange:" in l), "")
    res.update(
        status="ok",
        exchange=exch.split("exchange:", 1)[-1].strip(),
        **summarize(read_metrics(out / "metrics.jsonl")),
    )
    if seed is not None:
        res["git_commit"] = bu.environment_record().get("git_commit")
        kept.write_text(json.dumps(res))
    return res


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


def markdown_table(runs: Sequence[dict[str, Any]]) -> str:
    """Markdown table: run, AUC and its difference to the exact run, log loss, MiB moved per
    step, raw / moved, frame MiB per step (variable-size exchange), samples/s."""
    ex = next((r for r in runs if r["name"] == "exact" and r.get("status") == "ok"), None)
    lines = [
        "| exchange | AUC | AUC - exact | log loss | bytes moved / step | raw / moved "
        "| frames (variable-size) / step | grad all-reduce / step | samples/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        if r.get("status") != "ok":
            lines.append(f"| {r['name']} | {r.get('status')} | | | | | | | |")
            continue
        ar = r.get("allreduce_moved_bytes_per_step")
        d = r["auc"] - ex["auc"] if ex else float("nan")
        lines.append(
            f"| {r['name']} | {r['auc']:.5f} | {d:+.5f} | {r['logloss']:.5f} | "
            f"{r['moved_bytes_per_step'] / 2**20:.3f} MiB | {bu.fmt(r['moved_ratio'])}x | "
            f"{r['frame_bytes_per_step'] / 2**20:.3f} MiB | "
            f"{'' if ar is None else f'{ar / 2**20:.3f} MiB'} | "
            f"{bu.fmt(r.get('samples_per_s'), '.0f')} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(
        prog="python -m bench.training.train_compare", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    ap.add_argument("--preset", default="kaggle")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="repeat every run for these seeds and add the summary over them",
    )
    ap.add_argument("--auc-tolerance", type=float, default=AUC_TOLERANCE)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-rows", type=int, default=8192)
    ap.add_argument(
        "--early-stage-frac",
        type=float,
        default=0.5,
        help="schedule early stage as a fraction of --steps",
    )
    ap.add_argument("--data", default=None, help="trainer --data (default: synthetic)")
    ap.add_argument("--run-timeout", type=float, default=900)
    ap.add_argument("--workdir", default=None, help="trainer outputs (default: temp dir)")
    ap.add_argument(
        "--extra", nargs=argparse.REMAINDER, default=[], help="more trainer flags for every run"
    )
    ap.add_argument(
        "--out",
        default=None,
        help="result JSON (default: results/train_compare.json, with --seeds "
        "results/fidelity_<preset>.json)",
    )
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = str(
            bu.RESULTS_DIR / f"fidelity_{args.preset}.json" if args.seeds else DEFAULT_OUT
        )
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="jlc_train_compare_"))
    runs = []
    for seed in args.seeds or [None]:
        for name in args.runs:
            r = run_one(name, args, workdir, seed)
            runs.append(r)
            print(
                f"# {name}{'' if seed is None else f' seed {seed}'}: {r.get('status')} "
                f"in {r['wall_s']:.0f} s"
                + (f", AUC {r['auc']:.5f}" if r.get("status") == "ok" else "")
                + (f"\n{r['log_tail'][-500:]}" if r.get("log_tail") else ""),
                flush=True,
            )
    result = {
        "benchmark": "DLRM training: exact vs compressed vs quantized-comm exchange",
        "environment": bu.environment_record(),
        "params": {k: v for k, v in vars(args).items() if k != "out"},
        "data": args.data or "synthetic (models/dlrm/data/synthetic.py)",
        "runs": runs,
        "argv": list(sys.argv if argv is None else argv),
    }
    if args.seeds:
        result["summary"] = seed_summary(runs)
        result["targets"] = fidelity_targets(result["summary"], args.auc_tolerance)
    print(f"wrote {bu.write_json(result, args.out)}")  # first: a failing report loses nothing
    if args.seeds:
        print(seed_table(result["summary"]))
        print("wrote", *write_fidelity_report(result, Path(args.out)))
    else:
        print(markdown_table(runs))
    return result


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


if __name__ == "__main__":
    main()
