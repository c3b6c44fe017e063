"""Optional dependencies, imported where they are used.

The library needs only jax, jaxlib and numpy; the trainer's extras (``jax_lossy_comm[train]``:
pyarrow and isal for the Criteo text conversion, pyyaml for YAML configs, ...) and the
benchmarks' (``[bench]``: zstandard) are imported by the function that needs them, so a machine
without one of them (a GPU machine's Python may have no isal and no zstandard) still imports
and trains; only the use of that function fails, with one error naming the extra to install.
"""

from __future__ import annotations

import importlib
import types


class MissingDependencyError(ImportError):
    """An optional package is not installed; the message names the pip extra that has it."""


def import_optional(module: str, package: str, extra: str, needed_for: str) -> types.ModuleType:
    """The module ``module``, imported now, or an error saying what to install.

    Args:
      module: the module's import name, e.g. ``"pyarrow.csv"`` or ``"yaml"``.
      package: the distribution pip installs it from, e.g. ``"pyarrow"`` or ``"pyyaml"``.
      extra: the ``jax_lossy_comm`` extra that lists ``package`` (``"train"``, ``"bench"``).
      needed_for: what needs it, as the start of a sentence ("reading gzip sources").

    Returns:
      The imported module.

    Raises:
      MissingDependencyError: (an ``ImportError``) ``module`` cannot be imported; the message
        names ``package`` and ``pip install 'jax_lossy_comm[extra]'``, the original error is
        its ``__cause__``.

    Examples:
      >>> from jax_lossy_comm.optional_deps import import_optional
      >>> import_optional("json", "json", "train", "reading configs").__name__
      'json'
      >>> import_optional("no_such_module_xyz", "no-such", "train", "reading gzip sources")
      Traceback (most recent call last):
      ...
      jax_lossy_comm.optional_deps.MissingDependencyError: reading gzip sources needs the optional \
package no-such (module no_such_module_xyz), which is not installed: pip install \
'jax_lossy_comm[train]' (or pip install no-such)
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(
            f"{needed_for} needs the optional package {package} (module {module}), which is "
            f"not installed: pip install 'jax_lossy_comm[{extra}]' (or pip install {package})"
        ) from e
