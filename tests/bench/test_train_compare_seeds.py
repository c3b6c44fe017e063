"""bench.training.train_compare --seeds: the statistics over seeds, the targets, the kept runs."""

import argparse
import json
import math

import pytest

from bench.training import fidelity
from bench.training import train_compare as tc


def _run(name, seed, auc, logloss, moved, frame=None, ar=0.0):
    return {
        "name": name,
        "seed": seed,
        "status": "ok",
        "auc": auc,
        "logloss": logloss,
        "moved_bytes_per_step": moved,
        "raw_bytes_per_step": 1000.0,
        "frame_bytes_per_step": moved if frame is None else frame,
        "allreduce_moved_bytes_per_step": ar,
        "fallback_steps": 1,
    }


def _sweep():
    return [
        _run("exact", 0, 0.700, 0.50, 1000.0),
        _run("exact", 1, 0.720, 0.48, 1000.0),
        _run("jlc-paper", 0, 0.7004, 0.501, 60.0, frame=40.0),
        _run("jlc-paper", 1, 0.7190, 0.481, 40.0, frame=20.0),
        _run("mx4", 0, 0.699, 0.503, 133.0),
        _run("mx4", 1, 0.719, 0.483, 133.0),
        {"name": "jlc-auto", "seed": 0, "status": "error"},
    ]


def test_seed_summary_pairs_each_seed_with_its_exact_run():
    s = fidelity.seed_summary(_sweep())
    assert list(s) == ["exact", "jlc-paper", "mx4"]  # the failed run is left out
    p = s["jlc-paper"]
    assert p["seeds"] == [0, 1]
    assert p["auc_mean"] == pytest.approx(0.7097)
    assert p["auc_std"] == pytest.approx(math.sqrt(2 * 0.0093**2))  # sample std of two values
    # paired: +0.0004 on seed 0, -0.0010 on seed 1
    assert p["auc_diff_mean"] == pytest.approx(-0.0003)
    assert p["auc_diff_min"] == pytest.approx(-0.0010)
    assert p["auc_diff_max"] == pytest.approx(0.0004)
    assert p["auc_diff_std"] == pytest.approx(math.sqrt(2 * 0.0007**2))
    assert p["logloss_diff_mean"] == pytest.approx(0.001)
    assert p["moved_bytes_per_step"] == 50.0 and p["frame_bytes_per_step"] == 30.0
    assert p["moved_ratio"] == 20.0 and p["fallback_steps"] == 2
    assert p["bytes_vs_mx4"] == pytest.approx(133.0 / 50.0)
    assert p["frame_bytes_vs_mx4"] == pytest.approx(133.0 / 30.0)
    assert p["paired_seeds"] == [0, 1]
    assert p["auc_diff_by_seed"] == pytest.approx({"0": 0.0004, "1": -0.0010})
    assert s["exact"]["auc_diff_mean"] == 0.0 and s["exact"]["auc_diff_std"] == 0.0
    assert s["mx4"]["bytes_vs_mx4"] == 1.0


def test_seed_summary_pairs_only_seeds_with_an_exact_run():
    runs = [r for r in _sweep() if not (r["name"] == "exact" and r["seed"] == 1)]
    p = fidelity.seed_summary(runs)["jlc-paper"]
    assert p["seeds"] == [0, 1] and p["paired_seeds"] == [0]
    assert p["auc_diff_mean"] == pytest.approx(0.0004) and p["auc_diff_std"] is None


def test_seed_summary_without_mx4_or_exact():
    s = fidelity.seed_summary([r for r in _sweep() if r["name"] == "jlc-paper"])
    assert s["jlc-paper"]["bytes_vs_mx4"] is None
    assert s["jlc-paper"]["auc_diff_mean"] is None


def test_fidelity_targets_met_and_missed():
    s = fidelity.seed_summary(_sweep())
    t = fidelity.fidelity_targets(s)
    r = t["runs"]["jlc-paper"]
    # paired per seed: +0.0014 and 0.0 over MX4
    assert r["auc_minus_mx4"] == pytest.approx(0.0007)
    assert r["within_tolerance"] and r["no_worse_than_mx4"]
    assert r["fewer_bytes_than_mx4"] == pytest.approx(2.66)
    assert r["met"] and t["met"] and t["best"] == "jlc-paper"
    assert list(t["runs"]) == ["jlc-paper"]  # only library runs are judged
    # a tighter tolerance than the -0.0003 measured misses it
    t = fidelity.fidelity_targets(s, tolerance=2e-4)
    assert not t["runs"]["jlc-paper"]["within_tolerance"]
    assert not t["met"] and t["best"] is None


