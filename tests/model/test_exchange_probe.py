"""The probe's link timing (models/dlrm/cluster/exchange_probe.py): chains of all-to-alls in one
program, windows spread over the probe, the mean of the windows' medians as the link's time."""

import dataclasses

import numpy as np
import pytest
from support import require_eight_devices

from models.dlrm import run_setup
from models.dlrm.cluster import exchange_probe as ep
from models.dlrm.cluster import probe_result
from models.dlrm.cluster import step_time as st
from models.dlrm.configs import get_config
from models.dlrm.mesh import make_mesh
from models.dlrm.pooled_all_to_all import exchange_config


def test_a_chain_runs_its_all_to_alls_one_after_the_other():
    # A tiled all-to-all over 8 devices transposes the [8 x 8] grid of blocks, so an odd
    # chain gives one transpose and an even chain the input back: the result is the parity's.
    require_eight_devices()
    mesh = make_mesh()
    x = ep._sharded(mesh, (64, 3), lambda s: np.arange(np.prod(s)).reshape(s))
    one = np.asarray(ep._all_to_all_chain(mesh, "devices", 1)(x))
    assert not np.array_equal(one, np.asarray(x))
    np.testing.assert_array_equal(one[8:9], np.asarray(x)[1:2])  # device 1's block from 0
    np.testing.assert_array_equal(np.asarray(ep._all_to_all_chain(mesh, "devices", 3)(x)), one)
    np.testing.assert_array_equal(np.asarray(ep._all_to_all_chain(mesh, "devices", 4)(x)), x)


@pytest.mark.parametrize(
    ("node_devices", "levels_with_peers"), [(None, (True, False)), (4, (True, True))]
)
def test_link_timer_keeps_every_window_and_averages_them(node_devices, levels_with_peers):
    require_eight_devices()
    timer = ep.LinkTimer(make_mesh(node_devices=node_devices), (1024, 65536))
    windows = [list(timer.window()) for _ in range(3)]
    assert len(timer.windows) == 3
    for w in windows:  # level-major: (small, large) of the intra-node level, then inter-node
        assert len(w) == 4
        for level, has_peers in enumerate(levels_with_peers):
            small, large = w[2 * level : 2 * level + 2]
            assert (small > 0 and large > 0) if has_peers else small == large == 0.0
    by_hand = [(a + b + c) / 3 for a, b, c in zip(*windows)]
    assert timer.mean() == pytest.approx(by_hand, rel=1e-12)
    line = timer.describe()
    assert line.startswith("links: each size the mean of 3 windows' medians; 1024 B per peer (8")
    assert line.count("/") == 2 * sum(levels_with_peers)  # 3 windows per level with peers


def test_the_probe_takes_the_mean_of_its_windows_not_one_window(monkeypatch):
    # One slow window (4 ms per 1 KiB all-to-all, as the two-process CPU testbed sometimes
    # gives) among three fast ones (0.2 ms): the link's 1 KiB time is their mean, 1.15 ms,
    # where one window's median would have been 4 or 0.2 ms by chance.
    require_eight_devices()
    script = iter([[4e-3, 8e-3, 4e-3, 9e-3], *[[2e-4, 4.2e-3, 2e-4, 5.2e-3]] * 3])
    seen = []

    def window(self):
        self.windows.append(next(script))
        seen.append(len(self.windows))
        return self.windows[-1]

    monkeypatch.setattr(ep.LinkTimer, "window", window)
    cfg = dataclasses.replace(get_config("tiny"), compression="auto", node_devices=4)
    mesh = run_setup.create_mesh(cfg)
    candidate = exchange_config(
        dataclasses.replace(cfg, compression="on"), topology="flat", min_error_bound=0.01
    )
    probe = ep.measure(cfg, mesh, st.ModelSpec.from_config(cfg), candidate)
    assert seen == [1, 2, 3, 4] and ep.LINK_WINDOWS == 4
    sizes = probe.intra.sizes
    mean = np.mean([[4e-3, 8e-3, 4e-3, 9e-3], *[[2e-4, 4.2e-3, 2e-4, 5.2e-3]] * 3], axis=0)
    assert probe.intra.seconds == pytest.approx(tuple(mean[:2]), rel=1e-6)
    assert probe.inter.seconds == pytest.approx(tuple(mean[2:]), rel=1e-6)
    want = probe_result.fit_link("inter-node", "nodes", 1, sizes, mean[2:])
    assert probe.inter.latency == pytest.approx(want.latency, rel=1e-5)
    assert probe.inter.latency == pytest.approx(
        1.15e-3 - 1024 * (6.15e-3 - 1.15e-3) / (sizes[1] - 1024), rel=1e-5
    )
    assert probe.notes[0].startswith("links: each size the mean of 4 windows' medians")
    # the 1 KiB figure of each window, level by level (not the large size's)
    assert probe.notes[0].endswith("intra-node 4/0.2/0.2/0.2 ms, inter-node 4/0.2/0.2/0.2 ms")
