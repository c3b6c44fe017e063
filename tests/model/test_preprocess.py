"""Preprocessing Criteo text into shards (models/dlrm/data/preprocess.py): the shards hold
bit for bit what the text reader yields (real rows, generated rows, odd lines, chunk edges),
bad lines and bad input give clear errors, and conversions resume file by file."""

import gzip
import json
import os
import re
import shutil

import numpy as np
import pytest

from bench.training.input_bench import criteo_text
from models.dlrm.configs import get_config
from models.dlrm.data import input_pipeline as ip
from models.dlrm.data import preprocess as pp
from models.dlrm.data import shards

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")
KAGGLE = os.path.join(DATA, "criteo_kaggle")
TERABYTE = os.path.join(DATA, "criteo_terabyte")
ROWS = get_config("kaggle").table_rows()
needs_data = pytest.mark.skipif(
    not os.path.isdir(KAGGLE), reason="../shared/data (real Criteo rows) is not present"
)


def text_rows(paths, data_format, skip_bad_lines=False):
    """Every row the text reader yields from ``paths`` (one pass), as shard columns."""
    labels, dense, ids, bad = [], [], [], 0
    for path in paths:
        header = ip.read_header(path) if data_format == "csv" else None
        parser = ip.LineParser(data_format, ROWS, header)
        for _, _, text in ip._Lines([path], data_format):
            try:
                label, d, i = parser(text)
            except ValueError:
                assert skip_bad_lines
                bad += 1
                continue
            labels.append(label)
            dense.append(d)
            ids.append(i)
    return np.asarray(labels, np.float32), np.stack(dense), np.stack(ids), bad


def shard_rows(directory):
    ds = shards.ShardDataset(directory, checksums=True)
    out = ds.empty(ds.num_rows)
    ds.read(0, ds.num_rows, out, 0)
    return out["label"][:, 0], out["dense"], out["ids"]


def assert_same_rows(directory, paths, data_format, skip_bad_lines=False):
    label, dense, ids, bad = text_rows(paths, data_format, skip_bad_lines)
    got = shard_rows(directory)
    assert got[0].tobytes() == label.tobytes()
    assert got[1].tobytes() == dense.tobytes()  # bit-identical floats
    assert got[2].tobytes() == ids.tobytes()
    manifest = pp.read_manifest(directory)
    assert manifest["rows"] == len(label) and manifest["bad_lines"] == bad
    return manifest


def convert(sources, out, data_format="kaggle", **kw):
    kw.setdefault("progress", False)
    return pp.convert(sources, str(out), data_format=data_format, table_rows=ROWS, **kw)


@needs_data
def test_real_kaggle_terabyte_and_csv_rows(tmp_path):
    files = [os.path.join(KAGGLE, f"dac_head8000_split_{s}.tsv") for s in ("train", "dev", "test")]
    r = convert(files, tmp_path / "kaggle")
    assert (r.rows, r.lines, r.bad_lines, r.files_converted) == (8000, 8000, 0, 3)
    m = assert_same_rows(tmp_path / "kaggle", files, "kaggle")
    assert [s["rows"] for s in m["shards"]] == [7200, 409, 391]
    assert [s["source"]["bytes"] for s in m["shards"]] == [1744474, 98922, 95122]
    tb = [os.path.join(TERABYTE, "day0_head1000.tsv")]
    assert convert(tb, tmp_path / "tb", "terabyte").rows == 1000
    assert_same_rows(tmp_path / "tb", tb, "terabyte")
    csv = [os.path.join(KAGGLE, "deepctr_criteo_sample_200.csv")]
    assert convert(csv, tmp_path / "csv", "csv").rows == 200
    assert_same_rows(tmp_path / "csv", csv, "csv")


@needs_data
def test_real_terabyte_gzip_equals_plain(tmp_path):
    src = os.path.join(TERABYTE, "day0_head1000.tsv")
    gz = tmp_path / "day_0.gz"
    gz.write_bytes(gzip.compress(open(src, "rb").read()))
    convert([src], tmp_path / "plain", "terabyte")
    convert([str(gz)], tmp_path / "gz", "terabyte")
    a, b = (pp.read_manifest(tmp_path / d)["shards"][0]["files"] for d in ("plain", "gz"))
    assert {k: v["sha256"] for k, v in a.items()} == {k: v["sha256"] for k, v in b.items()}


