"""Half-type chunks at the fixed-rate capacity: overflow and bound-violation counts.

Run: ``python -m bench.codecs.half_type_capacity [--chunks 10000] [--min-eb 0.01 0.03 0.05]``.

For bfloat16 and float16, ``--chunks`` chunks of mixed shapes ([2048, 64], [128, 32], [16, 32],
[64, 8], [3, 5]) and scales (standard normal times 10^U(-3, 3); a ``--band`` share of them narrow
bands away from zero instead, see :func:`band_chunks`), plus the real Terabyte
embedding dumps cast to the type (from ``--data``, when present), are compressed with
``codec="fixed"`` into ``frame_capacity(shape, dtype, "fixed", min_eb, outliers=--outliers)`` at
bounds ``min_eb``, ``1.5 min_eb`` and ``3 min_eb``, each chunk at one of them. Printed per
dtype and ``min_eb``: chunks, overflowed frames (``nbytes < 0``), chunks whose decoded values
miss the bound ``eb * (max - min)`` in float64, and the outliers written. One JSON line per
row with ``--json``. Before the half-step change: 759-1479 outliers per
2048x64 bfloat16 chunk at REL 0.01. 10,000 chunks per row, overflows at REL 0.01 / 0.03 / 0.05
with the half step floored at 0.875 eb_abs: bfloat16 14 / 1 / 1 with ``--band 0`` and
298 / 218 / 203 with ``--band 0.25``, float16 0 / 0 / 0 and 237 / 218 / 205; with the step of
quant.h ``half_step`` that provably leaves no outlier (floor 63/128): 0 everywhere, 0 outliers.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import jax.numpy as jnp
import ml_dtypes
import numpy as np

import jax_lossy_comm as lc
from jax_lossy_comm import frame

SHAPES = (((2048, 64), 1), ((128, 32), 8), ((16, 32), 40), ((64, 8), 40), ((3, 5), 11))
DUMP_NAMES = [f"terabyte_table{t:02d}_iter20_2048x64_f32.bin" for t in (1, 5, 8)]


def band_chunks(rng: np.random.Generator, k: int, shape) -> np.ndarray:
    """float64[k, *shape] narrow bands away from zero: ``a + w * U(0, 1)`` with ``|a|`` in
    ``[2^e, 2^(e+1))`` (e uniform in [-12, 12), either sign) and ``w = 2^e * 2^U(-9, 2.5)``.

    Cast to a half type they fill most of the type's values in the band, so at REL bounds of
    0.01-0.05 the bound is comparable to the spacing of those values (the hard case for the
    fixed-rate code width: each value may need its own code)."""
    e = rng.integers(-12, 12, k).astype(np.float64)
    a = np.where(rng.uniform(-1, 1, k) < 0, -1.0, 1.0) * 2.0**e * rng.uniform(1, 2, k)
    w = 2.0**e * 2.0 ** rng.uniform(-9, 2.5, k)
    return a[:, None, None] + w[:, None, None] * rng.uniform(0, 1, (k, *shape))


def batches(dtype, n_chunks: int, seed: int, data: pathlib.Path, band: float = 0.0):
    """Yields ``(shape, x[k, rows, dim])`` in ``dtype`` until ``n_chunks`` chunks were given;
    a ``band`` share of each batch (rounded down) from :func:`band_chunks`."""
    rng = np.random.default_rng(seed)
    dumps = [
        np.fromfile(data / n, "<f4").reshape(2048, 64) for n in DUMP_NAMES if (data / n).is_file()
    ]
    per_round = sum(k for _, k in SHAPES)
    done = 0
    while done < n_chunks:
        for shape, k in SHAPES:
            k = max(1, min(k, (n_chunks - done) * k // per_round or 1))
            x = rng.standard_normal((k, *shape)) * 10.0 ** rng.uniform(-3, 3, (k, 1, 1))
            if band > 0 and int(band * k):
                x[: int(band * k)] = band_chunks(rng, int(band * k), shape)
            if shape == (2048, 64) and done == 0 and dumps:
                x = np.concatenate([x, np.stack(dumps)])
            done += len(x)
            yield shape, x.astype(dtype)
            if done >= n_chunks:
                return


def run(
    dtype,
    min_eb: float,
    n_chunks: int,
    seed: int,
    data: pathlib.Path,
    room: int = 0,
    band: float = 0.0,
) -> dict:
    n = over = viol = outliers = 0
    for shape, x in batches(dtype, n_chunks, seed, data, band):
        cap = frame.frame_capacity(shape, dtype, "fixed", min_eb, outliers=room)
        eb = np.float32(min_eb) * np.float32([1.0, 1.5, 3.0])[np.arange(len(x)) % 3]
        frames, nbytes = lc.compress(jnp.asarray(x), jnp.asarray(eb), codec="fixed", capacity=cap)
        nb = np.asarray(nbytes)
        y = np.asarray(lc.decompress(frames, nbytes, shape=shape, dtype=dtype), np.float64)
        xf = x.astype(np.float64)
        bound = eb.astype(np.float64) * (xf.max(axis=(1, 2)) - xf.min(axis=(1, 2)))
        ok = nb >= 0
        viol += int((np.abs(y - xf).max(axis=(1, 2))[ok] > bound[ok]).sum())
        over += int((~ok).sum())
        n += len(x)
        outliers += sum(i.n_outliers for i in frame.frame_info(frames, nbytes))
    return {
        "dtype": np.dtype(dtype).name,
        "min_eb": min_eb,
        "outlier_room": room,
        "band": band,
        "chunks": n,
        "overflows": over,
        "violations": viol,
        "outliers": outliers,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.codecs.half_type_capacity",
        description=__doc__.split("\n\n")[0],
    )
    ap.add_argument("--chunks", type=int, default=10_000, help="chunks per dtype and bound")
    ap.add_argument("--min-eb", type=float, nargs="+", default=[0.01, 0.03, 0.05])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--outliers",
        type=int,
        default=0,
        help="outlier room in the capacity (the exchange reserves DEFAULT_OUTLIERS = 16)",
    )
    ap.add_argument(
        "--data",
        type=pathlib.Path,
        default=pathlib.Path(__file__).resolve().parents[2] / "../shared/data/emb_dumps",
        help="folder of the Terabyte embedding dumps (skipped when absent)",
    )
    ap.add_argument(
        "--band",
        type=float,
        default=0.25,
        help="share of narrow-band chunks away from zero (0: normal times a scale only)",
    )
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    a = ap.parse_args(argv)
    for dtype in (ml_dtypes.bfloat16, np.float16):
        for min_eb in a.min_eb:
            r = run(dtype, min_eb, a.chunks, a.seed, a.data, a.outliers, a.band)
            if a.json:
                print(json.dumps(r), flush=True)
            else:
                print(
                    f"{r['dtype']:9s} min_eb {min_eb:<6g} chunks {r['chunks']:6d} "
                    f"overflows {r['overflows']:5d} violations {r['violations']:3d} "
                    f"outliers {r['outliers']}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
