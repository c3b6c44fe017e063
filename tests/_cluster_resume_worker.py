"""One process of tests/model/test_cluster.py's two-process resume from file data: 2 CPU
devices, gloo collectives.

Usage: python _cluster_resume_worker.py PROCESS_ID NUM_PROCESSES PORT, with JLC_RESUME_DATA
(a Kaggle-format file whose I1 is the line number) and JLC_RESUME_DIR (the shared workdir).

Reads 3 global batches of 16 rows (8 per process) through the trainer's make_data, saves a
checkpoint through the trainer's checkpoints.save (orbax; process 0 writes the meta JSON with
the data position), restores it, resumes the stream at the restored position and prints
"OK {json}" with the line numbers of the last batch before and the first batch after.
"""

from __future__ import annotations

import dataclasses
import os
import sys

LOCAL_DEVICES = 2
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={LOCAL_DEVICES}"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from _multiprocess import distributed_mesh, report_ok  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402


def lines_of(batch) -> list[int]:
    return [int(round(float(np.expm1(v)))) for v in batch["dense"][:, 0]]


def main(pid: int, nproc: int, port: int) -> None:
    from models.dlrm import checkpoints
    from models.dlrm.configs import get_config
    from models.dlrm.data import sources as data_lib
    from models.dlrm.step import TrainState

    mesh = distributed_mesh(pid, nproc, port, LOCAL_DEVICES)
    config = dataclasses.replace(
        get_config("tiny"), data=os.environ["JLC_RESUME_DATA"], holdout_every=0, eval_rows=16
    )

    def data(position):
        out = data_lib.make_data(config, 8, position, process_index=pid, num_processes=nproc)
        return out[0]  # (stream, eval set, description, ...)

    stream = data(None)
    for _ in range(3):
        before = lines_of(stream.next_batch())
    rep = NamedSharding(mesh, P())
    state = TrainState(
        **{f: jax.device_put(jnp.full((), 3 if f == "step" else 0, jnp.int32), rep)
           for f in TrainState._fields}
    )  # fmt: skip
    mngr = checkpoints.manager(os.environ["JLC_RESUME_DIR"], 2)
    checkpoints.save(mngr, state, {"data_position": stream.position(), "step": 3})
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rep), state)
    restored, meta = checkpoints.restore(mngr, abstract)
    mngr.close()
    after = lines_of(data(meta["data_position"]).next_batch())
    report_ok({"before": before, "after": after, "step": int(restored.step.addressable_data(0))})


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
