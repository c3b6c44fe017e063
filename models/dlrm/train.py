"""Training and evaluation of the embedding-parallel DLRM: small named steps and the loop.

Layout after the Flax imagenet example: ``create_train_step`` / ``create_eval_step``,
``compute_metrics`` / ``evaluate`` and ``train_and_evaluate(config, workdir)``, the one entry
point (the command line, ``main.py``, only turns flags into the ``Config``). Elsewhere, one
concern per module: the run's setup before its first step (mesh, exchange, state, data) in
``run_setup.py``, the model, optimizer and initial state in ``train_state.py``, the sharded
train and eval steps in ``step.py``, what the run logs in ``train_log.py``, the mesh and
host/device arrays in ``mesh.py``, checkpoints in ``checkpoints.py``, the metrics.jsonl
schema in ``metrics.py`` and plots in ``plots.py``.

Reference: Naumov et al., arXiv 1906.00091 (DLRM); Feng et al., SC24, arXiv 2407.04272.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time

import jax
import numpy as np

from jax_lossy_comm.optional_deps import import_optional
from models.dlrm import checkpoints, plots, profiling, train_log
from models.dlrm import mesh as mesh_lib
from models.dlrm import metrics as metrics_lib
from models.dlrm.configs import Config
from models.dlrm.run_setup import RunSetup, setup_run
from models.dlrm.step import StepContext, TrainState, make_eval_step, make_train_step
from models.dlrm.train_state import params_checksum

log = logging.getLogger("dlrm")


def create_train_step(ctx: StepContext, shard: TrainState):
    """``train_step(state, batch) -> (state, metrics)`` jitted on the state's shardings
    (``step.make_train_step``; the state is donated)."""
    return jax.jit(
        make_train_step(ctx),
        in_shardings=(shard, None),
        out_shardings=(shard, None),
        donate_argnums=(0,),
    )


def create_eval_step(ctx: StepContext, shard: TrainState):
    """``eval_step(state, batch) -> logits`` jitted on the state's shardings."""
    return jax.jit(make_eval_step(ctx), in_shardings=(shard, None))


def compute_metrics(labels: np.ndarray, logits: np.ndarray) -> dict[str, float]:
    """AUC, log loss and accuracy (threshold 0.5) with scikit-learn.

    Args:
      labels: float[n] in {0, 1}; logits: float[n].

    Returns:
      ``{"auc", "logloss", "accuracy", "rows"}``; ``auc`` is NaN when only one class occurs.
    """
    skm = import_optional("sklearn.metrics", "scikit-learn", "train", "the evaluation metrics")

    labels = np.asarray(labels, np.float64)
    prob = 1.0 / (1.0 + np.exp(-np.asarray(logits, np.float64)))
    prob = np.clip(prob, 1e-7, 1 - 1e-7)
    auc = skm.roc_auc_score(labels, prob) if 0 < labels.sum() < len(labels) else float("nan")
    return {
        "auc": float(auc),
        "logloss": float(skm.log_loss(labels, prob, labels=[0, 1])),
        "accuracy": float(skm.accuracy_score(labels, prob > 0.5)),
        "rows": int(len(labels)),
    }


def evaluate(ctx: StepContext, eval_step, state, eval_set: dict, eval_batch: int) -> dict:
    """Runs ``eval_step`` over the whole (replicated on the host) evaluation set."""
    n = len(eval_set["label"])
    nproc, pid = jax.process_count(), jax.process_index()
    logits_all = []
    for lo in range(0, n, eval_batch):
        chunk = {k: v[lo : lo + eval_batch] for k, v in eval_set.items()}
        m = len(chunk["label"])
        if m < eval_batch:  # pad the last batch; padding rows are dropped below
            chunk = {
                k: np.concatenate([v, np.repeat(v[-1:], eval_batch - m, 0)])
                for k, v in chunk.items()
            }
        lb = eval_batch // nproc
        local = {k: v[pid * lb : (pid + 1) * lb] for k, v in chunk.items()}
        logits = eval_step(state, mesh_lib.to_global(local, ctx.mesh, eval_batch))
        if nproc > 1:
            from jax.experimental import multihost_utils

            logits = multihost_utils.process_allgather(logits, tiled=True)
        logits_all.append(np.asarray(logits)[:m])
    logits = np.concatenate(logits_all)
    if not np.isfinite(logits).all():
        raise train_log.TrainingDivergedError(
            f"the predictions on the evaluation set are not finite after step "
            f"{int(mesh_lib.to_host(state.step))}: training diverged (a smaller "
            "--learning-rate? non-finite inputs?)"
        )
    return compute_metrics(eval_set["label"], logits)


