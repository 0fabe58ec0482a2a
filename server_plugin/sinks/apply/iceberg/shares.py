"""An Iceberg target's batch resolved in the tasks, as a Delta target's is (``batch``): the
client's plan splits the feed by key, each task reads its keys' changes from its buckets of
the state (``iceberg_state``), resolves them and writes what they add as data files of the
target and of the state; the driver's commit then makes one snapshot of each table, the
target first, holding the tasks' files and the batch's marker (``iceberg_batch.committed``).

The tasks read the state at one snapshot; a commit that finds the state at another (another
writer committed in between) is refused whole, nothing written, as for a Delta target. The
target's snapshot declares the keys it changes, so pyiceberg's check of another writer's
commit in between covers the tasks' rows too (``iceberg_rewrites.replace_rows``). A failed
batch deletes the files its tasks wrote that no table holds (a task that failed after
writing leaves orphans, which Iceberg's orphan-file removal takes).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.sinks.apply.delta.staging import Staged
from spark_cdc.server_plugin.sinks.apply.delta.state import supersedes
from spark_cdc.server_plugin.sinks.apply.engine import batch, binding
from spark_cdc.server_plugin.sinks.apply.engine.batch import (
    Outcome,
    Share,
    changes_of,
    check_not_null,
    inserted,
    joined,
    now,
    prepared,
    state_schema,
)
from spark_cdc.server_plugin.sinks.apply.engine.history import Resolution, resolve
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec
from spark_cdc.server_plugin.sinks.apply.iceberg import state as iceberg_state
from spark_cdc.server_plugin.sinks.apply.iceberg import tables
from spark_cdc.server_plugin.sinks.apply.iceberg.batch import checked_tables, committed, opened


def resolve_share(spec: ApplySpec, batch: pa.Table) -> Share | None:
    """``batch`` (every change of its keys) resolved against the state's changes of its
    keys, its rows written as data files of the tables where they exist (``_staged``);
    nothing is committed. None: the batch rebuilds the state (a full refresh), which its
    commit resolves whole."""
    given = batch.schema
    spec, batch = prepared(spec, batch)
    _, target, state = checked_tables(spec, batch.schema)  # refused as the commit would
    if binding.refreshing(spec) and (
        state is None or tables.last_batch(state, spec.app_id) is None
    ):
        return None
    if state is None:
        old, read = state_schema(spec, batch.schema).empty_table(), None
    else:
        first = batch.column(spec.sequence[0])
        earliest = pc.min(first) if supersedes(spec, first.type) else None
        buckets = iceberg_state.layout(state).buckets_of(batch)
        keys = batch.select(list(spec.keys))
        old = iceberg_state.rows_of(state, spec, keys, buckets, earliest)
        read = _snapshot(state)
    resolution = resolve(changes_of(spec, batch, old), spec, now())
    return Share(read, given, batch.num_rows, *_staged(spec, target, state, resolution))


def _snapshot(table: Any) -> tuple[str, int]:
    """The table's id and its current snapshot's (what a task read)."""
    return str(table.metadata.table_uuid), int(table.metadata.current_snapshot_id or -1)


def _staged(
    spec: ApplySpec, target: Any, state: Any, resolution: Resolution
) -> tuple[Resolution, Staged]:
    """A task's rows written as data files of the tables (which exist: a table's first
    commit makes it), for the commit to add: the target's new rows when they bring no new
    column (a schema change is the commit's), the state's rows. What is written no longer
    travels: its table is left empty in the resolution."""
    rows, state_rows = resolution.rows, resolution.state
    new_rows = inserted(spec, resolution)
    to_target: tuple[Any, ...] = ()
    keys = None
    if target is not None and not set(new_rows.column_names) - set(
        tables.table_schema(target).names
    ):
        check_not_null(tables.table_schema(target), spec, new_rows)
        to_target = iceberg_state.data_files(target, spec, new_rows)
        keys = pc.unique(new_rows.column(spec.keys[0]).combine_chunks())
        rows = rows.slice(0, 0)
    to_state: tuple[Any, ...] = ()
    if state is not None and state_rows.num_rows:
        laid = iceberg_state.layout(state).rows(state_rows)
        to_state = iceberg_state.data_files(state, spec, laid)
        state_rows = state_rows.slice(0, 0)
    count = new_rows.num_rows if to_target else 0  # else the rows travel: the commit counts
    resolved = dataclasses.replace(resolution, rows=rows, state=state_rows)
    return resolved, Staged(to_target, to_state, count, keys)


def apply_shares(spec: ApplySpec, shares: list[Share], version: int) -> Outcome:
    """Every task's ``Share`` of a batch committed as this writer's ``version``, as
    ``batch.apply_shares`` commits a Delta target's."""
    return batch.apply_shares(spec, shares, version, _shares_committed)


def _shares_committed(spec: ApplySpec, shares: list[Share], version: int) -> Outcome:
    spec, empty = prepared(spec, shares[0].schema.empty_table())
    changes = sum(s.changes for s in shares)
    tables_for = opened(spec, empty.schema, version)
    if tables_for.skipped:
        return Outcome(changes, 0, 0, skipped=True)
    state = tables_for.state
    read = None if state is None else _snapshot(state)
    resolution, staged = joined(spec, shares, read, tables_for.rebuilds_state)
    return committed(spec, version, tables_for, resolution, changes, len(shares), staged)
