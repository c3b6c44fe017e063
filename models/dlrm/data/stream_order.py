"""The order of a shard stream's training rows: blocks, epochs and held-out rows.

``StreamOrder`` maps stream positions (global training rows consumed, across epochs) to
ranges of the natural train index (training rows in file order), and those to dataset rows;
``shards.ShardStream`` reads its batches in this order (the rules in the ``shards`` module
docstring), ``bench.training.input_bench`` times readers in it.
"""

from __future__ import annotations

import bisect

import numpy as np

from models.dlrm.data import input_pipeline


class StreamOrder:
    """Where each training row of a ``shards.ShardStream`` lies: blocks, epochs, held-out rows.

    Args:
      num_rows: rows of the dataset.
      block_rows: rows of a shuffled block (contiguous in the files).
      holdout_every: every ``holdout_every``-th row (``r % holdout_every == 0``) is held out
        for evaluation; 0 = none.
      shuffle: shuffle the blocks of every epoch by ``np.random.default_rng([seed, epoch])``
        (False: file order).
      seed: seed of the block order.

    Attributes:
      h: ``holdout_every``.
      rows_per_epoch: training rows of an epoch.

    Raises:
      ValueError: ``holdout_every == 1`` (every row held out).
      input_pipeline.DataError: no training rows.
    """

    def __init__(self, num_rows, block_rows, holdout_every, shuffle, seed):
        if holdout_every == 1:
            raise ValueError("holdout_every=1 holds out every row")
        self.h, self.shuffle, self.seed = holdout_every, shuffle, seed
        bounds = np.minimum(np.arange(0, num_rows + block_rows, block_rows), num_rows)
        bounds = np.unique(bounds)
        # Training rows before each block bound, in file order (the "natural" train index).
        self.train_before = self._train_below(bounds)
        self.block_train = np.diff(self.train_before)
        self.rows_per_epoch = int(self.train_before[-1])
        if self.rows_per_epoch == 0:
            raise input_pipeline.DataError(
                f"no training rows: {num_rows} rows"
                + (f", every {holdout_every}-th held out" if holdout_every else "")
            )
        self._epoch, self._perm, self._cum, self._train_before = None, None, None, None

    def _train_below(self, x):
        """Training rows among dataset rows ``[0, x)``."""
        x = np.asarray(x, np.int64)
        return x - (x + self.h - 1) // self.h if self.h > 0 else x

    def dataset_row(self, t: int) -> int:
        """The dataset row of natural train index ``t`` (``holdout_every > 0``)."""
        return t + t // (self.h - 1) + 1

    def _epoch_order(self, epoch):
        if epoch != self._epoch:
            n = len(self.block_train)
            perm = (
                np.random.default_rng([self.seed, epoch]).permutation(n)
                if self.shuffle
                else np.arange(n)
            )
            cum = np.concatenate([[0], np.cumsum(self.block_train[perm])])
            # Lists: bisect and indexing per segment cost less than numpy calls.
            self._epoch, self._perm, self._cum = epoch, perm.tolist(), cum.tolist()
            if self._train_before is None:
                self._train_before = self.train_before.tolist()
        return self._perm, self._cum

    def segments(self, start, stop):
        """Natural train-index ranges ``(t0, t1)`` of stream positions ``[start, stop)``."""
        while start < stop:
            epoch, offset = divmod(start, self.rows_per_epoch)
            perm, cum = self._epoch_order(epoch)
            k = bisect.bisect_right(cum, offset) - 1
            take = min(stop - start, cum[k + 1] - offset)
            t0 = self._train_before[perm[k]] + offset - cum[k]
            yield t0, t0 + take
            start += take
