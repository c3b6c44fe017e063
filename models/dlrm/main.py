"""Command line of the embedding-parallel DLRM trainer.

Run ``python -m models.dlrm.train --help`` (or ``python -m models.dlrm.main``).
Main job (synthetic data, 8 virtual CPU devices, exact vs compressed side by side)::

  python -m models.dlrm.train --devices 8 --compare --out runs/dlrm

Flags override the preset (``--preset kaggle|terabyte|tiny``, ``configs/``); every Config
field also has a flag. ``--devices N`` sets N virtual CPU devices when no accelerator is
used (it must be applied before JAX starts its backends, so it is handled here first).
Multi-host: ``--coordinator HOST:PORT --num-processes N --process-id I`` (or the
``JAX_COORDINATOR_ADDRESS`` / ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` environment)
call ``jax.distributed.initialize``; each process reads its share of the data.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    from models.dlrm import error_bounds

    p = argparse.ArgumentParser(
        prog="python -m models.dlrm.train",
        description="Embedding-parallel DLRM with the compressed embedding all-to-all "
        "(jax_lossy_comm). Without --data it trains on SYNTHETIC Criteo-like data. "
        "Flags shown with default None take the preset's value (configs/).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("run")
    g.add_argument(
        "--preset",
        default="kaggle",
        choices=["kaggle", "terabyte", "tiny"],
        help="model/config preset (configs/)",
    )
    g.add_argument(
        "--out", default="runs/dlrm", help="output folder: metrics.jsonl, curves.png, checkpoints/"
    )
    g.add_argument(
        "--resume", action="store_true", help="continue from the latest checkpoint in --out"
    )
    g.add_argument(
        "--compare",
        action="store_true",
        help="run the exact and the compressed "
        "exchange from the same seed (--out/exact, --out/compressed) and plot both",
    )
    g.add_argument(
        "--devices",
        type=int,
        default=None,
        help="devices per process; virtual CPU devices when no accelerator is used",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--kill-at-step", type=int, default=0, help=argparse.SUPPRESS)
    d = p.add_argument_group("data")
    d.add_argument("--data", default=None, help="file, folder or glob (absent = synthetic)")
    d.add_argument(
        "--eval-data",
        default=None,
        help="evaluation file, folder or glob (absent = held-out lines of --data)",
    )
    d.add_argument(
        "--format",
        dest="data_format",
        default=None,
        choices=["kaggle", "terabyte", "csv"],
        help="format of --data",
    )
    d.add_argument(
        "--skip-bad-lines",
        action="store_true",
        default=None,
        help="skip and count malformed lines instead of stopping",
    )
    d.add_argument(
        "--max-ind-range", type=int, default=None, help="cap on table rows (ids modulo it)"
    )
    d.add_argument(
        "--split-rows",
        type=int,
        default=None,
        help="split tables with more rows "
        "than this row-wise over devices (-1: a device's fair share; 0: never)",
    )
    d.add_argument("--eval-rows", type=int, default=None, help="rows of the evaluation set")
    d.add_argument(
        "--holdout-every",
        type=int,
        default=None,
        help="with file data and no --eval-data: every N-th line is held out",
    )
    d.add_argument("--synthetic-zipf-a", type=float, default=None)
    d.add_argument("--synthetic-multi-hot", type=int, default=None)
    t = p.add_argument_group("training")
    t.add_argument("--steps", type=int, default=None)
    t.add_argument("--batch-size", type=int, default=None, help="global batch size")
    t.add_argument("--eval-batch-size", type=int, default=None)
    t.add_argument("--optimizer", choices=["sgd", "adagrad"], default=None)
    t.add_argument(
        "--sparse-embedding-update",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sgd: update only the looked-up table rows (default on)",
    )
    t.add_argument("--learning-rate", "--lr", type=float, default=None)
    t.add_argument("--warmup-steps", type=int, default=None)
    t.add_argument("--decay-start-step", type=int, default=None)
    t.add_argument("--decay-steps", type=int, default=None)
    t.add_argument("--seed", type=int, default=None)
    t.add_argument("--eval-every", type=int, default=None)
    t.add_argument("--log-every", type=int, default=None)
    t.add_argument("--checkpoint-every", type=int, default=None)
    c = p.add_argument_group("exchange")
    c.add_argument(
        "--compression",
        choices=["on", "off"],
        default=None,
        help="off = exact all_to_all (baseline)",
    )
    c.add_argument("--codec", default=None, help="codec for compressed_all_to_all")
    c.add_argument(
        "--exchange-backward",
        choices=["exact", "compressed"],
        default=None,
        help="backward exchange of the embedding cotangents (default exact)",
    )
    c.add_argument(
        "--exchange-path",
        choices=["auto", "dense", "packed", "ragged"],
        default=None,
        help="wire path of the compressed exchange (auto: ragged on GPU, packed on CPU)",
    )
    c.add_argument(
        "--error-bound-config",
        default="",
        help="JSON/YAML error-bound config (same as --eb-config)",
    )
    c.add_argument("--placeholder-eb-rel", type=float, default=None, help=argparse.SUPPRESS)
    error_bounds.add_flags(p)
    m = p.add_argument_group("multi-host")
    m.add_argument(
        "--coordinator",
        default=os.environ.get("JAX_COORDINATOR_ADDRESS"),
        help="HOST:PORT of process 0",
    )
    env_int = lambda k: int(os.environ[k]) if k in os.environ else None  # noqa: E731
    m.add_argument("--num-processes", type=int, default=env_int("JAX_NUM_PROCESSES"))
    m.add_argument("--process-id", type=int, default=env_int("JAX_PROCESS_ID"))
    return p


def config_from_args(args):
    """Preset + flag overrides -> Config."""
    from models.dlrm.configs import get_config

    cfg = get_config(args.preset)
    fields = {f.name for f in dataclasses.fields(cfg)}
    over = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    cfg = dataclasses.replace(cfg, **over)
    cfg.validate()
    return cfg


def setup_jax(args) -> None:
    """Virtual devices and jax.distributed, before any backend starts."""
    import jax

    if args.devices:
        jax.config.update("jax_num_cpu_devices", args.devices)
    if args.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
        )
    if args.devices and jax.default_backend() != "cpu" and jax.local_device_count() < args.devices:
        raise ValueError(f"--devices {args.devices}: only {jax.local_device_count()} local devices")


def run(argv=None) -> dict:
    """Parses flags and trains (twice with --compare). Returns the final metrics."""
    args = build_parser().parse_args(argv)
    setup_jax(args)
    import jax

    from models.dlrm import train

    cfg = config_from_args(args)
    kw = dict(
        resume=args.resume,
        eb_args=args,
        kill_at_step=args.kill_at_step,
        progress=not args.no_progress,
        devices_per_process=args.devices,
    )
    if not args.compare:
        res = train.train_and_evaluate(cfg, args.out, **kw)
        results = {cfg.compression: res}
    else:
        results = {}
        for name, comp in (("exact", "off"), ("compressed", "on")):
            results[name] = train.train_and_evaluate(
                dataclasses.replace(cfg, compression=comp),
                os.path.join(args.out, name),
                label=name,
                **kw,
            )
        if jax.process_index() == 0:
            train.plot_metrics(
                {n: os.path.join(args.out, n, "metrics.jsonl") for n in results},
                os.path.join(args.out, "compare.png"),
            )
            d = results["compressed"]["auc"] - results["exact"]["auc"]
            print(
                f"AUC exact {results['exact']['auc']:.5f} compressed "
                f"{results['compressed']['auc']:.5f} (difference {d:+.5f}); plot "
                f"{os.path.join(args.out, 'compare.png')}"
            )
    if jax.process_index() == 0:
        with open(os.path.join(args.out, "final.json"), "w") as f:
            json.dump(results, f, indent=1)
        print("final: " + json.dumps(results))
    return results


def main(argv=None) -> int:
    from models.dlrm.input_pipeline import MalformedLineError

    try:
        run(argv)
    except (MalformedLineError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
