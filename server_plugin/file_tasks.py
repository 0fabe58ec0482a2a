"""What a commit contributes to the change feed, as one task per data file, and reading one.

Delta's rule: a commit that wrote change data files (``cdc`` actions) is described by them
alone; otherwise its added files are inserts and its removed files deletes (``dataChange``
actions only, so compaction contributes nothing). Copy-on-write rewrites thereby appear as
carry-over pairs and updates as delete+insert, which the client-side rewrite resolves.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from server_plugin.arrow_types import arrow_schema
from server_plugin.delta_log import Commit, DeltaLog, FileAction, unsupported_feature
from server_plugin.errors import source_error

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
METADATA_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
# Arrow batches of about a million values: big enough to amortize the per-batch cost of the
# Python-to-JVM hand-over (256k rows of 4 columns read ~10% faster than 64k), small enough
# for wide tables.
BATCH_VALUES = 1 << 20
# Files are packed into Spark partitions the way Spark packs a parquet scan's files, except
# that a file's fixed cost is counted as 1 MB instead of 4 MB: every Python task pays a
# full garbage collection in its worker afterwards, so tasks cost more than files do here.
MAX_PARTITION_BYTES = 128 << 20
FILE_OPEN_COST = 1 << 20

log = logging.getLogger("delta_changelog")


@dataclass(frozen=True)
class FileTask(InputPartition):
    """One data file of one commit. ``change_type`` None: the file's own column (CDC files)."""

    path: str
    change_type: str | None
    version: int
    timestamp_ms: int
    partition_values: tuple[tuple[str, Any], ...]
    size: int


@dataclass(frozen=True)
class FileGroup(InputPartition):
    """The files one Spark task reads, one after the other."""

    files: tuple[FileTask, ...]


