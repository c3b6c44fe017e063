"""Memory of the compressed collectives beside the exact ones: XLA's buffers per device.

For each case, one jitted ``shard_map`` program per variant on 8 virtual CPU devices, compiled
from ``jax.ShapeDtypeStruct`` inputs; recorded from ``Compiled.memory_analysis()`` per device:
``temp`` (XLA's scratch for the program) and ``output``; the budget compared is temp + output
(the argument is the same for every variant). Cases:

- ``exchange``: a tiled all-to-all of 16 MiB per device, ``float32[8 * 2048, 4, 64]``
  (8 peers x 4 tables of [2048, 64] chunks, ``table_axis=1``), as the program's argument and
  computed in the program (``tanh(a) * 1.5``, as a model computes its pooled embeddings), and
  the same bytes as one chunk per peer (``float32[8 * 8192, 64]``); variants ``jax.lax.all_to_all`` (exact) and
  :func:`jax_lossy_comm.compressed_all_to_all` on the ``dense`` and ``packed`` paths
  (fixed-rate frames at REL 0.01);
- ``allreduce``: a 4M-float gradient per device; ``jax.lax.psum`` against
  :func:`jax_lossy_comm.compressed_psum` (dense path, fixed-rate frames, REL 0.01), whole and
  in 16 slices (``AllReduceConfig(slices=16)``: 16 all-reduces one after the other).

The process's resident memory is not recorded: on XLA:CPU it moves by hundreds of MiB from one
call of ``jax.lax.psum`` to the next (its allocator's arenas over 8 device threads), more than
any difference between the variants. What the codec holds outside XLA's allocator is the CPU
handler's per-thread scratch (docs/exchange.md, "Memory").

Run from the repository root::

    python -m bench.training.exchange_memory --out bench/results/exchange_memory.json

References: JAX ``jax.stages.Compiled.memory_analysis``; Feng et al., SC24, arXiv 2407.04272.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jax_lossy_comm as jlc  # noqa: E402
from bench import bench_util as bu  # noqa: E402

MIB = 2**20
ERROR_BOUND = 0.01
#: (case, per-device shape, table axis or None)
EXCHANGES = (
    ("exchange, 4 tables", (8 * 2048, 4, 64), 1),
    ("exchange, 4 tables, x computed", (8 * 2048, 4, 64), 1),
    ("exchange, one chunk per peer", (8 * 8192, 64), None),
)
GRADIENT = 4 * MIB  # floats per device
SLICES = 16  # the all-reduce in slices (AllReduceConfig.slices)


def _program(mesh, fn):
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P("i"), out_specs=P("i")))


def _variants():
    """``{(case, variant): (per-device shape, fn)}`` of every program measured."""
    out = {}
    for case, shape, table_axis in EXCHANGES:
        # "x computed": x made in the program (as the pooled embeddings are), not an argument
        pre = (lambda a: jnp.tanh(a) * 1.5) if "computed" in case else (lambda a: a)
        out[case, "exact"] = (
            shape,
            lambda a, pre=pre: jax.lax.all_to_all(pre(a), "i", 0, 0, tiled=True),
        )
        for path in ("dense", "packed"):
            codec = jlc.FrameCodec(codec="fixed", min_error_bound=ERROR_BOUND)
            cfg = jlc.ExchangeConfig(codec, table_axis=table_axis, path=path)
            out[case, path] = (
                shape,
                lambda a, cfg=cfg, pre=pre: jlc.compressed_all_to_all(
                    pre(a), "i", 0, 0, tiled=True, error_bound=ERROR_BOUND, config=cfg
                ),
            )
    out["allreduce", "exact"] = ((GRADIENT,), lambda a: jax.lax.psum(a, "i"))
    out["allreduce", "dense"] = (
        (GRADIENT,),
        lambda a: jlc.compressed_psum(a, "i", error_bound=ERROR_BOUND),
    )
    sliced = jlc.AllReduceConfig(slices=SLICES)
    out["allreduce", f"dense, {SLICES} slices"] = (
        (GRADIENT,),
        lambda a: jlc.compressed_psum(a, "i", error_bound=ERROR_BOUND, config=sliced),
    )
    return out


def measure(case: str, variant: str) -> dict:
    """temp and output (MiB per device) of one program, compiled from abstract inputs."""
    mesh = jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    shape, fn = _variants()[case, variant]
    glob = (mesh.size * shape[0],) + tuple(shape[1:])
    f = _program(mesh, fn)
    m = f.lower(jax.ShapeDtypeStruct(glob, jnp.float32)).compile().memory_analysis()
    return {
        "case": case,
        "variant": variant,
        "shape": list(shape),
        "temp_mib": m.temp_size_in_bytes / MIB,
        "output_mib": m.output_size_in_bytes / MIB,
    }


def run() -> dict:
    """Every variant in a process of its own (XLA's caches of one do not touch another)."""
    import json
    import subprocess
    import sys

    rows, exact = [], {}
    for case, variant in _variants():
        cmd = [sys.executable, "-m", "bench.training.exchange_memory", "--one", case, variant]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
        budget = r["temp_mib"] + r["output_mib"]
        exact.setdefault(case, budget)  # "exact" comes first in each case
        r["budget_vs_exact"] = budget / exact[case]
        rows.append(r)
    return {"rows": rows, "environment": bu.environment_record()}


def table(result: dict) -> str:
    lines = [
        "| case | variant | temp MiB | output MiB | (temp + output) / exact |",
        "|---|---|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['case']} | {r['variant']} | {r['temp_mib']:.1f} | {r['output_mib']:.1f} "
            f"| {r['budget_vs_exact']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write the result as JSON here")
    ap.add_argument("--one", nargs=2, metavar=("CASE", "VARIANT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:  # a worker of run(): one program, one JSON line
        import json

        print(json.dumps(measure(*args.one)))
        return
    result = run()
    print(table(result))
    if args.out:
        bu.write_json(result, args.out)


if __name__ == "__main__":
    main()