def test_fidelity_targets_compare_with_mx4_seed_by_seed():
    # jlc-paper's seed 0 beats MX4 by far, its seed 1 (the hard seed) loses: unpaired means
    # over different seeds would hide it. Only seed 1 is shared with MX4 here.
    runs = [r for r in _sweep() if not (r["name"] == "mx4" and r["seed"] == 0)]
    r = fidelity.fidelity_targets(fidelity.seed_summary(runs))["runs"]["jlc-paper"]
    assert r["auc_minus_mx4"] == pytest.approx(0.0)  # seed 1: -0.0010 - (-0.0010)
    runs = [dict(x, auc=0.7185) if x["name"] == "jlc-paper" and x["seed"] == 1 else x for x in runs]
    r = fidelity.fidelity_targets(fidelity.seed_summary(runs))["runs"]["jlc-paper"]
    assert r["auc_minus_mx4"] == pytest.approx(-0.0005) and not r["no_worse_than_mx4"]
    assert not r["met"]


def test_fidelity_page_of_a_sweep():
    s = fidelity.seed_summary(_sweep())
    result = {
        "params": {"preset": "kaggle", "steps": 400, "seeds": [0, 1], "eval_rows": 100000,
                   "devices": 8},
        "environment": {"git_commit": "0123456789abcdef"},
        "summary": s,
        "targets": fidelity.fidelity_targets(s),
    }  # fmt: skip
    page = fidelity.fidelity_markdown(result).splitlines()
    assert page[0] == "# Fidelity over seeds: preset kaggle"
    assert "400 steps, seeds 0, 1, 100,000 evaluation rows, 8 devices" in page[2]
    assert "(0123456789)" in page[2]
    assert page[-1] == (
        "- jlc-paper: AUC - exact -0.00030 (within the tolerance), AUC - MX4 +0.00070 "
        "(no worse than MX4), 2.66x fewer bytes than MX4"
    )
    assert "): met; best library run: jlc-paper." in "\n".join(page)


def test_seed_table_lists_every_run():
    table = fidelity.seed_table(fidelity.seed_summary(_sweep())).splitlines()
    assert len(table) == 2 + 3
    assert table[3].startswith("| jlc-paper | 2 | 0.70970 ± 0.01315 | -0.00030 ± 0.00099 ")
    assert "2.66x" in table[3] and "4.43x" in table[3]


def test_paper_tiers_follow_the_preset():
    def tiers(preset):
        flags = tc.run_flags("jlc-paper", 100, 0.5, preset)
        return flags[flags.index("--eb-preset") + 1]

    assert tiers("kaggle") == "paper_kaggle"
    assert tiers("dcnv2_small") == "paper_terabyte"
    assert tiers("terabyte") == "paper_terabyte"


def _args(tmp_path, **kw):
    a = dict(
        preset="tiny",
        steps=4,
        seed=0,
        log_every=2,
        eval_rows=64,
        devices=1,
        eval_every=4,
        early_stage_frac=0.5,
        data=None,
        extra=[],
        run_timeout=5,
        checkpoint_every=0,
        retries=2,
    )
    a.update(kw)
    return argparse.Namespace(**a)


def _kept_flags(args, out, seed):
    return tc.trainer_runs.trainer_cmd(
        out,
        argparse.Namespace(**{**vars(args), "seed": seed}),
        *("--devices", "1", "--eval-every", "4"),
        *tc.run_flags("exact", args.steps, 0.5, "tiny"),
    )[3:]


def test_run_one_returns_a_kept_result_of_the_same_command(tmp_path):
    """A sweep resumes: a kept ok result whose flags match is returned without training."""
    args = _args(tmp_path)
    out = tmp_path / "exact" / "seed3"
    out.mkdir(parents=True)
    flags = _kept_flags(args, out, 3)
    kept = {"name": "exact", "seed": 3, "status": "ok", "flags": flags, "auc": 0.61}
    (out / "compare_run.json").write_text(json.dumps(kept))
    assert tc.run_one("exact", args, tmp_path, seed=3) == kept
    assert "--seed" in flags and flags[flags.index("--seed") + 1] == "3"


