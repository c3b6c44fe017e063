"""``--compression auto``'s rule among alike candidates and its fixed-rate gradient codec
(models/dlrm/cluster/auto_exchange.py): the ``-ar-fixed`` candidates, the least codec work
within the margin, an explicit ``--grad-codec fixed``, and the Config the choice resolves to
(models/dlrm/run_setup.py)."""

import dataclasses

import pytest
from support import require_eight_devices

from models.dlrm import grad_allreduce, run_setup
from models.dlrm.cluster import auto_exchange as ae
from models.dlrm.cluster import auto_report as report
from models.dlrm.cluster import exchange_probe, probe_result
from models.dlrm.cluster import step_time as st
from models.dlrm.configs import get_config

TB = st.terabyte_spec()  # S = 3,048,708 head-gradient bytes; X = 2 MiB per device on 8
S = TB.gradient_bytes()
COMPUTE = st.Compute(1e12, 1e11)
EXCHANGE = st.CodecSpec(1e9, 1e9, 10.0)
#: the gradient codecs as the testbed measured them, in shape: the entropy-coded frames 3.3x
#: smaller, the fixed-rate ones 10x cheaper to encode
ENTROPY = st.CodecSpec(0.5e9, 1e9, 10.0)
FIXED = st.CodecSpec(5e9, 10e9, 3.0)
BOTH = {"auto": ENTROPY, "fixed": FIXED}


def _cluster(inter: float, intra: float = 1e12) -> st.Cluster:
    return st.Cluster(2, 4, intra, inter, inter_latency=1e-4)


def _decide(cl: st.Cluster, grads=BOTH, **kw) -> ae.Decision:
    codecs = ae.codecs_for(EXCHANGE, backward_compressed=True)
    modes = ae.candidates(cl, grad_codecs=tuple(grads))
    return ae.decide(TB, cl, COMPUTE, codecs, modes=modes, gradient_codecs=grads, **kw)


def test_every_ar_candidate_competes_with_both_gradient_codecs():
    cl = _cluster(1e8)
    assert ae.candidates(cl, grad_codecs=("auto", "fixed")) == (
        "exact", "flat", "hierarchical", "exact-ar", "flat-ar", "hierarchical-ar",
        "exact-ar-fixed", "flat-ar-fixed", "hierarchical-ar-fixed",
    )  # fmt: skip
    flat = ("exact", "flat", "exact-ar-fixed", "flat-ar-fixed")
    assert ae.candidates(cl, "flat", grad_codecs=("fixed",)) == flat
    fixed = ("on", "hierarchical", "compressed", "fixed")
    assert ae.TRAINER_SETTINGS["hierarchical-ar-fixed"] == fixed
    assert ae.TRAINER_SETTINGS["flat-ar"] == ("on", "flat", "compressed", "auto")
    assert ae.TRAINER_SETTINGS["hierarchical"].grad_codec is None
    # the same exchange and all-reduce, only the gradient codec differs: its encode and decode
    # time (S (1 + 1/P) coded, 2 S (P-1)/P decoded) and the all-reduce's bytes
    p = _decide(cl).predictions
    fixed, entropy = p["hierarchical-ar-fixed"], p["hierarchical-ar"]
    assert fixed.mode == "hierarchical-ar-fixed"  # named as the candidate, for the log
    assert fixed.exchange_forward_s == entropy.exchange_forward_s
    code = S * (1 + 1 / 8) * (1 / 0.5e9 - 1 / 5e9) + 2 * S * 7 / 8 * (1 / 1e9 - 1 / 10e9)
    assert ae.codec_s(entropy) - ae.codec_s(fixed) == pytest.approx(code)
    assert fixed.allreduce_s > entropy.allreduce_s


def test_the_fixed_rate_gradient_codec_wins_where_encode_cpu_matters():
    # Inter-node 3e8 B/s: the all-reduce's bytes cost little, so the entropy codec's
    # 6.2 ms of extra encode and decode (S 9/8 at 0.5 GB/s instead of 5 GB/s, 2 S 7/8 at 1
    # instead of 10) is more than the all-reduce it saves: hierarchical-ar-fixed, outside the
    # margin of any other; the entropy one is slower than exact.
    d = _decide(_cluster(3e8))
    assert d.mode == "hierarchical-ar-fixed"
    assert (d.compression, d.topology, d.grad_allreduce, d.grad_codec) == (
        "on", "hierarchical", "compressed", "fixed",
    )  # fmt: skip
    assert d.step_s() < d.step_s("exact") < d.step_s("hierarchical-ar")
    assert d.reason.startswith("hierarchical-ar-fixed is predicted 25.6% faster than exact")
    # without the fixed-rate variant, the compressed all-reduce would not pay at all
    entropy_only = _decide(_cluster(3e8), grads={"auto": ENTROPY})
    assert entropy_only.mode == "hierarchical" and entropy_only.grad_codec is None


