"""DLRM step time over a rate-limited link: exact vs compressed embedding all-to-all (issue 6).

Creates a private network namespace (``ip netns add``), brings up its own loopback
(``ip link set lo up``) and limits that interface's rate with ``tc`` (``netem rate R delay D``
where the kernel has sch_netem, else a token bucket ``tbf rate R``). Two training processes
(``jax.distributed`` + gloo) run inside the namespace and talk over 127.0.0.1 only: every
gloo and coordinator byte crosses the limited loopback, both directions through the one
qdisc (gloo also connects the devices of one process through TCP). For each rate the DLRM
trainer runs ``--compression off`` (exact ``jax.lax.all_to_all``) and ``--compression on``
(``jax_lossy_comm.compressed_all_to_all``, paper tiers + schedule) from the same seed and data;
the median step time after the compile interval, samples/s, bytes moved per step, the bytes
that really crossed the link per step (``/proc/net/dev`` of the namespace), final AUC and log
loss are read from the trainer's ``metrics.jsonl`` and the speedup ``step_time(exact) /
step_time(compressed)`` of each round is reported. An unlimited run of the same pair
separates compute from communication. The namespace is deleted in a ``finally`` block;
nothing leaves it and no address other than 127.0.0.1 is used.

Devices: one per process by default (``--devices-per-process 1``), i.e. two nodes with one
accelerator each, where every byte a device sends to its peer crosses the network, as in a
cluster whose exchange crosses NICs. More virtual devices per process do not add realism on
a small CPU host: they split the same cores (8 virtual devices on 2 cores spent ~290 of a
~320 ms step in per-device overhead), and gloo sends their in-process traffic (3/7 of an
8-device all-to-all, and most of a ring all-reduce) over the same limited loopback, which a
cluster carries over NVLink/PCIe inside a node.

Needs root (``CAP_SYS_ADMIN``/``CAP_NET_ADMIN``) and iproute2; otherwise it reports
``skipped`` with the reason. Bounded in time: every run has a timeout.

Usage (from the repo root)::

    sudo python -m bench.netns_bench                     # 1 and 10 Gbit/s, terabyte preset
    python -m bench.netns_bench --rates 1gbit --steps 12 --modes exact compressed int8-rowwise

Results: bench/results/netns.json.

References:
  Feng et al., SC24, arXiv 2407.04272, sec. 6 (1.38x end-to-end speedup on their cluster).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import bench_util as bu
from models.dlrm.metrics import MetricsLog, read_metrics

DEFAULT_OUT = bu.RESULTS_DIR / "netns.json"
DEFAULT_RATES = ("1gbit", "10gbit")
_LO_MTU = 65536  # the loopback's MTU; one packet plus headers must fit tbf's bucket
_COMPRESSED = ("--compression", "on", "--codec", "auto")
_BACKWARD = (*_COMPRESSED, "--exchange-backward", "compressed")
#: exchange modes: name -> trainer flags
MODES = {
    "exact": ("--compression", "off"),
    "compressed": _COMPRESSED,
    # the backward (cotangent) exchange compressed too, same per-table bounds
    "compressed-bwd": _BACKWARD,
    # the same with the wire path pinned: fixed-capacity frames / used bytes in size buckets
    "compressed-bwd-dense": (*_BACKWARD, "--exchange-path", "dense"),
    "compressed-bwd-packed": (*_BACKWARD, "--exchange-path", "packed"),
    # same bytes on the dense (CPU) path, less CPU: fixed-rate codes only
    "compressed-fixed": ("--compression", "on", "--codec", "fixed"),
    "int8-rowwise": ("--compression", "on", "--codec", "int8-rowwise"),
    "bf16": ("--compression", "on", "--codec", "bf16"),
    # the head gradients' all-reduce compressed too (issue 15): error-bounded frames with
    # error feedback, or the bf16 baseline (PyTorch DDP's bf16 hook)
    "compressed-bwd-ar": (*_BACKWARD, "--grad-allreduce", "compressed"),
    "compressed-bwd-ar-bf16": (*_BACKWARD, "--grad-allreduce", "bf16"),
}


# ------------------------------------------------------------------------------- namespace
def _run(
    cmd: Sequence[str], timeout: float = 30, check: bool = True
) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=check)


def rate_bits(rate: str) -> float:
    """``"1gbit"`` -> 1e9, ``"500mbit"`` -> 5e8, ``"unlimited"`` -> inf (tc's units, SI)."""
    if rate in ("unlimited", "none", "0"):
        return float("inf")
    m = re.fullmatch(r"([0-9.]+)\s*([kmgt]?)bit", rate.strip().lower())
    if not m:
        raise ValueError(f"rate must look like 1gbit, 500mbit or 'unlimited', got {rate!r}")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]


