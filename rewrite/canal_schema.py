"""The row schema Canal's messages describe (``sqlType``, ``mysqlType``), as a Spark schema.

Canal writes every value as a string and says each column's type beside it: ``sqlType``,
a JDBC type code, and ``mysqlType``, MySQL's own spelling (``DECIMAL(10,2)``,
``INT UNSIGNED``). When ``decode_changes`` is given no ``schema=`` for ``canal-json``, it
reads the first messages (one round trip, as ``spark.read.json`` infers a schema; batch
only) and maps the first one that changes rows; the values are then cast to these types in
the query, as with a schema the caller gives. Unsigned integers take the next wider type,
so that no value overflows; types without an exact Spark counterpart (``TIME``, binary
columns, which Canal writes as ISO-8859-1 text) stay strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pyspark.sql import types as T

_SIGNED: dict[int, T.DataType] = {
    -6: T.ByteType(),  # TINYINT
    5: T.ShortType(),  # SMALLINT
    4: T.IntegerType(),  # INTEGER
    -5: T.LongType(),  # BIGINT
}
_UNSIGNED: dict[int, T.DataType] = {
    -6: T.ShortType(),
    5: T.IntegerType(),
    4: T.LongType(),
    -5: T.DecimalType(20, 0),
}
_OTHERS: dict[int, T.DataType] = {
    -7: T.BooleanType(),  # BIT
    16: T.BooleanType(),
    7: T.FloatType(),  # REAL: MySQL's FLOAT
    6: T.DoubleType(),
    8: T.DoubleType(),
    91: T.DateType(),
    93: T.TimestampType(),
}
_DECIMAL = re.compile(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


def canal_schema(message: Mapping[str, Any]) -> T.StructType | None:
    """The columns of one Canal message, or None when it carries no types (DDL)."""
    sql_types, mysql_types = message.get("sqlType"), message.get("mysqlType") or {}
    if not isinstance(sql_types, dict) or not sql_types:
        return None
    fields = []
    for name, code in sql_types.items():
        spelled = str(mysql_types.get(name, "")).upper()
        fields.append(T.StructField(name, _spark_type(code, spelled), True))
    return T.StructType(fields)


def _spark_type(code: Any, spelled: str) -> T.DataType:
    if code in (2, 3):  # NUMERIC, DECIMAL
        found = _DECIMAL.search(spelled)
        precision = int(found.group(1)) if found else 10
        scale = int(found.group(2) or 0) if found else 0
        return T.DecimalType(min(precision, 38), min(scale, 38))
    if code in _SIGNED:
        return (_UNSIGNED if "UNSIGNED" in spelled else _SIGNED)[code]
    return _OTHERS.get(code, T.StringType())
