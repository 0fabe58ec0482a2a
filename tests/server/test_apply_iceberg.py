"""apply_changes into Iceberg tables of a catalog (SQL on SQLite, the server's pyiceberg
committing), on a Spark Connect server: Spark's AUTO CDC cases, a Delta table's change feed
streamed into both SCD types across a restart, the history read back as a change feed of
its own (Delta source -> Iceberg SCD2 target -> its changes), an Iceberg feed into a Delta
target, and the refusals a user meets first."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from spark_cdc import AppliedChanges, apply_changes, read, readStream

from tests.support.apply_model import Change
from tests.support.apply_targets import (
    feed_changes,
    follow_across_a_restart,
    model_rows,
    read_iceberg,
    read_table,
    sorted_rows,
)
from tests.support.auto_cdc_cases import SCD1_CASES, SCD2_CASES, SCHEMA
from tests.support.delta_tables import apply_changes as replay
from tests.support.iceberg_tables import catalog_properties, orders_table, sql_catalog

TARGET = "db.target"


def _read(folder: Path, name: str = TARGET) -> pa.Table:
    return read_iceberg(catalog_properties(folder), name)


# Spark's AUTO CDC cases (each into a Delta target of its own in test_apply_changes): here
# every case's key is its own, and each case's i-th batch goes into the i-th call, so all
# cases share a few calls (a key's changes resolve alone: the other keys in a batch change
# nothing of it).
@pytest.mark.parametrize("scd_type", [1, 2])
def test_spark_auto_cdc_cases_into_iceberg(
    spark: SparkSession, tmp_path: Path, scd_type: int
) -> None:
    cases = SCD1_CASES if scd_type == 1 else SCD2_CASES
    offset = {case: 1000 * i for i, case in enumerate(sorted(cases))}
    calls = max(len(batches) for batches, _ in cases.values())
    for call in range(calls):
        events = [
            (key + offset[case], value, seq, deleted)
            for case, (batches, _) in cases.items()
            if call < len(batches)
            for key, value, seq, deleted in batches[call]
        ]
        done = apply_changes(
            spark.createDataFrame(events, SCHEMA),
            TARGET,
            keys=["id"],
            sequence_by="seq",
            apply_as_deletes="is_delete",
            except_column_list=["seq", "is_delete"],
            stored_as_scd_type=scd_type,
            format="iceberg",
            catalog=catalog_properties(tmp_path),
        )
        assert isinstance(done, AppliedChanges) and done.changes == len(events)
    names = ["id", "value"] if scd_type == 1 else ["id", "value", "__START_AT", "__END_AT"]
    expected = [
        dict(zip(names, (row[0] + offset[case], *row[1:]), strict=True))
        for case, (_, rows) in cases.items()
        for row in rows
    ]
    table = _read(tmp_path)
    assert table.schema.names == names
    assert sorted_rows(table) == sorted_rows(pa.Table.from_pylist(expected))


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_a_stream_follows_a_delta_table_into_an_iceberg_history_across_a_restart(
    spark: SparkSession, tmp_path: Path, mode: str
) -> None:
    """The target equals the model of the whole feed, and read back as an Iceberg change
    feed by its identifier fields (the keys and ``__START_AT``), it turns each of its
    snapshots into the next: its replaced rows rewritten, or marked deleted by position
    delete files (``write.merge.mode``). (Type 1 streams across restarts in
    test_apply_kills.)"""
    scd_type = 2
    source = str(tmp_path / "source")
    follow_across_a_restart(
        spark,
        source,
        TARGET,
        stored_as_scd_type=scd_type,
        checkpoint_location=str(tmp_path / "checkpoint"),
        format="iceberg",
        catalog=catalog_properties(tmp_path),
        table_properties={"write.merge.mode": mode},
    )
    assert sorted_rows(_read(tmp_path)) == model_rows(feed_changes(spark, source), scd_type)
    if mode == "merge-on-read":  # later snapshots marked rows deleted, rewrote no file
        summaries = [s.summary.additional_properties for s in _snapshots(tmp_path)]
        assert int(summaries[-1]["total-position-deletes"]) > 0
        assert all(s.get("deleted-data-files", "0") == "0" for s in summaries)
    _assert_its_change_feed_makes_each_snapshot(spark, tmp_path)


def _snapshots(folder: Path) -> list[Any]:
    return list(sql_catalog(folder).load_table(TARGET).metadata.snapshots)


def _assert_its_change_feed_makes_each_snapshot(spark: SparkSession, folder: Path) -> None:
    table = sql_catalog(folder).load_table(TARGET)
    options = {f"catalog.{k}": v for k, v in catalog_properties(folder).items()}
    feed = read(spark).format("iceberg").options(**options, computeUpdates="true")
    changes = [
        r.asDict() for r in feed.option("startingVersion", "earliest").changes(TARGET).collect()
    ]
    columns = ["id", "v", "__START_AT", "__END_AT"]
    before: Counter[tuple[Any, ...]] = Counter()
    for entry in table.history():
        snapshot = table.metadata.snapshot_by_id(entry.snapshot_id)
        rows = table.scan(snapshot_id=entry.snapshot_id).to_arrow().to_pylist()
        after = Counter(tuple(r[c] for c in columns) for r in rows)
        own = [c for c in changes if c["_commit_version"] == snapshot.sequence_number]
        assert replay(before, own, columns) == after, f"snapshot {snapshot.sequence_number}"
        before = after


def test_an_iceberg_feed_into_a_delta_target(spark: SparkSession, tmp_path: Path) -> None:
    """The other way: an Iceberg table's change feed (pyiceberg's appends, overwrites and
    upserts) streamed into a Delta mirror and applied in batch into a Delta history, each
    equal to the model of that feed."""
    from pyiceberg.expressions import EqualTo

    source = orders_table(sql_catalog(tmp_path))
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])

    def rows(*pairs: tuple[int, str]) -> pa.Table:
        return pa.Table.from_pylist([{"id": i, "name": n} for i, n in pairs], schema=arrow)

    source.append(rows((1, "a"), (2, "b"), (3, "c")))
    source.upsert(rows((1, "A"), (4, "d")))
    source.delete(EqualTo("id", 2))
    source.upsert(rows((3, "C"), (5, "e")))
    options = {f"catalog.{k}": v for k, v in catalog_properties(tmp_path).items()}

    def feed(reader: Any) -> Any:
        reader = reader.format("iceberg").options(**options, computeUpdates="true")
        return reader.option("startingVersion", "earliest").changes("db.orders")

    changes = [
        Change(
            (r["id"],),
            (r["_commit_version"],),
            "delete" if r["_change_type"] == "delete" else "upsert",
            {"id": r["id"], "name": r["name"]},
        )
        for r in feed(read(spark)).collect()
        if r["_change_type"] != "update_preimage"
    ]
    mirror, history = str(tmp_path / "mirror"), str(tmp_path / "history")
    query = apply_changes(
        feed(readStream(spark)),
        mirror,
        keys=["id"],
        sequence_by="_commit_version",
        checkpoint_location=str(tmp_path / "checkpoint"),
    )
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    apply_changes(
        feed(read(spark)), history, keys=["id"], sequence_by="_commit_version", stored_as_scd_type=2
    )
    assert sorted_rows(read_table(mirror)) == model_rows(changes, 1)
    assert sorted_rows(read_table(history)) == model_rows(changes, 2)


def test_a_batch_applied_again_commits_nothing_and_reads_back_its_counts(
    spark: SparkSession, tmp_path: Path
) -> None:
    feed = spark.createDataFrame([(1, "a", 1, False), (2, "b", 1, False)], SCHEMA)
    arguments: dict[str, Any] = {
        "keys": ["id"],
        "sequence_by": "seq",
        "except_column_list": ["seq", "is_delete"],
        "format": "iceberg",
        "catalog": catalog_properties(tmp_path),
    }
    assert apply_changes(feed, TARGET, **arguments) == AppliedChanges(changes=2, keys=2, rows=2)
    snapshots = len(sql_catalog(tmp_path).load_table(TARGET).metadata.snapshots)
    assert apply_changes(feed, TARGET, **arguments) == AppliedChanges(changes=2, keys=0, rows=0)
    assert len(sql_catalog(tmp_path).load_table(TARGET).metadata.snapshots) == snapshots


@pytest.mark.parametrize(
    ("given", "parameter"),
    [
        ({"format": "iceberg"}, "catalog"),
        ({"format": "iceberg", "catalog": {"type": "sql"}, "target": "/data/folder"}, "target"),
        ({"catalog": {"type": "sql"}}, "catalog"),
        ({"format": "hudi"}, "format"),
    ],
)
def test_an_iceberg_target_is_named_in_a_catalog_or_refused_on_the_client(
    spark: SparkSession, tmp_path: Path, given: dict[str, Any], parameter: str
) -> None:
    feed = spark.createDataFrame([(1, "a", 1, False)], SCHEMA)
    target = given.pop("target", TARGET)
    with pytest.raises(PySparkException) as refused:
        apply_changes(feed, target, keys=["id"], sequence_by="seq", **given)
    assert refused.value.getCondition() == "APPLY_CHANGES.INVALID_PARAMETER"
    assert refused.value.getMessageParameters()["parameter"] == parameter
    assert not (tmp_path / "catalog.db").exists()
