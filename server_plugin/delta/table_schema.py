"""Delta table schemas as the change feed sees them, and when an older one can be read as
newer (the changelog's own columns: ``spark_cdc.server_plugin.changefeed.changelog_schema``).

Delta stores the schema as Spark's own StructType JSON, so it parses directly. Field
metadata (comments, generation expressions) is not part of a change feed and is dropped.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.types import StructType
from spark_cdc.server_plugin.errors import error


def table_schema(schema_string: str) -> StructType:
    return StructType.fromJson(_without_metadata(json.loads(schema_string)))


def physical_schema(schema_string: str, configuration: dict[str, Any] | None) -> StructType:
    """The schema with top-level columns under their physical names when column mapping is
    on: what stays the same across a rename, so older files' readability is judged by it."""
    data = json.loads(schema_string)
    mode = str((configuration or {}).get("delta.columnMapping.mode", "none")).lower()
    if mode != "none":
        for field in data.get("fields", []):
            physical = (field.get("metadata") or {}).get("delta.columnMapping.physicalName")
            if physical:
                field["name"] = physical
    return StructType.fromJson(_without_metadata(data))


def readable_as(older: StructType, newer: StructType) -> bool:
    """Every column of ``older`` is in ``newer`` with the same type, and what ``newer``
    adds is nullable: old files then read as ``newer`` with NULLs, nothing reinterpreted."""
    columns = {f.name: f for f in newer.fields}
    if any(f.name not in columns or columns[f.name].dataType != f.dataType for f in older):
        return False
    known = {f.name for f in older.fields}
    return all(f.nullable for f in newer.fields if f.name not in known)


def schema_changed(version: int, found: StructType, reading: StructType, why: str) -> Exception:
    return error(
        "DELTA_CHANGELOG.SCHEMA_CHANGED",
        version=version,
        found=found.simpleString(),
        reading=reading.simpleString(),
        why=why,
    )


def _without_metadata(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_metadata(v) if k != "metadata" else {} for k, v in value.items()}
    if isinstance(value, list):
        return [_without_metadata(v) for v in value]
    return value
