"""Host network counters: bytes sent by this process's network namespace (Linux)."""

from __future__ import annotations


def net_tx_bytes() -> float | None:
    """Bytes sent so far by all interfaces of this process's network namespace (Linux
    ``/proc/net/dev``; loopback included), or None where that file does not exist.

    A diagnostic of what really crosses the wire: in the netns benchmark every gloo byte of
    both processes goes through the namespace's rate-limited loopback, so the difference over
    an interval is the link traffic of all devices (other traffic of the namespace included).
    """
    try:
        with open("/proc/net/dev") as f:
            lines = f.readlines()[2:]
    except OSError:
        return None
    return float(sum(int(line.split(":", 1)[1].split()[8]) for line in lines if ":" in line))
