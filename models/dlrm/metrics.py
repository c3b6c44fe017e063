"""The ``metrics.jsonl`` schema of a training run: one writer, one reader.

A run's workdir holds ``metrics.jsonl``: one JSON object per line, each with a ``kind``:

- ``config`` (:class:`ConfigRecord`): at step 0, the run's Config and setup; again at the
  step a run resumes from when it resumed with another Config.
- ``train`` (:class:`TrainRecord`): every ``log_every`` steps: the interval's loss, train AUC,
  throughput and the exchange's byte counts.
- ``eval`` (:class:`EvalRecord`): every ``eval_every`` steps: held-out AUC, log loss, accuracy.
- ``final`` (:class:`FinalRecord`): once, at the end: the last evaluation and a checksum of
  the parameters.

The trainer writes them with :class:`MetricsWriter`; the plots and the benchmarks read them with
:func:`read_metrics`. A field added to a record class is the schema change; nothing else
spells the keys.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from typing import Any, ClassVar

__all__ = [
    "ConfigRecord",
    "EvalRecord",
    "FinalRecord",
    "MetricsLog",
    "MetricsWriter",
    "Record",
    "TrainRecord",
    "changed_settings",
    "from_json",
    "read_metrics",
    "to_json",
]


@dataclasses.dataclass(frozen=True)
class ConfigRecord:
    """The run's setup, written once at step 0.

    Attributes:
      step: always 0.
      config: ``dataclasses.asdict(Config)``, the error-bound config included.
      devices: devices in the mesh (all processes).
      processes: JAX processes.
      label: the run's name ("" when none; "exact", "compressed" in comparisons).
      data: one line describing the data (files or the synthetic generator, eval rows).
      error_bound: one line describing the error-bound policy and schedule.
    """

    kind: ClassVar[str] = "config"
    step: int
    config: dict[str, Any]
    devices: int
    processes: int
    label: str
    data: str
    error_bound: str


@dataclasses.dataclass(frozen=True)
class TrainRecord:
    """One logging interval of training (``log_every`` steps, or fewer at the end).

    Byte counts are summed over all devices and the interval's steps, forward exchange only.

    Attributes:
      step: last step of the interval (1-based count of completed steps).
      loss: mean training BCE over the interval's steps.
      auc: ROC AUC of the interval's training predictions (NaN if one class only).
      samples_per_s: global samples per second of wall time, device work included, the
        compilation of the train step not (it is compiled before the first interval).
      compression_ratio: the exchange ratio, raw / frame bytes (the codec's ratio; the log's
        "exchange ratio (raw/frames)", curves.png's solid ratio line).
      raw_bytes: bytes the exact exchange would move (in ``Config.embedding_dtype``: 4 bytes
        per pooled value in float32, 2 in bfloat16/float16).
      frame_bytes: bytes of the frames (what a variable-size exchange moves).
      moved_bytes: bytes the exchange really moved (static capacity on the dense path).
      moved_ratio: the moved ratio, raw / moved bytes (what the wire saved; the log's "moved
        ratio (raw/moved)", curves.png's dashed ratio line).
      ratio_per_table: float[T], per-table compression ratio, table order.
      fallback_steps: steps of the interval that fell back to the exact exchange.
      seconds: wall time of the interval.
      unix_time: time.time() at the end of the interval.
      error_bound: float[T], relative error bound per table at the interval's last step.
      bad_lines: distinct malformed training lines skipped so far (``--skip-bad-lines``;
        a line counts once, not again each time the data wraps around to it).
      exchange: "on" (compressed or baseline codec) or "off" (exact all-to-all).
      net_tx_bytes: bytes sent by this network namespace over the interval (Linux
        ``/proc/net/dev``), None where unavailable.
      data_wait_s: seconds of the interval the loop spent getting its batches from the input
        stream (parsing text; waiting for the shard prefetch), None where not measured.
      grad_allreduce: the head gradients' all-reduce, ``Config.grad_allreduce`` ("exact",
        "bf16", "compressed").
      allreduce_raw_bytes: bytes the exact gradient all-reduce would move (twice the
        gradient bytes per device: reduce-scatter plus all-gather), all devices.
      allreduce_frame_bytes: bytes of the gradient all-reduce's frames, all devices (what a
        variable-size path such as the GPU's ragged one sends; the dense path moves the
        capacity); the raw bytes for the exact all-reduce, half of them for bf16.
      allreduce_moved_bytes: bytes the gradient all-reduce really moved, all devices.
      allreduce_scatter_moved_bytes, allreduce_gather_moved_bytes: the same split into its
        reduce-scatter and its all-gather (``jax_lossy_comm.ExchangeStats.phase_moved_bytes``;
        0 in records written before they were recorded).
      allreduce_fallback_steps: steps whose compressed all-reduce fell back to ``psum``.
      exchange_topology: the embedding exchange's topology, "flat" or "hierarchical"
        (``Config.exchange_topology`` resolved).
      intra_node_bytes: bytes the exchange sent between devices of one node (exact in the
        hierarchical exchange, compressed like the rest in the flat one), all devices. A node
        is a process unless ``Config.node_devices``; a 1-D mesh (one process, flat) is one
        node.
      inter_node_raw_bytes: bytes the exact exchange would send across nodes, all devices.
      inter_node_moved_bytes: bytes the exchange really sent across nodes, all devices.
    """

    kind: ClassVar[str] = "train"
    step: int
    loss: float
    auc: float
    samples_per_s: float
    compression_ratio: float
    raw_bytes: float
    frame_bytes: float
    moved_bytes: float
    moved_ratio: float
    ratio_per_table: list[float]
    fallback_steps: int
    seconds: float
    unix_time: float
    error_bound: list[float]
    bad_lines: int
    exchange: str
    net_tx_bytes: float | None = None
    data_wait_s: float | None = None
    grad_allreduce: str = "exact"
    allreduce_raw_bytes: float = 0.0
    allreduce_frame_bytes: float = 0.0
    allreduce_moved_bytes: float = 0.0
    allreduce_scatter_moved_bytes: float = 0.0
    allreduce_gather_moved_bytes: float = 0.0
    allreduce_fallback_steps: int = 0
    exchange_topology: str = "flat"
    intra_node_bytes: float = 0.0
    inter_node_raw_bytes: float = 0.0
    inter_node_moved_bytes: float = 0.0


@dataclasses.dataclass(frozen=True)
class EvalRecord:
    """One evaluation on the held-out set.

    Attributes:
      step: training steps completed.
      auc: ROC AUC (NaN if one class only).
      logloss: binary cross-entropy of the predicted probabilities.
      accuracy: at threshold 0.5.
      rows: evaluated rows.
      bad_lines: malformed lines skipped reading the evaluation set (``--skip-bad-lines``).
    """

    kind: ClassVar[str] = "eval"
    step: int
    auc: float
    logloss: float
    accuracy: float
    rows: int
    bad_lines: int = 0


@dataclasses.dataclass(frozen=True)
class FinalRecord:
    """The run's result, written once at the end: the last evaluation plus a checksum.

    Attributes:
      auc, logloss, accuracy, rows: as in :class:`EvalRecord`.
      step: the final step.
      params_checksum: sum of ``|x|`` over every parameter (a bit-level resume check).
      auto_exchange: with ``--compression auto``: the probe, each candidate's predicted
        step, the choice and the measured vs predicted step and bytes per level
        (``models.dlrm.cluster.auto_report.to_json``); None (absent from the line) otherwise.
    """

    kind: ClassVar[str] = "final"
    auc: float
    logloss: float
    accuracy: float
    rows: int
    step: int
    params_checksum: float
    auto_exchange: dict[str, Any] | None = None


Record = ConfigRecord | TrainRecord | EvalRecord | FinalRecord
_KINDS: dict[str, type] = {c.kind: c for c in (ConfigRecord, TrainRecord, EvalRecord, FinalRecord)}


def to_json(record: Record) -> str:
    """One JSON line (no newline) for ``record``: ``kind`` first, then the fields in order.

    A None ``net_tx_bytes`` or ``auto_exchange`` is left out (the key is absent where
    /proc/net/dev is, or without ``--compression auto``).
    """
    d = {"kind": record.kind, **dataclasses.asdict(record)}
    for key in ("net_tx_bytes", "auto_exchange"):
        if d.get(key, 0) is None:
            del d[key]
    return json.dumps(d)


def from_json(line: str) -> Record:
    """Parses one line of metrics.jsonl.

    Raises:
      ValueError: not JSON, an unknown ``kind``, or missing or unknown fields.
    """
    d = json.loads(line)
    kind = d.pop("kind", None)
    cls = _KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown record kind {kind!r}; expected one of {sorted(_KINDS)}")
    names = {f.name for f in dataclasses.fields(cls)}
    if set(d) - names:
        raise ValueError(f"{kind} record has unknown fields {sorted(set(d) - names)}")
    try:
        return cls(**d)
    except TypeError as e:  # missing fields
        raise ValueError(f"{kind} record: {e}") from None


@dataclasses.dataclass(frozen=True)
class MetricsLog:
    """The records of one metrics.jsonl, by kind, in file order.

    Attributes:
      config: the first ConfigRecord, the run's start (None if the run never wrote one).
      train: TrainRecords, ascending steps.
      eval: EvalRecords, ascending steps.
      final: the last FinalRecord (None while the run has not finished).
      configs: every ConfigRecord, ascending steps (later ones: resumed with another Config).
    """

    config: ConfigRecord | None
    train: list[TrainRecord]
    eval: list[EvalRecord]
    final: FinalRecord | None
    configs: list[ConfigRecord] = dataclasses.field(default_factory=list)

    @classmethod
    def from_records(cls, records: Iterable[Record]) -> MetricsLog:
        records = list(records)
        configs = [r for r in records if isinstance(r, ConfigRecord)]
        finals = [r for r in records if isinstance(r, FinalRecord)]
        return cls(
            config=configs[0] if configs else None,
            train=[r for r in records if isinstance(r, TrainRecord)],
            eval=[r for r in records if isinstance(r, EvalRecord)],
            final=finals[-1] if finals else None,
            configs=configs,
        )


def _read_records(path: str | os.PathLike[str]) -> list[Record]:
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if line.strip():
                try:
                    out.append(from_json(line))
                except ValueError as e:
                    raise ValueError(f"{os.fspath(path)}:{i}: {e}") from None
    return out


def read_metrics(path: str | os.PathLike[str]) -> MetricsLog:
    """Reads a run's metrics.jsonl.

    Args:
      path: the file (``<workdir>/metrics.jsonl``).

    Returns:
      A :class:`MetricsLog` of typed records.

    Raises:
      OSError: the file cannot be read.
      ValueError: a line that is not a record of this schema, naming ``path:line``.
    """
    return MetricsLog.from_records(_read_records(path))


class MetricsWriter:
    """Appends records to metrics.jsonl (only where ``enabled``: process 0 of a run).

    Opening truncates the file. On resume from step ``resume_step`` > 0 the records up to
    that step are kept (a killed run's records past its last checkpoint are dropped, they are
    written again) but for a ``final`` record (the resumed run writes its own at its end, so
    there is one); with ``resume_step`` None or 0 the run starts from an empty file.

    Args:
      path: the metrics.jsonl file.
      resume_step: the step the run resumes from, or None for a fresh run.
      enabled: write at all (False on every process but 0).
    """

    def __init__(self, path: str | os.PathLike[str], resume_step: int | None, enabled: bool):
        self.path, self.enabled = os.fspath(path), enabled
        self.kept: list[Record] = []  # the records a resumed run carries over
        if not enabled:
            return
        keep: list[Record] = []
        if resume_step and os.path.exists(self.path):
            # a finished run continued (more --steps) or run again writes its own final
            # record at its end: the earlier one would be a second "final" mid-file
            keep = [
                r
                for r in _read_records(self.path)
                if r.step <= resume_step and not isinstance(r, FinalRecord)
            ]
        self.kept = keep
        with open(self.path, "w") as f:
            f.writelines(to_json(r) + "\n" for r in keep)

    def write(self, record: Record) -> None:
        """Appends ``record`` as one line (a no-op where not enabled)."""
        if self.enabled:
            with open(self.path, "a") as f:
                f.write(to_json(record) + "\n")


def changed_settings(before: dict, now: dict) -> list[str]:
    """``"field old -> new"`` for every field of the config dict ``now`` that differs from
    ``before`` other than ``steps`` and ``profile_steps`` (neither changes the training; a
    nested dict by its own fields: ``error_bound.base``).

    >>> changed_settings({"steps": 5, "compression": "on"}, {"steps": 9, "compression": "off"})
    ['compression on -> off']
    """
    out = []
    for key, value in now.items():
        old = before.get(key)
        if key in ("steps", "profile_steps") or old == value:
            continue
        if isinstance(old, dict) and isinstance(value, dict):
            out += [f"{key}.{c}" for c in changed_settings(old, value)]
        else:
            out.append(f"{key} {old} -> {value}")
    return out


# ------------------------------------------------------------------------- the log lines
def describe_tables(rec: TrainRecord) -> str:
    """The per-table exchange ratios (raw / frame bytes) as ``table:ratio`` pairs."""
    pairs = " ".join(f"{t}:{r:.1f}" for t, r in enumerate(rec.ratio_per_table))
    return f"  exchange ratio per table (table:raw/frames): {pairs}"


def describe_nodes(rec: TrainRecord) -> str:
    """The intra-/inter-node split of the exchange's bytes, "" on one node (nothing crosses
    nodes there: the split said "inter-node moved 0.0 B of raw 0.0 B" beside an intra-node
    figure other than the moved bytes)."""
    if rec.inter_node_raw_bytes == 0 and rec.exchange_topology != "hierarchical":
        return ""
    return (
        f"{rec.exchange_topology}: intra-node {format_bytes(rec.intra_node_bytes)}, inter-node "
        f"moved {format_bytes(rec.inter_node_moved_bytes)} of raw "
        f"{format_bytes(rec.inter_node_raw_bytes)} | "
    )


def describe_interval(rec: TrainRecord) -> str:
    """The log line of a logged interval: loss, train AUC, speed, the exchange's bytes and
    ratios, the error bounds and the gradient all-reduce's bytes."""
    return (
        f"step {rec.step}: loss {rec.loss:.4f} train-AUC {rec.auc:.4f} "
        f"{rec.samples_per_s:.0f} samples/s (data wait {rec.data_wait_s or 0:.2f} s) | "
        f"exchange ratio (raw/frames) {rec.compression_ratio:.2f}x, "
        f"moved ratio (raw/moved) {rec.moved_ratio:.2f}x: raw {format_bytes(rec.raw_bytes)}, "
        f"frames {format_bytes(rec.frame_bytes)}, moved {format_bytes(rec.moved_bytes)}, "
        f"{rec.fallback_steps} exact-fallback steps | {describe_nodes(rec)}"
        f"eb_rel [{min(rec.error_bound):.4f}, {max(rec.error_bound):.4f}] | "
        f"grad all-reduce {rec.grad_allreduce}: moved {format_bytes(rec.allreduce_moved_bytes)} "
        f"vs raw {format_bytes(rec.allreduce_raw_bytes)} ({rec.allreduce_fallback_steps} "
        f"psum-fallback steps)"
    )


def format_bytes(x: float) -> str:
    """``x`` bytes in B, KiB, MiB, GiB or TiB, one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(x) < 1024 or unit == "TiB":
            return f"{x:.1f} {unit}"
        x /= 1024.0
    return f"{x:.1f}"
