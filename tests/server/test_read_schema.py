"""A schema given to a change-feed source's read (``spark.read.format(...).schema(...)``,
and ``ChangelogReader.schema``): the read serves exactly those of the feed's columns, as
the whole feed selected to them would, the row-level passes still comparing whole rows; a
schema that is not some of the feed's columns with their types is refused by name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import spark_cdc
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from tests.support.delta_dv_scenarios import dv_scenario
from tests.support.delta_fixtures import copy_fixture
from tests.support.delta_tables import dml, dml_cdf_partitioned
from tests.support.feeds import run_stream
from tests.support.iceberg_tables import orders_table, rewrite, sql_catalog, table_folder

BY_ID = {"rowId": "id", "computeUpdates": "true"}


@dataclass(frozen=True)
class Read:
    """A feed's read: a source, its table and options; ``self(schema)`` reads it given
    ``schema`` (None: the whole feed)."""

    spark: SparkSession
    source: str
    path: str
    options: dict[str, str]

    def __call__(self, schema: Any) -> DataFrame:
        reader = self.spark.read.format(self.source).option("startingVersion", "0")
        reader = reader.options(**self.options)
        return (reader.schema(schema) if schema is not None else reader).load(self.path)


def _source(spark: SparkSession, name: str, path: str, **options: str) -> Read:
    return Read(spark, name, path, options)


def _delta(spark: SparkSession, folder: Path, **options: str) -> Read:
    path = str(folder / "t")
    dml(path)
    return _source(spark, "delta_changelog", path, **options)


def _cdf(spark: SparkSession, folder: Path) -> Read:
    path = str(folder / "t")
    dml_cdf_partitioned(path)
    return _source(spark, "delta_changelog", path)


def _deletion_vectors(spark: SparkSession, folder: Path) -> Read:
    return _source(spark, "delta_changelog", dv_scenario(folder, "dml"), **BY_ID)


def _column_mapping(spark: SparkSession, folder: Path) -> Read:
    path = copy_fixture(folder, "cdf-column-mapping-name-mode")
    return _source(spark, "delta_changelog", path, **BY_ID)


def _iceberg(spark: SparkSession, folder: Path) -> Read:
    import pyarrow as pa
    from pyiceberg.expressions import EqualTo

    table = orders_table(sql_catalog(folder))
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])

    def rows(*pairs: tuple[int, str | None]) -> pa.Table:
        return pa.Table.from_pylist([{"id": i, "name": n} for i, n in pairs], schema=schema)

    table.append(rows((1, "a1"), (2, "b2"), (3, None)))
    table.delete(EqualTo("id", 3))
    rewrite(table, rows((1, "m1"), (2, "b2"), (6, "r6")))  # 2 carried over, 1 updated
    return _source(spark, "iceberg_changelog", table_folder(table), **BY_ID)


FEEDS: dict[str, Callable[[SparkSession, Path], Read]] = {
    "delta, passes in the source": lambda s, f: _delta(s, f, **BY_ID),
    "delta, raw": _delta,
    "delta change data files, partitioned": _cdf,
    "delta deletion vectors, passes in the source": _deletion_vectors,
    "delta column mapping, passes in the source": _column_mapping,
    "iceberg, passes in the source": _iceberg,
}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Read]:
    return {}  # each feed's read, its table written once for the module


def _feed(spark: SparkSession, made: dict[str, Read], name: str, tmp: Any) -> Read:
    if name not in made:
        made[name] = FEEDS[name](spark, tmp.mktemp("feed"))
    return made[name]


def _output(df: DataFrame) -> tuple[StructType, list[str]]:
    rows = [json.dumps(r.asDict(), default=str, sort_keys=True) for r in df.collect()]
    return df.schema, sorted(rows)


def _projections(feed: StructType) -> dict[str, StructType]:
    """Schemas of some of ``feed``'s columns: each kind of selection a user makes."""
    data = [f for f in feed if not f.name.startswith("_")]
    changelog = [f for f in feed if f.name.startswith("_")]
    return {
        "one data column and the changelog's": StructType([data[-1], *changelog]),
        "data columns reversed, no changelog column": StructType(data[::-1]),
        "the changelog's columns only": StructType(changelog[::-1]),
        "every column, nullable": StructType([StructField(f.name, f.dataType, True) for f in feed]),
    }


@pytest.mark.parametrize("feed_name", sorted(FEEDS))
def test_a_given_schema_serves_the_whole_feed_selected_to_it(
    spark: SparkSession,
    made: dict[str, Read],
    tmp_path_factory: pytest.TempPathFactory,
    feed_name: str,
) -> None:
    read = _feed(spark, made, feed_name, tmp_path_factory)
    whole = read(None)
    for kind, given in _projections(whole.schema).items():
        schema, rows = _output(read(given))
        assert schema == given, kind
        assert rows == _output(whole.select(*given.names))[1], kind


