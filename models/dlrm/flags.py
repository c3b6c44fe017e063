"""Command-line flags of the DLRM trainer, generated from the ``Config`` fields.

Every ``Config`` field is a flag, ``--field-name`` (``FLAG_NAMES`` gives three fields other
names): its help is the field's comment in ``configs/default.py`` (the first paragraph), its
choices the field's ``Literal`` annotation (``--codec``: ``pooled_all_to_all.CODECS``), its ``--help`` group the
``# ---- name ----`` section it sits in; a ``bool`` field is a ``--x`` / ``--no-x`` pair, a
tuple field takes several values. So a field's meaning is written once, in the config.

``config_from_flags(args)`` starts from the preset (``--preset``, ``configs/``) or the
``get_config()`` of a ``--config FILE`` and lets every given flag override its one field
(flags default to None: "take the preset's value"); the ``--eb-*`` flags override their one
field of the preset's ``Config.error_bound`` the same way (``--eb-base 0.02`` keeps the tiers
and the schedule). The flags that are not ``Config`` fields (``--out``, ``--compare``, the
multi-host ones, ...) are written out in ``build_parser``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import inspect
import os
import re
import textwrap
import typing

from jax_lossy_comm import error_bound as eb_lib
from models.dlrm.configs import PRESETS, Config, error_bound_presets, get_config
from models.dlrm.configs.default import FIELD_CHOICES
from models.dlrm.pooled_all_to_all import CODECS

PROG = "python -m models.dlrm.main"

FLAG_NAMES = {
    "data_format": ("--format",),
    "learning_rate": ("--learning-rate", "--lr"),
    "devices_per_process": ("--devices",),
}
"""The flags of the ``Config`` fields not called ``--field-name``."""

EXTRA_CHOICES = {"codec": CODECS}
"""Choices of the str fields whose values are not a ``Literal`` (they come from the library)."""

NOT_FLAGS = ("error_bound",)
"""``Config`` fields set by their own flags: the ``--eb-*`` group."""


def flag_names(field: str) -> tuple[str, ...]:
    """The flags of ``Config`` field ``field``, the first the one help and errors show.

    >>> flag_names("batch_size"), flag_names("learning_rate")
    (('--batch-size',), ('--learning-rate', '--lr'))
    """
    return FLAG_NAMES.get(field, ("--" + field.replace("_", "-"),))


def field_docs(cls: type) -> dict[str, tuple[str, str]]:
    """``field -> (section, help)`` for each field of the dataclass ``cls``, from its source.

    The help is the comment block right above the field, its lines joined, up to a bare
    ``#`` line (what follows it are notes for the reader of the source); the section is the
    last ``# ---- name ----`` line above the field ("" before the first).

    Raises:
      ValueError: a field without a comment (every field's meaning must be written).
    """
    lines = inspect.getsource(cls).splitlines()
    fields = [
        node
        for node in ast.parse(inspect.cleandoc("\n".join(lines))).body[0].body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    ]
    docs, section = {}, ""
    for node in fields:
        block, i = [], node.lineno - 2  # the line above the field (0-based)
        while i >= 0 and lines[i].strip().startswith("#"):
            block.insert(0, lines[i].strip()[1:].strip())
            i -= 1
        marks = [m.group(1) for b in block if (m := re.fullmatch(r"-{2,} (.+?) -{2,}", b))]
        if marks:
            section = marks[-1]
            block = block[block.index(f"---- {section} ----") + 1 :]
        paragraph = block[: block.index("")] if "" in block else block
        if not paragraph:
            raise ValueError(f"{cls.__name__}.{node.target.id} has no comment: write its meaning")
        docs[node.target.id] = (section, " ".join(paragraph))
    return docs


def _help_text(comment: str) -> str:
    """A field's comment as flag help: first letter lower case unless an acronym, no final
    period, ``%`` escaped for argparse."""
    if comment[:1].isupper() and comment[1:2].islower():
        comment = comment[0].lower() + comment[1:]
    return comment.removesuffix(".").replace("%", "%%")


def _add_field_flag(group, field: dataclasses.Field, hint, help_: str) -> argparse.Action:
    """One ``Config`` field's flag in ``group`` (default None: the preset's value)."""
    names = flag_names(field.name)
    kw: dict = {"dest": field.name, "default": None, "help": help_}
    if hint is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif typing.get_origin(hint) is tuple:
        kw.update(type=typing.get_args(hint)[0], nargs="+", metavar="N")
    else:
        choices = FIELD_CHOICES.get(field.name) or EXTRA_CHOICES.get(field.name)
        kw.update(type=str if choices else hint, choices=choices)
        if not choices:
            kw["metavar"] = names[0][2:].upper().replace("-", "_")
    return group.add_argument(*names, **kw)


# (ErrorBoundConfig field, type, choices, help) of the --eb-* field flags.
_EB_FIELDS = (
    ("base", float, None, "relative error bound of the tables in no tier"),
    ("schedule", str, eb_lib.SCHEDULE_KINDS, "iteration-wise schedule"),
    ("eb_constant", float, None, "schedule multiplier at step 0"),
    ("early_stage", int, None, "steps until the multiplier reaches 1"),
    ("policy", str, eb_lib.POLICIES, "table-wise policy"),
    ("tightest", float, None, "auto policy: smallest per-table bound"),
    ("loosest", float, None, "auto policy: largest per-table bound"),
    ("update_every", int, None, "auto policy: re-evaluate every K steps"),
    ("smoothing", float, None, "auto policy: step toward the target, in (0, 1]"),
    ("stats_decay", float, None, "auto policy: EMA decay of the statistics"),
    ("distinct_power", float, None, "auto policy: exponent of the distinct-vector share"),
)


def _eb_flag(field: str) -> str:
    return "--eb-constant" if field == "eb_constant" else "--eb-" + field.replace("_", "-")


def _add_error_bound_flags(p: argparse.ArgumentParser) -> list[argparse.Action]:
    """The ``--eb-*`` group; returns the actions of the ``--eb-FIELD`` flags."""
    g = p.add_argument_group(
        "adaptive error bound",
        "the preset's error-bound config (kaggle, tiny: the paper's Kaggle tiers; terabyte: "
        "its Terabyte tiers), then --eb-preset, then the fields of --eb-config, then each "
        "--eb-FIELD flag replaces its one field",
    )
    g.add_argument(
        "--eb-preset",
        choices=error_bound_presets.PRESETS,
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
    actions = [
        g.add_argument(
            _eb_flag(field),
            dest="eb_" + field,
            type=kind,
            choices=choices,
            default=None,
            metavar=None if choices else _eb_flag(field)[2:].upper().replace("-", "_"),
            help=help_,
        )
        for field, kind, choices, help_ in _EB_FIELDS
    ]
    g.add_argument(
        "--eb-tier",
        action="append",
        default=None,
        metavar="NAME=VALUE:ID,ID,...",
        help="a tier of tables sharing one bound, e.g. tighten=0.01:2,3,9 (repeatable; the "
        "given tiers replace the preset's)",
    )
    return actions


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
    """The trainer's flags (``python -m models.dlrm.main --help``): one per ``Config`` field
    (see the module docstring), the ``--eb-*`` flags, and the run's and processes' own."""
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Embedding-parallel DLRM with the compressed embedding all-to-all "
        "(jax_lossy_comm). Without --data it trains on SYNTHETIC Criteo-like data. "
        "A flag not given takes the preset's value (configs/; shown per preset). "
        "`python -m models.dlrm.train` is the same command.",
        formatter_class=_HelpFormatter,
    )
    g = p.add_argument_group("run")
    start = g.add_mutually_exclusive_group()
    start.add_argument(
        "--preset",
        default="kaggle",
        choices=PRESETS,
        help="model/config preset (configs/)",
    )
    start.add_argument(
        "--config",
        dest="config_file",
        default=None,
        metavar="FILE",
        help="Python file whose get_config() returns the Config to start from instead of a "
        "preset (as configs/*.py do); the flags override its fields",
    )
    g.add_argument(
        "--out", default="runs/dlrm", help="output folder: metrics.jsonl, curves.png, checkpoints/"
    )
    g.add_argument(
        "--compare",
        action="store_true",
        help="run the exact and the compressed "
        "exchange from the same seed (--out/exact, --out/compressed) and plot both",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument(
        "--deterministic",
        action="store_true",
        help="deterministic GPU kernels (XLA_FLAGS --xla_gpu_deterministic_ops=true, set "
        "before JAX starts): bit-exact reruns and resumes on GPU, slower scatter-adds",
    )
    preset_shown = {}  # action -> Config field whose preset values its help shows
    groups: dict[str, argparse._ArgumentGroup] = {}
    hints = typing.get_type_hints(Config)
    docs = field_docs(Config)
    for field in dataclasses.fields(Config):
        if field.name in NOT_FLAGS:
            continue
        section, comment = docs[field.name]
        if section not in groups:
            groups[section] = p.add_argument_group(section)
        group = groups[section]
        if field.name == "resume":  # --resume / --restart, not --no-resume
            again = group.add_mutually_exclusive_group()
            action = again.add_argument(
                "--resume", action="store_true", default=None, help=_help_text(comment)
            )
            again.add_argument(
                "--restart",
                dest="resume",
                action="store_false",
                default=None,
                help="remove the earlier run in --out (checkpoints, metrics) and start from step 0",
            )
            continue
        action = _add_field_flag(group, field, hints[field.name], _help_text(comment))
        preset_shown[action] = lambda c, f=field.name: getattr(c, f)
    for action in _add_error_bound_flags(p):
        preset_shown[action] = lambda c, f=action.dest[3:]: getattr(c.error_bound, f)
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
    _show_preset_values(preset_shown)
    return p


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` only for flags with a value of their own (not None), and never
    breaks a line inside a flag name (``--max-ind-`` / ``range``)."""

    def _get_help_string(self, action):
        if action.default is None:
            return action.help
        return super()._get_help_string(action)

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _shown(value) -> str:
    """A preset value as ``--help`` shows it (a long tuple by its length)."""
    if isinstance(value, tuple) and len(value) > 8:
        return f"{len(value)} values"
    return repr(value)


