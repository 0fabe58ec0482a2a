"""A Delta target's rows at one version, read as the ``delta_changelog`` source reads a
stream's initial snapshot (deletion vectors and column mapping applied): what
``apply_changes_from_snapshot`` compares the next snapshot with (``snapshot_reads``).

Where the version's files hold its rows as they are (``plain_files``), Spark's own Parquet
reader reads them instead, at the speed of a scan: the rows never cross into Python.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StringType, StructField, StructType
from spark_cdc.server_plugin.arrow_types import arrow_schema
from spark_cdc.server_plugin.delta.column_mapping import ColumnMapping, mapping_mode
from spark_cdc.server_plugin.delta.file_reader import read_task
from spark_cdc.server_plugin.delta.file_tasks import FileTask, snapshot_tasks
from spark_cdc.server_plugin.delta.log import DeltaLog
from spark_cdc.server_plugin.delta.table_schema import table_schema
from spark_cdc.server_plugin.local_paths import local_root
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


# Reader features that leave a table's files holding its rows as they are: a file's
# deletion vector is checked per file, column mapping's mode must be none, and a variant
# column is read by the sink (delta-rs declares the feature on tables that have none).
_PLAIN_FEATURES = frozenset(
    {
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "deletionVectors",
        "columnMapping",
        "variantType",
        "variantType-preview",
    }
)
_VARIANT = re.compile(r'"(?:type|elementType|keyType|valueType)":\s*"variant"')
# A path Spark would read as a pattern (Hadoop's globs) is not read as a path.
_GLOB = frozenset("*?[]{}\\")


def plain_files(spec: ApplySpec, version: int | None) -> tuple[StructType, list[str]] | None:
    """The version's schema and files, when Spark's Parquet reader given that schema reads
    exactly its rows: a local table with no partition columns (their values are in the
    log, not the files), no column mapping, no deletion vector, no type widening or other
    reader feature that changes what a file's values mean, and no path Spark would take for
    a pattern. None otherwise, or when the table has no file."""
    if local_root(spec.target) is None or spec.storage_options:
        return None
    _, table = _table(spec, version)
    metadata = table.metadata()
    features = set(table.protocol().reader_features or ())
    if (
        features - _PLAIN_FEATURES
        or mapping_mode(metadata.configuration) != "none"
        or metadata.partition_columns
        or _VARIANT.search(table.schema().to_json())
        or any(task.without is not None for task in snapshot_tasks(table, table.version(), 0))
    ):
        return None
    paths = [str(uri) for uri in table.file_uris()]
    if not paths or any(_GLOB.intersection(path) for path in paths):
        return None
    return table_schema(table.schema().to_json()), paths
