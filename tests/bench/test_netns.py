"""The netns benchmark's two-node testbed and the TorchRec peer.

Fast and without root network changes by default: the testbed's plan (names, addresses,
hosts file, ip commands), the counter and connection parsers, the per-step link bytes, the
baselines and speedups of the new modes, the argument checks, the two-node Markdown, and the
TorchRec peer's shard reader against the trainer's ``ShardStream`` on shards the benchmark
writes. The real namespace set-up and tear-down runs only with ``JLC_NETNS_TESTS=1`` as root
(it creates and deletes namespaces and a veth pair); the TorchRec tensors only where torch
and torchrec import (their own venv; CI has no torch).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import numpy as np
import pytest

import jax_lossy_comm as jlc
from bench.reports import link_tables, report
from bench.testbed import link_counters, netns_results, synthetic_shards
from bench.testbed import netns_bench as nb
from bench.testbed import netns_testbed as testbed
from bench.training import torchrec_data, torchrec_peer
from models.dlrm import configs
from models.dlrm.cluster import auto_exchange as ae
from models.dlrm.data import shards, synthetic


# ------------------------------------------------------------------------------- testbed
def test_two_node_plan():
    plan = testbed.two_node_plan("jlc123", "myhost")
    assert plan.namespaces == ("jlc123n0", "jlc123n1")
    assert plan.veths == ("jlc123v0", "jlc123v1")
    assert plan.addresses == ("10.77.0.1", "10.77.0.2")
    assert "10.77.0.1 myhost\n" in plan.hosts[0] and "10.77.0.2 myhost\n" in plan.hosts[1]
    assert "127.0.0.1 localhost" in plan.hosts[0]
    cmds = plan.commands()
    # the veth pair is made with its ends already inside the namespaces (never in the host's)
    assert cmds[0] == ["ip", "link", "add", "jlc123v0", "netns", "jlc123n0", "type", "veth",
                       "peer", "name", "jlc123v1", "netns", "jlc123n1"]  # fmt: skip
    assert ["ip", "-n", "jlc123n1", "addr", "add", "10.77.0.2/24", "dev", "jlc123v1"] in cmds
    assert ["ip", "-n", "jlc123n0", "link", "set", "jlc123v0", "up"] in cmds
    assert all(c[:2] == ["ip", "-n"] for c in cmds[1:])
    longest = testbed.two_node_plan("a" * 13, "h")
    assert max(len(v) for v in longest.veths) == 15  # Linux interface names: at most 15
    for bad in ("", "a" * 14, "bad name", "x/y"):
        with pytest.raises(ValueError, match="prefix"):
            testbed.two_node_plan(bad, "h")


def test_resolve_testbed():
    assert testbed.resolve_testbed("auto", 1) == "loopback"
    assert testbed.resolve_testbed("auto", 2) == "two-node"
    assert testbed.resolve_testbed("loopback", 4) == "loopback"
    assert testbed.resolve_testbed("two-node", 1) == "two-node"
    with pytest.raises(ValueError, match="testbed"):
        testbed.resolve_testbed("three-node", 2)
    with pytest.raises(ValueError, match="devices_per_process"):
        testbed.resolve_testbed("auto", 0)


def test_parse_net_dev_and_ss():
    text = (
        "Inter-|   Receive                            |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes ...\n"
        "    lo:    1000      10    0    0    0     0          0         0     1000      10"
        "    0    0    0     0       0          0\n"
        "jlc1v0:     500       5    0    0    0     0          0         0     7000      70"
        "    0    0    0     0       0          0\n"
    )
    assert testbed.parse_net_dev(text) == {"lo": (1000, 1000), "jlc1v0": (500, 7000)}
    ss = (
        "0 0 10.77.0.1:4000 10.77.0.2:5000\n"
        "0 0 10.77.0.1:4001 10.77.0.1:5001\n"
        "0 0 [::ffff:10.77.0.1]:6000 [::ffff:10.77.0.2]:7000\n"
        "0 0 10.77.0.1:4002 10.77.0.2:5002\n"
    )
    assert testbed.parse_ss(ss) == {"10.77.0.1->10.77.0.2": 3, "10.77.0.1->10.77.0.1": 1}


def test_per_step_bytes_interpolates_the_counters():
    # link counter grows 100 bytes per second, in-process 10 per second, sampled each second
    samples = [(float(t), {"link": 100.0 * t, "inprocess": 10.0 * t}) for t in range(11)]
    assert link_counters.counter_at(samples, 2.5, "link") == 250.0
    assert link_counters.counter_at(samples, -1.0, "link") == 0.0  # clamped to the first sample
    assert link_counters.counter_at(samples, 99.0, "link") == 1000.0  # and to the last
    # intervals (start, end, steps): 200 bytes over 4 steps, 300 over 3 -> median of 50, 100
    ivs = [(1.0, 3.0, 4), (4.5, 7.5, 3), (8.0, 9.0, 1)]
    assert link_counters.per_step_bytes(samples, ivs, "link") == 100.0
    assert link_counters.per_step_bytes(samples, ivs, "inprocess") == 10.0
    assert link_counters.per_step_bytes(samples, [], "link") is None
    assert link_counters.per_step_bytes([], ivs, "link") is None
    assert link_counters.per_step_bytes(samples, ivs, "absent") is None
    with pytest.raises(ValueError):
        link_counters.counter_at([], 1.0, "link")


# ------------------------------------------------------------------------------- modes, runs
def _run(rate, mode, rnd, t, auc=0.7, **kw):
    return {"rate": rate, "mode": mode, "round": rnd, "status": "ok", "step_time_s": t,
            "samples_per_s": 2048 / t, "auc": auc, "logloss": 0.5, **kw}  # fmt: skip


RUNS = [
    _run("1gbit", "exact", 0, 0.6, moved_bytes_per_step=2**20, link_bytes_per_step=6 * 2**20,
         inprocess_bytes_per_step=3 * 2**20),
    _run("1gbit", "compressed-flat", 0, 0.4, auc=0.701, moved_bytes_per_step=2**18,
         link_bytes_per_step=2 * 2**20, inprocess_bytes_per_step=2**20),
    _run("1gbit", "compressed-hierarchical", 0, 0.3, auc=0.7005,
         moved_bytes_per_step=2**18, link_bytes_per_step=2 * 2**20,
         inprocess_bytes_per_step=3 * 2**20),
    _run("1gbit", "torchrec-fp32", 0, 2.0, auc=0.69, link_bytes_per_step=8 * 2**20,
         inprocess_bytes_per_step=0.0, qcomm_effective=["FP32", "FP32"]),
    _run("1gbit", "torchrec-fp16", 0, 1.6, auc=0.69, link_bytes_per_step=5 * 2**20,
         inprocess_bytes_per_step=0.0, qcomm_effective=["FP16", "FP16"]),
    _run("1gbit", "torchrec-int8", 0, 1.0, auc=0.689, link_bytes_per_step=4 * 2**20,
         inprocess_bytes_per_step=0.0, qcomm_effective=["INT8", "FP16"]),
    _run("1gbit", "exact", 1, 0.8),
    _run("1gbit", "compressed-hierarchical", 1, 0.4),
    _run("1gbit", "torchrec-fp32", 1, 2.2),
    _run("1gbit", "torchrec-int8", 1, 1.1),
    {"rate": "1gbit", "mode": "torchrec-bf16", "round": 0, "status": "error", "log_tail": "x"},
]  # fmt: skip


def test_modes_and_baselines():
    assert "--exchange-topology" in nb.MODES["compressed-flat"]
    assert nb.MODES["compressed-hierarchical"][-2:] == ("--exchange-topology", "hierarchical")
    assert "--exchange-backward" in nb.MODES["compressed-hierarchical"]
    # auto's exact-ar-fixed as a fixed mode: the Config its settings resolve to
    settings = ae.TRAINER_SETTINGS["exact-ar-fixed"]
    flags = dict(zip(nb.MODES["exact-ar-fixed"][::2], nb.MODES["exact-ar-fixed"][1::2]))
    assert flags == {
        "--compression": settings.compression,
        "--grad-allreduce": settings.grad_allreduce,
        "--grad-codec": settings.grad_codec,
    }
    fixed = nb.MODES["compressed-hierarchical-ar-fixed"]
    assert (
        fixed[: len(nb.MODES["compressed-hierarchical-ar"])]
        == (nb.MODES["compressed-hierarchical-ar"])
    )
    assert fixed[-2:] == ("--grad-codec", "fixed")
    assert nb.TORCHREC_MODES["torchrec-int8"] == ("dlrm", "int8")
    assert not set(nb.MODES) & set(nb.TORCHREC_MODES)
    assert netns_results.baseline("compressed-hierarchical") == "exact"
    assert netns_results.baseline("torchrec-int8") == "torchrec-fp32"
    assert netns_results.baseline("torchrec-dcn-fp16") == "torchrec-dcn-fp32"
    for _, qcomm in nb.TORCHREC_MODES.values():
        assert qcomm in torchrec_peer.QCOMMS
    # TorchRec's precision names mean the same codec to the library's factory
    for fwd, bwd in torchrec_peer.QCOMMS.values():
        for precision in (fwd, bwd):
            codec = jlc.get_comm_codec(precision)
            assert (codec is None) == (precision == "FP32"), precision


def test_speedups_pair_each_mode_with_its_baseline():
    per_round = netns_results.speedups_per_round(RUNS)["1gbit"]
    assert per_round["compressed-hierarchical"] == [pytest.approx(2.0), pytest.approx(2.0)]
    assert per_round["compressed-flat"] == [pytest.approx(1.5)]
    assert per_round["torchrec-int8"] == [pytest.approx(2.0), pytest.approx(2.0)]
    assert per_round["torchrec-fp16"] == [pytest.approx(1.25)]
    assert "exact" not in per_round and "torchrec-fp32" not in per_round
    assert "torchrec-bf16" not in per_round  # it failed
    sp = netns_results.paired_speedups(RUNS)["1gbit"]
    assert sp["compressed-hierarchical"] == pytest.approx(2.0)
    assert sp["torchrec-int8"] == pytest.approx(2.0)


def test_two_node_markdown():
    res = {
        "status": "ok",
        "environment": {"utc": "2026-12-01T16:00:00+00:00", "cpu_model": "CPU", "cpu_count": 2,
                        "git_commit": "abcdef1234567"},
        "params": {"preset": "terabyte", "devices_per_process": 2, "steps": 20,
                   "log_every": 5, "rounds": 2},
        "testbed_info": {"addresses": ["10.77.0.1", "10.77.0.2"], "gloo_address": "hosts"},
        "runs": [dict(r, qdisc="qdisc tbf 1: rate 1Gbit") for r in RUNS],
    }  # fmt: skip
    md = link_tables.two_node_markdown(res)
    # one table per link rate, its rows the modes; bytes in MiB per step
    assert "**Link 1gbit**" in md and md.count("| exchange | step (ms) |") == 1
    assert "| compressed-hierarchical | 350 | 5851 | 0.25 | 2.00 | " in md
    assert "| 3.00 | 2.000x | 0.70050 |" in md
    assert "| torchrec-int8 | 1050 | " in md and "| - | 4.00 | 0.00 |" in md
    assert "| 2.000x | 0.68900 |" in md and "against `torchrec-fp32` for TorchRec's" in md
    assert "did not finish: 1gbit torchrec-bf16: error" in md
    assert "CPU speed is not GPU speed" in md and "in-process MiB" in md
    # the results first, how they were measured after
    assert md.index("Targets: ") < md.index("| exchange |") < md.index("How it was measured")
    assert "hierarchical compressed 2.00x our exact at 1gbit (target >= 1.5x: met)" in md
    assert "best TorchRec quantized comm torchrec-int8 2.00x torchrec-fp32" in md
    # speedups equal: met; AUC change vs own baseline: +0.0005 ours, -0.001 TorchRec int8
    assert "(hierarchical >= best TorchRec quantized): met" in md
    assert "hierarchical +0.00050, torchrec-int8 -0.00100" in md
    assert "torchrec-int8 INT8/FP16" in md
    assert link_tables.two_node_markdown({"status": "skipped", "skip_reason": "not root"}) == (
        "Skipped: not root\n"
    )
    # the loopback table keeps its columns: no in-process column without the measurement
    loop = link_tables.netns_table(
        {"runs": [_run("1gbit", "exact", 0, 0.5, moved_bytes_per_step=1)]}
    )
    assert "in-process" not in loop


def test_two_node_markdown_of_a_dcn_preset():
    """A dcn preset's run: TorchRec's DLRM_DCN modes against torchrec-dcn-fp32, the
    preset's optimizer named."""
    runs = [
        _run("1gbit", "exact", 0, 0.6),
        _run("1gbit", "compressed-hierarchical", 0, 0.5, auc=0.701),
        _run("1gbit", "torchrec-dcn-fp32", 0, 1.0, auc=0.69),
        _run("1gbit", "torchrec-dcn-bf16", 0, 0.8, auc=0.692),
        _run("1gbit", "torchrec-dcn-mx4", 0, 0.5, auc=0.689),
    ]
    res = {"status": "ok", "params": {"preset": "dcnv2_small", "rounds": 1}, "runs": runs}
    md = link_tables.two_node_markdown(res)
    assert "optimizer (Adagrad; TorchRec's tables by FBGEMM's EXACT_ADAGRAD)" in md
    assert "best TorchRec quantized comm torchrec-dcn-mx4 2.00x torchrec-dcn-fp32" in md
    assert "torchrec-dcn-bf16 1.25x" in md
    assert "hierarchical +0.00100, torchrec-dcn-mx4 -0.00100" in md
    assert "optimizer (SGD)" in link_tables.two_node_markdown(
        dict(res, params={"preset": "terabyte"})
    )


