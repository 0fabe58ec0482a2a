"""delta_changelog on column-mapping tables (``name`` and ``id`` modes): the fixture written
by Delta Spark, and tables written by hand following the protocol with a rename, a drop and
an add after the rename, batch and streaming. delta-rs snapshots (which apply column
mapping) are the reference at every version; its ``load_cdf`` refuses column mapping."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tests.support.changelog_invariants import (
    assert_every_version,
    assert_stream_equals_batch,
    by_version,
)
from tests.support.delta_cm_tables import CmTable
from tests.support.delta_dv_tables import rs_snapshot
from tests.support.delta_fixtures import copy_fixture
from tests.support.delta_tables import apply_changes

CHANGELOG = [
    StructField("_change_type", StringType(), False),
    StructField("_commit_version", LongType(), False),
    StructField("_commit_timestamp", TimestampType(), False),
]
META = [f.name for f in CHANGELOG]


def test_name_mode_fixture_batch_and_stream(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    path = copy_fixture(tmp_path, "cdf-column-mapping-name-mode")
    df = spark.read.format("delta_changelog").option("startingVersion", 0).load(path)
    assert df.schema == StructType(
        [
            StructField("id", LongType()),
            StructField("name", StringType()),
            StructField("value", DoubleType()),
            *CHANGELOG,
        ]
    )
    assert_every_version(spark, path, "id")
    assert_stream_equals_batch(spark, path, "id", query_name, startingVersion=0)


def _history(table: CmTable) -> None:
    """v0 create, v1-v2 appends, v3 rename name->full_name, v4 append, v5 drop info,
    v6 add note, v7 append, v8 copy-on-write delete of id 1."""
    info = {"city": "Paris", "zip": 75001}
    _, first = table.append([{"id": 1, "name": "a", "info": info}, {"id": 2, "name": "b"}])
    table.append([{"id": 3, "name": "c", "info": {"city": "Lyon", "zip": None}}], part="q")
    table.rename("name", "full_name")
    table.append([{"id": 4, "full_name": "d", "info": {"city": "Nice", "zip": 6000}}])
    table.drop("info")
    table.add_column("note", "string")
    table.append([{"id": 5, "full_name": "e", "note": "n"}])
    table.replace(first, [{"id": 2, "full_name": "b"}])


def _snapshot(path: str, version: int, columns: list[str]) -> Counter[tuple[Any, ...]]:
    """delta-rs's snapshot under the latest names (full_name was name before v3)."""
    older = [c if c != "full_name" or version >= 3 else "name" for c in columns]
    return rs_snapshot(path, version, older)


@pytest.mark.parametrize("mode", ["name", "id"])
def test_rename_drop_add_batch_keeps_the_invariant(
    spark: SparkSession, tmp_path: Path, mode: str
) -> None:
    path = str(tmp_path / mode)
    _history(CmTable(path, mode))
    df = spark.read.format("delta_changelog").option("startingVersion", 0).load(path)
    assert [f.name for f in df.schema.fields] == ["id", "full_name", "part", "note", *META]
    from spark_cdc import ChangelogReader

    processed = ChangelogReader(spark).options(rowId="id", computeUpdates=True).changes(path)
    columns = [c for c in processed.columns if c not in META]
    changes = by_version([r.asDict() for r in processed.collect()])
    before: Counter[tuple[Any, ...]] = Counter()
    for version in range(DeltaTable(path).version() + 1):
        after = _snapshot(path, version, columns)
        assert apply_changes(before, changes[version], columns) == after, f"version {version}"
        before = after
    # Before the rename, a read up to version 2 has the old names and the nested column.
    early = spark.read.format("delta_changelog").options(startingVersion=0, endingVersion=2)
    got = early.load(path)
    assert [f.name for f in got.schema.fields] == ["id", "name", "part", "info", *META]
    assert sorted((r.id, r.name, r.part, r.info and tuple(r.info)) for r in got.collect()) == [
        (1, "a", "p", ("Paris", 75001)),
        (2, "b", "p", None),
        (3, "c", "q", ("Lyon", None)),
    ]


def _rows(folder: Path) -> list[dict[str, Any]]:
    found = []
    for file in sorted(folder.glob("**/*.json")):
        for line in file.read_text().splitlines():
            row = json.loads(line)
            row.pop("_commit_timestamp")
            found.append(row)
    return sorted(found, key=lambda r: json.dumps(r, sort_keys=True))


@pytest.mark.parametrize("mode", ["name", "id"])
def test_stream_fails_on_rename_and_drop_then_restarts_with_the_new_schema(
    spark: SparkSession, tmp_path: Path, mode: str
) -> None:
    path, out, checkpoint = (str(tmp_path / n) for n in (mode, "out", "cp"))
    table = CmTable(path, mode)
    info = {"city": "Paris", "zip": 75001}
    table.append([{"id": 1, "name": "a", "info": info}, {"id": 2, "name": "b"}])

    def start() -> Any:
        stream = spark.readStream.format("delta_changelog").option("startingVersion", 0)

        def write(batch: DataFrame, batch_id: int) -> None:
            batch.write.mode("append").json(f"{out}/{batch_id}")

        writer = stream.load(path).writeStream.foreachBatch(write)
        return writer.option("checkpointLocation", checkpoint).start()

    def fails_at(query: Any, version: int) -> None:
        with pytest.raises(StreamingQueryException, match=rf"SCHEMA_CHANGED.*Version {version} "):
            query.processAllAvailable()
            query.awaitTermination(120)
        query.stop()

    query = start()
    query.processAllAvailable()
    table.append([{"id": 3, "name": "c"}])
    renamed = table.rename("name", "full_name")
    table.append([{"id": 4, "full_name": "d", "info": {"city": "Nice", "zip": 6000}}])
    fails_at(query, renamed)
    assert {r["id"] for r in _rows(Path(out))} == {1, 2, 3}  # all before the rename
    query = start()  # the restart reads on with the new names, without any option
    query.processAllAvailable()
    dropped = table.drop("info")
    fails_at(query, dropped)
    query = start()
    query.processAllAvailable()
    added = table.add_column("note", "string")
    table.append([{"id": 5, "full_name": "e", "note": "n"}])
    fails_at(query, added)
    query = start()
    query.processAllAvailable()
    query.stop()

    def batch(first: int, last: int) -> list[dict[str, Any]]:
        read = spark.read.format("delta_changelog").options(
            startingVersion=first, endingVersion=last
        )
        return [
            {k: v for k, v in r.asDict(recursive=True).items() if v is not None}
            for r in read.load(path).drop("_commit_timestamp").collect()
        ]

    expected = batch(0, renamed - 1) + batch(renamed, dropped - 1) + batch(dropped, added - 1)
    expected += batch(added, DeltaTable(path).version())
    assert _rows(Path(out)) == sorted(expected, key=lambda r: json.dumps(r, sort_keys=True))
