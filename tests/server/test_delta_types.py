"""Column types Delta Spark writes that delta-rs cannot: ``variant`` (tables with the
``variantType`` and ``variantType-preview`` features) and ``void``. Served as Spark reads
them, checked against the data files themselves, also through the row-level passes (one
commit rewrites a file, so carry-overs and an update meet a variant and a void column).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql.types import VariantVal
from spark_cdc import ChangelogReader

from tests.support.delta_fixtures import CONFORMANCE, copy_fixture
from tests.support.delta_tables import commit_file

CHANGELOG = ["_change_type", "_commit_version", "_commit_timestamp"]
VARIANT_FILE = pa.struct(
    [pa.field("value", pa.binary(), False), pa.field("metadata", pa.binary(), False)]
)
EMPTY_METADATA = b"\x01\x00\x00"  # version 1, no keys


def int8_variant(value: int) -> dict[str, bytes]:
    """A variant holding one int8 (the Variant binary encoding: primitive type 3)."""
    return {"value": bytes([3 << 2, value]), "metadata": EMPTY_METADATA}


def conformance(tmp_path: Path, name: str) -> str:
    return copy_fixture(tmp_path, f"delta/golden/{name}", CONFORMANCE)


def added_rows(path: str, version: int) -> list[dict[str, Any]]:
    """The rows of the files commit ``version`` adds, read straight from parquet."""
    rows: list[dict[str, Any]] = []
    for line in commit_file(path, version).read_text().splitlines():
        add = json.loads(line).get("add")
        if add:
            rows += pq.read_table(Path(path) / add["path"]).to_pylist()
    return rows


def plain(value: Any) -> Any:
    """A collected value as pyarrow's ``to_pylist`` gives the file's: rows and maps as
    dicts, variants as their value and metadata bytes. (``toArrow()`` would be shorter, but
    PySpark's client fails on a NULL variant inside an array.)"""
    if isinstance(value, VariantVal):
        return {"value": value.value, "metadata": value.metadata}
    if isinstance(value, Row):
        return {k: plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) for v in value):  # a map, from pyarrow
            return {k: plain(v) for k, v in value}
        return [plain(v) for v in value]
    return value


def feed_rows(spark: SparkSession, path: str, **options: Any) -> list[dict[str, Any]]:
    """The change feed as plain values."""
    reader = ChangelogReader(spark).options(startingVersion=0, **options)
    return [plain(r) for r in reader.changes(path).drop("_commit_timestamp").collect()]


ORDER = {"delete": 0, "update_preimage": 1, "update_postimage": 2, "insert": 3}


def by_id(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r.get("_commit_version", 0), r["id"], ORDER[r["_change_type"]])

    return sorted((plain(r) for r in rows), key=key)


@pytest.mark.parametrize("name", ["variant_basic", "spark-variant-checkpoint"])
def test_variant_tables_are_served_as_spark_reads_them(
    spark: SparkSession, tmp_path: Path, name: str
) -> None:
    """Every commit's inserts are the rows of the files it adds, variants byte for byte,
    nested in arrays, structs and maps too; the columns are Spark's variant type."""
    path = conformance(tmp_path, name)
    df = ChangelogReader(spark).options(startingVersion=0).changes(path)
    variants = [f.name for f in df.schema.fields if "variant" in f.dataType.simpleString()]
    assert variants, df.schema
    assert df.schema[variants[0]].dataType.typeName() in ("variant", "array", "struct", "map")
    got = feed_rows(spark, path)
    versions = sorted({r["_commit_version"] for r in got} | {0})
    expected = [
        {**row, "_change_type": "insert", "_commit_version": v}
        for v in range(versions[-1] + 1)
        for row in added_rows(path, v)
    ]
    assert by_id(got) == by_id(expected)


def write_version(path: str, version: int, actions: list[dict[str, Any]]) -> None:
    info = {"commitInfo": {"timestamp": 1_800_000_000_000 + version, "operation": "MANUAL"}}
    lines = [json.dumps(a) for a in [info, *actions]]
    commit_file(path, version).write_text("\n".join(lines) + "\n")


def data_file(path: str, table: pa.Table) -> dict[str, Any]:
    name = f"part-{uuid.uuid4().hex}.parquet"
    pq.write_table(table, Path(path) / name)
    size = (Path(path) / name).stat().st_size
    return {"path": name, "partitionValues": {}, "size": size, "modificationTime": 0,
            "dataChange": True}  # fmt: skip


def removed(add: dict[str, Any]) -> dict[str, Any]:
    return {"remove": {"path": add["path"], "deletionTimestamp": 0, "dataChange": True}}


