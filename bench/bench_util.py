"""Shared helpers for the benchmarks in bench/: timing, real dumps, tiling, environment record.

One place for these so that every benchmark (peer codecs, the library codec, the exchange,
training) times, loads and records the same way. This module imports only the standard
library and numpy at import time; JAX and torch are touched only if the caller already
imported them (or asks for them), so `set_single_thread()` can run before they start.

Typical use::

    from bench import bench_util as bu
    bu.set_single_thread()                      # before importing jax / torch
    for dump in bu.iter_dumps():                # real DLRM embedding dumps
        x = dump.array                          # float32[rows, dim]
        eb_abs = bu.eb_abs_from_rel(x, 0.01)    # REL -> absolute error bound
        t = bu.time_fn(lambda: f(x))            # warm-up, median of repeats
        print(bu.gbps(x.nbytes, t.median_s))    # GB/s of raw float32

References:
  Feng et al., "Accelerating Communication in Deep Learning Recommendation Model Training
  with Dual-Level Adaptive Lossy Compression", SC24, arXiv 2407.04272 (REL error bound,
  the embedding dumps in ../shared/data/emb_dumps).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
"""Root of the jax_lossy_comm checkout (the folder holding bench/)."""

DEFAULT_DATA_DIR = REPO_ROOT.parent / "shared" / "data"
"""../shared/data beside the checkout; override with the JLC_DATA_DIR environment variable."""

RESULTS_DIR = REPO_ROOT / "bench" / "results"
"""Where benchmarks write their JSON results."""

# Packages whose versions go into every environment record.
_VERSIONED_PACKAGES = (
    "numpy",
    "jax",
    "jaxlib",
    "ml_dtypes",
    "zstandard",
    "pysz",
    "zfpy",
    "torch",
    "fbgemm-gpu-cpu",
    "fbgemm-gpu",
    "jax_lossy_comm",
)

_THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
_XLA_SINGLE_THREAD_FLAGS = ("--xla_cpu_multi_thread_eigen=false", "intra_op_parallelism_threads=1")


# --------------------------------------------------------------------------------------------
# Threads
# --------------------------------------------------------------------------------------------
def set_single_thread() -> dict[str, str]:
    """Ask numpy/BLAS, OpenMP (SZ3, ZFP), XLA:CPU and torch to use one thread.

    Environment variables only take effect in libraries not yet loaded, so call this before
    importing jax, torch or other native peers (XLA reads XLA_FLAGS when its first backend
    starts). torch, if already imported, is also set with `torch.set_num_threads(1)`, so call
    it again after importing torch. Idempotent. OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are left
    as they are.

    Returns:
      dict of the thread-related environment variables as now set (for the JSON record).
    """
    for var in _THREAD_ENV:
        os.environ[var] = "1"
    flags = os.environ.get("XLA_FLAGS", "").split()
    for flag in _XLA_SINGLE_THREAD_FLAGS:
        key = flag.split("=")[0]
        flags = [f for f in flags if f.split("=")[0] != key]
        flags.append(flag)
    os.environ["XLA_FLAGS"] = " ".join(flags)
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.set_num_threads(1)
        except Exception:  # noqa: BLE001 - a broken torch must not stop a benchmark
            pass
    return {k: os.environ[k] for k in (*_THREAD_ENV, "XLA_FLAGS")}


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------
def block(out: Any) -> Any:
    """Wait until `out` is computed: `jax.block_until_ready` on JAX arrays (any pytree).

    numpy arrays, bytes and CPU torch tensors are already complete; they pass through.
    """
    if isinstance(out, (np.ndarray, bytes)):  # synchronous: no pytree walk inside timings
        return out
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            return jax.block_until_ready(out)
        except Exception:  # noqa: BLE001 - not a pytree of arrays: nothing to wait for
            return out
    return out


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock times of one function, warm-up excluded.

    Attributes:
      median_s: median of the timed repeats, seconds.
      min_s: fastest repeat, seconds.
      times_s: every timed repeat, seconds, in order.
      warmup: number of untimed warm-up calls (the first one includes any jit compile).
    """

    median_s: float
    min_s: float
    times_s: tuple[float, ...]
    warmup: int

    def to_json(self) -> dict[str, Any]:
        return {
            "median_s": self.median_s,
            "min_s": self.min_s,
            "repeats": len(self.times_s),
            "warmup": self.warmup,
            "times_s": list(self.times_s),
        }


