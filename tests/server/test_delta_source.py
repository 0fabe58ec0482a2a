"""delta_changelog and ChangelogReader in batch, on real Delta tables written with delta-rs.

The key invariant, for every version v of every scenario: the post-processed changes of v
(carry-overs dropped, updates detected) applied to snapshot v-1 give exactly snapshot v.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from spark_cdc import ChangelogReader
from spark_cdc.server_plugin.changefeed.commit_timestamps import next_timestamp

from tests.support.delta_tables import (
    SCENARIOS,
    append_commit,
    apply_changes,
    dml,
    first_action,
    latest_version,
    log_cleaned_up_before_version_2,
    rows,
    snapshot,
)

META = ["_change_type", "_commit_version", "_commit_timestamp"]
TABLE_FIELDS = [
    StructField("id", LongType()),
    StructField("name", StringType()),
    StructField("amount", DoubleType()),
    StructField("part", StringType()),
]
RAW_SCHEMA = StructType(
    [
        *TABLE_FIELDS,
        StructField("_change_type", StringType(), False),
        StructField("_commit_version", LongType(), False),
        StructField("_commit_timestamp", TimestampType(), False),
    ]
)


def _by_version(changes: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for change in changes:
        grouped[change["_commit_version"]].append(change)
    return grouped


def _read(spark: SparkSession, path: str, **options: Any) -> list[dict[str, Any]]:
    return [r.asDict() for r in ChangelogReader(spark).options(**options).changes(path).collect()]


def _table(tmp_path: Path, scenario: str) -> str:
    path = str(tmp_path / scenario)
    SCENARIOS[scenario](path)
    return path


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_changes_of_every_version_turn_its_predecessor_into_it(
    spark: SparkSession, tmp_path: Path, scenario: str
) -> None:
    path = _table(tmp_path, scenario)
    df = ChangelogReader(spark).option("rowId", "id").option("computeUpdates", True).changes(path)
    columns = [c for c in df.columns if c not in META]
    changes = _by_version([r.asDict() for r in df.collect()])
    before = snapshot(path, 0, columns) - snapshot(path, 0, columns)
    stamps: list[Any] = []
    for version in range(latest_version(path) + 1):
        after = snapshot(path, version, columns)
        assert apply_changes(before, changes[version], columns) == after, f"version {version}"
        image = lambda c: tuple(c[k] for k in columns)  # noqa: E731
        deleted = {image(c) for c in changes[version] if c["_change_type"] == "delete"}
        inserted = {image(c) for c in changes[version] if c["_change_type"] == "insert"}
        assert not deleted & inserted, f"carry-over left in version {version}"
        stamps += sorted({c["_commit_timestamp"] for c in changes[version]})
        assert len({c["_commit_timestamp"] for c in changes[version]}) <= 1
        before = after
    assert stamps == sorted(set(stamps)), "commit timestamps must rise strictly with versions"


def test_raw_feed_schema_and_rows_of_an_update(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    dml(path)  # version 2 updates id 3 (amount 3.0 -> 30.0) in a file holding ids 0..5
    raw = spark.read.format("delta_changelog").option("startingVersion", 2)
    raw_df = raw.option("endingVersion", 2).load(path)
    assert raw_df.schema == RAW_SCHEMA
    got = sorted((r.id, r.amount, r._change_type) for r in raw_df.collect())
    unchanged = [(i, float(i)) for i in (0, 1, 2, 4, 5)]
    expected = [(i, a, k) for i, a in unchanged for k in ("delete", "insert")]
    expected += [(3, 3.0, "delete"), (3, 30.0, "insert")]
    assert got == sorted(expected)

    processed = ChangelogReader(spark).options(rowId="id", computeUpdates=True)
    out = processed.options(startingVersion=2, endingVersion=2).changes(path)
    assert out.schema.names == RAW_SCHEMA.names
    assert sorted((r.id, r.name, r.amount, r._change_type) for r in out.collect()) == [
        (3, "a3", 3.0, "update_preimage"),
        (3, "a3", 30.0, "update_postimage"),
    ]


def test_without_row_id_carry_overs_still_go(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    dml(path)
    got = _read(spark, path, startingVersion=2, endingVersion=3)
    assert sorted((c["id"], c["amount"], c["_change_type"], c["_commit_version"]) for c in got) == [
        (3, 3.0, "delete", 2),
        (3, 30.0, "insert", 2),
        (4, 4.0, "delete", 3),
    ]


@pytest.mark.parametrize("scenario", ["dml_cdf", "dml_cdf_partitioned"])
def test_cdf_tables_give_delta_rs_load_cdf_rows(
    spark: SparkSession, tmp_path: Path, scenario: str
) -> None:
    path = _table(tmp_path, scenario)
    ours = spark.read.format("delta_changelog").option("startingVersion", 0).load(path)
    ours_rows = [r.asDict() for r in ours.collect()]
    theirs = pa.table(DeltaTable(path).load_cdf(starting_version=0)).to_pylist()
    columns = [f.name for f in TABLE_FIELDS] + ["_change_type", "_commit_version"]
    key = lambda r: tuple(str(r[c]) for c in columns)  # noqa: E731
    assert sorted(map(key, ours_rows)) == sorted(map(key, theirs))
    recorded = {r["_commit_version"]: r["_commit_timestamp"] for r in theirs}
    previous = None
    for version in sorted(recorded):
        ms = int(recorded[version].timestamp() * 1000)
        previous = next_timestamp(ms, previous)
        got = {
            int(r["_commit_timestamp"].timestamp() * 1000)
            for r in ours_rows
            if r["_commit_version"] == version
        }
        assert got == {previous}


def test_version_and_timestamp_ranges(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    dml(path)
    everything = _read(spark, path, rowId="id")
    stamps = sorted({c["_commit_timestamp"] for c in everything})
    versions = lambda got: sorted({c["_commit_version"] for c in got})  # noqa: E731
    assert versions(_read(spark, path, startingVersion=2, endingVersion=4)) == [2, 3, 4]
    exclusive = dict(startingBoundInclusive=False, endingBoundInclusive=False)
    assert versions(_read(spark, path, startingVersion=1, endingVersion=4, **exclusive)) == [2, 3]
    assert versions(_read(spark, path, startingVersion=4, endingVersion=99)) == [4, 5]
    start, end = stamps[1].isoformat(), stamps[3].isoformat()  # server and client run in UTC
    got = _read(spark, path, startingTimestamp=start, endingTimestamp=end)
    assert versions(got) == [1, 2, 3]


@pytest.mark.parametrize(
    ("options", "condition"),
    [
        ({"startingVersion": 99}, "INVALID_CDC_OPTION.STARTING_VERSION_AFTER_LATEST"),
        ({"startingVersion": "latest"}, "INVALID_CDC_OPTION.LATEST_IN_BATCH"),
        ({"maxFilesPerTriger": 1}, "INVALID_CDC_OPTION.UNKNOWN_OPTION"),
        ({"maxBytesPerTrigger": "lots"}, "INVALID_CDC_OPTION.INVALID_SIZE"),
        ({"startingTimestamp": "2999-01-01 00:00:00Z"}, "STARTING_TIMESTAMP_AFTER_LATEST"),
    ],
)
def test_bad_requests_name_the_problem(
    spark: SparkSession, tmp_path: Path, options: dict[str, Any], condition: str
) -> None:
    path = str(tmp_path / "t")
    dml(path)
    with pytest.raises(Exception, match=condition.replace(".", r"\.")):
        ChangelogReader(spark).options(**options).changes(path).collect()


def test_source_options_are_checked_on_the_server_too(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    dml(path)
    for options, condition in [
        ({"startingVersion": 1, "startingTimestamp": "2024-01-01"}, "CONFLICTING_RANGE_TYPES"),
        ({"endingVersion": 1}, "MISSING_STARTING_VERSION"),
        ({"startingVersion": 3, "endingVersion": 1}, "INVALID_RANGE"),
        ({"startingTimestamp": "yesterday"}, "INVALID_TIMESTAMP"),
    ]:
        with pytest.raises(Exception, match=condition):
            spark.read.format("delta_changelog").options(**options).load(path).collect()


def test_not_a_delta_table(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(Exception, match=r"DELTA_CHANGELOG\.NOT_A_DELTA_TABLE.*plain"):
        ChangelogReader(spark).changes(str(tmp_path / "plain")).collect()


def test_an_unknown_column_mapping_mode_is_refused_by_name(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(3)))
    metadata = first_action(path, "metaData")
    metadata["configuration"] = {"delta.columnMapping.mode": "position"}
    append_commit(path, [{"metaData": metadata}])
    with pytest.raises(Exception, match=r"UNSUPPORTED_TABLE_FEATURE.*columnMapping.*position"):
        spark.read.format("delta_changelog").load(path).collect()


def test_vacuumed_files_fail_or_are_skipped(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(3)))
    write_deltalake(path, rows(range(10, 12)), mode="overwrite")
    DeltaTable(path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    read = spark.read.format("delta_changelog").option("startingVersion", 0)
    with pytest.raises(Exception, match=r"DELTA_CHANGELOG\.DATA_LOSS.*version 0"):
        read.load(path).collect()
    kept = read.option("failOnDataLoss", False).load(path).collect()
    assert sorted((r.id, r._change_type, r._commit_version) for r in kept) == [
        (10, "insert", 1),
        (11, "insert", 1),
    ]


def test_cleaned_up_log_fails_or_is_skipped(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    log_cleaned_up_before_version_2(path)
    read = spark.read.format("delta_changelog").option("startingVersion", 0)
    with pytest.raises(Exception, match=r"DATA_LOSS.*Commit 0 .*next available commit is 2"):
        read.load(path).collect()
    kept = read.option("failOnDataLoss", "false").load(path).collect()
    assert sorted((r.id, r._commit_version) for r in kept) == [(2, 2), (3, 3)]


def test_commit_timestamps_prefer_in_commit_time_and_never_go_back(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "t")
    write_deltalake(path, rows([0]))
    base = 1_900_000_000_000  # later than anything delta-rs wrote just now
    for i, info in enumerate(
        [
            {"timestamp": base - 5, "inCommitTimestamp": base},  # in-commit time wins
            {"timestamp": base - 100},  # behind its predecessor: predecessor + 1 ms
            {"timestamp": base - 50},  # still behind: + 1 ms again
            {"timestamp": base + 10},  # ahead again: as recorded
        ],
        start=1,
    ):
        add = dict(first_action(path, "add"), path=_copy_data_file(path, i))
        append_commit(path, [{"add": add}], info)
    got = spark.read.format("delta_changelog").option("startingVersion", 1).load(path)
    stamps = sorted(
        (r._commit_version, int(r._commit_timestamp.timestamp() * 1000)) for r in got.collect()
    )
    assert stamps == [(1, base), (2, base + 1), (3, base + 2), (4, base + 10)]


def _copy_data_file(path: str, i: int) -> str:
    source = Path(path) / first_action(path, "add")["path"]
    target = source.with_name(f"copy-{i}.parquet")
    shutil.copy(source, target)
    return str(target.relative_to(path))
