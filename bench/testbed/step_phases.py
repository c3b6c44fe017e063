"""Where a train step's time goes: a trainer trace (``--profile-steps``) summed per phase.

``python -m bench.testbed.step_phases --runs exact=DIR compressed=DIR ... --out FILE.json``
reads each run's ``profile/process_I`` folders (``models.dlrm.profiling``: jax.profiler's
Perfetto trace and the compiled train step's HLO text) and writes the breakdown as JSON and a
Markdown page beside it.

Each XLA op the trace shows (XLA:CPU's thunk events, one per op run) is classified by its HLO
instruction: the phase from the ``jax.named_scope`` in its ``op_name`` metadata (the ids'
all-to-all; the embedding exchange, forward or backward: under ``transpose(...)``; the gradient
all-reduce; everything else is the model's compute and optimizer), the kind from its opcode
(a codec custom call; a collective, whose time includes waiting for its peers; anything
else: packing, masks, sums). Ops of one step may run at once on the thunk executor's threads:
each instant of a step is split evenly among the ops running then, and the instants with none
running are ``idle``, so the phases of a step add up to its wall time (first op start to last
op end). ``between steps`` is the time from one step's last op to the next one's first: the
host's dispatch, the input batch, the Python loop (the median: a logging or evaluation step
makes one gap long). Mean over the traced steps, the devices and the processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import gzip
import json
import os
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from bench import bench_util as bu
from models.dlrm import profiling

#: the train step's HLO module name in the trace (XLA names it after the jitted function)
MODULE = "jit_train_step"
#: phases in the order of the page (a step runs them in about this order)
PHASES = (
    profiling.IDS_SCOPE,
    "exchange forward",
    "exchange backward",
    profiling.ALLREDUCE_SCOPE,
    "compute",
)
KINDS = ("codec", "collective", "other")
COLLECTIVES = frozenset(
    ("all-to-all", "ragged-all-to-all", "all-reduce", "all-gather", "reduce-scatter",
     "collective-permute", "all-reduce-start", "all-reduce-done", "all-gather-start",
     "all-gather-done", "collective-permute-start", "collective-permute-done")
)  # fmt: skip
#: ops whose thunk holds other ops' thunks (their own events would count the time twice)
CONTAINERS = frozenset(("while", "conditional", "call"))
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%?(\S+) = .+? ([a-z][a-z0-9\-]*)\(")


@dataclasses.dataclass(frozen=True)
class Op:
    """One HLO instruction: its opcode, ``op_name`` metadata and custom-call target."""

    opcode: str
    op_name: str = ""
    target: str = ""


def hlo_ops(text: str) -> dict[str, Op]:
    """Instruction name -> :class:`Op` of every computation in an HLO module's text."""
    ops = {}
    for line in text.splitlines():
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        name = re.search(r'op_name="([^"]*)"', line)
        target = re.search(r'custom_call_target="([^"]*)"', line)
        ops[m.group(1)] = Op(m.group(2), name.group(1) if name else "",
                             target.group(1) if target else "")  # fmt: skip
    return ops


def classify(op: Op) -> tuple[str, str]:
    """``(phase, kind)`` of an op (module docstring). A fused op whose ``op_name`` holds
    several scopes goes to the first one named."""
    scopes = (profiling.IDS_SCOPE, profiling.EXCHANGE_SCOPE, profiling.ALLREDUCE_SCOPE)
    found = [(op.op_name.find(s), s) for s in scopes if s in op.op_name]
    phase = min(found)[1] if found else "compute"
    if phase == profiling.EXCHANGE_SCOPE:
        phase = "exchange backward" if "transpose(" in op.op_name else "exchange forward"
    if op.opcode == "custom-call" and op.target.startswith("jax_lossy_comm_"):
        kind = "codec"
    elif op.opcode in COLLECTIVES:
        kind = "collective"
    else:
        kind = "other"
    return phase, kind


