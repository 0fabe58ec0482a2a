"""What a commit contributes to the change feed, as one task per data file, and reading one.

Delta's rule: a commit that wrote change data files (``cdc`` actions) is described by them
alone; otherwise its added files are inserts and its removed files deletes (``dataChange``
actions only, so compaction contributes nothing). Copy-on-write rewrites thereby appear as
carry-over pairs and updates as delete+insert, which the client-side rewrite resolves, or
the source itself (``read_resolved``) when asked to.

Deletion vectors refine the rule row by row: a file's rows are those its DV does not mark,
and a file removed and re-added in one commit with another DV (DML that only marks rows)
contributes just the difference: rows newly marked are deletes, rows no longer marked
(a restore) inserts. Such a commit has no carry-over rows at all.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.arrow_types import (
    arrow_schema,
    from_numpy,
    int64_value,
    null_value,
    parsed_value,
    text_value,
    to_numpy,
)
from spark_cdc.server_plugin.delta.column_mapping import ColumnMapping
from spark_cdc.server_plugin.delta.deletion_vectors import (
    DeletionVector,
    DeletionVectorError,
    RowPositions,
    row_positions,
    serialized_bitmap,
)
from spark_cdc.server_plugin.delta.log import Commit, DeltaLog, FileAction
from spark_cdc.server_plugin.errors import source_error
from spark_cdc.server_plugin.row_level import (
    RowLevelRules,
    are_codes,
    buckets_of,
    change_kinds,
    labels,
    resolve,
)
from spark_cdc.server_plugin.vocabulary import (
    CHANGE_TYPE,
    CHANGE_TYPES,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    DELETE,
    INSERT,
    METADATA_COLUMNS,
)

# Arrow batches of about a million values: big enough to amortize the per-batch cost of the
# Python-to-JVM hand-over (256k rows of 4 columns read ~10% faster than 64k), small enough
# for wide tables.
BATCH_VALUES = 1 << 20

# A zone at the end of a timestamp's text: 'Z', '+02:00', '-0500'.
_ZONE = re.compile(r"(Z|[+-]\d\d:?\d\d)$")

log = logging.getLogger("delta_changelog")

RowSet = DeletionVector | RowPositions


@dataclass(frozen=True)
class FileTask(InputPartition):
    """One data file of one commit. ``change_type`` None: the file's own column (CDC files).
    The rows read are those in ``only`` (when given) and not in ``without`` (when given):
    row positions that deletion vectors name."""

    path: str
    change_type: str | None
    version: int
    timestamp_ms: int
    partition_values: tuple[tuple[str, Any], ...]
    size: int
    only: RowSet | None = None
    without: RowSet | None = None


@dataclass(frozen=True)
class FileGroup(InputPartition):
    """The files one Spark task reads, one after the other. With ``resolve`` the files are
    whole commits whose rows the task resolves (the row-level passes), keeping only the
    rows of hash bucket ``bucket`` of ``buckets``, in ``spill`` parts on local disk when
    more than one; ``check_only`` reads only the row id and serves nothing, to check that
    no row id changes twice in the commit (see ``partitions``)."""

    files: tuple[FileTask, ...]
    resolve: bool = False
    bucket: int = 0
    buckets: int = 1
    spill: int = 1
    check_only: bool = False


def commit_tasks(commit: Commit, timestamp_ms: int) -> list[FileTask]:
    version = commit.version
    if commit.cdcs:
        return [task(f, None, version, timestamp_ms) for f in commit.cdcs]
    removes = [f for f in commit.removes if f.data_change]
    removed = {f.path: f for f in removes}
    tasks = []
    for add in (f for f in commit.adds if f.data_change):
        old = removed.pop(add.path, None)
        if old is None:
            tasks.append(task(add, INSERT, version, timestamp_ms, without=add.deletion_vector))
            continue
        if old.deletion_vector == add.deletion_vector:
            continue  # the same rows before and after
        if add.deletion_vector is not None:  # rows newly marked deleted
            only, without = add.deletion_vector, old.deletion_vector
            tasks.append(task(add, DELETE, version, timestamp_ms, only=only, without=without))
        if old.deletion_vector is not None:  # rows no longer marked: restored
            only, without = old.deletion_vector, add.deletion_vector
            tasks.append(task(add, INSERT, version, timestamp_ms, only=only, without=without))
    for old in removed.values():
        tasks.append(task(old, DELETE, version, timestamp_ms, without=old.deletion_vector))
    return tasks


def task(
    action: FileAction,
    kind: str | None,
    version: int,
    timestamp_ms: int,
    only: RowSet | None = None,
    without: RowSet | None = None,
) -> FileTask:
    values = tuple(sorted(action.partition_values.items()))
    return FileTask(action.path, kind, version, timestamp_ms, values, action.size, only, without)


def snapshot_tasks(table: Any, version: int, timestamp_ms: int) -> list[FileTask]:
    """Every file of the table at ``version``, as inserts (a stream's initial snapshot)."""
    files = _arrow_table(table.get_add_actions(flatten=False))
    paths = files.column("path").to_pylist()
    sizes = files.column("size_bytes").to_pylist()
    partitions = _partition_texts(files)
    deleted = _snapshot_deletions(table, paths)
    return [
        FileTask(
            path,
            INSERT,
            version,
            timestamp_ms,
            tuple(sorted(part.items())),
            size,
            without=deleted.get(path),
        )
        for path, size, part in zip(paths, sizes, partitions, strict=True)
    ]


def _snapshot_deletions(table: Any, paths: list[str]) -> dict[str, RowPositions]:
    """The rows each file of the snapshot has deleted, from delta-rs's selection vectors
    (the snapshot's file listing carries no DV descriptors): the positions of ``False``."""
    if "deletionVectors" not in (table.protocol().reader_features or ()):
        return {}
    vectors = _arrow_table(table.deletion_vectors())
    if not vectors.num_rows:
        return {}
    root = unquote(urlparse(table.table_uri).path).rstrip("/")
    by_location = {unquote(p): p for p in paths}
    found: dict[str, RowPositions] = {}
    selections = vectors.column("selection_vector").combine_chunks()
    for index, uri in enumerate(vectors.column("filepath").to_pylist()):
        location = unquote(urlparse(uri).path)
        path = by_location.get(location.removeprefix(root + "/"), by_location.get(uri))
        if path is None:
            raise source_error(
                "UNREADABLE_DELETION_VECTOR",
                f"delta-rs reports a deletion vector for '{uri}', which is not a file of the "
                "snapshot; read the table from a later version.",
                file=uri,
            )
        keep = to_numpy(selections[index].values)
        found[path] = RowPositions(np.flatnonzero(~keep).astype("<u8").tobytes())
    return found


def _partition_texts(files: pa.Table) -> list[dict[str, str | bytes | None]]:
    """The listing's typed partition values as the log writes them (text), so that the
    readers parse one form only, without converting Python values (see arrow_types)."""
    if "partition" not in files.schema.names:
        return [{} for _ in range(files.num_rows)]
    struct = files.column("partition").combine_chunks()
    columns = {}
    for index, field in enumerate(struct.type):
        values = struct.field(index)
        if not pa.types.is_binary(values.type):
            values = values.cast(pa.string())
        columns[field.name] = values.to_pylist()
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def _arrow_table(data: Any) -> pa.Table:
    """delta-rs answers with arro3 objects. ``pa.table()`` on one would first ask whether it
    is a pandas DataFrame, importing pandas: over a second at a stream's start."""
    return pa.RecordBatchReader.from_stream(data).read_all()


def read_group(
    delta_log: DeltaLog,
    schema: StructType,
    group: FileGroup,
    fail_on_data_loss: bool,
    mapping: ColumnMapping | None = None,
) -> Iterator[pa.RecordBatch]:
    """The group's files one after the other, small files' batches merged into batches of
    about ``BATCH_VALUES`` values: Spark hands every batch to the JVM at a fixed cost, which
    a one-row batch per file of a many-small-files table makes the main cost."""
    target = arrow_schema(schema)
    rows = max(1024, BATCH_VALUES // max(1, len(target)))
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for task in group.files:
        for batch in read_task(delta_log, target, task, fail_on_data_loss, mapping):
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


def read_resolved(
    delta_log: DeltaLog,
    schema: StructType,
    group: FileGroup,
    fail_on_data_loss: bool,
    mapping: ColumnMapping | None,
    rules: RowLevelRules,
    strict: StructType,
) -> Iterator[pa.RecordBatch]:
    """The group's commits one by one, each with its row-level passes resolved: a commit's
    rows (its bucket's, when split) are gathered, resolved as one table and handed on.

    Files are read as ``strict`` (the table's own nullability, so a NULL where the table
    says NOT NULL fails as in a raw read) and handed on as ``schema``, which may declare
    more columns nullable (``nullableSchema``, computeUpdates' ``_change_type``). A check
    task reads only the row id's columns and hands on nothing.
    """
    strict_target, declared = arrow_schema(strict), arrow_schema(schema)
    target = _resolving_schema(strict_target, rules.key_names if group.check_only else None)
    rows = max(1024, BATCH_VALUES // max(1, len(declared)))
    for commit in by_commit(group.files):
        batches = _bucket_batches(
            delta_log, target, group, commit, fail_on_data_loss, mapping, rules
        )
        for part in _spilled(batches, target, group.spill):
            resolved = resolve(part, rules, commit[0].version)
            del part
            if group.check_only:
                continue
            resolved = _as_changelog(resolved, commit[0], strict_target)
            if declared != strict_target:  # nullability only: no data is converted
                resolved = resolved.cast(declared)
            yield from resolved.combine_chunks().to_batches(max_chunksize=rows)


def _resolving_schema(schema: pa.Schema, only: set[str] | None) -> pa.Schema:
    """What a resolving task reads of a commit: the data columns (a check's, the row id's
    only) and the change types as codes. The commit's version and timestamp and the change
    types' labels are made for the rows it keeps only: built for every row of a 1M-row,
    5-column commit, they took 26 MB of the task's 104 MB peak and 17 ms."""
    data = [f for f in schema if f.name not in METADATA_COLUMNS]
    if only is not None:
        data = [f for f in data if f.name in only]
    return pa.schema([*data, schema.field(CHANGE_TYPE).with_type(pa.int8())])


def _as_changelog(resolved: pa.Table, commit: FileTask, schema: pa.Schema) -> pa.Table:
    """A commit's resolved rows in ``schema``: labels for their codes, the commit's version
    and timestamp."""
    count = resolved.num_rows
    made = {
        CHANGE_TYPE: labels(resolved.column(CHANGE_TYPE)),
        COMMIT_VERSION: pa.repeat(int64_value(commit.version), count),
        COMMIT_TIMESTAMP: pa.repeat(_commit_timestamp(commit), count),
    }
    columns = [made[f.name] if f.name in made else resolved.column(f.name) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def _commit_timestamp(task: FileTask) -> pa.Scalar:
    return int64_value(task.timestamp_ms * 1000, pa.timestamp("us", tz="UTC"))


def _bucket_batches(
    delta_log: DeltaLog,
    target: pa.Schema,
    group: FileGroup,
    commit: list[FileTask],
    fail_on_data_loss: bool,
    mapping: ColumnMapping | None,
    rules: RowLevelRules,
) -> Iterator[tuple[pa.RecordBatch, np.ndarray | None]]:
    """The commit's rows that fall into the group's bucket, batch by batch, each with the
    spill part of its rows (ascending: the rows come ordered by part) when it spills. One
    hash and one gather per batch serve both splits."""
    slots = group.buckets * group.spill
    for task in commit:
        for batch in read_task(delta_log, target, task, fail_on_data_loss, mapping):
            if slots == 1:
                yield batch, None
                continue
            slot = buckets_of(batch, rules.row_id, slots)
            chosen = np.flatnonzero(slot % group.buckets == group.bucket)
            part = slot[chosen] // group.buckets
            if group.spill > 1:
                order = np.argsort(part, kind="stable")
                chosen, part = chosen[order], part[order]
            if len(chosen):
                yield batch.take(from_numpy(chosen)), part


def _spilled(
    batches: Iterator[tuple[pa.RecordBatch, np.ndarray | None]], target: pa.Schema, parts: int
) -> Iterator[pa.Table]:
    """The batches as one table, or, split into their ``parts`` written to local disk, as
    one table per part: a task then holds one part at a time.

    Parts are uncompressed Arrow IPC read back through a memory map, without a copy: a
    125 MB share of the 50-column benchmark commit spilled in two parts took 1.00 s to
    read and resolve, against 1.19 s with lz4 and 0.87 s unspilled."""
    if parts <= 1:
        collected = [batch for batch, _ in batches]
        if collected:
            yield pa.Table.from_batches(collected, schema=target)
        return
    with tempfile.TemporaryDirectory(prefix="delta_changelog_", dir=_local_dir()) as folder:
        paths = [os.path.join(folder, f"part-{i}.arrow") for i in range(parts)]
        writers = [pa.ipc.new_file(path, target) for path in paths]
        try:
            for batch, part in batches:
                ends = np.searchsorted(part, np.arange(1, parts + 1))
                for index, (start, end) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
                    if end > start:
                        writers[index].write_batch(batch.slice(start, end - start))
        finally:
            for writer in writers:
                writer.close()
        for path in paths:
            with pa.memory_map(path) as source:
                table = pa.ipc.open_file(source).read_all()
            if table.num_rows:
                yield table
            del table
            os.remove(path)


def _local_dir() -> str | None:
    """Spark's local directories (set for its Python workers), else the system's."""
    found = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return found if found and os.path.isdir(found) else None


def by_commit(files: Sequence[FileTask]) -> list[list[FileTask]]:
    """Tasks split where the version changes (a commit's tasks are consecutive)."""
    commits: list[list[FileTask]] = []
    for task in files:
        if commits and commits[-1][0].version == task.version:
            commits[-1].append(task)
        else:
            commits.append([task])
    return commits


def _merged(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def read_task(
    delta_log: DeltaLog,
    target: pa.Schema,
    task: FileTask,
    fail_on_data_loss: bool,
    mapping: ColumnMapping | None = None,
) -> Iterator[pa.RecordBatch]:
    """The file's rows in ``target`` (the Arrow form of the changelog schema): data columns
    by name (missing ones NULL), partition columns from the log, then the changelog
    columns ``target`` holds: a resolving read's (``_resolving_schema``) holds only
    ``_change_type``, as codes."""
    gone = f"Data file '{task.path}'"
    try:
        parquet = pq.ParquetFile(
            delta_log.open(task.path),
            pre_buffer=_pre_buffer(delta_log),
            coerce_int96_timestamp_unit="us",  # Spark's default encoding, any year it reads
        )
        gone = f"The deletion vector file of data file '{task.path}'"
        selected = _selected_rows(delta_log, task, parquet.metadata.num_rows)
    except FileNotFoundError as error:
        message = (
            f"{gone} of version {task.version} of '{delta_log.uri}' is gone "
            f"(VACUUM or manual deletion)"
        )
        if fail_on_data_loss:
            raise source_error(
                "DATA_LOSS",
                f"{message}. Start from a later version, or set failOnDataLoss=false to skip "
                "missing files.",
                version=task.version,
                file=task.path,
            ) from error
        log.warning("%s; skipped because failOnDataLoss=false.", message)
        return
    partition = dict(task.partition_values)
    data_fields = [f for f in target if f.name not in METADATA_COLUMNS]
    if mapping is None:
        present = set(parquet.schema_arrow.names)
        in_file = {f.name: f.name for f in data_fields if f.name in present}
        keys = {f.name: f.name for f in data_fields}
    else:  # physical names (or field ids) in files, physical names in partition values
        in_file = {n: found[0] for n, found in mapping.file_columns(parquet.schema_arrow).items()}
        keys = {f.name: mapping.physical_name(f.name) for f in data_fields}
    partition = {name: partition[key] for name, key in keys.items() if key in partition}
    wanted = [f.name for f in data_fields if f.name in in_file and f.name not in partition]
    columns_read = [in_file[name] for name in wanted]
    if task.change_type is None:
        columns_read.append(CHANGE_TYPE)
    codes = are_codes(target.field(CHANGE_TYPE).type)  # a resolving read
    constants = {
        COMMIT_VERSION: int64_value(task.version),
        COMMIT_TIMESTAMP: _commit_timestamp(task),
    }
    if task.change_type is not None:
        constants[CHANGE_TYPE] = (
            pa.scalar(CHANGE_TYPES.index(task.change_type), pa.int8())
            if codes
            else text_value(task.change_type)
        )
    for field in data_fields:
        if field.name in partition:
            constants[field.name] = _partition_value(partition[field.name], field.type)
    if selected is not None and not selected.any():
        return
    batch_rows = max(1024, BATCH_VALUES // max(1, len(columns_read)))
    position = 0
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=columns_read):
        if selected is not None:
            keep = selected[position : position + batch.num_rows]
            position += batch.num_rows
            if not keep.all():
                batch = batch.filter(from_numpy(keep))
        rows = batch.num_rows
        columns = []
        for field in target:
            if field.name in constants:
                columns.append(pa.repeat(constants[field.name], rows))
            elif field.name == CHANGE_TYPE and codes:  # a CDC file's own column
                labels_read = _cast(batch.column(CHANGE_TYPE), field.with_type(pa.string()), task)
                columns.append(from_numpy(change_kinds(labels_read)))
            elif field.name == CHANGE_TYPE or field.name in wanted:
                column = batch.column(in_file.get(field.name, field.name))
                if mapping is not None and field.name != CHANGE_TYPE:
                    column = _mapped(mapping, column, field, task)
                columns.append(_cast(column, field, task))
            else:
                columns.append(pa.nulls(rows, field.type))
        yield pa.RecordBatch.from_arrays(columns, schema=target)


def _selected_rows(delta_log: DeltaLog, task: FileTask, num_rows: int) -> np.ndarray | None:
    """Which rows of the file the task reads (None: all), from its deletion vectors."""
    if task.only is None and task.without is None:
        return None
    selected = np.full(num_rows, task.only is None)
    if task.only is not None:
        selected[_positions(delta_log, task, task.only, num_rows)] = True
    if task.without is not None:
        selected[_positions(delta_log, task, task.without, num_rows)] = False
    return selected


def _positions(delta_log: DeltaLog, task: FileTask, rows: RowSet, num_rows: int) -> np.ndarray:
    try:
        if isinstance(rows, RowPositions):
            positions = np.frombuffer(rows.data, "<u8")
        else:
            data = serialized_bitmap(
                rows, lambda path, at, size: _read_range(delta_log, path, at, size)
            )
            positions = row_positions(data, rows.cardinality)
        if len(positions) and int(positions.max()) >= num_rows:
            raise DeletionVectorError(
                f"it marks row {int(positions.max())} but the file has {num_rows} rows"
            )
    except DeletionVectorError as error:
        raise source_error(
            "UNREADABLE_DELETION_VECTOR",
            f"The deletion vector ({rows.describe()}) of data file '{task.path}' in version "
            f"{task.version} of '{delta_log.uri}' cannot be read: {error}; restore the file "
            "from a backup or replica of the table, or read from a later version.",
            version=task.version,
            file=task.path,
        ) from error
    return positions.astype(np.intp)


def _read_range(delta_log: DeltaLog, path: str, offset: int, size: int) -> bytes:
    """Bytes of a deletion vector file: relative to the table (``u``) or absolute (``p``,
    a URI or a local path)."""
    if path.startswith("/") and isinstance(delta_log.fs, pafs.LocalFileSystem):
        handle = delta_log.fs.open_input_file(path)
    else:
        handle = delta_log.open(path)
    with handle:
        return handle.read_at(size, offset)


def _pre_buffer(delta_log: DeltaLog) -> bool:
    """Pre-buffering coalesces a file's column chunks into few requests, which pays on an
    object store; on a local disk it only adds a hand-over to Arrow's I/O threads per file
    (a one-row file reads in 0.08 ms without it, 0.24 ms with it)."""
    return not isinstance(delta_log.fs, pafs.LocalFileSystem)


def _partition_value(value: str | bytes | None, data_type: pa.DataType) -> pa.Scalar:
    """Partition values are text, as in the log (a snapshot listing's typed values are
    turned back into text by ``_partition_texts``)."""
    if value is None or value == "":
        return null_value(data_type)
    if isinstance(value, bytes) or pa.types.is_binary(data_type):
        return text_value(value, pa.binary())
    if pa.types.is_timestamp(data_type):
        # Delta writes '2024-01-01 10:00:00[.ffffff]' (UTC for a timestamp column) or
        # ISO-8601 with a zone.
        value = value.replace(" ", "T")
        if data_type.tz is not None and not _ZONE.search(value):
            value += "Z"
    return parsed_value(value, data_type)


def _mapped(mapping: ColumnMapping, column: pa.Array, field: pa.Field, task: FileTask) -> pa.Array:
    try:
        return mapping.read_as(column, field.type, field.name)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
        raise _unreadable_as(column, field, task, error) from error


def _cast(column: pa.Array, field: pa.Field, task: FileTask) -> pa.Array:
    if not field.nullable and column.null_count:  # Spark would fail on it, without a word
        raise source_error(
            "SCHEMA_MISMATCH",
            f"Column '{field.name}' of data file '{task.path}' (version {task.version}) holds "
            f"{column.null_count} NULL value(s), but the change feed declares it NOT NULL: the "
            "writer broke the table's schema. Restore or rewrite that commit's file, or read "
            "from a later version.",
            column=field.name,
            file=task.path,
            version=task.version,
        )
    if column.type == field.type:
        return column
    try:
        return column.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise _unreadable_as(column, field, task, error) from error


def _unreadable_as(
    column: pa.Array, field: pa.Field, task: FileTask, error: Exception
) -> Exception:
    return source_error(
        "SCHEMA_MISMATCH",
        f"Column '{field.name}' of data file '{task.path}' (version {task.version}) is "
        f"{column.type}, which cannot be read as {field.type}: {error}",
        column=field.name,
        file=task.path,
        version=task.version,
    )


def check_no_reserved_columns(schema: StructType) -> None:
    clash = [f.name for f in schema.fields if f.name in METADATA_COLUMNS]
    if clash:
        raise source_error(
            "RESERVED_COLUMN",
            f"The table has column(s) {', '.join(clash)}, which the change feed adds itself; "
            "rename them before reading the table's changes.",
            columns=", ".join(clash),
        )