def test_generated_rows_across_chunk_edges(tmp_path):
    src = tmp_path / "train.txt"
    src.write_bytes(criteo_text(3000, seed=5))
    convert([str(src)], tmp_path / "big", chunk_bytes=32 << 20)
    convert([str(src)], tmp_path / "small", chunk_bytes=3000, threads=2)  # ~250 chunks
    assert_same_rows(tmp_path / "small", [str(src)], "kaggle")
    a, b = (pp.read_manifest(tmp_path / d)["shards"][0]["files"] for d in ("big", "small"))
    assert a == b


def _odd_file(path, base_seed=7):
    good = criteo_text(6, seed=base_seed).decode().splitlines(keepends=True)
    fields = good[0].rstrip("\n").split("\t")
    variants = [
        good[1].replace("\n", "\r\n"),  # CRLF: usable
        "   \n",  # whitespace only: skipped, not counted
        "\n",
        "\t".join(["1.0"] + fields[1:]) + "\n",  # label 1.0: usable
        "\t".join(fields[:1] + ["1e2", " 7", "-0"] + fields[4:]) + "\n",  # odd floats: usable
        "\t".join(fields[:14] + ["ABCDEF01"] + fields[15:]) + "\n",  # upper-case hex: usable
        "\t".join(fields[:14] + ["1234567890"] + fields[15:]) + "\n",  # 10 hex digits: usable
        "\t".join(fields[:14] + ["abc"] + fields[15:]) + "\n",  # 3 hex digits: usable
        "\t".join(fields[:14] + ["xyz"] + fields[15:]) + "\n",  # not hex: bad
        "\t".join(fields[:-1]) + "\n",  # 39 fields: bad
        "\t".join(["2"] + fields[1:]) + "\n",  # label 2: bad
        "\t".join(fields[:2] + ["seven"] + fields[3:]) + "\n",  # bad integer
        good[2],
        good[3].rstrip("\n"),  # last line without a newline
    ]
    path.write_text("".join(good[4:6] + variants))
    return 4  # bad lines


def test_odd_lines_match_the_text_reader(tmp_path):
    src = tmp_path / "odd.txt"
    bad = _odd_file(src)
    for chunk in (1 << 20, 200):
        out = tmp_path / f"out{chunk}"
        r = convert([str(src)], out, skip_bad_lines=True, chunk_bytes=chunk)
        assert (r.bad_lines, r.rows, r.lines) == (bad, 10, 16)
        assert_same_rows(out, [str(src)], "kaggle", skip_bad_lines=True)


def _edited_file(path, n, seed, edits):
    """``n`` generated lines with ``(line, field, value)`` edits, written to ``path``."""
    lines = criteo_text(n, seed=seed).decode().splitlines(keepends=True)
    for k, j, value in edits:
        fields = lines[k].split("\t")
        fields[j] = value
        lines[k] = "\t".join(fields)
    path.write_text("".join(lines))
    return str(path)


def test_non_finite_and_fractional_dense_values_follow_the_text_reader(tmp_path):
    edits = ((3, 2, "nan"), (5, 4, "1e400"), (7, 5, "2.5"), (9, 1, "-inf"))
    src = _edited_file(tmp_path / "x.txt", 20, 1, edits)
    r = convert([src], tmp_path / "o", skip_bad_lines=True)
    assert r.lines == 20 and r.rows + r.bad_lines == 20 and r.rows >= 17  # 2.5 is usable
    assert_same_rows(tmp_path / "o", [src], "kaggle", skip_bad_lines=True)


def test_minus_zero_and_hex_counts_follow_the_text_reader(tmp_path):
    """Counts an int64 parse reads otherwise than float(), each file one chunk with nothing
    else odd: "-0" is -0.0 (its transform too), "0x1f" is no number (a bad line)."""
    zeros = _edited_file(tmp_path / "z.txt", 30, 2, ((4, 3, "-0"), (11, 6, "-00")))
    assert convert([zeros], tmp_path / "z", skip_bad_lines=True).rows == 30
    dense = shard_rows(tmp_path / "z")[1]
    assert np.signbit(dense[4, 2]) and np.signbit(dense[11, 5])
    assert_same_rows(tmp_path / "z", [zeros], "kaggle")
    hexes = _edited_file(tmp_path / "h.txt", 30, 3, ((19, 2, "0x1f"), (25, 9, "0X10")))
    r = convert([hexes], tmp_path / "h", skip_bad_lines=True)
    assert (r.rows, r.bad_lines) == (28, 2)
    assert_same_rows(tmp_path / "h", [hexes], "kaggle", skip_bad_lines=True)


