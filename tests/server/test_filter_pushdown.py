"""Filters pushed to the change-feed sources (Spark 4.1+, ``spark.sql.python.filterPushdown.
enabled``): a filtered read returns exactly what Spark's own filter of the whole feed returns,
on every kind of predicate, with the row-level passes in the source or on the client; a
server with the setting off reads as before; a filter on ``_commit_version`` skips the other
commits' files.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import spark_cdc
from deltalake import write_deltalake
from pyspark.sql import DataFrame, SparkSession
from spark_cdc.server_plugin.changefeed.pushdown import PLAN_CACHE_SIZE
from spark_cdc.testing.local_server import PUSHDOWN

from tests.support.delta_tables import commit_file, dml, dml_cdf_partitioned, rows
from tests.support.iceberg_tables import orders_table, rewrite, sql_catalog, table_folder
from tests.support.spark_version import SPARK

pytestmark = pytest.mark.skipif(
    SPARK < (4, 1), reason="Python data sources are pushed filters from Spark 4.1 on"
)

Feed = Callable[[], DataFrame]


@contextmanager
def pushdown(spark: SparkSession, on: bool) -> Iterator[None]:
    before = spark.conf.get(PUSHDOWN, None)
    spark.conf.set(PUSHDOWN, str(on).lower())
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(PUSHDOWN)
        else:
            spark.conf.set(PUSHDOWN, before)


def _rows(df: DataFrame) -> tuple[str, list[str]]:
    """The whole output: its schema and its rows, in an order of their own."""
    rows = [json.dumps(r.asDict(), default=str, sort_keys=True) for r in df.collect()]
    return df.schema.json(), sorted(rows)


@pytest.fixture(scope="module")
def feeds(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Feed]:
    """Copy-on-write Delta (carry-overs, updates), Delta with change data files and
    partitions, an Iceberg history: the passes in the source and on the client."""
    folder = tmp_path_factory.mktemp("pushdown")
    cow, cdf = str(folder / "cow"), str(folder / "cdf")
    dml(cow)
    dml_cdf_partitioned(cdf)
    (folder / "iceberg").mkdir()
    iceberg = orders_table(sql_catalog(folder / "iceberg"))
    _iceberg_history(iceberg)
    by_id = {"rowId": "id", "computeUpdates": True}
    return {
        "delta, passes in the source": lambda: spark_cdc.read(spark).options(**by_id).load(cow),
        "delta, passes on the client": lambda: (
            spark_cdc.read(spark).options(**by_id, postProcessing="client").load(cow)
        ),
        "delta, raw feed": lambda: spark.read.format("delta_changelog").load(cow),
        "delta change data files": lambda: spark_cdc.read(spark).load(cdf),
        "iceberg, passes in the source": lambda: (
            spark_cdc.read(spark)
            .format("iceberg")
            .options(**by_id, startingVersion=0)
            .load(table_folder(iceberg))
        ),
    }


def _iceberg_history(table: Any) -> None:
    import pyarrow as pa
    from pyiceberg.expressions import EqualTo

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])

    def rows(*pairs: tuple[int, str | None]) -> pa.Table:
        return pa.Table.from_pylist([{"id": i, "name": n} for i, n in pairs], schema=schema)

    table.append(rows((1, "a1"), (2, "b2"), (3, None)))
    table.append(rows((4, "a4")))
    table.delete(EqualTo("id", 3))
    rewrite(table, rows((1, "m1"), (2, "b2"), (4, "a4"), (6, "r6")))


# Every filter kind Spark pushes, on every kind of column the feeds have: each is compared
# with Spark's own filter of the whole feed (the exact cut of each kind is the model test's,
# tests/unit/test_filter_pushdown_model.py).
PREDICATES = [
    "id = 3",
    "id < 5",
    "id <= 5",
    "id > 8",
    "id >= 8 AND id < 21",
    "id != 3",
    "id <=> 20",
    "NOT (id <=> 20)",
    "id IN (1, 4, 21)",
    "NOT (id IN (1, 4, 21))",
    "id IS NULL",
    "name IS NOT NULL AND name < 'b'",
    "name = 'renamed'",
    "name LIKE 'm%'",
    "name LIKE '%1'",
    "name LIKE '%a%'",
    "NOT (name LIKE 'a%')",
    "_change_type = 'insert'",
    "_change_type IN ('update_postimage', 'delete')",
    "_change_type != 'update_preimage'",
    "_change_type LIKE 'update%'",
    "_commit_version = 2",
    "_commit_version >= 3 AND id < 10",
    "NOT (_commit_version IN (0, 2))",
    "_commit_timestamp > TIMESTAMP '2000-01-01 00:00:00'",
    "_commit_timestamp < TIMESTAMP '2000-01-01 00:00:00'",
    "(id < 3) OR (_commit_version = 1)",  # not pushed (a disjunction): Spark's alone
]


@pytest.mark.parametrize(
    "feed_name",
    [
        "delta, passes in the source",
        "delta, passes on the client",
        "delta, raw feed",
        "delta change data files",
        "iceberg, passes in the source",
    ],
)
def test_a_pushed_filter_returns_exactly_what_spark_filters(
    spark: SparkSession, feeds: dict[str, Feed], feed_name: str
) -> None:
    feed = feeds[feed_name]
    kept = 0
    for predicate in PREDICATES:
        with pushdown(spark, False):
            expected = _rows(feed().where(predicate))
        with pushdown(spark, True):
            got = _rows(feed().where(predicate))
        assert got == expected, predicate
        kept += bool(expected[1])
    assert kept >= len(PREDICATES) // 2  # the predicates select something


def test_every_column_kind_filters_as_spark_does(
    spark: SparkSession, feeds: dict[str, Feed]
) -> None:
    """Doubles (NaN-safe comparisons left to Spark), partition columns, projections."""
    feed = feeds["delta change data files"]
    for predicate in ("amount > 5.0", "part = 'odd' AND id >= 3", "NOT (part <=> 'even')"):
        with pushdown(spark, False):
            expected = _rows(feed().where(predicate).select("id", "_change_type"))
        with pushdown(spark, True):
            got = _rows(feed().where(predicate).select("id", "_change_type"))
        assert got == expected and expected[1], predicate


def test_a_server_with_pushdown_off_reads_as_before(
    spark: SparkSession, feeds: dict[str, Feed]
) -> None:
    """A reader offers pushFilters only where the planner pushes: PySpark fails every read
    of a reader that has it on a server with the setting off."""
    with pushdown(spark, False):
        for feed in feeds.values():
            assert feed().where("id >= 0").count() == feed().count() > 0


def test_a_filter_on_the_commit_version_reads_no_other_commit(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Three appends, the first one's data file gone: only a read that skips version 0
    can succeed."""
    path = str(tmp_path / "t")
    for version in range(3):
        write_deltalake(path, rows(range(version * 10, version * 10 + 5)), mode="append")
    first = json.loads(
        next(line for line in commit_file(path, 0).read_text().splitlines() if '"add"' in line)
    )
    (Path(path) / first["add"]["path"]).unlink()
    feed = spark.read.format("delta_changelog").load(path)
    later = feed.where("_commit_version >= 1")
    with pushdown(spark, True):
        assert sorted(r.id for r in later.select("id").collect()) == [
            *range(10, 15),
            *range(20, 25),
        ]
        with pytest.raises(Exception, match=r"DELTA_CHANGELOG\.DATA_LOSS_DATA_FILE"):
            feed.where("_commit_version = 0").count()
    with (
        pushdown(spark, False),
        pytest.raises(Exception, match=r"DELTA_CHANGELOG\.DATA_LOSS_DATA_FILE"),
    ):
        later.count()


