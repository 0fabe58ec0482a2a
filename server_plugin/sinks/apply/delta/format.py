"""A Delta target and its state (``engine.formats.TableFormat``): tables at paths, written by
delta-rs (``tables``: made, checked, merged, each commit carrying the writer's ``txn``
marker) or by this package's own commits (``direct_commits``: deletion vectors, rewritten
files), the tasks' files staged into the tables' folders (``staging``), the state read and
kept between a stream's micro-batches (``state``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from spark_cdc.server_plugin.delta import committer
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.sinks.apply.delta import direct_commits, staging, tables
from spark_cdc.server_plugin.sinks.apply.delta import state as state_table
from spark_cdc.server_plugin.sinks.apply.engine.binding import Bound
from spark_cdc.server_plugin.sinks.apply.engine.buckets import Layout
from spark_cdc.server_plugin.sinks.apply.engine.changes import inserted
from spark_cdc.server_plugin.sinks.apply.engine.columns import aligned, by_key
from spark_cdc.server_plugin.sinks.apply.engine.formats import Tables
from spark_cdc.server_plugin.sinks.apply.engine.history import HASH, Resolution
from spark_cdc.server_plugin.sinks.apply.engine.spec import (
    DELETION_VECTORS_PROPERTY,
    KEY_HASH,
    ApplySpec,
)
from spark_cdc.server_plugin.sinks.apply.engine.staged import Staged


class DeltaFormat:
    """``TableFormat`` for Delta tables at the spec's paths."""

    def tables(self, spec: ApplySpec, target_schema: pa.Schema, state_schema: pa.Schema) -> Tables:
        target = tables.existing(spec.target, target_schema, spec, "target")
        if target is None and spec.target_name is not None:
            raise error("APPLY_CHANGES.TARGET_NOT_DELTA", table=spec.target_name, path=spec.target)
        return Tables(target, tables.existing(spec.state, state_schema, spec, "state"))

    def existing_state(self, spec: ApplySpec) -> Any | None:
        """The state table as it is, unchecked (None: none yet)."""
        return _existing(spec, spec.state)

    def existing_target(self, spec: ApplySpec) -> Any | None:
        return _existing(spec, spec.target)

    def schema(self, table: Any) -> pa.Schema:
        return tables.table_schema(table)

    def layout(self, state: Any) -> Layout:
        return Layout.of(state)

    def last_batch(self, table: Any, app_id: str) -> int | None:
        done = table.transaction_version(app_id)
        return None if done is None else int(done)

    def outcomes(self, table: Any, spec: ApplySpec, limit: int | None) -> Iterator[str]:
        return tables.outcomes(table, spec, limit)

    def identity(self, table: Any) -> Bound:
        return Bound(table.metadata().id, table.version())

    def read_point(self, table: Any) -> tuple[str, int]:
        return table.metadata().id, table.version()

    def state_rows(
        self, state: Any, spec: ApplySpec, keys: pa.Table | None, memory: Any
    ) -> pa.Table:
        return state_table.read(state, spec, keys, keys is None, memory)

    def share_rows(
        self,
        state: Any,
        spec: ApplySpec,
        keys: pa.Table,
        earliest: pa.Scalar | None,
        buckets: np.ndarray | None,
    ) -> pa.Table:
        return state_table.rows_of(state, spec, keys, earliest, buckets)

    def stage(
        self,
        spec: ApplySpec,
        found: Tables,
        resolution: Resolution,
        schemas: tuple[pa.Schema, pa.Schema],
        rebuilds: bool,
    ) -> tuple[Resolution, Staged]:
        """A task's rows written where the commit will only name them (``staging``), each
        on a local filesystem: the target's new rows when the commit writes them by hand
        (``direct_commits``: a new target's, a refresh's, or a target's that takes direct
        commits), the state's when its schema holds them."""
        target, state = found.target, found.state
        rows, state_rows = resolution.rows, resolution.state
        to_target: tuple[dict[str, Any], ...] = ()
        to_state: tuple[dict[str, Any], ...] = ()
        new_rows = inserted(spec, resolution)
        if new_rows.num_rows and staging.stages(spec.target):
            if target is None and _creates_directly(spec):
                aligned_rows = by_key(aligned(new_rows, schemas[0]), spec.keys)
                properties = direct_commits.stats_properties(dict(spec.table_properties))
                partition_by = list(spec.partition_cols)
                to_target = staging.staged_files(
                    spec.target, aligned_rows, partition_by, properties, spec.keys
                )
            elif target is not None and _commits_directly(target, new_rows):
                schema = tables.table_schema(target)
                aligned_rows = by_key(aligned(new_rows, schema), spec.keys)
                to_target = direct_commits.staged_rows(target, aligned_rows, spec.keys)
            if to_target:
                rows = rows.schema.empty_table()  # a slice would hold the rows
        if state_rows.num_rows and staging.stages(spec.state):
            if state is None:
                layout = Layout.new(schemas[1], spec.key_buckets)
                schema = layout.schema(schemas[1])
            else:
                schema, layout = tables.table_schema(state), Layout.of(state)
            laid = layout.rows(state_rows)
            if set(laid.column_names) <= set(schema.names):
                to_state = _staged_state(spec, laid, layout, schema)
                state_rows = state_rows.schema.empty_table()
        count = new_rows.num_rows if to_target else 0  # else the rows travel: the commit counts
        resolved = dataclasses.replace(resolution, rows=rows, state=state_rows)
        return resolved, Staged(to_target, to_state, count)

    def discard(self, spec: ApplySpec, staged: Staged, held: bool) -> None:
        for uri, adds in ((spec.target, staged.target), (spec.state, staged.state)):
            staging.discard(uri, staging.unheld(uri, adds) if held else adds)

    def create_target(
        self,
        spec: ApplySpec,
        found: Tables,
        schema: pa.Schema,
        version: int,
        rows: pa.Table,
        marker: str,
        staged: Staged,
    ) -> None:
        """Made by this package's own commit when the tasks staged its files or its
        properties turn deletion vectors on (and it can commit here), else by delta-rs.
        Its properties go to delta-rs without ``delta.enableDeletionVectors``: given it,
        delta-rs also declares the variant type, which readers without variant support
        then refuse."""
        properties = {k: v for k, v in spec.table_properties if k != DELETION_VECTORS_PROPERTY}
        partition_by = list(spec.partition_cols)
        dv = spec.deletion_vectors and committer.can_commit(spec.target)
        if staged.target or dv:
            direct_commits.create(
                spec.target,
                spec,
                aligned(rows, schema),
                version,
                marker,
                properties,
                partition_by,
                staged.target,
                deletion_vectors=dv,
            )
            return
        tables.created(spec.target, schema, spec, version, rows, marker, properties, partition_by)

    def replace_target(
        self,
        spec: ApplySpec,
        target: Any,
        version: int,
        rows: pa.Table,
        marker: str,
        staged: Staged,
    ) -> None:
        """By this package's own commit when the tasks staged the rows, else by delta-rs'
        overwrite."""
        if staged.target:
            travelled = aligned(rows, tables.table_schema(target))
            adds = (*staged.target, *direct_commits.staged_rows(target, travelled, spec.keys))
            direct_commits.replace_all(target, spec, version, marker, adds)
        else:
            tables.overwrite_rows(target, spec, version, rows, marker)
        target.update_incremental()

    def change_target(
        self,
        spec: ApplySpec,
        target: Any,
        version: int,
        resolution: Resolution,
        marker: str,
        staged: Staged,
    ) -> None:
        """Written here (``direct_commits``) when the target takes it, else by delta-rs'
        MERGE; the tasks staged files only where they found it takes direct commits."""
        rows = inserted(spec, resolution)
        direct = not resolution.truncated and _commits_directly(target, rows)
        if staged.target and not direct:
            raise error(
                "APPLY_CHANGES.CONCURRENT_WRITE",
                path=spec.target,
                problem="another writer changed the target's properties while the batch was "
                "resolved",
            )
        replaced = resolution.replaced  # type 1: the changed keys; type 2: their versions
        if direct:
            schema = tables.table_schema(target)
            direct_commits.replace_rows(
                target, spec, version, replaced, aligned(rows, schema), marker, staged.target
            )
        elif spec.scd_type == 2:
            tables.replace_rows(target, spec, version, replaced, rows, outcome=marker)
        elif resolution.truncated:
            tables.replace_rows(target, spec, version, replaced, rows, resolution.kept, marker)
        else:
            tables.upsert_rows(target, spec, version, resolution.rows, marker)
        target.update_incremental()

    def target_after(self, spec: ApplySpec, found: Tables) -> Any:
        return found.target if found.target is not None else tables.opened(spec.target, spec)

    def create_state(
        self,
        spec: ApplySpec,
        found: Tables,
        schema: pa.Schema,
        version: int,
        rows: pa.Table,
        marker: str,
        staged: Staged,
        memory: Any,
    ) -> None:
        if staged.state:
            layout = Layout.new(schema, spec.key_buckets)
            laid = aligned(layout.rows(rows), layout.schema(schema))
            direct_commits.create(
                spec.state, spec, laid, version, marker, {}, layout.partition_by, staged.state
            )
            return
        state_table.create(spec, schema, version, rows, memory, marker)

    def replace_state(
        self,
        spec: ApplySpec,
        state: Any,
        version: int | None,
        rows: pa.Table,
        marker: str | None,
        staged: Staged,
        memory: Any,
    ) -> None:
        if staged.state:
            layout, schema = Layout.of(state), tables.table_schema(state)
            adds = (*staged.state, *_staged_state(spec, layout.rows(rows), layout, schema))
            direct_commits.replace_all(state, spec, version, marker, adds)
            if memory is not None:
                memory.forget()
            return
        state_table.overwrite(state, spec, version, rows, memory, marker)

    def append_state(
        self,
        spec: ApplySpec,
        state: Any,
        version: int,
        rows: pa.Table,
        marker: str,
        staged: Staged,
        memory: Any,
    ) -> None:
        if staged.state:
            staging.append_staged(state, spec, version, staged.state, marker)
        else:
            state_table.append(state, spec, version, rows, memory, marker)

    def small_files(self, state: Any) -> int:
        return tables.small_file_count(state)

    def merge_small_files(self, state: Any, memory: Any) -> None:
        state_table.merge_small_files(state, memory)

    def memory(self) -> Any:
        """What a stream's writer keeps of the state between its micro-batches."""
        return state_table.StateMemory()


