"""An Iceberg target's state as an Iceberg table, laid out by key bucket as a Delta
target's is (``buckets``): a state the first batch makes of a feed the client's plan split
by key keeps each row's ``KEY_HASH`` and is partitioned (identity) by ``BUCKET``, the count
of buckets in the table's ``BUCKETS_PROPERTY``. A task then reads only its buckets' files
(by the partition values its manifests keep), and the
tasks write the state's new rows as data files of their buckets (``data_files``), which the
driver's commit appends. A state made before this layout has neither column: every read
scans all of it, its rows written as before.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.sinks.apply.engine.buckets import Layout, count_of, stored
from spark_cdc.server_plugin.sinks.apply.engine.columns import SMALL_FILE_BYTES, by_key
from spark_cdc.server_plugin.sinks.apply.engine.spec import (
    BUCKET,
    KEY_HASH,
    OP,
    TRUNCATE,
    ApplySpec,
)
from spark_cdc.server_plugin.sinks.apply.engine.state_rows import rows_in_files
from spark_cdc.server_plugin.sinks.apply.iceberg import files as iceberg_files
from spark_cdc.server_plugin.sinks.apply.iceberg import rewrites, tables

# The table property that says in how many key buckets the state is laid out.
BUCKETS_PROPERTY = "spark-cdc.key-buckets"


def layout(table: Any) -> Layout:
    """How the state ``table`` is laid out (``buckets.Layout``)."""
    names = table.schema().column_names
    partitioned = {table.schema().find_column_name(f.source_id) for f in table.spec().fields}
    buckets = None
    if BUCKET in partitioned:
        recorded = table.properties.get(BUCKETS_PROPERTY)
        buckets = count_of(recorded, table.name(), f"the table property {BUCKETS_PROPERTY}")
    elif BUCKET in names:
        problem = f"its partitioning by {BUCKET} was removed"
        raise error("APPLY_CHANGES.STATE_LAYOUT_CHANGED", state=table.name(), problem=problem)
    return Layout(KEY_HASH in names, buckets)


def create(
    found: Any, spec: ApplySpec, schema: pa.Schema, version: int, rows: pa.Table, outcome: str
) -> None:
    """The state made by one catalog commit holding ``rows``, laid out by key bucket when
    the batch was planned by the client."""
    laid = Layout.new(schema, spec.key_buckets)
    properties = {BUCKETS_PROPERTY: str(laid.buckets)} if laid.buckets else {}
    tables.created(
        found,
        spec.state,
        laid.schema(schema),
        spec,
        version,
        laid.rows(rows),
        outcome,
        "state",
        properties,
        partition_by=tuple(laid.partition_by),
    )


def rows_of(
    state: Any,
    spec: ApplySpec,
    keys: pa.Table | None,
    buckets: np.ndarray | None = None,
    earliest: pa.Scalar | None = None,
) -> pa.Table:
    """The state's changes of ``keys`` and its truncates (a NULL key), as its files hold
    them; all of it when ``keys`` is None. ``buckets``: the only buckets ``keys`` are in (a
    task's share of a bucketed state); ``earliest``: the share's smallest sequence, when
    each change supersedes the stored ones before it (``state_rows.supersedes``).

    The files are searched as a Delta state's are (``state_rows.rows_in_files``: each file's
    key index kept per process, only the row groups holding the keys read), when they can
    be read by their columns' names: no delete files, no schema but the first (a column
    renamed or dropped and added again would be another field under one name), names
    Parquet takes as they are, every file of the current partition spec. Otherwise
    pyiceberg scans the files its bounds allow (a superset of the keys' changes, by the
    first key: a change of another key resolves to no change)."""
    from pyiceberg.expressions import AlwaysTrue, And, Or

    if keys is None:
        return layout(state).file_rows(rewrites.scanned(state, AlwaysTrue()))
    if state.current_snapshot() is None:
        return layout(state).file_rows(tables.table_schema(state).empty_table())
    with rewrites.refusing_equality_deletes(state):
        tasks = list(state.scan().plan_files())
    files = None
    if not any(task.delete_files for task in tasks):
        files = iceberg_files.described(state, (*spec.keys, spec.sequence[0]), tasks)
    if files is not None:
        schema = stored(tables.table_schema(state))
        log = iceberg_files.TableFiles(state.io)
        found = rows_in_files(log, files, schema, spec, keys, earliest, buckets)
        return layout(state).file_rows(found)
    first = spec.keys[0]
    where = rewrites.declared(keys, keys.slice(0, 0), spec.keys)
    if buckets is not None:
        where = And(rewrites.expression("In", BUCKET, buckets.tolist()), where)
    rows = rewrites.scanned(state, Or(where, rewrites.expression("IsNull", first)))
    values = keys.column(first).cast(rows.schema.field(first).type)
    wanted = pc.or_(
        pc.is_in(rows.column(first), value_set=values), pc.equal(rows.column(OP), TRUNCATE)
    )
    return layout(state).file_rows(rows.filter(pc.fill_null(wanted, False)))


def append(
    state: Any,
    spec: ApplySpec,
    version: int,
    rows: pa.Table,
    outcome: str,
    staged: tuple[Any, ...] = (),
) -> None:
    """One snapshot of ``rows`` and the data files the tasks ``staged``, marked."""
    tables.append_rows(state, spec, version, layout(state).rows(rows), outcome, staged)


def overwrite(
    state: Any, spec: ApplySpec, version: int | None, rows: pa.Table, outcome: str | None = None
) -> None:
    """The state replaced by ``rows`` (a truncate, a refresh, a compaction)."""
    rewrites.overwrite_rows(state, spec, version, layout(state).rows(rows), outcome)


def data_files(table: Any, spec: ApplySpec, rows: pa.Table) -> tuple[Any, ...]:
    """``rows`` written as data files of ``table`` (into its data folder, its partitions'
    paths), in key order, for a commit to add: pyiceberg's data files, which hold their
    paths, partitions and column statistics."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    if not rows.num_rows:
        return ()
    metadata = table.metadata
    written = tables.written(tables.table_schema(table), by_key(rows, spec.keys))
    return tuple(
        _dataframe_to_data_files(
            table_metadata=metadata, df=written, io=table.io, write_uuid=uuid.uuid4()
        )
    )


