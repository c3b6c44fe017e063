"""Command-line flags of the DLRM trainer and their translation into a ``Config``.

``build_parser()`` lists the flags; ``config_from_flags(args)`` starts from the preset
(``--preset``, ``configs/``) and lets every given flag override its one field; the
error-bound flags override their one field of the preset's ``Config.error_bound`` in the
same way (``--eb-base 0.02`` keeps the tiers and the schedule). Flags with default None take
the preset's value.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re

from jax_lossy_comm import CODECS as LIBRARY_CODECS
from models.dlrm import error_bounds
from models.dlrm.configs import PRESETS, Config, get_config
from models.dlrm.configs.default import EMBEDDING_DTYPES
from models.dlrm.exchange import QCOMM_CODECS

PROG = "python -m models.dlrm.main"
CODECS = (*LIBRARY_CODECS, *QCOMM_CODECS)
"""``--codec`` choices: the library's codec names, then the quantized-comm baselines."""

# (ErrorBoundConfig field, type, choices, help) of the --eb-* field flags.
_EB_FIELDS = (
    ("base", float, None, "relative error bound of the tables in no tier"),
    ("schedule", str, error_bounds.SCHEDULE_KINDS, "iteration-wise schedule"),
    ("eb_constant", float, None, "schedule multiplier at step 0"),
    ("early_stage", int, None, "steps until the multiplier reaches 1"),
    ("policy", str, error_bounds.POLICIES, "table-wise policy"),
    ("tightest", float, None, "auto policy: smallest per-table bound"),
    ("loosest", float, None, "auto policy: largest per-table bound"),
    ("update_every", int, None, "auto policy: re-evaluate every K steps"),
    ("smoothing", float, None, "auto policy: step toward the target, in (0, 1]"),
    ("stats_decay", float, None, "auto policy: EMA decay of the statistics"),
    ("distinct_power", float, None, "auto policy: exponent of the distinct-vector share"),
)


def _eb_flag(field: str) -> str:
    return "--eb-constant" if field == "eb_constant" else "--eb-" + field.replace("_", "-")


def _add_error_bound_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "adaptive error bound",
        "the preset's error-bound config (kaggle, tiny: the paper's Kaggle tiers; terabyte: "
        "its Terabyte tiers), then --eb-preset, then the fields of --eb-config, then each "
        "--eb-FIELD flag replaces its one field",
    )
    g.add_argument(
        "--eb-preset",
        choices=error_bounds.PRESETS,
        default=None,
        help="start from this error-bound setting instead of the preset's",
    )
    g.add_argument(
        "--eb-config",
        "--error-bound-config",
        dest="eb_config",
        default=None,
        metavar="FILE",
        help="JSON/YAML file of error-bound fields (all or some) overriding the preset's",
    )
    for field, kind, choices, help_ in _EB_FIELDS:
        g.add_argument(
            _eb_flag(field),
            dest="eb_" + field,
            type=kind,
            choices=choices,
            default=None,
            metavar=None if choices else _eb_flag(field)[2:].upper().replace("-", "_"),
            help=help_,
        )
    g.add_argument(
        "--eb-tier",
        action="append",
        default=None,
        metavar="NAME=VALUE:ID,ID,...",
        help="a tier of tables sharing one bound, e.g. tighten=0.01:2,3,9 (repeatable; the "
        "given tiers replace the preset's)",
    )


def _parse_tier(text: str) -> tuple[str, tuple[float, list[int]]]:
    """``"tighten=0.01:2,3,9"`` -> ``("tighten", (0.01, [2, 3, 9]))``.

    Raises:
      ValueError: not ``NAME=VALUE:ID,ID,...``.
    """
    try:
        name, rest = text.split("=", 1)
        value, ids = rest.split(":", 1)
        return name.strip(), (float(value), [int(i) for i in ids.split(",") if i.strip()])
    except ValueError:
        raise ValueError(f"--eb-tier must look like NAME=VALUE:ID,ID,..., got {text!r}") from None


