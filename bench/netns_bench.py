"""DLRM step time over a rate-limited link: exact vs compressed embedding all-to-all, and
TorchRec beside it (issues 6 and 16).

Two testbeds (``--testbed``), each made of private network namespaces (``ip netns add``)
that are deleted in a ``finally`` block (also on an error, Ctrl-C, SIGTERM or a time-out;
``namespace_deleted`` in the JSON says whether they are gone):

* ``loopback``: one namespace, its own loopback (``lo``) limited with ``tc``; both training
  processes run in it and talk over 127.0.0.1. Every gloo byte crosses the limited loopback,
  the in-process traffic between the devices of one process included (gloo connects those
  through TCP too), so this testbed cannot tell a node boundary from a device boundary.
* ``two-node``: one namespace per process ("node"), joined by a veth pair whose two ends
  have the addresses 10.77.0.1/24 (process 0) and 10.77.0.2/24 (process 1), which exist only
  inside these namespaces; the veth's rate is limited with ``tc`` on both ends (each
  direction). Each namespace has its own loopback up, so in-process traffic stays on it,
  unlimited, while inter-process traffic crosses the limited veth, as in a cluster where the
  devices of a host talk over NVLink and hosts over NICs. The coordinator address is
  10.77.0.1. Gloo's address: jax builds its gloo TCP transport without a hostname or
  interface (``jax._src.xla_bridge.make_cpu_client`` calls ``make_gloo_tcp_collectives
  (distributed_client=...)``), and gloo then binds the address that ``getaddrinfo
  (gethostname())`` gives (gloo ``transport/tcp/device.cc``, ``CreateDeviceAttr``). The
  benchmark writes ``/etc/netns/NAME/hosts`` mapping this machine's hostname to the
  namespace's veth address; ``ip netns exec`` bind-mounts it over ``/etc/hosts`` for the
  processes it starts, so gloo binds the veth address: connections to the peer process
  cross the veth, connections between the devices of one process go to the process's own
  address, which Linux routes over the namespace's loopback. TorchRec's gloo
  (``torch.distributed``) binds ``GLOO_SOCKET_IFNAME``, set to the namespace's veth. The
  bytes each interface sent (``/proc/PID/net/dev`` of a process left in each namespace,
  sampled every 0.1 s and interpolated at the trainer's logging intervals) give the link
  bytes per step (veth, both directions) and the in-process bytes per step (the loopbacks),
  which show where the traffic went.

``--testbed auto`` (default) is ``two-node`` with more than one device per process, else
``loopback`` (one device per process: the testbeds limit the same traffic).

Modes (``--modes``): the library trainer's exchanges (``exact``: ``jax.lax.all_to_all``;
``compressed*``: ``jax_lossy_comm.compressed_all_to_all``, paper tiers + schedule;
``compressed-flat`` / ``compressed-hierarchical``: forward and backward exchanges compressed
with ``--exchange-topology flat`` (every peer's block) or ``hierarchical`` (exact among the
devices of a process, compressed across processes)), and TorchRec's DLRM under
DistributedModelParallel (``torchrec-fp32``, ``torchrec-fp16``, ``torchrec-bf16``,
``torchrec-int8``; ``torchrec-dcn-*`` for DLRM-DCN; see ``bench/torchrec_peer.py``), run by
``--torchrec-python`` (an interpreter of its own venv; install commands in that module's
docstring and bench/README.md). Each mode's speedup is against its own baseline: ``exact``
for the library's modes, ``torchrec-fp32`` (``torchrec-dcn-fp32``) for TorchRec's.

Data: with a TorchRec mode (or ``--shards DIR``) every run reads the same binary shards,
written once: synthetic rows of the library's generator (``models.dlrm.synthetic``, seed
``--seed``) as Criteo text, converted by ``models.dlrm.preprocess`` into ``DIR/train`` (steps
x batch rows) and ``DIR/eval`` (``--eval-rows`` held-out rows of the generator's evaluation
stream); the trainer reads them with ``--data/--eval-data`` in file order (``--shuffle-block-rows 0``),
TorchRec with ``torchrec_peer.ShardReader`` in the same order. Without, the trainer uses its built-in generator.

For each rate, round and mode the benchmark reports the median step time after the first
logging interval (compile / warm-up), samples/s, bytes moved per step, link bytes per step,
final AUC and log loss, and the speedup ``step_time(baseline) / step_time(mode)`` of each
round (rounds interleave the modes). An unlimited run separates compute from communication.

Needs root (``CAP_SYS_ADMIN``/``CAP_NET_ADMIN``) and iproute2; otherwise it reports
``skipped`` with the reason. Bounded in time: every run has a timeout.

Usage (from the repo root)::

    sudo python -m bench.netns_bench                     # 1 and 10 Gbit/s, terabyte preset
    python -m bench.netns_bench --rates 1gbit --steps 12 --modes exact compressed int8-rowwise
    python -m bench.netns_bench --testbed two-node --devices-per-process 2 --rates 1gbit \\
        unlimited --rounds 2 --modes exact compressed-flat compressed-hierarchical \\
        torchrec-fp32 torchrec-fp16 torchrec-bf16 torchrec-int8 \\
        --torchrec-python /work/torchrec-venv/bin/python --out bench/results/netns_two_node.json

Results: bench/results/netns.json (``--out``).

References:
  Feng et al., SC24, arXiv 2407.04272, sec. 6 (1.38x end-to-end speedup on their cluster).
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from bench import bench_util as bu
from models.dlrm.metrics import MetricsLog, read_metrics

DEFAULT_OUT = bu.RESULTS_DIR / "netns.json"
DEFAULT_RATES = ("1gbit", "10gbit")
TESTBEDS = ("auto", "loopback", "two-node")
#: the two-node testbed's veth subnet: .1 = process 0 (and the coordinator), .2 = process 1
VETH_SUBNET = "10.77.0"
_LO_MTU = 65536  # the loopback's MTU; one packet plus headers must fit tbf's bucket
_COMPRESSED = ("--compression", "on", "--codec", "auto")
_BACKWARD = (*_COMPRESSED, "--exchange-backward", "compressed")
#: exchange modes of the library's trainer: name -> trainer flags
MODES = {
    "exact": ("--compression", "off"),
    "compressed": _COMPRESSED,
    # the backward (cotangent) exchange compressed too, same per-table bounds
    "compressed-bwd": _BACKWARD,
    # the same with the wire path pinned: fixed-capacity frames / used bytes in size buckets
    "compressed-bwd-dense": (*_BACKWARD, "--exchange-path", "dense"),
    "compressed-bwd-packed": (*_BACKWARD, "--exchange-path", "packed"),
    # same bytes on the dense (CPU) path, less CPU: fixed-rate codes only
    "compressed-fixed": ("--compression", "on", "--codec", "fixed"),
    "int8-rowwise": ("--compression", "on", "--codec", "int8-rowwise"),
    "bf16": ("--compression", "on", "--codec", "bf16"),
    # the head gradients' all-reduce compressed too (issue 15): error-bounded frames with
    # error feedback, or the bf16 baseline (PyTorch DDP's bf16 hook)
    "compressed-bwd-ar": (*_BACKWARD, "--grad-allreduce", "compressed"),
    "compressed-bwd-ar-bf16": (*_BACKWARD, "--grad-allreduce", "bf16"),
    # issue 16: forward + backward compressed, every peer's block (flat) or only the blocks
    # that cross processes (hierarchical: exact among the devices of a process)
    "compressed-flat": (*_BACKWARD, "--exchange-topology", "flat"),
    "compressed-hierarchical": (*_BACKWARD, "--exchange-topology", "hierarchical"),
    # the same with the head gradients' all-reduce compressed too (issue 15): what is left on
    # the link after the hierarchical exchange is mostly that all-reduce
    "compressed-hierarchical-ar": (
        *_BACKWARD,
        *("--exchange-topology", "hierarchical", "--grad-allreduce", "compressed"),
    ),
    # the same with fixed-rate gradient frames: about 3x the all-reduce bytes of the entropy
    # coded ones, about a tenth of their encode CPU (a CPU-bound step's choice)
    "compressed-hierarchical-ar-fixed": (
        *_BACKWARD,
        *("--exchange-topology", "hierarchical", "--grad-allreduce", "compressed"),
        *("--grad-codec", "fixed"),
    ),
}
#: TorchRec modes (bench/torchrec_peer.py): name -> (model, qcomm)
TORCHREC_MODES = {
    "torchrec-fp32": ("dlrm", "fp32"),
    "torchrec-fp16": ("dlrm", "fp16"),
    "torchrec-bf16": ("dlrm", "bf16"),
    "torchrec-int8": ("dlrm", "int8"),
    "torchrec-dcn-fp32": ("dlrm-dcn", "fp32"),
    "torchrec-dcn-fp16": ("dlrm-dcn", "fp16"),
    "torchrec-dcn-int8": ("dlrm-dcn", "int8"),
}


def baseline(mode: str) -> str:
    """The mode a ``mode``'s speedup is measured against: ``torchrec-fp32`` for TorchRec's
    DLRM, ``torchrec-dcn-fp32`` for its DLRM-DCN, ``exact`` for the library's modes."""
    if mode.startswith("torchrec-dcn-"):
        return "torchrec-dcn-fp32"
    return "torchrec-fp32" if mode.startswith("torchrec-") else "exact"


