"""The postgres source as users who are not superusers: one that reads a slot and
publication an administrator made, one that owns its table and has the source make them,
and users missing a privilege, refused by name before anything is read or made."""

from __future__ import annotations

import itertools

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from spark_cdc import read, readStream
from spark_cdc.testing.postgres import PostgresServer

from tests.support.postgres_tables import published_table

_sinks = itertools.count()


def _streamed(
    spark: SparkSession, pg: PostgresServer, table: str, then: str, **options: str
) -> list[tuple[object, ...]]:
    """What a stream of ``table`` with ``options`` serves: its first copy, then the log of
    the SQL ``then``, as (id, v, change) without pre-images."""
    feed = readStream(spark).format("postgres").options(**{**pg.options(), **options}).load(table)
    sink = f"roles_{next(_sinks)}"
    query = feed.writeStream.format("memory").queryName(sink).start()
    try:
        query.processAllAvailable()
        pg.sql(then)
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.table(sink).where("_change_type != 'update_preimage'")
    return sorted(tuple(row) for row in rows.select("id", "v", "_change_type").collect())


def test_a_replication_user_reads_what_an_administrator_made(
    spark: SparkSession, pg: PostgresServer
) -> None:
    name = published_table(pg, "id int PRIMARY KEY, v text")  # as the superuser
    pg.sql(
        f"CREATE ROLE reader LOGIN REPLICATION; GRANT SELECT ON {name} TO reader; "
        f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b')"
    )
    served = _streamed(
        spark, pg, f"public.{name}", f"UPDATE {name} SET v = 'c' WHERE id = 2", user="reader"
    )
    assert served == [(1, "a", "insert"), (2, "b", "insert"), (2, "c", "update_postimage")]


def test_a_table_owner_with_replication_has_the_source_make_its_slot_and_publication(
    spark: SparkSession, pg: PostgresServer
) -> None:
    pg.sql(
        "CREATE ROLE maker LOGIN REPLICATION; GRANT CREATE ON DATABASE postgres TO maker; "
        "CREATE TABLE made (id int PRIMARY KEY, v text); ALTER TABLE made OWNER TO maker; "
        "INSERT INTO made VALUES (1, 'a')"
    )
    served = _streamed(
        spark,
        pg,
        "public.made",
        "INSERT INTO made VALUES (2, 'b')",
        user="maker",
        createSlot="true",
        slot="maker_slot",
        publication="maker_pub",
    )
    assert served == [(1, "a", "insert"), (2, "b", "insert")]
    owners = pg.sql(
        "SELECT pg_get_userbyid(pubowner) FROM pg_publication WHERE pubname = 'maker_pub' "
        "UNION ALL SELECT slot_name FROM pg_replication_slots WHERE slot_name = 'maker_slot'"
    )
    assert owners.split() == ["maker", "maker_slot"]


def test_a_missing_privilege_is_refused_by_name(spark: SparkSession, pg: PostgresServer) -> None:
    """No REPLICATION attribute: refused whatever the read; no SELECT on the table: a
    stream's first copy is refused, the log alone (a batch read) is served."""
    name = published_table(pg, "id int PRIMARY KEY, v text")
    pg.sql(
        f"CREATE ROLE plain LOGIN; CREATE ROLE logonly LOGIN REPLICATION; "
        f"INSERT INTO {name} VALUES (1, 'a')"
    )
    table = f"public.{name}"
    with pytest.raises(PySparkException) as caught:
        read(spark).format("postgres").options(**{**pg.options(), "user": "plain"}).load(
            table
        ).collect()
    assert caught.value.getCondition() == "POSTGRES_CHANGELOG.REPLICATION_NOT_GRANTED"
    assert "ALTER ROLE plain REPLICATION" in str(caught.value)

    logged = read(spark).format("postgres").options(**{**pg.options(), "user": "logonly"})
    rows = logged.option("startingVersion", 0).load(table).select("id", "v").collect()
    assert [tuple(row) for row in rows] == [(1, "a")]
    with pytest.raises(Exception, match=r"POSTGRES_CHANGELOG\.TABLE_NOT_READABLE.*logonly"):
        _streamed(spark, pg, table, "SELECT 1", user="logonly")