def _count_line_by_line(monkeypatch):
    """A list that gets the line count of every chunk converted line by line (the vectorized
    path declined it)."""
    calls = []
    real = pp.ChunkConverter._line_by_line

    def counted(self, text):
        calls.append(text.count(b"\n"))
        return real(self, text)

    monkeypatch.setattr(pp.ChunkConverter, "_line_by_line", counted)
    return calls


def _set_fields(lines, edits):
    """``lines`` (text lines) with ``{line: {field: value}}`` edits."""
    out = []
    for k, line in enumerate(lines):
        fields = line.rstrip("\n").split("\t")
        for j, value in edits.get(k, {}).items():
            fields[j] = value
        out.append("\t".join(fields) + "\n")
    return out


def test_vectorized_path_takes_upper_case_ids_empty_columns_and_big_counts(tmp_path, monkeypatch):
    """Upper- and mixed-case hex ids, a column without an empty id, a column of empty ids
    only, the largest id, counts past int32 (parsed as int64) and past int64 (parsed as
    float64), and lines without any id are converted vectorized, with the text reader's
    values."""
    calls = _count_line_by_line(monkeypatch)
    rng = np.random.default_rng(11)
    lines = criteo_text(300, seed=11).decode().splitlines(keepends=True)
    edits = {}
    for k, line in enumerate(lines):
        f = line.split("\t")
        edits[k] = {14: f"{rng.integers(0, 2**32):08X}", 15: "", 16: f[16][:4].upper() + f[16][4:]}
        if k % 7 == 0:
            edits[k][39] = "ffffffff"
    plain = _set_fields(lines, edits)
    files = {"plain": plain}
    files["int64"] = _set_fields(plain, {5: {2: "3000000000"}, 9: {13: "-2147483649"}})
    files["float64"] = _set_fields(plain, {200: {3: "20000000000000000000"}})
    files["no_ids"] = _set_fields(lines, {k: dict.fromkeys(range(14, 40), "") for k in range(300)})
    for name, text in files.items():
        src = tmp_path / f"{name}.txt"
        src.write_text("".join(text))
        assert convert([str(src)], tmp_path / name).rows == 300
        assert_same_rows(tmp_path / name, [str(src)], "kaggle")
    assert calls == []
    ids = shard_rows(tmp_path / "plain")[2]
    assert (ids[:, 1] == 0).all() and (ids[::7, 25] == 0xFFFFFFFF % ROWS[25]).all()


