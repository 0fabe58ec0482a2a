"""``apply_changes_from_snapshot``: random snapshot sequences applied to Delta and Iceberg
targets, types 1 and 2, equal row for row to a model (a dict of keys per version); a
version again, an older one, a writer of the other kind and a bad snapshot refused by
name with nothing written; a stop between a snapshot's two commits run again."""

from __future__ import annotations

import dataclasses
import math
import uuid
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from spark_cdc import AppliedSnapshot, apply_changes, apply_changes_from_snapshot

from tests.support.apply_targets import iceberg_catalog, read_iceberg, read_table, sorted_rows
from tests.support.snapshot_model import as_bag, same

POINT = StructType([StructField("x", IntegerType()), StructField("y", DoubleType())])
# Every column type the Delta source reads but maps (Spark compares no map: docs/snapshots.md).
SCHEMA = StructType(
    [
        StructField("id", IntegerType()),
        StructField("region", StringType()),
        StructField("name", StringType()),
        StructField("amount", DoubleType()),
        StructField("day", DateType()),
        StructField("flag", BooleanType()),
        StructField("tiny", ByteType()),
        StructField("small", ShortType()),
        StructField("big", LongType()),
        StructField("ratio", FloatType()),
        StructField("price", DecimalType(12, 2)),
        StructField("blob", BinaryType()),
        StructField("at", TimestampType()),
        StructField("local", TimestampNTZType()),
        StructField("tags", ArrayType(StringType())),
        StructField("point", POINT),
    ]
)
KEYS = ["id", "region"]
VALUES = {
    "name": st.sampled_from(["a", "b", None]),
    "amount": st.sampled_from([1.5, 2.5, 0.0, -0.0, math.nan, None]),
    "day": st.sampled_from([date(2024, 1, 1), date(2025, 6, 30), None]),
    "flag": st.sampled_from([True, False, None]),
    "tiny": st.sampled_from([-128, 7, None]),
    "small": st.sampled_from([-(2**15), 300, None]),
    "big": st.sampled_from([2**62, -1, None]),
    "ratio": st.sampled_from([0.5, -0.0, math.nan, None]),
    "price": st.sampled_from([Decimal("1.50"), Decimal("-20.25"), None]),
    "blob": st.sampled_from([b"", b"\x00\xff", None]),
    "at": st.sampled_from(
        [
            datetime(2024, 1, 1, 12, tzinfo=timezone.utc),
            datetime(1969, 12, 31, tzinfo=timezone.utc),
            None,
        ]
    ),
    "local": st.sampled_from([datetime(2024, 1, 1, 12), datetime(2030, 6, 1), None]),
    "tags": st.sampled_from([[], ["a", None], ["a"], None]),
    "point": st.sampled_from(
        [{"x": 1, "y": 0.5}, {"x": 1, "y": math.nan}, {"x": None, "y": None}, None]
    ),
}
Rows = dict[tuple[Any, ...], dict[str, Any]]
# A Delta target's layouts: its rows in plain files, or read by the sink.
LAYOUTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "deletion vectors": {"table_properties": {"delta.enableDeletionVectors": "true"}},
    "partitioned": {"partition_cols": ["region"]},
}


@st.composite
def snapshot_sequences(draw: st.DrawFn) -> list[tuple[int, Rows]]:
    """Two to four snapshots at growing versions: each key (two columns) present or not,
    its values kept or some of them drawn again; a key may leave and come back."""
    keys = [(i, r) for i in range(4) for r in ("eu", "us")]
    versions = sorted(draw(st.sets(st.integers(1, 40), min_size=2, max_size=4)))
    sequence: list[tuple[int, Rows]] = []
    last: Rows = {}
    for version in versions:
        rows: Rows = {}
        for key in keys:
            if not draw(st.booleans()):
                continue
            row = dict(last.get(key) or {"id": key[0], "region": key[1]})
            for name, values in VALUES.items():
                if name not in row or draw(st.booleans()):
                    row[name] = draw(values)
            rows[key] = row
        sequence.append((version, rows))
        last = rows
    return sequence


