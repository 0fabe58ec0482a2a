"""The ``postgres`` source against a real PostgreSQL (started here, ``spark_cdc.testing.
postgres``) and the harness's Spark Connect server: the log's changes in Spark's changelog
shape, a stream's first copy and log exactly once into ``apply_changes``, and the refusals.
One database for the module; each test has tables, slots and publications of its own."""

from __future__ import annotations

import itertools
import json
import time
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from spark_cdc import apply_changes, read, readStream
from spark_cdc.testing.postgres import PostgresServer

from tests.support.apply_targets import read_table, sorted_rows
from tests.support.postgres_tables import published_table

# 96 kB that compress badly: stored out of line (TOAST), so an update that keeps it omits it
# from the log.
_TOASTED = "(SELECT string_agg(md5(i::text), '') FROM generate_series(1, 3000) i)"


_more = itertools.count()
_ALL_TYPES = (
    "id int PRIMARY KEY, s smallint, b bigint, r real, d double precision, n numeric(20,4), "
    "u numeric, ok boolean, t text, vc varchar(10), c char(3), raw bytea, day date, "
    "at timestamp, atz timestamptz, uid uuid, j jsonb, ints int[], flags boolean[], "
    "names text[], days date[], blobs bytea[], uids uuid[]"
)
_EDGE_ROWS = (
    "(1, -32768, -9223372036854775808, 'NaN', '-Infinity', -12345678901234.5678, 1.5, true, "
    "'é ''quoted'' \\ back', 'ab', 'x', '\\x00ff10', '0001-01-01', '1999-12-31 23:59:59.999999', "
    "'1970-01-01 00:00:00+05', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"k\": [1, null]}', "
    "'{1,NULL,-3}', '{t,f,NULL}', ARRAY['a b', 'q\"x', NULL, 'NULL', '', '{,}', 'back\\'], "
    "ARRAY['2024-02-29'::date, NULL], ARRAY['\\x00ff'::bytea, '\\x'::bytea, NULL], "
    "ARRAY['a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid]), "
    "(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), "
    "(3, 0, 0, 1.5e-30, 1e300, 0, 0.000000000000000001, false, '', '', '', '\\x', "
    "'2262-04-12', '9999-12-31 00:00:00', '2024-02-29 12:00:00.5+00', "
    "'00000000-0000-0000-0000-000000000000', '[]', '{}', '{}', '{}', '{}', '{}', '{}')"
)


def _commits(pg: PostgresServer, name: str) -> dict[int, datetime]:
    """Each logged transaction's commit LSN and time, read with SQL (not by the source)."""
    return _commits_of(pg, f"spark_cdc_public_{name}", f"spark_cdc_public_{name}")


def _commits_of(pg: PostgresServer, slot: str, publication: str) -> dict[int, datetime]:
    out = pg.sql(
        "SELECT ('x' || encode(substring(data from 2 for 8), 'hex'))::bit(64)::bigint, "
        "('x' || encode(substring(data from 10 for 8), 'hex'))::bit(64)::bigint "
        f"FROM pg_logical_slot_peek_binary_changes('{slot}', NULL, NULL, "
        f"'proto_version', '1', 'publication_names', '{publication}') "
        "WHERE get_byte(data, 0) = 66"
    )
    epoch = datetime(2000, 1, 1, tzinfo=timezone.utc).timestamp()
    return {
        int(lsn): datetime.fromtimestamp(epoch + int(us) / 1e6, timezone.utc)
        for lsn, us in (line.split("|") for line in out.split())
    }


def _logged(spark: SparkSession, pg: PostgresServer, name: str, **options: str) -> Any:
    """Everything the table's slot holds, read in batch."""
    feed = read(spark).format("postgres").options(**pg.options(), startingVersion=0, **options)
    return feed.load(f"public.{name}")


