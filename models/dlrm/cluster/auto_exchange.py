"""``Config.compression = "auto"``: the embedding exchange chosen by the step-time model.

Pure Python (no jax): the decision from a model, a cluster, a compute throughput and a codec
(:func:`decide`). The measurements that feed it (the link per level, the codec, the compute
throughput; :mod:`models.dlrm.cluster.probe_result`) are taken on the run's mesh by
:mod:`models.dlrm.cluster.exchange_probe`; what the trainer logs about the choice, and the
end-of-run comparison of the measured step with the predicted one, is
:mod:`models.dlrm.cluster.auto_report`'s.

Decision rule. The candidates are the trainer's exchanges, as modes of
:func:`models.dlrm.cluster.step_time.predict`:

* ``exact``: ``jax.lax.all_to_all`` (``compression="off"``);
* ``flat``: every block compressed (``compression="on"``, ``exchange_topology="flat"``);
* ``hierarchical``: exact within a node, compressed across nodes (``exchange_topology=
  "hierarchical"``); only where the mesh has more than one node of more than one device.

An explicit ``exchange_topology`` (``"flat"`` or ``"hierarchical"``) keeps only that
compressed candidate. With ``Config.grad_allreduce = "auto"`` each exchange is also a candidate
with the library's compressed gradient all-reduce (``exact-ar``, ``flat-ar``,
``hierarchical-ar``), where the optimizer allows it (``COMPRESSED_ALLREDUCE_OPTIMIZERS``: the
accuracy guidance of ``docs/benchmarks/fidelity.md``; with Adagrad the all-reduce stays exact). Each candidate's step is predicted (with the exchange's communication
overlapped with the bottom MLP, the convention of the testbed check in ``docs/step_time.md``,
or serial); the fastest compressed candidate is chosen when its predicted step is at least
``margin`` (``Config.auto_margin``, default 5%) shorter than the exact one's, else ``exact``:
compress only where it pays by more than the model's own error.

Reference: Feng et al., SC24, arXiv 2407.04272 (the compressed exchange); the cost model and
its sources: :mod:`models.dlrm.cluster.step_time`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from models.dlrm.cluster import step_time as st

#: the trainer's exchanges (step_time modes) -> (Config.compression, Config.exchange_topology)
_EXCHANGES = {
    "exact": ("off", "flat"),
    "flat": ("on", "flat"),
    "hierarchical": ("on", "hierarchical"),
}
#: trainer settings the decision picks from (step_time modes): each exchange with the exact
#: gradient all-reduce, and its ``-ar`` mode (``step_time.AR_MODES``) with the compressed one
CANDIDATES = (*_EXCHANGES, *st.AR_MODES)
#: mode -> (Config.compression, Config.exchange_topology, Config.grad_allreduce)
TRAINER_SETTINGS = {m: (*_EXCHANGES[m], "exact") for m in _EXCHANGES} | {
    ar: (*_EXCHANGES[base], "compressed") for ar, base in st.AR_MODES.items()
}
#: optimizers whose head gradients ``grad_allreduce="auto"`` may compress: SGD (on Kaggle the
#: tiers with the compressed all-reduce were -0.00015 AUC against exact, paired over 3 seeds);
#: Adagrad lost AUC at 20,000 steps (bench/results/convergence_dcnv2_small.md), so it keeps
#: the exact all-reduce, as the docs advise
COMPRESSED_ALLREDUCE_OPTIMIZERS = ("sgd",)


@dataclasses.dataclass(frozen=True)
class Decision:
    """The chosen exchange and why.

    Attributes:
      mode: the chosen candidate (``CANDIDATES``).
      compression: its ``Config.compression`` ("on" / "off").
      topology: its ``Config.exchange_topology`` ("flat" / "hierarchical").
      grad_allreduce: its ``Config.grad_allreduce`` ("exact" / "compressed").
      reason: one sentence with the predicted gain.
      predictions: candidate -> the predicted :class:`models.dlrm.cluster.step_time.StepTime`.
      margin: the gain a compressed candidate had to reach (fraction of the exact step).
      overlap: the predicted steps overlap the exchange with the bottom MLP.
    """

    mode: str
    compression: str
    topology: str
    grad_allreduce: str
    reason: str
    predictions: dict[str, st.StepTime]
    margin: float
    overlap: bool

    def step_s(self, mode: str | None = None) -> float:
        """The predicted step of ``mode`` (default: the chosen one), seconds."""
        return self.predictions[mode or self.mode].step(self.overlap)


def candidates(
    cluster: st.Cluster, topology: str = "auto", *, allreduce: bool = False
) -> tuple[str, ...]:
    """The candidates on ``cluster`` for ``Config.exchange_topology`` ``topology``.

    ``"auto"``: exact, flat, and hierarchical where there are several nodes of several
    devices; ``"flat"``: exact and flat; ``"hierarchical"``: exact and hierarchical (exact
    alone on one node, where the hierarchical exchange is the exact one). With ``allreduce``
    (``grad_allreduce="auto"``) each also with the compressed gradient all-reduce (its
    ``-ar`` mode), where there is more than one device.

    Raises:
      ValueError: an unknown topology.
    """
    two_level = cluster.nodes > 1 and cluster.devices_per_node > 1
    if topology == "auto":
        modes = ("exact", "flat", "hierarchical") if two_level else ("exact", "flat")
    elif topology == "flat":
        modes = ("exact", "flat")
    elif topology == "hierarchical":
        modes = ("exact", "hierarchical") if cluster.nodes > 1 else ("exact",)
    else:
        raise ValueError(f"topology must be auto, flat or hierarchical, got {topology!r}")
    if allreduce and cluster.devices > 1:
        modes += tuple(ar for ar, base in st.AR_MODES.items() if base in modes)
    return modes


def codecs_for(
    codec: st.CodecSpec, *, backward_compressed: bool, gradient: st.CodecSpec | None = None
) -> st.Codecs:
    """The step-time model's Codecs of a run: ``codec`` on the forward exchange, on the
    backward one only when ``Config.exchange_backward`` is "compressed" (else free, ratio 1:
    the exact transposed exchange); ``gradient`` on the compressed all-reduce of the ``-ar``
    candidates (None: free, ratio 1; then no ``-ar`` candidate should compete)."""
    free = st.CodecSpec(math.inf, math.inf, 1.0)
    return st.Codecs(
        forward=codec,
        gradient=gradient or free,
        backward=codec if backward_compressed else free,
    )


def decide(
    model: st.ModelSpec,
    cluster: st.Cluster,
    compute: st.Compute,
    codecs: st.Codecs,
    *,
    modes: Sequence[str] = CANDIDATES,
    margin: float = 0.05,
    overlap: bool = True,
    topology: str = "auto",
) -> Decision:
    """Chooses the exchange (module docstring): the fastest predicted compressed candidate
    of ``modes`` (an ``-ar`` one included) if it beats ``exact`` by at least ``margin``, else
    ``exact``.

    Args:
      model, cluster, compute, codecs: the step-time model's inputs
        (:func:`models.dlrm.cluster.step_time.predict`).
      modes: the candidates (``candidates(cluster, topology)``); must hold ``"exact"``.
      margin: the least predicted gain, a fraction of the exact step in ``[0, 1)``.
      overlap: compare the overlapped steps (``StepTime.step_overlap_s``), else the serial.
      topology: ``Config.exchange_topology``: the topology an ``exact`` choice keeps when it
        was given (``"flat"`` when ``"auto"``: exact is one flat all-to-all).

    Returns:
      A :class:`Decision`.

    Raises:
      ValueError: ``modes`` without ``"exact"`` or with a mode not in ``CANDIDATES``, a
        margin outside ``[0, 1)``.
    """
    if "exact" not in modes or set(modes) - set(CANDIDATES):
        raise ValueError(f"modes must hold 'exact' and only {CANDIDATES}, got {tuple(modes)}")
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    preds = {m: st.predict(model, cluster, compute, codecs, m) for m in modes}
    exact = preds["exact"].step(overlap)
    compressed = sorted((preds[m].step(overlap), m) for m in modes if m != "exact")
    if compressed:
        best_t, best = compressed[0]
        gain = 1.0 - best_t / exact
        if gain >= margin:
            mode = best
            reason = (
                f"{best} is predicted {gain:.1%} faster than exact (at least the {margin:.0%} "
                "margin)"
            )
        else:
            mode = "exact"
            if gain >= 0:
                how = f"only {gain:.1%} faster than exact (less than the {margin:.0%} margin)"
            else:
                how = f"{-gain:.1%} slower than exact"
            reason = f"the best compressed candidate, {best}, is predicted {how}"
    else:
        mode, reason = "exact", "no compressed candidate on this mesh"
    compression, topo, grad = TRAINER_SETTINGS[mode]
    if compression == "off" and topology != "auto":
        topo = topology
    return Decision(mode, compression, topo, grad, reason, preds, margin, overlap)
