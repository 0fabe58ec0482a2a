"""Reading an Iceberg task's rows as the change feed's rows: the data file read by
pyiceberg by field id into the read's schema (renamed columns by their new names, columns
added since as their default or NULL, identity partition values filled in, Parquet or
ORC), the rows the task's delete files select (``deletes``), each column cast to the
declared type, and the changelog columns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from spark_cdc.server_plugin.arrow_types import from_numpy, int64_value, text_value
from spark_cdc.server_plugin.changefeed.change_batches import (
    BATCH_VALUES,
    commit_timestamp,
    refuse_nulls,
)
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.iceberg.changes import IcebergTask
from spark_cdc.server_plugin.iceberg.deletes import DeleteReader
from spark_cdc.server_plugin.row_level.rules import LINEAGE_COLUMNS, are_codes
from spark_cdc.server_plugin.vocabulary import (
    CHANGE_TYPE,
    CHANGE_TYPES,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
)

log = logging.getLogger("iceberg_changelog")
# The v3 row lineage fields, by their reserved field ids.
LINEAGE_FIELDS = ((2147483540, "_row_id"), (2147483539, "_last_updated_sequence_number"))


@dataclass(frozen=True)
class ReadContext:
    """What an executor needs to read a table's files: its FileIO, its metadata (schemas,
    partition specs) and the pyiceberg schema the read serves."""

    table: str  # as the user named it, for messages
    io: Any
    metadata: Any
    schema: Any
    fail_on_data_loss: bool


def read_task(
    context: ReadContext, target: pa.Schema, task: IcebergTask
) -> Iterator[pa.RecordBatch]:
    """The task's rows in ``target`` (the Arrow form of the changelog schema, or a
    resolving read's: data columns and ``_change_type`` as codes)."""
    deletes = DeleteReader(context.io, context.metadata)
    try:
        only = None if task.only is None else deletes.dead(task.file, task.only)
        without = deletes.dead(task.file, task.without)
    except (OSError, ValueError, pa.ArrowInvalid) as problem:
        raise _delete_problem(context, task, problem) from problem
    if only is not None:
        chosen = np.setdiff1d(only, without, assume_unique=True)
        if not len(chosen):
            return
    codes = are_codes(target.field(CHANGE_TYPE).type)
    constants = {
        CHANGE_TYPE: pa.scalar(CHANGE_TYPES.index(task.change_type), pa.int8())
        if codes
        else text_value(task.change_type),
        COMMIT_VERSION: int64_value(task.version),
        COMMIT_TIMESTAMP: commit_timestamp(task),
    }
    lineage = LINEAGE_COLUMNS[0] in target.names
    table = _read_file(context, task, lineage, [n for n in target.names if n not in constants])
    if table is None:
        return
    names = table.column_names
    rows = table.num_rows
    marked = max((int(p[-1]) for p in (only, without) if p is not None and len(p)), default=-1)
    if marked >= rows:
        wrong = ValueError(f"it deletes row {marked}, but the data file has {rows} rows")
        raise _delete_problem(context, task, wrong)
    keep = np.ones(rows, bool) if only is None else np.zeros(rows, bool)
    if only is not None:
        keep[chosen] = True
    keep[without] = False
    if lineage:
        table = _with_lineage(table, task)
        names = table.column_names
    if not keep.all():
        table = table.filter(from_numpy(keep))
    batch_rows = max(1024, BATCH_VALUES // max(1, len(target)))
    for batch in table.to_batches(max_chunksize=batch_rows):
        count = batch.num_rows
        columns = []
        for field in target:
            if field.name in constants:
                columns.append(pa.repeat(constants[field.name], count))
            else:
                column = batch.column(names.index(field.name))
                columns.append(_cast(column, field, task))
        yield pa.RecordBatch.from_arrays(columns, schema=target)


def _read_file(
    context: ReadContext, task: IcebergTask, lineage: bool, wanted: list[str]
) -> pa.Table | None:
    """The data file's rows, all of them, in file order (so a row's index is its
    position), of the ``wanted`` table columns only; with the lineage columns it wrote
    (NULL where it wrote none) when asked."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.schema import Schema
    from pyiceberg.table import FileScanTask
    from pyiceberg.types import LongType, NestedField

    schema = context.schema
    data = [name for name in wanted if name not in LINEAGE_COLUMNS]
    if len(data) < len(schema.fields):  # a read given fewer columns decodes only those
        schema = schema.select(*(data or [schema.fields[0].name]))  # one, to count rows
    if lineage:
        written = [NestedField(i, n, LongType(), required=False) for i, n in LINEAGE_FIELDS]
        schema = Schema(*schema.fields, *written)
    scan = ArrowScan(context.metadata, context.io, schema, AlwaysTrue())
    try:
        return scan.to_table([FileScanTask(task.file.data_file)])
    except FileNotFoundError as problem:
        gone = error(
            "ICEBERG_CHANGELOG.DATA_LOSS_DATA_FILE",
            file=task.path,
            version=task.version,
            path=context.table,
        )
        if context.fail_on_data_loss:
            raise gone from problem
        log.warning("%s Skipped because failOnDataLoss=false.", gone.message)
        return None


def _with_lineage(table: pa.Table, task: IcebergTask) -> pa.Table:
    """``table`` with its rows' lineage as ``LINEAGE_COLUMNS``: what the file wrote, else
    what the spec says a row inherits (``_row_id``: the file's ``first_row_id`` plus the
    row's position; ``_last_updated_sequence_number``: the file's data sequence number).
    Without a ``first_row_id`` (a file written before the table was v3) it is unknown."""
    (_, row_id_name), (_, version_name) = LINEAGE_FIELDS
    row_id = table.column(row_id_name).combine_chunks()
    version = table.column(version_name).combine_chunks()
    first = task.file.first_row_id
    if first is None:
        row_id = version = pa.nulls(table.num_rows, pa.int64())
    else:
        positions = pa.array(np.arange(first, first + table.num_rows, dtype=np.int64))
        row_id = pc.coalesce(row_id, positions)
        version = pc.coalesce(version, int64_value(task.file.sequence_number))
    kept = table.drop_columns([row_id_name, version_name])
    return kept.append_column(LINEAGE_COLUMNS[0], row_id).append_column(LINEAGE_COLUMNS[1], version)


def _cast(column: Any, field: pa.Field, task: IcebergTask) -> pa.Array:
    refuse_nulls(column, field, task, "ICEBERG_CHANGELOG.NULL_IN_NOT_NULL_COLUMN")
    return column if column.type == field.type else column.cast(field.type)


def _delete_problem(context: ReadContext, task: IcebergTask, problem: Exception) -> Exception:
    files = [d.path for d in (*(task.only or ()), *task.without)]
    reason = (
        str(problem).strip().splitlines()[0] if str(problem).strip() else type(problem).__name__
    )
    return error(
        "ICEBERG_CHANGELOG.DELETE_FILE_UNREADABLE",
        file=files[0] if len(files) == 1 else f"one of {', '.join(files)}",
        version=task.version,
        path=context.table,
        problem=reason,
    )