def test_the_log_reads_as_a_changelog_of_whole_transactions(
    spark: SparkSession, pg: PostgresServer
) -> None:
    """Inserts, updates and deletes of one commit each; a transaction changing one row
    twice and inserting and deleting another comes out as its net change; an update of the
    key is a delete and an insert; versions are commit LSNs, times the commit times (made
    to rise by a millisecond where two commits share one)."""
    name = published_table(
        pg,
        "id int PRIMARY KEY, name text, price numeric(10,2), seen timestamptz, day date, "
        "local timestamp, ok boolean, raw bytea, ratio float8, big bigint, tags int[]",
    )
    pg.sql(
        f"INSERT INTO {name} VALUES (1, 'a', 1.50, '2024-01-01 12:00:00+00', '2024-01-02', "
        "'2024-01-03 04:05:06.789', true, '\\x00ff', 'NaN', 9007199254740993, '{1,NULL,3}'), "
        "(2, 'b', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);"
        f"BEGIN; UPDATE {name} SET name = 'x' WHERE id = 1; UPDATE {name} SET name = 'y', "
        f"price = -2.25 WHERE id = 1; INSERT INTO {name} (id) VALUES (3); "
        f"DELETE FROM {name} WHERE id = 3; COMMIT;"
        f"UPDATE {name} SET id = 20 WHERE id = 2;"
        f"DELETE FROM {name} WHERE id = 1;"
    )
    commits = sorted(_commits(pg, name).items())
    assert len(commits) == 4
    feed = _logged(spark, pg, name)
    assert feed.schema == StructType(
        [
            StructField("id", IntegerType()),
            StructField("name", StringType()),
            StructField("price", DecimalType(10, 2)),
            StructField("seen", TimestampType()),
            StructField("day", DateType()),
            StructField("local", TimestampNTZType()),
            StructField("ok", BooleanType()),
            StructField("raw", BinaryType()),
            StructField("ratio", DoubleType()),
            StructField("big", LongType()),
            StructField("tags", ArrayType(IntegerType())),
            StructField("_change_type", StringType(), False),
            StructField("_commit_version", LongType(), False),
            StructField("_commit_timestamp", TimestampType(), False),
        ]
    )
    times: list[datetime] = []
    for _, at in commits:  # the source's rule: at least a millisecond after the one before
        times.append(at if not times else max(at, times[-1] + timedelta(milliseconds=1)))
    (v1, _), (v2, _), (v3, _), (v4, _) = commits
    t1, t2, t3, t4 = times
    first = (
        1,
        "a",
        Decimal("1.50"),
        datetime(2024, 1, 1, 12, tzinfo=timezone.utc),
        date(2024, 1, 2),
        datetime(2024, 1, 3, 4, 5, 6, 789000),
        True,
        b"\x00\xff",
        float("nan"),
        9007199254740993,
        [1, None, 3],
    )
    empty = (None,) * 10
    got = [
        (
            *r[:3],
            r[3].astimezone(timezone.utc) if r[3] else None,
            *r[4:7],
            None if r[7] is None else bytes(r[7]),  # bytearray from PySpark 4.0's client
            *r[8:13],
            r[13].astimezone(timezone.utc),
        )
        for r in feed.collect()
    ]
    want = [
        (*first, "insert", v1, t1),
        (2, "b", *empty[:9], "insert", v1, t1),
        (1, "y", Decimal("-2.25"), *first[3:], "update_postimage", v2, t2),
        (2, *empty, "delete", v3, t3),
        (20, "b", *empty[:9], "insert", v3, t3),
        (1, *empty, "delete", v4, t4),
    ]
    assert sorted(map(repr, got)) == sorted(map(repr, want))


def test_full_replica_identity_gives_pre_images_and_carries_unchanged_toast(
    spark: SparkSession, pg: PostgresServer
) -> None:
    name = published_table(pg, "id int PRIMARY KEY, doc text, n int", full=True)
    pg.sql(
        f"INSERT INTO {name} VALUES (1, {_TOASTED}, 1);"
        f"UPDATE {name} SET n = 2 WHERE id = 1; DELETE FROM {name} WHERE id = 1;"
    )
    feed = _logged(spark, pg, name)
    big = pg.sql(f"SELECT {_TOASTED}").strip()
    got = sorted((r.id, r.doc == big, r.n, r._change_type) for r in feed.collect())
    assert got == [
        (1, True, 1, "insert"),
        (1, True, 1, "update_preimage"),
        (1, True, 2, "delete"),
        (1, True, 2, "update_postimage"),
    ]