def _show_preset_values(preset_shown: dict) -> None:
    """Appends to the help of every flag in ``preset_shown`` (action -> ``Config`` -> value)
    what that value is in each preset (``preset: 500`` or ``preset: kaggle 32, terabyte 64,
    tiny 8``); not for a value absent in every preset ("": the help says what then)."""
    configs = {name: get_config(name) for name in PRESETS}
    for action, value_of in preset_shown.items():
        values = {n: value_of(c) for n, c in configs.items()}
        if set(map(repr, values.values())) == {"''"}:
            continue
        if len(set(map(repr, values.values()))) == 1:
            shown = _shown(next(iter(values.values())))
        else:
            shown = ", ".join(f"{n} {_shown(v)}" for n, v in values.items())
        action.help = f"{action.help or ''} (preset: {shown})".strip().replace("%", "%%")


def error_bound_from_flags(
    args: argparse.Namespace, base: eb_lib.ErrorBoundConfig
) -> eb_lib.ErrorBoundConfig:
    """``base`` (the preset's error-bound config) with the ``--eb-*`` flags applied.

    Order: ``--eb-preset`` replaces ``base``; then the fields of ``--eb-config``; then each
    ``--eb-FIELD`` flag its one field (``--eb-tier`` the tiers).

    Raises:
      ValueError: a bad file, field or value (named); an ``--eb-config`` that cannot be read
        or parsed (the flag and the file named).
    """
    eb = error_bound_presets.preset(args.eb_preset, base.num_tables) if args.eb_preset else base
    if args.eb_config:  # the file's fields over the preset's (the library's reader)
        try:
            eb = eb_lib.ErrorBoundConfig.from_file(args.eb_config, base=eb)
        except (OSError, ValueError) as e:  # name the flag: a bare "[Errno 2] ..." or
            # "Expecting value: line 1 column 1" did not say which file or flag
            why = (e.strerror if isinstance(e, OSError) else None) or e
            raise ValueError(f"--eb-config {args.eb_config}: {why}") from None
    fields = {f: getattr(args, "eb_" + f) for f, *_ in _EB_FIELDS}
    fields = {f: v for f, v in fields.items() if v is not None}
    if args.eb_tier is not None:
        fields["tiers"] = dict(_parse_tier(s) for s in args.eb_tier)
    return eb.replace(**fields)


