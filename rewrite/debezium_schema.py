"""The row schema Debezium's ``schema``/``payload`` wrapper describes, as a Spark schema.

A Debezium envelope with ``value.converter.schemas.enable=true`` carries a Kafka Connect
schema beside its payload: ``schema.fields`` holds ``before`` and ``after``, each a struct
whose fields are the table's columns with a Connect type (``int32``, ``string`` ...) and,
for logical types, a name (``io.debezium.time.Date`` ...). Reading it is a round trip
(one event, as ``spark.read.json`` infers a schema), so ``decode_changes`` does it only
when no ``schema=`` is given; this module maps what it reads. The payload is parsed with
the Connect types as JSON holds them (``raw``), then each logical type is converted
(``converted``): days to dates, epoch milli- and microseconds to timestamps, ISO strings to
timestamps. Types it cannot map are refused by name rather than guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column
from pyspark.sql import types as T
from pyspark.sql.connect import functions as F
from spark_cdc.rewrite.errors import cdc_error

_PRIMITIVES: dict[str, T.DataType] = {
    "int8": T.ByteType(),
    "int16": T.ShortType(),
    "int32": T.IntegerType(),
    "int64": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "float32": T.FloatType(),
    "float64": T.DoubleType(),
    "boolean": T.BooleanType(),
    "string": T.StringType(),
    "bytes": T.BinaryType(),
}

# Logical types: the Spark type they become. Their JSON value is the Connect type's.
_DATE = "io.debezium.time.Date"
_MILLIS = ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp")
_MICROS = ("io.debezium.time.MicroTimestamp",)
_ZONED = ("io.debezium.time.ZonedTimestamp",)
_UNMAPPED = (
    "org.apache.kafka.connect.data.Decimal",
    "io.debezium.data.VariableScaleDecimal",
)


@dataclass(frozen=True)
class RowSchema:
    """What the wrapper says of the rows: ``raw`` parses the payload's JSON, and
    ``convert`` turns a parsed row (a struct of ``raw``) into the row as served."""

    raw: T.StructType
    logical: Mapping[str, str]

    @property
    def names(self) -> list[str]:
        return list(self.raw.names)

    def convert(self, row: Column) -> Column:
        if not self.logical:
            return row
        fields = [_converted(row.getField(n), self.logical.get(n)).alias(n) for n in self.names]
        return F.when(row.isNotNull(), F.struct(*fields))


def row_schema(wrapper: Mapping[str, Any]) -> RowSchema:
    """The row schema of one event's ``schema`` object (the ``after``, else ``before``
    field's struct)."""
    fields = {f.get("field"): f for f in wrapper.get("fields") or () if isinstance(f, dict)}
    image = fields.get("after") or fields.get("before")
    if not image or image.get("type") != "struct":
        raise cdc_error(
            "INVALID_CDC_ENVELOPE.SCHEMA_REQUIRED",
            format="debezium-json",
            why="(its schema wrapper describes no before or after struct)",
        )
    raw, logical = [], {}
    for field in image.get("fields") or ():
        name = field["field"]
        data_type = _spark_type(name, field)
        raw.append(T.StructField(name, data_type, True))
        if field.get("name") in (_DATE, *_MILLIS, *_MICROS, *_ZONED):
            logical[name] = field["name"]
    return RowSchema(T.StructType(raw), logical)


def _spark_type(name: str, field: Mapping[str, Any]) -> T.DataType:
    kind, logical = field.get("type"), field.get("name")
    if logical in _UNMAPPED or (kind not in _PRIMITIVES and kind != "array"):
        raise cdc_error(
            "INVALID_CDC_ENVELOPE.UNSUPPORTED_SCHEMA_TYPE",
            column=name,
            type=logical or kind,
        )
    if kind == "array":
        return T.ArrayType(_spark_type(name, field.get("items") or {}))
    return _PRIMITIVES[str(kind)]


def _converted(value: Column, logical: str | None) -> Column:
    if logical == _DATE:
        return F.date_from_unix_date(value)
    if logical in _MILLIS:
        return F.timestamp_millis(value)
    if logical in _MICROS:
        return F.timestamp_micros(value)
    if logical in _ZONED:
        return F.try_to_timestamp(value)
    return value
