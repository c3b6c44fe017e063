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

Usage (from the repo root)::

    python -m bench.train_compare                      # kaggle preset, 150 steps each
    python -m bench.train_compare --steps 1000 --runs exact jlc-paper

References:
  Feng et al., SC24, arXiv 2407.04272, sec. 5-6 (tiers, schedule, accuracy vs exact).
  Yang et al., DLP-KDD 2020 (TorchRec/FBGEMM quantized communication).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import bench_util as bu
from models.dlrm.exchange import QCOMM_CODECS
from models.dlrm.metrics import MetricsLog, read_metrics

DEFAULT_OUT = bu.RESULTS_DIR / "train_compare.json"
RUNS = (
    "exact",
    "jlc-paper",
    "jlc-auto",
    "int8-rowwise",
    "bf16",
    "fp16",
    "fp8-rowwise",
    "mx4",
    "jlc-paper-ar",
    "jlc-paper-ar-bf16",
)
#: runs that add a gradient all-reduce mode to another run
ALLREDUCE_RUNS = {"jlc-paper-ar": "compressed", "jlc-paper-ar-bf16": "bf16"}


def run_flags(name: str, steps: int, early_stage_frac: float) -> list[str]:
    """Trainer flags of one exchange configuration.

    Raises:
      ValueError: unknown name.
    """
    early = str(max(1, int(steps * early_stage_frac)))
    if name in ALLREDUCE_RUNS:
        base = run_flags("jlc-paper", steps, early_stage_frac)
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
            "paper_kaggle",
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
    if name in QCOMM_CODECS:
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


def run_one(name: str, args, workdir: Path) -> dict[str, Any]:
    """One trainer run in a subprocess; its metrics (or the error)."""
    out = workdir / name
    cmd = bu.trainer_cmd(
        out,
        args,
        *("--devices", str(args.devices), "--eval-every", str(args.eval_every)),
        *run_flags(name, args.steps, args.early_stage_frac),
    )
    if args.data:
        cmd += ["--data", args.data]
    cmd += args.extra
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
    if rc != 0 or not (out / "metrics.jsonl").is_file():
        res.update(status="error" if rc is not None else "timeout", log_tail=log[-2000:])
        return res
    exch = next((l for l in log.splitlines() if "exchange:" in l), "")
    res.update(
        status="ok",
        exchange=exch.split("exchange:", 1)[-1].strip(),
        **summarize(read_metrics(out / "metrics.jsonl")),
    )
    return res


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
        prog="python -m bench.train_compare", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS))
    ap.add_argument("--preset", default="kaggle")
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
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
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="jlc_train_compare_"))
    runs = []
    for name in args.runs:
        r = run_one(name, args, workdir)
        runs.append(r)
        print(
            f"# {name}: {r.get('status')} in {r['wall_s']:.0f} s"
            + (f", AUC {r['auc']:.5f}" if r.get("status") == "ok" else "")
            + (f"\n{r['log_tail'][-500:]}" if r.get("log_tail") else ""),
            flush=True,
        )
    result = {
        "benchmark": "DLRM training: exact vs compressed vs quantized-comm exchange",
        "environment": bu.environment_record(),
        "params": {k: v for k, v in vars(args).items() if k != "out"},
        "data": args.data or "synthetic (models/dlrm/synthetic.py)",
        "runs": runs,
        "argv": list(sys.argv if argv is None else argv),
    }
    print(markdown_table(runs))
    print(f"wrote {bu.write_json(result, args.out)}")
    return result


if __name__ == "__main__":
    main()
