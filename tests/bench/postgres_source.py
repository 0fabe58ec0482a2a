"""The ``postgres_changelog`` source against what PostgreSQL itself does with the same rows,
on one machine where the database and Spark share the cores, interleaved:

(a) The first copy: a stream's first micro-batch (``availableNow``, a new checkpoint each
run) into the ``noop`` sink, against one ``COPY (SELECT …) TO STDOUT (FORMAT binary)`` of
the table into a null sink (``psql``'s ``\\copy`` to ``/dev/null``). The issue's target:
≥ 0.5 of the COPY's rate (≥ 1.0 where the database has cores of its own).

(b) The log: a batch read of the slot's changes (updates of every row, one transaction per
10,000) into ``noop``, against the server returning the same messages
(``pg_logical_slot_peek_binary_changes``, counted in SQL). Target: ≥ 0.25.

The database is started here (``spark_cdc.testing.postgres``) and stopped after.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

from spark_cdc.testing.postgres import PostgresServer, start_postgres

from tests.bench.common import (
    Bench,
    Figure,
    at_least,
    interleaved,
    medians,
    noop_seconds,
    paired_spread,
    seconds,
)

BENCHMARK = "postgres_source"
COPY_TARGET = 0.5
LOG_TARGET = 0.25
SLOTS = {"copy": "bench_copy", "log": "bench_log"}  # a stream moves its slot on
COLUMNS = "k bigint PRIMARY KEY, v text, amount double precision, seq bigint, at timestamptz"


def run(bench: Bench) -> list[Figure]:
    rows, changes = (10_000, 10_000) if bench.quick else (10_000_000, 1_000_000)
    with start_postgres("127.0.0.1") as pg:
        pg.sql(
            f"CREATE TABLE t ({COLUMNS}); "
            "INSERT INTO t SELECT i, md5(i::text), i * 0.5, i, now() "
            f"FROM generate_series(1, {rows}) i; "
            "CREATE PUBLICATION bench_pub FOR TABLE t; "
            + "".join(
                f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput'); "
                for slot in SLOTS.values()
            )
            + "VACUUM ANALYZE t"
        )
        step = 10_000
        pg.sql(
            "; ".join(
                f"UPDATE t SET seq = seq + 1 WHERE k > {first} AND k <= {first + step}"
                for first in range(0, changes, step)
            )
        )
        return [_copy(bench, pg, rows), _log(bench, pg, changes)]


def _options(pg: PostgresServer, side: str) -> dict[str, str]:
    return {**pg.options(), "slot": SLOTS[side], "publication": "bench_pub"}


def _copy(bench: Bench, pg: PostgresServer, rows: int) -> Figure:
    spark, runs = bench.spark, iter(range(10**6))

    def ours() -> float:
        checkpoint = bench.folder(BENCHMARK) / f"checkpoint-{next(runs)}"
        shutil.rmtree(checkpoint, ignore_errors=True)  # a new stream: a first copy each run
        feed = (
            spark.readStream.format("postgres_changelog").options(**_options(pg, "copy")).load("t")
        )

        def go() -> None:
            query = (
                feed.writeStream.format("noop")
                .trigger(availableNow=True)
                .option("checkpointLocation", str(checkpoint))
                .start()
            )
            query.awaitTermination()
            if query.exception() is not None:
                raise query.exception()

        return seconds(go)

    def database() -> float:
        return _psql_seconds(pg, "\\copy (SELECT * FROM t) TO '/dev/null' WITH (FORMAT binary)")

    ours()  # warm-up: the workers and the first connection
    timed = interleaved({"postgres_changelog": ours, "COPY": database}, bench.reps)
    return _figure(
        timed,
        "COPY",
        f"first copy of {rows:,} rows; bigint, text, double, bigint, timestamptz",
        COPY_TARGET,
        rows,
        "a stream's first micro-batch (availableNow) into noop; COPY … TO STDOUT (FORMAT "
        "binary) into /dev/null with psql; both on this machine's cores",
    )


def _log(bench: Bench, pg: PostgresServer, changes: int) -> Figure:
    spark = bench.spark
    feed: Callable[[], Any] = lambda: (  # noqa: E731
        spark.read.format("postgres_changelog")
        .options(**_options(pg, "log"), startingVersion="0")
        .load("t")
    )
    peek = (
        f"SELECT count(*) FROM pg_logical_slot_peek_binary_changes('{SLOTS['log']}', NULL, NULL, "
        "'proto_version', '1', 'publication_names', 'bench_pub')"
    )
    counted = feed().where("_change_type = 'update_postimage'").count()
    if counted != changes:
        raise AssertionError(f"the log read {counted:,} updates, {changes:,} were made")
    timed = interleaved(
        {"postgres_changelog": noop_seconds(feed), "server": lambda: _psql_seconds(pg, peek)},
        bench.reps,
    )
    return _figure(
        timed,
        "server",
        f"the log of {changes:,} updates (one transaction per 10,000)",
        LOG_TARGET,
        changes,
        "a batch read of the slot into noop; the server's own "
        "pg_logical_slot_peek_binary_changes, counted in SQL",
    )


def _psql_seconds(pg: PostgresServer, command: str) -> float:
    psql = [str(pg.binaries / "psql"), "-X", "-q", "-h", "127.0.0.1", "-p", str(pg.port)]
    started = time.perf_counter()
    subprocess.run([*psql, "-U", pg.user, "-d", pg.database, "-c", command], check=True)
    return time.perf_counter() - started


def _figure(
    timed: dict[str, list[float]],
    baseline: str,
    case: str,
    target: float,
    count: int,
    notes: str,
) -> Figure:
    ours = timed["postgres_changelog"]
    ratio = statistics.median([b / s for s, b in zip(ours, timed[baseline], strict=True)])
    return Figure(
        benchmark=BENCHMARK,
        case=case,
        ratio_label=f"postgres_changelog rows/s ÷ {baseline} rows/s (median of paired runs)",
        ratio=ratio,
        target=f"≥ {target}",
        met=at_least(ratio, target),
        medians={f"{name} rows/s": count / s for name, s in medians(timed).items()},
        samples={f"{name} seconds": values for name, values in timed.items()},
        spread=paired_spread(timed[baseline], ours),
        notes=notes,
    )
