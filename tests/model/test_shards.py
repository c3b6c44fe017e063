"""The shard loader (models/dlrm/data/shards.py): without shuffling it yields the text
reader's batches bit for bit (holdout, process shares, epoch wrap, evaluation rows); block
shuffling is a per-epoch permutation fixed by the seed; positions resume exactly, also with
prefetch; each process reads only its share."""

import os

import numpy as np
import pytest
from support import require_eight_devices

from bench.training.input_bench import criteo_text
from models.dlrm.configs import get_config
from models.dlrm.data import input_pipeline as ip
from models.dlrm.data import preprocess as pp
from models.dlrm.data import shards
from models.dlrm.data import sources as data_lib

ROWS = get_config("kaggle").table_rows()
DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "criteo_kaggle")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Three text files of 700, 1100 and 0+500 rows (one bad line), and their shards."""
    d = tmp_path_factory.mktemp("shards")
    paths = []
    for k, n in enumerate((700, 1100, 500)):
        p = d / f"day_{k}"
        text = criteo_text(n, seed=20 + k)
        if k == 2:
            text = b"bad line\n" + text
        p.write_bytes(text)
        paths.append(str(p))
    pp.convert(
        paths, str(d / "out"), data_format="kaggle", table_rows=ROWS, skip_bad_lines=True,
        progress=False,
    )  # fmt: skip
    return paths, shards.ShardDataset(str(d / "out"))


def same(a, b):
    return all(a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)


@pytest.mark.parametrize(
    "holdout,procs,batch", [(0, 1, 256), (0, 2, 100), (20, 1, 300), (7, 3, 64)]
)
def test_unshuffled_batches_equal_the_text_reader(files, holdout, procs, batch):
    paths, ds = files
    assert ds.num_rows == 2300
    # Enough batches to wrap into the second epoch (where the text reader's holdout
    # counter differs only if 2300 % holdout != 0: stop before that).
    train = ds.num_rows - (len(range(0, ds.num_rows, holdout)) if holdout else 0)
    steps = (train if holdout else 2 * train) // (batch * procs)
    for p in range(procs):
        text = ip.CriteoFileStream(
            paths, "kaggle", ROWS, batch, skip_bad_lines=True, holdout_every=holdout,
            process_index=p, num_processes=procs,
        )  # fmt: skip
        stream = shards.ShardStream(
            ds, batch, shuffle=False, holdout_every=holdout, process_index=p,
            num_processes=procs, block_rows=333, prefetch=1,
        )  # fmt: skip
        for _ in range(steps):
            assert same(text.next_batch(), stream.next_batch())
        stream.close()
    if holdout:
        want, _ = ip.read_eval_set(
            paths, "kaggle", ROWS, 90, skip_bad_lines=True, holdout_every=holdout
        )
        assert same(want, shards.eval_set(ds, 90, holdout))


@pytest.mark.skipif(not os.path.isdir(DATA), reason="../shared/data (real rows) is not present")
def test_real_rows_unshuffled_equal_the_text_reader(tmp_path):
    paths = [os.path.join(DATA, f"dac_head8000_split_{s}.tsv") for s in ("train", "dev")]
    pp.convert(paths, str(tmp_path), data_format="kaggle", table_rows=ROWS, progress=False)
    ds = shards.ShardDataset(str(tmp_path), checksums=True)
    text = ip.CriteoFileStream(paths, "kaggle", ROWS, 512, holdout_every=20)
    stream = shards.ShardStream(ds, 512, shuffle=False, holdout_every=20, prefetch=0)
    for _ in range(14):  # 7168 of the 7609 - 381 training rows
        assert same(text.next_batch(), stream.next_batch())


def _row_keys(batch):
    return [r.tobytes() for r in np.concatenate([batch["dense"], batch["ids"][:, :, 0].view(
        np.float32)], axis=1)]  # fmt: skip


def test_shuffled_epochs_are_permutations_of_blocks(files):
    _, ds = files
    everything = ds.empty(ds.num_rows)
    ds.read(0, ds.num_rows, everything, 0)
    all_rows = sorted(_row_keys(shards._as_batch(everything)))
    stream = shards.ShardStream(ds, 230, seed=3, block_rows=100, prefetch=0)
    epochs = [[], []]
    for e in range(2):
        for _ in range(10):
            epochs[e] += _row_keys(stream.next_batch())
        assert sorted(epochs[e]) == all_rows  # every row once per epoch
    assert epochs[0] != epochs[1] and epochs[0] != sorted(epochs[0])
    # Contiguous blocks of 100 dataset rows stay together.
    position = {k: i for i, k in enumerate(_row_keys(shards._as_batch(everything)))}
    order = np.array([position[k] for k in epochs[0]])
    starts = np.flatnonzero(np.diff(order) != 1) + 1
    assert set(order[np.r_[0, starts]] % 100) == {0}
    again = shards.ShardStream(ds, 230, seed=3, block_rows=100, prefetch=2)
    other = shards.ShardStream(ds, 230, seed=4, block_rows=100, prefetch=0)
    first = again.next_batch()
    assert _row_keys(first) == epochs[0][:230]
    assert _row_keys(other.next_batch()) != epochs[0][:230]
    again.close()


def test_process_shares_make_the_global_batch(files):
    _, ds = files
    whole = shards.ShardStream(ds, 3 * 128, seed=9, block_rows=50, holdout_every=10, prefetch=0)
    parts = [
        shards.ShardStream(
            ds,
            128,
            seed=9,
            block_rows=50,
            holdout_every=10,
            process_index=p,
            num_processes=3,
            prefetch=0,
        )  # fmt: skip
        for p in range(3)
    ]
    for _ in range(8):
        want = whole.next_batch()
        got = [s.next_batch() for s in parts]
        assert same(want, {k: np.concatenate([g[k] for g in got]) for k in want})


def test_read_skipping_equals_a_gather_of_the_training_rows(files):
    _, ds = files  # shards of 700, 1100 and 500 rows
    rng = np.random.default_rng(3)
    cases = [(0, 2300, 2), (0, 2300, 20), (695, 705, 7), (699, 1801, 3), (14, 15, 7)]
    cases += [
        (a, a + int(rng.integers(1, 900)), int(rng.integers(2, 40))) for a in range(0, 2000, 97)
    ]
    for start, stop, every in cases:
        stop = min(stop, ds.num_rows)
        rows = np.arange(start, stop, dtype=np.int64)
        rows = rows[rows % every != 0]
        want, got = ds.empty(len(rows) + 3), ds.empty(len(rows) + 3)
        for out in (want, got):
            for a in out.values():
                a[:] = 7  # rows outside the copy must stay untouched
        ds.take(rows, want, 2)
        assert ds.read_skipping(start, stop, every, got, 2) == len(rows)
        assert same(want, got), (start, stop, every)


def test_each_process_reads_only_its_share(files, monkeypatch):
    _, ds = files
    read = []
    monkeypatch.setattr(ds, "read", lambda a, b, out, at: read.append((a, b)))
    stream = shards.ShardStream(ds, 100, shuffle=False, process_index=1, num_processes=4,
                                prefetch=0)  # fmt: skip
    stream.next_batch()
    stream.next_batch()
    assert read == [(100, 200), (500, 600)]


@pytest.mark.parametrize("prefetch", [0, 3])
def test_resume_from_a_position(files, prefetch):
    _, ds = files
    kw = dict(seed=5, block_rows=64, holdout_every=9, prefetch=prefetch)
    stream = shards.ShardStream(ds, 200, **kw)
    for _ in range(13):  # past the first epoch
        stream.next_batch()
    position = stream.position()
    assert position["train_index"] == 13 * 200 and position["epoch"] == 1
    want = [stream.next_batch() for _ in range(4)]
    stream.close()
    resumed = shards.ShardStream(ds, 200, position=dict(position), **kw)
    for w in want:
        assert same(w, resumed.next_batch())
    resumed.close()
    with pytest.raises(ValueError, match="other settings.*seed"):
        shards.ShardStream(ds, 200, position=position, **dict(kw, seed=6))


def test_errors(files):
    _, ds = files
    with pytest.raises(ValueError, match="every row"):
        shards.ShardStream(ds, 8, holdout_every=1)
    with pytest.raises(FileNotFoundError):
        shards.ShardDataset("/nonexistent/shards")


@pytest.mark.slow
def test_trainer_shard_path_equals_text_path(tmp_path):
    """From the same text, the same seed and no shuffling, ``--data DIR`` of shards gives the
    text path's batches bit for bit and the same training result (final AUC, parameters)."""
    import dataclasses

    from models.dlrm import train

    require_eight_devices()
    text = tmp_path / "train.txt"
    text.write_bytes(criteo_text(3000, seed=42))
    base = dataclasses.replace(
        get_config("tiny"), steps=6, batch_size=128, eval_rows=150, log_every=3, eval_every=0,
        checkpoint_every=0, holdout_every=20, seed=7, shuffle_block_rows=0, devices_per_process=8,
    )  # fmt: skip
    pp.convert(
        [str(text)], str(tmp_path / "shards"), data_format="kaggle",
        table_rows=base.table_rows(), progress=False,
    )  # fmt: skip
    configs = {
        "text": dataclasses.replace(base, data=str(text)),
        "shards": dataclasses.replace(base, data=str(tmp_path / "shards")),
    }
    made = {
        k: data_lib.make_data(c, 64, None, process_index=1, num_processes=2)
        for k, c in configs.items()
    }
    (ts, te), (ss, se, desc) = made["text"][:2], made["shards"][:3]
    assert "shards" in desc and "file order" in desc
    assert same(te, se)
    for _ in range(25):  # 25 x 128 rows: into the second epoch of 2850 training rows
        assert same(ts.next_batch(), ss.next_batch())
    ss.close()
    results = {k: train.train_and_evaluate(c, str(tmp_path / k), progress=False)
               for k, c in configs.items()}  # fmt: skip
    assert results["text"] == results["shards"]
    assert 0.0 < results["shards"]["auc"] < 1.0
    with pytest.raises(ValueError, match="hashed into table rows"):
        data_lib.make_data(dataclasses.replace(configs["shards"], max_ind_range=400), 64, None)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(DATA), reason="../shared/data (real rows) is not present")
