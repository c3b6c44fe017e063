"""Criteo text -> binary shards, once, streaming with bounded memory (issue 14).

Reads Criteo Kaggle ``train.txt``, Criteo 1TB ``day_N`` (plain or ``.gz``) or the trainer's CSV
layout (see ``input_pipeline``) and writes, per source file, one shard of three raw
little-endian column files plus one ``manifest.json`` for the folder:

* ``part-NNNNN.label``: float32[rows] (0.0 or 1.0)
* ``part-NNNNN.dense``: float32[rows, 13], after ``input_pipeline.transform_dense``
* ``part-NNNNN.ids``: int32[rows, 26], hashed into each table's rows (the ``--max-ind-range``
  rule of ``input_pipeline.LineParser``)

Row ``i`` of a shard is the ``i``-th usable line of its source, so a shard reader sees exactly
the rows the text reader yields, in the same order, with bit-identical values.

Parsing: pyarrow's CSV reader (Apache Arrow, C++; streaming, a per-row callback for rows
with the wrong field count, binary columns that skip UTF-8 validation) tokenizes chunks of
about ``chunk_bytes`` cut at line ends; the chunks are converted on a thread pool (pyarrow and
numpy release the GIL) and written in order. Text buffers and output columns are reused chunk
after chunk (fresh ones cost page faults). Gzip sources are decompressed by igzip (ISA-L, the
``isal`` package, 2-4x zlib's speed) in a thread of its own, overlapping the parsing. Counts
are parsed as int32 (Arrow's cheapest integer conversion; int64 if one does not fit) and
transformed by a table lookup. Hex ids are decoded for all 26 columns at once: the text of
their values (Arrow's data buffers, where an empty value takes no room) is concatenated into
one run of 64-bit words, eight characters each; every byte's validity comes from four
carry-free additions (SWAR), its digit value from ``(c & 15) + 9 * (c >> 6 & 1)``, and one
multiply merges neighbouring digits into bytes; the values are spread over the rows that have
one (one boolean assignment) and taken modulo the table's rows by numpy's SIMD division by a
scalar. Where the CPU goes (2 threads, a generated Criteo file): about 55% in Arrow (its
tokenizer alone a fifth), 15% in numpy, 10% in the writer's SHA-256 and the file copies of
the kernel. A chunk whose rows are not all plain (a row with the wrong field count, a
whitespace-only line, a label other than 0 or 1, a count that is not an integer (parsed as
float64 then), a value the integer parse and ``float()`` read differently ("-0", "0x1f"), a
non-finite value, an id that is not empty or 8 hex digits) is converted instead line by line
by ``input_pipeline.LineParser`` itself, so bad lines get the text reader's treatment
exactly: ``MalformedLineError`` naming ``file:line``, or, with ``skip_bad_lines``, skipped and
counted.

Resume: the manifest is rewritten (atomically) after every finished source file; running the
same command again skips finished files whose source and outputs still match and redoes the
rest. Changed settings, a changed source or a manifest of another format version are errors.

Usage::

    python -m models.dlrm.preprocess /data/criteo/train.txt --out /data/kaggle_shards \\
        --config kaggle --max-ind-range 10000000
    python -m models.dlrm.preprocess '/data/tb/day_*.gz' --out /data/tb_shards \\
        --data-format terabyte --config terabyte
    python -m models.dlrm.preprocess '/data/tb/day_*.gz' --out /data/tb_split \\
        --data-format terabyte --config terabyte --day-split   # train/, val/, test/
    python -m models.dlrm.preprocess --verify /data/kaggle_shards

References:
  facebookresearch/dlrm ``data_utils.py`` (transform, ``--max-ind-range``); the binary
  layouts of TorchRec (``criteo`` numpy files) and NVIDIA's DLRM (split binary).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections import deque

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
from isal import igzip_threaded
from isal.isal_zlib import error as IsalError

from models.dlrm import input_pipeline as ip

FORMAT = "jax_lossy_comm.criteo_shards"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
COLUMNS = {
    # name: (numpy dtype, values per row)
    "label": ("<f4", 1),
    "dense": ("<f4", ip.NUM_DENSE),
    "ids": ("<i4", ip.NUM_SPARSE),
}
TRANSFORM = {
    "dense": "float32(log1p(max(x, 0))) of the float64 value; missing = 0",
    "ids": "int(value, 16) (csv: CRC-32 of a non-hex value) modulo the table's rows; missing = 0",
    "rows": "usable lines in source order; whitespace-only lines skipped",
}
_HASH_PIECE = 16 << 20
_BLOCK_BYTES = 2 << 20  # pyarrow parse block: large blocks parse slower (cache)
_GZIP_BLOCK_BYTES = 4 << 20  # decompressed bytes the gzip thread hands over at a time


class ShardFormatError(ip.DataError):
    """Shards or a manifest that cannot be used: another version, or outputs that do not match
    (a ``DataError``: the trainer's command line prints it as one line)."""


class SourceChangedError(RuntimeError):
    """A source file changed while it was read, or since a resumed conversion recorded it."""


# ------------------------------------------------------------------------------------------
# Vectorized conversion of one chunk
# ------------------------------------------------------------------------------------------


def _bytes8(b: int) -> np.uint64:
    """``b`` in every byte of a uint64."""
    return np.uint64(b * 0x0101010101010101)


_HIGH, _LOW_BYTES = _bytes8(0x80), np.uint64(0x00FF00FF00FF00FF)
_B01, _B06, _B0F, _B19, _B1F, _B20, _B46, _B50 = (
    _bytes8(b) for b in (0x01, 0x06, 0x0F, 0x19, 0x1F, 0x20, 0x46, 0x50)
)


def _hex_words(words: np.ndarray, t: np.ndarray, u: np.ndarray) -> bool:
    """Decodes in place uint64 ``words``, each 8 characters of hex text (first character in
    the low byte), when every character is a hex digit; returns whether they all are.

    On success ``words`` holds, in its 16-bit lanes, the four bytes of each value, most
    significant first (the low byte of each lane; the high byte is 0). ``t`` and ``u`` are
    scratch of the same shape. SWAR, per byte ``c`` (no carry crosses a byte once every byte
    is below 0x80): bit 7 of ``c + 0x50`` is ``c >= 0x30`` and of ``c + 0x46`` is
    ``c > 0x39``, so their XOR flags a digit; bit 7 of ``(c | 0x20) + 0x1F`` XOR that of
    ``(c | 0x20) + 0x19`` flags a letter a-f or A-F; a byte is never both, so the XOR of
    all four is the byte's validity. A digit's value is ``(c & 15) + 9 * (c >> 6 & 1)``.
    """
    if np.bitwise_or.reduce(words, axis=None) & _HIGH:  # a byte >= 0x80
        return False
    np.add(words, _B50, out=t)
    np.add(words, _B46, out=u)
    t ^= u
    np.bitwise_or(words, _B20, out=u)
    u += _B1F
    t ^= u
    u -= _B06  # (c | 0x20) + 0x19, no borrows: every byte is >= 0x1F
    t ^= u
    if np.bitwise_and.reduce(t, axis=None) & _HIGH != _HIGH:
        return False
    # Bytes to digit values d, and neighbouring digits (d0 + 256 d1 in a 16-bit lane) to
    # 16 d0 + d1: (lane * 0x1001) >> 8 has it in the lane's low byte (the 12-bit shifted
    # copy cannot carry into it); the digits' sum and this product are one: 0x1001 times
    # (c & 15) plus 0x9009 times (c >> 6 & 1).
    np.right_shift(words, np.uint64(6), out=t)
    t &= _B01
    t *= np.uint64(0x9009)
    words &= _B0F
    words *= np.uint64(0x1001)
    words += t
    words >>= np.uint64(8)
    words &= _LOW_BYTES  # 16-bit lanes: a byte of the value, most significant first
    return True


def _decode_ids(columns, table_rows: np.ndarray, out: np.ndarray) -> bool:
    """``out[i, j] = int(v, 16) % table_rows[j]`` of value ``v`` in row ``i`` of binary
    column ``columns[j]`` (empty = 0), all columns at once.

    The values' text (the Arrow data buffers, empty values taking no room) is gathered into
    one run of 8-character words, decoded by ``_hex_words``, and spread over the rows that
    have a value; the modulo is numpy's SIMD division by a scalar, table by table.

    Args:
      columns: 26 pyarrow binary (chunked) arrays of ``n`` rows.
      table_rows: uint32[26], rows per table.
      out: uint32[n, 26] (a view of the int32 output).

    Returns False (``out`` partly written) unless every value is empty or 8 hex digits.
    """
    n = len(out)
    words, t, u, present, lengths, values, quot = _scratch_ids(n)
    texts, total = [], 0
    for j, col in enumerate(columns):
        lo = 0
        for arr in col.chunks:  # one per parsed block
            _, offsets_buf, data_buf = arr.buffers()
            k = len(arr)
            offsets = np.frombuffer(offsets_buf, np.int32, k + 1, arr.offset * 4)
            first, last = int(offsets[0]), int(offsets[-1])
            np.subtract(offsets[1:], offsets[:-1], out=lengths[:k])
            np.equal(lengths[:k], 8, out=present[j, lo : lo + k])
            texts.append(np.frombuffer(data_buf, np.uint8, last - first, first))
            total += last - first
            lo += k
    # Lengths are >= 0 and sum to the text's size: all are 0 or 8 iff 8 per 8-long value.
    if total != 8 * np.count_nonzero(present):
        return False
    m = total // 8
    words, t, u = words[:m], t[:m], u[:m]
    np.concatenate(texts, out=words.view(np.uint8))
    if not _hex_words(words, t, u):
        return False
    # The low bytes of the 16-bit lanes are the value's bytes, big-endian.
    packed = t.view(np.uint8)[: 4 * m]
    np.copyto(packed, words.view(np.uint16), casting="unsafe")
    values.fill(0)
    values[present] = packed.view(">u4")
    for j in range(len(columns)):  # a scalar divisor: numpy's SIMD division
        np.floor_divide(values[j], table_rows[j], out=quot[j])
    quot *= table_rows[:, None]
    np.subtract(values, quot, out=values)
    np.copyto(out, values.T)  # faster than writing the difference through out.T
    return True


_DENSE_TABLE_SIZE = 1 << 16
_DENSE_TABLE = ip.transform_dense(np.arange(_DENSE_TABLE_SIZE, dtype=np.float64))


def _transform_dense(raw: np.ndarray) -> np.ndarray:
    """``input_pipeline.transform_dense`` of float64 ``raw``, bit for bit, faster.

    Integers in ``[0, 65536)`` (most Criteo counts) are looked up in a table made by
    ``transform_dense`` itself, negatives map to 0.0 as the transform does, and the rest
    (fractions, large values, NaN, -0.0) go through ``transform_dense``.
    """
    table_ok = (raw >= 0.0) & (raw < _DENSE_TABLE_SIZE) & ~np.signbit(raw)
    index = np.where(table_ok, raw, 0.0).astype(np.int32)
    table_ok &= index == raw
    out = _DENSE_TABLE[index]
    out[raw < 0.0] = 0.0
    rest = ~(table_ok | (raw < 0.0))
    if rest.any():
        out[rest] = ip.transform_dense(raw[rest])
    return out


def _transform_dense_int(part: pa.Array, out: np.ndarray) -> None:
    """``out[:] = input_pipeline.transform_dense(x)`` of an int32 or int64 column, bit for bit
    (null = missing = 0).

    A table lookup, the index clipped to ``[0, 65535]`` (a negative count is 0.0, as the
    transform's ``max(x, 0)``); values past the table go through ``transform_dense``.
    """
    n = len(part)
    validity, data = part.buffers()
    width = part.type.bit_width // 8
    raw = np.frombuffer(data, f"<i{width}", n, part.offset * width)
    np.take(_DENSE_TABLE, raw, mode="clip", out=out)
    if n and raw.max() >= _DENSE_TABLE_SIZE:
        big = raw >= _DENSE_TABLE_SIZE
        out[big] = ip.transform_dense(raw[big].astype(np.float64))
    if part.null_count:  # whatever the values under nulls, missing is 0.0
        bits = np.frombuffer(validity, np.uint8)
        valid = np.unpackbits(bits, count=part.offset + n, bitorder="little")[part.offset :]
        np.multiply(out, valid, out=out)


def _has_minus_zero(buf: bytearray, start: int, stop: int) -> bool:
    """Whether ``buf[start:stop]`` holds ``b"-0"`` (as 16-bit words at both alignments:
    faster than ``bytearray.find``, which is slow for this needle)."""
    minus_zero = np.uint16(0x302D)  # b"-0" little-endian
    return any(
        (np.frombuffer(buf, "<u2", (stop - at) // 2, at) == minus_zero).any()
        for at in (start, start + 1)
    )


class _Slot:
    """A chunk's text buffer and its output columns, reused chunk after chunk: fresh
    buffers for every chunk cost page faults (a third of the time)."""

    def __init__(self, text_bytes: int):
        self.buf = bytearray(text_bytes)
        self.out = {}

    def columns(self, rows: int) -> dict[str, np.ndarray]:
        """Output arrays of ``rows`` rows (label [rows], dense [rows, 13], ids [rows, 26])."""
        for name, (dtype, width) in COLUMNS.items():
            if name not in self.out or len(self.out[name]) < rows:
                self.out[name] = np.empty((_capacity(rows), width), dtype)
        return {
            "label": self.out["label"][:rows, 0],
            "dense": self.out["dense"][:rows],
            "ids": self.out["ids"][:rows],
        }


_scratch = threading.local()


def _capacity(rows: int) -> int:
    """Rows to allocate for ``rows``: a quarter more, so that chunks of a few more rows than
    the last do not allocate again (fresh memory costs page faults)."""
    return rows + rows // 4 + 1024


def _scratch_dense(rows: int) -> np.ndarray:
    """This thread's column-major scratch for dense values: float32[13, rows]."""
    if getattr(_scratch, "dense_rows", -1) < rows:
        _scratch.dense_rows = _capacity(rows)
        _scratch.dense = np.empty((ip.NUM_DENSE, _scratch.dense_rows), np.float32)
    return _scratch.dense[:, :rows]


def _scratch_ids(rows: int) -> tuple[np.ndarray, ...]:
    """This thread's scratch for the ids of ``rows`` rows: three uint64[26 * rows] (hex
    words and two temporaries), bool[26, rows] (has a value), int32[rows] (lengths) and two
    uint32[26, rows] (values, quotients); all contiguous."""
    if getattr(_scratch, "ids_rows", -1) < rows:
        _scratch.ids_rows = cap = _capacity(rows)
        size = ip.NUM_SPARSE * cap
        _scratch.ids = [np.empty(size, np.uint64) for _ in range(3)]
        _scratch.ids += [np.empty(size, bool), np.empty(cap, np.int32)]
        _scratch.ids += [np.empty(size, np.uint32) for _ in range(2)]
    words, t, u, present, lengths, values, quot = _scratch.ids
    shape, size = (ip.NUM_SPARSE, rows), ip.NUM_SPARSE * rows
    return (
        words,
        t,
        u,
        present[:size].reshape(shape),
        lengths,
        values[:size].reshape(shape),
        quot[:size].reshape(shape),
    )


@dataclasses.dataclass
class _Chunk:
    label: np.ndarray  # float32[n]
    dense: np.ndarray  # float32[n, 13]
    ids: np.ndarray  # int32[n, 26]
    lines: int  # lines of text in the chunk
    bad_lines: int  # malformed lines skipped


class _ChunkConverter:
    """Converts chunks of one source file (complete lines) into columns; thread-safe."""

    def __init__(self, path, data_format, table_rows, header, skip_bad_lines):
        self.path, self.data_format, self.skip_bad_lines = path, data_format, skip_bad_lines
        self.table_rows = tuple(int(r) for r in table_rows)
        self.id_rows = np.array(self.table_rows, np.uint32)
        self.parser = ip.LineParser(data_format, self.table_rows, header)
        if data_format == "csv":
            num, picks = self.parser.num_columns, self.parser.columns
            self.parse = pacsv.ParseOptions(delimiter=",")
        else:
            num, picks = ip.NUM_FIELDS, list(range(ip.NUM_FIELDS))
            self.parse = pacsv.ParseOptions(
                delimiter="\t", quote_char=False, double_quote=False, escape_char=False
            )
        self.names = [f"f{i}" for i in range(num)]
        self.picks = [self.names[i] for i in picks]
        # Numbers as int32 first (fastest; Criteo's counts fit), then int64, then float64 (CSV
        # writes 260.0).
        integers = [pa.int32(), pa.int64()]
        numbers = [pa.float64()] if data_format == "csv" else [*integers, pa.float64()]
        self.converts = [self._convert_options(t) for t in numbers]

    def _convert_options(self, number_type):
        types = {name: number_type for name in self.picks[: 1 + ip.NUM_DENSE]}
        types.update({name: pa.binary() for name in self.picks[1 + ip.NUM_DENSE :]})
        return pacsv.ConvertOptions(
            column_types=types,
            include_columns=self.picks,
            null_values=[""],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        )

    def __call__(self, slot: _Slot, start: int, stop: int) -> _Chunk:
        """Columns of the whole lines ``slot.buf[start:stop]`` (the last may lack its
        newline), in ``slot``'s arrays when every line is plain.

        Raises:
          _BadLine: a malformed line and not ``skip_bad_lines`` (its index in the chunk).
        """
        fast = self._fast(slot, start, stop)
        if fast is not None:  # every line, empty ones included, is a row
            return _Chunk(**fast, lines=len(fast["label"]), bad_lines=0)
        return self._line_by_line(bytes(slot.buf[start:stop]))

    def _read(self, text, convert):
        odd = []

        def on_invalid_row(row):
            odd.append(row.number)
            return "skip"

        options = pacsv.ParseOptions(
            delimiter=self.parse.delimiter,
            quote_char=self.parse.quote_char,
            double_quote=self.parse.double_quote,
            escape_char=self.parse.escape_char,
            ignore_empty_lines=False,  # an empty line is an invalid row: line by line
            invalid_row_handler=on_invalid_row,
        )
        try:
            table = pacsv.read_csv(
                pa.py_buffer(text),
                read_options=pacsv.ReadOptions(
                    column_names=self.names, block_size=_BLOCK_BYTES, use_threads=False
                ),
                parse_options=options,
                convert_options=convert,
            )
        except pa.ArrowInvalid:  # a value not of this type
            return None
        return None if odd else table

    def _fast(self, slot, start, stop):
        buf = slot.buf
        if buf.find(b"x", start, stop) >= 0 or buf.find(b"X", start, stop) >= 0:
            return None  # Arrow reads "0x1f" as a number, Python's float does not
        converts = self.converts
        if self.data_format != "csv" and _has_minus_zero(buf, start, stop):
            converts = converts[-1:]  # "-0" is -0.0 for float(), 0 as an integer
        for convert in converts:
            table = self._read(memoryview(buf)[start:stop], convert)
            if table is not None:
                break
        else:  # no type fits some value: the line-by-line rules decide
            return None
        n = table.num_rows
        out = slot.columns(n)
        if n == 0:
            return out
        columns = [table.column(name) for name in self.picks]
        if columns[0].null_count:
            return None
        label = columns[0].to_numpy()
        if not ((label == 0.0) | (label == 1.0)).all():
            return None
        out["label"][:] = label
        dense = _scratch_dense(n)
        integers = pa.types.is_integer(columns[1].type)
        for j, col in enumerate(columns[1 : 1 + ip.NUM_DENSE]):
            lo = 0
            for part in col.chunks:  # one per parsed block: no concatenation
                if integers:
                    _transform_dense_int(part, dense[j, lo : lo + len(part)])
                    lo += len(part)
                    continue
                raw = (part.fill_null(0.0) if part.null_count else part).to_numpy()
                if not np.isfinite(raw).all():  # nan, inf, 1e400: the line-by-line rules
                    return None
                dense[j, lo : lo + len(raw)] = _transform_dense(raw)
                lo += len(raw)
        ids = out["ids"].view(np.uint32)
        if not _decode_ids(columns[1 + ip.NUM_DENSE :], self.id_rows, ids):
            return None
        out["dense"][:] = dense.T
        return out

    def _line_by_line(self, text: bytes) -> _Chunk:
        labels, dense, ids, bad = [], [], [], 0
        lines = text.count(b"\n") + (not text.endswith(b"\n"))
        for k, raw in enumerate(text.split(b"\n")):
            if not raw.strip():
                continue
            try:
                label, d, i = self.parser(raw.decode("utf-8", errors="replace"))
            except ValueError as e:
                if not self.skip_bad_lines:
                    raise _BadLine(k, f"malformed {self.data_format} line: {e}") from None
                bad += 1
                continue
            labels.append(label)
            dense.append(d)
            ids.append(i)
        if not labels:
            return _Chunk(*_empty_columns(), lines=lines, bad_lines=bad)
        return _Chunk(np.asarray(labels, np.float32), np.stack(dense), np.stack(ids), lines, bad)


class _BadLine(ValueError):
    """A malformed line at index ``k`` of its chunk (the reader knows the chunk's first line)."""

    def __init__(self, k: int, message: str):
        super().__init__(message)
        self.k = k


def _empty_columns():
    return (
        np.empty(0, np.float32),
        np.empty((0, ip.NUM_DENSE), np.float32),
        np.empty((0, ip.NUM_SPARSE), np.int32),
    )


# ------------------------------------------------------------------------------------------
# Reading a source file in chunks
# ------------------------------------------------------------------------------------------


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _source_stat(path: str) -> dict:
    st = os.stat(path)
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _open_text(path: str):
    """A binary stream of a plain or gzip file (gzip: igzip, decompressing in a thread)."""
    if _is_gzip(path):
        return igzip_threaded.open(path, "rb", threads=1, block_size=_GZIP_BLOCK_BYTES)
    return open(path, "rb", buffering=0)


def _chunks(path: str, chunk_bytes: int, skip_header: bool, pool: list | None = None):
    """Yields ``(slot, start, stop)``: ``slot.buf[start:stop]`` are whole lines of a plain or
    gzip file, about ``chunk_bytes`` of them (the text after the last newline starts the next
    chunk). With ``skip_header`` the first line (a CSV header) is left out.

    ``pool``: ``_Slot``s free for reuse (the caller puts a slot back once it is done with
    its chunk); a new slot is made when it is empty.

    Raises:
      ShardFormatError: a truncated or corrupt gzip stream (naming the file).
    """
    pool = [] if pool is None else pool
    carry = b""
    try:
        stream = _open_text(path)
    except (OSError, EOFError, IsalError) as e:
        raise ShardFormatError(f"{path}: cannot read it ({e})") from None
    try:
        while True:
            slot = pool.pop() if pool else _Slot(0)
            if len(slot.buf) < len(carry) + chunk_bytes:  # room for a long carried line too
                slot.buf = bytearray(len(carry) + chunk_bytes + min(chunk_bytes, 1 << 20))
            buf = slot.buf
            buf[: len(carry)] = carry
            view = memoryview(buf)
            end = len(carry) + stream.readinto(view[len(carry) : len(carry) + chunk_bytes])
            view.release()
            start = 0
            if skip_header:
                start = buf.find(b"\n", 0, end) + 1
                if start == 0 and end > len(carry):  # header longer than a chunk
                    carry = bytes(buf[:end])
                    pool.append(slot)
                    continue
                skip_header = False
            if end == len(carry):  # end of file: the rest, without a final newline
                if end > start:
                    yield slot, start, end
                return
            cut = buf.rfind(b"\n", start, end) + 1
            carry = bytes(buf[max(cut, start) : end])
            if cut > start:
                yield slot, start, cut
            else:
                pool.append(slot)
    except (OSError, EOFError, IsalError) as e:
        raise ShardFormatError(
            f"{path}: cannot read to the end ({e}); the file is cut short "
            "or corrupt, so no shard is written for it"
        ) from None
    finally:
        stream.close()


# ------------------------------------------------------------------------------------------
# Output files
# ------------------------------------------------------------------------------------------


class _ColumnWriter:
    """Appends arrays to ``path + '.tmp'``, hashing as it goes; ``finish`` renames it."""

    def __init__(self, path: str):
        self.path, self.bytes, self.sha = path, 0, hashlib.sha256()
        self.file = open(path + ".tmp", "wb")

    def write(self, array: np.ndarray) -> None:
        view = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        self.sha.update(view)
        self.file.write(view)
        self.bytes += len(view)

    def finish(self) -> dict:
        self.file.close()
        os.replace(self.path + ".tmp", self.path)
        return {
            "file": os.path.basename(self.path),
            "bytes": self.bytes,
            "sha256": self.sha.hexdigest(),
        }

    def abort(self) -> None:
        self.file.close()
        if os.path.exists(self.path + ".tmp"):
            os.remove(self.path + ".tmp")


def file_sha256(path: str) -> str:
    """Hex SHA-256 of a file's bytes, read in 16 MiB pieces."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(_HASH_PIECE):
            sha.update(piece)
    return sha.hexdigest()


def _write_manifest(out_dir: str, manifest: dict) -> None:
    tmp = os.path.join(out_dir, MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(tmp, os.path.join(out_dir, MANIFEST))


def read_manifest(out_dir: str) -> dict:
    """The manifest of a shard folder, checked for format and version.

    Raises:
      FileNotFoundError: no manifest.json in ``out_dir``.
      ShardFormatError: not a shard manifest, or another format version.
    """
    path = os.path.join(out_dir, MANIFEST)
    with open(path) as f:
        manifest = json.load(f)
    if manifest.get("format") != FORMAT:
        raise ShardFormatError(f"{path}: not a {FORMAT} manifest")
    if manifest.get("version") != FORMAT_VERSION:
        raise ShardFormatError(
            f"{path}: shard format version {manifest.get('version')}, this reader reads "
            f"version {FORMAT_VERSION}; convert the text again with this version"
        )
    return manifest


def column_widths(manifest: dict) -> dict[str, tuple[str, int]]:
    """``COLUMNS`` of a shard folder: one-hot shards (no ``bag_sizes`` in the settings: every
    folder ``convert`` writes) hold one id per table; multi-hot shards
    (``shards.write_multi_hot``) ``sum(bag_sizes)`` ids per row, the bags back to back in
    table order."""
    bags = manifest["settings"].get("bag_sizes")
    if not bags:
        return COLUMNS
    return dict(COLUMNS, ids=(COLUMNS["ids"][0], int(sum(bags))))


def verify_shards(out_dir: str, manifest: dict, *, checksums: bool = True) -> None:
    """Checks every shard file against the manifest: size always, SHA-256 if ``checksums``.

    Raises:
      ShardFormatError: a missing file, a size or checksum that differs, or an unfinished
        conversion.
    """
    if not manifest.get("complete"):
        raise ShardFormatError(f"{out_dir}: the conversion has not finished (run it again)")
    for shard in manifest["shards"]:
        for name, (dtype, width) in column_widths(manifest).items():
            entry = shard["files"][name]
            path = os.path.join(out_dir, entry["file"])
            want = shard["rows"] * width * np.dtype(dtype).itemsize
            if entry["bytes"] != want:
                raise ShardFormatError(
                    f"{path}: manifest says {entry['bytes']} bytes, "
                    f"{shard['rows']} rows need {want}"
                )
            if not os.path.isfile(path):
                raise ShardFormatError(f"{path}: missing (listed in the manifest)")
            size = os.path.getsize(path)
            if size != want:
                raise ShardFormatError(f"{path}: {size} bytes, the manifest says {want}")
            if checksums and file_sha256(path) != entry["sha256"]:
                raise ShardFormatError(f"{path}: SHA-256 differs from the manifest (corrupt)")


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
    writers = {name: _ColumnWriter(os.path.join(out_dir, f"{shard}.{name}")) for name in COLUMNS}
    before, start = _source_stat(path), time.perf_counter()
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
                    except _BadLine as e:
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

            for slot, lo, hi in _chunks(path, chunk_bytes, csv_header, pool):
                pending.append((pool_ex.submit(converter, slot, lo, hi), slot))
                drain(threads)
            drain(0)
        if _source_stat(path) != before:
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
            if _source_stat(shard["source"]["path"]) != {
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
    _write_manifest(out_dir, manifest)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(unit=" lines", unit_scale=True, dynamic_ncols=True, file=sys.stderr)
    start = time.perf_counter()
    try:
        for k in range(len(done), len(paths)):
            path = paths[k]
            header = ip._read_header(path) if data_format == "csv" else None
            converter = _ChunkConverter(path, data_format, table_rows, header, skip_bad_lines)
            if bar is not None:
                bar.set_description(os.path.basename(path))
            manifest["shards"].append(
                _convert_file(path, f"part-{k:05d}", out_dir, converter, chunk_bytes, threads, bar)
            )
            _write_manifest(out_dir, manifest)
    finally:
        if bar is not None:
            bar.close()
    seconds = time.perf_counter() - start
    manifest["rows"] = sum(s["rows"] for s in manifest["shards"])
    manifest["bad_lines"] = sum(s["bad_lines"] for s in manifest["shards"])
    manifest["complete"] = True
    _write_manifest(out_dir, manifest)
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
            writer = _ColumnWriter(os.path.join(out_dir, f"part-00000.{name}"))
            with open(os.path.join(src_dir, shard["files"][name]["file"]), "rb") as f:
                f.seek(lo * row_bytes)
                left = (hi - lo) * row_bytes
                while left:
                    piece = f.read(min(left, _HASH_PIECE))
                    writer.write(np.frombuffer(piece, np.uint8))
                    left -= len(piece)
            files[name] = writer.finish()
        part = dict(shard, name="part-00000", rows=hi - lo, lines=hi - lo, bad_lines=0)
        part["files"] = files
        out = dict(manifest, shards=[part], rows=hi - lo, bad_lines=0)
        out["split"] = {"from": os.path.abspath(src_dir), "rows": [lo, hi]}
        _write_manifest(out_dir, out)


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
        prog="python -m models.dlrm.preprocess",
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
    except (FileNotFoundError, ip.DataError, ShardFormatError, SourceChangedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(a: argparse.Namespace) -> int:
    """The command ``main`` parsed: verify, or convert (with the day split)."""
    from models.dlrm.configs import get_config

    if a.verify:
        if not os.path.isfile(os.path.join(a.verify, MANIFEST)):
            raise ShardFormatError(
                f"{a.verify}: no {MANIFEST}, so not a shard folder (python -m "
                "models.dlrm.preprocess SOURCES --out DIR writes one)"
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
