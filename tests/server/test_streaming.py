"""What only streams have: micro-batch grouping, end of input, the watermark's reach."""

from __future__ import annotations

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from spark_cdc import ChangelogSpec, post_process

from tests.support.feeds import SCHEMA, collect_rows, commit_time, drain, feed, row, run_stream
from tests.support.spark_version import ADMISSION_CONTROL

ID = ChangelogSpec(row_id=["id"])
OPTIONS = {"computeUpdates": True}


def _history(commits: int) -> list[dict]:
    """Each commit v updates row v % 3, carries row (v + 1) % 3 over and inserts row 100 + v."""
    rows = [row(i, f"v{i}", "insert", 0) for i in range(3)]
    for v in range(1, commits + 1):
        updated, carried = v % 3, (v + 1) % 3
        rows += [
            row(updated, f"old{v}", "delete", v),
            row(updated, f"new{v}", "insert", v),
            row(carried, "same", "delete", v),
            row(carried, "same", "insert", v),
            row(100 + v, "x", "insert", v),
        ]
    return rows


@pytest.mark.parametrize("per_batch", [1, 3, 100])
def test_commits_per_micro_batch_do_not_change_the_result(
    spark: SparkSession, per_batch: int, query_name: str
) -> None:
    changes = _history(6)
    batch = collect_rows(post_process(feed(spark, changes), ID, OPTIONS))
    stream = post_process(
        feed(spark, changes, streaming=True, commits_per_batch=per_batch), ID, OPTIONS
    )
    assert collect_rows(run_stream(stream, query_name)) == batch
    assert len(batch) == 3 + 6 * 3  # carry-overs gone, updates relabelled, inserts kept


def test_nothing_is_dropped_by_the_watermark(spark: SparkSession, query_name: str) -> None:
    progress = drain(
        post_process(feed(spark, _history(5), streaming=True), ID, OPTIONS), query_name
    )
    dropped = [
        op.get("numRowsDroppedByWatermark", 0)
        for p in progress
        for op in p.get("stateOperators", [])
    ]
    assert dropped and all(n == 0 for n in dropped)
    assert spark.table(query_name).where(F.col("_commit_version") == 5).count() == 3


def test_the_last_commit_is_emitted_when_input_ends(spark: SparkSession, query_name: str) -> None:
    changes = [row(1, "a", "insert", 1), row(1, "a", "delete", 2), row(1, "b", "insert", 2)]
    out = run_stream(post_process(feed(spark, changes, streaming=True), ID, OPTIONS), query_name)
    assert [r[3] for r in collect_rows(out)] == [1, 2, 2]


@pytest.mark.skipif(
    not ADMISSION_CONTROL,
    reason="Python sources get SupportsTriggerAvailableNow in Spark 4.2; before that "
    "availableNow runs no final batch and the last commit stays in state "
    "(docs/post-processing.md, Streaming guarantees)",
)
def test_available_now_emits_the_last_commit(spark: SparkSession, query_name: str) -> None:
    changes = _history(3)
    expected = collect_rows(post_process(feed(spark, changes), ID, OPTIONS))
    stream = post_process(feed(spark, changes, streaming=True), ID, OPTIONS)
    out = run_stream(stream, query_name, trigger={"availableNow": True})
    assert collect_rows(out) == expected


EVENT_SCHEMA = (
    "id int, v string, event_time timestamp, _change_type string, _commit_version long, "
    "_commit_timestamp timestamp"
)


def test_output_commit_timestamp_carries_no_watermark_metadata(spark: SparkSession) -> None:
    out = post_process(feed(spark, [], streaming=True), ID, OPTIONS)
    assert out.schema == StructType.fromDDL(SCHEMA)
    assert all(f.metadata == {} for f in out.schema)


def _event_changes() -> list[dict]:
    return [
        row(i, "x", "insert", v, event_time=commit_time(v) + (commit_time(0) - commit_time(i)))
        for v in range(1, 6)
        for i in range(3)
    ]


def test_a_watermark_applied_after_the_rewrite_is_refused_before_it_stalls(
    spark: SparkSession, query_name: str
) -> None:
    processed = post_process(feed(spark, _event_changes(), schema=EVENT_SCHEMA, streaming=True), ID)
    late = processed.withWatermark("event_time", "2 seconds").select("id", "event_time")
    with pytest.raises(AnalysisException) as caught:
        late.writeStream.format("memory").queryName(query_name).start()
    assert caught.value.getCondition() == "UNSUPPORTED_FEATURE.CDC_DOWNSTREAM_WATERMARK"
    assert not spark.streams.active
