"""``--compression auto``: the decision of models/dlrm/cluster/auto_exchange.py on hand-made clusters,
the link fit, the end-of-run comparison, and the trainer choosing and reporting (one process
as one node and as 2 nodes of 4; two processes as two nodes of 2 devices)."""

import dataclasses
import json
import math
import re
import subprocess
import sys

import pytest
from support import require_eight_devices

from bench.testbed import run_summary
from models.dlrm import mesh as mesh_lib
from models.dlrm import metrics, train
from models.dlrm.cluster import auto_exchange as ae
from models.dlrm.cluster import auto_report as report
from models.dlrm.cluster import probe_result
from models.dlrm.cluster import step_time as st
from models.dlrm.configs import get_config
from models.dlrm.pooled_all_to_all import create_exchange, exchange_config

TB = st.terabyte_spec()  # 26 tables -> 32 slots over 8 devices: X = 2048 x 4 x 64 x 4 bytes
X = 2048 * 4 * 64 * 4
COMPUTE = st.Compute(1e12, 1e11)


def _cluster(**kw) -> st.Cluster:
    base = dict(nodes=2, devices_per_node=4, intra_bandwidth=1e12, inter_bandwidth=1e8)
    return st.Cluster(**{**base, **kw})


def _codecs(compress_bps: float, ratio: float, backward: bool = True) -> st.Codecs:
    return ae.codecs_for(
        st.CodecSpec(compress_bps, compress_bps, ratio), backward_compressed=backward
    )


def test_fast_links_give_exact():
    # Links of 1e15 B/s and no latency: every exchange costs ~0 s in every mode (X / P / 1e15
    # per peer), while a compressed mode adds its codec time, X / 1e9 s per compress and per
    # decompress: no compressed candidate can be faster than exact.
    cl = _cluster(intra_bandwidth=1e15, inter_bandwidth=1e15)
    d = ae.decide(TB, cl, COMPUTE, _codecs(1e9, 10.0), modes=ae.candidates(cl))
    assert d.mode == "exact" and (d.compression, d.topology) == ("off", "flat")
    assert set(d.predictions) == {"exact", "flat", "hierarchical"}
    assert d.predictions["exact"].exchange_forward_s < 1e-7
    assert d.predictions["flat"].compress_s == pytest.approx(2 * X / 1e9)  # fwd + bwd
    assert "slower than exact" in d.reason


def test_a_slow_inter_node_link_on_two_nodes_of_four_gives_hierarchical():
    # 2 nodes x 4 devices, inter-node 1e8 B/s (0.8 Gbit/s) with 100 us per message, NVLink-like
    # 1e12 B/s inside a node, codec 1e9 B/s at ratio 10, backward compressed too. Per
    # direction (pairwise all-to-all: peers x (latency + bytes per peer / bandwidth)):
    #   exact: 4 remote peers x (100 us + X/8 / 1e8)              = 10.9 ms
    #   flat:  4 x (100 us + X/8/10 / 1e8) = 1.45 ms, codec 2 X / 1e9 = 4.2 ms
    #   hier:  1 x (100 us + X/2/10 / 1e8) = 1.15 ms (+ 1.6 us inside the node), codec X / 1e9
    # The hierarchical exchange sends the same compressed bytes across nodes as the flat one,
    # in one message instead of four, and codes only the half that leaves the node.
    cl = _cluster(inter_latency=1e-4)
    d = ae.decide(TB, cl, COMPUTE, _codecs(1e9, 10.0), modes=ae.candidates(cl))
    p = d.predictions
    assert p["exact"].exchange_forward_inter_s == pytest.approx(4 * (1e-4 + X / 8 / 1e8))
    assert p["flat"].exchange_forward_inter_s == pytest.approx(4 * (1e-4 + X / 80 / 1e8))
    assert p["hierarchical"].exchange_forward_inter_s == pytest.approx(1e-4 + X / 20 / 1e8)
    assert p["hierarchical"].compress_s == pytest.approx(2 * (X / 2) / 1e9)
    assert p["flat"].compress_s == pytest.approx(2 * X / 1e9)
    assert d.mode == "hierarchical" and (d.compression, d.topology) == ("on", "hierarchical")
    assert d.step_s() < d.step_s("flat") < d.step_s("exact")
    assert "hierarchical is predicted" in d.reason and "faster than exact" in d.reason