def test_rate_sweep_markdown():
    runs = [
        _run("unlimited", "exact", 0, 0.2, link_bytes_per_step=6 * 2**20),
        _run("unlimited", "compressed-hierarchical", 0, 0.25, link_bytes_per_step=2**20),
        _run("1gbit", "exact", 0, 0.3, link_bytes_per_step=6 * 2**20),
        _run("1gbit", "compressed-hierarchical", 0, 0.25, link_bytes_per_step=2**20),
        _run("250mbit", "exact", 0, 0.6, link_bytes_per_step=6 * 2**20),
        _run("250mbit", "compressed-hierarchical", 0, 0.3, link_bytes_per_step=2**20),
    ]
    res = {
        "status": "ok",
        "environment": {"utc": "2026-12-01T16:00:00+00:00", "cpu_model": "CPU", "cpu_count": 2,
                        "git_commit": "abcdef1234567"},
        "params": {"preset": "terabyte", "devices_per_process": 2, "steps": 20, "rounds": 1,
                   "rates": ["unlimited", "1gbit", "250mbit"]},
        "runs": runs,
    }  # fmt: skip
    md = link_tables.rate_sweep_markdown(res)
    assert "**Link 250mbit**" in md and "| compressed-hierarchical | 300 | " in md
    # ceiling = exact at the rate / exact unlimited: 0.3 / 0.2 and 0.6 / 0.2
    assert "1gbit: compressed-hierarchical 1.20x; ceiling 1.50x" in md
    assert "250mbit: compressed-hierarchical 2.00x; ceiling 3.00x" in md
    assert "1.5x reached by: compressed-hierarchical at 250mbit." in md
    res["runs"] = runs[:4]
    assert "1.5x reached by: no mode." in link_tables.rate_sweep_markdown(res)


