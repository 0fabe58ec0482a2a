"""Spark's parquet encodings read as Spark reads them: INT96 timestamps at any year (Spark's
default timestamp encoding; pyarrow's default nanosecond unit overflows outside 1677-2262),
decimals stored as INT32 / INT64 / fixed binary, timestamp_ntz, nanosecond timestamps."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import write_deltalake
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from tests.support.delta_fixtures import copy_fixture
from tests.support.delta_tables import append_commit

CHANGELOG = [
    StructField("_change_type", StringType(), False),
    StructField("_commit_version", LongType(), False),
    StructField("_commit_timestamp", TimestampType(), False),
]


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r)[:-1] for r in df.collect())


def test_int96_timestamps_of_the_fixture_read_as_spark_reads_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = copy_fixture(tmp_path, "table_with_edge_timestamps")
    df = spark.read.format("delta_changelog").load(path)
    assert df.schema == StructType(
        [
            StructField("BIG_DATE", TimestampType()),
            StructField("NORMAL_DATE", TimestampType()),
            StructField("SOME_VALUE", IntegerType()),
            *CHANGELOG,
        ]
    )
    # delta-rs itself reads BIG_DATE as 1816 (nanoseconds wrapped around); Spark as 9999.
    assert _rows(df) == [
        (datetime(9999, 12, 30), datetime(2022, 2, 1), 2, "insert", 0),
        (datetime(9999, 12, 31), datetime(2022, 1, 1), 1, "insert", 0),
    ]


def test_encodings_spark_writes(spark: SparkSession, tmp_path: Path) -> None:
    path = tmp_path / "t"
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("ntz", pa.timestamp("us")),
            ("d9", pa.decimal128(9, 2)),
            ("d18", pa.decimal128(18, 3)),
            ("d30", pa.decimal128(30, 5)),
        ]
    )
    write_deltalake(str(path), schema.empty_table())
    edges = [datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)]
    int96 = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "ts": pa.array(edges, pa.timestamp("us")),
            "d9": pa.array([Decimal("1.23"), Decimal("-9999999.99")], pa.decimal128(9, 2)),
            "d18": pa.array([Decimal("1.234"), Decimal("-99999999999999.999")], schema[4].type),
            "d30": pa.array(
                [Decimal("1.5"), Decimal("-1234567890123456789012.34567")], schema[5].type
            ),
        }
    )
    nanos = pa.table(
        {
            "id": pa.array([3], pa.int64()),
            "ts": pa.array([1_700_000_000_123_456_000], pa.timestamp("ns", tz="UTC")),
            "ntz": pa.array([datetime(2024, 2, 29, 12, 0, 1)], pa.timestamp("us")),
        }
    )
    adds = []
    for table, options in [
        (int96, {"use_deprecated_int96_timestamps": True, "store_decimal_as_integer": True}),
        (nanos, {"coerce_timestamps": None}),
    ]:
        name = f"part-{uuid.uuid4()}.parquet"
        pq.write_table(table, path / name, **options)
        size = (path / name).stat().st_size
        add = {"path": name, "partitionValues": {}, "size": size, "dataChange": True}
        adds.append({"add": {**add, "modificationTime": 1_800_000_000_000}})
    append_commit(str(path), adds)
    df = spark.read.format("delta_changelog").load(str(path))
    assert df.schema == StructType(
        [
            StructField("id", LongType()),
            StructField("ts", TimestampType()),
            StructField("ntz", TimestampNTZType()),
            StructField("d9", DecimalType(9, 2)),
            StructField("d18", DecimalType(18, 3)),
            StructField("d30", DecimalType(30, 5)),
            *CHANGELOG,
        ]
    )
    got = _rows(df.orderBy("id"))
    assert got == [
        (1, edges[0], None, Decimal("1.23"), Decimal("1.234"), Decimal("1.50000"), "insert", 1),
        (
            2,
            edges[1],
            None,
            Decimal("-9999999.99"),
            Decimal("-99999999999999.999"),
            Decimal("-1234567890123456789012.34567"),
            "insert",
            1,
        ),
        (
            3,
            datetime(2023, 11, 14, 22, 13, 20, 123456),
            datetime(2024, 2, 29, 12, 0, 1),
            None,
            None,
            None,
            "insert",
            1,
        ),
    ]


def test_int96_fixture_streams_as_batch(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    from tests.support.changelog_invariants import assert_stream_equals_batch

    path = copy_fixture(tmp_path, "table_with_edge_timestamps")
    assert_stream_equals_batch(spark, path, "SOME_VALUE", query_name, startingVersion=0)


def test_list_and_map_layouts(spark: SparkSession, tmp_path: Path) -> None:
    """Lists and maps as Spark 3 writes them (3-level, ``element``) and in the legacy
    naming (``item``), read the same."""
    path = tmp_path / "t"
    schema = pa.schema(
        [("id", pa.int64()), ("xs", pa.list_(pa.int64())), ("m", pa.map_(pa.string(), pa.int64()))]
    )
    write_deltalake(str(path), schema.empty_table())
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "xs": pa.array([[1, None, 3], None], pa.list_(pa.int64())),
            "m": pa.array([[("a", 1)], []], pa.map_(pa.string(), pa.int64())),
        }
    )
    adds = []
    for index, compliant in enumerate([True, False]):
        name = f"part-{index}-{uuid.uuid4()}.parquet"
        pq.write_table(data, path / name, use_compliant_nested_type=compliant)
        size = (path / name).stat().st_size
        add = {"path": name, "partitionValues": {}, "size": size, "dataChange": True}
        adds.append({"add": {**add, "modificationTime": 1_800_000_000_000}})
    append_commit(str(path), adds)
    got = _rows(spark.read.format("delta_changelog").load(str(path)))
    row1 = (1, [1, None, 3], {"a": 1}, "insert", 1)
    row2 = (2, None, {}, "insert", 1)
    assert got == [row1, row1, row2, row2]
