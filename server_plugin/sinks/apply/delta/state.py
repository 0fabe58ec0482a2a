"""The state table (what applying keeps beside the target: each key's deciding changes) as
a batch reads and writes it, and the copy a stream's writer keeps of it in memory.

A stream's micro-batches are applied one after another by one Python process of the
server (its ``foreachBatch`` function lives as long as the query), and each leaves the
state as the next one finds it, so ``StateMemory`` keeps the rows it read and wrote: a
micro-batch reads the state from storage only when the table is not at the version this
writer left it at (the first batch after a start, or another writer's commit), which past
a few million keys costs as much as the merge. The batch's keys are found in memory by a
sorted index (``key_index``) that grows by a run per batch, merged size-tiered: merging
the whole index with every batch cost more than the membership test it replaced. The
copy is bounded (``STATE_MEMORY_BYTES``); a larger state is scanned every batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.arrow_types import from_numpy
from spark_cdc.server_plugin.delta.log import DeltaLog
from spark_cdc.server_plugin.sinks.apply.delta import tables
from spark_cdc.server_plugin.sinks.apply.engine.buckets import Layout, stored
from spark_cdc.server_plugin.sinks.apply.engine.columns import aligned
from spark_cdc.server_plugin.sinks.apply.engine.key_index import (
    BatchKeys,
    KeyIndex,
    KeyRuns,
    index_of,
)
from spark_cdc.server_plugin.sinks.apply.engine.spec import OP, TRUNCATE, ApplySpec
from spark_cdc.server_plugin.sinks.apply.engine.state_rows import rows_in_files, truncate_positions

# The most Arrow memory a writer keeps the state in; Parquet files expand about three times.
STATE_MEMORY_BYTES = 2 << 30
_EXPANSION = 3
# Rows per scanned batch: each tests membership in the batch's keys, whose hash set Arrow
# builds again for every batch (at the scanner's default 128k rows, most of the scan).
_SCAN_ROWS = 1 << 22


@dataclass
class _Rows:
    """The state's rows, which are truncates (every batch reads them), and an index of
    their keys (``key_index``: made at the first lookup, a run added with each batch),
    so finding a batch's keys costs the batch, not the state."""

    rows: pa.Table
    truncates: np.ndarray
    index: KeyRuns | None = None

    @classmethod
    def of(cls, rows: pa.Table) -> _Rows:
        return cls(rows, truncate_positions(rows))

    def of_keys(self, spec: ApplySpec, keys: pa.Table | None) -> pa.Table:
        """The rows of ``keys`` (and of any key that hashes alike: a superset, and a
        change of another key resolves to no change), and the truncates."""
        found = self.truncates
        if keys is not None and keys.num_rows:
            wanted = BatchKeys.of(keys, spec.keys)
            if self.index is None:
                self.index = KeyRuns().added(_index(self.rows, wanted))
            matched = self.index.find(wanted)
            found = np.union1d(matched, found) if len(found) else matched
        return _take(self.rows, found)

    def appended(self, spec: ApplySpec, added: pa.Table) -> _Rows:
        count = self.rows.num_rows
        index = self.index
        if index is not None and added.num_rows:
            wanted = BatchKeys.of(added.slice(0, 0), spec.keys)  # the types keys index as
            index = index.added(_index(added, wanted, first=count))
        return _Rows(
            pa.concat_tables([self.rows, added]),
            np.concatenate([self.truncates, truncate_positions(added) + count]),
            index,
        )


def _index(rows: pa.Table, wanted: BatchKeys, first: int = 0) -> KeyIndex:
    return index_of(wanted.typed(rows), wanted.names, first)


def _take(rows: pa.Table, positions: np.ndarray) -> pa.Table:
    """``rows`` at ``positions`` (sorted), batch by batch: Arrow's take of a table of many
    chunks joins them first, a copy of the whole state."""
    batches = rows.to_batches()
    bounds = np.cumsum([0, *(b.num_rows for b in batches)])
    cuts = np.searchsorted(positions, bounds)
    parts = [
        batch.take(from_numpy(positions[cuts[i] : cuts[i + 1]] - bounds[i]))
        for i, batch in enumerate(batches)
        if cuts[i + 1] > cuts[i]
    ]
    return pa.Table.from_batches(parts, schema=rows.schema)


def _matching(rows: Any, spec: ApplySpec, keys: pa.Table) -> Any:
    """Whether each of ``rows`` has each key column's value among ``keys``' (one hash set
    of the batch's values, one probe of each row)."""
    matched = None
    for name in spec.keys:
        one = pc.is_in(rows.column(name), value_set=pc.unique(keys.column(name)))
        matched = one if matched is None else pc.and_(matched, one)
    return matched


@dataclass
class StateMemory:
    """The state table's rows at ``version`` (of the table whose metadata id is ``table``:
    a table deleted and made again starts its versions over), as this writer last read or
    wrote them."""

    table: str | None = None
    version: int | None = None
    kept: _Rows | None = None

    @property
    def rows(self) -> pa.Table | None:
        return None if self.kept is None else self.kept.rows

    def whole(self, table: Any, spec: ApplySpec) -> _Rows | None:
        """The whole state, from memory when the table is where this writer left it, else
        read and kept (None: too large to keep; scan it)."""
        if self.kept is not None and self.holds(table, table.version()):
            return self.kept
        self.forget()
        files, sizes = _files(table, spec)
        if sum(sizes) * _EXPANSION > STATE_MEMORY_BYTES:
            return None
        self.keep(table, _Rows.of(_dataset(table, spec, files).to_table()))
        return self.kept

    def holds(self, table: Any, version: int) -> bool:
        return self.table == table.metadata().id and self.version == version

    def forget(self) -> None:
        self.table, self.version, self.kept = None, None, None

    def keep(self, table: Any, kept: _Rows) -> None:
        """``kept`` as the table's current version, when within the bound."""
        self.forget()
        if kept.rows.nbytes <= STATE_MEMORY_BYTES:
            self.table, self.version, self.kept = table.metadata().id, table.version(), kept


