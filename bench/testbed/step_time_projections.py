"""Projections of the step-time model (``models.dlrm.cluster.step_time``) for GPU clusters:
not measurements.

``python -m bench.testbed.step_time_check project`` writes :func:`build_projections` (the
predicted speedup of each mode over exact, 2-128 nodes x 8 GPUs, NICs of 100-400 Gbit/s, two
codec throughput brackets) as ``results/step_time_projections.{json,md,png}``;
``python -m bench.testbed.step_time_check predict`` prints one cluster's predicted step per
mode (:func:`print_predictions`). The GPU and codec assumptions (:data:`GPU`,
:data:`BRACKETS`) are stated in docs/step_time.md; the compression ratios come from the
committed ``codec.json`` and the two-node rates sweep.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.testbed.testbed_inputs import RATES_FILE, RESULTS, codec_speeds, fmt_ms, median_runs
from models.dlrm.cluster import step_time as st

PROJ_OUT = "step_time_projections"

#: GPU cluster assumptions of the projections (stated in docs/step_time.md)
GPU = {
    "flops_per_s": 200e12,  # dense MLP FLOP/s achieved per GPU (about 20% of H100 BF16 peak)
    "memory_bytes_per_s": 2.5e12,  # HBM bytes/s of row gathers / updates (75% of 3.35 TB/s)
    "nvlink_bytes_per_s": 450e9,  # per GPU and direction (900 GB/s both directions)
    "intra_latency_s": 3e-6,
    "inter_latency_s": 10e-6,
    "cast_bytes_per_s": 2e12,  # fixed-precision cast (INT8 row-wise on an H100)
    # the fixed costs the testbed fit measures on CPUs (docs/step_time.md), assumed for a GPU:
    # one process per GPU dispatches ahead of its work (no device overhead); a compressed
    # exchange adds about 10 kernel launches of 5 us each a step that do not overlap
    "device_overhead_s": 0.0,
    "exchange_overhead_s": 50e-6,
}
#: GPU codec throughput brackets, raw bytes/s (compress, decompress)
BRACKETS = {
    "low": (0.33e12, 0.51e12),  # cuSZp2 on an A100 (its paper)
    "high": (2e12, 2e12),  # INT8 row-wise quantization on an H100
}
NODES = (2, 8, 32, 128)
GPUS_PER_NODE = 8
NIC_GBIT = (100, 200, 400)
PROJ_MODES = (
    "hierarchical-exact",
    "flat",
    "hierarchical",
    "hierarchical-ar",
    "bf16",
    "fp8",
    "int8",
    "mx4",
)
HEAT_MODES = ("hierarchical-exact", "flat", "hierarchical", "hierarchical-ar", "int8")
CONFIGS = {
    "terabyte": lambda batch: st.terabyte_spec(batch),
    "mlperf-dcnv2": lambda batch: st.mlperf_dcnv2_spec(batch),
}


def gpu_cluster(nodes: int, nic_gbit: float, gpus: int = GPUS_PER_NODE) -> st.Cluster:
    return st.Cluster(
        nodes=nodes,
        devices_per_node=gpus,
        intra_bandwidth=GPU["nvlink_bytes_per_s"],
        inter_bandwidth=nic_gbit * 1e9 / 8,
        intra_latency=GPU["intra_latency_s"],
        inter_latency=GPU["inter_latency_s"],
        tree_allreduce=True,
    )


def gpu_codecs(bracket: str, forward_ratio: float, gradient_ratio: float) -> st.Codecs:
    c, d = BRACKETS[bracket]
    return st.Codecs(
        forward=st.CodecSpec(c, d, forward_ratio),
        backward=st.CodecSpec(c, d, gradient_ratio),
        gradient=st.CodecSpec(c, d, gradient_ratio),
        cast_bytes_per_s=GPU["cast_bytes_per_s"],
        exchange_overhead_s=GPU["exchange_overhead_s"],
    )


def build_projections(results: Path = RESULTS, global_batch: int = st.MLPERF_GLOBAL_BATCH) -> dict:
    """Projected speedup of each mode over exact on GPU clusters (a model, not a measurement)."""
    codec_json = json.loads((results / "codec.json").read_text())
    fwd_ratio = codec_speeds(codec_json, "jlc-auto", eb_rel=0.01)["ratio"]
    rates = json.loads((results / RATES_FILE).read_text())
    ar = median_runs(rates["runs"])[("1gbit", "compressed-hierarchical-ar")]
    grad_ratio = ar["allreduce_raw_bytes_per_step"] / ar["allreduce_moved_bytes_per_step"]
    compute = st.Compute(GPU["flops_per_s"], GPU["memory_bytes_per_s"], GPU["device_overhead_s"])
    rows = []
    for name, make in CONFIGS.items():
        model = make(global_batch)
        for nodes in NODES:
            for nic in NIC_GBIT:
                cl = gpu_cluster(nodes, nic)
                for bracket in BRACKETS:
                    codecs = gpu_codecs(bracket, fwd_ratio, grad_ratio)
                    ex = st.predict(model, cl, compute, codecs, "exact")
                    row = {
                        "config": name,
                        "nodes": nodes,
                        "gpus": cl.devices,
                        "nic_gbit": nic,
                        "codec_bracket": bracket,
                        "exact_step_s": ex.step_overlap_s,
                        "exact_exchange_share": (ex.exchange_forward_s + ex.exchange_backward_s)
                        / ex.step_s,
                        "exact_allreduce_share": ex.allreduce_s / ex.step_s,
                        "speedup": {},
                        "step_s": {},
                    }
                    for mode in PROJ_MODES:
                        t = st.predict(model, cl, compute, codecs, mode)
                        row["speedup"][mode] = ex.step_overlap_s / t.step_overlap_s
                        row["step_s"][mode] = t.step_overlap_s
                    best = max(row["speedup"], key=row["speedup"].get)
                    row["best_mode"] = best if row["speedup"][best] > 1 else "exact"
                    rows.append(row)
    return {
        "benchmark": "PROJECTIONS of the step-time model (models/dlrm/cluster/step_time.py), not "
        "measurements: predicted speedup of each mode over exact on GPU clusters",
        "assumptions": {
            "gpu": GPU,
            "codec_brackets_bytes_per_s": BRACKETS,
            "forward_ratio": fwd_ratio,
            "forward_ratio_source": "codec.json jlc-auto on the Terabyte dumps at REL 0.01 "
            "(sum raw / sum compressed)",
            "gradient_ratio": grad_ratio,
            "gradient_ratio_source": "netns_two_node_rates.json compressed-hierarchical-ar at "
            "1gbit (head gradients, REL 0.01, synthetic data); also the backward exchange's",
            "global_batch": global_batch,
            "overlap": "exchange overlapped with the bottom MLP",
            "gpus_per_node": GPUS_PER_NODE,
        },
        "rows": rows,
    }


def render_projections(res: dict) -> str:
    a = res["assumptions"]
    lines = [
        "# Step-time projections for GPU clusters (a model, not measurements)",
        "",
        "**Projections of `models.dlrm.cluster.step_time`**, not measured on any GPU: the predicted "
        "speedup of each mode over the exact exchange, exchange overlapped with the bottom MLP. "
        f"{a['gpus_per_node']} GPUs per node, NVLink 900 GB/s per GPU (450 GB/s each direction), "
        f"one NIC per GPU; dense {a['gpu']['flops_per_s'] / 1e12:.0f} TFLOP/s and HBM "
        f"{a['gpu']['memory_bytes_per_s'] / 1e12:.1f} TB/s achieved per GPU (assumed); global "
        f"batch {a['global_batch']}; error-bounded codec at cuSZp2's 0.33 / 0.51 TB/s (low) or "
        "2 TB/s (high), fixed-precision casts at 2 TB/s; forward compression ratio "
        f"{a['forward_ratio']:.1f}x (Terabyte dumps, REL 0.01), gradients and backward "
        f"{a['gradient_ratio']:.1f}x (testbed); the fixed costs the testbed fit found on CPUs "
        f"assumed at {a['gpu']['device_overhead_s'] * 1e6:.0f} us per GPU and step and "
        f"{a['gpu']['exchange_overhead_s'] * 1e6:.0f} us per compressed exchange and GPU (kernel "
        "launches). Cells: low / high codec bracket. "
        "Regenerate: `python -m bench.testbed.step_time_check project`; assumptions: docs/step_time.md.",
        "",
        "| config | nodes x 8 | NIC | exact step | exchange share | "
        + " | ".join(PROJ_MODES)
        + " | best |",
        "|---|---|---|---|---|" + "---|" * len(PROJ_MODES) + "---|",
    ]
    by = {(r["config"], r["nodes"], r["nic_gbit"], r["codec_bracket"]): r for r in res["rows"]}
    for name in CONFIGS:
        for nodes in NODES:
            for nic in NIC_GBIT:
                lo, hi = by[(name, nodes, nic, "low")], by[(name, nodes, nic, "high")]
                cells = [f"{lo['speedup'][m]:.2f} / {hi['speedup'][m]:.2f}" for m in PROJ_MODES]
                lines.append(
                    f"| {name} | {nodes} | {nic} Gbit/s | {fmt_ms(lo['exact_step_s'])} | "
                    f"{lo['exact_exchange_share']:.0%} | "
                    + " | ".join(cells)
                    + f" | {lo['best_mode']} / {hi['best_mode']} |"
                )
    return "\n".join(lines) + "\n"


def plot_projections(res: dict, path: Path) -> None:
    """Heat map: speedup over exact per (nodes, NIC), one panel per config and mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    by = {(r["config"], r["nodes"], r["nic_gbit"], r["codec_bracket"]): r for r in res["rows"]}
    fig, axes = plt.subplots(
        len(CONFIGS), len(HEAT_MODES), figsize=(3.2 * len(HEAT_MODES), 3.0 * len(CONFIGS))
    )
    from matplotlib.colors import TwoSlopeNorm

    speeds = [r["speedup"][m] for r in res["rows"] for m in HEAT_MODES]
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(0.5, min(speeds)), vmax=max(2.0, max(speeds)))
    for i, name in enumerate(CONFIGS):
        for j, mode in enumerate(HEAT_MODES):
            ax = axes[i][j]
            lo = np.array(
                [[by[(name, n, c, "low")]["speedup"][mode] for c in NIC_GBIT] for n in NODES]
            )
            hi = np.array(
                [[by[(name, n, c, "high")]["speedup"][mode] for c in NIC_GBIT] for n in NODES]
            )
            im = ax.imshow(lo, cmap="RdYlGn", norm=norm, aspect="auto")
            for a in range(len(NODES)):
                for b in range(len(NIC_GBIT)):
                    ax.text(
                        b,
                        a,
                        f"{lo[a, b]:.2f}\n({hi[a, b]:.2f})",
                        ha="center",
                        va="center",
                        fontsize=7,
                    )
            ax.set_xticks(range(len(NIC_GBIT)), [f"{c}G" for c in NIC_GBIT])
            ax.set_yticks(range(len(NODES)), [f"{n}x8" for n in NODES])
            ax.set_title(f"{name}: {mode}", fontsize=9)
            if j == 0:
                ax.set_ylabel("nodes x GPUs")
            if i == len(CONFIGS) - 1:
                ax.set_xlabel("NIC per GPU (Gbit/s)")
    fig.colorbar(im, ax=axes, shrink=0.6, label="speedup over exact")
    fig.suptitle(
        "PROJECTION of a step-time model (not measured): speedup over exact, "
        "codec low bracket (high in brackets)",
        fontsize=10,
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_predictions(args) -> dict:
    """Prints (and returns) the predicted step of every mode on the cluster of ``args`` (the
    ``predict`` subcommand's options)."""
    model = CONFIGS[args.preset](args.global_batch)
    cl = gpu_cluster(args.nodes, args.nic_gbit, args.gpus_per_node)
    if args.nvlink_gbyte:
        cl = st.Cluster(**{**cl.__dict__, "intra_bandwidth": args.nvlink_gbyte * 1e9 / 2})
    codecs = gpu_codecs(args.bracket, args.forward_ratio, args.gradient_ratio)
    compute = st.Compute(args.tflops * 1e12, args.hbm_tbyte * 1e12, GPU["device_overhead_s"])
    out = {}
    for mode in st.MODES:
        t = st.predict(model, cl, compute, codecs, mode)
        out[mode] = t.as_dict()
        print(
            f"{mode:<16} step {t.step_overlap_s * 1e3:9.3f} ms (serial {t.step_s * 1e3:9.3f}) "
            f"compute {t.compute_s * 1e3:8.3f}  a2a fwd {t.exchange_forward_s * 1e3:7.3f} "
            f"bwd {t.exchange_backward_s * 1e3:7.3f}  all-reduce {t.allreduce_s * 1e3:7.3f}  "
            f"codec {(t.compress_s + t.decompress_s) * 1e3:7.3f}"
        )
    print("(a projection of the step-time model, not a measurement)")
    return out
