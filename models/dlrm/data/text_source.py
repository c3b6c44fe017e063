"""Reading a Criteo source file in chunks of whole lines, plain or gzip (igzip, in a thread of
its own), into reused ``chunk_convert.ChunkSlot`` buffers; ``source_stat`` tells whether a
source changed (``preprocess.convert`` drives both).
"""

from __future__ import annotations

import os

from jax_lossy_comm.optional_deps import import_optional
from models.dlrm.data.chunk_convert import ChunkSlot
from models.dlrm.data.shard_format import ShardFormatError

_GZIP_BLOCK_BYTES = 4 << 20  # decompressed bytes the gzip thread hands over at a time


def _is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def source_stat(path: str) -> dict:
    """``{"bytes", "mtime_ns"}`` of the file at ``path``: a source that changed while or
    after it was converted has other values (the manifest keeps them)."""
    st = os.stat(path)
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


#: What reading a plain source can raise (a gzip source adds igzip's error).
_READ_ERRORS = (OSError, EOFError)


def _open_text(path: str):
    """``(stream, errors)``: a binary stream of a plain or gzip file (gzip: igzip, decompressing
    in a thread) and the exceptions its reads raise for a truncated or corrupt file.

    Raises:
      ShardFormatError: the file cannot be opened (naming it).
      MissingDependencyError: a gzip source without isal installed (extra ``train``).
    """
    try:
        gzip = _is_gzip(path)
        if not gzip:
            return open(path, "rb", buffering=0), _READ_ERRORS
    except _READ_ERRORS as e:
        raise ShardFormatError(f"{path}: cannot read it ({e})") from None
    what = f"reading the gzip source {path}"
    igzip_threaded = import_optional("isal.igzip_threaded", "isal", "train", what)
    errors = (*_READ_ERRORS, import_optional("isal.isal_zlib", "isal", "train", what).error)
    try:
        return igzip_threaded.open(path, "rb", threads=1, block_size=_GZIP_BLOCK_BYTES), errors
    except errors as e:
        raise ShardFormatError(f"{path}: cannot read it ({e})") from None


def text_chunks(path: str, chunk_bytes: int, skip_header: bool, pool: list | None = None):
    """Yields ``(slot, start, stop)``: ``slot.buf[start:stop]`` are whole lines of a plain or
    gzip file, about ``chunk_bytes`` of them (the text after the last newline starts the next
    chunk). With ``skip_header`` the first line (a CSV header) is left out.

    ``pool``: ``ChunkSlot``s free for reuse (the caller puts a slot back once it is done with
    its chunk); a new slot is made when it is empty.

    Raises:
      ShardFormatError: a truncated or corrupt gzip stream (naming the file).
    """
    pool = [] if pool is None else pool
    carry = b""
    stream, errors = _open_text(path)
    try:
        while True:
            slot = pool.pop() if pool else ChunkSlot(0)
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
    except errors as e:
        raise ShardFormatError(
            f"{path}: cannot read to the end ({e}); the file is cut short "
            "or corrupt, so no shard is written for it"
        ) from None
    finally:
        stream.close()
