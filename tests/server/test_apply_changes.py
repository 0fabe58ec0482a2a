"""apply_changes on a Spark Connect server: Spark's own AUTO CDC cases (its SCD1 and SCD2
foreachBatch handler suites, ported to this API), a Delta table's change feed followed by a
stream into both SCD types (the target equals the model of the whole feed, across a
restart), and the refusals, each by its condition."""

from __future__ import annotations

import shutil
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from spark_cdc import AppliedChanges, apply_changes, read, readStream

from tests.support.apply_targets import (
    feed_changes,
    follow_across_a_restart,
    model_rows,
    read_table,
    sorted_rows,
)
from tests.support.auto_cdc_cases import SCD1_CASES, SCD2_CASES, SCHEMA, D, Event, U
from tests.support.delta_tables import merge_step
from tests.support.processes import Command


def _apply_batches(
    spark: SparkSession, target: str, batches: list[list[Event]], scd_type: int, **more: Any
) -> list[dict[str, Any]]:
    for events in batches:
        feed = spark.createDataFrame(events, SCHEMA)
        done = apply_changes(
            feed,
            target,
            keys=["id"],
            sequence_by="seq",
            apply_as_deletes="is_delete",
            except_column_list=["seq", "is_delete"],
            stored_as_scd_type=scd_type,
            **more,
        )
        assert isinstance(done, AppliedChanges)
    return sorted_rows(read_table(target))


def _versions(*rows: tuple[int, str, int, int | None]) -> list[dict[str, Any]]:
    return sorted_rows(
        pa.Table.from_pylist(
            [{"id": i, "value": v, "__START_AT": s, "__END_AT": e} for i, v, s, e in rows]
        )
    )


@pytest.mark.parametrize("case", sorted(SCD2_CASES))
def test_spark_scd2_cases(spark: SparkSession, tmp_path: Path, case: str) -> None:
    batches, versions = SCD2_CASES[case]
    target = str(tmp_path / "target")
    assert _apply_batches(spark, target, batches, 2) == _versions(*versions)


@pytest.mark.parametrize("case", sorted(SCD1_CASES))
def test_spark_scd1_cases(spark: SparkSession, tmp_path: Path, case: str) -> None:
    batches, rows = SCD1_CASES[case]
    target = str(tmp_path / "target")
    expected = (
        sorted_rows(pa.Table.from_pylist([{"id": i, "value": v} for i, v in rows])) if rows else []
    )
    assert _apply_batches(spark, target, batches, 1) == expected


def test_untracked_columns_update_the_current_version(spark: SparkSession, tmp_path: Path) -> None:
    """Spark's track_history_column_list cases: a change of an untracked column updates
    the current version in place; of a tracked one opens a version."""
    target = str(tmp_path / "target")
    schema = "id long, name string, score long, seq long"
    for events in (
        [(1, "alice", 100, 10), (1, "alice", 200, 20)],
        [(1, "alice", 300, 30)],
        [(1, "bob", 300, 40)],
    ):
        apply_changes(
            spark.createDataFrame(events, schema),
            target,
            keys=["id"],
            sequence_by="seq",
            except_column_list=["seq"],
            stored_as_scd_type=2,
            track_history_column_list=["name"],
        )
    table = read_table(target)
    assert table.schema.names == ["id", "name", "score", "__START_AT", "__END_AT"]
    assert sorted_rows(table) == sorted_rows(
        pa.Table.from_pylist(
            [
                {"id": 1, "name": "alice", "score": 300, "__START_AT": 10, "__END_AT": 40},
                {"id": 1, "name": "bob", "score": 300, "__START_AT": 40, "__END_AT": None},
            ]
        )
    )


