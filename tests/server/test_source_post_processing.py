"""Post-processing inside delta_changelog (``postProcessing=source``, the default) against the
client-built plan (``postProcessing=client``): the same tables give the same rows and the
same schema, batch and streaming, and the same errors reach the client.
"""

from __future__ import annotations

import math
import uuid
from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType
from spark_cdc import ChangelogReader

from tests.support.delta_dv_scenarios import dv_scenario
from tests.support.delta_fixtures import copy_fixture
from tests.support.delta_tables import (
    SCENARIOS,
    append_commit,
    big_rows,
    first_action,
    rows,
)
from tests.support.feeds import collect_rows, drain, run_stream
from tests.support.spark_version import ADMISSION_CONTROL, SPARK

OPTION_SETS = {
    "dropCarryovers, no rowId": {},
    "dropCarryovers": {"rowId": "id"},
    "computeUpdates": {"rowId": "id", "computeUpdates": True},
    "netChanges": {"rowId": "id", "deduplicationMode": "netChanges"},
    "netChanges + computeUpdates": {
        "rowId": "id",
        "deduplicationMode": "netChanges",
        "computeUpdates": True,
    },
}

STREAM_PLAN_NULLABLE = SPARK >= (4, 3)  # the streaming aggregate reports every column nullable


def _spelt(values: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows with floats by spelling (NaN equals itself, -0.0 differs from 0.0), sorted."""

    def spell(value: Any) -> Any:
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, (list, tuple)):
            return tuple(spell(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, spell(v)) for k, v in value.items())
        if hasattr(value, "asDict"):
            return spell(tuple(value))
        return value

    return sorted((spell(r) for r in values), key=repr)


def _read(
    spark: SparkSession, path: str, where: str, streaming: bool, **options: Any
) -> tuple[StructType, list[tuple[Any, ...]]]:
    reader = ChangelogReader(spark, streaming=streaming)
    df = reader.options(postProcessing=where, **options).changes(path)
    if not streaming:
        return df.schema, _spelt(collect_rows(df))
    out = run_stream(df, f"paths_{uuid.uuid4().hex[:10]}")
    return df.schema, _spelt(collect_rows(out))


def assert_paths_agree(
    spark: SparkSession, path: str, streaming: bool, **options: Any
) -> list[tuple[Any, ...]]:
    source = _read(spark, path, "source", streaming, **options)
    client = _read(spark, path, "client", streaming, **options)
    assert source[0] == client[0], "schemas differ"
    assert source[1] == client[1], "rows differ"
    return source[1]


@pytest.mark.parametrize(
    "options", ["dropCarryovers, no rowId", "computeUpdates", "netChanges + computeUpdates"]
)
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_batch_reads_agree_on_every_scenario(
    spark: SparkSession, tmp_path: Path, scenario: str, options: str
) -> None:
    path = str(tmp_path / scenario)
    SCENARIOS[scenario](path)
    assert_paths_agree(spark, path, False, **OPTION_SETS[options])


@pytest.mark.parametrize(
    ("scenario", "options"),
    [
        # the commit split over micro-batches and parts, with each option set
        ("one_huge_commit", "dropCarryovers, no rowId"),
        ("one_huge_commit", "computeUpdates"),
        ("one_huge_commit", "netChanges"),
        ("dml_cdf_partitioned", "computeUpdates"),
        ("schema_evolution", "netChanges"),
    ],
)
def test_streams_agree(spark: SparkSession, tmp_path: Path, scenario: str, options: str) -> None:
    path = str(tmp_path / scenario)
    SCENARIOS[scenario](path)
    assert_paths_agree(spark, path, True, maxFilesPerTrigger=1, **OPTION_SETS[options])


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "stream"])
@pytest.mark.parametrize("scenario", ["dml", "restore_rows", "partitioned"])
def test_deletion_vector_tables_agree(
    spark: SparkSession, tmp_path: Path, scenario: str, streaming: bool
) -> None:
    """DML that only marks rows: an update is a newly marked row plus an added one."""
    path = dv_scenario(tmp_path, scenario)
    assert_paths_agree(spark, path, streaming, startingVersion=0, **OPTION_SETS["computeUpdates"])


@pytest.mark.parametrize(
    ("name", "row_id"),
    [
        ("cdf-table-with-dv", "value"),
        ("table-with-dv-small", "value"),
        ("cdf-column-mapping-name-mode", "id"),
        ("checkpoint-cdf-table", "id"),
    ],
)
def test_tables_written_by_delta_spark_agree(
    spark: SparkSession, tmp_path: Path, name: str, row_id: str
) -> None:
    path = copy_fixture(tmp_path, name)
    options = {"rowId": row_id, "startingVersion": "earliest"}
    assert_paths_agree(spark, path, False, **options, computeUpdates=True)
    assert_paths_agree(spark, path, False, **options, deduplicationMode="netChanges")
    assert_paths_agree(spark, path, True, **options, computeUpdates=True)


# -- every kind of value ------------------------------------------------------------------------

KINDS = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("key", pa.struct([pa.field("k", pa.int32(), False)]), False),
        pa.field("d", pa.float64()),
        pa.field("f", pa.float32()),
        pa.field("m", pa.map_(pa.string(), pa.int64())),
        pa.field("a", pa.list_(pa.float64())),
        pa.field("b", pa.binary()),
        pa.field("t", pa.timestamp("us", tz="UTC")),
        pa.field("nt", pa.timestamp("us")),
        pa.field("dt", pa.date32()),
        pa.field("dec", pa.decimal128(12, 3)),
        pa.field("n", pa.struct([("x", pa.int16()), ("y", pa.list_(pa.string()))])),
    ]
)
T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)


def _kind_row(id: int, **changes: Any) -> dict[str, Any]:
    base = {
        "id": id,
        "key": {"k": id},
        "d": 1.5,
        "f": 2.5,
        "m": [("a", 1), ("b", 2)],
        "a": [1.0, None],
        "b": b"\x00\x01",
        "t": T0,
        "nt": datetime(2024, 5, 1),
        "dt": date(2024, 5, 1),
        "dec": Decimal("1.250"),
        "n": {"x": 1, "y": ["p", None]},
    }
    return {**base, **changes}


# Version 1 rewrites the file: per id, whether its new row is a carry-over under the client's
# rules (compared through Spark's to_json images).
REWRITE = {
    0: ({}, True),  # the same row
    1: ({"m": [("b", 2), ("a", 1)]}, False),  # a map's entries in another order
    2: ({"d": -0.0}, False),  # from 1.5 to -0.0 ...
    3: ({"d": math.nan}, False),
    4: ({"b": None}, False),
    5: ({"t": datetime(2024, 5, 1, 12, 0, 0, 123457, tzinfo=timezone.utc)}, False),  # +1 µs
    6: ({"n": None}, False),
    7: ({"n": {"x": None, "y": None}}, False),
    8: ({"a": []}, False),
    9: ({"dec": Decimal("1.251")}, False),
    10: ({"f": math.nan}, False),
}


def kinds_table(path: str) -> None:
    """v0 writes eleven rows; v1 rewrites their file copy-on-write (see REWRITE) and drops
    id 11; v2 rewrites again where v1 left -0.0 and NaN: carry-overs only if NaN equals NaN
    and -0.0 equals itself."""
    first = [_kind_row(i) for i in range(12)]
    write_deltalake(path, pa.Table.from_pylist(first, KINDS))
    second = [_kind_row(i, **REWRITE[i][0]) for i in REWRITE]
    written = _rewrite(path, second, 1, first_action(path, "add")["path"])
    third = [*second[:2], _kind_row(2, d=0.0), *second[3:]]  # id 2: -0.0 -> 0.0, an update
    _rewrite(path, third, 2, written)


def _rewrite(path: str, new_rows: list[dict[str, Any]], version: int, old: str) -> str:
    """A commit removing file ``old`` and adding one holding ``new_rows``; its name."""
    name = f"part-{uuid.uuid4()}.parquet"
    pq.write_table(pa.Table.from_pylist(new_rows, KINDS), Path(path) / name)
    actions: list[dict[str, Any]] = [
        {"remove": {"path": old, "deletionTimestamp": 1_800_000_000_000, "dataChange": True}}
    ]
    size = (Path(path) / name).stat().st_size
    actions.append(
        {
            "add": {
                "path": name,
                "partitionValues": {},
                "size": size,
                "modificationTime": 1_800_000_000_000 + version,
                "dataChange": True,
            }
        }
    )
    append_commit(path, actions, {"timestamp": 1_800_000_000_000 + version * 1000})
    return name


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "stream"])
def test_every_kind_of_value_is_compared_as_the_client_compares_it(
    spark: SparkSession, tmp_path: Path, streaming: bool
) -> None:
    path = str(tmp_path / "kinds")
    kinds_table(path)
    got = assert_paths_agree(
        spark, path, streaming, rowId="id", computeUpdates=True, startingVersion=1
    )
    changes = sorted({(r[0], r[-3], r[-2]) for r in got})  # id, change type, version
    updates = [i for i, (_, carryover) in REWRITE.items() if not carryover]
    expected = {(i, t, 1) for i in updates for t in ("update_preimage", "update_postimage")}
    expected |= {(11, "delete", 1)}
    expected |= {(2, t, 2) for t in ("update_preimage", "update_postimage")}
    assert changes == sorted(expected)
    # Without a row id a row is its content: the same carry-overs, updates as delete+insert.
    assert_paths_agree(spark, path, streaming, startingVersion=1)


def test_not_null_columns_keep_their_nullability_as_each_plan_reports_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """On 4.3 a stream's post-processed columns are all reported nullable, nested ones too,
    by both paths; before 4.3, and in a batch, the table's NOT NULL stays (except
    _change_type under computeUpdates)."""
    path = str(tmp_path / "kinds")
    kinds_table(path)
    for streaming in (False, True):
        for options in ({}, {"rowId": "id", "computeUpdates": True}):
            source = ChangelogReader(spark, streaming=streaming).options(**options)
            client = ChangelogReader(spark, streaming=streaming).options(**options)
            got = source.changes(path).schema
            assert got == client.option("postProcessing", "client").changes(path).schema
            assert got["id"].nullable == (streaming and STREAM_PLAN_NULLABLE)
            assert got["key"].dataType["k"].nullable == (streaming and STREAM_PLAN_NULLABLE)


# -- errors -------------------------------------------------------------------------------------


def _condition(action: Any) -> tuple[str, dict[str, str]]:
    with pytest.raises(PySparkException) as caught:
        action()
    return caught.value.getCondition(), caught.value.getMessageParameters()


def _both_paths(spark: SparkSession, path: str, streaming: bool, **options: Any) -> list[Any]:
    found = []
    for where in ("source", "client"):
        df = ChangelogReader(spark, streaming=streaming).options(postProcessing=where, **options)
        out = df.changes(path)
        name = f"err_{uuid.uuid4().hex[:10]}"
        found.append(_condition(lambda out=out, name=name: _run(out, streaming, name)))
    return found


def _run(df: DataFrame, streaming: bool, name: str) -> None:
    if streaming:
        run_stream(df, name)
    else:
        df.collect()


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "stream"])
def test_a_row_id_changed_twice_in_a_commit_fails_alike(
    spark: SparkSession, tmp_path: Path, streaming: bool
) -> None:
    path = str(tmp_path / "twice")
    write_deltalake(path, rows(range(3)))
    write_deltalake(path, rows([7, 7]), mode="append")  # two inserts of id 7 in version 1
    source, client = _both_paths(spark, path, streaming, rowId="id", computeUpdates=True)
    condition = "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_MULTIPLE_CHANGES_PER_ROW_VERSION"
    assert source == client == (condition, {"version": "1", "deletes": "0", "inserts": "2"})
    # Only carry-over removal: two inserts pass, as in Spark.
    assert_paths_agree(spark, path, streaming, rowId="id")


def test_an_unknown_change_type_fails_alike(spark: SparkSession, tmp_path: Path) -> None:
    path = str(tmp_path / "bad_label")
    write_deltalake(path, rows(range(2)))
    name = f"_change_data/cdc-{uuid.uuid4()}.parquet"
    (Path(path) / "_change_data").mkdir()
    bad = rows([1]).append_column("_change_type", pa.array(["upsert"]))
    pq.write_table(bad, Path(path) / name)
    size = (Path(path) / name).stat().st_size
    append_commit(
        path,
        [{"cdc": {"path": name, "partitionValues": {}, "size": size, "dataChange": False}}],
    )
    source, client = _both_paths(spark, path, False, rowId="id")
    condition = "CHANGELOG_CONTRACT_VIOLATION.UNEXPECTED_CHANGE_TYPE"
    assert source == client == (condition, {"changeType": "upsert"})


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "stream"])
def test_a_row_id_the_table_lacks_or_a_reserved_column_fails_alike(
    spark: SparkSession, tmp_path: Path, streaming: bool
) -> None:
    """Whichever side post-processes, a row id the table lacks is named by the source, with
    the table's columns, while Spark resolves the relation (INVALID_CDC_OPTION, as the
    docs say), and a column of the reserved prefix by the client's plan."""
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(3)))
    found = _both_paths(spark, path, streaming, rowId="nope", computeUpdates=True)
    expected = {"option": "rowId", "value": "nope", "columns": "id, name, amount, part"}
    assert found == [("INVALID_CDC_OPTION.UNKNOWN_ROW_ID_COLUMN", expected)] * 2
    reserved = str(tmp_path / "reserved")
    write_deltalake(reserved, rows(range(3)).append_column("__spark_cdc_x", pa.array([1, 2, 3])))
    (source, _), (client, _) = _both_paths(spark, reserved, streaming, rowId="id")
    assert source == client and source.startswith("DATATYPE_MISMATCH")
    # Read directly, the source names the row id it cannot find the same way.
    direct = spark.read.format("delta_changelog").options(rowId="nope", computeUpdates="true")
    assert _condition(lambda: direct.load(path).collect()) == found[0]


