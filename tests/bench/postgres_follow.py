"""The ``postgres_changelog`` source following a busy table: a writer makes 10,000 changes a
second (ten transactions a second, each updating 1,000 rows) for ten minutes (20 s with
``--quick``), while a stream (``processingTime`` trigger of one second, log only, into the
``noop`` sink) follows it. The issue's target: every change served within two trigger
intervals of its commit, and no process above 2 GB of memory.

How a change's lag is measured, exactly: each writer transaction reads
``pg_current_wal_insert_lsn()`` just before its ``COMMIT``: a position after the previous
transaction's commit record and at or before its own; the first micro-batch whose end offset
(the last commit LSN it served) is at or past that position is the one that served it. Its
lag is that micro-batch's end (the progress' ``timestamp`` plus its ``triggerExecution``; the
server's clock is this machine's) minus the moment the writer's ``COMMIT`` returned. The
writer starts once the stream's first micro-batch is done; the first tenth of its run is
left out.

Memory: the resident size of every process of the Spark server (the JVM and its Python
workers) and of the database, sampled every 50 ms; the figure notes the largest.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from spark_cdc.server_plugin.postgres.connection import Session
from spark_cdc.testing.postgres import PostgresServer, start_postgres

from tests.bench.common import Bench, Figure
from tests.bench.worker_memory import Sampler

BENCHMARK = "postgres_follow"
CHANGES_PER_S = 10_000
TRANSACTIONS_PER_S = 10
TRIGGER_S = 1.0
TARGET_INTERVALS = 2.0
MEMORY_TARGET_MB = 2048
ROWS = 100_000


def run(bench: Bench) -> list[Figure]:
    if bench.server_pid is None:
        return []
    seconds = 20 if bench.quick else 600
    with start_postgres("127.0.0.1") as pg:
        pg.sql(
            "CREATE TABLE t (k bigint PRIMARY KEY, v text, amount double precision, "
            "seq bigint, at timestamptz); "
            f"INSERT INTO t SELECT i, md5(i::text), i * 0.5, i, now() "
            f"FROM generate_series(1, {ROWS}) i; "
            "CREATE PUBLICATION follow_pub FOR TABLE t; "
            "SELECT pg_create_logical_replication_slot('follow', 'pgoutput')"
        )
        return [_follow(bench, pg, seconds)]


def _follow(bench: Bench, pg: PostgresServer, seconds: float) -> Figure:
    checkpoint = bench.folder(BENCHMARK) / f"checkpoint-{time.time_ns()}"
    feed = (
        bench.spark.readStream.format("postgres_changelog")
        .options(**pg.options(), slot="follow", publication="follow_pub", initialCopy="false")
        .load("t")
    )
    query = (
        feed.writeStream.format("noop")
        .trigger(processingTime=f"{TRIGGER_S:g} seconds")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    progress: dict[int, dict[str, Any]] = {}
    written: list[tuple[int, float]] = []  # (WAL position before COMMIT, when it returned)
    stop = threading.Event()
    writer = threading.Thread(target=_write, args=(pg, stop, written), daemon=True)
    database = _postmaster_session(pg.folder / "data")
    try:
        with (
            Sampler(bench.server_pid, ("java", "python")) as spark_side,
            Sampler(database, ("postgres",)) as database_side,
        ):
            while not query.recentProgress:  # the stream is up: what follows is following
                time.sleep(0.5)
            started = time.time()
            writer.start()
            while time.time() - started < seconds:
                time.sleep(5)
                _collect(query, progress)
            stop.set()
            writer.join()
            last = written[-1][0]
            deadline = time.time() + 60
            while time.time() < deadline and _served_to(progress) < last:
                time.sleep(1)
                _collect(query, progress)
        if query.exception() is not None:
            raise query.exception()
    finally:
        stop.set()
        query.stop()
    return _figure(progress, written, started, seconds, spark_side, database_side)


def _write(pg: PostgresServer, stop: threading.Event, written: list[tuple[int, float]]) -> None:
    """Ten transactions a second, each updating the next 1,000 rows, on a schedule (a late
    transaction does not shift the ones after it)."""
    per = CHANGES_PER_S // TRANSACTIONS_PER_S
    session = Session({**pg.options(), "dbname": pg.database})
    first, due = 0, time.monotonic()
    try:
        while not stop.is_set():
            session.execute("BEGIN", "begin")
            session.execute(
                f"UPDATE t SET seq = seq + 1 WHERE k > {first} AND k <= {first + per}", "update"
            )
            at = session.rows(
                "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint AS p", "position"
            )[0]["p"]
            session.execute("COMMIT", "commit")
            written.append((int(at), time.time()))
            first = (first + per) % ROWS
            due += 1 / TRANSACTIONS_PER_S
            time.sleep(max(0.0, due - time.monotonic()))
    finally:
        session.close()


def _collect(query: Any, progress: dict[int, dict[str, Any]]) -> None:
    """The query's progress so far, by batch (Spark keeps only the last hundred)."""
    for entry in query.recentProgress:
        if entry["sources"] and entry["sources"][0].get("endOffset"):
            progress[entry["batchId"]] = entry