def test_a_filter_on_a_partition_column_skips_the_other_partitions_files(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An 'odd' data file gone: a filter on the partition column reads around it, with the
    passes in the source too; not under update detection, where a row that moved partitions
    pairs across files (the skipped file could hold the other half of an update)."""
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(6)), partition_by=["part"])
    write_deltalake(path, rows(range(6, 10)), mode="append", partition_by=["part"])
    adds = [
        json.loads(line)["add"]
        for line in commit_file(path, 0).read_text().splitlines()
        if '"add"' in line
    ]
    (Path(path) / next(a["path"] for a in adds if a["partitionValues"]["part"] == "odd")).unlink()
    raw = spark.read.format("delta_changelog").load(path)
    passes = spark_cdc.read(spark).option("rowId", "id").load(path)
    updates = spark_cdc.read(spark).options(rowId="id", computeUpdates=True).load(path)
    with pushdown(spark, True):
        for feed in (raw, passes):
            even = feed.where("part = 'even'").select("id", "_commit_version")
            assert sorted(tuple(r) for r in even.collect()) == [
                (0, 0),
                (2, 0),
                (4, 0),
                (6, 1),
                (8, 1),
            ]
            assert feed.where("part IN ('odd') AND _commit_version = 1").count() == 2
        for feed in (raw, updates.where("part = 'even'")):
            with pytest.raises(Exception, match=r"DELTA_CHANGELOG\.DATA_LOSS_DATA_FILE"):
                feed.count()


def test_a_dataframe_read_again_without_the_filter_reads_every_row(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The same DataFrame filtered, then not, and both in one query: Spark keeps a pushed
    read on the relation's data source, which a plan cache would share with the scan that
    pushes nothing. Our servers run without one (``pushdown.SAFE_ENV``)."""
    assert spark.conf.get(PLAN_CACHE_SIZE) == "0"
    path = str(tmp_path / "t")
    write_deltalake(path, rows(range(6)), partition_by=["part"])
    write_deltalake(path, rows(range(6, 10)), mode="append", partition_by=["part"])
    raw = spark.read.format("delta_changelog").load(path)
    with pushdown(spark, True):
        assert raw.where("id < 3 AND _commit_version = 0").count() == 3
        assert raw.where("part = 'odd'").count() == 5
        assert raw.count() == 10
        assert raw.where("id < 2").union(raw).count() == 12
        assert raw.join(raw.where("id < 2"), "id", "left").count() == 10