def discard(spec: ApplySpec, files: tuple[Any, ...], held: bool = False) -> None:
    """The tasks' data ``files`` deleted: all of them, or with ``held`` those no table
    holds (none when the tables cannot be read: orphans at worst, never a committed file
    deleted)."""
    from pyiceberg.io import load_file_io

    if held and files:
        try:
            _, *both = tables.located(spec, lambda c, name, role: tables.loaded(c, name))
            holding = {p for t in both if t is not None for p in tables.file_paths(t)}
        except Exception:  # pyiceberg raises any kind for a catalog or storage it cannot read
            return
        files = tuple(f for f in files if f.file_path not in holding)
    properties = {**dict(spec.storage_options), **dict(spec.catalog)}
    for data_file in files:
        load_file_io(properties, data_file.file_path).delete(data_file.file_path)


def merge_small_files(state: Any) -> None:
    """The state's small data files (those batches appended: smaller than
    ``tables.SMALL_FILE_BYTES``, without deletes) merged, each bucket's into its own
    files, by one snapshot without a marker (merging twice keeps the same changes); only
    they are held in memory, never the whole state."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    small = [
        task
        for task in state.scan().plan_files()
        if task.file.file_size_in_bytes < SMALL_FILE_BYTES and not task.delete_files
    ]
    if len(small) < 2:
        return
    with tables.refusing_conflicts(state.name()), state.transaction() as transaction:
        metadata = transaction.table_metadata
        rows = ArrowScan(metadata, state.io, metadata.schema(), AlwaysTrue()).to_table(small)
        with transaction.update_snapshot().overwrite() as merge:
            for task in small:
                merge.delete_data_file(task.file)
            for data_file in _dataframe_to_data_files(
                table_metadata=metadata, df=rows, io=state.io, write_uuid=merge.commit_uuid
            ):
                merge.append_data_file(data_file)