def test_an_unchanged_toast_value_without_full_identity_is_refused_by_name(
    spark: SparkSession, pg: PostgresServer
) -> None:
    name = published_table(pg, "id int PRIMARY KEY, doc text, n int")
    pg.sql(f"INSERT INTO {name} VALUES (1, {_TOASTED}, 1);UPDATE {name} SET n = 2 WHERE id = 1;")
    feed = _logged(spark, pg, name)
    with pytest.raises(PySparkException) as caught:
        feed.collect()
    assert caught.value.getCondition() == "POSTGRES_CHANGELOG.UNCHANGED_TOAST_VALUE"
    assert "REPLICA IDENTITY FULL" in str(caught.value)


def test_the_first_copy_reads_every_type_as_the_log_does(
    spark: SparkSession, pg: PostgresServer
) -> None:
    """The copy selects some columns in binary and the rest as text; the log has only text:
    the same rows read the same either way (edge values included)."""
    name = published_table(pg, _ALL_TYPES)
    pg.sql(f"INSERT INTO {name} VALUES {_EDGE_ROWS}")
    logged = _logged(spark, pg, name).drop("_commit_version", "_commit_timestamp")
    copied = _copied(spark, pg, name).drop("_commit_version", "_commit_timestamp")
    assert copied.schema == logged.schema
    assert sorted(map(repr, copied.collect())) == sorted(map(repr, logged.collect()))
    assert len(copied.collect()) == 3


def _copied(spark: SparkSession, pg: PostgresServer, name: str) -> Any:
    """The table's first copy, read by a stream into a memory table."""
    stream = readStream(spark).format("postgres").options(**pg.options()).load(f"public.{name}")
    query = stream.writeStream.format("memory").queryName(f"copy_{name}").start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    return spark.table(f"copy_{name}")


def test_arrays_read_as_the_database_holds_them(spark: SparkSession, pg: PostgresServer) -> None:
    """Arrays of text (quotes, backslashes, braces, commas, white space, ``NULL`` as text and
    as a null) and of dates, from the log and from the first copy, equal the database's own
    ``array_to_json``; an array of two dimensions is refused by name."""
    name = published_table(pg, "id int PRIMARY KEY, names text[], days date[]")
    pg.sql(
        f"INSERT INTO {name} VALUES (1, ARRAY['a b', 'q\"x', NULL, 'NULL', '', '{{,}}', "
        "'back\\', E'tab\\tnew\\nline', 'é'], ARRAY['2024-02-29'::date, NULL]), "
        "(2, '{}', NULL), (3, NULL, '{}')"
    )
    lines = pg.sql(f"SELECT json_build_array(id, names, days) FROM {name} ORDER BY id")
    expected = [
        (key, names, None if days is None else [d and date.fromisoformat(d) for d in days])
        for key, names, days in map(json.loads, lines.splitlines())
    ]
    for feed in (_logged(spark, pg, name), _copied(spark, pg, name)):
        got = feed.select("id", "names", "days").orderBy("id").collect()
        assert [tuple(row) for row in got] == expected
    grid = published_table(pg, "id int PRIMARY KEY, grid int[]")
    pg.sql(f"INSERT INTO {grid} VALUES (1, ARRAY[[1, 2], [3, 4]])")
    with pytest.raises(PySparkException) as caught:
        _logged(spark, pg, grid).collect()
    assert caught.value.getCondition() == "POSTGRES_CHANGELOG.UNREPRESENTABLE_VALUE"
    assert "more than one dimension" in str(caught.value)


@pytest.mark.parametrize(
    ("options", "columns", "condition"),
    [
        ({"password": "s3cret"}, "id int PRIMARY KEY", "POSTGRES_CHANGELOG.PASSWORD_IN_OPTIONS"),
        ({"slot": "nobody"}, "id int PRIMARY KEY", "POSTGRES_CHANGELOG.SLOT_NOT_FOUND"),
        ({}, "id int PRIMARY KEY, at interval", "POSTGRES_CHANGELOG.UNSUPPORTED_TYPE"),
    ],
)
def test_what_cannot_be_read_is_refused_by_name(
    spark: SparkSession,
    pg: PostgresServer,
    options: dict[str, str],
    columns: str,
    condition: str,
) -> None:
    name = published_table(pg, columns)
    with pytest.raises(PySparkException) as caught:
        _logged(spark, pg, name, **options).collect()
    assert caught.value.getCondition() == condition
    assert "s3cret" not in str(caught.value)


