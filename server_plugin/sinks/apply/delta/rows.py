"""A Delta target's rows at one version, read as the ``delta_changelog`` source reads a
stream's initial snapshot (deletion vectors and column mapping applied): what
``apply_changes_from_snapshot`` compares the next snapshot with (``snapshot_reads``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StringType, StructField, StructType
from spark_cdc.server_plugin.arrow_types import arrow_schema
from spark_cdc.server_plugin.delta.column_mapping import ColumnMapping
from spark_cdc.server_plugin.delta.file_reader import read_task
from spark_cdc.server_plugin.delta.file_tasks import FileTask, snapshot_tasks
from spark_cdc.server_plugin.delta.log import DeltaLog
from spark_cdc.server_plugin.delta.table_schema import table_schema
from spark_cdc.server_plugin.sinks.apply.delta.tables import storage
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec
from spark_cdc.server_plugin.vocabulary import CHANGE_TYPE


@dataclass(frozen=True)
class FilesToRead(InputPartition):
    """Some files of the target's version ``version``."""

    version: int
    tasks: tuple[FileTask, ...]


def _table(spec: ApplySpec, version: int | None) -> tuple[DeltaLog, Any]:
    log = DeltaLog(spec.target, storage(spec))
    return log, log.table(version)


def schema(spec: ApplySpec, version: int | None) -> StructType:
    return table_schema(_table(spec, version)[1].schema().to_json())


def partitions(spec: ApplySpec, version: int | None, count: int) -> list[InputPartition]:
    """The version's files in ``count`` partitions of about equal bytes."""
    _, table = _table(spec, version)
    at = table.version()
    tasks = sorted(snapshot_tasks(table, at, 0), key=lambda t: -t.size)
    groups: list[list[FileTask]] = [[] for _ in range(max(1, min(count, len(tasks))))]
    sizes = [0] * len(groups)
    for task in tasks:  # the largest first, each to the lightest partition
        lightest = sizes.index(min(sizes))
        groups[lightest].append(task)
        sizes[lightest] += task.size
    return [FilesToRead(at, tuple(group)) for group in groups]


def read(spec: ApplySpec, partition: FilesToRead, declared: StructType) -> Iterator[pa.RecordBatch]:
    log, table = _table(spec, partition.version)
    metadata = table.metadata()
    mapping = ColumnMapping.of(table.schema().to_json(), metadata.configuration)
    # The source's reader serves changelog rows: ``_change_type`` is read, then left out.
    target = arrow_schema(StructType([*declared.fields, StructField(CHANGE_TYPE, StringType())]))
    for task in partition.tasks:
        for batch in read_task(log, target, task, True, mapping):
            yield batch.drop_columns([CHANGE_TYPE])
