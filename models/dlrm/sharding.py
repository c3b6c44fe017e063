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

  5. Row-wise split: a table with more rows than ``split_rows`` (default: one device's fair
     share, ``ceil(sum of rows / P)``) is cut into ``k = ceil(rows / split_rows)`` pieces of
     consecutive rows; every piece is placed like a table of its own (a "slot" holds a
     piece). A piece looks up only the ids in its row range (others count as empty), so
     the pooled sums of a table's pieces add up to the table's pooled embedding; the sum is
     taken after the exchange (``table_pieces``). Each piece is its own compressed chunk
     with the table's relative error bound, so a table of k pieces is within k times its
     bound (of the pieces' value ranges).

``plan_tables`` reports the imbalance (and the split tables) in ``describe()``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class TablePlacement:
    """Where every table lives. All arrays are host numpy (static for ``jit``).

    A table is cut into one or more pieces (row-wise split, usually one piece = the whole
    table); slots hold pieces.

    Attributes:
      num_devices: P, devices on the table axis.
      table_rows: rows of each of the T tables (after the ``max_ind_range`` cap).
      dim: embedding width.
      local_tables: L = ceil(V / P), slots per device (V = number of pieces).
      rows_per_device: R, rows of each device's buffer (max over devices, at least 1).
      piece_table: int32[V], table of each piece.
      piece_lo: int32[V], first table row of each piece.
      piece_rows: int32[V], rows of each piece.
      device_of: int32[V], owning device of each piece.
      slot_of: int32[V], slot of each piece on its device.
      slot_piece: int32[P, L], piece in each slot, -1 for a dummy slot.
      offsets: int32[P, L], first buffer row of each slot.
      slot_rows: int32[P, L], rows of each slot (0 for a dummy slot).
    """

    num_devices: int
    table_rows: tuple[int, ...]
    dim: int
    local_tables: int
    rows_per_device: int
    piece_table: np.ndarray
    piece_lo: np.ndarray
    piece_rows: np.ndarray
    device_of: np.ndarray
    slot_of: np.ndarray
    slot_piece: np.ndarray
    offsets: np.ndarray
    slot_rows: np.ndarray

    @property
    def num_tables(self) -> int:
        return len(self.table_rows)

    @property
    def num_pieces(self) -> int:
        return len(self.piece_table)

    @property
    def piece_column(self) -> np.ndarray:
        """int32[V]: column of piece v in the exchanged ``[batch/P, P*L, dim]`` array."""
        return (self.device_of * self.local_tables + self.slot_of).astype(np.int32)

    @property
    def table_pieces(self) -> np.ndarray:
        """int32[T, K]: exchange columns of each table's pieces, -1 padded (K = most pieces)."""
        cols = [[] for _ in self.table_rows]
        for v, c in enumerate(self.piece_column):
            cols[self.piece_table[v]].append(int(c))
        k = max(len(c) for c in cols)
        return np.array([c + [-1] * (k - len(c)) for c in cols], np.int32)

    @property
    def gather_index(self) -> np.ndarray:
        """int32[T]: column of the first piece of table t (the table when it is not split)."""
        return self.table_pieces[:, 0]

    @property
    def slot_table(self) -> np.ndarray:
        """int32[P, L]: table of the piece in each slot, -1 for a dummy slot."""
        return np.where(
            self.slot_piece >= 0, self.piece_table[np.maximum(self.slot_piece, 0)], -1
        ).astype(np.int32)

    @property
    def slot_table_flat(self) -> np.ndarray:
        """int32[P*L]: table in exchange column ``d*L + j`` (-1 = dummy)."""
        return self.slot_table.reshape(-1)

    @property
    def slot_lo_flat(self) -> np.ndarray:
        """int32[P*L]: first table row of the piece in column ``d*L + j`` (0 for a dummy)."""
        return (
            np.where(self.slot_piece >= 0, self.piece_lo[np.maximum(self.slot_piece, 0)], 0)
            .reshape(-1)
            .astype(np.int32)
        )

    def device_rows(self) -> np.ndarray:
        """int64[P]: used rows per device."""
        return self.slot_rows.sum(axis=1)

    def imbalance(self) -> float:
        """Max over mean of per-device rows x dim (1.0 = perfect balance)."""
        rows = self.device_rows().astype(np.float64)
        return float(rows.max() / max(rows.mean(), 1e-12))

    def describe(self, dtype: str = "float32") -> str:
        """A human-readable table of the plan; ``dtype`` names the tables' dtype (the run's
        ``embedding_dtype``)."""
        lines = [
            f"table-wise placement: {self.num_tables} tables on {self.num_devices} devices, "
            f"{self.local_tables} slots each, buffer {self.rows_per_device} x {self.dim} "
            f"{dtype} per device, imbalance {self.imbalance():.2f}"
        ]
        split = sorted({int(t) for t in self.piece_table if (self.piece_table == t).sum() > 1})
        if split:
            lines[0] += f"; tables {split} split row-wise"
        for d in range(self.num_devices):
            tabs = [
                f"{int(self.piece_table[v])}"
                + (
                    f"[{int(self.piece_lo[v])}:{int(self.piece_lo[v] + self.piece_rows[v])}]"
                    if int(self.piece_table[v]) in split
                    else ""
                )
                for v in self.slot_piece[d]
                if v >= 0
            ]
            lines.append(
                f"  device {d}: tables {', '.join(tabs)} rows {int(self.device_rows()[d])}"
            )
        return "\n".join(lines)


def plan_tables(
    table_rows, dim: int, num_devices: int, split_rows: int | None = None
) -> TablePlacement:
    """Greedy (largest first) table-wise placement balanced by rows x dim.

    Args:
      table_rows: sequence of T positive ints, rows per table.
      dim: embedding width (same for all tables, as in DLRM).
      num_devices: P >= 1.
      split_rows: split tables with more rows than this row-wise (None: one device's fair
        share ``ceil(sum(table_rows) / P)``; 0: never split).

    Returns:
      A ``TablePlacement``.

    Raises:
      ValueError: no tables, a table with no rows, ``num_devices < 1`` or ``split_rows < 0``.
    """
    table_rows = tuple(int(r) for r in table_rows)
    if not table_rows:
        raise ValueError("plan_tables needs at least one table")
    if min(table_rows) < 1:
        raise ValueError(f"every table needs at least one row, got {table_rows}")
    if num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}")
    if split_rows is None:
        split_rows = math.ceil(sum(table_rows) / num_devices)
    if split_rows < 0:
        raise ValueError(f"split_rows must be >= 0, got {split_rows}")
    pieces = []  # (table, lo, rows)
    for t, rows in enumerate(table_rows):
        k = math.ceil(rows / split_rows) if split_rows and num_devices > 1 else 1
        k = min(k, num_devices)
        size = math.ceil(rows / k)
        pieces += [(t, lo, min(size, rows - lo)) for lo in range(0, rows, size)]
    v_count, p = len(pieces), num_devices
    l_slots = math.ceil(v_count / p)
    load = np.zeros(p, np.int64)
    used = np.zeros(p, np.int64)
    device_of = np.zeros(v_count, np.int32)
    slot_of = np.zeros(v_count, np.int32)
    slot_piece = -np.ones((p, l_slots), np.int32)
    # Largest first; stable on ties so the plan is deterministic. Pieces of one table go to
    # different devices when possible (a device already holding a piece is skipped).
    for v in sorted(range(v_count), key=lambda i: (-pieces[i][2], i)):
        free = np.flatnonzero(used < l_slots)
        t = pieces[v][0]
        own = {
            int(device_of[u])
            for u in range(v_count)
            if pieces[u][0] == t and u != v and (slot_piece == u).any()
        }
        cand = np.array([d for d in free if d not in own]) if len(free) > len(own) else free
        cand = cand if len(cand) else free
        d = int(cand[np.argmin(load[cand])])
        device_of[v], slot_of[v] = d, used[d]
        slot_piece[d, used[d]] = v
        used[d] += 1
        load[d] += pieces[v][2] * dim
    piece_rows = np.array([r for _, _, r in pieces], np.int32)
    slot_rows = np.where(slot_piece >= 0, piece_rows[np.maximum(slot_piece, 0)], 0).astype(np.int32)
    offsets = np.zeros_like(slot_rows)
    offsets[:, 1:] = np.cumsum(slot_rows, axis=1)[:, :-1]
    rows_per_device = max(int(slot_rows.sum(axis=1).max()), 1)
    return TablePlacement(
        num_devices=p,
        table_rows=table_rows,
        dim=dim,
        local_tables=l_slots,
        rows_per_device=rows_per_device,
        piece_table=np.array([t for t, _, _ in pieces], np.int32),
        piece_lo=np.array([lo for _, lo, _ in pieces], np.int32),
        piece_rows=piece_rows,
        device_of=device_of,
        slot_of=slot_of,
        slot_piece=slot_piece,
        offsets=offsets,
        slot_rows=slot_rows,
    )


