"""Resuming a checkpoint on another number of devices: the tables re-planned and moved.

A checkpoint holds two kinds of arrays whose layout depends on the number of devices P:

- **the tables**, ``float32[P, R, dim]`` (``TrainState.params["embedding"]["table"]``) and
  every optimizer-state leaf that mirrors them (Adagrad's accumulator): each device's buffer
  holds the pieces the table plan (``sharding.plan_tables``) gave it. A checkpoint records its
  plan in the ``meta`` item (``placement_record``). On another plan, each table is cut out of
  the saved buffers (``sharding.split_tables``) and written into the new plan's
  (``sharding.join_tables``): every table row, and its optimizer state, keeps its value
  exactly; only where it lives changes. TorchRec does the same when a job gets another
  world size (its planner re-plans and ``DistributedModelParallel`` reshards the state).
- **the gradient all-reduce's error-feedback residuals**, ``[P, *shape]``, each device's
  untransmitted part of its gradients. What the next step owes the sum is their sum over the
  devices, so on another number of devices each new device gets ``sum / P_new``: the same
  total correction, spread.

What does not change: the adaptive error bound's state (per table), the step, the data
position (the input stream's position counts global rows, so the same global batches follow
in the same order however many processes read them). What does: which device holds which
table (the log prints the new plan), and so the order of floating-point sums across devices,
so a resized run is not bit-equal to an uninterrupted one.

Host memory: during the move every process reads each table-shaped array (the tables and each
optimizer-state leaf that mirrors them, e.g. Adagrad's accumulator) whole into numpy, and
moves them one after the other (a per-table copy and the new buffer of the one moving): about
(arrays + 2) x the tables' size, once, when a run is resumed on another plan. On the same
number of devices (other split settings) the residuals stay as they were.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from models.dlrm.sharding import TablePlacement, join_tables, split_tables

_ARRAYS = ("piece_table", "piece_lo", "piece_rows", "device_of", "slot_of", "slot_piece")
_ARRAYS += ("offsets", "slot_rows")


def placement_record(placement: TablePlacement) -> dict:
    """The JSON-able record of a plan (every field of ``TablePlacement``), kept in a
    checkpoint's ``meta`` as ``"placement"``."""
    rec = dataclasses.asdict(placement)
    for name in _ARRAYS:
        rec[name] = np.asarray(rec[name]).tolist()
    rec["table_rows"] = list(rec["table_rows"])
    return rec


def placement_from_record(record: dict) -> TablePlacement:
    """Inverse of ``placement_record``.

    Raises:
      ValueError: a record that lacks a field of ``TablePlacement``.
    """
    names = {f.name for f in dataclasses.fields(TablePlacement)}
    if not names <= set(record):
        raise ValueError(
            f"a table plan record needs the fields {sorted(names)}, got {sorted(record)}"
        )
    rec = {k: v for k, v in record.items() if k in names}  # a later release may add fields
    for name in _ARRAYS:
        rec[name] = np.asarray(rec[name], np.int32)
    rec["table_rows"] = tuple(int(r) for r in rec["table_rows"])
    return TablePlacement(**rec)


def describe_layout(p: TablePlacement) -> str:
    """One line naming a plan: devices, tables, buffer shape."""
    return (
        f"{p.num_devices} devices, {p.num_tables} tables of {sum(p.table_rows)} rows x "
        f"{p.dim}, buffer [{p.num_devices}, {p.rows_per_device}, {p.dim}]"
    )


