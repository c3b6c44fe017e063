"""Multi-host and GPU-cluster paths of the DLRM trainer, tested on CPU: fake GPU
devices of two hosts, mocked cluster launchers, monkeypatched platforms, lowering without
compiling and several local processes."""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models.dlrm import mesh as mesh_lib


@dataclasses.dataclass(frozen=True)
class FakeGpu:
    """What the mesh code reads of a device: 2 hosts x 8 GPUs give each host its own slice."""

    id: int
    process_index: int
    slice_index: int
    platform: str = "gpu"
    device_kind: str = "NVIDIA H100 80GB HBM3"

    def __repr__(self):
        return f"FakeGpu({self.id})"


def test_mesh_over_two_gpu_hosts_of_eight():
    # jax.make_mesh raised "does not support multi-slice topologies" for these devices.
    devices = [FakeGpu(i, i // 8, i // 8) for i in range(16)]
    given = devices[12:] + devices[:8] + devices[8:12]  # host 1's devices first, split
    mesh = mesh_lib.make_mesh(given)
    assert mesh.axis_names == (mesh_lib.AXIS,)
    assert mesh.axis_types == (jax.sharding.AxisType.Auto,)
    assert mesh.devices.shape == (16,)
    # process-major (one host's devices together, in the order given within the host), so a
    # process's consecutive block of the batch lands on its own devices
    assert [d.id for d in mesh.devices.flat] == list(range(8)) + [12, 13, 14, 15, 8, 9, 10, 11]
    assert [d.process_index for d in mesh.devices.flat] == [0] * 8 + [1] * 8


# --- launcher, device selection and determinism (main.setup_jax) ---------------------------

LAUNCHER_VARS = (
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_JOB_ID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_SIZE",
    "JAX_LOCAL_DEVICE_IDS",
)


@pytest.fixture
def fake_gpu_jax(monkeypatch):
    """setup_jax against a GPU backend of ``calls['local']`` devices: records the arguments of
    jax.distributed.initialize and jax.config.update; no backend is started."""
    from models.dlrm import main as main_lib

    calls = {"init": [], "config": [], "local": 8}
    for k in LAUNCHER_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls["init"].append(kw))
    monkeypatch.setattr(jax.config, "update", lambda *a: calls["config"].append(a))
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "local_device_count", lambda: calls["local"])
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    monkeypatch.setattr(jax, "process_count", lambda: 2)

    def setup(*argv, local=8):
        from models.dlrm import flags

        calls["local"] = local
        main_lib.setup_jax(flags.build_parser().parse_args(list(argv)))
        return calls

    return setup


def test_slurm_one_task_per_node_takes_the_node_gpus(fake_gpu_jax, monkeypatch):
    # One task per node: jax's SLURM detection alone would pass local_device_ids=[0] and the
    # run would train on 1 GPU per host without saying so.
    monkeypatch.setenv("SLURM_LOCALID", "0")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "1")
    calls = fake_gpu_jax("--coordinator", "10.0.0.1:1234", "--num-processes", "2",
                         "--process-id", "1", "--devices", "8")  # fmt: skip
    assert calls["init"][0]["local_device_ids"] == list(range(8))


def test_ompi_one_task_per_gpu_takes_its_local_rank(fake_gpu_jax, monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8")
    calls = fake_gpu_jax("--coordinator", "10.0.0.1:1234", "--num-processes", "16",
                         "--process-id", "3", "--devices", "1", local=1)  # fmt: skip
    assert calls["init"][0]["local_device_ids"] == [3]


def test_local_device_ids_flag_wins_and_is_checked(fake_gpu_jax, monkeypatch):
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "2")
    common = ("--coordinator", "h:1", "--num-processes", "4", "--process-id", "1")
    calls = fake_gpu_jax(*common, "--local-device-ids", "4,5,6,7", local=4)
    assert calls["init"][0]["local_device_ids"] == [4, 5, 6, 7]
    # the backend shows another device count than the ids ask for: a clear error
    with pytest.raises(ValueError, match=r"4 local device ids .* but jax sees 8"):
        fake_gpu_jax(*common, "--local-device-ids", "4,5,6,7", local=8)


