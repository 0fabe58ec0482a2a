"""Spark types as the Arrow types a Python data source must yield for them.

A reader's batches must match its declared schema exactly; timestamps in particular have
to be ``timestamp[us, tz=UTC]`` (``timestamp``) or ``timestamp[us]`` (``timestamp_ntz``).
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

import numpy as np
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


# Spark's Arrow form of a variant (``pyspark.sql.pandas.types.to_arrow_type``, the same on
# 4.0-4.3): the struct Delta stores it as, with the metadata field tagged, which is how
# Spark tells a variant from a struct of two binaries. Files hold it untagged: reading casts
# to this type, which tags it.
VARIANT = pa.struct(
    [
        pa.field("value", pa.binary(), nullable=False),
        pa.field("metadata", pa.binary(), nullable=False, metadata={b"variant": b"true"}),
    ]
)
# Spark 4.0+ (every server this package supports) reads and writes variants.
_VARIANT_TYPE = getattr(T, "VariantType", None)


def arrow_type(data_type: Any) -> pa.DataType:
    if isinstance(data_type, T.NullType):  # Delta's ``void``: no column in the files
        return pa.null()
    if _VARIANT_TYPE is not None and isinstance(data_type, _VARIANT_TYPE):
        return VARIANT
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


# -- values and arrays, built from their bytes ------------------------------------------------
# ``pa.scalar``/``pa.array`` on a Python value or a numpy array, and ``to_numpy``, make
# pyarrow ask whether it holds a pandas object, which imports pandas: 0.3-1 s of a
# worker's first task, and the full garbage collection Spark's worker runs after every
# task then walks pandas' objects too (5 ms before, 39 ms after, measured here).


LONG = pa.int64()
STRING = pa.string()


def null_value(data_type: pa.DataType) -> pa.Scalar:
    return pa.nulls(1, data_type)[0]


def int64_value(value: int, data_type: pa.DataType = LONG) -> pa.Scalar:
    """A value of a 64-bit integer-backed type (long, timestamp in microseconds)."""
    data = pa.py_buffer(struct.pack("<q", value))
    return pa.Array.from_buffers(data_type, 1, [None, data])[0]


def text_value(text: str | bytes, data_type: pa.DataType = STRING) -> pa.Scalar:
    """A string (or, given bytes and ``pa.binary()``, binary) value."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    offsets = pa.py_buffer(struct.pack("<ii", 0, len(data)))
    return pa.Array.from_buffers(data_type, 1, [None, offsets, pa.py_buffer(data)])[0]


def parsed_value(text: str, data_type: pa.DataType) -> pa.Scalar:
    """Text parsed as ``data_type`` by Arrow's cast (numbers, dates, timestamps, booleans,
    decimals); raises ``pa.ArrowInvalid`` when it does not parse."""
    return text_value(text).cast(data_type)


def text_array(texts: list[str]) -> pa.Array:
    """A string array of ``texts``, built from its buffers (``pa.array`` imports pandas)."""
    data = [t.encode("utf-8") for t in texts]
    offsets = struct.pack(f"<{len(data) + 1}i", 0, *itertools.accumulate(map(len, data)))
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))]
    return pa.Array.from_buffers(pa.string(), len(texts), buffers)


TRUE = pa.Array.from_buffers(pa.bool_(), 1, [None, pa.py_buffer(b"\x01")])[0]
FALSE = pa.Array.from_buffers(pa.bool_(), 1, [None, pa.py_buffer(b"\x00")])[0]


def from_numpy(values: np.ndarray) -> pa.Array:
    """A boolean or numeric numpy array as Arrow (numbers without a copy)."""
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, data])
    data_type = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(data_type, len(values), [None, pa.py_buffer(values)])


def to_numpy(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean or numeric Arrow array's values as numpy (numbers without a copy, read
    only). A NULL's slot holds whatever the buffer has there: fill NULLs first, or mask
    them out after."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    count, offset, data = len(array), array.offset, array.buffers()[1]
    data_type = array.type
    if pa.types.is_boolean(data_type):
        if not count:
            return np.zeros(0, np.bool_)
        bits = np.unpackbits(np.frombuffer(data, np.uint8), count=offset + count, bitorder="little")
        return bits[offset:].view(np.bool_)
    if not (pa.types.is_integer(data_type) or pa.types.is_floating(data_type)):
        raise TypeError(f"no numpy view of Arrow type {data_type}")
    dtype = np.dtype(data_type.to_pandas_dtype())
    if not count:
        return np.zeros(0, dtype)
    return np.frombuffer(data, dtype, count=count, offset=offset * dtype.itemsize)