def why_unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can, as far as cheap checks go)."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "not a POSIX system"
    if os.geteuid() != 0:
        return "not root: creating a network namespace needs CAP_SYS_ADMIN (run as root)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found: install iproute2"
    return None


class Namespace:
    """A network namespace with its loopback up; deleted on ``close`` (context manager).

    Raises:
      RuntimeError: ``ip netns add`` failed (message from ip).
    """

    def __init__(self, name: str):
        self.name = name
        res = _run(["ip", "netns", "add", name], check=False)
        if res.returncode:
            raise RuntimeError(f"ip netns add {name}: {res.stderr.strip()}")
        self.shaping = "none"
        try:
            _run(self.prefix() + ["ip", "link", "set", "lo", "up"])
        except Exception:
            self.close()
            raise

    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def limit(self, rate: str, delay_ms: float) -> str:
        """Limits lo's egress to ``rate`` (tc units) with ``delay_ms`` one-way delay where
        netem exists; returns the qdisc actually installed (as ``tc qdisc show`` prints)."""
        _run(self.prefix() + ["tc", "qdisc", "del", "dev", "lo", "root"], check=False)
        if rate_bits(rate) == float("inf"):
            self.shaping = "none"
            return self.shaping
        netem = ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "rate", rate]
        if delay_ms > 0:
            netem += ["delay", f"{delay_ms}ms"]
        netem += ["limit", "100000"]
        res = _run(self.prefix() + netem, check=False)
        if res.returncode:
            # No sch_netem in this kernel: token bucket, burst = 1 ms at the rate but at least
            # two of lo's 64 KiB packets (a packet larger than the bucket is never sent: TCP
            # retransmits it until gloo's connection times out, as it did at 500 Mbit/s).
            burst = max(2 * (_LO_MTU + 256), int(rate_bits(rate) / 8 / 1000))
            _run(
                self.prefix()
                + [
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    "lo",
                    "root",
                    "tbf",
                    "rate",
                    rate,
                    "burst",
                    str(burst),
                    "latency",
                    "200ms",
                ]
            )
        self.shaping = _run(self.prefix() + ["tc", "qdisc", "show", "dev", "lo"]).stdout.strip()
        if res.returncode:
            self.shaping += f" (netem unavailable: {res.stderr.strip()[:120]}; no added delay)"
        return self.shaping

    def close(self) -> None:
        _run(["ip", "netns", "del", self.name], check=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_PROBE = r"""
import socket, threading, time, sys
n = int(sys.argv[1]); s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
def sink():
    c, _ = s.accept(); got = 0
    while got < n:
        d = c.recv(1 << 20)
        if not d: break
        got += len(d)
t = threading.Thread(target=sink); t.start()
c = socket.create_connection(s.getsockname()); buf = b"x" * (1 << 20); t0 = time.perf_counter()
for _ in range(n // len(buf)): c.sendall(buf)
c.close(); t.join(); print(n * 8 / (time.perf_counter() - t0) / 1e9)
"""


def probe_gbits(ns: Namespace, nbytes: int = 64 << 20, timeout: float = 60) -> float | None:
    """Measured TCP throughput over the namespace's 127.0.0.1 (Gbit/s, one stream)."""
    try:
        out = _run(ns.prefix() + [sys.executable, "-c", _PROBE, str(nbytes)], timeout=timeout)
        return float(out.stdout.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001 - the probe is informative only
        return None


# ---------------------------------------------------------------------------------- one run
def _free_port(ns: Namespace) -> int:
    out = _run(
        ns.prefix()
        + [
            sys.executable,
            "-c",
            "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])",
        ]
    )
    return int(out.stdout.strip())


def train_cmd(out_dir: Path, mode: str, process_id: int, port: int, args) -> list[str]:
    """The trainer command of one process (run inside the namespace)."""
    return bu.trainer_cmd(
        out_dir,
        args,
        *("--devices", str(args.devices_per_process), "--eval-every", "0"),
        *("--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"),
        *("--process-id", str(process_id), *MODES[mode], *args.extra),
    )


def summarize(log: MetricsLog) -> dict[str, Any]:
    """Step time etc. of one trainer run (its ``metrics.jsonl``, read by ``read_metrics``).

    The first ``train`` interval (it includes the jit compile) is dropped; the step time is
    ``batch_size / samples_per_s`` of each later interval (the global batch of the run's
    config), median over them. Bytes per step are the last interval's ``moved_bytes`` (all
    devices, forward exchange) over its steps, ``allreduce_moved_bytes_per_step`` the same
    for the head gradients' all-reduce; ``link_bytes_per_step`` is the median over
    intervals of the namespace's sent bytes per step (``net_tx_bytes``: every collective of
    both processes, both directions).
    """
    global_batch = int(log.config.config.get("batch_size", 0)) if log.config else 0
    train, final = log.train, log.final
    steps_in = bu.interval_steps([r.step for r in train])
    timed = train[1:] if len(train) > 1 else train
    n_timed = steps_in[1:] if len(train) > 1 else steps_in
    step_s = [global_batch / r.samples_per_s for r in timed if r.samples_per_s]
    out = {
        "intervals": len(timed),
        "step_times_s": step_s,
        "step_time_s": statistics.median(step_s) if step_s else None,
        "samples_per_s": global_batch / statistics.median(step_s) if step_s else None,
        "auc": final.auc if final else None,
        "logloss": final.logloss if final else None,
        "final_step": final.step if final else None,
    }
    if timed:
        last, n_last = timed[-1], n_timed[-1]
        link = [r.net_tx_bytes / n for r, n in zip(timed, n_timed) if r.net_tx_bytes is not None]
        out.update(
            moved_bytes_per_step=last.moved_bytes / n_last,
            raw_bytes_per_step=last.raw_bytes / n_last,
            allreduce_moved_bytes_per_step=last.allreduce_moved_bytes / n_last,
            allreduce_raw_bytes_per_step=last.allreduce_raw_bytes / n_last,
            exchange_ratio=last.compression_ratio,
            moved_ratio=last.moved_ratio,
            link_bytes_per_step=statistics.median(link) if link else None,
            fallback_steps=sum(r.fallback_steps for r in train),
        )
    return out


def run_pair(ns: Namespace, mode: str, out_dir: Path, args) -> dict[str, Any]:
    """Two processes x ``devices_per_process`` devices of one exchange mode; their summary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port(ns)
    env = bu.trainer_env()
    logs = [open(out_dir / f"process{i}.log", "w") for i in range(2)]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    procs: list[subprocess.Popen] = []
    rcs: list[int | None] = [None, None]
    try:
        for i in range(2):  # inside the try: an interrupt between the two still kills the first
            procs.append(
                subprocess.Popen(
                    ns.prefix() + train_cmd(out_dir, mode, i, port, args),
                    cwd=bu.REPO_ROOT,
                    env=env,
                    stdout=logs[i],
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + args.run_timeout
        for i, p in enumerate(procs):
            rcs[i] = p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for f in logs:
            f.close()
    wall = time.perf_counter() - t0
    # 1-minute load average of the host before and after (the machine is shared: other work
    # takes CPU from the training processes, which stretches compute, not link time).
    res: dict[str, Any] = {
        "mode": mode,
        "returncodes": rcs,
        "wall_s": wall,
        "out": str(out_dir),
        "loadavg_1min": [load0, os.getloadavg()[0]],
    }
    if any(rc != 0 for rc in rcs):
        tail = (out_dir / "process0.log").read_text(errors="replace")[-1500:]
        res.update(status="error" if None not in rcs else "timeout", log_tail=tail)
        return res
    res.update(status="ok", **summarize(read_metrics(out_dir / "metrics.jsonl")))
    return res


def paired_speedups(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{rate: {mode: median over rounds of exact / mode step time of the same round}}``:
    pairing each run with the exact run of its own round cancels slow drifts of the shared
    machine's load; falls back to the ratio of the medians where no round has both."""
    out = speedups(median_runs(runs))
    for rate, m in speedups_per_round(runs).items():
        for mode, v in m.items():
            out.setdefault(rate, {})[mode] = statistics.median(v)
    return out


def speedups(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{rate: {mode: step_time(exact) / step_time(mode)}}`` for the successful runs."""
    out: dict[str, dict[str, float]] = {}
    for rate in dict.fromkeys(r["rate"] for r in runs):
        by = {r["mode"]: r for r in runs if r["rate"] == rate and r.get("status") == "ok"}
        ex = by.get("exact", {}).get("step_time_s")
        if ex:
            out[rate] = {
                m: ex / r["step_time_s"]
                for m, r in by.items()
                if m != "exact" and r.get("step_time_s")
            }
    return out


# ---------------------------------------------------------------------------------- the run
def run(args) -> dict[str, Any]:
    result: dict[str, Any] = {
        "benchmark": "DLRM step time over a rate-limited loopback in a network namespace (issue 6)",
        "environment": bu.environment_record(),
        "params": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "runs": [],
    }
    reason = why_unavailable()
    ns = None
    if reason is None:
        try:
            ns = Namespace(f"jlcbench{os.getpid()}")
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            reason = f"cannot create a network namespace: {e}"
    if ns is None:
        print(f"netns benchmark SKIPPED: {reason}")
        result.update(status="skipped", skip_reason=reason)
        return result
    work = Path(args.workdir or tempfile.mkdtemp(prefix="jlc_netns_"))
    t_start = time.monotonic()

    def stop(signum, frame):  # SIGTERM too: kill the trainers, delete the namespace, keep runs
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        for rate in args.rates:
            shaping = ns.limit(rate, args.delay_ms)
            gbits = probe_gbits(ns) if args.probe else None
            print(
                f"# {rate}: {shaping}"
                + (f"; measured {gbits:.2f} Gbit/s (1 TCP stream)" if gbits else ""),
                flush=True,
            )
            for rnd in range(args.rounds):
                for mode in args.modes:
                    if time.monotonic() - t_start > args.total_timeout:
                        print("# total time budget spent: stopping", flush=True)
                        raise TimeoutError
                    r = run_pair(ns, mode, work / f"{rate}_{mode}_{rnd}", args)
                    r.update(
                        rate=rate,
                        rate_bits=rate_bits(rate),
                        round=rnd,
                        qdisc=shaping,
                        probe_gbits=gbits,
                    )
                    result["runs"].append(r)
                    print(format_run(r), flush=True)
    except TimeoutError:
        result["stopped_early"] = True
    except KeyboardInterrupt:
        print("# interrupted: keeping the finished runs", flush=True)
        result["stopped_early"] = True
    finally:
        ns.close()
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        result["namespace_deleted"] = (
            ns.name not in _run(["ip", "netns", "list"], check=False).stdout
        )
    result["status"] = "ok"
    result["speedup"] = paired_speedups(result["runs"])
    result["speedup_per_round"] = speedups_per_round(result["runs"])
    return result


def median_runs(runs):
    """One entry per (rate, mode) over its rounds: the first successful run's record with
    ``step_time_s`` = median of the rounds' step times (``round_step_times_s`` lists them)."""
    out = []
    for key in dict.fromkeys((r["rate"], r["mode"]) for r in runs):
        ok = [
            r
            for r in runs
            if (r["rate"], r["mode"]) == key and r.get("status") == "ok" and r.get("step_time_s")
        ]
        if ok:
            times = [r["step_time_s"] for r in ok]
            m = dict(ok[0], step_time_s=statistics.median(times), round_step_times_s=times)
            m["samples_per_s"] = ok[0]["samples_per_s"] * ok[0]["step_time_s"] / m["step_time_s"]
            out.append(m)
    return out


def link_times(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{rate: {mode: step_time(rate) - step_time(unlimited)}}`` in seconds: the part of
    the step the limited link adds (needs an ``unlimited`` run of the same mode)."""
    by = {
        (r["rate"], r["mode"]): r["step_time_s"]
        for r in runs
        if r.get("status") == "ok" and r.get("step_time_s")
    }
    out: dict[str, dict[str, float]] = {}
    for (rate, mode), t in by.items():
        base = by.get(("unlimited", mode))
        if rate != "unlimited" and base is not None:
            out.setdefault(rate, {})[mode] = t - base
    return out


def serial_model(
    runs: Sequence[dict[str, Any]], rate: str, mode: str, target: float = 1.5
) -> dict[str, Any] | None:
    """What the measured compute and link bytes give at ``rate`` if nothing overlaps.

    ``C`` = a mode's step time without a limit (compute, codec, unlimited collectives),
    ``L`` = its link bytes per step x 8 / rate. Returns ``model`` = (C_exact + L_exact) /
    (C_mode + L_mode); ``free_codec`` = (C_exact + L_exact) / (C_exact + L_mode), the same
    for a codec that costs nothing; ``rate_for_target`` (bit/s) and ``reached``: where
    ``model`` >= ``target`` -- "slower" (at that rate or slower), "faster" (at that rate or
    faster), "always" or "never" (rate None for the last two). The model is an estimate: the
    two processes overlap some link time with compute. None without the four runs.
    """
    med = {(r["rate"], r["mode"]): r for r in median_runs(runs)}
    cu = [med.get(("unlimited", m)) for m in ("exact", mode)]
    lim = [med.get((rate, m)) for m in ("exact", mode)]
    if None in cu or any(r is None or not r.get("link_bytes_per_step") for r in lim):
        return None
    ce, cm = cu[0]["step_time_s"], cu[1]["step_time_s"]
    be, bm = lim[0]["link_bytes_per_step"] * 8, lim[1]["link_bytes_per_step"] * 8
    bits = rate_bits(rate)
    le, lm = be / bits, bm / bits
    # model(x = 1 / R) = (ce + be x) / (cm + bm x) >= t  <=>  x (be - t bm) >= t cm - ce
    den, num = be - target * bm, target * cm - ce
    if num <= 0 and den >= 0:
        reached, r_t = "always", None
    elif num > 0 and den > 0:
        reached, r_t = "slower", den / num
    elif num < 0 and den < 0:
        reached, r_t = "faster", den / num
    else:
        reached, r_t = "never", None
    return {
        "compute_exact_s": ce,
        "compute_mode_s": cm,
        "link_exact_s": le,
        "link_mode_s": lm,
        "model": (ce + le) / (cm + lm),
        "free_codec": (ce + le) / (ce + lm),
        "rate_for_target": r_t,
        "reached": reached,
    }


def speedups_per_round(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """``{rate: {mode: [exact / mode step time of each round]}}`` (interleaved rounds)."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        if r.get("status") != "ok" or r["mode"] == "exact":
            continue
        ex = next(
            (
                e
                for e in runs
                if e["rate"] == r["rate"]
                and e["mode"] == "exact"
                and e.get("round") == r.get("round")
                and e.get("status") == "ok"
            ),
            None,
        )
        if ex and r.get("step_time_s"):
            out.setdefault(r["rate"], {}).setdefault(r["mode"], []).append(
                ex["step_time_s"] / r["step_time_s"]
            )
    return out


def format_run(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"{r['rate']:>9} {r['mode']:<13} {r.get('status')}: {r.get('log_tail', '')[-300:]}"
    return (
        f"{r['rate']:>9} {r['mode']:<13} step {r['step_time_s'] * 1e3:8.1f} ms  "
        f"{r['samples_per_s']:8.0f} samples/s  moved/step {r['moved_bytes_per_step'] / 2**20:7.2f}"
        f" MiB (x{r.get('moved_ratio') or 0:.2f})  all-reduce/step "
        f"{(r.get('allreduce_moved_bytes_per_step') or 0) / 2**20:6.2f} MiB  link/step "
        f"{(r.get('link_bytes_per_step') or 0) / 2**20:6.2f} MiB  AUC {r['auc']:.5f}  logloss "
        f"{r['logloss']:.5f}"
    )


def format_summary(result: dict[str, Any]) -> str:
    if result.get("status") == "skipped":
        return f"netns benchmark skipped: {result['skip_reason']}"
    lines = [
        "rate       mode              step ms  samples/s  MiB/step  AUC      log loss  speedup "
        "(step ms: median over rounds; speedup: median of per-round exact/mode)"
    ]
    runs = median_runs(result["runs"])
    sp = paired_speedups(result["runs"])
    for r in runs:
        s = 1.0 if r["mode"] == "exact" else sp.get(r["rate"], {}).get(r["mode"])
        lines.append(
            f"{r['rate']:<10} {r['mode']:<16} {r['step_time_s'] * 1e3:8.1f} "
            f"{r['samples_per_s']:10.0f} {r['moved_bytes_per_step'] / 2**20:9.2f}  "
            f"{r['auc']:.5f}  {r['logloss']:.5f}  " + (f"{s:.3f}x" if s else "-")
        )
    for rate, m in link_times(runs).items():
        if "exact" in m:
            lines.append(
                f"  {rate}: time the link adds to a step (vs unlimited): "
                + ", ".join(f"{mode} {t * 1e3:.0f} ms" for mode, t in m.items())
            )
    for rate, m in speedups_per_round(result["runs"]).items():
        for mode, v in m.items():
            if len(v) > 1:
                lines.append(
                    f"  {rate} {mode}: per-round speedup " + ", ".join(f"{x:.3f}x" for x in v)
                )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(
        prog="python -m bench.netns_bench", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--rates",
        nargs="+",
        default=list(DEFAULT_RATES) + ["unlimited"],
        help="tc rates (1gbit, 10gbit, ...) and/or 'unlimited'",
    )
    ap.add_argument("--delay-ms", type=float, default=0.1, help="one-way delay (netem only)")
    ap.add_argument(
        "--modes", nargs="+", default=["exact", "compressed", "compressed-bwd"], choices=list(MODES)
    )
    ap.add_argument("--preset", default="terabyte")
    ap.add_argument("--devices-per-process", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--eval-rows", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=1, help="repeat every (rate, mode) run")
    ap.add_argument("--run-timeout", type=float, default=420, help="seconds per 2-process run")
    ap.add_argument("--total-timeout", type=float, default=1800, help="seconds for everything")
    ap.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="skip the TCP throughput probe of each rate",
    )
    ap.add_argument("--workdir", default=None, help="trainer outputs (default: a temp dir)")
    ap.add_argument(
        "--extra",
        nargs=argparse.REMAINDER,
        default=[],
        help="more trainer flags (after everything else)",
    )
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    result = run(args)
    result["argv"] = list(sys.argv if argv is None else argv)
    print(format_summary(result))
    print(f"wrote {bu.write_json(result, args.out)}")
    return result


if __name__ == "__main__":
    main()