def test_a_stream_copies_then_follows_the_log_exactly_once_across_restarts(
    spark: SparkSession, pg: PostgresServer, tmp_path: Path
) -> None:
    """The first copy and the log meet with nothing lost or doubled; a stream stopped and
    started again goes on from its checkpoint; apply_changes' mirror equals the table."""
    name = published_table(pg, "id int PRIMARY KEY, v text, n int")
    pg.sql(f"INSERT INTO {name} SELECT i, 'v' || i, i FROM generate_series(1, 500) i")
    target, checkpoint = str(tmp_path / "mirror"), str(tmp_path / "checkpoint")

    def run() -> None:
        feed = (
            readStream(spark)
            .format("postgres")
            .options(**pg.options(), parallelism=3)
            .load(f"public.{name}")
        )
        query = apply_changes(
            feed, target, ["id"], sequence_by="_commit_version", checkpoint_location=checkpoint
        )
        query.processAllAvailable()
        pg.sql(
            f"UPDATE {name} SET v = v || '!' WHERE id % 7 = 0;"
            f"DELETE FROM {name} WHERE id % 11 = 0;"
            f"BEGIN; INSERT INTO {name} VALUES (1000, 'a', 0); "
            f"UPDATE {name} SET n = n + 1 WHERE id = 1000; COMMIT;"
        )
        query.processAllAvailable()
        query.stop()

    run()
    pg.sql(f"UPDATE {name} SET n = -n WHERE id < 50; DELETE FROM {name} WHERE id = 1000;")
    run()
    want = [
        {"id": int(i), "v": v, "n": int(n)}
        for i, v, n in (
            line.split("|") for line in pg.sql(f"SELECT id, v, n FROM {name} ORDER BY id").split()
        )
    ]
    assert sorted_rows(read_table(target)) == sorted_rows(pa.Table.from_pylist(want))
    confirmed = pg.sql(
        f"SELECT confirmed_flush_lsn >= pg_current_wal_lsn() - 100000 FROM pg_replication_slots "
        f"WHERE slot_name = 'spark_cdc_public_{name}'"
    )
    assert confirmed.strip() == "t"  # the slot moved on with the commits


def test_truncates_are_refused_by_name_or_served_as_rows_that_apply_changes_applies(
    spark: SparkSession, pg: PostgresServer, tmp_path: Path
) -> None:
    """A ``TRUNCATE`` is refused by name unless ``includeTruncates``; then it is a row of
    its own, one version before its transaction's, which leaves out what the transaction
    wrote before it and precedes what it wrote after; ``apply_as_truncates`` applies it."""
    name = published_table(pg, "id int PRIMARY KEY, v text")
    pg.sql(f"INSERT INTO {name} SELECT i, 'a' FROM generate_series(1, 5) i")
    target, checkpoint = str(tmp_path / "mirror"), str(tmp_path / "checkpoint")

    def run() -> None:
        feed = (
            readStream(spark)
            .format("postgres")
            .options(**pg.options(), includeTruncates="true")
            .load(f"public.{name}")
        )
        query = apply_changes(
            feed,
            target,
            ["id"],
            sequence_by="_commit_version",
            apply_as_truncates="_change_type = 'truncate'",
            checkpoint_location=checkpoint,
        )
        query.processAllAvailable()
        query.stop()

    run()
    pg.sql(
        f"BEGIN; INSERT INTO {name} VALUES (6, 'b'); UPDATE {name} SET v = 'c' WHERE id = 1; "
        f"TRUNCATE {name}; INSERT INTO {name} VALUES (1, 'd'), (7, 'e'); COMMIT;"
        f"INSERT INTO {name} VALUES (8, 'f'); TRUNCATE {name}; INSERT INTO {name} VALUES (9, 'g');"
    )
    with pytest.raises(PySparkException) as caught:
        _logged(spark, pg, name).collect()
    assert caught.value.getCondition() == "POSTGRES_CHANGELOG.TRUNCATE"
    rows = _logged(spark, pg, name, includeTruncates="true").collect()
    commits = sorted(_commits(pg, name))
    got = [(r["id"], r["v"], r["_change_type"], r["_commit_version"]) for r in rows]
    earlier = [(i, "a", "insert", commits[-5]) for i in range(1, 6)]
    assert got[:-6] in ([], earlier)  # the first rows' insert, if the slot still holds it
    assert got[-6:] == [
        (None, None, "truncate", commits[-4] - 1),
        (1, "d", "insert", commits[-4]),
        (7, "e", "insert", commits[-4]),
        (8, "f", "insert", commits[-3]),
        (None, None, "truncate", commits[-2] - 1),
        (9, "g", "insert", commits[-1]),
    ]
    run()
    assert sorted_rows(read_table(target)) == sorted_rows(
        pa.table({"id": pa.array([9], pa.int32()), "v": ["g"]})
    )


