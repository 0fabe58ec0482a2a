"""Batch reads of a Delta change feed through ``ChangelogReader``, side by side on the
streaming benchmark's tables (every commit a copy-on-write rewrite: half the commit's
changelog rows deletes, half inserts, 90% of the pairs carry-overs, 10% updates):

(raw)    ``spark.read.format("delta_changelog")``, nothing resolved;
(source) ``ChangelogReader`` with ``rowId`` and ``computeUpdates``: the source resolves
         carry-overs and updates itself (``postProcessing=source``, the default);
(client) the same with ``postProcessing=client``: the client-built window plan.

Each side reads the table's commits 1..n into the ``noop`` sink; sides interleaved, the
rate is changelog rows read (the raw feed's rows) per second of wall time.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from spark_cdc import ChangelogReader

from tests.bench.common import (
    Bench,
    Figure,
    at_least,
    interleaved,
    medians,
    paired_spread,
    seconds,
)
from tests.bench.streaming import COLUMNS, QUICK_COLUMNS, QUICK_SIZES, SIZES, delta_table

BENCHMARK = "delta_batch"
TARGETED = (100_000, 1_000_000)  # rows per commit where the issue sets source/raw >= 1
VS_CLIENT_AT = 1_000_000  # where it sets source/client >= 3
AT_LEAST_S = 4.0  # of reads per side and case: a read of 100k rows per commit takes 0.25 s


def _raw(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.format("delta_changelog").option("startingVersion", 1).load(path)


def _reader(spark: SparkSession, path: str, where: str) -> DataFrame:
    reader = ChangelogReader(spark).options(rowId="id", computeUpdates=True, startingVersion=1)
    return reader.option("postProcessing", where).changes(path)


def _noop(df: DataFrame) -> Any:
    return lambda: seconds(lambda: df.write.format("noop").mode("overwrite").save())


def measure(bench: Bench, rows_per_commit: int, commits: int, columns: int) -> list[Figure]:
    spark = bench.spark
    path = delta_table(bench, rows_per_commit, commits, columns)
    total = rows_per_commit * commits
    runs = {
        "raw": _noop(_raw(spark, path)),
        "source": _noop(_reader(spark, path, "source")),
        "client": _noop(_reader(spark, path, "client")),
    }
    for run in runs.values():  # warm-up: the first touch of a table reads its log cold
        run()
    samples = interleaved(runs, bench.reps, at_least_s=0 if bench.quick else AT_LEAST_S)
    rates = {name: [total / s for s in values] for name, values in samples.items()}
    rate = medians(rates)
    case = f"{rows_per_commit:,} rows/commit, {columns} columns"
    vs_raw = rate["source"] / rate["raw"]
    vs_client = rate["source"] / rate["client"]
    targeted = rows_per_commit in TARGETED
    common = {
        "medians": {name: round(value) for name, value in rate.items()},
        "samples": {name: [round(v) for v in values] for name, values in rates.items()},
        "notes": f"{commits} commits of {rows_per_commit:,} changelog rows",
    }
    return [
        Figure(
            BENCHMARK,
            case,
            "source/raw rows/s",
            round(vs_raw, 3),
            "≥ 1" if targeted else None,
            at_least(vs_raw, 1.0) if targeted else None,
            spread=paired_spread(rates["source"], rates["raw"]),
            **common,
        ),
        Figure(
            BENCHMARK,
            case,
            "source/client rows/s",
            round(vs_client, 3),
            "≥ 3" if rows_per_commit == VS_CLIENT_AT else None,
            at_least(vs_client, 3.0) if rows_per_commit == VS_CLIENT_AT else None,
            spread=paired_spread(rates["source"], rates["client"]),
            **common,
        ),
    ]


def run(bench: Bench) -> list[Figure]:
    figures: list[Figure] = []
    for columns in QUICK_COLUMNS if bench.quick else COLUMNS:
        for rows_per_commit, commits in QUICK_SIZES if bench.quick else SIZES:
            figures += measure(bench, rows_per_commit, commits, columns)
    return figures
