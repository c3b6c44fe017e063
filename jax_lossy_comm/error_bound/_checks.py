"""Field checks shared by the schedules and the config (private to the package)."""

from __future__ import annotations

import math

import numpy as np


def is_int(x) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def is_real(x) -> bool:
    """A real number (Python or numpy), not a bool."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def require(ok: bool, field: str, message: str, value) -> None:
    """Raises ``ValueError("ErrorBoundConfig.<field>: <message>, got <value>")`` unless ok."""
    if not ok:
        raise ValueError(f"ErrorBoundConfig.{field}: {message}, got {value!r}")


def positive(field: str, value) -> None:
    """Requires a finite number > 0."""
    require(
        is_real(value) and math.isfinite(value) and value > 0,
        field,
        "must be a finite number > 0",
        value,
    )
