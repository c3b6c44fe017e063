"""The step-time model's fixed costs per device (models/dlrm/cluster/step_time.py) and their fit
on the testbed (bench/testbed/step_time_fit.py)."""

import dataclasses
import hashlib
import json
import math

import pytest

from bench.testbed import auto_check
from bench.testbed import step_time_fit as fit
from bench.testbed import step_time_rounds as rounds
from bench.testbed import testbed_inputs as sti
from models.dlrm.cluster import auto_exchange as ae
from models.dlrm.cluster import step_time as st

CODEC = st.CodecSpec(4e9, 9e9, 6.0)


def _codecs(overhead: float = 0.0) -> st.Codecs:
    return st.Codecs(CODEC, CODEC, exchange_overhead_s=overhead)


def test_fixed_costs_add_per_device_on_a_shared_core():
    m = st.terabyte_spec()
    for dpp in (1, 2, 4):
        cl = sti.testbed_cluster(dpp, 1e9, 10e9)  # 2 processes on 2 cores: dpp devices a core
        base = st.Compute(3e10, 6e9)
        with_dev = dataclasses.replace(base, device_overhead_s=0.02)
        for mode in ("exact", "hierarchical", "hierarchical-ar", "flat", "int8"):
            t0 = st.predict(m, cl, base, _codecs(), mode)
            t1 = st.predict(m, cl, with_dev, _codecs(0.007), mode)
            coded = 0.007 if mode in st.LIBRARY_MODES else 0.0
            assert t1.overhead_s == pytest.approx(dpp * (0.02 + coded))
            assert t1.step_s - t0.step_s == pytest.approx(dpp * (0.02 + coded))
            assert t1.step_overlap_s - t0.step_overlap_s == pytest.approx(dpp * (0.02 + coded))
    # scaling the throughput keeps the overhead
    assert st.Compute(1e9, 1e8, 0.01).scaled(2.0) == st.Compute(2e9, 2e8, 0.01)
    with pytest.raises(ValueError, match="device_overhead_s"):
        st.Compute(1e9, 1e8, -1.0)
    with pytest.raises(ValueError, match="exchange_overhead_s"):
        _codecs(-0.1)


def test_calibrated_compute_keeps_the_given_overhead():
    m = st.terabyte_spec()
    cl = sti.testbed_cluster(4, 11.56e9, 11.56e9)
    c = st.calibrate_compute(
        m, cl, _codecs(), 0.242, flops_per_byte=5.0, overlap=True, device_overhead_s=0.02
    )
    assert c.device_overhead_s == 0.02
    assert st.predict(m, cl, c, _codecs(), "exact").step(True) == pytest.approx(0.242)
    plain = st.calibrate_compute(m, cl, _codecs(), 0.242, flops_per_byte=5.0, overlap=True)
    assert c.flops_per_s > plain.flops_per_s  # the overhead took part of the step
    with pytest.raises(ValueError, match="not above"):  # 4 devices x 80 ms is above 242 ms
        st.calibrate_compute(m, cl, _codecs(), 0.242, flops_per_byte=5.0, device_overhead_s=0.08)


def test_fit_recovers_the_constants_of_synthetic_steps():
    """Steps made by the model itself with known constants, on 2 x 2 and 2 x 4 devices at
    three links, exact and two compressed modes: the fit finds the constants again."""
    m = st.terabyte_spec()
    truth = {"flops_per_s": 2.5e10, "device_overhead_s": 0.018, "exchange_overhead_s": 0.005}
    rows = []
    for dpp in (2, 4):
        for bits in (0.25e9, 1e9, 12e9):
            for mode, gcodec in (("exact", None), ("hierarchical", None), ("hierarchical-ar", 1)):
                row = {
                    "model_mode": mode,
                    "cluster": sti.testbed_cluster(dpp, bits, 12e9),
                    "codecs": st.Codecs(CODEC, st.CodecSpec(3e9, 8e9, 9.0 if gcodec else 6.0)),
                }
                row["measured_step_s"] = fit.predict_point(m, row, truth, 5.0).step_overlap_s
                rows.append(row)
    got = fit.fit(m, rows, 5.0)
    for k, v in truth.items():
        assert got[k] == pytest.approx(v, rel=1e-4), k
    # and on 2 x 2 alone the device overhead cannot be told from the FLOP/s: the 2 x 4 points
    # are what pins it (the fit still reproduces the 2 x 2 steps)
    two = [r for r in rows if r["cluster"].devices_per_node == 2]
    g2 = fit.fit(m, two, 5.0)
    for r in two:
        assert fit.predict_point(m, r, g2, 5.0).step_overlap_s == pytest.approx(
            r["measured_step_s"], rel=1e-3
        )


