"""What differs between the JAX releases the library supports, in one place.

Supported: jax/jaxlib 0.10.2 (the newest on Python 3.11) up to 0.12.x (Python 3.12-3.13; the
GPU checks ran 0.11.2). Public API only, never ``jax._src``. Checked on both ends (CI):

* The Varying -> Invariant all-gather: ``jax.lax.all_gather(x, axis, to="invarying")`` in
  every supported release (0.10.2 already has the ``to`` keyword); the private
  ``jax._src.lax.parallel.all_gather_invariant`` that older code used is gone in 0.12.
* ``jax.custom_derivatives.zero_from_primal(..., symbolic_zeros=True)`` (typed zero tangents
  of the exchange's statistics, varying or not) exists in both.
* Differences found only in tests (XLA behaviour, not API) stay in the tests.

A release outside the range imports with a ``RuntimeWarning`` (:func:`jax_version_problem`).
"""

from __future__ import annotations

import re
import warnings

import jax

#: Oldest supported jax release, and the first release not yet checked.
OLDEST_JAX = (0, 10, 2)
FIRST_UNCHECKED_JAX = (0, 13)


def _release(version: str) -> tuple[int, ...]:
    """``"0.12.0.1"`` -> ``(0, 12, 0)``: the leading major.minor.patch numbers."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if m is None:
        raise ValueError(f"not a jax version: {version!r}")
    return tuple(int(g) for g in m.groups(default="0"))


def jax_version_problem(version: str) -> str | None:
    """Why ``version`` of jax is outside the supported range, or None when inside it.

    Args:
      version: a jax version string (``jax.__version__``).

    Returns:
      None for ``0.10.2 <= version < 0.13``; else one sentence for a ``RuntimeWarning``.

    Examples:
      >>> jax_version_problem("0.12.0.1") is None and jax_version_problem("0.10.2") is None
      True
      >>> jax_version_problem("0.13.0")
      'jax_lossy_comm: jax 0.13.0 is newer than the releases it was checked with (0.10.2 to 0.12.x); report problems with the versions in use'
    """
    release = _release(version)
    if release < OLDEST_JAX:
        return (
            f"jax_lossy_comm: jax {version} is older than the oldest supported release "
            "(0.10.2): upgrade with `pip install -U jax jaxlib`"
        )
    if release >= FIRST_UNCHECKED_JAX:
        return (
            f"jax_lossy_comm: jax {version} is newer than the releases it was checked with "
            "(0.10.2 to 0.12.x); report problems with the versions in use"
        )
    return None


def all_gather_invariant(x, axis_name):
    """Gathers ``x[...]`` from every device of ``axis_name`` into ``[P, ...]``, the result
    typed invariant over the axis (every device holds the same), inside ``shard_map``.

    ``jax.lax.all_gather(x, axis_name, to="invarying")``: its transpose is a slice, not a
    reduce-scatter (no ``psum_scatter``, which gloo gets wrong on large chunks).
    """
    return jax.lax.all_gather(x, axis_name, to="invarying")


_problem = jax_version_problem(jax.__version__)
if _problem:
    warnings.warn(_problem, RuntimeWarning, stacklevel=2)
