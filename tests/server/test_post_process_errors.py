"""Option errors (client-side, before any RPC), contract violations and schema problems on
generic feeds. Every invalid option, one case each, and every bad input with its
no-partial-output guarantee: test_refusals.py."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from spark_cdc import ChangelogSpec, post_process
from spark_cdc.rewrite.streaming import with_commit_watermark

from tests.support.feeds import SCHEMA, collect_rows, feed, row, run_stream

ID = ChangelogSpec(row_id=["id"])


def test_options_are_validated_before_update_detection_requirements(spark: SparkSession) -> None:
    options = {
        "deduplicationMode": "none",
        "computeUpdates": True,
        "startingTimestamp": "2024-13-45",
    }
    with pytest.raises(AnalysisException) as caught:
        post_process(spark.range(1), ID, options)
    assert caught.value.getCondition() == "INVALID_CDC_OPTION.INVALID_TIMESTAMP"


def test_update_detection_without_carryovers_needs_no_carryover_removal(
    spark: SparkSession,
) -> None:
    spec = ChangelogSpec(row_id=["id"], contains_carryover_rows=False)
    post_process(spark.range(1), spec, {"deduplicationMode": "none", "computeUpdates": True})


@pytest.mark.parametrize(
    ("row_id", "condition"),
    [
        ([], "INVALID_CHANGELOG_SCHEMA.MISSING_ROW_ID"),
        ("", "INVALID_CHANGELOG_SCHEMA.INVALID_ROW_ID"),
        ([" "], "INVALID_CHANGELOG_SCHEMA.INVALID_ROW_ID"),
    ],
)
def test_empty_row_id_is_refused(row_id: Any, condition: str) -> None:
    with pytest.raises(AnalysisException) as caught:
        ChangelogSpec(row_id=row_id)
    assert caught.value.getCondition() == condition


def test_net_changes_on_a_changelog_without_intermediate_changes_runs_row_level_passes(
    spark: SparkSession,
) -> None:
    spec = ChangelogSpec(row_id=["id"], contains_intermediate_changes=False)
    changes = [row(1, "a", "delete", 2), row(1, "a", "insert", 2), row(2, "b", "insert", 2)]
    out = post_process(feed(spark, changes), spec, {"deduplicationMode": "netChanges"})
    assert [r[0] for r in collect_rows(out)] == [2]


# ----------------------------------------------------------------------------------------
# Runtime contract violations: the query fails on the server, the class in the message.
# ----------------------------------------------------------------------------------------


def _fails_with(df: Any, condition: str, streaming: bool, query_name: str) -> None:
    with pytest.raises(Exception) as caught:
        if streaming:
            run_stream(df, query_name)
        else:
            df.collect()
    assert condition in str(caught.value)


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
@pytest.mark.parametrize("bad", ["upsert", None])
def test_unexpected_change_type_fails(
    spark: SparkSession, streaming: bool, bad: str | None, query_name: str
) -> None:
    changes = [row(1, "a", "insert", 1), row(2, "b", bad, 1)]
    out = post_process(feed(spark, changes, streaming=streaming), ID)
    _fails_with(out, "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_CHANGE_TYPE", streaming, query_name)


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_multiple_changes_per_row_version_fail_update_detection(
    spark: SparkSession, streaming: bool, query_name: str
) -> None:
    changes = [row(1, "a", "delete", 2), row(1, "b", "insert", 2), row(1, "c", "insert", 2)]
    out = post_process(feed(spark, changes, streaming=streaming), ID, {"computeUpdates": True})
    _fails_with(
        out,
        "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION",
        streaming,
        query_name,
    )


def test_null_commit_timestamp_passes_in_batch(spark: SparkSession) -> None:
    """As in Spark: batch has no watermark, so a NULL timestamp harms nothing."""
    changes = [{**row(1, "a", "insert", 1), "_commit_timestamp": None}]
    assert len(post_process(feed(spark, changes), ID).collect()) == 1


def test_null_guard_survives_the_optimizer_on_a_non_nullable_column(spark: SparkSession) -> None:
    """Spark folds ``isnull(c)`` to false when c is declared NOT NULL; our guard must stay.

    A source cannot send a NULL in a NOT NULL column here (Spark itself rejects it), so the
    property is checked where it lives: in the optimized plan.
    """
    df = spark.range(3).withColumn("_commit_timestamp", F.timestamp_micros(F.col("id")))
    naive = df.where(
        F.when(F.col("_commit_timestamp").isNull(), F.raise_error("naive guard")).otherwise(True)
    )
    assert "naive guard" not in naive._explain_string(extended=True).split("Optimized")[1]
    optimized = with_commit_watermark(df)._explain_string(extended=True).split("Optimized")[1]
    assert "NULL_COMMIT_TIMESTAMP" in optimized


# ----------------------------------------------------------------------------------------
# Schema problems: named at the latest when the server analyzes the query.
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
@pytest.mark.parametrize(
    ("schema", "spec", "missing"),
    [
        ("id int, v string, _commit_version long, _commit_timestamp timestamp", ID, "_change_type"),
        (
            "id int, v string, _change_type string, _commit_timestamp timestamp",
            ID,
            "_commit_version",
        ),
        (SCHEMA, ChangelogSpec(row_id=["key"]), "key"),
        (SCHEMA, ChangelogSpec(row_id=["id"], row_version="rv"), "rv"),
    ],
)
def test_missing_columns_are_named(
    spark: SparkSession, streaming: bool, schema: str, spec: ChangelogSpec, missing: str
) -> None:
    out = post_process(feed(spark, [], schema=schema, streaming=streaming), spec)
    with pytest.raises(AnalysisException) as caught:
        out.schema  # noqa: B018 - analysis is what we test
    assert missing in str(caught.value)


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
@pytest.mark.parametrize("column", ["__spark_cdc_del_cnt", "__spark_cdc_anything"])
def test_columns_with_the_reserved_prefix_are_named(
    spark: SparkSession, streaming: bool, column: str
) -> None:
    metadata = "_change_type string, _commit_version long, _commit_timestamp timestamp"
    schema = f"id int, {column} int, {metadata}"
    out = post_process(feed(spark, [], schema=schema, streaming=streaming), ID)
    with pytest.raises(AnalysisException) as caught:
        out.schema  # noqa: B018 - analysis is what we test
    assert column in str(caught.value)
