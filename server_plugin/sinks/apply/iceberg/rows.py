"""An Iceberg target's rows at one snapshot, read by pyiceberg's scan (its position
deletes and deletion vectors applied; a table with equality deletes, which no
apply_changes writes and pyiceberg does not read, is refused by name,
``APPLY_CHANGES.UNSUPPORTED_TARGET_FEATURE``): what
``apply_changes_from_snapshot`` compares the next snapshot with (``snapshot_reads``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType
from spark_cdc.server_plugin.arrow_types import arrow_schema
from spark_cdc.server_plugin.iceberg.table_schema import spark_schema
from spark_cdc.server_plugin.sinks.apply.engine.spec import ApplySpec
from spark_cdc.server_plugin.sinks.apply.iceberg.rewrites import refusing_equality_deletes
from spark_cdc.server_plugin.sinks.apply.iceberg.tables import existing_target


@dataclass(frozen=True)
class FilesToRead(InputPartition):
    """Every ``count``-th file of snapshot ``snapshot_id``'s scan, from ``index``."""

    snapshot_id: int | None
    index: int
    count: int


def snapshot_id(table: Any, sequence_number: int | None) -> int | None:
    """The snapshot of the table's current history at ``sequence_number`` (the newest at
    or before it; None: the current one)."""
    from pyiceberg.table.snapshots import ancestors_of

    if sequence_number is None:
        current = table.current_snapshot()
        return None if current is None else current.snapshot_id
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        if (snapshot.sequence_number or 0) <= sequence_number:
            return snapshot.snapshot_id
    return None


def _table(spec: ApplySpec) -> Any:
    table = existing_target(spec)
    assert table is not None, "snapshot_reads reads an existing target"
    return table


def schema(spec: ApplySpec, sequence_number: int | None) -> StructType:
    return spark_schema(_table(spec).schema(), spec.target)


def partitions(spec: ApplySpec, sequence_number: int | None, count: int) -> list[InputPartition]:
    table = _table(spec)
    chosen = snapshot_id(table, sequence_number)
    with refusing_equality_deletes(table):
        files = 0 if chosen is None else sum(1 for _ in table.scan(snapshot_id=chosen).plan_files())
    parts = max(1, min(count, files))
    return [FilesToRead(chosen, index, parts) for index in range(parts)]


def read(spec: ApplySpec, partition: FilesToRead, declared: StructType) -> Iterator[pa.RecordBatch]:
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    if partition.snapshot_id is None:
        return
    table = _table(spec)
    with refusing_equality_deletes(table):
        tasks = list(table.scan(snapshot_id=partition.snapshot_id).plan_files())
    mine = tasks[partition.index :: partition.count]
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    target = arrow_schema(declared)
    for batch in scan.to_record_batches(mine):
        yield pa.RecordBatch.from_arrays(
            [batch.column(f.name).cast(f.type) for f in target], schema=target
        )
