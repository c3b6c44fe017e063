"""Runs a test worker script in several local processes (jax.distributed on 127.0.0.1, gloo
collectives on CPU), as tests/library/test_exchange_multiprocess.py and tests/library/test_allreduce.py do.

Each worker is started as ``python WORKER PROCESS_ID NUM_PROCESSES PORT`` without the parent's
XLA_FLAGS (it sets its own device count), must exit 0 and print a line starting "OK ".
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def distributed_mesh(pid: int, nproc: int, port: int, local_devices: int):
    """In a worker (XLA_FLAGS already set to ``local_devices``): starts jax.distributed with
    gloo collectives and returns the 1-D mesh ``("i",)`` over every process's devices."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=nproc,
        process_id=pid,
        initialization_timeout=40,
    )
    ndev = jax.device_count()
    assert ndev == nproc * local_devices, ndev
    return jax.make_mesh((ndev,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))


def report_ok(report: dict) -> None:
    """In a worker: prints the one line "OK {json}" the test reads and leaves jax.distributed."""
    import json

    import jax

    print("OK " + json.dumps(report), flush=True)
    jax.distributed.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_trainers(args, nproc: int = 2, port: int | None = None, **popen):
    """Starts ``nproc`` trainer processes ``python -m models.dlrm.main ARGS --coordinator
    127.0.0.1:PORT --num-processes N --process-id I`` from the repository root, without the
    parent's XLA_FLAGS, stdout and stderr piped as text (``popen`` overrides); returns them.
    ``args``: the flags, or a function of the process id giving them."""
    addr = f"127.0.0.1:{port or free_port()}"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    kw = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    kw.update(popen)
    flags_of = args if callable(args) else lambda i: args
    return [
        subprocess.Popen(
            [sys.executable, "-m", "models.dlrm.main", *flags_of(i), "--coordinator", addr]
            + ["--num-processes", str(nproc), "--process-id", str(i)],
            cwd=Path(__file__).resolve().parent.parent,
            **kw,
        )
        for i in range(nproc)
    ]


def run_trainers(args, nproc: int = 2, timeout_s: float = 240) -> list[tuple[int, str]]:
    """Runs ``start_trainers(args, nproc)`` to the end with stderr in stdout; returns each
    process's ``(returncode, output)``. A process still running after ``timeout_s`` kills
    them all and fails the test with the end of each one's output."""
    procs = start_trainers(args, nproc, stderr=subprocess.STDOUT)
    try:
        outs = [p.communicate(timeout=timeout_s)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        tails = [p.communicate()[0][-2000:] for p in procs]
        pytest.fail(f"trainers still running after {timeout_s} s:\n" + "\n---\n".join(tails))
    finally:
        for p in procs:
            p.kill()
    return [(p.returncode, out) for p, out in zip(procs, outs)]


def run_processes(worker: str, nproc: int = 2, timeout_s: float = 55) -> list[str]:
    """Starts ``nproc`` copies of ``tests/<worker>``; returns their stdout, or fails the test
    (a timeout kills them all) with each failing process's output."""
    path = Path(__file__).with_name(worker)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    procs = [
        subprocess.Popen(
            [sys.executable, str(path), str(i), str(nproc), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(nproc)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout_s))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"{worker}: {nproc} processes timed out ({timeout_s} s)")
    for i, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"process {i} failed:\n{out}\n{err[-4000:]}"
        assert out.startswith("OK ") or "\nOK " in out, f"process {i}: {out}\n{err[-2000:]}"
    return [out for out, _ in outs]