def time_fn(
    fn: Callable[[], Any],
    *,
    warmup: int = 2,
    repeats: int = 7,
    min_repeats: int = 3,
    budget_s: float = 3.0,
) -> Timing:
    """Time `fn()`: `warmup` untimed calls, then up to `repeats` timed ones; median.

    Every call's result goes through `block()` (JAX: `block_until_ready`) inside the timed
    region, so asynchronous dispatch is not mistaken for speed. Compile time is excluded by
    the warm-up (at least one warm-up call is made). Timed repeats stop early once `budget_s`
    seconds have been spent on them and at least `min_repeats` were made, so slow codecs on
    large inputs stay affordable.

    Args:
      fn: callable with no arguments; close over prepared inputs (device arrays etc.).
      warmup: untimed calls before timing (>= 1 is enforced).
      repeats: maximum number of timed calls.
      min_repeats: minimum number of timed calls, whatever the budget.
      budget_s: seconds of timed calls after which no further repeats start.

    Returns:
      Timing with the median, min and all times in seconds.
    """
    for _ in range(max(1, warmup)):
        block(fn())
    times: list[float] = []
    spent = 0.0
    for i in range(max(1, repeats)):
        if i >= min_repeats and spent >= budget_s:
            break
        t0 = time.perf_counter()
        block(fn())
        dt = time.perf_counter() - t0
        times.append(dt)
        spent += dt
    return Timing(
        median_s=statistics.median(times),
        min_s=min(times),
        times_s=tuple(times),
        warmup=max(1, warmup),
    )


def time_interleaved(
    fns: dict[str, Callable[[], Any]], *, rounds: int = 300, budget_s: float = 3.0, warmup: int = 3
) -> dict[str, Timing]:
    """Time several functions side by side: each round calls every one once, in turn.

    On a shared, noisy machine a slow spell then hits all of them alike, so ratios of their
    medians are steadier than those of functions timed one after the other.

    Args:
      fns: name -> callable with no arguments (results go through `block()`).
      rounds: maximum number of rounds.
      budget_s: seconds after which no further round starts (at least 5 rounds are made).
      warmup: untimed rounds first (>= 1; the first includes any jit compile).

    Returns:
      name -> Timing over the rounds.
    """
    for _ in range(max(1, warmup)):
        for fn in fns.values():
            block(fn())
    times: dict[str, list[float]] = {k: [] for k in fns}
    start = time.perf_counter()
    for r in range(max(5, rounds)):
        if r >= 5 and time.perf_counter() - start >= budget_s:
            break
        for k, fn in fns.items():
            t0 = time.perf_counter()
            block(fn())
            times[k].append(time.perf_counter() - t0)
    return {
        k: Timing(
            median_s=statistics.median(v), min_s=min(v), times_s=tuple(v), warmup=max(1, warmup)
        )
        for k, v in times.items()
    }


def fmt(x: Any, spec: str = ".2f") -> str:
    """``format(x, spec)``, or "-" for None and NaN (table cells of missing values)."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def gbps(raw_bytes: int, seconds: float) -> float:
    """Throughput in GB/s (1e9 bytes per second) of `raw_bytes` of uncompressed float32."""
    return raw_bytes / seconds / 1e9 if seconds > 0 else math.inf


# --------------------------------------------------------------------------------------------
# Real dumps
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Dump:
    """One real DLRM embedding dump: the pooled output of one table for one mini-batch.

    Attributes:
      name: short name, `{dataset}_table{NN}` (e.g. `terabyte_table01`); `_xK` is appended
        by `tile_rows` for tilings.
      array: float32[rows, dim], C order (row = sample, column = embedding dimension).
      meta: the dump's manifest.json entry (source, min, max, unique_rows, sha256, ...).
    """

    name: str
    array: np.ndarray
    meta: dict[str, Any]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)


def data_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The shared data folder: `path`, else $JLC_DATA_DIR, else ../shared/data beside the repo."""
    if path is not None:
        return Path(path)
    env = os.environ.get("JLC_DATA_DIR")
    return Path(env) if env else DEFAULT_DATA_DIR