def test_one_task_per_node_without_a_device_count_is_refused(fake_gpu_jax, monkeypatch):
    monkeypatch.setenv("SLURM_LOCALID", "0")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "1")
    with pytest.raises(ValueError, match="one task per node.*--devices"):
        fake_gpu_jax("--coordinator", "h:1", "--num-processes", "2", "--process-id", "0")


def test_fewer_local_devices_than_asked_is_an_error(fake_gpu_jax):
    with pytest.raises(ValueError, match="--devices 8: jax sees 2 local devices"):
        fake_gpu_jax("--devices", "8", local=2)


def test_deterministic_flag_sets_the_xla_flag_before_jax_starts(fake_gpu_jax, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    fake_gpu_jax("--deterministic")
    assert os.environ["XLA_FLAGS"].split() == [
        "--xla_force_host_platform_device_count=8",
        "--xla_gpu_deterministic_ops=true",
    ]
    fake_gpu_jax("--deterministic")  # not twice
    assert os.environ["XLA_FLAGS"].count("deterministic") == 1
    monkeypatch.delenv("XLA_FLAGS")
    fake_gpu_jax()
    assert "XLA_FLAGS" not in os.environ


# --- the test suite on a GPU machine (root conftest.py) -------------------------------------


def test_suite_keeps_the_cpu_first_and_reaches_the_gpu_when_there_is_one():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "conftest.py"
    spec = importlib.util.spec_from_file_location("_root_conftest", path)
    root = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root)
    choose = root.jax_platforms_for_tests
    # a GPU machine: CPU is the default platform (8 virtual devices), CUDA reachable by name
    assert choose({}, cuda_plugin=True, gpu_visible=True) == "cpu,cuda"
    assert choose({}, cuda_plugin=True, gpu_visible=False) == "cpu"  # plugin, no GPU
    assert choose({}, cuda_plugin=False, gpu_visible=True) == "cpu"  # GPU, CPU-only jaxlib
    assert choose({"JAX_PLATFORMS": "cuda"}, cuda_plugin=True, gpu_visible=True) == "cuda"
    # and this run: the multi-device tests get the 8 CPU devices
    assert os.environ["JAX_PLATFORMS"].split(",")[0] == "cpu"
    assert jax.default_backend() == "cpu" and jax.device_count() == 8


# --- initialisation computes the table scale on the device ----------------------------------


def _host_scale(placement):
    """The per-row scale of the buffer as the host computed it before (float32[P, R])."""
    scale = np.zeros((placement.num_devices, placement.rows_per_device), np.float32)
    for d in range(placement.num_devices):
        for j in range(placement.local_tables):
            n, t = placement.slot_rows[d, j], placement.slot_table[d, j]
            if n:
                o = placement.offsets[d, j]
                scale[d, o : o + n] = 1.0 / np.sqrt(placement.table_rows[t])
    return scale


def test_init_builds_no_table_sized_constant_and_keeps_its_values():
    import re

    from models.dlrm import models, sharding

    rows = [5000, 3000, 700, 20, 9000, 1, 64, 2500, 4100]
    placement = sharding.plan_tables(rows, 4, 8, split_rows=None)
    p, r = placement.num_devices, placement.rows_per_device
    assert p * r >= 2000  # big enough that a host-built scale shows as a constant
    key = jax.random.key(3)
    init = jax.jit(lambda k: models._init_buffer(k, placement))
    text = init.lower(key).as_text()
    shapes = re.findall(r"stablehlo\.constant dense<[^>]*> : tensor<([0-9x]+)xf32>", text)
    big = [s for s in shapes if np.prod([int(v) for v in s.split("x")]) >= p * r]
    assert not big, f"the init jit embeds float32 constants {big} (built on the host)"
    # same values as u * host scale (the scale is one table's 1/sqrt(rows) or 0 per row)
    u = jax.random.uniform(key, (p, r, placement.dim), jnp.float32, -1.0, 1.0)
    want = np.asarray(u) * _host_scale(placement)[..., None]
    np.testing.assert_array_equal(np.asarray(init(key)), want)


# --- text input on several processes: position and parsing ----------------------------------


