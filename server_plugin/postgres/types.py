"""PostgreSQL's column types as Spark's, and their values from text to Arrow.

Both the log and the first copy carry values as PostgreSQL's own text output (the log
always does; the copy selects ``col::text`` for the types whose binary form Arrow would
read differently), so one conversion serves both and a value reads the same from either.
The session that reads them fixes the text's form (``connection.SESSION_SETTINGS``: UTC,
ISO dates, every float digit, hex bytea). Casts are Arrow's, vectorized; a text that does
not convert (a ``NaN`` numeric, a date before year 1, ``infinity``) fails the read by name
instead of becoming NULL.

| PostgreSQL | Spark |
|---|---|
| smallint, integer, bigint | ShortType, IntegerType, LongType |
| real, double precision | FloatType, DoubleType |
| numeric(p, s) | DecimalType(p, s); numeric without a precision: DecimalType(38, 18) |
| boolean | BooleanType |
| text, varchar, char, name, citext, uuid, json(b), xml, inet, cidr, macaddr, enums | StringType |
| bytea | BinaryType |
| date | DateType |
| timestamp | TimestampNTZType |
| timestamptz | TimestampType |
| arrays of the types above (one dimension; ``array_text`` splits them) | ArrayType |
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)
from spark_cdc.server_plugin.arrow_types import arrow_type
from spark_cdc.server_plugin.errors import ChangelogSourceError, error
from spark_cdc.server_plugin.postgres.array_text import split_arrays

_SCALARS: dict[str, DataType] = {
    "int2": ShortType(),
    "int4": IntegerType(),
    "int8": LongType(),
    "oid": LongType(),
    "float4": FloatType(),
    "float8": DoubleType(),
    "bool": BooleanType(),
    "bytea": BinaryType(),
    "date": DateType(),
    "timestamp": TimestampNTZType(),
    "timestamptz": TimestampType(),
    **{
        name: StringType()
        for name in [
            "text",
            "varchar",
            "bpchar",
            "char",
            "name",
            "citext",
            "uuid",
            "json",
            "jsonb",
            "xml",
            "inet",
            "cidr",
            "macaddr",
        ]
    },
}
# Dates and timestamps arrive in binary too: ADBC's driver turns ``infinity`` and values
# beyond year 9999 or before year 1 into far (or wrapped) numbers, which ``from_copy``
# refuses by name, as the text of the log is refused.
_BINARY_EXACT = frozenset(
    [
        "int2", "int4", "int8", "float4", "float8", "bool", "text", "varchar", "bpchar",
        "bytea", "date", "timestamp", "timestamptz",
    ]
)  # fmt: skip
# What the log's text reads: years 1 to 9999, in days and in microseconds since 1970.
_DAYS = (-719_162, 2_932_896)
_MICROSECONDS = (-62_135_596_800_000_000, 253_402_300_799_999_999)
UNBOUNDED_NUMERIC = DecimalType(38, 18)  # as Spark's JDBC source reads such a column


@dataclass(frozen=True)
class PgType:
    """A column's type as the catalog describes it."""

    name: str  # pg_type.typname (an array's is its element's, with ``is_array``)
    modifier: int  # atttypmod: numeric's precision and scale, -1 when none
    category: str  # pg_type.typtype: b(ase), e(num), d(omain), ...
    is_array: bool = False

    @property
    def binary_exact(self) -> bool:
        """Whether ADBC's driver reads the binary form as the Spark type's Arrow type
        (numbers, booleans, text, bytes, dates and timestamps); numeric, uuid, json, times
        and the rest come as text, to read as the log's values are."""
        return self.category == "b" and not self.is_array and self.name in _BINARY_EXACT


def spark_type(column: str, table: str, pg: PgType) -> DataType:
    """The Spark type a column reads as, or ``POSTGRES_CHANGELOG.UNSUPPORTED_TYPE``."""
    if pg.is_array:
        try:
            element = spark_type(column, table, PgType(pg.name, pg.modifier, pg.category))
        except ChangelogSourceError:
            raise _unsupported(column, table, f"{pg.name}[]") from None
        return ArrayType(element, True)
    if pg.category == "e":
        return StringType()
    if pg.name == "numeric":
        if pg.modifier < 0:
            return UNBOUNDED_NUMERIC
        precision, scale = ((pg.modifier - 4) >> 16) & 0xFFFF, (pg.modifier - 4) & 0xFFFF
        if precision > 38 or scale > precision:
            raise _unsupported(column, table, f"numeric({precision},{scale})")
        return DecimalType(precision, scale)
    if pg.category != "b" or pg.name not in _SCALARS:
        raise _unsupported(column, table, pg.name)
    return _SCALARS[pg.name]