def _positive_int(text: str) -> int:
    """argparse type: an integer > 0."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The trainer's flags (``python -m models.dlrm.main --help``)."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Embedding-parallel DLRM with the compressed embedding all-to-all "
        "(jax_lossy_comm). Without --data it trains on SYNTHETIC Criteo-like data. "
        "A flag not given takes the preset's value (configs/; shown per preset). "
        "`python -m models.dlrm.train` is the same command.",
        formatter_class=_HelpFormatter,
    )
    g = p.add_argument_group("run")
    g.add_argument(
        "--preset",
        default="kaggle",
        choices=PRESETS,
        help="model/config preset (configs/)",
    )
    g.add_argument(
        "--out", default="runs/dlrm", help="output folder: metrics.jsonl, curves.png, checkpoints/"
    )
    again = g.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        default=None,
        help="continue from the latest checkpoint in --out if there is one (the default: "
        "rerunning a command resumes it)",
    )
    again.add_argument(
        "--restart",
        dest="resume",
        action="store_false",
        default=None,
        help="remove the earlier run in --out (checkpoints, metrics) and start from step 0",
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
        help="devices per process (default: all); sets this many virtual CPU devices when "
        "no accelerator is used",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    d = p.add_argument_group("data")
    d.add_argument(
        "--data",
        default=None,
        help="file, folder or glob (absent = synthetic), or a folder of shards written by "
        "python -m models.dlrm.preprocess",
    )
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
    d.add_argument(
        "--embedding-dtype",
        choices=EMBEDDING_DTYPES,
        default=None,
        help="dtype of the embedding tables and of the pooled embeddings the exchange sends "
        "(the MLPs, the loss and the optimizer's arithmetic stay float32)",
    )
    d.add_argument(
        "--interaction", choices=["dot", "dcn"], default=None, help="feature interaction"
    )
    d.add_argument("--dcn-num-layers", type=int, default=None, help="dcn: cross layers")
    d.add_argument("--dcn-low-rank-dim", type=int, default=None, help="dcn: rank of each layer")
    d.add_argument(
        "--shuffle-block-rows",
        type=int,
        default=None,
        help="with a --data folder of shards: rows of the contiguous blocks shuffled every "
        "epoch by --seed (0 = file order)",
    )
    d.add_argument("--eval-rows", type=int, default=None, help="rows of the evaluation set")
    d.add_argument(
        "--holdout-every",
        type=int,
        default=None,
        help="with file data and no --eval-data: every N-th line is held out",
    )
    d.add_argument(
        "--synthetic-zipf-a",
        type=float,
        default=None,
        help="without --data: Zipf exponent of the synthetic ids (larger: more repeated hot ids)",
    )
    d.add_argument(
        "--synthetic-multi-hot",
        type=int,
        default=None,
        help="without --data: ids per bag of the synthetic generator (1: one-hot, as Criteo)",
    )
    d.add_argument(
        "--synthetic-multi-hot-sizes",
        type=lambda v: tuple(int(x) for x in v.split(",")) if v else (),
        default=None,
        help="without --data: ids per bag of each table, comma-separated ('': --synthetic-multi-hot)",
    )
    d.add_argument(
        "--synthetic-multi-hot-rule",
        choices=["independent", "mlperf"],
        default=None,
        help="without --data: every id of a bag Zipf, or MLPerf's (ids fixed per the first id)",
    )
    t = p.add_argument_group("training")
    t.add_argument("--steps", type=int, default=None, help="training steps (global batches)")
    t.add_argument("--batch-size", type=int, default=None, help="global batch size")
    t.add_argument(
        "--eval-batch-size", type=int, default=None, help="global batch size of the evaluation"
    )
    t.add_argument(
        "--optimizer", choices=["sgd", "adagrad"], default=None, help="sgd: the reference DLRM's"
    )
    t.add_argument(
        "--sparse-embedding-update",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sgd: update only the looked-up table rows (default on)",
    )
    t.add_argument("--adagrad-eps", type=float, default=None, help="adagrad: eps")
    t.add_argument("--learning-rate", "--lr", type=float, default=None, help="peak learning rate")
    t.add_argument("--warmup-steps", type=int, default=None, help="linear warm-up from 0 (0: none)")
    t.add_argument(
        "--decay-start-step",
        type=int,
        default=None,
        help="step at which the learning rate starts to decay (0: no decay)",
    )
    t.add_argument(
        "--decay-steps",
        type=int,
        default=None,
        help="steps of polynomial (power 2) decay to 0 after --decay-start-step",
    )
    t.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the parameters, the synthetic data and the shards' block order",
    )
    t.add_argument(
        "--eval-every", type=int, default=None, help="evaluate every N steps (0: only at the end)"
    )
    t.add_argument("--log-every", type=int, default=None, help="log training metrics every N steps")
    t.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help="save a checkpoint every N steps (0: only at the end)",
    )
    c = p.add_argument_group("exchange")
    c.add_argument(
        "--compression",
        choices=["on", "off"],
        default=None,
        help="off = exact all_to_all (baseline)",
    )
    c.add_argument(
        "--codec",
        default=None,
        choices=CODECS,
        help="codec of compressed_all_to_all (the library's; int8-rowwise and bf16: the "
        "TorchRec/FBGEMM baselines)",
    )
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
        "--exchange-topology",
        choices=["auto", "flat", "hierarchical"],
        default=None,
        help="flat: every block compressed; hierarchical: exact among the devices of a node, "
        "compressed across nodes; auto: hierarchical with several processes (nodes) of "
        "several devices each",
    )
    c.add_argument(
        "--node-devices",
        type=int,
        default=None,
        help="devices per node of the two-level mesh (0: one node per process); must divide "
        "the devices of a process, e.g. 4 of 8 devices: 2 nodes on one process",
    )
    a = p.add_argument_group("gradient all-reduce")
    a.add_argument(
        "--grad-allreduce",
        choices=["exact", "bf16", "compressed"],
        default=None,
        help="sum of the head gradients: exact psum, bf16 (PyTorch's DDP hook) or the "
        "library's error-bounded compressed_psum",
    )
    a.add_argument(
        "--grad-error-bound",
        type=float,
        default=None,
        help="REL error bound of --grad-allreduce compressed",
    )
    a.add_argument(
        "--grad-codec",
        choices=["auto", "fixed"],
        default=None,
        help="--grad-allreduce compressed: the frames' codec (auto: the smallest of all "
        "forms, fewest bytes; fixed: fixed-rate codes, least CPU)",
    )
    a.add_argument(
        "--grad-error-feedback",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--grad-allreduce compressed: error feedback (residuals in the train state)",
    )
    _add_error_bound_flags(p)
    m = p.add_argument_group("multi-host")
    m.add_argument(
        "--coordinator",
        default=os.environ.get("JAX_COORDINATOR_ADDRESS"),
        help="HOST:PORT of process 0",
    )
    env_int = lambda k: int(os.environ[k]) if k in os.environ else None  # noqa: E731
    m.add_argument(
        "--num-processes",
        type=int,
        default=env_int("JAX_NUM_PROCESSES"),
        help="processes of the run (JAX_NUM_PROCESSES)",
    )
    m.add_argument(
        "--process-id",
        type=int,
        default=env_int("JAX_PROCESS_ID"),
        help="this process, 0 to N-1; 0 runs the coordinator (JAX_PROCESS_ID)",
    )
    m.add_argument(
        "--init-timeout",
        type=_positive_int,
        default=120,
        metavar="SECONDS",
        help="stop with an error when not every process has joined the coordinator by then",
    )
    m.add_argument(
        "--heartbeat-timeout",
        type=_positive_int,
        default=30,
        metavar="SECONDS",
        help="a process not heard from this long is taken as dead and the run stops",
    )
    m.add_argument(
        "--gloo-banners",
        action="store_true",
        help="keep the native stdout of a multi-process CPU run (gloo prints '[Gloo] Rank r is "
        "connected to ...' per rank and collective group; quiet by default)",
    )
    m.add_argument(
        "--local-device-ids",
        default=None,
        metavar="ID,ID,...",
        help="accelerators this process uses with --coordinator (jax.distributed's "
        "local_device_ids); default: under SLURM/OpenMPI the block of --devices ids at "
        "SLURM_LOCALID / "
        "OMPI_COMM_WORLD_LOCAL_RANK (one task per node: --devices N takes GPUs 0..N-1), "
        "else all",
    )
    g.add_argument(
        "--deterministic",
        action="store_true",
        help="deterministic GPU kernels (XLA_FLAGS --xla_gpu_deterministic_ops=true, set "
        "before JAX starts): bit-exact reruns and resumes on GPU, slower scatter-adds",
    )
    _show_preset_values(p)
    return p


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` only for flags with a value of their own (not None)."""

    def _get_help_string(self, action):
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def _show_preset_values(p: argparse.ArgumentParser) -> None:
    """Appends to the help of every flag that defaults to its preset's value what that value
    is (``preset: 500`` or ``preset: kaggle 32, terabyte 64, tiny 8``)."""
    configs = {name: get_config(name) for name in PRESETS}
    for action in p._actions:
        if action.default is not None or not action.option_strings or action.dest == "resume":
            continue
        dest = action.dest
        if dest.startswith("eb_") and dest[3:] in {f for f, *_ in _EB_FIELDS}:
            values = {n: getattr(c.error_bound, dest[3:]) for n, c in configs.items()}
        elif dest in {f.name for f in dataclasses.fields(Config)}:
            values = {n: getattr(c, dest) for n, c in configs.items()}
        else:
            continue
        if set(values.values()) == {""}:  # absent in every preset: the help says what then
            continue
        if len(set(map(repr, values.values()))) == 1:
            shown = repr(next(iter(values.values())))
        else:
            shown = ", ".join(f"{n} {v!r}" for n, v in values.items())
        action.help = f"{action.help or ''} (preset: {shown})".strip().replace("%", "%%")


