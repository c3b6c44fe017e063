"""The codec benchmark's side-by-side timings and its acceptance targets (``--suite targets``).

``side_by_side`` times, interleaved (``bench_util.time_interleaved``, so the noise of a shared
machine hits both sides alike), the fixed-rate compress, its decompress and a jitted copy each
against the numpy copy (small dumps also as a batch of chunks, ``BATCH_BYTES``), and ``auto``
against the peer (``PEER``); ``check_targets`` checks the codec's targets at REL 0.01 on the
rows of ``codec_bench.run`` and those timings (``RATIO_TARGETS``, ``FIXED_MEMCPY_FRACTION``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bench import bench_util as bu
from bench.codecs import codec_entry

PEER = "quant-codes+zstd-1"  # the strongest simple peer: int8 codes + zstd level 1
# The codec targets at REL 0.01 (minimum compression ratio per dump).
RATIO_TARGETS = {"terabyte_table01": 21.0, "terabyte_table05": 1000.0, "terabyte_table08": 300.0}
FIXED_MEMCPY_FRACTION = 0.25
BATCH_BYTES = 512 << 10  # small dumps are also timed side by side as a batch this large


# --------------------------------------------------------------------------------------------
# Side by side: fixed-rate vs copies, auto vs the peer, timed interleaved
# --------------------------------------------------------------------------------------------
def _jit_copy(xp: Any):
    import jax
    import jax.numpy as jnp

    x = xp[0] if isinstance(xp, tuple) else jax.device_put(xp)
    jcopy = jax.jit(jnp.copy)
    return lambda: jcopy(x)


def _fixed_vs_copy(fixed: codec_entry.Codec, x: np.ndarray, eb_abs: float, budget_s: float):
    xp = fixed.prepare(x)
    blob = bu.block(fixed.compress(xp, eb_abs))
    out: dict[str, Any] = {"rounds": {}}
    for name, fn in (
        ("compress", lambda: fixed.compress(xp, eb_abs)),
        ("decompress", lambda: fixed.decompress(blob, x.shape)),
        ("jit_copy", _jit_copy(xp)),
    ):  # pairwise: each keeps its inputs in cache
        t = bu.time_interleaved({name: fn, "memcpy": x.copy}, budget_s=budget_s / 3)
        out[f"{name}_over_memcpy"] = t["memcpy"].median_s / t[name].median_s
        out[f"{name}_median_s"], out["memcpy_median_s"] = t[name].median_s, t["memcpy"].median_s
        out["rounds"][name] = len(t[name].times_s)
    return out


def paired_fixed_vs_copy(
    fixed: codec_entry.Codec, x: np.ndarray, eb_abs: float, budget_s: float
) -> dict[str, Any]:
    """Fixed-rate compress/decompress, numpy copy and jitted copy of x, timed interleaved.

    A dump smaller than BATCH_BYTES is also timed as that many bytes of copies of itself in one
    call (leading batch dimension), as the exchange compresses tables x peers chunks at once.
    """
    out = _fixed_vs_copy(fixed, x, eb_abs, budget_s)
    if x.nbytes < BATCH_BYTES:
        reps = -(-BATCH_BYTES // x.nbytes)
        batch = np.tile(x[None], (reps, 1, 1))
        out["batched"] = dict(chunks=reps, **_fixed_vs_copy(fixed, batch, eb_abs, budget_s))
    return out


def paired_auto_vs_peer(
    auto: codec_entry.Codec, peer: codec_entry.Codec, x: np.ndarray, eb_abs: float, budget_s: float
) -> dict[str, Any]:
    """``codec="auto"`` and the peer, compress and decompress, each pair timed interleaved."""
    xa, xp = auto.prepare(x), peer.prepare(x)
    blob_a, blob_p = bu.block(auto.compress(xa, eb_abs)), peer.compress(xp, eb_abs)
    out: dict[str, Any] = {}
    for side, fa, fp in (
        ("compress", lambda: auto.compress(xa, eb_abs), lambda: peer.compress(xp, eb_abs)),
        (
            "decompress",
            lambda: auto.decompress(blob_a, x.shape),
            lambda: peer.decompress(blob_p, x.shape),
        ),
    ):
        t = bu.time_interleaved({"auto": fa, "peer": fp}, budget_s=budget_s / 2)
        out[f"{side}_auto_over_peer"] = t["peer"].median_s / t["auto"].median_s
    return out


def side_by_side(
    codecs: Sequence[codec_entry.Codec], x: np.ndarray, eb_abs: float, budget_s: float
) -> dict[str, Any]:
    """The interleaved timings of one (dump, bound) that the codecs present allow."""
    by = {c.name: c for c in codecs if c.available}
    out: dict[str, Any] = {}
    if "jlc-fixed" in by:
        out.update(paired_fixed_vs_copy(by["jlc-fixed"], x, eb_abs, budget_s))
    if "jlc-auto" in by and PEER in by:
        out.update(paired_auto_vs_peer(by["jlc-auto"], by[PEER], x, eb_abs, budget_s))
    return out


def _find(rows, dump, eb_rel, codec):
    for r in rows:
        if (r["dump"], r["eb_rel"], r["codec"], r["status"]) == (dump, eb_rel, codec, "ok"):
            return r
    return None


def _check(dump: str, what: str, value: float, target: float, **kw) -> dict[str, Any]:
    return dict(dump=dump, what=what, value=value, target=target, ok=value >= target) | kw


def check_targets(
    rows: list[dict[str, Any]], paired: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The codec's acceptance targets at REL 0.01, each with the measured value and pass/fail.

    The speed checks use the side-by-side times in `paired` where present, else the ratio of
    the separately timed GB/s.
    """
    checks = []
    side = {p["dump"]: p for p in paired if p["eb_rel"] == 0.01}
    for dump in sorted({r["dump"] for r in rows}):
        auto, peer = _find(rows, dump, 0.01, "jlc-auto"), _find(rows, dump, 0.01, PEER)
        fixed, copy = _find(rows, dump, 0.01, "jlc-fixed"), _find(rows, dump, 0.01, "memcpy")
        if auto is None:
            continue
        if dump in RATIO_TARGETS:
            checks.append(_check(dump, "ratio auto >= target", auto["ratio"], RATIO_TARGETS[dump]))
        if peer:
            checks.append(
                _check(dump, "ratio auto / int8+zstd-1", auto["ratio"] / peer["ratio"], 1.0)
            )
            for d in ("compress", "decompress"):
                pair = side.get(dump, {}).get(f"{d}_auto_over_peer")
                v = pair if pair is not None else auto[f"{d}_gbps"] / peer[f"{d}_gbps"]
                what = f"{d} speed auto / int8+zstd-1" + (" (side by side)" if pair else "")
                checks.append(_check(dump, what, v, 1.0))
        for d in ("compress", "decompress"):
            if f"{d}_over_memcpy" in side.get(dump, {}):
                p = side[dump]
                what = f"{d} speed fixed / memcpy (side by side)"
                checks.append(
                    _check(dump, what, p[f"{d}_over_memcpy"], FIXED_MEMCPY_FRACTION, note=_note(p))
                )
            elif fixed and copy:
                v = fixed[f"{d}_gbps"] / copy[f"{d}_gbps"]
                checks.append(_check(dump, f"{d} speed fixed / memcpy", v, FIXED_MEMCPY_FRACTION))
    for r in rows:
        if r["status"] == "ok" and r["family"] == "jax_lossy_comm" and r["max_err_over_eb"] > 1.0:
            what = f"{r['codec']} bound at REL {r['eb_rel']}"
            checks.append(_check(r["dump"], what, r["max_err_over_eb"], 1.0, ok=False))
    return checks


def _note(p: dict[str, Any]) -> str:
    note = f"jitted copy: {p['jit_copy_over_memcpy']:.3g} x memcpy"
    if "batched" in p:
        b = p["batched"]
        note += (
            f"; {b['chunks']} chunks per call: compress {b['compress_over_memcpy']:.3g}, "
            f"decompress {b['decompress_over_memcpy']:.3g} x memcpy"
        )
    return note
