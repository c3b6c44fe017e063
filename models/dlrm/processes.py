"""The processes of a trainer run: start-up (jax.distributed, devices, cluster launchers)
and what a process does when another one of the run is gone.

``setup_jax(args)`` runs before any JAX backend starts: deterministic GPU kernels, virtual CPU
devices (``--devices``), ``jax.distributed.initialize`` with the local device ids a SLURM or
OpenMPI launcher implies (``local_device_ids``), a named wait with its own timeout
(``join_processes``) and the check of the devices this process sees. ``peer_lost_reason`` and
``stop_after_peer_lost`` turn a dead peer's runtime error into one line and exit status 3.
"""

from __future__ import annotations

import argparse
import os
import sys

#: (local rank, tasks on this node) variables of the cluster launchers jax.distributed detects
LAUNCHERS = (
    ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
)
DETERMINISTIC_FLAG = "--xla_gpu_deterministic_ops=true"


def local_device_ids(args: argparse.Namespace, environ=os.environ) -> list[int] | None:
    """The ``local_device_ids`` of ``jax.distributed.initialize`` for this process.

    ``--local-device-ids`` when given. Under a cluster launcher (SLURM_LOCALID or
    OMPI_COMM_WORLD_LOCAL_RANK set), the block of ``--devices`` ids at the local rank
    (``rank * N .. rank * N + N - 1``; one GPU per task when ``--devices`` is not given and the
    node runs several tasks). Else None (every device of the host). Without this, jax's own
    launcher detection gives every task only GPU ``local rank``: one task per node trains on
    GPU 0 alone.

    Raises:
      ValueError: one task per node under a launcher without ``--devices`` (how many GPUs of
        the node it should take is not known before JAX starts), or a bad id list.
    """
    if args.local_device_ids:
        try:
            return [int(x) for x in args.local_device_ids.split(",")]
        except ValueError:
            raise ValueError(
                f"--local-device-ids {args.local_device_ids!r}: ids like 0,1,2"
            ) from None
    for rank_var, size_var in LAUNCHERS:
        if rank_var in environ:
            rank, tasks = int(environ[rank_var]), environ.get(size_var)
            if args.devices_per_process:
                return list(
                    range(rank * args.devices_per_process, (rank + 1) * args.devices_per_process)
                )
            if tasks is not None and int(tasks) == 1:
                raise ValueError(
                    f"{rank_var} is set with one task per node ({size_var}=1): pass --devices N "
                    "(the node's GPUs) or --local-device-ids, else jax takes GPU 0 only"
                )
            return [rank]
    return None


def quiet_native_stdout() -> None:
    """Sends what native code writes to stdout (gloo's per-rank '[Gloo] Rank r is connected
    to n peer ranks' banners) to /dev/null; Python's ``sys.stdout`` (print, tqdm.write) is
    rebound to a duplicate of the original descriptor, line-buffered, so the run's own lines
    are unchanged. Errors and XLA's logs go to stderr, untouched."""
    sys.stdout.flush()
    keep = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    sys.stdout = os.fdopen(keep, "w", buffering=1)


def join_processes(args: argparse.Namespace, **kwargs) -> None:
    """``jax.distributed.initialize`` that says what it waits for and gives up after
    ``--init-timeout`` seconds with one line (exit 2) instead of jax's abort.

    jax aborts the process (absl fatal log and a stack trace) when its own timeout expires;
    a watchdog thread exits first, one second before it.
    """
    import threading

    import jax

    n, pid, t = args.num_processes, args.process_id, args.init_timeout
    print(
        f"process {pid}: waiting up to {t} s (--init-timeout) for all {n} processes to join "
        f"the coordinator at {args.coordinator} (process 0 runs it); a process not heard from "
        f"for {args.heartbeat_timeout} s (--heartbeat-timeout) stops the run",
        file=sys.stderr,
        flush=True,
    )

    def give_up():
        print(
            f"error: the {n} processes did not all join the coordinator at {args.coordinator} "
            f"within {t} s (--init-timeout): start every process with --coordinator "
            f"{args.coordinator} --num-processes {n} and its own --process-id 0..{n - 1}",
            file=sys.stderr,
            flush=True,
        )
        os._exit(2)

    watchdog = threading.Timer(t, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=n,
            process_id=pid,
            initialization_timeout=t + 1,
            heartbeat_timeout_seconds=args.heartbeat_timeout,
            **kwargs,
        )
    finally:
        watchdog.cancel()


def setup_jax(args: argparse.Namespace) -> None:
    """Deterministic kernels, virtual devices and jax.distributed, before any backend starts;
    then prints and checks this process's devices.

    Raises:
      ValueError: the process sees another accelerator count than ``--devices`` /
        ``--local-device-ids`` ask for (see ``local_device_ids`` for the launcher rules).
    """
    import jax

    if args.deterministic:
        flags_now = os.environ.get("XLA_FLAGS", "").split()
        if DETERMINISTIC_FLAG not in flags_now:
            os.environ["XLA_FLAGS"] = " ".join([*flags_now, DETERMINISTIC_FLAG])
    if args.devices_per_process:
        jax.config.update("jax_num_cpu_devices", args.devices_per_process)
    ids = local_device_ids(args)
    if args.coordinator:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        join_processes(args, local_device_ids=ids)
        if jax.default_backend() == "cpu" and not args.gloo_banners:
            quiet_native_stdout()  # gloo's banners come with the first collectives
    if jax.default_backend() == "cpu":
        return
    have = jax.local_device_count()
    print(
        f"process {jax.process_index()}/{jax.process_count()}: {have} local "
        f"{jax.default_backend()} devices (local_device_ids {ids or 'all'})",
        file=sys.stderr,
        flush=True,
    )
    if ids is not None and args.coordinator and have != len(ids):
        raise ValueError(f"{len(ids)} local device ids {ids} asked for, but jax sees {have}")
    if args.devices_per_process and have < args.devices_per_process:
        raise ValueError(f"--devices {args.devices_per_process}: jax sees {have} local devices")


#: What gloo, NCCL and jax's coordination service say when another process of the run is gone
PEER_LOST = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Connection refused",
    "Broken pipe",
    "heartbeat",
    "unhealthy",
    "remote process exited",  # NCCL
)


def peer_lost_reason(e: BaseException) -> str | None:
    """The line of a runtime error that says another process of the run died (gloo's read
    error, a missed heartbeat), or None for other errors."""
    for line in str(e).splitlines():
        if any(p in line for p in PEER_LOST):
            return line.split("] ", 1)[-1].strip()[:200]
    return None


def resume_point(workdir: str) -> str:
    """Where a rerun of the command resumes ``workdir``'s run: "resumes from step N, its last
    checkpoint" or "starts from step 0 (no checkpoint yet)"."""
    from models.dlrm.checkpoints import complete_steps

    steps = complete_steps(workdir)
    if steps:
        return f"resumes from step {steps[-1]}, its last checkpoint"
    return "starts from step 0 (no checkpoint yet)"


def stop_after_peer_lost(reason: str, workdir: str) -> None:
    """Prints one line and ends the process at once (exit 3): jax's exit handler would wait at
    a shutdown barrier the dead peer never reaches, then abort with a fatal log and a native
    stack trace."""
    import jax

    print(
        f"error: process {jax.process_index()}: another process of the run stopped ({reason}); "
        f"restart every process with the same command: the run {resume_point(workdir)}",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.flush()
    os._exit(3)