def resolve_testbed(testbed: str, devices_per_process: int) -> str:
    """``auto`` -> ``two-node`` with more than one device per process, else ``loopback``.

    Raises:
      ValueError: an unknown testbed or a device count below 1.
    """
    if testbed not in TESTBEDS:
        raise ValueError(f"testbed must be one of {', '.join(TESTBEDS)}, got {testbed!r}")
    if devices_per_process < 1:
        raise ValueError(f"devices_per_process must be >= 1, got {devices_per_process}")
    if testbed == "auto":
        return "two-node" if devices_per_process > 1 else "loopback"
    return testbed


# ------------------------------------------------------------------------------- namespace
def _run(
    cmd: Sequence[str], timeout: float = 30, check: bool = True
) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, check=check)


def rate_bits(rate: str) -> float:
    """``"1gbit"`` -> 1e9, ``"500mbit"`` -> 5e8, ``"unlimited"`` -> inf (tc's units, SI)."""
    if rate in ("unlimited", "none", "0"):
        return float("inf")
    m = re.fullmatch(r"([0-9.]+)\s*([kmgt]?)bit", rate.strip().lower())
    if not m:
        raise ValueError(f"rate must look like 1gbit, 500mbit or 'unlimited', got {rate!r}")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]


def why_unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can, as far as cheap checks go)."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "not a POSIX system"
    if os.geteuid() != 0:
        return "not root: creating a network namespace needs CAP_SYS_ADMIN (run as root)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found: install iproute2"
    return None


def parse_net_dev(text: str) -> dict[str, tuple[int, int]]:
    """``/proc/net/dev`` text -> ``{interface: (rx_bytes, tx_bytes)}``."""
    out = {}
    for line in text.splitlines()[2:]:
        if ":" in line:
            name, fields = line.split(":", 1)
            f = fields.split()
            out[name.strip()] = (int(f[0]), int(f[8]))
    return out


