"""The state table (what applying keeps beside the target: each key's deciding changes) as
a batch reads and writes it, and the copy a stream's writer keeps of it in memory.

A stream's micro-batches are applied one after another by one Python process of the
server (its ``foreachBatch`` function lives as long as the query), and each leaves the
state as the next one finds it, so ``StateMemory`` keeps the rows it read and wrote: a
micro-batch reads the state from storage only when the table is not at the version this
writer left it at (the first batch after a start, or another writer's commit). Scanning a
10M-key state costs a micro-batch about as much as its merge; a lookup in memory, a tenth.
The copy is bounded (``STATE_MEMORY_BYTES``); a larger state is scanned every batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.apply import tables
from spark_cdc.server_plugin.apply.spec import OP, TRUNCATE, ApplySpec
from spark_cdc.server_plugin.delta.log import DeltaLog

# The most Arrow memory a writer keeps the state in; Parquet files expand about three times.
STATE_MEMORY_BYTES = 2 << 30
_EXPANSION = 3
# Rows per scanned batch: each tests membership in the batch's keys, whose hash set Arrow
# builds again for every batch (at the scanner's default 128k rows, most of the scan).
_SCAN_ROWS = 1 << 22


@dataclass
class StateMemory:
    """The state table's rows at ``version`` (of the table whose metadata id is ``table``:
    a table deleted and made again starts its versions over), as this writer last read or
    wrote them."""

    table: str | None = None
    version: int | None = None
    rows: pa.Table | None = None

    def whole(self, table: Any, spec: ApplySpec) -> pa.Table | None:
        """The whole state, from memory when the table is where this writer left it, else
        read and kept (None: too large to keep; scan it)."""
        if self.rows is not None and self.holds(table, table.version()):
            return self.rows
        self.forget()
        files, sizes = _files(table, spec)
        if sum(sizes) * _EXPANSION > STATE_MEMORY_BYTES:
            return None
        rows = _dataset(table, spec, files).to_table()
        self.keep(table, rows)
        return rows

    def holds(self, table: Any, version: int) -> bool:
        return self.table == table.metadata().id and self.version == version

    def forget(self) -> None:
        self.table, self.version, self.rows = None, None, None

    def keep(self, table: Any, rows: pa.Table) -> None:
        """``rows`` as the table's current version."""
        self.forget()
        if rows.nbytes <= STATE_MEMORY_BYTES:
            self.table, self.version, self.rows = table.metadata().id, table.version(), rows


def read(
    table: Any,
    spec: ApplySpec,
    keys: pa.Table | None,
    everything: bool,
    memory: StateMemory | None,
) -> pa.Table:
    """The state's changes of ``keys`` (a superset: each key column's values are matched
    alone, and a change of another key resolves to no change) and its truncate; all of it
    when ``everything``."""
    whole = memory.whole(table, spec) if memory is not None else None
    if whole is None:
        dataset = _dataset(table, spec, _files(table, spec)[0])
        if everything:
            return dataset.to_table()
        batches = dataset.to_batches(batch_size=_SCAN_ROWS)
        return pa.Table.from_batches(
            [_of_keys(b, spec, keys) for b in batches], schema=dataset.schema
        )
    return whole if everything else _of_keys(whole, spec, keys)


def _of_keys(rows: Any, spec: ApplySpec, keys: pa.Table | None) -> Any:
    """``rows`` (a table or a batch) of ``keys``, and the truncate."""
    wanted = pc.equal(rows.column(OP), TRUNCATE)
    if keys is not None and keys.num_rows:
        matched = None
        for name in spec.keys:
            one = pc.is_in(rows.column(name), value_set=pc.unique(keys.column(name)))
            matched = one if matched is None else pc.and_(matched, one)
        wanted = pc.or_(wanted, matched)
    return rows.filter(wanted)


def append(
    table: Any, spec: ApplySpec, version: int, rows: pa.Table, memory: StateMemory | None
) -> None:
    """``rows`` appended to the state as this writer's ``version``; the memory follows when
    it held the table as it was and the commit is the next one (else another writer's
    commit came between: the next batch reads the table)."""
    before = table.version()
    tables.append_rows(table, spec, version, rows)
    if memory is None or memory.rows is None:
        return
    added = tables.aligned(rows, tables.table_schema(table))
    follows = memory.holds(table, before) and table.version() == before + 1
    if follows and added.schema == memory.rows.schema:  # not when the schema evolved
        memory.keep(table, pa.concat_tables([memory.rows, added]))
    else:
        memory.forget()


def overwrite(
    table: Any, spec: ApplySpec, version: int | None, rows: pa.Table, memory: StateMemory | None
) -> None:
    """The state replaced by ``rows`` (a truncate, a compaction): the memory holds them."""
    tables.overwrite_rows(table, spec, version, rows)
    if memory is not None:
        memory.keep(table, tables.aligned(rows, tables.table_schema(table)))


def _files(table: Any, spec: ApplySpec) -> tuple[list[str], list[int]]:
    actions = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=False)).read_all()
    log = DeltaLog(spec.state, tables.storage(spec))
    files = [log.location(f) for f in actions.column("path").to_pylist()]
    return files, actions.column("size_bytes").to_pylist()


def _dataset(table: Any, spec: ApplySpec, files: list[str]) -> Any:
    """The state's files as an Arrow dataset (Parquet statistics skip row groups): delta-rs'
    own dataset leaves a thread that aborts the process at exit."""
    import pyarrow.dataset as pads

    log = DeltaLog(spec.state, tables.storage(spec))
    schema = tables.table_schema(table)
    return pads.dataset(files, schema=schema, format="parquet", filesystem=log.fs)
