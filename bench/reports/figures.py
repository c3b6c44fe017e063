"""Figures of the benchmark results (PNG into bench/results/), drawn by ``bench.reports.report``.

* :func:`plot_pareto`: ratio vs compress throughput scatter per dump with the Pareto front.
* :func:`plot_ratio_bars`: compression ratio of every codec per dump (table).
* :func:`plot_accuracy`: eval AUC and training loss curves of bench.training.train_compare runs.
* :func:`plot_fidelity`: AUC difference against bytes moved of ``train_compare --seeds``.

Only the standard library is imported at module import; matplotlib (Agg) is imported by the
plotting functions. The figures are drawn about 10 inches wide with 10-12 pt text, so that
their labels stay readable when a docs page shows them at its column's width (about 750
pixels): one or two panels a row, legends outside the data.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench import bench_util as bu
from bench.codecs.pareto import AUTO, is_library_form, ok_rows, pareto_analysis

RESULTS_DIR = bu.RESULTS_DIR


def save(fig, path: str | Path, dpi: int = 110, mkdir: bool = False) -> Path:
    """Lays ``fig`` out, writes it to ``path`` (creating its folder with ``mkdir``) and closes
    it; returns the path."""
    fig.tight_layout()
    path = Path(path)
    if mkdir:
        path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def pyplot():
    """matplotlib.pyplot on the Agg backend with the results pages' font sizes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "font.size": 11,
            "axes.titlesize": 12,
            "axes.labelsize": 11,
            "xtick.labelsize": 10,
            "ytick.labelsize": 10,
            "legend.fontsize": 10,
            "figure.titlesize": 13,
        }
    )
    return plt


_FAMILY_COLORS = {
    "jax_lossy_comm": "tab:red",
    "lossless": "tab:gray",
    "quantization": "tab:blue",
    "sz3": "tab:green",
    "zfp": "tab:olive",
    "fbgemm-qcomm": "tab:purple",
    "cast": "tab:orange",
}


