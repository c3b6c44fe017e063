"""Raw vs compressed embedding all-to-all on DLRM-shaped data.

Each device holds pooled embeddings ``float32[global_batch, L, dim]`` of its ``L`` local
tables (``L = ceil(tables / devices)``; slots past ``tables`` are zero padding, as in the
table-wise sharded DLRM) and sends ``[global_batch / P, dim]`` per (peer, table): one chunk,
made by tiling the real Terabyte dumps (each dump is one [2048, 64] chunk; rows rolled per
peer, so the value range and the row multiset, hence the compression, stay those of the dump).
The exchange is ``jax.lax.all_to_all`` (raw) against ``compressed_all_to_all`` with

* ``dense``: the CPU path, fixed-rate capacity sized from the error bound (``min_error_bound =
  eb``): what really moves on XLA:CPU;
* ``speculative``: the dense path with ``capacity=`` the largest frame of a calibration step
  x ``--spec-margin`` (a frame that does not fit sends the step down the exact fallback);
* ``variable``: the frame bytes a ragged (GPU) exchange moves, from the same run's stats.

For each it reports the measured time on the virtual CPU devices (8 devices sharing this
machine's cores: codec-bound, not a network measurement), the bytes moved per device, and a
modelled time per link bandwidth ``bw`` (GB/s per device) with the measured single-device
codec throughput: ``time = compress + off_device_bytes / bw + decompress`` (raw: ``bytes / bw``),
where ``off_device_bytes = bytes * (P - 1) / P`` (the block a device keeps never crosses a link).

Usage (from the repo root)::

    python -m bench.training.exchange_bench                 # -> bench/results/exchange_cpu.json
    python -m bench.training.exchange_bench --eb 0.01 --tables 8 --batch-per-device 512   # quick

References:
  Feng et al., SC24, arXiv 2407.04272 (sec. 3: the exchange; sec. 5: Terabyte, REL bounds).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from bench import bench_util as bu

DEFAULT_OUT = bu.RESULTS_DIR / "exchange_cpu.json"
DEFAULT_BANDWIDTHS_GBPS = (12.5, 25.0, 50.0, 100.0, 450.0)
DEFAULT_EBS = (0.01, 0.03, 0.05)


def _parse(argv):
    ap = argparse.ArgumentParser(
        prog="python -m bench.training.exchange_bench", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--tables", type=int, default=26)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch-per-device", type=int, default=2048)
    ap.add_argument(
        "--eb",
        type=float,
        nargs="+",
        default=list(DEFAULT_EBS),
        help="REL error bounds (each also the dense min_error_bound)",
    )
    ap.add_argument(
        "--bandwidths",
        type=float,
        nargs="+",
        default=list(DEFAULT_BANDWIDTHS_GBPS),
        help="link bandwidths in GB/s per device for the model",
    )
    ap.add_argument(
        "--spec-margin",
        type=float,
        default=1.25,
        help="speculative capacity = largest calibration frame x this",
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data", default=None, help="shared data folder (default ../shared/data)")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    return ap.parse_args(argv)


def _make_input(dumps, p, tables, batch, dim):
    """float32[P (device), P * batch, L, dim]: device i's pooled embeddings."""
    import numpy as np

    L = math.ceil(tables / p)
    x = np.zeros((p, p * batch, L, dim), np.float32)
    for i in range(p):
        for t in range(L):
            g = i * L + t
            if g >= tables:
                continue
            base = dumps[g % len(dumps)]
            reps = math.ceil(batch / base.shape[0])
            col = np.tile(base, (reps, 1))[:batch, :dim]
            if col.shape[1] < dim:
                col = np.tile(col, (1, math.ceil(dim / col.shape[1])))[:, :dim]
            for d in range(p):
                x[i, d * batch : (d + 1) * batch, t] = np.roll(col, 97 * d, axis=0)
    return x