def model(sequence: list[tuple[int, Rows]], scd_type: int, tracked: list[str]) -> list[dict]:
    """The target after the sequence: type 1 the last snapshot; type 2 each key's versions,
    one opened where the key appears or a tracked value changes, closed where the next
    opens or the key leaves; an untracked change updates the open version in place."""
    if scd_type == 1:
        return list(sequence[-1][1].values())
    open_rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    closed: list[dict[str, Any]] = []
    for version, rows in sequence:
        for key in list(open_rows):
            if key not in rows:
                closed.append({**open_rows.pop(key), "__END_AT": version})
        for key, row in rows.items():
            current = open_rows.get(key)
            if current is None:
                open_rows[key] = {**row, "__START_AT": version}
            elif not all(same(current[c], row[c]) for c in tracked):
                closed.append({**current, "__END_AT": version})
                open_rows[key] = {**row, "__START_AT": version}
            elif not all(same(current[c], row[c]) for c in VALUES):
                open_rows[key] = {**row, "__START_AT": current["__START_AT"]}
    return closed + [{**r, "__END_AT": None} for r in open_rows.values()]


def frame(spark: SparkSession, rows: Rows) -> DataFrame:
    return spark.createDataFrame([tuple(r[c] for c in SCHEMA.names) for r in rows.values()], SCHEMA)


def comparable(rows: list[dict[str, Any]], scd_type: int) -> list[tuple[Any, ...]]:
    """Whole rows as sorted tuples, NaN as text (it equals itself in Spark, not Python)."""
    history = ["__START_AT", "__END_AT"] if scd_type == 2 else []
    return as_bag(rows, [*SCHEMA.names, *history])


def target_of(folder: str, iceberg: bool) -> dict[str, Any]:
    if iceberg:
        return {"target": "db.customers", "format": "iceberg", "catalog": iceberg_catalog(folder)}
    return {"target": f"{folder}/customers"}


def read_target(folder: str, iceberg: bool) -> pa.Table:
    if iceberg:
        return read_iceberg(iceberg_catalog(folder), "db.customers")
    return read_table(f"{folder}/customers")


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    sequence=snapshot_sequences(),
    scd_type=st.sampled_from([1, 2]),
    iceberg=st.booleans(),
    tracked=st.sampled_from([list(VALUES), ["name"]]),
    layout=st.sampled_from(list(LAYOUTS)),
)
def test_snapshot_sequences_equal_the_model(
    spark: SparkSession,
    tmp_path: Path,
    sequence: list[tuple[int, Rows]],
    scd_type: int,
    iceberg: bool,
    tracked: list[str],
    layout: str,
) -> None:
    """Whatever reads a Delta target's rows to compare: Spark's Parquet reader (plain
    files), or the sink where they are not (deletion vectors, partition values)."""
    pending = list(sequence)
    asked: list[int | None] = []

    def next_snapshot(last: int | None) -> tuple[DataFrame, int] | None:
        asked.append(last)
        if not pending:
            return None
        version, rows = pending.pop(0)
        return frame(spark, rows), version

    lists = {"track_history_column_list": tracked} if scd_type == 2 else {}
    # A folder of its own under tmp_path, which a server in a container sees too.
    made = tmp_path / uuid.uuid4().hex
    made.mkdir()
    folder = str(made)
    done = apply_changes_from_snapshot(
        source=next_snapshot,
        keys=KEYS,
        stored_as_scd_type=scd_type,
        spark=spark,
        **target_of(folder, iceberg),
        **lists,
        **({} if iceberg else LAYOUTS[layout]),
    )
    assert [d.version for d in done] == [v for v, _ in sequence]
    assert asked == [None, *[v for v, _ in sequence]]
    found = read_target(folder, iceberg)
    history = ["__START_AT", "__END_AT"] if scd_type == 2 else []
    assert found.column_names == [*SCHEMA.names, *history]
    assert comparable(found.to_pylist(), scd_type) == comparable(
        model(sequence, scd_type, tracked), scd_type
    )


