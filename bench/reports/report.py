"""The one report generator: runs the benchmarks, then renders every table and figure.

Runs, each in its own subprocess (so each gets its own JAX/XLA settings):

1. ``python -m bench.codecs.codec_bench --suite peers`` -> bench/results/peers.json (the library's
   codec forms and the peers, on every real dump and its tiling; needs the peers' packages
   in ``--peers-python``; peers that are missing are reported as skipped).
2. ``python -m bench.codecs.codec_bench --suite targets`` -> bench/results/codec.json (the codec's
   targets, side by side).
3. ``python -m bench.training.train_compare`` -> bench/results/train_compare.json.
4. ``python -m bench.testbed.netns_bench`` -> bench/results/netns.json (root only; skipped otherwise).
5. ``python -m bench.testbed.netns_bench --testbed two-node ...`` -> bench/results/netns_two_node.json
   (the library's exact, flat and hierarchical compressed exchanges and TorchRec with
   ``--torchrec-python``; root only).

then renders from the JSON results (`render`) into bench/results/: the figures
(`bench.reports.figures`), one page per benchmark family (`bench.reports.pages`: codecs.md,
training.md, link.md, and RESULTS.md listing every page with its headline figure), codec.md
(`bench.reports.codec_tables`), two_node.md and two_node_rates.md (`bench.reports.link_tables`);
docs/benchmarks.md and docs/benchmarks/*.md include these pages, the README links them. It prints the summary: the Pareto verdict per real dump at REL 0.01, bound violations, the
training table and the netns speedups. A part that is skipped keeps its previous JSON (if
any) in the report.

Usage (from the repo root)::

    python -m bench.reports.report --peers-python /path/to/venv-with-peers/bin/python
    python -m bench.reports.report --skip-peers --skip-codec --skip-netns    # training only
    python -m bench.reports.report --report-only                             # re-render from JSON
    python -m bench.reports.report --quick                                   # minutes: no tilings,
                                                                     # short training and netns
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import bench_util as bu
from bench.reports import figures
from bench.reports.codec_tables import (
    codec_markdown,
    gbps_text,
    verdict_note,
    verdict_rows,
    violations,
)
from bench.reports.link_tables import rate_sweep_markdown, two_node_markdown
from bench.reports.pages import family_pages
from bench.testbed import netns_results
from bench.training import convergence, fidelity, train_compare

REPO = bu.REPO_ROOT
RESULTS = bu.RESULTS_DIR


def summary(peers, train, netns) -> str:
    """The printed summary: Pareto verdicts, violations, training table, netns speedups."""
    lines = []
    if peers:
        lines.append(
            "== Pareto verdict per real dump at REL 0.01 (ratio vs compress GB/s, bound honoured)"
        )
        for a in verdict_rows(peers):
            au = a["auto"] or {}
            lines.append(
                f"  {a['dump']:<18} jlc-auto {bu.fmt(au.get('ratio'), '.1f')}x "
                f"{gbps_text(au.get('compress_gbps', float('nan')))} GB/s  "
                f"{'ON the front' if au.get('on_front') else 'NOT on the front'}; "
                f"front: {', '.join(a['front_bounded'])}; {verdict_note(a)}"
            )
        vb = [r for r in violations(peers) if r["error_bounded"]]
        lines.append(
            "== Bound violations by error-bounded codecs: "
            + (
                ", ".join(f"{r['codec']}@{r['dump']}/REL{r['eb_rel']}" for r in vb)
                if vb
                else "none"
            )
        )
        ex = sorted({r["codec"] for r in violations(peers) if not r["error_bounded"]})
        lines.append(
            "   (codecs without a bound that exceeded eb_abs somewhere: "
            + (", ".join(ex) or "none")
            + ")"
        )
    if train:
        lines.append("== Training comparison")
        lines.append(train_compare.markdown_table(train.get("runs", [])))
    if netns:
        lines.append("== Rate-limited link (netns)")
        lines.append(netns_results.format_summary(netns))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- run
def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


#: the testbed pages: result JSON, page, renderer
TESTBED_PAGES = (
    ("netns_two_node.json", "two_node.md", two_node_markdown),
    ("netns_two_node_rates.json", "two_node_rates.md", rate_sweep_markdown),
    ("netns_two_node_dcnv2.json", "two_node_dcnv2.md", two_node_markdown),
)


def render(results: Path = RESULTS) -> int:
    """Renders everything from the JSON results in ``results`` into it: the figures, the
    family pages (``bench.reports.pages``: RESULTS.md, codecs.md, training.md, link.md), codec.md, the testbed pages (``TESTBED_PAGES``) and the fidelity pages
    (``fidelity_*.md`` of ``bench.training.train_compare --seeds``) and the long-run pages
    with their learning curves (``convergence_*.md``, ``bench.training.convergence``); prints
    the summary.

    Returns:
      0, or 1 if the figures failed (the tables are written all the same).
    """
    rc = 0
    peers = _load(results / "peers.json")
    train = _load(results / "train_compare.json")
    netns = _load(results / "netns.json")
    codec = _load(results / "codec.json")
    two_node = _load(results / "netns_two_node.json")
    try:
        for p in figures.plot_all(results):
            print(f"wrote {p}")
    except Exception as e:  # noqa: BLE001 - a figure must not lose the tables
        print(f"figures failed: {type(e).__name__}: {e}")
        rc = 1
    # the fidelity sweeps, the classic Kaggle preset first
    sweeps = sorted(results.glob("fidelity_*.json"), key=lambda j: (j.stem != "fidelity_kaggle", j))
    fid = {j.stem: json.loads(j.read_text()) for j in sweeps}
    for name, text in family_pages(peers, train, netns, fid).items():
        (results / name).write_text(text)
        print(f"wrote {results / name}")
    if codec:
        (results / "codec.md").write_text(codec_markdown(codec))
        print(f"wrote {results / 'codec.md'}")
    pages = [(results / j, results / md, f) for j, md, f in TESTBED_PAGES]
    pages += [
        (j, j.with_suffix(".md"), fidelity.fidelity_markdown)
        for j in sorted(results.glob("fidelity_*.json"))
    ]
    long_runs = sorted(results.glob("convergence_*.json"))
    pages += [(j, j.with_suffix(".md"), convergence.markdown) for j in long_runs]
    for j in long_runs:  # their learning curves
        try:
            print(f"wrote {convergence.plot_curves(_load(j), j.with_suffix('.png'))}")
        except Exception as e:  # noqa: BLE001 - a figure must not lose the tables
            print(f"figures failed: {type(e).__name__}: {e}")
            rc = 1
    for src, page, render_page in pages:
        if src.is_file():
            page.write_text(render_page(json.loads(src.read_text())))
            print(f"wrote {page}")
    print()
    print(summary(peers, train, netns))
    if two_node:
        print("== Two-node testbed (netns_two_node.json)")
        print(netns_results.format_summary(two_node))
    return rc


def _step(name: str, python: str, module: str, out: str, extra: Sequence[str]) -> int:
    cmd = [python, "-m", module, "--out", str(RESULTS / out), *extra]
    print(f"\n### {name}: {shlex.join(cmd)}", flush=True)
    t0 = _dt.datetime.now()
    rc = subprocess.call(cmd, cwd=REPO)
    print(
        f"### {name}: exit {rc} after {(_dt.datetime.now() - t0).total_seconds():.0f} s", flush=True
    )
    return rc


def two_node_args(torchrec_python: str, quick: bool = False) -> list[str]:
    """The two-node step's flags (the acceptance run of the two-node target): 2 processes x 2 devices at
    1 Gbit/s and unlimited, 2 interleaved rounds, the library's exact / flat / hierarchical
    exchanges and, given ``torchrec_python``, TorchRec fp32 and each quantized comm."""
    modes = ["exact", "compressed-flat", "compressed-hierarchical"]
    if torchrec_python:
        modes += ["torchrec-fp32", "torchrec-fp16", "torchrec-bf16", "torchrec-int8"]
    out = ["--testbed", "two-node", "--devices-per-process", "2", "--modes", *modes]
    out += ["--rates", "1gbit"] if quick else ["--rates", "1gbit", "unlimited", "--rounds", "2"]
    out += ["--steps", "9"] if quick else []
    return out + (["--torchrec-python", torchrec_python] if torchrec_python else [])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.reports.report", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--peers-python",
        default=os.environ.get("JLC_PEERS_PYTHON", sys.executable),
        help="interpreter with the peers (pysz, zfpy, torch, fbgemm-gpu-cpu) and "
        "jax_lossy_comm installed",
    )
    ap.add_argument(
        "--train-python", default=sys.executable, help="interpreter with jax_lossy_comm[train]"
    )
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--skip-codec", action="store_true", help="skip the codec targets suite")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-netns", action="store_true")
    ap.add_argument(
        "--skip-two-node",
        action="store_true",
        help="skip the two-node testbed with TorchRec",
    )
    ap.add_argument(
        "--torchrec-python",
        default=os.environ.get("JLC_TORCHREC_PYTHON", ""),
        help="interpreter of the TorchRec venv (see bench/training/torchrec_peer.py); without it the "
        "two-node step runs the library's modes only",
    )
    ap.add_argument("--two-node-args", default="", help="extra flags for the two-node step")
    ap.add_argument("--report-only", action="store_true", help="only re-render from the JSON")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="no tilings, 3 repeats, 60 training steps, netns at 1gbit only with 9 steps",
    )
    ap.add_argument("--peer-args", default="", help="extra flags for the peers suite")
    ap.add_argument("--codec-args", default="", help="extra flags for the targets suite")
    ap.add_argument("--train-args", default="", help="extra flags for bench.training.train_compare")
    ap.add_argument("--netns-args", default="", help="extra flags for bench.testbed.netns_bench")
    args = ap.parse_args(argv)
    rc = 0
    quick = ["--quick"] if args.quick else []
    steps = [
        ("codec comparison", args.skip_peers, args.peers_python, "bench.codecs.codec_bench",
         "peers.json", ["--suite", "peers", "--no-report", *quick], args.peer_args),
        ("codec targets", args.skip_codec, args.peers_python, "bench.codecs.codec_bench",
         "codec.json", ["--suite", "targets", "--no-report", *quick], args.codec_args),
        ("training comparison", args.skip_train, args.train_python, "bench.training.train_compare",
         "train_compare.json",
         ["--steps", "60", "--eval-every", "20", "--log-every", "10"] if args.quick else [],
         args.train_args),
        ("rate-limited link", args.skip_netns, args.train_python, "bench.testbed.netns_bench",
         "netns.json", ["--rates", "1gbit", "--steps", "9"] if args.quick else [],
         args.netns_args),
        ("two-node testbed", args.skip_two_node, args.train_python, "bench.testbed.netns_bench",
         "netns_two_node.json", two_node_args(args.torchrec_python, args.quick),
         args.two_node_args),
    ]  # fmt: skip
    for name, skip, python, module, out, extra, more in steps:
        if not (skip or args.report_only):
            rc |= _step(name, python, module, out, [*extra, *shlex.split(more)])
    return rc | render(RESULTS)


if __name__ == "__main__":
    sys.exit(main())