def _numbered_file(path, lines: int, bad=()):
    """Kaggle-format lines whose I1 is the line number (0-based); lines in ``bad`` have a
    non-hex categorical value."""
    rows = []
    for n in range(lines):
        cats = ["zz"] + ["a1"] * 25 if n in bad else ["%x" % (n + 1)] * 26
        rows.append("\t".join([str(n % 2), str(n)] + ["1"] * 12 + cats))
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _line_numbers(batch) -> list[int]:
    return [int(round(float(np.expm1(v)))) for v in batch["dense"][:, 0]]


def _stream(path, pid, nproc, position=None, **kw):
    from models.dlrm.data.input_pipeline import CriteoFileStream

    return CriteoFileStream(
        [path], "kaggle", [1000] * 26, 8, process_index=pid, num_processes=nproc,
        position=position, **kw,
    )  # fmt: skip


def test_resumed_process_one_continues_after_its_own_rows(tmp_path):
    # The trainer saves the primary process's position; after 3 global batches of 16 rows
    # (8 per process) process 1 must go on with lines 56-63 (it got 40-47 before: process 0
    # stopped reading mid-way through the global batch).
    path = _numbered_file(tmp_path / "day_0", 100)
    streams = [_stream(path, pid, 2) for pid in range(2)]
    for _ in range(3):
        got = [_line_numbers(s.next_batch()) for s in streams]
    assert got == [list(range(32, 40)), list(range(40, 48))]
    assert streams[0].position() == streams[1].position()  # one position for all processes
    resumed = [_stream(path, pid, 2, streams[0].position()) for pid in range(2)]
    assert _line_numbers(resumed[1].next_batch()) == list(range(56, 64))
    assert _line_numbers(resumed[0].next_batch()) == list(range(48, 56))


@pytest.mark.parametrize("holdout", [0, 7])
def test_each_process_parses_only_its_own_lines(tmp_path, monkeypatch, holdout):
    from models.dlrm.data import input_pipeline

    path = _numbered_file(tmp_path / "day_0", 90)
    parsed = []
    real_call = input_pipeline.LineParser.__call__

    def counting(self, line):
        parsed.append(int(line.split("\t")[1]))
        return real_call(self, line)

    monkeypatch.setattr(input_pipeline.LineParser, "__call__", counting)
    one = _stream(path, 0, 1, holdout_every=holdout)
    one.local_batch = 16  # the global batch of the two processes below
    whole = [one.next_batch() for _ in range(4)]
    for pid in range(2):
        parsed.clear()
        s = _stream(path, pid, 2, holdout_every=holdout)
        for g in range(4):
            want = {k: v[pid * 8 : pid * 8 + 8] for k, v in whole[g].items()}
            for k, v in s.next_batch().items():
                np.testing.assert_array_equal(v, want[k])
        mine = [n for g in range(4) for n in _line_numbers(whole[g])[pid * 8 : pid * 8 + 8]]
        held = [n for n in range(max(parsed) + 1) if holdout and n % holdout == 0]
        assert sorted(parsed) == sorted(mine + held), pid  # no other process's line


@pytest.mark.slow
def test_two_processes_resume_from_a_checkpoint_at_their_own_rows(tmp_path, monkeypatch):
    import json

    from _multiprocess import run_processes

    monkeypatch.setenv("JLC_RESUME_DATA", _numbered_file(tmp_path / "day_0", 100))
    monkeypatch.setenv("JLC_RESUME_DIR", str(tmp_path / "run"))
    outs = run_processes("_cluster_resume_worker.py", 2, timeout_s=120)
    got = [json.loads(out[out.index("OK ") + 3 :].splitlines()[0]) for out in outs]
    assert [g["before"] for g in got] == [list(range(32, 40)), list(range(40, 48))]
    assert [g["step"] for g in got] == [3, 3]
    # process 1 got lines 40-47 again (process 0's position) before the fix
    assert [g["after"] for g in got] == [list(range(48, 56)), list(range(56, 64))]


@pytest.mark.slow
def test_a_workdir_not_shared_between_processes_is_a_clear_error(tmp_path):
    # Each process its own --out (hosts without a shared file system): before, one process
    # could restore a checkpoint while the other started fresh, and the job hung.
    from _multiprocess import run_trainers

    args = ["--preset", "tiny", "--devices", "2", "--steps", "2", "--eval-every", "0"]
    args += ["--checkpoint-every", "0", "--eval-rows", "64", "--no-progress"]
    runs = run_trainers(lambda i: [*args, "--out", str(tmp_path / f"host{i}")])
    for i, (rc, out) in enumerate(runs):
        assert rc != 0, f"process {i} ran on an unshared workdir:\n{out[-2000:]}"
        assert "is not one folder shared by all processes" in out, out[-3000:]
        assert "processes [1] see no file process 0 wrote there" in out, out[-3000:]