def test_hindsight_recalibrates_compute_from_the_measured_step():
    # The slow-link case above chooses hierarchical. A measured step equal to its prediction
    # gives back the compute it was made with and the same choice; a step 50x longer is
    # compute-bound, so the ~1.5 ms gain per direction falls below the 5% margin and exact
    # would have been chosen; a step shorter than the hierarchical exchange alone fits no
    # compute at all.
    cl = _cluster(inter_latency=1e-4)
    codecs = _codecs(1e9, 10.0)
    d = ae.decide(TB, cl, COMPUTE, codecs, modes=ae.candidates(cl))
    assert d.mode == "hierarchical"
    balance = COMPUTE.flops_per_s / COMPUTE.memory_bytes_per_s
    same = report.hindsight(d, TB, cl, codecs, d.step_s(), balance)
    assert same["agrees"] and same["choice"] == "hierarchical"
    assert same["compute_flops_per_s"] == pytest.approx(COMPUTE.flops_per_s, rel=1e-6)
    assert same["predicted_step_s"]["exact"] == pytest.approx(d.step_s("exact"), rel=1e-6)
    slow = report.hindsight(d, TB, cl, codecs, 50 * d.step_s(), balance)
    assert slow["choice"] == "exact" and not slow["agrees"]
    assert slow["compute_flops_per_s"] < COMPUTE.flops_per_s / 40
    gain = 1 - slow["predicted_step_s"]["hierarchical"] / slow["predicted_step_s"]["exact"]
    assert gain < 0.05
    assert report.hindsight(d, TB, cl, codecs, 1e-4, balance) is None


def test_one_node_gives_exact():
    # One node of 8: no hierarchical candidate, and the flat exchange saves at most the
    # intra-node bytes, 7 x X/8 / 450e9 = 3.6 us per direction, while coding X costs
    # 2 x X / 0.33e12 = 12.7 us per direction (cuSZp2's A100 rate).
    cl = st.Cluster(nodes=1, devices_per_node=8, intra_bandwidth=450e9, inter_bandwidth=50e9)
    assert ae.candidates(cl) == ("exact", "flat")
    d = ae.decide(TB, cl, COMPUTE, _codecs(0.33e12, 4.0), modes=ae.candidates(cl))
    assert d.mode == "exact"
    saved = d.predictions["exact"].exchange_forward_s - d.predictions["flat"].exchange_forward_s
    assert saved == pytest.approx(7 * X / 8 / 450e9 * (1 - 1 / 4))
    assert d.step_s("flat") > d.step_s("exact")


def test_the_margin_decides_a_small_gain():
    # A gain g just above the margin takes the compressed mode, just below it keeps exact.
    cl = _cluster(inter_latency=1e-4)
    codecs = _codecs(1e9, 10.0)
    g = 1 - ae.decide(TB, cl, COMPUTE, codecs).step_s("hierarchical") / ae.decide(
        TB, cl, COMPUTE, codecs
    ).step_s("exact")
    assert 0.05 < g < 1
    assert ae.decide(TB, cl, COMPUTE, codecs, margin=g - 0.01).mode == "hierarchical"
    slow = ae.decide(TB, cl, COMPUTE, codecs, margin=g + 0.01)
    assert slow.mode == "exact" and "less than the" in slow.reason
    with pytest.raises(ValueError, match=r"margin must be in \[0, 1\)"):
        ae.decide(TB, cl, COMPUTE, codecs, margin=1.0)
    with pytest.raises(ValueError, match="must hold 'exact'"):
        ae.decide(TB, cl, COMPUTE, codecs, modes=("flat",))