def plot_pareto(
    peer_result: dict[str, Any], path: str | Path, eb_rel: float = 0.01, tiled: bool = False
) -> Path:
    """Scatter of compression ratio (log) vs compress GB/s (log), one panel per dump, at
    ``eb_rel``; the front among bound-honouring codecs is drawn as a line, codecs over the
    bound are hollow markers."""
    plt = pyplot()
    rows = [
        r
        for r in ok_rows(peer_result["rows"])
        if bool(r.get("tiled")) == tiled and math.isclose(r["eb_rel"], eb_rel, rel_tol=1e-9)
    ]
    dumps = list(dict.fromkeys(r["dump"] for r in rows))
    analysis = {a["dump"]: a for a in pareto_analysis(peer_result["rows"], eb_rel, tiled)}
    n = len(dumps)
    cols = min(2, max(1, n))
    nrows = max(1, math.ceil((n + 1) / cols))  # a free panel holds the legend
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 4.4 * nrows), squeeze=False)
    for ax, dump in zip(axes.flat, dumps):
        rs = [r for r in rows if r["dump"] == dump]
        front = set(analysis[dump]["front_bounded"])
        for r in rs:
            c = _FAMILY_COLORS.get(r["family"], "black")
            form = is_library_form(r["codec"])
            ax.scatter(
                r["compress_gbps"],
                r["ratio"],
                s=140 if r["codec"] == AUTO else (14 if form else 30),
                facecolors=c if r["bound_ok"] else "none",
                edgecolors=c,
                alpha=0.45 if form else 1.0,
                marker="*" if r["codec"] == AUTO else ("s" if form else "o"),
                zorder=4 if r["codec"] == AUTO else 3,
            )
            if r["codec"] not in front:
                continue  # labelled: the front only (every codec is in codecs.md's tables)
            ax.annotate(
                r["codec"],
                (r["compress_gbps"], r["ratio"]),
                fontsize=10,
                xytext=(4, 3),
                textcoords="offset points",
                weight="bold" if r["codec"] == AUTO else "normal",
            )
        fr = sorted((r for r in rs if r["codec"] in front), key=lambda r: r["compress_gbps"])
        ax.plot(
            [r["compress_gbps"] for r in fr],
            [r["ratio"] for r in fr],
            "k--",
            lw=0.8,
            zorder=2,
            label="Pareto front (peers + jlc-auto, bound honoured)",
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        from matplotlib.ticker import NullFormatter

        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{dump} {rs[0].get('shape')}")
        ax.set_xlabel("compress GB/s (single thread)")
        ax.set_ylabel("compression ratio")
        ax.grid(True, which="both", lw=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if n:
        from matplotlib.lines import Line2D

        def mark(color, **kw):
            return Line2D([], [], color=color, ls="none", **{"marker": "o", "ms": 8, **kw})

        handles = [Line2D([], [], color="k", ls="--", lw=0.8)]
        labels = ["Pareto front (bound honoured)"]
        handles += [mark(c) for c in _FAMILY_COLORS.values()]
        labels += list(_FAMILY_COLORS)
        handles += [
            mark("tab:red", marker="*", ms=14),
            mark("tab:red", marker="s", alpha=0.45),
            mark("black", mfc="none"),
        ]
        labels += ["jlc-auto", "its forms (fixed, dedup, entropy)", "hollow: over the bound"]
        list(axes.flat)[n].legend(handles, labels, loc="center", frameon=False)
    fig.suptitle(f"Ratio against compress throughput at REL {eb_rel}, real dumps")
    return save(fig, path, mkdir=True)


def plot_ratio_bars(
    peer_result: dict[str, Any], path: str | Path, eb_rel: float = 0.01, tiled: bool = False
) -> Path:
    """Grouped bars: compression ratio (log) of every codec on every dump (table) at
    ``eb_rel``; hatched bars went over the bound."""
    plt = pyplot()
    rows = [
        r
        for r in ok_rows(peer_result["rows"])
        if bool(r.get("tiled")) == tiled and math.isclose(r["eb_rel"], eb_rel, rel_tol=1e-9)
    ]
    dumps = list(dict.fromkeys(r["dump"] for r in rows))
    codecs = list(dict.fromkeys(r["codec"] for r in rows))
    fig, ax = plt.subplots(figsize=(10, 6.8))
    width = 0.85 / max(1, len(codecs))
    cmap = plt.get_cmap("tab20")
    for k, codec in enumerate(codecs):
        xs, ys, hatch = [], [], []
        for i, d in enumerate(dumps):
            r = next((r for r in rows if r["dump"] == d and r["codec"] == codec), None)
            if r is not None:
                xs.append(i + (k - len(codecs) / 2 + 0.5) * width)
                ys.append(r["ratio"])
                hatch.append(not r["bound_ok"])
        bars = ax.bar(
            xs,
            ys,
            width,
            label=codec,
            color=cmap(k % 20),
            edgecolor="black" if codec == AUTO else None,
            lw=0.8,
        )
        for b, h in zip(bars, hatch):
            if h:
                b.set_hatch("////")
    ax.set_yscale("log")
    ax.set_xticks(range(len(dumps)))
    ax.set_xticklabels(dumps)
    ax.set_ylabel("compression ratio (raw float32 / compressed)")
    ax.set_title(f"Compression ratio per table at REL {eb_rel} (hatched: over the bound)")
    ax.legend(ncol=4, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    ax.grid(True, axis="y", which="both", lw=0.3)
    return save(fig, path)


def plot_accuracy(train_result: dict[str, Any], path: str | Path) -> Path:
    """Eval AUC and training loss vs step of every run of bench.training.train_compare."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(10, 8))
    ax = list(axes.flat)
    for r in train_result.get("runs", []):
        if r.get("status") != "ok":
            continue
        c = r["curves"]
        ax[0].plot(c["eval_step"], c["eval_auc"], "o-", ms=3, label=r["name"])
        ax[1].plot(c["eval_step"], c["eval_logloss"], "o-", ms=3, label=r["name"])
        ax[2].plot(c["step"], c["loss"], label=r["name"])
    for a, t in zip(ax, ("eval AUC", "eval log loss", "training loss (BCE)")):
        a.set_title(t)
        a.set_xlabel("step")
        a.grid(True, lw=0.3)
    ax[3].axis("off")
    ax[3].legend(*ax[0].get_legend_handles_labels(), loc="center", title="exchange")
    fig.suptitle("DLRM with each embedding all-to-all, same seed and data")
    return save(fig, path)


def plot_fidelity(results: list[dict[str, Any]], path: str | Path) -> Path:
    """AUC difference to exact (mean and spread over seeds, paired per seed) against bytes
    moved per step, one panel per ``bench.training.train_compare --seeds`` result."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(9 * len(results), 6), squeeze=False)
    for ax, res in zip(axes[0], results):
        tol = res.get("targets", {}).get("tolerance", 5e-4)
        for name, s in res["summary"].items():
            if s["auc_diff_mean"] is None:
                continue
            lib = name.startswith("jlc")
            ax.errorbar(
                s["moved_bytes_per_step"] / 2**20,
                s["auc_diff_mean"],
                yerr=[
                    [s["auc_diff_mean"] - s["auc_diff_min"]],
                    [s["auc_diff_max"] - s["auc_diff_mean"]],
                ],
                fmt="o" if lib else "s",
                color=_FAMILY_COLORS["jax_lossy_comm" if lib else "quantization"]
                if name != "exact"
                else "black",
                capsize=3,
            )
            ax.annotate(
                name,
                (s["moved_bytes_per_step"] / 2**20, s["auc_diff_mean"]),
                fontsize=9,
                xytext=(4, 3),
                textcoords="offset points",
            )
        ax.axhspan(-tol, tol, color="tab:green", alpha=0.1, lw=0)
        ax.axhline(0.0, color="black", lw=0.5)
        ax.set_xscale("log")
        ax.set_xlabel("bytes moved per step, all devices (MiB, log)")
        ax.set_ylabel("AUC - exact, paired per seed (mean, min..max)")
        p = res["params"]
        ax.set_title(f"{p['preset']}: {p['steps']} steps, {len(p['seeds'])} seeds")
        ax.grid(True, lw=0.3)
    fig.suptitle(f"AUC against bytes moved (shaded: within ±{tol:g} of exact)")
    return save(fig, path)


def plot_all(results_dir: str | Path = RESULTS_DIR) -> list[Path]:
    """Every plot whose input JSON exists in ``results_dir``; returns the PNG paths."""
    d = Path(results_dir)
    out = []
    peers = d / "peers.json"
    if peers.is_file():
        res = json.loads(peers.read_text())
        out.append(plot_pareto(res, d / "pareto_rel0.01.png"))
        out.append(plot_ratio_bars(res, d / "ratio_bars_rel0.01.png"))
    train = d / "train_compare.json"
    if train.is_file():
        out.append(plot_accuracy(json.loads(train.read_text()), d / "accuracy_curves.png"))
    for sweep in sorted(d.glob("fidelity_*.json")):  # bench.training.train_compare --seeds
        out.append(plot_fidelity([json.loads(sweep.read_text())], sweep.with_suffix(".png")))
    return out
