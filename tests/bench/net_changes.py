"""Net changes against Spark 4.3's own, on the same changelog, streaming and batch.

The changelog: a Delta table with change data feed (written by delta-rs), whose commits
come in cycles of four, each commit ``ROWS_PER_COMMIT`` changelog rows: an append of new
ids; an update of half of them (pre- and post-images); an update of another half that
overlaps the first by half; a delete of the ids the previous cycle appended. Ids are
touched two and three times within a cycle, so there is netting to do; the default size is
5 cycles of 100,000 rows per commit: 2M changelog rows in 20 commits.

The sides, each into the ``noop`` sink, streams with ``availableNow`` and two commits per
micro-batch, the same rows everywhere:

- native: Spark 4.3's ``spark.readStream.changes()`` with ``deduplicationMode=netChanges``
  (``computeUpdates=false``, the combination native streaming runs; RocksDB state store, as
  it requires), through ``tests/bench/native/BenchChangelogCatalog.java``, a minimal DSv2
  changelog catalog serving the table's raw changelog from Arrow files, one per commit;
- ChangelogReader: ``ChangelogReader(..., streaming=True)`` with ``rowId=id``,
  ``netChanges``, on the Delta table itself (the source path);
- post_process: ``post_process`` on a parquet file stream of the same rows (one file per
  commit), declaring what the native connector declares (any DataFrame);
- raw delta_changelog and raw parquet: the two inputs read with no post-processing, for
  what reading alone costs.

Batch: the same three post-processed sides, as batch reads of the whole range.

The headline figures are ours ÷ native, rows per second of wall time (input changelog
rows), medians over interleaved repetitions after a discarded warm-up pass on a small
table. Streaming results differ slightly by design (docs/post-processing.md, "Net changes": Spark's
processor holds an id until a later commit moves the watermark past it, ours releases it
when the watermark reaches its commit), so the sides do the same work but do not emit the
same rows; the tests compare our results with the model, not this benchmark.

Needs ``javac`` (a JDK) to build the connector and a Spark 4.3+ server; without either the
native sides are skipped and said so.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession
from spark_cdc import ChangelogReader, ChangelogSpec, post_process

from tests.bench.common import (
    Bench,
    Figure,
    at_least,
    interleaved,
    medians,
    paired_spread,
    seconds,
    stream_seconds,
)
from tests.bench.native_connector import (
    changelog_folder,
    has_native_changelogs,
    server_conf,
    table_name,
    write_changelog,
)

__all__ = ["run", "server_conf"]  # server_conf: what the runner asks the server for

ROWS_PER_COMMIT, CYCLES = 100_000, 5
QUICK_ROWS_PER_COMMIT, QUICK_CYCLES = 1_000, 2
COMMITS_PER_BATCH = 2
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_STORE = "spark.sql.streaming.stateStore.providerClass"
# What the native connector declares, and post_process on the parquet stream with it: the
# change data feed holds pre/post images and no carry-overs, so only netting runs.
FLAGS = {
    "containsCarryoverRows": False,
    "representsUpdateAsDeleteAndInsert": False,
    "containsIntermediateChanges": True,
}
SPEC = ChangelogSpec(
    row_id=["id"],
    contains_carryover_rows=False,
    represents_update_as_delete_and_insert=False,
    contains_intermediate_changes=True,
)
NET = {"deduplicationMode": "netChanges", "computeUpdates": False}


def _rows(start: int, count: int) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table(
        {
            "id": ids,
            "name": pc.binary_join_element_wise("n", pc.cast(ids, pa.string()), "-"),
            "amount": pc.multiply(pc.cast(ids, pa.float64()), 0.25),
            "qty": pa.array([0] * count, pa.int32()),
        }
    )


def delta_table(work: Path, rows_per_commit: int, cycles: int) -> str:
    """Version 0 holds the first ids; versions 1.. come in cycles of four commits."""
    path = work / f"net_changes_{rows_per_commit}x{cycles}"
    done = path / "_bench_complete"
    if done.exists():
        return str(path)
    shutil.rmtree(path, ignore_errors=True)
    n = rows_per_commit
    cdf = {"delta.enableChangeDataFeed": "true"}
    write_deltalake(str(path), _rows(0, n), configuration=cdf)
    for cycle in range(cycles):
        base = (cycle + 1) * n
        write_deltalake(str(path), _rows(base, n), mode="append")
        updates = {"qty": "qty + 1", "amount": "amount + 1"}
        DeltaTable(str(path)).update(predicate=f"id >= {base} and id % 2 = 0", updates=updates)
        DeltaTable(str(path)).update(predicate=f"id >= {base} and id % 4 < 2", updates=updates)
        DeltaTable(str(path)).delete(predicate=f"id >= {base - n} and id < {base}")
    done.touch()
    return str(path)


def exported(spark: SparkSession, work: Path, table: str) -> tuple[str, Path, int]:
    """The table's raw changelog from version 1, as the native connector's Arrow files and
    as parquet files (one per commit, modification times in commit order)."""
    name = Path(table).name
    parquet = work / f"{name}_parquet"
    done = work / f"{name}_exported"
    if not done.exists():
        shutil.rmtree(parquet, ignore_errors=True)
        parquet.mkdir()
        raw = spark.read.format("delta_changelog").option("startingVersion", 1).load(table)
        rows = raw.toArrow()
        versions = sorted(set(rows["_commit_version"].to_pylist()))
        commits = [(v, rows.filter(pc.equal(rows["_commit_version"], v))) for v in versions]
        write_changelog(
            changelog_folder(work, name), commits, raw.schema.json(), {"rowId": "id", **FLAGS}
        )
        stamp = 1_700_000_000
        for i, (version, commit) in enumerate(commits):
            file = parquet / f"v{version:08d}.parquet"
            pq.write_table(commit, file)
            os.utime(file, (stamp + i, stamp + i))
        (done).write_text(str(rows.num_rows))
    return name, parquet, int(done.read_text())


def _batch(df: DataFrame) -> float:
    return seconds(lambda: df.write.format("noop").mode("overwrite").save())


def sides(bench: Bench, table: str, native: bool) -> dict[str, dict[str, Callable[[], float]]]:
    """Every side of both measurements, by kind, each a function timing one run."""
    spark = bench.spark
    name, parquet, _ = exported(spark, bench.work, table)
    schema = spark.read.parquet(str(parquet)).schema

    def checkpoint() -> str:  # a fresh one per run: runs must not resume each other
        return tempfile.mkdtemp(prefix="cp_", dir=bench.folder("checkpoints"))

    def noop(df: DataFrame, rocksdb: bool = False) -> Any:
        writer = df.writeStream.format("noop").trigger(availableNow=True)
        writer = writer.option("checkpointLocation", checkpoint())
        if not rocksdb:
            return writer.start()
        before = spark.conf.get(STATE_STORE, None)
        spark.conf.set(STATE_STORE, ROCKSDB)  # native netChanges refuses any other store
        try:
            return writer.start()
        finally:
            if before is None:
                spark.conf.unset(STATE_STORE)
            else:
                spark.conf.set(STATE_STORE, before)

    def native_stream() -> DataFrame:
        reader = spark.readStream.options(startingVersion=1, **NET)
        reader = reader.option("commitsPerTrigger", COMMITS_PER_BATCH)
        return reader.changes(table_name(name))

    def source_stream() -> DataFrame:
        reader = ChangelogReader(spark, streaming=True)
        reader.options(rowId="id", startingVersion=1, maxFilesPerTrigger=COMMITS_PER_BATCH, **NET)
        return reader.changes(table)

    def raw_delta() -> DataFrame:
        reader = spark.readStream.format("delta_changelog").option("startingVersion", 1)
        return reader.option("maxFilesPerTrigger", COMMITS_PER_BATCH).load(table)

    def raw_parquet() -> DataFrame:
        reader = spark.readStream.schema(schema).option("maxFilesPerTrigger", COMMITS_PER_BATCH)
        return reader.parquet(str(parquet))

    streaming: dict[str, Callable[[], float]] = {}
    batch: dict[str, Callable[[], float]] = {}
    if native:
        streaming["native"] = lambda: stream_seconds(lambda: noop(native_stream(), rocksdb=True))
        batch["native"] = lambda: _batch(
            spark.read.options(startingVersion=1, **NET).changes(table_name(name))
        )
    streaming["ChangelogReader"] = lambda: stream_seconds(lambda: noop(source_stream()))
    streaming["post_process"] = lambda: stream_seconds(
        lambda: noop(post_process(raw_parquet(), SPEC, NET))
    )
    streaming["raw delta_changelog"] = lambda: stream_seconds(lambda: noop(raw_delta()))
    streaming["raw parquet"] = lambda: stream_seconds(lambda: noop(raw_parquet()))
    batch["ChangelogReader"] = lambda: _batch(
        ChangelogReader(spark).options(rowId="id", startingVersion=1, **NET).changes(table)
    )
    batch["post_process"] = lambda: _batch(
        post_process(spark.read.parquet(str(parquet)), SPEC, NET)
    )
    return {"streaming": streaming, "batch": batch}


def run(bench: Bench) -> list[Figure]:
    native = has_native_changelogs(bench.spark)
    if not bench.quick:  # a discarded first pass on a small table: the server's JIT warms
        small = delta_table(bench.work, QUICK_ROWS_PER_COMMIT, QUICK_CYCLES)
        for runs in sides(bench, small, native).values():
            interleaved(runs, 1)
    rows_per_commit = QUICK_ROWS_PER_COMMIT if bench.quick else ROWS_PER_COMMIT
    cycles = QUICK_CYCLES if bench.quick else CYCLES
    table = delta_table(bench.work, rows_per_commit, cycles)
    total = exported(bench.spark, bench.work, table)[2]
    case = (
        f"{total:,} changelog rows, {4 * cycles} commits of {rows_per_commit:,}, "
        f"{COMMITS_PER_BATCH} per micro-batch"
    )
    figures = []
    for kind, runs in sides(bench, table, native).items():
        samples = interleaved(runs, bench.reps)
        rates = {side: [total / s for s in values] for side, values in samples.items()}
        rate = medians(rates)
        for side in ("ChangelogReader", "post_process"):
            ratio = rate[side] / rate["native"] if native else None
            figures.append(
                Figure(
                    benchmark=f"net_changes {kind}",
                    case=f"{side}: {case}",
                    ratio_label=f"{side} ÷ Spark 4.3 native rows/s",
                    ratio=None if ratio is None else round(ratio, 3),
                    target="≥ 1" if kind == "streaming" else None,
                    met=at_least(ratio, 1.0) if kind == "streaming" else None,
                    medians={name: round(value) for name, value in rate.items()},
                    samples={name: [round(v) for v in values] for name, values in rates.items()},
                    notes="" if native else "native sides skipped: no JDK or no Spark 4.3 server",
                    spread=paired_spread(rates[side], rates["native"]) if native else None,
                )
            )
    return figures
