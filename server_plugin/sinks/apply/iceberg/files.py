"""An Iceberg table's data files as ``file_lookup`` searches a Delta table's: described as
delta-rs lists add actions (path, size, some columns' bounds and NULL counts, decoded from
the manifests), opened through the table's FileIO. The state's changes of a batch's keys
and the rows of a target's files a batch replaces are then found by the same per-file key
indexes a Delta table's are, kept per process, only the row groups holding the keys read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from spark_cdc.server_plugin.sinks.apply.engine.spec import BUCKET
from spark_cdc.server_plugin.sinks.apply.iceberg import tables


class TableFiles:
    """An Iceberg table's files opened through its FileIO (``file_lookup.Files``): their
    paths are whole locations, each written once."""

    def __init__(self, io: Any) -> None:
        self.io = io

    def location(self, path: str) -> str:
        return path

    def open(self, path: str) -> Any:
        return self.io.new_input(path).open(seekable=True)


def described(table: Any, names: Sequence[str], tasks: list[Any]) -> pa.Table | None:
    """``tasks``' data files (of ``table``'s current snapshot) as delta-rs lists add
    actions: path, size, the bounds and NULL counts of the columns ``names``, and their
    bucket when ``table`` is partitioned by one. Their rows are the files' own: delete
    files are not applied. None: the files cannot be read by their columns' names (a
    second schema, where a name may be another field; names Parquet sanitizes; a file of
    an earlier partition spec, with other partition values)."""
    from pyiceberg.schema import sanitize_column_names

    schema = table.schema()
    if len(table.metadata.schemas) > 1 or sanitize_column_names(schema) != schema:
        return None
    current = table.spec().spec_id
    if any(task.file.spec_id != current for task in tasks):
        return None
    data = [task.file for task in tasks]
    files: dict[str, Any] = {
        "path": pa.array([f.file_path for f in data], pa.string()),
        "size_bytes": pa.array([f.file_size_in_bytes for f in data], pa.int64()),
        "modification_time": pa.array([0] * len(data), pa.int64()),  # paths are never reused
    }
    arrow = tables.table_schema(table)
    for name in names:
        field = schema.find_field(name)
        counts = [(f.null_value_counts or {}).get(field.field_id) for f in data]
        files[f"null_count.{name}"] = pa.array(counts, pa.int64())
        for kind, bounds in (("min", "lower_bounds"), ("max", "upper_bounds")):
            column = _bounds(field, arrow.field(name).type, [getattr(f, bounds) for f in data])
            if column is not None:
                files[f"{kind}.{name}"] = column
    partitioned = [schema.find_column_name(f.source_id) for f in table.spec().fields]
    if BUCKET in partitioned:
        at = partitioned.index(BUCKET)
        files[f"partition.{BUCKET}"] = pa.array([f.partition[at] for f in data], pa.int32())
    return pa.table(files)


def _bounds(field: Any, arrow_type: pa.DataType, bounds: list[Any]) -> pa.Array | None:
    """One bound of ``field`` per file (from each file's bounds by field id, decoded), as
    the column's Arrow type; None for a type whose bounds are not compared here (a file
    then may hold any value)."""
    from pyiceberg.conversions import from_bytes

    exact = pa.types.is_integer(arrow_type) or pa.types.is_date(arrow_type)
    exact = exact or pa.types.is_timestamp(arrow_type)
    text = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    if not (exact or text):
        return None
    values = [
        None
        if not b or field.field_id not in b
        else from_bytes(field.field_type, b[field.field_id])
        for b in bounds
    ]
    if text:
        return pa.array(values, arrow_type)
    storage = pa.int32() if pa.types.is_date(arrow_type) else pa.int64()
    return pa.array(values, storage).cast(arrow_type)
