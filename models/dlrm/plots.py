"""Training curves of one or more runs, from their metrics.jsonl (``metrics.read_metrics``)."""

from __future__ import annotations

import numpy as np

from jax_lossy_comm.optional_deps import import_optional
from models.dlrm import metrics as metrics_lib

MIB = 1024.0 * 1024.0

# Panel titles, row-major on a 2 x 3 grid.
TITLES = (
    "train loss (BCE)",
    "eval AUC",
    "bytes per step of the forward exchange (MiB)",
    "exchange ratio (raw / frames) and moved ratio (raw / moved)",
    "mean relative error bound",
    "exchange ratio per table, last interval",
)


def make_figure(runs: dict[str, str]):
    """The figure of ``plot_metrics`` (a matplotlib Figure; close it when done).

    Panels (``TITLES``): training loss; eval AUC; bytes per step of the forward exchange
    (moved: what the exchange really sent, solid; frames, dashed; raw float32, dotted); the
    exchange ratio (raw / frame bytes, solid) and the moved ratio (raw / moved bytes, dashed);
    the mean relative error bound; the per-table exchange ratio of the last interval against
    the table id.

    Args:
      runs: label -> metrics.jsonl path (several labels = side-by-side comparison).
    """
    matplotlib = import_optional("matplotlib", "matplotlib", "train", "plotting curves.png")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 3, figsize=(16, 8))
    loss, auc, nbytes, ratio, bound, tables = ax.flat
    for name, mpath in runs.items():
        log = metrics_lib.read_metrics(mpath)
        tr, ev = log.train, log.eval
        if tr:
            s = [r.step for r in tr]
            steps = np.diff([0] + s)  # steps per interval
            loss.plot(s, [r.loss for r in tr], label=name)
            (line,) = nbytes.plot(s, [r.moved_bytes / n / MIB for r, n in zip(tr, steps)],
                                  label=f"{name}: moved")  # fmt: skip
            c = line.get_color()
            nbytes.plot(s, [r.frame_bytes / n / MIB for r, n in zip(tr, steps)], "--", color=c,
                        label=f"{name}: frames")  # fmt: skip
            nbytes.plot(s, [r.raw_bytes / n / MIB for r, n in zip(tr, steps)], ":", color=c,
                        label=f"{name}: raw")  # fmt: skip
            ratio.plot(s, [r.compression_ratio for r in tr], color=c,
                       label=f"{name}: exchange (raw/frames)")  # fmt: skip
            ratio.plot(s, [r.moved_ratio for r in tr], "--", color=c,
                       label=f"{name}: moved (raw/moved)")  # fmt: skip
            if tr[-1].exchange != "off":  # the exact exchange uses no bound
                bound.plot(s, [np.mean(r.error_bound) for r in tr], color=c, label=name)
                per_table = tr[-1].ratio_per_table
                tables.plot(range(len(per_table)), per_table, "o-", color=c, label=name)
        if ev:
            auc.plot([r.step for r in ev], [r.auc for r in ev], "o-", label=name)
    for a, t in zip(ax.flat, TITLES):
        a.set_title(t, fontsize=10)
        a.set_xlabel("table id" if a is tables else "step")
        if a.lines:
            a.legend(fontsize=8)
    tables.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    return fig


def plot_metrics(runs: dict[str, str], path: str) -> None:
    """PNG of the training curves of one or more runs (panels: ``make_figure``).

    Args:
      runs: label -> metrics.jsonl path (several labels = side-by-side comparison).
      path: output PNG.
    """
    plt = import_optional("matplotlib.pyplot", "matplotlib", "train", "plotting curves.png")
    fig = make_figure(runs)
    fig.savefig(path, dpi=100)
    plt.close(fig)
