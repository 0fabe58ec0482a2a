"""Batch post-processing against Spark 4.3's own, on the same change feed.

One feed per case, generated with numpy and served by the native connector
(``tests/bench/native_connector``): commits of equal size (a hundred per feed), row ids
touched again and again across commits (the id space is a quarter of the rows), and per
commit a mix of copy-on-write carry-over pairs (a delete and an insert of the same row
version), real updates (a delete and an insert of different row versions), plain inserts
and plain deletes: 60% / 20% / 10% / 10% of the events. The feed declares ``rowId=id``,
``rowVersion=row_version`` (Spark 4.3 refuses carry-over removal and update detection
without one) and all three flags; 5 or 50 columns (ids, row versions, longs, doubles and
strings).

The sides, each into the ``noop`` sink, interleaved, the same rows everywhere:

- raw: ``spark.read.option("deduplicationMode", "none").changes(t)``, nothing resolved;
- native <mode>: ``spark.read.options(<mode>).changes(t)``, Spark's own plan;
- post_process <mode>: ``post_process`` on the raw read, declaring what the connector
  declares: our plan, over the very same scan.

Modes: dropCarryovers + computeUpdates; netChanges; netChanges + computeUpdates. The
headline figure is post_process ÷ native, input rows per second of wall time. Needs a JDK
and a Spark 4.3+ server (the feed is served by the connector); without them the benchmark
reports that it was skipped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from spark_cdc import ChangelogSpec, post_process

from tests.bench.common import (
    Bench,
    Figure,
    at_least,
    interleaved,
    medians,
    noop_seconds,
    paired_spread,
)
from tests.bench.native_connector import (
    changelog_folder,
    has_native_changelogs,
    server_conf,
    table_name,
    write_changelog,
)

__all__ = ["run", "server_conf"]  # server_conf: what the runner asks the server for

BENCHMARK = "batch"
SIZES = [1_000_000, 10_000_000]
QUICK_SIZES = [20_000]
COLUMNS = [5, 50]
QUICK_COLUMNS = [5]
COMMITS = 100
STRIDE = 1_000_003  # a prime: x -> x * STRIDE + shift is one-to-one modulo the id space
TARGET = 1.1
SPEC = ChangelogSpec(row_id=["id"], row_version="row_version")
PROPERTIES = {
    "rowId": "id",
    "rowVersion": "row_version",
    "containsCarryoverRows": True,
    "representsUpdateAsDeleteAndInsert": True,
    "containsIntermediateChanges": True,
}
MODES: dict[str, dict[str, str | bool]] = {
    "dropCarryovers + computeUpdates": {
        "deduplicationMode": "dropCarryovers",
        "computeUpdates": True,
    },
    "netChanges": {"deduplicationMode": "netChanges", "computeUpdates": False},
    "netChanges + computeUpdates": {"deduplicationMode": "netChanges", "computeUpdates": True},
}


def commit_rows(version: int, rows: int, id_space: int, columns: int) -> pa.Table:
    """One commit: events of two rows each, drawn per event as carry-over (60%), update
    (20%), insert (10%) or delete (10%). A pair shares its event's id; lone inserts and
    deletes each get their own. Within a commit ids are distinct."""
    position = np.arange(rows, dtype=np.int64)
    event, half = position // 2, position % 2
    draw = np.random.default_rng(version).integers(0, 10, size=(rows + 1) // 2)[event]
    kind = np.select([draw < 6, draw < 8, draw < 9], [0, 1, 2], 3)  # carry, update, ins, del
    pair = kind <= 1
    row_id = (np.where(pair, event * 2, position) * STRIDE + version * 7919) % id_space
    change = np.where(
        kind == 2, "insert", np.where(kind == 3, "delete", np.where(half == 0, "delete", "insert"))
    )
    row_version = version * 2 + ((kind == 1) & (half == 1))  # an update's insert is newer
    data: dict[str, pa.Array] = {"id": pa.array(row_id), "row_version": pa.array(row_version)}
    for i in range(2, columns):
        if i % 3 == 0:
            data[f"c{i}"] = pa.array(row_id * i + row_version)
        elif i % 3 == 1:
            data[f"c{i}"] = pa.array((row_id * 0.25 + row_version) * i)
        else:
            text = pc.cast(pa.array(row_id + row_version), pa.string())
            data[f"c{i}"] = pc.binary_join_element_wise(f"s{i}", text, "-")
    stamp = np.full(rows, (1_700_000_000 + version) * 1_000_000, np.int64)
    data["_change_type"] = pa.array(change)
    data["_commit_version"] = pa.array(np.full(rows, version, np.int64))
    data["_commit_timestamp"] = pa.array(stamp).cast(pa.timestamp("us", tz="UTC"))
    return pa.table(data)


def _spark_schema(table: pa.Table) -> str:
    names = {pa.int64(): "long", pa.float64(): "double", pa.string(): "string"}
    fields = [
        {
            "name": f.name,
            "type": "timestamp" if pa.types.is_timestamp(f.type) else names[f.type],
            "nullable": True,
            "metadata": {},
        }
        for f in table.schema
    ]
    return json.dumps({"type": "struct", "fields": fields})


def feed(work: Path, rows: int, columns: int) -> str:
    """The case's feed as a native-connector table, written on first use."""
    name = f"batch_feed_{rows}x{columns}"
    folder = changelog_folder(work, name)
    if not (folder / "_bench_complete").exists():
        per_commit, id_space = rows // COMMITS, max(rows // 4, rows // COMMITS)
        commits = [
            (v, commit_rows(v, per_commit, id_space, columns)) for v in range(1, COMMITS + 1)
        ]
        write_changelog(folder, commits, _spark_schema(commits[0][1]), PROPERTIES)
        (folder / "_bench_complete").touch()
    return table_name(name)