def read(
    table: Any,
    spec: ApplySpec,
    keys: pa.Table | None,
    everything: bool,
    memory: StateMemory | None,
) -> pa.Table:
    """The state's changes of ``keys`` (a superset: a change of another key resolves to
    no change) and its truncate; all of it when ``everything``."""
    whole = memory.whole(table, spec) if memory is not None else None
    if whole is not None:
        if everything:
            return whole.rows
        return whole.of_keys(spec, keys)
    dataset = _dataset(table, spec, _files(table, spec)[0])
    if everything:
        return dataset.to_table()
    batches = dataset.to_batches(batch_size=_SCAN_ROWS)
    return pa.Table.from_batches([_of_keys(b, spec, keys) for b in batches], schema=dataset.schema)


def rows_of(
    table: Any,
    spec: ApplySpec,
    keys: pa.Table,
    earliest: pa.Scalar | None = None,
    buckets: np.ndarray | None = None,
) -> pa.Table:
    """The state's changes of ``keys`` (exactly) and its truncate, from the files of its
    current snapshot that hold them (``state_rows.rows_in_files``): a task's share."""
    log = DeltaLog(spec.state, tables.storage(spec))
    files, partitions = tables.add_actions(table), tables.partition_columns(table)
    schema = _stored_schema(table)
    return rows_in_files(log, files, schema, spec, keys, earliest, buckets, partitions)


def _of_keys(rows: Any, spec: ApplySpec, keys: pa.Table | None) -> Any:
    """``rows`` (a record batch) of ``keys``, and the truncate."""
    wanted = pc.equal(rows.column(OP), TRUNCATE)
    if keys is not None and keys.num_rows:
        wanted = pc.or_(wanted, _matching(rows, spec, keys))
    return rows.filter(wanted)


def create(
    spec: ApplySpec,
    schema: pa.Schema,
    version: int,
    rows: pa.Table,
    memory: StateMemory | None,
    outcome: str,
) -> None:
    """The state table made, holding ``rows``, as this writer's ``version``, laid out by
    key bucket when the batch was planned by the client (``buckets``)."""
    layout = Layout.new(schema, spec.key_buckets)
    schema, laid = layout.schema(schema), layout.rows(rows)
    table = tables.created(
        spec.state, schema, spec, version, laid, outcome, partition_by=layout.partition_by
    )
    _keep_written(memory, table, rows)


def append(
    table: Any,
    spec: ApplySpec,
    version: int,
    rows: pa.Table,
    memory: StateMemory | None,
    outcome: str | None = None,
) -> None:
    """``rows`` appended to the state as this writer's ``version``; the memory follows when
    it held the table as it was and the commit is the next one (else another writer's
    commit came between: the next batch reads the table)."""
    before = table.version()
    tables.append_rows(table, spec, version, Layout.of(table).rows(rows), outcome)
    if memory is None or memory.kept is None:
        return
    added = _stored_rows(table, rows)
    follows = memory.holds(table, before) and table.version() == before + 1
    if follows and added.schema == memory.kept.rows.schema:  # not when the schema evolved
        memory.keep(table, memory.kept.appended(spec, added))
    else:
        memory.forget()


def overwrite(
    table: Any,
    spec: ApplySpec,
    version: int | None,
    rows: pa.Table,
    memory: StateMemory | None,
    outcome: str | None = None,
) -> None:
    """The state replaced by ``rows`` (a truncate, a compaction): the memory holds them."""
    tables.overwrite_rows(table, spec, version, Layout.of(table).rows(rows), outcome)
    _keep_written(memory, table, rows)


def merge_small_files(table: Any, memory: StateMemory | None) -> None:
    """The table's small files merged into larger ones (delta-rs' compaction: one commit
    that changes no row, each merged file keeping its parts' order); the memory holds the
    same rows at the new version."""
    kept = memory.kept if memory is not None and memory.holds(table, table.version()) else None
    table.optimize.compact()
    if memory is not None and kept is not None:
        memory.keep(table, kept)


def _keep_written(memory: StateMemory | None, table: Any, rows: pa.Table) -> None:
    """The memory holds ``rows``, the whole state the table now has, as the table types
    them."""
    if memory is not None:
        memory.keep(table, _Rows.of(_stored_rows(table, rows)))


def _stored_schema(table: Any) -> pa.Schema:
    """The state's columns as its files hold them (without the bucket, a partition)."""
    return stored(tables.table_schema(table))


def _stored_rows(table: Any, rows: pa.Table) -> pa.Table:
    """``rows`` as the state's files hold them: what a read of them returns."""
    return aligned(Layout.of(table).file_rows(rows), _stored_schema(table))


def _files(table: Any, spec: ApplySpec) -> tuple[list[str], list[int]]:
    actions = tables.add_actions(table, flatten=False)
    log = DeltaLog(spec.state, tables.storage(spec))
    files = [log.location(f) for f in actions.column("path").to_pylist()]
    return files, actions.column("size_bytes").to_pylist()


def _dataset(table: Any, spec: ApplySpec, files: list[str]) -> Any:
    """The state's files as an Arrow dataset (Parquet statistics skip row groups): delta-rs'
    own dataset leaves a thread that aborts the process at exit."""
    import pyarrow.dataset as pads

    log = DeltaLog(spec.state, tables.storage(spec))
    return pads.dataset(files, schema=_stored_schema(table), format="parquet", filesystem=log.fs)
