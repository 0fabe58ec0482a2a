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


def projection(given: StructType, feed: StructType, path: str) -> StructType | None:
    """What a read serves when Spark hands its reader ``given`` rather than the ``feed``
    schema the source declares (``schema()`` is not asked when a user gives a schema): some
    of the feed's columns, in the given order. None where ``given`` is the feed's schema,
    nullability aside (the declared schema of a table whose nullability changed since).

    As Spark's file sources read a given schema, only its columns are read. Each must be a
    feed column by its exact name, with the feed's type, nullable where the feed's is (else
    ``INVALID_CHANGELOG_SCHEMA.READ_SCHEMA``): a cast, or a name matched loosely, would
    serve rows the feed does not hold."""
    if as_nullable(given) == as_nullable(feed):
        return None
    fields = {f.name: f for f in feed}

    def refused(problem: str) -> Exception:
        names = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in feed)
        return error(
            "INVALID_CHANGELOG_SCHEMA.READ_SCHEMA", path=path, problem=problem, columns=names
        )

    seen: set[str] = set()
    for field in given:
        own = fields.get(field.name)
        if own is None:
            raise refused(f"names column '{field.name}', which the feed lacks")
        if field.name in seen:
            raise refused(f"names column '{field.name}' twice")
        seen.add(field.name)
        if as_nullable(field.dataType) != as_nullable(own.dataType):
            found = field.dataType.simpleString()
            raise refused(f"gives column '{field.name}' as {found}, not the feed's type")
        if not _holds_nulls_of(field, own):
            raise refused(f"declares column '{field.name}' (or a field of it) NOT NULL")
    return given


def _holds_nulls_of(given: Any, own: Any) -> bool:
    """Whether ``given`` (a field or type) is nullable wherever ``own`` is, nested too."""
    if isinstance(own, StructField):
        nullable = given.nullable or not own.nullable
        return nullable and _holds_nulls_of(given.dataType, own.dataType)
    if isinstance(own, StructType):
        return all(_holds_nulls_of(g, o) for g, o in zip(given.fields, own.fields, strict=True))
    if isinstance(own, ArrayType):
        nullable = given.containsNull or not own.containsNull
        return nullable and _holds_nulls_of(given.elementType, own.elementType)
    if isinstance(own, MapType):
        nullable = given.valueContainsNull or not own.valueContainsNull
        return nullable and _holds_nulls_of(given.valueType, own.valueType)
    return True


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
