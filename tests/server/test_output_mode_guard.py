"""Update/Complete output modes are refused in the client for streams holding a rewrite."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from spark_cdc import ChangelogSpec, post_process

from tests.support.feeds import collect_rows, feed, row, run_stream

ID = ChangelogSpec(row_id=["id"])
CHANGES = [row(1, "a", "insert", 1), row(1, "a", "delete", 2), row(1, "A", "insert", 2)]


def _processed(spark: SparkSession) -> DataFrame:
    return post_process(feed(spark, CHANGES, streaming=True), ID, {"computeUpdates": True})


STARTS: dict[str, Callable[[Any, str, str], Any]] = {
    "start": lambda w, name, cp: w.format("memory").queryName(name).start(),
    "start(outputMode=)": lambda w, name, cp: (
        w.format("memory").queryName(name).start(outputMode="complete")
    ),
    "toTable": lambda w, name, cp: w.option("checkpointLocation", cp).toTable(name),
    "foreachBatch": lambda w, name, cp: w.foreachBatch(lambda df, i: None).start(),
    "foreach": lambda w, name, cp: w.foreach(lambda r: None).start(),
}

DERIVED: dict[str, Callable[[DataFrame], DataFrame]] = {
    "as is": lambda df: df,
    "filtered and projected": lambda df: df.where(F.col("id") > 0).select("id", "_change_type"),
    "unioned": lambda df: df.unionByName(df),
    "joined": lambda df: df.join(
        df.sparkSession.range(5).withColumnRenamed("id", "k"), F.col("id") == F.col("k")
    ),
}


@pytest.mark.parametrize("start", list(STARTS))
@pytest.mark.parametrize("mode", ["update", "complete", "Update"])
def test_update_and_complete_are_refused_before_a_query_exists(
    spark: SparkSession, start: str, mode: str, query_name: str, checkpoint: str
) -> None:
    writer = _processed(spark).writeStream
    if start != "start(outputMode=)":
        writer = writer.outputMode(mode)
    before = {q.id for q in spark.streams.active}
    with pytest.raises(AnalysisException) as caught:
        STARTS[start](writer, query_name, checkpoint)
    assert caught.value.getCondition() == "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION"
    assert "Append" in str(caught.value) or "append" in str(caught.value)
    assert {q.id for q in spark.streams.active} == before


@pytest.mark.parametrize("derive", list(DERIVED))
def test_the_guard_sees_through_later_transformations(
    spark: SparkSession, derive: str, query_name: str
) -> None:
    derived = DERIVED[derive](_processed(spark))
    with pytest.raises(AnalysisException) as caught:
        derived.writeStream.outputMode("update").format("memory").queryName(query_name).start()
    assert caught.value.getCondition() == "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION"


def test_append_works(spark: SparkSession, query_name: str) -> None:
    out = run_stream(_processed(spark), query_name)
    assert sorted(r[2] for r in collect_rows(out)) == [
        "insert",
        "update_postimage",
        "update_preimage",
    ]


def test_streams_without_a_rewrite_are_untouched(spark: SparkSession, query_name: str) -> None:
    counts = feed(spark, CHANGES, streaming=True).groupBy("id").count()
    query = counts.writeStream.outputMode("complete").format("memory").queryName(query_name).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert [tuple(r) for r in spark.table(query_name).collect()] == [(1, 3)]


def test_a_feed_needing_no_pass_is_not_a_rewrite(spark: SparkSession, query_name: str) -> None:
    """With nothing to do the stream passes through unchanged, so any mode is the user's call."""
    raw = post_process(feed(spark, CHANGES, streaming=True), ID, {"deduplicationMode": "none"})
    counts = raw.groupBy("id").count()
    query = counts.writeStream.outputMode("update").format("memory").queryName(query_name).start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