def test_the_passes_compare_whole_rows_whatever_the_schema_given(
    spark: SparkSession, made: dict[str, Read], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An update of a column the schema leaves out is still an update, not a carry-over:
    with only ``id`` read, the passes would pair the update's two rows away."""
    read = _feed(spark, made, "delta, passes in the source", tmp_path_factory)
    given = StructType([StructField("id", LongType()), StructField("_change_type", StringType())])
    changes = {(r.id, r._change_type) for r in read(given).collect()}
    assert {(3, "update_preimage"), (3, "update_postimage")} <= changes  # amount * 10


def test_a_ddl_schema_and_a_pushed_filter(
    spark: SparkSession, made: dict[str, Read], tmp_path_factory: pytest.TempPathFactory
) -> None:
    read = _feed(spark, made, "delta, passes in the source", tmp_path_factory)
    where = "id < 6 AND _commit_version >= 2"
    given = read("name string, id bigint, _commit_version bigint").where(where)
    whole = read(None).select("name", "id", "_commit_version").where(where)
    assert _output(given)[1] == _output(whole)[1]
    assert given.columns == ["name", "id", "_commit_version"]


def test_a_stream_given_a_schema_equals_the_batch_read(
    spark: SparkSession, tmp_path: Path, query_name: str
) -> None:
    path = str(tmp_path / "t")
    dml(path)
    given = "_commit_version bigint, name string, _change_type string"
    stream = (
        spark.readStream.format("delta_changelog")
        .schema(given)
        .option("startingVersion", "0")
        .load(path)
    )
    batch = spark.read.format("delta_changelog").schema(given).option("startingVersion", "0")
    streamed = run_stream(stream, query_name, {"availableNow": True})
    assert _output(streamed) == _output(batch.load(path))


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ("id bigint, price double", "names column 'price', which the feed lacks"),
        ("ID bigint", "names column 'ID', which the feed lacks"),
        ("id int", "gives column 'id' as int, not the feed's type"),
        ("id bigint, name string, id bigint", "names column 'id' twice"),
        ("name string NOT NULL", "declares column 'name' (or a field of it) NOT NULL"),
        ("_commit_version string", "gives column '_commit_version' as string"),
    ],
)
def test_a_schema_that_is_not_the_feeds_is_refused_by_name(
    spark: SparkSession,
    made: dict[str, Read],
    tmp_path_factory: pytest.TempPathFactory,
    given: str,
    problem: str,
) -> None:
    for feed_name in ("delta, raw", "iceberg, passes in the source"):
        read = _feed(spark, made, feed_name, tmp_path_factory)
        with pytest.raises(PySparkException) as refused:
            read(given).collect()
        assert refused.value.getCondition() == "INVALID_CHANGELOG_SCHEMA.READ_SCHEMA"
        assert problem in str(refused.value), feed_name


def test_the_client_reader_takes_a_schema(
    spark: SparkSession, made: dict[str, Read], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``ChangelogReader.schema``: the source reads those columns; the range the client
    filters on is read too, and not handed on."""
    table = _feed(spark, made, "delta, raw", tmp_path_factory).path
    reader = spark_cdc.read(spark).options(rowId="id", computeUpdates=True, startingVersion=2)
    for given in ("name string, id bigint", StructType([StructField("name", StringType())])):
        names = ["name", "id"] if isinstance(given, str) else ["name"]
        got = reader.schema(given).load(table)
        whole = reader.schema(None).load(table).select(*names)
        assert got.columns == names
        assert _output(got)[1] == _output(whole)[1]


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"deduplicationMode": "netChanges"}, "netChanges and postProcessing=client"),
        ({"postProcessing": "client"}, "netChanges and postProcessing=client"),
    ],
)
def test_the_client_reader_refuses_a_schema_where_the_feed_is_read_whole(
    spark: SparkSession, options: dict[str, str], why: str
) -> None:
    """Refused while the DataFrame is built, with no round trip: the plan after the source
    needs every column."""
    reader = spark_cdc.read(spark).schema("id bigint").options(rowId="id", **options)
    with pytest.raises(PySparkException) as refused:
        reader.load("/nowhere")
    assert refused.value.getCondition() == "INVALID_CHANGELOG_SCHEMA.READ_SCHEMA_NOT_TAKEN"
    assert why in str(refused.value)
    postgres = spark_cdc.read(spark).format("postgres").schema("id bigint")
    with pytest.raises(PySparkException) as refused:
        postgres.load("public.orders")
    assert "the postgres_changelog source reads every column" in str(refused.value)
