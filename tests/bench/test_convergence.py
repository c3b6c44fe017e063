"""bench.training.convergence: intervals, the seeds they need, convergence of the exact run,
and the page of a long-run sweep (on a hand-made result and on the committed one)."""

from __future__ import annotations

import json

import pytest

from bench import bench_util as bu
from bench.training import convergence as cv
from bench.training import train_compare as tc


def test_t_interval_and_the_seeds_a_target_width_takes():
    # t(0.975, 2) = 4.3027: 4.3027 * 0.001 / sqrt(3)
    assert cv.t_half_width([0.001, -0.001, 0.0]) == pytest.approx(0.0024841, rel=1e-4)
    assert cv.t_half_width([0.002]) is None
    # at a spread of 0.001: 17 seeds give +/-0.000514, 18 give +/-0.000497
    assert cv.seeds_needed(0.001) == 18
    assert cv.seeds_needed(0.0001) == 3  # t(2) 4.30 * 0.0001 / sqrt(3) = 0.00025
    assert cv.seeds_needed(1.0, most=50) == 50


def test_last_fifth_gain():
    steps = [1000, 2000, 3000, 4000, 5000]
    assert cv.last_fifth_gain(steps, [0.70, 0.75, 0.77, 0.78, 0.7825], 5000) == pytest.approx(
        0.0025
    )  # 0.7825 - the AUC at step 4000 (80% of 5000)
    assert cv.last_fifth_gain(steps[:3], [0.70, 0.75, 0.77], 5000) is None  # stopped early
    assert cv.last_fifth_gain([5000], [0.8], 5000) is None


def _run(name, seed, auc, curve, ar=(4.0, 1.0, 0.8)):
    return {
        "name": name,
        "seed": seed,
        "status": "ok",
        "auc": auc,
        "curves": {"eval_step": [1000, 2000, 3000, 4000, 5000], "eval_auc": curve},
        "raw_bytes_per_step": 100.0,
        "moved_bytes_per_step": 20.0 if name != "exact" else 100.0,
        "frame_bytes_per_step": 10.0 if name != "exact" else 100.0,
        "allreduce_raw_bytes_per_step": ar[0],
        "allreduce_moved_bytes_per_step": ar[1] if name != "exact" else ar[0],
        "allreduce_frame_bytes_per_step": ar[2] if name != "exact" else ar[0],
    }


def _result():
    runs = []
    for seed, base in ((0, 0.80), (1, 0.81), (2, 0.79)):
        flat = [base - 0.01, base - 0.004, base - 0.001, base - 0.0002, base]
        runs.append(_run("exact", seed, base, flat))
        d = {0: 0.0004, 1: -0.0002, 2: 0.0001}[seed]
        runs.append(_run("ar", seed, base + d, [a + d for a in flat]))
    runs.append({"name": "ar", "seed": 3, "status": "error"})
    return {
        "params": {
            "preset": "p",
            "steps": 5000,
            "seeds": [0, 1, 2],
            "eval_rows": 1000,
            "devices": 8,
        },
        "environment": {"git_commit": "abcdef0123456"},
        "runs": runs,
    }


def test_summary_and_page_of_a_sweep(tmp_path):
    res = _result()
    s = cv.summarize(res)
    assert s["exact_gain_last_fifth"] == {"0": pytest.approx(0.0002), "1": pytest.approx(0.0002),
                                          "2": pytest.approx(0.0002)}  # fmt: skip
    assert s["converged"]
    ar = s["runs"]["ar"]
    assert ar["seeds"] == [0, 1, 2]  # the failed seed 3 is left out
    assert ar["auc_diff_mean"] == pytest.approx(0.0001)
    assert ar["ci95_half_width"] == pytest.approx(cv.t_half_width([0.0004, -0.0002, 0.0001]))
    assert ar["allreduce_moved"] == 1.0 and ar["allreduce_frames"] == pytest.approx(0.8)
    page = cv.markdown(res)
    assert "**Converged: yes.**" in page
    assert "| ar | 3 | +0.00010 | [-0.00065, +0.00085] (±0.00075) | +0.00040 / -0.00020 / " in page
    assert "| ar | 20.000 MiB"[:6] in page and "| 4.00x | 0.000 MiB | 5.00x |" in page
    # a partial sweep says which runs the tables lack, and why
    assert "**Partial sweep.** Not in the tables, by seed: ar (error: 3)." in page
    res["runs"] += [{"name": "ar", "seed": 4, "status": "missing"}]
    res["runs"] += [{"name": "mx4", "seed": s, "status": "missing"} for s in (0, 1)]
    assert cv.unfinished(res) == {"ar": {"error": [3], "missing": [4]}, "mx4": {"missing": [0, 1]}}
    assert "by seed: ar (error: 3; missing: 4), mx4 (missing: 0, 1)." in cv.markdown(res)
    assert "Partial sweep" not in cv.markdown({**res, "runs": res["runs"][:6]})
    # a run without a finished exact run of its seed: listed, not paired
    lone = _result()
    lone["runs"] = [r for r in lone["runs"] if not (r["name"] == "exact" and r.get("seed") == 0)]
    lone["runs"].append(_run("mx4", 0, 0.8, [0.7] * 5))
    assert "| mx4 | 0 | - | - | - | - |" in cv.markdown(lone)
    cv.plot_curves(lone, tmp_path / "lone.png")
    # a run still climbing is not converged
    res["runs"][0]["curves"]["eval_auc"][-1] += 0.01
    assert not cv.summarize(res)["converged"]
    src = tmp_path / "convergence_p.json"
    src.write_text(json.dumps(res))
    cv.main([str(src)])
    assert src.with_suffix(".md").read_text() == cv.markdown(res)
    assert src.with_suffix(".png").stat().st_size > 10_000


