"""DLRM data tests: Criteo readers on the real rows in ../shared/data, malformed lines,
resumable streaming, per-process shares, the synthetic generator."""

import os
import subprocess
import sys

import numpy as np
import pytest

from models.dlrm.configs import get_config
from models.dlrm.data import input_pipeline as ip
from models.dlrm.data import synthetic

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")
KAGGLE = os.path.join(DATA, "criteo_kaggle")
TERABYTE = os.path.join(DATA, "criteo_terabyte")
ROWS = get_config("kaggle").table_rows()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

needs_data = pytest.mark.skipif(not os.path.isdir(KAGGLE), reason="shared data not present")

GOOD = (
    "0\t1\t1\t5\t0\t1382\t4\t15\t2\t181\t1\t2\t\t2\t68fd1e64\t80e26c9b\tfb936136\t7b4723c4"
    "\t25c83c98\t7e0ccccf\tde7995b8\t1f89b1b4\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164"
    "\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\tb1252a9d"
    "\t07b5194c\t\t3a171ecb\tc5c50484\te8b83407\t9727dd16\n"
)


def test_parse_first_dac_line():
    label, dense, ids = ip.LineParser("kaggle", ROWS)(GOOD)
    assert label == 0.0
    np.testing.assert_allclose(dense[:5], np.log1p([1, 1, 5, 0, 1382]), rtol=1e-6)
    assert dense[11] == 0.0  # missing I12
    assert ids[0] == int("68fd1e64", 16) % ROWS[0]
    assert ids[21] == 0  # missing C22
    assert all(0 <= i < r for i, r in zip(ids, ROWS))


def test_negative_dense_is_clamped():
    line = GOOD.replace("0\t1\t1\t5", "1\t-3\t1\t5", 1)
    label, dense, _ = ip.LineParser("kaggle", ROWS)(line)
    assert label == 1.0 and dense[0] == 0.0


@needs_data
def test_read_real_kaggle_terabyte_and_csv():
    train = ip.expand_paths(os.path.join(KAGGLE, "dac_head8000_split_train.tsv"))
    s = ip.CriteoFileStream(train, "kaggle", ROWS, 1000)
    b = s.next_batch()
    assert b["dense"].shape == (1000, 13) and b["ids"].shape == (1000, 26, 1)
    assert set(np.unique(b["label"])) == {0.0, 1.0}
    ev, bad = ip.read_eval_set(
        ip.expand_paths(os.path.join(KAGGLE, "dac_head8000_split_test.tsv")), "kaggle", ROWS, 10_000
    )
    assert len(ev["label"]) == 391 and bad == 0
    tb, bad = ip.read_eval_set(ip.expand_paths(TERABYTE), "terabyte", ROWS, 10_000)
    assert len(tb["label"]) == 1000 and int(tb["label"].sum()) == 21
    csv, _ = ip.read_eval_set(ip.expand_paths(os.path.join(KAGGLE, "*.csv")), "csv", ROWS, 10_000)
    assert len(csv["label"]) == 200 and csv["dense"].min() >= 0.0


def _write(tmp_path, lines, name="day_0"):
    p = tmp_path / name
    p.write_text("".join(lines))
    return str(p)


