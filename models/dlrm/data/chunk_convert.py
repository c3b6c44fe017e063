"""Criteo text -> columns, one chunk at a time: the vectorized conversion of a chunk
(``preprocess.convert`` drives it; ``text_source`` reads a source file in chunks).

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
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING

import numpy as np

from jax_lossy_comm.optional_deps import import_optional
from models.dlrm.data import input_pipeline as ip
from models.dlrm.data.shard_format import COLUMNS

if TYPE_CHECKING:  # imported where used: the trainer reads shards without pyarrow or isal
    import pyarrow as pa

_BLOCK_BYTES = 2 << 20  # pyarrow parse block: large blocks parse slower (cache)


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


class ChunkSlot:
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


def _pyarrow():
    """``(pyarrow, pyarrow.csv)``, imported at first use.

    Raises:
      MissingDependencyError: pyarrow is not installed (extra ``train``).
    """
    what = "converting Criteo text to shards"
    return (
        import_optional("pyarrow", "pyarrow", "train", what),
        import_optional("pyarrow.csv", "pyarrow", "train", what),
    )


class ChunkConverter:
    """Converts chunks of one source file (complete lines) into columns; thread-safe.

    Raises (on construction):
      MissingDependencyError: pyarrow is not installed (extra ``train``).
    """

    def __init__(self, path, data_format, table_rows, header, skip_bad_lines):
        pa, pacsv = self.pa, self.pacsv = _pyarrow()
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
        pa, pacsv = self.pa, self.pacsv
        types = {name: number_type for name in self.picks[: 1 + ip.NUM_DENSE]}
        types.update({name: pa.binary() for name in self.picks[1 + ip.NUM_DENSE :]})
        return pacsv.ConvertOptions(
            column_types=types,
            include_columns=self.picks,
            null_values=[""],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        )

    def __call__(self, slot: ChunkSlot, start: int, stop: int) -> _Chunk:
        """Columns of the whole lines ``slot.buf[start:stop]`` (the last may lack its
        newline), in ``slot``'s arrays when every line is plain.

        Raises:
          BadLine: a malformed line and not ``skip_bad_lines`` (its index in the chunk).
        """
        fast = self._fast(slot, start, stop)
        if fast is not None:  # every line, empty ones included, is a row
            return _Chunk(**fast, lines=len(fast["label"]), bad_lines=0)
        return self._line_by_line(bytes(slot.buf[start:stop]))

    def _read(self, text, convert):
        pa, pacsv = self.pa, self.pacsv
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
        integers = self.pa.types.is_integer(columns[1].type)
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
                    raise BadLine(k, f"malformed {self.data_format} line: {e}") from None
                bad += 1
                continue
            labels.append(label)
            dense.append(d)
            ids.append(i)
        if not labels:
            return _Chunk(*_empty_columns(), lines=lines, bad_lines=bad)
        return _Chunk(np.asarray(labels, np.float32), np.stack(dense), np.stack(ids), lines, bad)


class BadLine(ValueError):
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
