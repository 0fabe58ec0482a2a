"""``snapshot_changes``: random snapshot pairs against the model (tests/support/
snapshot_model.py), whole outputs (rows and schema), the refusals by name, and a plan built
without a round trip."""

from __future__ import annotations

import math
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from spark_cdc import snapshot_changes

from tests.support.rpc_count import counting_rpcs
from tests.support.snapshot_model import as_bag, model_diff

SCHEMA = StructType(
    [
        StructField("id", IntegerType()),
        StructField("region", StringType()),
        StructField("name", StringType()),
        StructField("amount", DoubleType()),
        StructField("price", DecimalType(10, 2)),
        StructField("day", DateType()),
        StructField("at", TimestampType()),
        StructField("tags", ArrayType(IntegerType())),
        StructField(
            "attrs",
            StructType([StructField("a", IntegerType()), StructField("b", StringType())]),
        ),
        StructField("flag", BooleanType()),
        StructField("blob", BinaryType()),
        StructField("big", LongType()),
        StructField("small", ShortType()),
        StructField("ratio", FloatType()),
    ]
)
KEYS = ["id", "region"]
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "name": st.sampled_from(["a", "b", "é", "", None]),
    "amount": st.sampled_from([1.5, 0.0, -0.0, math.nan, math.inf, None]),
    "price": st.sampled_from([Decimal("1.00"), Decimal("2.50"), None]),
    "day": st.sampled_from([date(2024, 1, 1), date(1969, 12, 31), None]),
    "at": st.sampled_from([datetime(2024, 1, 1, 12), datetime(2024, 1, 1, 12, 0, 0, 1), None]),
    "tags": st.sampled_from([[1, 2], [2, 1], [1, None], [], None]),
    "attrs": st.sampled_from([{"a": 1, "b": "x"}, {"a": 1, "b": None}, {"a": None, "b": None}]),
    "flag": st.sampled_from([True, False, None]),
    "blob": st.sampled_from([b"\x00", b"\x00\x01", None]),
    "big": st.sampled_from([2**40, -1, None]),
    "small": st.sampled_from([1, -32768, None]),
    "ratio": st.sampled_from([0.5, math.nan, None]),
}
COLUMNS = SCHEMA.names
METADATA = [
    StructField("_change_type", StringType(), False),
    StructField("_commit_version", LongType(), False),
]
OUTPUT = [*COLUMNS, "_change_type", "_commit_version"]