def _unsupported(column: str, table: str, type_name: str) -> Exception:
    return error("POSTGRES_CHANGELOG.UNSUPPORTED_TYPE", column=column, table=table, type=type_name)


def from_text(texts: pa.Array, target: DataType, column: str, table: str) -> pa.Array:
    """PostgreSQL's text output of ``column``'s values as Arrow values of ``target``."""
    want = arrow_type(target)
    try:
        return _converted(texts, target, want)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as problem:
        raise error(
            "POSTGRES_CHANGELOG.UNREPRESENTABLE_VALUE",
            column=column,
            table=table,
            type=target.simpleString(),
            problem=str(problem).splitlines()[0],
        ) from None


def from_copy(values: pa.Array, target: DataType, column: str, table: str) -> pa.Array:
    """A first copy's column: cast when ADBC read it in binary (``PgType.binary_exact``),
    else converted from its text as the log's values are. A date or timestamp the log's
    text could not give (infinity, before year 1, after 9999) is refused by name."""
    if pa.types.is_string(values.type) and not isinstance(target, StringType):
        return from_text(values, target, column, table)
    temporal = pa.types.is_date32(values.type) or pa.types.is_timestamp(values.type)
    if temporal and len(values):
        width = pa.int32() if pa.types.is_date32(values.type) else pa.int64()
        low, high = _DAYS if width == pa.int32() else _MICROSECONDS
        numbers = pa.concat_arrays(values.chunks) if isinstance(values, pa.ChunkedArray) else values
        numbers = numbers.view(width)
        outside = pc.or_(pc.less(numbers, low), pc.greater(numbers, high))
        if pc.any(outside).as_py():
            raise error(
                "POSTGRES_CHANGELOG.UNREPRESENTABLE_VALUE",
                column=column,
                table=table,
                type=target.simpleString(),
                problem="infinity, or a date before year 1 or after 9999",
            )
    return values.cast(arrow_type(target))


def _converted(texts: pa.Array, target: DataType, want: pa.DataType) -> pa.Array:
    if isinstance(target, StringType):
        return texts.cast(want)
    if isinstance(target, BooleanType):
        return pc.equal(texts, "t")
    if isinstance(target, BinaryType):
        return _hex_bytes(texts)
    if isinstance(target, ArrayType):
        return _array(texts, target, want)
    # Numbers, dates and times: ``infinity``, BC dates and a NaN numeric fail the cast.
    return pc.cast(texts, want)


_HEX = np.full(256, 255, dtype=np.uint8)
for _digit, _char in enumerate(b"0123456789abcdef"):
    _HEX[_char] = _digit
for _digit, _char in enumerate(b"ABCDEF", start=10):
    _HEX[_char] = _digit


def _hex_bytes(texts: pa.Array) -> pa.Array:
    """bytea's hex output (``\\x0aff``) as bytes, all values at once."""
    texts = texts.cast(pa.large_string())
    if len(texts) == 0:
        return pa.array([], pa.binary())
    valid = np.asarray(texts.is_valid())
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64)[
        texts.offset : texts.offset + len(texts) + 1
    ]
    data_buffer = texts.buffers()[2]
    data = (
        np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    )
    lengths = np.diff(offsets)
    if np.any(valid & ((lengths < 2) | (lengths % 2 == 1))):
        raise ValueError("a bytea value not in hex output form")
    sizes = np.where(valid, (lengths - 2) // 2, 0)
    out_offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(sizes, out=out_offsets[1:])
    total = int(out_offsets[-1])
    first = np.repeat(offsets[:-1] + 2 - 2 * out_offsets[:-1], sizes) + 2 * np.arange(total)
    high, low = _HEX[data[first]], _HEX[data[first + 1]]
    if np.any(high == 255) or np.any(low == 255):
        raise ValueError("a bytea value with a character that is not hex")
    raw = (high << 4) | low
    validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    buffers = [validity, pa.py_buffer(out_offsets), pa.py_buffer(raw.astype(np.uint8))]
    return pa.Array.from_buffers(pa.large_binary(), len(texts), buffers).cast(pa.binary())


def _array(texts: pa.Array, target: ArrayType, want: pa.DataType) -> pa.Array:
    """A one-dimension array (``array_text``): its elements converted as a column of their
    own."""
    counts, elements = split_arrays(texts)
    values = _converted(elements, target.elementType, want.value_type)
    offsets = np.zeros(len(texts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    mask = pc.is_null(texts)
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=mask).cast(want)