def load_manifest(data: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Entries of `emb_dumps/manifest.json` (a list of dicts; `file` is relative to data/).

    Raises:
      FileNotFoundError: the manifest is absent (no shared data on this machine).
    """
    path = data_dir(data) / "emb_dumps" / "manifest.json"
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def dump_name(meta: dict[str, Any]) -> str:
    """Short name of a manifest entry: `{dataset}_table{NN}`, e.g. `kaggle_table08`."""
    return f"{meta['dataset']}_table{int(meta['table']):02d}"


def load_dump(
    meta: dict[str, Any], data: str | os.PathLike[str] | None = None, *, verify: bool = True
) -> Dump:
    """Read one dump: headerless little-endian float32, reshaped to `meta['shape']`.

    Args:
      meta: a manifest entry.
      data: the data folder (see `data_dir`).
      verify: check byte count and sha256 against the manifest.

    Raises:
      FileNotFoundError: the file is absent.
      ValueError: size or sha256 differ from the manifest.
    """
    path = data_dir(data) / meta["file"]
    raw = path.read_bytes()
    if verify:
        if len(raw) != int(meta["bytes"]):
            raise ValueError(f"{path}: {len(raw)} bytes, manifest says {meta['bytes']}")
        digest = hashlib.sha256(raw).hexdigest()
        if "sha256" in meta and digest != meta["sha256"]:
            raise ValueError(f"{path}: sha256 {digest} differs from the manifest")
    arr = np.frombuffer(raw, dtype="<f4").reshape(tuple(meta["shape"])).astype(np.float32)
    return Dump(name=dump_name(meta), array=arr, meta=dict(meta))


def iter_dumps(
    data: str | os.PathLike[str] | None = None,
    *,
    names: Sequence[str] | None = None,
    verify: bool = True,
) -> Iterator[Dump]:
    """Yield every dump listed in the manifest (manifest order), or only those in `names`."""
    for meta in load_manifest(data):
        if names is not None and dump_name(meta) not in names:
            continue
        yield load_dump(meta, data, verify=verify)


def tile_rows(dump: Dump, target_bytes: int = 32 << 20) -> Dump:
    """Stack whole copies of the dump along rows until it holds at least `target_bytes`.

    Row-wise self-concatenation, as the paper's artifact padded dumps (`copy_padding.py`):
    the value range, hence a REL error bound's eb_abs, is unchanged. Codecs that match across
    long distances profit from the repetition; keep that in mind when reading ratios.

    Returns:
      Dump named `{name}_x{copies}` with array float32[rows * copies, dim].
    """
    copies = max(1, math.ceil(target_bytes / dump.array.nbytes))
    arr = np.ascontiguousarray(np.tile(dump.array, (copies, 1)))
    meta = dict(dump.meta, tiled_copies=copies)
    return Dump(name=f"{dump.name}_x{copies}", array=arr, meta=meta)


def eb_abs_from_rel(x: np.ndarray, eb_rel: float) -> float:
    """REL error bound to absolute: `eb_rel * (max - min)` over the finite values of `x`.

    Follows SZ's REL mode as the paper uses it. Returns 0.0 for a constant (or empty or
    all-non-finite) input.
    """
    finite = x[np.isfinite(x)]
    if finite.size == 0:
        return 0.0
    return float(eb_rel) * (float(finite.max()) - float(finite.min()))


def max_abs_error(x: np.ndarray, x_hat: np.ndarray) -> float:
    """max |x - x_hat| computed in float64; inf if shapes differ or x_hat has a non-finite
    value where x is finite."""
    x64 = np.asarray(x, dtype=np.float64)
    y64 = np.asarray(x_hat, dtype=np.float64)
    if x64.shape != y64.shape:
        return math.inf
    err = np.abs(x64 - y64)
    if err.size == 0:
        return 0.0
    if not np.all(np.isfinite(err[np.isfinite(x64)])):
        return math.inf
    return float(np.nanmax(np.where(np.isfinite(x64), err, 0.0)))


# --------------------------------------------------------------------------------------------
# Environment record
# --------------------------------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout.strip()
    except Exception:  # noqa: BLE001 - no git, or not a checkout
        return None


def package_versions(names: Sequence[str] = _VERSIONED_PACKAGES) -> dict[str, str | None]:
    """Installed distribution versions (None where not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment_record(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything needed to read a result later: versions, CPU, threads, commit, time.

    Returns:
      JSON-able dict: utc time, python, platform, cpu model and count, package versions,
      thread environment, XLA_FLAGS, OPENBLAS_CORETYPE, git commit and dirty flag, the JAX
      backend and devices (only if jax is already imported), plus `extra`.
    """
    rec: dict[str, Any] = {
        "utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "packages": package_versions(),
        "threads_env": {k: os.environ.get(k) for k in _THREAD_ENV},
        "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
    }
    jax = sys.modules.get("jax")
    if jax is not None:
        try:
            rec["jax_backend"] = jax.default_backend()
            rec["jax_devices"] = [str(d) for d in jax.devices()]
        except Exception as e:  # noqa: BLE001
            rec["jax_backend"] = f"error: {e}"
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            rec["torch_num_threads"] = torch.get_num_threads()
        except Exception:  # noqa: BLE001
            pass
    if extra:
        rec.update(extra)
    return rec


def write_json(obj: Any, path: str | os.PathLike[str]) -> Path:
    """Write `obj` as compact JSON atomically (via a `.tmp` file); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=None, separators=(",", ":"), default=_json_default, allow_nan=True)
        f.write("\n")
    os.replace(tmp, path)
    return path


def env_line(result: dict[str, Any]) -> str:
    """One line naming where and when ``result`` was measured: its ``environment_record``'s
    UTC time, CPU model and core count, and the first 10 digits of the commit."""
    e = result.get("environment", {})
    return (
        f"{e.get('utc', '?')}, {e.get('cpu_model', '?')} ({e.get('cpu_count', '?')} "
        f"cores, shared), commit {str(e.get('git_commit'))[:10]}"
    )


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return repr(o)
