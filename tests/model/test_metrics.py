"""metrics.jsonl schema: records round-trip, the reader names bad lines, the writer keeps the
records up to a resumed step."""

import json
import math

import pytest

from models.dlrm import metrics as mx

CONFIG = mx.ConfigRecord(
    step=0,
    config={"steps": 12, "seed": 7},
    devices=8,
    processes=1,
    label="",
    data="synthetic",
    error_bound="adaptive",
)


def _train(step, net=None):
    return mx.TrainRecord(
        step=step,
        loss=0.5 - step / 100,
        auc=float("nan") if step == 3 else 0.6,
        samples_per_s=1000.0,
        compression_ratio=4.0,
        raw_bytes=400.0,
        frame_bytes=100.0,
        moved_bytes=200.0,
        moved_ratio=2.0,
        ratio_per_table=[4.0, 3.5],
        fallback_steps=0,
        seconds=0.25,
        unix_time=1.0e9,
        error_bound=[0.01, 0.03],
        bad_lines=0,
        exchange="on",
        net_tx_bytes=net,
    )


def _eval(step):
    return mx.EvalRecord(step=step, auc=0.61, logloss=0.55, accuracy=0.7, rows=512)


def test_records_round_trip_and_keep_the_keys(tmp_path):
    path = tmp_path / "metrics.jsonl"
    w = mx.MetricsWriter(path, None, enabled=True)
    final = mx.FinalRecord(
        auc=0.61, logloss=0.55, accuracy=0.7, rows=512, step=6, params_checksum=12.5
    )
    for r in (CONFIG, _train(3), _eval(3), _train(6, net=1e6), _eval(6), final):
        w.write(r)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [d["kind"] for d in lines] == ["config", "train", "eval", "train", "eval", "final"]
    assert list(lines[1])[:3] == ["kind", "step", "loss"]  # kind first, then field order
    assert "net_tx_bytes" not in lines[1] and lines[3]["net_tx_bytes"] == 1e6
    log = mx.read_metrics(path)
    assert log.config == CONFIG and log.final == final
    assert [r.step for r in log.train] == [3, 6] and log.eval == [_eval(3), _eval(6)]
    assert math.isnan(log.train[0].auc) and log.train[1] == _train(6, net=1e6)


def test_writer_on_resume_keeps_records_up_to_the_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    w = mx.MetricsWriter(path, None, enabled=True)
    for r in (CONFIG, _train(3), _eval(3), _train(6), _eval(6), _train(9)):
        w.write(r)
    mx.MetricsWriter(path, 6, enabled=True)  # resumed from the step-6 checkpoint
    assert [r.step for r in mx.read_metrics(path).train] == [3, 6]
    assert mx.read_metrics(path).config == CONFIG
    # A finished run resumed (run longer, or again): its final record goes, the run writes
    # its own at its end (two finals at steps 6 and 9 before)
    mx.MetricsWriter(path, 6, enabled=True).write(
        mx.FinalRecord(auc=0.6, logloss=0.5, accuracy=0.7, rows=512, step=6, params_checksum=1.0)
    )
    mx.MetricsWriter(path, 6, enabled=True)
    assert mx.read_metrics(path).final is None and '"kind": "final"' not in path.read_text()
    assert [r.step for r in mx.read_metrics(path).train] == [3, 6]
    # No checkpoint yet (resume at step 0): the run starts over, with one config record.
    mx.MetricsWriter(path, 0, enabled=True).write(CONFIG)
    assert path.read_text().count('"kind": "config"') == 1
    assert mx.read_metrics(path).train == []
    # Not process 0: writes nothing, leaves the file alone.
    before = path.read_text()
    mx.MetricsWriter(path, None, enabled=False).write(_train(12))
    assert path.read_text() == before


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"kind": "bogus", "step": 1}', "unknown record kind 'bogus'"),
        ('{"kind": "eval", "step": 1, "auc": 0.5}', "eval record"),
        (
            '{"kind": "eval", "step": 1, "auc": 0.5, "logloss": 1, "accuracy": 1, "rows": 2, '
            '"extra": 1}',
            "unknown fields ['extra']",
        ),
    ],
)
def test_reader_names_the_bad_line(tmp_path, line, message):
    path = tmp_path / "metrics.jsonl"
    path.write_text(mx.to_json(CONFIG) + "\n\n" + line + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:3: ") as e:
        mx.read_metrics(path)
    assert message in str(e.value)
