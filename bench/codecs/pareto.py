"""Pareto analysis of the codec benchmark's rows: which codecs no other beats on both axes.

Per real dump at one REL bound, the codecs not dominated in (compression ratio, compress GB/s)
-- among the codecs that honoured the bound on that dump (``bound_ok``), and among all codecs
-- and the verdict for ``jlc-auto`` against the peers. Standard library only; used by the
report's tables (``bench.reports.report``) and its figures (``bench.reports.figures``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

LIBRARY_PREFIX = "jlc-"
AUTO = "jlc-auto"

#: Why a peer can be faster than the library's auto codec (shown in the verdict notes).
FASTER_BECAUSE = {
    "fbgemm-qcomm": "fixed-rate cast/quantization, no range scan, no bound check, no lossless "
    "stage (ratio fixed at 2-7.5x)",
    "cast": "a plain dtype cast (ratio 2-4x, no bound)",
    "lossless": "zstd level 1 on raw float32 bytes finds the repeated rows with one hash pass; "
    "auto also quantizes, verifies every value and builds a dictionary + Huffman",
    "quantization": "fixed-rate codes with no verification pass and no lossless stage",
    "zfp": "ZFP's fixed-accuracy transform codec",
    "sz3": "SZ3's pipeline",
}


def is_library_form(codec: str) -> bool:
    """The library's non-auto forms (jlc-fixed, jlc-dedup, ...): shown, but the library enters
    the front as jlc-auto (auto writes the smallest of these forms per chunk)."""
    return codec.startswith(LIBRARY_PREFIX) and codec != AUTO


def pareto_front(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Which points are Pareto-optimal when both coordinates are maximised.

    Point i is on the front iff no other point j has ``x_j >= x_i`` and ``y_j >= y_i`` with
    at least one strict. Equal points are all on the front. NaN coordinates are never on it.

    Args:
      points: sequence of ``(x, y)`` floats, e.g. ``(compress GB/s, compression ratio)``.

    Returns:
      list of bool, one per point.
    """
    out = []
    for i, (xi, yi) in enumerate(points):
        if math.isnan(xi) or math.isnan(yi):
            out.append(False)
            continue
        dominated = any(
            j != i and xj >= xi and yj >= yi and (xj > xi or yj > yi)
            for j, (xj, yj) in enumerate(points)
            if not (math.isnan(xj) or math.isnan(yj))
        )
        out.append(not dominated)
    return out


def ok_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok"]


def pareto_analysis(
    rows: Sequence[dict[str, Any]], eb_rel: float = 0.01, tiled: bool = False
) -> list[dict[str, Any]]:
    """Per dump at ``eb_rel``: Pareto fronts over (compress GB/s, ratio) and the auto verdict.

    Args:
      rows: ``rows`` of a bench.codecs.codec_bench result.
      eb_rel: the REL bound to analyse.
      tiled: analyse the tilings instead of the real dumps.

    Returns:
      list, one dict per dump: ``dump``, ``front_bounded`` (codecs on the front among the
      peers and jlc-auto that honoured the bound), ``front_bounded_with_forms`` (the same with
      the library's other forms), ``front_all`` (among all that ran, bound or not), ``violations`` (codecs
      over the bound, with max_err/eb and whether they promise a bound), ``auto`` (None if
      jlc-auto did not run, else: ``on_front`` -- not dominated by any bound-honouring peer
      (the library's other forms excluded: auto picks among them), ``bound_ok``, ``ratio``,
      ``compress_gbps``, ``best_ratio`` (highest ratio of all bound-honouring codecs),
      ``dominated_by``, ``faster_peers`` (bound-honouring peers with higher compress GB/s,
      with why), ``higher_ratio_peers``, ``dominated_by_library_forms``).
    """
    out = []
    sel = [
        r
        for r in ok_rows(rows)
        if bool(r.get("tiled")) == tiled and math.isclose(r["eb_rel"], eb_rel, rel_tol=1e-9)
    ]
    for dump in dict.fromkeys(r["dump"] for r in sel):
        rs = [r for r in sel if r["dump"] == dump]
        bounded = [r for r in rs if r["bound_ok"]]
        entrants = [r for r in bounded if not is_library_form(r["codec"])]
        fe = pareto_front([(r["compress_gbps"], r["ratio"]) for r in entrants])
        fb = pareto_front([(r["compress_gbps"], r["ratio"]) for r in bounded])
        fa = pareto_front([(r["compress_gbps"], r["ratio"]) for r in rs])
        entry: dict[str, Any] = {
            "dump": dump,
            "eb_rel": eb_rel,
            "shape": rs[0].get("shape"),
            "front_bounded": [r["codec"] for r, f in zip(entrants, fe) if f],
            "front_bounded_with_forms": [r["codec"] for r, f in zip(bounded, fb) if f],
            "front_all": [r["codec"] for r, f in zip(rs, fa) if f],
            "violations": [
                {
                    "codec": r["codec"],
                    "max_err_over_eb": r["max_err_over_eb"],
                    "error_bounded": r["error_bounded"],
                }
                for r in rs
                if not r["bound_ok"]
            ],
            "auto": None,
        }
        auto = next((r for r in rs if r["codec"] == AUTO), None)
        if auto is not None:
            peers = [r for r in bounded if not r["codec"].startswith(LIBRARY_PREFIX)]
            lib = [
                r for r in bounded if r["codec"].startswith(LIBRARY_PREFIX) and r["codec"] != AUTO
            ]

            def dominates(r):
                return (
                    r["compress_gbps"] >= auto["compress_gbps"]
                    and r["ratio"] >= auto["ratio"]
                    and (r["compress_gbps"] > auto["compress_gbps"] or r["ratio"] > auto["ratio"])
                )

            dom = [r["codec"] for r in peers if dominates(r)]
            entry["auto"] = {
                "on_front": auto["bound_ok"] and not dom,
                "bound_ok": auto["bound_ok"],
                "max_err_over_eb": auto["max_err_over_eb"],
                "ratio": auto["ratio"],
                "compress_gbps": auto["compress_gbps"],
                "decompress_gbps": auto["decompress_gbps"],
                "best_ratio": max(r["ratio"] for r in bounded) if bounded else None,
                "dominated_by": dom,
                "faster_peers": [
                    {
                        "codec": r["codec"],
                        "compress_gbps": r["compress_gbps"],
                        "ratio": r["ratio"],
                        "why": FASTER_BECAUSE.get(r["family"], r["family"]),
                    }
                    for r in sorted(peers, key=lambda r: -r["compress_gbps"])
                    if r["compress_gbps"] > auto["compress_gbps"]
                ],
                "higher_ratio_peers": [r["codec"] for r in peers if r["ratio"] > auto["ratio"]],
                "dominated_by_library_forms": [r["codec"] for r in lib if dominates(r)],
            }
        out.append(entry)
    return out
