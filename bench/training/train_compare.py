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
  jlc-paper-ar-adagrad
                 jlc-paper-ar with the gradients coded in Adagrad's preconditioned
                 coordinates (``--grad-precondition adagrad``); Adagrad presets only (DCNv2),
                 so not in the default ``--runs``.
  jlc-paper-ar-adagrad-eb0.008, jlc-paper-ar-adagrad-eb0.005
                 the same at REL 0.008 (the tightest bound whose fixed-rate codes take the
                 6 bits of REL 0.01: the same capacity, 5.3x below exact on the dense path)
                 and at REL 0.005 (7 bits, 4.5x; where the 400-step runs closed the gap to
                 exact, bench/results/adagrad_allreduce_400steps.md).
  jlc-uniform-eb0.001
                 a control: the compressed exchange at REL 0.001 on every table, constant
                 over the run (no tiers, no schedule), the exact all-reduce: an exchange
                 close to lossless, whose paired difference to exact measures how far a
                 small perturbation alone moves the AUC (the noise floor of the paired
                 differences); not in the default ``--runs``.

For each: final AUC and log loss on the held-out set, eval AUC and training loss curves, and
the bytes moved per step by the forward exchange (all devices; the dense path's static
capacity for the library on CPU) and the raw bytes, and the gradient all-reduce's bytes. Results: bench/results/train_compare.json.

With ``--seeds`` every run repeats for each seed (model init and synthetic data both follow
the seed) and the result adds ``summary``: per run the mean and spread of AUC and log loss
over the seeds, the AUC difference to the exact run of the same seed (paired, so the
seed-to-seed spread of the data cancels), bytes moved per step and the bytes relative to
MX4's; and ``targets``: whether the best compressed run is within ``--auc-tolerance`` of
exact and moves at least 2x fewer bytes than MX4 at no worse AUC (``bench.training.fidelity``). ``--workdir`` keeps each
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
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import bench_util as bu
from bench import trainer_runs
from bench.training.fidelity import (
    AUC_TOLERANCE,
    fidelity_targets,
    seed_summary,
    seed_table,
    write_fidelity_report,
)
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
#: runs for Adagrad presets only (``--runs`` choices, not its default)
ADAGRAD_RUNS = (
    "jlc-paper-ar-adagrad",
    "jlc-paper-ar-adagrad-eb0.008",
    "jlc-paper-ar-adagrad-eb0.005",
)
#: control runs (``--runs`` choices, not its default): name -> REL bound of every table
CONTROL_RUNS = {"jlc-uniform-eb0.001": "0.001"}
#: every ``--runs`` choice
ALL_RUNS = (*RUNS, *ADAGRAD_RUNS, *CONTROL_RUNS)
#: the paper's tiers per preset: Kaggle's tables, or the Terabyte tables (which the DCNv2
#: presets use, in the same table order)
PAPER_EB_PRESETS = {"kaggle": "paper_kaggle", "tiny": "paper_kaggle"}


def run_flags(name: str, steps: int, early_stage_frac: float, preset: str = "kaggle") -> list[str]:
    """Trainer flags of one exchange configuration.

    Raises:
      ValueError: unknown name.
    """
    early = str(max(1, int(steps * early_stage_frac)))
    if name.startswith("jlc-paper-ar-adagrad-eb"):
        base = run_flags("jlc-paper-ar-adagrad", steps, early_stage_frac, preset)
        return [*base, "--grad-error-bound", name.removeprefix("jlc-paper-ar-adagrad-eb")]
    if name == "jlc-paper-ar-adagrad":
        base = run_flags("jlc-paper-ar", steps, early_stage_frac, preset)
        return [*base, "--grad-precondition", "adagrad"]
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
    if name in CONTROL_RUNS:
        return [
            *("--compression", "on", "--codec", "auto", "--eb-preset", "uniform"),
            *("--eb-base", CONTROL_RUNS[name], "--eb-schedule", "constant", "--eb-constant", "1"),
        ]
    if name in BASELINES:
        return ["--compression", "on", "--codec", name]
    raise ValueError(f"unknown run {name!r}; expected one of {ALL_RUNS}")