def test_acceptance_flags_of_the_report():
    flags = report.two_node_args("/venv/bin/python")
    assert flags[:4] == ["--testbed", "two-node", "--devices-per-process", "2"]
    assert "torchrec-int8" in flags and flags[-2:] == ["--torchrec-python", "/venv/bin/python"]
    assert flags[flags.index("--rounds") + 1] == "2" and "unlimited" in flags
    assert not any(f.startswith("torchrec-") for f in report.two_node_args(""))


def test_arguments(monkeypatch, tmp_path, capsys):
    seen = {}

    def fake_run(args):
        seen.update(vars(args))
        return {"status": "skipped", "skip_reason": "test"}

    monkeypatch.setattr(nb, "run", fake_run)
    out = tmp_path / "r.json"
    argv = ["--testbed", "two-node", "--devices-per-process", "2", "--modes", "exact",
            "compressed-hierarchical", "torchrec-int8", "--torchrec-python", "/x/python",
            "--out", str(out)]  # fmt: skip
    res = nb.main(argv)
    assert res["argv"] == argv and json.loads(out.read_text())["status"] == "skipped"
    assert seen["testbed"] == "two-node" and seen["torchrec_python"] == "/x/python"
    assert seen["modes"] == ["exact", "compressed-hierarchical", "torchrec-int8"]
    for bad, msg in (
        (["--modes", "torchrec-fp64"], "invalid choice"),
        (["--testbed", "three-node"], "invalid choice"),
        (["--steps", "0"], "--steps must be > 0"),
        (["--devices-per-process", "0"], "--devices-per-process must be > 0"),
        (["--rates", "fast"], "rate must look like"),
    ):
        with pytest.raises(SystemExit) as e:
            nb.main([*bad, "--out", str(out)])
        assert e.value.code == 2
        assert msg in capsys.readouterr().err