def test_run_one_reruns_a_kept_result_of_other_flags(tmp_path, monkeypatch):
    args = _args(tmp_path)
    out = tmp_path / "exact" / "seed0"
    out.mkdir(parents=True)
    stale = {"status": "ok", "flags": ["--steps", "999"], "auc": 0.5}
    (out / "compare_run.json").write_text(json.dumps(stale))
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return argparse.Namespace(returncode=3, stdout="", stderr="boom")

    monkeypatch.setattr(tc.subprocess, "run", fake_run)
    r = tc.run_one("exact", args, tmp_path, seed=0)
    assert len(calls) == 1 and r["status"] == "error" and r["log_tail"] == "boom"


def test_runs_with_checkpoints_resume_instead_of_restarting(tmp_path, monkeypatch):
    """--checkpoint-every K: the trainer checkpoints every K steps; a run that dies resumes
    from its checkpoint (up to --retries times), and a rerun of the sweep resumes it too, but
    only a checkpoint of the same flags (stamped in the run's folder): the first start of a
    run in a folder holding another run restarts it."""
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return argparse.Namespace(returncode=3, stdout="", stderr="killed")

    monkeypatch.setattr(tc.subprocess, "run", fake_run)
    r = tc.run_one("exact", _args(tmp_path), tmp_path, seed=0)
    assert len(calls) == 1 and r["status"] == "error"  # no checkpoint to resume: no retry
    assert "--restart" in calls[0] and calls[0][calls[0].index("--checkpoint-every") + 1] == "0"
    r = tc.run_one("exact", _args(tmp_path, checkpoint_every=500), tmp_path, seed=0)
    assert len(calls) == 4 and r["attempts"] == 3  # the first try and two resumes
    assert r["failed_attempts"] == [{"returncode": 3, "log_tail": "killed"}] * 3
    first, *resumes = calls[1:]
    assert "--restart" in first  # the folder held a run of other flags (K=0), no stamp
    assert first[first.index("--checkpoint-every") + 1] == "500"
    assert all("--restart" not in c for c in resumes) and resumes[0] == resumes[1]
    tc.run_one("exact", _args(tmp_path, checkpoint_every=500), tmp_path, seed=0)
    assert "--restart" not in calls[4]  # the same run again: resumes its checkpoint
    tc.run_one("exact", _args(tmp_path, checkpoint_every=500, steps=8), tmp_path, seed=0)
    assert "--restart" in calls[7]  # other flags: starts over


def test_a_retry_that_succeeds_keeps_the_failed_tries(tmp_path, monkeypatch):
    """The ok result of a run that needed retries (and its kept copy) says how each failed
    try ended, the output cut to its last FAILURE_TAIL_CHARS characters."""
    out = tmp_path / "exact" / "seed0"
    tries = iter([(None, "slow " * 200), (134, "x" * 5000 + "collective stuck"), (0, "ok")])

    def fake_trainer(cmd, env, timeout):
        rc, log = next(tries)
        if rc == 0:
            (out / "metrics.jsonl").write_text("")
        return rc, log

    monkeypatch.setattr(tc, "_run_trainer", fake_trainer)
    monkeypatch.setattr(tc, "summarize", lambda log: {"auc": 0.7})
    r = tc.run_one("exact", _args(tmp_path, checkpoint_every=500), tmp_path, seed=0)
    assert r["status"] == "ok" and r["attempts"] == 3 and r["auc"] == 0.7
    tails = [f["log_tail"] for f in r["failed_attempts"]]
    assert [f["returncode"] for f in r["failed_attempts"]] == [None, 134]
    assert tails[0] == ("slow " * 200)[-tc.FAILURE_TAIL_CHARS :]
    assert len(tails[1]) == tc.FAILURE_TAIL_CHARS and tails[1].endswith("collective stuck")
    assert (
        json.loads((out / "compare_run.json").read_text())["failed_attempts"]
        == (r["failed_attempts"])
    )