@pytest.mark.parametrize("as_struct", [False, True])
def test_composite_keys_and_sequences(spark: SparkSession, tmp_path: Path, as_struct: bool) -> None:
    """Keys of several columns are independent histories; a sequence of several columns (a
    list, or Databricks' ``struct(...)``) is compared in order, and type 2's bounds are a
    struct of it."""
    target = str(tmp_path / "target")
    schema = "country string, city string, pop long, major long, minor long"
    feed = spark.createDataFrame(
        [
            ("US", "Springfield", 1, 1, 5),
            ("US", "Springfield", 2, 2, 0),
            ("CA", "Springfield", 3, 1, 9),
        ],
        schema,
    )
    apply_changes(
        feed,
        target,
        keys=["country", "city"],
        sequence_by=F.struct("major", "minor") if as_struct else ["major", "minor"],
        except_column_list=["major", "minor"],
        stored_as_scd_type=2,
    )
    rows = sorted_rows(read_table(target))
    assert rows == sorted_rows(
        pa.Table.from_pylist(
            [
                {
                    "country": "CA",
                    "city": "Springfield",
                    "pop": 3,
                    "__START_AT": {"major": 1, "minor": 9},
                    "__END_AT": None,
                },
                {
                    "country": "US",
                    "city": "Springfield",
                    "pop": 1,
                    "__START_AT": {"major": 1, "minor": 5},
                    "__END_AT": {"major": 2, "minor": 0},
                },
                {
                    "country": "US",
                    "city": "Springfield",
                    "pop": 2,
                    "__START_AT": {"major": 2, "minor": 0},
                    "__END_AT": None,
                },
            ]
        )
    )


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_stream_follows_a_delta_table_across_a_restart(
    spark: SparkSession, tmp_path: Path, scd_type: int
) -> None:
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    follow_across_a_restart(
        spark,
        source,
        target,
        stored_as_scd_type=scd_type,
        checkpoint_location=str(tmp_path / "checkpoint"),
    )
    table = read_table(target)
    names = ["id", "v"] if scd_type == 1 else ["id", "v", "__START_AT", "__END_AT"]
    assert table.schema.names == names
    assert sorted_rows(table) == model_rows(feed_changes(spark, source), scd_type)


def _until_equal(read: Any, expected: list[dict[str, Any]], command: Command) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            if read() == expected:
                return
        except TableNotFoundError:  # not created yet
            pass
        assert time.monotonic() < deadline, command.output
        assert command.process.poll() is None, command.output
        time.sleep(0.5)


def test_the_command_line_follows_a_table_into_a_target(
    spark: SparkSession, spark_remote: str, tmp_path: Path
) -> None:
    """``spark-cdc apply`` until Ctrl-C, twice: the second run continues where the first
    stopped (its checkpoint beside the target), and the target is the model of the feed.
    A history: type 1 from the command line is in test_apply_cli."""
    scd_type = 2
    source, target = str(tmp_path / "source"), str(tmp_path / "target")
    write_deltalake(source, pa.table({"id": list(range(5)), "v": [f"v{i}" for i in range(5)]}))
    arguments = ["apply", source, "--target", target, "--keys", "id", "--scd", str(scd_type)]
    for run, steps in enumerate([range(1, 3), range(3, 6)]):
        start = ["--starting-version", "0"] if run == 0 else []
        command = Command(*arguments, *start, "--remote", spark_remote)
        try:
            command.wait_for("batch 0 " if run == 0 else "Applying")
            for step in steps:
                merge_step(source, step)
            expected = model_rows(feed_changes(spark, source), scd_type)
            _until_equal(lambda: sorted_rows(read_table(target)), expected, command)
        finally:
            code = command.interrupt()
        assert code == 0, command.output
        assert "Stopped." in command.output and "Traceback" not in command.output
    assert Path(target + "__apply_changes_checkpoint").is_dir()


def _condition(error: BaseException) -> str | None:
    return error.getCondition() if isinstance(error, PySparkException) else None


