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
with the library's compressed gradient all-reduce, where the optimizer allows it
(``COMPRESSED_ALLREDUCE_OPTIMIZERS``: the accuracy guidance of ``docs/benchmarks/fidelity.md``;
with Adagrad the all-reduce stays exact), once per gradient codec (``GRAD_CODEC_SUFFIX``):
``exact-ar``, ``flat-ar``, ``hierarchical-ar`` with the entropy-coded frames
(``Config.grad_codec = "auto"``: fewest bytes) and ``exact-ar-fixed``, ``flat-ar-fixed``,
``hierarchical-ar-fixed`` with the fixed-rate ones (``"fixed"``: about 3x the bytes, about a
sixteenth of the encode CPU on the testbed). ``Config.grad_codec`` cannot tell a user's
``"auto"`` from the default, so ``"auto"`` lets both compete and ``"fixed"`` keeps the
fixed-rate variant alone (:func:`grad_codec_variants`).

Each candidate's step is predicted (with the exchange's communication overlapped with the
bottom MLP, the convention of the testbed check in ``docs/step_time.md``, or serial); with
``margin`` (``Config.auto_margin``, default 5%) as the model's own error:

1. the compressed candidates whose predicted step is at least ``margin`` shorter than the
   exact one's pay; none: ``exact`` (compress only where it pays by more than the error);
2. of those, the ones within ``margin`` of the fastest (the fastest at most ``margin`` shorter:
   ``1 - fastest / step <= margin``) are alike as far as the model can tell, and the one with
   the least codec work is chosen (``StepTime.compress_s + decompress_s``, the model's own
   prediction; a tie goes to the shorter step): the hierarchical exchange codes only the
   blocks that cross nodes, the fixed-rate gradient frames cost less CPU than the entropy
   ones, and the codec time is the least reliable part of a prediction on a shared CPU.

Reference: Feng et al., SC24, arXiv 2407.04272 (the compressed exchange); the cost model and
its sources: :mod:`models.dlrm.cluster.step_time`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from models.dlrm.cluster import step_time as st

#: the trainer's exchanges (step_time modes) -> (Config.compression, Config.exchange_topology)
_EXCHANGES = {
    "exact": ("off", "flat"),
    "flat": ("on", "flat"),
    "hierarchical": ("on", "hierarchical"),
}
#: the compressed all-reduce's gradient codecs (``Config.grad_codec``) -> the suffix they add
#: to an ``-ar`` mode's name (the benchmark's names: ``compressed-hierarchical-ar-fixed``)
GRAD_CODEC_SUFFIX = {"auto": "", "fixed": "-fixed"}
#: the candidates the decision picks from -> (their step_time mode, their Config.grad_codec;
#: None: the exact gradient all-reduce, no gradient codec): each exchange with the exact
#: all-reduce, and its ``-ar`` mode (``step_time.AR_MODES``) with each gradient codec
CANDIDATE_MODES: dict[str, tuple[str, str | None]] = {m: (m, None) for m in _EXCHANGES} | {
    ar + suffix: (ar, grad_codec)
    for grad_codec, suffix in GRAD_CODEC_SUFFIX.items()
    for ar in st.AR_MODES
}
CANDIDATES = tuple(CANDIDATE_MODES)


class TrainerSettings(NamedTuple):
    """A candidate's Config fields: ``compression`` ("on" / "off"), ``exchange_topology``
    ("flat" / "hierarchical"), ``grad_allreduce`` ("exact" / "compressed") and
    ``grad_codec`` ("auto" / "fixed"; None with the exact all-reduce: the Config's is kept)."""

    compression: str
    exchange_topology: str
    grad_allreduce: str
    grad_codec: str | None


