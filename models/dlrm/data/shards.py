"""A fast, resumable loader of the binary shards ``models.dlrm.data.preprocess`` writes.

``ShardDataset`` memory-maps a shard folder (one ``np.memmap`` per column file, checked
against the manifest: format version, sizes, optionally SHA-256). ``ShardStream`` cuts it into
training batches the way the text reader (``input_pipeline.CriteoFileStream``) does, so the two
give the same batches from the same text when shuffling is off:

* Rows: dataset row ``r`` is a training row unless ``holdout_every > 0`` and
  ``r % holdout_every == 0`` (those are the evaluation rows, ``eval_set``).
* Order: epochs of the training rows. Within an epoch, contiguous blocks of ``block_rows``
  dataset rows come in the order of ``np.random.default_rng([seed, epoch]).permutation`` when
  ``shuffle`` is on, in file order otherwise. A batch may span the end of an epoch.
* Processes: global batch ``g`` is stream positions ``[g * B, (g + 1) * B)`` (``B = local_batch
  * num_processes``); process ``p`` takes ``[g * B + p * local_batch, ...)`` and reads only those
  rows. The text reader gives the same shares.
* Resume: the stream is a pure function of ``(dataset, seed, shuffle, block_rows,
  holdout_every, train_index)``; ``position()`` is a JSON-able dict holding ``train_index``
  (global training rows consumed by the batches returned so far) and the settings, to be saved
  in the checkpoint. Prefetched batches not yet returned do not count.
* Prefetch: a background thread prepares the next ``prefetch`` batches (numpy copies release
  the GIL), so reading overlaps the device step; ``wait_seconds`` sums the time ``next_batch``
  waited for it.

References:
  Criteo binary layouts of TorchRec (numpy files per day, memory-mapped) and NVIDIA's DLRM
  (split binary); the text reader's rules in ``input_pipeline``.
"""

from __future__ import annotations

import bisect
import os
import queue
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from models.dlrm.data import input_pipeline, preprocess, synthetic
from models.dlrm.data.stream_order import StreamOrder

if TYPE_CHECKING:
    from models.dlrm.configs import Config

NAMES = tuple(preprocess.COLUMNS)


