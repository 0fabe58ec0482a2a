"""Streaming net changes on a server left at Spark's defaults against the same tuned by hand
(issue 58).

A stateful stream's partitions are ``spark.sql.shuffle.partitions`` at its first run, 200
unless someone set it, and each micro-batch then runs a state-store task per partition.
The sides, on the same session of the bench's server, each stream into the ``noop`` sink
with ``availableNow`` and one commit per micro-batch, on the net changes benchmark's table
(20 commits of 100,000 changelog rows; ``tests/bench/net_changes.py``):

- defaults: the session's setting unset, as on a server nobody tuned (also what
  ``spark-cdc serve`` gives a session that sets nothing): the stream-start guard chooses
  (``spark_cdc.state_partitions``);
- tuned: ``spark.sql.shuffle.partitions=4``, what a user tuning a laptop sets;
- 200: the setting at Spark's default value set explicitly, which the guard keeps: what
  every stream got before the guard chose.

After a discarded warm-up run, the headline is defaults ÷ tuned in seconds (target
≤ 1.3), and 200 ÷ tuned for scale.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable

from spark_cdc import ChangelogReader
from spark_cdc.state_partitions import SHUFFLE_PARTITIONS

from tests.bench.common import Bench, Figure, interleaved, medians, paired_spread, stream_seconds
from tests.bench.net_changes import delta_table

ROWS_PER_COMMIT, CYCLES = 100_000, 5  # 20 commits
QUICK = (10_000, 1)
SIDES = {"defaults": None, "tuned (4)": "4", "200": "200"}


def run(bench: Bench) -> list[Figure]:
    spark = bench.spark
    rows, cycles = QUICK if bench.quick else (ROWS_PER_COMMIT, CYCLES)
    table = delta_table(bench.work, rows, cycles)
    before = spark.conf.get(SHUFFLE_PARTITIONS, None)

    def side(value: str | None) -> Callable[[], float]:
        def start() -> object:
            if value is None:
                spark.conf.unset(SHUFFLE_PARTITIONS)
            else:
                spark.conf.set(SHUFFLE_PARTITIONS, value)
            reader = ChangelogReader(spark, streaming=True).options(
                rowId="id", startingVersion=1, maxFilesPerTrigger=1, deduplicationMode="netChanges"
            )
            checkpoint = tempfile.mkdtemp(prefix="cp_", dir=bench.folder("checkpoints"))
            writer = reader.changes(table).writeStream.format("noop")
            writer = writer.trigger(availableNow=True).option("checkpointLocation", checkpoint)
            return writer.start()

        return lambda: stream_seconds(start)

    try:
        side("4")()  # a discarded warm-up: a server's first stream starts its Python workers
        samples = interleaved({name: side(value) for name, value in SIDES.items()}, bench.reps)
    finally:
        if before is None:
            spark.conf.unset(SHUFFLE_PARTITIONS)
        else:
            spark.conf.set(SHUFFLE_PARTITIONS, before)
    took = medians(samples)
    ratio = took["defaults"] / took["tuned (4)"]
    return [
        Figure(
            benchmark="default_partitions",
            case=f"net changes, {cycles * 4} commits of {rows:,} rows",
            ratio_label="defaults/tuned s",
            ratio=round(ratio, 3),
            target="≤ 1.3",
            met=ratio <= 1.3,
            medians={name: round(value, 2) for name, value in took.items()},
            samples={name: [round(v, 2) for v in values] for name, values in samples.items()},
            notes=f"200 explicitly: {took['200'] / took['tuned (4)']:.1f} times the tuned time",
            spread=paired_spread(samples["defaults"], samples["tuned (4)"]),
        )
    ]