def test_run_without_an_interpreter_for_torchrec_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(nb, "why_unavailable", lambda: None)
    args = nb.argparse.Namespace(
        testbed="auto", devices_per_process=2, modes=["exact", "torchrec-fp32"],
        torchrec_python=None, workdir=None, out="x",
    )  # fmt: skip
    res = nb.run(args)
    assert res["status"] == "skipped" and "--torchrec-python" in res["skip_reason"]
    assert res["testbed"] == "two-node"


def test_a_run_the_trainer_rejects_stops_the_sweep(monkeypatch, tmp_path, capsys):
    """A trainer that exits with status 2 (its flags, config or data rejected: a batch the
    device count does not divide) would reject every later run too: the sweep stops there and
    keeps what it has, instead of starting every run of every rate and round."""

    class FakeTestbed:
        address, kind = "127.0.0.1", "two-node"

        def limit(self, rate, delay_ms):
            return "fake"

        def probe(self):
            return 1.0

        def describe(self):
            return {}

        def close(self):
            pass

        def deleted(self):
            return True

    calls = []

    def run_pair(testbed, mode, out_dir, args):
        calls.append(mode)
        return {"mode": mode, "status": "error", "returncodes": [2, 2], "log_tail": "error: x"}

    monkeypatch.setattr(nb, "why_unavailable", lambda: None)
    monkeypatch.setattr(nb, "make_testbed", lambda kind, name: FakeTestbed())
    monkeypatch.setattr(nb, "run_pair", run_pair)
    args = nb.argparse.Namespace(
        testbed="two-node", devices_per_process=3, modes=["exact", "auto"], rates=["1gbit", "100mbit"],
        rounds=2, torchrec_python=None, workdir=str(tmp_path), out="x", shards=None,
        delay_ms=0.0, probe=True, total_timeout=60,
    )  # fmt: skip
    res = nb.run(args)
    assert calls == ["exact"] and len(res["runs"]) == 1 and res["stopped_early"]
    assert "the trainer rejected its flags or data: stopping" in capsys.readouterr().out