def sides(spark: SparkSession, table: str) -> dict[str, Callable[[], float]]:
    def raw() -> DataFrame:
        return spark.read.option("deduplicationMode", "none").changes(table)

    runs: dict[str, Callable[[], float]] = {"raw": noop_seconds(raw)}
    for mode, options in MODES.items():
        runs[f"native {mode}"] = noop_seconds(
            lambda o=options: spark.read.options(**o).changes(table)  # type: ignore[misc]
        )
        runs[f"post_process {mode}"] = noop_seconds(
            lambda o=options: post_process(raw(), SPEC, o)  # type: ignore[misc]
        )
    return runs


def measure(bench: Bench, rows: int, columns: int) -> list[Figure]:
    table = feed(bench.work, rows, columns)
    runs = sides(bench.spark, table)
    for run in runs.values():  # warm-up, untimed: classes, codegen, the files' page cache
        run()
    samples = interleaved(runs, bench.reps)
    rates = {side: [rows / s for s in values] for side, values in samples.items()}
    rate = medians(rates)
    case = f"{rows:,} rows, {columns} columns"
    notes = (
        f"{COMMITS} commits; 60% carry-over pairs, 20% updates, 10% inserts, 10% deletes "
        "(by event); rowId + rowVersion; input rows per second of wall time into noop"
    )
    figures = []
    for mode in MODES:
        ours, native = f"post_process {mode}", f"native {mode}"
        ratio = rate[ours] / rate[native]
        shown = ("raw", native, ours)
        figures.append(
            Figure(
                benchmark=BENCHMARK,
                case=f"{case}, {mode}",
                ratio_label="post_process ÷ Spark 4.3 native rows/s",
                ratio=round(ratio, 3),
                target=f"≥ {TARGET}",
                met=at_least(ratio, TARGET),
                medians={s: round(rate[s]) for s in shown},
                samples={s: [round(v) for v in rates[s]] for s in shown},
                notes=notes,
                spread=paired_spread(rates[ours], rates[native]),
            )
        )
    return figures


def run(bench: Bench) -> list[Figure]:
    if not has_native_changelogs(bench.spark):
        reason = "skipped: needs a JDK and a Spark 4.3+ server for the native connector"
        return [Figure(BENCHMARK, "all cases", "post_process ÷ native", None, notes=reason)]
    figures: list[Figure] = []
    for columns in QUICK_COLUMNS if bench.quick else COLUMNS:
        for rows in QUICK_SIZES if bench.quick else SIZES:
            figures += measure(bench, rows, columns)
    return figures
