"""Bytes the packed path moves per destination on the real embedding dumps: static chunks
(this checkout's ``wire.packed_chunks``) beside the size buckets of an earlier revision.

The dumps of ``../shared/data/emb_dumps`` (Kaggle: 2 tables of [128, 32]; Terabyte: 3 tables
of [2048, 64], float32) are cut into one chunk of ``rows / P`` rows per destination, as one
table owner's exchange sends them, and compressed with ``FrameCodec(min_error_bound=0.01)`` at
REL 0.01 / 0.03 / 0.05. ``need`` = ``4 * tables`` + the largest destination's frame bytes;
recorded: the bucket the revision's ``packed_buckets`` picks for it, the bytes of the chunks
``chunk_counts`` picks, and how many collectives those chunks take. Bytes per destination.

Run from the repository root::

    python -m bench.training.packed_padding --baseline f8757d1 --out bench/results/packed_padding.json

References: Feng et al., SC24, arXiv 2407.04272, sec. 3 (the exchange; the dumps are theirs).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import jax_lossy_comm as jlc
from bench import bench_util as bu
from jax_lossy_comm import wire

DUMPS = bu.REPO_ROOT.parent / "shared" / "data" / "emb_dumps"
SETS = {
    "kaggle": ((5, 8), (128, 32)),
    "terabyte": ((1, 5, 8), (2048, 64)),
}


def _baseline_buckets(rev: str):
    """``packed_buckets`` of ``jax_lossy_comm/wire.py`` at git revision ``rev``."""
    src = subprocess.run(
        ["git", "-C", str(bu.REPO_ROOT), "show", f"{rev}:jax_lossy_comm/wire.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "baseline_wire.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location("baseline_wire", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    return mod.packed_buckets


def measure(buckets_of) -> list[dict]:
    rows = []
    for name, (tables, shape) in SETS.items():
        iter_rows, dim = shape
        tabs = [
            np.fromfile(DUMPS / f"{name}_table{t:02d}_iter20_{iter_rows}x{dim}_f32.bin", "<f4")
            for t in tables
        ]
        tabs = [t.reshape(shape) for t in tabs]
        t_ = len(tabs)
        for p in (8, 16, 64):
            r = iter_rows // p
            codec = jlc.FrameCodec(min_error_bound=0.01)
            cap = codec.capacity_bytes((r, dim), np.float32, dense=True)
            chunks = jnp.asarray(np.stack([t.reshape(p, r, dim) for t in tabs], 1))
            for eb in (0.01, 0.03, 0.05):
                _, nb = codec.encode(chunks, jnp.full((p, t_), eb, jnp.float32), cap)
                need = int(4 * t_ + np.maximum(np.asarray(nb), 0).sum(1).max())
                b = buckets_of(t_, cap)
                old = b[min(int(np.sum(np.asarray(b) < need)), len(b) - 1)]
                ch = wire.packed_chunks(t_, cap)
                cnt = np.asarray(wire.chunk_counts(ch, jnp.int32(need)))
                new = int(cnt @ np.asarray(ch))
                rows.append(
                    dict(
                        dataset=name,
                        devices=p,
                        error_bound=eb,
                        tables=t_,
                        capacity=cap,
                        need=need,
                        bucket_bytes=int(old),
                        chunk_bytes=new,
                        chunk_over_bucket=new / old,
                        chunk_collectives=int(cnt.sum()),
                    )
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="git revision with packed_buckets")
    ap.add_argument("--out", type=Path, help="JSON result file")
    args = ap.parse_args(argv)
    rows = measure(_baseline_buckets(args.baseline))
    for r in rows:
        print(json.dumps(r))
    if args.out:
        result = {"benchmark": "packed_padding", "baseline": args.baseline, "rows": rows}
        result["env"] = bu.environment_record()
        bu.write_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