# ------------------------------------------------------------------------ data, TorchRec
@pytest.fixture(scope="module")
def shard_data(tmp_path_factory):
    config = configs.get_config("tiny")
    config.seed = 3
    d = tmp_path_factory.mktemp("two_node_data")
    return config, synthetic_shards.write_synthetic_shards(d, config, 700, 300)


@pytest.fixture(scope="module")
def multi_hot_data(tmp_path_factory):
    """dcnv2_small's bags (MLPerf's sizes, up to 100 ids) on small tables."""
    config = configs.get_config("dcnv2_small")
    config.seed, config.max_ind_range = 5, 500
    d = tmp_path_factory.mktemp("two_node_multi_hot")
    return config, synthetic_shards.write_synthetic_shards(d, config, 600, 200)


def _flat(ids: np.ndarray, bag_sizes) -> np.ndarray:
    """The trainer's int32[n, T, H] bags (-1 padded) as a shard stores them: back to back."""
    return np.concatenate([ids[:, t, :h] for t, h in enumerate(bag_sizes)], axis=1)


def test_synthetic_shards_hold_the_generator_rows(shard_data):
    config, dirs = shard_data
    gen = synthetic.SyntheticCriteo(
        config.table_rows(), config.num_dense, 1, config.synthetic_zipf_a, config.seed
    )
    for name, n, stream in (("train", 700, "train"), ("eval", 300, "eval")):
        got = torchrec_data.ShardReader(dirs[name]).rows(0, n)
        want = gen.batch(0, n, stream)
        assert got["ids"].shape == (n, 26)
        np.testing.assert_array_equal(got["ids"], want["ids"][:, :, 0])
        np.testing.assert_array_equal(got["label"], want["label"])
        np.testing.assert_allclose(got["dense"], want["dense"], rtol=1e-6, atol=0)
    # written once: a second call with the same settings keeps the folders
    before = os.stat(os.path.join(dirs["train"], "manifest.json")).st_mtime_ns
    synthetic_shards.write_synthetic_shards(os.path.dirname(dirs["train"]), config, 700, 300)
    assert os.stat(os.path.join(dirs["train"], "manifest.json")).st_mtime_ns == before


