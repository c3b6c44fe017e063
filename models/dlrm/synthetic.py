"""Synthetic Criteo-like click data, made by this project (NOT real Criteo data).

Used when no ``--data`` is given. It imitates what matters for the embedding exchange and
for learning:

* 26 categorical features with the Criteo Kaggle cardinalities, capped by
  ``--max-ind-range``; ids are Zipf distributed (p(rank k) ~ 1 / k^a) through a fixed random
  permutation, so a batch repeats hot ids like real click logs (the effect the paper's
  vector-level matching exploits, Feng et al. SC24 Sec. 3).
* 13 dense count features, log-normal with ~20% missing, preprocessed like real data
  (``log(1 + max(x, 0))``, missing = 0).
* Labels from a fixed random "teacher": a logit that sums a linear dense term, a per-id
  effect of every table and dot products of low-rank id vectors of a few table pairs, then
  ``label ~ Bernoulli(sigmoid(logit))`` with ~25% positives. The teacher is fixed by the
  seed, so AUC is learnable (the Bayes AUC is below 1 because labels are sampled).

Every batch is a pure function of ``(seed, stream, index)``: training can resume at any
batch and every process of a multi-host run can cut its share of the same global batch.
"""

from __future__ import annotations

import numpy as np

_TEACHER_RANK = 4
_NUM_PAIRS = 8
_STREAM_IDS = {"train": 1, "eval": 2}


class SyntheticCriteo:
    """Deterministic generator of Criteo-like batches.

    Args:
      table_rows: rows of each table (ids are in ``[0, rows)``).
      num_dense: dense features (13 for Criteo).
      multi_hot: ids per bag (H); 1 = one-hot.
      zipf_a: Zipf exponent of the id popularity (> 0).
      seed: fixes the teacher and every batch.
      positive_rate: target fraction of positive labels.
    """

    def __init__(
        self,
        table_rows,
        num_dense: int = 13,
        multi_hot: int = 1,
        zipf_a: float = 1.1,
        seed: int = 0,
        positive_rate: float = 0.25,
    ):
        self.table_rows = tuple(int(r) for r in table_rows)
        self.num_dense, self.multi_hot, self.seed = num_dense, multi_hot, seed
        rng = np.random.default_rng([seed, 0])
        self._cdf, self._perm, self._effect, self._vec = [], [], [], []
        for rows in self.table_rows:
            p = 1.0 / np.arange(1, rows + 1, dtype=np.float64) ** zipf_a
            self._cdf.append(np.cumsum(p) / p.sum())
            self._perm.append(rng.permutation(rows).astype(np.int32))
            self._effect.append(rng.normal(0.0, 1.0, rows).astype(np.float32))
            self._vec.append(rng.normal(0.0, 1.0, (rows, _TEACHER_RANK)).astype(np.float32))
        t = len(self.table_rows)
        self._pairs = [tuple(rng.choice(t, 2, replace=False)) for _ in range(_NUM_PAIRS)]
        self._dense_mu = rng.uniform(0.0, 4.0, num_dense)
        self._dense_sigma = rng.uniform(0.5, 2.0, num_dense)
        self._dense_w = rng.normal(0.0, 1.0, num_dense).astype(np.float32)
        self._table_w = rng.uniform(0.2, 1.0, t).astype(np.float32)
        # Calibrate scale and bias on a fixed sample: logit std 2, positive_rate positives.
        self._scale, self._bias = 1.0, 0.0
        z = self._raw_logit(*self._features(np.random.default_rng([seed, 3]), 8192))
        self._scale = 2.0 / max(float(z.std()), 1e-6)
        zs = np.sort(z * self._scale)
        self._bias = -float(zs[int((1.0 - positive_rate) * (len(zs) - 1))])

    def _features(self, rng, n):
        raw = np.floor(np.exp(rng.normal(self._dense_mu, self._dense_sigma, (n, self.num_dense))))
        raw[rng.random((n, self.num_dense)) < 0.2] = 0.0
        dense = np.log1p(np.maximum(raw, 0.0)).astype(np.float32)
        ids = np.empty((n, len(self.table_rows), self.multi_hot), np.int32)
        for t, (cdf, perm) in enumerate(zip(self._cdf, self._perm)):
            rank = np.minimum(np.searchsorted(cdf, rng.random((n, self.multi_hot))), len(cdf) - 1)
            ids[:, t] = perm[rank]
        return dense, ids

    def _raw_logit(self, dense, ids):
        d = (dense - 2.0) / 2.0
        z = d @ self._dense_w / np.sqrt(self.num_dense)
        for t, (eff, w) in enumerate(zip(self._effect, self._table_w)):
            z = z + w * eff[ids[:, t]].sum(axis=1) / np.sqrt(len(self.table_rows))
        for a, b in self._pairs:
            va = self._vec[a][ids[:, a]].sum(axis=1)
            vb = self._vec[b][ids[:, b]].sum(axis=1)
            z = z + (va * vb).sum(axis=1) / np.sqrt(_TEACHER_RANK * _NUM_PAIRS)
        return z * self._scale + self._bias

    def batch(self, index: int, size: int, stream: str = "train") -> dict[str, np.ndarray]:
        """Global batch ``index`` of ``stream`` ("train" or "eval").

        Returns:
          dict with ``dense`` float32[size, num_dense] (preprocessed), ``ids``
          int32[size, T, multi_hot] and ``label`` float32[size] in {0, 1}.
        """
        rng = np.random.default_rng([self.seed, _STREAM_IDS[stream], int(index)])
        dense, ids = self._features(rng, size)
        prob = 1.0 / (1.0 + np.exp(-self._raw_logit(dense, ids)))
        label = (rng.random(size) < prob).astype(np.float32)
        return {"dense": dense, "ids": ids, "label": label}

    def eval_set(self, rows: int, chunk: int = 8192) -> dict[str, np.ndarray]:
        """The held-out evaluation set: ``rows`` rows from the "eval" stream."""
        parts = [
            self.batch(i, min(chunk, rows - i * chunk), "eval")
            for i in range((rows + chunk - 1) // chunk)
        ]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
