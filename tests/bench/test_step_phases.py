"""The step's breakdown by phase: the trainer's ``--profile-steps`` trace and its reader
(``bench.testbed.step_phases``): op classification, the even split of concurrent ops, real
traces of the compressed and the exact step, the committed page against its JSON."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import jax.numpy as jnp
import pytest

from bench.testbed import step_phases as sp
from models.dlrm import profiling
from models.dlrm.configs import get_config
from models.dlrm.metrics import changed_settings
from models.dlrm.run_setup import start_over

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULT = os.path.join(ROOT, "bench", "results", "step_phases.json")
TIMEOUT = 300
PREFIX = "jit(train_step)/shard_map/"


def test_hlo_ops_reads_names_opcodes_scopes_and_targets():
    text = "\n".join(
        [
            "ENTRY %main.1 (a: f32[4]) -> f32[4] {",
            "  %all-to-all.1 = (f32[2]{0}, f32[2]{0}) all-to-all(%a, %b), replica_groups={{0,1}}, "
            'metadata={op_name="jit(f)/x/all_to_all" stack_frame_id=3}',
            '  %ffi_call.5 = u8[64]{0} custom-call(%c), custom_call_target="jax_lossy_comm_'
            'compress_v1", metadata={op_name="jit(f)/y/ffi_call"}',
            "  ROOT %add.2 = f32[4]{0} add(%p, %q)",
            "}",
        ]
    )
    ops = sp.hlo_ops(text)
    assert ops["all-to-all.1"] == sp.Op("all-to-all", "jit(f)/x/all_to_all", "")
    assert ops["ffi_call.5"] == sp.Op(
        "custom-call", "jit(f)/y/ffi_call", "jax_lossy_comm_compress_v1"
    )
    assert ops["add.2"] == sp.Op("add")
    assert "main.1" not in ops


@pytest.mark.parametrize(
    "op, expected",
    [
        (sp.Op("custom-call", PREFIX + "jvp(embedding_exchange)/cond/branch_0_fun/ffi_call",
               "jax_lossy_comm_compress_v1"), ("exchange forward", "codec")),
        (sp.Op("custom-call", PREFIX + "transpose(jvp(embedding_exchange))/ffi_call",
               "jax_lossy_comm_decompress_v1"), ("exchange backward", "codec")),
        (sp.Op("all-reduce", PREFIX + "(transpose(jvp(embedding_exchange))/pmax:"
               "gradient_all_reduce/pmax)"), ("exchange backward", "collective")),
        (sp.Op("fusion", PREFIX + "gradient_all_reduce/cond/branch_0_fun/reduce_sum"),
         ("gradient_all_reduce", "other")),
        (sp.Op("all-to-all", PREFIX + "ids_all_to_all/all_to_all"), ("ids_all_to_all", "collective")),
        (sp.Op("all-reduce", PREFIX + "psum_invariant"), ("compute", "collective")),
        (sp.Op("custom-call", PREFIX + "jvp()/dot_general", "__onednn$matmul"), ("compute", "other")),
    ],
)  # fmt: skip
def test_ops_are_classified_by_scope_and_opcode(op, expected):
    assert sp.classify(op) == expected


def _ev(name, ts, dur):
    return sp.Event(name, ts, dur, ("0", "1"))


def test_concurrent_ops_share_each_instant_and_gaps_are_idle():
    share, idle, wall = sp.attribute([_ev("a", 0, 10), _ev("b", 5, 10), _ev("c", 20, 5)])
    assert share == pytest.approx({"a": 7.5, "b": 7.5, "c": 5.0})
    assert (idle, wall) == (5.0, 25.0)
    assert sum(share.values()) + idle == wall
    assert sp.attribute([]) == ({}, 0.0, 0.0)


def _fake_trace(folder, executions, steps_file=True):
    """A process folder as StepTrace leaves it: HLO text, steps.json, a Perfetto trace whose
    op events are ``executions`` (lists of (op, ts, dur) per run id)."""
    hlo = [
        '  %a2a = f32[4]{0} all-to-all(%x), metadata={op_name="jit(train_step)/'
        'jvp(embedding_exchange)/all_to_all"}',
        '  %enc = u8[8]{0} custom-call(%x), custom_call_target="jax_lossy_comm_compress_v1", '
        'metadata={op_name="jit(train_step)/jvp(embedding_exchange)/cond/ffi_call"}',
        '  %dot = f32[4]{0} dot(%x, %y), metadata={op_name="jit(train_step)/jvp()/dot_general"}',
    ]
    events = [
        {"ph": "X", "name": op, "ts": ts, "dur": dur,
         "args": {"hlo_module": sp.MODULE, "hlo_op": op, "device_ordinal": "0", "run_id": str(i)}}
        for i, ops in enumerate(executions)
        for op, ts, dur in ops
    ]  # fmt: skip
    events.append({"ph": "X", "name": "Rendezvous", "ts": 0, "dur": 99, "args": {}})
    trace = folder / "plugins" / "profile" / "2026_12_05_09_00_00"
    trace.mkdir(parents=True)
    with gzip.open(trace / "host.perfetto_trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    (folder / profiling.HLO_FILE).write_text("\n".join(hlo))
    if steps_file:
        (folder / profiling.STEPS_FILE).write_text('{"first_step": 2, "last_step": 3}')


def test_an_op_of_one_execution_only_counts_zero_in_the_others(tmp_path):
    # execution 0 takes the codec's branch, execution 1 not: the codec's mean is over both
    _fake_trace(tmp_path, [[("dot", 0, 10), ("enc", 10, 4), ("a2a", 14, 6)],
                           [("dot", 100, 10), ("a2a", 112, 6)]])  # fmt: skip
    got = sp.process_breakdown(tmp_path)
    us = got["us_per_step"]
    assert got["executions"] == 2 and got["unmapped"] == []
    assert us["exchange forward/codec"] == pytest.approx(2.0)  # (4 + 0) / 2
    assert us["exchange forward/collective"] == pytest.approx(6.0)
    assert us["compute/other"] == pytest.approx(10.0)
    assert us["idle"] == pytest.approx(1.0) and us["wall"] == pytest.approx(19.0)
    assert us["between steps"] == pytest.approx(80.0)  # 20 -> 100


def test_an_unfinished_trace_is_named_not_read(tmp_path):
    _fake_trace(tmp_path, [[("dot", 0, 10)]], steps_file=False)
    with pytest.raises(FileNotFoundError, match="did not finish"):
        sp.process_breakdown(tmp_path)
    with pytest.raises(FileNotFoundError, match="run with --profile-steps"):
        sp.run_breakdown(tmp_path)


def test_a_trace_an_exception_left_running_is_stopped_and_a_new_one_starts(tmp_path):
    t = profiling.StepTrace(2, str(tmp_path), first_step=1, last_step=9)
    t.before(2, jnp.zeros(3))
    assert t.running
    t.close()  # the loop's finally after an exception at step 2
    assert not t.running and not os.path.exists(os.path.join(t.path, profiling.STEPS_FILE))
    t.close()  # twice is harmless
    again = profiling.StepTrace(1, str(tmp_path), first_step=1, last_step=9)
    again.before(2, jnp.zeros(3))  # would raise if the first trace were still running
    again.after(2, jnp.ones(3))
    with open(os.path.join(again.path, profiling.STEPS_FILE)) as f:
        assert json.load(f) == {"first_step": 2, "last_step": 2}


def test_profile_steps_is_no_change_of_settings_and_restart_removes_the_traces(tmp_path):
    assert (
        changed_settings({"steps": 5, "profile_steps": 0}, {"steps": 9, "profile_steps": 4}) == []
    )
    (tmp_path / "profile" / "process_0").mkdir(parents=True)
    (tmp_path / "metrics.jsonl").write_text("")
    line = start_over(str(tmp_path))
    assert line == f"--restart: removed the earlier run in {tmp_path} (metrics.jsonl, profile/)"
    assert os.listdir(tmp_path) == []


def test_the_trace_window_is_the_steps_after_the_warm_step_within_the_run(tmp_path):
    t = profiling.StepTrace(5, str(tmp_path), first_step=1, last_step=3)
    assert (t.first, t.last) == (2, 3)  # the run ends before 5 steps
    assert profiling.StepTrace(5, str(tmp_path), first_step=1, last_step=1).last == -1
    assert profiling.StepTrace(0, str(tmp_path), first_step=1, last_step=9).last == -1
    t = profiling.StepTrace(3, str(tmp_path), first_step=11, last_step=100)  # a resumed run
    assert (t.first, t.last) == (12, 14)
    assert t.path == os.path.join(str(tmp_path), "profile", "process_0")


def test_a_negative_profile_steps_is_a_config_error():
    config = get_config("tiny")
    config.profile_steps = -1
    with pytest.raises(ValueError, match="profile_steps must be >= 0"):
        config.validate()


def _train(out, *flags):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # --devices decides
    cmd = [sys.executable, "-m", "models.dlrm.main", "--preset", "tiny", "--out", str(out),
           "--no-progress", "--devices", "2", "--steps", "5", "--log-every", "5",
           "--eval-every", "0", "--eval-rows", "256", "--profile-steps", "2", *flags]  # fmt: skip
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return sp.run_breakdown(out)


def test_traces_of_the_compressed_and_the_exact_step_add_up_per_phase(tmp_path):
    compressed = _train(
        tmp_path / "c",
        *("--compression", "on", "--exchange-backward", "compressed"),
        *("--grad-allreduce", "compressed"),
    )
    exact = _train(tmp_path / "e", "--compression", "off")
    steps = json.load(open(tmp_path / "c" / "profile" / "process_0" / profiling.STEPS_FILE))
    assert steps == {"first_step": 2, "last_step": 3}
    for run in (compressed, exact):
        assert run["processes"] == 1 and run["executions"] == 2 * 2  # 2 devices x 2 steps
        assert run["unmapped_ops"] == []
        ms = run["ms_per_step"]
        parts = sum(v for k, v in ms.items() if "/" in k) + ms["idle"]
        assert parts == pytest.approx(ms["wall"], rel=1e-9)
        assert ms["wall"] > 0 and ms["between steps"] > 0
        assert ms["exchange forward/collective"] > 0 and ms["exchange backward/collective"] > 0
        assert ms["compute/other"] > 0
    c, e = compressed["ms_per_step"], exact["ms_per_step"]
    for phase in ("exchange forward", "exchange backward", profiling.ALLREDUCE_SCOPE):
        assert c[f"{phase}/codec"] > 0, phase
        assert e.get(f"{phase}/codec", 0.0) == 0.0, phase
    assert e[f"{profiling.ALLREDUCE_SCOPE}/collective"] > 0
    # the page lists the phase/kind rows with time (0.05 ms or more) in either run, in the
    # order of PHASES x KINDS; wall and between steps always
    page = sp.render({"title": "t", "runs": {"compressed": compressed, "exact": exact}})
    listed = [line.split(" | ")[0][2:] for line in page.splitlines() if line.startswith("| ")]
    listed = [k for k in listed if "/" in k and k != "phase / kind"]
    order = [k for k, _ in sp.rows({}) if "/" in k]
    shown = [k for k in order if max(c.get(k, 0.0), e.get(k, 0.0)) >= 0.05]
    assert listed == shown and listed
    assert "| **wall** |" in page and "| **between steps** |" in page


@pytest.mark.slow
def test_two_processes_trace_apart_and_restart_removes_both_traces(tmp_path):
    """Several hosts: each process traces into its own folder and the reader sums both;
    ``--restart`` on two processes removes the shared ``profile/`` once (process 0) and both
    start a new run."""
    from _multiprocess import run_trainers

    out = tmp_path / "o"
    args = ["--preset", "tiny", "--no-progress", "--out", str(out), "--devices", "2"]
    args += ["--steps", "4", "--log-every", "4", "--eval-every", "0", "--eval-rows", "256"]
    args += ["--checkpoint-every", "0"]
    for rc, text in run_trainers([*args, "--profile-steps", "2"]):
        assert rc == 0, text[-3000:]
    for i in (0, 1):
        steps = json.load(open(out / "profile" / f"process_{i}" / profiling.STEPS_FILE))
        assert steps == {"first_step": 2, "last_step": 3}
    run = sp.run_breakdown(out)
    assert run["processes"] == 2 and run["executions"] == 2 * 2 * 2  # processes x devices x steps
    assert run["ms_per_step"][f"{profiling.ALLREDUCE_SCOPE}/collective"] > 0
    # --restart without tracing: both processes' traces are gone, process 0 says so
    results = run_trainers([*args, "--restart"])
    for rc, text in results:
        assert rc == 0, text[-3000:]
    assert not (out / "profile").exists()
    assert "profile/)" in results[0][1] and "--restart: removed the earlier run" in results[0][1]


@pytest.mark.skipif(not os.path.exists(RESULT), reason="no committed step_phases.json")
def test_the_committed_page_is_rendered_from_its_json():
    with open(RESULT) as f:
        result = json.load(f)
    with open(RESULT[: -len(".json")] + ".md") as f:
        assert f.read() == sp.render(result)