def test_real_kaggle_and_terabyte_shards_train_end_to_end(tmp_path):
    """The shared real rows go through the command line into shards and train a few steps."""
    import dataclasses
    import json

    from models.dlrm import train

    require_eight_devices()
    tiny = get_config("tiny")
    terabyte = os.path.join(os.path.dirname(DATA), "criteo_terabyte", "day0_head1000.tsv")
    runs = {
        "kaggle": ([os.path.join(DATA, "dac_head8000_split_train.tsv")], "kaggle", 8, 128),
        "terabyte": ([terabyte], "terabyte", 6, 64),
    }
    for name, (sources, fmt, steps, batch) in runs.items():
        out = tmp_path / f"{name}_shards"
        assert pp.main([*sources, "--out", str(out), "--data-format", fmt, "--config", "tiny",
                        "--no-progress"]) == 0  # fmt: skip
        config = dataclasses.replace(
            tiny, data=str(out), steps=steps, batch_size=batch, log_every=steps // 2,
            eval_every=0, checkpoint_every=0, holdout_every=4, devices_per_process=8,
        )  # fmt: skip
        if name == "kaggle":
            config = dataclasses.replace(
                config, eval_data=os.path.join(DATA, "dac_head8000_split_test.tsv")
            )
        result = train.train_and_evaluate(config, str(tmp_path / name), progress=False)
        assert 0.0 <= result["auc"] <= 1.0 and result["logloss"] > 0
        assert result["rows"] == (391 if name == "kaggle" else 250)
        with open(tmp_path / name / "metrics.jsonl") as f:
            records = [json.loads(line) for line in f]
        trains = [r for r in records if r["kind"] == "train"]
        assert len(trains) == 2 and all(r["data_wait_s"] >= 0 for r in trains)
        assert trains[-1]["compression_ratio"] > 1.0
        data = [r for r in records if r["kind"] == "config"][0]["data"]
        assert data.startswith(f"shards {out}") and "blocks of 4096 rows shuffled" in data


