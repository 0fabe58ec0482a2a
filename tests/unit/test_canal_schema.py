"""Canal's column types (``sqlType`` JDBC codes, ``mysqlType`` spellings) as Spark types:
what ``decode_changes`` casts a Canal feed's string values to when no schema is given."""

from __future__ import annotations

from pyspark.sql import types as T
from spark_cdc.rewrite.canal_schema import canal_schema


def test_each_kind_of_column_maps_to_its_spark_type() -> None:
    message = {
        "sqlType": {
            "tiny": -6, "small_u": 5, "id": 4, "big": -5, "big_u": -5, "price": 3,
            "plain_decimal": 3, "ratio": 7, "score": 8, "flag": -7, "day": 91, "at": 93,
            "name": 12, "at_time": 92, "blob": 2004,
        },
        "mysqlType": {
            "tiny": "tinyint(4)", "small_u": "smallint(5) unsigned", "id": "INTEGER",
            "big": "bigint(20)", "big_u": "bigint(20) unsigned", "price": "decimal(10,2)",
            "plain_decimal": "decimal", "ratio": "float", "score": "double", "flag": "bit(1)",
            "day": "date", "at": "datetime", "name": "varchar(255)", "at_time": "time",
            "blob": "blob",
        },
    }  # fmt: skip
    schema = canal_schema(message)
    assert schema == T.StructType(
        [
            T.StructField(name, data_type, True)
            for name, data_type in [
                ("tiny", T.ByteType()),
                ("small_u", T.IntegerType()),
                ("id", T.IntegerType()),
                ("big", T.LongType()),
                ("big_u", T.DecimalType(20, 0)),
                ("price", T.DecimalType(10, 2)),
                ("plain_decimal", T.DecimalType(10, 0)),
                ("ratio", T.FloatType()),
                ("score", T.DoubleType()),
                ("flag", T.BooleanType()),
                ("day", T.DateType()),
                ("at", T.TimestampType()),
                ("name", T.StringType()),
                ("at_time", T.StringType()),
                ("blob", T.StringType()),
            ]
        ]
    )


def test_a_ddl_message_has_no_columns() -> None:
    assert canal_schema({"isDdl": True, "sqlType": None, "mysqlType": None}) is None
