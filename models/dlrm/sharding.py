"""Table placement plan: table-wise sharding of the embedding tables across devices.

The plan (``plan_tables``) follows the reference DLRM's table-wise model parallelism
(facebookresearch/dlrm, ``dlrm_s_pytorch.py`` with ``--dist-backend``) and the SC24 paper's
setting (Feng et al., arXiv 2407.04272, Sec. 2): every table lives whole on one device.

Plan, in words:
  1. ``L = ceil(T / P)`` local table slots per device, so every device runs the same
     program on the same shapes under ``shard_map``; the ``P * L - T`` unused slots hold
     dummy tables with zero rows whose pooled output is all zeros (they are dropped after
     the exchange and cost ``batch * dim`` floats of padding each on the wire).
  2. Greedy balancing by cost = rows x dim (the table's memory and its update work): tables
     are taken largest first and put on the device with the smallest total cost that still
     has a free slot (ties: lowest device index). This is the LPT heuristic (Graham 1969);
     the most loaded device carries at most 4/3 of the optimum plus one table.
  3. Each device keeps its local tables back to back in one buffer
     ``float32[rows_per_device, dim]``; ``rows_per_device`` is the largest device total, so
     the global parameter is ``float32[P, rows_per_device, dim]`` sharded on axis 0. A slot
     is addressed by a row offset (``offsets[d, j]``).
  4. Exchange order: slot ``j`` of device ``d`` is column ``d * L + j`` of the pooled
     embeddings after the all-to-all (``[batch / P, P * L, dim]``); ``gather_index`` maps
     table ``t`` to its column, putting the tables back in dataset order.

Row-wise splitting of a table larger than one device's share is not implemented: cap the
tables with ``--max-ind-range`` (as the reference DLRM does) so the largest table fits.
``plan_tables`` reports the imbalance so a user sees when a table dominates.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class TablePlacement:
  """Where every table lives. All arrays are host numpy (static for ``jit``).

  Attributes:
    num_devices: P, devices on the table axis.
    table_rows: rows of each of the T tables (after the ``max_ind_range`` cap).
    dim: embedding width.
    local_tables: L = ceil(T / P), table slots per device.
    rows_per_device: R, rows of each device's buffer (max over devices, at least 1).
    device_of: int32[T], owning device of each table.
    slot_of: int32[T], slot of each table on its device.
    slot_table: int32[P, L], table in each slot, -1 for a dummy slot.
    offsets: int32[P, L], first buffer row of each slot.
    slot_rows: int32[P, L], rows of each slot (0 for a dummy slot).
  """

  num_devices: int
  table_rows: tuple[int, ...]
  dim: int
  local_tables: int
  rows_per_device: int
  device_of: np.ndarray
  slot_of: np.ndarray
  slot_table: np.ndarray
  offsets: np.ndarray
  slot_rows: np.ndarray

  @property
  def num_tables(self) -> int:
    return len(self.table_rows)

  @property
  def gather_index(self) -> np.ndarray:
    """int32[T]: column of table t in the exchanged ``[batch/P, P*L, dim]`` array."""
    return (self.device_of * self.local_tables + self.slot_of).astype(np.int32)

  @property
  def slot_table_flat(self) -> np.ndarray:
    """int32[P*L]: table in exchange column ``d*L + j`` (-1 = dummy)."""
    return self.slot_table.reshape(-1)

  def device_rows(self) -> np.ndarray:
    """int64[P]: used rows per device."""
    return self.slot_rows.sum(axis=1)

  def imbalance(self) -> float:
    """Max over mean of per-device rows x dim (1.0 = perfect balance)."""
    rows = self.device_rows().astype(np.float64)
    return float(rows.max() / max(rows.mean(), 1e-12))

  def describe(self) -> str:
    """A human-readable table of the plan."""
    lines = [f"table-wise placement: {self.num_tables} tables on {self.num_devices} devices, "
             f"{self.local_tables} slots each, buffer {self.rows_per_device} x {self.dim} "
             f"float32 per device, imbalance {self.imbalance():.2f}"]
    for d in range(self.num_devices):
      tabs = [int(t) for t in self.slot_table[d] if t >= 0]
      lines.append(f"  device {d}: tables {tabs} rows {int(self.device_rows()[d])}")
    return "\n".join(lines)


def plan_tables(table_rows, dim: int, num_devices: int) -> TablePlacement:
  """Greedy (largest first) table-wise placement balanced by rows x dim.

  Args:
    table_rows: sequence of T positive ints, rows per table.
    dim: embedding width (same for all tables, as in DLRM).
    num_devices: P >= 1.

  Returns:
    A ``TablePlacement``.

  Raises:
    ValueError: no tables, a table with no rows, or ``num_devices < 1``.
  """
  table_rows = tuple(int(r) for r in table_rows)
  if not table_rows:
    raise ValueError("plan_tables needs at least one table")
  if min(table_rows) < 1:
    raise ValueError(f"every table needs at least one row, got {table_rows}")
  if num_devices < 1:
    raise ValueError(f"num_devices must be >= 1, got {num_devices}")
  t_count, p = len(table_rows), num_devices
  l_slots = math.ceil(t_count / p)
  load = np.zeros(p, np.int64)
  used = np.zeros(p, np.int64)
  device_of = np.zeros(t_count, np.int32)
  slot_of = np.zeros(t_count, np.int32)
  slot_table = -np.ones((p, l_slots), np.int32)
  # Largest first; stable on ties so the plan is deterministic.
  for t in sorted(range(t_count), key=lambda i: (-table_rows[i], i)):
    free = np.flatnonzero(used < l_slots)
    d = int(free[np.argmin(load[free])])
    device_of[t], slot_of[t] = d, used[d]
    slot_table[d, used[d]] = t
    used[d] += 1
    load[d] += table_rows[t] * dim
  slot_rows = np.where(slot_table >= 0,
                       np.asarray(table_rows + (0,), np.int64)[slot_table], 0).astype(np.int32)
  offsets = np.zeros_like(slot_rows)
  offsets[:, 1:] = np.cumsum(slot_rows, axis=1)[:, :-1]
  rows_per_device = max(int(slot_rows.sum(axis=1).max()), 1)
  return TablePlacement(num_devices=p, table_rows=table_rows, dim=dim, local_tables=l_slots,
                        rows_per_device=rows_per_device, device_of=device_of, slot_of=slot_of,
                        slot_table=slot_table, offsets=offsets, slot_rows=slot_rows)


def split_tables(placement: TablePlacement, buffer: np.ndarray) -> list[np.ndarray]:
  """Cuts the sharded buffer ``float32[P, R, dim]`` into T per-table ``[rows_t, dim]``."""
  buffer = np.asarray(buffer)
  return [buffer[placement.device_of[t],
                 placement.offsets[placement.device_of[t], placement.slot_of[t]]:
                 placement.offsets[placement.device_of[t], placement.slot_of[t]] + rows]
          for t, rows in enumerate(placement.table_rows)]


def join_tables(placement: TablePlacement, tables) -> np.ndarray:
  """Inverse of ``split_tables``: T tables ``[rows_t, dim]`` -> ``float32[P, R, dim]``."""
  out = np.zeros((placement.num_devices, placement.rows_per_device, placement.dim), np.float32)
  for t, tab in enumerate(tables):
    d, j = placement.device_of[t], placement.slot_of[t]
    o = placement.offsets[d, j]
    out[d, o:o + tab.shape[0]] = np.asarray(tab)
  return out
