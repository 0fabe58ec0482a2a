"""The postgres source into ``apply_changes`` while its server dies: random transactions
(inserts, updates and deletes of two tables with an int and a text key, truncates of one,
several changes of a row in one transaction) committed all along, streams stopped at random
moments, by a SIGKILL of the server or a stop, and started again from their checkpoints on
a new server. The type 1 mirror must equal the table's final content, and the type 2
history the model of the table's whole log (read in batch from a slot no stream moves),
sequenced by commit LSN: no transaction lost, none applied twice."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from spark_cdc import apply_changes, readStream
from spark_cdc.testing.postgres import PostgresServer

from tests.support.apply_targets import feed_changes, model_rows, read_table, sorted_rows
from tests.support.harness import dedicated_session

# Each stream: its table, its own slot (one stream per slot), its SCD type.
STREAMS = {"mirror": ("ka", 1), "history": ("kb", 2)}


class _Writer(threading.Thread):
    """Random transactions on both tables until stopped: each one to five statements."""

    def __init__(self, pg: PostgresServer, seed: int) -> None:
        super().__init__(daemon=True)
        self.pg, self.rng = pg, random.Random(seed)
        self.done, self.commits = threading.Event(), 0
        self.failure: BaseException | None = None

    def _statement(self) -> str:
        rng, key = self.rng, self.rng.randrange(40)
        table, key_text = ("ka", str(key)) if rng.random() < 0.5 else ("kb", f"'k{key}'")
        column = "v" if table == "ka" else "n"
        value = f"'{rng.choice('abcdef')}{rng.randrange(100)}'" if table == "ka" else "n + 1"
        kind = rng.random()
        if table == "ka" and kind < 0.03:
            return "TRUNCATE ka"
        if kind < 0.45:
            start = "'v'" if table == "ka" else "0"
            return f"INSERT INTO {table} VALUES ({key_text}, {start}) ON CONFLICT DO NOTHING"
        if kind < 0.8:
            return f"UPDATE {table} SET {column} = {value} WHERE {table[1]}id = {key_text}"
        return f"DELETE FROM {table} WHERE {table[1]}id = {key_text}"

    def run(self) -> None:
        try:
            while not self.done.is_set():
                count = self.rng.randint(1, 5)
                body = "; ".join(self._statement() for _ in range(count))
                self.pg.sql(f"BEGIN; {body}; COMMIT")
                self.commits += 1
                # About four commits a second: every change made while a server starts is
                # one the streams catch up on after it (at fifteen, most of the test's time).
                time.sleep(self.rng.uniform(0.15, 0.35))
        except BaseException as failure:
            self.failure = failure

    def stop(self) -> None:
        self.done.set()
        self.join(60)
        if self.failure is not None:
            raise self.failure


def _started(session: Any, pg: PostgresServer, folder: Path, name: str) -> Any:
    table, scd_type = STREAMS[name]
    options = {**pg.options(), "slot": f"slot_{name}", "publication": "kills"}
    if scd_type == 1:
        options["includeTruncates"] = "true"
    feed = readStream(session).format("postgres").options(**options)
    return apply_changes(
        feed.option("maxChangesPerTrigger", 100).load(f"public.{table}"),
        str(folder / name),
        keys=["aid" if table == "ka" else "bid"],
        sequence_by="_commit_version",
        stored_as_scd_type=scd_type,
        apply_as_truncates="_change_type = 'truncate'" if scd_type == 1 else None,
        checkpoint_location=str(folder / f"checkpoint-{name}"),
    )


def _wait_for_a_batch_of_changes(query: Any, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not any(p.numInputRows for p in query.recentProgress):
        assert time.monotonic() < deadline, f"no changes read within {timeout:.0f}s"
        if not query.isActive:
            raise AssertionError(f"the stream stopped: {query.exception()}")
        time.sleep(0.1)


def _table(pg: PostgresServer, table: str) -> list[dict[str, Any]]:
    key, column = ("aid", "v") if table == "ka" else ("bid", "n")
    lines = pg.sql(f"SELECT {key}, {column} FROM {table}").split()
    cast = int if table == "kb" else str
    rows = [{key: int(k) if table == "ka" else k, column: cast(v)} for k, v in
            (line.split("|") for line in lines)]  # fmt: skip
    return sorted_rows(pa.Table.from_pylist(rows)) if rows else []


@pytest.mark.timeout(1800)
@pytest.mark.filterwarnings("ignore:StreamingQueryListenerBus Handler thread:UserWarning")
def test_streams_killed_and_stopped_at_random_lose_and_repeat_nothing(
    pg: PostgresServer, spark: SparkSession, tmp_path: Path, long_run: bool, seed: int
) -> None:
    rng = random.Random(seed)
    pg.sql(
        "CREATE TABLE ka (aid int PRIMARY KEY, v text); "
        "CREATE TABLE kb (bid text PRIMARY KEY, n bigint); "
        "CREATE PUBLICATION kills FOR TABLE ka, kb; "
        + " ".join(
            f"SELECT pg_create_logical_replication_slot('slot_{name}', 'pgoutput');"
            for name in (*STREAMS, "model")
        )
    )
    writer = _Writer(pg, seed)
    # The suite's run: one kill, then the last life's stop (restarts after a graceful stop are
    # test_postgres_source's too); a long run adds a stop and a second kill.
    stops = ["kill", "stop", "kill"] if long_run else ["kill"]
    for life, how in enumerate(stops):
        with dedicated_session(tmp_path, f"server-{life}") as (server, session):
            queries = [_started(session, pg, tmp_path, name) for name in STREAMS]
            if life == 0:  # the first copies, of empty tables: the history is the log's
                for query in queries:
                    query.processAllAvailable()
                writer.start()
            for query in queries:  # not processAllAvailable: the writer never lets it end
                _wait_for_a_batch_of_changes(query)
            time.sleep(rng.uniform(0.0, 2.0))  # in a batch, or between two
            if how == "kill":
                server.kill()
                assert not server.alive()
            else:
                for query in queries:
                    query.stop()
    with dedicated_session(tmp_path, "server-last") as (server, session):
        queries = [_started(session, pg, tmp_path, name) for name in STREAMS]
        time.sleep(2)
        writer.stop()
        for query in queries:
            query.processAllAvailable()
            query.stop()
    assert writer.commits > 20, writer.commits

    mirror = sorted_rows(read_table(str(tmp_path / "mirror")))
    assert mirror == _table(pg, "ka"), (mirror, _table(pg, "ka"))
    log = {**pg.options(), "slot": "slot_model", "publication": "kills", "startingVersion": "0"}
    changes = feed_changes(spark, "public.kb", row_id="bid", format="postgres", **log)
    assert sorted_rows(read_table(str(tmp_path / "history"))) == model_rows(changes, 2)