def test_multi_hot_shards_hold_the_generator_bags(multi_hot_data):
    """The shards of a multi-hot preset hold the generator's bags (its first id, the ids
    MLPerf's rule fixes per that id) and the labels of its teacher on those bags."""
    from models.dlrm.data import sources as data

    config, dirs = multi_hot_data
    bags = config.bag_sizes()
    assert bags[20] == 100 and sum(bags) == 214
    gen = data.synthetic_generator(config)
    for name, n, stream in (("train", 600, "train"), ("eval", 200, "eval")):
        reader = torchrec_data.ShardReader(dirs[name])
        assert reader.bag_sizes == bags
        got, want = reader.rows(0, n), gen.batch(0, n, stream)
        assert got["ids"].shape == (n, 214) and got["ids"].min() >= 0
        np.testing.assert_array_equal(got["ids"], _flat(want["ids"], bags))
        np.testing.assert_array_equal(got["label"], want["label"])
    # a bag of the 100-id table: its first id, then 99 others (not all the same)
    lo = sum(bags[:20])
    assert bags[20] == 100 and len(np.unique(got["ids"][0, lo : lo + 100])) > 1
    # and the trainer reads the same folder as the same bags
    reader = torchrec_data.ShardReader(dirs["train"])
    stream = shards.ShardStream(shards.ShardDataset(dirs["train"]), 128, shuffle=False,
                                holdout_every=0, prefetch=0)  # fmt: skip
    for g in range(5):  # batch 4 wraps around the end of the 600 rows
        np.testing.assert_array_equal(
            _flat(stream.next_batch()["ids"], bags), reader.batch(g, 128, 0, 1)["ids"]
        )


def test_multi_hot_shards_need_the_mlperf_rule(tmp_path):
    config = configs.get_config("dcnv2_small")
    config.synthetic_multi_hot_rule = "independent"
    with pytest.raises(ValueError, match="'mlperf'"):
        synthetic_shards.write_synthetic_shards(tmp_path, config, 10, 10)


@pytest.mark.parametrize("procs", [1, 2])
def test_peer_reader_gives_the_trainer_batches(shard_data, procs):
    """The TorchRec peer's rows per step and process are the trainer's (ShardStream in file
    order, no held-out rows), across the end of an epoch (700 rows, batches of 256)."""
    _, dirs = shard_data
    reader = torchrec_data.ShardReader(dirs["train"])
    dataset = shards.ShardDataset(dirs["train"])
    assert reader.num_rows == dataset.num_rows == 700
    assert reader.table_rows == dataset.table_rows
    for p in range(procs):
        stream = shards.ShardStream(
            dataset, 256 // procs, shuffle=False, holdout_every=0, process_index=p,
            num_processes=procs, prefetch=0,
        )  # fmt: skip
        for g in range(4):  # batch 2 wraps around the end of the rows
            want = stream.next_batch()
            want["ids"] = want["ids"][:, :, 0]
            got = reader.batch(g, 256, p, procs)
            for k in ("dense", "ids", "label"):
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"{k} batch {g} p{p}")
    ev = shards.eval_set(shards.ShardDataset(dirs["eval"]), 300)
    ev["ids"] = ev["ids"][:, :, 0]
    got = torchrec_data.ShardReader(dirs["eval"]).rows(0, 300)
    for k in ("dense", "ids", "label"):
        np.testing.assert_array_equal(got[k], ev[k])


