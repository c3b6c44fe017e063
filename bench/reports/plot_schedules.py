"""Plots the iteration-wise error-bound schedules and prints their values as a table.

Writes ``docs/error_bound_schedules.png`` (or ``--out``): left, the multiplier of each
built-in schedule over training; right, the per-tier relative error bound of the paper's
Criteo Kaggle setting (tiers x log schedule). Prints a Markdown table of the multipliers
at landmark steps for ``docs/error_bound.md``.

Usage:
  python bench/reports/plot_schedules.py [--out docs/error_bound_schedules.png]
      [--eb-constant 2] [--early-stage 65536]
"""

import argparse
import os

import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from jax_lossy_comm import error_bound as eb  # noqa: E402


def landmarks(early_stage: int) -> list[tuple[str, int]]:
    T = early_stage
    return [
        ("0", 0),
        ("T/4", T // 4),
        ("T/2", T // 2),
        ("3T/4", 3 * T // 4),
        ("T-1", T - 1),
        ("T", T),
        ("2T", 2 * T),
    ]


def markdown_table(eb_constant: float, early_stage: int) -> str:
    marks = landmarks(early_stage)
    lines = [
        "| schedule | " + " | ".join(f"t = {name}" for name, _ in marks) + " |",
        "| --- |" + " ---: |" * len(marks),
    ]
    for kind in eb.SCHEDULE_KINDS:
        values = eb.schedule_multiplier(
            kind,
            jnp.asarray([t for _, t in marks]),
            eb_constant=eb_constant,
            early_stage=early_stage,
        )
        lines.append(f"| {kind} | " + " | ".join(f"{v:.4f}" for v in np.asarray(values)) + " |")
    return "\n".join(lines)


def plot(out: str, eb_constant: float, early_stage: int) -> None:
    steps = np.arange(0, int(1.5 * early_stage) + 1, max(1, early_stage // 2048))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for kind in eb.SCHEDULE_KINDS:
        values = eb.schedule_multiplier(
            kind, jnp.asarray(steps), eb_constant=eb_constant, early_stage=early_stage
        )
        left.plot(steps, np.asarray(values), label=kind)
    left.axvline(early_stage, color="gray", ls=":", lw=1)
    left.set(
        title=f"iteration-wise multiplier (c = {eb_constant:g}, T = {early_stage})",
        xlabel="training step",
        ylabel="multiplier",
    )
    left.legend()

    config = eb.paper_kaggle_config(eb_constant=eb_constant, early_stage=early_stage)
    multiplier = np.asarray(
        eb.schedule_multiplier(
            config.schedule, jnp.asarray(steps), eb_constant=eb_constant, early_stage=early_stage
        )
    )
    tiers = [
        ("tighten", config.tiers[0].value),
        ("base", config.base),
        ("loosen", config.tiers[1].value),
    ]
    for name, value in tiers:
        right.plot(steps, value * multiplier, label=f"{name} ({value:g})")
    right.axvline(early_stage, color="gray", ls=":", lw=1)
    right.set(
        title="paper Kaggle tiers x log schedule",
        xlabel="training step",
        ylabel="relative error bound (eb_rel)",
    )
    right.legend()
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.reports.plot_schedules", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--out",
        default=os.path.join(
            os.path.dirname(__file__), "..", "..", "docs", "error_bound_schedules.png"
        ),
    )
    parser.add_argument("--eb-constant", type=float, default=2.0)
    parser.add_argument("--early-stage", type=int, default=65536)
    args = parser.parse_args()
    plot(args.out, args.eb_constant, args.early_stage)
    print(markdown_table(args.eb_constant, args.early_stage))
    print(f"wrote {os.path.normpath(args.out)}")


if __name__ == "__main__":
    main()