def _recorded_per_step(train, field: str) -> float | None:
    """Mean per step of ``field`` over the intervals that recorded it (non-zero; a run
    resumed by newer code recorded it only from then on), or None if none did."""
    n = trainer_runs.interval_steps([r.step for r in train])
    got = [(k, getattr(r, field)) for k, r in zip(n, train) if getattr(r, field)]
    return sum(v for _, v in got) / sum(k for k, _ in got) if got else None


def summarize(log: MetricsLog) -> dict[str, Any]:
    """Curves and totals of one trainer run (its ``metrics.jsonl``, read by ``read_metrics``).

    Returns:
      dict: ``auc``, ``logloss``, ``accuracy`` (final), ``curves`` (train ``step``/``loss``,
      eval ``eval_step``/``eval_auc``/``eval_logloss``), ``moved_bytes_per_step`` and
      ``raw_bytes_per_step`` (mean over logged intervals, all devices, forward exchange),
      ``frame_bytes_per_step``, ``exchange_ratio`` (raw / frame), ``moved_ratio`` (raw /
      moved), ``fallback_steps``, ``samples_per_s`` (median over intervals after the first),
      ``allreduce_moved_bytes_per_step``, ``allreduce_frame_bytes_per_step`` and
      ``allreduce_raw_bytes_per_step`` (gradient all-reduce, all devices; frames: what a
      ragged path sends: over the intervals that recorded it, None if none did),
      ``allreduce_fallback_steps``.
    """
    train, final = log.train, log.final
    tot = sum(trainer_runs.interval_steps([r.step for r in train])) or 1
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
        "allreduce_frame_bytes_per_step": _recorded_per_step(train, "allreduce_frame_bytes"),
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


#: trainer flags that decide how a run is carried out or where its outputs go, not its result
#: (with the number of values each takes)
RUN_CONTROL_FLAGS = {"--checkpoint-every": 1, "--restart": 0, "--no-progress": 0, "--out": 1}


#: characters of a failed try's output kept in its run's result (``failed_attempts``)
FAILURE_TAIL_CHARS = 600


def result_flags(flags: Sequence[str]) -> list[str]:
    """``flags`` without ``RUN_CONTROL_FLAGS``: what a kept result must match to be reused."""
    out, it = [], iter(flags)
    for f in it:
        if f in RUN_CONTROL_FLAGS:
            for _ in range(RUN_CONTROL_FLAGS[f]):
                next(it, None)
        else:
            out.append(f)
    return out


def load_kept_from(paths: Sequence[str | Path]) -> dict[tuple[str, int], dict[str, Any]]:
    """The ok runs with a seed in earlier ``train_compare`` result files, by (name, seed).

    A later file's run replaces an earlier one's. Raises ``ValueError`` if a file is not a
    result of this benchmark (no ``runs`` list).
    """
    kept: dict[tuple[str, int], dict[str, Any]] = {}
    for path in paths:
        result = json.loads(Path(path).read_text())
        runs = result.get("runs") if isinstance(result, dict) else None
        if not isinstance(runs, list):
            raise ValueError(f"{path}: not a train_compare result (no 'runs' list)")
        for r in runs:
            ok = isinstance(r, dict) and r.get("status") == "ok"
            if ok and r.get("seed") is not None and isinstance(r.get("flags"), list):
                kept[(r["name"], r["seed"])] = r
    return kept