def _end_lsn(entry: dict[str, Any]) -> int:
    end = entry["sources"][0]["endOffset"]
    return int((json.loads(end) if isinstance(end, str) else end)["lsn"] or 0)


def _served_to(progress: dict[int, dict[str, Any]]) -> int:
    return max((_end_lsn(entry) for entry in progress.values()), default=0)


def _figure(
    progress: dict[int, dict[str, Any]],
    written: list[tuple[int, float]],
    started: float,
    seconds: float,
    spark_side: Sampler,
    database_side: Sampler,
) -> Figure:
    batches = [progress[b] for b in sorted(progress)]
    ends = np.maximum.accumulate(np.array([_end_lsn(b) for b in batches], dtype=np.int64))
    done_at = np.array(
        [
            datetime.fromisoformat(b["timestamp"].replace("Z", "+00:00")).timestamp()
            + b["durationMs"]["triggerExecution"] / 1000
            for b in batches
        ]
    )
    began = np.array(
        [datetime.fromisoformat(b["timestamp"].replace("Z", "+00:00")).timestamp() for b in batches]
    )
    positions = np.array([p for p, _ in written], dtype=np.int64)
    committed = np.array([t for _, t in written])
    served_by = np.searchsorted(ends, positions, side="left")
    if (served_by >= len(batches)).any():
        missing = int((served_by >= len(batches)).sum())
        raise AssertionError(f"{missing} of {len(written)} transactions were never served")
    steady = committed >= started + seconds / 10
    lags = (done_at[served_by] - committed)[steady]
    rate = len(written) * (CHANGES_PER_S / TRANSACTIONS_PER_S) / (committed[-1] - committed[0])
    peak_mb = {
        "Spark (JVM and Python workers)": spark_side.peak_kb / 1024,
        "PostgreSQL": database_side.peak_kb / 1024,
    }
    worst = float(lags.max()) / TRIGGER_S
    return Figure(
        benchmark=BENCHMARK,
        case=(
            f"following a writer of {CHANGES_PER_S:,} changes/s for {seconds / 60:g} min, "
            f"{TRIGGER_S:g} s trigger"
        ),
        ratio_label="the largest lag, in trigger intervals",
        ratio=worst,
        target=f"≤ {TARGET_INTERVALS:g}",
        met=worst <= TARGET_INTERVALS and max(peak_mb.values()) <= MEMORY_TARGET_MB,
        medians={
            "median lag s": float(np.median(lags)),
            "99th percentile lag s": float(np.percentile(lags, 99)),
            "writer changes/s": rate,
            **{f"peak MB of one {side} process": mb for side, mb in peak_mb.items()},
        },
        samples={  # the least, median, 90th and 99th percentile, largest
            "lag s": _quantiles(lags),
            "micro-batch s": _quantiles(np.array([took for took in done_at - began])),
        },
        notes=(
            f"{len(batches)} micro-batches, {len(written):,} transactions; lag from a "
            "transaction's COMMIT to the end of the micro-batch that served it; processes "
            f"at most {MEMORY_TARGET_MB} MB each"
        ),
    )


def _quantiles(values: np.ndarray) -> list[float]:
    return [round(float(v), 3) for v in np.percentile(values, [0, 50, 90, 99, 100])]


def _postmaster_session(folder: Path) -> int:
    """The session of the database's processes (the postmaster's)."""
    pid = int((folder / "postmaster.pid").read_text().split()[0])
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[3])