def test_fit_recovers_the_inter_node_message_latency():
    """With ``message_latency`` the fit also finds the latency per inter-node message, which
    the flat exchange pays per remote peer and the hierarchical one once: steps made by the
    model with a 4 ms latency give it back, and the three-constant fit cannot reproduce them."""
    m = st.terabyte_spec()
    truth = {
        "flops_per_s": 2.5e10,
        "device_overhead_s": 0.01,
        "exchange_overhead_s": 0.002,
        "inter_latency_s": 0.004,
    }
    rows = []
    for dpp in (2, 3, 4):
        for bits in (0.2e9, 0.5e9):
            for mode in ("exact", "flat", "hierarchical", "hierarchical-ar"):
                row = {
                    "model_mode": mode,
                    "cluster": sti.testbed_cluster(dpp, bits, 12e9, burst_bytes=131575.0),
                    "codecs": st.Codecs(CODEC, st.CodecSpec(3e9, 8e9, 9.0)),
                }
                row["measured_step_s"] = fit.predict_point(m, row, truth, 5.0).step_overlap_s
                rows.append(row)
    got = fit.fit(m, rows, 5.0, message_latency=True)
    assert set(got) == set(truth)
    for k, v in truth.items():
        assert got[k] == pytest.approx(v, rel=1e-4), k
    three = fit.fit(m, rows, 5.0)
    assert "inter_latency_s" not in three
    worst = max(
        abs(fit.predict_point(m, r, three, 5.0).step_overlap_s / r["measured_step_s"] - 1)
        for r in rows
    )
    assert worst > 0.02
    # the flat exchange's extra latency: (P - G) remote peers against 1, each way
    r = next(r for r in rows if r["model_mode"] == "flat" and r["cluster"].devices_per_node == 4)
    h = dict(r, model_mode="hierarchical")
    dt = {
        lat: fit.predict_point(m, r, truth | {"inter_latency_s": lat}, 5.0).step_s
        - fit.predict_point(m, h, truth | {"inter_latency_s": lat}, 5.0).step_s
        for lat in (0.0, 0.004)
    }
    p, g = 8, 4  # flat: P - G remote peers each way, hierarchical: N - 1 = 1
    assert dt[0.004] - dt[0.0] == pytest.approx(2 * ((p - g) - 1) * 0.004)


def test_leave_one_file_out_predicts_each_file_from_the_others_alone():
    """Two files made by the model with the same constants and a third whose steps all took
    1.3x longer: left out, the third is predicted from the others' constants, exactly 1/1.3
    of its steps, where the fit on every file splits the difference."""
    m = st.terabyte_spec()
    truth = {"flops_per_s": 2.5e10, "device_overhead_s": 0.01, "exchange_overhead_s": 0.002}
    rows = []
    for name, dpp, scale in (("a", 2, 1.0), ("b", 4, 1.0), ("c", 3, 1.3)):
        for bits in (0.2e9, 1e9):
            for mode in ("exact", "hierarchical", "hierarchical-ar"):
                row = {
                    "file": name,
                    "model_mode": mode,
                    "cluster": sti.testbed_cluster(dpp, bits, 12e9),
                    "codecs": st.Codecs(CODEC, st.CodecSpec(3e9, 8e9, 9.0)),
                }
                t = fit.predict_point(m, row, truth, 5.0).step_overlap_s
                rows.append(row | {"measured_step_s": scale * t})
    left_out = fit.leave_one_file_out(m, rows, 5.0, message_latency=False)
    assert len(left_out) == len(rows)  # in the rows' file order: a, b, c
    assert left_out[-6:] == pytest.approx([1 / 1.3 - 1] * 6, abs=1e-6)
    in_sample = fit.relative_errors(m, rows, fit.fit(m, rows, 5.0), 5.0)
    assert max(abs(e) for e in in_sample[-6:]) < abs(1 / 1.3 - 1) - 0.02


