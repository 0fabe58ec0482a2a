"""How a source hands a Spark task's rows on: its tasks' batches, small ones merged, in
batches of about ``BATCH_VALUES`` values; and the commit timestamp every row of a task
carries. Shared by the sources, whatever reads their files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.arrow_types import arrow_schema, int64_value
from spark_cdc.server_plugin.changefeed.partitions import FileGroup, FileTask
from spark_cdc.server_plugin.errors import error

# How a source reads one task's rows in a given Arrow schema: what each source gives
# ``read_group`` and ``resolving_reader.read_resolved``.
TaskReader = Callable[[pa.Schema, FileTask], Iterator[pa.RecordBatch]]

# Arrow batches of about a million values: big enough to amortize the per-batch cost of the
# Python-to-JVM hand-over (256k rows of 4 columns read ~10% faster than 64k), small enough
# for wide tables.
BATCH_VALUES = 1 << 20


def read_group(
    read_task: TaskReader, schema: StructType, group: FileGroup
) -> Iterator[pa.RecordBatch]:
    """The group's files one after the other, small files' batches merged into batches of
    about ``BATCH_VALUES`` values: Spark hands every batch to the JVM at a fixed cost, which
    a one-row batch per file of a many-small-files table makes the main cost."""
    target = arrow_schema(schema)
    rows = max(1024, BATCH_VALUES // max(1, len(target)))
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for task in group.files:
        for batch in read_task(target, task):
            if batch.num_rows >= rows:
                yield batch
                continue
            if not batch.num_rows:
                continue
            pending.append(batch)
            pending_rows += batch.num_rows
            if pending_rows >= rows:
                yield _merged(pending)
                pending, pending_rows = [], 0
    if pending:
        yield _merged(pending)


def projected(batches: Iterator[pa.RecordBatch], schema: StructType) -> Iterator[pa.RecordBatch]:
    """``batches`` as ``schema``, a selection of their columns by name."""
    target = arrow_schema(schema)
    for batch in batches:
        yield pa.RecordBatch.from_arrays([batch.column(n) for n in target.names], schema=target)


def _merged(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def commit_timestamp(task: FileTask) -> pa.Scalar:
    return int64_value(task.timestamp_ms * 1000, pa.timestamp("us", tz="UTC"))


def refuse_nulls(column: pa.Array, field: pa.Field, task: FileTask, condition: str) -> None:
    """Fail with the source's ``condition``, naming the column and file, where a file holds
    NULLs in a column the table declares NOT NULL: Spark would fail on them without a word."""
    if not field.nullable and column.null_count:
        raise error(
            condition,
            column=field.name,
            file=task.path,
            version=task.version,
            nullCount=column.null_count,
        )