def test_post_processing_option_is_checked(spark: SparkSession) -> None:
    reader = ChangelogReader(spark).option("postProcessing", "server")
    condition, parameters = _condition(lambda: reader.changes("/t"))
    assert condition == "INVALID_CDC_OPTION.INVALID_POST_PROCESSING"
    assert parameters == {"option": "postProcessing", "value": "server"}


# -- latency ------------------------------------------------------------------------------------


def test_a_stream_emits_each_commit_in_the_micro_batch_that_reads_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The client plan holds a commit until the watermark passes it (the next micro-batch);
    the source path has nothing to wait for."""
    if not ADMISSION_CONTROL:
        pytest.skip("one commit per micro-batch needs admission control (Spark 4.2+)")
    path = str(tmp_path / "t")
    SCENARIOS["dml"](path)
    options = {"rowId": "id", "computeUpdates": True, "maxFilesPerTrigger": 1}
    for where in ("source", "client"):
        reader = ChangelogReader(spark, streaming=True).options(postProcessing=where, **options)
        progress = drain(reader.options(startingVersion=0).changes(path), f"lat_{where}")
        read = [p["sources"][0]["numInputRows"] for p in progress]
        written = [p["sink"]["numOutputRows"] for p in progress]
        emitted = [out for n, out in zip(read, written, strict=True) if n]
        late = sum(out for n, out in zip(read, written, strict=True) if not n)
        assert len(emitted) > 1  # several commits, several micro-batches
        if where == "source":
            assert all(emitted) and late == 0
        else:
            assert emitted[0] == 0 and late > 0


def test_a_commit_split_into_buckets_and_spilled_parts_agrees(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A 6 MB copy-on-write commit on 4 cores with a 1 MB budget per task: bucket tasks,
    parts spilled to local disk, and the client plan give the same rows."""
    path = str(tmp_path / "big")
    write_deltalake(path, big_rows(range(150_000), 1))
    DeltaTable(path).update({"n": "n + 1"}, predicate="id % 10 = 3")
    assert_paths_agree(
        spark,
        path,
        False,
        rowId="id",
        computeUpdates=True,
        startingVersion=1,
        parallelism=4,
        resolveTaskBytes="1m",
    )
