"""An Iceberg target and its state (``engine.formats.TableFormat``): tables in a pyiceberg
catalog the spec's properties describe (``tables``: made, checked, each snapshot carrying
the writer's id and batch in its summary), the target's snapshots rewriting or marking the
rows a batch replaces (``rewrites``, ``deletes``), the state laid out by key bucket
(``state``), and the tasks' rows written as data files for the commit to add.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from itertools import islice
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.sinks.apply.engine.binding import Bound
from spark_cdc.server_plugin.sinks.apply.engine.buckets import Layout
from spark_cdc.server_plugin.sinks.apply.engine.changes import inserted
from spark_cdc.server_plugin.sinks.apply.engine.formats import Tables
from spark_cdc.server_plugin.sinks.apply.engine.history import Resolution
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec
from spark_cdc.server_plugin.sinks.apply.engine.staged import Staged
from spark_cdc.server_plugin.sinks.apply.iceberg import rewrites, tables
from spark_cdc.server_plugin.sinks.apply.iceberg import state as state_table
from spark_cdc.server_plugin.sinks.apply.iceberg.deletes import merges_on_read


class IcebergFormat:
    """``TableFormat`` for Iceberg tables named in the spec's catalog."""

    def tables(self, spec: ApplySpec, target_schema: pa.Schema, state_schema: pa.Schema) -> Tables:
        wanted = {"target": target_schema, "state": state_schema}

        def load(catalog: Any, name: str, role: str) -> Any | None:
            return tables.existing(catalog, name, wanted[role], spec, role)

        found, target, state = tables.located(spec, load)
        if target is None:  # the first batch makes it with these properties
            asked = dict(spec.table_properties)
            version = asked.get("format-version", "2").strip()
            merges_on_read(spec.target, asked, int(version) if version.isdigit() else 2)
        return Tables(target, state, found)

    def existing_state(self, spec: ApplySpec) -> Any | None:
        return tables.existing_state(spec)

    def existing_target(self, spec: ApplySpec) -> Any | None:
        return tables.existing_target(spec)

    def memory(self) -> Any:
        return None

    def schema(self, table: Any) -> pa.Schema:
        return tables.table_schema(table)

    def layout(self, state: Any) -> Layout:
        return state_table.layout(state)

    def last_batch(self, table: Any, app_id: str) -> int | None:
        return tables.last_batch(table, app_id)

    def outcomes(self, table: Any, spec: ApplySpec, limit: int | None) -> Iterator[str]:
        return islice(tables.every_outcome(table), limit)

    def identity(self, table: Any) -> Bound:
        return Bound(*tables.identity(table))

    def read_point(self, table: Any) -> tuple[str, int]:
        return str(table.metadata.table_uuid), int(table.metadata.current_snapshot_id or -1)

    def state_rows(
        self, state: Any, spec: ApplySpec, keys: pa.Table | None, memory: Any
    ) -> pa.Table:
        return state_table.rows_of(state, spec, keys)

    def share_rows(
        self,
        state: Any,
        spec: ApplySpec,
        keys: pa.Table,
        earliest: pa.Scalar | None,
        buckets: np.ndarray | None,
    ) -> pa.Table:
        return state_table.rows_of(state, spec, keys, buckets, earliest)

    def stage(
        self,
        spec: ApplySpec,
        found: Tables,
        resolution: Resolution,
        schemas: tuple[pa.Schema, pa.Schema],
        rebuilds: bool,
    ) -> tuple[Resolution, Staged]:
        """A task's rows written as data files of the tables (which exist: a table's first
        commit makes it): the target's new rows when they bring no new column (a schema
        change is the commit's), the state's rows. A refresh's rows travel: its commit
        writes both tables whole."""
        if rebuilds:
            return resolution, Staged()
        target, state = found.target, found.state
        rows, state_rows = resolution.rows, resolution.state
        new_rows = inserted(spec, resolution)
        to_target: tuple[Any, ...] = ()
        keys = None
        if target is not None and not set(new_rows.column_names) - set(
            tables.table_schema(target).names
        ):
            to_target = state_table.data_files(target, spec, new_rows)
            keys = pc.unique(new_rows.column(spec.keys[0]).combine_chunks())
            rows = rows.schema.empty_table()  # a slice would hold the rows
        to_state: tuple[Any, ...] = ()
        if state is not None and state_rows.num_rows:
            laid = state_table.layout(state).rows(state_rows)
            to_state = state_table.data_files(state, spec, laid)
            state_rows = state_rows.schema.empty_table()
        count = new_rows.num_rows if to_target else 0  # else the rows travel: the commit counts
        resolved = dataclasses.replace(resolution, rows=rows, state=state_rows)
        return resolved, Staged(to_target, to_state, count, keys)

    def discard(self, spec: ApplySpec, staged: Staged, held: bool) -> None:
        state_table.discard(spec, staged.target + staged.state, held)

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
        properties = dict(spec.table_properties)
        tables.created(
            found.catalog, spec.target, schema, spec, version, rows, marker, "target", properties
        )

    def replace_target(
        self,
        spec: ApplySpec,
        target: Any,
        version: int,
        rows: pa.Table,
        marker: str,
        staged: Staged,
    ) -> None:
        rewrites.overwrite_rows(target, spec, version, rows, marker, staged.target)

    def change_target(
        self,
        spec: ApplySpec,
        target: Any,
        version: int,
        resolution: Resolution,
        marker: str,
        staged: Staged,
    ) -> None:
        """Type 1 replaces its changed keys' rows by those alive after it, type 2 the
        versions it changed; a truncate keeps only ``kept``'s keys."""
        rows = inserted(spec, resolution)
        kept = resolution.kept if resolution.truncated else None
        rewrites.replace_rows(
            target,
            spec,
            version,
            resolution.replaced,
            rows,
            kept,
            marker,
            staged.target,
            staged.keys,
        )

    def target_after(self, spec: ApplySpec, found: Tables) -> Any:
        return found.catalog.load_table(spec.target)

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
        state_table.create(found.catalog, spec, schema, version, rows, marker)

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
        state_table.overwrite(state, spec, version, rows, marker)

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
        state_table.append(state, spec, version, rows, marker, staged.state)

    def small_files(self, state: Any) -> int:
        return tables.data_file_count(state)

    def merge_small_files(self, state: Any, memory: Any) -> None:
        state_table.merge_small_files(state)


FORMAT = IcebergFormat()