def parse_ss(text: str) -> dict[str, int]:
    """``ss -Htn state established`` text -> ``{"LOCAL->PEER": connections}`` by address
    (ports dropped, IPv4-mapped IPv6 written as IPv4)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 4:
            continue
        local, peer = (re.sub(r"^\[?(::ffff:)?|\]?:\d+$", "", a) for a in f[2:4])
        key = f"{local}->{peer}"
        out[key] = out.get(key, 0) + 1
    return out


def hosts_file(hostname: str, address: str) -> str:
    """The ``/etc/hosts`` of a two-node namespace: localhost, and this machine's hostname at
    the namespace's veth address (what gloo's ``getaddrinfo(gethostname())`` then binds)."""
    return f"127.0.0.1 localhost\n::1 localhost\n{address} {hostname}\n"


class Namespace:
    """A network namespace with its loopback up; deleted on ``close`` (context manager).

    Args:
      name: the namespace's name.
      hosts: text of an ``/etc/hosts`` for the processes ``ip netns exec`` starts in it
        (written to ``/etc/netns/NAME/hosts``, removed on ``close``), or None.

    Raises:
      RuntimeError: ``ip netns add`` failed (message from ip).
    """

    def __init__(self, name: str, hosts: str | None = None):
        self.name = name
        self.etc = Path("/etc/netns") / name
        self.anchor: subprocess.Popen | None = None
        res = _run(["ip", "netns", "add", name], check=False)
        if res.returncode:
            raise RuntimeError(f"ip netns add {name}: {res.stderr.strip()}")
        self.shaping = "none"
        try:
            if hosts is not None:
                self.etc.mkdir(parents=True, exist_ok=True)
                (self.etc / "hosts").write_text(hosts)
            _run(self.prefix() + ["ip", "link", "set", "lo", "up"])
        except Exception:
            self.close()
            raise

    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def limit(self, rate: str, delay_ms: float, dev: str = "lo") -> str:
        """Limits ``dev``'s egress to ``rate`` (tc units) with ``delay_ms`` one-way delay
        where netem exists; returns the qdisc actually installed (as ``tc qdisc show``
        prints)."""
        _run(self.prefix() + ["tc", "qdisc", "del", "dev", dev, "root"], check=False)
        if rate_bits(rate) == float("inf"):
            self.shaping = "none"
            return self.shaping
        netem = ["tc", "qdisc", "add", "dev", dev, "root", "netem", "rate", rate]
        if delay_ms > 0:
            netem += ["delay", f"{delay_ms}ms"]
        netem += ["limit", "100000"]
        res = _run(self.prefix() + netem, check=False)
        if res.returncode:
            # No sch_netem in this kernel: token bucket, burst = 1 ms at the rate but at least
            # two 64 KiB packets (lo's MTU, and a veth's GSO packets: a packet larger than the
            # bucket is never sent: TCP retransmits it until gloo's connection times out, as
            # it did at 500 Mbit/s).
            burst = max(2 * (_LO_MTU + 256), int(rate_bits(rate) / 8 / 1000))
            _run(
                self.prefix()
                + ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate]
                + ["burst", str(burst), "latency", "200ms"]
            )
        self.shaping = _run(self.prefix() + ["tc", "qdisc", "show", "dev", dev]).stdout.strip()
        if res.returncode:
            self.shaping += f" (netem unavailable: {res.stderr.strip()[:120]}; no added delay)"
        return self.shaping

    def start_anchor(self, timeout: float = 10) -> None:
        """Leaves a ``sleep`` process in the namespace: its ``/proc/PID/net/dev`` is the
        namespace's interface counters, readable from outside (``counters``)."""
        self.anchor = subprocess.Popen(
            self.prefix() + ["sleep", "86400"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        comm = Path(f"/proc/{self.anchor.pid}/comm")
        while comm.read_text().strip() != "sleep":  # after the exec: inside the namespace
            if time.monotonic() > deadline or self.anchor.poll() is not None:
                raise RuntimeError(f"no process started in namespace {self.name}")
            time.sleep(0.01)

    def counters(self) -> dict[str, tuple[int, int]]:
        """``{interface: (rx_bytes, tx_bytes)}`` of the namespace (needs ``start_anchor``)."""
        return parse_net_dev(Path(f"/proc/{self.anchor.pid}/net/dev").read_text())

    def connections(self) -> dict[str, int]:
        """Established TCP connections of the namespace by ``LOCAL->PEER`` address."""
        return parse_ss(_run(self.prefix() + ["ss", "-Htn", "state", "established"]).stdout)

    def close(self) -> None:
        if self.anchor is not None and self.anchor.poll() is None:
            os.killpg(self.anchor.pid, signal.SIGKILL)
            self.anchor.wait()
        _run(["ip", "netns", "del", self.name], check=False)
        shutil.rmtree(self.etc, ignore_errors=True)
        try:
            self.etc.parent.rmdir()  # /etc/netns, if nothing else is in it
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_PROBE_SINK = r"""
import socket, sys, time
n = int(sys.argv[2]); s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen()
print(s.getsockname()[1], flush=True)
c, _ = s.accept(); got = 0; t0 = None
while got < n:
    d = c.recv(1 << 20)
    if not d: break
    t0 = t0 or time.perf_counter(); got += len(d)
print(got * 8 / (time.perf_counter() - t0) / 1e9, flush=True)
"""
_PROBE_SEND = r"""
import socket, sys
n = int(sys.argv[3]); c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
buf = b"x" * (1 << 20)
for _ in range(n // len(buf)): c.sendall(buf)
c.close()
"""


def probe_gbits(
    sink: Sequence[str],
    send: Sequence[str],
    address: str = "127.0.0.1",
    nbytes: int = 64 << 20,
    timeout: float = 60,
) -> float | None:
    """Measured TCP throughput (Gbit/s, one stream) from a process started by the command
    prefix ``send`` to one started by ``sink`` (listening on ``address``), e.g. the two
    namespaces of a veth pair, or one namespace's 127.0.0.1. None if the probe failed."""
    p = None
    try:
        p = subprocess.Popen(
            [*sink, sys.executable, "-c", _PROBE_SINK, address, str(nbytes)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        port = p.stdout.readline().strip()
        _run([*send, sys.executable, "-c", _PROBE_SEND, address, port, str(nbytes)], timeout)
        out, _ = p.communicate(timeout=timeout)
        return float(out.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001 - the probe is informative only
        return None
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()


class LoopbackTestbed:
    """Both processes in one namespace over its limited loopback (the issue-6 testbed).

    Raises:
      RuntimeError: a namespace could not be made.
    """

    kind = "loopback"
    address = "127.0.0.1"  # of every process, and the coordinator's

    def __init__(self, prefix: str):
        self.ns = Namespace(prefix)
        self.namespaces = [self.ns]
        try:
            self.ns.start_anchor()
        except Exception:
            self.close()
            raise

    def process_prefix(self, process_id: int) -> list[str]:
        return self.ns.prefix()

    def gloo_ifname(self, process_id: int) -> str:
        return "lo"

    def limit(self, rate: str, delay_ms: float) -> str:
        return self.ns.limit(rate, delay_ms, "lo")

    def probe(self) -> float | None:
        return probe_gbits(self.ns.prefix(), self.ns.prefix(), self.address)

    def sample(self) -> dict[str, float]:
        """``link``: bytes sent over the limited loopback (both processes, everything)."""
        return {"link": float(self.ns.counters()["lo"][1])}

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "namespaces": [self.ns.name], "address": self.address}

    def close(self) -> None:
        self.ns.close()

    def deleted(self) -> bool:
        listed = _run(["ip", "netns", "list"], check=False).stdout.split()
        return not any(ns.name in listed for ns in self.namespaces)


@dataclasses.dataclass(frozen=True)
class TwoNodePlan:
    """Names and addresses of a two-node testbed (nothing is created by the plan).

    Attributes:
      namespaces: the two namespaces (process 0's, process 1's).
      veths: the veth ends, one in each namespace (interface names of at most 15 bytes).
      addresses: the veth ends' IPv4 addresses (/24), only inside the namespaces.
      hosts: the ``/etc/hosts`` text of each namespace (``hosts_file``).
    """

    namespaces: tuple[str, str]
    veths: tuple[str, str]
    addresses: tuple[str, str]
    hosts: tuple[str, str]

    def commands(self) -> list[list[str]]:
        """The ``ip`` commands that join the namespaces (after ``ip netns add`` of both):
        the veth pair made with its ends already inside them, addresses, links up."""
        (a, b), (va, vb) = self.namespaces, self.veths
        cmds = [["ip", "link", "add", va, "netns", a, "type", "veth", "peer", "name", vb]
                + ["netns", b]]  # fmt: skip
        for ns, dev, addr in zip(self.namespaces, self.veths, self.addresses):
            cmds += [
                ["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev],
                ["ip", "-n", ns, "link", "set", dev, "up"],
            ]
        return cmds


def two_node_plan(prefix: str, hostname: str) -> TwoNodePlan:
    """The plan of a two-node testbed whose names start with ``prefix``.

    Raises:
      ValueError: ``prefix`` is empty, longer than 13 bytes (interface names have at most
        15) or not made of letters, digits, '-' and '_'.
    """
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,13}", prefix):
        raise ValueError(f"prefix must be 1-13 letters, digits, '-' or '_', got {prefix!r}")
    addrs = (f"{VETH_SUBNET}.1", f"{VETH_SUBNET}.2")
    return TwoNodePlan(
        namespaces=(f"{prefix}n0", f"{prefix}n1"),
        veths=(f"{prefix}v0", f"{prefix}v1"),
        addresses=addrs,
        hosts=tuple(hosts_file(hostname, a) for a in addrs),
    )


class TwoNodeTestbed:
    """One namespace per process joined by a rate-limited veth pair (see the module doc).

    Raises:
      RuntimeError: a namespace could not be made; subprocess.CalledProcessError: an ``ip``
        command failed (whatever was made is removed first).
    """

    kind = "two-node"

    def __init__(self, prefix: str, hostname: str | None = None):
        self.plan = two_node_plan(prefix, hostname or socket.gethostname())
        self.namespaces: list[Namespace] = []
        try:
            for name, hosts in zip(self.plan.namespaces, self.plan.hosts):
                self.namespaces.append(Namespace(name, hosts))
            for cmd in self.plan.commands():
                _run(cmd)
            for ns in self.namespaces:
                ns.start_anchor()
        except Exception:
            self.close()
            raise
        self.address = self.plan.addresses[0]  # the coordinator's

    def process_prefix(self, process_id: int) -> list[str]:
        return self.namespaces[process_id].prefix()

    def gloo_ifname(self, process_id: int) -> str:
        return self.plan.veths[process_id]

    def limit(self, rate: str, delay_ms: float) -> str:
        shaping = [
            ns.limit(rate, delay_ms, dev) for ns, dev in zip(self.namespaces, self.plan.veths)
        ]
        return shaping[0] if shaping[0] == "none" else " | ".join(shaping)

    def probe(self) -> float | None:
        a, b = self.namespaces
        return probe_gbits(b.prefix(), a.prefix(), self.plan.addresses[1])

    def sample(self) -> dict[str, float]:
        """``link``: bytes sent over the veth, both ends (both directions); ``inprocess``:
        bytes sent over the two loopbacks (traffic that stayed inside a process's node)."""
        c = [ns.counters() for ns in self.namespaces]
        return {
            "link": float(sum(ci[dev][1] for ci, dev in zip(c, self.plan.veths))),
            "inprocess": float(sum(ci["lo"][1] for ci in c)),
        }

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "namespaces": list(self.plan.namespaces),
            "veths": list(self.plan.veths),
            "addresses": list(self.plan.addresses),
            "coordinator": self.address,
            "gloo_address": "hostname mapped to the veth address in /etc/netns/NAME/hosts "
            "(jax: gloo binds getaddrinfo(gethostname())); torch: GLOO_SOCKET_IFNAME=veth",
        }

    def close(self) -> None:
        for ns in self.namespaces:
            ns.close()

    def deleted(self) -> bool:
        """No namespace, veth or /etc/netns folder of the testbed is left."""
        listed = _run(["ip", "netns", "list"], check=False).stdout.split()
        links = _run(["ip", "-o", "link", "show"], check=False).stdout
        return not (
            any(n in listed for n in self.plan.namespaces)
            or any(f" {v}@" in links or f" {v}:" in links for v in self.plan.veths)
            or any((Path("/etc/netns") / n).exists() for n in self.plan.namespaces)
        )


def make_testbed(kind: str, prefix: str):
    """A ``LoopbackTestbed`` or ``TwoNodeTestbed`` (``kind`` as ``resolve_testbed`` gives)."""
    return TwoNodeTestbed(prefix) if kind == "two-node" else LoopbackTestbed(prefix)


class CounterSampler:
    """Samples ``testbed.sample()`` every ``period`` seconds in a thread (context manager).

    ``samples`` is a list of ``(time.time(), {counter: bytes})``.
    """

    def __init__(self, testbed, period: float = 0.1, connections_every: float = 2.0):
        self.testbed, self.period = testbed, period
        self.connections_every = connections_every
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.connections: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="net-counters")

    def _loop(self) -> None:
        next_ss = time.monotonic() + self.connections_every
        while True:
            try:
                self.samples.append((time.time(), self.testbed.sample()))
                if time.monotonic() >= next_ss:
                    # the busiest snapshot of process 0's namespace: where gloo connected
                    c = self.testbed.namespaces[0].connections()
                    if sum(c.values()) > sum(self.connections.values()):
                        self.connections = c
                    next_ss = time.monotonic() + self.connections_every
            except (OSError, KeyError, subprocess.SubprocessError):  # being torn down
                return
            if self._stop.wait(self.period):
                self.samples.append((time.time(), self.testbed.sample()))
                return

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def counter_at(samples: Sequence[tuple[float, dict[str, float]]], t: float, key: str) -> float:
    """Counter ``key`` at time ``t``, linearly interpolated between the samples around it
    (clamped to the first/last sample).

    Raises:
      ValueError: no samples.
    """
    if not samples:
        raise ValueError("no counter samples")
    times = [s[0] for s in samples]
    i = bisect.bisect_left(times, t)
    if i == 0:
        return samples[0][1][key]
    if i == len(samples):
        return samples[-1][1][key]
    (t0, a), (t1, b) = samples[i - 1], samples[i]
    w = 0.0 if t1 == t0 else (t - t0) / (t1 - t0)
    return a[key] + w * (b[key] - a[key])


def per_step_bytes(
    samples: Sequence[tuple[float, dict[str, float]]],
    intervals: Sequence[tuple[float, float, int]],
    key: str,
) -> float | None:
    """Median over ``intervals`` (``(start, end, steps)``, unix seconds) of counter ``key``'s
    increase over the interval divided by its steps; None without samples or intervals."""
    if not samples or not intervals or key not in samples[0][1]:
        return None
    return statistics.median(
        (counter_at(samples, t1, key) - counter_at(samples, t0, key)) / n for t0, t1, n in intervals
    )


# ------------------------------------------------------------------------------------ data
_MADE = "synthetic.json"  # what a shard folder of write_synthetic_shards holds


def synthetic_text(gen, rows: int, stream: str, chunk: int = 8192) -> bytes:
    """``rows`` rows of a ``models.dlrm.synthetic.SyntheticCriteo`` stream as Criteo text
    (label, 13 integer counts, 26 8-hex-digit ids, tab-separated): the counts are the
    generator's (``expm1`` of its ``log1p`` features, rounded), the ids its ids, so
    ``models.dlrm.preprocess`` gives back the generator's rows."""
    lines = []
    for i in range((rows + chunk - 1) // chunk):
        b = gen.batch(i, min(chunk, rows - i * chunk), stream)
        counts = np.rint(np.expm1(b["dense"].astype(np.float64))).astype(np.int64)
        for lab, c, ids in zip(b["label"], counts, b["ids"][:, :, 0]):
            lines.append("\t".join([str(int(lab)), *map(str, c), *(f"{int(x):08x}" for x in ids)]))
    return ("\n".join(lines) + "\n").encode()


def write_synthetic_shards(
    directory: str | os.PathLike[str], config, train_rows: int, eval_rows: int
) -> dict[str, str]:
    """Writes the shared data of a benchmark once: ``directory/train`` (``train_rows`` rows
    of the synthetic generator's training stream) and ``directory/eval`` (``eval_rows`` rows
    of its evaluation stream), binary shards of ``models.dlrm.preprocess`` hashed into
    ``config.table_rows()``, seeded by ``config.seed``. Folders that already hold a
    finished conversion of the same rows are kept.

    Returns:
      ``{"train": path, "eval": path}``.
    """
    from models.dlrm import preprocess, synthetic

    rows = config.table_rows()
    gen = synthetic.SyntheticCriteo(rows, config.num_dense, 1, config.synthetic_zipf_a, config.seed)
    out = {}
    for name, n, stream in (("train", train_rows, "train"), ("eval", eval_rows, "eval")):
        d = Path(directory) / name
        out[name] = str(d)
        made = {"generator": "models.dlrm.synthetic.SyntheticCriteo", "stream": stream,
                "rows": n, "seed": config.seed, "table_rows": list(rows),
                "zipf_a": config.synthetic_zipf_a}  # fmt: skip
        try:
            if json.loads((d / _MADE).read_text()) == made:
                preprocess.verify_shards(str(d), preprocess.read_manifest(str(d)), checksums=False)
                continue
        except (OSError, ValueError):
            pass
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        text = d / f"{name}.txt"
        text.write_bytes(synthetic_text(gen, n, stream))
        preprocess.convert(
            [str(text)], str(d), data_format="terabyte", table_rows=rows, progress=False
        )
        text.unlink()
        (d / _MADE).write_text(json.dumps(made))
    return out


# ---------------------------------------------------------------------------------- one run
def _free_port(testbed) -> int:
    out = _run(
        testbed.process_prefix(0)
        + [
            sys.executable,
            "-c",
            "import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); "
            "print(s.getsockname()[1])",
            testbed.address,
        ]
    )
    return int(out.stdout.strip())


def train_cmd(
    out_dir: Path, mode: str, process_id: int, port: int, args, host: str = "127.0.0.1"
) -> list[str]:
    """The trainer command of one process (run inside its namespace)."""
    data = []
    if getattr(args, "shard_dirs", None):
        data = ["--data", args.shard_dirs["train"], "--eval-data", args.shard_dirs["eval"]]
        data += ["--shuffle-block-rows", "0"]  # file order, as the TorchRec peer reads
    return bu.trainer_cmd(
        out_dir,
        args,
        *("--devices", str(args.devices_per_process), "--eval-every", "0"),
        *("--coordinator", f"{host}:{port}", "--num-processes", "2"),
        *("--process-id", str(process_id), *data, *MODES[mode], *args.extra),
    )


def torchrec_cmd(out_dir: Path, mode: str, rank: int, args) -> list[str]:
    """The TorchRec peer command of one rank (run inside its namespace)."""
    model, qcomm = TORCHREC_MODES[mode]
    return [
        args.torchrec_python,
        "-m",
        "bench.torchrec_peer",
        *("--data", args.shard_dirs["train"], "--eval-data", args.shard_dirs["eval"]),
        *("--config", args.peer_config, "--rank", str(rank), "--world-size", "2"),
        *("--model", model, "--qcomm", qcomm, "--steps", str(args.steps)),
        *("--log-every", str(args.log_every), "--out", str(out_dir / "torchrec.json")),
    ]


def timing(records: Sequence[Any], global_batch: int) -> dict[str, Any]:
    """Step times of one run from its logging intervals (objects with ``step`` and
    ``samples_per_s``): the first interval (jit compile, warm-up) is dropped; the step time
    is ``global_batch / samples_per_s`` of each later interval, median over them."""
    steps_in = bu.interval_steps([r.step for r in records])
    timed = list(records[1:] if len(records) > 1 else records)
    n_timed = steps_in[1:] if len(records) > 1 else steps_in
    step_s = [global_batch / r.samples_per_s for r in timed if r.samples_per_s]
    return {
        "intervals": len(timed),
        "step_times_s": step_s,
        "step_time_s": statistics.median(step_s) if step_s else None,
        "samples_per_s": global_batch / statistics.median(step_s) if step_s else None,
        "_timed": list(zip(timed, n_timed)),
    }


def summarize(log: MetricsLog) -> dict[str, Any]:
    """Step time etc. of one trainer run (its ``metrics.jsonl``, read by ``read_metrics``).

    The first ``train`` interval (it includes the jit compile) is dropped; the step time is
    ``batch_size / samples_per_s`` of each later interval (the global batch of the run's
    config), median over them. Bytes per step are the last interval's ``moved_bytes`` (all
    devices, forward exchange) over its steps, ``allreduce_moved_bytes_per_step`` the same
    for the head gradients' all-reduce; ``link_bytes_per_step`` is the median over
    intervals of the namespace's sent bytes per step (``net_tx_bytes``: every collective of
    both processes, both directions, on the loopback testbed).
    """
    global_batch = int(log.config.config.get("batch_size", 0)) if log.config else 0
    final = log.final
    out = timing(log.train, global_batch)
    timed = out.pop("_timed")
    out.update(
        auc=final.auc if final else None,
        logloss=final.logloss if final else None,
        final_step=final.step if final else None,
    )
    if timed:
        last, n_last = timed[-1]
        link = [r.net_tx_bytes / n for r, n in timed if r.net_tx_bytes is not None]
        out.update(
            moved_bytes_per_step=last.moved_bytes / n_last,
            raw_bytes_per_step=last.raw_bytes / n_last,
            allreduce_moved_bytes_per_step=last.allreduce_moved_bytes / n_last,
            allreduce_raw_bytes_per_step=last.allreduce_raw_bytes / n_last,
            exchange_ratio=last.compression_ratio,
            moved_ratio=last.moved_ratio,
            link_bytes_per_step=statistics.median(link) if link else None,
            fallback_steps=sum(r.fallback_steps for r in log.train),
        )
        if hasattr(last, "inter_node_moved_bytes"):  # trainers with the node split (issue 16)
            out.update(
                exchange_topology=last.exchange_topology,
                intra_node_bytes_per_step=last.intra_node_bytes / n_last,
                inter_node_raw_bytes_per_step=last.inter_node_raw_bytes / n_last,
                inter_node_moved_bytes_per_step=last.inter_node_moved_bytes / n_last,
            )
    return out


def summarize_torchrec(res: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Step time, AUC and log loss of one TorchRec run (its ``torchrec.json`` and
    ``eval_logits.npz``; AUC and log loss by the trainer's ``compute_metrics``)."""
    from models.dlrm.train import compute_metrics

    recs = [SimpleNamespace(**r) for r in res["intervals"]]
    out = timing(recs, int(res["global_batch"]))
    timed = out.pop("_timed")
    ev = np.load(out_dir / "eval_logits.npz")
    m = compute_metrics(ev["label"], ev["logits"])
    out.update(
        auc=m["auc"],
        logloss=m["logloss"],
        final_step=res["final_step"],
        moved_bytes_per_step=None,
        qcomm_requested=res.get("qcomm_requested"),
        qcomm_effective=res.get("qcomm_effective"),
        table_owner_rank=res.get("table_owner_rank"),
        sharding_types=res.get("sharding_types"),
        torch_versions=res.get("versions"),
    )
    out["_timed"] = timed
    return out


def _intervals(timed: Sequence[tuple[Any, int]]) -> list[tuple[float, float, int]]:
    return [(r.unix_time - r.seconds, r.unix_time, n) for r, n in timed]


def _run_processes(testbed, cmds: Sequence[list[str]], envs, out_dir: Path, timeout: float):
    """Starts one command per process in its namespace, waits (``timeout`` s for both),
    kills what is left; returns ``(returncodes, wall_s)``."""
    logs = [open(out_dir / f"process{i}.log", "w") for i in range(len(cmds))]
    procs: list[subprocess.Popen] = []
    rcs: list[int | None] = [None] * len(cmds)
    t0 = time.perf_counter()
    try:
        for i, (cmd, env) in enumerate(zip(cmds, envs)):
            # inside the try: an interrupt between the two still kills the first
            procs.append(
                subprocess.Popen(
                    testbed.process_prefix(i) + cmd,
                    cwd=bu.REPO_ROOT,
                    env=env,
                    stdout=logs[i],
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + timeout
        for i, p in enumerate(procs):
            rcs[i] = p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for f in logs:
            f.close()
    return rcs, time.perf_counter() - t0


def run_pair(testbed, mode: str, out_dir: Path, args) -> dict[str, Any]:
    """Two processes x ``devices_per_process`` devices of one mode (the library's trainer or
    the TorchRec peer); their summary, with the link bytes of the testbed's counters."""
    out_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port(testbed)
    torchrec = mode in TORCHREC_MODES
    envs, cmds = [], []
    for i in range(2):
        env = bu.trainer_env()
        if torchrec:
            env.update(MASTER_ADDR=testbed.address, MASTER_PORT=str(port))
            env["GLOO_SOCKET_IFNAME"] = testbed.gloo_ifname(i)
            cmds.append(torchrec_cmd(out_dir, mode, i, args))
        else:
            cmds.append(train_cmd(out_dir, mode, i, port, args, testbed.address))
        envs.append(env)
    load0 = os.getloadavg()[0]
    with CounterSampler(testbed) as sampler:
        rcs, wall = _run_processes(testbed, cmds, envs, out_dir, args.run_timeout)
    # 1-minute load average of the host before and after (the machine is shared: other work
    # takes CPU from the training processes, which stretches compute, not link time).
    res: dict[str, Any] = {
        "mode": mode,
        "baseline": baseline(mode),
        "returncodes": rcs,
        "wall_s": wall,
        "out": str(out_dir),
        "loadavg_1min": [load0, os.getloadavg()[0]],
    }
    if any(rc != 0 for rc in rcs):
        tail = (out_dir / "process0.log").read_text(errors="replace")[-1500:]
        res.update(status="error" if None not in rcs else "timeout", log_tail=tail)
        return res
    try:
        if torchrec:
            s = summarize_torchrec(json.loads((out_dir / "torchrec.json").read_text()), out_dir)
            timed = s.pop("_timed")
        else:
            log = read_metrics(out_dir / "metrics.jsonl")
            s = summarize(log)
            g = int(log.config.config.get("batch_size", 0)) if log.config else 0
            timed = timing(log.train, g)["_timed"]
    except (OSError, ValueError, KeyError) as e:
        res.update(status="error", log_tail=f"no result: {type(e).__name__}: {e}")
        return res
    ivs = _intervals(timed)
    s["trainer_net_tx_bytes_per_step"] = s.get("link_bytes_per_step")
    link = per_step_bytes(sampler.samples, ivs, "link")
    if testbed.kind == "two-node" or s.get("link_bytes_per_step") is None:
        s["link_bytes_per_step"] = link
    s["inprocess_bytes_per_step"] = per_step_bytes(sampler.samples, ivs, "inprocess")
    s["connections_ns0"] = sampler.connections  # LOCAL->PEER: established TCP connections
    if sampler.samples:
        first, last = sampler.samples[0][1], sampler.samples[-1][1]
        s["link_bytes_run"] = last["link"] - first["link"]
        if "inprocess" in first:
            s["inprocess_bytes_run"] = last["inprocess"] - first["inprocess"]
    res.update(status="ok", **s)
    return res


def paired_speedups(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{rate: {mode: median over rounds of baseline / mode step time of the same round}}``
    (``baseline(mode)``): pairing each run with the baseline run of its own round cancels
    slow drifts of the shared machine's load; falls back to the ratio of the medians where
    no round has both."""
    out = speedups(median_runs(runs))
    for rate, m in speedups_per_round(runs).items():
        for mode, v in m.items():
            out.setdefault(rate, {})[mode] = statistics.median(v)
    return out


def speedups(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{rate: {mode: step_time(baseline(mode)) / step_time(mode)}}`` for the successful
    runs (a rate appears where a baseline ran)."""
    out: dict[str, dict[str, float]] = {}
    for rate in dict.fromkeys(r["rate"] for r in runs):
        by = {r["mode"]: r for r in runs if r["rate"] == rate and r.get("status") == "ok"}
        for m, r in by.items():
            base = by.get(baseline(m), {}).get("step_time_s")
            if m != baseline(m) and base and r.get("step_time_s"):
                out.setdefault(rate, {})[m] = base / r["step_time_s"]
    return out


# ---------------------------------------------------------------------------------- the run
def _prepare_data(args, work: Path) -> None:
    """Sets ``args.shard_dirs`` (and ``args.peer_config``) when the runs read shards."""
    from bench import torchrec_peer
    from models.dlrm import configs

    args.shard_dirs = None
    if not (args.shards or any(m in TORCHREC_MODES for m in args.modes)):
        return
    config = configs.get_config(args.preset)
    config.seed, config.eval_rows = args.seed, args.eval_rows
    target = Path(args.shards or work / "data")
    t0 = time.perf_counter()
    args.shard_dirs = write_synthetic_shards(
        target, config, args.steps * config.batch_size, args.eval_rows
    )
    print(f"# data: shards in {target} ({time.perf_counter() - t0:.0f} s)", flush=True)
    if any(m in TORCHREC_MODES for m in args.modes):
        args.peer_config = str(target / "peer_config.json")
        Path(args.peer_config).write_text(json.dumps(torchrec_peer.peer_config(config)))


def run(args) -> dict[str, Any]:
    kind = resolve_testbed(args.testbed, args.devices_per_process)
    result: dict[str, Any] = {
        "benchmark": "DLRM step time over a rate-limited link between network namespaces "
        "(issues 6 and 16)",
        "environment": bu.environment_record(),
        "params": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "testbed": kind,
        "runs": [],
    }
    result["params"]["testbed"] = kind
    torchrec = [m for m in args.modes if m in TORCHREC_MODES]
    reason = why_unavailable()
    if reason is None and torchrec and not args.torchrec_python:
        reason = f"modes {torchrec} need --torchrec-python (an interpreter with torchrec)"
    testbed = None
    if reason is None:
        try:
            testbed = make_testbed(kind, f"jlc{os.getpid() % 10**8}")
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            reason = f"cannot create the {kind} testbed: {e}"
    if testbed is None:
        print(f"netns benchmark SKIPPED: {reason}")
        result.update(status="skipped", skip_reason=reason)
        return result
    result["testbed_info"] = testbed.describe()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="jlc_netns_"))
    t_start = time.monotonic()

    def stop(signum, frame):  # SIGTERM too: kill the trainers, delete the namespace, keep runs
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the cleanup
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        _prepare_data(args, work)
        result["params"]["shard_dirs"] = args.shard_dirs
        for rate in args.rates:
            shaping = testbed.limit(rate, args.delay_ms)
            gbits = testbed.probe() if args.probe else None
            print(
                f"# {rate}: {shaping}"
                + (f"; measured {gbits:.2f} Gbit/s (1 TCP stream)" if gbits else ""),
                flush=True,
            )
            for rnd in range(args.rounds):
                for mode in args.modes:
                    if time.monotonic() - t_start > args.total_timeout:
                        print("# total time budget spent: stopping", flush=True)
                        raise TimeoutError
                    r = run_pair(testbed, mode, work / f"{rate}_{mode}_{rnd}", args)
                    r.update(
                        rate=rate,
                        rate_bits=rate_bits(rate),
                        round=rnd,
                        qdisc=shaping,
                        probe_gbits=gbits,
                        testbed=kind,
                    )
                    result["runs"].append(r)
                    print(format_run(r), flush=True)
    except TimeoutError:
        result["stopped_early"] = True
    except KeyboardInterrupt:
        print("# interrupted: keeping the finished runs", flush=True)
        result["stopped_early"] = True
    finally:
        testbed.close()
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
        result["namespace_deleted"] = testbed.deleted()
    result["status"] = "ok"
    result["speedup"] = paired_speedups(result["runs"])
    result["speedup_per_round"] = speedups_per_round(result["runs"])
    return result


def median_runs(runs):
    """One entry per (rate, mode) over its rounds: the first successful run's record with
    ``step_time_s`` = median of the rounds' step times (``round_step_times_s`` lists them)."""
    out = []
    for key in dict.fromkeys((r["rate"], r["mode"]) for r in runs):
        ok = [
            r
            for r in runs
            if (r["rate"], r["mode"]) == key and r.get("status") == "ok" and r.get("step_time_s")
        ]
        if ok:
            times = [r["step_time_s"] for r in ok]
            m = dict(ok[0], step_time_s=statistics.median(times), round_step_times_s=times)
            m["samples_per_s"] = ok[0]["samples_per_s"] * ok[0]["step_time_s"] / m["step_time_s"]
            out.append(m)
    return out


def link_times(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{rate: {mode: step_time(rate) - step_time(unlimited)}}`` in seconds: the part of
    the step the limited link adds (needs an ``unlimited`` run of the same mode)."""
    by = {
        (r["rate"], r["mode"]): r["step_time_s"]
        for r in runs
        if r.get("status") == "ok" and r.get("step_time_s")
    }
    out: dict[str, dict[str, float]] = {}
    for (rate, mode), t in by.items():
        base = by.get(("unlimited", mode))
        if rate != "unlimited" and base is not None:
            out.setdefault(rate, {})[mode] = t - base
    return out


def serial_model(
    runs: Sequence[dict[str, Any]], rate: str, mode: str, target: float = 1.5
) -> dict[str, Any] | None:
    """What the measured compute and link bytes give at ``rate`` if nothing overlaps.

    ``C`` = a mode's step time without a limit (compute, codec, unlimited collectives),
    ``L`` = its link bytes per step x 8 / rate. Returns ``model`` = (C_exact + L_exact) /
    (C_mode + L_mode); ``free_codec`` = (C_exact + L_exact) / (C_exact + L_mode), the same
    for a codec that costs nothing; ``rate_for_target`` (bit/s) and ``reached``: where
    ``model`` >= ``target`` -- "slower" (at that rate or slower), "faster" (at that rate or
    faster), "always" or "never" (rate None for the last two). The model is an estimate: the
    two processes overlap some link time with compute. None without the four runs.
    """
    med = {(r["rate"], r["mode"]): r for r in median_runs(runs)}
    cu = [med.get(("unlimited", m)) for m in ("exact", mode)]
    lim = [med.get((rate, m)) for m in ("exact", mode)]
    if None in cu or any(r is None or not r.get("link_bytes_per_step") for r in lim):
        return None
    ce, cm = cu[0]["step_time_s"], cu[1]["step_time_s"]
    be, bm = lim[0]["link_bytes_per_step"] * 8, lim[1]["link_bytes_per_step"] * 8
    bits = rate_bits(rate)
    le, lm = be / bits, bm / bits
    # model(x = 1 / R) = (ce + be x) / (cm + bm x) >= t  <=>  x (be - t bm) >= t cm - ce
    den, num = be - target * bm, target * cm - ce
    if num <= 0 and den >= 0:
        reached, r_t = "always", None
    elif num > 0 and den > 0:
        reached, r_t = "slower", den / num
    elif num < 0 and den < 0:
        reached, r_t = "faster", den / num
    else:
        reached, r_t = "never", None
    return {
        "compute_exact_s": ce,
        "compute_mode_s": cm,
        "link_exact_s": le,
        "link_mode_s": lm,
        "model": (ce + le) / (cm + lm),
        "free_codec": (ce + le) / (ce + lm),
        "rate_for_target": r_t,
        "reached": reached,
    }


def speedups_per_round(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """``{rate: {mode: [baseline / mode step time of each round]}}`` (interleaved rounds;
    ``baseline(mode)``)."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in runs:
        if r.get("status") != "ok" or r["mode"] == baseline(r["mode"]):
            continue
        ex = next(
            (
                e
                for e in runs
                if e["rate"] == r["rate"]
                and e["mode"] == baseline(r["mode"])
                and e.get("round") == r.get("round")
                and e.get("status") == "ok"
            ),
            None,
        )
        if ex and r.get("step_time_s"):
            out.setdefault(r["rate"], {}).setdefault(r["mode"], []).append(
                ex["step_time_s"] / r["step_time_s"]
            )
    return out


def _mib(x: float | None, spec: str = "7.2f") -> str:
    return bu.fmt(None if x is None else x / 2**20, spec)


def format_run(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"{r['rate']:>9} {r['mode']:<13} {r.get('status')}: {r.get('log_tail', '')[-300:]}"
    inproc = r.get("inprocess_bytes_per_step")
    return (
        f"{r['rate']:>9} {r['mode']:<13} step {r['step_time_s'] * 1e3:8.1f} ms  "
        f"{r['samples_per_s']:8.0f} samples/s  moved/step {_mib(r.get('moved_bytes_per_step'))}"
        f" MiB (x{r.get('moved_ratio') or 0:.2f})  all-reduce/step "
        f"{_mib(r.get('allreduce_moved_bytes_per_step') or 0, '6.2f')} MiB  link/step "
        f"{_mib(r.get('link_bytes_per_step') or 0, '6.2f')} MiB"
        + (f"  in-process/step {_mib(inproc, '6.2f')} MiB" if inproc is not None else "")
        + (
            f"  exchange inter-node/step {_mib(r['inter_node_moved_bytes_per_step'], '6.2f')} "
            f"MiB intra-node {_mib(r['intra_node_bytes_per_step'], '6.2f')} MiB"
            if r.get("inter_node_moved_bytes_per_step") is not None
            else ""
        )
        + f"  AUC {r['auc']:.5f}  logloss {r['logloss']:.5f}"
    )


def format_summary(result: dict[str, Any]) -> str:
    if result.get("status") == "skipped":
        return f"netns benchmark skipped: {result['skip_reason']}"
    lines = [
        "rate       mode                     step ms  samples/s  MiB/step  link MiB  AUC      "
        "log loss  speedup (step ms: median over rounds; speedup: median of per-round "
        "baseline/mode; baseline: exact, TorchRec: torchrec-fp32)"
    ]
    runs = median_runs(result["runs"])
    sp = paired_speedups(result["runs"])
    for r in runs:
        s = 1.0 if r["mode"] == baseline(r["mode"]) else sp.get(r["rate"], {}).get(r["mode"])
        lines.append(
            f"{r['rate']:<10} {r['mode']:<23} {r['step_time_s'] * 1e3:8.1f} "
            f"{r['samples_per_s']:10.0f} {_mib(r.get('moved_bytes_per_step'), '9.2f')} "
            f"{_mib(r.get('link_bytes_per_step'), '9.2f')}  "
            f"{r['auc']:.5f}  {r['logloss']:.5f}  " + (f"{s:.3f}x" if s else "-")
        )
    for rate, m in link_times(runs).items():
        if "exact" in m:
            lines.append(
                f"  {rate}: time the link adds to a step (vs unlimited): "
                + ", ".join(f"{mode} {t * 1e3:.0f} ms" for mode, t in m.items())
            )
    for rate, m in speedups_per_round(result["runs"]).items():
        for mode, v in m.items():
            if len(v) > 1:
                lines.append(
                    f"  {rate} {mode}: per-round speedup " + ", ".join(f"{x:.3f}x" for x in v)
                )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(
        prog="python -m bench.netns_bench", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "--rates",
        nargs="+",
        default=list(DEFAULT_RATES) + ["unlimited"],
        help="tc rates (1gbit, 10gbit, ...) and/or 'unlimited'",
    )
    ap.add_argument("--delay-ms", type=float, default=0.1, help="one-way delay (netem only)")
    ap.add_argument(
        "--modes",
        nargs="+",
        default=["exact", "compressed", "compressed-bwd"],
        choices=[*MODES, *TORCHREC_MODES],
    )
    ap.add_argument(
        "--testbed",
        default="auto",
        choices=TESTBEDS,
        help="loopback: both processes in one namespace over its limited lo; two-node: one "
        "namespace per process joined by a limited veth pair (in-process traffic on each "
        "namespace's own lo); auto: two-node with more than one device per process",
    )
    ap.add_argument("--preset", default="terabyte")
    ap.add_argument("--devices-per-process", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--eval-rows", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=1, help="repeat every (rate, mode) run")
    ap.add_argument("--run-timeout", type=float, default=420, help="seconds per 2-process run")
    ap.add_argument("--total-timeout", type=float, default=1800, help="seconds for everything")
    ap.add_argument(
        "--torchrec-python",
        default=os.environ.get("JLC_TORCHREC_PYTHON"),
        help="interpreter of the TorchRec venv (torchrec-* modes; see bench/torchrec_peer.py "
        "for its install commands; default $JLC_TORCHREC_PYTHON)",
    )
    ap.add_argument(
        "--shards",
        default=None,
        metavar="DIR",
        help="write (once; reused when it matches) and read the synthetic data as shards in "
        "DIR/train and DIR/eval (default with torchrec-* modes: WORKDIR/data; otherwise the "
        "trainer's built-in generator)",
    )
    ap.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="skip the TCP throughput probe of each rate",
    )
    ap.add_argument("--workdir", default=None, help="trainer outputs (default: a temp dir)")
    ap.add_argument(
        "--extra",
        nargs=argparse.REMAINDER,
        default=[],
        help="more trainer flags (after everything else; not seen by the TorchRec peer)",
    )
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    for name in ("steps", "log_every", "eval_rows", "rounds", "devices_per_process"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    for rate in args.rates:
        try:
            rate_bits(rate)
        except ValueError as e:
            ap.error(f"--rates: {e}")
    result = run(args)
    result["argv"] = list(sys.argv if argv is None else argv)
    print(format_summary(result))
    print(f"wrote {bu.write_json(result, args.out)}")
    return result


if __name__ == "__main__":
    main()
