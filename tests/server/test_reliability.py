"""Reliability: break the pipeline on purpose and prove no change is lost or duplicated.

A Delta table is written by a background thread (tests/writer.py: appends, copy-on-write
updates, deletes, merges, compactions, checkpoints) while its post-processed change feed
streams into Spark's parquet file sink, which is exactly-once through its ``_spark_metadata``
log. The stream is stopped at random points, its server is killed with SIGKILL, several
streams and several clients run at once; at the end every output must equal, as a multiset
and with the same column names and types, what batch reads of the same table give (for a
stream that began with a snapshot: that snapshot as inserts, then the batch read of the
later commits; for streaming net changes, which differ from batch by design: the table they
rebuild). Streaming restarts are
exactly-once only if the source serves the same rows for an offset range every time and
keeps commits whole across restarts, and if the rewrite's state and watermark survive them:
these tests are what shows that, under a real server and real concurrent writes.

Random choices are seeded; the seed is printed (``RELIABILITY_SEED=<seed>`` replays the same
choices, though not the same timing). ``--long`` runs more rounds and more kills.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from deltalake import DeltaTable
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.connect.session import SparkSession as ConnectSession
from pyspark.sql.streaming import StreamingQuery
from spark_cdc import ChangelogReader
from spark_cdc.stream_guard import DEFAULT_STATE_STORE, STATE_STORE_PROVIDER

from tests.support.delta_tables import apply_changes, latest_version, snapshot
from tests.support.feeds import as_tuples, collect_rows, model_post_process
from tests.support.harness import dedicated_session
from tests.support.writer import TableWriter

PROCESSED = {"rowId": "id", "computeUpdates": True}
CHANGE_TYPES = {"insert", "delete", "update_preimage", "update_postimage"}


@pytest.fixture
def default_session(spark: SparkSession) -> Iterator[SparkSession]:
    """Sessions created here become pyspark's default and active session (``create()`` sets
    both, and pyspark consults them, e.g. when it builds a UDF); give the harness session
    its place back afterwards so later tests never talk to a stopped or killed server."""
    yield spark
    ConnectSession._set_default_and_active_session(spark)  # type: ignore[arg-type]


def _stream(
    spark: SparkSession, path: str, *, from_snapshot: bool = False, **options: Any
) -> DataFrame:
    """The post-processed stream from version 0, or (``from_snapshot``) from the table's
    snapshot when the stream first runs, as inserts, then every later commit."""
    reader = ChangelogReader(spark, streaming=True).options(**PROCESSED)
    if not from_snapshot:
        reader.option("startingVersion", 0)
    return reader.options(**options).changes(path)


def _start(df: DataFrame, out: str, checkpoint: str) -> StreamingQuery:
    return df.writeStream.format("parquet").option("checkpointLocation", checkpoint).start(out)


WORKER_START_TIMEOUT = "Python worker failed to connect back"


class Supervised:
    """A streaming query and how to start it again after one kind of failure only.

    Spark gives a new Python worker a hard-coded 10 s to connect back (PythonWorkerFactory);
    on an overloaded machine a query can fail that way, typically while it starts its
    source. That is the machine, not the product: the query is started again from its
    checkpoint, which is what an operator does and what these tests prove safe. Any other
    failure fails the test; so does a fourth such restart.
    """

    def __init__(self, start: Callable[[], StreamingQuery], attempts: int = 3) -> None:
        self._start = start
        self.attempts = attempts
        self.restarts = 0
        self.query = start()

    def restart_if_worker_timed_out(self) -> bool:
        """Start the query again if it failed only because a worker came too late."""
        error = self.query.exception()
        if error is None or WORKER_START_TIMEOUT not in str(error):
            return False
        assert self.restarts < self.attempts, f"{self.restarts} restarts already: {error}"
        print(f"restarting a query whose Python worker did not connect back in time: {error}")
        self.query.stop()
        self.restarts += 1
        self.query = self._start()
        return True

    def drain(self) -> None:
        """Take everything available, then stop; the query must end without error."""
        while True:
            try:
                self.query.processAllAvailable()
                break
            except StreamingQueryException:
                if not self.restart_if_worker_timed_out():
                    raise
        self.query.stop()
        assert self.query.exception() is None, self.query.exception()


def _batch_log(checkpoint: str, out: str) -> tuple[int, int, int]:
    """(planned, written, committed) micro-batches: the sizes of the checkpoint's offset log,
    the sink's ``_spark_metadata`` log and the checkpoint's commit log. A planned batch
    without a commit is one the query was stopped (or killed) in."""

    def count(log: Path) -> int:  # the last batch id + 1: old entries get purged
        names = os.listdir(log) if log.is_dir() else []
        ids = [
            int(n.removesuffix(".compact")) for n in names if n.removesuffix(".compact").isdigit()
        ]
        return max(ids, default=-1) + 1

    return (
        count(Path(checkpoint) / "offsets"),
        count(Path(out) / "_spark_metadata"),
        count(Path(checkpoint) / "commits"),
    )


def _stop_point(before: tuple[int, int, int], after: tuple[int, int, int]) -> str:
    """Where in the micro-batch cycle a stop or kill landed, from the logs it left."""
    planned, written, committed = after
    if planned == committed:
        where = "between batches"
    elif written > committed:
        where = "after the sink's log, before the commit log"
    else:
        where = "mid-batch"
    return where + (", no batch completed" if committed == before[2] else "")


def _fields(df: DataFrame) -> list[tuple[str, Any]]:
    return [(f.name, f.dataType) for f in df.schema.fields]


def _assert_same_changes(
    got: DataFrame, expected: DataFrame, context: str, more: list[tuple[Any, ...]] | None = None
) -> list[tuple[Any, ...]]:
    """``got`` holds exactly the rows of ``expected`` plus ``more``, as multisets, with the
    same column names and types (a parquet read reports every column nullable, so
    nullability is not compared). Returns the expected rows."""
    assert _fields(got) == _fields(expected), context
    got_rows, want = collect_rows(got), collect_rows(expected) + (more or [])
    lost, extra = Counter(want) - Counter(got_rows), Counter(got_rows) - Counter(want)
    assert not lost and not extra, (
        f"{context}: {sum(lost.values())} rows lost {sorted(lost, key=str)[:10]}, "
        f"{sum(extra.values())} duplicated or unexpected {sorted(extra, key=str)[:10]}"
    )
    return want


def _pinned_snapshot(checkpoint: str) -> tuple[int, int] | None:
    """(version, commit time in ms) of the snapshot a stream's first micro-batch pinned, from
    the end offset of batch 0 (docs/delta-source.md, "Streams": the next version to read and
    the timestamp chain)."""
    first = Path(checkpoint) / "offsets" / "0"
    if not first.exists():
        return None
    source = json.loads(first.read_text().splitlines()[2])
    return source["version"] - 1, source["previousCommitTimestamp"]


def _snapshot_rows(path: str, version: int, stamp_ms: int, columns: list[str]) -> list[Any]:
    """The table at ``version`` as a snapshot stream serves it: every row an insert at that
    version and commit time (local wall-clock time, as ``collect()`` returns it)."""
    moment = datetime.fromtimestamp(stamp_ms // 1000) + timedelta(milliseconds=stamp_ms % 1000)
    meta = {"_change_type": "insert", "_commit_version": version, "_commit_timestamp": moment}
    table = DeltaTable(path, version=version).to_pyarrow_table().to_pylist()
    return [tuple({**r, **meta}[c] for c in columns) for r in table]


def _wait_for_trigger(query: StreamingQuery, timeout: float = 300) -> None:
    """Block until the query runs a trigger, or has ended (past source initialization,
    which takes seconds on a loaded machine: a stop timed from ``start()`` alone would
    never reach a micro-batch there)."""
    deadline = time.monotonic() + timeout
    while query.isActive and not query.status["isTriggerActive"]:
        assert time.monotonic() < deadline, f"no trigger ran within {timeout:.0f}s"
        time.sleep(0.1)


@pytest.mark.timeout(1800)  # --long: 100 rounds, and this machine may be shared
def test_stream_stopped_at_random_points_loses_and_duplicates_nothing(
    spark: SparkSession, tmp_path: Path, long_run: bool, seed: int
) -> None:
    """K rounds of start, run, stop on one checkpoint while the table is written, then one
    run to the end. The stream starts with the table's snapshot, as ``changes(path)`` does
    without a start option: the snapshot version its first micro-batch pins must be read
    again, whole, by every re-run of that batch although the table has moved on.

    One round in five stops 0-1 s after start (often before the query planned anything);
    the others stop at a random time after the query began a trigger: while the source
    plans or reads, while the sink writes, between the sink's log and the commit log, or
    between batches. The window is 0-3 s, or two micro-batch durations where batches take
    longer, and it doubles after a round in which no batch could complete (a re-run batch
    keeps the size it was planned with), so the stream keeps moving on a slow machine."""
    rng = random.Random(seed)
    rounds = 100 if long_run else 8  # --long for the many rounds (CI time)
    path, out, checkpoint = (str(tmp_path / name) for name in ("orders", "out", "cp"))
    writer = TableWriter(path, seed, pause=(0.1, 0.6))
    outcomes: Counter[str] = Counter()
    batch_seconds = [1.5]  # how long micro-batches with rows took
    spread = 3.0
    pinned: tuple[int, int] | None = None
    with writer:
        for _ in range(rounds):
            limit = rng.choice([1, 2, 4, 8, 1000])  # files per micro-batch
            early = rng.random() < 0.2
            before = _batch_log(checkpoint, out)
            stream = _stream(spark, path, from_snapshot=True, maxFilesPerTrigger=limit)
            query = _start(stream, out, checkpoint)
            try:
                if not early:
                    _wait_for_trigger(query)
                # A wait that ends early if the query fails (judged below); the server
                # refuses a timeout that rounds to 0 ms.
                query.awaitTermination(max(0.01, rng.uniform(0.0, 1.0 if early else spread)))
            except StreamingQueryException:
                pass
            query.stop()
            error = query.exception()
            if error is not None and WORKER_START_TIMEOUT in str(error):
                outcomes["failed: a Python worker came too late (overloaded machine)"] += 1
                continue
            assert error is None, f"seed {seed}: {error}"
            after = _batch_log(checkpoint, out)
            outcomes[_stop_point(before, after)] += 1
            pinned = pinned or _pinned_snapshot(checkpoint)  # before old offsets are purged
            batch_seconds += [
                p["durationMs"]["triggerExecution"] / 1000
                for p in query.recentProgress
                if p["numInputRows"]
            ]
            if after[2] > before[2]:
                spread = max(3.0, 2 * statistics.median(batch_seconds))
            elif not early:
                spread = min(2 * spread, 120.0)
    Supervised(lambda: _start(_stream(spark, path, from_snapshot=True), out, checkpoint)).drain()
    pinned = pinned or _pinned_snapshot(checkpoint)
    print(
        f"writer: {writer.stats}; stops: {dict(outcomes)}; batches (planned, written, "
        f"committed): {_batch_log(checkpoint, out)}; snapshot pinned at {pinned}"
    )

    assert pinned is not None
    version, stamp_ms = pinned
    assert latest_version(path) > version  # commits came after the snapshot
    expected = ChangelogReader(spark).options(**PROCESSED, startingVersion=version + 1)
    later = expected.changes(path)
    snapshot_rows = _snapshot_rows(path, version, stamp_ms, later.columns)
    got = spark.read.parquet(out)
    want = _assert_same_changes(got, later, f"seed {seed}", more=snapshot_rows)
    assert {r[-3] for r in want} == CHANGE_TYPES  # updates, deletes and inserts all flowed


# ----------------------------------------------------------------------------------------
# The server killed with SIGKILL.
# ----------------------------------------------------------------------------------------


def _wait_until_in_flight(
    stream: Supervised, checkpoint: str, out: str, committed: int, timeout: float = 300
) -> None:
    """Block until at least ``committed`` micro-batches are committed and the next one is
    planned but not committed: the query is inside a batch. Reads only the checkpoint, so
    the server is never asked anything at the moment it is killed."""
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        planned, _, done = _batch_log(checkpoint, out)
        if done >= committed and planned > done:
            return
        polls += 1
        if polls % 20 == 0 and not stream.query.isActive:  # about once a second
            assert stream.restart_if_worker_timed_out(), stream.query.exception()
        assert time.monotonic() < deadline, f"no batch in flight within {timeout:.0f}s"
        time.sleep(0.05)


@pytest.mark.timeout(1800)  # --long: four server starts, and this machine may be shared
# pyspark's listener thread of the session on the killed server says so when it is closed.
@pytest.mark.filterwarnings("ignore:StreamingQueryListenerBus Handler thread:UserWarning")
def test_server_killed_mid_batch_resumes_on_a_new_server_without_loss_or_duplicates(
    spark: SparkSession, default_session: SparkSession, tmp_path: Path, long_run: bool, seed: int
) -> None:
    """kill -9 of the server while a micro-batch runs (no shutdown hook, no stop: offsets
    logged, sink files half written, state not committed), then a new server and session
    resume from the same checkpoint. The writer keeps committing while no server runs."""
    rng = random.Random(seed)
    kills = 3 if long_run else 1
    path, out, checkpoint = (str(tmp_path / name) for name in ("orders", "out", "cp"))
    kill_points: list[str] = []
    with TableWriter(path, seed, pause=(0.1, 0.5)) as writer:
        for life in range(kills):
            with dedicated_session(tmp_path, f"server-{life}") as (server, session):
                stream = _stream(session, path, maxFilesPerTrigger=rng.choice([1, 2, 4]))
                before = _batch_log(checkpoint, out)
                supervised = Supervised(lambda df=stream: _start(df, out, checkpoint))
                _wait_until_in_flight(supervised, checkpoint, out, committed=before[2] + 1)
                time.sleep(rng.uniform(0.0, 0.5))  # somewhere inside the batch
                server.kill()  # SIGKILL: the process group, or the container's PID 1
                assert not server.alive()
                kill_points.append(_stop_point(before, _batch_log(checkpoint, out)))
        with dedicated_session(tmp_path, "server-last") as (server, session):
            last = Supervised(lambda: _start(_stream(session, path), out, checkpoint))
            writer.wait_for_commits(writer.stats.commits + 5)  # commits after the restart too
            writer.stop()
            last.drain()
    print(f"writer: {writer.stats}; kills: {kill_points}; batches: {_batch_log(checkpoint, out)}")

    expected = ChangelogReader(spark).options(**PROCESSED).changes(path)
    want = _assert_same_changes(spark.read.parquet(out), expected, f"seed {seed}")
    assert {r[-3] for r in want} == CHANGE_TYPES


# ----------------------------------------------------------------------------------------
# Concurrency: several streams on one table, several clients on one server.
# ----------------------------------------------------------------------------------------

NET = {"rowId": "id", "deduplicationMode": "netChanges", "computeUpdates": True}


def _replayed(changes: DataFrame) -> Counter[tuple[Any, ...]]:
    """The table a change feed rebuilds from nothing: +1 per insert/postimage row image,
    -1 per delete/preimage (order does not matter for a multiset)."""
    columns = [c for c in changes.columns if not c.startswith("_")]
    return apply_changes(Counter(), [r.asDict() for r in changes.collect()], columns)


def test_three_streams_over_one_table_being_written_each_get_their_own_result(
    spark: SparkSession, tmp_path: Path, seed: int
) -> None:
    """Three queries read one table while it is written: post-processed with updates,
    the raw source, net changes. Each has its own source instance, offsets, state and
    watermark; nothing may leak from one to another. The first two equal their batch
    reads. Streaming net changes differ from batch by design (docs/post-processing.md, "Net
    changes": an id touched again after its emission opens a new window) but must rebuild
    the same table: replayed, it equals the table's last snapshot, as the batch net changes
    do."""
    path = str(tmp_path / "orders")
    writer = TableWriter(path, seed, pause=(0.05, 0.3)).create()
    streams = {
        "updates": _stream(spark, path, maxFilesPerTrigger=4),
        "raw": spark.readStream.format("delta_changelog")
        .options(startingVersion=0, maxFilesPerTrigger=2)
        .load(path),
        "net": ChangelogReader(spark, streaming=True)
        .options(**NET, startingVersion=0)
        .changes(path),
    }
    supervised = {
        name: Supervised(
            lambda df=df, name=name: _start(df, str(tmp_path / name), str(tmp_path / f"{name}-cp"))
        )
        for name, df in streams.items()
    }
    with writer:  # the writer starts once all three queries run
        writer.wait_for_commits(40)
    for stream in supervised.values():
        stream.drain()
    print(f"writer: {writer.stats}")

    def out(name: str) -> DataFrame:
        return spark.read.parquet(str(tmp_path / name))

    batch = ChangelogReader(spark).options(**PROCESSED).changes(path)
    _assert_same_changes(out("updates"), batch, f"seed {seed}, updates")
    raw = spark.read.format("delta_changelog").load(path)
    _assert_same_changes(out("raw"), raw, f"seed {seed}, raw source")
    batch_net = ChangelogReader(spark).options(**NET).changes(path)
    assert _fields(out("net")) == _fields(batch_net)
    columns = [c for c in batch_net.columns if not c.startswith("_")]
    final = snapshot(path, latest_version(path), columns)
    assert _replayed(batch_net) == final
    assert _replayed(out("net")) == final, f"seed {seed}, net changes"


TIME_ZONE = "spark.sql.session.timeZone"
CLIENT_KEY = "spark.cdc.reliability.client"
# One client per row: its session time zone. The zones are hours apart, so a client that
# read another's zone would move its timestamp bound by hours and get another result.
CLIENTS = {
    "batch-updates": "UTC",
    "stream-updates": "America/Los_Angeles",
    "stream-net": "Asia/Tokyo",
    "batch-net-by-time": "Asia/Kolkata",
}


def _state_store_of(checkpoint: str) -> str:
    """The state store a query started with, as its first offset log entry records it."""
    metadata = (Path(checkpoint) / "offsets" / "0").read_text().splitlines()[1]
    return json.loads(metadata)["conf"][STATE_STORE_PROVIDER]


def test_four_clients_on_one_server_get_correct_and_independent_results(
    spark: SparkSession,
    spark_remote: str,
    default_session: SparkSession,
    tmp_path: Path,
    seed: int,
) -> None:
    """Four threads, each with its own session on the harness server, run different
    post-processing at the same time, each on its own table: batch updates on a table with
    the change data feed on, a stream of updates over a table being written, a stream of
    net changes, batch net changes bounded by a zone-less timestamp. Each result equals one
    computed independently afterwards; each session keeps its own time zone, settings,
    temporary view names (both streams use the memory sink name "changes") and state store
    (the net changes start switches only its own session to RocksDB, for one command)."""
    tables = {name: str(tmp_path / name) for name in CLIENTS}
    for offset, name in enumerate(("batch-updates", "stream-net", "batch-net-by-time")):
        TableWriter(tables[name], seed + offset, cdf=name == "batch-updates").write(30)
    live = TableWriter(tables["stream-updates"], seed + 3, pause=(0.05, 0.3)).create()
    # The time bound: the first commit from version 10 on that has rows, as a wall-clock
    # time in the client's zone (collect() gives the client machine's local time).
    raw = spark.read.format("delta_changelog").load(tables["batch-net-by-time"])
    first = raw.where(F.col("_commit_version") >= 10).orderBy("_commit_version").first()
    assert first is not None
    bound_version = first["_commit_version"]
    wall_clock = first["_commit_timestamp"].astimezone(ZoneInfo(CLIENTS["batch-net-by-time"]))
    bound = wall_clock.strftime("%Y-%m-%d %H:%M:%S.%f")
    checkpoints = {name: str(tmp_path / f"{name}-cp") for name in CLIENTS}
    barrier = threading.Barrier(len(CLIENTS), timeout=300)

    def stream_into_memory(df: DataFrame, name: str) -> StreamingQuery:
        writer = df.writeStream.format("memory").queryName("changes")
        return writer.option("checkpointLocation", checkpoints[name]).start()

    def work(session: SparkSession, name: str) -> DataFrame:
        table = tables[name]
        if name == "batch-updates":
            return ChangelogReader(session).options(**PROCESSED).changes(table)
        if name == "batch-net-by-time":
            reader = ChangelogReader(session).options(**NET, startingTimestamp=bound)
            return reader.changes(table)
        if name == "stream-updates":
            stream = _stream(session, table)
            supervised = Supervised(lambda: stream_into_memory(stream, name))
            with live:  # written while the query runs
                live.wait_for_commits(30)
        else:  # a table written before: all its commits come in the first micro-batch
            reader = ChangelogReader(session, streaming=True).options(**NET, startingVersion=0)
            stream = reader.changes(table)
            supervised = Supervised(lambda: stream_into_memory(stream, name))
        supervised.drain()
        return session.table("changes")

    def client(name: str) -> dict[str, Any]:
        session = SparkSession.builder.remote(spark_remote).create()
        try:
            session.conf.set(TIME_ZONE, CLIENTS[name])
            session.conf.set(CLIENT_KEY, name)
            barrier.wait()
            result = work(session, name)
            return {
                "rows": collect_rows(result),
                "fields": _fields(result),
                "conf": (session.conf.get(TIME_ZONE), session.conf.get(CLIENT_KEY)),
                "state store": session.conf.get(STATE_STORE_PROVIDER, None),
            }
        except BaseException:
            barrier.abort()
            raise
        finally:
            session.stop()

    with ThreadPoolExecutor(len(CLIENTS)) as pool:
        futures = {name: pool.submit(client, name) for name in CLIENTS}
        results = {name: future.result(timeout=600) for name, future in futures.items()}
    print(f"writer of stream-updates: {live.stats}")

    # Computed independently, in the main session: the Python reference model over the raw
    # feed for the first client, batch reads for the others.
    raw_updates = spark.read.format("delta_changelog").load(tables["batch-updates"])
    modelled = model_post_process(
        [r.asDict() for r in raw_updates.collect()],
        ["id"],
        row_version=None,
        carryover_removal=True,
        update_detection=True,
    )
    expected = {
        "batch-updates": (as_tuples(modelled, raw_updates.schema), _fields(raw_updates)),
        "stream-updates": ChangelogReader(spark)
        .options(**PROCESSED)
        .changes(tables["stream-updates"]),
        "stream-net": ChangelogReader(spark).options(**NET).changes(tables["stream-net"]),
        "batch-net-by-time": ChangelogReader(spark)
        .options(**NET, startingVersion=bound_version)
        .changes(tables["batch-net-by-time"]),
    }
    for name, want in expected.items():
        rows, fields = want if isinstance(want, tuple) else (collect_rows(want), _fields(want))
        assert rows, f"{name}: an empty expected result proves nothing"
        assert results[name]["fields"] == fields, name
        assert results[name]["rows"] == rows, name
        assert results[name]["conf"] == (CLIENTS[name], name)
        assert results[name]["state store"] in (None, DEFAULT_STATE_STORE), name
    assert spark.conf.get(CLIENT_KEY, None) is None  # nothing leaked into the main session
    # Both run on the session's store: net changes' applyInPandasWithState needs no RocksDB.
    assert _state_store_of(checkpoints["stream-updates"]) == DEFAULT_STATE_STORE
    assert _state_store_of(checkpoints["stream-net"]) == DEFAULT_STATE_STORE