def test_two_changes_at_one_sequence_are_refused_by_name(
    spark: SparkSession, tmp_path: Path
) -> None:
    target = str(tmp_path / "target")
    with pytest.raises(PySparkException) as refused:
        _apply_batches(spark, target, [[U(1, "a", 5), U(1, "b", 5)]], 1)
    assert _condition(refused.value) == "APPLY_CHANGES.DUPLICATE_SEQUENCE"
    assert "id=1" in str(refused.value) and "seq=5" in str(refused.value)
    assert list(tmp_path.iterdir()) == []  # refused before anything is written: no table


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_batch_applied_again_is_counted_and_commits_nothing_to_the_target(
    spark: SparkSession, tmp_path: Path, scd_type: int
) -> None:
    target = str(tmp_path / "target")
    feed = spark.createDataFrame([U(1, "a", 5), U(2, "b", 5), D(2, 6)], SCHEMA)
    arguments: dict[str, Any] = {
        "keys": ["id"],
        "sequence_by": "seq",
        "apply_as_deletes": "is_delete",
        "except_column_list": ["seq", "is_delete"],
        "stored_as_scd_type": scd_type,
    }
    first = apply_changes(feed, target, **arguments)
    assert first == AppliedChanges(changes=3, keys=2, rows=1 if scd_type == 1 else 2)
    version = DeltaTable(target).version()
    assert apply_changes(feed, target, **arguments) == AppliedChanges(changes=3, keys=0, rows=0)
    assert DeltaTable(target).version() == version


def test_table_properties_and_partition_columns_shape_the_target_the_first_batch_makes(
    spark: SparkSession, tmp_path: Path
) -> None:
    target = str(tmp_path / "target")
    properties = {"delta.checkpointInterval": "5"}
    rows = _apply_batches(
        spark,
        target,
        [[U(1, "a", 5), U(2, "b", 5)], [U(1, "b", 6)]],
        1,
        table_properties=properties,
        partition_cols=["value"],
    )
    assert rows == [{"id": 1, "value": "b"}, {"id": 2, "value": "b"}]
    table = DeltaTable(target)
    assert table.metadata().partition_columns == ["value"]
    assert table.metadata().configuration == properties


def test_a_property_delta_rs_cannot_set_is_refused_with_no_folder_left(
    spark: SparkSession, tmp_path: Path
) -> None:
    target = tmp_path / "target"
    with pytest.raises(PySparkException) as refused:
        _apply_batches(spark, str(target), [[U(1, "a", 5)]], 1, table_properties={"owner": "me"})
    assert _condition(refused.value) == "APPLY_CHANGES.INVALID_PARAMETER"
    assert "'owner'" in str(refused.value)
    assert not target.exists()


@pytest.mark.parametrize("scd_type", [1, 2])
@pytest.mark.parametrize("deletion_vectors", [False, True])
def test_a_target_is_a_change_feed_of_its_own(
    spark: SparkSession, tmp_path: Path, scd_type: int, deletion_vectors: bool
) -> None:
    """The target's commits (files rewritten without the replaced rows, or the rows
    marked deleted; rows appended) read back by this package's own source: each batch's
    changes to the target, as a Delta reader sees them (type 1 with update detection; type
    2's rows are versions, several per key)."""
    target = str(tmp_path / "target")
    batches = [[U(1, "a", 5), U(2, "b", 5), U(3, "c", 5)], [U(1, "x", 6), D(2, 6)]]
    properties = {"delta.enableDeletionVectors": str(deletion_vectors).lower()}
    _apply_batches(spark, target, batches, scd_type, table_properties=properties)
    assert any(a.get("deletionVector") for a in _adds(target)) == deletion_vectors
    if not deletion_vectors:  # what a new user's first look at the table is
        assert DeltaTable(target).to_pandas().shape[0] == (2 if scd_type == 1 else 4)
    reader = read(spark)
    if scd_type == 1:
        reader = reader.option("rowId", "id").option("computeUpdates", True)
        changes = [
            ((1, "a"), "insert", 0),
            ((2, "b"), "insert", 0),
            ((3, "c"), "insert", 0),
            ((1, "a"), "update_preimage", 1),
            ((1, "x"), "update_postimage", 1),
            ((2, "b"), "delete", 1),
        ]
    else:
        changes = [
            ((1, "a", 5, None), "insert", 0),
            ((2, "b", 5, None), "insert", 0),
            ((3, "c", 5, None), "insert", 0),
            ((1, "a", 5, None), "delete", 1),
            ((2, "b", 5, None), "delete", 1),
            ((1, "a", 5, 6), "insert", 1),
            ((1, "x", 6, None), "insert", 1),
            ((2, "b", 5, 6), "insert", 1),
        ]
    feed = reader.load(target).drop("_commit_timestamp")
    names = feed.columns
    got = sorted_rows(pa.Table.from_pylist([r.asDict() for r in feed.collect()]))
    want = [dict(zip(names, (*row, kind, version), strict=True)) for row, kind, version in changes]
    assert got == sorted_rows(pa.Table.from_pylist(want))