def test_explicit_topology_keeps_its_one_compressed_candidate():
    two, one = _cluster(), _cluster(nodes=1)
    assert ae.candidates(two, "flat") == ("exact", "flat")
    assert ae.candidates(two, "hierarchical") == ("exact", "hierarchical")
    assert ae.candidates(one, "hierarchical") == ("exact",)
    # an exact choice keeps a given topology (it only names the run's mesh levels)
    d = ae.decide(TB, two, COMPUTE, _codecs(1e3, 1.0), modes=("exact", "hierarchical"),
                  topology="hierarchical")  # fmt: skip
    assert (d.mode, d.compression, d.topology) == ("exact", "off", "hierarchical")
    with pytest.raises(ValueError, match="topology must be"):
        ae.candidates(two, "ring")


def test_backward_exact_has_no_backward_codec():
    # Config.exchange_backward "exact": the cotangents travel raw, no codec time, ratio 1.
    cl = _cluster(inter_latency=1e-4)
    fwd_only = ae.decide(TB, cl, COMPUTE, _codecs(1e9, 10.0, backward=False))
    p = fwd_only.predictions["hierarchical"]
    assert p.compress_s == pytest.approx(X / 2 / 1e9)
    assert p.exchange_backward_inter_s == pytest.approx(1e-4 + X / 2 / 1e8)


def test_link_fit_recovers_bandwidth_and_latency():
    # t(n) = peers x (latency + n / bandwidth): 3 peers, 50 us, 1 GB/s
    t = [3 * (5e-5 + n / 1e9) for n in (1024, 65536)]
    link = probe_result.fit_link("inter-node", "nodes", 3, (1024, 65536), t)
    assert link.bandwidth == pytest.approx(1e9) and link.latency == pytest.approx(5e-5)
    assert "1 GB/s per device, latency 50 us" in link.describe()
    flat = probe_result.fit_link("intra-node", "local", 3, (1024, 65536), (1e-4, 0.9e-4))  # noise
    assert flat.bandwidth == math.inf and flat.latency == pytest.approx(0.9e-4 / 3)
    none = probe_result.fit_link("inter-node", "-", 0, (1024, 65536), (0.0, 0.0))
    assert none.peers == 0 and none.describe() == "inter-node: no peers"
    with pytest.raises(ValueError, match="two ascending sizes"):
        probe_result.fit_link("x", "y", 1, (2048, 1024), (1.0, 2.0))


def test_comparison_leaves_out_the_first_interval_and_reports_per_device_bytes():
    cl = _cluster()
    d = ae.decide(TB, cl, COMPUTE, _codecs(1e9, 10.0), modes=("exact",))
    step = d.step_s()
    per_peer = X / 8  # exact, flat: 3 peers in the node, 4 on the other one

    def iv(steps, seconds):
        return {"steps": steps, "seconds": seconds,
                "intra_node_bytes": 3 * per_peer * 8 * steps,
                "inter_node_moved_bytes": 4 * per_peer * 8 * steps * 1.1}  # fmt: skip

    c = report.compare(d, TB, cl, 1.0, [iv(2, 100.0), iv(2, 4 * step), iv(4, 4 * step)])
    assert c["intervals_used"] == 2 and c["steps"] == 6
    assert c["measured"]["step_s"] == pytest.approx(8 * step / 6)
    assert c["error"]["step_s"] == pytest.approx(6 / 8 - 1)
    assert c["measured"]["intra_node_bytes"] == pytest.approx(3 * per_peer)
    assert c["error"]["intra_node_bytes"] == pytest.approx(0.0, abs=1e-12)
    assert c["error"]["inter_node_bytes"] == pytest.approx(1 / 1.1 - 1)
    lines = report.end_lines(c)
    assert "error -25.0%" in lines[1] and "inter-node 1.1 MiB vs 1.0 MiB (-9.1%)" in lines[2]
    with pytest.raises(ValueError, match="no logged interval"):
        report.compare(d, TB, cl, 1.0, [])


def test_auto_is_validated_and_never_reaches_the_exchange():
    tiny = get_config("tiny")
    with pytest.raises(ValueError, match="decided before the exchange is built"):
        exchange_config(
            dataclasses.replace(tiny, compression="auto"), topology="flat", min_error_bound=0.01
        )
    with pytest.raises(ValueError, match=r"auto_margin must be in \[0, 1\)"):
        dataclasses.replace(tiny, auto_margin=-0.1).validate()
    with pytest.raises(ValueError, match="auto_inter_gbits must be >= 0"):
        dataclasses.replace(tiny, auto_inter_gbits=-1.0).validate()