@dataclasses.dataclass(frozen=True)
class Move:
    """The re-placement of a checkpoint written under plan ``old`` into plan ``new``."""

    old: TablePlacement
    new: TablePlacement

    def _is_table(self, path, leaf) -> bool:
        keys = [getattr(k, "key", getattr(k, "name", None)) for k in path]
        new_shape = (self.new.num_devices, self.new.rows_per_device, self.new.dim)
        return (
            keys[0] in ("params", "opt_state") and "embedding" in keys and leaf.shape == new_shape
        )

    def saved_item(self, abstract: dict) -> dict:
        """``abstract`` (the TrainState's fields, ``ShapeDtypeStruct`` leaves) with every
        plan-dependent leaf replaced by a host template of its saved shape: orbax reads
        those as numpy arrays (``place`` moves them)."""

        def template(path, leaf):
            if self._is_table(path, leaf):
                return _host_template(
                    (self.old.num_devices, self.old.rows_per_device, self.old.dim), leaf.dtype
                )
            return leaf

        item = dict(abstract)
        for name in ("params", "opt_state"):
            item[name] = jax.tree_util.tree_map_with_path(
                lambda p, x, n=name: template((jax.tree_util.DictKey(n), *p), x), abstract[name]
            )
        if self.resized:  # the residuals have a row per device
            item["grad_ef"] = jax.tree.map(
                lambda x: _host_template((self.old.num_devices, *x.shape[1:]), x.dtype),
                abstract["grad_ef"],
            )
        return item

    @property
    def resized(self) -> bool:
        """True when the number of devices changed (not only the slots of the tables)."""
        return self.old.num_devices != self.new.num_devices

    def place(self, fields: dict, abstract: dict, skip=()) -> dict:
        """The restored ``fields`` with every host (numpy) leaf moved to the new plan and put on
        the devices with ``abstract``'s shardings; the fields named in ``skip`` (restored in
        the saved structure, to be re-initialized: ``checkpoints.REINITIALIZABLE``) are left
        as they are."""

        def move(path, x, want):
            if not isinstance(x, np.ndarray):
                return x
            if path[0] == "grad_ef":
                total = x.sum(axis=0, dtype=np.float64) / self.new.num_devices
                out = np.broadcast_to(total.astype(x.dtype), want.shape)
            else:
                out = join_tables(self.new, split_tables(self.old, x), dtype=x.dtype)
            return jax.make_array_from_callback(want.shape, want.sharding, lambda i: out[i])

        out = dict(fields)
        for name in ("params", "opt_state", "grad_ef"):
            if name in fields and name not in skip:
                out[name] = jax.tree_util.tree_map_with_path(
                    lambda p, x, w, n=name: move((n, *p), x, w), fields[name], abstract[name]
                )
        return out


def _host_template(shape, dtype) -> np.ndarray:
    # np.empty does not touch the pages: orbax fills them as it reads
    return np.empty(shape, np.dtype(dtype))


def plan_move(saved_table_shape, meta: dict | None, new: TablePlacement) -> Move | None:
    """The move a checkpoint needs before it can resume under plan ``new``; None when it was
    written under ``new`` itself.

    Args:
      saved_table_shape: the shape of the checkpoint's ``params["embedding"]["table"]``.
      meta: the checkpoint's ``meta`` item (``placement``: its plan, absent in checkpoints
        written before plans were recorded).
      new: this run's plan.

    Raises:
      ValueError: a checkpoint that cannot move to ``new`` (other tables, or no recorded plan
        and another shape), naming both layouts.
    """
    record = (meta or {}).get("placement")
    new_shape = (new.num_devices, new.rows_per_device, new.dim)
    if record is None:
        if tuple(saved_table_shape) == new_shape:
            return None
        raise ValueError(
            f"the checkpoint's tables are laid out as {list(saved_table_shape)} and this run's "
            f"as {list(new_shape)} ({describe_layout(new)}); the checkpoint records no table "
            f"plan to move them by (written by an earlier release): resume it on "
            f"{saved_table_shape[0]} devices"
        )
    old = placement_from_record(record)
    if placement_record(old) == placement_record(new):
        return None
    if old.table_rows != new.table_rows or old.dim != new.dim:
        raise ValueError(
            f"the checkpoint's tables ({describe_layout(old)}) are not this run's "
            f"({describe_layout(new)}): another model or dataset cannot be re-planned"
        )
    return Move(old, new)