def test_a_checkpoint_stamped_with_its_out_flag_still_resumes(tmp_path, monkeypatch):
    """A stamp written while --out was part of the matched flags resumes its checkpoint."""
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return argparse.Namespace(returncode=3, stdout="", stderr="killed")

    monkeypatch.setattr(tc.subprocess, "run", fake_run)
    args = _args(tmp_path, checkpoint_every=500, retries=0)
    tc.run_one("exact", args, tmp_path, seed=0)
    stamp = tmp_path / "exact" / "seed0" / "run_flags.json"
    old = calls[0][3:]
    old = [f for f in old if f not in ("--restart", "--no-progress")]
    stamp.write_text(json.dumps(old))  # the old format: every flag, --out included
    assert "--out" in old
    tc.run_one("exact", args, tmp_path, seed=0)
    assert "--restart" not in calls[1]


def test_kept_results_match_whatever_the_run_control_flags():
    flags = ["--preset", "x", "--checkpoint-every", "0", "--no-progress", "--restart", "--out", "o"]
    assert tc.result_flags(flags) == ["--preset", "x"]
    assert tc.result_flags(["--checkpoint-every", "1000", "--no-progress"]) == []
    assert tc.result_flags(["--out", "a", "--steps", "4"]) == ["--steps", "4"]


def test_kept_from_an_earlier_result_file_continues_the_sweep_elsewhere(tmp_path, monkeypatch):
    """--kept-from: an ok run of an earlier result file (its outputs in another workdir, on
    another machine) is kept when its name, seed and flags match, whatever its --out; a run
    of other flags, another seed or a failed run is not, and trains."""
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return argparse.Namespace(returncode=3, stdout="", stderr="boom")

    monkeypatch.setattr(tc.subprocess, "run", fake_run)
    elsewhere = _args(tmp_path)
    earlier = [
        {"name": "exact", "seed": 0, "status": "ok", "auc": 0.61,
         "flags": _kept_flags(elsewhere, "/elsewhere/exact/seed0", 0)},
        {"name": "exact", "seed": 1, "status": "error",
         "flags": _kept_flags(elsewhere, "/elsewhere/exact/seed1", 1)},
        {"name": "exact", "seed": 2, "status": "ok", "auc": 0.63,
         "flags": _kept_flags(_args(tmp_path, steps=8), "/elsewhere/exact/seed2", 2)},
    ]  # fmt: skip
    result = tmp_path / "earlier.json"
    result.write_text(json.dumps({"runs": earlier}))
    kept = tc.load_kept_from([result])
    assert sorted(kept) == [("exact", 0), ("exact", 2)]
    args = _args(tmp_path / "here", kept_from_runs=kept)
    assert tc.run_one("exact", args, tmp_path / "here", seed=0) == earlier[0]
    assert calls == []
    for seed in (1, 2):  # failed there; other steps there
        r = tc.run_one("exact", args, tmp_path / "here", seed=seed)
        assert r["status"] == "error" and r["seed"] == seed
    assert len(calls) == 2
    for bad in ("{}", "[]", '{"runs": 3}'):
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(ValueError, match="not a train_compare result"):
            tc.load_kept_from([tmp_path / "bad.json"])


def test_kept_only_with_kept_from_assembles_without_training(tmp_path, monkeypatch):
    monkeypatch.setattr(tc, "_run_trainer", lambda *a: pytest.fail("trained a run"))
    common = ["--preset", "tiny", "--devices", "1", "--steps", "4", "--log-every", "2",
              "--eval-every", "4", "--eval-rows", "64", "--runs", "exact"]  # fmt: skip
    args = _args(tmp_path, eval_every=4)
    earlier = {"runs": [
        {**_run("exact", s, 0.6 + s / 100, 0.5, 1000.0), "wall_s": 9.0,
         "flags": _kept_flags(args, f"/elsewhere/exact/seed{s}", s)} for s in (0, 1)
    ]}  # fmt: skip
    (tmp_path / "earlier.json").write_text(json.dumps(earlier))
    res = tc.main([*common, "--seeds", "0", "1", "2", "--kept-only", "--kept-from",
                   str(tmp_path / "earlier.json"), "--workdir", str(tmp_path / "w"),
                   "--out", str(tmp_path / "out.json")])  # fmt: skip
    assert [(r["seed"], r["status"]) for r in res["runs"]] == [(0, "ok"), (1, "ok"), (2, "missing")]
    assert [r["auc"] for r in res["runs"][:2]] == [0.6, 0.61]
    assert "kept_from_runs" not in res["params"]
    with pytest.raises(SystemExit):
        tc.main([*common, "--kept-from", str(tmp_path / "earlier.json")])  # needs --seeds


