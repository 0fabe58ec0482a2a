"""delta_changelog streams on real Delta tables: whole commits per micro-batch, same rows as
batch, lossless restarts, the initial snapshot under a zero-delay watermark, failures."""

from __future__ import annotations

import itertools
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from spark_cdc import ChangelogReader

from tests.support.delta_tables import dml_partitioned, log_cleaned_up_before_version_2, rows
from tests.support.feeds import collect_rows
from tests.support.spark_version import ADMISSION_CONTROL

PROCESSED = {"rowId": "id", "computeUpdates": True}


def _raw_stream(spark: SparkSession, path: str, **options: Any) -> DataFrame:
    return spark.readStream.format("delta_changelog").options(**options).load(path)


def _record_batches(df: DataFrame, out: str, checkpoint: str, expected: dict[int, int]) -> Any:
    """Start ``df`` into parquet under ``out`` with each row's micro-batch id, failing the
    query if a micro-batch holds part of a commit (``expected``: rows per version)."""

    def write(batch: DataFrame, batch_id: int) -> None:
        counts = {r[0]: r[1] for r in batch.groupBy("_commit_version").count().collect()}
        for version, count in counts.items():
            if count != expected.get(version):
                raise AssertionError(
                    f"micro-batch {batch_id} holds {count} of version {version}'s "
                    f"{expected.get(version)} rows"
                )
        batch.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(out)

    return df.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)


def _fields(df: DataFrame) -> list[tuple[str, Any]]:
    return [(f.name, f.dataType) for f in df.schema.fields]


def _rows_per_version(df: DataFrame) -> dict[int, int]:
    return {r[0]: r[1] for r in df.groupBy("_commit_version").count().collect()}


def test_one_file_per_trigger_keeps_commits_whole_and_equals_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    dml_partitioned(path)  # commits touching both partitions: several files each
    batch = spark.read.format("delta_changelog").option("startingVersion", 0).load(path)
    expected = _rows_per_version(batch)
    out = str(tmp_path / "out")
    stream = _raw_stream(spark, path, startingVersion=0, maxFilesPerTrigger=1)
    query = _record_batches(stream, out, str(tmp_path / "cp"), expected).start()
    query.processAllAvailable()
    query.stop()

    got = spark.read.parquet(out)
    assert collect_rows(got.drop("batch_id")) == collect_rows(batch)
    batches: dict[int, set[int]] = defaultdict(set)
    stamps: dict[int, list[Any]] = defaultdict(list)
    for r in got.select("batch_id", "_commit_version", "_commit_timestamp").collect():
        batches[r.batch_id].add(r._commit_version)
        stamps[r.batch_id].append(r._commit_timestamp)
    order = sorted(batches)
    for earlier, later in itertools.pairwise(order):
        assert max(stamps[earlier]) < min(stamps[later]), "timestamps must rise across batches"
    if ADMISSION_CONTROL:  # every commit of this table has more than one file
        assert all(len(versions) == 1 for versions in batches.values())
        assert len(order) == len(expected)


@pytest.mark.parametrize("where", ["source", "client"])
def test_post_processed_stream_equals_batch_and_drops_nothing(
    spark: SparkSession, tmp_path: Path, query_name: str, where: str
) -> None:
    path = str(tmp_path / "t")
    dml_partitioned(path)
    expected = ChangelogReader(spark).options(**PROCESSED).changes(path)
    reader = ChangelogReader(spark, streaming=True).options(**PROCESSED, postProcessing=where)
    stream = reader.options(startingVersion=0, maxFilesPerTrigger=1).changes(path)
    query = stream.writeStream.format("memory").queryName(query_name).start()
    query.processAllAvailable()
    progress = list(query.recentProgress)
    query.stop()
    assert collect_rows(spark.table(query_name)) == collect_rows(expected)
    # Streaming output columns are nullable (docs/delta-source.md, "Where post-processing
    # happens"); names and types are equal.
    assert _fields(spark.table(query_name)) == _fields(expected)
    dropped = [
        op.get("numRowsDroppedByWatermark", 0)
        for p in progress
        for op in p.get("stateOperators", [])
    ]
    if where == "client":
        assert dropped and not any(dropped)
    else:  # the source resolved the passes: no watermark, no state, nothing to drop
        assert not dropped


