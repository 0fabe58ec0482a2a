"""Errors our code raises inside the server reach the client with their own condition.

From each place they are raised (the ``delta_changelog`` source, a contract check in a
post-processed plan, the streaming net changes operator), through each way a user meets
them (batch actions, writes, a failed stream's ``exception()`` and ``awaitTermination()``):
``getCondition()`` is ours, ``getMessageParameters()`` has what we know, ``str(e)`` leads
with ``[CONDITION] sentence`` and carries no traceback, the class is still the one PySpark
chose, and the server's error is kept as ``server_error``. Errors that are not ours are
untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import write_deltalake
from pyspark.errors import (
    AnalysisException,
    PySparkException,
    StreamingQueryException,
)
from pyspark.sql import DataFrame, SparkSession
from spark_cdc import ChangelogReader, ChangelogSpec, post_process
from spark_cdc.server_plugin.errors import error_text, parse_error_text

from tests.support.delta_tables import rows
from tests.support.feeds import feed, row

STREAM_TIMEOUT_S = 180


def assert_ours(
    error: BaseException, condition: str, parameters: dict[str, str] | None = None
) -> None:
    assert isinstance(error, PySparkException), type(error)
    assert error.getCondition() == condition, str(error)[:2000]
    text = str(error)
    assert text.startswith(f"[{condition}] "), text[:2000]
    assert "\n" not in text and "Traceback" not in text, text[:2000]
    if parameters is not None:
        assert error.getMessageParameters() == parameters
    server_error = error.server_error  # type: ignore[attr-defined]
    assert isinstance(server_error, PySparkException) and condition in str(server_error)
    assert type(error) is type(server_error), "the class PySpark chose is kept"


@pytest.fixture
def delta_table(tmp_path: Path) -> str:
    path = str(tmp_path / "table")
    write_deltalake(path, rows([1, 2, 3]))
    return path


ACTIONS: dict[str, Callable[[DataFrame, Path], Any]] = {
    "collect": lambda df, _: df.collect(),
    "count": lambda df, _: df.count(),
    "toArrow": lambda df, _: df.toArrow(),
    "write": lambda df, out: df.write.parquet(str(out / "out")),
}


@pytest.mark.parametrize("action", ACTIONS)
def test_a_source_error_in_a_batch_action(spark: SparkSession, tmp_path: Path, action: str) -> None:
    missing = tmp_path / "not-a-table"
    missing.mkdir()
    df = ChangelogReader(spark).option("rowId", "id").changes(str(missing))
    with pytest.raises(AnalysisException) as caught:
        ACTIONS[action](df, tmp_path)
    assert_ours(caught.value, "DELTA_CHANGELOG.NOT_A_DELTA_TABLE", {"path": str(missing)})


def test_a_source_option_error_keeps_its_condition_and_parameters(
    spark: SparkSession, delta_table: str
) -> None:
    df = spark.read.format("delta_changelog").option("maxFilesPerTrigger", "0").load(delta_table)
    with pytest.raises(AnalysisException) as caught:
        df.collect()
    expected = {"option": "maxFilesPerTrigger", "value": "0"}
    assert_ours(caught.value, "INVALID_CDC_OPTION.INVALID_NUMBER", expected)


def test_a_cdc_option_error_from_the_source(spark: SparkSession, delta_table: str) -> None:
    df = spark.read.format("delta_changelog").option("startingVersion", "7").load(delta_table)
    with pytest.raises(AnalysisException) as caught:
        df.collect()
    expected = {"startingVersion": "7", "latestVersion": "0"}
    assert_ours(caught.value, "INVALID_CDC_OPTION.STARTING_VERSION_AFTER_LATEST", expected)


def test_a_contract_violation_in_a_batch_plan(spark: SparkSession) -> None:
    out = post_process(feed(spark, [row(1, "a", "upsert", 1)]), ChangelogSpec(row_id=["id"]))
    with pytest.raises(PySparkException) as caught:
        out.collect()
    assert_ours(caught.value, "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_CHANGE_TYPE")
    assert "'upsert'" in str(caught.value)


def _failed_stream(df: DataFrame, query_name: str) -> tuple[Any, BaseException]:
    query = df.writeStream.format("memory").queryName(query_name).start()
    with pytest.raises(StreamingQueryException) as caught:
        query.awaitTermination(STREAM_TIMEOUT_S)
    return query, caught.value


def test_a_source_error_in_a_failed_stream(
    spark: SparkSession, delta_table: str, query_name: str
) -> None:
    df = (
        ChangelogReader(spark, streaming=True)
        .options(rowId="id", startingVersion=9)
        .changes(delta_table)
    )
    query, awaited = _failed_stream(df, query_name)
    condition = "INVALID_CDC_OPTION.STARTING_VERSION_AFTER_LATEST"
    assert_ours(awaited, condition, {"startingVersion": "9", "latestVersion": "0"})
    reported = query.exception()
    assert isinstance(reported, StreamingQueryException)
    assert_ours(reported, condition, {"startingVersion": "9", "latestVersion": "0"})


def test_the_net_changes_operator_error_in_a_failed_stream(
    spark: SparkSession, query_name: str
) -> None:
    changes = [row(1, "a", "delete", 2), row(1, "b", "insert", 2), row(1, "c", "insert", 2)]
    stream = feed(spark, changes, streaming=True)
    options = {"deduplicationMode": "netChanges", "computeUpdates": True}
    out = post_process(stream, ChangelogSpec(row_id=["id"]), options)
    query, awaited = _failed_stream(out, query_name)
    condition = "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION"
    assert_ours(awaited, condition)
    reported = query.exception()
    assert reported is not None
    assert_ours(reported, condition)


def test_errors_that_are_not_ours_are_untouched(spark: SparkSession) -> None:
    with pytest.raises(PySparkException) as caught:
        spark.range(1).selectExpr("raise_error('[NOT_OURS.AT_ALL] boom')").collect()
    assert caught.value.getCondition() == "USER_RAISED_EXCEPTION"
    assert not hasattr(caught.value, "server_error")
    with pytest.raises(AnalysisException) as missing:
        spark.range(1).select("no_such_column").collect()
    assert missing.value.getCondition() == "UNRESOLVED_COLUMN.WITH_SUGGESTION"


def test_spark_s_error_about_our_plan_is_its_sentence_without_the_plan(
    spark: SparkSession, capfd: pytest.CaptureFixture[str]
) -> None:
    """``post_process`` over a DataFrame told of a row id it lacks: Spark's condition and
    parameters (the column and the feed's columns), its one sentence, none of our helper
    columns, no plan, no log line. (Read through our sources, the source names such a row
    id first: tests/server/test_source_post_processing.py.)"""
    changes = feed(spark, [row(1, "a", "insert", 1)])
    out = post_process(changes, ChangelogSpec(row_id=["order_id"]), {"computeUpdates": True})
    with pytest.raises(AnalysisException) as caught:
        out.collect()
    error = caught.value
    assert error.getCondition() == "UNRESOLVED_COLUMN.WITH_SUGGESTION"
    assert error.getMessageParameters()["objectName"] == "`order_id`"
    assert "`id`" in error.getMessageParameters()["proposal"]
    text = str(error)
    assert text.startswith("[UNRESOLVED_COLUMN.WITH_SUGGESTION] ") and "`order_id`" in text
    assert "\n" not in text and "__spark_cdc_" not in text and "rowId" in text, text[:2000]
    assert "__spark_cdc_" in str(error.server_error)  # type: ignore[attr-defined]
    assert "__spark_cdc_" not in capfd.readouterr().err  # PySpark's JSON log line is not written


@pytest.mark.parametrize(
    ("parameters", "wrapped"),
    [
        ({}, "Traceback (most recent call last):\n  File x\nSomeError: {text}\n\tat org.x"),
        ({"path": "/t", "version": "3"}, "[STREAM_FAILED] Query [id = 1] terminated: {text}"),
    ],
)
def test_the_wire_format_is_found_in_any_wrapping(parameters: dict[str, str], wrapped: str) -> None:
    text = error_text("DELTA_CHANGELOG.DATA_LOSS", "Commit 3 is gone: start later.", parameters)
    found = parse_error_text(wrapped.format(text=text))
    assert found is not None
    assert found == ("DELTA_CHANGELOG.DATA_LOSS", "Commit 3 is gone: start later.", parameters)
    assert parse_error_text("[USER_RAISED_EXCEPTION] [NOT_OURS.X] y") is None