@dataclasses.dataclass(frozen=True)
class Event:
    """One op run of the trace: name, start and duration (microseconds), which execution."""

    name: str
    ts: float
    dur: float
    run: tuple[str, str]  # (device ordinal, run id)


def read_trace(path: str | os.PathLike[str], module: str = MODULE) -> list[Event]:
    """The op events of ``module`` in one Perfetto trace (``perfetto_trace.json.gz``)."""
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    out = []
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") == "X" and args.get("hlo_module") == module and "hlo_op" in args:
            run = (str(args.get("device_ordinal", "")), str(args.get("run_id", "")))
            out.append(Event(args["hlo_op"], float(e["ts"]), float(e.get("dur", 0.0)), run))
    return out


def attribute(events: Sequence[Event]) -> tuple[dict[str, float], float, float]:
    """Splits one execution's wall time among its ops: ``(op name -> microseconds, idle,
    wall)``; each instant is shared evenly by the ops running then (module docstring)."""
    if not events:
        return {}, 0.0, 0.0
    edges = sorted({e.ts for e in events} | {e.ts + e.dur for e in events})
    starts = sorted(range(len(events)), key=lambda i: events[i].ts)
    share: dict[str, float] = defaultdict(float)
    active: set[int] = set()
    idle, k = 0.0, 0
    for a, b in zip(edges, edges[1:]):
        while k < len(starts) and events[starts[k]].ts <= a:
            active.add(starts[k])
            k += 1
        active = {i for i in active if events[i].ts + events[i].dur > a}
        if not active:
            idle += b - a
            continue
        for i in active:
            share[events[i].name] += (b - a) / len(active)
    return dict(share), idle, edges[-1] - edges[0]


