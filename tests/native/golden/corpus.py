"""Golden-frame corpus: digests of the frames, byte counts, statuses and decoded values that the
compiled codec produces for a fixed set of inputs (every form, dtype, mode and edge case, plus
every real dump), so a refactor of the codec can prove it changed no byte.

The inputs are made from PCG64's raw 64-bit stream with integer and float32 arithmetic only
(no libm calls, no numpy distribution code), so they are the same on every machine and numpy
version. ``frames.json`` beside this file holds one SHA-256 per case group; regenerate it only
when the frame format is meant to change, in a commit that says so::

    python tests/native/golden/corpus.py --write

``tests/native/test_golden_frames.py`` recomputes every digest and compares.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "frames.json"
# the data folder beside the checkout, as tests/support.py finds it ($JLC_DATA_DIR wins)
DUMPS = Path(os.environ.get("JLC_DATA_DIR", HERE.parents[3] / "shared" / "data")) / "emb_dumps"

KINDS = (
    "normal",
    "dup",
    "hot",
    "special",
    "constant",
    "zeros",
    "nan",
    "wide",
    "subnormal",
    "outliers",
    "lowcard",
    "hotnear",
)
CODECS = ("auto", "raw", "fixed", "dedup", "entropy")
DTYPES = ("float32", "bfloat16", "float16")
SHAPES = ((40, 24), (1, 1), (0, 5), (3, 0), (1, 300), (300, 64), (2048, 64))


def _uniform(rng: np.random.Generator, n: int) -> np.ndarray:
    """float32 uniforms in [0, 1) from the top 24 bits of the raw stream (exact)."""
    raw = rng.bit_generator.random_raw(n) if n else np.zeros(0, np.uint64)
    return ((raw >> np.uint64(40)).astype(np.float64) / 2.0**24).astype(np.float32)


def make_chunk(kind: str, rows: int, dim: int, seed: int) -> np.ndarray:
    """float32[rows, dim] test data of one kind (deterministic for a seed)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    n = rows * dim
    # Sum of four uniforms, centred: a bell-shaped law in float32 arithmetic only.
    x = (sum(_uniform(rng, n) for _ in range(4)) - np.float32(2)) * np.float32(1.7)
    x = x.astype(np.float32).reshape(rows, dim)
    if n == 0:
        return x
    pick = lambda m: (rng.bit_generator.random_raw(m) % np.uint64(max(rows, 1))).astype(np.int64)  # noqa: E731
    if kind == "dup":
        x = x[pick(rows) % min(rows, 3)]
    elif kind in ("hot", "hotnear"):
        pool = rows // 8 + 2
        u = _uniform(rng, rows)
        src = (np.float32(pool) * u * u * u).astype(np.int64) % pool
        src[:pool] = np.arange(min(pool, rows))
        x = (x * np.float32(0.05))[src % rows]
        if kind == "hotnear":  # some copies one ulp off: other input rows, the same codes
            bits = x.view(np.uint32)
            mask = (np.add.outer(np.arange(rows), np.arange(dim)) % 5 == 0) & (
                np.arange(rows) >= pool
            )[:, None]
            bits[mask] += np.uint32(1)
    elif kind == "special":
        flat = x.reshape(-1)
        idx = (rng.bit_generator.random_raw(n // 50 + 3) % np.uint64(n)).astype(np.int64)
        for k, i in enumerate(idx):
            flat[i] = (np.nan, np.inf, -np.inf, -0.0)[k % 4]
    elif kind == "constant":
        x[:] = np.float32(1.25)
    elif kind == "zeros":
        x = np.where(np.arange(n).reshape(rows, dim) % 3 == 0, np.float32(-0.0), np.float32(0.0))
    elif kind == "nan":
        x[:] = np.nan
    elif kind == "wide":
        e = (rng.bit_generator.random_raw(n) % np.uint64(120)).astype(np.int64) - 60
        x = (x * np.ldexp(np.float32(1), e.reshape(rows, dim))).astype(np.float32)
    elif kind == "subnormal":  # below 2^-126: no flush to zero anywhere
        x = (x * np.float32(2.0**-130)).astype(np.float32)
    elif kind == "outliers":  # >= 128 outliers per chunk: two-byte outlier count
        x.reshape(-1)[::7] = np.nan
    elif kind == "lowcard":
        x = (
            (rng.bit_generator.random_raw(n) % np.uint64(4)).astype(np.float32) * np.float32(0.25)
        ).reshape(rows, dim)
    return x.astype(np.float32)


def _corrupt(frames: np.ndarray, nbytes: np.ndarray, seed: int):
    """Copies of the frames with single-byte damage (header, body, length), one per frame."""
    rng = np.random.Generator(np.random.PCG64(seed))
    f, nb = frames.copy(), nbytes.copy()
    for c in range(f.shape[0]):
        r = int(rng.bit_generator.random_raw(1)[0])
        n = int(nb[c])
        if n <= 0:
            continue
        if r % 3 == 0:
            f[c, r // 3 % n] ^= np.uint8(1 + (r >> 20) % 255)
        elif r % 3 == 1:
            nb[c] = n - 1
        else:
            f[c, min(r // 3 % 8, n - 1)] ^= np.uint8(0x10)
    return f, nb


def _digest(h, *arrays) -> None:
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())


def unrounded_capacity(jlc, shape, dtype, codec: str, min_error_bound, mode: str) -> int:
    """``frame_capacity`` as it was before it rounded up to a multiple of 16 bytes: the
    capacities the committed digests were made with (frames are hashed with their padding), so
    the cases that take the default capacity pass this one explicitly."""
    rows, dim = shape
    raw = jlc.frame.raw_frame_bytes(rows, dim, dtype)
    if min_error_bound is None or mode != "rel" or codec not in ("auto", "fixed"):
        return raw
    bits = jlc.frame.rel_code_bits(min_error_bound, dtype)
    fixed = jlc.frame.fixed_frame_bytes(rows, dim, bits, dtype)
    return fixed if codec == "fixed" else min(raw, fixed)


def _run_group(
    jlc,
    data: np.ndarray,
    dtype: str,
    mode: str,
    codec: str,
    bounds,
    *,
    capacity=None,
    min_error_bound=None,
    corrupt_seed=0,
) -> str:
    """Compresses ``data [batch, rows, dim]`` and digests frames, sizes, statuses and values."""
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(data).astype(dtype)
    if capacity is None:
        capacity = unrounded_capacity(jlc, data.shape[-2:], x.dtype, codec, min_error_bound, mode)
    # Under jit the bound is traced: negative and non-finite bounds reach the codec.
    enc = jax.jit(
        lambda x, eb: jlc.compress(
            x, eb, mode=mode, codec=codec, capacity=capacity, min_error_bound=min_error_bound
        )
    )
    frames, nbytes = enc(x, jnp.asarray(bounds, jnp.float32))
    shape = data.shape[-2:]
    x_hat, status = jlc.decompress_with_status(frames, nbytes, shape=shape, dtype=x.dtype)
    frames, nbytes = np.asarray(frames), np.asarray(nbytes)
    bad_f, bad_n = _corrupt(frames, nbytes, corrupt_seed)
    bad_status = jlc.frame_status(
        jnp.asarray(bad_f), jnp.asarray(bad_n), shape=shape, dtype=x.dtype
    )
    bad_hat, bad_status2 = jlc.decompress_with_status(
        jnp.asarray(bad_f), jnp.asarray(bad_n), shape=shape, dtype=x.dtype
    )
    h = hashlib.sha256()
    _digest(
        h,
        frames,
        nbytes,
        status,
        np.asarray(x_hat).view(np.uint8),
        bad_status,
        bad_status2,
        np.asarray(bad_hat).view(np.uint8),
    )
    return h.hexdigest()


def cases():
    """Yields ``(name, kwargs)``; each group compresses one batch of chunks of one shape."""
    seed = 1
    for rows, dim in SHAPES:
        big = rows * dim >= 19200
        kinds = ("normal", "hot", "special", "outliers") if big else KINDS
        for dtype in DTYPES:
            if big and dtype != "float32" and (rows, dim) != (2048, 64):
                continue
            for codec in CODECS:
                for mode, bounds in (("rel", (0.01, 0.05, 1e-4)), ("abs", (0.003,))):
                    if mode == "abs" and (big or dtype != "float32"):
                        continue
                    data = np.stack(
                        [
                            make_chunk(k, rows, dim, seed + i)
                            for k in kinds
                            for i in range(len(bounds))
                        ]
                    )
                    eb = np.tile(np.asarray(bounds, np.float32), len(kinds))
                    kw = dict(min_error_bound=0.01) if codec == "fixed" and mode == "rel" else {}
                    if codec == "fixed" and mode == "abs":
                        kw = dict(capacity=int(rows * dim * 2 + 40))
                    yield (
                        f"synthetic {rows}x{dim} {dtype} {mode} {codec}",
                        dict(
                            data=data,
                            dtype=dtype,
                            mode=mode,
                            codec=codec,
                            bounds=eb,
                            corrupt_seed=seed,
                            **kw,
                        ),
                    )
                    seed += 100
    # Small capacities: overflow and the raw fallback.
    for cap in (12, 40, 200, 400):
        for codec in CODECS:
            data = np.stack(
                [
                    make_chunk(k, 32, 16, seed + i)
                    for i, k in enumerate(("special", "hot", "normal"))
                ]
            )
            yield (
                f"capacity {cap} {codec}",
                dict(
                    data=data,
                    dtype="float32",
                    mode="rel",
                    codec=codec,
                    bounds=np.full(3, 0.01, np.float32),
                    capacity=cap,
                    corrupt_seed=seed,
                ),
            )
            seed += 10
    # Negative and non-finite traced bounds store the chunk raw.
    data = np.stack([make_chunk("normal", 16, 8, seed + i) for i in range(4)])
    yield (
        "bad bounds",
        dict(
            data=data,
            dtype="float32",
            mode="rel",
            codec="auto",
            bounds=np.array([-1, np.nan, np.inf, 0], np.float32),
            corrupt_seed=seed,
        ),
    )
    # Real dumps: whole, every codec, every dtype; the exchange shape cut from the Terabyte ones.
    if (DUMPS / "manifest.json").is_file():
        manifest = json.loads((DUMPS / "manifest.json").read_text())
        for e in manifest:
            name = e["file"].split("/")[-1]
            d = np.fromfile(DUMPS / name, "<f4").reshape(e["shape"])
            for dtype in DTYPES:
                for codec in CODECS:
                    kw = dict(min_error_bound=0.01) if codec == "fixed" else {}
                    yield (
                        f"dump {name} {dtype} {codec}",
                        dict(
                            data=np.stack([d, d]),
                            dtype=dtype,
                            mode="rel",
                            codec=codec,
                            bounds=np.array([0.01, 0.05], np.float32),
                            corrupt_seed=seed,
                            **kw,
                        ),
                    )
                    seed += 1
        tb = [
            np.fromfile(DUMPS / e["file"].split("/")[-1], "<f4").reshape(e["shape"])
            for e in manifest
            if e["shape"][1] == 64
        ]
        ex = np.concatenate(tb).reshape(-1, 256, 64)
        ex = np.concatenate([ex] * (26 * 8 // len(ex) + 1))[: 26 * 8]
        for codec in ("auto", "fixed"):
            kw = dict(min_error_bound=0.01) if codec == "fixed" else {}
            yield (
                f"exchange 208x256x64 {codec}",
                dict(
                    data=ex,
                    dtype="float32",
                    mode="rel",
                    codec=codec,
                    bounds=np.full(len(ex), 0.01, np.float32),
                    corrupt_seed=seed,
                    **kw,
                ),
            )


def compute() -> dict[str, str]:
    """Digest of every case group: ``{name: sha256 hex}``."""
    import jax_lossy_comm as jlc

    out = {}
    for name, kw in cases():
        data = kw.pop("data")
        out[name] = _run_group(
            jlc, data, kw.pop("dtype"), kw.pop("mode"), kw.pop("codec"), kw.pop("bounds"), **kw
        )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help=f"write {GOLDEN.name} (format change only)")
    args = p.parse_args(argv)
    got = compute()
    if args.write:
        if not (DUMPS / "manifest.json").is_file():
            sys.exit(f"the real dumps ({DUMPS}) are needed to write the full corpus")
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"wrote {len(got)} digests to {GOLDEN}")
        return 0
    want = json.loads(GOLDEN.read_text())
    bad = [k for k in got if want.get(k) != got[k]]
    print(f"{len(got)} groups, {len(bad)} differ" + "".join(f"\n  {k}" for k in bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
