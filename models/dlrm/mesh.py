"""The device mesh of the trainer and moving arrays between the hosts and the mesh.

One mesh axis, ``AXIS = "devices"``, over every device of every process (process-major), or
two, ``NODE_AXES = ("nodes", "local")`` (nodes x devices per node, the same device order),
where the run spans several nodes (processes) or uses the hierarchical exchange
(``resolve_topology``). Either way the batch and the tables are sharded over all devices on
``batch_axis(mesh)`` (``P("devices")`` or ``P(("nodes", "local"))``): each device holds ``B /
P`` rows; the embedding buffer ``float32[P, R, dim]`` and its optimizer state are sharded on
their first axis; everything else (the data-parallel head) is replicated.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "devices"
NODE_AXES = ("nodes", "local")
TOPOLOGIES = ("auto", "flat", "hierarchical")


def make_mesh(devices=None, node_devices: int | None = None) -> jax.sharding.Mesh:
    """1-D mesh ``("devices",)`` over ``devices`` (default: all), or with ``node_devices`` K
    the 2-D mesh ``("nodes", "local")`` of shape ``(P / K, K)`` over the same device order
    (node n = devices ``n * K .. n * K + K - 1``); Auto axis types (inputs of the jitted step
    need not be placed beforehand; see DESIGN.md's pitfalls).

    The mesh is built from the device order directly, process-major (the devices of one
    process together, in the order given within it; ``to_global`` puts a process's
    consecutive block of the batch on its own devices). ``jax.make_mesh`` is not used: it
    raises "does not support multi-slice topologies" on GPU hosts, where XLA gives every
    host its own ``slice_index`` (2 hosts x 8 GPUs), and a 1-D mesh needs no topology search.

    Raises:
      ValueError: ``node_devices`` < 1 or not dividing the device count.
    """
    devices = list(jax.devices() if devices is None else devices)
    devices.sort(key=lambda d: d.process_index)  # stable: the given order within a process
    arr = np.array(devices, dtype=object)
    if node_devices is None:
        return jax.sharding.Mesh(arr, (AXIS,), axis_types=(jax.sharding.AxisType.Auto,))
    if node_devices < 1 or len(devices) % node_devices:
        raise ValueError(
            f"node_devices={node_devices} must be >= 1 and divide the {len(devices)} devices"
        )
    return jax.sharding.Mesh(
        arr.reshape(-1, node_devices), NODE_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 2
    )


def batch_axis(mesh: jax.sharding.Mesh):
    """The mesh axis the batch and the tables are sharded on and the step's collectives run
    over: ``"devices"`` (1-D mesh) or ``("nodes", "local")`` (all devices, node-major)."""
    names = tuple(mesh.axis_names)
    return names[0] if len(names) == 1 else names


def resolve_topology(choice: str, mesh: jax.sharding.Mesh) -> str:
    """The embedding exchange's topology (``Config.exchange_topology``) on ``mesh``.

    ``"auto"``: ``"hierarchical"`` where the mesh has several nodes of several devices (the
    trainer's default nodes: one per process), else ``"flat"``. ``"flat"`` runs over every
    device on any mesh; ``"hierarchical"`` needs the 2-D mesh (``make_mesh(node_devices=)``;
    with one node it is the exact exchange).

    Raises:
      ValueError: an unknown choice, or ``"hierarchical"`` on a 1-D mesh.
    """
    if choice not in TOPOLOGIES:
        raise ValueError(f"exchange_topology must be one of {TOPOLOGIES}, got {choice!r}")
    two_level = tuple(mesh.axis_names) == NODE_AXES
    if choice == "auto":
        nodes, local = mesh.devices.shape if two_level else (1, mesh.size)
        return "hierarchical" if nodes > 1 and local > 1 else "flat"
    if choice == "hierarchical" and not two_level:
        raise ValueError(
            f"exchange_topology 'hierarchical' needs a mesh with axes {NODE_AXES} "
            "(mesh.make_mesh(node_devices=...))"
        )
    return choice


def select_devices(per_process: int = 0) -> list:
    """The first ``per_process`` devices of every process (all when 0), process-major.

    ``Config.devices_per_process``: a run on fewer devices than the host has.
    """
    by_proc: dict[int, list] = {}
    for d in jax.devices():
        by_proc.setdefault(d.process_index, []).append(d)
    return [d for p in sorted(by_proc) for d in by_proc[p][: per_process or None]]


def state_shardings(abstract_state, mesh: jax.sharding.Mesh, table_shape: tuple[int, ...]):
    """NamedShardings for a train state: arrays shaped like the table are sharded on axis 0.

    Args:
      abstract_state: a pytree of arrays or ``jax.ShapeDtypeStruct`` (``jax.eval_shape``).
      mesh: the mesh of ``make_mesh``.
      table_shape: ``(P, R, dim)`` of the embedding buffer; its optimizer state has the same
        shape and is sharded the same way. Everything else is replicated.

    Returns:
      The pytree of ``NamedSharding`` (``jit``'s ``in_shardings`` / ``out_shardings``).
    """

    def one(x):
        spec = P(batch_axis(mesh)) if tuple(x.shape) == tuple(table_shape) else P()
        return NamedSharding(mesh, spec)

    return jax.tree.map(one, abstract_state)


def to_global(batch_local: dict, mesh: jax.sharding.Mesh, global_rows: int) -> dict:
    """Process-local numpy rows -> global jax arrays sharded on the batch axis.

    Args:
      batch_local: name -> ``[global_rows / processes, ...]`` numpy array, this process's
        consecutive block of the global batch.
      mesh: the mesh of ``make_mesh``.
      global_rows: B, rows of the global batch.

    Returns:
      name -> ``jax.Array[B, ...]`` sharded ``P(batch_axis(mesh))``.
    """
    sh = NamedSharding(mesh, P(batch_axis(mesh)))
    return {
        k: jax.make_array_from_process_local_data(sh, v, (global_rows,) + v.shape[1:])
        for k, v in batch_local.items()
    }


def to_host(x: jax.Array) -> np.ndarray:
    """A replicated array as numpy, also when it spans several processes (reads this
    process's first copy)."""
    return np.asarray(x if x.is_fully_addressable else x.addressable_data(0))


def local_rows(x: jax.Array) -> np.ndarray:
    """This process's rows of a batch-sharded global array, in global order."""
    shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.concatenate([np.asarray(s.data) for s in shards])
