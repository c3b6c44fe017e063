"""Synthetic Criteo-like click data, made by this project (NOT real Criteo data).

Used when no ``--data`` is given. It imitates what matters for the embedding exchange and
for learning:

* 26 categorical features with the Criteo Kaggle cardinalities, capped by
  ``--max-ind-range``; ids are Zipf distributed (p(rank k) ~ 1 / k^a) through a fixed random
  permutation, so a batch repeats hot ids like real click logs (the effect the paper's
  vector-level matching exploits, Feng et al. SC24 Sec. 3).
* Bags: one id per table (one-hot, as Criteo), ``multi_hot`` ids per bag, or per-table bag
  sizes (``bag_sizes``; MLPerf DLRM-DCNv2's 3,2,1,2,6,...); a bag shorter than the longest is
  padded with -1 (an empty slot the lookup skips). A bag's ids are either all drawn Zipf
  (``multi_hot_rule="independent"``) or, as MLPerf's synthetic multi-hot Criteo
  (mlcommons/training: ``recommendation_v2/torchrec_dlrm``, ``Multihot`` in ``multi_hot.py``
  and ``scripts/materialize_synthetic_multihot_dataset.py``, distribution "uniform"), one Zipf
  id ``i`` followed by ``H - 1`` ids fixed per ``i`` and uniform over the table
  (``"mlperf"``; MLPerf stores them in a ``[rows, H - 1]`` table drawn with seed 0, here they
  are a hash of ``(seed, table, i, k)``: the same law without a table-sized array). Under
  the MLPerf rule a bag repeats exactly as often as its first id.
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
#: ``multi_hot_rule`` choices (see the module docstring)
MULTI_HOT_RULES = ("independent", "mlperf")


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser (Steele et al., OOPSLA 2014): uint64 -> well-mixed uint64."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def mlperf_fixed_ids(first: np.ndarray, rows: int, h: int, table: int, seed: int) -> np.ndarray:
    """The ``h - 1`` ids MLPerf's multi-hot rule adds to a bag whose first id is ``first``.

    Args:
      first: int32[n], the bags' first (one-hot) ids in ``[0, rows)``.
      rows, h, table, seed: the table's rows, its bag size, its index and the data seed.

    Returns:
      int32[n, h - 1] in ``[0, rows)``, uniform, a pure function of ``(seed, table, id)``
      (MLPerf's ``Multihot`` draws a ``[rows, h - 1]`` table once with seed 0 instead).
    """
    key = (np.uint64(seed) << np.uint64(40)) ^ (np.uint64(table) << np.uint64(32))
    x = (first.astype(np.uint64)[:, None] << np.uint64(8)) + np.arange(1, h, dtype=np.uint64)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        mixed = _mix64(x * np.uint64(0x9E3779B97F4A7C15) ^ key)
    return (mixed % np.uint64(rows)).astype(np.int32)


def mlperf_bags(ids: np.ndarray, table_rows, bag_sizes, seed: int = 0) -> np.ndarray:
    """One-hot ids -> MLPerf multi-hot bags, back to back in table order.

    Args:
      ids: int32[n, T], one id per table.
      table_rows, bag_sizes: T ints each.
      seed: the data seed (``mlperf_fixed_ids``).

    Returns:
      int32[n, sum(bag_sizes)]: table t's bag (its id, then ``mlperf_fixed_ids``) at columns
      ``[sum(bag_sizes[:t]), sum(bag_sizes[:t + 1]))``.
    """
    parts = []
    for t, (rows, h) in enumerate(zip(table_rows, bag_sizes)):
        parts.append(ids[:, t : t + 1])
        if h > 1:
            parts.append(mlperf_fixed_ids(ids[:, t], int(rows), int(h), t, seed))
    return np.concatenate(parts, axis=1).astype(np.int32)


class SyntheticCriteo:
    """Deterministic generator of Criteo-like batches.

    Args:
      table_rows: rows of each table (ids are in ``[0, rows)``).
      num_dense: dense features (13 for Criteo).
      multi_hot: ids per bag (H) of every table; 1 = one-hot.
      bag_sizes: ids per bag of each table (T ints >= 1), instead of ``multi_hot``.
      multi_hot_rule: "independent" or "mlperf" (see the module docstring).
      zipf_a: Zipf exponent of the id popularity (> 0).
      seed: fixes the teacher and every batch.
      positive_rate: target fraction of positive labels.

    Raises:
      ValueError: ``bag_sizes`` not one int >= 1 per table, ``multi_hot < 1`` or an unknown
        ``multi_hot_rule``.
    """

    def __init__(
        self,
        table_rows,
        num_dense: int = 13,
        multi_hot: int = 1,
        zipf_a: float = 1.1,
        seed: int = 0,
        positive_rate: float = 0.25,
        *,
        bag_sizes=None,
        multi_hot_rule: str = "independent",
    ):
        self.table_rows = tuple(int(r) for r in table_rows)
        t = len(self.table_rows)
        if bag_sizes is None:
            bag_sizes = (multi_hot,) * t
        self.bag_sizes = tuple(int(h) for h in bag_sizes)
        if len(self.bag_sizes) != t or min(self.bag_sizes) < 1:
            raise ValueError(f"bag_sizes must be {t} ints >= 1, got {self.bag_sizes}")
        if multi_hot_rule not in MULTI_HOT_RULES:
            raise ValueError(
                f"multi_hot_rule must be one of {MULTI_HOT_RULES}, got {multi_hot_rule!r}"
            )
        self.multi_hot_rule = multi_hot_rule
        self.multi_hot = max(self.bag_sizes)  # H of the ids array
        self.num_dense, self.seed = num_dense, seed
        rng = np.random.default_rng([seed, 0])
        self._cdf, self._perm, self._effect, self._vec = [], [], [], []
        for rows in self.table_rows:
            p = 1.0 / np.arange(1, rows + 1, dtype=np.float64) ** zipf_a
            self._cdf.append(np.cumsum(p) / p.sum())
            self._perm.append(rng.permutation(rows).astype(np.int32))
            self._effect.append(rng.normal(0.0, 1.0, rows).astype(np.float32))
            self._vec.append(rng.normal(0.0, 1.0, (rows, _TEACHER_RANK)).astype(np.float32))
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
        ids = np.full((n, len(self.table_rows), self.multi_hot), -1, np.int32)
        mlperf = self.multi_hot_rule == "mlperf"
        for t, (cdf, perm, h) in enumerate(zip(self._cdf, self._perm, self.bag_sizes)):
            drawn = 1 if mlperf else h
            rank = np.minimum(np.searchsorted(cdf, rng.random((n, drawn))), len(cdf) - 1)
            ids[:, t, :drawn] = perm[rank]
            if mlperf and h > 1:
                ids[:, t, 1:h] = mlperf_fixed_ids(ids[:, t, 0], self.table_rows[t], h, t, self.seed)
        return dense, ids

    def _raw_logit(self, dense, ids):
        d = (dense - 2.0) / 2.0
        z = d @ self._dense_w / np.sqrt(self.num_dense)
        h = self.bag_sizes  # ids[:, t, :h[t]] is table t's bag; -1 pads the rest
        # MLPerf rule: a bag's effect is its sum over sqrt(H), so a 100-id bag does not drown
        # the other tables (the independent rule keeps the plain sum it always had).
        norm = np.sqrt(h) if self.multi_hot_rule == "mlperf" else np.ones(len(h))
        for t, (eff, w) in enumerate(zip(self._effect, self._table_w)):
            e = eff[ids[:, t, : h[t]]].sum(axis=1)
            e = e / norm[t] if norm[t] != 1 else e
            z = z + w * e / np.sqrt(len(self.table_rows))
        for a, b in self._pairs:
            va = self._vec[a][ids[:, a, : h[a]]].sum(axis=1) / norm[a]
            vb = self._vec[b][ids[:, b, : h[b]]].sum(axis=1) / norm[b]
            z = z + (va * vb).sum(axis=1) / np.sqrt(_TEACHER_RANK * _NUM_PAIRS)
        return z * self._scale + self._bias

    def batch(self, index: int, size: int, stream: str = "train") -> dict[str, np.ndarray]:
        """Global batch ``index`` of ``stream`` ("train" or "eval").

        Returns:
          dict with ``dense`` float32[size, num_dense] (preprocessed), ``ids``
          int32[size, T, H] (H the longest bag; -1 pads shorter bags) and ``label``
          float32[size] in {0, 1}.
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
