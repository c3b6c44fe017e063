"""Default DLRM training configuration (the paper's Criteo Kaggle model).

A frozen-free dataclass instead of ``ml_collections.ConfigDict`` (not a dependency here);
presets override fields with ``dataclasses.replace``, command-line flags override presets
(``flags.py``). A ``Config`` is everything a run needs: ``train.train_and_evaluate(config,
workdir)`` runs what the command line runs for the same values.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args, get_origin, get_type_hints

from jax_lossy_comm.error_bound import ErrorBoundConfig
from models.dlrm.configs import error_bound_presets

# Criteo Kaggle DAC cardinalities of C1..C26 (facebookresearch/dlrm, day_fea_count).
KAGGLE_CARDINALITIES = (
    1460,
    583,
    10131227,
    2202608,
    305,
    24,
    12517,
    633,
    3,
    93145,
    5683,
    8351593,
    3194,
    27,
    14992,
    5461306,
    10,
    5652,
    2173,
    4,
    7046547,
    18,
    15,
    286181,
    105,
    142572,
)

# Criteo 1TB Click Logs cardinalities of C1..C26 (MLPerf DLRM reference, 40M cap).
TERABYTE_CARDINALITIES = (
    39884406,
    39043,
    17289,
    7420,
    20263,
    3,
    7120,
    1543,
    63,
    38532951,
    2953546,
    403346,
    10,
    2208,
    11938,
    155,
    4,
    976,
    14,
    39979771,
    25641295,
    39664984,
    585935,
    12972,
    108,
    36,
)

# MLPerf Training DLRM-DCNv2 (mlcommons/training: recommendation_v2/torchrec_dlrm/README.MD,
# --num_embeddings_per_feature): the Criteo 1TB cardinalities of C1..C26 capped at 40M.
MLPERF_DCNV2_CARDINALITIES = (
    40000000,
    39060,
    17295,
    7424,
    20265,
    3,
    7122,
    1543,
    63,
    40000000,
    3067956,
    405282,
    10,
    2209,
    11938,
    155,
    4,
    976,
    14,
    40000000,
    40000000,
    40000000,
    590152,
    12973,
    108,
    36,
)

# MLPerf DLRM-DCNv2's ids per bag of C1..C26 (the same README, --multi_hot_sizes).
MLPERF_DCNV2_MULTI_HOT_SIZES = (
    3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1,
)  # fmt: skip


@dataclasses.dataclass
class Config:
    """All knobs of one training run; every field is also a command-line flag.

    The comment above a field is its meaning, written once: ``flags.py`` turns it into the
    flag's help (its first paragraph; a bare ``#`` line starts notes the help leaves out), a
    ``Literal`` annotation into the flag's choices, and a ``# ---- name ----`` line into the
    group of the flags below it in ``--help``.
    """

    # ---- model ----
    # Width of every embedding vector (the paper's Kaggle model: 32).
    embedding_dim: int = 32
    # Bottom MLP widths after the dense inputs; the last must equal embedding_dim.
    bottom_mlp: tuple[int, ...] = (512, 256, 64, 32)
    # Top MLP widths after the interaction; the last must be 1 (the click logit).
    top_mlp: tuple[int, ...] = (512, 256, 1)
    # Rows of each categorical table before the --max-ind-range cap (one per table).
    cardinalities: tuple[int, ...] = KAGGLE_CARDINALITIES
    # Cap on table rows (ids modulo it, as in the reference DLRM; 0: no cap).
    max_ind_range: int = 100_000
    # Split tables with more rows than this row-wise over devices (-1: a device's fair
    # share; 0: never).
    #
    # -1 means one device's fair share of all rows; see sharding.plan_tables.
    split_rows: int = -1
    # Number of dense (integer) features.
    num_dense: int = 13
    # dtype of the embedding tables and of the pooled embeddings the exchange sends (the
    # MLPs, the loss and the optimizer's arithmetic stay float32).
    #
    # step.py casts at the exchange's output and in the row update.
    embedding_dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # Feature interaction: dot (the reference DLRM's) or dcn (the DCN-v2 low-rank cross network
    # of DLRM-DCNv2, MLPerf's model).
    interaction: Literal["dot", "dcn"] = "dot"
    # With --interaction dcn: cross layers of the DCN-v2 cross network (MLPerf: 3).
    dcn_num_layers: int = 3
    # With --interaction dcn: rank of each cross layer's U V^T (MLPerf: 512).
    dcn_low_rank_dim: int = 512

    # ---- data ----
    # File, folder or glob (absent = synthetic), or a folder of shards written by python -m
    # models.dlrm.data.preprocess.
    #
    # "" (the default) selects the synthetic Criteo-like generator.
    data: str = ""
    # Evaluation file, folder or glob (absent = held-out lines of --data).
    eval_data: str = ""
    # Format of --data: kaggle (DAC train.txt), terabyte (day_N) or csv.
    data_format: Literal["kaggle", "terabyte", "csv"] = "kaggle"
    # Rows of the evaluation set (read once, kept in memory).
    eval_rows: int = 16_384
    # With file data and no --eval-data: every N-th line is held out (0: none).
    holdout_every: int = 20
    # Skip and count malformed lines instead of stopping.
    skip_bad_lines: bool = False
    # With a --data folder of shards: rows of the contiguous blocks shuffled every epoch by
    # --seed (0 = file order).
    #
    # File order is the order text files are read in.
    shuffle_block_rows: int = 4096
    # Without --data: ids per bag of the synthetic generator (1: one-hot, as Criteo).
    synthetic_multi_hot: int = 1
    # Without --data: ids per bag of each table, one int per table (empty: --synthetic-multi-hot
    # for every table).
    synthetic_multi_hot_sizes: tuple[int, ...] = ()
    # Without --data: how a bag is filled: independent (every id Zipf) or mlperf (a Zipf id plus
    # ids fixed per that id, uniform: MLPerf's Multihot generator).
    synthetic_multi_hot_rule: Literal["independent", "mlperf"] = "independent"
    # Without --data: Zipf exponent of the synthetic ids (larger: more repeated hot ids).
    synthetic_zipf_a: float = 1.1

    # ---- training ----
    # Global batch size (all devices, all processes); must divide by the device count.
    batch_size: int = 1024
    # Training steps (global batches).
    steps: int = 500
    # Optimizer; sgd: the reference DLRM's.
    optimizer: Literal["sgd", "adagrad"] = "sgd"
    # With --optimizer adagrad: eps added to the accumulated squared gradients (optax.adagrad).
    adagrad_eps: float = 1e-8
    # With sgd: update only the looked-up table rows (a scatter-add of -lr x row gradient,
    # as the reference DLRM's sparse EmbeddingBag gradients; off: the dense optax update).
    #
    # Same math either way; the sparse update skips the table-sized gradient.
    sparse_embedding_update: bool = True
    # Peak learning rate.
    learning_rate: float = 0.1
    # Linear warm-up steps from 0 to the learning rate (0: none).
    warmup_steps: int = 0
    # Step at which the learning rate starts to decay (0: no decay).
    #
    # The reference DLRM's --lr-decay-start-step.
    decay_start_step: int = 0
    # Steps of polynomial (power 2) decay to 0 after --decay-start-step.
    decay_steps: int = 0
    # Seed of the parameters, the synthetic data and the shards' block order.
    seed: int = 0

    # ---- exchange ----
    # Embedding exchange: on = compressed_all_to_all, off = exact all_to_all (baseline), auto =
    # the step-time model's choice from a short probe of the links, the codec and the compute
    # (compress only where it pays; with --exchange-topology auto also flat or hierarchical).
    #
    # docs/step_time.md, "Choosing the exchange automatically". "on" stays the default: the
    # probe adds about a second to every start and its choice depends on timings, while a run
    # that says "on" or "off" is the same program every time.
    compression: Literal["on", "off", "auto"] = "on"
    # With --compression auto: compress only where the model predicts a step at least this
    # fraction shorter than the exact exchange's (0.05: 5%); among the compressed candidates
    # within this fraction of the fastest, the one with the least codec work is chosen.
    #
    # The margin stands for the model's own error: docs/step_time.md, "Choosing the exchange
    # automatically".
    auto_margin: float = 0.05
    # With --compression auto: inter-node bandwidth per device in Gbit/s that replaces the
    # measured one in the choice (0: measured); a what-if, and the tests' slow or fast link.
    #
    # It changes the prediction only, never the link; the latency stays measured.
    auto_inter_gbits: float = 0.0
    # Codec of compressed_all_to_all (the library's, auto: its choice; int8-rowwise, bf16,
    # fp16, fp8-rowwise and mx4: the TorchRec/FBGEMM baselines).
    codec: str = "auto"
    # Backward exchange of the embedding cotangents: exact (straight-through, as in the
    # paper) or compressed (the transposed exchange compressed too, same per-table bounds).
    exchange_backward: Literal["exact", "compressed"] = "exact"
    # Wire path of the compressed exchange (auto: ragged on GPU, packed on CPU; dense:
    # fixed-capacity frames; packed: used bytes in static chunks).
    exchange_path: Literal["auto", "dense", "packed", "ragged"] = "auto"
    # Flat: every block compressed; hierarchical: exact among the devices of a node,
    # compressed across nodes; auto: hierarchical with several processes (nodes) of
    # several devices each.
    #
    # Hierarchical is the HugeCTR/NCCL-style two-stage all-to-all; each process is a node
    # unless node_devices says otherwise.
    exchange_topology: Literal["auto", "flat", "hierarchical"] = "auto"
    # The dual-level adaptive error bound (jax_lossy_comm.error_bound.ErrorBoundConfig): tiers
    # of tables, schedule, policy; its num_tables must equal the model's.
    #
    # Presets: the paper's Kaggle tiers (kaggle, tiny) or Terabyte tiers (terabyte);
    # configs/error_bound_presets.py. On the command line: the --eb-* flags.
    error_bound: ErrorBoundConfig = dataclasses.field(
        default_factory=lambda: error_bound_presets.preset(
            "paper_kaggle", len(KAGGLE_CARDINALITIES)
        )
    )

    # ---- gradient all-reduce ----
    # Sum of the head gradients: exact psum, bf16 (PyTorch's DDP hook) or the library's
    # error-bounded compressed_psum.
    #
    # The data-parallel head (MLP) gradients are summed over the devices; bf16 is
    # jax_lossy_comm.compressed_psum with the BF16 codec; compressed uses the library's
    # error-bounded frames, REL grad_error_bound, and error feedback when
    # grad_error_feedback. auto (with --compression auto): exact or compressed, and with
    # grad_codec auto also its codec (auto or fixed), as the step-time model chooses with the
    # exchange; compressed only for SGD (with Adagrad it stays exact: docs/step_time.md,
    # "Choosing the exchange automatically").
    grad_allreduce: Literal["exact", "bf16", "compressed", "auto"] = "exact"
    # REL error bound of --grad-allreduce compressed (per chunk of the flattened gradients:
    # eb_abs = bound x (max - min)).
    grad_error_bound: float = 0.01
    # --grad-allreduce compressed: the frames' codec (auto: the smallest of all forms,
    # fewest bytes; fixed: fixed-rate codes, least CPU).
    #
    # Gradient values crowd near zero, so entropy coding of their codes pays: terabyte preset,
    # REL 0.01, 2 processes: 0.70 MiB per step with auto vs 2.18 MiB with fixed; fixed costs
    # about 16x less CPU to encode (0.3 vs 5 ms per 3 MiB on this 2-core machine), which
    # matters only where the codec runs on slow CPUs and the link is fast. With
    # --grad-allreduce auto, auto lets the probe choose between the two and fixed keeps fixed.
    grad_codec: Literal["fixed", "auto"] = "auto"
    # --grad-allreduce compressed: error feedback (residuals in the train state).
    #
    # Each device's compression error is added to its next gradient
    # (jax_lossy_comm.error_feedback; the residuals live in TrainState.grad_ef).
    grad_error_feedback: bool = True
    # --grad-allreduce compressed: code the gradients in preconditioned coordinates.
    #
    # adagrad (with --optimizer adagrad): each device codes g / sqrt(v + adagrad_eps), v the
    # head's Adagrad accumulator before the step (the same on every device), and the sum is
    # divided back (jax_lossy_comm.adagrad_scale): the REL bound then bounds the update, not
    # the raw gradient; none: the raw gradients.
    grad_precondition: Literal["none", "adagrad"] = "none"

    # ---- loop, output ----
    # Evaluate every N steps (0: only at the end).
    eval_every: int = 250
    # Log training metrics every N steps.
    log_every: int = 50
    # Save a checkpoint every N steps (0: only at the end).
    checkpoint_every: int = 250
    # Keep this many most recent checkpoints.
    max_checkpoints: int = 2
    # Trace this many train steps with jax.profiler (0: none) into --out/profile.
    #
    # The steps after one warm step past the compile; TensorBoard's profile plugin and
    # Perfetto read the trace; `python -m bench.testbed.step_phases` sums it per phase (the
    # embedding exchange, the gradient all-reduce, the rest). The logging interval that holds
    # them is slower by the tracing.
    profile_steps: int = 0
    # Global batch size of the evaluation.
    eval_batch_size: int = 4096
    # Continue from the latest checkpoint in --out if there is one (the default: rerunning a
    # command resumes it).
    #
    # The Flax/Orbax convention. False (--restart): remove the workdir's earlier run
    # (checkpoints, metrics.jsonl, plots, final.json) and start from step 0.
    resume: bool = True

    # ---- devices ----
    # Devices per process (0: all); sets this many virtual CPU devices when no accelerator
    # is used.
    #
    # The mesh uses the first ones of each process.
    devices_per_process: int = 0
    # Devices per node of the two-level mesh (0: one node per process); must divide the
    # devices of a process, e.g. 4 of 8 devices: 2 nodes on one process.
    #
    # Nodes do not straddle processes; the mesh axes are ("nodes", "local").
    node_devices: int = 0

    @property
    def num_tables(self) -> int:
        return len(self.cardinalities)

    def bag_sizes(self) -> tuple[int, ...]:
        """Ids per bag of each table in the synthetic data (``synthetic_multi_hot_sizes``,
        else ``synthetic_multi_hot`` for every table)."""
        if self.synthetic_multi_hot_sizes:
            return tuple(self.synthetic_multi_hot_sizes)
        return (self.synthetic_multi_hot,) * self.num_tables

    def table_rows(self) -> tuple[int, ...]:
        """Rows of each table after the ``max_ind_range`` cap (0 = no cap)."""
        cap = self.max_ind_range
        return tuple(min(c, cap) if cap > 0 else c for c in self.cardinalities)

    def validate(self) -> None:
        """Raises ValueError on inconsistent fields (one line naming the field)."""
        for name in ("steps", "batch_size", "eval_batch_size", "eval_rows", "max_checkpoints"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("log_every", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: only at the end), got "
                                 f"{getattr(self, name)}")  # fmt: skip
        if self.profile_steps < 0:
            raise ValueError(f"profile_steps must be >= 0 (0: no trace), got {self.profile_steps}")
        for name, allowed in FIELD_CHOICES.items():
            if getattr(self, name) not in allowed:
                one_of = (
                    " or ".join(allowed) if len(allowed) == 2 else "one of " + ", ".join(allowed)
                )
                raise ValueError(f"{name} must be {one_of}, got {getattr(self, name)!r}")
        eb = self.error_bound
        rel = {"base": eb.base, "tightest": eb.tightest, "loosest": eb.loosest}
        rel.update({f"tier {t.name!r}": t.value for t in eb.tiers})
        for name, value in rel.items():
            if not 0.0 < value < 1.0:  # REL: eb_abs = value * (max - min) of a chunk
                raise ValueError(f"error_bound {name}: a relative bound must be in (0, 1), "
                                 f"got {value}")  # fmt: skip
        if self.bottom_mlp[-1] != self.embedding_dim:
            raise ValueError(
                f"bottom_mlp must end in embedding_dim={self.embedding_dim}, got {self.bottom_mlp}"
            )
        if self.top_mlp[-1] != 1:
            raise ValueError(f"top_mlp must end in 1, got {self.top_mlp}")
        if self.dcn_num_layers < 1 or self.dcn_low_rank_dim < 1:
            raise ValueError(
                f"dcn_num_layers and dcn_low_rank_dim must be >= 1, got {self.dcn_num_layers}, "
                f"{self.dcn_low_rank_dim}"
            )
        if self.synthetic_multi_hot_sizes and (
            len(self.synthetic_multi_hot_sizes) != self.num_tables
            or min(self.synthetic_multi_hot_sizes) < 1
        ):
            raise ValueError(
                f"synthetic_multi_hot_sizes must be {self.num_tables} ints >= 1 (one per table), "
                f"got {self.synthetic_multi_hot_sizes}"
            )
        if self.synthetic_multi_hot < 1:
            raise ValueError(f"synthetic_multi_hot must be >= 1, got {self.synthetic_multi_hot}")
        if not 0 < self.adagrad_eps < float("inf"):
            raise ValueError(f"adagrad_eps must be > 0, got {self.adagrad_eps}")
        if self.node_devices < 0:
            raise ValueError(f"node_devices must be >= 0, got {self.node_devices}")
        if not 0 < self.grad_error_bound < float("inf"):
            raise ValueError(f"grad_error_bound must be > 0, got {self.grad_error_bound}")
        if self.grad_allreduce == "auto" and self.compression != "auto":
            raise ValueError(
                "grad_allreduce auto is chosen with the exchange by the run's probe: it needs "
                f"compression auto, got compression {self.compression!r}"
            )
        if self.grad_precondition == "adagrad" and self.optimizer != "adagrad":
            raise ValueError(
                f"grad_precondition adagrad needs optimizer adagrad, got {self.optimizer!r}"
            )
        if self.holdout_every < 0 or self.holdout_every == 1:
            raise ValueError(
                "holdout_every must be 0 (no held-out lines) or >= 2 (1 would hold out every "
                f"line), got {self.holdout_every}"
            )
        if not 0.0 <= self.auto_margin < 1.0:
            raise ValueError(f"auto_margin must be in [0, 1), got {self.auto_margin}")
        if not 0.0 <= self.auto_inter_gbits < float("inf"):
            raise ValueError(
                f"auto_inter_gbits must be >= 0 (0: measured), got {self.auto_inter_gbits}"
            )
        if self.shuffle_block_rows < 0:
            raise ValueError(f"shuffle_block_rows must be >= 0, got {self.shuffle_block_rows}")
        if self.error_bound.num_tables != self.num_tables:
            raise ValueError(
                f"error_bound has {self.error_bound.num_tables} tables, the model has "
                f"{self.num_tables}: set Config.error_bound (e.g. error_bound_presets.preset("
                f"'uniform', {self.num_tables}))"
            )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable mapping of every field (the ``config`` record of metrics.jsonl)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        eb = self.error_bound
        if callable(eb.schedule):  # written as its repr (to_dict cannot serialise a callable)
            d["error_bound"] = {
                **eb.replace(schedule="linear").to_dict(),
                "schedule": repr(eb.schedule),
            }
        else:
            d["error_bound"] = eb.to_dict()
        return d


FIELD_CHOICES: dict[str, tuple[str, ...]] = {
    name: get_args(hint)
    for name, hint in get_type_hints(Config).items()
    if get_origin(hint) is Literal
}
"""The values of each ``Literal``-annotated Config field (``validate``, the flags' choices)."""

EMBEDDING_DTYPES = FIELD_CHOICES["embedding_dtype"]
"""``Config.embedding_dtype`` choices (``--embedding-dtype``)."""


def get_config() -> Config:
    return Config()