class ShardDataset:
    """The rows of a shard folder, memory-mapped (nothing is read until it is used).

    Args:
      directory: a folder written by ``preprocess.convert``.
      checksums: also check every file's SHA-256 against the manifest (reads everything once;
        sizes are always checked).

    Attributes:
      num_rows: rows of all shards, in source order.
      table_rows: rows per table the ids were hashed into (26 ints).
      manifest: the manifest dict.

    Raises:
      FileNotFoundError: no manifest in ``directory``.
      preprocess.ShardFormatError: another format version, an unfinished conversion, a
        missing file, or a size or checksum other than the manifest's.
    """

    def __init__(self, directory: str, *, checksums: bool = False):
        self.directory = directory
        self.manifest = preprocess.read_manifest(directory)
        preprocess.verify_shards(directory, self.manifest, checksums=checksums)
        self.table_rows = tuple(self.manifest["settings"]["table_rows"])
        self.data_format = self.manifest["settings"]["data_format"]
        bags = self.manifest["settings"].get("bag_sizes")
        #: ids per bag of each table (multi-hot shards), None for one-hot shards
        self.bag_sizes = tuple(bags) if bags else None
        self._columns = preprocess.column_widths(self.manifest)
        shards = [s for s in self.manifest["shards"] if s["rows"] > 0]
        self._starts = np.cumsum([0] + [s["rows"] for s in shards]).astype(np.int64)
        self.num_rows = int(self._starts[-1])
        self._bounds = self._starts.tolist()  # for bisect: cheaper than searchsorted per read
        # Plain ndarray views of the maps: slicing an np.memmap runs Python-level hooks.
        self._maps = {
            name: [
                np.asarray(
                    np.memmap(
                        os.path.join(directory, s["files"][name]["file"]),
                        dtype=dtype,
                        mode="r",
                        shape=(s["rows"], width),
                    )
                )
                for s in shards
            ]
            for name, (dtype, width) in self._columns.items()
        }

    def column(self, name: str, shard: int) -> np.ndarray:
        """Column ``name`` (of ``NAMES``) of the ``shard``-th non-empty shard, memory-mapped:
        ``[rows of the shard, width]`` of the column's dtype (nothing read until used)."""
        return self._maps[name][shard]

    def empty(self, rows: int) -> dict[str, np.ndarray]:
        """Uninitialized column arrays for ``rows`` rows (label [rows, 1])."""
        return {
            name: np.empty((rows, width), dtype) for name, (dtype, width) in self._columns.items()
        }

    def read(self, start: int, stop: int, out: dict, at: int) -> None:
        """Copies dataset rows ``[start, stop)`` into ``out[name][at : at + stop - start]``."""
        bounds = self._bounds
        shard = bisect.bisect_right(bounds, start) - 1
        while start < stop:
            end = min(stop, bounds[shard + 1])
            lo, hi = start - bounds[shard], end - bounds[shard]
            for name in NAMES:
                out[name][at : at + hi - lo] = self._maps[name][shard][lo:hi]
            at, start, shard = at + hi - lo, end, shard + 1

    def read_skipping(self, start: int, stop: int, every: int, out: dict, at: int) -> int:
        """Copies dataset rows ``[start, stop)`` except those with ``r % every == 0`` into
        ``out`` from ``at`` on; returns the rows copied.

        Runs of rows are slices, and whole groups of ``every`` rows one strided copy (a
        reshape that drops each group's first row), instead of a gather by an index array.
        """
        bounds, copied = self._bounds, 0
        shard = bisect.bisect_right(bounds, start) - 1
        while start < stop:
            end, base = min(stop, bounds[shard + 1]), bounds[shard]
            m = -(-start // every) * every  # the first held-out row >= start
            head = min(m, end) - start  # the rows before it
            groups = max(0, end - m) // every  # whole groups [m, m + groups * every)
            r = m + groups * every  # held out if below end; the rows after it train
            body, tail = groups * (every - 1), max(0, end - r - 1)
            for name in NAMES:
                src, dst = self._maps[name][shard], out[name][at:]
                dst[:head] = src[start - base : start - base + head]
                if groups:
                    w = src.shape[1]
                    block = src[m - base : r - base].reshape(groups, every, w)
                    dst[head : head + body].reshape(groups, every - 1, w)[:] = block[:, 1:]
                dst[head + body : head + body + tail] = src[r + 1 - base : r + 1 - base + tail]
            n = head + body + tail
            at, copied, start, shard = at + n, copied + n, end, shard + 1
        return copied

    def take(self, rows: np.ndarray, out: dict, at: int) -> None:
        """Copies dataset rows ``rows`` (int64, increasing) into ``out`` from ``at`` on."""
        bounds = np.searchsorted(rows, self._starts[1:-1])
        for shard, part in enumerate(np.split(rows, bounds)):
            if len(part):
                local = part - self._starts[shard]
                for name in NAMES:
                    np.take(
                        self._maps[name][shard], local, axis=0, out=out[name][at : at + len(part)]
                    )
                at += len(part)


def _as_batch(columns: dict, bag_sizes=None) -> dict[str, np.ndarray]:
    """Column arrays -> the trainer's batch dict (``input_pipeline.CriteoFileStream``);
    multi-hot ids (``bag_sizes``) -> int32[rows, T, max bag], -1 padding shorter bags."""
    ids = columns["ids"]
    if bag_sizes is None:
        ids = ids[:, :, None]
    else:
        out = np.full((len(ids), len(bag_sizes), max(bag_sizes)), -1, np.int32)
        at = 0
        for t, h in enumerate(bag_sizes):
            out[:, t, :h] = ids[:, at : at + h]
            at += h
        ids = out
    return {"dense": columns["dense"], "ids": ids, "label": columns["label"][:, 0]}


def eval_set(dataset: ShardDataset, max_rows: int, holdout_every: int = 0) -> dict:
    """The evaluation rows: the first ``max_rows`` held-out rows (``r % holdout_every == 0``),
    or with ``holdout_every <= 0`` the first ``max_rows`` rows (a separate evaluation folder).

    Returns:
      ``dense`` float32[n, 13], ``ids`` int32[n, 26, H] (H = 1, or the longest bag of
      multi-hot shards, -1 padded), ``label`` float32[n].

    Raises:
      ValueError: no rows.
    """
    if holdout_every > 0:
        rows = np.arange(0, dataset.num_rows, holdout_every, dtype=np.int64)[:max_rows]
    else:
        rows = np.arange(min(max_rows, dataset.num_rows), dtype=np.int64)
    if not len(rows):
        raise ValueError(f"no evaluation rows in {dataset.directory}")
    out = dataset.empty(len(rows))
    dataset.take(rows, out, 0)
    return _as_batch(out, dataset.bag_sizes)


class ShardStream:
    """Training batches of one process from a ``ShardDataset`` (see the module docstring).

    Args:
      dataset: the shards.
      local_batch: rows per batch of this process (global batch / processes).
      seed: seed of the block order (with ``shuffle``).
      shuffle: shuffle the blocks of every epoch (False: file order, as the text reader).
      block_rows: rows of a shuffled block (contiguous in the files).
      holdout_every: every ``holdout_every``-th row (0-based ``r % holdout_every == 0``) is
        for evaluation only; 0 = none.
      process_index, num_processes: this process's share.
      prefetch: batches prepared ahead by a background thread (0: read in ``next_batch``).
      position: a ``position()`` of an earlier stream with the same settings, to resume.

    Raises:
      ValueError: a ``position`` made with other settings or another dataset.
      input_pipeline.DataError: no training rows (empty shards, or all held out), naming
        the folder.
    """

    def __init__(
        self,
        dataset: ShardDataset,
        local_batch: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        block_rows: int = 4096,
        holdout_every: int = 0,
        process_index: int = 0,
        num_processes: int = 1,
        prefetch: int = 2,
        position: dict | None = None,
    ):
        self.dataset, self.local_batch = dataset, int(local_batch)
        self.process_index, self.num_processes = process_index, num_processes
        self._settings = {
            "source": "shards",
            "rows": dataset.num_rows,
            "seed": int(seed),
            "shuffle": bool(shuffle),
            "block_rows": int(block_rows),
            "holdout_every": int(holdout_every),
        }
        try:
            self._order = StreamOrder(dataset.num_rows, block_rows, holdout_every, shuffle, seed)
        except input_pipeline.DataError as e:  # name the folder (an empty source file?)
            raise input_pipeline.DataError(f"the shards in {dataset.directory}: {e}") from None
        self.train_index = 0
        if position:
            mismatch = {
                k: (position.get(k), v) for k, v in self._settings.items() if position.get(k) != v
            }
            if mismatch:
                raise ValueError(
                    f"cannot resume: the position was made with other settings "
                    f"(saved, now): {mismatch}"
                )
            self.train_index = int(position["train_index"])
        self.wait_seconds = 0.0
        self.bad_lines = int(dataset.manifest.get("bad_lines", 0))  # skipped when converted
        self._prefetch = prefetch
        self._queue, self._thread, self._stop = None, None, threading.Event()

    def position(self) -> dict:
        """JSON-able position after the last batch returned (goes into the checkpoint)."""
        epoch = self.train_index // self._order.rows_per_epoch
        return dict(self._settings, train_index=self.train_index, epoch=epoch)

    def _batch_at(self, train_index: int) -> dict[str, np.ndarray]:
        start = train_index + self.process_index * self.local_batch
        out = self.dataset.empty(self.local_batch)
        at = 0
        for t0, t1 in self._order.segments(start, start + self.local_batch):
            if self._order.h > 0:  # the dataset rows between, less the held-out ones
                first, last = self._order.dataset_row(t0), self._order.dataset_row(t1 - 1)
                self.dataset.read_skipping(first, last + 1, self._order.h, out, at)
            else:
                self.dataset.read(t0, t1, out, at)
            at += t1 - t0
        return _as_batch(out, self.dataset.bag_sizes)

    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _produce(self, train_index: int) -> None:
        step = self.local_batch * self.num_processes
        try:
            while not self._stop.is_set():
                self._put((self._batch_at(train_index), train_index + step))
                train_index += step
        except BaseException as e:  # handed to next_batch
            self._put((e, None))

    def next_batch(self) -> dict[str, np.ndarray]:
        """This process's next batch: ``dense`` float32[b, 13], ``ids`` int32[b, 26, H] (as
        ``eval_set``),
        ``label`` float32[b] (b = ``local_batch``)."""
        if self._prefetch <= 0:
            batch = self._batch_at(self.train_index)
            self.train_index += self.local_batch * self.num_processes
            return batch
        if self._thread is None:
            self._queue = queue.Queue(self._prefetch)
            self._thread = threading.Thread(
                target=self._produce,
                args=(self.train_index,),
                daemon=True,
                name="shard-prefetch",
            )
            self._thread.start()
        t = time.perf_counter()
        batch, after = self._queue.get()
        self.wait_seconds += time.perf_counter() - t
        if after is None:
            raise batch
        self.train_index = after
        return batch

    def close(self) -> None:
        """Stops the prefetch thread (the stream cannot be used afterwards)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make_data(config: Config, local_batch, position, *, process_index=0, num_processes=1):
    """``data.make_data`` (same arguments) for a ``config.data`` folder of shards.

    The stream is a ``ShardStream`` (seed ``config.seed``, blocks of
    ``config.shuffle_block_rows`` shuffled every epoch, or file order if it is 0). The
    evaluation set is the first ``config.eval_rows`` rows of ``config.eval_data`` (shards, or
    text files read by ``input_pipeline.read_eval_set``) or, without it, every
    ``config.holdout_every``-th row of the shards.

    Returns:
      ``(stream, eval_set, description, bag_sizes)`` as ``data.make_data``; ``bag_sizes``:
      the shards' (None for one-hot shards, or when ``config.eval_data`` shards hold other
      bags than the training shards).

    Raises:
      input_pipeline.DataError: the shards were hashed into other table rows than
        ``config.table_rows()``.
      ValueError: ``position`` belongs to another stream.
      preprocess.ShardFormatError: see ``ShardDataset``.
    """
    rows = config.table_rows()
    dataset = ShardDataset(config.data)
    if dataset.table_rows != tuple(rows):
        raise input_pipeline.DataError(
            f"the shards in {config.data} hold ids hashed into table rows "
            f"{list(dataset.table_rows)}, the config's tables have {list(rows)}: train with the "
            "preset and --max-ind-range the shards were converted with (the preprocess "
            "command's --config and --max-ind-range), or convert again"
        )
    holdout = 0 if config.eval_data else config.holdout_every
    block = config.shuffle_block_rows
    bags = dataset.bag_sizes
    stream = ShardStream(
        dataset,
        local_batch,
        seed=config.seed,
        shuffle=block > 0,
        block_rows=block or 4096,
        holdout_every=holdout,
        process_index=process_index,
        num_processes=num_processes,
        position=position,
    )
    if not config.eval_data:
        eval_rows, where = eval_set(dataset, config.eval_rows, holdout), f"every {holdout}-th row"
    elif os.path.isfile(os.path.join(config.eval_data, preprocess.MANIFEST)):
        eval_data = ShardDataset(config.eval_data)
        eval_rows, where = eval_set(eval_data, config.eval_rows), "shards"
        if eval_data.bag_sizes != dataset.bag_sizes:
            bags = None  # the batches' bags are not all one layout: the ids travel padded
    else:
        eval_rows, _ = input_pipeline.read_eval_set(
            input_pipeline.expand_paths(config.eval_data), config.data_format, rows,
            config.eval_rows, skip_bad_lines=config.skip_bad_lines,
        )  # fmt: skip
        where = "text"
    order = f"blocks of {block} rows shuffled by seed {config.seed}" if block else "file order"
    desc = (
        f"shards {config.data} ({dataset.num_rows} rows, {dataset.data_format}, {order}); "
        f"eval {len(eval_rows['label'])} rows ({where}"
        f"{f' of {config.eval_data}' if config.eval_data else ''})"
    )
    return stream, eval_rows, desc, bags


def write_multi_hot(
    src_dir: str, out_dir: str, bag_sizes, *, seed: int = 0, piece_rows: int = 1 << 16
) -> dict:
    """One-hot shards -> multi-hot shards by MLPerf's rule (``synthetic.mlperf_bags``): row
    ``r``'s bag of table ``t`` is its id followed by ``bag_sizes[t] - 1`` ids fixed per that
    id, as MLPerf's ``scripts/materialize_synthetic_multihot_dataset.py``
    (mlcommons/training: ``recommendation_v2/torchrec_dlrm``, distribution "uniform").

    The label and dense files are copied; the ids file holds ``sum(bag_sizes)`` int32 per row;
    the manifest's settings gain ``bag_sizes``, ``multi_hot_rule`` and ``multi_hot_seed``
    (one-hot folders have none of them and read as before).

    Args:
      src_dir: a complete one-hot shard folder (``preprocess.convert``).
      out_dir: the new folder (created).
      bag_sizes: ids per bag of each table (one int >= 1 per table).
      seed: the rule's seed.
      piece_rows: rows converted at a time (memory stays flat).

    Returns:
      The new manifest.

    Raises:
      preprocess.ShardFormatError: ``src_dir`` is incomplete or already multi-hot.
      ValueError: ``bag_sizes`` is not one int >= 1 per table.
    """
    dataset = ShardDataset(src_dir)
    settings = dataset.manifest["settings"]
    if dataset.bag_sizes is not None:
        raise preprocess.ShardFormatError(f"{src_dir} already holds multi-hot bags")
    bag_sizes = [int(h) for h in bag_sizes]
    if len(bag_sizes) != len(dataset.table_rows) or min(bag_sizes) < 1:
        raise ValueError(f"bag_sizes: {len(dataset.table_rows)} ints >= 1, got {bag_sizes}")
    os.makedirs(out_dir, exist_ok=True)
    shards = []
    for k, shard in enumerate(s for s in dataset.manifest["shards"] if s["rows"] > 0):
        writers = {n: preprocess.ColumnWriter(os.path.join(out_dir, f"{shard['name']}.{n}"))
                   for n in NAMES}  # fmt: skip
        for lo in range(0, shard["rows"], piece_rows):
            hi = min(lo + piece_rows, shard["rows"])
            writers["label"].write(dataset.column("label", k)[lo:hi])
            writers["dense"].write(dataset.column("dense", k)[lo:hi])
            ids = dataset.column("ids", k)[lo:hi]
            writers["ids"].write(synthetic.mlperf_bags(ids, dataset.table_rows, bag_sizes, seed))
        shards.append(dict(shard, files={n: w.finish() for n, w in writers.items()}))
    manifest = dict(
        dataset.manifest,
        settings=dict(settings, bag_sizes=bag_sizes, multi_hot_rule="mlperf", multi_hot_seed=seed),
        shards=shards,
        multi_hot={"from": os.path.abspath(src_dir)},
    )
    manifest["columns"] = {
        k: {"dtype": d, "per_row": w} for k, (d, w) in preprocess.column_widths(manifest).items()
    }
    preprocess.write_manifest(out_dir, manifest)
    return manifest
