"""Cost models of the collectives in a DLRM step (alpha-beta: latency + bytes / bandwidth).

Pure Python, no jax: the formulas :mod:`models.dlrm.cluster.step_time` composes into a step, and the
bus-bandwidth definitions of nccl-tests. Seconds, bytes, bytes/s.

References:
  R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication Operations
  in MPICH", IJHPCA 19(1), 2005 (pairwise all-to-all, ring all-reduce and all-gather).
  P. Patarasuk, X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
  workstations", JPDC 69(2), 2009.
  NVIDIA nccl-tests, doc/PERFORMANCE.md (algorithm and bus bandwidth).
"""

from __future__ import annotations


def pairwise_all_to_all_time(
    bytes_per_peer: float, peers: int, bandwidth: float, latency: float
) -> float:
    """Seconds of a pairwise-exchange all-to-all: ``peers * (latency + bytes_per_peer /
    bandwidth)`` (Thakur et al. 2005, sec. 4.5: ``(p-1) alpha + (p-1)/p n beta``).

    Args:
      bytes_per_peer: bytes this rank sends to each peer (``n / p``).
      peers: the other ranks (``p - 1``); 0 gives 0.
      bandwidth: bytes/s per rank and direction (> 0; ``math.inf`` allowed).
      latency: seconds per message (>= 0).
    """
    check_link(bandwidth, latency)
    if peers <= 0:
        return 0.0
    return peers * (latency + bytes_per_peer / bandwidth)


def ring_all_reduce_time(nbytes: float, ranks: int, bandwidth: float, latency: float) -> float:
    """Seconds of a ring all-reduce of ``nbytes`` per rank over ``ranks``: ``2 (p-1)/p *
    nbytes / bandwidth + 2 (p-1) * latency`` (Thakur et al. 2005, sec. 4.4; Patarasuk & Yuan
    2009). One rank gives 0."""
    check_link(bandwidth, latency)
    p = ranks
    if p <= 1:
        return 0.0
    return 2 * (p - 1) / p * nbytes / bandwidth + 2 * (p - 1) * latency


def ring_all_gather_time(nbytes: float, ranks: int, bandwidth: float, latency: float) -> float:
    """Seconds of a ring all-gather whose gathered output is ``nbytes``: ``(p-1)/p * nbytes /
    bandwidth + (p-1) * latency`` (Thakur et al. 2005, sec. 4.1)."""
    check_link(bandwidth, latency)
    p = ranks
    if p <= 1:
        return 0.0
    return (p - 1) / p * nbytes / bandwidth + (p - 1) * latency


def bus_bandwidth(collective: str, nbytes: float, ranks: int, seconds: float) -> float:
    """NCCL's bus bandwidth (bytes/s) of one collective (nccl-tests ``doc/PERFORMANCE.md``):
    ``algbw = nbytes / seconds`` times ``2 (p-1)/p`` (``"all_reduce"``) or ``(p-1)/p``
    (``"all_to_all"``, ``"all_gather"``, ``"reduce_scatter"``).

    Raises:
      ValueError: unknown collective or ``seconds <= 0``.
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    p = ranks
    factors = {
        "all_reduce": 2 * (p - 1) / p,
        "all_to_all": (p - 1) / p,
        "all_gather": (p - 1) / p,
        "reduce_scatter": (p - 1) / p,
    }
    if collective not in factors:
        raise ValueError(f"unknown collective {collective!r}; expected one of {sorted(factors)}")
    return nbytes / seconds * factors[collective]


def check_link(bandwidth: float, latency: float) -> None:
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be > 0 bytes/s, got {bandwidth}")
    if not latency >= 0:
        raise ValueError(f"latency must be >= 0 s, got {latency}")