def read_config_file(path: str) -> Config:
    """The ``Config`` that ``get_config()`` of the Python file ``path`` returns (``--config``).

    Raises:
      ValueError: the file has no ``get_config``, or it returns no ``Config``.
      OSError: the file cannot be read.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--config {path}: No such file")
    spec = importlib.util.spec_from_file_location("dlrm_config_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = getattr(module, "get_config", lambda: None)()
    if not isinstance(config, Config):
        raise ValueError(f"--config {path}: get_config() must return a Config, got {config!r}")
    return config


def config_from_flags(args: argparse.Namespace) -> Config:
    """The run's Config: the preset (or ``--config FILE``) with every given flag overriding
    its one field.

    Raises:
      ValueError: an invalid value or combination (named).
      OSError: a ``--config`` file that cannot be read.
    """
    cfg = read_config_file(args.config_file) if args.config_file else get_config(args.preset)
    over = {}
    for f in dataclasses.fields(cfg):
        value = getattr(args, f.name, None)
        if value is not None and f.name not in NOT_FLAGS:
            over[f.name] = tuple(value) if isinstance(value, list) else value
    over["error_bound"] = error_bound_from_flags(args, cfg.error_bound)
    cfg = dataclasses.replace(cfg, **over)
    cfg.validate()
    return cfg


def flag_message(message: str) -> str:
    """``message`` with a leading ``Config`` field name replaced by the flag that sets it.

    ``Config.validate`` and ``run_setup.create_mesh`` name the field (``batch_size=60 must be
    divisible ...``), which is what a Python caller set; on the command line the user set
    a flag, so the error names it (``--batch-size 60 must be divisible ...``). A message
    that does not start with a field of a flag is returned unchanged.

    >>> flag_message("batch_size=60 must be divisible by the device count 8")
    '--batch-size 60 must be divisible by the device count 8'
    >>> flag_message("steps must be > 0, got 0")
    '--steps must be > 0, got 0'
    """
    m = re.match(r"(\w+)[= ]", message)
    fields = {f.name for f in dataclasses.fields(Config)} - set(NOT_FLAGS)
    if m is None or m.group(1) not in fields:
        return message
    return f"{flag_names(m.group(1))[0]} {message[m.end() :]}"
