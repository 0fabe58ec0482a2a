"""The checks a Delta table's change feed is held to, version by version: post-processed
changes applied to snapshot v-1 give snapshot v (snapshots read by delta-rs), the raw feed
equals delta-rs's ``load_cdf``, and a stream gives what a batch read gives."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from spark_cdc import ChangelogReader

from tests.support.delta_dv_tables import rs_snapshot
from tests.support.delta_tables import apply_changes
from tests.support.feeds import collect_rows

META = ["_change_type", "_commit_version", "_commit_timestamp"]
PROCESSED = {"computeUpdates": True}


def by_version(changes: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for change in changes:
        grouped[change["_commit_version"]].append(change)
    return grouped


def assert_every_version(spark: SparkSession, path: str, row_id: str, first: int = 0) -> None:
    reader = ChangelogReader(spark).options(rowId=row_id, **PROCESSED, startingVersion=first)
    df = reader.changes(path)
    columns = [c for c in df.columns if c not in META]
    changes = by_version([r.asDict() for r in df.collect()])
    before: Counter[tuple[Any, ...]] = (
        rs_snapshot(path, first - 1, columns) if first > 0 else Counter()
    )
    for version in range(first, DeltaTable(path).version() + 1):
        after = rs_snapshot(path, version, columns)
        assert apply_changes(before, changes[version], columns) == after, f"version {version}"
        before = after


def assert_raw_is_load_cdf(
    spark: SparkSession, path: str, first: int = 0, last: int | None = None
) -> None:
    read = spark.read.format("delta_changelog").option("startingVersion", first)
    if last is not None:
        read = read.option("endingVersion", last)
    ours = read.load(path)
    columns = [c for c in ours.columns if c not in META] + ["_change_type", "_commit_version"]
    theirs = pa.RecordBatchReader.from_stream(
        DeltaTable(path).load_cdf(starting_version=first, ending_version=last)
    ).read_all()
    key = lambda r: tuple(str(r[c]) for c in columns)  # noqa: E731
    assert sorted(map(key, (r.asDict() for r in ours.collect()))) == sorted(
        map(key, theirs.to_pylist())
    )


def assert_stream_equals_batch(
    spark: SparkSession, path: str, row_id: str, query_name: str, **options: Any
) -> None:
    batch = ChangelogReader(spark).options(rowId=row_id, **PROCESSED, **options)
    reader = ChangelogReader(spark, streaming=True).options(rowId=row_id, **PROCESSED)
    stream = reader.options(maxFilesPerTrigger=1, **options).changes(path)
    query = stream.writeStream.format("memory").queryName(query_name).start()
    query.processAllAvailable()
    query.stop()
    assert collect_rows(spark.table(query_name)) == collect_rows(batch.changes(path))