def test_decision_module_does_not_import_jax():
    code = "import sys, models.dlrm.cluster.auto_exchange; assert 'jax' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_explicit_compression_runs_no_probe(monkeypatch):
    from models.dlrm.cluster import exchange_probe

    def fail(*a, **kw):
        raise AssertionError("the probe ran")

    monkeypatch.setattr(exchange_probe, "measure", fail)
    mesh = mesh_lib.make_mesh()
    for choice in ("on", "off"):
        cfg = dataclasses.replace(get_config("tiny"), compression=choice)
        exchange, auto = exchange_probe.choose_exchange(cfg, mesh, min_error_bound=0.01)
        assert auto is None
        assert exchange == create_exchange(cfg, mesh, min_error_bound=0.01)
        assert exchange.compression == choice and (exchange.config is None) == (choice == "off")


# --- the trainer ----------------------------------------------------------------------------

_NUM = r"[-+]?\d[\d.e+-]*"


def _check_rule(auto: dict) -> str:
    """The choice recomputed from the recorded predictions with the decision rule: of the
    compressed candidates at least the margin faster than exact, the least codec work among
    those within the margin of the fastest; exact when none pays."""
    c, margin = auto["candidates"], auto["margin"]
    steps = {m: t["step_overlap_s"] for m, t in c.items()}
    pays = {m: t for m, t in steps.items() if m != "exact" and 1 - t / steps["exact"] >= margin}
    if not pays:
        return "exact"
    fastest = min(pays.values())
    alike = [m for m, t in pays.items() if 1 - fastest / t <= margin]
    return min(alike, key=lambda m: (c[m]["compress_s"] + c[m]["decompress_s"], steps[m], m))


def _auto_run(tmp_path, capsys, **over):
    cfg = dataclasses.replace(
        get_config("tiny"), steps=6, log_every=2, eval_every=0, checkpoint_every=0,
        eval_rows=256, compression="auto", **over,
    )  # fmt: skip
    result = train.train_and_evaluate(cfg, str(tmp_path), progress=False)
    log = metrics.read_metrics(tmp_path / "metrics.jsonl")
    return result, log, capsys.readouterr().out


def test_one_process_auto_run_chooses_as_the_model_says_and_reports(tmp_path, capsys):
    require_eight_devices()
    result, log, out = _auto_run(tmp_path, capsys)
    auto = result["auto_exchange"]
    # in metrics.jsonl's final record (and final.json), as JSON
    assert log.final.auto_exchange == json.loads(json.dumps(auto))
    assert set(auto["candidates"]) == {"exact", "flat"}  # one node: no hierarchical
    assert auto["choice"] == _check_rule(auto)
    assert log.train[0].exchange == auto["compression"]
    # the testbed's run summary records the choice and its predicted step
    summary = run_summary.summarize(log)
    assert summary["auto_choice"] == auto["choice"]
    assert summary["auto_predicted_step_s"] == auto["candidates"][auto["choice"]]["step_overlap_s"]
    hind = auto["comparison"]["hindsight"]
    assert summary["auto_hindsight_choice"] == (hind["choice"] if hind else None)
    assert summary["auto_candidates_step_s"] == {
        m: c["step_overlap_s"] for m, c in auto["candidates"].items()
    }
    assert summary["auto_probe_links"]["intra"]["peers"] == 7  # one process of 8 devices
    assert summary["auto_probe_links"]["inter"]["peers"] == 0
    # the start block: the measured links and codec, each candidate's split, the choice
    assert re.search(rf"link intra-node \(devices, 7 peers\): ({_NUM} GB/s|unbounded)", out), out
    assert "link inter-node: no peers" in out
    assert re.search(rf"codec: compress {_NUM} GB/s, decompress {_NUM} GB/s per device, "
                     rf"compression ratio {_NUM}x", out), out  # fmt: skip
    for m in ("exact", "flat"):
        assert re.search(rf"predicted {m}: step {_NUM} ms = compute {_NUM} \+ exchange fwd", out)
    assert f"choice: {auto['choice']} (compression {auto['compression']}" in out
    # the end: measured over intervals 2 and 3 (steps 3-6), next to the chosen prediction
    c = auto["comparison"]
    assert c["mode"] == auto["choice"] and c["intervals_used"] == 2 and c["steps"] == 4
    assert c["measured"]["step_s"] > 0 and c["predicted"]["step_s"] > 0
    assert c["measured"]["inter_node_bytes"] == c["predicted"]["inter_node_bytes"] == 0
    if auto["choice"] == "exact":  # raw bytes: the model's count exactly
        assert c["error"]["intra_node_bytes"] == pytest.approx(0.0, abs=1e-6)
    assert re.search(rf"  step {_NUM} ms vs {_NUM} ms \(error {_NUM}%\)", out), out
    h = c["hindsight"]  # the measured step on one node is far above the predicted comm.
    assert h is not None and h["choice"] in auto["candidates"] and h["compute_flops_per_s"] > 0
    assert "hindsight, with the compute the measured step implies" in out
    assert auto["probe"]["seconds"] < 30