@pytest.mark.parametrize(
    "bad,why",
    [
        ("0\t1\t2\n", "expected 40 tab-separated fields"),
        (GOOD.replace("68fd1e64", "zz-not-hex"), "bad categorical value"),
        (GOOD.replace("\t1382\t", "\tabc\t"), "bad integer feature"),
        ("7" + GOOD[1:], "label must be 0 or 1"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, bad, why):
    path = _write(tmp_path, [GOOD, GOOD, bad, GOOD])
    s = ip.CriteoFileStream([path], "terabyte", ROWS, 4)
    with pytest.raises(ip.MalformedLineError) as e:
        s.next_batch()
    assert f"{path}:3:" in str(e.value) and why in str(e.value)
    assert "--skip-bad-lines" in str(e.value)


def test_skip_bad_lines_counts(tmp_path):
    path = _write(tmp_path, [GOOD, "garbage\n", GOOD, "0\t1\n", GOOD])
    s = ip.CriteoFileStream([path], "kaggle", ROWS, 3, skip_bad_lines=True)
    b = s.next_batch()
    assert len(b["label"]) == 3 and s.bad_lines == 2
    ev, bad = ip.read_eval_set([path], "kaggle", ROWS, 10, skip_bad_lines=True)
    assert len(ev["label"]) == 3 and bad == 2


def test_csv_needs_header_columns(tmp_path):
    path = _write(tmp_path, ["a,b\n", "1,2\n"], "x.csv")
    with pytest.raises(ValueError, match="csv header lacks columns"):
        ip.CriteoFileStream([path], "csv", ROWS, 1).next_batch()


def test_cli_reports_malformed_line(tmp_path):
    path = _write(tmp_path, [GOOD] * 5 + ["broken line\n"] + [GOOD] * 100, "train.txt")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "models.dlrm.train",
            "--preset",
            "tiny",
            "--data",
            path,
            "--devices",
            "2",
            "--out",
            str(tmp_path / "o"),
            "--holdout-every",
            "0",
            "--eval-data",
            path,
            "--no-progress",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{path}:6: malformed kaggle line" in r.stderr


@needs_data
def test_stream_resumes_at_position_and_wraps():
    train = ip.expand_paths(os.path.join(KAGGLE, "dac_head8000_split_train.tsv"))
    s = ip.CriteoFileStream(train, "kaggle", ROWS, 1000, holdout_every=20)
    s.next_batch()
    pos = s.position()
    rest = [s.next_batch() for _ in range(8)]  # 7200 * 0.95 lines: wraps into epoch 1
    assert s.position()["epoch"] == 1
    s2 = ip.CriteoFileStream(train, "kaggle", ROWS, 1000, holdout_every=20, position=pos)
    for want in rest:
        got = s2.next_batch()
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])


@needs_data
def test_process_shares_make_up_the_global_batch():
    train = ip.expand_paths(os.path.join(KAGGLE, "dac_head8000_split_train.tsv"))
    whole = ip.CriteoFileStream(train, "kaggle", ROWS, 64)
    parts = [
        ip.CriteoFileStream(train, "kaggle", ROWS, 32, process_index=i, num_processes=2)
        for i in range(2)
    ]
    for _ in range(3):
        w = whole.next_batch()
        p = [s.next_batch() for s in parts]
        np.testing.assert_array_equal(np.concatenate([x["ids"] for x in p]), w["ids"])


def test_synthetic_is_deterministic_zipf_and_learnable():
    gen = synthetic.SyntheticCriteo(get_config("tiny").table_rows(), seed=3)
    a, b = gen.batch(5, 512), gen.batch(5, 512)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert 0.15 < a["label"].mean() < 0.4
    distinct = len(np.unique(a["ids"][:, 2, 0])) / 512
    assert distinct < 0.6  # hot ids repeat within a batch
    ss = ip.SyntheticStream(gen, 512, process_index=1, num_processes=2, position={"batch": 5})
    np.testing.assert_array_equal(ss.next_batch()["ids"], a["ids"][256:])
    assert ss.position() == {"batch": 6}
    # The teacher's logit separates the labels (AUC is learnable).
    from sklearn.metrics import roc_auc_score

    big = gen.eval_set(20000)
    z = gen._raw_logit(big["dense"], big["ids"])
    assert roc_auc_score(big["label"], z) > 0.75


@needs_data
def test_a_kaggle_file_under_the_dcnv2_preset_is_described_by_its_layout():
    import dataclasses

    from models.dlrm.data import sources

    path = os.path.join(KAGGLE, "dac_head8000_split_train.tsv")
    config = dataclasses.replace(get_config("dcnv2_small"), data=path, eval_rows=64)
    desc = sources.make_data(config, 64, None).description
    assert desc.startswith(f"Criteo tab-separated files ['{path}']"), desc
    assert "terabyte" not in desc