def test_ids_with_one_non_hex_character_follow_the_text_reader(tmp_path, monkeypatch):
    """An 8-character id with one character that is no hex digit, at each of the 8 positions
    (characters next to the digit and letter ranges, control characters that ``c | 0x20``
    would make digits, NUL, DEL, and " ", "_", "+" that Python's ``int`` would take), makes
    the vectorized check decline its chunk (one line each): the text reader's rules decide
    (a bad line), and the other chunks stay vectorized."""
    calls = _count_line_by_line(monkeypatch)
    chars = "/:@G`g\x00\x10\x19\x7f _+"
    good = criteo_text(2 * 8 * len(chars), seed=12).decode().splitlines(keepends=True)
    edits = {}
    for pos in range(8):
        for i, ch in enumerate(chars):
            k = 2 * (pos * len(chars) + i)
            value = "0123abcd"
            edits[k] = {14 + (k // 2) % 26: value[:pos] + ch + value[pos + 1 :]}
    src = tmp_path / "ids.txt"
    src.write_bytes("".join(_set_fields(good, edits)).encode())
    r = convert([str(src)], tmp_path / "o", skip_bad_lines=True, chunk_bytes=100)
    assert (r.lines, r.bad_lines) == (len(good), len(edits))
    assert_same_rows(tmp_path / "o", [str(src)], "kaggle", skip_bad_lines=True)
    assert calls == [1] * len(edits)


def test_ids_modulo_the_smallest_and_the_largest_tables(tmp_path, monkeypatch):
    """Tables of 1, 3, 2**31 - 1 and 2**31 rows take ids modulo them as the text reader
    does; rows outside [1, 2**31] are a ValueError naming table_rows."""
    calls = _count_line_by_line(monkeypatch)
    rows = [1, 3, 2**31 - 1, 2**31] + list(ROWS[4:])
    rng = np.random.default_rng(13)
    lines = criteo_text(200, seed=13).decode().splitlines(keepends=True)
    picks = ["ffffffff", "80000000", "7fffffff", "00000000", "7FFFFFFE"]
    edits = {k: {14 + j: picks[rng.integers(0, len(picks))] for j in range(4)} for k in range(200)}
    src = tmp_path / "t.txt"
    src.write_text("".join(_set_fields(lines, edits)))
    pp.convert(
        [str(src)], str(tmp_path / "o"), data_format="kaggle", table_rows=rows, progress=False
    )
    parser = ip.LineParser("kaggle", rows)
    want = np.stack([parser(line)[2] for line in src.read_text().splitlines()])
    got = shard_rows(tmp_path / "o")[2]
    assert got.tobytes() == want.tobytes() and calls == []
    assert (got[:, 0] == 0).all() and got[:, 3].max() == 2**31 - 1
    for bad in (0, 2**31 + 1):
        with pytest.raises(ValueError, match="table_rows"):
            pp.convert([str(src)], str(tmp_path / "x"), data_format="kaggle",
                       table_rows=[bad] + rows[1:], progress=False)  # fmt: skip


def test_bad_line_error_names_file_and_line(tmp_path):
    src = tmp_path / "day_3"
    good = criteo_text(50, seed=3).decode().splitlines(keepends=True)
    good[36] = good[36].replace("\t", " ", 1)
    src.write_text("".join(good))
    text = ip.CriteoFileStream([str(src)], "kaggle", ROWS, 64)
    with pytest.raises(ip.MalformedLineError) as want:
        text.next_batch()
    for chunk in (1 << 20, 500):
        with pytest.raises(ip.MalformedLineError) as got:
            convert([str(src)], tmp_path / f"o{chunk}", chunk_bytes=chunk)
        assert str(got.value) == str(want.value)
        assert f"{src}:37:" in str(got.value)
        assert not (tmp_path / f"o{chunk}" / "part-00000.ids").exists()


def test_csv_header_columns_in_any_order(tmp_path):
    names = ["C3", "label"] + [f"I{i}" for i in range(1, 14)] + ["x"]
    names += [f"C{i}" for i in range(1, 27) if i != 3]
    rows = []
    rng = np.random.default_rng(0)
    for k in range(40):
        cells = {"label": str(k % 2), "x": "zz"}
        cells.update({f"I{i}": f"{rng.integers(0, 500)}.0" if k % 3 else "" for i in range(1, 14)})
        cells.update({f"C{i}": f"{rng.integers(0, 2**32):08x}" for i in range(1, 27)})
        cells["C7"] = "not-hex" if k % 5 == 0 else cells["C7"]
        rows.append(",".join(cells[n] for n in names))
    src = tmp_path / "sample.csv"
    src.write_text(",".join(names) + "\n" + "\n".join(rows) + "\n")
    assert convert([str(src)], tmp_path / "o", "csv").rows == 40
    assert_same_rows(tmp_path / "o", [str(src)], "csv")


def test_truncated_gzip_is_an_error(tmp_path):
    data = gzip.compress(criteo_text(20000, seed=1))
    src = tmp_path / "day_0.gz"
    src.write_bytes(data[: len(data) // 2])
    with pytest.raises(pp.ShardFormatError, match="day_0.gz: cannot read to the end"):
        convert([str(src)], tmp_path / "o", "terabyte")
    assert not pp.read_manifest(tmp_path / "o")["complete"]
    assert not (tmp_path / "o" / "part-00000.label").exists()
    with pytest.raises(pp.ShardFormatError, match="not finished"):
        shards.ShardDataset(str(tmp_path / "o"))
    corrupt = bytearray(data)
    corrupt[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # zeroed bytes: CRC differs
    src.write_bytes(corrupt)
    with pytest.raises(pp.ShardFormatError, match="day_0.gz: cannot read to the end"):
        convert([str(src)], tmp_path / "o2", "terabyte")


def test_file_changing_while_read_is_an_error(tmp_path, monkeypatch):
    src = tmp_path / "train.txt"
    src.write_bytes(criteo_text(2000, seed=1))
    chunks = pp.text_chunks

    def growing(path, *args):
        for k, item in enumerate(chunks(path, *args)):
            if k == 1:
                with open(path, "ab") as f:
                    f.write(criteo_text(10, seed=2))
            yield item

    monkeypatch.setattr(pp, "text_chunks", growing)
    with pytest.raises(pp.SourceChangedError, match="changed while it was read"):
        convert([str(src)], tmp_path / "o", chunk_bytes=50_000)
    assert not (tmp_path / "o" / "part-00000.label").exists()


def _three_files(tmp_path):
    paths = []
    for k in range(3):
        p = tmp_path / f"day_{k}"
        p.write_bytes(criteo_text(500 + 100 * k, seed=10 + k))
        paths.append(str(p))
    return paths


def test_day_split_last_day_into_test_and_val(tmp_path):
    paths = _three_files(tmp_path)[:2]
    last = tmp_path / "day_23"
    last.write_bytes(criteo_text(701, seed=23))
    paths.append(str(last))
    got = pp.day_split(paths, str(tmp_path / "tb"), data_format="terabyte", table_rows=ROWS,
                       progress=False)  # fmt: skip
    assert (got["train"].rows, got["test"], got["val"]) == (1100, 351, 350)
    assert_same_rows(tmp_path / "tb" / "train", paths[:2], "terabyte")
    assert not (tmp_path / "tb" / "day_last").exists()
    convert(paths[2:], tmp_path / "d23", "terabyte")
    day = shard_rows(tmp_path / "d23")
    test, val = shard_rows(tmp_path / "tb" / "test"), shard_rows(tmp_path / "tb" / "val")
    for k in range(3):  # test: the first half (rounded up), val: the rest, same bytes
        assert np.concatenate([test[k], val[k]]).tobytes() == day[k].tobytes()
    assert len(test[0]) == 351
    assert pp.read_manifest(tmp_path / "tb" / "val")["split"]["rows"] == [351, 701]
    again = pp.day_split(paths, str(tmp_path / "tb"), data_format="terabyte", table_rows=ROWS,
                         progress=False)  # fmt: skip
    assert (again["train"].files_skipped, again["test"], again["val"]) == (2, 351, 350)
    with pytest.raises(ValueError, match="at least two"):
        pp.day_split(paths[:1], str(tmp_path / "x"), data_format="terabyte", table_rows=ROWS)


def test_resume_file_by_file(tmp_path, monkeypatch):
    paths = _three_files(tmp_path)
    convert(paths, tmp_path / "fresh")
    real = pp._convert_file

    def dies_on_second(path, shard, *a):
        if shard == "part-00001":
            raise KeyboardInterrupt
        return real(path, shard, *a)

    monkeypatch.setattr(pp, "_convert_file", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        convert(paths, tmp_path / "resumed")
    m = pp.read_manifest(tmp_path / "resumed")
    assert not m["complete"] and len(m["shards"]) == 1
    monkeypatch.setattr(pp, "_convert_file", real)
    r = convert(paths, tmp_path / "resumed")
    assert (r.files_skipped, r.files_converted, r.rows) == (1, 2, 600 + 700)
    a, b = (pp.read_manifest(tmp_path / d) for d in ("fresh", "resumed"))
    assert [s["files"] for s in a["shards"]] == [s["files"] for s in b["shards"]]
    assert b["complete"] and b["rows"] == 1800
    # Nothing left to do: a third run converts nothing.
    assert convert(paths, tmp_path / "resumed").files_converted == 0


def test_resume_refuses_changed_sources_and_settings(tmp_path):
    paths = _three_files(tmp_path)
    convert(paths, tmp_path / "o")
    with pytest.raises(pp.ShardFormatError, match="other settings or sources"):
        convert(paths[:2], tmp_path / "o")
    with pytest.raises(pp.ShardFormatError, match="other settings or sources"):
        convert(paths, tmp_path / "o", skip_bad_lines=True)
    with open(paths[1], "ab") as f:
        f.write(criteo_text(1, seed=99))
    with pytest.raises(pp.SourceChangedError, match="changed since it was converted"):
        convert(paths, tmp_path / "o")


def test_manifest_of_another_version_is_an_error(tmp_path, capsys):
    paths = _three_files(tmp_path)[:1]
    convert(paths, tmp_path / "o")
    path = tmp_path / "o" / "manifest.json"
    m = json.loads(path.read_text())
    m["version"] = pp.FORMAT_VERSION + 1
    path.write_text(json.dumps(m))
    for use in (
        lambda: shards.ShardDataset(str(tmp_path / "o")),
        lambda: convert(paths, tmp_path / "o"),
    ):
        with pytest.raises(pp.ShardFormatError, match=f"version {pp.FORMAT_VERSION + 1}"):
            use()
    capsys.readouterr()
    assert pp.main(["--verify", str(tmp_path / "o")]) == 2  # the command: one line, exit 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f"version {pp.FORMAT_VERSION + 1}" in err
    assert err.count("\n") == 1


def test_command_line_takes_the_tables_of_the_data_format(tmp_path):
    # Terabyte rows hashed into the Kaggle preset's tables (the old default) could not train
    # with the terabyte preset: the trainer refused the shards.
    paths = _three_files(tmp_path)[:1]
    assert pp.main([*paths, "--out", str(tmp_path / "t"), "--data-format", "terabyte"]) == 0
    rows = pp.read_manifest(tmp_path / "t")["settings"]["table_rows"]
    assert tuple(rows) == get_config("terabyte").table_rows() != get_config("kaggle").table_rows()


def test_command_line_names_a_missing_source_in_one_line(tmp_path, capsys):
    assert pp.main([str(tmp_path / "nope.txt"), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == f"error: no data files match '{tmp_path / 'nope.txt'}'\n"


def test_command_line_empty_sources_and_a_folder_without_manifest(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    out = tmp_path / "o"
    assert pp.main([str(empty), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: no rows in {empty} (0 lines, 0 bad): the shards in {out} hold nothing to "
        "train on (empty files?)\n"
    )
    assert pp.main(["--verify", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path}: no manifest.json, so not a shard folder")
    assert err.count("\n") == 1


def test_command_line_help_describes_every_flag(capsys):
    with pytest.raises(SystemExit):
        pp.main(["--help"])
    text = capsys.readouterr().out
    assert "Converts Criteo text" in text and "examples:" in text
    assert not re.search(
        r"\bissues? \d", text
    )  # the module's implementation notes stay out of --help
    for flag in ("--data-format", "--skip-bad-lines", "--chunk-mb", "--threads", "--no-progress"):
        line = text[text.index(f"  {flag}") :].split("\n  -")[0]
        assert len(line.split()) > 3, line  # a description beside the flag


def test_shards_that_do_not_match_the_manifest_are_errors(tmp_path):
    paths = _three_files(tmp_path)[:2]
    convert(paths, tmp_path / "o")
    shutil.copytree(tmp_path / "o", tmp_path / "short")
    ids = tmp_path / "short" / "part-00001.ids"
    ids.write_bytes(ids.read_bytes()[:-104])  # one row short
    with pytest.raises(pp.ShardFormatError, match="part-00001.ids: .* bytes, the manifest says"):
        shards.ShardDataset(str(tmp_path / "short"))
    shutil.copytree(tmp_path / "o", tmp_path / "flipped")
    dense = tmp_path / "flipped" / "part-00000.dense"
    raw = bytearray(dense.read_bytes())
    raw[1000] ^= 1
    dense.write_bytes(bytes(raw))
    shards.ShardDataset(str(tmp_path / "flipped"))  # sizes match: only a checksum tells
    with pytest.raises(pp.ShardFormatError, match="part-00000.dense: SHA-256 differs"):
        shards.ShardDataset(str(tmp_path / "flipped"), checksums=True)
    with pytest.raises(pp.ShardFormatError, match="SHA-256 differs"):
        pp.verify_shards(str(tmp_path / "flipped"), pp.read_manifest(str(tmp_path / "flipped")))
    assert pp.main(["--verify", str(tmp_path / "flipped")]) == 2
    (tmp_path / "o" / "part-00000.label").unlink()
    with pytest.raises(pp.ShardFormatError, match="part-00000.label: missing"):
        shards.ShardDataset(str(tmp_path / "o"))


def test_command_line(tmp_path, capsys):
    paths = _three_files(tmp_path)
    out = tmp_path / "o"
    assert pp.main([*paths, "--out", str(out), "--no-progress", "--max-ind-range", "1000"]) == 0
    assert "1800 rows from 1800 lines of 3 files" in capsys.readouterr().out
    m = pp.read_manifest(out)
    assert m["settings"]["table_rows"] == [min(c, 1000) for c in get_config("kaggle").cardinalities]
    assert pp.main(["--verify", str(out)]) == 0
    assert shard_rows(out)[2].max() < 1000