def process_breakdown(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """One process's traced steps (``profiling.trace_dir``): mean microseconds per step of
    each ``"phase/kind"``, ``idle``, ``wall`` and ``between steps``, over its ``executions``
    (traced steps x local devices); ``unmapped`` ops the HLO text did not name.

    Raises:
      FileNotFoundError: no finished trace (``steps.json``, the Perfetto file) in ``folder``.
    """
    folder = Path(folder)
    if not (folder / profiling.STEPS_FILE).exists():
        raise FileNotFoundError(
            f"no {profiling.STEPS_FILE} in {folder}: its trace did not finish (the run ended "
            "inside the traced steps)"
        )
    ops = hlo_ops((folder / profiling.HLO_FILE).read_text())
    traces = sorted(
        glob.glob(str(folder / "plugins" / "profile" / "*" / "*perfetto_trace.json.gz"))
    )
    if not traces:
        raise FileNotFoundError(f"no perfetto_trace.json.gz under {folder}/plugins/profile")
    by_run: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for e in read_trace(traces[-1]):
        op = ops.get(e.name)
        if op is None or op.opcode not in CONTAINERS:
            by_run[e.run].append(e)
    rows: list[dict[str, float]] = []
    unmapped: set[str] = set()
    spans = defaultdict(list)  # device -> (start, end) of each execution
    for run, events in by_run.items():
        share, idle, wall = attribute(events)
        row: dict[str, float] = defaultdict(float)
        for name, us in share.items():
            if name not in ops:
                unmapped.add(name)
                row["compute/other"] += us
            else:
                phase, kind = classify(ops[name])
                row[f"{phase}/{kind}"] += us
        row["idle"], row["wall"] = idle, wall
        rows.append(row)
        spans[run[0]].append((min(e.ts for e in events), max(e.ts + e.dur for e in events)))
    gaps = [
        max(0.0, b[0] - a[1])
        for s in spans.values()
        for a, b in zip(sorted(s), sorted(s)[1:])
    ]  # fmt: skip
    # a key missing from an execution (an op of a branch it did not take) counts 0 there
    out = {k: sum(r.get(k, 0.0) for r in rows) / len(rows) for k in {k for r in rows for k in r}}
    out["between steps"] = statistics.median(gaps) if gaps else 0.0
    return {"us_per_step": out, "executions": len(rows), "unmapped": sorted(unmapped)}


def run_breakdown(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """A run's breakdown (``--out`` of a trainer run with ``--profile-steps``): the mean of
    its processes' :func:`process_breakdown`, in milliseconds per step."""
    folders = sorted(glob.glob(os.path.join(run_dir, "profile", "process_*")))
    if not folders:
        raise FileNotFoundError(f"no profile/process_* in {run_dir} (run with --profile-steps)")
    parts = [process_breakdown(f) for f in folders]
    keys = sorted({k for p in parts for k in p["us_per_step"]})
    ms = {k: statistics.fmean(p["us_per_step"].get(k, 0.0) for p in parts) / 1e3 for k in keys}
    return {
        "ms_per_step": ms,
        "processes": len(parts),
        "executions": sum(p["executions"] for p in parts),
        "unmapped_ops": sorted({n for p in parts for n in p["unmapped"]}),
    }


def rows(ms: dict[str, float]) -> Iterable[tuple[str, float]]:
    """The page's rows of one run's ``ms_per_step``, in PHASES x KINDS order (zeros kept)."""
    for phase in PHASES:
        for kind in KINDS:
            yield f"{phase}/{kind}", ms.get(f"{phase}/{kind}", 0.0)
    for key in ("idle", "wall", "between steps"):
        yield key, ms.get(key, 0.0)


def render(result: dict[str, Any]) -> str:
    """The Markdown page of a breakdown (``main``'s JSON)."""
    runs = result["runs"]
    labels = list(runs)
    head = "| phase / kind | " + " | ".join(labels) + " |"
    lines = [
        "# Where the train step's time goes",
        "",
        result.get("title", ""),
        "",
        "Milliseconds per step (mean over the traced steps, devices and processes) of XLA's "
        "op events in a `--profile-steps` trace, by phase (the step's named scopes) and kind "
        "(the library's codec custom calls; collectives, waiting for peers included; other "
        "ops, a cast or row-wise codec's included). `compute` is everything outside the "
        "three named scopes: MLPs, interaction, lookup, optimizer. Ops running "
        "at once share each instant; `idle` is the part of a step with no op running, so each "
        "column's phases and `idle` add up to `wall`. `between steps`: from one step's last op "
        "to the next one's first (host dispatch, input batch, the Python loop; median). "
        "(`python -m bench.testbed.step_phases`; method in its docstring.)",
        "",
        head,
        "|---|" + "---:|" * len(labels),
    ]
    table = {label: dict(rows(runs[label]["ms_per_step"])) for label in labels}
    for key, _ in rows({}):
        values = [table[label][key] for label in labels]
        if key not in ("wall", "between steps") and not any(v >= 0.05 for v in values):
            continue  # a row every run spends no time in
        name = f"**{key}**" if key in ("wall", "between steps") else key
        lines.append(f"| {name} | " + " | ".join(f"{v:.1f}" for v in values) + " |")
    notes = result.get("notes", [])
    if notes:
        lines += ["", *notes]
    lines += ["", bu.env_line(result), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="+", required=True, metavar="LABEL=DIR",
                    help="trainer workdirs traced with --profile-steps")  # fmt: skip
    ap.add_argument("--title", default="", help="one line on what was run")
    ap.add_argument("--out", required=True, help="JSON path (the .md is written beside it)")
    args = ap.parse_args(argv)
    runs = {}
    for spec in args.runs:
        label, _, path = spec.partition("=")
        if not path:
            raise SystemExit(f"--runs takes LABEL=DIR, got {spec!r}")
        runs[label] = run_breakdown(path)
    result = {
        "benchmark": "step_phases",
        "title": args.title,
        "environment": bu.environment_record(),
        "runs": runs,
        "argv": list(argv) if argv is not None else sys.argv[1:],
    }
    out = bu.write_json(result, args.out)
    out.with_suffix(".md").write_text(render(result))
    print(out.with_suffix(".md").read_text())
    return result


if __name__ == "__main__":
    main()