def test_without_row_id_the_stream_drops_carry_overs_as_batch_does(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    path = str(tmp_path / "t")
    dml_partitioned(path)
    expected = ChangelogReader(spark).changes(path)
    stream = ChangelogReader(spark, streaming=True).option("startingVersion", 0).changes(path)
    query = stream.writeStream.format("memory").queryName(query_name).start()
    query.processAllAvailable()
    query.stop()
    raw = spark.read.format("delta_changelog").option("startingVersion", 0).load(path)
    assert collect_rows(spark.table(query_name)) == collect_rows(expected)
    assert expected.count() < raw.count()  # carry-overs were there, and are gone


def test_initial_snapshot_is_never_lost_to_the_watermark(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    path = str(tmp_path / "t")
    for start in range(0, 40, 4):  # a snapshot of ten files
        write_deltalake(path, rows(range(start, start + 4)), mode="append")
    snapshot_version = DeltaTable(path).version()
    reader = ChangelogReader(spark, streaming=True).options(**PROCESSED, maxFilesPerTrigger=1)
    query = reader.changes(path).writeStream.format("memory").queryName(query_name).start()
    query.processAllAvailable()
    DeltaTable(path).update({"amount": "-1.0"}, predicate="id = 7")
    write_deltalake(path, rows([100]), mode="append")
    query.processAllAvailable()
    query.stop()

    got = [r.asDict() for r in spark.table(query_name).collect()]
    snapshot_rows = [r for r in got if r["_commit_version"] == snapshot_version]
    assert sorted(r["id"] for r in snapshot_rows) == list(range(40))
    assert {r["_change_type"] for r in snapshot_rows} == {"insert"}
    later = sorted(
        (r["id"], r["_change_type"], r["_commit_version"])
        for r in got
        if r["_commit_version"] > snapshot_version
    )
    assert later == [
        (7, "update_postimage", snapshot_version + 1),
        (7, "update_preimage", snapshot_version + 1),
        (100, "insert", snapshot_version + 2),
    ]


def test_restart_from_checkpoint_loses_and_duplicates_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    path, out, checkpoint = (str(tmp_path / name) for name in ("t", "out", "cp"))
    dml_partitioned(path)
    reader = ChangelogReader(spark, streaming=True).options(**PROCESSED, maxFilesPerTrigger=1)
    reader.option("startingVersion", 0)

    def start() -> Any:
        writer = reader.changes(path).writeStream.format("parquet")
        return writer.option("checkpointLocation", checkpoint).start(out)

    query = start()
    deadline = time.monotonic() + 120
    while (query.lastProgress or {}).get("batchId", -1) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()  # mid-way: later commits not yet read
    DeltaTable(path).delete("id = 0")
    write_deltalake(path, rows([50, 51]), mode="append")
    query = start()
    query.processAllAvailable()
    query.stop()
    query = start()  # a third run with nothing new adds nothing
    query.processAllAvailable()
    query.stop()

    expected = ChangelogReader(spark).options(**PROCESSED).changes(path)
    assert collect_rows(spark.read.parquet(out)) == collect_rows(expected)


def test_starting_version_latest_reads_only_new_commits(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(3)))
    stream = _raw_stream(spark, path, startingVersion="latest")
    query = stream.writeStream.format("memory").queryName(query_name).start()
    query.processAllAvailable()
    write_deltalake(path, rows([9]), mode="append")
    query.processAllAvailable()
    query.stop()
    assert [
        (r.id, r._change_type, r._commit_version) for r in spark.table(query_name).collect()
    ] == [(9, "insert", 1)]


def test_schema_change_fails_the_stream_after_the_commits_before_it(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(2)))
    query = _raw_stream(spark, path).writeStream.format("memory").queryName(query_name).start()
    query.processAllAvailable()
    write_deltalake(path, rows([5]), mode="append")
    wider = rows([6]).append_column("note", pa.array(["n"]))
    write_deltalake(path, wider, mode="append", schema_mode="merge")
    with pytest.raises(StreamingQueryException, match=r"SCHEMA_CHANGED.*Version 2 .*note"):
        query.processAllAvailable()  # the failure comes one trigger after version 1
        query.awaitTermination(120)
    query.stop()
    assert sorted(r.id for r in spark.table(query_name).collect()) == [0, 1, 5]


def test_checkpoint_of_another_table_is_refused(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    path, checkpoint = str(tmp_path / "t"), str(tmp_path / "cp")
    write_deltalake(path, rows(range(2)))

    def run() -> None:
        writer = _raw_stream(spark, path).writeStream.format("parquet")
        query = writer.option("checkpointLocation", checkpoint).start(str(tmp_path / "out"))
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    run()
    shutil.rmtree(path)
    write_deltalake(path, rows(range(2)))  # same path, a new table
    with pytest.raises(StreamingQueryException, match="OFFSET_FROM_ANOTHER_TABLE"):
        run()


def test_stream_over_a_cleaned_up_log_fails_or_skips(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    path = str(tmp_path / "t")
    log_cleaned_up_before_version_2(path)

    def run(**options: Any) -> list[int]:
        stream = _raw_stream(spark, path, startingVersion=0, **options)
        query = stream.writeStream.format("memory").queryName(query_name).start()
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        return sorted(r.id for r in spark.table(query_name).collect())

    with pytest.raises(StreamingQueryException, match=r"DATA_LOSS.*Commit 0 "):
        run()
    assert run(failOnDataLoss=False) == [2, 3]


def test_ending_bound_is_refused_for_a_stream(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(2)))
    stream = _raw_stream(spark, path, startingVersion=0, endingVersion=0)
    with pytest.raises(Exception, match="ENDING_BOUND_IN_STREAM"):
        stream.writeStream.format("noop").start().processAllAvailable()


@pytest.mark.skipif(not ADMISSION_CONTROL, reason="Python sources get availableNow in Spark 4.2")
def test_available_now_reads_everything_in_limited_batches(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    path = str(tmp_path / "t")
    dml_partitioned(path)
    reader = ChangelogReader(spark, streaming=True).options(**PROCESSED, maxFilesPerTrigger=1)
    reader.option("startingVersion", 0)
    writer = reader.changes(path).writeStream.format("memory").queryName(query_name)
    query = writer.trigger(availableNow=True).start()
    assert query.awaitTermination(300)
    reads = [p["sources"][0]["numInputRows"] for p in query.recentProgress]
    assert len([n for n in reads if n]) > 1
    expected = ChangelogReader(spark).options(**PROCESSED).changes(path)
    assert collect_rows(spark.table(query_name)) == collect_rows(expected)