def _existing(spec: ApplySpec, path: str) -> Any | None:
    from deltalake import DeltaTable

    options = tables.storage(spec)
    if not DeltaTable.is_deltatable(path, storage_options=options):
        return None
    return DeltaTable(path, storage_options=options)


# Properties a table this package makes by its own commit takes (delta-rs gives the
# metadata; nothing of them changes how a data file is written but its statistics).
_DIRECT_PROPERTIES = frozenset(
    {
        DELETION_VECTORS_PROPERTY,
        "delta.dataSkippingNumIndexCols",
        "delta.dataSkippingStatsColumns",
        "delta.checkpointInterval",
        "delta.logRetentionDuration",
        "delta.deletedFileRetentionDuration",
        "delta.appendOnly",
    }
)


def _creates_directly(spec: ApplySpec) -> bool:
    """Whether a new target can be made by this package's commit of the tasks' files:
    its properties ask nothing else of its files (the tasks stage only on a local
    filesystem, ``staging.stages``)."""
    return {k for k, _ in spec.table_properties} <= _DIRECT_PROPERTIES


def _staged_state(
    spec: ApplySpec, laid: pa.Table, layout: Layout, schema: pa.Schema
) -> tuple[dict[str, Any], ...]:
    """State rows, as ``layout`` lays them out, written as staged files of a state of
    ``schema``, ordered by key."""
    if not laid.num_rows:
        return ()
    rows = by_key(aligned(laid, schema), spec.keys)
    keyed = (*spec.keys, KEY_HASH, HASH)  # a value per key or row: no dictionary
    return staging.staged_files(spec.state, rows, layout.partition_by, keys=keyed)


def _commits_directly(target: Any, rows: pa.Table) -> bool:
    """Whether the batch's target commit is written here (``direct_commits``): the
    target allows it, and the batch brings no new column (that changes the table's
    schema)."""
    if direct_commits.refusal(target) is not None:
        return False
    return not set(rows.column_names) - set(tables.table_schema(target).names)


FORMAT = DeltaFormat()
