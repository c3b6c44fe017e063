"""One entry of the benchmarks' codec registry: ``Codec``, a uniform interface to a codec.

``Codec`` holds a codec's callables (compress, decompress, wire bytes) and how it was made;
``unavailable`` is the entry of a codec whose package is missing or broken (with the reason,
``import_reason``); ``package_version`` names a distribution and its version. The entries
themselves are made in ``peer_codecs`` and ``jax_codecs`` and listed by ``registry``.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Callable
from typing import Any

import numpy as np

Shape = tuple[int, ...]


def _identity(x: Any) -> Any:
    return x


def _to_numpy(y: Any) -> np.ndarray:
    return np.asarray(y, dtype=np.float32)


def _len_bytes(blob: Any) -> int:
    return len(blob)


@dataclasses.dataclass(frozen=True)
class Codec:
    """One codec of the benchmarks, with a uniform interface.

    Attributes:
      name: unique short name (table row label), e.g. `sz3-nopred`.
      family: group label: `lossless`, `quantization`, `sz3`, `zfp`, `fbgemm-qcomm`,
        `cast`, `jax_lossy_comm`, `copy`.
      error_bounded: True if the codec promises |x - x_hat| <= eb_abs for every value.
      available: False when its package is missing or broken; then the callables are None.
      skip_reason: why it is unavailable ("" when available).
      package: distribution and version that implements it (e.g. `pysz 1.1.0`).
      compress: `(x_prepared, eb_abs: float) -> blob`; x_prepared is `prepare(x)`.
      decompress: `(blob, shape: tuple) -> y` in the codec's native container.
      nbytes: `(blob) -> int`, the bytes that would travel on the wire.
      prepare: `(x: np.ndarray float32[rows, dim]) -> x_prepared`, untimed (e.g. device_put,
        torch.from_numpy). Default identity.
      to_numpy: `(y) -> np.ndarray float32[rows, dim]`, untimed. Default np.asarray.
      notes: free text for the results (settings used).
    """

    name: str
    family: str
    error_bounded: bool
    available: bool
    skip_reason: str = ""
    package: str = ""
    compress: Callable[[Any, float], Any] | None = None
    decompress: Callable[[Any, Shape], Any] | None = None
    nbytes: Callable[[Any], int] = _len_bytes
    prepare: Callable[[np.ndarray], Any] = _identity
    to_numpy: Callable[[Any], np.ndarray] = _to_numpy
    notes: str = ""

    def roundtrip(self, x: np.ndarray, eb_abs: float) -> tuple[np.ndarray, int]:
        """Compress and decompress `x` (float32[rows, dim]) once.

        Returns:
          (x_hat float32[rows, dim], compressed size in bytes).

        Raises:
          RuntimeError: the codec is unavailable (with its skip_reason).
        """
        if not self.available:
            raise RuntimeError(f"codec {self.name} unavailable: {self.skip_reason}")
        xp = self.prepare(x)
        blob = self.compress(xp, eb_abs)
        y = self.to_numpy(self.decompress(blob, tuple(x.shape)))
        return np.asarray(y, dtype=np.float32).reshape(x.shape), int(self.nbytes(blob))


def unavailable(
    name: str, family: str, error_bounded: bool, reason: str, package: str = "", notes: str = ""
) -> Codec:
    """An entry that is reported as skipped with `reason`."""
    return Codec(
        name=name,
        family=family,
        error_bounded=error_bounded,
        available=False,
        skip_reason=reason,
        package=package,
        notes=notes,
    )


def package_version(dist: str) -> str:
    """``"dist version"`` of an installed distribution, or ``dist`` alone when not installed."""
    try:
        return f"{dist} {importlib.metadata.version(dist)}"
    except importlib.metadata.PackageNotFoundError:
        return dist


def import_reason(exc: BaseException) -> str:
    """Why a codec is unavailable: the exception's type and first line (300 characters at
    most), for ``Codec.skip_reason``."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