def _adds(path: str) -> list[dict[str, Any]]:
    import json

    log = sorted(Path(path, "_delta_log").glob("*.json"))
    actions = [json.loads(line) for f in log for line in f.read_text().splitlines() if line]
    return [a["add"] for a in actions if "add" in a]


def test_a_history_applied_into_a_mirror_is_refused_as_such(
    spark: SparkSession, tmp_path: Path
) -> None:
    target = str(tmp_path / "target")
    _apply_batches(spark, target, [[U(1, "a", 5)]], 1)
    with pytest.raises(PySparkException) as refused:
        _apply_batches(spark, target, [[U(1, "b", 6)]], 2)
    assert _condition(refused.value) == "APPLY_CHANGES.SCD_TYPE_MISMATCH"
    assert "stored_as_scd_type=1" in str(refused.value)
    assert sorted_rows(read_table(target)) == [{"id": 1, "value": "a"}]


def test_a_null_sequence_is_refused_before_anything_is_written(
    spark: SparkSession, tmp_path: Path
) -> None:
    target = str(tmp_path / "target")
    _apply_batches(spark, target, [[U(1, "a", 5)]], 1)
    before = read_table(target)
    feed = spark.createDataFrame([(2, "b", None, False)], SCHEMA)
    with pytest.raises(PySparkException) as refused:
        apply_changes(
            feed, target, keys=["id"], sequence_by="seq", except_column_list=["seq", "is_delete"]
        )
    assert _condition(refused.value) == "APPLY_CHANGES.NULL_SEQUENCE"
    assert read_table(target).equals(before)


def test_new_columns_are_refused_unless_the_schema_evolves(
    spark: SparkSession, tmp_path: Path
) -> None:
    target = str(tmp_path / "target")
    _apply_batches(spark, target, [[U(1, "a", 5)]], 1)
    wider = spark.createDataFrame([(2, "b", 6, False, 7)], SCHEMA + ", extra long")
    arguments: dict[str, Any] = {
        "keys": ["id"],
        "sequence_by": "seq",
        "apply_as_deletes": "is_delete",
        "except_column_list": ["seq", "is_delete"],
    }
    with pytest.raises(PySparkException) as refused:
        apply_changes(wider, target, **arguments)
    assert _condition(refused.value) == "APPLY_CHANGES.NEW_COLUMNS"
    apply_changes(wider, target, schema_evolution=True, **arguments)
    assert sorted_rows(read_table(target)) == [
        {"id": 1, "value": "a", "extra": None},
        {"id": 2, "value": "b", "extra": 7},
    ]


