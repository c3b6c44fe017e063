"""compressed_all_to_all across 2 local processes x 4 CPU devices (jax.distributed, gloo).

Starts tests/_multiprocess_exchange_worker.py twice with a coordinator on 127.0.0.1; each
process checks its shards of the compressed exchange against the exact all_to_all (within
each chunk's bound) and the gradients (exact backward to float tolerance, compressed
backward within its bound), then prints "OK ...".
"""

from __future__ import annotations

import pytest
from _multiprocess import run_processes


@pytest.mark.slow
def test_compressed_exchange_two_processes():
    run_processes("_multiprocess_exchange_worker.py", nproc=2, timeout_s=55)
