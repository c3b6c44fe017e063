"""The on-disk format of the Criteo shards ``preprocess`` writes and ``shards`` reads: the
column files, their writer, the manifest and its checks.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from models.dlrm.data import input_pipeline as ip

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
HASH_PIECE = 16 << 20


class ShardFormatError(ip.DataError):
    """Shards or a manifest that cannot be used: another version, or outputs that do not match
    (a ``DataError``: the trainer's command line prints it as one line)."""


class SourceChangedError(RuntimeError):
    """A source file changed while it was read, or since a resumed conversion recorded it."""


# ------------------------------------------------------------------------------------------
# Output files
# ------------------------------------------------------------------------------------------


class ColumnWriter:
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
        while piece := f.read(HASH_PIECE):
            sha.update(piece)
    return sha.hexdigest()


def write_manifest(out_dir: str, manifest: dict) -> None:
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
