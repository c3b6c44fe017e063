"""The DLRM trainer's exchange topology (``--exchange-topology auto|flat|hierarchical``,
``--node-devices``): the tiny preset on 8 virtual devices as one node of 8
(the 1-D mesh) or 2 nodes of 4; metrics.jsonl reports intra- and inter-node bytes apart.
The two-process run is tests/model/test_train.py's ``test_two_processes_of_four_devices_train``.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from support import require_eight_devices

from models.dlrm import flags, metrics, pooled_all_to_all, run_setup, train
from models.dlrm import mesh as mesh_lib
from models.dlrm.configs import get_config


@functools.cache
def _run(tmp_root, name: str, **over):
    """A 2-step run of the tiny preset (one logging interval); its train record."""
    cfg = dataclasses.replace(
        get_config("tiny"),
        steps=2,
        log_every=2,
        eval_every=0,
        checkpoint_every=0,
        eval_rows=256,
        **over,
    )
    out = f"{tmp_root}/{name}"
    result = train.train_and_evaluate(cfg, out, progress=False)
    log = metrics.read_metrics(f"{out}/metrics.jsonl")
    [rec] = log.train
    return rec, result


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    require_eight_devices()
    return str(tmp_path_factory.mktemp("topology"))


@pytest.mark.slow
def test_flat_on_two_nodes_trains_as_on_the_1d_mesh(root):
    one, r1 = _run(root, "flat_1d")  # one process, auto: the 1-D mesh, flat
    two, r2 = _run(root, "flat_2x4", node_devices=4, exchange_topology="flat")
    assert one.exchange_topology == two.exchange_topology == "flat"
    # the same exchange on either mesh: same values, same bytes
    assert two.loss == one.loss and r2 == r1
    for k in ("raw_bytes", "frame_bytes", "moved_bytes"):
        assert getattr(two, k) == getattr(one, k), k
    own = one.moved_bytes / 8  # each device's own block (the dense capacity: equal shares)
    # 1-D mesh: one node; everything that leaves a device stays in the node
    assert one.inter_node_raw_bytes == one.inter_node_moved_bytes == 0.0
    assert one.intra_node_bytes == pytest.approx(one.moved_bytes - own, rel=1e-6)
    # 2 nodes of 4: 4 of 8 peers on the other node, 3 on the own one (every block coded)
    assert two.inter_node_raw_bytes == two.raw_bytes / 2
    assert two.inter_node_moved_bytes == pytest.approx(4 * own, rel=1e-6)
    assert two.intra_node_bytes == pytest.approx(3 * own, rel=1e-6)


def test_hierarchical_on_two_nodes_codes_only_what_crosses_them(root):
    flat, _ = _run(root, "flat_2x4", node_devices=4, exchange_topology="flat")
    hier, result = _run(root, "hier_2x4", node_devices=4)  # auto: 2 nodes of 4
    assert hier.exchange_topology == "hierarchical" and hier.fallback_steps == 0
    assert np.isfinite(hier.loss) and np.isfinite(result["auc"])
    assert hier.loss == pytest.approx(flat.loss, abs=5e-3) and hier.loss != flat.loss
    # the same frames cross the nodes (in other packed buckets: one per destination node,
    # not per device); within a node every device's 3/4 travels exact
    assert hier.inter_node_moved_bytes < 1.5 * flat.inter_node_moved_bytes
    assert 0 < hier.inter_node_moved_bytes < hier.inter_node_raw_bytes / 2
    assert hier.inter_node_raw_bytes == hier.raw_bytes / 2
    assert hier.intra_node_bytes == hier.raw_bytes * 3 / 4
    assert hier.moved_bytes == hier.intra_node_bytes + hier.inter_node_moved_bytes
    rec = metrics.from_json(metrics.to_json(hier))  # the one schema round-trips
    assert rec == hier
    line = metrics.describe_interval(hier)
    assert "hierarchical: intra-node " in line and "inter-node moved " in line


def test_exact_exchange_reports_raw_node_bytes():
    mesh = mesh_lib.make_mesh(node_devices=4)
    ax = mesh_lib.batch_axis(mesh)
    pooled = jnp.ones((8 * 16, 3, 8), jnp.float32)

    def f(x):
        y, s = pooled_all_to_all.embedding_exchange(x, jnp.full(3, 0.01), None, axis_name=ax)
        return y, jnp.stack([s.raw_bytes, s.intra_node_bytes, s.inter_node_raw_bytes,
                             s.inter_node_moved_bytes])[None]  # fmt: skip

    y, st = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P(ax), out_specs=(P(ax), P(ax))))(pooled)
    raw = 16 * 3 * 8 * 4
    np.testing.assert_array_equal(np.asarray(st), [[raw, raw * 3 / 8, raw / 2, raw / 2]] * 8)


def test_topology_resolution_flags_and_errors():
    one_d, two_by_four = mesh_lib.make_mesh(), mesh_lib.make_mesh(node_devices=4)
    assert two_by_four.axis_names == mesh_lib.NODE_AXES and two_by_four.devices.shape == (2, 4)
    assert list(two_by_four.devices.flat) == list(one_d.devices.flat)  # same device order
    assert mesh_lib.batch_axis(one_d) == "devices"
    assert mesh_lib.batch_axis(two_by_four) == ("nodes", "local")
    assert mesh_lib.resolve_topology("auto", one_d) == "flat"
    assert mesh_lib.resolve_topology("auto", two_by_four) == "hierarchical"
    assert mesh_lib.resolve_topology("auto", mesh_lib.make_mesh(node_devices=1)) == "flat"
    assert mesh_lib.resolve_topology("auto", mesh_lib.make_mesh(node_devices=8)) == "flat"
    assert mesh_lib.resolve_topology("flat", two_by_four) == "flat"
    with pytest.raises(ValueError, match="needs a mesh with axes"):
        mesh_lib.resolve_topology("hierarchical", one_d)
    with pytest.raises(ValueError, match="exchange_topology must be one of"):
        mesh_lib.resolve_topology("ring", one_d)
    with pytest.raises(ValueError, match="must be >= 1 and divide the 8 devices"):
        mesh_lib.make_mesh(node_devices=3)
    cfg = dataclasses.replace(get_config("tiny"), node_devices=3)
    with pytest.raises(ValueError, match="node_devices=3 must divide the 8 devices"):
        run_setup.create_mesh(cfg)
    # forced hierarchical on one process without --node-devices: one node of 8
    forced = dataclasses.replace(get_config("tiny"), exchange_topology="hierarchical")
    assert run_setup.create_mesh(forced).devices.shape == (1, 8)
    args = flags.build_parser().parse_args(
        ["--preset", "tiny", "--exchange-topology", "hierarchical", "--node-devices", "4"]
    )
    cfg = flags.config_from_flags(args)
    assert (cfg.exchange_topology, cfg.node_devices) == ("hierarchical", 4)
    assert get_config("tiny").exchange_topology == "auto"
    for bad, match in (({"exchange_topology": "ring"}, "exchange_topology must be"),
                       ({"node_devices": -1}, "node_devices must be >= 0")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            dataclasses.replace(get_config("tiny"), **bad).validate()