@st.composite
def snapshot_pairs(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Keys (two columns) present before, after or both; a key in both keeps its row, or
    changes some of its columns (which may draw the same value again)."""
    keys = draw(
        st.lists(
            st.tuples(st.integers(0, 6), st.sampled_from(["eu", "us"])), unique=True, max_size=10
        )
    )

    def values() -> dict[str, Any]:
        return {name: draw(strategy) for name, strategy in VALUES.items()}

    before, after = [], []
    for id, region in keys:
        where = draw(st.sampled_from(["before", "after", "both", "both", "both"]))
        old = {"id": id, "region": region, **values()}
        if where != "after":
            before.append(old)
        if where == "before":
            continue
        new = dict(old)
        for name in draw(st.lists(st.sampled_from(list(VALUES)), max_size=3)):
            new[name] = draw(VALUES[name])
        after.append(new if where == "both" else {"id": id, "region": region, **values()})
    return before, after


def frame(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    return spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], SCHEMA)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    pair=snapshot_pairs(),
    compute_updates=st.booleans(),
    compared=st.one_of(st.none(), st.lists(st.sampled_from(list(VALUES)), unique=True)),
    excluded=st.booleans(),
)
def test_the_diff_equals_the_model(
    spark: SparkSession,
    pair: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    compute_updates: bool,
    compared: list[str] | None,
    excluded: bool,
) -> None:
    before, after = pair
    lists: dict[str, Any] = {}
    if compared and excluded:
        lists["compare_except_column_list"] = compared
        decisive = [c for c in COLUMNS if c not in compared]
    elif compared:
        lists["compare_column_list"] = compared
        decisive = compared
    else:
        decisive = COLUMNS
    out = snapshot_changes(
        frame(spark, before),
        frame(spark, after),
        KEYS,
        version=7,
        options={"computeUpdates": compute_updates},
        **lists,
    )
    rows = out.collect()
    expected = model_diff(before, after, KEYS, decisive, compute_updates, 7)
    assert as_bag(rows, OUTPUT) == as_bag(expected, OUTPUT)
    assert out.schema == StructType([*SCHEMA.fields, *METADATA])


def test_an_example_whole(spark: SparkSession) -> None:
    """Each kind of change once, and a key unchanged; after's column order; the timestamp
    makes a whole changelog."""
    before = spark.createDataFrame(
        [(1, "a", 10), (2, "b", 20), (3, "c", 30)], "id int, name string, qty int"
    )
    after = spark.createDataFrame(
        [(20, "b", 2), (31, "c", 3), (40, "d", 4)], "qty int, name string, id int"
    )
    at = datetime(2026, 12, 5, 10, 0)
    out = snapshot_changes(
        before, after, ["id"], version=3, commit_timestamp=at, options={"computeUpdates": True}
    )
    assert out.schema == StructType(
        [
            StructField("qty", IntegerType()),
            StructField("name", StringType()),
            StructField("id", IntegerType()),
            *METADATA,
            StructField("_commit_timestamp", TimestampType(), False),
        ]
    )
    assert sorted(map(tuple, out.collect())) == sorted(
        [
            (10, "a", 1, "delete", 3, at),
            (30, "c", 3, "update_preimage", 3, at),
            (31, "c", 3, "update_postimage", 3, at),
            (40, "d", 4, "insert", 3, at),
        ]
    )


def test_a_version_column_of_the_callers_naming(spark: SparkSession) -> None:
    before = spark.createDataFrame([(1, "a")], "id int, v string")
    after = spark.createDataFrame([(1, "b")], "id int, v string")
    out = snapshot_changes(
        before, after, ["id"], version=F.lit("2026-12-05"), version_column="snapshot"
    )
    assert out.schema == StructType(
        [
            StructField("id", IntegerType()),
            StructField("v", StringType()),
            METADATA[0],
            StructField("snapshot", StringType(), False),
        ]
    )
    assert sorted(map(tuple, out.collect())) == [
        (1, "a", "delete", "2026-12-05"),
        (1, "b", "insert", "2026-12-05"),
    ]


@pytest.mark.parametrize(
    ("before", "after", "condition", "parameters"),
    [
        (
            [(1, "a")],
            [(1, "a"), (1, "b")],
            "SNAPSHOT_CHANGES.DUPLICATE_KEY",
            {"side": "after", "count": "2", "key": '{"id":1}'},
        ),
        (
            [(2, "a"), (2, "a"), (2, "a")],
            [],
            "SNAPSHOT_CHANGES.DUPLICATE_KEY",
            {"side": "before", "count": "3", "key": '{"id":2}'},
        ),
        (
            [(None, "a")],
            [(1, "a")],
            "SNAPSHOT_CHANGES.NULL_KEY",
            {"side": "before", "column": "id", "key": '{"id":null}'},
        ),
    ],
)
def test_a_key_twice_or_null_fails_the_query_by_name(
    spark: SparkSession,
    before: list[tuple[Any, ...]],
    after: list[tuple[Any, ...]],
    condition: str,
    parameters: dict[str, str],
) -> None:
    schema = "id int, v string"
    out = snapshot_changes(
        spark.createDataFrame(before, schema), spark.createDataFrame(after, schema), ["id"], 1
    )
    with pytest.raises(PySparkException) as caught:
        out.collect()
    assert caught.value.getCondition() == condition
    assert caught.value.getMessageParameters() == parameters


def test_a_misspelt_compared_column_is_refused_by_the_analysis(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1, "a")], "id int, v string")
    for lists in ({"compare_column_list": ["w"]}, {"compare_except_column_list": ["w"]}):
        with pytest.raises(PySparkException) as caught:
            snapshot_changes(df, df, ["id"], 1, **lists).collect()
        assert "w" in str(caught.value) and caught.value.getCondition() in (
            "FIELD_NOT_FOUND",
            "UNRESOLVED_COLUMN.WITH_SUGGESTION",
        )


@pytest.mark.parametrize(
    ("kwargs", "condition", "parameter"),
    [
        ({"keys": []}, "SNAPSHOT_CHANGES.INVALID_PARAMETER", "keys"),
        ({"keys": "id"}, "SNAPSHOT_CHANGES.INVALID_PARAMETER", "keys"),
        ({"keys": ["id", "id"]}, "SNAPSHOT_CHANGES.INVALID_PARAMETER", "keys"),
        ({"version": "3"}, "SNAPSHOT_CHANGES.INVALID_PARAMETER", "version"),
        ({"version": True}, "SNAPSHOT_CHANGES.INVALID_PARAMETER", "version"),
        ({"version_column": ""}, "SNAPSHOT_CHANGES.INVALID_PARAMETER", "version_column"),
        ({"commit_timestamp": "today"}, "SNAPSHOT_CHANGES.INVALID_PARAMETER", "commit_timestamp"),
        (
            {"compare_column_list": ["v"], "compare_except_column_list": ["w"]},
            "SNAPSHOT_CHANGES.INVALID_PARAMETER",
            "compare_column_list",
        ),
        ({"options": {"startingVersion": 1}}, "SNAPSHOT_CHANGES.OPTION_NOT_APPLICABLE", None),
        ({"options": {"computeUpdates": "maybe"}}, "INVALID_CDC_OPTION.INVALID_BOOLEAN", None),
        (
            {"options": {"deduplicationMode": "everything"}},
            "INVALID_CDC_OPTION.INVALID_DEDUPLICATION_MODE",
            None,
        ),
    ],
)
def test_parameters_are_refused_by_name_before_any_round_trip(
    spark: SparkSession, kwargs: dict[str, Any], condition: str, parameter: str | None
) -> None:
    df = spark.createDataFrame([(1, "a")], "id int, v string")
    call: dict[str, Any] = {"keys": ["id"], "version": 1, **kwargs}
    with counting_rpcs(spark) as rpcs, pytest.raises(PySparkException) as caught:
        snapshot_changes(df, df, **call)
    assert caught.value.getCondition() == condition
    if parameter is not None:
        assert caught.value.getMessageParameters()["parameter"] == parameter
    assert rpcs.calls == []


def test_a_streaming_snapshot_is_refused_without_a_round_trip(spark: SparkSession) -> None:
    stream = spark.readStream.format("rate").load()
    batch = spark.range(1).withColumn("timestamp", F.current_timestamp())
    with counting_rpcs(spark) as rpcs, pytest.raises(PySparkException) as caught:
        snapshot_changes(batch, stream, ["value"], 1)
    assert caught.value.getCondition() == "SNAPSHOT_CHANGES.STREAMING_SNAPSHOT"
    assert caught.value.getMessageParameters() == {"side": "after"}
    assert rpcs.calls == []


def test_the_plan_is_built_without_a_round_trip(spark: SparkSession) -> None:
    before = spark.createDataFrame([(1, "a")], "id int, v string")
    after = spark.createDataFrame([(1, "b")], "id int, v string")
    with counting_rpcs(spark) as rpcs:
        snapshot_changes(
            before,
            after,
            ["id"],
            2,
            compare_except_column_list=["v"],
            # A diff has no carry-overs: no mode needs removing them first.
            options={"computeUpdates": True, "deduplicationMode": "none"},
        )
    assert rpcs.calls == []


def test_a_map_column_is_compared_or_left_out_by_name(spark: SparkSession) -> None:
    schema = "id int, m map<string, int>, v string"
    before = spark.createDataFrame([(1, {"a": 1}, "x"), (2, {"a": 1}, "x")], schema)
    after = spark.createDataFrame([(1, {"a": 2}, "x"), (2, {"a": 1}, "y")], schema)
    out = snapshot_changes(before, after, ["id"], 1, compare_except_column_list=["m"])
    assert sorted((r.id, r.v, r._change_type) for r in out.collect()) == [
        (2, "x", "delete"),
        (2, "y", "insert"),
    ]
    # Spark orders no map, so it compares none: its analysis names the type.
    with pytest.raises(PySparkException) as caught:
        snapshot_changes(before, after, ["id"], 1).collect()
    assert caught.value.getCondition() == "DATATYPE_MISMATCH.INVALID_ORDERING_TYPE"
    assert "MAP<STRING, INT>" in str(caught.value)
