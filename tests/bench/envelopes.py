"""Envelopes: ``decode_changes`` of 10M Debezium envelopes (100k with ``--quick``) beside
Spark's own ``from_json`` of the same column into the payload's struct, each written to the
``noop`` sink (every row read, nothing written).

The envelopes are a Parquet folder of one string column, ``value``, made once on the server
(``format_string`` over ``range``): Debezium MySQL events of a five-column table, 60%
inserts, 30% updates (with their before image), 10% deletes, about 400 bytes each, as a
Kafka Connect sink writes a topic's values.

- ours: ``decode_changes(df, "debezium-json", SCHEMA)``: the changelog's rows (an update's
  two images as two rows), ``_change_type``, ``_commit_version`` from the binlog file and
  position, ``_commit_timestamp``, and every check of a bad event;
- Spark's: ``from_json(value, payload)`` expanded into the payload's fields, no checks.

The figure is Spark's seconds ÷ ours (higher is better: ours as a fraction of Spark's
speed), the median of interleaved repetitions.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import functions as F
from pyspark.sql import types as T
from spark_cdc import decode_changes

from tests.bench.common import (
    Bench,
    Figure,
    interleaved,
    medians,
    noop_seconds,
    paired_spread,
)

BENCHMARK = "envelopes"
ROWS, QUICK_ROWS = 10_000_000, 100_000
SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("name", T.StringType()),
        T.StructField("qty", T.IntegerType()),
        T.StructField("price", T.DoubleType()),
        T.StructField("updated_at", T.LongType()),
    ]
)
SOURCE = T.StructType(
    [
        T.StructField("connector", T.StringType()),
        T.StructField("file", T.StringType()),
        T.StructField("pos", T.LongType()),
        T.StructField("row", T.IntegerType()),
        T.StructField("ts_ms", T.LongType()),
    ]
)
PAYLOAD = T.StructType(
    [
        T.StructField("before", SCHEMA),
        T.StructField("after", SCHEMA),
        T.StructField("op", T.StringType()),
        T.StructField("ts_ms", T.LongType()),
        T.StructField("source", SOURCE),
    ]
)


def envelopes(bench: Bench, rows: int) -> str:
    """The Parquet folder of ``rows`` envelopes (made once)."""
    folder = bench.work / f"envelopes_{rows}"
    if not (folder / "_complete").exists():
        n = F.col("id")
        image = F.format_string(
            '{"id":%d,"name":"customer-%d","qty":%d,"price":%.2f,"updated_at":%d}',
            n % 1_000_000,
            n % 9973,
            (n % 100).cast("int"),
            (n % 10_000) / F.lit(100.0),
            F.lit(1_700_000_000_000) + n,
        )
        kind = n % 10
        op = F.when(kind < 6, F.lit("c")).when(kind < 9, F.lit("u")).otherwise(F.lit("d"))
        before = F.when(op == "c", F.lit("null")).otherwise(image)
        after = F.when(op == "d", F.lit("null")).otherwise(image)
        source = F.format_string(
            '{"version":"2.5.0.Final","connector":"mysql","name":"shop","ts_ms":%d,'
            '"snapshot":"false","db":"shop","table":"orders","server_id":1,'
            '"file":"mysql-bin.%06d","pos":%d,"row":0,"thread":7}',
            F.lit(1_700_000_000_000) + n,
            (n / 1_000_000).cast("long") + 1,
            (n % 1_000_000) * 100 + 4,
        )
        value = F.format_string(
            '{"before":%s,"after":%s,"source":%s,"op":"%s","ts_ms":%d,"transaction":null}',
            before,
            after,
            source,
            op,
            F.lit(1_700_000_000_000) + n,
        )
        spark = bench.spark
        spark.range(rows, numPartitions=8).select(value.alias("value")).write.mode(
            "overwrite"
        ).parquet(str(folder))
        Path(folder / "_complete").touch()
    return str(folder)


def run(bench: Bench) -> list[Figure]:
    rows = QUICK_ROWS if bench.quick else ROWS
    folder = envelopes(bench, rows)
    read = bench.spark.read.parquet

    def ours() -> float:
        return noop_seconds(lambda: decode_changes(read(folder), "debezium-json", SCHEMA))()

    def spark_from_json() -> float:
        return noop_seconds(
            lambda: read(folder).select(F.from_json("value", PAYLOAD).alias("e")).select("e.*")
        )()

    interleaved({"decode_changes": ours, "from_json": spark_from_json}, 1)  # warm-up
    samples = interleaved({"decode_changes": ours, "from_json": spark_from_json}, bench.reps)
    took = medians(samples)
    ratio = took["from_json"] / took["decode_changes"]
    return [
        Figure(
            BENCHMARK,
            f"decode_changes of {rows:,} Debezium envelopes (Parquet) into the noop sink",
            "from_json/ours (seconds; higher is better)",
            round(ratio, 3),
            target="≥ 0.8",
            met=ratio >= 0.8,
            medians={k: round(v, 2) for k, v in took.items()},
            samples={k: [round(x, 2) for x in v] for k, v in samples.items()},
            spread=paired_spread(samples["from_json"], samples["decode_changes"]),
            notes=(
                f"decode_changes {took['decode_changes']:.1f} s, Spark's from_json into the "
                f"payload struct {took['from_json']:.1f} s"
            ),
        )
    ]
