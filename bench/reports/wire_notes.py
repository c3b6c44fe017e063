"""Committed results whose bfloat16 byte figures count bytes that did not cross.

Before commit fb6bc28 the BF16 codec (``jax_lossy_comm.BF16``: the ``bf16`` exchange
baseline and the ``bf16`` gradient all-reduce) sent its values as bfloat16 through XLA
collectives, and XLA:CPU widens bfloat16 collectives to float32: 4 bytes per value crossed
while the statistics (and so these tables) counted 2. FP16, Int8Rowwise, FP8Rowwise, MX4 and
the frames kept their types; AUC and log loss are unaffected (the widening is exact). The
runs listed here keep their numbers as measured; their pages carry the note of
:func:`bf16_wire_note`. Since fb6bc28 the 16-bit casts cross as their uint16 bits
(``tests/library/test_wire_hlo.py`` reads the compiled collectives), so the counts of a rerun
hold and its page has no note.
"""

from __future__ import annotations

from typing import Any

#: git commits of the committed results measured with the widened bfloat16 wire
#: (train_compare.json, netns.json, fidelity_kaggle.json and fidelity_dcnv2_small.json)
WIDENED_BF16_COMMITS = frozenset(
    {
        "8d0ff5bec6653074a1ea205d4a2cfc0091ce71ba",
        "abf6f0139ff671adfa9313f2d240910d95ea40a5",
        "3a667ff1da",
    }
)
FIX_COMMIT = "fb6bc28"


def widened(result: dict[str, Any] | None) -> bool:
    """Whether ``result`` was measured before the fix (its commit is listed above)."""
    commit = ((result or {}).get("environment") or {}).get("git_commit") or ""
    return any(commit.startswith(c) for c in WIDENED_BF16_COMMITS)


def _flag(flags, name: str) -> str | None:
    flags = list(flags or [])
    return flags[flags.index(name) + 1] if name in flags[:-1] else None


def bf16_parts(run: dict[str, Any]) -> tuple[bool, bool]:
    """``(exchange, all-reduce)``: which of a run's collectives used the BF16 codec (from its
    trainer flags, or a testbed mode's name)."""
    mode = run.get("mode") or ""
    exchange = _flag(run.get("flags"), "--codec") == "bf16" or mode == "bf16"
    allreduce = _flag(run.get("flags"), "--grad-allreduce") == "bf16" or mode.endswith("-ar-bf16")
    return exchange, allreduce


def _mib(b: float) -> str:
    return f"{b / 2**20:.3f} MiB"


def bf16_wire_note(result: dict[str, Any] | None, runs: list[dict[str, Any]]) -> str:
    """The note under a table of ``result`` (empty when the run is not affected): per affected
    run (``runs``: dicts with ``name`` or ``mode`` and the byte fields), what was counted and
    what crossed (twice the BF16 codec's bytes)."""
    if not widened(result):
        return ""
    parts, seen = [], set()
    for r in runs:
        name = r.get("name") or r.get("mode")
        exchange, allreduce = bf16_parts(r)
        if name in seen or not (exchange or allreduce):
            continue
        seen.add(name)
        if exchange:
            moved = r["moved_bytes_per_step"]
            parts.append(
                f"`{name}`'s exchange counted {_mib(moved)} per step (raw / moved "
                f"{r['raw_bytes_per_step'] / moved:.2f}x), {_mib(2 * moved)} crossed (raw / "
                f"moved {r['raw_bytes_per_step'] / (2 * moved):.2f}x)"
            )
        if allreduce:
            moved = r["allreduce_moved_bytes_per_step"]
            parts.append(
                f"`{name}`'s gradient all-reduce counted {_mib(moved)} per step, "
                f"{_mib(2 * moved)} crossed"
            )
    if not parts:
        return ""
    return (
        "**BF16 bytes counted, not crossed:** this run sent the BF16 codec's "
        "bfloat16 values through XLA:CPU collectives, which widen bfloat16 to float32 (4 bytes "
        "per value crossed, 2 counted): "
        + "; ".join(parts)
        + ". Step times and link bytes are those of the float32 wire; AUC and log loss are "
        f"unaffected. Since {FIX_COMMIT} the 16-bit casts cross as uint16 (2 bytes per value); "
        "not rerun."
    )
