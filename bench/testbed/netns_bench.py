"""DLRM step time over a rate-limited link: exact vs compressed embedding all-to-all, and
TorchRec beside it.

The testbeds (network namespaces joined by a rate-limited link, and the link counters) are
in ``bench.testbed.netns_testbed``; the shared data in ``bench.testbed.synthetic_shards``; one
run's summary (step times, bytes, AUC) in ``bench.testbed.run_summary``; the speedups and
summaries of a result in ``bench.testbed.netns_results``.

Modes (``--modes``): the library trainer's exchanges (``exact``: ``jax.lax.all_to_all``;
``compressed*``: ``jax_lossy_comm.compressed_all_to_all``, paper tiers + schedule;
``compressed-flat`` / ``compressed-hierarchical``: forward and backward exchanges compressed
with ``--exchange-topology flat`` (every peer's block) or ``hierarchical`` (exact among the
devices of a process, compressed across processes)), and TorchRec's DLRM under
DistributedModelParallel (``torchrec-fp32``, ``torchrec-fp16``, ``torchrec-bf16``,
``torchrec-int8``; ``torchrec-dcn-*`` for DLRM-DCN; see ``bench/training/torchrec_peer.py``), run by
``--torchrec-python`` (an interpreter of its own venv; install commands in that module's
docstring and bench/README.md). Each mode's speedup is against its own baseline: ``exact``
for the library's modes, ``torchrec-fp32`` (``torchrec-dcn-fp32``) for TorchRec's.

Data: with a TorchRec mode (or ``--shards DIR``) every run reads the same binary shards,
written once: synthetic rows of the library's generator (``models.dlrm.data.synthetic``, seed
``--seed``) as Criteo text, converted by ``models.dlrm.data.preprocess`` into ``DIR/train`` (steps
x batch rows) and ``DIR/eval`` (``--eval-rows`` held-out rows of the generator's evaluation
stream); the trainer reads them with ``--data/--eval-data`` in file order (``--shuffle-block-rows 0``),
TorchRec with ``torchrec_data.ShardReader`` in the same order. Without, the trainer uses its built-in generator.

For each rate, round and mode the benchmark reports the median step time after the first
logging interval (compile / warm-up), samples/s, bytes moved per step, link bytes per step,
final AUC and log loss, and the speedup ``step_time(baseline) / step_time(mode)`` of each
round (rounds interleave the modes). An unlimited run separates compute from communication.

Needs root (``CAP_SYS_ADMIN``/``CAP_NET_ADMIN``) and iproute2; otherwise it reports
``skipped`` with the reason. Bounded in time: every run has a timeout.

Usage (from the repo root)::

    sudo python -m bench.testbed.netns_bench                     # 1 and 10 Gbit/s, terabyte preset
    python -m bench.testbed.netns_bench --rates 1gbit --steps 12 --modes exact compressed int8-rowwise
    python -m bench.testbed.netns_bench --testbed two-node --devices-per-process 2 --rates 1gbit \\
        unlimited --rounds 2 --modes exact compressed-flat compressed-hierarchical \\
        torchrec-fp32 torchrec-fp16 torchrec-bf16 torchrec-int8 \\
        --torchrec-python /work/torchrec-venv/bin/python --out bench/results/netns_two_node.json

Results: bench/results/netns.json (``--out``).

References:
  Feng et al., SC24, arXiv 2407.04272, sec. 6 (1.38x end-to-end speedup on their cluster).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import bench_util as bu
from bench import trainer_runs
from bench.testbed.link_counters import CounterSampler, per_step_bytes
from bench.testbed.netns_results import (
    baseline,
    format_run,
    format_summary,
    paired_speedups,
    speedups_per_round,
)
from bench.testbed.netns_testbed import (
    TESTBEDS,
    free_port,
    make_testbed,
    rate_bits,
    resolve_testbed,
    why_unavailable,
)
from bench.testbed.run_summary import summarize, summarize_torchrec, timing
from bench.testbed.synthetic_shards import write_synthetic_shards
from models.dlrm.metrics import read_metrics

DEFAULT_OUT = bu.RESULTS_DIR / "netns.json"
DEFAULT_RATES = ("1gbit", "10gbit")
_COMPRESSED = ("--compression", "on", "--codec", "auto")
_BACKWARD = (*_COMPRESSED, "--exchange-backward", "compressed")
#: exchange modes of the library's trainer: name -> trainer flags
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
    # the head gradients' all-reduce compressed too: error-bounded frames with
    # error feedback, or the bf16 baseline (PyTorch DDP's bf16 hook)
    "compressed-bwd-ar": (*_BACKWARD, "--grad-allreduce", "compressed"),
    "compressed-bwd-ar-bf16": (*_BACKWARD, "--grad-allreduce", "bf16"),
    # the exact exchange with the fixed-rate compressed all-reduce: what auto chose on a fast
    # link (its exact-ar-fixed), where the exchange's codec costs more than its bytes
    "exact-ar-fixed": (
        *("--compression", "off", "--grad-allreduce", "compressed", "--grad-codec", "fixed"),
    ),
    # forward + backward compressed, every peer's block (flat) or only the blocks
    # that cross processes (hierarchical: exact among the devices of a process)
    "compressed-flat": (*_BACKWARD, "--exchange-topology", "flat"),
    "compressed-hierarchical": (*_BACKWARD, "--exchange-topology", "hierarchical"),
    # the same with the head gradients' all-reduce compressed too: what is left on
    # the link after the hierarchical exchange is mostly that all-reduce
    "compressed-hierarchical-ar": (
        *_BACKWARD,
        *("--exchange-topology", "hierarchical", "--grad-allreduce", "compressed"),
    ),
    # the same with fixed-rate gradient frames: about 3x the all-reduce bytes of the entropy
    # coded ones, about a sixteenth of their encode CPU (a CPU-bound step's choice)
    "compressed-hierarchical-ar-fixed": (
        *_BACKWARD,
        *("--exchange-topology", "hierarchical", "--grad-allreduce", "compressed"),
        *("--grad-codec", "fixed"),
    ),
    # the trainer chooses the exchange (exact, flat, hierarchical) and the gradient
    # all-reduce (exact, compressed) from its probe and the step-time model
    # (docs/step_time.md); the summary records what it chose
    "auto": (
        *("--compression", "auto", "--codec", "auto", "--exchange-backward", "compressed"),
        *("--grad-allreduce", "auto"),
    ),
}
#: TorchRec modes (bench/training/torchrec_peer.py): name -> (model, qcomm)
TORCHREC_MODES = {
    "torchrec-fp32": ("dlrm", "fp32"),
    "torchrec-fp16": ("dlrm", "fp16"),
    "torchrec-bf16": ("dlrm", "bf16"),
    "torchrec-int8": ("dlrm", "int8"),
    "torchrec-dcn-fp32": ("dlrm-dcn", "fp32"),
    "torchrec-dcn-fp16": ("dlrm-dcn", "fp16"),
    "torchrec-dcn-bf16": ("dlrm-dcn", "bf16"),
    "torchrec-dcn-int8": ("dlrm-dcn", "int8"),
    "torchrec-dcn-fp8": ("dlrm-dcn", "fp8"),
    "torchrec-dcn-mx4": ("dlrm-dcn", "mx4"),
}


# ---------------------------------------------------------------------------------- one run
def train_cmd(
    out_dir: Path, mode: str, process_id: int, port: int, args, host: str = "127.0.0.1"
) -> list[str]:
    """The trainer command of one process (run inside its namespace)."""
    data = []
    if getattr(args, "shard_dirs", None):
        data = ["--data", args.shard_dirs["train"], "--eval-data", args.shard_dirs["eval"]]
        data += ["--shuffle-block-rows", "0"]  # file order, as the TorchRec peer reads
    return trainer_runs.trainer_cmd(
        out_dir,
        args,
        *("--devices", str(args.devices_per_process), "--eval-every", "0"),
        *("--coordinator", f"{host}:{port}", "--num-processes", "2"),
        *("--process-id", str(process_id), *data, *MODES[mode], *args.extra),
    )


def torchrec_cmd(out_dir: Path, mode: str, rank: int, args) -> list[str]:
    """The TorchRec peer command of one rank (run inside its namespace)."""
    model, qcomm = TORCHREC_MODES[mode]
    return [
        args.torchrec_python,
        "-m",
        "bench.training.torchrec_peer",
        *("--data", args.shard_dirs["train"], "--eval-data", args.shard_dirs["eval"]),
        *("--config", args.peer_config, "--rank", str(rank), "--world-size", "2"),
        *("--model", model, "--qcomm", qcomm, "--steps", str(args.steps)),
        *("--log-every", str(args.log_every), "--out", str(out_dir / "torchrec.json")),
    ]


def _intervals(timed: Sequence[tuple[Any, int]]) -> list[tuple[float, float, int]]:
    return [(r.unix_time - r.seconds, r.unix_time, n) for r, n in timed]


def _run_processes(testbed, cmds: Sequence[list[str]], envs, out_dir: Path, timeout: float):
    """Starts one command per process in its namespace, waits (``timeout`` s for both),
    kills what is left; returns ``(returncodes, wall_s)``."""
    logs = [open(out_dir / f"process{i}.log", "w") for i in range(len(cmds))]
    procs: list[subprocess.Popen] = []
    rcs: list[int | None] = [None] * len(cmds)
    t0 = time.perf_counter()
    try:
        for i, (cmd, env) in enumerate(zip(cmds, envs)):
            # inside the try: an interrupt between the two still kills the first
            procs.append(
                subprocess.Popen(
                    testbed.process_prefix(i) + cmd,
                    cwd=bu.REPO_ROOT,
                    env=env,
                    stdout=logs[i],
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + timeout
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
    return rcs, time.perf_counter() - t0


def run_pair(testbed, mode: str, out_dir: Path, args) -> dict[str, Any]:
    """Two processes x ``devices_per_process`` devices of one mode (the library's trainer or
    the TorchRec peer); their summary, with the link bytes of the testbed's counters."""
    out_dir.mkdir(parents=True, exist_ok=True)
    port = free_port(testbed)
    torchrec = mode in TORCHREC_MODES
    envs, cmds = [], []
    for i in range(2):
        env = trainer_runs.trainer_env()
        if torchrec:
            env.update(MASTER_ADDR=testbed.address, MASTER_PORT=str(port))
            env["GLOO_SOCKET_IFNAME"] = testbed.gloo_ifname(i)
            cmds.append(torchrec_cmd(out_dir, mode, i, args))
        else:
            cmds.append(train_cmd(out_dir, mode, i, port, args, testbed.address))
        envs.append(env)
    load0 = os.getloadavg()[0]
    with CounterSampler(testbed) as sampler:
        rcs, wall = _run_processes(testbed, cmds, envs, out_dir, args.run_timeout)
    # 1-minute load average of the host before and after (the machine is shared: other work
    # takes CPU from the training processes, which stretches compute, not link time).
    res: dict[str, Any] = {
        "mode": mode,
        "baseline": baseline(mode),
        "returncodes": rcs,
        "wall_s": wall,
        "out": str(out_dir),
        "loadavg_1min": [load0, os.getloadavg()[0]],
    }
    if any(rc != 0 for rc in rcs):
        tail = (out_dir / "process0.log").read_text(errors="replace")[-1500:]
        res.update(status="error" if None not in rcs else "timeout", log_tail=tail)
        return res
    try:
        if torchrec:
            s = summarize_torchrec(json.loads((out_dir / "torchrec.json").read_text()), out_dir)
            timed = s.pop("_timed")
        else:
            log = read_metrics(out_dir / "metrics.jsonl")
            s = summarize(log)
            g = int(log.config.config.get("batch_size", 0)) if log.config else 0
            timed = timing(log.train, g)["_timed"]
    except (OSError, ValueError, KeyError) as e:
        res.update(status="error", log_tail=f"no result: {type(e).__name__}: {e}")
        return res
    ivs = _intervals(timed)
    s["trainer_net_tx_bytes_per_step"] = s.get("link_bytes_per_step")
    link = per_step_bytes(sampler.samples, ivs, "link")
    if testbed.kind == "two-node" or s.get("link_bytes_per_step") is None:
        s["link_bytes_per_step"] = link
    s["inprocess_bytes_per_step"] = per_step_bytes(sampler.samples, ivs, "inprocess")
    s["connections_ns0"] = sampler.connections  # LOCAL->PEER: established TCP connections
    if sampler.samples:
        first, last = sampler.samples[0][1], sampler.samples[-1][1]
        s["link_bytes_run"] = last["link"] - first["link"]
        if "inprocess" in first:
            s["inprocess_bytes_run"] = last["inprocess"] - first["inprocess"]
    res.update(status="ok", **s)
    return res