def test_the_entropy_gradient_codec_wins_on_a_slow_link():
    # Inter-node 1e7 B/s: the fixed-rate frames' 3.3x more all-reduce bytes cost tens of ms,
    # the entropy codec's encode a few: hierarchical-ar (grad_codec auto).
    d = _decide(_cluster(1e7))
    assert (d.mode, d.grad_codec) == ("hierarchical-ar", "auto")
    gap = 1 - d.step_s() / d.step_s("hierarchical-ar-fixed")
    assert gap > 0.3  # far outside the margin: the codec work does not enter
    assert (
        d.reason == "hierarchical-ar is predicted 82.2% faster than exact (at least the 5% margin)"
    )


def test_within_the_margin_the_fixed_rate_codec_is_preferred():
    # Between the two links above there is one where the entropy frames are predicted a few
    # percent faster: within the 5% margin the model cannot tell them apart, and the one with
    # less codec work (the fixed-rate frames) is chosen; with a margin below the gap, the
    # faster one.
    cl = _cluster(4.3e7)
    d = _decide(cl)
    gap = 1 - d.step_s("hierarchical-ar") / d.step_s("hierarchical-ar-fixed")
    assert 0.01 < gap < 0.05
    assert d.mode == "hierarchical-ar-fixed"
    p = d.predictions
    assert ae.codec_s(p["hierarchical-ar-fixed"]) < ae.codec_s(p["hierarchical-ar"])
    assert "codes least" in d.reason and "within 5% of the fastest, hierarchical-ar" in d.reason
    assert _decide(cl, margin=gap / 2).mode == "hierarchical-ar"


def test_within_the_margin_hierarchical_is_preferred_over_flat():
    # A slow intra-node link (6e8 B/s) puts the hierarchical exchange's exact intra-node stage
    # in series: flat is predicted a few percent faster, but codes every block (X each way)
    # where hierarchical codes the half that leaves the node. Within the 5% margin:
    # hierarchical; with a margin below the gap: flat; with a gap above the margin: flat.
    cl = _cluster(1e8, intra=6e8)
    d = _decide(cl, grads={})
    gap = 1 - d.step_s("flat") / d.step_s("hierarchical")
    assert 0.01 < gap < 0.05
    assert d.mode == "hierarchical"
    assert ae.codec_s(d.predictions["flat"]) == pytest.approx(
        2 * ae.codec_s(d.predictions["hierarchical"])
    )
    assert "within 5% of the fastest, flat" in d.reason
    assert _decide(cl, grads={}, margin=gap / 2).mode == "flat"
    slower_intra = _decide(_cluster(1e8, intra=4e8), grads={})  # flat 10% faster
    assert 1 - slower_intra.step_s("flat") / slower_intra.step_s("hierarchical") > 0.05
    assert slower_intra.mode == "flat" and "codes least" not in slower_intra.reason


def test_an_alike_candidate_must_still_beat_exact_by_the_margin():
    # The least codec work is chosen among the candidates that pay. Inter-node 3e8 B/s with a
    # 20% margin: only hierarchical-ar-fixed is 20% faster than exact (25.6%); hierarchical
    # (18.2%) is within 20% of it and codes less, but does not pay by the margin itself, so
    # it is left out rather than chosen and then beaten by exact.
    d = _decide(_cluster(3e8), margin=0.2)
    step, p = d.step_s, d.predictions
    assert 1 - step("hierarchical") / step("exact") < 0.2
    assert 1 - step("hierarchical-ar-fixed") / step("hierarchical") < 0.2
    assert ae.codec_s(p["hierarchical"]) < ae.codec_s(p["hierarchical-ar-fixed"])
    assert d.mode == "hierarchical-ar-fixed" and "codes least" not in d.reason


def test_an_explicit_gradient_codec_restricts_the_variants():
    assert ae.grad_codec_variants("auto") == ("auto", "fixed")
    assert ae.grad_codec_variants("fixed") == ("fixed",)
    with pytest.raises(ValueError, match="grad_codec must be one of"):
        ae.grad_codec_variants("entropy")
    with pytest.raises(ValueError, match="unknown gradient codecs"):
        ae.candidates(_cluster(1e8), grad_codecs=("entropy",))
    # on the slow link the entropy frames would win; with the fixed-rate alone, its variant
    d = _decide(_cluster(1e7), grads={"fixed": FIXED})
    assert set(d.predictions) == {"exact", "flat", "hierarchical", "exact-ar-fixed",
                                  "flat-ar-fixed", "hierarchical-ar-fixed"}  # fmt: skip
    assert (d.mode, d.grad_codec) == ("hierarchical-ar-fixed", "fixed")
    with pytest.raises(ValueError, match="hierarchical-ar needs the 'auto' gradient codec"):
        ae.decide(TB, _cluster(1e7), COMPUTE, ae.codecs_for(EXCHANGE, backward_compressed=True),
                  modes=("exact", "hierarchical-ar"), gradient_codecs={"fixed": FIXED})  # fmt: skip


