"""Multi-host and GPU-cluster paths of the DLRM trainer, tested on CPU (issue 19): fake GPU
devices of two hosts, mocked cluster launchers, monkeypatched platforms, lowering without
compiling and several local processes."""

from __future__ import annotations

import dataclasses

import jax

from models.dlrm import mesh as mesh_lib


@dataclasses.dataclass(frozen=True)
class FakeGpu:
    """What the mesh code reads of a device: 2 hosts x 8 GPUs give each host its own slice."""

    id: int
    process_index: int
    slice_index: int
    platform: str = "gpu"
    device_kind: str = "NVIDIA H100 80GB HBM3"

    def __repr__(self):
        return f"FakeGpu({self.id})"


def test_mesh_over_two_gpu_hosts_of_eight():
    # jax.make_mesh raised "does not support multi-slice topologies" for these devices.
    devices = [FakeGpu(i, i // 8, i // 8) for i in range(16)]
    given = devices[12:] + devices[:8] + devices[8:12]  # host 1's devices first, split
    mesh = mesh_lib.make_mesh(given)
    assert mesh.axis_names == (mesh_lib.AXIS,)
    assert mesh.axis_types == (jax.sharding.AxisType.Auto,)
    assert mesh.devices.shape == (16,)
    # process-major (one host's devices together, in the order given within the host), so a
    # process's consecutive block of the batch lands on its own devices
    assert [d.id for d in mesh.devices.flat] == list(range(8)) + [12, 13, 14, 15, 8, 9, 10, 11]
    assert [d.process_index for d in mesh.devices.flat] == [0] * 8 + [1] * 8