def _due(step: int, every: int, last: int) -> bool:
    """True at every ``every``-th step (never when 0) and at the last step."""
    return bool(every and step % every == 0) or step == last


def _start_lines(run: RunSetup, config: Config, workdir: str) -> list[str]:
    """What a run says before its first step: ``train_log.describe_run``, the automatic
    choice, what ``--restart`` removed, the checkpoint it resumed from."""
    lines = train_log.describe_run(config, run.exchange, run.ctx, run.data.description)
    lines += run.auto.start_lines() if run.auto else []
    lines += [run.removed] if run.removed else []
    if run.start:
        lines.append(
            f"resumed from step {run.start} of the run in {workdir} (data position "
            f"{run.position}); --restart starts over"
        )
    return lines


def train_and_evaluate(
    config: Config, workdir: str, *, progress: bool = True, label: str = ""
) -> dict:
    """Trains ``config.steps`` steps, evaluating and checkpointing along the way.

    The command line (``python -m models.dlrm.main``) builds the Config from its flags and
    calls this; the same Config gives the same run from Python. ``progress`` and ``label``
    change only what is shown (and the ``label`` of the config record).

    Args:
      config: the run's Config. ``config.resume`` (the default): continue from the latest
        checkpoint in ``workdir`` if there is one; False: remove the earlier run there first
        (``run_setup.start_over``).
      workdir: output folder: ``metrics.jsonl``, ``checkpoints/``, ``curves.png``.
      progress: show a tqdm progress bar.
      label: name of the run in logs ("exact", "compressed", ...).

    Returns:
      The final evaluation metrics (``auc``, ``logloss``, ``accuracy``, ``rows``) plus
      ``step`` and ``params_checksum``; with ``config.compression`` "auto" also
      ``auto_exchange`` (``exchange_probe.choose_exchange`` decides the exchange before
      anything else is compiled; ``auto_report.to_json``).

    Raises:
      ValueError: bad config (``run_setup.ConfigError``: batch not divisible by devices, ...).
      FileNotFoundError: no data file matches ``config.data`` / ``config.eval_data``.
      MalformedLineError: bad data line without ``skip_bad_lines``.
      train_log.TrainingDivergedError: a non-finite training loss or evaluation prediction.
    """
    tqdm = import_optional("tqdm", "tqdm", "train", "the progress bar").tqdm
    config.validate()
    os.makedirs(workdir, exist_ok=True)
    run = setup_run(config, workdir)
    ctx, state, stream = run.ctx, run.state, run.data.stream
    train_step, eval_step = create_train_step(ctx, run.shard), create_eval_step(ctx, run.shard)
    is_main = jax.process_index() == 0

    def say(text: str) -> None:
        if is_main:
            tqdm.write((f"[{label}] " if label else "") + text)

    for line in _start_lines(run, config, workdir):
        say(line)
    metrics_path = os.path.join(workdir, "metrics.jsonl")
    writer, changed = train_log.open_metrics(
        metrics_path, config, ctx, run.start, label=label, data=run.data.description
    )
    if changed:  # the checkpoint fits, but the run so far ran with other settings
        say(
            f"settings changed since the run so far (from step {run.start} on; a config record "
            f"in metrics.jsonl): {'; '.join(changed)}"
        )

    def run_eval(step: int) -> dict:
        intervals.check_loss(step)
        ev = evaluate(ctx, eval_step, state, run.data.eval_set, config.eval_batch_size)
        say(
            f"eval @ {step}: AUC {ev['auc']:.5f} log loss {ev['logloss']:.5f} "
            f"accuracy {ev['accuracy']:.4f} ({ev['rows']} rows)"
            + train_log.small_eval_warning(config, ev["rows"])
        )
        writer.write(metrics_lib.EvalRecord(step=step, **ev, bad_lines=run.data.eval_bad_lines))
        return ev

    trace = profiling.StepTrace(config.profile_steps, workdir, run.start + 1, config.steps)
    intervals = train_log.IntervalLog(lambda y, logits: compute_metrics(y, logits)["auc"])
    bar = tqdm(total=config.steps, initial=run.start, disable=not (progress and is_main),
               desc=label or "train", dynamic_ncols=True)  # fmt: skip
    final_eval, step = None, run.start
    try:
        for step in range(run.start + 1, config.steps + 1):
            t_data = time.perf_counter()
            batch_local = stream.next_batch()
            intervals.data_wait_s += time.perf_counter() - t_data
            batch = mesh_lib.to_global(batch_local, run.mesh, config.batch_size)
            if step == run.start + 1:  # compile before the first interval's clock starts
                t_compile = time.perf_counter()
                train_step = train_step.lower(state, batch).compile()
                say(f"compiled the train step in {time.perf_counter() - t_compile:.1f} s")
                trace.save_hlo(train_step)
                intervals.restart_clock()
                intervals.data_wait_s = 0.0
            trace.before(step, state)
            state, metrics = train_step(state, batch)
            trace.after(step, (state, metrics))
            intervals.add(batch_local["label"], metrics)
            bar.update(1)
            if _due(step, config.log_every, config.steps):
                # Steps run asynchronously: wait for this one (state included) before reading the
                # clock, so the interval's time covers the device work, not just its dispatch.
                jax.block_until_ready((state, metrics))
                rec = intervals.record(
                    step,
                    config.batch_size,
                    bad_lines=int(getattr(stream, "bad_lines", 0)),
                    exchange=run.exchange.compression,
                    exchange_topology=run.exchange.topology,
                    grad_allreduce=ctx.grad_allreduce.mode,
                )
                bar.set_postfix(loss=f"{rec.loss:.4f}", ratio=f"{rec.compression_ratio:.1f}")
                say(metrics_lib.describe_interval(rec))
                say(metrics_lib.describe_tables(rec))
                writer.write(rec)
            if _due(step, config.eval_every, config.steps):
                final_eval = run_eval(step)
                intervals.restart_clock()
            if _due(step, config.checkpoint_every, config.steps):
                intervals.check_loss(step)  # never checkpoint a diverged state
                checkpoints.save(
                    run.mngr, state, checkpoints.meta_of(stream.position(), step, ctx.placement)
                )
                intervals.restart_clock()
    finally:  # an exception inside the traced steps must not leave the trace running
        trace.close()
    bar.close()
    getattr(stream, "close", lambda: None)()  # stops a shard stream's prefetch thread
    run.mngr.wait_until_finished()
    run.mngr.close()
    if final_eval is None:  # resumed at the end: evaluate the restored state
        final_eval = evaluate(ctx, eval_step, state, run.data.eval_set, config.eval_batch_size)
    result = dict(final_eval, step=step, params_checksum=params_checksum(state, run.mesh))
    if run.auto:
        lines, result["auto_exchange"] = run.auto.finish(intervals.records, run.start)
        for line in lines:
            say(line)
    writer.write(metrics_lib.FinalRecord(**result))
    if is_main:
        try:
            plots.plot_metrics({label or "run": metrics_path}, os.path.join(workdir, "curves.png"))
        except Exception as e:  # plotting must never lose a finished run
            log.warning("plot failed: %s", e)
    return result


