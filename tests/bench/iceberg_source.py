"""The ``iceberg_changelog`` source: batch throughput against pyarrow and Spark's own
parquet reader on the same data files, post-processing at the source against the raw feed,
and what an equality-delete snapshot costs as its table grows.

(a) An append-only table written with pyiceberg, read three ways into the ``noop`` sink,
interleaved: the source's feed (every row an ``insert``); a minimal Python data source
reading the table's data files with pyarrow alone, one partition per file (the floor for
any Python source on the same Spark path; the issue's ≥ 0.7 target is against it); and
``spark.read.parquet`` (the JVM's vectorized reader, for scale). Figures are medians of the
paired ratios.

(b) Copy-on-write snapshots of N rows each, every one rewriting the whole table with 1% of
its rows updated (the rest carried over): the feed post-processed at the source
(carry-over removal and update detection by ``id``) against the raw feed, both into
``noop``. The passes are worth it when the post-processed feed costs no more than the raw
one (≥ 1.0), as for the Delta source.

(c) Tables of growing size (appends of 250k rows, ids ascending), then one equality-delete
snapshot removing 1,000 recent ids (a Flink upsert's deletes): serving it against serving
the last append (one file's rows), side by side. Equality deletes reach only the files
whose id bounds overlap theirs, so the ratio should stay flat as the table grows.

Tables are built once into the work folder (with a SQL catalog of their own) and reused.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from tests.bench.common import (
    Bench,
    Figure,
    at_least,
    interleaved,
    medians,
    noop_seconds,
    paired_spread,
    timed_reads,
)
from tests.support.iceberg_tables import equality_delete, rewrite, sql_catalog, table_folder

BENCHMARK = "iceberg_source"
THROUGHPUT_TARGET = 0.7
SELECTIVE_TARGET = 0.9  # issue 76's
POST_PROCESSING_TARGET = 1.0
MARKER = "_bench_complete.json"  # written last: a folder without it is rebuilt


@dataclass(frozen=True)
class Sizes:
    rows: int  # throughput table, total
    appends: int
    per_snapshot: tuple[int, ...]  # post-processing tables: rows rewritten per snapshot
    snapshots: int
    equality_tables: tuple[int, ...]  # equality-delete tables: appends of ``file_rows``
    file_rows: int
    deleted: int


FULL = Sizes(
    rows=4_000_000,
    appends=20,
    per_snapshot=(100_000, 1_000_000),
    snapshots=3,
    equality_tables=(4, 16),
    file_rows=250_000,
    deleted=1_000,
)
QUICK = Sizes(
    rows=4_000,
    appends=4,
    per_snapshot=(1_000,),
    snapshots=2,
    equality_tables=(2, 4),
    file_rows=1_000,
    deleted=10,
)


def run(bench: Bench) -> list[Figure]:
    sizes = QUICK if bench.quick else FULL
    figures = throughput(bench, sizes)
    figures += [post_processing(bench, rows, sizes.snapshots) for rows in sizes.per_snapshot]
    figures += [equality_deletes(bench, files, sizes) for files in sizes.equality_tables]
    return figures


def throughput(bench: Bench, sizes: Sizes) -> list[Figure]:
    folder = _table(bench.folder(BENCHMARK) / "throughput", _appends(sizes))
    spark = bench.spark
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the server lacks tests/
    spark.dataSource.register(PyarrowFiles)
    runs: dict[str, Callable[[], Any]] = {
        "iceberg_changelog": lambda: (
            spark.read.format("iceberg_changelog").option("startingVersion", "0").load(str(folder))
        ),
        "pyarrow": lambda: (
            spark.read.format(PyarrowFiles.name()).schema(PYARROW_SCHEMA).load(str(folder / "data"))
        ),
        "parquet": lambda: spark.read.parquet(str(folder / "data")),
    }
    _, timed = timed_reads(runs, bench.reps)
    case = f"{sizes.rows:,} rows in {sizes.appends} appends; long, string, double, timestamp"
    rates = {f"{name} rows/s": sizes.rows / s for name, s in medians(timed).items()}
    figures = []
    for baseline, target in (("pyarrow", THROUGHPUT_TARGET), ("parquet", None)):
        ratios = [b / s for s, b in zip(timed["iceberg_changelog"], timed[baseline], strict=True)]
        ratio = statistics.median(ratios)
        figures.append(
            Figure(
                benchmark=BENCHMARK,
                case=case,
                ratio_label=f"iceberg_changelog rows/s ÷ {baseline} rows/s (median of paired runs)",
                ratio=ratio,
                target=None if target is None else f"≥ {target}",
                met=None if target is None else at_least(ratio, target),
                medians=rates,
                samples={f"{name} seconds": values for name, values in timed.items()},
                spread=paired_spread(timed[baseline], timed["iceberg_changelog"]),
                notes=(
                    "a Python source reading the data files with pyarrow alone"
                    if baseline == "pyarrow"
                    else "spark.read.parquet on the table's data folder"
                )
                + "; all into the noop sink",
            )
        )

    def given() -> Any:  # the read of the query's columns only
        reader = spark.read.format("iceberg_changelog").schema(QUERY_SCHEMA)
        return reader.option("startingVersion", "0").load(str(folder))

    figures.append(_selective(bench, case, runs["iceberg_changelog"], runs["parquet"]))
    figures.append(_selective(bench, case, given, runs["parquet"], QUERY_SCHEMA))
    return figures


# A filter of about 1% of the rows that Spark pushes to a Python source (4.1+) and that no
# row group's statistics exclude (ids end in every digit pair throughout the table).
SELECTIVE = "name LIKE '%99'"
# The columns the selective query uses, given to the read (``ChangelogReader.schema``).
QUERY_SCHEMA = "id BIGINT, name STRING, amount DOUBLE"


def _selective(
    bench: Bench,
    case: str,
    ours: Callable[[], Any],
    parquet: Callable[[], Any],
    schema: str | None = None,
) -> Figure:
    """2 of the 4 columns and ``SELECTIVE``: ours (read whole, or given ``schema``)
    against the same query of parquet."""
    query = {
        name: (lambda make=make: make().select("id", "amount").where(SELECTIVE))
        for name, make in (("iceberg_changelog", ours), ("parquet", parquet))
    }
    counts, timed = timed_reads(query, bench.reps)
    ratios = [p / s for s, p in zip(timed["iceberg_changelog"], timed["parquet"], strict=True)]
    ratio = statistics.median(ratios)
    return Figure(
        benchmark=BENCHMARK,
        case=f"{case}; select(id, amount).where({SELECTIVE!r})"
        + (f", schema({schema!r}) given" if schema else ""),
        ratio_label="iceberg_changelog rows/s ÷ parquet rows/s (median of paired runs)",
        ratio=ratio,
        target=f"≥ {SELECTIVE_TARGET}",
        met=at_least(ratio, SELECTIVE_TARGET),
        medians={f"{n} rows/s": counts[n] / s for n, s in medians(timed).items()},
        samples={f"{name} seconds": values for name, values in timed.items()},
        spread=paired_spread(timed["parquet"], timed["iceberg_changelog"]),
        notes="spark.read.parquet on the table's data folder; both into the noop sink",
    )


class PyarrowFiles(DataSource):
    """The floor of a Python source on Spark's path: a folder's parquet files read with
    pyarrow, one partition per file, no per-row work. Registered by value for the run."""

    @classmethod
    def name(cls) -> str:
        return "bench_pyarrow_files"

    def reader(self, schema: Any) -> DataSourceReader:
        return _PyarrowFilesReader(self.options["path"])


class _PyarrowFilesReader(DataSourceReader):
    def __init__(self, folder: str) -> None:
        self.folder = folder

    def partitions(self) -> list[InputPartition]:
        import glob

        return [InputPartition(p) for p in sorted(glob.glob(f"{self.folder}/*.parquet"))]

    def read(self, partition: InputPartition) -> Any:
        import pyarrow.parquet as pq

        yield from pq.ParquetFile(partition.value).iter_batches(batch_size=65_536)


PYARROW_SCHEMA = "id bigint, name string, amount double, updated_at timestamp"


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
    timed = interleaved({name: noop_seconds(make) for name, make in runs.items()}, bench.reps)
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
        spread=paired_spread(timed["raw"], timed["post-processed"]),
        notes="source-side passes (rowId=id) against the raw feed, both into the noop sink",
    )


def equality_deletes(bench: Bench, files: int, sizes: Sizes) -> Figure:
    rows = files * sizes.file_rows
    write = _with_equality_delete(files, sizes.file_rows, sizes.deleted)
    folder = _table(bench.folder(BENCHMARK) / f"equality-{files}", write)
    spark = bench.spark

    def snapshot(version: int) -> Callable[[], Any]:
        reader = spark.read.format("iceberg_changelog").options(
            startingVersion=str(version), endingVersion=str(version)
        )
        return lambda: reader.load(str(folder))

    runs = {"equality delete": snapshot(files + 1), "last append": snapshot(files)}
    counts = {name: make().count() for name, make in runs.items()}  # also warms both up
    if counts != {"equality delete": sizes.deleted, "last append": sizes.file_rows}:
        raise AssertionError(f"unexpected rows served: {counts}")
    timed = interleaved({name: noop_seconds(make) for name, make in runs.items()}, bench.reps)
    pairs = zip(timed["equality delete"], timed["last append"], strict=True)
    ratios = [delete / append for delete, append in pairs]
    ratio = statistics.median(ratios)
    return Figure(
        benchmark=BENCHMARK,
        case=f"{sizes.deleted:,} ids deleted by equality from a table of {rows:,} rows "
        f"({files} files)",
        ratio_label="equality-delete snapshot seconds ÷ one-file append snapshot seconds",
        ratio=ratio,
        medians={f"{name} seconds": s for name, s in medians(timed).items()},
        samples={f"{name} seconds": values for name, values in timed.items()},
        spread=paired_spread(timed["equality delete"], timed["last append"]),
        notes="the deleted ids are the last file's; flat as the table grows when the "
        "deletes reach that file only (column bounds)",
    )


def _with_equality_delete(files: int, file_rows: int, deleted: int) -> Callable[[Any], None]:
    def write(table: Any) -> None:
        for index in range(files):
            table.append(_rows(index * file_rows, file_rows))
        last = (files - 1) * file_rows
        step = max(1, file_rows // deleted)
        ids = pa.array(range(last, last + step * deleted, step), pa.int64())
        equality_delete(table, pa.table({"id": ids}))

    write.params = {  # type: ignore[attr-defined]
        "files": files,
        "file_rows": file_rows,
        "deleted": deleted,
    }
    return write


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