def test_kept_only_assembles_without_running(tmp_path, monkeypatch):
    def no_run(*a, **k):
        raise AssertionError("kept-only must not start a trainer")

    monkeypatch.setattr(tc.subprocess, "run", no_run)
    args = tc.argparse.Namespace(
        preset="tiny", steps=4, seed=0, log_every=2, eval_rows=64, devices=1, eval_every=4,
        early_stage_frac=0.5, data=None, extra=[], run_timeout=5, checkpoint_every=2,
        retries=2, kept_only=True,
    )  # fmt: skip
    r = tc.run_one("exact", args, tmp_path, seed=1)
    assert r["status"] == "missing" and r["seed"] == 1


def test_committed_convergence_pages_rerender_from_their_json():
    found = sorted(bu.RESULTS_DIR.glob("convergence_*.json"))
    assert found, "bench/results/convergence_dcnv2_small.json is committed"
    for path in found:
        res = json.loads(path.read_text())
        assert path.with_suffix(".md").read_text() == cv.markdown(res), path.name
        assert path.with_suffix(".png").is_file()


def test_each_run_keeps_its_colour_in_both_panels(tmp_path, monkeypatch):
    from bench.reports import figures

    figs = []
    monkeypatch.setattr(figures, "save", lambda fig, path, **kw: figs.append(fig) or path)
    cv.plot_curves(_result(), tmp_path / "c.png")
    ax0, ax1 = figs[0].axes
    left = {ln.get_label().split(" (seeds")[0]: ln.get_color() for ln in ax0.get_lines()}
    right = {ln.get_label(): ln.get_color() for ln in ax1.get_lines()}
    assert set(right) == set(left) - {"exact"} and len(set(left.values())) == len(left)
    assert all(right[name] == left[name] for name in right)


def test_zero_grid_allreduce_page_matches_its_json():
    """The 400-step all-reduce page (assembled once, written by hand) states its JSON's figures:
    each row's paired mean, interval and per-seed differences, and the paired grid comparison."""
    path = bu.RESULTS_DIR / "adagrad_allreduce_zero_grid_400steps.json"
    res = json.loads(path.read_text())
    md = path.with_suffix(".md").read_text()
    assert len(res["runs"]) == 24 and {r["seed"] for r in res["runs"]} == set(range(6))
    for key, s in res["summary"].items():
        name, grid = key.removesuffix(")").split(" (")
        row = f"| {name} | {grid} | "
        line = next(x for x in md.splitlines() if x.startswith(row))
        assert f"{s['auc_minus_exact_mean']:+.5f} ± {s['interval95']:.5f}" in line, key
        assert " / ".join(f"{d:+.5f}" for d in s["per_seed"]) in line, key
        assert f"{s['allreduce_raw_over_moved']:.2f}x" in line, key
        runs = [r for r in res["runs"] if r["name"] == name and r["grid"] == grid]
        assert [r["auc_minus_exact"] for r in runs] == s["per_seed"]
    for name, p in res["paired_zero_minus_minimum"].items():
        per_seed = " / ".join(f"{d:+.5f}" for d in p["zero_minus_minimum_per_seed"])
        assert f"- `{name}`: {per_seed} (mean {p['mean']:+.5f}" in md.replace("\n  ", " ")
