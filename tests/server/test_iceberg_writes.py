"""``iceberg_changelog`` on tables the tests write with pyiceberg (copy-on-write appends,
overwrites, deletes and upserts, a schema change, a branch rolled back), batch and streaming.

The expected feed is a model, not a list: between each snapshot and its parent, as pyiceberg
itself reads them, a row id gone is a delete, a new one an insert, one whose row changed an
update (pre- and post-image), and an unchanged one nothing. That is what carry-over removal
and update detection must leave of each snapshot's raw changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import spark_cdc
from pyspark.sql import DataFrame, SparkSession
from spark_cdc.server_plugin.iceberg.options import parse_iceberg_options
from spark_cdc.server_plugin.iceberg.source import _Table

from tests.support.feeds import run_stream
from tests.support.iceberg_tables import (
    catalog_properties,
    equality_delete,
    orders_table,
    rewrite,
    sql_catalog,
    table_folder,
)

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


@pytest.fixture
def table(tmp_path: Path) -> Any:
    return orders_table(sql_catalog(tmp_path))


def _rows(*pairs: tuple[int, str | None]) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "name": n} for i, n in pairs], schema=SCHEMA)


def _write_history(table: Any) -> None:
    from pyiceberg.expressions import EqualTo

    table.append(_rows((1, "a"), (2, "b"), (3, "c")))
    table.append(_rows((4, "d")))
    table.overwrite(_rows((2, "B")), overwrite_filter=EqualTo("id", 2))  # delete, then append
    table.delete(EqualTo("id", 3))
    table.upsert(_rows((1, "A"), (5, "e")))
    rewrite(table, _rows((1, "A"), (2, "BB"), (4, "d"), (6, "f")))  # 5 out, 2 updated, 6 in


def _model(table: Any) -> list[tuple[Any, ...]]:
    """Each snapshot's changes by row id, from pyiceberg's own reads of it and its parent."""
    expected = []
    before: dict[int, str | None] = {}
    version_of = {}
    for position, entry in enumerate(table.history(), start=1):
        snapshot = table.metadata.snapshot_by_id(entry.snapshot_id)
        version_of[entry.snapshot_id] = snapshot.sequence_number or position
        rows = table.scan(snapshot_id=entry.snapshot_id).to_arrow().to_pylist()
        after = {r["id"]: r["name"] for r in rows}
        version = version_of[entry.snapshot_id]
        for key in before.keys() - after.keys():
            expected.append((key, before[key], "delete", version))
        for key in after.keys() - before.keys():
            expected.append((key, after[key], "insert", version))
        for key in before.keys() & after.keys():
            if before[key] != after[key]:
                expected.append((key, before[key], "update_preimage", version))
                expected.append((key, after[key], "update_postimage", version))
        before = after
    return sorted(expected, key=json.dumps)


def _served(df: DataFrame) -> list[tuple[Any, ...]]:
    rows = df.select("id", "name", "_change_type", "_commit_version").collect()
    return sorted((tuple(r) for r in rows), key=json.dumps)


def _reader(spark: SparkSession) -> Any:
    return (
        spark_cdc.read(spark)
        .format("iceberg")
        .option("rowId", "id")
        .option("computeUpdates", True)
        .option("startingVersion", 0)
    )


def test_copy_on_write_history_serves_each_snapshots_changes_by_row_id(
    spark: SparkSession, table: Any
) -> None:
    _write_history(table)
    expected = _model(table)
    assert {kind for *_, kind, _ in expected} == {
        "insert",
        "delete",
        "update_preimage",
        "update_postimage",
    }
    for where in ("source", "client"):
        feed = _reader(spark).option("postProcessing", where).load(table_folder(table))
        assert _served(feed) == expected, where


def test_a_catalog_names_the_table(spark: SparkSession, table: Any, tmp_path: Path) -> None:
    """With catalog.<KEY> options, changes(name) finds the table in that catalog (on the
    server, with the options alone), and reads what its folder reads."""
    _write_history(table)
    catalog = {f"catalog.{k}": v for k, v in catalog_properties(tmp_path).items()}
    by_name = _reader(spark).options(**catalog).changes("db.orders")
    assert _served(by_name) == _served(_reader(spark).load(table_folder(table)))
    with pytest.raises(Exception, match=r"ICEBERG_CHANGELOG\.NOT_AN_ICEBERG_TABLE\]"):
        _reader(spark).options(**catalog).changes("db.missing").collect()


def test_a_stream_follows_new_snapshots_and_stops_at_a_schema_change(
    spark: SparkSession, table: Any, tmp_path: Path
) -> None:
    from pyiceberg.types import LongType

    table.append(_rows((1, "a"), (2, "b")))
    checkpoint, output = str(tmp_path / "checkpoint"), str(tmp_path / "output")

    def start() -> Any:
        stream = spark_cdc.readStream(spark).format("iceberg").option("rowId", "id")
        feed = stream.load(table_folder(table))
        writer = feed.writeStream.format("parquet").option("path", output)
        return writer.option("checkpointLocation", checkpoint).start()

    def served() -> DataFrame:
        return spark.read.option("mergeSchema", "true").parquet(output)

    query = start()
    try:
        query.processAllAvailable()  # the table as of now, as inserts
        table.append(_rows((3, "c")))
        query.processAllAvailable()
        rows = served().select("id", "_change_type").collect()
        assert sorted(tuple(r) for r in rows) == [(1, "insert"), (2, "insert"), (3, "insert")]
        with table.update_schema() as update:
            update.add_column("amount", LongType())
        table.refresh()
        table.append(
            pa.Table.from_pylist(
                [{"id": 4, "name": "d", "amount": 7}],
                schema=SCHEMA.append(pa.field("amount", pa.int64())),
            )
        )
        with pytest.raises(Exception, match=r"ICEBERG_CHANGELOG\.SCHEMA_CHANGED\]"):
            # Right after a micro-batch with rows the source answers "no new data" once (a
            # downstream watermark then releases that batch's rows); the stop comes next.
            query.processAllAvailable()
            query.awaitTermination(120)
    finally:
        query.stop()
    query = start()  # the same checkpoint, now with the new schema
    try:
        query.processAllAvailable()
        rows = served().where("amount IS NOT NULL").collect()
        assert [(r["id"], r["amount"], r["_change_type"]) for r in rows] == [(4, 7, "insert")]
        assert served().count() == 4
    finally:
        query.stop()


def test_a_stream_refuses_a_branch_rolled_back_past_what_it_served(
    spark: SparkSession, table: Any, tmp_path: Path
) -> None:
    table.append(_rows((1, "a")))
    first = table.current_snapshot().snapshot_id
    table.append(_rows((2, "b")))
    stream = spark.readStream.format("iceberg_changelog").option("startingVersion", 0)
    checkpoint = str(tmp_path / "checkpoint")
    served = run_stream(stream.load(table_folder(table)), "iceberg_rolled")
    assert sorted(r["id"] for r in served.collect()) == [1, 2]

    def run() -> None:
        writer = stream.load(table_folder(table)).writeStream.format("parquet")
        writer = writer.option("path", str(tmp_path / "output"))
        started = writer.option("checkpointLocation", checkpoint).start()
        try:
            started.processAllAvailable()
        finally:
            started.stop()

    run()
    table.manage_snapshots().rollback_to_snapshot(first).commit()
    table.append(_rows((3, "c")))
    with pytest.raises(Exception, match=r"ICEBERG_CHANGELOG\.HISTORY_REWRITTEN\]"):
        run()


def test_equality_deletes_serve_the_rows_they_newly_remove(spark: SparkSession, table: Any) -> None:
    """Equality deletes (written by hand: pyiceberg cannot) remove the rows of older
    snapshots whose id they hold, never a row added after them, and a row already gone is
    not served again; computeUpdates needs no rowId, the table's identifier field (id)
    being the row id, and agrees with the client's plan told rowId=id."""
    table.append(_rows((1, "a"), (2, "b"), (3, "c")))
    table.append(_rows((10, "x"), (11, "y")))  # bounds [10, 11]: out of the deletes' reach
    equality_delete(table, pa.table({"id": pa.array([2, 4], pa.int64())}))  # no 4: none gone
    table.append(_rows((2, "B")))
    equality_delete(table, pa.table({"id": pa.array([2, 3], pa.int64())}))
    expected = [
        (1, "a", "insert", 1),
        (2, "b", "insert", 1),
        (3, "c", "insert", 1),
        (10, "x", "insert", 2),
        (11, "y", "insert", 2),
        (2, "b", "delete", 3),
        (2, "B", "insert", 4),
        (2, "B", "delete", 5),
        (3, "c", "delete", 5),
    ]
    planned = _Table(parse_iceberg_options({"path": table_folder(table)}))
    reached = [{t.path.rsplit("/", 1)[-1] for t in planned.tasks(s)} for s in planned.snapshots]
    first_file = {t.path.rsplit("/", 1)[-1] for t in planned.tasks(planned.snapshots[0])}
    assert reached[2] == first_file  # the second append's file is out of reach
    reader = spark_cdc.read(spark).format("iceberg").options(startingVersion=0)
    by_identifier = reader.option("computeUpdates", True).load(table_folder(table))
    assert _served(by_identifier) == sorted(expected, key=json.dumps)
    told = _reader(spark).option("postProcessing", "client").load(table_folder(table))
    assert _served(told) == sorted(expected, key=json.dumps)


def test_a_manifest_carried_with_its_deleted_entries_removes_nothing_again(
    spark: SparkSession, table: Any
) -> None:
    """A snapshot's manifest list may carry its parent's manifests as they are, DELETED
    entries included (Iceberg Java's fast appends do; so does this hand-written delete):
    those files left with the parent, and the snapshot serves only its own changes."""
    from pyiceberg.manifest import ManifestEntryStatus

    table.append(_rows((1, "a"), (2, "b"), (3, "c")))
    rewrite(table, _rows((1, "a"), (2, "B")))
    equality_delete(table, pa.table({"id": pa.array([1], pa.int64())}))
    carried = [
        entry.status
        for manifest in table.current_snapshot().manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False)
    ]
    assert ManifestEntryStatus.DELETED in carried
    reader = spark_cdc.read(spark).format("iceberg").options(startingVersion=3)
    assert _served(reader.load(table_folder(table))) == [(1, "a", "delete", 3)]
