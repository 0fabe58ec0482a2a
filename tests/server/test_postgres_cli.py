"""``spark-cdc`` on a PostgreSQL source, as an operator runs it against the harness's server
and a real PostgreSQL: ``tail`` shows the first copy and then each transaction, ``apply``
mirrors the table once per run, ``slots`` lists the slot and the WAL it keeps and drops it
(never one a reader holds), and a credential on the command line is refused by name."""

from __future__ import annotations

import subprocess
import time

import pyarrow as pa
from pyspark.sql import SparkSession
from spark_cdc.testing.postgres import PostgresServer

from tests.support.apply_targets import read_table, sorted_rows
from tests.support.postgres_tables import published_table
from tests.support.processes import Command


def _source(pg: PostgresServer) -> list[str]:
    options = [f"-o{key}={value}" for key, value in pg.options().items()]
    return ["--source-format", "postgres", *options]


def _rows(pg: PostgresServer, name: str) -> pa.Table:
    lines = pg.sql(f"SELECT id, v FROM {name} ORDER BY id").split()
    rows = [(int(i), v) for i, v in (line.split("|") for line in lines)]
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int32()), "v": [r[1] for r in rows]})


def _finished(command: Command, code: int = 0) -> str:
    assert command.finish(300) == code, command.output
    assert "Traceback" not in command.output, command.output
    return command.output


def test_tail_shows_the_first_copy_then_each_transaction(
    spark_remote: str, pg: PostgresServer
) -> None:
    name = published_table(pg, "id int PRIMARY KEY, v text")
    pg.sql(f"INSERT INTO {name} VALUES (1, 'copied')")
    tail = Command(
        "tail", f"public.{name}", *_source(pg), "--row-id", "id", "--remote", spark_remote
    )
    try:
        tail.wait_for("copied")
        pg.sql(f"UPDATE {name} SET v = 'logged' WHERE id = 1; INSERT INTO {name} VALUES (2, 'new')")
        tail.wait_for("new")
    finally:
        code = tail.interrupt()
    assert code == 0, tail.output
    assert "update_postimage" in tail.output and "logged" in tail.output
    assert "Traceback" not in tail.output


def test_apply_mirrors_once_per_run_and_slots_shows_and_drops_the_slot(
    spark: SparkSession, spark_remote: str, pg: PostgresServer, tmp_path: str
) -> None:
    name = published_table(pg, "id int PRIMARY KEY, v text")
    slot = f"spark_cdc_public_{name}"
    pg.sql(f"INSERT INTO {name} SELECT i, 'v' || i FROM generate_series(1, 20) i")
    target = str(tmp_path) + "/mirror"
    apply = [
        "apply", f"public.{name}", *_source(pg), "--target", target, "--keys", "id",
        "--available-now", "--remote", spark_remote,
    ]  # fmt: skip
    _finished(Command(*apply))
    assert sorted_rows(read_table(target)) == sorted_rows(_rows(pg, name))
    pg.sql(f"UPDATE {name} SET v = 'w' WHERE id < 5; DELETE FROM {name} WHERE id > 15")
    output = _finished(Command(*apply))  # goes on from its checkpoint
    assert sorted_rows(read_table(target)) == sorted_rows(_rows(pg, name))
    if tuple(int(p) for p in spark.version.split(".")[:2]) >= (4, 2):  # latestOffset shown
        assert "the slot keeps" in output, output

    listing = _finished(Command("slots", *_source(pg)[2:], "--remote", spark_remote))
    assert any(
        line.startswith(f"{slot}  pgoutput") and "of WAL" in line for line in listing.splitlines()
    )

    holder = subprocess.Popen(  # a reader holding the slot, as a running stream does
        [str(pg.binaries / "pg_recvlogical"), "-h", "127.0.0.1", "-p", str(pg.port), "-U",
         pg.user, "-d", pg.database, "--slot", slot, "--start", "-o", "proto_version=1",
         "-o", f"publication_names={slot}", "-f", "/dev/null"],
    )  # fmt: skip
    try:
        for _ in range(100):
            if (
                pg.sql(
                    f"SELECT active FROM pg_replication_slots WHERE slot_name = '{slot}'"
                ).strip()
                == "t"
            ):
                break
            time.sleep(0.1)
        drop = Command("slots", *_source(pg)[2:], "--drop", slot, "--remote", spark_remote)
        refused = _finished(drop, 1)
        assert "POSTGRES_CHANGELOG.SLOT_ACTIVE" in refused, refused
    finally:
        holder.terminate()
        holder.wait(30)
    _finished(Command("slots", *_source(pg)[2:], "--drop", slot, "--remote", spark_remote))
    assert (
        pg.sql(f"SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}'").strip()
        == "0"
    )

    secret = Command("apply", f"public.{name}", *_source(pg), "-o", "password=s3cret",
                     "--target", target, "--keys", "id", "--remote", spark_remote)  # fmt: skip
    said = _finished(secret, 1)
    assert "SPARK_CDC_CLI.CREDENTIAL_OPTION" in said and "s3cret" not in said
