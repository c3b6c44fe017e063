"""Fast smoke tests of the benchmarks' pure functions (no timing, no JAX).

Pareto front on fixed numbers, the jlc-auto verdict, Markdown rendering and the README marker
replacement, the report re-rendered from the committed JSON results equal to the committed
Markdown, the codec target checks, the trainer-metrics summaries of the training and netns
benchmarks (read through the model's metrics reader), the REL bound conversion of the library
adapter, and the netns rate parser.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from bench import bench_util as bu
from bench import trainer_runs
from bench.codecs import codec_targets, jax_codecs, pareto
from bench.reports import codec_tables, report
from bench.testbed import netns_results, netns_testbed, run_summary
from bench.training import train_compare
from models.dlrm import metrics


def test_pareto_front_fixed_points():
    pts = [
        (1.0, 10.0),
        (2.0, 5.0),
        (0.5, 20.0),
        (0.4, 15.0),
        (2.0, 5.0),
        (3.0, 1.0),
        (1.0, 9.0),
        (float("nan"), 100.0),
    ]
    assert pareto.pareto_front(pts) == [True, True, True, False, True, True, False, False]
    assert pareto.pareto_front([]) == []
    assert pareto.pareto_front([(1.0, 1.0)]) == [True]


def _row(
    codec,
    family,
    ratio,
    gbps,
    ok=True,
    bounded=True,
    dump="kaggle_table08",
    eb=0.01,
    nbytes=16384,
    seconds=1e-4,
):
    return {
        "status": "ok",
        "codec": codec,
        "family": family,
        "error_bounded": bounded,
        "ratio": ratio,
        "compress_gbps": gbps,
        "decompress_gbps": gbps * 2,
        "max_err_over_eb": 0.9 if ok else 2.0,
        "bound_ok": ok,
        "bound_violated": bounded and not ok,
        "dump": dump,
        "tiled": False,
        "shape": [128, 32],
        "eb_rel": eb,
        "raw_bytes": nbytes,
        "compress": {"median_s": seconds},
    }


PEERS = {
    "params": {"eb_rels": [0.01]},
    "environment": {
        "utc": "2026-01-01T00:00:00+00:00",
        "cpu_model": "cpu",
        "cpu_count": 2,
        "git_commit": "abc",
    },
    "codecs": [{"name": "sz3-default", "available": False, "skip_reason": "no pysz"}],
    "rows": [
        _row("zstd-1", "lossless", 50.0, 1.5),
        _row("quant-codes+zstd-1", "quantization", 110.0, 0.3),
        _row("fbgemm-mx4", "fbgemm-qcomm", 7.5, 0.04, ok=False, bounded=False),
        _row("jax-bf16", "cast", 2.0, 0.3, seconds=5e-5),
        _row("jlc-auto", "jax_lossy_comm", 190.0, 0.2),
        _row("jlc-entropy", "jax_lossy_comm", 190.0, 0.25),
        _row("zstd-1", "lossless", 2.0, 0.6, dump="terabyte_table01", nbytes=1 << 19),
        _row("jlc-auto", "jax_lossy_comm", 21.0, 0.5, dump="terabyte_table01", nbytes=1 << 19),
        _row("sz3-nopred", "sz3", 25.0, 0.6, dump="terabyte_table01"),
        {
            "status": "skipped",
            "codec": "sz3-default",
            "skip_reason": "no pysz",
            "dump": "kaggle_table08",
            "eb_rel": 0.01,
            "tiled": False,
        },
    ],
}


def test_pareto_analysis_verdicts():
    by = {a["dump"]: a for a in pareto.pareto_analysis(PEERS["rows"], 0.01)}
    k = by["kaggle_table08"]
    # the library's other forms do not compete with auto on the front
    assert k["front_bounded"] == ["zstd-1", "quant-codes+zstd-1", "jlc-auto"]
    assert "jlc-entropy" in k["front_bounded_with_forms"]
    assert "jlc-auto" not in k["front_bounded_with_forms"]
    assert k["auto"]["on_front"] and k["auto"]["dominated_by_library_forms"] == ["jlc-entropy"]
    assert [p["codec"] for p in k["auto"]["faster_peers"]] == [
        "zstd-1",
        "quant-codes+zstd-1",
        "jax-bf16",
    ]
    assert k["violations"] == [
        {"codec": "fbgemm-mx4", "max_err_over_eb": 2.0, "error_bounded": False}
    ]
    t = by["terabyte_table01"]
    assert not t["auto"]["on_front"] and t["auto"]["dominated_by"] == ["sz3-nopred"]
    assert t["auto"]["higher_ratio_peers"] == ["sz3-nopred"]


def test_markdown_and_summary():
    train = {
        "params": {"preset": "kaggle", "steps": 10},
        "environment": PEERS["environment"],
        "runs": [
            {
                "name": "exact",
                "status": "ok",
                "auc": 0.7,
                "logloss": 0.5,
                "moved_bytes_per_step": 2**20,
                "moved_ratio": 1.0,
                "frame_bytes_per_step": 2**20,
                "samples_per_s": 1000.0,
            },
            {
                "name": "jlc-paper",
                "status": "ok",
                "auc": 0.699,
                "logloss": 0.501,
                "moved_bytes_per_step": 2**18,
                "moved_ratio": 4.0,
                "frame_bytes_per_step": 2**16,
                "samples_per_s": 900.0,
            },
            {"name": "bf16", "status": "error", "log_tail": "boom"},
        ],
    }
    netns = {"status": "skipped", "skip_reason": "not root"}
    pages = report.family_pages(PEERS, train, netns)
    assert sorted(pages) == ["RESULTS.md", "codecs.md", "link.md", "training.md"]
    md = "\n".join(pages.values())
    assert "| kaggle_table08 | 190.0 |" in md and "kaggle_table08 [128, 32]: front" in md
    assert "**yes** [1] |" in md and "| NO [2] |" in md
    assert "-0.00100" in md and "4.00x" in md
    assert "Skipped: not root" in md
    assert "sz3-default (no pysz)" in md
    assert "none.**" in md  # no error-bounded codec violated its bound
    assert "why: 50 us of jlc-auto's 100 us" in md
    assert "#### kaggle_table08, REL 0.01" in md and "(pareto_rel0.01.png)" in md
    s = report.summary(PEERS, train, netns)
    assert "kaggle_table08" in s and "ON the front" in s and "NOT on the front" in s
    assert "fbgemm-mx4" in s


def _committed(name):
    path = bu.RESULTS_DIR / name
    if not path.is_file():
        pytest.skip(f"{path} absent")
    return json.loads(path.read_text())


def test_report_rerenders_the_committed_results():
    """The report from the committed JSON results is the committed Markdown: RESULTS.md, the
    family pages (codecs.md, training.md, link.md) and codec.md (so a rerun that is not
    re-rendered shows here)."""
    peers, codec = _committed("peers.json"), _committed("codec.json")
    train, netns = _committed("train_compare.json"), _committed("netns.json")
    fid = {n: _committed(f"{n}.json") for n in ("fidelity_kaggle", "fidelity_dcnv2_small")}
    pages = report.family_pages(peers, train, netns, fid)
    assert "fidelity.md" in pages
    for name, text in pages.items():
        assert text == (bu.RESULTS_DIR / name).read_text(), name
    assert codec_tables.codec_markdown(codec) == (bu.RESULTS_DIR / "codec.md").read_text()
    # the checks stored by the targets suite are those check_targets makes from its rows
    assert codec_targets.check_targets(codec["rows"], codec["paired"]) == codec["checks"]


def test_render_writes_the_results_pages_and_leaves_the_readme_alone(tmp_path, monkeypatch):
    """``render`` writes the Markdown pages into the results folder it is given, the same as
    the committed ones, and never README.md (the README links the pages)."""
    names = ["peers.json", "codec.json", "train_compare.json", "netns.json"]
    names += ["netns_two_node.json", "netns_two_node_rates.json"]
    for name in names:
        (tmp_path / name).write_text(json.dumps(_committed(name)))
    monkeypatch.setattr(report.figures, "plot_all", lambda results: [])  # tables only
    readme = bu.REPO_ROOT / "README.md"
    before = (readme.read_bytes(), readme.stat().st_mtime_ns)
    assert report.render(tmp_path) == 0
    assert (readme.read_bytes(), readme.stat().st_mtime_ns) == before
    pages = sorted(p.name for p in tmp_path.glob("*.md"))
    assert pages == [
        "RESULTS.md",
        "codec.md",
        "codecs.md",
        "link.md",
        "training.md",
        "two_node.md",
        "two_node_rates.md",
    ]
    for page in pages:
        assert (tmp_path / page).read_text() == (bu.RESULTS_DIR / page).read_text(), page


def _lib_row(codec, family, ratio, c_gbps, d_gbps, dump="terabyte_table01", err=0.99):
    return {
        "status": "ok",
        "codec": codec,
        "family": family,
        "ratio": ratio,
        "compress_gbps": c_gbps,
        "decompress_gbps": d_gbps,
        "max_err_over_eb": err,
        "dump": dump,
        "eb_rel": 0.01,
    }


def test_check_targets_and_codec_markdown():
    rows = [
        _lib_row("jlc-auto", "jax_lossy_comm", 20.0, 1.0, 2.0),
        _lib_row("jlc-fixed", "jax_lossy_comm", 5.0, 6.0, 8.0, err=1.5),
        _lib_row(codec_targets.PEER, "quantization", 18.0, 0.5, 4.0),
        _lib_row("memcpy", "copy", 1.0, 20.0, 20.0, err=0.0),
    ]
    paired = [
        {
            "dump": "terabyte_table01",
            "eb_rel": 0.01,
            "compress_over_memcpy": 0.4,
            "decompress_over_memcpy": 0.2,
            "jit_copy_over_memcpy": 0.6,
            "compress_auto_over_peer": 3.0,
            "decompress_auto_over_peer": 0.5,
        }
    ]
    checks = codec_targets.check_targets(rows, paired)
    got = {c["what"]: (c["value"], c["target"], c["ok"]) for c in checks}
    assert got["ratio auto >= target"] == (20.0, 21.0, False)
    assert got["ratio auto / int8+zstd-1"] == (20.0 / 18.0, 1.0, True)
    assert got["compress speed auto / int8+zstd-1 (side by side)"] == (3.0, 1.0, True)
    assert got["decompress speed auto / int8+zstd-1 (side by side)"] == (0.5, 1.0, False)
    assert got["compress speed fixed / memcpy (side by side)"] == (0.4, 0.25, True)
    assert got["decompress speed fixed / memcpy (side by side)"] == (0.2, 0.25, False)
    assert got["jlc-fixed bound at REL 0.01"] == (1.5, 1.0, False)
    assert len(checks) == 7
    # without side-by-side timings the separately timed GB/s are compared
    alone = {c["what"]: c["value"] for c in codec_targets.check_targets(rows)}
    assert alone["compress speed auto / int8+zstd-1"] == 2.0
    assert alone["decompress speed fixed / memcpy"] == 0.4
    env = {"cpu_model": "cpu", "packages": {"jax": "0.10.2"}}
    md = codec_tables.codec_markdown({"rows": rows, "environment": env, "checks": checks})
    assert "| terabyte_table01 | 0.01 | memcpy | 1.00 | - | 20.00 | 20.00 |" in md
    assert "| terabyte_table01 | 0.01 | jlc-fixed | 5.00 | 1.500 | 6.00 | 8.00 |" in md
    assert "| decompress speed fixed / memcpy (side by side) | 0.2 | 0.25 | **no** [1] |" in md
    assert "\n1. jitted" in md and "\n2. " not in md  # one note, numbered once
    assert md.index("Targets at REL 0.01") < md.index("| terabyte_table01 | 0.01 | memcpy")


def _train_record(step, samples_per_s, fallback_steps, loss, net_tx_bytes=None):
    return metrics.TrainRecord(
        step=step,
        loss=loss,
        auc=0.6,
        samples_per_s=samples_per_s,
        compression_ratio=4.0,
        raw_bytes=60.0,
        frame_bytes=15.0,
        moved_bytes=30.0,
        moved_ratio=2.0,
        ratio_per_table=[4.0],
        fallback_steps=fallback_steps,
        seconds=1.0,
        unix_time=0.0,
        error_bound=[0.01],
        bad_lines=0,
        exchange="on",
        net_tx_bytes=net_tx_bytes,
    )


def test_trainer_metrics_summaries(tmp_path):
    recs = [
        metrics.ConfigRecord(
            step=0,
            config={"batch_size": 1024},
            devices=8,
            processes=1,
            label="",
            data="synthetic",
            error_bound="paper",
        ),
        _train_record(3, 100.0, 0, 0.7, net_tx_bytes=300.0),
        _train_record(6, 1024.0, 1, 0.6, net_tx_bytes=600.0),
        _train_record(9, 512.0, 0, 0.5, net_tx_bytes=30.0),
        metrics.EvalRecord(step=9, auc=0.61, logloss=0.55, accuracy=0.7, rows=64),
        metrics.FinalRecord(
            auc=0.61, logloss=0.55, accuracy=0.7, rows=64, step=9, params_checksum=1.0
        ),
    ]
    p = tmp_path / "metrics.jsonl"
    p.write_text("".join(metrics.to_json(r) + "\n" for r in recs))
    log = metrics.read_metrics(p)
    s = run_summary.summarize(log)
    assert s["intervals"] == 2 and s["step_times_s"] == [1.0, 2.0]
    assert s["step_time_s"] == 1.5 and s["moved_bytes_per_step"] == 10.0
    assert s["samples_per_s"] == 1024 / 1.5
    assert s["link_bytes_per_step"] == 105.0  # median of 200 and 10 bytes per step
    assert s["auc"] == 0.61 and s["fallback_steps"] == 1
    m = train_compare.summarize(log)
    assert m["moved_bytes_per_step"] == 10.0 and m["moved_ratio"] == 2.0
    assert m["exchange_ratio"] == 4.0 and m["curves"]["eval_auc"] == [0.61]
    assert m["curves"]["loss"] == [0.7, 0.6, 0.5] and m["final_step"] == 9
    assert m["samples_per_s"] == 1024.0
    assert trainer_runs.interval_steps([3, 6, 9]) == [3, 3, 3] and trainer_runs.interval_steps(
        [5, 5]
    ) == [5, 1]
    assert "jlc-paper" in train_compare.RUNS
    assert train_compare.run_flags("jlc-auto", 100, 0.5)[-4:] == [
        "--eb-early-stage",
        "50",
        "--eb-update-every",
        "10",
    ]
    with pytest.raises(ValueError):
        train_compare.run_flags("nope", 10, 0.5)
    paper = train_compare.run_flags("jlc-paper", 100, 0.5)
    assert train_compare.run_flags("jlc-paper-ar", 100, 0.5) == [
        *paper,
        "--grad-allreduce",
        "compressed",
    ]
    assert train_compare.run_flags("jlc-paper-ar-bf16", 100, 0.5)[-2:] == [
        "--grad-allreduce",
        "bf16",
    ]
    assert m["allreduce_moved_bytes_per_step"] == 0.0 and m["allreduce_fallback_steps"] == 0
    sp = netns_results.speedups(
        [
            {"rate": "1gbit", "mode": "exact", "status": "ok", "step_time_s": 3.0},
            {"rate": "1gbit", "mode": "compressed", "status": "ok", "step_time_s": 2.0},
        ]
    )
    assert sp == {"1gbit": {"compressed": 1.5}}


def test_rate_bits():
    assert netns_testbed.rate_bits("1gbit") == 1e9
    assert netns_testbed.rate_bits("500mbit") == 5e8
    assert math.isinf(netns_testbed.rate_bits("unlimited"))
    with pytest.raises(ValueError):
        netns_testbed.rate_bits("fast")


def test_serial_model():
    """Step = unlimited step + link bytes / rate; speedup, free-codec cap, rate for 1.5x."""

    def run(rate, mode, t, mib):
        return {
            "rate": rate,
            "mode": mode,
            "status": "ok",
            "step_time_s": t,
            "samples_per_s": 1.0,
            "link_bytes_per_step": mib * 2**20,
        }

    runs = [
        run("unlimited", "exact", 0.2, 19.0),
        run("unlimited", "compressed", 0.24, 7.0),
        run("1gbit", "exact", 0.3, 19.0),
        run("1gbit", "compressed", 0.26, 7.0),
    ]
    m = netns_results.serial_model(runs, "1gbit", "compressed")
    le, lc = 19 * 2**20 * 8 / 1e9, 7 * 2**20 * 8 / 1e9
    assert m["link_exact_s"] == pytest.approx(le) and m["link_mode_s"] == pytest.approx(lc)
    assert m["model"] == pytest.approx((0.2 + le) / (0.24 + lc))
    assert m["free_codec"] == pytest.approx((0.2 + le) / (0.2 + lc))
    # at the returned rate the model gives exactly 1.5x
    r = m["rate_for_target"]
    bits_e, bits_c = 19 * 2**20 * 8, 7 * 2**20 * 8

    def model(rate, ce=0.2, cc=0.24, be=bits_e, bc=bits_c):
        return (ce + be / rate) / (cc + bc / rate)

    assert m["reached"] == "slower" and model(r) == pytest.approx(1.5)
    assert model(r / 2) > 1.5 > model(2 * r)
    assert netns_results.serial_model(runs[2:], "1gbit", "compressed") is None  # no unlimited

    def case(cc, mib_c):
        rs = [
            run("unlimited", "exact", 0.2, 19.0),
            run("unlimited", "compressed", cc, mib_c),
            run("1gbit", "exact", 0.3, 19.0),
            run("1gbit", "compressed", 0.3, mib_c),
        ]
        return netns_results.serial_model(rs, "1gbit", "compressed")

    # as many bytes as exact and more compute: never
    assert case(0.24, 19.0)["reached"] == "never" and case(0.24, 19.0)["rate_for_target"] is None
    # compute 2x faster, few bytes saved: 1.5x on fast links only (at the rate or faster)
    m = case(0.1, 15.0)
    r = m["rate_for_target"]
    assert m["reached"] == "faster"
    assert model(r, cc=0.1, bc=15 * 2**20 * 8) == pytest.approx(1.5)
    assert model(2 * r, cc=0.1, bc=15 * 2**20 * 8) > 1.5 > model(r / 2, cc=0.1, bc=15 * 2**20 * 8)
    assert case(0.1, 7.0)["reached"] == "always"


def test_rel_bound_within():
    """The REL bound handed to the library never gives a float32 eb_abs above the harness's."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        lo, hi = sorted(rng.standard_normal(2).astype(np.float32) * rng.uniform(0.01, 100))
        eb = float(rng.uniform(1e-4, 0.1)) * (float(hi) - float(lo))
        r = jax_codecs.rel_bound_within(lo, hi, eb)
        got = float(np.float32(np.float32(r) * np.float32(np.float32(hi) - np.float32(lo))))
        assert got <= eb and got >= eb * (1 - 1e-6)
    assert jax_codecs.rel_bound_within(1.0, 1.0, 0.1) == 0.0