def group_tasks(tasks: Sequence[FileTask], cores: int | None = None) -> list[FileGroup]:
    """Next-fit packing in commit order into partitions of at most ``max(open cost, total /
    cores)`` bytes (and 128 MB): enough partitions to keep every core busy, few enough that
    per-task costs do not dominate tables of many small files."""
    if not tasks:
        return []
    cores = cores or _cores()
    total = sum(t.size + FILE_OPEN_COST for t in tasks)
    limit = min(MAX_PARTITION_BYTES, max(FILE_OPEN_COST, total // cores))
    groups: list[FileGroup] = []
    current: list[FileTask] = []
    filled = 0
    for task in tasks:
        cost = task.size + FILE_OPEN_COST
        if current and filled + cost > limit:
            groups.append(FileGroup(tuple(current)))
            current, filled = [], 0
        current.append(task)
        filled += cost
    groups.append(FileGroup(tuple(current)))
    return groups


def _cores() -> int:
    """The planner runs on the driver: its cores are the local server's cores (a cluster's
    executors may have more; then partitions are larger than they need to be)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def commit_tasks(commit: Commit, timestamp_ms: int) -> list[FileTask]:
    if commit.cdcs:
        labelled: list[tuple[FileAction, str | None]] = [(f, None) for f in commit.cdcs]
    else:
        labelled = [(f, "insert") for f in commit.adds if f.data_change]
        labelled += [(f, "delete") for f in commit.removes if f.data_change]
    for action, _ in labelled:
        if action.has_deletion_vector:
            raise unsupported_feature(
                "deletionVectors", f" (version {commit.version} has a file with deletion vector)"
            )
    return [task(f, kind, commit.version, timestamp_ms) for f, kind in labelled]


def task(action: FileAction, kind: str | None, version: int, timestamp_ms: int) -> FileTask:
    values = tuple(sorted(action.partition_values.items()))
    return FileTask(action.path, kind, version, timestamp_ms, values, action.size)


def snapshot_tasks(table: Any, version: int, timestamp_ms: int) -> list[FileTask]:
    """Every file of the table at ``version``, as inserts (a stream's initial snapshot)."""
    files = pa.table(table.get_add_actions(flatten=False))
    features = table.protocol().reader_features or ()
    if "deletionVectors" in features and pa.table(table.deletion_vectors()).num_rows:
        raise unsupported_feature(
            "deletionVectors", f" (files of version {version} have deletion vectors)"
        )
    paths = files.column("path").to_pylist()
    sizes = files.column("size_bytes").to_pylist()
    names = files.schema.names
    partitions = files.column("partition").to_pylist() if "partition" in names else None
    return [
        FileTask(path, "insert", version, timestamp_ms, tuple(sorted((part or {}).items())), size)
        for path, size, part in zip(paths, sizes, partitions or [None] * len(paths), strict=True)
    ]


def read_task(
    delta_log: DeltaLog, schema: StructType, task: FileTask, fail_on_data_loss: bool
) -> Iterator[pa.RecordBatch]:
    """The file's rows in ``schema``: data columns by name (missing ones NULL), partition
    columns from the log, then the three changelog columns."""
    target = arrow_schema(schema)
    try:
        parquet = pq.ParquetFile(delta_log.open(task.path))
    except FileNotFoundError as error:
        message = (
            f"Data file '{task.path}' of version {task.version} of '{delta_log.uri}' is gone "
            f"(VACUUM or manual deletion)"
        )
        if fail_on_data_loss:
            raise source_error(
                "DATA_LOSS",
                f"{message}. Start from a later version, or set failOnDataLoss=false to skip "
                "missing files.",
            ) from error
        log.warning("%s; skipped because failOnDataLoss=false.", message)
        return
    present = set(parquet.schema_arrow.names)
    partition = dict(task.partition_values)
    data_fields = [f for f in target if f.name not in METADATA_COLUMNS]
    wanted = [f.name for f in data_fields if f.name in present and f.name not in partition]
    if task.change_type is None:
        wanted.append(CHANGE_TYPE)
    constants = {
        COMMIT_VERSION: pa.scalar(task.version, pa.int64()),
        COMMIT_TIMESTAMP: pa.scalar(task.timestamp_ms * 1000, pa.timestamp("us", tz="UTC")),
    }
    if task.change_type is not None:
        constants[CHANGE_TYPE] = pa.scalar(task.change_type, pa.string())
    for field in data_fields:
        if field.name in partition:
            constants[field.name] = _partition_value(partition[field.name], field.type)
    batch_rows = max(1024, BATCH_VALUES // max(1, len(wanted)))
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=wanted):
        rows = batch.num_rows
        columns = []
        for field in target:
            if field.name in constants:
                columns.append(pa.repeat(constants[field.name], rows))
            elif field.name in wanted:
                columns.append(_cast(batch.column(field.name), field, task))
            else:
                columns.append(pa.nulls(rows, field.type))
        yield pa.RecordBatch.from_arrays(columns, schema=target)


def _partition_value(value: Any, data_type: pa.DataType) -> pa.Scalar:
    """Partition values are strings in the log (typed already in a snapshot listing)."""
    if value is None or value == "":
        return pa.scalar(None, data_type)
    scalar = pa.scalar(value)
    if pa.types.is_timestamp(data_type) and pa.types.is_string(scalar.type):
        # Delta writes '2024-01-01 10:00:00[.ffffff]' (UTC) or ISO-8601 with a zone.
        text = value.replace(" ", "T")
        scalar = pa.scalar(text if ("Z" in text or "+" in text) else text + "Z")
    if pa.types.is_binary(data_type) and pa.types.is_string(scalar.type):
        return pa.scalar(value.encode("utf-8"), data_type)
    return scalar.cast(data_type)


def _cast(column: pa.Array, field: pa.Field, task: FileTask) -> pa.Array:
    if not field.nullable and column.null_count:  # Spark would fail on it, without a word
        raise source_error(
            "SCHEMA_MISMATCH",
            f"Column '{field.name}' of data file '{task.path}' (version {task.version}) holds "
            f"{column.null_count} NULL value(s), but the change feed declares it NOT NULL: the "
            "writer broke the table's schema. Restore or rewrite that commit's file, or read "
            "from a later version.",
        )
    if column.type == field.type:
        return column
    try:
        return column.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise source_error(
            "SCHEMA_MISMATCH",
            f"Column '{field.name}' of data file '{task.path}' (version {task.version}) is "
            f"{column.type}, which cannot be read as {field.type}: {error}",
        ) from error


def check_no_reserved_columns(schema: StructType) -> None:
    clash = [f.name for f in schema.fields if f.name in METADATA_COLUMNS]
    if clash:
        raise source_error(
            "RESERVED_COLUMN",
            f"The table has column(s) {', '.join(clash)}, which the change feed adds itself; "
            "rename them before reading the table's changes.",
        )