@pytest.mark.parametrize(
    ("arguments", "condition"),
    [
        ({"keys": ["nope"]}, "APPLY_CHANGES.UNKNOWN_COLUMN"),
        ({"sequence_by": "nope"}, "APPLY_CHANGES.UNKNOWN_COLUMN"),
        (
            {"column_list": ["id"], "except_column_list": ["seq"]},
            "APPLY_CHANGES.CONFLICTING_PARAMETERS",
        ),
        ({"stored_as_scd_type": 3}, "APPLY_CHANGES.INVALID_PARAMETER"),
        ({"track_history_column_list": ["value"]}, "APPLY_CHANGES.INVALID_PARAMETER"),
        (
            {"apply_as_truncates": "false", "stored_as_scd_type": 2},
            "APPLY_CHANGES.INVALID_PARAMETER",
        ),
        ({"column_list": ["value", "seq"]}, "APPLY_CHANGES.INVALID_PARAMETER"),
        ({"keys": []}, "APPLY_CHANGES.INVALID_PARAMETER"),
        (
            {"tombstone_retention": timedelta(days=1), "stored_as_scd_type": 2},
            "APPLY_CHANGES.INVALID_PARAMETER",
        ),
        ({"tombstone_retention": timedelta(days=-1)}, "APPLY_CHANGES.INVALID_PARAMETER"),
        ({"tombstone_retention": 3600}, "APPLY_CHANGES.INVALID_PARAMETER"),
        ({"partition_cols": ["nope"]}, "APPLY_CHANGES.UNKNOWN_COLUMN"),
        ({"partition_cols": "value"}, "APPLY_CHANGES.INVALID_PARAMETER"),
        ({"table_properties": {"delta.appendOnly": "true"}}, "APPLY_CHANGES.INVALID_PARAMETER"),
        (
            {"table_properties": {"delta.enableDeletionVectors": "yes"}},
            "APPLY_CHANGES.INVALID_PARAMETER",
        ),
        ({"table_properties": {"delta.checkpointInterval": 10}}, "APPLY_CHANGES.INVALID_PARAMETER"),
        ({"table_properties": [("a", "b")]}, "APPLY_CHANGES.INVALID_PARAMETER"),
    ],
)
def test_parameters_are_refused_on_the_client(
    spark: SparkSession, tmp_path: Path, arguments: dict[str, Any], condition: str
) -> None:
    feed = spark.createDataFrame([U(1, "a", 5)], SCHEMA)
    given = {"keys": ["id"], "sequence_by": "seq", **arguments}
    with pytest.raises(PySparkException) as refused:
        apply_changes(feed, str(tmp_path / "target"), **given)
    assert _condition(refused.value) == condition
    assert not (tmp_path / "target").exists()


def test_a_stream_needs_a_checkpoint_location(spark: SparkSession, tmp_path: Path) -> None:
    source = str(tmp_path / "source")
    write_deltalake(source, pa.table({"id": [1], "v": ["a"]}))
    feed = readStream(spark).option("rowId", "id").load(source)
    with pytest.raises(PySparkException) as refused:
        apply_changes(feed, str(tmp_path / "target"), keys=["id"], sequence_by="_commit_version")
    assert _condition(refused.value) == "APPLY_CHANGES.MISSING_CHECKPOINT_LOCATION"


def test_a_feed_column_with_a_reserved_name_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    feed = spark.createDataFrame([U(1, "a", 5)], SCHEMA).withColumn("__START_AT", F.lit(1))
    with pytest.raises(PySparkException) as refused:
        apply_changes(
            feed, str(tmp_path / "t"), keys=["id"], sequence_by="seq", stored_as_scd_type=2
        )
    assert _condition(refused.value) == "APPLY_CHANGES.RESERVED_COLUMN"
    shutil.rmtree(tmp_path / "t", ignore_errors=True)


def test_truncates_and_null_updates_from_a_users_own_feed(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A feed of the user's own (Debezium-like op codes, a two-part sequence):
    ``apply_as_truncates`` deletes every key at its sequence, ``ignore_null_updates`` keeps
    the value a key had before a NULL."""
    target = str(tmp_path / "target")
    schema = "id long, name string, city string, ts long, lsn long, op string"
    batches = [
        [(1, "ann", "oslo", 1, 0, "c"), (2, "bob", "rome", 1, 1, "c")],
        [(1, None, "bern", 2, 0, "u"), (None, None, None, 3, 0, "t"), (3, "cy", None, 3, 1, "c")],
        [(3, None, "kiev", 4, 0, "u"), (2, "bob", "late", 2, 5, "u")],
    ]
    for events in batches:
        apply_changes(
            spark.createDataFrame(events, schema),
            target,
            keys=["id"],
            sequence_by=["ts", "lsn"],
            apply_as_deletes="op = 'd'",
            apply_as_truncates=F.col("op") == "t",
            except_column_list=["ts", "lsn", "op"],
            ignore_null_updates=True,
        )
    assert sorted_rows(read_table(target)) == [{"id": 3, "name": "cy", "city": "kiev"}]