def test_prefetch_hands_errors_to_next_batch_and_closes(files, monkeypatch):
    _, ds = files
    stream = shards.ShardStream(ds, 100, prefetch=2)
    stream.next_batch()
    stream.close()  # the producer waits on a full queue: close still returns
    assert stream._thread is None
    broken = shards.ShardStream(ds, 100, prefetch=2)
    monkeypatch.setattr(ds, "read", lambda *a: (_ for _ in ()).throw(OSError("disk gone")))
    with pytest.raises(OSError, match="disk gone"):
        broken.next_batch()
    broken.close()


def test_multi_hot_shards_carry_bags_and_one_hot_shards_read_as_before(files, tmp_path):
    """write_multi_hot turns one-hot shards into MLPerf multi-hot bags: every batch holds the
    one-hot id first, then the rule's ids, -1 after the table's bag; labels and dense rows are
    the source's; the one-hot folder (no bag_sizes in its manifest) reads as before."""
    from models.dlrm.configs.default import MLPERF_DCNV2_MULTI_HOT_SIZES as SIZES
    from models.dlrm.data import synthetic

    _, one_hot = files
    assert one_hot.bag_sizes is None and "bag_sizes" not in one_hot.manifest["settings"]
    manifest = shards.write_multi_hot(one_hot.directory, str(tmp_path / "mh"), SIZES, seed=3)
    assert manifest["columns"]["ids"]["per_row"] == sum(SIZES) == 214
    multi = shards.ShardDataset(str(tmp_path / "mh"), checksums=True)
    assert multi.bag_sizes == SIZES and multi.num_rows == one_hot.num_rows
    a = shards.ShardStream(one_hot, 300, shuffle=False, holdout_every=7, prefetch=0)
    b = shards.ShardStream(multi, 300, shuffle=False, holdout_every=7, prefetch=0)
    for _ in range(3):
        x, y = a.next_batch(), b.next_batch()
        assert x["ids"].shape == (300, 26, 1) and y["ids"].shape == (300, 26, 100)
        assert same({k: x[k] for k in ("dense", "label")}, {k: y[k] for k in ("dense", "label")})
        np.testing.assert_array_equal(y["ids"][:, :, 0], x["ids"][:, :, 0])
        np.testing.assert_array_equal(
            (y["ids"] >= 0).sum(axis=2), np.broadcast_to(SIZES, (300, 26))
        )
        want = synthetic.mlperf_bags(x["ids"][:, :, 0], ROWS, SIZES, seed=3)
        np.testing.assert_array_equal(y["ids"][y["ids"] >= 0].reshape(300, -1), want)
    ev = shards.eval_set(multi, 50, holdout_every=7)
    assert ev["ids"].shape == (50, 26, 100)
    with pytest.raises(pp.ShardFormatError, match="already holds multi-hot"):
        shards.write_multi_hot(str(tmp_path / "mh"), str(tmp_path / "again"), SIZES)
    with pytest.raises(ValueError, match="bag_sizes: 26 ints"):
        shards.write_multi_hot(one_hot.directory, str(tmp_path / "bad"), (1, 2))