def main(argv=None) -> int:
    args = _parse(argv)
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "")
            + f" --xla_force_host_platform_device_count={args.devices}"
        ).strip()
    try:
        dumps = [d.array for d in bu.iter_dumps(args.data) if d.name.startswith("terabyte")]
    except FileNotFoundError as e:
        print(f"SKIP: real dumps not found ({e}); expected {bu.data_dir(args.data)}/emb_dumps")
        return 0
    if not dumps:
        print("SKIP: no terabyte dumps in the manifest")
        return 0

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_lossy_comm as jlc

    p = args.devices
    if jax.device_count() < p:
        print(f"SKIP: {jax.device_count()} devices, need {p}")
        return 0
    mesh = jax.make_mesh((p,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))
    B, dim = args.batch_per_device, args.dim
    L = math.ceil(args.tables / p)
    xh = _make_input(dumps, p, args.tables, B, dim)
    xg = xh.reshape(p * p * B, L, dim)
    sh = NamedSharding(mesh, P("i"))
    x = jax.device_put(xg, sh)
    rows = B
    raw_bytes = p * B * L * dim * 4  # per device
    off = (p - 1) / p
    print(
        f"{p} devices, {args.tables} tables ({L} slots/device), chunk [{rows}, {dim}] float32, "
        f"{raw_bytes / 2**20:.1f} MiB per device per exchange"
    )

    raw_fn = jax.jit(
        jax.shard_map(
            lambda x: jax.lax.all_to_all(x, "i", 0, 1, tiled=True),
            mesh=mesh,
            in_specs=P("i"),
            out_specs=P("i"),
        )
    )
    y_raw = raw_fn(x)
    t_raw = bu.time_fn(lambda: raw_fn(x), repeats=args.repeats)

    def comp_fn(eb_min, capacity=None):
        codec = jlc.FrameCodec(min_error_bound=eb_min, capacity=capacity)
        config = jlc.ExchangeConfig(codec, table_axis=1, path="dense")

        def f(x, eb):
            y, s = jlc.compressed_all_to_all_with_stats(
                x, "i", 0, 1, tiled=True, error_bound=eb, config=config
            )
            return y, jax.tree.map(lambda a: a[None], s)

        return jax.jit(
            jax.shard_map(f, mesh=mesh, in_specs=(P("i"), P()), out_specs=(P("i"), P("i")))
        )

    # Single-device codec throughput on one device's payload [P, L, rows, dim].
    chunks = jax.device_put(
        jnp.asarray(xh[0].reshape(p, B, L, dim).transpose(0, 2, 1, 3)), jax.devices()[0]
    )
    results = []
    header = (
        f"{'eb':>5} {'variant':<11} {'cap B':>7} {'MB moved':>9} {'raw/moved':>9} "
        f"{'meas ms':>8} {'fallback':>8} "
        + " ".join(f"{bw:>6g}GB/s" for bw in args.bandwidths)
        + "  break-even"
    )
    lines = [header]
    lines.append(
        f"{'-':>5} {'raw':<11} {'-':>7} {raw_bytes / 1e6:9.2f} {1.0:9.2f} "
        f"{t_raw.median_s * 1e3:8.1f} {'-':>8} "
        + " ".join(f"{raw_bytes * off / (bw * 1e9) * 1e3:8.3f}ms" for bw in args.bandwidths)
        + "           -"
    )

    def break_even(moved, codec_s):
        """Link GB/s below which the compressed exchange is modelled faster than raw."""
        saved = (raw_bytes - moved) * off
        return saved / codec_s / 1e9 if saved > 0 else 0.0

    for eb in args.eb:
        ebv = jnp.float32(eb)
        dense = comp_fn(eb)
        y, s = dense(x, ebv)
        cap = int(np.asarray(s.capacity_bytes)[0])  # the codec timed with the exchange's frames
        enc = jax.jit(lambda c, e, cap=cap: jlc.compress(c, e, capacity=cap))
        fr, nb = enc(chunks, ebv)
        dec = jax.jit(lambda f, n: jlc.decompress(f, n, shape=(rows, dim)))
        t_c = bu.time_fn(lambda: enc(chunks, ebv), repeats=args.repeats)
        t_d = bu.time_fn(lambda: dec(fr, nb), repeats=args.repeats)
        codec = {
            "compress_s": t_c.median_s,
            "decompress_s": t_d.median_s,
            "compress_gbps": bu.gbps(raw_bytes, t_c.median_s),
            "decompress_gbps": bu.gbps(raw_bytes, t_d.median_s),
        }

        frame_max = int(
            np.abs(np.asarray(s.compression_ratio)).size
            and np.max(rows * dim * 4 / np.asarray(s.compression_ratio))
        )
        spec_cap = max(64, int(math.ceil(frame_max * args.spec_margin)))
        variants = [("dense", dense, s), ("speculative", comp_fn(eb, spec_cap), None)]
        for name, fn, st in variants:
            y, st = fn(x, ebv)
            err = np.abs(np.asarray(y, np.float64) - np.asarray(y_raw, np.float64)).max()
            bound = eb * float(xg.max() - xg.min())
            t = bu.time_fn(lambda fn=fn: fn(x, ebv), repeats=args.repeats)
            moved = float(np.asarray(st.moved_bytes).mean())
            fb = int(np.asarray(st.fallback).max())
            rec = {
                "eb_rel": eb,
                "variant": name,
                "capacity_bytes": float(st.capacity_bytes[0]),
                "moved_bytes_per_device": moved,
                "frame_bytes_per_device": float(np.asarray(st.frame_bytes).mean()),
                "raw_bytes_per_device": raw_bytes,
                "bytes_ratio": raw_bytes / moved,
                "fallback": fb,
                "max_abs_err": float(err),
                "global_bound": bound,
                "measured": t.to_json(),
                "codec": codec,
                "model_ms": {},
            }
            rec["model_ms"] = {
                str(bw): (t_c.median_s + moved * off / (bw * 1e9) + t_d.median_s) * 1e3
                for bw in args.bandwidths
            }
            rec["break_even_gbps"] = break_even(moved, t_c.median_s + t_d.median_s)
            results.append(rec)
            lines.append(
                f"{eb:5.2f} {name:<11} {rec['capacity_bytes']:7.0f} {moved / 1e6:9.2f} "
                f"{raw_bytes / moved:9.2f} {t.median_s * 1e3:8.1f} {fb:8d} "
                + " ".join(f"{v:8.3f}ms" for v in rec["model_ms"].values())
                + f" {rec['break_even_gbps']:8.2f}GB/s"
            )
        # Variable-size (ragged, GPU) exchange: the used frame bytes + int32 byte counts.
        fbytes = float(np.asarray(s.frame_bytes).mean()) + 4 * p * L
        rec = {
            "eb_rel": eb,
            "variant": "variable",
            "moved_bytes_per_device": fbytes,
            "raw_bytes_per_device": raw_bytes,
            "bytes_ratio": raw_bytes / fbytes,
            "codec": codec,
            "measured": None,
            "model_ms": {
                str(bw): (t_c.median_s + fbytes * off / (bw * 1e9) + t_d.median_s) * 1e3
                for bw in args.bandwidths
            },
        }
        rec["break_even_gbps"] = break_even(fbytes, t_c.median_s + t_d.median_s)
        results.append(rec)
        lines.append(
            f"{eb:5.2f} {'variable':<11} {'-':>7} {fbytes / 1e6:9.2f} "
            f"{raw_bytes / fbytes:9.2f} {'-':>8} {'-':>8} "
            + " ".join(f"{v:8.3f}ms" for v in rec["model_ms"].values())
            + f" {rec['break_even_gbps']:8.2f}GB/s"
        )
        lines.append(
            f"      codec on one device: compress {codec['compress_gbps']:.2f} GB/s, "
            f"decompress {codec['decompress_gbps']:.2f} GB/s (of raw float32)"
        )
    print("\n".join(lines))
    out = {
        "env": bu.environment_record({"load_average_1_5_15min": list(os.getloadavg())}),
        "params": {
            "devices": p,
            "tables": args.tables,
            "slots_per_device": L,
            "dim": dim,
            "batch_per_device": B,
            "chunk": [rows, dim],
            "eb_rel": args.eb,
            "bandwidths_gbps": args.bandwidths,
            "spec_margin": args.spec_margin,
            "model": "compress + off_device_bytes / bw + decompress; "
            "off_device = (P-1)/P of the bytes; raw: bytes / bw",
        },
        "raw": {"bytes_per_device": raw_bytes, "measured": t_raw.to_json()},
        "results": results,
        "table": lines,
    }
    path = bu.write_json(out, args.out)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
