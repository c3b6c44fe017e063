"""Readers and preprocessing for Criteo Kaggle DAC, Criteo Terabyte and CSV click logs.

Formats:
* ``kaggle``: DAC ``train.txt``: 40 tab-separated fields, no header: label, I1..I13
  (integers, may be empty or negative), C1..C26 (8-hex-digit hashes, may be empty).
* ``terabyte``: Criteo 1TB Click Logs ``day_N``: the same 40-field layout.
* ``csv``: comma-separated with a header naming ``label``, ``I1``..``I13``, ``C1``..``C26``
  (DeepCTR's ``criteo_sample.txt`` layout; integers may be written as floats).

Preprocessing (facebookresearch/dlrm ``data_utils.py``): dense ``log(1 + max(x, 0))``,
missing = 0; categorical: the hex hash (or, for non-hex CSV values, CRC-32 of the string)
modulo the table's rows (the ``--max-ind-range`` cap), missing = 0.

Streaming: files are read line by line (bounded memory), any size. A position
``{"file", "offset", "line", "train_index", "epoch"}`` after every batch lets training resume
exactly where it stopped. The training stream wraps around at the end (epochs).
Multi-process: training line ``k`` goes to process ``(k // local_batch) % num_processes``,
so the processes' shares of global batch ``g`` are consecutive blocks of it.
"""

from __future__ import annotations

import csv
import glob
import os
import re
import zlib

import numpy as np

NUM_DENSE = 13
NUM_SPARSE = 26
NUM_FIELDS = 1 + NUM_DENSE + NUM_SPARSE


class DataError(ValueError):
    """Data the trainer cannot use (the message says which and why); the command line
    prints it as one line."""


class MalformedLineError(DataError):
    """A data line that cannot be parsed; the message names the file and line number."""