def error_bound_from_flags(
    args: argparse.Namespace, base: error_bounds.ErrorBoundConfig
) -> error_bounds.ErrorBoundConfig:
    """``base`` (the preset's error-bound config) with the ``--eb-*`` flags applied.

    Order: ``--eb-preset`` replaces ``base``; then the fields of ``--eb-config``; then each
    ``--eb-FIELD`` flag its one field (``--eb-tier`` the tiers).

    Raises:
      ValueError: a bad file, field or value (named); an ``--eb-config`` that cannot be read
        or parsed (the flag and the file named).
    """
    eb = error_bounds.preset(args.eb_preset, base.num_tables) if args.eb_preset else base
    if args.eb_config:
        try:
            read = error_bounds.read_overrides(args.eb_config)
        except (OSError, ValueError) as e:  # name the flag: a bare "[Errno 2] ..." or
            # "Expecting value: line 1 column 1" did not say which file or flag
            why = (e.strerror if isinstance(e, OSError) else None) or e
            raise ValueError(f"--eb-config {args.eb_config}: {why}") from None
        eb = error_bounds.override(eb, read)
    fields = {f: getattr(args, "eb_" + f) for f, *_ in _EB_FIELDS}
    fields = {f: v for f, v in fields.items() if v is not None}
    if args.eb_tier is not None:
        fields["tiers"] = dict(_parse_tier(s) for s in args.eb_tier)
    return error_bounds.override(eb, fields)


