"""The readers' Spark shape: ``read``/``readStream``, ``format``, ``load(path)`` and
``changes(tableName)`` (a catalog table, resolved on the server), and the typed values the
package exports (``DeduplicationMode``, ``CdcOptions``) where options are given."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from spark_cdc import (
    CdcOptions,
    ChangelogReader,
    ChangelogSpec,
    ChangelogStreamReader,
    DeduplicationMode,
    post_process,
    read,
    readStream,
)
from spark_cdc.rewrite.plan_tree import reads_a_stream

from tests.support.delta_tables import SCENARIOS

# From the first commit: a stream with no startingVersion begins with a snapshot.
NET = {"rowId": "id", "computeUpdates": True, "startingVersion": 0}


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


@pytest.fixture
def path(tmp_path: Path) -> str:
    table = str(tmp_path / "dml")
    SCENARIOS["dml"](table)
    return table


@pytest.fixture
def table(spark: SparkSession, path: str) -> Iterator[str]:
    """A catalog table over the Delta table's folder, on a server without Delta Lake's
    Spark catalog: registered as a parquet table, which records its location."""
    name = f"orders_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {name} USING parquet LOCATION '{path}'")
    try:
        yield name
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_read_and_readStream_make_a_batch_and_a_stream_reader(spark: SparkSession) -> None:
    assert type(read(spark)) is ChangelogReader
    assert type(readStream(spark)) is ChangelogStreamReader
    assert not reads_a_stream(read(spark).load("/t"))
    assert reads_a_stream(readStream(spark).load("/t"))
    assert reads_a_stream(ChangelogReader(spark, streaming=True).load("/t"))  # older spelling


def test_streaming_is_keyword_only(spark: SparkSession) -> None:
    with pytest.raises(TypeError):
        ChangelogReader(spark, True)  # type: ignore[misc]


def test_an_unknown_format_is_refused_naming_the_formats(spark: SparkSession) -> None:
    assert read(spark).format("DELTA") is not None  # case-insensitive
    with pytest.raises(AnalysisException) as raised:
        readStream(spark).format("deltta")
    error = raised.value
    assert error.getCondition() == "INVALID_CDC_OPTION.UNKNOWN_FORMAT"
    assert error.getMessageParameters() == {
        "format": "deltta",
        "proposal": "delta",
        "formats": "delta, iceberg, postgres",
    }
    assert "Did you mean 'delta'?" in str(error)


def test_changes_of_a_catalog_table_is_load_of_its_path(
    spark: SparkSession, path: str, table: str
) -> None:
    by_name = read(spark).options(**NET).changes(table)
    by_path = read(spark).options(**NET).load(path)
    assert by_name.schema == by_path.schema
    assert _rows(by_name) == _rows(by_path)
    assert _rows(by_path)  # the table has changes


def test_changes_of_a_catalog_table_streams(spark: SparkSession, path: str, table: str) -> None:
    stream = readStream(spark).options(**NET).changes(table)
    assert reads_a_stream(stream)
    name = f"q_{uuid.uuid4().hex[:8]}"
    query = stream.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    assert _rows(spark.table(name)) == _rows(read(spark).options(**NET).load(path))


def test_changes_with_a_path_still_reads_the_path(spark: SparkSession, path: str) -> None:
    assert _rows(read(spark).options(**NET).changes(path)) == _rows(
        read(spark).options(**NET).load(path)
    )


def test_changes_of_a_missing_table_is_sparks_table_not_found(spark: SparkSession) -> None:
    with pytest.raises(AnalysisException) as raised:
        read(spark).changes("no_such_table_anywhere")
    assert raised.value.getCondition() == "TABLE_OR_VIEW_NOT_FOUND"


def test_changes_of_a_view_names_the_missing_location(spark: SparkSession) -> None:
    name = f"v_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TEMPORARY VIEW {name} AS SELECT 1 AS id")
    with pytest.raises(AnalysisException) as raised:
        read(spark).changes(name)
    assert raised.value.getCondition() == "SPARK_CDC.TABLE_WITHOUT_LOCATION"
    assert raised.value.getMessageParameters() == {"table": name}


@pytest.mark.parametrize("streaming", [False, True], ids=["read", "readStream"])
def test_a_deduplication_mode_member_is_its_option_value(
    spark: SparkSession, path: str, streaming: bool
) -> None:
    def changes(mode: str) -> list[tuple[Any, ...]]:
        reader = readStream(spark) if streaming else read(spark)
        df = reader.options(**NET).option("deduplicationMode", mode).load(path)
        if not streaming:
            return _rows(df)
        name = f"q_{uuid.uuid4().hex[:8]}"
        query = df.writeStream.format("memory").queryName(name).trigger(availableNow=True)
        started = query.start()
        try:
            started.awaitTermination(120)
        finally:
            started.stop()
        return _rows(spark.table(name))

    net = changes(DeduplicationMode.NET_CHANGES)
    assert net == changes("netChanges")
    assert changes(DeduplicationMode.DROP_CARRYOVERS) == changes("dropCarryovers") != net


def test_post_process_takes_cdc_options_as_the_mapping(spark: SparkSession, path: str) -> None:
    raw = spark.read.format("delta_changelog").load(path)
    spec = ChangelogSpec(row_id=["id"])
    typed = CdcOptions(
        deduplication_mode=DeduplicationMode.NET_CHANGES, compute_updates=True, starting_version=1
    )
    mapping = {"deduplicationMode": "netChanges", "computeUpdates": "true", "startingVersion": 1}
    assert typed.to_options() == {
        "deduplicationMode": "netChanges",
        "computeUpdates": True,
        "startingVersion": 1,
    }
    assert _rows(post_process(raw, spec, typed)) == _rows(post_process(raw, spec, mapping))


def test_cdc_options_are_checked_as_the_mapping_is(spark: SparkSession) -> None:
    raw = spark.read.format("delta_changelog").load("/t")
    bad = CdcOptions(starting_version=5, ending_version=2)
    with pytest.raises(AnalysisException) as raised:
        post_process(raw, ChangelogSpec(row_id=["id"]), bad)
    assert raised.value.getCondition() == "INVALID_CDC_OPTION.INVALID_RANGE"
