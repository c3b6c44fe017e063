"""Side-by-side codec comparison on the real DLRM embedding dumps (issue 6): the peers.

Runs every peer codec of `peers.registry()` (and any extra entries, e.g. the library's own
codec from `library_codecs()`) on every dump in ../shared/data/emb_dumps at REL error bounds
0.01 / 0.03 / 0.05 (eb_abs = eb_rel * (max - min) of the dump), and on row tilings of every
dump to about 32 MiB, single-threaded. For each (dump, error bound, codec) it reports:
compression ratio (raw float32 bytes / compressed bytes), max |x - x_hat| / eb_abs (float64),
compress and decompress GB/s of raw float32 (warm-up excluded, median of repeats,
`block_until_ready` for JAX), and whether the bound held. A peer whose package is missing is
reported as skipped with the reason.

Usage (from the repo root, in an environment with the peers installed)::

    python bench/peer_bench.py                       # full run -> bench/results/peers.json
    python bench/peer_bench.py --no-tiles --dumps terabyte_table01 --eb-rel 0.01

Adding codecs (the hook): `run(..., extra_codecs=[...])` or `main(extra_codecs=[...])` take
more `peers.PeerCodec` entries; `library_codecs()` builds them for jax_lossy_comm (skipped
with a reason while the library is not importable). Use `peers.jax_codec` for any jittable
JAX codec.

References:
  Feng et al., SC24, arXiv 2407.04272 (REL error bounds, dumps, peer codecs compared).
"""

from __future__ import annotations

import argparse
import math
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_util as bu  # noqa: E402

bu.set_single_thread()  # before jax / torch are imported by the registry

import numpy as np  # noqa: E402
import peers  # noqa: E402

DEFAULT_EB_RELS = (0.01, 0.03, 0.05)
DEFAULT_TILE_BYTES = 32 << 20
DEFAULT_OUT = bu.RESULTS_DIR / "peers.json"


# --------------------------------------------------------------------------------------------
# Hook: the library's own codec as more entries
# --------------------------------------------------------------------------------------------
#: Library codec forms benchmarked by default: the automatic choice, the fixed-rate codes
#: (static size, what the dense exchange sends), the dictionary of distinct code rows, and
#: dictionary + Huffman.
LIBRARY_CODECS = ("auto", "fixed", "dedup", "entropy")


def rel_bound_within(x_min: float, x_max: float, eb_abs: float) -> float:
    """REL bound whose float32 `eb_abs` (as the library computes it) is <= `eb_abs`.

    The library computes, in float32, `range = max - min` and `eb_abs32 = eb_rel * range`
    (xla_ffi/frame.h). The harness checks `max |x - x_hat| <= eb_abs` in float64, so the
    REL bound passed is the largest float32 `eb_rel` with `float32(eb_rel * range) <= eb_abs`
    (it differs from `eb_abs / range` by at most a few float32 ulps).

    Returns:
      float eb_rel (0.0 for a constant input or a non-positive bound).
    """
    rng = np.float32(np.float32(x_max) - np.float32(x_min))
    if not (rng > 0) or not (eb_abs > 0):
        return 0.0
    r = np.float32(eb_abs / float(rng))
    while float(np.float32(r * rng)) > eb_abs:
        r = np.nextafter(r, np.float32(0))
    return float(r)


