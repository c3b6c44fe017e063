"""The codec benchmark's result rows as its tables show them: a row's bound verdict and why a
row has no measurement.

Shared by the codec benchmark's plain-text table (``bench.codecs.codec_bench``) and the
report's Markdown tables (``bench.reports.codec_tables``).
"""

from __future__ import annotations

from typing import Any


def bound_label(row: dict[str, Any]) -> str:
    """`ok` within eb_abs; `exceeds` over it (the codec makes no bound promise); `VIOLATED` an
    error-bounded codec over its bound."""
    return "ok" if row["bound_ok"] else ("VIOLATED" if row["error_bounded"] else "exceeds")


def not_run(row: dict[str, Any], width: int | None = None) -> str:
    """Why a row has no measurement: its status and the skip reason or the error (its first
    `width` characters)."""
    return f"{row['status']}: {(row.get('skip_reason') or row.get('error', ''))[:width]}"
