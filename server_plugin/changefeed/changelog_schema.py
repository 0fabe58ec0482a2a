"""The change feed's schema, whatever the source: the table's columns and the changelog
columns, what a read declares when the source resolves the row-level passes, and the row
id's columns resolved against the table's.
"""

from __future__ import annotations

from typing import Any

import pyspark
from pyspark.sql.types import (
    ArrayType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.vocabulary import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION

CHANGELOG_FIELDS = (
    StructField(CHANGE_TYPE, StringType(), False),
    StructField(COMMIT_VERSION, LongType(), False),
    StructField(COMMIT_TIMESTAMP, TimestampType(), False),
)


def changelog_schema(table: StructType) -> StructType:
    return StructType([*table.fields, *CHANGELOG_FIELDS])


# The client's streaming plan for the row-level passes (aggregate, then inline) reports every
# column nullable on Spark 4.3; on 4.0 to 4.2 it keeps the input's nullability (measured with
# each version's server). This worker's pyspark is its server's Spark.
_STREAM_PLAN_NULLABLE = tuple(int(p) for p in pyspark.__version__.split(".")[:2]) >= (4, 3)


def declared_schema(
    strict: StructType, resolves: bool, compute_updates: bool, nullable: bool
) -> StructType:
    """The schema a read declares: the changelog's own, except where the source resolves the
    row-level passes, where it declares what the client's plan for them would: every column
    nullable, nested ones too, for a stream on 4.3+ (``nullable``: the streaming plan's
    aggregate makes them so there); a nullable ``_change_type`` under update detection (its
    relabelling)."""
    if not resolves:
        return strict
    if nullable and _STREAM_PLAN_NULLABLE:
        return as_nullable(strict)
    if compute_updates:
        return StructType(
            [StructField(f.name, f.dataType, True) if f.name == CHANGE_TYPE else f for f in strict]
        )
    return strict


def as_nullable(data_type: DataType) -> Any:
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, as_nullable(f.dataType), True) for f in data_type])
    if isinstance(data_type, ArrayType):
        return ArrayType(as_nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(as_nullable(data_type.keyType), as_nullable(data_type.valueType), True)
    return data_type


def row_id_paths(row_id: tuple[str, ...], schema: StructType) -> tuple[tuple[str, ...], ...]:
    """Each row id column as a path of field names in the table's spelling, resolved as
    Spark resolves ``col("key.id")``: dots separate nested fields (backticks quote), names
    match case-insensitively."""
    paths = []
    for text in row_id:
        path: list[str] = []
        fields: Any = schema
        for part in _name_parts(text):
            if not isinstance(fields, StructType):
                fields = None
                break
            exact = [f for f in fields if f.name == part]
            found = exact or [f for f in fields if f.name.lower() == part.lower()]
            if len(found) != 1:
                fields = None
                break
            path.append(found[0].name)
            fields = found[0].dataType
        if fields is None:
            raise error(
                "INVALID_CDC_OPTION.UNKNOWN_ROW_ID_COLUMN",
                option="rowId",
                value=text,
                columns=", ".join(f.name for f in schema if f.name not in _CHANGELOG_NAMES),
            )
        paths.append(tuple(path))
    return tuple(paths)


def _name_parts(text: str) -> list[str]:
    parts, current, quoted = [], "", False
    for char in text:
        if char == "`":
            quoted = not quoted
        elif char == "." and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


_CHANGELOG_NAMES = {CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP}