def library_codecs(codec_names: Sequence[str] = LIBRARY_CODECS) -> list[peers.PeerCodec]:
    """Entries for jax_lossy_comm's codec, one per `codec=` name, jitted, REL mode.

    Calls `jax_lossy_comm.compress(x, eb_rel, mode="rel", codec=name)` -> (frames
    uint8[capacity], nbytes int32[]) and `jax_lossy_comm.decompress(frames, nbytes,
    shape=, dtype=float32)`, with the whole `[rows, dim]` input as one chunk, as the exchange
    calls it. The harness's absolute bound is turned into the REL bound the library takes
    (`rel_bound_within`: never looser than eb_abs); it is a traced scalar (no recompile per
    bound). The compress time includes the library's own range scan. `codec="fixed"` gets
    `capacity` = the raw frame size (it writes the fixed-rate form whose width the bound
    needs). Wire bytes are `nbytes` (what a variable-size exchange moves; the dense exchange
    moves the static capacity, see exchange.py). If the library cannot be imported, one
    skipped entry per name with the reason is returned instead.
    """
    try:
        import jax
        import jax.numpy as jnp

        import jax_lossy_comm as jlc
        from jax_lossy_comm import frame as jlc_frame

        jlc.compress, jlc.decompress  # noqa: B018 - fail here if the API is not there yet
    except Exception as e:  # noqa: BLE001
        return [
            peers.unavailable(
                f"jlc-{n}",
                "jax_lossy_comm",
                True,
                f"{type(e).__name__}: {e}"[:300],
                "jax_lossy_comm",
            )
            for n in codec_names
        ]
    version = bu.package_versions(("jax_lossy_comm",)).get("jax_lossy_comm") or ""
    package = f"jax_lossy_comm {version}".strip()

    def prepare(x: np.ndarray):
        fin = x[np.isfinite(x)]
        lo, hi = (float(fin.min()), float(fin.max())) if fin.size else (0.0, 0.0)
        return jax.device_put(np.ascontiguousarray(x, dtype=np.float32)), lo, hi

    def to_numpy(y):
        return np.asarray(jax.device_get(y), dtype=np.float32)

    def nbytes(blob) -> int:
        return int(np.sum(np.abs(np.asarray(blob[1]))))

    out = []
    for name in codec_names:
        if name not in jlc.CODECS:
            out.append(
                peers.unavailable(
                    f"jlc-{name}", "jax_lossy_comm", True, f"unknown codec {name!r}", package
                )
            )
            continue

        @jax.jit
        def cfn(x, eb_rel, _n=name):
            cap = (
                jlc_frame.raw_frame_bytes(x.shape[-2], x.shape[-1], np.float32)
                if _n == "fixed"
                else None
            )
            return jlc.compress(x, eb_rel, mode="rel", codec=_n, capacity=cap)

        dfn = jax.jit(
            lambda blob, shape: jlc.decompress(blob[0], blob[1], shape=shape, dtype=jnp.float32),
            static_argnums=1,
        )

        def compress(xp, eb_abs, _c=cfn):
            x, lo, hi = xp
            return _c(x, jnp.float32(rel_bound_within(lo, hi, eb_abs)))

        out.append(
            peers.PeerCodec(
                f"jlc-{name}",
                "jax_lossy_comm",
                True,
                True,
                package=package,
                compress=compress,
                decompress=lambda b, s, _d=dfn: _d(b, tuple(s)),
                nbytes=nbytes,
                prepare=prepare,
                to_numpy=to_numpy,
                notes=f"jax_lossy_comm.compress(codec={name!r}, mode='rel'), whole input one "
                "chunk, jitted, eb_rel traced"
                + (", capacity = raw frame size" if name == "fixed" else ""),
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# One measurement
# --------------------------------------------------------------------------------------------
def bench_codec(
    codec: peers.PeerCodec,
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
    try:
        xp = codec.prepare(x)
        blob = bu.block(codec.compress(xp, eb_abs))
        y = codec.to_numpy(bu.block(codec.decompress(blob, shape)))
        y = np.asarray(y, dtype=np.float32).reshape(shape)
        nbytes = int(codec.nbytes(blob))
        max_err = bu.max_abs_error(x, y)
        t_c = bu.time_fn(
            lambda: codec.compress(xp, eb_abs),
            warmup=warmup,
            repeats=repeats,
            min_repeats=min_repeats,
            budget_s=budget_s,
        )
        t_d = bu.time_fn(
            lambda: codec.decompress(blob, shape),
            warmup=warmup,
            repeats=repeats,
            min_repeats=min_repeats,
            budget_s=budget_s,
        )
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
        row["code_bytes"] = peers.quantize_code_width(blob)
        row["outliers"] = peers.quantize_outliers(blob)
    return row


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------
def run(
    *,
    codecs: Sequence[peers.PeerCodec] | None = None,
    extra_codecs: Sequence[peers.PeerCodec] = (),
    dump_names: Sequence[str] | None = None,
    eb_rels: Sequence[float] = DEFAULT_EB_RELS,
    tile_bytes: int | None = DEFAULT_TILE_BYTES,
    tile_eb_rels: Sequence[float] | None = None,
    data: str | None = None,
    warmup: int = 2,
    repeats: int = 7,
    min_repeats: int = 3,
    budget_s: float = 3.0,
    verbose: bool = True,
) -> dict[str, Any]:
    """Run the comparison; returns the JSON-able result (environment, params, codecs, rows).

    Args:
      codecs: the codecs to run (default: `peers.registry()`).
      extra_codecs: appended to `codecs`; the hook for the library's codec.
      dump_names: restrict to these dumps (`terabyte_table01`, ...); None = all in manifest.
      eb_rels: REL error bounds; eb_abs = eb_rel * (max - min) per dump.
      tile_bytes: also run on row tilings of each dump to at least this many bytes; None or
        0 skips tilings.
      tile_eb_rels: REL bounds for the tilings (default: `eb_rels`).
      warmup, repeats, min_repeats, budget_s: see `bench_util.time_fn`.
    """
    codec_list = list(peers.registry() if codecs is None else codecs) + list(extra_codecs)
    bu.set_single_thread()  # torch is imported by now: set its thread count too
    dumps = list(bu.iter_dumps(data, names=dump_names))
    inputs: list[tuple[bu.Dump, Sequence[float], bool]] = [(d, eb_rels, False) for d in dumps]
    if tile_bytes:
        inputs += [(bu.tile_rows(d, tile_bytes), tile_eb_rels or eb_rels, True) for d in dumps]
    rows: list[dict[str, Any]] = []
    for dump, rels, tiled in inputs:
        x = dump.array
        for eb_rel in rels:
            eb_abs = bu.eb_abs_from_rel(x, eb_rel)
            block_rows = []
            for codec in codec_list:
                r = bench_codec(
                    codec,
                    x,
                    eb_abs,
                    warmup=warmup,
                    repeats=repeats,
                    min_repeats=min_repeats,
                    budget_s=budget_s,
                )
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
                print(
                    format_table(
                        block_rows,
                        title=f"{dump.name} {list(x.shape)} "
                        f"{x.nbytes / 2**20:.2f} MiB  REL {eb_rel}  "
                        f"eb_abs {eb_abs:.6g}",
                    ),
                    flush=True,
                )
    return {
        "benchmark": "peer codecs (issue 6)",
        "environment": bu.environment_record(),
        "params": {
            "eb_rels": list(eb_rels),
            "tile_bytes": tile_bytes,
            "tile_eb_rels": list(tile_eb_rels or eb_rels),
            "warmup": warmup,
            "repeats": repeats,
            "min_repeats": min_repeats,
            "budget_s": budget_s,
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
            for c in codec_list
        ],
        "rows": rows,
    }


def format_table(rows: Sequence[dict[str, Any]], title: str = "") -> str:
    """Plain-text table: codec, ratio, max_err/eb_abs, compress and decompress GB/s, bound.

    bound: `ok` within eb_abs; `EXCEEDS` over it (codec makes no bound promise);
    `VIOLATED` an error-bounded codec over its bound; skipped and failed codecs say so.
    """
    head = f"{'codec':<22} {'ratio':>9} {'maxerr/eb':>10} {'comp GB/s':>10} {'dec GB/s':>9}  bound"
    lines = [title, head, "-" * len(head)] if title else [head, "-" * len(head)]
    for r in rows:
        if r["status"] == "skipped":
            lines.append(f"{r['codec']:<22} skipped: {r['skip_reason']}")
            continue
        if r["status"] == "error":
            lines.append(f"{r['codec']:<22} error: {r['error']}")
            continue
        bound = "ok" if r["bound_ok"] else ("VIOLATED" if r["error_bounded"] else "EXCEEDS")
        lines.append(
            f"{r['codec']:<22} {r['ratio']:>9.2f} {r['max_err_over_eb']:>10.4f} "
            f"{r['compress_gbps']:>10.3f} {r['decompress_gbps']:>9.3f}  {bound}"
        )
    return "\n".join(lines) + "\n"


def main(
    argv: Sequence[str] | None = None, extra_codecs: Sequence[peers.PeerCodec] | None = None
) -> dict[str, Any]:
    """CLI entry; `extra_codecs` (default: `library_codecs()`) are benchmarked beside the
    peers."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eb-rel", type=float, nargs="+", default=list(DEFAULT_EB_RELS))
    ap.add_argument(
        "--tile-eb-rel",
        type=float,
        nargs="+",
        default=None,
        help="REL bounds for the tilings (default: --eb-rel)",
    )
    ap.add_argument(
        "--tile-mib",
        type=float,
        default=DEFAULT_TILE_BYTES / 2**20,
        help="tile each dump to at least this many MiB (0: no tilings)",
    )
    ap.add_argument("--no-tiles", action="store_true")
    ap.add_argument("--dumps", nargs="+", default=None, help="e.g. terabyte_table01")
    ap.add_argument("--codecs", nargs="+", default=None, help="peer names to keep")
    ap.add_argument("--no-library", action="store_true", help="do not add jax_lossy_comm entries")
    ap.add_argument("--data", default=None, help="shared data folder (default ../shared/data)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--min-repeats", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=3.0)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)

    codecs = peers.registry(args.codecs)
    if extra_codecs is None:
        extra_codecs = [] if args.no_library else library_codecs()
    tile_bytes = 0 if args.no_tiles else int(args.tile_mib * 2**20)
    for c in list(codecs) + list(extra_codecs):
        state = "available" if c.available else f"SKIPPED ({c.skip_reason})"
        print(f"# {c.name:<22} {c.package:<40} {state}")
    result = run(
        codecs=codecs,
        extra_codecs=extra_codecs,
        dump_names=args.dumps,
        eb_rels=args.eb_rel,
        tile_bytes=tile_bytes,
        tile_eb_rels=args.tile_eb_rel,
        data=args.data,
        warmup=args.warmup,
        repeats=args.repeats,
        min_repeats=args.min_repeats,
        budget_s=args.budget_s,
    )
    result["argv"] = list(sys.argv if argv is None else argv)
    path = bu.write_json(result, args.out)
    bad = [r for r in result["rows"] if r.get("bound_violated")]
    for r in bad:
        print(
            f"!! {r['codec']} violated its error bound on {r['dump']} REL {r['eb_rel']}: "
            f"max_err/eb = {r['max_err_over_eb']:.6f}"
        )
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
