"""One process of tests/library/test_exchange_hierarchical.py's two-process test: 4 CPU devices, gloo.

Usage: python _multiprocess_hierarchical_worker.py PROCESS_ID NUM_PROCESSES PORT

Each process is one node of the mesh ("node", "local") = (processes, 4). Runs the
hierarchical and the flat compressed exchange, the exact all_to_all and their gradients
(tests/_hierarchical.py), checks this process's shards (own-node blocks bit-equal to the exact
exchange, other-node blocks bit-equal to the flat exchange and within the bound, gradients
likewise), prints one line "OK {json}" with the byte statistics of its devices, exits 0; or
raises (non-zero exit).
"""

from __future__ import annotations

import os
import sys

LOCAL_DEVICES = 4
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={LOCAL_DEVICES}"

import numpy as np  # noqa: E402
from _multiprocess import distributed_mesh, report_ok  # noqa: E402


def main(pid: int, nproc: int, port: int) -> None:
    from _hierarchical import STATS, _shards, check_exchanges, hierarchical_mesh, run_exchanges

    distributed_mesh(pid, nproc, port, LOCAL_DEVICES)  # jax.distributed with gloo
    mesh = hierarchical_mesh(nproc, LOCAL_DEVICES)
    ndev = mesh.size
    rng = np.random.default_rng(0)  # the same global data in every process
    xg = rng.standard_normal((ndev * ndev * 8, 2, 16)).astype(np.float32)
    xg[:, 1] *= 10.0
    eb = np.array([0.01, 0.03], np.float32)
    res = run_exchanges(mesh, xg, eb, path="packed")
    out = check_exchanges(res, mesh, eb, local=LOCAL_DEVICES)
    idx = [STATS.index(k) for k in ("intra_node_bytes", "inter_node_raw_bytes",
                                    "inter_node_moved_bytes", "raw_bytes")]  # fmt: skip
    out["bytes"] = [
        [float(v) for v in s[0, 0, idx]] for _, s in sorted(_shards(res["stats"], mesh).items())
    ]
    report_ok(out)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
