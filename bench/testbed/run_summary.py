"""One testbed run's summary: step times from its logging intervals, bytes per step, AUC.

``summarize`` reads the library trainer's ``metrics.jsonl`` (a ``MetricsLog``),
``summarize_torchrec`` the TorchRec peer's ``torchrec.json`` and evaluation logits; both time
the steps with ``timing`` (the first interval, the compile and warm-up, dropped). Used by
``bench.testbed.netns_bench``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from bench.trainer_runs import interval_steps
from models.dlrm.metrics import MetricsLog


def timing(records: Sequence[Any], global_batch: int) -> dict[str, Any]:
    """Step times of one run from its logging intervals (objects with ``step`` and
    ``samples_per_s``): the first interval (jit compile, warm-up) is dropped; the step time
    is ``global_batch / samples_per_s`` of each later interval, median over them."""
    steps_in = interval_steps([r.step for r in records])
    timed = list(records[1:] if len(records) > 1 else records)
    n_timed = steps_in[1:] if len(records) > 1 else steps_in
    step_s = [global_batch / r.samples_per_s for r in timed if r.samples_per_s]
    return {
        "intervals": len(timed),
        "step_times_s": step_s,
        "step_time_s": statistics.median(step_s) if step_s else None,
        "samples_per_s": global_batch / statistics.median(step_s) if step_s else None,
        "_timed": list(zip(timed, n_timed)),
    }


def summarize(log: MetricsLog) -> dict[str, Any]:
    """Step time etc. of one trainer run (its ``metrics.jsonl``, read by ``read_metrics``).

    The first ``train`` interval (it includes the jit compile) is dropped; the step time is
    ``batch_size / samples_per_s`` of each later interval (the global batch of the run's
    config), median over them. Bytes per step are the last interval's ``moved_bytes`` (all
    devices, forward exchange) over its steps, ``allreduce_moved_bytes_per_step`` the same
    for the head gradients' all-reduce; ``link_bytes_per_step`` is the median over
    intervals of the namespace's sent bytes per step (``net_tx_bytes``: every collective of
    both processes, both directions, on the loopback testbed).
    """
    global_batch = int(log.config.config.get("batch_size", 0)) if log.config else 0
    final = log.final
    out = timing(log.train, global_batch)
    timed = out.pop("_timed")
    out.update(
        auc=final.auc if final else None,
        logloss=final.logloss if final else None,
        final_step=final.step if final else None,
    )
    auto = final.auto_exchange if final else None
    if auto:  # --compression auto: what it chose and predicted, and the choice in hindsight
        hind = (auto.get("comparison") or {}).get("hindsight") or {}
        out.update(
            auto_choice=auto["choice"],
            auto_predicted_step_s=auto["candidates"][auto["choice"]]["step_overlap_s"],
            auto_hindsight_choice=hind.get("choice"),
            # what the choice was made from: every candidate's predicted step, the probe's links
            auto_candidates_step_s={m: c["step_overlap_s"] for m, c in auto["candidates"].items()},
            auto_probe_links={
                lv: {k: auto["probe"][lv][k] for k in ("peers", "bandwidth", "latency")}
                for lv in ("intra", "inter")
            },
        )
    if timed:
        last, n_last = timed[-1]
        link = [r.net_tx_bytes / n for r, n in timed if r.net_tx_bytes is not None]
        out.update(
            moved_bytes_per_step=last.moved_bytes / n_last,
            raw_bytes_per_step=last.raw_bytes / n_last,
            allreduce_moved_bytes_per_step=last.allreduce_moved_bytes / n_last,
            allreduce_raw_bytes_per_step=last.allreduce_raw_bytes / n_last,
            allreduce_scatter_moved_bytes_per_step=last.allreduce_scatter_moved_bytes / n_last,
            allreduce_gather_moved_bytes_per_step=last.allreduce_gather_moved_bytes / n_last,
            exchange_ratio=last.compression_ratio,
            moved_ratio=last.moved_ratio,
            link_bytes_per_step=statistics.median(link) if link else None,
            fallback_steps=sum(r.fallback_steps for r in log.train),
        )
        if hasattr(last, "inter_node_moved_bytes"):  # trainers with the node split
            out.update(
                exchange_topology=last.exchange_topology,
                intra_node_bytes_per_step=last.intra_node_bytes / n_last,
                inter_node_raw_bytes_per_step=last.inter_node_raw_bytes / n_last,
                inter_node_moved_bytes_per_step=last.inter_node_moved_bytes / n_last,
            )
    return out


def summarize_torchrec(res: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Step time, AUC and log loss of one TorchRec run (its ``torchrec.json`` and
    ``eval_logits.npz``; AUC and log loss by the trainer's ``compute_metrics``)."""
    from models.dlrm.train import compute_metrics

    recs = [SimpleNamespace(**r) for r in res["intervals"]]
    out = timing(recs, int(res["global_batch"]))
    timed = out.pop("_timed")
    ev = np.load(out_dir / "eval_logits.npz")
    m = compute_metrics(ev["label"], ev["logits"])
    out.update(
        auc=m["auc"],
        logloss=m["logloss"],
        final_step=res["final_step"],
        moved_bytes_per_step=None,
        qcomm_requested=res.get("qcomm_requested"),
        qcomm_effective=res.get("qcomm_effective"),
        table_owner_rank=res.get("table_owner_rank"),
        sharding_types=res.get("sharding_types"),
        torch_versions=res.get("versions"),
    )
    out["_timed"] = timed
    return out