def test_committed_ahead_points_and_auto_rows():
    res = json.loads((sti.RESULTS / "step_time_check.json").read_text())["ahead"]
    assert [r["name"] for r in res["rounds"]] == [r.name for r in rounds.ROUNDS]
    # every round's predictions are the ones committed before its files were measured (the
    # regeneration test ties the JSON to the code, this ties it to the predictions of then): a
    # change to the model, the fit or their inputs (codec_testbed.json) that moves any of them
    # fails here; a new round is added, never an old one refitted
    pred = [[pt["predicted_step_s"] for pt in r["points"]] for r in res["rounds"][:2]]
    assert [len(v) for v in pred] == [25, 15]
    digest = hashlib.sha256(json.dumps(pred).encode()).hexdigest()
    assert digest == "1b91871e02a392279b97903f4a8dd75682ae280d93f87b1c095b684b210de3eb"
    assert pred[0][0] == pytest.approx(0.20235, rel=1e-5)  # 2 x 3, unlimited, exact
    pred3 = [pt["predicted_step_s"] for pt in res["rounds"][2]["points"]]  # committed later
    digest3 = hashlib.sha256(json.dumps(pred3).encode()).hexdigest()
    assert digest3 == "0f0a4e5014e25d711d27d1d97411e736172ecc8bcd21a450d17adcdfdece9cb5"
    assert pred3[0] == pytest.approx(0.283781, rel=1e-5)  # 2 x 2, 500 Mbit/s, exact
    pred4 = [pt["predicted_step_s"] for pt in res["rounds"][3]["points"]]  # the latency fitted
    digest4 = hashlib.sha256(json.dumps(pred4).encode()).hexdigest()
    assert digest4 == "69cf06774dd5ccb7ddd25fc0aa2915d71f523fac1d9eeac4f0ab10f2d30954e4"
    assert pred4[0] == pytest.approx(0.42113, rel=1e-5)  # 2 x 2, 300 Mbit/s, exact
    assert res["rounds"][3]["constants"]["inter_latency_s"] > 0
    for rnd, got in zip(rounds.ROUNDS, res["rounds"]):
        if got.get("pending"):
            continue
        assert {pt["points"] for pt in got["points"]} == {g[0] for g in rnd.groups}
        # every (layout, rate) of the round in every fixed mode; none of them in a fitted file
        assert len(got["points"]) == len(fit.AHEAD_MODES) * sum(len(g[2]) for g in rnd.groups)
        fitted = {}
        for f in got["fit_files"]:
            data = json.loads((sti.RESULTS / f).read_text())
            dpp = data["params"]["devices_per_process"]
            fitted.setdefault(dpp, set()).update(r["rate"] for r in data["runs"])
        for pt in got["points"]:
            dpp = int(pt["layout"].split(" x ")[1].split()[0])
            assert pt["rate"] not in fitted.get(dpp, set()), pt
            if "error" in pt:
                want = pt["predicted_step_s"] / pt["measured_step_s"] - 1
                assert pt["error"] == pytest.approx(want, abs=1e-5)
    for a in res["auto"] + res["auto_after_rule"] + res["auto_windowed_probe"]:
        assert a["best_fixed_step_s"] == min(a["fixed_steps_s"].values())
        assert a["vs_best"] == pytest.approx(
            a["auto_step_s"] / a["best_fixed_step_s"] - 1, abs=1e-5
        )
        assert a["choice"] in ae.CANDIDATES


def test_auto_rows_compare_against_the_best_fixed_choice(tmp_path):
    def run(mode, t, **kw):
        return {"rate": "100mbit", "mode": mode, "status": "ok", "step_time_s": t, **kw}

    file = rounds.ROUNDS[0].groups[1][3]
    runs = [run("exact", 1.0), run("compressed-hierarchical", 0.6), run("compressed-flat", 0.62)]
    runs += [
        run("auto", 0.63, auto_choice="hierarchical", auto_predicted_step_s=0.59,
            auto_hindsight_choice="flat")
    ]  # fmt: skip
    (tmp_path / file).write_text(json.dumps({"runs": runs}))
    (a,) = auto_check.auto_rows(tmp_path, auto_check.round_groups(rounds.ROUNDS))
    assert (a["choice"], a["best_fixed"]) == ("hierarchical", "compressed-hierarchical")
    assert a["vs_best"] == pytest.approx(0.05) and a["vs_exact"] == pytest.approx(-0.37)
    assert math.isclose(a["auto_predicted_step_s"], 0.59) and a["hindsight_choice"] == "flat"


def test_the_all_gathers_own_ratio_sets_its_bytes():
    """The all-reduce's phases recorded apart give each its ratio: the all-gather's edge
    bytes follow its own (the reduced sums re-coded), the reduce-scatter's the gradient's."""
    m = st.terabyte_spec()
    cl = sti.testbed_cluster(2, 1e9, 10e9)
    s, p = m.gradient_bytes(), cl.devices
    run = {  # all devices, per step: raw 2 S P; the scatter at 8x, the gather at 4x
        "raw_bytes_per_step": m.exchange_bytes(p) * p,
        "moved_bytes_per_step": 1.0,
        "inter_node_raw_bytes_per_step": 10.0,
        "inter_node_moved_bytes_per_step": 1.0,
        "allreduce_raw_bytes_per_step": 2 * s * p,
        "allreduce_moved_bytes_per_step": s * p / 8 + s * p / 4,
        "allreduce_scatter_moved_bytes_per_step": s * p / 8,
        "allreduce_gather_moved_bytes_per_step": s * p / 4,
    }
    inp = sti.stats_inputs(run, p)
    assert (inp["gradient_ratio"], inp["gradient_gather_ratio"]) == (8.0, 4.0)
    old = {k: v for k, v in run.items() if "scatter" not in k and "gather" not in k}
    assert "gradient_gather_ratio" not in sti.stats_inputs(old, p)
    speeds = {"jlc-auto": {"compress_bytes_per_s": 1e9, "decompress_bytes_per_s": 1e9}}
    both = sti.testbed_codecs(speeds, 10.0, None, 8.0, 4.0)
    same = sti.testbed_codecs(speeds, 10.0, None, 8.0)
    compute = st.Compute(1e10, 2e9)
    t4 = st.predict(m, cl, compute, both, "hierarchical-ar")
    t8 = st.predict(m, cl, compute, same, "hierarchical-ar")
    # per device the all-gather's ring edge carries (P-1)/P S / ratio across nodes
    assert t4.inter_bytes - t8.inter_bytes == pytest.approx((p - 1) / p * s * (1 / 4 - 1 / 8))
    with pytest.raises(ValueError, match="gradient_gather_ratio"):
        dataclasses.replace(both, gradient_gather_ratio=0.0)