def split_tables(placement: TablePlacement, buffer: np.ndarray) -> list[np.ndarray]:
    """Cuts the sharded buffer ``float32[P, R, dim]`` into T per-table ``[rows_t, dim]``."""
    buffer = np.asarray(buffer)
    parts = [[] for _ in placement.table_rows]
    for v in range(placement.num_pieces):
        d, j = placement.device_of[v], placement.slot_of[v]
        o = placement.offsets[d, j]
        parts[placement.piece_table[v]].append(
            (placement.piece_lo[v], buffer[d, o : o + placement.piece_rows[v]])
        )
    return [np.concatenate([a for _, a in sorted(ps, key=lambda x: x[0])]) for ps in parts]


def join_tables(placement: TablePlacement, tables, dtype=np.float32) -> np.ndarray:
    """Inverse of ``split_tables``: T tables ``[rows_t, dim]`` -> ``dtype[P, R, dim]`` (rows
    no slot holds are zeros)."""
    shape = (placement.num_devices, placement.rows_per_device, placement.dim)
    out = np.zeros(shape, dtype)
    for v in range(placement.num_pieces):
        d, j = placement.device_of[v], placement.slot_of[v]
        o, lo, n = placement.offsets[d, j], placement.piece_lo[v], placement.piece_rows[v]
        out[d, o : o + n] = np.asarray(tables[placement.piece_table[v]])[lo : lo + n]
    return out
