"""Plots and the Pareto analysis of the issue-6 results (PNG into bench/results/).

* :func:`pareto_front` / :func:`pareto_analysis`: per real dump at one REL bound, the codecs
  not dominated in (compression ratio, compress GB/s) -- among the codecs that honoured the
  bound on that dump (``bound_ok``), and among all codecs -- and the verdict for
  ``jlc-auto`` against the peers.
* :func:`plot_pareto`: ratio vs compress throughput scatter per dump with the front.
* :func:`plot_ratio_bars`: compression ratio of every codec per dump (table).
* :func:`plot_accuracy`: eval AUC and training loss curves of bench/train_compare.py runs.

Only the standard library is imported at module import; matplotlib (Agg) is imported by the
plotting functions. Usage: ``python bench/plots.py`` re-plots from bench/results/*.json.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
LIBRARY_PREFIX = "jlc-"
AUTO = "jlc-auto"

#: Why a peer can be faster than the library's auto codec (shown in the verdict notes).
FASTER_BECAUSE = {
    "fbgemm-qcomm": "fixed-rate cast/quantization, no range scan, no bound check, no lossless "
    "stage (ratio fixed at 2-7.5x)",
    "cast": "a plain dtype cast (ratio 2-4x, no bound)",
    "lossless": "zstd level 1 on raw float32 bytes finds the repeated rows with one hash pass; "
    "auto also quantizes, verifies every value and builds a dictionary + Huffman",
    "quantization": "fixed-rate codes with no verification pass and no lossless stage",
    "zfp": "ZFP's fixed-accuracy transform codec",
    "sz3": "SZ3's pipeline",
}


# ----------------------------------------------------------------------------------- Pareto
def _is_library_form(codec: str) -> bool:
    """The library's non-auto forms (jlc-fixed, jlc-dedup, ...): shown, but the library enters
    the front as jlc-auto (auto writes the smallest of these forms per chunk)."""
    return codec.startswith(LIBRARY_PREFIX) and codec != AUTO


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which points are Pareto-optimal when both coordinates are maximised.

    Point i is on the front iff no other point j has ``x_j >= x_i`` and ``y_j >= y_i`` with
    at least one strict. Equal points are all on the front. NaN coordinates are never on it.

    Args:
      points: sequence of ``(x, y)`` floats, e.g. ``(compress GB/s, compression ratio)``.

    Returns:
      list of bool, one per point.
    """
    out = []
    for i, (xi, yi) in enumerate(points):
        if math.isnan(xi) or math.isnan(yi):
            out.append(False)
            continue
        dominated = any(
            j != i and xj >= xi and yj >= yi and (xj > xi or yj > yi)
            for j, (xj, yj) in enumerate(points)
            if not (math.isnan(xj) or math.isnan(yj))
        )
        out.append(not dominated)
    return out


