"""Criteo text -> binary shards, once, streaming with bounded memory.

Reads Criteo Kaggle ``train.txt``, Criteo 1TB ``day_N`` (plain or ``.gz``) or the trainer's CSV
layout (see ``input_pipeline``) and writes, per source file, one shard of three raw
little-endian column files plus one ``manifest.json`` for the folder:

* ``part-NNNNN.label``: float32[rows] (0.0 or 1.0)
* ``part-NNNNN.dense``: float32[rows, 13], after ``input_pipeline.transform_dense``
* ``part-NNNNN.ids``: int32[rows, 26], hashed into each table's rows (the ``--max-ind-range``
  rule of ``input_pipeline.LineParser``)

Row ``i`` of a shard is the ``i``-th usable line of its source, so a shard reader sees exactly
the rows the text reader yields, in the same order, with bit-identical values.

The conversion of a chunk of text is ``chunk_convert``'s, the shard format (columns,
manifest, checks) ``shard_format``'s.

Resume: the manifest is rewritten (atomically) after every finished source file; running the
same command again skips finished files whose source and outputs still match and redoes the
rest. Changed settings, a changed source or a manifest of another format version are errors.

Usage::

    python -m models.dlrm.data.preprocess /data/criteo/train.txt --out /data/kaggle_shards \\
        --config kaggle --max-ind-range 10000000
    python -m models.dlrm.data.preprocess '/data/tb/day_*.gz' --out /data/tb_shards \\
        --data-format terabyte --config terabyte
    python -m models.dlrm.data.preprocess '/data/tb/day_*.gz' --out /data/tb_split \\
        --data-format terabyte --config terabyte --day-split   # train/, val/, test/
    python -m models.dlrm.data.preprocess --verify /data/kaggle_shards

References:
  facebookresearch/dlrm ``data_utils.py`` (transform, ``--max-ind-range``); the binary
  layouts of TorchRec (``criteo`` numpy files) and NVIDIA's DLRM (split binary).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import shutil
import sys
import time
from collections import deque

import numpy as np

from jax_lossy_comm.optional_deps import MissingDependencyError, import_optional
from models.dlrm.data import input_pipeline as ip
from models.dlrm.data.chunk_convert import BadLine, ChunkConverter
from models.dlrm.data.shard_format import (
    COLUMNS,
    FORMAT,
    FORMAT_VERSION,
    HASH_PIECE,
    MANIFEST,
    TRANSFORM,
    ColumnWriter,
    ShardFormatError,
    SourceChangedError,
    column_widths,
    read_manifest,
    verify_shards,
    write_manifest,
)
from models.dlrm.data.text_source import source_stat, text_chunks

# ------------------------------------------------------------------------------------------
# Conversion
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    """What a conversion did: rows and lines written, bad lines skipped, seconds, bytes out."""

    rows: int
    lines: int
    bad_lines: int
    seconds: float
    output_bytes: int
    files_converted: int
    files_skipped: int


def _convert_file(path, shard, out_dir, converter, chunk_bytes, threads, progress):
    csv_header = converter.data_format == "csv"
    writers = {name: ColumnWriter(os.path.join(out_dir, f"{shard}.{name}")) for name in COLUMNS}
    before, start = source_stat(path), time.perf_counter()
    rows = lines = bad = 0
    first_line = 2 if csv_header else 1
    try:
        with concurrent.futures.ThreadPoolExecutor(threads) as pool_ex:
            pending, pool = deque(), []  # chunks being converted; free slots

            def drain(limit):
                nonlocal rows, lines, bad
                while len(pending) > limit:
                    future, slot = pending.popleft()
                    try:
                        part = future.result()
                    except BadLine as e:
                        raise ip.MalformedLineError(
                            f"{path}:{first_line + lines + e.k}: {e}"
                            " (use --skip-bad-lines to skip such lines)"
                        ) from None
                    for name in COLUMNS:
                        writers[name].write(getattr(part, name))
                    pool.append(slot)
                    rows, lines, bad = (
                        rows + len(part.label),
                        lines + part.lines,
                        bad + part.bad_lines,
                    )
                    if progress is not None:
                        progress.update(part.lines)

            for slot, lo, hi in text_chunks(path, chunk_bytes, csv_header, pool):
                pending.append((pool_ex.submit(converter, slot, lo, hi), slot))
                drain(threads)
            drain(0)
        if source_stat(path) != before:
            raise SourceChangedError(
                f"{path} changed while it was read (size or mtime); "
                "convert it again when it is complete"
            )
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    files = {name: w.finish() for name, w in writers.items()}
    return {
        "seconds": round(time.perf_counter() - start, 3),
        "name": shard,
        "source": {"path": os.path.abspath(path), **before},
        "rows": rows,
        "lines": lines,
        "bad_lines": bad,
        "files": files,
    }


def convert(
    sources,
    out_dir: str,
    *,
    data_format: str,
    table_rows,
    skip_bad_lines: bool = False,
    chunk_bytes: int = 4 << 20,
    threads: int | None = None,
    progress: bool = True,
) -> Report:
    """Converts Criteo text files to shards in ``out_dir`` (resuming a conversion there).

    Args:
      sources: file, folder or glob (``input_pipeline.expand_paths``), or a list of files;
        plain or gzip (detected by its magic bytes), read in order.
      out_dir: output folder (created); holds ``manifest.json`` and the shard files.
      data_format: "kaggle", "terabyte" or "csv" (as the trainer's ``--data-format``).
      table_rows: 26 ints in ``[1, 2**31]``, rows per table (ids are taken modulo them).
      skip_bad_lines: skip and count malformed lines instead of raising.
      chunk_bytes: text bytes per chunk (memory is about ``(threads + 2) * 6 * chunk_bytes``).
      threads: chunks converted at once (default: CPU count).
      progress: show a tqdm bar of lines (rate in lines/s).

    Returns:
      A ``Report``.

    Raises:
      MalformedLineError: a bad line (``path:line``) unless ``skip_bad_lines``.
      ShardFormatError: a truncated gzip, a manifest in ``out_dir`` of another version, or
        with other settings or sources, or finished shards that no longer match it.
      SourceChangedError: a source file changed while read or since it was converted.
      FileNotFoundError: no source file.
      ValueError: ``table_rows`` not 26 ints in ``[1, 2**31]``.
      MissingDependencyError: pyarrow, or for a gzip source isal, is not installed (both in
        the extra ``train``).
    """
    paths = list(sources) if not isinstance(sources, str) else ip.expand_paths(sources)
    if not paths:
        raise FileNotFoundError("no source files")
    table_rows = [int(r) for r in table_rows]
    if len(table_rows) != ip.NUM_SPARSE or not all(1 <= r <= 1 << 31 for r in table_rows):
        raise ValueError(
            f"table_rows: {ip.NUM_SPARSE} ints in [1, 2**31] (ids are int32), got {table_rows}"
        )
    threads = threads or os.cpu_count() or 1
    os.makedirs(out_dir, exist_ok=True)
    settings = {
        "data_format": data_format,
        "table_rows": table_rows,
        "skip_bad_lines": bool(skip_bad_lines),
    }
    names = [os.path.abspath(p) for p in paths]
    done = []
    if os.path.exists(os.path.join(out_dir, MANIFEST)):
        old = read_manifest(out_dir)
        if old["settings"] != settings or old["sources"] != names:
            raise ShardFormatError(
                f"{out_dir} holds shards of other settings or sources ({old['settings']}, "
                f"{len(old['sources'])} sources); use another folder or delete it"
            )
        for shard in old["shards"]:
            if source_stat(shard["source"]["path"]) != {
                k: shard["source"][k] for k in ("bytes", "mtime_ns")
            }:
                raise SourceChangedError(
                    f"{shard['source']['path']} changed since it was "
                    f"converted into {shard['name']}; use a new folder"
                )
        verify_shards(out_dir, dict(old, complete=True), checksums=False)
        done = old["shards"]
    manifest = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "settings": settings,
        "transform": TRANSFORM,
        "columns": {k: {"dtype": d, "per_row": w} for k, (d, w) in COLUMNS.items()},
        "sources": names,
        "shards": list(done),
        "complete": False,
    }
    write_manifest(out_dir, manifest)
    bar = None
    if progress:
        tqdm = import_optional("tqdm", "tqdm", "train", "the progress bar").tqdm

        bar = tqdm(unit=" lines", unit_scale=True, dynamic_ncols=True, file=sys.stderr)
    start = time.perf_counter()
    try:
        for k in range(len(done), len(paths)):
            path = paths[k]
            header = ip.read_header(path) if data_format == "csv" else None
            converter = ChunkConverter(path, data_format, table_rows, header, skip_bad_lines)
            if bar is not None:
                bar.set_description(os.path.basename(path))
            manifest["shards"].append(
                _convert_file(path, f"part-{k:05d}", out_dir, converter, chunk_bytes, threads, bar)
            )
            write_manifest(out_dir, manifest)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - start
    manifest["rows"] = sum(s["rows"] for s in manifest["shards"])
    manifest["bad_lines"] = sum(s["bad_lines"] for s in manifest["shards"])
    manifest["complete"] = True
    write_manifest(out_dir, manifest)
    new = manifest["shards"][len(done) :]
    return Report(
        rows=sum(s["rows"] for s in new),
        lines=sum(s["lines"] for s in new),
        bad_lines=sum(s["bad_lines"] for s in new),
        seconds=seconds,
        output_bytes=sum(f["bytes"] for s in new for f in s["files"].values()),
        files_converted=len(new),
        files_skipped=len(done),
    )


def split_rows(src_dir: str, parts: dict[str, tuple[int, int]]) -> None:
    """Copies row ranges of a finished one-shard folder into new shard folders.

    Args:
      src_dir: a complete shard folder holding one non-empty shard (one source file).
      parts: output folder -> ``(first_row, stop_row)`` of the source shard's rows.

    Each output gets one shard of those rows (files hashed as written, read and written in
    pieces: memory stays flat) and a manifest of the source's settings with
    ``"split": {"from": src_dir, "rows": [first_row, stop_row]}``.

    Raises:
      ShardFormatError: ``src_dir`` is not complete or holds other than one shard.
      ValueError: a row range outside the shard or empty.
    """
    manifest = read_manifest(src_dir)
    verify_shards(src_dir, manifest, checksums=False)
    if len(manifest["shards"]) != 1:
        raise ShardFormatError(f"{src_dir}: {len(manifest['shards'])} shards, split needs one")
    shard = manifest["shards"][0]
    for out_dir, (lo, hi) in parts.items():
        if not 0 <= lo < hi <= shard["rows"]:
            raise ValueError(f"rows [{lo}, {hi}) for {out_dir}: the shard has {shard['rows']}")
        os.makedirs(out_dir, exist_ok=True)
        files = {}
        for name, (dtype, width) in column_widths(manifest).items():
            row_bytes = width * np.dtype(dtype).itemsize
            writer = ColumnWriter(os.path.join(out_dir, f"part-00000.{name}"))
            with open(os.path.join(src_dir, shard["files"][name]["file"]), "rb") as f:
                f.seek(lo * row_bytes)
                left = (hi - lo) * row_bytes
                while left:
                    piece = f.read(min(left, HASH_PIECE))
                    writer.write(np.frombuffer(piece, np.uint8))
                    left -= len(piece)
            files[name] = writer.finish()
        part = dict(shard, name="part-00000", rows=hi - lo, lines=hi - lo, bad_lines=0)
        part["files"] = files
        out = dict(manifest, shards=[part], rows=hi - lo, bad_lines=0)
        out["split"] = {"from": os.path.abspath(src_dir), "rows": [lo, hi]}
        write_manifest(out_dir, out)


def day_split(sources, out_dir: str, **convert_kw) -> dict[str, Report | int]:
    """Criteo 1TB's split: every source but the last (days 0-22) -> ``out_dir/train``; the
    last (day 23) -> its first ``ceil(n / 2)`` rows ``out_dir/test``, the rest ``out_dir/val``
    (NVIDIA DeepLearningExamples DLRM ``preproc/run_spark_cpu.sh``, the split MLPerf DLRM
    and TorchRec's Criteo 1TB pipeline use: day 23 is for validation and testing).

    Args:
      sources: files in day order (``input_pipeline.expand_paths`` sorts ``day_N`` by N).
      out_dir: parent folder of ``train``, ``val`` and ``test`` (and, while it is split, the
        last day's own shards in ``day_last``, removed afterwards).
      convert_kw: ``convert``'s keyword arguments (``data_format``, ``table_rows``, ...).

    Returns:
      ``{"train": Report, "val": rows, "test": rows}``. Running it again resumes: finished
      folders are kept.

    Raises:
      ValueError: fewer than two sources. Otherwise as ``convert`` and ``split_rows``.
    """
    paths = list(sources) if not isinstance(sources, str) else ip.expand_paths(sources)
    if len(paths) < 2:
        raise ValueError(f"a day split needs at least two source files, got {len(paths)}")
    train = convert(paths[:-1], os.path.join(out_dir, "train"), **convert_kw)
    val, test = os.path.join(out_dir, "val"), os.path.join(out_dir, "test")
    done = all(
        os.path.exists(os.path.join(d, MANIFEST)) and read_manifest(d).get("complete")
        for d in (val, test)
    )
    if not done:
        last = os.path.join(out_dir, "day_last")
        convert(paths[-1:], last, **convert_kw)
        n = read_manifest(last)["rows"]
        split_rows(last, {test: (0, (n + 1) // 2), val: ((n + 1) // 2, n)})
        shutil.rmtree(last)
    return {"train": train, "val": read_manifest(val)["rows"], "test": read_manifest(test)["rows"]}


_CLI_DESCRIPTION = (
    "Converts Criteo text (Kaggle train.txt, 1TB day_N, plain or .gz, or the trainer's CSV) "
    "into binary shards once, streaming with bounded memory; train from them with "
    "python -m models.dlrm.train --data DIR. Rerunning the same command resumes an "
    "interrupted conversion file by file."
)


def main(argv=None) -> int:
    """The command line (see the module docstring). Returns the exit status: 0, or 2 with one
    line for a missing source, a malformed line (without --skip-bad-lines), a bad gzip, a
    source that changed while read, or shards that do not match their manifest."""
    p = argparse.ArgumentParser(
        prog="python -m models.dlrm.data.preprocess",
        description=_CLI_DESCRIPTION,
        epilog="examples:" + __doc__.split("Usage::")[1].split("References:")[0].rstrip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("sources", nargs="*", help="files, folders or globs, in order")
    p.add_argument("--out", help="output folder of shards")
    p.add_argument(
        "--data-format",
        default="kaggle",
        choices=("kaggle", "terabyte", "csv"),
        help="layout of the sources: Criteo Kaggle train.txt, Criteo 1TB day_N (both 40 "
        "tab-separated fields, plain or .gz) or the trainer's CSV with a header (default: kaggle)",
    )
    p.add_argument(
        "--config",
        default=None,
        help="preset whose tables to use (default: terabyte for --data-format terabyte, else "
        "kaggle); the trainer must run with the same tables",
    )
    p.add_argument(
        "--max-ind-range", type=int, default=None, help="cap on table rows (default: the preset's)"
    )
    p.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip and count malformed lines instead of stopping at the first (FILE:LINE)",
    )
    p.add_argument(
        "--chunk-mb",
        type=int,
        default=4,
        help="text handed to a parsing thread at a time, MiB (default: 4)",
    )
    p.add_argument("--threads", type=int, default=0, help="parsing threads (0: one per CPU core)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (lines/s)")
    p.add_argument("--verify", metavar="DIR", help="check a shard folder's sizes and SHA-256")
    p.add_argument(
        "--day-split",
        action="store_true",
        help="Criteo 1TB: the last source (day 23) -> OUT/test (first half of its rows, "
        "rounded up) and OUT/val (the rest), the others -> OUT/train",
    )
    a = p.parse_args(argv)
    if not a.verify and (not a.sources or not a.out):
        p.error("give source files and --out (or --verify DIR)")
    try:
        return _run(a)
    except (
        FileNotFoundError,
        ip.DataError,
        ShardFormatError,
        SourceChangedError,
        MissingDependencyError,
    ) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(a: argparse.Namespace) -> int:
    """The command ``main`` parsed: verify, or convert (with the day split)."""
    from models.dlrm.configs import get_config

    if a.verify:
        if not os.path.isfile(os.path.join(a.verify, MANIFEST)):
            raise ShardFormatError(
                f"{a.verify}: no {MANIFEST}, so not a shard folder (python -m "
                "models.dlrm.data.preprocess SOURCES --out DIR writes one)"
            )
        verify_shards(a.verify, read_manifest(a.verify))
        print(f"{a.verify}: every shard matches its manifest")
        return 0
    cfg = get_config(a.config or ("terabyte" if a.data_format == "terabyte" else "kaggle"))
    if a.max_ind_range is not None:
        cfg = dataclasses.replace(cfg, max_ind_range=a.max_ind_range)
    paths = [f for s in a.sources for f in ip.expand_paths(s)]
    kw = dict(
        data_format=a.data_format,
        table_rows=cfg.table_rows(),
        skip_bad_lines=a.skip_bad_lines,
        chunk_bytes=a.chunk_mb << 20,
        threads=a.threads or None,
        progress=not a.no_progress,
    )
    if a.day_split:
        split = day_split(paths, a.out, **kw)
        r, where = split["train"], os.path.join(a.out, "train")
    else:
        r, where = convert(paths, a.out, **kw), a.out
    print(
        f"{r.rows} rows from {r.lines} lines of {r.files_converted} files "
        f"({r.files_skipped} already done), {r.bad_lines} bad lines skipped, "
        f"{r.output_bytes / 1e9:.2f} GB in {r.seconds:.1f} s "
        f"({r.lines / max(r.seconds, 1e-9):,.0f} lines/s) -> {where}"
    )
    if a.day_split:
        print(f"last day: {split['test']} rows -> {a.out}/test, {split['val']} rows -> {a.out}/val")
    if r.rows == 0:
        raise ip.DataError(
            f"no rows in {' '.join(a.sources)} ({r.lines} lines, {r.bad_lines} bad): the shards "
            f"in {where} hold nothing to train on (empty files?)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