@pytest.mark.slow
def test_two_processes_resume_with_another_grad_allreduce(tmp_path):
    # The saved error-feedback residuals are split over 2 processes x 2 devices; a rerun
    # with the exact all-reduce has none, so restore reads them into throwaway arrays on each
    # process's own device and starts grad_ef fresh: both processes resume at step 2.
    from _multiprocess import run_trainers

    args = ["--preset", "tiny", "--devices", "2", "--eval-every", "0", "--eval-rows", "64"]
    args += ["--checkpoint-every", "2", "--no-progress", "--out", str(tmp_path / "run")]
    for steps, allreduce in (("2", "compressed"), ("4", "exact")):
        runs = run_trainers([*args, "--steps", steps, "--grad-allreduce", allreduce])
        for i, (rc, out) in enumerate(runs):
            assert rc == 0, f"process {i}, --grad-allreduce {allreduce}:\n{out[-3000:]}"
        outs = [out for _, out in runs]
    assert "resumed from step 2" in outs[0], outs[0][-3000:]
    assert "checkpoint 2: grad_ef re-initialized to a new run's value" in outs[0]
    steps = [d for d in os.listdir(tmp_path / "run" / "checkpoints") if d.isdigit()]
    assert sorted(steps) == ["2", "4"]


# --- a GPU without the CUDA handlers ----------------------------------------------------------


def test_gpu_without_cuda_handlers_is_a_clear_error_at_the_first_call(monkeypatch):
    # Built without nvcc: the CPU extension loads, HAS_CUDA is false, and every compile on a
    # GPU failed with XLA's opaque "no registered implementation for custom call" error.
    import jax_lossy_comm as jlc
    from jax_lossy_comm import _ffi

    if not _ffi.available():
        pytest.skip("the compiled extension is not built (the pure-jax reference serves)")
    x = jnp.ones((2, 8, 4), jnp.float32)
    monkeypatch.setattr(_ffi, "has_cuda", lambda: False)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    for call in (
        lambda: jlc.compress(x, 0.01),
        lambda: jlc.decompress(jnp.zeros((2, 64), jnp.uint8), jnp.zeros(2, jnp.int32), shape=(8, 4)),
        lambda: jlc.frame_status(jnp.zeros((2, 64), jnp.uint8), jnp.zeros(2, jnp.int32), shape=(8, 4)),
    ):  # fmt: skip
        with pytest.raises(RuntimeError, match="without its CUDA handlers.*JLC_CUDA=ON"):
            call()
    assert "no CUDA handlers" in _ffi.describe("gpu")
    monkeypatch.setattr(_ffi, "has_cuda", lambda: True)
    assert "CUDA handlers" in _ffi.describe("gpu") and "no CUDA" not in _ffi.describe("gpu")
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    monkeypatch.setattr(_ffi, "has_cuda", lambda: False)
    frames, nbytes = jlc.compress(x, 0.01)  # the CPU needs no CUDA handlers
    assert nbytes.shape == (2,) and int(nbytes.min()) > 0
    assert _ffi.describe("cpu").startswith("compiled")


def test_trainer_says_which_codec_implementation_runs_where():
    import dataclasses as dc

    from jax_lossy_comm import _ffi
    from models.dlrm import train_log, train_state
    from models.dlrm.configs import get_config
    from models.dlrm.pooled_all_to_all import EmbeddingExchange

    config = dc.replace(get_config("tiny"), compression="on")
    ctx, _, _ = train_state.setup(config, mesh_lib.make_mesh())
    on = EmbeddingExchange("on", "flat", ctx.exchange)
    lines = train_log.describe_run(config, on, ctx, "data")
    assert f"({_ffi.describe('cpu')})" in lines[1], lines
    off = EmbeddingExchange("off", "flat", None)
    assert "codec" not in train_log.describe_run(config, off, ctx, "data")[1].split(";")[0]
