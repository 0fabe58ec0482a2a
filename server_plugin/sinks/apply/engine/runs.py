"""A batch's changes of each key in sequence order, as runs of upserts split by deletes
(``history`` makes them): the arithmetic both SCD types read a key's row or versions from,
numpy over the sorted changes (``Runs``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from spark_cdc.server_plugin.arrow_types import from_numpy
from spark_cdc.server_plugin.row_level.arrays import array, valid
from spark_cdc.server_plugin.row_level.equality import values_equal
from spark_cdc.server_plugin.row_level.rules import group_rows
from spark_cdc.server_plugin.sinks.apply.engine.spec import (
    DELETE,
    END_AT,
    START_AT,
    UPSERT,
    ApplySpec,
)

# Type 1's current rows say whether each changed key is there after the batch.
ALIVE = "__spark_cdc_alive"


class Runs:
    """The distinct changes of each key in sequence order (rows ``order`` of ``changes``,
    ``group`` their keys), as runs of upserts split by deletes."""

    def __init__(
        self,
        changes: pa.Table,
        spec: ApplySpec,
        order: np.ndarray,
        group: np.ndarray,
        op: np.ndarray,
    ) -> None:
        self.changes, self.spec, self.order = changes, spec, order
        count = len(order)
        self.positions = np.arange(count, dtype=np.int64)
        key_start = np.ones(count, bool)
        key_start[1:] = group[1:] != group[:-1]
        self.key_start = key_start
        self.key = np.cumsum(key_start) - 1  # each change's key, numbered in order
        self.key_count = int(self.key[-1]) + 1 if count else 0
        self.last = np.flatnonzero(np.append(key_start[1:], True)) if count else self.positions
        self.is_upsert = op == UPSERT
        self.alive = self.is_upsert[self.last]
        run_start = key_start.copy()
        run_start[1:] |= op[:-1] == DELETE
        self.run_start = run_start
        self.run_first = np.maximum.accumulate(np.where(run_start, self.positions, 0))
        rows = from_numpy(order)
        self.taken = {c: array(changes.column(c)).take(rows) for c in spec.columns}
        self.authors: dict[str, np.ndarray] = {}
        self.values = {c: self._filled(c) for c in spec.columns}

    def _filled(self, column: str) -> pa.Array:
        """The column's value at each change: with ``ignore_null_updates``, the last
        non-NULL value of the run up to it (NULL when the run has none)."""
        taken = self.taken[column]
        if not self.spec.ignore_null_updates or column in self.spec.keys:
            return taken
        authored = np.where(valid(taken) & self.is_upsert, self.positions, -1)
        author = np.maximum.accumulate(authored) if len(authored) else authored
        author = np.where(author >= self.run_first, author, -1)
        self.authors[column] = author
        return _take(taken, author)

    def deciding(self, slot: np.ndarray, conflicts: np.ndarray) -> np.ndarray:
        """Type 1: which of the ``conflicts`` (slots holding different changes) decide the
        target, so that applying them in another order would give another row: one in the
        key's last slot does. With ``ignore_null_updates`` a row is each column's last
        value in the key's last run, so one there decides when it holds a delete and is
        the last slot, or holds two values of a column no later change sets (with a
        delete, one value: which comes first decides whether it counts). The others are
        shadowed whatever their order, and applied."""
        positions = self.positions
        slot_last = np.zeros(len(conflicts), np.int64)
        np.maximum.at(slot_last, slot, positions)
        key_of_slot = np.zeros(len(conflicts), np.int64)
        key_of_slot[slot] = self.key
        last_slot = conflicts & (slot_last == self.last[key_of_slot])
        if not self.spec.ignore_null_updates:
            return last_slot
        mixed = np.bincount(slot, weights=~self.is_upsert, minlength=len(conflicts)) > 0
        deciding = last_slot & mixed
        deletes = np.where(~self.is_upsert, positions, -1)
        last_delete = np.full(self.key_count, -1, np.int64)
        np.maximum.at(last_delete, self.key, deletes)
        in_last_run = conflicts & (last_delete[key_of_slot] <= slot_last)
        for column in self.spec.values:
            taken = self.taken[column]
            authored = valid(taken) & self.is_upsert
            last_author = np.full(self.key_count, -1, np.int64)
            np.maximum.at(last_author, self.key, np.where(authored, positions, -1))
            open_column = last_author[key_of_slot] <= slot_last  # no later change sets it
            members = np.flatnonzero(authored & in_last_run[slot])
            values = np.zeros(len(conflicts), np.int64)
            if len(members):
                pairs = [from_numpy(slot[members]), taken.take(from_numpy(members))]
                distinct = group_rows(pairs, "image")
                np.add.at(values, slot[members[distinct.first]], 1)
            deciding |= in_last_run & open_column & ((values > 1) | (mixed & (values > 0)))
        return deciding

    def keys_with(self, flags: np.ndarray) -> np.ndarray:
        """Per key: whether any of its changes is flagged."""
        return np.bincount(self.key, weights=flags, minlength=self.key_count) > 0

    def key_table(self, keys: np.ndarray) -> pa.Table:
        rows = from_numpy(self.last[keys])
        return pa.table({k: self.taken[k].take(rows) for k in self.spec.keys})

    def kept_changes(self) -> np.ndarray:
        """Type 1: which changes the state must keep for later changes to resolve as if
        every change were kept: each key's last change and, when it is an upsert with
        ``ignore_null_updates``, the delete its run follows and the change that set each
        column. The others are shadowed for good: a later change can only end the run."""
        keep = np.zeros(len(self.order), bool)
        keep[self.last] = True
        if self.spec.ignore_null_updates:
            last = self.last[self.alive]
            first = self.run_first[last]
            keep[first[~self.key_start[first]] - 1] = True
            for author in self.authors.values():
                found = author[last]
                keep[found[found >= 0]] = True
        return keep

    def current(self, changed: np.ndarray) -> pa.Table:
        """Type 1: each changed key's row as its last change left it, and whether it is
        there (``ALIVE``: the last change is an upsert)."""
        rows = from_numpy(self.last[changed])
        table = {c: self.values[c].take(rows) for c in self.spec.columns}
        table[ALIVE] = from_numpy(self.alive[changed])
        return pa.table(table)

    def versions(self) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
        """Type 2: every version of every key, with the row of ``changes`` each ends with
        (its last upsert), the row that closes it (-1: it is current) and the row that
        opens it. An upsert opens a version when it starts a run or changes a tracked
        column; the version ends at the key's next change after its last upsert (NULL: it
        is current)."""
        count = len(self.order)
        same = np.zeros(count, bool)
        if count > 1:
            same[1:] = True
            for column in self.spec.tracked:
                values = self.values[column]
                same[1:] &= values_equal(values[1:], values[:-1], "image")
        opens = self.is_upsert & (self.run_start | ~same)
        continues = np.zeros(count, bool)
        continues[:-1] = self.is_upsert[1:] & ~opens[1:] & ~self.key_start[1:]
        tails = np.flatnonzero(self.is_upsert & ~continues)
        heads = np.maximum.accumulate(np.where(opens, self.positions, 0))[tails]
        after = tails + 1
        ends = np.where(np.append(self.key_start[1:], True)[tails], -1, after)
        rows = from_numpy(tails)
        table = {c: self.values[c].take(rows) for c in self.spec.columns}
        table[START_AT] = self._sequence(heads)
        table[END_AT] = self._sequence(ends)
        closing = np.where(ends >= 0, self.order[np.maximum(ends, 0)], -1) if count else ends
        return pa.table(table), self.order[tails], closing, self.order[heads]

    def _sequence(self, positions: np.ndarray) -> pa.Array:
        """The sequence at ``positions`` (-1: NULL), a struct of its parts when several."""
        parts = [
            _take(array(self.changes.column(c)).take(from_numpy(self.order)), positions)
            for c in self.spec.sequence
        ]
        if len(parts) == 1:
            return parts[0]
        return pa.StructArray.from_arrays(
            parts, names=list(self.spec.sequence_names), mask=from_numpy(positions < 0)
        )


def _take(values: pa.Array, positions: np.ndarray) -> pa.Array:
    """``values`` at ``positions``, NULL where a position is -1."""
    missing = positions < 0
    if not missing.any():
        return values.take(from_numpy(positions))
    bits = pa.py_buffer(np.packbits(~missing, bitorder="little"))
    indices = pa.Array.from_buffers(
        pa.int64(), len(positions), [bits, pa.py_buffer(np.where(missing, 0, positions))]
    )
    return values.take(indices)
