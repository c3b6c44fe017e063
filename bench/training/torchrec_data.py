"""The data side of the TorchRec peer: what it needs of the library's ``Config``
(``peer_config``), the library's shards read in the trainer's order (``ShardReader``) and ids
as a ``KeyedJaggedTensor``'s arrays (``kjt_arrays``). numpy and the standard library only:
``netns_bench`` imports it beside JAX, ``torchrec_peer`` beside torch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

#: the optimizers the peer runs (its dense and table optimizer)
OPTIMIZERS = ("sgd", "adagrad")


def peer_config(config: Any) -> dict[str, Any]:
    """What the peer needs of the library trainer's ``Config`` (JSON-able): table rows,
    dims, bags, MLPs, interaction, batch, optimizer, seed, evaluation rows.

    Raises:
      ValueError: a setting the peer does not reproduce (an optimizer other than SGD or
        Adagrad, a learning-rate schedule, a dtype other than float32).
    """
    if config.optimizer not in OPTIMIZERS:
        raise ValueError(
            f"the TorchRec peer runs {' or '.join(OPTIMIZERS)}, the config has {config.optimizer!r}"
        )
    if config.warmup_steps or config.decay_steps or config.decay_start_step:
        raise ValueError("the TorchRec peer has no learning-rate schedule: warmup/decay must be 0")
    if config.embedding_dtype != "float32":
        raise ValueError(f"embedding_dtype must be float32, got {config.embedding_dtype!r}")
    return {
        "table_rows": list(config.table_rows()),
        "bag_sizes": list(config.bag_sizes()),
        "embedding_dim": config.embedding_dim,
        "bottom_mlp": list(config.bottom_mlp),
        "top_mlp": list(config.top_mlp),
        "interaction": config.interaction,
        "dcn_num_layers": config.dcn_num_layers,
        "dcn_low_rank_dim": config.dcn_low_rank_dim,
        "num_dense": config.num_dense,
        "batch_size": config.batch_size,
        "eval_batch_size": config.eval_batch_size,
        "eval_rows": config.eval_rows,
        "optimizer": config.optimizer,
        "learning_rate": config.learning_rate,
        "adagrad_eps": config.adagrad_eps,
        "seed": config.seed,
    }


def kjt_arrays(
    ids: np.ndarray, bag_sizes: Sequence[int]
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A batch's ids as the flat arrays of a TorchRec ``KeyedJaggedTensor`` (sum pooling).

    Args:
      ids: int32[b, sum(bag_sizes)], the bags back to back in table order, as a shard folder
        stores them (``ShardReader.rows``; one-hot: one column per table). A negative id is
        an empty slot (-1 pads a short bag in the trainer's ``[b, T, H]`` layout; the
        library's lookup skips it): it is left out of the bag.
      bag_sizes: T ints >= 1, the ids per bag of each table (the shard's ``bag_sizes``).

    Returns:
      ``(keys, values, lengths)``: keys ``f0 .. f{T-1}`` (feature t = table t), values
      int64[n] key-major (every row's bag of feature 0 in row order, then feature 1, ...;
      n the non-negative ids), lengths int32[T * b] (the ids of each (feature, row) bag).

    Raises:
      ValueError: ``ids`` is not ``[b, sum(bag_sizes)]``, a bag size is below 1, or an id
        is below -1.
    """
    bag_sizes = [int(h) for h in bag_sizes]
    if not bag_sizes or min(bag_sizes) < 1:
        raise ValueError(f"bag_sizes must be ints >= 1, got {bag_sizes}")
    if ids.ndim != 2 or ids.shape[1] != sum(bag_sizes):
        raise ValueError(
            f"ids must be [batch, sum(bag_sizes) = {sum(bag_sizes)}], got shape {ids.shape}"
        )
    if ids.size and ids.min() < -1:
        raise ValueError(f"ids must be >= 0 (or -1, an empty slot), got {int(ids.min())}")
    values, lengths = [], []
    for lo, h in zip(np.cumsum([0, *bag_sizes[:-1]]), bag_sizes):
        bag = ids[:, lo : lo + h]
        values.append(bag[bag >= 0])  # row-major: row 0's bag, then row 1's, ...
        lengths.append((bag >= 0).sum(axis=1))
    keys = [f"f{i}" for i in range(len(bag_sizes))]
    return keys, np.concatenate(values).astype(np.int64), np.concatenate(lengths).astype(np.int32)