def compare_exchanges(config: Config, workdir: str, *, progress: bool = True) -> dict:
    """Trains ``config`` twice from the same seed, with the exact exchange
    (``<workdir>/exact``) and with the compressed one (``<workdir>/compressed``), and plots
    both curves in ``<workdir>/compare.png``.

    Returns:
      ``{"exact": result, "compressed": result}`` (results as ``train_and_evaluate``'s).
    """
    results = {}
    for name, comp in (("exact", "off"), ("compressed", "on")):
        results[name] = train_and_evaluate(
            dataclasses.replace(config, compression=comp),
            os.path.join(workdir, name),
            progress=progress,
            label=name,
        )
    if jax.process_index() == 0:
        out = os.path.join(workdir, "compare.png")
        plots.plot_metrics({n: os.path.join(workdir, n, "metrics.jsonl") for n in results}, out)
        d = results["compressed"]["auc"] - results["exact"]["auc"]
        print(
            f"AUC exact {results['exact']['auc']:.5f} compressed "
            f"{results['compressed']['auc']:.5f} (difference {d:+.5f}); plot {out}"
        )
    return results


if __name__ == "__main__":  # ``python -m models.dlrm.train``: the same command as main
    import runpy

    # Runs main.py as the program (by name: this module imports nothing above it).
    runpy.run_module("models.dlrm.main", run_name="__main__", alter_sys=True)
