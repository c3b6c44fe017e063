"""Link counters of a testbed run: sampled in a thread while the run goes, read back per step.

``CounterSampler`` samples a ``netns_testbed`` testbed's byte counters (``testbed.sample()``)
and the busiest connection snapshot; ``counter_at`` interpolates a counter at a time and
``per_step_bytes`` gives the median bytes a step moved over the timed intervals.
"""

from __future__ import annotations

import bisect
import statistics
import subprocess
import threading
import time
from collections.abc import Sequence


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
