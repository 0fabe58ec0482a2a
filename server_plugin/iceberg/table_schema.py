"""An Iceberg schema as the change feed's Spark schema, the way Spark's own Iceberg
connector shows it (``SparkSchemaUtil``): ``timestamptz`` as ``timestamp``, ``timestamp``
as ``timestamp_ntz``, ``fixed`` as ``binary``, ``required`` as NOT NULL. Types Spark cannot
show the same on every server this package supports, or that a Python source cannot hand
over (``uuid``: Arrow's extension type; ``time``: Spark 4.1+ only; nanosecond timestamps,
variants, geometries and ``unknown``), are refused by name rather than served changed.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import types as T
from spark_cdc.server_plugin.errors import error
from spark_cdc.server_plugin.vocabulary import METADATA_COLUMNS

_PRIMITIVES: dict[str, T.DataType] = {
    "boolean": T.BooleanType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "date": T.DateType(),
    "string": T.StringType(),
    "binary": T.BinaryType(),
    "timestamp": T.TimestampNTZType(),
    "timestamptz": T.TimestampType(),
}


def spark_schema(schema: Any, table: str) -> T.StructType:
    """The table's columns (pyiceberg ``Schema``) as a Spark ``StructType``."""
    fields = [_field(f, table) for f in schema.fields]
    clash = [f.name for f in fields if f.name in METADATA_COLUMNS]
    if clash:
        raise error("ICEBERG_CHANGELOG.RESERVED_COLUMN", columns=", ".join(clash))
    return T.StructType(fields)


def _field(field: Any, table: str) -> T.StructField:
    return T.StructField(field.name, _type(field.field_type, field.name, table), field.optional)


def _type(kind: Any, column: str, table: str) -> T.DataType:
    from pyiceberg.types import DecimalType, FixedType, ListType, MapType, StructType

    if isinstance(kind, StructType):
        return T.StructType([_field(f, table) for f in kind.fields])
    if isinstance(kind, ListType):
        return T.ArrayType(_type(kind.element_type, column, table), kind.element_required is False)
    if isinstance(kind, MapType):
        return T.MapType(
            _type(kind.key_type, column, table),
            _type(kind.value_type, column, table),
            kind.value_required is False,
        )
    if isinstance(kind, DecimalType):
        return T.DecimalType(kind.precision, kind.scale)
    if isinstance(kind, FixedType):
        return T.BinaryType()
    simple = _PRIMITIVES.get(str(kind))
    if simple is None:
        raise error(
            "ICEBERG_CHANGELOG.UNSUPPORTED_TABLE_FEATURE",
            path=table,
            feature=f"a column of type {kind} ('{column}')",
        )
    return simple


def identifier_paths(schema: Any) -> tuple[tuple[str, ...], ...]:
    """The schema's identifier fields (its row id: Flink's and Spark's primary keys) as
    paths of field names, in the schema's order of ``identifier-field-ids``; () for none.
    Identifier fields live in structs only (never lists or maps), as the spec requires."""
    paths: dict[int, tuple[str, ...]] = {}

    def walk(fields: Any, prefix: tuple[str, ...]) -> None:
        for field in fields:
            paths[field.field_id] = (*prefix, field.name)
            if field.field_type.is_struct:
                walk(field.field_type.fields, (*prefix, field.name))

    walk(schema.fields, ())
    return tuple(paths[i] for i in schema.identifier_field_ids if i in paths)
