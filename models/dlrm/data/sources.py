"""The run's data selection: which training stream and evaluation set a ``Config`` asks for.

Synthetic data (``synthetic.py``), Criteo text files (``input_pipeline.py``) or a folder of
binary shards (``preprocess.py`` writes them, ``shards.py`` reads them); this module is the one
place that chooses, so the readers do not import each other.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from models.dlrm.data import input_pipeline, shards, synthetic

if TYPE_CHECKING:
    from models.dlrm.configs.default import Config


class Data(NamedTuple):
    """What ``make_data`` gives a run (unpacks like a tuple).

    Attributes:
      stream: ``stream.next_batch()`` gives this process's batch; ``stream.position()`` where
        it resumes; ``stream.bad_lines`` (file streams) distinct malformed lines skipped.
      eval_set: the whole evaluation set (dict of numpy arrays, every process holds it).
      description: one line for the log.
      eval_bad_lines: malformed lines skipped reading the evaluation set.
      bag_sizes: ids per bag of each table in the batches (multi-hot: ``ids`` int32[b, T,
        max bag], -1 past each bag), or None: one id per table.
    """

    stream: Any
    eval_set: dict[str, np.ndarray]
    description: str
    eval_bad_lines: int = 0
    bag_sizes: tuple[int, ...] | None = None


def synthetic_generator(config: Config) -> synthetic.SyntheticCriteo:
    """The synthetic generator a ``Config`` without ``--data`` trains on: its capped table
    rows, dense features, bags (``Config.bag_sizes``, ``synthetic_multi_hot_rule``), Zipf
    exponent and seed.

    Returns:
      ``synthetic.SyntheticCriteo``.

    Raises:
      ValueError: settings the generator refuses (see ``SyntheticCriteo``).
    """
    return synthetic.SyntheticCriteo(
        config.table_rows(),
        config.num_dense,
        config.synthetic_multi_hot,
        config.synthetic_zipf_a,
        config.seed,
        bag_sizes=config.bag_sizes(),
        multi_hot_rule=config.synthetic_multi_hot_rule,
    )


def make_data(
    config: Config,
    local_batch: int,
    position: dict | None,
    *,
    process_index: int = 0,
    num_processes: int = 1,
) -> Data:
    """The training stream and evaluation set a run's ``config`` asks for, for one process.

    Without ``config.data``: the synthetic generator (``synthetic.SyntheticCriteo``, seeded by
    ``config.seed``). With it: ``input_pipeline.CriteoFileStream`` over the files, and the evaluation set from
    ``config.eval_data`` or, without it, every ``config.holdout_every``-th line of the data;
    a folder of shards (``models.dlrm.data.preprocess``) goes to ``shards.make_data``.

    Args:
      config: the run's Config (``data``, ``eval_data``, ``data_format``, ``eval_rows``,
        ``holdout_every``, ``skip_bad_lines``, the synthetic fields, ``seed``).
      local_batch: rows per batch of this process (global batch / processes).
      position: where to resume the stream (a checkpoint's ``data_position``), or None.
      process_index, num_processes: this process and the process count (jax.distributed).

    Returns:
      ``Data(stream, eval_set, description, eval_bad_lines, bag_sizes)``.

    Raises:
      FileNotFoundError: no file matches ``config.data`` or ``config.eval_data``.
      MalformedLineError: a bad evaluation line without ``skip_bad_lines``.
    """
    rows = config.table_rows()
    pid, nproc = process_index, num_processes
    if config.data and os.path.isfile(os.path.join(config.data, "manifest.json")):
        stream, eval_set, desc, bags = shards.make_data(
            config, local_batch, position, process_index=pid, num_processes=nproc
        )
        return Data(stream, eval_set, desc, bag_sizes=bags)
    if not config.data:
        gen = synthetic_generator(config)
        stream = input_pipeline.SyntheticStream(
            gen, local_batch * nproc, process_index=pid, num_processes=nproc, position=position
        )
        eval_set = gen.eval_set(config.eval_rows)
        desc = (
            f"SYNTHETIC Criteo-like data (project generator, not real Criteo): "
            f"{len(rows)} tables, Zipf a={config.synthetic_zipf_a}, "
            + (
                f"bags {','.join(map(str, gen.bag_sizes))} ({config.synthetic_multi_hot_rule}), "
                if gen.multi_hot > 1
                else ""
            )
            + f"{config.eval_rows} held-out rows"
        )
        return Data(stream, eval_set, desc, bag_sizes=tuple(gen.bag_sizes))
    paths = input_pipeline.expand_paths(config.data)
    holdout = 0 if config.eval_data else config.holdout_every
    stream = input_pipeline.CriteoFileStream(
        paths,
        config.data_format,
        rows,
        local_batch,
        skip_bad_lines=config.skip_bad_lines,
        holdout_every=holdout,
        process_index=pid,
        num_processes=nproc,
        position=position,
    )
    eval_paths = input_pipeline.expand_paths(config.eval_data) if config.eval_data else paths
    eval_set, bad = input_pipeline.read_eval_set(
        eval_paths,
        config.data_format,
        rows,
        config.eval_rows,
        skip_bad_lines=config.skip_bad_lines,
        holdout_every=holdout,
    )
    # Kaggle's and Terabyte's lines have one layout: the files are named by it, not by a
    # dataset the preset assumes (a Kaggle file under the DCNv2 preset was "terabyte files")
    layout = "CSV" if config.data_format == "csv" else "Criteo tab-separated"
    desc = (
        f"{layout} files {paths[:3]}{'...' if len(paths) > 3 else ''}; eval "
        f"{len(eval_set['label'])} rows from "
        f"{f'held-out lines (every {holdout}-th)' if holdout else eval_paths[:3]}"
        f"{f'; {bad} bad eval lines skipped' if bad else ''}"
    )
    return Data(stream, eval_set, desc, bad)
