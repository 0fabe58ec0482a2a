"""Batch post-processing throughput: ``post_process`` against a raw read of the same data.

One realistic change feed per size is written once to parquet in the work folder (and
reused): many commits of equal size, row ids touched again and again across commits, and
per commit a mix of copy-on-write carry-over pairs (a delete and an insert of the same,
unchanged row), real updates (a delete and an insert whose values differ), plain inserts
and plain deletes, over eight columns of mixed types. It is generated on the server from
``spark.range`` with column expressions, so ten million rows take seconds, not a Python loop.

Each side reads the parquet folder and writes into the ``noop`` sink, so both pay the same
scan and the figure is what the post-processing plan adds (Spark's windows over
(id, ``_commit_version``), resp. over id for net changes, with their shuffle and sort):

(raw)          ``spark.read.parquet(p)``;
(dropCarryovers) ``post_process(.., ChangelogSpec(row_id=["id"]), {computeUpdates})``;
(netChanges)   the same with ``deduplicationMode=netChanges`` and ``computeUpdates``.

The three sides run interleaved in one process (a loaded machine's drift hits all), each
repeated ``reps`` times; a side's rate is input rows per second of wall time, and a
figure is the median processed rate over the median raw rate.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from spark_cdc.rewrite import ChangelogSpec, post_process

from tests.bench.common import Bench, Figure, interleaved, medians, seconds

BENCHMARK = "batch"
SIZES = [1_000_000, 10_000_000]
QUICK_SIZES = [10_000]
ROWS_PER_COMMIT = 10_000
QUICK_ROWS_PER_COMMIT = 500
IDS_PER_ROW = 0.25  # id space = a quarter of the rows: every id is touched ~4 times
STRIDE = 1_000_003  # a prime: x -> x * STRIDE + shift is one-to-one modulo the id space
MARKER = "_bench_complete"
SPEC = ChangelogSpec(row_id=["id"])
MODES: dict[str, dict[str, str | bool]] = {
    "dropCarryovers": {"deduplicationMode": "dropCarryovers", "computeUpdates": True},
    "netChanges": {"deduplicationMode": "netChanges", "computeUpdates": True},
}
# Share of events per commit, by kind; an event is one slot of two rows.
CARRYOVER, UPDATE, INSERT = 6, 8, 9  # of ten: 60% carry-overs, 20% updates, 10% each ins/del


def _event_columns(rows_per_commit: int, id_space: int) -> dict[str, Column]:
    """Where row ``r`` sits: its commit, its event (a slot of two rows) and the event kind."""
    r = F.col("id")
    version = (r / rows_per_commit).cast("long")
    position = F.pmod(r, F.lit(rows_per_commit))
    slot = (position / 2).cast("long")
    half = F.pmod(position, F.lit(2))
    draw = F.pmod(F.xxhash64(version, slot), F.lit(10))
    kind = (
        F.when(draw < CARRYOVER, "carryover")
        .when(draw < UPDATE, "update")
        .when(draw < INSERT, "insert")
        .otherwise("delete")
    )
    # A pair shares its slot's id; lone inserts/deletes give each row its own id. Within a
    # commit ids are distinct (one-to-one map), across commits the shift revisits them.
    pair = kind.isin("carryover", "update")
    x = F.when(pair, slot * 2).otherwise(position)
    row_id = F.pmod(x * STRIDE + version * 7919, F.lit(id_space))
    return {"version": version, "half": half, "kind": kind, "row_id": row_id}


def _change_columns() -> dict[str, Column]:
    kind, half, version = F.col("kind"), F.col("half"), F.col("version")
    change = F.when(kind == "insert", "insert").when(kind == "delete", "delete")
    change = change.otherwise(F.when(half == 0, "delete").otherwise("insert"))
    # The image's generation: an update's insert differs from its delete; a carry-over's
    # two rows are the same.
    generation = version + F.when((kind == "update") & (half == 1), 1).otherwise(0)
    return {"change": change, "generation": generation}


def _data_columns() -> list[Column]:
    rid, gen = F.col("row_id"), F.col("generation")
    return [
        rid.alias("id"),
        F.concat(F.lit("customer-"), F.pmod(rid, F.lit(9973)).cast("string")).alias("customer"),
        (rid * 0.25 + gen).alias("amount"),
        F.pmod(rid + gen, F.lit(100)).cast("int").alias("quantity"),
        (F.pmod(rid, F.lit(100_000)) / 100 + gen).cast("decimal(12,2)").alias("price"),
        F.element_at(
            F.array(*[F.lit(s) for s in ("new", "paid", "shipped", "returned")]),
            (F.pmod(rid + gen, F.lit(4)) + 1).cast("int"),
        ).alias("status"),
        F.date_add(F.lit("2020-01-01").cast("date"), F.pmod(rid, F.lit(1500)).cast("int")).alias(
            "created"
        ),
        (F.pmod(rid, F.lit(3)) != 0).alias("active"),
    ]


def feed_frame(spark: SparkSession, rows: int, rows_per_commit: int) -> DataFrame:
    """The change feed as a server-side plan over ``spark.range(rows)``."""
    id_space = max(rows_per_commit, int(rows * IDS_PER_ROW))
    events = spark.range(rows).select(
        *[c.alias(n) for n, c in _event_columns(rows_per_commit, id_space).items()]
    )
    changes = events.select("*", *[c.alias(n) for n, c in _change_columns().items()])
    return changes.select(
        *_data_columns(),
        F.col("change").alias("_change_type"),
        F.col("version").alias("_commit_version"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("version")).alias("_commit_timestamp"),
    )


def rows_per_commit(rows: int) -> int:
    return QUICK_ROWS_PER_COMMIT if rows < ROWS_PER_COMMIT * 10 else ROWS_PER_COMMIT


def feed_path(bench: Bench, rows: int) -> str:
    """The parquet feed of ``rows`` rows, written on first use and reused after."""
    per_commit = rows_per_commit(rows)
    path = bench.work / f"batch_feed_{rows}x{per_commit}"
    if not (path / MARKER).exists():
        feed_frame(bench.spark, rows, per_commit).write.mode("overwrite").parquet(str(path))
        (path / MARKER).touch()
    return str(path)


def _noop(df: DataFrame) -> None:
    df.write.format("noop").mode("overwrite").save()


def sides(spark: SparkSession, path: str) -> dict[str, Callable[[], float]]:
    """Each side as a timed run: read the feed, (post-process it,) write to noop."""

    def raw() -> float:
        return seconds(lambda: _noop(spark.read.parquet(path)))

    def processed(options: dict[str, str | bool]) -> Callable[[], float]:
        return lambda: seconds(lambda: _noop(post_process(spark.read.parquet(path), SPEC, options)))

    return {"raw": raw, **{mode: processed(options) for mode, options in MODES.items()}}


def measure(bench: Bench, rows: int) -> list[Figure]:
    path = feed_path(bench, rows)
    if not bench.quick:
        _noop(bench.spark.read.parquet(path))  # warm-up, untimed: the first scan loads classes
    per_commit = rows_per_commit(rows)
    samples = interleaved(sides(bench.spark, path), bench.reps)
    rates = {side: [rows / s for s in values] for side, values in samples.items()}
    rate = medians(rates)
    figures = []
    for mode in MODES:
        shown = {"raw": rate["raw"], mode: rate[mode]}
        figures.append(
            Figure(
                benchmark=BENCHMARK,
                case=f"{rows:,} rows, {mode} + computeUpdates",
                ratio_label="post_process/raw rows/s",
                ratio=round(rate[mode] / rate["raw"], 3),
                medians={side: round(value) for side, value in shown.items()},
                samples={side: [round(v) for v in rates[side]] for side in shown},
                notes=(
                    f"parquet feed, {rows // per_commit} commits of {per_commit:,} rows, "
                    "8 data columns; "
                    "60% carry-over pairs, 20% updates, 10% inserts, 10% deletes (by event); "
                    "input rows per second of wall time into the noop sink"
                ),
            )
        )
    return figures


def run(bench: Bench) -> list[Figure]:
    figures: list[Figure] = []
    for rows in QUICK_SIZES if bench.quick else SIZES:
        figures += measure(bench, rows)
    return figures
