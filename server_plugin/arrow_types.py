"""Spark types as the Arrow types a Python data source must yield for them.

A reader's batches must match its declared schema exactly; timestamps in particular have
to be ``timestamp[us, tz=UTC]`` (``timestamp``) or ``timestamp[us]`` (``timestamp_ntz``).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

_SIMPLE: dict[type, pa.DataType] = {
    T.BooleanType: pa.bool_(),
    T.ByteType: pa.int8(),
    T.ShortType: pa.int16(),
    T.IntegerType: pa.int32(),
    T.LongType: pa.int64(),
    T.FloatType: pa.float32(),
    T.DoubleType: pa.float64(),
    T.StringType: pa.string(),
    T.BinaryType: pa.binary(),
    T.DateType: pa.date32(),
    T.TimestampType: pa.timestamp("us", tz="UTC"),
    T.TimestampNTZType: pa.timestamp("us"),
}


def arrow_type(data_type: Any) -> pa.DataType:
    for spark_type, simple in _SIMPLE.items():
        if isinstance(data_type, spark_type):
            return simple
    if isinstance(data_type, T.DecimalType):
        return pa.decimal128(data_type.precision, data_type.scale)
    if isinstance(data_type, T.ArrayType):
        return pa.list_(arrow_type(data_type.elementType))
    if isinstance(data_type, T.MapType):
        return pa.map_(arrow_type(data_type.keyType), arrow_type(data_type.valueType))
    if isinstance(data_type, T.StructType):
        return arrow_schema(data_type, as_struct=True)
    raise TypeError(f"no Arrow type for Spark type {data_type.simpleString()}")


def arrow_schema(schema: T.StructType, as_struct: bool = False) -> Any:
    fields = [pa.field(f.name, arrow_type(f.dataType), f.nullable) for f in schema.fields]
    return pa.struct(fields) if as_struct else pa.schema(fields)
