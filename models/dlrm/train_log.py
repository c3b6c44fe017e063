"""What a training run logs: its start lines, its metrics.jsonl, each logged interval.

``describe_run`` (the lines a run prints first), ``open_metrics`` (the metrics.jsonl writer of
a new or resumed run and its ``config`` record), ``IntervalLog`` (the steps since the last
logged interval: their wall clock, network counter and data wait, aggregated into one
``metrics.TrainRecord``), ``check_loss`` (a non-finite loss stops the run naming the step)
and ``small_eval_warning``. The record schema itself is ``metrics.py``'s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import jax
import numpy as np

from jax_lossy_comm import describe_implementation
from models.dlrm import metrics as metrics_lib
from models.dlrm.cluster.netdev import net_tx_bytes
from models.dlrm.configs import Config
from models.dlrm.mesh import local_rows, to_host
from models.dlrm.pooled_all_to_all import QCOMM_CODECS, EmbeddingExchange
from models.dlrm.step import NODE_BYTES, StepContext


class TrainingDivergedError(RuntimeError):
    """The training loss is not finite (the message names the step)."""


def check_loss(step_metrics: list[dict], last_step: int) -> None:
    """Raises TrainingDivergedError at the first step of ``step_metrics`` (the metrics of
    steps ``last_step - len + 1 .. last_step``) whose loss is NaN or infinite."""
    losses = [float(to_host(m["loss"])) for m in step_metrics]
    for i, loss in enumerate(losses):
        if not np.isfinite(loss):
            raise TrainingDivergedError(
                f"the training loss is {loss} at step {last_step - len(losses) + 1 + i}: "
                "training diverged (a smaller --learning-rate? non-finite inputs?); stopped "
                "before checkpointing it"
            )


MIN_EVAL_ROWS = 1000
"""An evaluation set smaller than this gets a warning next to its AUC (too noisy)."""


def small_eval_warning(config: Config, rows: int) -> str:
    """The note an evaluation on ``rows`` rows gets in the log: "" from ``MIN_EVAL_ROWS`` on,
    else a warning naming what gives more rows: ``--eval-rows``, or, when the evaluation data
    ran out before ``config.eval_rows``, a larger ``--eval-data`` or more held-out lines."""
    if rows >= MIN_EVAL_ROWS:
        return ""
    if rows >= config.eval_rows:
        more = "--eval-rows"
    elif config.eval_data:
        more = "a larger --eval-data"
    else:
        more = f"more --data rows or a --holdout-every below {config.holdout_every}"
    return f" -- warning: only {rows} evaluation rows, the AUC is noisy (use 1,000 or more: {more})"


def describe_run(
    config: Config, exchange: EmbeddingExchange, ctx: StepContext, data_desc: str
) -> list[str]:
    """The lines a run prints at its start: devices, data, exchange, error bound, gradient
    all-reduce, placement (``exchange``: the decided one; ``config`` names the exchange's codec,
    ``ctx.grad_allreduce`` the all-reduce's, as decided)."""
    mesh = ctx.mesh
    described = (
        "compressed_all_to_all codec=" + config.codec
        if exchange.compression == "on"
        else "exact all_to_all"
    )
    if exchange.compression == "on" and config.codec not in QCOMM_CODECS:
        described += f" ({describe_implementation(mesh.devices.flat[0].platform)})"
    nodes = mesh.devices.shape[0] if mesh.devices.ndim == 2 else 1
    described += f", {exchange.topology} over {nodes} node(s) of {mesh.size // nodes} device(s)"
    if exchange.topology == "hierarchical":
        described += " (exact within a node)"
    allreduce = ctx.grad_allreduce
    return [
        f"devices: {mesh.size} x {jax.devices()[0].platform} over {jax.process_count()} "
        f"process(es); data: {data_desc}",
        f"exchange: {described}; error bound: {ctx.eb_hook.describe()}",
        f"gradient all-reduce: {allreduce.mode}"
        + (
            f" (codec {allreduce.allreduce.codec.codec}, REL {allreduce.error_bound}, "
            f"error feedback {'on' if allreduce.error_feedback else 'off'}, preconditioning "
            f"{config.grad_precondition})"
            if allreduce.mode == "compressed"
            else ""
        ),
        ctx.placement.describe(config.embedding_dtype),
    ]


def open_metrics(
    path: str, config: Config, ctx: StepContext, start: int, *, label: str, data: str
) -> tuple[metrics_lib.MetricsWriter, list[str]]:
    """The run's metrics.jsonl writer (process 0 writes) and the settings changed since the
    run so far (``metrics.changed_settings``; [] for a new run); a run from step 0 starts with its
    ``config`` record, a resumed one keeps the records up to ``start`` and adds a ``config``
    record at ``start`` when its config differs from the one in effect other than in
    ``steps`` (e.g. a rerun with another ``--grad-allreduce``; the same command run longer is
    the same run), so the log says what ran when."""
    writer = metrics_lib.MetricsWriter(
        path, start if config.resume else None, jax.process_index() == 0
    )
    before = [r for r in writer.kept if isinstance(r, metrics_lib.ConfigRecord)]
    now = json.loads(json.dumps(config.to_dict()))  # as read back: lists, not tuples
    changed = metrics_lib.changed_settings(before[-1].config, now) if start and before else []
    if start == 0 or not before or changed:
        writer.write(
            metrics_lib.ConfigRecord(
                step=start,
                config=config.to_dict(),
                devices=ctx.mesh.size,
                processes=jax.process_count(),
                label=label,
                data=data,
                error_bound=ctx.eb_hook.describe(),
            )
        )
    return writer, changed


class IntervalLog:
    """The steps since the last logged interval and the run's logged intervals.

    Holds each step's labels and metrics (``add``), the interval's wall clock, this network
    namespace's sent bytes (``netdev.net_tx_bytes``) and the seconds spent waiting for data
    (``data_wait_s``); ``record`` aggregates them into one ``metrics.TrainRecord``.

    Args:
      auc: ``(labels, logits) -> AUC`` of an interval's training batches (may raise
        ValueError: the record then holds NaN).
    """

    def __init__(self, auc: Callable[[np.ndarray, np.ndarray], float]):
        self._auc = auc
        self.steps: list[tuple[np.ndarray, dict]] = []  # (labels float32[b], step metrics)
        self.records: list[metrics_lib.TrainRecord] = []  # this run's intervals
        self.data_wait_s = 0.0
        self.restart_clock()

    def restart_clock(self) -> None:
        """Starts the interval's wall clock and network counter again (after a compilation,
        an evaluation or a checkpoint: their time is not the steps')."""
        self._t0, self._net0 = time.perf_counter(), net_tx_bytes()

    def add(self, labels: np.ndarray, step_metrics: dict) -> None:
        """One step: this process's labels float32[b] and the train step's metrics."""
        self.steps.append((labels, step_metrics))

    def check_loss(self, step: int) -> None:
        """``check_loss`` of the interval's steps (the last is ``step``)."""
        check_loss([m for _, m in self.steps], step)

    def record(self, step: int, global_batch: int, **extra) -> metrics_lib.TrainRecord:
        """Aggregates the interval ending at ``step`` (syncs with the device), appends it to
        ``records`` and starts the next interval.

        Args:
          step: the interval's last step.
          global_batch: samples per step over all processes (for ``samples_per_s``).
          **extra: the record's other fields (``bad_lines``, ``exchange``, ...).

        Raises:
          TrainingDivergedError: a step's loss is not finite.
        """
        seconds = time.perf_counter() - self._t0
        net1 = net_tx_bytes()
        net = None if self._net0 is None or net1 is None else net1 - self._net0
        rec = _interval_record(
            step,
            self.steps,
            seconds,
            global_batch,
            self._auc,
            # this namespace, all processes, the interval
            net_tx_bytes=net,
            data_wait_s=self.data_wait_s,
            **extra,
        )
        self.records.append(rec)
        self.steps, self.data_wait_s = [], 0.0
        self._t0, self._net0 = time.perf_counter(), net1
        return rec


def _interval_record(
    step, interval, seconds, global_batch, auc_fn, **extra
) -> metrics_lib.TrainRecord:
    """Aggregates the per-step metrics of one logging interval (syncs with the device)."""
    labels = np.concatenate([lab for lab, _ in interval])
    check_loss([m for _, m in interval], step)
    ms = [{k: to_host(v) for k, v in m.items() if k != "logits"} for _, m in interval]
    logits = np.concatenate([local_rows(m["logits"]) for _, m in interval])
    raw = float(sum(m["raw_bytes"] for m in ms))
    frame = float(sum(m["frame_bytes"] for m in ms))
    moved = float(sum(m["moved_bytes"] for m in ms))
    node_bytes = {k: float(sum(m[k] for m in ms)) for k in NODE_BYTES}
    per_table = np.mean([m["compression_ratio"] for m in ms], axis=0)
    try:
        auc = auc_fn(labels, logits)
    except ValueError:
        auc = float("nan")
    return metrics_lib.TrainRecord(
        step=step,
        loss=float(np.mean([m["loss"] for m in ms])),
        auc=auc,
        samples_per_s=len(interval) * global_batch / max(seconds, 1e-9),
        compression_ratio=raw / max(frame, 1e-9),
        raw_bytes=raw,
        frame_bytes=frame,
        moved_bytes=moved,
        moved_ratio=raw / max(moved, 1e-9),
        ratio_per_table=[float(x) for x in per_table],
        fallback_steps=int(sum(float(m["fallback"]) > 0 for m in ms)),
        **node_bytes,
        allreduce_raw_bytes=float(sum(m["allreduce_raw_bytes"] for m in ms)),
        allreduce_frame_bytes=float(sum(m["allreduce_frame_bytes"] for m in ms)),
        allreduce_moved_bytes=float(sum(m["allreduce_moved_bytes"] for m in ms)),
        allreduce_scatter_moved_bytes=float(sum(m["allreduce_phase_moved_bytes"][0] for m in ms)),
        allreduce_gather_moved_bytes=float(sum(m["allreduce_phase_moved_bytes"][1] for m in ms)),
        allreduce_fallback_steps=int(sum(float(m["allreduce_fallback"]) > 0 for m in ms)),
        seconds=float(seconds),
        unix_time=time.time(),
        error_bound=[float(x) for x in ms[-1]["error_bound"]],
        **extra,
    )