def test_a_table_source_and_its_counts(spark: SparkSession, tmp_path: Path) -> None:
    """A Delta table by path is the next snapshot, one version above the last."""
    from deltalake import write_deltalake

    source = str(tmp_path / "dump")
    first = pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]})
    write_deltalake(source, first)
    target = str(tmp_path / "mirror")
    assert apply_changes_from_snapshot(target, source, ["id"], spark=spark) == [
        AppliedSnapshot(1, 3, 3, 3)
    ]
    write_deltalake(source, pa.table({"id": [2, 3, 4], "v": ["b", "C", "d"]}), mode="overwrite")
    assert apply_changes_from_snapshot(target, source, ["id"], spark=spark) == [
        AppliedSnapshot(2, 3, 3, 2)
    ]
    assert sorted_rows(read_table(target)) == [
        {"id": 2, "v": "b"},
        {"id": 3, "v": "C"},
        {"id": 4, "v": "d"},
    ]
    # Nothing changed: the version is recorded, the target not written.
    before = len(list((tmp_path / "mirror" / "_delta_log").glob("*.json")))
    assert apply_changes_from_snapshot(target, source, ["id"], spark=spark) == [
        AppliedSnapshot(3, 0, 0, 0)
    ]
    assert len(list((tmp_path / "mirror" / "_delta_log").glob("*.json"))) == before


@pytest.mark.parametrize(("layout", "by_parquet"), [("plain", True), ("partitioned", False)])
def test_the_targets_rows_are_read_by_sparks_parquet_reader_where_its_files_hold_them(
    spark: SparkSession, tmp_path: Path, layout: str, by_parquet: bool
) -> None:
    """The rows the next snapshot is compared with: the target's files read by Spark's
    Parquet reader (their paths from the writer's status), or by the sink where partition
    values live in the log; the same rows either way. A Delta table as the snapshot source
    likewise."""
    from deltalake import DeltaTable, write_deltalake
    from spark_cdc.apply import tables_spec
    from spark_cdc.apply_snapshots import writer_id
    from spark_cdc.snapshot_reads import status, table_rows, target_rows

    target = str(tmp_path / "mirror")
    first = spark.createDataFrame(
        [(1, "eu", "a"), (2, "us", None)], "id int, region string, v string"
    )
    apply_changes_from_snapshot(target, first, ["id"], spark=spark, **LAYOUTS[layout])
    tables = tables_spec(spark, target, 1, "delta", None, None, None, app_id=writer_id(target))
    rows = target_rows(spark, tables, 1, status(spark, tables))
    read = sorted(Path(f).name for f in rows.inputFiles())
    files = sorted(Path(f).name for f in DeltaTable(target).file_uris())
    assert read == (files if by_parquet else [])
    assert sorted(map(tuple, rows.select("id", "region", "v").collect())) == [
        (1, "eu", "a"),
        (2, "us", None),
    ]
    source = str(tmp_path / "dump")
    dump = pa.table({"id": [3], "region": ["eu"], "v": ["c"]})
    write_deltalake(source, dump, partition_by=LAYOUTS[layout].get("partition_cols"))
    files = sorted(Path(f).name for f in DeltaTable(source).file_uris())
    for refreshing in (False, True):  # a full refresh reads its source alike
        given = dataclasses.replace(tables, full_refresh=refreshing)
        rows = table_rows(spark, source, given, None, None)
        read = sorted(Path(f).name for f in rows.inputFiles())
        assert read == (files if by_parquet else [])
    assert [tuple(r) for r in rows.select("id", "region", "v").collect()] == [(3, "eu", "c")]