def test_peer_reader_errors(tmp_path, shard_data):
    _, dirs = shard_data
    man = json.loads(open(os.path.join(dirs["train"], "manifest.json")).read())
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.json").write_text(json.dumps(dict(man, version=99)))
    with pytest.raises(ValueError, match="version 1"):
        torchrec_data.ShardReader(str(bad))
    (bad / "manifest.json").write_text(json.dumps(dict(man, complete=False)))
    with pytest.raises(ValueError, match="not finished"):
        torchrec_data.ShardReader(str(bad))
    with pytest.raises(FileNotFoundError):
        torchrec_data.ShardReader(str(tmp_path / "absent"))


def test_kjt_arrays_one_hot_and_peer_config():
    ids = np.arange(12, dtype=np.int32).reshape(2, 6)  # 2 rows, 6 one-hot tables
    keys, values, lengths = torchrec_data.kjt_arrays(ids, [1] * 6)
    assert keys == ["f0", "f1", "f2", "f3", "f4", "f5"]
    assert values.dtype == np.int64 and values.tolist() == [0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11]
    assert lengths.dtype == np.int32 and lengths.tolist() == [1] * 12
    c = configs.get_config("terabyte")
    pc = torchrec_data.peer_config(c)
    assert pc["table_rows"] == list(c.table_rows()) and pc["embedding_dim"] == 64
    assert pc["bottom_mlp"] == [512, 256, 64] and pc["top_mlp"] == [512, 512, 256, 1]
    assert pc["batch_size"] == 2048 and pc["learning_rate"] == c.learning_rate
    assert pc["optimizer"] == "sgd" and pc["interaction"] == "dot" and pc["bag_sizes"] == [1] * 26


def test_kjt_arrays_multi_hot():
    """Bags back to back in table order -> key-major values with per-bag lengths; -1 slots
    (the trainer's padding) are left out of their bag."""
    ids = np.array([[7, 1, 2, 3, 4, -1], [8, 5, -1, 6, -1, -1]], np.int32)  # bags 1, 2, 3
    keys, values, lengths = torchrec_data.kjt_arrays(ids, [1, 2, 3])
    assert keys == ["f0", "f1", "f2"]
    assert values.tolist() == [7, 8, 1, 2, 5, 3, 4, 6]
    assert lengths.tolist() == [1, 1, 2, 1, 2, 1]  # (f0: r0, r1), (f1: r0, r1), (f2: ...)
    assert lengths.sum() == len(values)
    with pytest.raises(ValueError, match=r"sum\(bag_sizes\) = 6"):
        torchrec_data.kjt_arrays(ids[:, :5], [1, 2, 3])
    with pytest.raises(ValueError, match=">= 0"):
        torchrec_data.kjt_arrays(np.full((1, 3), -2, np.int32), [1, 2])
    with pytest.raises(ValueError, match=">= 1"):
        torchrec_data.kjt_arrays(ids, [0, 3, 3])


def test_peer_config_of_the_dcn_preset():
    c = configs.get_config("dcnv2_small")
    pc = torchrec_data.peer_config(c)
    assert pc["interaction"] == "dcn" and (pc["dcn_num_layers"], pc["dcn_low_rank_dim"]) == (2, 32)
    assert pc["optimizer"] == "adagrad" and pc["adagrad_eps"] == 1e-10
    assert pc["learning_rate"] == 0.01 and pc["batch_size"] == 512 and pc["embedding_dim"] == 16
    assert pc["bag_sizes"] == list(c.bag_sizes()) and pc["bag_sizes"][20] == 100
    assert pc["table_rows"] == [min(r, 20_000) for r in c.cardinalities]
    json.dumps(pc)  # the benchmark writes it as JSON
    for field, value, match in (
        ("optimizer", "adam", "sgd or adagrad"),
        ("warmup_steps", 10, "schedule"),
        ("embedding_dtype", "bfloat16", "float32"),
    ):
        bad = configs.get_config("dcnv2_small")
        setattr(bad, field, value)
        with pytest.raises(ValueError, match=match):
            torchrec_data.peer_config(bad)


_TORCHREC = all(importlib.util.find_spec(m) for m in ("torch", "torchrec"))