def hand_written(
    path: str, fields: list[dict[str, Any]], reader: list[str], files: list[pa.Table]
) -> None:
    """Version 0 adds ``files[0]``; each later version rewrites the file before it into the
    next (copy-on-write: the unchanged rows are carry-overs)."""
    Path(path, "_delta_log").mkdir(parents=True)
    protocol: dict[str, Any] = {"minReaderVersion": 1, "minWriterVersion": 2}
    if reader:
        protocol = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": reader,
                    "writerFeatures": reader}  # fmt: skip
    schema = {"type": "struct", "fields": fields}
    metadata = {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema), "partitionColumns": [],
                "configuration": {}, "createdTime": 0}  # fmt: skip
    previous = data_file(path, files[0])
    write_version(path, 0, [{"protocol": protocol}, {"metaData": metadata}, {"add": previous}])
    for version, table in enumerate(files[1:], start=1):
        added = data_file(path, table)
        write_version(path, version, [removed(previous), {"add": added}])
        previous = added


def field(name: str, type_name: str) -> dict[str, Any]:
    return {"name": name, "type": type_name, "nullable": True, "metadata": {}}


@pytest.mark.parametrize("where", ["source", "client"])
def test_a_variant_column_through_the_row_level_passes(
    spark: SparkSession, tmp_path: Path, where: str
) -> None:
    """Carry-overs (equal variants) are removed and a changed variant is an update."""
    path = str(tmp_path / "t")
    ids = pa.array([1, 2, 3], pa.int64())
    before = pa.table(
        {"id": ids, "v": pa.array([int8_variant(i) for i in (1, 2, 3)], VARIANT_FILE)}
    )
    after = before.set_column(1, "v", pa.array([int8_variant(i) for i in (1, 9, 3)], VARIANT_FILE))
    hand_written(path, [field("id", "long"), field("v", "variant")], ["variantType"],
                 [before, after])  # fmt: skip
    got = feed_rows(spark, path, rowId="id", computeUpdates=True, postProcessing=where)
    assert by_id([r for r in got if r["_commit_version"] == 1]) == [
        {"id": 2, "v": int8_variant(2), "_change_type": "update_preimage", "_commit_version": 1},
        {"id": 2, "v": int8_variant(9), "_change_type": "update_postimage", "_commit_version": 1},
    ]
    assert len(got) == 5  # three inserts, one update


@pytest.mark.parametrize("where", ["source", "client"])
def test_a_void_column_is_null_through_the_row_level_passes(
    spark: SparkSession, tmp_path: Path, where: str
) -> None:
    """``void`` columns have no data in the files (Delta Spark writes none): every value is
    NULL, the type is Spark's void, and the passes work around it."""
    path = str(tmp_path / "t")
    before = pa.table({"id": pa.array([1, 2], pa.int64()), "amount": [10.0, 20.0]})
    after = pa.table({"id": pa.array([1, 2], pa.int64()), "amount": [11.0, 20.0]})
    hand_written(path, [field("id", "long"), field("amount", "double"), field("nothing", "void")],
                 [], [before, after])  # fmt: skip
    df = ChangelogReader(spark).options(rowId="id", computeUpdates=True, postProcessing=where)
    feed = df.options(startingVersion=0).changes(path)
    assert [f.dataType.typeName() for f in feed.schema.fields][:3] == ["long", "double", "void"]
    rows = [r.asDict() for r in feed.drop("_commit_timestamp").collect()]
    row = {"nothing": None}
    assert by_id(rows) == by_id(
        [
            {**row, "id": 1, "amount": 10.0, "_change_type": "insert", "_commit_version": 0},
            {**row, "id": 2, "amount": 20.0, "_change_type": "insert", "_commit_version": 0},
            {
                **row,
                "id": 1,
                "amount": 10.0,
                "_change_type": "update_preimage",
                "_commit_version": 1,
            },
            {
                **row,
                "id": 1,
                "amount": 11.0,
                "_change_type": "update_postimage",
                "_commit_version": 1,
            },
        ]
    )


def test_the_void_column_fixture(spark: SparkSession, tmp_path: Path) -> None:
    """Delta Spark 4.1's table with a ``void`` column (kernel-rs' test data)."""
    path = conformance(tmp_path, "void-column")
    rows = feed_rows(spark, path)
    expected = [
        {**row, "void_col": None, "_change_type": "insert", "_commit_version": 0}
        for row in added_rows(path, 0)
    ]
    assert by_id(rows) == by_id(expected)
    assert {r["id"] for r in rows} == {1, 2, 3}
