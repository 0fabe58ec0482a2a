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
from spark_cdc.server_plugin.arrow_types import from_numpy, int64_value, text_value
from spark_cdc.server_plugin.change_batches import BATCH_VALUES, commit_timestamp
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.iceberg.changes import IcebergTask
from spark_cdc.server_plugin.iceberg.deletes import DeleteReader
from spark_cdc.server_plugin.row_level.rules import are_codes
from spark_cdc.server_plugin.vocabulary import (
    CHANGE_TYPE,
    CHANGE_TYPES,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
)

log = logging.getLogger("iceberg_changelog")


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
    names = [f.name for f in context.schema.fields]
    codes = are_codes(target.field(CHANGE_TYPE).type)
    constants = {
        CHANGE_TYPE: pa.scalar(CHANGE_TYPES.index(task.change_type), pa.int8())
        if codes
        else text_value(task.change_type),
        COMMIT_VERSION: int64_value(task.version),
        COMMIT_TIMESTAMP: commit_timestamp(task),
    }
    table = _read_file(context, task)
    if table is None:
        return
    rows = table.num_rows
    marked = max((int(p[-1]) for p in (only, without) if p is not None and len(p)), default=-1)
    if marked >= rows:
        wrong = ValueError(f"it deletes row {marked}, but the data file has {rows} rows")
        raise _delete_problem(context, task, wrong)
    keep = np.ones(rows, bool) if only is None else np.zeros(rows, bool)
    if only is not None:
        keep[chosen] = True
    keep[without] = False
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


def _read_file(context: ReadContext, task: IcebergTask) -> pa.Table | None:
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    scan = ArrowScan(context.metadata, context.io, context.schema, AlwaysTrue())
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


def _cast(column: Any, field: pa.Field, task: IcebergTask) -> pa.Array:
    if not field.nullable and column.null_count:
        raise error(
            "ICEBERG_CHANGELOG.NULL_IN_NOT_NULL_COLUMN",
            column=field.name,
            file=task.path,
            version=task.version,
            nullCount=column.null_count,
        )
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