def config_from_flags(args: argparse.Namespace) -> Config:
    """The run's Config: the preset with every given flag overriding its one field.

    Raises:
      ValueError: an invalid value or combination (named).
    """
    cfg = get_config(args.preset)
    fields = {f.name for f in dataclasses.fields(cfg)}
    over = {k: v for k, v in vars(args).items() if k in fields and v is not None}
    if args.devices:
        over["devices_per_process"] = args.devices
    over["error_bound"] = error_bound_from_flags(args, cfg.error_bound)
    cfg = dataclasses.replace(cfg, **over)
    cfg.validate()
    return cfg


def flag_message(message: str, parser: argparse.ArgumentParser | None = None) -> str:
    """``message`` with a leading ``Config`` field name replaced by the flag that sets it.

    ``Config.validate`` and ``train.create_mesh`` name the field (``batch_size=60 must be
    divisible ...``), which is what a Python caller set; on the command line the user set
    a flag, so the error names it (``--batch-size 60 must be divisible ...``). A message
    that does not start with a field of a flag is returned unchanged.

    >>> flag_message("batch_size=60 must be divisible by the device count 8")
    '--batch-size 60 must be divisible by the device count 8'
    >>> flag_message("steps must be > 0, got 0")
    '--steps must be > 0, got 0'
    """
    parser = parser or build_parser()
    # argparse keeps no public dest -> option map; _actions is its documented-by-use list
    flag_of = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    flag_of["devices_per_process"] = "--devices"
    m = re.match(r"(\w+)[= ]", message)
    if m is None or m.group(1) not in flag_of:
        return message
    return f"{flag_of[m.group(1)]} {message[m.end() :]}"
