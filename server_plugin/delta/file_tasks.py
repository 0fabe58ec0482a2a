"""What a commit contributes to the change feed, as one task per data file, and how tasks
are grouped into Spark's tasks: the planning side of a read (``file_reader`` reads a task's
rows, ``resolving_reader`` whole commits resolved).

Delta's rule: a commit that wrote change data files (``cdc`` actions) is described by them
alone; otherwise its added files are inserts and its removed files deletes (``dataChange``
actions only, so compaction contributes nothing). Copy-on-write rewrites thereby appear as
carry-over pairs and updates as delete+insert, which the client-side rewrite resolves, or
the source itself (``resolving_reader.read_resolved``) when asked to.

Deletion vectors refine the rule row by row: a file's rows are those its DV does not mark,
and a file removed and re-added in one commit with another DV (DML that only marks rows)
contributes just the difference: rows newly marked are deletes, rows no longer marked
(a restore) inserts. Such a commit has no carry-over rows at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from spark_cdc.server_plugin.arrow_types import to_numpy
from spark_cdc.server_plugin.delta.deletion_vectors import DeletionVector, RowPositions
from spark_cdc.server_plugin.delta.log import Commit, FileAction
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.vocabulary import DELETE, INSERT

RowSet = DeletionVector | RowPositions


@dataclass(frozen=True)
class FileTask(InputPartition):
    """One data file of one commit. ``change_type`` None: the file's own column (CDC files).
    The rows read are those in ``only`` (when given) and not in ``without`` (when given):
    row positions that deletion vectors name. A large file read as it is may be split
    (``partitions.split_files``): this task then reads the row groups in ``span`` of it
    (``file_reader.split_row_groups``), and ``size`` is the span's bytes."""

    path: str
    change_type: str | None
    version: int
    timestamp_ms: int
    partition_values: tuple[tuple[str, Any], ...]
    size: int
    only: RowSet | None = None
    without: RowSet | None = None
    span: tuple[float, float] = (0.0, 1.0)


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
            raise error("DELTA_CHANGELOG.DELETION_VECTOR_OF_UNKNOWN_FILE", file=uri)
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