def test_one_process_two_nodes_and_a_slow_link_compress(tmp_path, capsys):
    # 8 devices as 2 nodes of 4, an inter-node link told to be 1 Mbit/s per device: the
    # forward exchange's X/2 remote bytes cost X/2 / 125 kB/s per step, which the coded
    # inter-node stage divides by the codec's ratio; the exact bytes inside a node and the
    # codec time are small next to it. The real link (memory) is unchanged. Hierarchical
    # (one remote message, an exact intra-node stage in series) and flat (four remote
    # messages, the intra-node part concurrent) send the same coded bytes across: the
    # measured latencies, noisy on a busy machine, decide between them.
    require_eight_devices()
    result, log, out = _auto_run(tmp_path, capsys, node_devices=4, auto_inter_gbits=0.001,
                                 exchange_backward="compressed")  # fmt: skip
    auto = result["auto_exchange"]
    assert set(auto["candidates"]) == {"exact", "flat", "hierarchical"}
    assert auto["choice"] == _check_rule(auto) != "exact", auto["reason"]
    assert auto["probe"]["inter"]["override"] and auto["probe"]["inter"]["bandwidth"] == 125e3
    assert log.train[-1].exchange_topology == auto["exchange_topology"]
    assert log.train[-1].exchange == "on"
    assert "(--auto-inter-gbits, not measured)" in out
    c = auto["comparison"]  # inter-node bytes compressed: below the raw X/2 per device
    raw = c["predicted"]["inter_node_bytes"] * auto["probe"]["codec"]["ratio"]
    assert 0 < c["measured"]["inter_node_bytes"] < raw
    if auto["choice"] == "hierarchical":  # exact inside a node: the model's bytes exactly
        assert c["measured"]["intra_node_bytes"] == pytest.approx(
            c["predicted"]["intra_node_bytes"]
        )


def _two_process_run(tmp_path, gbits: str, devices: str, *extra: str) -> dict:
    from _multiprocess import run_trainers

    out = tmp_path / f"run_{gbits}"
    args = ["--preset", "tiny", "--devices", devices, "--steps", "4", "--log-every", "2",
            "--eval-every", "0", "--checkpoint-every", "0", "--eval-rows", "64", "--no-progress",
            "--compression", "auto", "--exchange-backward", "compressed",
            "--auto-inter-gbits", gbits, "--out", str(out), *extra]  # fmt: skip
    runs = run_trainers(args)
    for i, (rc, text) in enumerate(runs):
        assert rc == 0, f"process {i}:\n{text[-3000:]}"
    outs = [text for _, text in runs]
    assert "auto exchange: probe" in outs[0] and "auto exchange (" in outs[0], outs[0][-3000:]
    final = json.loads((out / "final.json").read_text())
    return final["auto"]["auto_exchange"]


