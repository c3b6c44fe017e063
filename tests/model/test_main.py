"""What a user of the DLRM trainer meets: rerunning a command
resumes it and ``--restart`` starts over, bad input and a diverging loss stop with one clear
line, bad lines are counted once, flags are checked when parsed, a missing peer times out,
the log names its byte ratios, incomplete checkpoints are cleaned."""

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import orbax.checkpoint as ocp
import pytest

import jax_lossy_comm as jlc
from models.dlrm import checkpoints, flags, main, plots, train, train_log
from models.dlrm import metrics as metrics_lib
from models.dlrm.configs import get_config
from models.dlrm.data import input_pipeline as ip
from models.dlrm.step import TrainState

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 300
MIB = 1024.0 * 1024.0
# A short run of the tiny preset on 2 virtual devices.
SMALL = ("--devices", "2", "--log-every", "2", "--eval-every", "0", "--eval-rows", "256")


def _train(out, *flags, timeout=TIMEOUT):
    """Runs ``python -m models.dlrm.main --preset tiny --out OUT FLAGS``; (rc, output)."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # --devices decides
    r = subprocess.run(
        [sys.executable, "-m", "models.dlrm.main", "--preset", "tiny", "--out", str(out)]
        + ["--no-progress", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return r.returncode, r.stdout + r.stderr


def _records(out, kind):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r.get("kind") == kind]


# ---- item 7: a workdir with checkpoints resumes; --restart starts over -------------------


@pytest.mark.slow
def test_rerun_resumes_and_restart_removes_the_old_run_first(tmp_path):
    out = tmp_path / "run"
    rc, text = _train(out, *SMALL, "--steps", "2", "--checkpoint-every", "2")
    assert rc == 0, text[-3000:]
    # The same command again, longer, without any flag: it continues from step 2.
    rc, text = _train(out, *SMALL, "--steps", "4", "--checkpoint-every", "2")
    assert rc == 0, text[-3000:]
    assert f"resumed from step 2 of the run in {out}" in text
    assert [r["step"] for r in _records(out, "train")] == [2, 4]
    assert len(_records(out, "config")) == 1
    assert sorted(os.listdir(out / "checkpoints")) == ["2", "4"]
    # --restart: the old run is removed, with a message before the first step.
    rc, text = _train(out, *SMALL, "--steps", "2", "--checkpoint-every", "2", "--restart")
    assert rc == 0, text[-3000:]
    msg = f"--restart: removed the earlier run in {out} (checkpoints of steps [2, 4], "
    assert msg in text and text.index(msg) < text.index("step 2:")
    assert "resumed" not in text
    assert [r["step"] for r in _records(out, "train")] == [2]
    assert sorted(os.listdir(out / "checkpoints")) == ["2"]
    assert json.load(open(out / "final.json"))["on"]["step"] == 2


# ---- item 15: half-deleted checkpoint steps ----------------------------------------------


def _state(step):
    x = jnp.full((4,), float(step))
    rest = {f: {"x": x * (i + 2)} for i, f in enumerate(TrainState._fields[2:])}
    return TrainState(step=jnp.int32(step), params={"w": x}, **rest)


def _abstract():
    sh = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh), _state(0))


def _saved(workdir, steps):
    mngr = checkpoints.manager(str(workdir), max_to_keep=5)
    for s in steps:
        checkpoints.save(mngr, _state(s), {"step": s, "data_position": {"batch": s}})
    mngr.close()
    return workdir / "checkpoints"


def test_a_half_deleted_older_step_is_removed_when_the_manager_opens(tmp_path):
    ckpt = _saved(tmp_path, [1, 2, 3])
    # A kill while orbax pruned step 1: some of its files are gone, the folder is listed.
    os.remove(ckpt / "1" / "state" / "_METADATA")
    os.remove(ckpt / "1" / "_CHECKPOINT_METADATA")
    mngr = checkpoints.manager(str(tmp_path), max_to_keep=5)
    assert mngr.all_steps() == [2, 3]
    assert sorted(os.listdir(ckpt)) == ["2", "3"]
    state, meta = checkpoints.restore(mngr, _abstract())
    assert int(state.step) == 3 and meta["data_position"] == {"batch": 3}


def test_a_latest_step_with_missing_data_falls_back_to_the_previous_one(tmp_path):
    ckpt = _saved(tmp_path, [1, 2])
    # Every metadata file is there but the array data of step 2 is gone.
    for d in ("state/d", "state/ocdbt.process_0"):
        for root, _, files in os.walk(ckpt / "2" / d):
            for f in files:
                os.remove(os.path.join(root, f))
    mngr = checkpoints.manager(str(tmp_path), max_to_keep=5)
    state, meta = checkpoints.restore(mngr, _abstract())
    assert int(state.step) == 1 and meta["step"] == 1
    np.testing.assert_array_equal(np.asarray(state.params["w"]), np.full(4, 1.0))
    assert mngr.all_steps() == [1] and sorted(os.listdir(ckpt)) == ["1"]
    # The run goes on and saves step 2 again.
    checkpoints.save(mngr, _state(2), {"step": 2, "data_position": {"batch": 2}})
    assert mngr.all_steps() == [1, 2]


def test_a_checkpoint_of_another_model_is_named_and_kept(tmp_path):
    ckpt = _saved(tmp_path, [1])
    mngr = checkpoints.manager(str(tmp_path), max_to_keep=5)
    sh = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    other = jax.tree.map(
        lambda a: jax.ShapeDtypeStruct((7,) if a.ndim else (), a.dtype, sharding=sh), _state(0)
    )
    with pytest.raises(checkpoints.CheckpointError, match="cannot restore checkpoint 1 in") as e:
        checkpoints.restore(mngr, other)
    # named from the metadata, leaf by leaf, before orbax reads anything
    assert "params/w: saved (4,) float32, this run (7,) float32" in str(e.value)
    assert sorted(os.listdir(ckpt)) == ["1"]


# ---- a checkpoint without grad_ef (earlier release) or of another --grad-allreduce ----------


def _ef_state(step, ef=(2, 4)):
    """A TrainState with distinct random values and error-feedback residuals ``[*ef]`` (none
    when ``ef`` is None: the empty state of an exact or feedback-less all-reduce)."""
    keys = jax.random.split(jax.random.key(step), 4)
    x = [jax.random.normal(k, (4,)) for k in keys]
    res = {} if ef is None else {"w": jnp.full(ef, step + 0.5)}
    return TrainState(
        jnp.int32(step),
        {"w": x[0]},
        {"mu": x[1], "nu": x[2]},
        {"eb": x[3]},
        jlc.ErrorFeedbackState(res),
    )


def _abstract_of(state):
    sh = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh), state)


def _save_raw(workdir, step, tree):
    """Saves ``tree`` as the ``state`` item the way the release before grad_ef did
    (``state._asdict()`` through StandardSave, manager opened by item names)."""
    mngr = ocp.CheckpointManager(
        os.path.abspath(os.path.join(workdir, "checkpoints")),
        options=ocp.CheckpointManagerOptions(create=True),
        item_names=("state", "meta"),
    )
    meta = {"step": step, "data_position": {"batch": step}}
    state = ocp.args.StandardSave(tree)
    mngr.save(step, args=ocp.args.Composite(state=state, meta=ocp.args.JsonSave(meta)))
    mngr.wait_until_finished()
    mngr.close()


def _assert_bitwise(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


def _assert_restored_but_grad_ef(restored, saved, fresh_ef):
    for f in ("step", "params", "opt_state", "eb_state"):
        _assert_bitwise(getattr(restored, f), getattr(saved, f))
    assert isinstance(restored.grad_ef, jlc.ErrorFeedbackState)
    assert jax.tree.structure(restored.grad_ef) == jax.tree.structure(fresh_ef)
    _assert_bitwise(restored.grad_ef, fresh_ef)
    for leaf in jax.tree.leaves(restored.grad_ef):
        assert leaf.sharding == jax.sharding.SingleDeviceSharding(jax.devices()[0])


def test_a_checkpoint_of_the_release_before_grad_ef_restores_with_zero_residuals(tmp_path, caplog):
    old = _ef_state(3)._asdict()
    del old["grad_ef"]  # what the previous release saved
    _save_raw(tmp_path, 3, old)
    now = _ef_state(0)._replace(grad_ef=jlc.ErrorFeedbackState({"w": jnp.zeros((2, 4))}))
    mngr = checkpoints.manager(str(tmp_path), max_to_keep=5)
    with caplog.at_level("WARNING", logger="dlrm"):
        state, meta = checkpoints.restore(mngr, _abstract_of(now), lambda: now)
    assert meta == {"step": 3, "data_position": {"batch": 3}}
    _assert_restored_but_grad_ef(state, _ef_state(3), now.grad_ef)
    np.testing.assert_array_equal(np.asarray(state.grad_ef.residual["w"]), np.zeros((2, 4)))
    lines = [r.getMessage() for r in caplog.records if "grad_ef" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("checkpoint 3: grad_ef re-initialized to a new run's value")
    assert "the checkpoint has none" in lines[0] and "not model state" in lines[0]
    # Saved again, the step now holds grad_ef and restores it as it is (no warning).
    checkpoints.save(mngr, state._replace(step=jnp.int32(4)), {"step": 4})
    caplog.clear()
    with caplog.at_level("WARNING", logger="dlrm"):
        again, _ = checkpoints.restore(mngr, _abstract_of(now), lambda: now)
    assert int(again.step) == 4 and not caplog.records
    _assert_bitwise(again.params, state.params)


@pytest.mark.parametrize(
    "saved_ef, now_ef",
    [(None, (2, 4)), ((2, 4), None), ((2, 4), (4, 4))],
    ids=["exact-to-feedback", "feedback-to-exact", "other-device-count"],
)
def test_another_grad_allreduce_keeps_the_checkpoint_and_restarts_the_residuals(
    tmp_path, caplog, saved_ef, now_ef
):
    mngr = checkpoints.manager(str(tmp_path), max_to_keep=5)
    saved = _ef_state(5, saved_ef)
    checkpoints.save(mngr, saved, {"step": 5})
    now = _ef_state(0, now_ef)
    fresh = jax.tree.map(jnp.zeros_like, now.grad_ef)
    with caplog.at_level("WARNING", logger="dlrm"):
        state, _ = checkpoints.restore(mngr, _abstract_of(now), lambda: now._replace(grad_ef=fresh))
    _assert_restored_but_grad_ef(state, saved, fresh)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("checkpoint 5: grad_ef re-initialized")
    if saved_ef and now_ef:
        assert "other shapes or dtypes" in line
    else:
        assert "--grad-allreduce" in line


def test_matching_residuals_are_restored_not_reset(tmp_path, caplog):
    mngr = checkpoints.manager(str(tmp_path), max_to_keep=5)
    saved = _ef_state(2)
    checkpoints.save(mngr, saved, {"step": 2})
    with caplog.at_level("WARNING", logger="dlrm"):
        state, _ = checkpoints.restore(mngr, _abstract_of(_ef_state(0)), lambda: _ef_state(0))
    _assert_bitwise(state, saved)
    assert not caplog.records


def test_without_grad_ef_another_model_or_no_init_state_is_still_an_error(tmp_path):
    old = _ef_state(3)._asdict()
    del old["grad_ef"]
    _save_raw(tmp_path, 3, old)
    mngr = checkpoints.manager(str(tmp_path), max_to_keep=5)
    other = _ef_state(0)._replace(params={"w": jnp.zeros((7,))})
    with pytest.raises(checkpoints.CheckpointError, match="cannot restore checkpoint 3 in"):
        checkpoints.restore(mngr, _abstract_of(other), lambda: other)
    # Optimizer state of another optimizer (other keys): never re-initialized either.
    other = _ef_state(0)._replace(opt_state={"mu": jnp.zeros((4,))})
    with pytest.raises(checkpoints.CheckpointError, match="--restart"):
        checkpoints.restore(mngr, _abstract_of(other), lambda: other)
    with pytest.raises(checkpoints.CheckpointError, match="grad_ef: the checkpoint has none"):
        checkpoints.restore(mngr, _abstract_of(_ef_state(0)))
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["3"]


@pytest.mark.slow
def test_a_rerun_with_another_grad_allreduce_resumes_from_its_checkpoint(tmp_path):
    out = tmp_path / "run"
    args = (*SMALL, "--checkpoint-every", "2")
    rc, text = _train(out, *args, "--steps", "2", "--grad-allreduce", "exact")
    assert rc == 0, text[-3000:]
    rc, text = _train(out, *args, "--steps", "4", "--grad-allreduce", "compressed")
    assert rc == 0, text[-3000:]
    assert f"resumed from step 2 of the run in {out}" in text
    assert "checkpoint 2: grad_ef re-initialized to a new run's value" in text
    # and the log says that the settings changed, not only the metrics' config record
    assert (
        "settings changed since the run so far (from step 2 on; a config record in "
        "metrics.jsonl): grad_allreduce exact -> compressed" in text
    )
    assert [r["step"] for r in _records(out, "train")] == [2, 4]
    # the log says what ran when: the first config at 0, the changed one at the resume step
    configs = [(r["step"], r["config"]["grad_allreduce"]) for r in _records(out, "config")]
    assert configs == [(0, "exact"), (2, "compressed")]
    log = metrics_lib.read_metrics(out / "metrics.jsonl")
    assert log.config.config["grad_allreduce"] == "exact" and len(log.configs) == 2
    rc, text = _train(out, *args, "--steps", "6", "--grad-allreduce", "compressed")
    assert rc == 0, text[-3000:]
    assert len(_records(out, "config")) == 2  # the same command run longer: the same run
    assert "settings changed" not in text


# ---- items 9-11: non-finite features, all-bad files, bad lines counted once ---------------

ROWS = get_config("kaggle").table_rows()
GOOD = (
    "0\t1\t1\t5\t0\t1382\t4\t15\t2\t181\t1\t2\t\t2\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4"
    "\t25c83c98\t7e0ccccf\tde7995b8\t1f89b1b4\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164"
    "\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d"
    "\t07b5194c\t\t3a171ecb\tc5c50484\te8b83407\t9727dd16\n"
)
NON_FINITE = ("nan", "inf", "-inf", "1e400", "9" * 400)


def _write(tmp_path, lines, name="train.txt"):
    path = tmp_path / name
    path.write_text("".join(lines))
    return str(path)


@pytest.mark.parametrize("value", NON_FINITE)
def test_a_non_finite_integer_feature_is_a_malformed_line(tmp_path, value):
    bad = GOOD.replace("\t1382\t", f"\t{value}\t")
    path = _write(tmp_path, [GOOD, bad, GOOD, GOOD])
    with pytest.raises(ip.MalformedLineError, match=f"{path}:2: .*I5 is not finite"):
        ip.CriteoFileStream([path], "kaggle", ROWS, 3).next_batch()
    s = ip.CriteoFileStream([path], "kaggle", ROWS, 3, skip_bad_lines=True)
    b = s.next_batch()
    assert s.bad_lines == 1 and np.isfinite(b["dense"]).all()
    ev, bad_eval = ip.read_eval_set([path], "kaggle", ROWS, 10, skip_bad_lines=True)
    assert len(ev["label"]) == 3 and bad_eval == 1 and np.isfinite(ev["dense"]).all()


@pytest.mark.parametrize("every", [("--log-every", "2"), ("--log-every", "4", "--eval-every", "1")])
def test_a_diverging_loss_stops_the_run_naming_the_step(tmp_path, every):
    # Caught at the log interval, or at an evaluation before it (NaN logits reached
    # scikit-learn and ended the run in its traceback "Input contains NaN").
    rc, text = _train(tmp_path / "o", *SMALL, *every, "--steps", "4", "--learning-rate", "1e30")
    assert rc == 1, text[-3000:]
    assert (
        "error: the training loss is nan at step 2: training diverged" in text
        if every[1] == "2"  # the parameters are NaN after step 1, its evaluation says so
        else "error: the predictions on the evaluation set are not finite after step 1: "
        "training diverged" in text
    )
    assert "Traceback" not in text
    assert not (tmp_path / "o" / "checkpoints" / "4").exists()


def _within(seconds, fn):
    """``fn()``, or TimeoutError after ``seconds`` (the call would hang)."""

    def alarm(*_):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("resume_at", [None, {"file": 0, "offset": 5, "line": 1, "epoch": 2}])
def test_a_training_file_of_bad_lines_only_is_an_error_not_a_hang(tmp_path, resume_at):
    path = _write(tmp_path, ["garbage\n", GOOD.replace("\t1382\t", "\tnan\t"), "0\t1\n"])
    s = ip.CriteoFileStream([path], "kaggle", ROWS, 2, skip_bad_lines=True, position=resume_at)
    with pytest.raises(ip.DataError, match="no usable training line in a whole pass over"):
        _within(10, s.next_batch)
    # Every line held out for evaluation: no training line either.
    s = ip.CriteoFileStream([path], "kaggle", ROWS, 2, holdout_every=1, skip_bad_lines=True)
    with pytest.raises(ip.DataError, match="every line held out"):
        _within(10, s.next_batch)


def test_bad_lines_count_lines_not_skips_after_the_data_wraps(tmp_path):
    path = _write(tmp_path, [GOOD, "garbage\n", GOOD, "0\t1\n", GOOD])
    s = ip.CriteoFileStream([path], "kaggle", ROWS, 2, skip_bad_lines=True)
    for _ in range(9):  # 18 rows: six passes over the three good lines
        s.next_batch()
    assert s._lines.epoch == 5 and s.bad_lines == 2
    resumed = ip.CriteoFileStream(
        [path], "kaggle", ROWS, 2, skip_bad_lines=True, position=s.position()
    )
    resumed.next_batch()
    assert resumed.bad_lines == 2


@pytest.mark.slow
def test_train_and_eval_bad_lines_reach_the_metrics_separately(tmp_path):
    train = _write(tmp_path, [GOOD] * 40 + ["garbage\n"] * 3 + [GOOD] * 40)
    evals = _write(tmp_path, [GOOD] * 9 + ["0\t1\n"] * 5 + [GOOD] * 3, "eval.txt")
    out = tmp_path / "o"
    rc, text = _train(
        out, *SMALL, "--steps", "6", "--batch-size", "32", "--data", train,
        "--eval-data", evals, "--skip-bad-lines", "--eval-every", "3",
    )  # fmt: skip
    assert rc == 0, text[-3000:]
    # 6 steps x 32 rows = 192 rows: the 80 good lines are read 2.4 times, the bad ones too.
    assert [r["bad_lines"] for r in _records(out, "train")] == [3, 3, 3]
    assert [(r["rows"], r["bad_lines"]) for r in _records(out, "eval")] == [(12, 5), (12, 5)]
    # Item 13: an evaluation set under 1,000 rows is flagged next to its AUC.
    assert "(12 rows) -- warning: only 12 evaluation rows, the AUC is noisy" in text


# ---- item 13: flags checked when parsed ---------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "0"], "steps must be > 0, got 0"),
        (["--steps", "-3"], "steps must be > 0, got -3"),
        (["--batch-size", "0"], "error: --batch-size must be > 0, got 0"),
        (["--eval-rows", "0"], "error: --eval-rows must be > 0, got 0"),
        (["--shuffle-block-rows", "-1"], "error: --shuffle-block-rows must be >= 0, got -1"),
        (["--holdout-every", "1"], "error: --holdout-every must be 0 (no held-out lines) or >= 2"),
        (["--eb-base", "1.5"], "error_bound base: a relative bound must be in (0, 1), got 1.5"),
        (["--eb-base", "0"], "ErrorBoundConfig.base: must be a finite number > 0"),
        (["--eb-loosest", "1"], "error_bound loosest: a relative bound must be in (0, 1)"),
        (["--eb-tier", "t=2:1,2"], "error_bound tier 't': a relative bound must be in (0, 1)"),
        (["--codec", "zstd"], "argument --codec: invalid choice: 'zstd' (choose from 'auto'"),
        (
            ["--eb-config", "/nonexistent/eb.json"],
            "error: --eb-config /nonexistent/eb.json: No such file or directory",
        ),
        (["--resume", "--restart"], "argument --restart: not allowed with argument --resume"),
    ],
)
def test_bad_flags_exit_2_with_one_line_before_jax_starts(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main.main(["--preset", "tiny", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("python -m models.dlrm.main: error: ")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batch-size", "60"], "error: --batch-size 60 must be divisible by the device count 8"),
        (
            ["--eval-batch-size", "100"],
            "error: --eval-batch-size 100 must be divisible by the device count 8",
        ),
        (["--node-devices", "3"], "error: --node-devices 3 must divide the 8 devices of a process"),
    ],
)
def test_settings_that_do_not_fit_the_devices_exit_2_with_one_line_naming_the_flag(
    tmp_path, argv, message, capsys
):
    # found once the devices are known (the 8 virtual CPU devices of the root conftest.py);
    # it was a ValueError traceback naming the field
    argv = ["--preset", "tiny", "--no-progress", "--out", str(tmp_path), *argv]
    assert main.main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith(message) and "Traceback" not in err


def test_shards_without_training_rows_exit_2_with_one_line_naming_the_folder(tmp_path, capsys):
    from models.dlrm.data import preprocess

    (tmp_path / "empty.tsv").write_text("")
    shards_dir = str(tmp_path / "shards")
    argv = [str(tmp_path / "empty.tsv"), "--out", shards_dir, "--config", "tiny", "--no-progress"]
    assert preprocess.main(argv) == 2  # "no rows in ...", the empty shards written all the same
    argv = ["--preset", "tiny", "--no-progress", "--data", shards_dir]
    assert main.main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"error: the shards in {shards_dir}: no training rows: 0 rows, every 20-th held out"
    )


def test_ctrl_c_while_a_checkpoint_is_written_is_raised_once_the_block_is_done():
    # Python's own handler, as in the trainer's process: interrupt_after holds back only that
    # one, and an earlier test module of the session can leave another one installed.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        done = []
        with pytest.raises(KeyboardInterrupt):
            with checkpoints.interrupt_after():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the signal is delivered here and held back
                done.append(True)
        assert done == [True]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, old)


def test_ctrl_c_ends_the_run_with_one_line_naming_the_resume_step(tmp_path, monkeypatch, capsys):
    def interrupted(config, workdir, progress):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "train_and_evaluate", interrupted)
    argv = ["--preset", "tiny", "--no-progress", "--out", str(tmp_path)]
    assert main.main(argv) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "interrupted: rerun the same command to continue; the run starts from step 0 "
        "(no checkpoint yet)"
    )


def test_a_small_evaluation_set_warning_names_what_gives_more_rows():
    tiny = get_config("tiny")  # eval_rows 512
    assert train_log.small_eval_warning(tiny, 1000) == ""
    warn = " -- warning: only {} evaluation rows, the AUC is noisy (use 1,000 or more: {})"
    # synthetic: --eval-rows rows; --eval-rows is what gives more
    assert train_log.small_eval_warning(tiny, 512) == warn.format(512, "--eval-rows")
    # the evaluation data ran out before --eval-rows: --eval-rows cannot help
    file_eval = dataclasses.replace(tiny, data="train.tsv", eval_data="test.tsv")
    assert train_log.small_eval_warning(file_eval, 391) == warn.format(391, "a larger --eval-data")
    held_out = dataclasses.replace(tiny, data="day_0", holdout_every=10)
    assert train_log.small_eval_warning(held_out, 100) == warn.format(
        100, "more --data rows or a --holdout-every below 10"
    )


def test_an_unparsable_eb_config_names_the_flag_and_the_file(tmp_path, capsys):
    path = tmp_path / "eb.json"
    path.write_text("{base: 0.02")  # not JSON
    with pytest.raises(SystemExit) as e:
        main.main(["--preset", "tiny", "--eb-config", str(path)])
    assert e.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"python -m models.dlrm.main: error: --eb-config {path}: Expecting")


def test_every_flag_says_what_it_does_not_only_its_preset_value():
    parser = flags.build_parser()
    bare = [
        a.option_strings[0]
        for a in parser._actions
        if a.option_strings and not (a.help or "").split("(preset:")[0].strip()
    ]
    assert bare == []  # --steps, --seed, --num-processes ... had no text


def test_help_shows_the_values_used_not_none_or_empty_strings():
    text = " ".join(flags.build_parser().format_help().split())
    assert "None" not in text and "(preset: '')" not in text
    assert "--data DATA file, folder or glob (absent = synthetic)" in text
    assert "--init-timeout SECONDS stop with an error when not every process has joined the " \
        "coordinator by then (default: 120)" in text  # fmt: skip
    assert "--restart remove the earlier run in --out (checkpoints, metrics) and start from " \
        "step 0" in text  # fmt: skip


def test_every_codec_choice_is_one_the_exchange_accepts():
    from models.dlrm.pooled_all_to_all import QCOMM_CODECS

    assert set(flags.CODECS) == set(jlc.CODECS) | set(QCOMM_CODECS)
    for name in flags.CODECS:
        assert flags.config_from_flags(flags.build_parser().parse_args(["--codec", name]))


def test_a_csv_header_without_a_column_names_the_file(tmp_path):
    path = _write(tmp_path, ["label,I1,C1\n", "0,1,a\n"], "clicks.csv")
    with pytest.raises(ip.DataError, match=f"{path}: csv header lacks columns"):
        ip.CriteoFileStream([path], "csv", ROWS, 1).next_batch()
    with pytest.raises(ip.DataError, match=f"{path}: csv header lacks columns"):
        ip.read_eval_set([path], "csv", ROWS, 10)


def test_an_empty_data_file_is_named_as_empty_not_only_as_lacking_evaluation_rows(tmp_path):
    path = _write(tmp_path, [])
    with pytest.raises(ip.DataError, match=r"no evaluation rows in .*: the files hold no lines"):
        ip.read_eval_set([path], "kaggle", ROWS, 10, holdout_every=20)


# ---- item 12: multi-host waits are named and time out; gloo stays quiet -------------------


@pytest.mark.parametrize("pid", [0, 1])
def test_a_peer_that_never_starts_is_named_and_times_out_in_one_line(tmp_path, pid):
    """Process ``pid`` of 2 starts alone (process 0 runs the coordinator, process 1 finds
    none): it says what it waits for, then gives up after --init-timeout with one line."""
    from _multiprocess import free_port

    addr = f"127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    rc, text = _train(
        tmp_path / "o", "--devices", "2", "--coordinator", addr, "--num-processes", "2",
        "--process-id", str(pid), "--init-timeout", "3", timeout=120,
    )  # fmt: skip
    assert rc == 2, text[-3000:]
    assert time.monotonic() - t0 < 60
    assert (
        f"process {pid}: waiting up to 3 s (--init-timeout) for all 2 processes to join the "
        f"coordinator at {addr}" in text
    )
    assert text.strip().splitlines()[-1] == (
        f"error: the 2 processes did not all join the coordinator at {addr} within 3 s "
        f"(--init-timeout): start every process with --coordinator {addr} --num-processes 2 "
        "and its own --process-id 0..1"
    )
    assert "Check failure" not in text and "Traceback" not in text


def test_timeout_flags_have_defaults_and_must_be_positive(capsys):
    args = flags.build_parser().parse_args([])
    assert (args.init_timeout, args.heartbeat_timeout) == (120, 30)
    with pytest.raises(SystemExit):
        flags.build_parser().parse_args(["--heartbeat-timeout", "0"])
    assert "argument --heartbeat-timeout: must be > 0, got 0" in capsys.readouterr().err


@pytest.mark.slow
def test_two_processes_print_no_gloo_banners(tmp_path):
    from _multiprocess import start_trainers

    args = ["--preset", "tiny", "--no-progress", "--out", str(tmp_path / "o"), *SMALL]
    procs = start_trainers([*args, "--steps", "1", "--log-every", "1", "--checkpoint-every", "0"])
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "[Gloo]" not in out + err
    assert "step 1: loss" in outs[0][0] and "final: " in outs[0][0]  # the run's own lines stay


@pytest.mark.slow
def test_a_peer_killed_mid_run_stops_the_survivor_with_one_line(tmp_path):
    # Before: a traceback of the gloo read error, then jax's shutdown barrier aborted the
    # survivor with a fatal log and a native stack trace. Now: one line, exit 3, and the step
    # a rerun resumes from.
    from _multiprocess import start_trainers

    out = tmp_path / "o"
    args = ["--preset", "tiny", "--no-progress", "--out", str(out), *SMALL, "--steps", "100000"]
    args += ["--log-every", "1", "--checkpoint-every", "3", "--heartbeat-timeout", "10"]
    survivor, victim = start_trainers(args, stderr=subprocess.STDOUT)
    try:
        lines = []
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:  # until the survivor has passed a checkpoint
            line = survivor.stdout.readline()
            lines.append(line)
            if line.startswith("step 5:") or not line:
                break
        assert any(x.startswith("step 5:") for x in lines), "".join(lines)[-3000:]
        victim.send_signal(signal.SIGKILL)
        rest, _ = survivor.communicate(timeout=120)
    finally:
        for p in (survivor, victim):
            p.kill()
            p.communicate()
    assert survivor.returncode == 3, rest[-3000:]
    assert "Traceback" not in rest and "Check failure" not in rest, rest[-3000:]
    errors = [x for x in rest.splitlines() if x.startswith("error:")]
    assert len(errors) == 1, rest[-3000:]
    steps = checkpoints.complete_steps(str(out))
    assert steps and steps[-1] >= 3, steps
    assert errors[0].startswith("error: process 0: another process of the run stopped (")
    assert errors[0].endswith(
        f"restart every process with the same command: the run resumes from step {steps[-1]}, "
        "its last checkpoint"
    )


# ---- item 14: what the run prints and plots -----------------------------------------------


def _record(**over):
    fields = dict(
        step=10, loss=0.5, auc=0.7, samples_per_s=1000.0, compression_ratio=8.0,
        raw_bytes=8 * MIB, frame_bytes=1 * MIB, moved_bytes=2 * MIB, moved_ratio=4.0,
        ratio_per_table=[4.0, 12.5, 9.0], fallback_steps=0, seconds=1.0, unix_time=0.0,
        error_bound=[0.01, 0.03, 0.05], bad_lines=0, exchange="on",
    )  # fmt: skip
    fields.update(over)
    return metrics_lib.TrainRecord(**fields)


def test_the_log_names_the_exchange_and_moved_ratios_and_the_table_ids():
    line = metrics_lib.describe_interval(_record())
    assert (
        "exchange ratio (raw/frames) 8.00x, moved ratio (raw/moved) 4.00x: raw 8.0 MiB, "
        "frames 1.0 MiB, moved 2.0 MiB, 0 exact-fallback steps" in line
    )
    assert metrics_lib.describe_tables(_record()) == (
        "  exchange ratio per table (table:raw/frames): 0:4.0 1:12.5 2:9.0"
    )


def test_the_log_splits_bytes_by_node_only_when_some_cross_nodes():
    one_node = metrics_lib.describe_interval(_record())  # no inter-node bytes: no split
    assert "intra-node" not in one_node and "0 exact-fallback steps | eb_rel [" in one_node
    nodes = _record(intra_node_bytes=MIB, inter_node_raw_bytes=4 * MIB, inter_node_moved_bytes=MIB)
    assert (
        "0 exact-fallback steps | flat: intra-node 1.0 MiB, inter-node moved 1.0 MiB of raw "
        "4.0 MiB | eb_rel [" in metrics_lib.describe_interval(nodes)
    )


def test_curves_show_bytes_moved_both_ratios_and_per_table_ratios_by_id(tmp_path):
    path = tmp_path / "metrics.jsonl"
    w = metrics_lib.MetricsWriter(path, None, enabled=True)
    w.write(_record(step=5, moved_bytes=10 * MIB, frame_bytes=5 * MIB, raw_bytes=40 * MIB))
    w.write(_record(step=10, moved_bytes=5 * MIB, frame_bytes=4 * MIB, raw_bytes=40 * MIB))
    fig = plots.make_figure({"jlc": str(path)})
    try:
        panels = {a.get_title(): a for a in fig.axes}
        moved = panels["bytes per step of the forward exchange (MiB)"]
        lines = {ln.get_label(): ln for ln in moved.lines}
        # 5 steps per interval: MiB per step
        assert list(lines["jlc: moved"].get_ydata()) == [2.0, 1.0]
        assert list(lines["jlc: frames"].get_ydata()) == [1.0, 0.8]
        assert list(lines["jlc: raw"].get_ydata()) == [8.0, 8.0]
        ratios = panels["exchange ratio (raw / frames) and moved ratio (raw / moved)"]
        assert [ln.get_label() for ln in ratios.lines] == [
            "jlc: exchange (raw/frames)",
            "jlc: moved (raw/moved)",
        ]
        per_table = panels["exchange ratio per table, last interval"]
        assert per_table.get_xlabel() == "table id"
        assert list(per_table.lines[0].get_xdata()) == [0, 1, 2]
        assert list(per_table.lines[0].get_ydata()) == [4.0, 12.5, 9.0]
    finally:
        plt.close(fig)


@pytest.mark.slow
def test_the_first_interval_samples_per_s_excludes_compilation(tmp_path):
    out = tmp_path / "o"
    rc, text = _train(out, *SMALL, "--steps", "6", "--checkpoint-every", "0")
    assert rc == 0, text[-3000:]
    compile_s = float(re.search(r"compiled the train step in (\d+\.\d) s", text).group(1))
    tr = _records(out, "train")
    assert [r["step"] for r in tr] == [2, 4, 6]
    # Compiling the tiny model takes seconds, two of its steps a fraction of that: the first
    # interval held the compilation (its time >= compile_s, its rate far below the others').
    assert tr[0]["seconds"] < compile_s / 2
    assert tr[0]["samples_per_s"] == pytest.approx(2 * 64 / tr[0]["seconds"])  # tiny: B=64
