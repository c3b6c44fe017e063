"""DLRM end-to-end tests through the CLI (``python -m models.dlrm.train``) in subprocesses:
real Criteo Kaggle / Terabyte rows on 8 virtual devices, SIGKILL-and-resume equivalence,
the Python entry point against the CLI, 2 processes x 4 devices (jax.distributed, gloo)."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from support import require_eight_devices

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "..", "shared", "data")
KAGGLE = os.path.join(DATA, "criteo_kaggle")
TERABYTE = os.path.join(DATA, "criteo_terabyte")
TIMEOUT = 300


def _cmd(out, *flags):
    return [
        sys.executable,
        "-m",
        "models.dlrm.train",
        "--preset",
        "tiny",
        "--out",
        str(out),
        "--no-progress",
        *flags,
    ]


def _env(**extra):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # --devices decides
    env.update(extra)
    return env


def _run_all(cmds, env=None):
    """Runs the commands concurrently; returns their CompletedProcess-like results."""
    procs = [
        subprocess.Popen(
            c,
            cwd=ROOT,
            env=env or _env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for c in cmds
    ]
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outs.append((p.returncode, out))
    return outs


def _records(out, kind):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r.get("kind") == kind]


needs_data = pytest.mark.skipif(not os.path.isdir(KAGGLE), reason="shared data not present")


@needs_data
@pytest.mark.slow
def test_real_kaggle_and_terabyte_rows_end_to_end(tmp_path):
    k, t = tmp_path / "kaggle", tmp_path / "terabyte"
    res = _run_all(
        [
            _cmd(
                k,
                "--devices",
                "8",
                "--steps",
                "8",
                "--batch-size",
                "128",
                "--format",
                "kaggle",
                "--data",
                os.path.join(KAGGLE, "dac_head8000_split_train.tsv"),
                "--eval-data",
                os.path.join(KAGGLE, "dac_head8000_split_test.tsv"),
                "--eval-every",
                "0",
                "--log-every",
                "4",
                "--compression",
                "on",
            ),
            _cmd(
                t,
                "--devices",
                "8",
                "--steps",
                "6",
                "--batch-size",
                "64",
                "--format",
                "terabyte",
                "--data",
                TERABYTE,
                "--holdout-every",
                "4",
                "--eval-every",
                "0",
                "--log-every",
                "3",
                "--compression",
                "on",
            ),
        ]
    )
    for (rc, out), d in zip(res, (k, t)):
        assert rc == 0, out[-3000:]
        assert "exchange ratio" in out and "eval @" in out
        tr, ev = _records(d, "train"), _records(d, "eval")
        assert tr and ev
        assert tr[-1]["compression_ratio"] > 1.0 and tr[-1]["raw_bytes"] > 0
        assert tr[-1]["moved_bytes"] > 0 and len(tr[-1]["ratio_per_table"]) == 26
        assert len(tr[-1]["error_bound"]) == 26
        assert 0.0 <= ev[-1]["auc"] <= 1.0 and ev[-1]["logloss"] > 0
        assert os.path.exists(os.path.join(d, "curves.png"))
    assert _records(k, "eval")[-1]["rows"] == 391


def _popen(cmd):
    return subprocess.Popen(
        cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _timing_free(records):
    timing = ("samples_per_s", "seconds", "unix_time", "net_tx_bytes", "data_wait_s")
    return [{k: v for k, v in r.items() if k not in timing} for r in records]


@pytest.mark.slow
def test_sigkill_and_resume_matches_uninterrupted_run(tmp_path):
    """A real kill: SIGKILL the trainer once its step-10 checkpoint exists (mid-run), resume
    it, and compare with an uninterrupted run of the same command. The compressed exchange
    and the compressed gradient all-reduce with error feedback are on, so the error-bound
    state and the error-feedback residuals must survive the kill bit for bit."""
    full, killed = tmp_path / "full", tmp_path / "killed"
    steps = 60
    common = (
        "--devices",
        "4",
        "--steps",
        str(steps),
        "--checkpoint-every",
        "10",
        "--eval-every",
        "10",
        "--log-every",
        "5",
        "--compression",
        "on",
        "--grad-allreduce",
        "compressed",
        "--seed",
        "7",
    )
    uninterrupted = _popen(_cmd(full, *common))
    victim = _popen(_cmd(killed, *common))
    first = killed / "checkpoints" / "10"  # orbax renames a step's folder when it is complete
    deadline = time.monotonic() + TIMEOUT
    while not first.is_dir() and victim.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    victim.kill()
    out_kill, _ = victim.communicate()
    assert victim.returncode == -signal.SIGKILL, out_kill[-3000:]  # killed, not finished
    assert not (killed / "checkpoints" / str(steps)).exists()
    out_full, _ = uninterrupted.communicate(timeout=TIMEOUT)
    assert uninterrupted.returncode == 0, out_full[-3000:]
    [(rc, out)] = _run_all([_cmd(killed, *common, "--resume")])
    assert rc == 0, out[-3000:]
    resumed = int(re.search(r"resumed from step (\d+)", out).group(1))
    assert 10 <= resumed < steps and resumed % 10 == 0
    a = json.load(open(full / "final.json"))["on"]
    b = json.load(open(killed / "final.json"))["on"]
    assert a == b  # parameters checksum, AUC, log loss, accuracy: bit-identical
    assert "error feedback on" in out
    assert all(0 < r["allreduce_moved_bytes"] < r["allreduce_raw_bytes"] / 4
               for r in _records(killed, "train"))  # fmt: skip
    # The metrics log of the resumed run matches too: records after the checkpoint were
    # dropped and rewritten (log intervals align with the checkpoints here).
    assert _timing_free(_records(full, "train")) == _timing_free(_records(killed, "train"))
    assert _records(full, "eval") == _records(killed, "eval")
    assert len(_records(killed, "config")) == 1


@pytest.mark.slow
def test_python_entry_point_runs_what_the_command_line_runs(tmp_path):
    """``train_and_evaluate(config, workdir)`` from Python, with the Config the flags give,
    writes the same metrics as the command line."""
    argv = (
        "--preset",
        "tiny",
        "--devices",
        "8",
        "--steps",
        "6",
        "--log-every",
        "3",
        "--eval-every",
        "3",
        "--checkpoint-every",
        "0",
        "--seed",
        "3",
        "--eb-base",
        "0.02",
        "--eb-schedule",
        "step",
    )

    from models.dlrm import flags, train

    require_eight_devices()
    cli, py = tmp_path / "cli", tmp_path / "py"
    [(rc, out)] = _run_all([_cmd(cli, *argv[2:])])
    assert rc == 0, out[-3000:]
    config = flags.config_from_flags(flags.build_parser().parse_args(list(argv)))
    result = train.train_and_evaluate(config, str(py), progress=False)
    assert json.load(open(cli / "final.json")) == {"on": result}
    for kind in ("config", "eval", "final"):
        assert _records(py, kind) == _records(cli, kind), kind
    assert _timing_free(_records(py, "train")) == _timing_free(_records(cli, "train"))
    assert _records(py, "config")[0]["config"]["error_bound"]["base"] == 0.02


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_of_four_devices_train(tmp_path):
    port = _free_port()
    common = (
        "--devices",
        "4",
        "--steps",
        "4",
        "--eval-every",
        "0",
        "--log-every",
        "2",
        "--checkpoint-every",
        "0",
        "--compression",
        "on",
        "--eval-rows",
        "256",
    )
    cmds = [
        _cmd(
            tmp_path / "mp",
            *common,
            "--coordinator",
            f"127.0.0.1:{port}",
            "--num-processes",
            "2",
            "--process-id",
            str(i),
        )
        for i in range(2)
    ]
    # The single-process reference (8 devices as 2 nodes of 4, as the two processes: both
    # take the hierarchical exchange by default) runs at the same time.
    sp_cmd = _cmd(tmp_path / "sp", "--devices", "8", "--node-devices", "4", *common[2:])
    res = _run_all(cmds + [sp_cmd])
    for rc, out in res:
        assert rc == 0, out[-3000:]
    assert "8 x cpu over 2 process(es)" in res[0][1]
    assert "hierarchical over 2 node(s) of 4 device(s)" in res[0][1]
    mp = _records(tmp_path / "mp", "train")
    sp = _records(tmp_path / "sp", "train")
    assert [r["step"] for r in mp] == [2, 4]
    for a, b in zip(mp, sp):  # same data and model as one process with 8 devices
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        # intra-node exact, inter-node compressed: the bytes of the one process's 2 x 4
        assert a["exchange_topology"] == b["exchange_topology"] == "hierarchical"
        for k in ("intra_node_bytes", "inter_node_raw_bytes", "inter_node_moved_bytes"):
            assert a[k] == b[k], k
        assert a["intra_node_bytes"] == a["raw_bytes"] * 3 / 4
        assert 0 < a["inter_node_moved_bytes"] < a["inter_node_raw_bytes"] == a["raw_bytes"] / 2
    mev, sev = _records(tmp_path / "mp", "eval")[-1], _records(tmp_path / "sp", "eval")[-1]
    assert mev["auc"] == pytest.approx(sev["auc"], abs=1e-6)