#: candidate -> its :class:`TrainerSettings`
TRAINER_SETTINGS = {
    m: TrainerSettings(*_EXCHANGES[st.AR_MODES.get(mode, mode)],
                       "exact" if gc is None else "compressed", gc)
    for m, (mode, gc) in CANDIDATE_MODES.items()
}  # fmt: skip
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
      grad_codec: its ``Config.grad_codec`` ("auto" / "fixed"), None with the exact
        all-reduce.
      reason: one sentence with the predicted gain.
      predictions: candidate -> the predicted :class:`models.dlrm.cluster.step_time.StepTime`
        (its ``mode`` the candidate's name).
      margin: the gain a compressed candidate had to reach (fraction of the exact step), and
        the model's error within which the least codec work wins.
      overlap: the predicted steps overlap the exchange with the bottom MLP.
      gradient_codecs: ``Config.grad_codec`` -> the gradient codec its ``-ar`` candidates were
        predicted with.
    """

    mode: str
    compression: str
    topology: str
    grad_allreduce: str
    grad_codec: str | None
    reason: str
    predictions: dict[str, st.StepTime]
    margin: float
    overlap: bool
    gradient_codecs: dict[str, st.CodecSpec] = dataclasses.field(default_factory=dict)

    def step_s(self, mode: str | None = None) -> float:
        """The predicted step of ``mode`` (default: the chosen one), seconds."""
        return self.predictions[mode or self.mode].step(self.overlap)


def codec_s(t: st.StepTime) -> float:
    """The codec work of a predicted step, seconds: its compress and decompress time."""
    return t.compress_s + t.decompress_s


def grad_codec_variants(grad_codec: str) -> tuple[str, ...]:
    """The gradient codecs the ``-ar`` candidates compete with for ``Config.grad_codec``:
    ``"auto"`` (the default, which cannot be told from a user's choice) both, ``"auto"`` and
    ``"fixed"``; ``"fixed"`` only ``"fixed"``.

    Raises:
      ValueError: a codec not in ``GRAD_CODEC_SUFFIX``.
    """
    if grad_codec not in GRAD_CODEC_SUFFIX:
        raise ValueError(
            f"grad_codec must be one of {tuple(GRAD_CODEC_SUFFIX)}, got {grad_codec!r}"
        )
    return tuple(GRAD_CODEC_SUFFIX) if grad_codec == "auto" else (grad_codec,)


def candidates(
    cluster: st.Cluster, topology: str = "auto", *, grad_codecs: Sequence[str] = ()
) -> tuple[str, ...]:
    """The candidates on ``cluster`` for ``Config.exchange_topology`` ``topology``.

    ``"auto"``: exact, flat, and hierarchical where there are several nodes of several
    devices; ``"flat"``: exact and flat; ``"hierarchical"``: exact and hierarchical (exact
    alone on one node, where the hierarchical exchange is the exact one). Each also with the
    compressed gradient all-reduce (its ``-ar`` modes) once per codec of ``grad_codecs``
    (``Config.grad_codec`` values, :func:`grad_codec_variants`; empty: none), where there is
    more than one device.

    Raises:
      ValueError: an unknown topology or gradient codec.
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
    if unknown := set(grad_codecs) - set(GRAD_CODEC_SUFFIX):
        raise ValueError(f"unknown gradient codecs {sorted(unknown)}")
    if cluster.devices > 1:
        modes += tuple(
            m
            for m, (mode, gc) in CANDIDATE_MODES.items()
            if gc in grad_codecs and st.AR_MODES[mode] in modes
        )
    return modes


def codecs_for(
    codec: st.CodecSpec, *, backward_compressed: bool, gradient: st.CodecSpec | None = None
) -> st.Codecs:
    """The step-time model's Codecs of a run: ``codec`` on the forward exchange, on the
    backward one only when ``Config.exchange_backward`` is "compressed" (else free, ratio 1:
    the exact transposed exchange); ``gradient`` on the compressed all-reduce of the ``-ar``
    candidates (None: free, ratio 1; :func:`decide` then takes them from its
    ``gradient_codecs``)."""
    free = st.CodecSpec(math.inf, math.inf, 1.0)
    return st.Codecs(
        forward=codec,
        gradient=gradient or free,
        backward=codec if backward_compressed else free,
    )


def candidate_codecs(
    codecs: st.Codecs, gradient_codecs: Mapping[str, st.CodecSpec], mode: str
) -> tuple[str, st.Codecs]:
    """(step_time mode, Codecs) of candidate ``mode``: ``codecs`` with, for an ``-ar``
    candidate, its gradient codec from ``gradient_codecs`` (``Config.grad_codec`` -> spec).

    Raises:
      ValueError: ``mode`` not in ``CANDIDATES``, or its gradient codec not in
        ``gradient_codecs``.
    """
    if mode not in CANDIDATE_MODES:
        raise ValueError(f"unknown candidate {mode!r}; expected one of {CANDIDATES}")
    model_mode, grad_codec = CANDIDATE_MODES[mode]
    if grad_codec is None:
        return model_mode, codecs
    if grad_codec not in gradient_codecs:
        raise ValueError(
            f"{mode} needs the {grad_codec!r} gradient codec, got {sorted(gradient_codecs)}"
        )
    return model_mode, dataclasses.replace(codecs, gradient=gradient_codecs[grad_codec])


def _ms(x: float) -> str:
    return f"{x * 1e3:.3g} ms"


def decide(
    model: st.ModelSpec,
    cluster: st.Cluster,
    compute: st.Compute,
    codecs: st.Codecs,
    *,
    modes: Sequence[str] = tuple(_EXCHANGES),
    margin: float = 0.05,
    overlap: bool = True,
    topology: str = "auto",
    gradient_codecs: Mapping[str, st.CodecSpec] | None = None,
) -> Decision:
    """Chooses the exchange (module docstring): of the compressed candidates of ``modes``
    that beat ``exact`` by at least ``margin``, the one with the least codec work within
    ``margin`` of the fastest; ``exact`` when none beats it.

    Args:
      model, cluster, compute, codecs: the step-time model's inputs
        (:func:`models.dlrm.cluster.step_time.predict`).
      modes: the candidates (``candidates(cluster, topology, ...)``); must hold ``"exact"``;
        the default: every exchange with the exact all-reduce.
      margin: the least predicted gain over exact, and the model's error within which the
        least codec work wins, a fraction in ``[0, 1)``.
      overlap: compare the overlapped steps (``StepTime.step_overlap_s``), else the serial.
      topology: ``Config.exchange_topology``: the topology an ``exact`` choice keeps when it
        was given (``"flat"`` when ``"auto"``: exact is one flat all-to-all).
      gradient_codecs: ``Config.grad_codec`` -> the gradient codec of its ``-ar`` candidates
        (None: ``{"auto": codecs.gradient}``).

    Returns:
      A :class:`Decision`.

    Raises:
      ValueError: ``modes`` without ``"exact"`` or with a mode not in ``CANDIDATES``, an
        ``-ar`` mode whose gradient codec is not in ``gradient_codecs``, a margin outside
        ``[0, 1)``.
    """
    if "exact" not in modes or set(modes) - set(CANDIDATES):
        raise ValueError(f"modes must hold 'exact' and only {CANDIDATES}, got {tuple(modes)}")
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    grads = dict(gradient_codecs) if gradient_codecs is not None else {"auto": codecs.gradient}
    preds = {}
    for m in modes:
        mode, c = candidate_codecs(codecs, grads, m)
        preds[m] = dataclasses.replace(st.predict(model, cluster, compute, c, mode), mode=m)
    exact = preds["exact"].step(overlap)
    compressed = sorted((preds[m].step(overlap), m) for m in modes if m != "exact")
    mode = "exact"
    if not compressed:
        reason = "no compressed candidate on this mesh"
    else:
        fastest_t, fastest = compressed[0]
        gain = 1.0 - fastest_t / exact
        if gain < margin:
            if gain >= 0:
                how = f"only {gain:.1%} faster than exact (less than the {margin:.0%} margin)"
            else:
                how = f"{-gain:.1%} slower than exact"
            reason = f"the best compressed candidate, {fastest}, is predicted {how}"
        else:
            alike = [
                (codec_s(preds[m]), t, m)
                for t, m in compressed
                if 1.0 - t / exact >= margin and 1.0 - fastest_t / t <= margin
            ]
            _, t, mode = min(alike)
            reason = (
                f"{mode} is predicted {1.0 - t / exact:.1%} faster than exact (at least the "
                f"{margin:.0%} margin)"
            )
            if len(alike) > 1:
                others = ", ".join(
                    f"{m} {_ms(codec_s(preds[m]))}" for _, _, m in sorted(alike) if m != mode
                )
                of = (
                    "it" if mode == fastest else f"the fastest, {fastest} ({_ms(fastest_t)} a step)"
                )
                reason += (
                    f" and codes least ({_ms(codec_s(preds[mode]))} of codec work a step; "
                    f"{others}) of the compressed candidates within {margin:.0%} of {of}"
                )
    s = TRAINER_SETTINGS[mode]
    topo = topology if s.compression == "off" and topology != "auto" else s.exchange_topology
    return Decision(
        mode, s.compression, topo, s.grad_allreduce, s.grad_codec, reason, preds, margin,
        overlap, grads,
    )  # fmt: skip