def _run_trainer(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """``(returncode or None on timeout, stdout + stderr)`` of one trainer process."""
    try:
        p = subprocess.run(
            cmd, cwd=bu.REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout or ""
        return None, out.decode(errors="replace") if isinstance(out, bytes) else out


def run_one(name: str, args, workdir: Path, seed: int | None = None) -> dict[str, Any]:
    """One trainer run in a subprocess; its metrics (or the error).

    With ``seed`` the run's outputs go to ``workdir/name/seed<seed>`` and its result is kept
    there (``compare_run.json``, with the commit it ran at); a kept ok result of the same
    command is returned as it is, whatever the code's version now (start a new workdir to
    measure changed code). So is an ok run of the same name, seed and command in
    ``args.kept_from_runs`` (:func:`load_kept_from`: earlier result files, the sweep continued
    in another workdir or on another machine), as that file summarized it (``--kept-only``
    summarizes again only the runs whose metrics are in the workdir).
    """
    if seed is None:
        out = workdir / name
    else:
        out = workdir / name / f"seed{seed}"
        args = argparse.Namespace(**{**vars(args), "seed": seed})
    cmd = trainer_runs.trainer_cmd(
        out,
        args,
        *("--devices", str(args.devices), "--eval-every", str(args.eval_every)),
        *run_flags(name, args.steps, args.early_stage_frac, args.preset),
        checkpoint_every=args.checkpoint_every,
    )
    if args.data:
        cmd += ["--data", args.data]
    cmd += args.extra
    kept, run = out / "compare_run.json", result_flags(cmd[3:])
    if seed is not None and kept.is_file():
        old = json.loads(kept.read_text())
        if old.get("status") == "ok" and result_flags(old.get("flags", [])) == run:
            if getattr(args, "kept_only", False) and (out / "metrics.jsonl").is_file():
                # assembling: the summary of its metrics as this code makes it
                old.update(summarize(read_metrics(out / "metrics.jsonl")))
            return old
    earlier = (getattr(args, "kept_from_runs", None) or {}).get((name, seed))
    if seed is not None and earlier and result_flags(earlier["flags"]) == run:
        return earlier
    if getattr(args, "kept_only", False):
        return {"name": name, "seed": seed, "flags": cmd[3:], "status": "missing", "wall_s": 0.0}
    env = trainer_runs.trainer_env()
    t0 = time.perf_counter()
    first = cmd
    if args.checkpoint_every > 0:
        # resume only a checkpoint of this very run (flags stamped in its folder), never one
        # of other flags that happens to be there
        stamp = out / "run_flags.json"
        # (result_flags again: a stamp written before --out became a run-control flag has it)
        if not (stamp.is_file() and result_flags(json.loads(stamp.read_text())) == run):
            first = [*cmd, "--restart"]
        out.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps(run))
    # A run that checkpoints and dies (on 8 virtual CPU devices of a loaded machine XLA:CPU
    # has aborted runs on a collective that never completed) resumes from its checkpoint.
    attempts = 1 + (max(0, args.retries) if args.checkpoint_every > 0 else 0)
    tries, failures = 0, []
    while tries < attempts:
        rc, log = _run_trainer(first if tries == 0 else cmd, env, args.run_timeout)
        tries += 1
        if rc == 0:
            break
        # what each failed try ended with: the evidence of why a sweep needed its retries
        failures.append({"returncode": rc, "log_tail": log[-FAILURE_TAIL_CHARS:]})
    wall = time.perf_counter() - t0
    res: dict[str, Any] = {"name": name, "flags": cmd[3:], "returncode": rc, "wall_s": wall}
    if tries > 1:
        res["attempts"] = tries
        res["failed_attempts"] = failures
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
    ap.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(ALL_RUNS))
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
    ap.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="K > 0: every run checkpoints every K steps, and rerunning the same command "
        "resumes an interrupted run from its last checkpoint (0: a run starts over)",
    )
    ap.add_argument(
        "--kept-only",
        action="store_true",
        help="with --seeds and --workdir: assemble the result from the finished runs kept "
        "there and run nothing (a partial sweep; the others are listed as missing)",
    )
    ap.add_argument(
        "--kept-from",
        nargs="+",
        default=[],
        metavar="RESULT",
        help="with --seeds: the ok runs of these earlier result files (e.g. the committed "
        "one) count as kept runs of the same name, seed and flags (a sweep continued on "
        "another machine: only the missing runs train)",
    )
    ap.add_argument(
        "--retries",
        type=int,
        default=2,
        help="with --checkpoint-every: a run that fails resumes from its checkpoint up to "
        "this many times",
    )
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
    if args.retries < 0:
        ap.error("--retries must be >= 0")
    if args.kept_only and not (args.seeds and args.workdir and args.out):
        ap.error("--kept-only needs --seeds, --workdir (the kept runs) and --out")
    if args.kept_from and not args.seeds:
        ap.error("--kept-from needs --seeds")
    try:
        args.kept_from_runs = load_kept_from(args.kept_from)
    except (OSError, ValueError) as e:
        ap.error(f"--kept-from: {e}")
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
        "params": {k: v for k, v in vars(args).items() if k not in ("out", "kept_from_runs")},
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


if __name__ == "__main__":
    main()