SHARD_FORMAT, SHARD_VERSION = "jax_lossy_comm.criteo_shards", 1


class ShardReader:
    """The rows of a shard folder (``models.dlrm.data.preprocess``), memory-mapped per its
    ``manifest.json`` with numpy alone (the TorchRec venv needs nothing of the library's).

    Rows are read in file order, as the library trainer's ``ShardStream`` reads them with
    ``--shuffle-block-rows 0`` and no held-out rows (``--eval-data`` given): global batch
    ``g`` is stream positions ``[g * B, (g + 1) * B)`` modulo the rows (epochs wrap), process
    ``p`` takes ``[g * B + p * b, g * B + (p + 1) * b)`` (``b = B / processes``).

    Attributes:
      table_rows: rows of each table the ids were hashed into.
      bag_sizes: ids per bag of each table (the manifest's ``bag_sizes`` of a multi-hot
        folder, ``shards.write_multi_hot``; ones for a one-hot folder).

    Args:
      directory: the shard folder.

    Raises:
      FileNotFoundError: no manifest.
      ValueError: another format or version, an unfinished conversion, no rows, or a file
        whose size differs from the manifest's.
    """

    def __init__(self, directory: str):
        man = json.loads((Path(directory) / "manifest.json").read_text())
        if man.get("format") != SHARD_FORMAT or man.get("version") != SHARD_VERSION:
            raise ValueError(
                f"{directory}: not a {SHARD_FORMAT} version {SHARD_VERSION} folder "
                f"(format {man.get('format')!r}, version {man.get('version')!r})"
            )
        if not man.get("complete"):
            raise ValueError(f"{directory}: the conversion has not finished")
        shards = [s for s in man["shards"] if s["rows"] > 0]
        if not shards:
            raise ValueError(f"{directory}: no rows")
        self.table_rows = tuple(man["settings"]["table_rows"])
        self.bag_sizes = tuple(man["settings"].get("bag_sizes") or (1,) * len(self.table_rows))
        self.starts = np.cumsum([0] + [s["rows"] for s in shards]).astype(np.int64)
        self.num_rows = int(self.starts[-1])
        self.maps: dict[str, list[np.ndarray]] = {}
        for name, col in man["columns"].items():
            self.maps[name] = []
            for s in shards:
                f = Path(directory) / s["files"][name]["file"]
                want = s["rows"] * col["per_row"] * np.dtype(col["dtype"]).itemsize
                if f.stat().st_size != want:
                    raise ValueError(f"{f}: {f.stat().st_size} bytes, the manifest needs {want}")
                shape = (s["rows"], col["per_row"])
                self.maps[name].append(np.memmap(f, dtype=col["dtype"], mode="r", shape=shape))

    def rows(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Rows ``[start, stop)``: ``dense`` float32[n, 13], ``ids`` int32[n,
        sum(bag_sizes)] (the bags back to back in table order, as stored; ``kjt_arrays``),
        ``label`` float32[n]; positions past the end wrap."""
        idx = np.arange(start, stop, dtype=np.int64) % self.num_rows
        shard = np.searchsorted(self.starts, idx, side="right") - 1
        out = {}
        for name, maps in self.maps.items():
            out[name] = np.empty((len(idx), maps[0].shape[1]), maps[0].dtype)
            for k in np.unique(shard):
                at = shard == k
                out[name][at] = maps[k][idx[at] - self.starts[k]]
        return {"dense": out["dense"], "ids": out["ids"], "label": out["label"][:, 0]}

    def batch(self, index: int, global_batch: int, rank: int, world_size: int):
        """Process ``rank``'s share of global batch ``index`` (see the class doc)."""
        b = global_batch // world_size
        start = index * global_batch + rank * b
        return self.rows(start, start + b)
