"""The network-namespace testbeds of ``bench.testbed.netns_bench``: a rate-limited link between
training processes, and counters of the bytes that crossed it.

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

Needs root (``CAP_SYS_ADMIN``/``CAP_NET_ADMIN``) and iproute2 (``why_unavailable`` says why
not).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TESTBEDS = ("auto", "loopback", "two-node")
#: the two-node testbed's veth subnet: .1 = process 0 (and the coordinator), .2 = process 1
VETH_SUBNET = "10.77.0"
_LO_MTU = 65536  # the loopback's MTU; one packet plus headers must fit tbf's bucket


def tbf_burst_bytes(rate: str) -> int:
    """The token bucket's burst of a ``rate`` where no netem shapes it: 1 ms at the rate, at
    least two 64 KiB packets (lo's MTU, and a veth's GSO packets: a packet larger than the
    bucket is never sent)."""
    return max(2 * (_LO_MTU + 256), int(rate_bits(rate) / 8 / 1000))


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
            burst = tbf_burst_bytes(rate)
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
    """Both processes in one namespace over its limited loopback (``--testbed loopback``).

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


def free_port(testbed) -> int:
    """A TCP port free on process 0's address of ``testbed`` (bound and released there)."""
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