def _snapshots(spark: SparkSession, *given: tuple[int, list[tuple[Any, ...]]]) -> Any:
    pending = list(given)

    def next_snapshot(last: int | None) -> tuple[DataFrame, int] | None:
        if not pending:
            return None
        version, rows = pending.pop(0)
        return spark.createDataFrame(rows, "id int, v string"), version

    return next_snapshot


def test_a_version_again_is_skipped_and_an_older_one_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    target = str(tmp_path / "mirror")
    apply_changes_from_snapshot(target, _snapshots(spark, (5, [(1, "a")])), ["id"], spark=spark)
    again = apply_changes_from_snapshot(
        target, _snapshots(spark, (5, [(1, "b")])), ["id"], spark=spark
    )
    assert again == [AppliedSnapshot(5, 0, 0, 0, skipped=True)]
    with pytest.raises(PySparkException) as caught:
        apply_changes_from_snapshot(target, _snapshots(spark, (4, [(1, "c")])), ["id"], spark=spark)
    assert caught.value.getCondition() == "APPLY_CHANGES.SNAPSHOT_VERSION_NOT_NEWER"
    assert caught.value.getMessageParameters() == {"path": target, "last": "5", "version": "4"}
    assert sorted_rows(read_table(target)) == [{"id": 1, "v": "a"}]