def test_a_stream_stopped_after_each_first_batch_loses_nothing(
    spark: SparkSession, pg: PostgresServer, tmp_path: Path
) -> None:
    """Restarts in a row, each stopped after its first micro-batch, with changes before each
    (Spark 4.0/4.1 ask a restarted stream for its latest offset without its start, and the
    reader pins a new snapshot each time): the mirror still equals the table."""
    name = published_table(pg, "id int PRIMARY KEY, v text")
    pg.sql(f"INSERT INTO {name} SELECT i, 'a' FROM generate_series(1, 10) i")
    target, checkpoint = str(tmp_path / "mirror"), str(tmp_path / "checkpoint")

    def one_batch(everything: bool = False) -> None:
        feed = readStream(spark).format("postgres").options(**pg.options()).load(f"public.{name}")
        query = apply_changes(
            feed, target, ["id"], sequence_by="_commit_version", checkpoint_location=checkpoint
        )
        if everything:
            query.processAllAvailable()
        deadline = time.monotonic() + 120
        while query.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.1)
        query.stop()

    one_batch()
    for round_ in range(3):
        pg.sql(
            f"UPDATE {name} SET v = 'r{round_}' WHERE id % 3 = {round_};"
            f"INSERT INTO {name} VALUES ({100 + round_}, 'new');"
        )
        one_batch()
    one_batch(everything=True)  # a stop may come before a batch the restart replays
    lines = pg.sql(f"SELECT id, v FROM {name}").split()
    want = [{"id": int(i), "v": v} for i, v in (line.split("|") for line in lines)]
    got = sorted_rows(read_table(target))
    assert got == sorted_rows(pa.Table.from_pylist(want)), (got, want)