def test_exchange_compile_ratios_and_markdown():
    from bench.training import exchange_compile

    def row(lib, p, variant, compile_s, hlo, stablehlo):
        return dict(
            library=lib,
            devices=p,
            variant=variant,
            lower_s=0.1,
            compile_s=compile_s,
            hlo_chars=hlo,
            stablehlo_chars=stablehlo,
        )

    rows = [
        row("candidate", 8, "lax", 1.0, 100, 10),
        row("candidate", 8, "dense", 2.0, 400, 40),
        row("candidate", 8, "packed", 3.0, 1000, 100),
        row("candidate", 8, "ragged", None, None, 60),
        row("baseline", 8, "dense", 2.0, 400, 40),
        {"library": "baseline", "devices": 64, "error": "timed out after 5 s"},
    ]
    (q,) = [r for r in exchange_compile.ratios(rows) if r["library"] == "candidate"]
    assert q["packed_over_dense_compile"] == 1.5
    assert q["packed_over_dense_hlo"] == 2.5
    assert q["packed_over_dense_stablehlo"] == 2.5
    assert q["ragged_over_dense_stablehlo"] == 1.5
    assert q["packed_over_lax_compile"] == 3.0
    (b,) = [r for r in exchange_compile.ratios(rows) if r["library"] == "baseline"]
    assert b["packed_over_dense_compile"] is None  # no packed row
    result = {"rows": rows, "ratios": exchange_compile.ratios(rows), "env": {}, "baseline": "X"}
    text = exchange_compile.markdown(result)
    assert "| candidate | 8 | packed | 0.10 | 3.00 | 100 | 1,000 |" in text
    assert "timed out after 5 s" in text
