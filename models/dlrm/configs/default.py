"""Default DLRM training configuration (the paper's Criteo Kaggle model).

A frozen-free dataclass instead of ``ml_collections.ConfigDict`` (not a dependency here);
presets override fields with ``dataclasses.replace``, command-line flags override presets
(``flags.py``). A ``Config`` is everything a run needs: ``train.train_and_evaluate(config,
workdir)`` runs what the command line runs for the same values.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from models.dlrm import error_bounds

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

#: ``Config.embedding_dtype`` choices (``--embedding-dtype``).
EMBEDDING_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass
class Config:
    """All knobs of one training run; every field is also a command-line flag."""

    # ---- model ----
    # Width of every embedding vector (the paper's Kaggle model: 32).
    embedding_dim: int = 32
    # Bottom MLP widths after the 13 dense inputs; the last must equal embedding_dim.
    bottom_mlp: tuple[int, ...] = (512, 256, 64, 32)
    # Top MLP widths after the interaction; the last must be 1 (the click logit).
    top_mlp: tuple[int, ...] = (512, 256, 1)
    # Rows of each categorical table before the --max-ind-range cap.
    cardinalities: tuple[int, ...] = KAGGLE_CARDINALITIES
    # Cap on the rows of every table (ids are taken modulo it, as in the reference DLRM).
    max_ind_range: int = 100_000
    # Split tables with more rows than this row-wise over devices (-1: one device's fair
    # share of all rows; 0: never). See sharding.plan_tables.
    split_rows: int = -1
    # Number of dense (integer) features.
    num_dense: int = 13
    # dtype of the embedding tables and of the pooled embeddings (what the exchange sends):
    # "float32", "bfloat16" or "float16". The dense MLPs, the loss and the optimizer's
    # arithmetic stay float32 (step.py casts at the exchange's output and in the row update).
    embedding_dtype: str = "float32"

    # ---- data ----
    # Input file, folder or glob; "" = the synthetic Criteo-like generator.
    data: str = ""
    # Held-out evaluation file/folder/glob; "" = a held-out split of the training source.
    eval_data: str = ""
    # Format of the files in data: "kaggle" (DAC train.txt), "terabyte" (day_N) or "csv".
    data_format: str = "kaggle"
    # Rows of the held-out evaluation set (read once, kept in memory).
    eval_rows: int = 16_384
    # With file data and no eval_data: every holdout_every-th line goes to evaluation.
    holdout_every: int = 20
    # Skip and count malformed lines instead of stopping with an error.
    skip_bad_lines: bool = False
    # With shard data (a data folder written by models.dlrm.preprocess): rows of the contiguous
    # blocks shuffled every epoch by seed; 0 = file order (the order text files are read in).
    shuffle_block_rows: int = 4096
    # Ids per bag in the synthetic generator (1 = one-hot, like Criteo).
    synthetic_multi_hot: int = 1
    # Zipf exponent of the synthetic ids (larger = more repeated hot ids per batch).
    synthetic_zipf_a: float = 1.1

    # ---- training ----
    # Global batch size (all devices, all processes); must divide by the device count.
    batch_size: int = 1024
    # Training steps.
    steps: int = 500
    # Optimizer: "sgd" (reference DLRM) or "adagrad".
    optimizer: str = "sgd"
    # With optimizer "sgd": update only the table rows looked up in the step (scatter-add of
    # -lr * row gradient, as the reference DLRM's sparse EmbeddingBag gradients) instead of a
    # dense table-sized gradient and update. Same math; False: the dense optax update.
    sparse_embedding_update: bool = True
    # Peak learning rate.
    learning_rate: float = 0.1
    # Linear warm-up steps from 0 to learning_rate (0 = none).
    warmup_steps: int = 0
    # Step at which decay starts (reference DLRM --lr-decay-start-step); 0 = no decay.
    decay_start_step: int = 0
    # Steps of polynomial (power 2) decay to zero after decay_start_step.
    decay_steps: int = 0
    # Seed of parameters and data.
    seed: int = 0

    # ---- exchange ----
    # "on": compressed_all_to_all; "off": the exact jax.lax.all_to_all (baseline).
    compression: str = "on"
    # Codec name passed to compressed_all_to_all ("auto" lets the library choose).
    codec: str = "auto"
    # Backward (cotangent) exchange: "exact" (straight-through, as in the paper) or
    # "compressed" (the transposed exchange compressed too, with the same per-table bounds).
    exchange_backward: str = "exact"
    # Wire path of compressed_all_to_all: "auto" (ragged on GPU, packed elsewhere), "dense"
    # (fixed-capacity frames), "packed" (used bytes in static chunks) or "ragged" (GPU).
    exchange_path: str = "auto"
    # Topology of the embedding exchange: "flat" (every block compressed), "hierarchical"
    # (exact among the devices of a node, compressed across nodes; HugeCTR/NCCL-style two-stage
    # all-to-all) or "auto" (hierarchical when the run has several nodes of several devices:
    # several processes, each a node unless node_devices says otherwise; else flat).
    exchange_topology: str = "auto"
    # The dual-level adaptive error bound (jax_lossy_comm.error_bound.ErrorBoundConfig): tiers
    # of tables, schedule, policy. Its num_tables must equal the model's. Presets: the paper's
    # Kaggle tiers (kaggle, tiny) or Terabyte tiers (terabyte); error_bounds.preset/override.
    error_bound: error_bounds.ErrorBoundConfig = dataclasses.field(
        default_factory=lambda: error_bounds.preset("paper_kaggle", len(KAGGLE_CARDINALITIES))
    )

    # ---- gradient all-reduce ----
    # Sum of the data-parallel head (MLP) gradients over the devices: "exact" (jax.lax.psum),
    # "bf16" (jax_lossy_comm.compressed_psum with the BF16 codec: PyTorch DDP's bf16
    # compression hook) or "compressed" (compressed_psum with the library's error-bounded
    # frames, REL grad_error_bound, and error feedback when grad_error_feedback).
    grad_allreduce: str = "exact"
    # REL error bound of the compressed gradient all-reduce (per chunk of the flattened
    # gradients: eb_abs = grad_error_bound * (max - min)).
    grad_error_bound: float = 0.01
    # The frames' codec of the compressed gradient all-reduce: "auto" (the smallest of
    # fixed-rate, dictionary and entropy-coded frames) or "fixed" (fixed-rate codes only).
    # Gradient values crowd near zero, so entropy coding of their codes pays: terabyte preset,
    # REL 0.01, 2 processes: 0.70 MiB per step with auto vs 2.18 MiB with fixed; fixed costs
    # about 10x less CPU to encode (0.3 vs 5 ms per 3 MiB on this 2-core machine), which
    # matters only where the codec runs on slow CPUs and the link is fast.
    grad_codec: str = "auto"
    # With grad_allreduce "compressed": add each device's compression error to its next
    # gradient (jax_lossy_comm.error_feedback; the residuals live in TrainState.grad_ef).
    grad_error_feedback: bool = True

    # ---- loop, output ----
    # Evaluate every this many steps (and at the end); 0 = only at the end.
    eval_every: int = 250
    # Log training metrics every this many steps.
    log_every: int = 50
    # Save a checkpoint every this many steps (and at the end); 0 = only at the end.
    checkpoint_every: int = 250
    # Keep this many most recent checkpoints.
    max_checkpoints: int = 2
    # Evaluation batch size (global).
    eval_batch_size: int = 4096
    # Continue from the latest checkpoint in the workdir when there is one (the Flax/Orbax
    # convention: rerunning a command resumes it). False (--restart): remove the workdir's
    # earlier run (checkpoints, metrics.jsonl, plots, final.json) and start from step 0.
    resume: bool = True

    # ---- devices ----
    # Devices of each process the mesh uses (the first ones); 0 = all.
    devices_per_process: int = 0
    # Devices per node of the two-level mesh ("nodes", "local"); 0 = one node per process.
    # Must divide the devices of a process (nodes do not straddle processes); e.g. 4 on one
    # process of 8 devices: 2 nodes of 4 for --exchange-topology hierarchical.
    node_devices: int = 0

    @property
    def num_tables(self) -> int:
        return len(self.cardinalities)

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
        if self.embedding_dtype not in EMBEDDING_DTYPES:
            raise ValueError(
                f"embedding_dtype must be one of {', '.join(EMBEDDING_DTYPES)}, got "
                f"{self.embedding_dtype!r}"
            )
        if self.compression not in ("on", "off"):
            raise ValueError(f"compression must be 'on' or 'off', got {self.compression!r}")
        if self.exchange_path not in ("auto", "dense", "packed", "ragged"):
            raise ValueError(
                f"exchange_path must be auto, dense, packed or ragged, got {self.exchange_path!r}"
            )
        if self.exchange_topology not in ("auto", "flat", "hierarchical"):
            raise ValueError(
                "exchange_topology must be auto, flat or hierarchical, got "
                f"{self.exchange_topology!r}"
            )
        if self.node_devices < 0:
            raise ValueError(f"node_devices must be >= 0, got {self.node_devices}")
        if self.grad_allreduce not in ("exact", "bf16", "compressed"):
            raise ValueError(
                f"grad_allreduce must be exact, bf16 or compressed, got {self.grad_allreduce!r}"
            )
        if not 0 < self.grad_error_bound < float("inf"):
            raise ValueError(f"grad_error_bound must be > 0, got {self.grad_error_bound}")
        if self.grad_codec not in ("fixed", "auto"):
            raise ValueError(f"grad_codec must be fixed or auto, got {self.grad_codec!r}")
        if self.optimizer not in ("sgd", "adagrad"):
            raise ValueError(f"optimizer must be 'sgd' or 'adagrad', got {self.optimizer!r}")
        if self.holdout_every < 0 or self.holdout_every == 1:
            raise ValueError(
                "holdout_every must be 0 (no held-out lines) or >= 2 (1 would hold out every "
                f"line), got {self.holdout_every}"
            )
        if self.shuffle_block_rows < 0:
            raise ValueError(f"shuffle_block_rows must be >= 0, got {self.shuffle_block_rows}")
        if self.data_format not in ("kaggle", "terabyte", "csv"):
            raise ValueError(
                f"data_format must be kaggle, terabyte or csv, got {self.data_format!r}"
            )
        if self.error_bound.num_tables != self.num_tables:
            raise ValueError(
                f"error_bound has {self.error_bound.num_tables} tables, the model has "
                f"{self.num_tables}: set Config.error_bound (e.g. error_bounds.preset("
                f"'uniform', {self.num_tables}))"
            )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable mapping of every field (the ``config`` record of metrics.jsonl)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["error_bound"] = error_bounds.to_dict(self.error_bound)
        return d


def get_config() -> Config:
    return Config()
