"""Compile time and program size of the compressed all-to-all against ``jax.lax.all_to_all``.

For each virtual CPU device count (default 8, 64, 256, 1024) one subprocess starts JAX with
``--xla_force_host_platform_device_count=N`` (the device count is fixed when JAX starts) and
builds the gradient step of a tiled exchange inside ``shard_map``: pooled embeddings
``float32[P * 16, 2, 32]`` per device (2 tables, 16 rows x 32 dims per (peer, table) chunk,
``split_axis=0``, ``concat_axis=1``, ``tiled=True``), the forward exchange and the vjp of a
cotangent through the compressed backward exchange (``ExchangeConfig(forward=FrameCodec(...),
backward=FrameCodec(...), table_axis=1)``, REL 0.01). Variants, one after the other in the same
subprocess: ``lax`` (``jax.lax.all_to_all`` and its transpose), ``dense``, ``packed`` and
``ragged`` (``ExchangeConfig.path``). Each is traced and lowered from ``jax.ShapeDtypeStruct``
inputs (nothing is allocated, so 1,024 devices fit), then compiled, except ``ragged``:
XLA:CPU has no ``ragged_all_to_all``, so it is lowered only.

Recorded per (device count, variant): trace + lower seconds, compile seconds, the characters
of the lowered StableHLO text and of the compiled (optimized) HLO text. ``--baseline REV`` runs
the same workers on the library as of git revision ``REV`` (its ``jax_lossy_comm/`` exported
to a temporary folder beside the built extension of this checkout), each device count's
baseline subprocess right after the candidate's, so that before and after share the machine's
load; the ratios are then candidate / baseline.

Run from the repository root::

    python -m bench.training.exchange_compile --baseline HEAD~3 --out bench/results/exchange_compile.json

References:
  Feng et al., SC24, arXiv 2407.04272, sec. 3 (the exchange); JAX ``jax.stages.Lowered`` and
  ``Compiled`` (``as_text``, ``compile``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import bench_util as bu

VARIANTS = ("lax", "dense", "packed", "ragged")
ROWS, TABLES, DIM = 16, 2, 32  # per (peer, table) chunk: 16 rows x 32 dims
ERROR_BOUND = 0.01
_SRC_ENV = "JLC_COMPILE_BENCH_SRC"  # folder holding the jax_lossy_comm to import (baseline)


# ------------------------------------------------------------------------------- worker
def _use_library_from(src: str) -> None:
    """Imports ``jax_lossy_comm`` from ``src`` instead of this checkout (the editable
    install's redirecting finder would win over ``sys.path``)."""
    sys.meta_path[:] = [f for f in sys.meta_path if "jax_lossy_comm" not in type(f).__module__]
    sys.path.insert(0, src)


def _step(variant: str, mesh, p: int):
    """``(x, ct, eb) -> (y, ct_x)``: forward exchange and vjp, jitted over ``mesh``."""
    import jax
    from jax.sharding import PartitionSpec as P

    import jax_lossy_comm as jlc

    codec = jlc.FrameCodec(min_error_bound=ERROR_BOUND)
    if variant == "lax":

        def exchange(x, eb):
            del eb
            return jax.lax.all_to_all(x, "i", 0, 1, tiled=True)

    else:
        cfg = jlc.ExchangeConfig(codec, codec, table_axis=1, path=variant)

        def exchange(x, eb):
            return jlc.compressed_all_to_all(x, "i", 0, 1, tiled=True, error_bound=eb, config=cfg)

    def local(x, ct, eb):
        y, vjp = jax.vjp(lambda v: exchange(v, eb), x)
        return y, vjp(ct)[0]

    f = jax.shard_map(local, mesh=mesh, in_specs=(P("i"), P("i"), P()), out_specs=(P("i"),) * 2)
    return jax.jit(f)


def _measure(variant: str, p: int) -> dict:
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((p,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    shard = NamedSharding(mesh, P("i"))
    x = jax.ShapeDtypeStruct((p * p * ROWS, TABLES, DIM), jnp.float32, sharding=shard)
    ct = jax.ShapeDtypeStruct((p * ROWS, p * TABLES, DIM), jnp.float32, sharding=shard)
    eb = jax.ShapeDtypeStruct((), jnp.float32, sharding=NamedSharding(mesh, P()))
    jax.clear_caches()
    t0 = time.perf_counter()
    lowered = _step(variant, mesh, p).lower(x, ct, eb)
    stablehlo = lowered.as_text()
    row = {
        "variant": variant,
        "devices": p,
        "lower_s": time.perf_counter() - t0,
        "stablehlo_chars": len(stablehlo),
    }
    if variant == "ragged":  # XLA:CPU cannot compile ragged_all_to_all
        row.update(compile_s=None, hlo_chars=None)
        return row
    t0 = time.perf_counter()
    compiled = lowered.compile()
    row["compile_s"] = time.perf_counter() - t0
    row["hlo_chars"] = len(compiled.as_text())
    return row


def worker(p: int, variants: list[str]) -> None:
    """Prints one JSON line per variant (runs in a subprocess started with P devices)."""
    src = os.environ.get(_SRC_ENV)
    if src:
        _use_library_from(src)
    import jax

    if jax.device_count() != p:
        raise SystemExit(f"expected {p} devices, got {jax.device_count()} (XLA_FLAGS)")
    for v in variants:
        print(json.dumps(_measure(v, p)), flush=True)


# ------------------------------------------------------------------------------- driver
def _export_baseline(rev: str, dest: Path) -> Path:
    """``jax_lossy_comm/`` of git revision ``rev`` in ``dest``, with this checkout's built
    extension copied in (the frame format and FFI handlers are the same)."""
    archive = subprocess.run(
        ["git", "-C", str(bu.REPO_ROOT), "archive", rev, "jax_lossy_comm"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    spec = importlib.util.find_spec("jax_lossy_comm._ext")
    if spec is not None and spec.origin:
        shutil.copy2(spec.origin, dest / "jax_lossy_comm")
    return dest


def _run_worker(p: int, variants: list[str], src: Path | None, timeout_s: float) -> list[dict]:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={p}")
    env.pop(_SRC_ENV, None)
    if src is not None:
        env[_SRC_ENV] = str(src)
    cmd = [sys.executable, "-m", "bench.training.exchange_compile", "--worker", str(p)]
    cmd += ["--variants", ",".join(variants)]
    t0 = time.perf_counter()
    try:
        out = subprocess.run(
            cmd, cwd=bu.REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return [{"devices": p, "error": f"timed out after {timeout_s:.0f} s"}]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0:
        rows.append({"devices": p, "error": out.stderr.strip().splitlines()[-1:]})
    for r in rows:
        r["subprocess_s"] = time.perf_counter() - t0
    return rows


def ratios(rows: list[dict]) -> list[dict]:
    """Per device count (and library): packed / dense and packed / lax compile time and HLO
    size, and ragged / dense StableHLO size."""
    out = []
    keys = sorted({(r.get("library", "candidate"), r["devices"]) for r in rows if "variant" in r})
    for lib, p in keys:
        by = {
            r["variant"]: r
            for r in rows
            if "variant" in r and r["devices"] == p and r.get("library", "candidate") == lib
        }

        def q(a, b, field):
            if a in by and b in by and by[a].get(field) and by[b].get(field):
                return by[a][field] / by[b][field]
            return None

        out.append(
            {
                "library": lib,
                "devices": p,
                "packed_over_dense_compile": q("packed", "dense", "compile_s"),
                "packed_over_dense_hlo": q("packed", "dense", "hlo_chars"),
                "packed_over_dense_stablehlo": q("packed", "dense", "stablehlo_chars"),
                "packed_over_lax_compile": q("packed", "lax", "compile_s"),
                "dense_over_lax_compile": q("dense", "lax", "compile_s"),
                "ragged_over_dense_stablehlo": q("ragged", "dense", "stablehlo_chars"),
            }
        )
    return out


def markdown(result: dict) -> str:
    """The results as a Markdown table (one row per library, device count and variant)."""
    lines = [
        "# Compile time of the compressed all-to-all",
        "",
        "Gradient of a tiled exchange (2 tables, 16 rows x 32 dims per peer, forward + "
        "compressed backward), virtual CPU devices, `python -m bench.training.exchange_compile` "
        f"(commit {result['env'].get('git_commit', '?')[:10]}, baseline "
        f"{result.get('baseline') or 'none'}). Ragged: lowered only (no XLA:CPU kernel).",
        "",
        "| library | devices | variant | lower s | compile s | StableHLO chars | HLO chars |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        if "variant" not in r:
            lines.append(f"| {r.get('library')} | {r['devices']} | error: {r['error']} | | | | |")
            continue
        lines.append(
            f"| {r['library']} | {r['devices']} | {r['variant']} | {r['lower_s']:.2f} | "
            f"{bu.fmt(r['compile_s'])} | {r['stablehlo_chars']:,} | "
            + (f"{r['hlo_chars']:,} |" if r["hlo_chars"] else "- |")
        )
    lines += [
        "",
        "| library | devices | packed/dense compile | packed/dense StableHLO | packed/dense HLO "
        "| packed/lax compile | ragged/dense StableHLO |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for q in result["ratios"]:
        lines.append(
            f"| {q['library']} | {q['devices']} | {bu.fmt(q['packed_over_dense_compile'])} | "
            f"{bu.fmt(q['packed_over_dense_stablehlo'])} | {bu.fmt(q['packed_over_dense_hlo'])} | "
            f"{bu.fmt(q['packed_over_lax_compile'])} | "
            f"{bu.fmt(q['ragged_over_dense_stablehlo'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="8,64,256,1024", help="virtual device counts")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"subset of {VARIANTS}")
    ap.add_argument("--baseline", help="git revision to run beside this checkout (before)")
    ap.add_argument(
        "--baseline-devices", help="device counts for the baseline (default: --devices)"
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per subprocess")
    ap.add_argument("--out", type=Path, help="JSON result file (and a .md beside it)")
    ap.add_argument("--render", type=Path, help="re-render the ratios and .md of a result JSON")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    bad = sorted(set(variants) - set(VARIANTS))
    if bad:
        ap.error(f"unknown variants {bad}; choose from {VARIANTS}")
    if args.worker:
        worker(args.worker, variants)
        return 0
    if args.render:
        result = json.loads(args.render.read_text())
        result["ratios"] = ratios(result["rows"])
        bu.write_json(result, args.render)
        args.render.with_suffix(".md").write_text(markdown(result))
        return 0
    devices = [int(d) for d in args.devices.split(",")]
    base_devices = (
        devices
        if args.baseline_devices is None
        else [int(d) for d in args.baseline_devices.split(",")]
    )
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = _export_baseline(args.baseline, Path(tmp)) if args.baseline else None
        for p in devices:
            runs = [("candidate", None)]
            if base is not None and p in base_devices:
                runs.append(("baseline", base))
            for lib, src in runs:
                for r in _run_worker(p, variants, src, args.timeout):
                    r["library"] = lib
                    rows.append(r)
                    print(json.dumps(r), flush=True)
    result = {
        "benchmark": "exchange_compile",
        "params": {"rows": ROWS, "tables": TABLES, "dim": DIM, "error_bound": ERROR_BOUND},
        "baseline": args.baseline,
        "rows": rows,
        "ratios": ratios(rows),
        "env": bu.environment_record(),
    }
    text = markdown(result)
    print(text)
    if args.out:
        bu.write_json(result, args.out)
        args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
