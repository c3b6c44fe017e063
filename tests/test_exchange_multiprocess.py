"""compressed_all_to_all across 2 local processes x 4 CPU devices (jax.distributed, gloo).

Starts tests/_multiprocess_exchange_worker.py twice with a coordinator on 127.0.0.1; each
process checks its shards of the compressed exchange against the exact all_to_all (within
each chunk's bound) and the gradients (exact backward to float tolerance, compressed
backward within its bound), then prints "OK ...".
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("_multiprocess_exchange_worker.py")
NPROC = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_compressed_exchange_two_processes():
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(i), str(NPROC), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(NPROC)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=55))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail("multi-process exchange timed out (55 s)")
    for i, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"process {i} failed:\n{out}\n{err[-4000:]}"
        assert out.startswith("OK ") or "\nOK " in out, f"process {i}: {out}\n{err[-2000:]}"