def expand_paths(spec: str) -> list[str]:
    """A file, a folder (all regular files in it) or a glob -> sorted file list.

    ``day_N`` files sort by N. Raises FileNotFoundError when nothing matches.
    """
    if os.path.isdir(spec):
        paths = [
            os.path.join(spec, f)
            for f in os.listdir(spec)
            if os.path.isfile(os.path.join(spec, f)) and not f.startswith(".")
        ]
    elif os.path.isfile(spec):
        paths = [spec]
    else:
        paths = [p for p in glob.glob(spec) if os.path.isfile(p)]
    if not paths:
        raise FileNotFoundError(f"no data files match {spec!r}")

    def key(p):
        return [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", os.path.basename(p))]

    return sorted(paths, key=key)


def _cat_id(value: str, rows: int) -> int:
    if not value:
        return 0
    try:
        v = int(value, 16)
    except ValueError:
        v = zlib.crc32(value.encode())
    return v % rows


def _dense_raw(value: str) -> float:
    return float(value) if value else 0.0


def transform_dense(raw: np.ndarray) -> np.ndarray:
    """The dense transform ``log(1 + max(x, 0))`` (reference DLRM ``data_utils.py``).

    Args:
      raw: float64[...] integer features as read (missing = 0.0; NaN stays NaN).

    Returns:
      float32[...] of the same shape. The one definition shared by the text reader and the
      shard preprocessing (``models.dlrm.data.preprocess``), so both give bit-identical values.
    """
    return np.log1p(np.where(0.0 > raw, 0.0, raw)).astype(np.float32)


class LineParser:
    """Parses one text line into (label, dense[13], ids[26]).

    Args:
      data_format: "kaggle", "terabyte" or "csv".
      table_rows: rows per table (26 ints); ids are taken modulo these.
      header: for "csv", the header line (column names); ignored otherwise.
    """

    def __init__(self, data_format: str, table_rows, header: str | None = None):
        if data_format not in ("kaggle", "terabyte", "csv"):
            raise ValueError(f"unknown data format {data_format!r}")
        if len(table_rows) != NUM_SPARSE:
            raise ValueError(f"Criteo data has {NUM_SPARSE} tables, config has {len(table_rows)}")
        self.data_format, self.table_rows = data_format, tuple(table_rows)
        self.columns = None
        if data_format == "csv":
            if header is None:
                raise ValueError("csv data needs a header line")
            names = next(csv.reader([header.strip()]))
            want = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
            missing = [w for w in want if w not in names]
            if missing:
                raise ValueError(f"csv header lacks columns {missing}")
            self.columns = [names.index(w) for w in want]
            self.num_columns = len(names)

    def __call__(self, line: str):
        """Returns ``(label float, dense float32[13], ids int32[26])``; raises ValueError."""
        line = line.rstrip("\r\n")
        if self.data_format == "csv":
            cells = next(csv.reader([line]))
            if len(cells) != self.num_columns:
                raise ValueError(
                    f"expected {self.num_columns} comma-separated fields, got {len(cells)}"
                )
            fields = [cells[i] for i in self.columns]
        else:
            fields = line.split("\t")
            if len(fields) != NUM_FIELDS:
                raise ValueError(f"expected {NUM_FIELDS} tab-separated fields, got {len(fields)}")
        label = float(fields[0])
        if label not in (0.0, 1.0):
            raise ValueError(f"label must be 0 or 1, got {fields[0]!r}")
        try:
            raw = np.array([_dense_raw(v) for v in fields[1 : 1 + NUM_DENSE]])
        except ValueError as e:
            raise ValueError(f"bad integer feature: {e}") from None
        if not np.isfinite(raw).all():  # nan, inf, 1e400, a 400-digit integer
            j = int(np.argmin(np.isfinite(raw)))
            raise ValueError(f"integer feature I{j + 1} is not finite: {fields[1 + j]!r:.40}")
        dense = transform_dense(raw)
        cats = fields[1 + NUM_DENSE :]
        if self.data_format != "csv":
            for v in cats:
                if v and not re.fullmatch(r"[0-9a-fA-F]{1,16}", v):
                    raise ValueError(f"bad categorical value {v!r} (expected hex)")
        ids = np.array([_cat_id(v, r) for v, r in zip(cats, self.table_rows)], np.int32)
        return label, dense, ids


def read_header(path: str) -> str:
    """The first line of the file at ``path`` (a csv header), decoded as UTF-8 (bad bytes
    replaced), with its line end."""
    with open(path, "rb") as f:
        return f.readline().decode("utf-8", errors="replace")


def file_parser(path: str, data_format: str, table_rows) -> LineParser:
    """The ``LineParser`` of one file (for "csv", of its header line).

    Raises:
      DataError: a csv file whose header lacks a column, naming the file.
    """
    header = read_header(path) if data_format == "csv" else None
    try:
        return LineParser(data_format, table_rows, header)
    except ValueError as e:
        raise DataError(f"{path}: {e}") from None


class _Lines:
    """Iterates ``(path, line_number, text, position_after)`` over files, resumable."""

    def __init__(self, paths, data_format, position=None, wrap=False):
        self.paths, self.csv, self.wrap = paths, data_format == "csv", wrap
        pos = dict(position or {})
        self.file, self.offset = pos.get("file", 0), pos.get("offset", 0)
        self.line, self.epoch = pos.get("line", 0), pos.get("epoch", 0)

    def __iter__(self):
        yielded_any, full_pass = False, False
        while True:
            if self.file >= len(self.paths):
                if not self.wrap or (full_pass and not yielded_any):
                    return
                self.file, self.offset, self.line, self.epoch = 0, 0, 0, self.epoch + 1
                yielded_any, full_pass = False, True
            path = self.paths[self.file]
            with open(path, "rb") as f:
                f.seek(self.offset)
                if self.csv and self.offset == 0:
                    self.offset += len(f.readline())
                    self.line = 1
                while True:
                    raw = f.readline()
                    if not raw:
                        break
                    self.offset += len(raw)
                    self.line += 1
                    if not raw.strip():
                        continue
                    yielded_any = True
                    yield path, self.line, raw.decode("utf-8", errors="replace")
            self.file, self.offset, self.line = self.file + 1, 0, 0

    def position(self) -> dict:
        return {"file": self.file, "offset": self.offset, "line": self.line, "epoch": self.epoch}


class CriteoFileStream:
    """Streams training batches from Criteo-format files with bounded memory.

    Args:
      paths: files (see ``expand_paths``), read in order, wrapped around at the end.
      data_format: "kaggle", "terabyte" or "csv".
      table_rows: rows of the 26 tables.
      local_batch: rows per batch for this process (global batch / processes).
      skip_bad_lines: count and skip malformed lines instead of raising.
      holdout_every: if > 0, every ``holdout_every``-th line (0-based line counter over all
        lines, ``k % holdout_every == 0``) is held out for evaluation and never trained on.
      process_index, num_processes: this process's share (see module docstring).
      position: a ``position()`` from a previous stream, to resume.

    Raises:
      MalformedLineError: on a bad line (naming file and line) unless ``skip_bad_lines``.
    """

    def __init__(
        self,
        paths,
        data_format,
        table_rows,
        local_batch,
        *,
        skip_bad_lines=False,
        holdout_every=0,
        process_index=0,
        num_processes=1,
        position=None,
    ):
        self.paths, self.data_format, self.table_rows = list(paths), data_format, table_rows
        self.local_batch, self.skip_bad_lines = local_batch, skip_bad_lines
        self.holdout_every = holdout_every
        self.process_index, self.num_processes = process_index, num_processes
        pos = dict(position or {})
        self.train_index, self.all_index = pos.get("train_index", 0), pos.get("all_index", 0)
        # Distinct malformed lines skipped: counted in the first pass only (epoch 0), not again
        # each time the stream wraps around to them.
        self.bad_lines = pos.get("bad_lines", 0)
        self._lines = _Lines(self.paths, data_format, pos, wrap=True)
        # Training lines seen in this epoch, and whether it was read from its start: a whole
        # epoch without one (all lines bad or held out) is an error, not an endless loop.
        self._epoch, self._epoch_lines = self._lines.epoch, 0
        self._whole_epoch = self._lines.file == 0 and self._lines.offset == 0
        self._parsers = {}
        self._it = iter(self._lines)

    def _parser(self, path):
        if path not in self._parsers:
            self._parsers[path] = file_parser(path, self.data_format, self.table_rows)
        return self._parsers[path]

    def position(self) -> dict:
        """JSON-able position after the last batch returned."""
        return dict(
            self._lines.position(),
            train_index=self.train_index,
            all_index=self.all_index,
            bad_lines=self.bad_lines,
        )

    def next_batch(self) -> dict[str, np.ndarray]:
        """The next local batch: ``dense`` float32[b, 13], ``ids`` int32[b, 26, 1], ``label``.

        Every process reads on to the end of the global batch, so ``position()`` is the same
        on all of them (the checkpoint's, written by process 0, resumes each process right).
        A process parses only its own training lines and the held-out ones; other processes'
        lines are skipped unparsed, except with ``skip_bad_lines``, where whether a line
        counts depends on its being well formed.

        Raises:
          MalformedLineError: a bad line and not ``skip_bad_lines``.
          DataError: the files hold no usable training line (none at all, or a whole pass
            over them found only malformed or held-out lines).
        """
        labels, dense, ids = [], [], []
        global_batch = self.local_batch * self.num_processes
        while len(labels) < self.local_batch or self.train_index % global_batch:
            try:
                path, lineno, text = next(self._it)
            except StopIteration:
                raise DataError(f"no usable training lines in {self.paths}") from None
            if self._lines.epoch != self._epoch:  # wrapped around
                if self._whole_epoch and self._epoch_lines == 0:
                    raise DataError(
                        f"no usable training line in a whole pass over {self.paths}: "
                        f"{self.bad_lines} malformed lines skipped (--skip-bad-lines)"
                        + (", every line held out" if self.holdout_every == 1 else "")
                    )
                self._epoch, self._epoch_lines, self._whole_epoch = self._lines.epoch, 0, True
            k = self.all_index
            held = self.holdout_every > 0 and k % self.holdout_every == 0
            mine = (self.train_index // self.local_batch) % self.num_processes == self.process_index
            if not (mine or held or self.skip_bad_lines):  # another process's line
                self.all_index += 1
                self.train_index += 1
                self._epoch_lines += 1
                continue
            try:
                row = self._parser(path)(text)
            except ValueError as e:
                if self.skip_bad_lines:
                    if self._epoch == 0:
                        self.bad_lines += 1
                    continue
                raise MalformedLineError(
                    f"{path}:{lineno}: malformed {self.data_format} line: {e}"
                    " (use --skip-bad-lines to skip such lines)"
                ) from None
            self.all_index += 1
            if held:
                continue
            self._epoch_lines += 1
            self.train_index += 1
            if mine:
                labels.append(row[0])
                dense.append(row[1])
                ids.append(row[2])
        return {
            "dense": np.stack(dense),
            "ids": np.stack(ids)[:, :, None],
            "label": np.asarray(labels, np.float32),
        }


def read_eval_set(
    paths, data_format, table_rows, max_rows, *, skip_bad_lines=False, holdout_every=0
) -> tuple[dict[str, np.ndarray], int]:
    """Reads up to ``max_rows`` evaluation rows into memory.

    With ``holdout_every > 0`` only the held-out lines (see ``CriteoFileStream``) are taken.

    Returns:
      ``(batch dict as in CriteoFileStream.next_batch, bad_lines_skipped)``.

    Raises:
      MalformedLineError, DataError (no rows; a csv header without a column).
    """
    labels, dense, ids, bad, k = [], [], [], 0, 0
    parsers = {}
    for path, lineno, text in _Lines(list(paths), data_format):
        if len(labels) >= max_rows:
            break
        if path not in parsers:
            parsers[path] = file_parser(path, data_format, table_rows)
        try:
            row = parsers[path](text)
        except ValueError as e:
            if skip_bad_lines:
                bad += 1
                continue
            raise MalformedLineError(
                f"{path}:{lineno}: malformed {data_format} line: {e}"
                " (use --skip-bad-lines to skip such lines)"
            ) from None
        held = holdout_every <= 0 or k % holdout_every == 0
        k += 1
        if held:
            labels.append(row[0])
            dense.append(row[1])
            ids.append(row[2])
    if not labels:
        why = f"{bad} malformed lines skipped (--skip-bad-lines)" if bad else ""
        if not bad and not k:  # an empty --data read for its held-out lines said no more
            why = "the files hold no lines (empty?)"
        raise DataError(f"no evaluation rows in {list(paths)}" + (f": {why}" if why else ""))
    return (
        {
            "dense": np.stack(dense),
            "ids": np.stack(ids)[:, :, None],
            "label": np.asarray(labels, np.float32),
        },
        bad,
    )


class SyntheticStream:
    """Training batches from ``synthetic.SyntheticCriteo``; position = next batch index."""

    def __init__(self, generator, global_batch, *, process_index=0, num_processes=1, position=None):
        self.gen, self.global_batch = generator, global_batch
        self.process_index, self.num_processes = process_index, num_processes
        self.index = int((position or {}).get("batch", 0))

    def position(self) -> dict:
        return {"batch": self.index}

    def next_batch(self) -> dict[str, np.ndarray]:
        b = self.gen.batch(self.index, self.global_batch, "train")
        self.index += 1
        lb = self.global_batch // self.num_processes
        lo = self.process_index * lb
        return {k: v[lo : lo + lb] for k, v in b.items()}