def test_several_tables_of_one_publication_are_one_feed_with_each_rows_table(
    spark: SparkSession, pg: PostgresServer, tmp_path: Path
) -> None:
    """``load("public.a,public.b")``: their columns by name, ``_table``, whole
    transactions across both in commit order, the first copy of both; a column the two
    tables type differently is refused by name; one table of the publication alone is its
    own feed."""
    a, b = f"ta{next(_more)}", f"tb{next(_more)}"
    pg.sql(
        f"CREATE TABLE {a} (id int PRIMARY KEY, v text); "
        f"CREATE TABLE {b} (id int PRIMARY KEY, n bigint, v text); "
        f"CREATE PUBLICATION pub_{a} FOR TABLE {a}, {b}; "
        f"SELECT pg_create_logical_replication_slot('slot_{a}', 'pgoutput'); "
        f"SELECT pg_create_logical_replication_slot('slot_{b}', 'pgoutput'); "
        f"INSERT INTO {a} VALUES (1, 'a1'); INSERT INTO {b} VALUES (1, 10, 'b1')"
    )
    options = {**pg.options(), "publication": f"pub_{a}", "slot": f"slot_{a}"}
    feed = readStream(spark).format("postgres").options(**options).load(f"public.{a},public.{b}")
    assert [(f.name, f.dataType) for f in feed.schema] == [
        ("id", IntegerType()),
        ("v", StringType()),
        ("n", LongType()),
        ("_table", StringType()),
        ("_change_type", StringType()),
        ("_commit_version", LongType()),
        ("_commit_timestamp", TimestampType()),
    ]
    query = (
        feed.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    query.processAllAvailable()
    pg.sql(
        f"BEGIN; UPDATE {a} SET v = 'a2' WHERE id = 1; INSERT INTO {b} VALUES (2, 20, 'b2'); "
        f"COMMIT; DELETE FROM {b} WHERE id = 1"
    )
    query.processAllAvailable()
    query.stop()
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    commits = sorted(_commits_of(pg, f"slot_{b}", f"pub_{a}"))
    got = sorted(
        (r["_commit_version"], r["_table"], r["id"], r["v"], r["n"], r["_change_type"])
        for r in rows
    )
    copied = {r["_commit_version"] for r in rows if r["_change_type"] == "insert" and r["id"] == 1}
    assert len(copied) == 1  # both tables' first copies at the slot's position
    at = copied.pop()
    assert got == [
        (at, f"public.{a}", 1, "a1", None, "insert"),
        (at, f"public.{b}", 1, "b1", 10, "insert"),
        (commits[-2], f"public.{a}", 1, "a2", None, "update_postimage"),
        (commits[-2], f"public.{b}", 2, "b2", 20, "insert"),
        (commits[-1], f"public.{b}", 1, None, None, "delete"),
    ]

    alone = read(spark).format("postgres").options(**pg.options(), startingVersion=0)
    alone = alone.options(publication=f"pub_{a}", slot=f"slot_{b}").load(f"public.{b}")
    assert "_table" not in alone.columns
    assert sorted(r["id"] for r in alone.collect() if r["_change_type"] == "insert") == [1, 2]

    c = f"tc{next(_more)}"
    pg.sql(f"CREATE TABLE {c} (id text PRIMARY KEY); ALTER PUBLICATION pub_{a} ADD TABLE {c}")
    with pytest.raises(PySparkException) as caught:
        read(spark).format("postgres").options(**options, startingVersion=0).load(
            f"public.{a},public.{c}"
        ).collect()
    assert caught.value.getCondition() == "POSTGRES_CHANGELOG.COLUMN_TYPES_DIFFER"


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("date", "'infinity'"),
        ("timestamptz", "'-infinity'"),
        ("timestamp", "'10000-01-01 00:00:00'"),
        ("date", "'0044-03-15 BC'"),
    ],
)
def test_a_value_spark_cannot_hold_is_refused_by_name_in_the_copy_and_the_log(
    spark: SparkSession, pg: PostgresServer, column: str, value: str
) -> None:
    """The copy reads dates and timestamps in binary, where ADBC's driver turns such values
    into far numbers; the log has their text: both refuse them, never a wrong date."""
    name = published_table(pg, f"id int PRIMARY KEY, at {column}")
    pg.sql(f"INSERT INTO {name} VALUES (1, {value})")
    with pytest.raises(PySparkException) as logged:
        _logged(spark, pg, name).collect()
    stream = readStream(spark).format("postgres").options(**pg.options()).load(f"public.{name}")
    query = stream.writeStream.format("noop").start()
    with pytest.raises(PySparkException) as copied:
        query.processAllAvailable()
    query.stop()
    for caught in (logged, copied):
        assert "POSTGRES_CHANGELOG.UNREPRESENTABLE_VALUE" in str(caught.value), caught.value


def test_a_backlog_larger_than_a_micro_batch_is_read_to_its_end(
    spark: SparkSession, pg: PostgresServer, tmp_path: Path
) -> None:
    """Spark commits a batch's end to the source only when the next batch starts, so the
    slot lags a batch behind: ten transactions of ten rows, read fifteen changes a batch,
    all arrive, in several micro-batches (the stream used to stall after the first)."""
    name = published_table(pg, "id int PRIMARY KEY, v text")
    feed = readStream(spark).format("postgres").options(**pg.options(), maxChangesPerTrigger=15)
    query = (
        feed.load(f"public.{name}")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    query.processAllAvailable()  # the first copy (empty) pins the start
    pg.sql(
        ";".join(
            f"INSERT INTO {name} SELECT i, 'v' FROM generate_series({n * 10}, {n * 10 + 9}) i"
            for n in range(10)
        )
    )
    query.processAllAvailable()
    query.stop()
    assert sorted(r["id"] for r in spark.read.parquet(str(tmp_path / "out")).collect()) == list(
        range(100)
    )
    assert len([p for p in query.recentProgress if p.numInputRows]) >= 5