def test_hindsight_and_the_report_name_the_gradient_codec():
    cl = _cluster(3e8)
    codecs = ae.codecs_for(EXCHANGE, backward_compressed=True)
    d = _decide(cl)
    balance = COMPUTE.flops_per_s / COMPUTE.memory_bytes_per_s
    same = report.hindsight(d, TB, cl, codecs, d.step_s(), balance)
    assert same["choice"] == "hierarchical-ar-fixed" and same["agrees"]
    assert same["compute_flops_per_s"] == pytest.approx(COMPUTE.flops_per_s, rel=1e-6)
    link = probe_result.Link("intra-node", "local", 3, 1e12, 0.0)
    probe = probe_result.Probe(link, link, EXCHANGE, COMPUTE, gradient_codecs=BOTH)
    lines = report.start_lines(probe, d)
    assert "  gradient codec auto: compress 0.5 GB/s, decompress 1 GB/s per device, " \
        "compression ratio 10x" in lines  # fmt: skip
    assert any(line.startswith("  gradient codec fixed: compress 5 GB/s") for line in lines)
    assert lines[-1].startswith(
        "  choice: hierarchical-ar-fixed (compression on, topology hierarchical, gradient "
        "all-reduce compressed, gradient codec fixed): "
    )
    j = report.to_json(probe, d, None)
    assert j["grad_codec"] == "fixed" and j["choice"] == "hierarchical-ar-fixed"
    assert j["probe"]["gradient_codecs"]["fixed"]["ratio"] == 3.0
    assert set(j["candidates"]) == set(ae.CANDIDATES)


# --- the trainer's resolution ---------------------------------------------------------------


def _choose(monkeypatch, inter: float, **over):
    """choose_exchange on 2 nodes of 4 with a hand-made probe (links, codecs) in place of the
    measured one; returns (the gradient codecs the probe was asked to time, the config, the
    AutoChoice)."""
    require_eight_devices()
    asked = []

    def measure(config, mesh, model, exchange, *, gradient_codecs=()):
        asked.append(tuple(gradient_codecs))
        return probe_result.Probe(
            intra=probe_result.Link("intra-node", "local", 3, 1e12, 0.0),
            inter=probe_result.Link("inter-node", "nodes", 1, inter, 1e-4),
            codec=EXCHANGE,
            compute=COMPUTE,
            gradient_codecs={g: BOTH[g] for g in gradient_codecs},
        )

    monkeypatch.setattr(exchange_probe, "measure", measure)
    cfg = dataclasses.replace(
        get_config("tiny"), **{"compression": "auto", "grad_allreduce": "auto", "optimizer": "sgd",
        "node_devices": 4, "exchange_backward": "compressed", **over},
    )  # fmt: skip
    cfg.validate()
    mesh = run_setup.create_mesh(cfg)
    _, auto = exchange_probe.choose_exchange(cfg, mesh, min_error_bound=0.01)
    return asked, cfg, auto


@pytest.mark.parametrize(
    ("grad_codec", "inter", "timed", "choice"),
    [
        ("auto", 1e3, ("auto", "fixed"), "hierarchical-ar"),  # slow link: fewest bytes
        ("auto", 3e8, ("auto", "fixed"), "hierarchical-ar-fixed"),  # fast: least encode CPU
        ("fixed", 1e3, ("fixed",), "hierarchical-ar-fixed"),  # the user's codec alone
    ],
)
def test_the_choice_resolves_to_the_configs_gradient_codec(
    monkeypatch, grad_codec, inter, timed, choice
):
    asked, cfg, auto = _choose(monkeypatch, inter, grad_codec=grad_codec)
    assert asked == [timed]
    assert auto.decision.mode == choice, auto.decision.reason
    resolved = run_setup.resolve_auto(cfg, auto)
    want = ae.TRAINER_SETTINGS[choice].grad_codec
    assert (resolved.grad_allreduce, resolved.grad_codec) == ("compressed", want)
    assert resolved.compression == "auto"  # the record keeps what was asked
    assert grad_allreduce.from_config(resolved).allreduce.codec.codec == want


def test_an_exact_all_reduce_keeps_the_configs_gradient_codec(monkeypatch):
    # Adagrad: no -ar candidate, nothing timed; the all-reduce resolves to exact and
    # grad_codec stays as given. An explicit --grad-allreduce is left alone.
    asked, cfg, auto = _choose(monkeypatch, 1e3, optimizer="adagrad", grad_codec="fixed")
    assert asked == [()] and auto.decision.grad_codec is None
    resolved = run_setup.resolve_auto(cfg, auto)
    assert (resolved.grad_allreduce, resolved.grad_codec) == ("exact", "fixed")
    explicit = dataclasses.replace(cfg, grad_allreduce="compressed")
    assert run_setup.resolve_auto(explicit, auto) is explicit
    with pytest.raises(ValueError, match="needs compression auto"):
        run_setup.resolve_auto(cfg, None)