@pytest.mark.skipif(
    not _TORCHREC,
    reason="torch/torchrec not importable here: they live in the TorchRec venv, never in the "
    "library's dependencies (CI has no torch); an environment with both runs this check",
)
def test_peer_kjt_holds_the_batch_ids(shard_data):  # pragma: no cover - TorchRec venv only
    _, dirs = shard_data
    batch = torchrec_data.ShardReader(dirs["train"]).batch(1, 64, 1, 2)
    dense, kjt, label = torchrec_peer._batch_tensors(batch, [1] * 26)
    assert dense.shape == (32, 13) and label.shape == (32,)
    for t, key in enumerate(kjt.keys()):
        assert kjt[key].values().tolist() == batch["ids"][:, t].tolist()


@pytest.mark.skipif(not _TORCHREC, reason="torch/torchrec not importable here (TorchRec venv)")
def test_peer_kjt_holds_the_bags(multi_hot_data):  # pragma: no cover - TorchRec venv only
    config, dirs = multi_hot_data
    reader = torchrec_data.ShardReader(dirs["train"])
    batch = reader.batch(0, 8, 0, 1)
    _, kjt, _ = torchrec_peer._batch_tensors(batch, reader.bag_sizes)
    lo = sum(reader.bag_sizes[:20])
    assert kjt["f20"].lengths().tolist() == [100] * 8
    assert kjt["f20"].values().tolist() == batch["ids"][:, lo : lo + 100].reshape(-1).tolist()


# ----------------------------------------------------------------- real namespaces (opt-in)
_NETNS = os.environ.get("JLC_NETNS_TESTS") == "1"


@pytest.mark.skipif(
    not _NETNS or testbed.why_unavailable() is not None,
    reason="creates network namespaces and a veth pair: opt in with JLC_NETNS_TESTS=1 as root "
    f"(here: {'opted in' if _NETNS else 'not opted in'}; {testbed.why_unavailable() or 'root'})",
)
def test_two_node_testbed_setup_and_teardown():  # pragma: no cover - root only
    tb = testbed.TwoNodeTestbed(f"jlct{os.getpid() % 10**6}", hostname="jlc-test-host")
    try:
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert all(n in listed for n in tb.plan.namespaces)
        for i, (ns, dev, addr) in enumerate(zip(tb.namespaces, tb.plan.veths, tb.plan.addresses)):
            show = subprocess.run(ns.prefix() + ["ip", "-o", "addr", "show", "dev", dev],
                                  capture_output=True, text=True, check=True).stdout  # fmt: skip
            assert f"inet {addr}/24" in show
            got = subprocess.run(ns.prefix() + ["getent", "hosts", "jlc-test-host"],
                                 capture_output=True, text=True).stdout  # fmt: skip
            assert got.split()[0] == addr  # what gloo's getaddrinfo(gethostname()) binds
            assert tb.process_prefix(i) == ns.prefix() and tb.gloo_ifname(i) == dev
        host_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert not any(v in host_links for v in tb.plan.veths)  # only inside the namespaces
        shaping = tb.limit("1gbit", 0.0)
        assert shaping.count("rate 1Gbit") == 2  # both ends
        before = tb.sample()
        subprocess.run(tb.namespaces[0].prefix() + ["python3", "-c",
            "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            "[s.sendto(b'x' * 1000, ('10.77.0.2', 9)) for _ in range(100)]"], check=True)  # fmt: skip
        after = tb.sample()
        assert after["link"] - before["link"] >= 100_000  # crossed the veth
        assert tb.limit("unlimited", 0.0) == "none"
    finally:
        tb.close()
    assert tb.deleted()


@pytest.mark.parametrize(
    "result, rendered, render",
    [
        ("netns_two_node.json", "two_node.md", "two_node_markdown"),
        ("netns_two_node_rates.json", "two_node_rates.md", "rate_sweep_markdown"),
        ("netns_two_node_dcnv2.json", "two_node_dcnv2.md", "two_node_markdown"),
    ],
)
def test_committed_two_node_results_are_rendered(result, rendered, render):
    """bench/results' markdown is the rendering of the committed result (a rerun that is not
    re-rendered shows here)."""
    path = report.RESULTS / result
    if not path.is_file():
        pytest.skip(f"{path} absent (not measured yet)")
    md = getattr(link_tables, render)(json.loads(path.read_text()))
    assert (report.RESULTS / rendered).read_text() == md