def _ok(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok"]


def real_dumps(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Names of the untiled dumps, in first-seen order."""
    return list(dict.fromkeys(r["dump"] for r in rows if not r.get("tiled")))


def pareto_analysis(
    rows: Sequence[dict[str, Any]], eb_rel: float = 0.01, tiled: bool = False
) -> list[dict[str, Any]]:
    """Per dump at ``eb_rel``: Pareto fronts over (compress GB/s, ratio) and the auto verdict.

    Args:
      rows: ``rows`` of bench/peer_bench.py's result.
      eb_rel: the REL bound to analyse.
      tiled: analyse the tilings instead of the real dumps.

    Returns:
      list, one dict per dump: ``dump``, ``front_bounded`` (codecs on the front among the
      peers and jlc-auto that honoured the bound), ``front_bounded_with_forms`` (the same with
      the library's other forms), ``front_all`` (among all that ran, bound or not), ``violations`` (codecs
      over the bound, with max_err/eb and whether they promise a bound), ``auto`` (None if
      jlc-auto did not run, else: ``on_front`` -- not dominated by any bound-honouring peer
      (the library's other forms excluded: auto picks among them), ``bound_ok``, ``ratio``,
      ``compress_gbps``, ``best_ratio`` (highest ratio of all bound-honouring codecs),
      ``dominated_by``, ``faster_peers`` (bound-honouring peers with higher compress GB/s,
      with why), ``higher_ratio_peers``, ``dominated_by_library_forms``).
    """
    out = []
    sel = [
        r
        for r in _ok(rows)
        if bool(r.get("tiled")) == tiled and math.isclose(r["eb_rel"], eb_rel, rel_tol=1e-9)
    ]
    for dump in dict.fromkeys(r["dump"] for r in sel):
        rs = [r for r in sel if r["dump"] == dump]
        bounded = [r for r in rs if r["bound_ok"]]
        entrants = [r for r in bounded if not _is_library_form(r["codec"])]
        fe = pareto_front([(r["compress_gbps"], r["ratio"]) for r in entrants])
        fb = pareto_front([(r["compress_gbps"], r["ratio"]) for r in bounded])
        fa = pareto_front([(r["compress_gbps"], r["ratio"]) for r in rs])
        entry: dict[str, Any] = {
            "dump": dump,
            "eb_rel": eb_rel,
            "shape": rs[0].get("shape"),
            "front_bounded": [r["codec"] for r, f in zip(entrants, fe) if f],
            "front_bounded_with_forms": [r["codec"] for r, f in zip(bounded, fb) if f],
            "front_all": [r["codec"] for r, f in zip(rs, fa) if f],
            "violations": [
                {
                    "codec": r["codec"],
                    "max_err_over_eb": r["max_err_over_eb"],
                    "error_bounded": r["error_bounded"],
                }
                for r in rs
                if not r["bound_ok"]
            ],
            "auto": None,
        }
        auto = next((r for r in rs if r["codec"] == AUTO), None)
        if auto is not None:
            peers = [r for r in bounded if not r["codec"].startswith(LIBRARY_PREFIX)]
            lib = [
                r for r in bounded if r["codec"].startswith(LIBRARY_PREFIX) and r["codec"] != AUTO
            ]

            def dominates(r):
                return (
                    r["compress_gbps"] >= auto["compress_gbps"]
                    and r["ratio"] >= auto["ratio"]
                    and (r["compress_gbps"] > auto["compress_gbps"] or r["ratio"] > auto["ratio"])
                )

            dom = [r["codec"] for r in peers if dominates(r)]
            entry["auto"] = {
                "on_front": auto["bound_ok"] and not dom,
                "bound_ok": auto["bound_ok"],
                "max_err_over_eb": auto["max_err_over_eb"],
                "ratio": auto["ratio"],
                "compress_gbps": auto["compress_gbps"],
                "decompress_gbps": auto["decompress_gbps"],
                "best_ratio": max(r["ratio"] for r in bounded) if bounded else None,
                "dominated_by": dom,
                "faster_peers": [
                    {
                        "codec": r["codec"],
                        "compress_gbps": r["compress_gbps"],
                        "ratio": r["ratio"],
                        "why": FASTER_BECAUSE.get(r["family"], r["family"]),
                    }
                    for r in sorted(peers, key=lambda r: -r["compress_gbps"])
                    if r["compress_gbps"] > auto["compress_gbps"]
                ],
                "higher_ratio_peers": [r["codec"] for r in peers if r["ratio"] > auto["ratio"]],
                "dominated_by_library_forms": [r["codec"] for r in lib if dominates(r)],
            }
        out.append(entry)
    return out


# ------------------------------------------------------------------------------------ plots
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    plt = _plt()
    rows = [
        r
        for r in _ok(peer_result["rows"])
        if bool(r.get("tiled")) == tiled and math.isclose(r["eb_rel"], eb_rel, rel_tol=1e-9)
    ]
    dumps = list(dict.fromkeys(r["dump"] for r in rows))
    analysis = {a["dump"]: a for a in pareto_analysis(peer_result["rows"], eb_rel, tiled)}
    n = len(dumps)
    cols = min(3, max(1, n))
    nrows = max(1, math.ceil(n / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 4.2 * nrows), squeeze=False)
    for ax, dump in zip(axes.flat, dumps):
        rs = [r for r in rows if r["dump"] == dump]
        front = set(analysis[dump]["front_bounded"])
        for r in rs:
            c = _FAMILY_COLORS.get(r["family"], "black")
            form = _is_library_form(r["codec"])
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
            if _is_library_form(r["codec"]):
                continue  # unlabelled: they sit on top of jlc-auto (see RESULTS.md tables)
            ax.annotate(
                r["codec"],
                (r["compress_gbps"], r["ratio"]),
                fontsize=6,
                xytext=(3, 2),
                textcoords="offset points",
                weight="bold" if r["codec"] in front else "normal",
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
        ax.set_title(f"{dump} {rs[0].get('shape')} REL {eb_rel}", fontsize=9)
        ax.set_xlabel("compress GB/s (single thread)")
        ax.set_ylabel("compression ratio")
        ax.grid(True, which="both", lw=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if n:
        axes.flat[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(
        "Codecs on the real DLRM dumps: ratio vs compress throughput "
        "(filled: within the bound; hollow: over it; star: jlc-auto; squares: its forms)",
        fontsize=10,
    )
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ratio_bars(
    peer_result: dict[str, Any], path: str | Path, eb_rel: float = 0.01, tiled: bool = False
) -> Path:
    """Grouped bars: compression ratio (log) of every codec on every dump (table) at
    ``eb_rel``; hatched bars went over the bound."""
    plt = _plt()
    rows = [
        r
        for r in _ok(peer_result["rows"])
        if bool(r.get("tiled")) == tiled and math.isclose(r["eb_rel"], eb_rel, rel_tol=1e-9)
    ]
    dumps = list(dict.fromkeys(r["dump"] for r in rows))
    codecs = list(dict.fromkeys(r["codec"] for r in rows))
    fig, ax = plt.subplots(figsize=(max(8, 1.9 * len(dumps) + 3), 4.8))
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
    ax.set_xticklabels(dumps, fontsize=8)
    ax.set_ylabel("compression ratio (raw float32 / compressed)")
    ax.set_title(
        f"Compression ratio per table at REL {eb_rel} (hatched: over the bound)", fontsize=10
    )
    ax.legend(fontsize=6, ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.grid(True, axis="y", which="both", lw=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_accuracy(train_result: dict[str, Any], path: str | Path) -> Path:
    """Eval AUC and training loss vs step of every run of bench/train_compare.py."""
    plt = _plt()
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
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
        a.legend(fontsize=8)
    fig.suptitle(
        "DLRM with the exact, compressed (jax_lossy_comm) and quantized-comm "
        "(INT8 row-wise, BF16) embedding all-to-all, same seed and data",
        fontsize=10,
    )
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="re-plot from bench/results/*.json")
    ap.add_argument("--results", default=str(RESULTS_DIR))
    for p in plot_all(ap.parse_args().results):
        print(f"wrote {p}")
