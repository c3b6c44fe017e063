"""GPU codec benchmark: compress / decompress GB/s of raw float32 per codec form, beside a
device-to-device copy of the same buffer measured in the same run.

Cases:
  * each real embedding dump (../shared/data/emb_dumps) tiled to 256 MB as a batch of whole
    dump-sized chunks ``[copies, rows, dim]`` (one launch covers all of them), and
  * the DLRM exchange shape ``[26 * 8, 256, 64]`` (26 tables x 8 peers), its chunks cut from the
    Terabyte dumps (13.6 MB: it stays in the H200's 60 MB L2 when rerun on the same buffer), and
  * the same chunks tiled to at least 512 MiB (``--large-mb``), beyond L2, so the codec and the
    copy beside it stream from HBM.
Without the dumps (no shared data on the machine) synthetic data of the same shapes is used and
the JSON says so.

Why apart from ``bench.codecs.codec_bench`` (the CPU benchmark of the registry's codecs, one call per
timing): a GPU call of a few microseconds is dominated by launch and dispatch, so this one
times many side-effecting FFI calls inside one jitted function, on batches of hundreds of MB,
against a device copy. It runs the registry's library forms (``jax_codecs.LIBRARY_FORMS``, plus
``raw``) and the shared timing helpers of ``bench.bench_util``.

Timing: each measured call is issued ``repeats`` times inside one jitted function (the FFI calls
marked as having side effects, so XLA neither merges nor drops them), so launch and dispatch
overhead is amortised; ``bench_util.time_fn`` takes the median of several such calls after a
warm-up. The copy baseline is a negation of the buffer (one read and one write of every byte,
the least a copy does), repeated the same way with optimisation barriers between repeats so
that XLA cannot fuse them. GB/s is always raw float32 bytes of the chunk batch divided by the
time of one call (1 GB = 1e9 bytes); ``fraction_of_copy`` divides by the copy's GB/s.

Usage::

    python -m bench.codecs.codec_bench_gpu --out bench/results            # all cases, all forms
    python -m bench.codecs.codec_bench_gpu --quick --json /tmp/bench.json # gpu_check.sh's quick run

``--quick`` (what ``bench/gpu_check.sh`` runs, about a minute on an H200): the forms "fixed"
and "auto" only (unless ``--forms`` says otherwise), on the DLRM exchange shape, its 512 MiB
tiling and on every
real dump, tiled to 64 MiB instead of 256 (unless ``--tile-mb`` says otherwise), each beside the
device copy of the same buffer. Writes ``codec_bench_gpu_<device>.json`` into ``--out``, or the
file ``--json`` (rewritten after every case, with ``complete`` false until the last). Targets (H200): fixed-rate compress >= 1000 GB/s and
decompress >= 1500 GB/s; the max-ratio form ("entropy") >= 300 GB/s both ways. Each form's
entry also records the frame forms it produced (raw / fixed-rate / dictionary / Huffman codes /
Huffman index counts over up to 1024 chunks): the dictionary forms run the parallel
dedup + Huffman kernels only where those frames win.

References:
  Feng et al., "Accelerating Communication in Deep Learning Recommendation Model Training with
  Dual-Level Adaptive Lossy Compression", SC24, arXiv 2407.04272 (REL error bound, dumps).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jax_lossy_comm as jlc
from bench import bench_util as bu
from bench.codecs.jax_codecs import LIBRARY_FORMS
from jax_lossy_comm import implementations
from jax_lossy_comm.frame import CODECS, MODES, frame_capacity, frame_info

FORMS = ("raw", *LIBRARY_FORMS)
QUICK_FORMS = ("fixed", "auto")
QUICK_TILE_BYTES = 64 << 20
TARGETS_GBPS = {
    "fixed": {"compress": 1000.0, "decompress": 1500.0},
    "entropy": {"compress": 300.0, "decompress": 300.0},
}
TILE_BYTES = 256 << 20
LARGE_BYTES = 512 << 20  # the exchange's chunks tiled beyond the 60 MB L2 of an H200
DLRM_SHAPE = (26 * 8, 256, 64)


# ------------------------------------------------------------------------------ FFI calls
def _compress_call(shape, capacity, codec, mode="rel"):
    batch = shape[:-2]
    call = jax.ffi.ffi_call(
        "lc_compress",
        (
            jax.ShapeDtypeStruct(batch + (capacity,), jnp.uint8),
            jax.ShapeDtypeStruct(batch, jnp.int32),
        ),
        has_side_effect=True,
    )
    return lambda x, eb: call(x, eb, mode=np.int32(MODES[mode]), codec=np.int32(CODECS[codec]))


def _decompress_call(shape):
    batch = shape[:-2]
    call = jax.ffi.ffi_call(
        "lc_decompress",
        (jax.ShapeDtypeStruct(shape, jnp.float32), jax.ShapeDtypeStruct(batch, jnp.int32)),
        has_side_effect=True,
    )
    return lambda f, nb: call(f, nb)


def _repeat(fn, repeats):
    """jit(args -> fn(args) issued `repeats` times); returns the last result."""

    def body(*args):
        out = None
        for _ in range(repeats):
            out = fn(*args)
        return out

    return jax.jit(body)


def _copy_repeat(repeats):
    def body(x):
        for _ in range(repeats):
            x = jax.lax.optimization_barrier(-x)
        return x

    return jax.jit(body)


def _time_per_call(make, args, raw_bytes, min_total_s=0.05, max_repeats=50):
    """Seconds per call of make(repeats)(*args): repeats chosen so one timed call is long enough."""
    one = make(1)
    bu.block(one(*args))  # compile + warm
    t0 = time.perf_counter()
    bu.block(one(*args))
    t1 = time.perf_counter() - t0
    repeats = int(min(max_repeats, max(1, math.ceil(min_total_s / max(t1, 1e-6)))))
    fn = make(repeats)
    timing = bu.time_fn(lambda: fn(*args), warmup=1, repeats=5, min_repeats=3, budget_s=2.0)
    per_call = timing.median_s / repeats
    return per_call, repeats, timing


# ------------------------------------------------------------------------------ cases
def load_cases(tile_bytes: int = TILE_BYTES, large_bytes: int = LARGE_BYTES):
    """``([(name, float32 array, meta)], synthetic)``: the exchange shape, its chunks tiled to
    at least ``large_bytes`` (0: no such case), every dump tiled to ``tile_bytes``."""
    cases, synthetic = [], False
    try:
        dumps = list(bu.iter_dumps())
    except FileNotFoundError:
        dumps, synthetic = [], True
    rng = np.random.default_rng(0)
    if synthetic:  # same shapes as the real dumps, Gaussian values, some repeated rows
        dumps = []
        for name, (rows, dim) in (
            ("synthetic_kaggle", (128, 32)),
            ("synthetic_terabyte", (2048, 64)),
        ):
            a = rng.standard_normal((rows, dim)).astype(np.float32) * 0.05
            a[::3] = a[0]
            dumps.append(bu.Dump(name=name, array=a, meta={"synthetic": True}))
    tera = [d for d in dumps if d.array.shape[1] == 64] or dumps
    # DLRM exchange shape: [26 tables * 8 peers, 256 rows, 64 dims], rows cut from the dumps.
    chunks = []
    for k in range(DLRM_SHAPE[0]):
        src = tera[k % len(tera)].array
        if src.shape[1] != DLRM_SHAPE[2]:
            src = np.resize(src, (src.shape[0], DLRM_SHAPE[2]))
        r0 = (k * DLRM_SHAPE[1]) % max(1, src.shape[0] - DLRM_SHAPE[1] + 1)
        c = src[r0 : r0 + DLRM_SHAPE[1]]
        if c.shape[0] < DLRM_SHAPE[1]:
            c = np.resize(c, DLRM_SHAPE[1:])
        chunks.append(c)
    cases.append(
        (
            "dlrm_exchange_26x8x256x64",
            np.stack(chunks).astype(np.float32),
            {"source": "terabyte dumps" if not synthetic else "synthetic"},
        )
    )
    if large_bytes > 0:
        exchange = cases[0][1]
        copies = max(1, math.ceil(large_bytes / exchange.nbytes))
        cases.append(
            (
                f"dlrm_exchange_x{copies}",
                np.concatenate([exchange] * copies),
                {"source": cases[0][2]["source"], "copies": copies, "beyond_l2": True},
            )
        )
    for d in dumps:
        copies = max(1, math.ceil(tile_bytes / d.array.nbytes))
        x = np.broadcast_to(d.array, (copies,) + d.array.shape).copy()
        cases.append(
            (
                f"{d.name}_x{copies}",
                x,
                {"dump_shape": list(d.array.shape), "copies": copies, "synthetic": synthetic},
            )
        )
    return cases, synthetic


def bench_case(name, x_np, meta, dev, eb_rel, forms):
    shape = tuple(x_np.shape)
    rows, dim = shape[-2:]
    raw_bytes = x_np.nbytes
    x = jax.device_put(x_np, dev)
    eb = jax.device_put(np.full(shape[:-2], eb_rel, np.float32), dev)
    res = {"case": name, "shape": list(shape), "raw_bytes": raw_bytes, "eb_rel": eb_rel, **meta}
    per_copy, reps, _ = _time_per_call(_copy_repeat, (x,), raw_bytes)
    res["copy"] = {
        "seconds": per_copy,
        "gbps": bu.gbps(raw_bytes, per_copy),
        "repeats": reps,
        "how": "negation of the buffer (read + write), XLA kernel",
    }
    copy_gbps = res["copy"]["gbps"]
    print(f"{name}: {raw_bytes / 1e6:.1f} MB, copy {copy_gbps:.0f} GB/s", flush=True)
    res["forms"] = {}
    n = rows * dim
    for form in forms:
        if form == "fixed":
            cap = frame_capacity(
                (rows, dim), np.float32, "fixed", eb_rel, outliers=max(16, n // 1024)
            )
        else:
            cap = frame_capacity((rows, dim), np.float32, form)
        comp = _compress_call(shape, cap, form)
        t_c, reps_c, _ = _time_per_call(lambda r: _repeat(comp, r), (x, eb), raw_bytes)
        frames, nbytes = jax.block_until_ready(jax.jit(comp)(x, eb))
        dec = _decompress_call(shape)
        t_d, reps_d, _ = _time_per_call(lambda r: _repeat(dec, r), (frames, nbytes), raw_bytes)
        y, status = jax.jit(dec)(frames, nbytes)
        nb = np.asarray(nbytes)
        st = np.asarray(status)
        # Correctness of what was timed: bound per chunk (finite data), status.
        y_np = np.asarray(y)
        infos = frame_info(np.asarray(frames[:64]), nb[:64])
        err_ok = True
        for c, info in enumerate(infos):
            if info.form == "quantized":
                err = np.abs(
                    x_np.reshape(-1, rows, dim)[c].astype(np.float64)
                    - y_np.reshape(-1, rows, dim)[c].astype(np.float64)
                ).max()
                err_ok &= bool(err <= info.eb_abs)
        used = int(nb[nb > 0].sum())
        # Which frame forms the codec produced (auto picks per chunk), over up to 1024 chunks.
        mix = {
            "raw": 0,
            "fixed_rate": 0,
            "dictionary": 0,
            "huffman_codes": 0,
            "huffman_index": 0,
            "overflow": 0,
        }
        flat_f = np.asarray(frames).reshape(-1, cap)
        for i in frame_info(flat_f[:1024], nb.reshape(-1)[:1024]):
            if i.form == "overflow":
                mix["overflow"] += 1
            elif i.form == "raw":
                mix["raw"] += 1
            elif not (i.dedup or i.codes_huffman):
                mix["fixed_rate"] += 1
            mix["dictionary"] += int(i.dedup)
            mix["huffman_codes"] += int(i.codes_huffman)
            mix["huffman_index"] += int(i.index_huffman)
        f = {
            "capacity_bytes": cap,
            "compress_s": t_c,
            "decompress_s": t_d,
            "compress_gbps": bu.gbps(raw_bytes, t_c),
            "decompress_gbps": bu.gbps(raw_bytes, t_d),
            "compress_fraction_of_copy": bu.gbps(raw_bytes, t_c) / copy_gbps,
            "decompress_fraction_of_copy": bu.gbps(raw_bytes, t_d) / copy_gbps,
            "compression_ratio": raw_bytes / used if used else None,
            "overflowed_chunks": int((nb < 0).sum()),
            "bad_status_chunks": int((st != 0).sum()),
            "error_bound_ok_first_64": err_ok,
            "repeats": [reps_c, reps_d],
            "frame_forms": mix,
        }
        if form in TARGETS_GBPS:
            tg = TARGETS_GBPS[form]
            f["targets_gbps"] = tg
            f["meets_targets"] = (
                f["compress_gbps"] >= tg["compress"] and f["decompress_gbps"] >= tg["decompress"]
            )
        res["forms"][form] = f
        print(
            f"  {form:8s} compress {f['compress_gbps']:9.1f} GB/s ({f['compress_fraction_of_copy']:.2f} of copy)"
            f"  decompress {f['decompress_gbps']:9.1f} GB/s ({f['decompress_fraction_of_copy']:.2f})"
            f"  ratio {f['compression_ratio'] or float('nan'):.2f}  overflow {f['overflowed_chunks']}"
            f"  status!=0 {f['bad_status_chunks']}  bound ok {err_ok}  forms {mix}",
            flush=True,
        )
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m bench.codecs.codec_bench_gpu", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", default=str(bu.RESULTS_DIR), help="folder for the JSON result")
    ap.add_argument("--eb", type=float, default=0.01, help="relative error bound (REL mode)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="forms fixed and auto, dumps tiled to 64 MiB (each unless given)",
    )
    ap.add_argument(
        "--forms",
        default=None,
        help=f"codec forms, comma separated (default {','.join(FORMS)}; "
        f"quick: {','.join(QUICK_FORMS)})",
    )
    ap.add_argument(
        "--tile-mb",
        type=float,
        default=None,
        help="size the dumps are tiled to, MiB (default 256; quick: 64)",
    )
    ap.add_argument(
        "--large-mb",
        type=float,
        default=LARGE_BYTES / 2**20,
        help="the exchange shape's chunks tiled to this size, MiB, beyond L2 (0: no such case)",
    )
    ap.add_argument("--json", default=None, help="the result's path (default: in --out)")
    ap.add_argument(
        "--allow-cpu",
        action="store_true",
        help="run on the CPU when there is no GPU "
        "(a dry run of the script; the figures mean nothing for the GPU)",
    )
    args = ap.parse_args(argv)
    try:
        dev = jax.devices("gpu")[0]
    except RuntimeError:
        if not args.allow_cpu:
            print(
                "codec_bench_gpu: no GPU visible to JAX; nothing measured (use --allow-cpu for "
                "a dry run)",
                file=sys.stderr,
            )
            return 2
        dev = jax.devices("cpu")[0]
    impl = implementations()
    if impl["cpu"] != "compiled":
        print("codec_bench_gpu: the jax_lossy_comm extension is not built", file=sys.stderr)
        return 2
    if dev.platform == "gpu" and impl["gpu"] != "compiled":
        print("codec_bench_gpu: the extension was built without CUDA handlers", file=sys.stderr)
        return 2
    # The raw ffi_calls timed below need the handlers registered: the library registers them at
    # its first codec call.
    jax.block_until_ready(jlc.compress(jax.device_put(np.zeros((1, 2, 2), np.float32), dev), 0.01))
    forms_arg = args.forms or ",".join(QUICK_FORMS if args.quick else FORMS)
    forms = [f for f in forms_arg.split(",") if f]
    tile_mb = args.tile_mb or (QUICK_TILE_BYTES if args.quick else TILE_BYTES) / 2**20
    tile_bytes = int(tile_mb * 2**20)
    cases, synthetic = load_cases(tile_bytes, int(args.large_mb * 2**20))
    results = []
    rec = bu.environment_record(
        {
            "benchmark": "codec_bench_gpu",
            "device": str(dev),
            "device_kind": getattr(dev, "device_kind", None),
            "synthetic_data": synthetic,
            "eb_rel": args.eb,
            "tile_bytes": tile_bytes,
            "targets_gbps": TARGETS_GBPS,
            "forms": forms,
            "quick": args.quick,
            "cases": [c[0] for c in cases],
        }
    )
    kind = str(getattr(dev, "device_kind", dev.platform)).replace(" ", "_")
    out = Path(args.json) if args.json else Path(args.out) / f"codec_bench_gpu_{kind}.json"
    with jax.default_device(dev):
        for name, x, meta in cases:
            results.append(bench_case(name, x, meta, dev, args.eb, forms))
            rec["results"] = results  # written after every case: a time limit keeps what ran
            rec["complete"] = len(results) == len(cases)
            path = bu.write_json(rec, out)
    print(f"wrote {path}")
    for r in results:  # one summary line per case and form with a target
        for form, tg in TARGETS_GBPS.items():
            f = r["forms"].get(form)
            if f:
                print(
                    f"target {r['case']} {form}: compress {f['compress_gbps']:.0f} / {tg['compress']:.0f} GB/s, "
                    f"decompress {f['decompress_gbps']:.0f} / {tg['decompress']:.0f} GB/s: "
                    f"{'met' if f['meets_targets'] else 'NOT met'}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
