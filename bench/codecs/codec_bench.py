"""The codec benchmark: jax_lossy_comm's codec forms and the peers on the real DLRM dumps.

Runs codecs of the one registry (`bench.codecs.registry`: the library's forms `jlc-*`, zstd,
quantization codes, SZ3, ZFP, FBGEMM quantized comm, JAX casts, memcpy) on every dump in
../shared/data/emb_dumps at REL error bounds 0.01 / 0.03 / 0.05 (eb_abs = eb_rel * (max -
min) of the dump), optionally on row tilings of every dump to about 32 MiB, single-threaded.
For each (dump, error bound, codec): compression ratio (raw float32 bytes / compressed bytes),
max |x - x_hat| / eb_abs (float64), compress and decompress GB/s of raw float32 (warm-up
excluded, median of repeats, `block_until_ready` for JAX) and whether the bound held. A codec
whose package is missing is reported as skipped with the reason.

Two suites, the same measurement (options override a suite's defaults):

* ``--suite peers`` (-> bench/results/peers.json): every codec but memcpy, the dumps
  and their tilings; library frames sized raw. The report's Pareto verdicts come from it.
* ``--suite targets`` (-> bench/results/codec.json): the library's forms, int8 codes
  + zstd-1 (``quant-codes+zstd-1``) and memcpy, no tilings; library frames sized by the bound;
  then side by side (``bench_util.time_interleaved``, so the noise of a shared machine hits
  both sides alike): the fixed-rate compress, its decompress and a jitted copy each against
  the numpy copy (small dumps also as a batch of chunks), ``auto`` against the peer; and
  the codec targets checked on those ratios (pass/fail in the JSON; ``codec_targets``).

After a run into bench/results/ the report is re-rendered (``bench.reports.report``: RESULTS.md,
codec.md, the other result pages, the figures).

Usage (from the repo root)::

    python -m bench.codecs.codec_bench                            # peers suite, full run
    python -m bench.codecs.codec_bench --suite targets            # the codec targets (codec.md)
    python -m bench.codecs.codec_bench --suite targets --quick    # 3 repeats (smoke run)
    python -m bench.codecs.codec_bench --no-tiles --dumps terabyte_table01 --eb-rel 0.01

References:
  Feng et al., SC24, arXiv 2407.04272 (REL error bounds, dumps, peer codecs compared).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench import bench_util as bu
from bench.codecs import codec_entry, codec_rows, jax_codecs, quant_codes, registry
from bench.codecs.codec_targets import PEER, check_targets, side_by_side

DEFAULT_EB_RELS = (0.01, 0.03, 0.05)
DEFAULT_TILE_BYTES = 32 << 20


@dataclasses.dataclass(frozen=True)
class Suite:
    """Defaults of one suite of the benchmark.

    Attributes:
      codecs: registry names to run (None: all but memcpy).
      library_capacity: frame capacity of the library's entries (`jax_codecs.CAPACITIES`).
      tile_bytes: tile every dump to at least this many bytes too (0: no tilings).
      side_by_side: time fixed vs memcpy and auto vs the peer interleaved, check the codec targets.
      repeats, budget_s: see `bench_util.time_fn`.
      out: the result file.
      title: the result's ``benchmark`` field.
    """

    codecs: tuple[str, ...] | None
    library_capacity: str
    tile_bytes: int
    side_by_side: bool
    repeats: int
    budget_s: float
    out: Path
    title: str


SUITES = {
    "peers": Suite(
        codecs=None,
        library_capacity="raw",
        tile_bytes=DEFAULT_TILE_BYTES,
        side_by_side=False,
        repeats=7,
        budget_s=3.0,
        out=bu.RESULTS_DIR / "peers.json",
        title="peer codecs",
    ),
    "targets": Suite(
        codecs=(*(f"jlc-{f}" for f in jax_codecs.LIBRARY_FORMS), PEER, "memcpy"),
        library_capacity="bound",
        tile_bytes=0,
        side_by_side=True,
        repeats=15,
        budget_s=2.0,
        out=bu.RESULTS_DIR / "codec.json",
        title="codec",
    ),
}


# --------------------------------------------------------------------------------------------
# One measurement
# --------------------------------------------------------------------------------------------
def bench_codec(
    codec: codec_entry.Codec,
    x: np.ndarray,
    eb_abs: float,
    *,
    warmup: int = 2,
    repeats: int = 7,
    min_repeats: int = 3,
    budget_s: float = 3.0,
) -> dict[str, Any]:
    """Measure one codec on one input float32[rows, dim] at absolute bound `eb_abs`.

    Returns:
      dict with status ("ok", "skipped", "error"), compressed_bytes, ratio, max_err,
      max_err_over_eb, bound_ok (max_err <= eb_abs), bound_violated (an error-bounded codec
      that missed its bound), compress/decompress Timing and GB/s, and codec metadata.
      Exceptions inside the codec become status "error" with the message.
    """
    row: dict[str, Any] = {
        "codec": codec.name,
        "family": codec.family,
        "error_bounded": codec.error_bounded,
    }  # package and notes are listed once per codec in the result's "codecs"
    if not codec.available:
        row.update(status="skipped", skip_reason=codec.skip_reason)
        return row
    raw = int(x.nbytes)
    shape = tuple(x.shape)
    timing = dict(warmup=warmup, repeats=repeats, min_repeats=min_repeats, budget_s=budget_s)
    try:
        xp = codec.prepare(x)
        blob = bu.block(codec.compress(xp, eb_abs))
        y = codec.to_numpy(bu.block(codec.decompress(blob, shape)))
        y = np.asarray(y, dtype=np.float32).reshape(shape)
        nbytes = int(codec.nbytes(blob))
        max_err = bu.max_abs_error(x, y)
        t_c = bu.time_fn(lambda: codec.compress(xp, eb_abs), **timing)
        t_d = bu.time_fn(lambda: codec.decompress(blob, shape), **timing)
    except Exception as e:  # noqa: BLE001 - one broken codec must not stop the comparison
        row.update(
            status="error",
            error=f"{type(e).__name__}: {e}"[:500],
            traceback=traceback.format_exc(limit=3),
        )
        return row
    over = max_err / eb_abs if eb_abs > 0 else (0.0 if max_err == 0 else math.inf)
    bound_ok = bool(max_err <= eb_abs)
    row.update(
        status="ok",
        raw_bytes=raw,
        compressed_bytes=nbytes,
        ratio=raw / nbytes if nbytes else math.inf,
        max_err=max_err,
        max_err_over_eb=over,
        bound_ok=bound_ok,
        bound_violated=bool(codec.error_bounded and not bound_ok),
        compress=t_c.to_json(),
        decompress=t_d.to_json(),
        compress_gbps=bu.gbps(raw, t_c.median_s),
        decompress_gbps=bu.gbps(raw, t_d.median_s),
    )
    if codec.family == "quantization" and isinstance(blob, bytes):
        row["code_bytes"] = quant_codes.code_width(blob)
        row["outliers"] = quant_codes.outliers(blob)
    return row


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------
def run(
    codecs: Sequence[codec_entry.Codec],
    *,
    dump_names: Sequence[str] | None = None,
    eb_rels: Sequence[float] = DEFAULT_EB_RELS,
    tile_bytes: int | None = DEFAULT_TILE_BYTES,
    tile_eb_rels: Sequence[float] | None = None,
    paired: bool = False,
    data: str | None = None,
    warmup: int = 2,
    repeats: int = 7,
    min_repeats: int = 3,
    budget_s: float = 3.0,
    title: str = "codecs",
    verbose: bool = True,
) -> dict[str, Any]:
    """Run the benchmark; returns the JSON-able result (environment, params, codecs, rows).

    Args:
      codecs: the registry entries to run (`registry.registry(...)`).
      dump_names: restrict to these dumps (`terabyte_table01`, ...); None = all in manifest.
      eb_rels: REL error bounds; eb_abs = eb_rel * (max - min) per dump.
      tile_bytes: also run on row tilings of each dump to at least this many bytes; None or
        0 skips tilings.
      tile_eb_rels: REL bounds for the tilings (default: `eb_rels`).
      paired: also time side by side (`side_by_side`) on the real dumps and check the codec's
        targets (`paired` and `checks` in the result).
      warmup, repeats, min_repeats, budget_s: see `bench_util.time_fn`.
    """
    codecs = list(codecs)
    bu.set_single_thread()  # torch is imported by now: set its thread count too
    dumps = list(bu.iter_dumps(data, names=dump_names))
    inputs: list[tuple[bu.Dump, Sequence[float], bool]] = [(d, eb_rels, False) for d in dumps]
    if tile_bytes:
        inputs += [(bu.tile_rows(d, tile_bytes), tile_eb_rels or eb_rels, True) for d in dumps]
    timing = dict(warmup=warmup, repeats=repeats, min_repeats=min_repeats, budget_s=budget_s)
    rows: list[dict[str, Any]] = []
    side: list[dict[str, Any]] = []
    for dump, rels, tiled in inputs:
        x = dump.array
        for eb_rel in rels:
            eb_abs = bu.eb_abs_from_rel(x, eb_rel)
            block_rows = []
            for codec in codecs:
                r = bench_codec(codec, x, eb_abs, **timing)
                r.update(
                    dump=dump.name,
                    source_dump=bu.dump_name(dump.meta),
                    tiled=tiled,
                    shape=list(x.shape),
                    eb_rel=eb_rel,
                    eb_abs=eb_abs,
                )
                block_rows.append(r)
            rows.extend(block_rows)
            if verbose:
                mib = x.nbytes / 2**20
                head = (
                    f"{dump.name} {list(x.shape)} {mib:.2f} MiB  REL {eb_rel}  eb_abs {eb_abs:.6g}"
                )
                print(format_table(block_rows, title=head), flush=True)
            if paired and not tiled:
                p = side_by_side(codecs, x, eb_abs, budget_s)
                side.append(dict(dump=dump.name, eb_rel=eb_rel, **p))
                if verbose and "compress_over_memcpy" in p:
                    print(
                        f"  side by side: fixed compress {p['compress_over_memcpy']:.3f}"
                        f" x memcpy speed, decompress {p['decompress_over_memcpy']:.3f}, "
                        f"jitted copy {p['jit_copy_over_memcpy']:.3f}",
                        flush=True,
                    )
    result = {
        "benchmark": title,
        "environment": bu.environment_record(),
        "params": {
            "eb_rels": list(eb_rels),
            "tile_bytes": tile_bytes,
            "tile_eb_rels": list(tile_eb_rels or eb_rels),
            **timing,
            "side_by_side": paired,
            "dumps": [d.name for d in dumps],
            "threads": "single",
        },
        "codecs": [
            {
                "name": c.name,
                "family": c.family,
                "error_bounded": c.error_bounded,
                "available": c.available,
                "skip_reason": c.skip_reason,
                "package": c.package,
                "notes": c.notes,
            }
            for c in codecs
        ],
        "rows": rows,
    }
    if paired:
        result["paired"] = side
        result["checks"] = check_targets(rows, side)
    return result


def format_table(rows: Sequence[dict[str, Any]], title: str = "") -> str:
    """Plain-text table: codec, ratio, max_err/eb_abs, compress and decompress GB/s, bound.

    bound: `codec_rows.bound_label`; skipped and failed codecs say so (`codec_rows.not_run`).
    """
    head = f"{'codec':<22} {'ratio':>9} {'maxerr/eb':>10} {'comp GB/s':>10} {'dec GB/s':>9}  bound"
    lines = [title, head, "-" * len(head)] if title else [head, "-" * len(head)]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"{r['codec']:<22} {codec_rows.not_run(r)}")
            continue
        lines.append(
            f"{r['codec']:<22} {r['ratio']:>9.2f} {r['max_err_over_eb']:>10.4f} "
            f"{r['compress_gbps']:>10.3f} {r['decompress_gbps']:>9.3f}  {codec_rows.bound_label(r)}"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """CLI entry: the suite's defaults, overridden by the options; returns the result."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.codecs.codec_bench", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--suite", choices=sorted(SUITES), default="peers")
    ap.add_argument("--eb-rel", type=float, nargs="+", default=list(DEFAULT_EB_RELS))
    ap.add_argument(
        "--tile-eb-rel", type=float, nargs="+", default=None, help="REL bounds for the tilings"
    )
    ap.add_argument("--tile-mib", type=float, default=None, help="tile dumps to this many MiB")
    ap.add_argument("--no-tiles", action="store_true")
    ap.add_argument("--dumps", nargs="+", default=None, help="e.g. terabyte_table01")
    ap.add_argument("--codecs", nargs="+", default=None, help="registry names to run")
    ap.add_argument("--no-library", action="store_true", help="leave out the jlc-* entries")
    ap.add_argument(
        "--library-capacity", choices=jax_codecs.CAPACITIES, default=None, help="frame capacity"
    )
    ap.add_argument("--data", default=None, help="shared data folder (default ../shared/data)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--min-repeats", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=None)
    ap.add_argument("--quick", action="store_true", help="3 repeats, no tilings (smoke run)")
    ap.add_argument("--out", default=None, help="result JSON (default: the suite's)")
    ap.add_argument("--no-report", action="store_true", help="do not re-render the report")
    args = ap.parse_args(argv)
    suite = SUITES[args.suite]
    bu.set_single_thread()  # before jax / torch are imported by the registry
    names = args.codecs or suite.codecs
    codecs = registry.registry(
        names, library_capacity=args.library_capacity or suite.library_capacity
    )
    if names is not None:  # in the order asked
        codecs.sort(key=lambda c: list(names).index(c.name))
    if args.codecs is None and suite.codecs is None:
        codecs = [c for c in codecs if c.family != "copy"]
    if args.no_library:
        codecs = [c for c in codecs if c.family != "jax_lossy_comm"]
    tile_mib = suite.tile_bytes / 2**20 if args.tile_mib is None else args.tile_mib
    for c in codecs:
        state = "available" if c.available else f"SKIPPED ({c.skip_reason})"
        print(f"# {c.name:<22} {c.package:<40} {state}")
    result = run(
        codecs,
        dump_names=args.dumps,
        eb_rels=args.eb_rel,
        tile_bytes=0 if args.no_tiles or args.quick else int(tile_mib * 2**20),
        tile_eb_rels=args.tile_eb_rel,
        paired=suite.side_by_side,
        data=args.data,
        warmup=args.warmup,
        repeats=3 if args.quick else (args.repeats or suite.repeats),
        min_repeats=args.min_repeats,
        budget_s=args.budget_s or suite.budget_s,
        title=suite.title,
    )
    result["argv"] = list(sys.argv if argv is None else argv)
    for c in result.get("checks", []):
        print(
            f"{'PASS' if c['ok'] else 'MISS'}  {c['dump']:<18} {c['what']:<48} "
            f"{c['value']:.3g} (target {c['target']:g}) {c.get('note', '')}"
        )
    for r in result["rows"]:
        if r.get("bound_violated"):
            print(
                f"!! {r['codec']} violated its error bound on {r['dump']} REL {r['eb_rel']}: "
                f"max_err/eb = {r['max_err_over_eb']:.6f}"
            )
    out = Path(args.out or suite.out)
    print(f"wrote {bu.write_json(result, out)}")
    if not args.no_report and out.resolve().parent == bu.RESULTS_DIR.resolve():
        from bench.reports import report

        report.render(bu.RESULTS_DIR)
    return result


if __name__ == "__main__":
    main()