def test_data_names_the_shards_bags_for_the_ids_all_to_all(files, tmp_path):
    """``make_data`` hands the trainer the bag sizes the ids all-to-all sends: the shards'
    (None for one-hot shards), and None when the evaluation shards hold other bags (then
    the ids travel padded, which is right for any layout)."""
    import dataclasses

    from models.dlrm.configs.default import MLPERF_DCNV2_MULTI_HOT_SIZES as SIZES

    _, one_hot = files
    shards.write_multi_hot(one_hot.directory, str(tmp_path / "mh"), SIZES, seed=3)
    other = (2,) * 26
    shards.write_multi_hot(one_hot.directory, str(tmp_path / "mh2"), other, seed=3)
    base = dataclasses.replace(get_config("kaggle"), eval_rows=40, holdout_every=7)

    def bags(data, eval_data=None):
        c = dataclasses.replace(base, data=data, eval_data=eval_data)
        d = data_lib.make_data(c, 64, None)
        d.stream.close()
        return d.bag_sizes

    assert bags(one_hot.directory) is None
    assert bags(str(tmp_path / "mh")) == SIZES
    assert bags(str(tmp_path / "mh"), str(tmp_path / "mh")) == SIZES
    assert bags(str(tmp_path / "mh"), str(tmp_path / "mh2")) is None
    assert bags(str(tmp_path / "mh2")) == other
