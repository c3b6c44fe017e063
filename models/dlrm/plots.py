"""Training curves of one or more runs, from their metrics.jsonl (``metrics.read_metrics``)."""

from __future__ import annotations

import numpy as np

from models.dlrm import metrics as metrics_lib


def plot_metrics(runs: dict[str, str], path: str) -> None:
    """PNG of training loss, eval AUC, exchange ratio and error bounds for one or more runs.

    Args:
      runs: label -> metrics.jsonl path (several labels = side-by-side comparison).
      path: output PNG.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    for name, mpath in runs.items():
        log = metrics_lib.read_metrics(mpath)
        tr, ev = log.train, log.eval
        if tr:
            s = [r.step for r in tr]
            ax[0, 0].plot(s, [r.loss for r in tr], label=name)
            ax[1, 0].plot(s, [r.compression_ratio for r in tr], label=name)
            if tr[-1].exchange != "off":  # the exact exchange uses no bound
                ax[1, 1].plot(s, [np.mean(r.error_bound) for r in tr], label=name)
        if ev:
            ax[0, 1].plot([r.step for r in ev], [r.auc for r in ev], "o-", label=name)
    for a, t in zip(
        ax.flat,
        ("train loss (BCE)", "eval AUC", "exchange compression ratio", "mean relative error bound"),
    ):
        a.set_title(t)
        a.set_xlabel("step")
        a.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
