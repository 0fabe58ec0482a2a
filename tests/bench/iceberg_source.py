"""The ``iceberg_changelog`` source: batch throughput against Spark's own parquet reader on
the same data files, and post-processing at the source against the raw feed.

(a) An append-only table written with pyiceberg: the source's feed (every row an ``insert``)
and ``spark.read.parquet`` on the table's data folder read the same files, both into the
``noop`` sink, interleaved; the figure is the median of the paired ratios.

(b) Copy-on-write snapshots of N rows each, every one rewriting the whole table with 1% of
its rows updated (the rest carried over): the feed post-processed at the source
(carry-over removal and update detection by ``id``) against the raw feed, both into
``noop``. The passes are worth it when the post-processed feed costs no more than the raw
one (≥ 1.0), as for the Delta source.

Tables are built once into the work folder (with a SQL catalog of their own) and reused.
"""

from __future__ import annotations

import json
import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tests.bench.common import Bench, Figure, at_least, interleaved, medians, seconds
from tests.support.iceberg_tables import rewrite, sql_catalog, table_folder

BENCHMARK = "iceberg_source"
THROUGHPUT_TARGET = 0.7
POST_PROCESSING_TARGET = 1.0
MARKER = "_bench_complete.json"  # written last: a folder without it is rebuilt


@dataclass(frozen=True)
class Sizes:
    rows: int  # throughput table, total
    appends: int
    per_snapshot: tuple[int, ...]  # post-processing tables: rows rewritten per snapshot
    snapshots: int


FULL = Sizes(rows=4_000_000, appends=20, per_snapshot=(100_000, 1_000_000), snapshots=3)
QUICK = Sizes(rows=4_000, appends=4, per_snapshot=(1_000,), snapshots=2)


def run(bench: Bench) -> list[Figure]:
    sizes = QUICK if bench.quick else FULL
    figures = [throughput(bench, sizes)]
    figures += [post_processing(bench, rows, sizes.snapshots) for rows in sizes.per_snapshot]
    return figures


def _noop_seconds(make: Callable[[], Any]) -> Callable[[], float]:
    return lambda: seconds(lambda: make().write.format("noop").mode("overwrite").save())


def throughput(bench: Bench, sizes: Sizes) -> Figure:
    folder = _table(bench.folder(BENCHMARK) / "throughput", _appends(sizes))
    spark = bench.spark
    runs: dict[str, Callable[[], Any]] = {
        "iceberg_changelog": lambda: (
            spark.read.format("iceberg_changelog").option("startingVersion", "0").load(str(folder))
        ),
        "parquet": lambda: spark.read.parquet(str(folder / "data")),
    }
    counts = {name: make().count() for name, make in runs.items()}  # also warms both up
    if len(set(counts.values())) != 1:
        raise AssertionError(f"the two readers disagree on the row count: {counts}")
    timed = interleaved({name: _noop_seconds(make) for name, make in runs.items()}, bench.reps)
    ratios = [p / s for s, p in zip(timed["iceberg_changelog"], timed["parquet"], strict=True)]
    ratio = statistics.median(ratios)
    return Figure(
        benchmark=BENCHMARK,
        case=f"{sizes.rows:,} rows in {sizes.appends} appends; long, string, double, timestamp",
        ratio_label="iceberg_changelog rows/s ÷ parquet rows/s (median of paired runs)",
        ratio=ratio,
        target=f"≥ {THROUGHPUT_TARGET}",
        met=at_least(ratio, THROUGHPUT_TARGET),
        medians={f"{name} rows/s": sizes.rows / s for name, s in medians(timed).items()},
        samples={f"{name} seconds": values for name, values in timed.items()},
        spread=(round(min(ratios), 3), round(max(ratios), 3)),
        notes="both into the noop sink; spark.read.parquet on the table's data folder",
    )


def post_processing(bench: Bench, rows: int, snapshots: int) -> Figure:
    folder = _table(bench.folder(BENCHMARK) / f"rewrites-{rows}", _rewrites(rows, snapshots))
    spark = bench.spark

    def feed(**options: str) -> Any:
        reader = spark.read.format("iceberg_changelog").option("startingVersion", "2")
        return reader.options(**options).load(str(folder))

    runs: dict[str, Callable[[], Any]] = {
        "post-processed": lambda: feed(
            deduplicationMode="dropCarryovers", computeUpdates="true", rowId="id"
        ),
        "raw": lambda: feed(),
    }
    for make in runs.values():
        make().count()  # warm-up
    timed = interleaved({name: _noop_seconds(make) for name, make in runs.items()}, bench.reps)
    pairs = zip(timed["post-processed"], timed["raw"], strict=True)
    ratios = [raw / post for post, raw in pairs]
    ratio = statistics.median(ratios)
    changes = rows * 2 * (snapshots - 1)
    return Figure(
        benchmark=BENCHMARK,
        case=f"{rows:,} rows per copy-on-write snapshot, 1% updated, {snapshots - 1} snapshots",
        ratio_label="post-processed changes/s ÷ raw changes/s (median of paired runs)",
        ratio=ratio,
        target=f"≥ {POST_PROCESSING_TARGET}",
        met=at_least(ratio, POST_PROCESSING_TARGET),
        medians={f"{name} changes/s": changes / s for name, s in medians(timed).items()},
        samples={f"{name} seconds": values for name, values in timed.items()},
        spread=(round(min(ratios), 3), round(max(ratios), 3)),
        notes="source-side passes (rowId=id) against the raw feed, both into the noop sink",
    )


def _rows(start: int, count: int, version: int = 0) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table(
        {
            "id": ids,
            "name": pc.binary_join_element_wise("customer-", pc.cast(ids, pa.string()), ""),
            "amount": pc.add(pc.divide(pc.cast(ids, pa.float64()), 7.0), float(version)),
            "updated_at": pc.cast(pc.multiply(ids, 1_000_003), pa.timestamp("us", tz="UTC")),
        }
    )


def _appends(sizes: Sizes) -> Callable[[Any], None]:
    def write(table: Any) -> None:
        per = sizes.rows // sizes.appends
        for index in range(sizes.appends):
            table.append(_rows(index * per, per))

    write.params = {"rows": sizes.rows, "appends": sizes.appends}  # type: ignore[attr-defined]
    return write


def _rewrites(rows: int, snapshots: int) -> Callable[[Any], None]:
    """A first append, then snapshots that each rewrite every row, 1% of them changed."""

    def write(table: Any) -> None:
        data = _rows(0, rows)
        table.append(data)
        for version in range(1, snapshots):
            changed = pc.equal(pc.bit_wise_and(data["id"], 127), version % 128)
            amount = pc.if_else(changed, pc.add(data["amount"], 1.0), data["amount"])
            data = data.set_column(2, "amount", amount)
            rewrite(table, data)

    write.params = {"rows": rows, "snapshots": snapshots, "layout": 1}  # type: ignore[attr-defined]
    return write


def _table(folder: Path, write: Callable[[Any], None]) -> Path:
    """The table in ``folder`` (its own SQL catalog beside it), written by ``write`` unless
    a complete one with the same parameters is there."""
    params = write.params  # type: ignore[attr-defined]
    marker = folder / MARKER
    where = folder / "warehouse" / "bench" / "t"
    if marker.exists() and json.loads(marker.read_text()) == params:
        return where
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    catalog = sql_catalog(folder, "bench")
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.t", _rows(0, 1).schema)
    write(table)
    found = Path(table_folder(table))
    if found != where:
        raise AssertionError(f"the table is at {found}, not {where}")
    marker.write_text(json.dumps(params))
    return where