@pytest.mark.slow
def test_two_processes_compress_on_a_slow_link_and_choose_exact_on_a_fast_one(tmp_path):
    # Two processes (nodes) over gloo. Of 2 devices each, told 1 Mbit/s per device between
    # them: the remote half of the exchange dominates the step and the hierarchical exchange
    # codes it (test above). Of 1 device each, told 1 Tbit/s: exact and flat send one message
    # each way, the bytes cost nothing, and the codec time is all the flat exchange adds:
    # exact. (With 2 devices, hierarchical would still win on the measured latency: one
    # inter-node message per direction instead of two.)
    # Slow: a compressed exchange, by the rule. Hierarchical and flat send the same coded bytes
    # across; which of them wins rests on the measured intra-node link (hierarchical adds an
    # exact intra-node stage in series), which a busy 2-core machine makes noisy: the CI run
    # once measured it slow enough for flat to win.
    slow = _two_process_run(tmp_path, "0.001", "2")
    assert slow["choice"] == _check_rule(slow) != "exact", slow["reason"]
    assert set(slow["candidates"]) == {"exact", "flat", "hierarchical"}
    assert slow["probe"]["inter"]["peers"] == 1 and slow["probe"]["intra"]["peers"] == 1
    fast = _two_process_run(tmp_path, "1000", "1")
    assert set(fast["candidates"]) == {"exact", "flat"}
    assert fast["choice"] == _check_rule(fast) == "exact", fast["reason"]
    assert fast["comparison"]["error"]["inter_node_bytes"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.slow
def test_two_processes_choose_the_compressed_all_reduce_together(tmp_path):
    # --grad-allreduce auto across processes: process 0's probe figures, the gradient codec's
    # three included, are broadcast, so both processes take the same -ar choice and build the
    # same all-reduce; had they chosen apart, their collectives would not match and the run
    # would not finish. At 1 Mbit/s the exact gradient all-reduce dominates: an -ar mode wins,
    # with either gradient codec (both timed: grad_codec is the default, auto).
    auto = _two_process_run(tmp_path, "0.001", "2", "--grad-allreduce", "auto")
    assert set(ae.CANDIDATES) == set(auto["candidates"])
    assert auto["choice"] == _check_rule(auto)
    settings = ae.TRAINER_SETTINGS[auto["choice"]]
    assert (auto["grad_allreduce"], auto["grad_codec"]) == ("compressed", settings.grad_codec)
    assert set(auto["probe"]["gradient_codecs"]) == {"auto", "fixed"}
    assert all(g["ratio"] > 1 for g in auto["probe"]["gradient_codecs"].values())


def test_a_slower_candidate_is_called_slower_not_below_the_margin():
    cl = _cluster(inter_latency=1e-4)
    slow = ae.decide(TB, cl, COMPUTE, _codecs(1e6, 1.01))  # a codec too slow to pay
    assert slow.mode == "exact"
    assert "slower than exact" in slow.reason and "margin" not in slow.reason, slow.reason


def test_the_compressed_all_reduce_competes_where_the_gradients_dominate():
    # 2 nodes x 4, inter-node 1e8 B/s: the exact ring all-reduce of S = 3.05 MB moves
    # 2 (p-1)/p S over the node's 4 NICs each way, 2 x 7/8 x S / 4e8 = 13.3 ms; the
    # compressed one at ratio 10 sends S/10 in frames and all-gathers S/10, and codes
    # S (1 + 1/8) + decodes 2 S 7/8 at 1e10 B/s, about 0.9 ms: hierarchical-ar wins.
    cl = _cluster(inter_latency=1e-4)
    grad = st.CodecSpec(1e10, 1e10, 10.0)
    modes = ae.candidates(cl, grad_codecs=("auto",))
    assert modes == ("exact", "flat", "hierarchical", "exact-ar", "flat-ar", "hierarchical-ar")
    codecs = ae.codecs_for(st.CodecSpec(1e9, 1e9, 10.0), backward_compressed=True, gradient=grad)
    d = ae.decide(TB, cl, COMPUTE, codecs, modes=modes)
    assert d.mode == "hierarchical-ar"
    assert (d.compression, d.topology, d.grad_allreduce) == ("on", "hierarchical", "compressed")
    p = d.predictions
    s = TB.gradient_bytes()
    assert p["exact"].allreduce_inter_s == pytest.approx(2 * 7 / 8 * s / 4e8)
    # the exchange is the same with and without the compressed all-reduce
    for m in ("exact", "flat", "hierarchical"):
        assert p[f"{m}-ar"].exchange_forward_s == p[m].exchange_forward_s
        assert p[f"{m}-ar"].allreduce_s == p["hierarchical-ar"].allreduce_s < p[m].allreduce_s
    assert p["exact-ar"].compress_s == pytest.approx(s * (1 + 1 / 8) / 1e10)
    # a slow gradient codec keeps the all-reduce exact: hierarchical without -ar
    slow = ae.codecs_for(
        st.CodecSpec(1e9, 1e9, 10.0), backward_compressed=True,
        gradient=st.CodecSpec(1e7, 1e7, 10.0),
    )  # fmt: skip
    d2 = ae.decide(TB, cl, COMPUTE, slow, modes=modes)
    assert (d2.mode, d2.grad_allreduce) == ("hierarchical", "exact")
    assert ae.candidates(st.Cluster(1, 1, 1e9, 1e9), grad_codecs=("auto",)) == ("exact", "flat")
    # exact exchange with the compressed all-reduce keeps compression off
    assert ae.TRAINER_SETTINGS["exact-ar"] == ("off", "flat", "compressed", "auto")


def test_grad_allreduce_auto_needs_compression_auto():
    cfg = get_config("tiny")
    with pytest.raises(ValueError, match="grad_allreduce auto .* needs compression auto"):
        dataclasses.replace(cfg, grad_allreduce="auto").validate()
    with pytest.raises(ValueError, match="decided by the run's probe"):
        from models.dlrm import grad_allreduce

        grad_allreduce.from_config(
            dataclasses.replace(cfg, compression="auto", grad_allreduce="auto")
        )


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_auto_chooses_the_all_reduce_with_the_exchange(tmp_path, capsys, optimizer):
    # 8 devices as 2 nodes of 4, told 1 Mbit/s between nodes: with SGD both gradient codecs
    # are timed and the -ar candidates compete with each; the run's all-reduce is the chosen
    # one, with its codec. With Adagrad (the docs' guidance) the all-reduce stays exact and is
    # not a candidate.
    require_eight_devices()
    result, log, out = _auto_run(
        tmp_path, capsys, node_devices=4, auto_inter_gbits=0.001, grad_allreduce="auto",
        exchange_backward="compressed", optimizer=optimizer,
    )  # fmt: skip
    auto = result["auto_exchange"]
    assert auto["choice"] == _check_rule(auto)
    assert log.train[-1].grad_allreduce == auto["grad_allreduce"]
    if optimizer == "sgd":
        assert set(auto["candidates"]) == set(ae.CANDIDATES)
        assert set(auto["probe"]["gradient_codecs"]) == {"auto", "fixed"}
        for name, g in auto["probe"]["gradient_codecs"].items():
            assert g["ratio"] > 1 and g["compress_bytes_per_s"] > 0
            assert f"gradient codec: {name} at REL 0.01" in out
            assert f"gradient codec {name}: compress" in out
        # at 1 Mbit/s the exact all-reduce of the head gradients dominates the step: an -ar
        # candidate wins, and the run's all-reduce codes with its gradient codec
        assert auto["grad_allreduce"] == "compressed"
        assert auto["grad_codec"] == ae.TRAINER_SETTINGS[auto["choice"]].grad_codec
        assert f"gradient codec {auto['grad_codec']}): " in out
        assert re.search(rf"gradient all-reduce: compressed \(codec {auto['grad_codec']},", out)
    else:
        assert set(auto["candidates"]) == {"exact", "flat", "hierarchical"}
        assert auto["probe"]["gradient_codecs"] == {} and auto["grad_allreduce"] == "exact"
        assert auto["grad_codec"] is None
    assert f"gradient all-reduce {auto['grad_allreduce']}" in out