def _assert_close(a, b, path="result"):
    """Nested dicts / lists equal, floats to 1e-12 relative."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            _assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15), path
    else:
        assert a == b, path


FIDELITY_RUNS = {
    "exact", "jlc-paper", "jlc-auto", "jlc-paper-ar", "int8-rowwise", "bf16", "fp16",
    "fp8-rowwise", "mx4",
}  # fmt: skip


@pytest.mark.parametrize("preset", ["kaggle", "dcnv2_small"])
def test_committed_fidelity_sweep_covers_every_mode_and_is_rendered(preset):
    """The committed sweep: every mode on 3 seeds, >= 100k evaluation rows, its page the
    rendering of its JSON (a rerun that is not re-rendered shows here)."""
    path = tc.bu.RESULTS_DIR / f"fidelity_{preset}.json"
    result = json.loads(path.read_text())
    assert result["params"]["preset"] == preset and result["params"]["eval_rows"] >= 100_000
    assert set(result["summary"]) == FIDELITY_RUNS
    assert all(s["paired_seeds"] == [0, 1, 2] for s in result["summary"].values())
    # recomputed to rounding: Python 3.12+ sums floats with compensation, 3.11 does not
    _assert_close(fidelity.seed_summary(result["runs"]), result["summary"])
    _assert_close(fidelity.fidelity_targets(result["summary"]), result["targets"])
    assert path.with_suffix(".md").read_text() == fidelity.fidelity_markdown(result)
    assert path.with_suffix(".png").is_file()


def test_adagrad_runs_code_the_all_reduce_at_their_bound():
    import numpy as np

    import jax_lossy_comm as jlc

    for name, eb in (
        ("jlc-paper-ar-adagrad-eb0.008", "0.008"),
        ("jlc-paper-ar-adagrad-eb0.005", "0.005"),
    ):
        flags = tc.run_flags(name, 100, 0.5, "dcnv2_small")
        assert flags[flags.index("--grad-error-bound") + 1] == eb
        assert flags[flags.index("--grad-precondition") + 1] == "adagrad"
    assert "--grad-error-bound" not in tc.run_flags("jlc-paper-ar-adagrad", 100, 0.5, "dcnv2_small")

    # REL 0.008 is the tightest bound whose fixed-rate frames are the size of REL 0.01's (the
    # dense path's bytes); 0.0079 and 0.005 need a bit more per value
    def cap(e):
        return jlc.frame_capacity((64, 256), np.float32, min_error_bound=e, outliers=16)

    assert cap(0.008) == cap(0.01) < cap(0.0079) == cap(0.005)


def test_control_run_codes_every_table_at_its_bound_for_the_whole_run():
    import numpy as np

    from jax_lossy_comm.error_bound import make_schedule, min_error_bound, table_bounds
    from models.dlrm import flags as trainer_flags

    argv = ["--preset", "dcnv2_small", *tc.run_flags("jlc-uniform-eb0.001", 20000, 0.5)]
    config = trainer_flags.config_from_flags(trainer_flags.build_parser().parse_args(argv))
    eb = config.error_bound
    assert config.compression == "on" and config.grad_allreduce == "exact"
    np.testing.assert_array_equal(table_bounds(eb), np.full(26, 0.001, np.float32))
    assert eb.policy == "tiers" and not eb.tiers
    assert min_error_bound(eb) == pytest.approx(0.001)
    schedule = make_schedule(eb.schedule, eb_constant=eb.eb_constant, early_stage=eb.early_stage)
    assert [float(schedule(t)) for t in (0, 10_000, 19_999)] == [1.0, 1.0, 1.0]
    assert "jlc-uniform-eb0.001" in tc.ALL_RUNS and "jlc-uniform-eb0.001" not in tc.RUNS