def test_the_targets_keys_are_counted_unless_the_writer_vouches_for_the_version_read(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The target's rows are counted per key, a key twice refused by name, unless the
    version read is the one the state's newest commit binds: written by the writer, or
    compared whole and left as it was. A row a person appended makes the version another
    writer's: counted, and the key twice refused, nothing written. Once the person
    removes it, the next snapshot counts the rows and goes on, and the version it left
    is vouched for again."""
    from deltalake import DeltaTable, write_deltalake
    from spark_cdc.apply import tables_spec
    from spark_cdc.apply_snapshots import writer_id
    from spark_cdc.snapshot_reads import status

    target = str(tmp_path / "mirror")
    tables = tables_spec(spark, target, 1, "delta", None, None, None, app_id=writer_id(target))

    def vouched() -> bool:
        return bool(status(spark, tables).target_keys_unique)

    rows = [(1, "a"), (2, "b")]
    apply_changes_from_snapshot(target, _snapshots(spark, (1, rows)), ["id"], spark=spark)
    assert vouched()
    appended = pa.table({"id": pa.array([1], pa.int32()), "v": ["x"]})
    write_deltalake(target, appended, mode="append")
    assert not vouched()
    log = sorted(Path(target, "_delta_log").glob("*.json"))
    with pytest.raises(PySparkException) as caught:
        apply_changes_from_snapshot(target, _snapshots(spark, (2, rows)), ["id"], spark=spark)
    assert caught.value.getCondition() == "SNAPSHOT_CHANGES.DUPLICATE_KEY"
    assert caught.value.getMessageParameters()["side"] == "before"
    assert sorted(Path(target, "_delta_log").glob("*.json")) == log
    DeltaTable(target).delete("v = 'x'")
    assert not vouched()
    applied = apply_changes_from_snapshot(target, _snapshots(spark, (2, rows)), ["id"], spark=spark)
    assert applied == [AppliedSnapshot(2, 0, 0, 0)]
    assert vouched()  # the version the person left, counted by snapshot 2
    later = _snapshots(spark, (3, [(1, "c")]))
    assert [a.version for a in apply_changes_from_snapshot(target, later, ["id"], spark=spark)] == [
        3
    ]
    assert vouched()
    assert sorted_rows(read_table(target)) == [{"id": 1, "v": "c"}]


def test_a_bad_snapshot_writes_nothing(spark: SparkSession, tmp_path: Path) -> None:
    target = str(tmp_path / "mirror")
    apply_changes_from_snapshot(target, _snapshots(spark, (1, [(1, "a")])), ["id"], spark=spark)
    log = sorted((tmp_path / "mirror" / "_delta_log").glob("*.json"))
    for rows, condition in (
        ([(1, "a"), (1, "b")], "SNAPSHOT_CHANGES.DUPLICATE_KEY"),
        ([(None, "a")], "SNAPSHOT_CHANGES.NULL_KEY"),
    ):
        with pytest.raises(PySparkException) as caught:
            apply_changes_from_snapshot(target, _snapshots(spark, (2, rows)), ["id"], spark=spark)
        assert caught.value.getCondition() == condition
    assert sorted((tmp_path / "mirror" / "_delta_log").glob("*.json")) == log
    assert sorted_rows(read_table(target)) == [{"id": 1, "v": "a"}]


def test_a_change_feed_target_and_a_snapshot_target_do_not_mix(
    spark: SparkSession, tmp_path: Path
) -> None:
    feed = spark.createDataFrame([(1, "a", 1)], "id int, v string, seq long")
    fed, snapped = str(tmp_path / "fed"), str(tmp_path / "snapped")
    apply_changes(feed, fed, ["id"], "seq", except_column_list=["seq"])
    apply_changes_from_snapshot(snapped, _snapshots(spark, (1, [(1, "a")])), ["id"], spark=spark)
    with pytest.raises(PySparkException) as caught:
        apply_changes_from_snapshot(fed, _snapshots(spark, (2, [(1, "b")])), ["id"], spark=spark)
    assert caught.value.getCondition() == "APPLY_CHANGES.SOURCE_KIND_MISMATCH"
    with pytest.raises(PySparkException) as caught:
        apply_changes(
            feed.selectExpr("id", "'b' as v", "2L as seq"),
            snapped,
            ["id"],
            "seq",
            except_column_list=["seq"],
        )
    assert caught.value.getCondition() == "APPLY_CHANGES.SOURCE_KIND_MISMATCH"
    assert sorted_rows(read_table(fed)) == [{"id": 1, "v": "a"}]
    assert sorted_rows(read_table(snapped)) == [{"id": 1, "v": "a"}]


def test_a_stop_between_the_two_commits_is_run_again_exactly(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The state's commit of snapshot 2 removed (as if the run stopped before it): run
    again, snapshot 2 is compared with the target as snapshot 1 left it, so the state
    records the same changes; another version first is refused by name."""
    target = str(tmp_path / "history")
    state = target + "__apply_changes_state"
    apply_changes_from_snapshot(
        target,
        _snapshots(spark, (1, [(1, "a"), (2, "b")]), (2, [(1, "A"), (3, "c")])),
        ["id"],
        stored_as_scd_type=2,
        spark=spark,
    )
    commits = sorted((Path(state) / "_delta_log").glob("*.json"))
    commits[-1].unlink()  # the state's commit of snapshot 2
    with pytest.raises(PySparkException) as caught:
        apply_changes_from_snapshot(
            target,
            _snapshots(spark, (3, [(1, "A")])),
            ["id"],
            stored_as_scd_type=2,
            spark=spark,
        )
    assert caught.value.getCondition() == "APPLY_CHANGES.SNAPSHOT_INTERRUPTED"
    done = apply_changes_from_snapshot(
        target,
        _snapshots(spark, (2, [(1, "A"), (3, "c")]), (3, [(1, "A")])),
        ["id"],
        stored_as_scd_type=2,
        spark=spark,
    )
    assert [d.version for d in done] == [2, 3]
    rows = read_table(target).to_pylist()
    assert len(rows) == 4
    assert {(r["id"], r["v"], r["__START_AT"], r["__END_AT"]) for r in rows} == {
        (1, "a", 1, 2),
        (1, "A", 2, None),
        (2, "b", 1, 2),
        (3, "c", 2, 3),
    }


@pytest.mark.parametrize(("lost", "scd_type"), [("stopped", 2), ("deleted", 1)])
def test_a_snapshot_given_again_must_be_the_one_the_target_received(
    spark: SparkSession, tmp_path: Path, scd_type: int, lost: str
) -> None:
    """The target holds a snapshot its state does not: the apply stopped between its two
    commits, or the state was deleted after the first snapshot, which looks the same. The
    snapshot is applied again and its changes go to the state, so other rows than the
    target received are refused by name, with nothing written; the same rows go on exactly
    as a run that lost nothing."""
    import shutil

    def run(into: str, *snapshots: tuple[int, list[tuple[Any, ...]]]) -> list[AppliedSnapshot]:
        return apply_changes_from_snapshot(
            into, _snapshots(spark, *snapshots), ["id"], stored_as_scd_type=scd_type, spark=spark
        )

    target = str(tmp_path / "target")
    state = target + "__apply_changes_state"
    given = [(1, [(1, "a"), (2, "b")]), (2, [(1, "A"), (3, "c")])]
    if lost == "deleted":
        given = given[:1]
    run(target, *given)
    if lost == "deleted":
        shutil.rmtree(state)
    else:
        sorted((Path(state) / "_delta_log").glob("*.json"))[-1].unlink()

    def logs() -> list[list[str]]:
        return [sorted(p.name for p in Path(t).glob("_delta_log/*")) for t in (target, state)]

    before = logs()
    again, rows = given[-1]
    with pytest.raises(PySparkException) as caught:
        run(target, (again, [*rows[:-1], (rows[-1][0], "other")]))
    assert caught.value.getCondition() == "APPLY_CHANGES.SNAPSHOT_GIVEN_AGAIN_DIFFERS"
    assert caught.value.getMessageParameters()["count"] == "1"
    assert "full_refresh=True" in str(caught.value)
    assert logs() == before
    later = [(3, [(1, "A"), (4, "d")]), (4, [(4, "D")])]
    assert [d.version for d in run(target, (again, rows), *later)] == [again, 3, 4]
    fresh = str(tmp_path / "fresh")
    run(fresh, *given, *later)
    assert sorted_rows(read_table(target)) == sorted_rows(read_table(fresh))


def test_a_column_added_or_dropped_with_schema_evolution(
    spark: SparkSession, tmp_path: Path
) -> None:
    target = str(tmp_path / "mirror")
    apply_changes_from_snapshot(
        target, _snapshots(spark, (1, [(1, "a"), (2, "b")])), ["id"], spark=spark
    )
    wider = spark.createDataFrame([(1, "a", 10), (2, "b", None)], "id int, v string, w int")
    with pytest.raises(PySparkException) as caught:
        apply_changes_from_snapshot(
            target, lambda last: None if last == 2 else (wider, 2), ["id"], spark=spark
        )
    assert "w" in str(caught.value)
    assert sorted_rows(read_table(target)) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    done = apply_changes_from_snapshot(
        target,
        lambda last: None if last == 2 else (wider, 2),
        ["id"],
        spark=spark,
        schema_evolution=True,
    )
    assert done == [AppliedSnapshot(2, 1, 1, 1)]  # only the key whose new column has a value
    assert sorted_rows(read_table(target)) == [
        {"id": 1, "v": "a", "w": 10},
        {"id": 2, "v": "b", "w": None},
    ]
    narrower = spark.createDataFrame([(1, 10), (2, None)], "id int, w int")
    apply_changes_from_snapshot(
        target,
        lambda last: None if last == 3 else (narrower, 3),
        ["id"],
        spark=spark,
        schema_evolution=True,
    )
    assert sorted_rows(read_table(target)) == [
        {"id": 1, "v": None, "w": 10},
        {"id": 2, "v": None, "w": None},
    ]


def test_a_target_or_state_deleted_by_hand_is_refused_with_the_way_out_that_works(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Each refusal names a full refresh, and one makes both tables anew from the source's
    snapshots (a function asked from None again); later runs go on from the refresh."""
    import shutil

    from deltalake import DeltaTable

    target = str(tmp_path / "mirror")
    state = target + "__apply_changes_state"
    first = _snapshots(spark, (1, [(1, "a"), (2, "b")]), (2, [(1, "A"), (2, "b")]))
    apply_changes_from_snapshot(target, first, ["id"], spark=spark)

    shutil.rmtree(target)
    with pytest.raises(PySparkException) as caught:
        apply_changes_from_snapshot(target, _snapshots(spark, (3, [(3, "c")])), ["id"], spark=spark)
    assert caught.value.getCondition() == "APPLY_CHANGES.SNAPSHOT_TARGET_MISSING"
    assert "full_refresh=True" in str(caught.value)
    assert not Path(target).exists()
    asked: list[int | None] = []

    def from_the_start(last: int | None) -> tuple[DataFrame, int] | None:
        asked.append(last)
        return None if last else (spark.createDataFrame([(3, "c")], "id int, v string"), 1)

    done = apply_changes_from_snapshot(
        target, from_the_start, ["id"], spark=spark, full_refresh=True
    )
    assert (done, asked) == ([AppliedSnapshot(1, 1, 1, 1)], [None, 1])
    assert sorted_rows(read_table(target)) == [{"id": 3, "v": "c"}]
    apply_changes_from_snapshot(target, _snapshots(spark, (4, [(3, "C")])), ["id"], spark=spark)

    shutil.rmtree(state)
    log = sorted((Path(target) / "_delta_log").glob("*.json"))
    # The state's loss is the first thing said, for the next snapshot as for the last again
    # (not that a snapshot was interrupted: its way out would fail next).
    for version in (5, 4):
        with pytest.raises(PySparkException) as caught:
            apply_changes_from_snapshot(
                target, _snapshots(spark, (version, [(3, "C")])), ["id"], spark=spark
            )
        assert caught.value.getCondition() == "APPLY_CHANGES.SNAPSHOT_STATE_MISSING"
        assert "full_refresh=True" in str(caught.value)
    assert sorted((Path(target) / "_delta_log").glob("*.json")) == log
    refresh = _snapshots(spark, (5, [(5, "e"), (3, "C")]))
    assert apply_changes_from_snapshot(target, refresh, ["id"], spark=spark, full_refresh=True)
    assert sorted_rows(read_table(target)) == [{"id": 3, "v": "C"}, {"id": 5, "v": "e"}]
    # Another writer's commits to both tables after the refresh (none records an outcome)
    # change nothing of where the writer stands.
    for table in (target, state):
        before = DeltaTable(table).version()
        DeltaTable(table).alter.set_table_properties(
            {"delta.logRetentionDuration": "interval 60 days"}
        )
        assert DeltaTable(table).version() > before, table
    # Compared with what the refresh made: one change, the key gone.
    done = apply_changes_from_snapshot(
        target, _snapshots(spark, (6, [(5, "e")])), ["id"], spark=spark
    )
    assert done == [AppliedSnapshot(6, 1, 1, 0)]
    assert sorted_rows(read_table(target)) == [{"id": 5, "v": "e"}]


@pytest.mark.parametrize("scd_type", [1, 2])
def test_a_full_refresh_stopped_between_its_two_commits_is_refused_until_run_again(
    spark: SparkSession, tmp_path: Path, scd_type: int
) -> None:
    """The refresh's state commit removed (as if it stopped before it): the target holds
    the refresh's rows and the state the old ones, so the next snapshot is refused by
    name, and the refresh run again gives the target the refresh's snapshot alone, then
    goes on from it."""
    target = str(tmp_path / "history")
    state = target + "__apply_changes_state"
    old = _snapshots(spark, (1, [(1, "a"), (2, "b")]), (2, [(1, "A"), (2, "b")]))
    apply_changes_from_snapshot(target, old, ["id"], stored_as_scd_type=scd_type, spark=spark)
    refresh = _snapshots(spark, (7, [(1, "x")]))
    apply_changes_from_snapshot(
        target, refresh, ["id"], stored_as_scd_type=scd_type, spark=spark, full_refresh=True
    )
    sorted((Path(state) / "_delta_log").glob("*.json"))[-1].unlink()
    with pytest.raises(PySparkException) as caught:
        apply_changes_from_snapshot(
            target,
            _snapshots(spark, (8, [(1, "y")])),
            ["id"],
            stored_as_scd_type=scd_type,
            spark=spark,
        )
    assert caught.value.getCondition() == "APPLY_CHANGES.SNAPSHOT_REFRESH_INTERRUPTED"
    assert caught.value.getMessageParameters() == {"path": target}
    again = _snapshots(spark, (7, [(1, "x")]), (8, [(1, "y"), (3, "z")]))
    done = apply_changes_from_snapshot(
        target, again, ["id"], stored_as_scd_type=scd_type, spark=spark, full_refresh=True
    )
    assert [d.version for d in done] == [7, 8]
    got = sorted_rows(read_table(target))
    if scd_type == 1:
        assert got == [{"id": 1, "v": "y"}, {"id": 3, "v": "z"}]
    else:
        assert got == [
            {"id": 1, "v": "x", "__START_AT": 7, "__END_AT": 8},
            {"id": 1, "v": "y", "__START_AT": 8, "__END_AT": None},
            {"id": 3, "v": "z", "__START_AT": 8, "__END_AT": None},
        ]


def test_a_dataframe_and_a_folder_of_dumps_in_any_format_are_snapshots(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A batch DataFrame, and a path read in the format given, are each the next snapshot;
    a streaming DataFrame, or a format with a source function, is refused by name."""
    import pyarrow.parquet as pq

    target = str(tmp_path / "mirror")
    first = spark.createDataFrame([(1, "a"), (2, "b")], "id int, v string")
    assert apply_changes_from_snapshot(target, first, ["id"], spark=spark) == [
        AppliedSnapshot(1, 2, 2, 2)
    ]
    dump = tmp_path / "dump-2"
    dump.mkdir()
    pq.write_table(
        pa.table({"id": pa.array([2, 3], pa.int32()), "v": ["B", "c"]}), dump / "a.parquet"
    )
    done = apply_changes_from_snapshot(
        target, str(dump), ["id"], source_format="parquet", spark=spark
    )
    assert done == [AppliedSnapshot(2, 3, 3, 2)]
    assert sorted_rows(read_table(target)) == [{"id": 2, "v": "B"}, {"id": 3, "v": "c"}]

    stream = spark.readStream.format("rate").load()
    for source, extra, parameter in (
        (stream, {}, "source"),
        (_snapshots(spark), {"source_format": "parquet"}, "source_format"),
    ):
        with pytest.raises(PySparkException) as caught:
            apply_changes_from_snapshot(target, source, ["id"], spark=spark, **extra)
        assert caught.value.getCondition() == "APPLY_CHANGES.INVALID_PARAMETER"
        assert caught.value.getMessageParameters()["parameter"] == parameter


@pytest.mark.parametrize(
    "named",
    [
        {"keys": ["idd"]},
        {"keys": ["id"], "column_list": ["id", "vv"]},
        {"keys": ["id"], "except_column_list": ["w"]},
    ],
)
def test_a_misspelt_column_is_named_before_anything_runs(
    spark: SparkSession, tmp_path: Path, named: dict[str, Any]
) -> None:
    """Our condition, naming the snapshot's own columns, not Spark's error about the
    diff's plan (whose helper columns mean nothing to a user)."""
    target = str(tmp_path / "mirror")
    with pytest.raises(PySparkException) as caught:
        apply_changes_from_snapshot(
            target, _snapshots(spark, (1, [(1, "a")])), spark=spark, **named
        )
    assert caught.value.getCondition() == "APPLY_CHANGES.UNKNOWN_COLUMN"
    parameter, wrong = next((k, v[-1]) for k, v in named.items() if v[-1] not in ("id",))
    assert caught.value.getMessageParameters() == {
        "parameter": parameter,
        "column": wrong,
        "source": "the snapshot",
        "columns": "id, v",
    }
    assert "__spark_cdc" not in str(caught.value)
    assert not Path(target).exists()