# ---------------------------------------------------------------------------------- the run
def _prepare_data(args, work: Path) -> None:
    """Sets ``args.shard_dirs`` (and ``args.peer_config``) when the runs read shards."""
    from bench.training import torchrec_data
    from models.dlrm import configs

    args.shard_dirs = None
    if not (args.shards or any(m in TORCHREC_MODES for m in args.modes)):
        return
    config = configs.get_config(args.preset)
    config.seed, config.eval_rows = args.seed, args.eval_rows
    target = Path(args.shards or work / "data")
    t0 = time.perf_counter()
    args.shard_dirs = write_synthetic_shards(
        target, config, args.steps * config.batch_size, args.eval_rows
    )
    print(f"# data: shards in {target} ({time.perf_counter() - t0:.0f} s)", flush=True)
    if any(m in TORCHREC_MODES for m in args.modes):
        args.peer_config = str(target / "peer_config.json")
        Path(args.peer_config).write_text(json.dumps(torchrec_data.peer_config(config)))


class _Rejected(Exception):
    """A run's trainer exited with status 2 (flags, config or data rejected)."""


def run(args) -> dict[str, Any]:
    kind = resolve_testbed(args.testbed, args.devices_per_process)
    result: dict[str, Any] = {
        "benchmark": "DLRM step time over a rate-limited link between network namespaces",
        "environment": bu.environment_record(),
        "params": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "testbed": kind,
        "runs": [],
    }
    result["params"]["testbed"] = kind
    torchrec = [m for m in args.modes if m in TORCHREC_MODES]
    reason = why_unavailable()
    if reason is None and torchrec and not args.torchrec_python:
        reason = f"modes {torchrec} need --torchrec-python (an interpreter with torchrec)"
    testbed = None
    if reason is None:
        try:
            testbed = make_testbed(kind, f"jlc{os.getpid() % 10**8}")
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            reason = f"cannot create the {kind} testbed: {e}"
    if testbed is None:
        print(f"netns benchmark SKIPPED: {reason}")
        result.update(status="skipped", skip_reason=reason)
        return result
    result["testbed_info"] = testbed.describe()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="jlc_netns_"))
    t_start = time.monotonic()

    def stop(signum, frame):  # SIGTERM too: kill the trainers, delete the namespace, keep runs
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        _prepare_data(args, work)
        result["params"]["shard_dirs"] = args.shard_dirs
        for rate in args.rates:
            shaping = testbed.limit(rate, args.delay_ms)
            gbits = testbed.probe() if args.probe else None
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
                    r = run_pair(testbed, mode, work / f"{rate}_{mode}_{rnd}", args)
                    r.update(
                        rate=rate,
                        rate_bits=rate_bits(rate),
                        round=rnd,
                        qdisc=shaping,
                        probe_gbits=gbits,
                        testbed=kind,
                    )
                    result["runs"].append(r)
                    print(format_run(r), flush=True)
                    if r.get("status") == "error" and 2 in r.get("returncodes", ()):
                        # exit status 2: the trainer rejected its flags, config or data;
                        # every later run would too
                        print("# the trainer rejected its flags or data: stopping", flush=True)
                        raise _Rejected
    except (TimeoutError, _Rejected):
        result["stopped_early"] = True
    except KeyboardInterrupt:
        print("# interrupted: keeping the finished runs", flush=True)
        result["stopped_early"] = True
    finally:
        testbed.close()
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        result["namespace_deleted"] = testbed.deleted()
    result["status"] = "ok"
    result["speedup"] = paired_speedups(result["runs"])
    result["speedup_per_round"] = speedups_per_round(result["runs"])
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(
        prog="python -m bench.testbed.netns_bench", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--rates",
        nargs="+",
        default=list(DEFAULT_RATES) + ["unlimited"],
        help="tc rates (1gbit, 10gbit, ...) and/or 'unlimited'",
    )
    ap.add_argument("--delay-ms", type=float, default=0.1, help="one-way delay (netem only)")
    ap.add_argument(
        "--modes",
        nargs="+",
        default=["exact", "compressed", "compressed-bwd"],
        choices=[*MODES, *TORCHREC_MODES],
    )
    ap.add_argument(
        "--testbed",
        default="auto",
        choices=TESTBEDS,
        help="loopback: both processes in one namespace over its limited lo; two-node: one "
        "namespace per process joined by a limited veth pair (in-process traffic on each "
        "namespace's own lo); auto: two-node with more than one device per process",
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
        "--torchrec-python",
        default=os.environ.get("JLC_TORCHREC_PYTHON"),
        help="interpreter of the TorchRec venv (torchrec-* modes; see bench/training/torchrec_peer.py "
        "for its install commands; default $JLC_TORCHREC_PYTHON)",
    )
    ap.add_argument(
        "--shards",
        default=None,
        metavar="DIR",
        help="write (once; reused when it matches) and read the synthetic data as shards in "
        "DIR/train and DIR/eval (default with torchrec-* modes: WORKDIR/data; otherwise the "
        "trainer's built-in generator)",
    )
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
        help="more trainer flags (after everything else; not seen by the TorchRec peer)",
    )
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    for name in ("steps", "log_every", "eval_rows", "rounds", "devices_per_process"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    for rate in args.rates:
        try:
            rate_bits(rate)
        except ValueError as e:
            ap.error(f"--rates: {e}")
    result = run(args)
    result["argv"] = list(sys.argv if argv is None else argv)
    print(format_summary(result))
    print(f"wrote {bu.write_json(result, args.out)}")
    return result


if __name__ == "__main__":
    main()