def test_a_token_bucket_passes_one_burst_per_collective_free():
    """With ``inter_burst_bytes`` each inter-node collective (the exchange each way, the
    all-reduce's ring or its two phases) saves its bytes up to the node's burst at the link's
    rate; a collective below the burst costs only its latency; the unlimited link nothing."""
    m = st.terabyte_spec()
    compute = st.Compute(1e10, 2e9)
    codecs = st.Codecs(CODEC, st.CodecSpec(3e9, 8e9, 9.0))
    burst = 131584.0
    for mode, collectives in (("exact", 3), ("hierarchical", 3), ("hierarchical-ar", 4)):
        plain = sti.testbed_cluster(2, 0.1e9, 12e9)
        bucket = sti.testbed_cluster(2, 0.1e9, 12e9, burst_bytes=burst)
        t0 = st.predict(m, plain, compute, codecs, mode)
        t1 = st.predict(m, bucket, compute, codecs, mode)
        node_rate = 0.1e9 / 8  # the veth, both devices of the node together
        saved = t0.step_s - t1.step_s
        assert saved == pytest.approx(collectives * burst / node_rate, rel=1e-9), mode
        assert t1.inter_bytes == t0.inter_bytes  # the bytes still cross
    small = st.Cluster(2, 1, 1e9, 1e6, inter_latency=1e-4, inter_burst_bytes=1e12)
    t = st.predict(m, small, compute, codecs, "exact")
    assert t.exchange_forward_inter_s == pytest.approx(1e-4)  # one peer: its latency only
    assert sti.testbed_cluster(2, math.inf, math.inf, burst_bytes=burst).inter_burst_bytes == burst
    with pytest.raises(ValueError, match="inter_burst_bytes"):
        st.Cluster(2, 1, 1e9, 1e6, inter_burst_bytes=-1.0)


def test_auto_rows_take_every_library_mode_beside_auto_and_the_tally_counts_them(tmp_path):
    def run(rate, mode, t, **kw):
        return {"rate": rate, "mode": mode, "status": "ok", "step_time_s": t, **kw}

    runs = [run("1gbit", "exact", 1.0), run("1gbit", "compressed-bwd-ar-bf16", 0.5)]
    runs += [run("1gbit", "torchrec-fp32", 0.1), run("unlimited", "exact", 0.2)]
    runs += [run("1gbit", "auto", 0.54, auto_choice="flat-ar-fixed")]
    runs += [run("unlimited", "auto", 0.3, auto_choice="exact", round=0)]
    runs += [run("unlimited", "auto", 0.1, auto_choice="flat", round=1)]
    (tmp_path / "x.json").write_text(json.dumps({"runs": runs}))
    a, b = auto_check.auto_rows(tmp_path, [("2x1", ("1gbit", "unlimited"), "x.json")])
    assert (b["choice"], b["choices"], b["auto_step_s"]) == ("exact", ["exact", "flat"], 0.2)
    assert "| 2x1 | unlimited | exact, flat (by round) | 200 ms |" in "\n".join(
        auto_check.render_auto([], [b])
    )
    assert a["fixed_steps_s"] == {"exact": 1.0, "compressed-bwd-ar-bf16": 0.5}  # no TorchRec
    assert a["vs_best"] == pytest.approx(0.08) and a["vs_exact"] == pytest.approx(-0.46)
    page = "\n".join(auto_check.render_auto([], [a]))
    assert "on **0 of 1**; against exact at worst -46.0%" in page
    assert "| 2x1 | 1gbit | flat-ar-fixed | 540 ms |" in page
    assert auto_check.render_auto([], []) == []
    both = "\n".join(auto_check.render_auto([], [a], [dict(a, vs_best=0.01)]))
    windowed, one_window = both.split("After the rule changed")  # the windowed probe first
    assert "With the windowed probe" in windowed and "on **1 of 1**" in windowed
    assert "on **0 of 1**" in one_window
