"""The ``delta_changelog`` source: batch throughput against Spark's own parquet reader, and how
long a stream over a long log takes to deliver its first micro-batch.

Throughput is measured on an append-only table, so the source's change feed (every row an
``insert``) and ``spark.read.parquet`` on the table folder read the same data files; both
write into the ``noop`` sink, so the figure is reading, not writing; the two run
interleaved and the figure is the median of the paired ratios.

The long-log table (10,000 single-row commits, checkpointed every 100) is built once into
the work folder (about a minute) and reused. Its first-batch figures are seconds of wall
time, so on a loaded machine they say more about the machine than the source: compare
them within one run.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

from tests.bench.common import (
    Bench,
    Figure,
    at_least,
    interleaved,
    medians,
    noop_seconds,
    stream_seconds,
    timed_reads,
)

BENCHMARK = "delta_source"
THROUGHPUT_TARGET = 0.9  # issue 76's
# A filter of about 1% of the rows that Spark pushes to a Python source (4.1+) and that no
# row group's statistics exclude (names end in every digit pair throughout the table).
SELECTIVE = "name LIKE '%99'"
# The columns the selective query uses, given to the read (``ChangelogReader.schema``).
QUERY_SCHEMA = "id BIGINT, name STRING, amount DOUBLE"
MARKER = "_bench_complete.json"  # written last: a folder without it is rebuilt
CHECKPOINT_INTERVAL = 100  # delta-rs's default


@dataclass(frozen=True)
class Sizes:
    rows: int  # throughput table, total
    commits: int  # throughput table
    log_commits: int  # long-log table: one single-row file per commit


FULL = Sizes(rows=4_000_000, commits=20, log_commits=10_000)
QUICK = Sizes(rows=4_000, commits=4, log_commits=200)
LARGE = Sizes(rows=40_000_000, commits=20, log_commits=0)  # issue 76's second size
LARGE_REPS = 3  # pairs of reads of about 10 s


def run(bench: Bench) -> list[Figure]:
    sizes = QUICK if bench.quick else FULL
    large = [] if bench.quick else throughput(bench, LARGE, min(bench.reps, LARGE_REPS))
    return [
        *throughput(bench, sizes, bench.reps),
        *large,
        *stream_against_batch(bench, sizes),
        *first_batch_latency(bench, sizes),
    ]


# -- (a) batch throughput -----------------------------------------------------------------


def throughput(bench: Bench, sizes: Sizes, reps: int) -> list[Figure]:
    """The whole feed, and a query of 2 of the 5 columns with a filter Spark pushes
    (``SELECTIVE``), the feed read whole and read with the query's columns only, each
    against the same query of ``spark.read.parquet``."""
    name = "throughput" if sizes != LARGE else "throughput-large"
    path = str(append_only_table(bench.folder("delta_source") / name, sizes))
    spark = bench.spark
    files = _data_files(path)
    table = (
        f"{sizes.rows:,} rows, {sizes.commits} commits, {files} files; "
        "long, string, double, timestamp + string partition column"
    )

    def selective(df: Any) -> Any:
        return df.select("id", "amount").where(SELECTIVE)

    # Each case: the schema given to our read (None: the whole feed) and the query.
    queries: dict[str, tuple[str | None, Callable[[Any], Any]]] = {
        table: (None, lambda df: df),
        f"{table}; select(id, amount).where({SELECTIVE!r})": (None, selective),
        f"{table}; select(id, amount).where({SELECTIVE!r}), schema({QUERY_SCHEMA!r}) given": (
            QUERY_SCHEMA,
            selective,
        ),
    }
    figures = []
    for case, (schema, query) in queries.items():
        reader = spark.read.format("delta_changelog")
        ours = reader.schema(schema) if schema else reader
        runs: dict[str, Callable[[], Any]] = {
            "delta_changelog": lambda q=query, r=ours: q(r.load(path)),
            "parquet": lambda q=query: q(spark.read.parquet(path)),
        }
        counts, timed = timed_reads(runs, reps)
        ratios = [p / d for d, p in zip(timed["delta_changelog"], timed["parquet"], strict=True)]
        ratio = statistics.median(ratios)
        rows = counts["parquet"]
        figures.append(
            Figure(
                benchmark=BENCHMARK,
                case=case,
                ratio_label="delta_changelog rows/s ÷ parquet rows/s (median of paired runs)",
                ratio=ratio,
                target=f"≥ {THROUGHPUT_TARGET}",
                met=at_least(ratio, THROUGHPUT_TARGET),
                medians={f"{name} rows/s": rows / s for name, s in medians(timed).items()},
                samples={f"{name} seconds": values for name, values in timed.items()},
                notes="both into the noop sink; spark.read.parquet on the table folder",
            )
        )
    return figures


STREAM_TARGET = 0.9  # issue 76's
STREAM_REPS = 3


def stream_against_batch(bench: Bench, sizes: Sizes) -> list[Figure]:
    """The throughput table as a stream of one commit per micro-batch (``availableNow``,
    ``maxFilesPerTrigger`` of one commit's files), rows/s from ``start()`` to its end,
    against the batch read of the same feed; and Spark's own Parquet file stream of the
    same files, as many per micro-batch, against ``spark.read.parquet``: what Spark's
    streaming costs itself, beside ours."""
    path = str(append_only_table(bench.folder("delta_source") / "throughput", sizes))
    spark = bench.spark
    per_commit = str(_data_files(path) // sizes.commits)
    checkpoints = bench.folder("delta_source") / "checkpoints"
    schema = spark.read.parquet(path).schema

    def streamed(reader: Any, name: str) -> Callable[[], float]:
        def start() -> Any:
            shutil.rmtree(checkpoints / name, ignore_errors=True)
            writer = reader.load(path).writeStream.format("noop").trigger(availableNow=True)
            return writer.option("checkpointLocation", str(checkpoints / name)).start()

        return lambda: stream_seconds(start)

    ours = spark.readStream.format("delta_changelog").option("startingVersion", "0")
    files = spark.readStream.format("parquet").schema(schema).option("recursiveFileLookup", "true")
    timed = interleaved(
        {
            "delta_changelog batch": noop_seconds(
                lambda: spark.read.format("delta_changelog").load(path)
            ),
            "delta_changelog stream": streamed(
                ours.option("maxFilesPerTrigger", per_commit), "ours"
            ),
            "parquet batch": noop_seconds(lambda: spark.read.parquet(path)),
            "parquet stream": streamed(files.option("maxFilesPerTrigger", per_commit), "files"),
        },
        min(bench.reps, STREAM_REPS),
    )
    figures = []
    for name, target in (("delta_changelog", STREAM_TARGET), ("parquet", None)):
        pairs = zip(timed[f"{name} batch"], timed[f"{name} stream"], strict=True)
        ratio = statistics.median(batch / stream for batch, stream in pairs)
        figures.append(
            Figure(
                benchmark=BENCHMARK,
                case=(
                    f"{sizes.rows:,} rows as an availableNow stream of {sizes.commits} "
                    f"micro-batches, {name}"
                ),
                ratio_label="stream rows/s ÷ batch rows/s (median of paired runs)",
                ratio=ratio,
                target=None if target is None else f"≥ {target}",
                met=None if target is None else at_least(ratio, target),
                medians={f"{k} s": v for k, v in medians(timed).items() if k.startswith(name)},
                samples={f"{k} seconds": v for k, v in timed.items() if k.startswith(name)},
                notes=(
                    "the stream timed from start() to its end, into noop; "
                    + (
                        "maxFilesPerTrigger of one commit's files"
                        if name == "delta_changelog"
                        else "Spark's Parquet file stream of the same files (recursive, "
                        "maxFilesPerTrigger as ours), for reference"
                    )
                ),
            )
        )
    return figures


def append_only_table(folder: Path, sizes: Sizes) -> Path:
    """``sizes.rows`` rows over ``sizes.commits`` appends, partitioned by a two-valued column
    (so each commit writes two files and the partition values come from the log)."""
    params = {"rows": sizes.rows, "commits": sizes.commits, "layout": 1}
    if _built(folder, params):
        return folder
    _fresh(folder)
    per_commit = sizes.rows // sizes.commits
    for commit in range(sizes.commits):
        data = _mixed_rows(commit * per_commit, per_commit)
        write_deltalake(str(folder), data, mode="append", partition_by=["region"])
    _mark(folder, params)
    return folder


def _mixed_rows(start: int, count: int) -> pa.Table:
    ids = pa.array(range(start, start + count), pa.int64())
    base = int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp() * 1_000_000)
    micros = pc.add(pc.multiply(ids, 1_000_003), base)
    return pa.table(
        {
            "id": ids,
            "name": pa.array([f"customer-{i % 100_003}" for i in range(start, start + count)]),
            "amount": pc.divide(pc.cast(ids, pa.float64()), 7.0),
            "updated_at": micros.cast(pa.timestamp("us", tz="UTC")),
            "region": pa.array(["eu" if i % 2 else "us" for i in range(start, start + count)]),
        }
    )


# -- (b) first micro-batch over a long log ------------------------------------------------


STREAM_STARTS: dict[str, dict[str, str]] = {
    "snapshot (default start)": {},
    "startingVersion=0": {"startingVersion": "0"},
}


def first_batch_latency(bench: Bench, sizes: Sizes) -> list[Figure]:
    path = str(long_log_table(bench.folder("delta_source") / "long_log", sizes.log_commits))
    # Not timed: a server's first stream also starts Python workers and compiles code.
    _first_batch(bench, path, STREAM_STARTS["startingVersion=0"])
    reading: dict[str, list[float]] = {case: [] for case in STREAM_STARTS}

    def measure(case: str) -> Callable[[], float]:
        def run() -> float:
            total, read = _first_batch(bench, path, STREAM_STARTS[case])
            reading[case].append(read)
            return total

        return run

    timed = interleaved({case: measure(case) for case in STREAM_STARTS}, _latency_reps(bench))
    return [
        Figure(
            benchmark=BENCHMARK,
            case=f"stream from {case}: {sizes.log_commits:,} commits/files, checkpointed log",
            ratio_label="seconds to first batch",
            ratio=statistics.median(timed[case]),
            medians={
                "seconds to first batch": statistics.median(timed[case]),
                "of which addBatch (plan + read the files)": statistics.median(reading[case]),
            },
            samples={"seconds to first batch": timed[case], "addBatch seconds": reading[case]},
            notes="start() to batch 0 reported done, noop sink, default trigger and limits",
        )
        for case in STREAM_STARTS
    ]


def _latency_reps(bench: Bench) -> int:
    """Each sample is a whole stream start; a few are enough for a median."""
    return max(1, min(bench.reps, 3))


def _first_batch(bench: Bench, path: str, options: dict[str, str]) -> tuple[float, float]:
    """Seconds from ``start()`` until batch 0 is reported done, and that batch's addBatch
    seconds (Spark's own timing of planning the files and reading them)."""
    checkpoint = bench.folder("delta_source") / f"checkpoint-{uuid.uuid4().hex}"
    reader = bench.spark.readStream.format("delta_changelog").options(**options)
    started = time.perf_counter()
    query = (
        reader.load(path)
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        while True:
            first = [p for p in query.recentProgress if p.get("batchId") == 0]
            if first:
                return time.perf_counter() - started, first[0]["durationMs"]["addBatch"] / 1000
            if query.exception() is not None:
                raise RuntimeError(f"the stream failed: {query.exception()}")
            time.sleep(0.05)
    finally:
        query.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)


def long_log_table(folder: Path, commits: int) -> Path:
    """One single-row append per commit, checkpointed every 100 commits by delta-rs.

    delta-rs creates the table; the appends after it are written the way delta-rs writes an
    append (a snappy parquet file, commitInfo + add), but directly: write_deltalake gets
    slower with every commit (about 13 ms a commit at 200 commits, 0.7 s at 4,000 on a busy
    2-core machine), which would make 10,000 commits take hours.
    """
    params = {"commits": commits, "layout": 2}
    if _built(folder, params):
        return folder
    _fresh(folder)
    write_deltalake(str(folder), _tiny_rows(0))
    started_ms = int(time.time() * 1000)
    for version in range(1, commits):
        _append_commit(folder, version, started_ms + version)
        if version % CHECKPOINT_INTERVAL == CHECKPOINT_INTERVAL - 1:
            DeltaTable(str(folder), version=version).create_checkpoint()
    _mark(folder, params)
    return folder


def _append_commit(folder: Path, version: int, timestamp_ms: int) -> None:
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    pq.write_table(_tiny_rows(version), folder / name, compression="snappy")
    values = {"id": version, "note": f"v{version}"}
    stats = {"numRecords": 1, "minValues": values, "maxValues": values}
    stats["nullCount"] = {"id": 0, "note": 0}
    info = {
        "timestamp": timestamp_ms,
        "operation": "WRITE",
        "operationParameters": {"mode": "Append"},
        "engineInfo": "delta-rs:py-1.6.6",
    }
    add = {
        "path": name,
        "partitionValues": {},
        "size": (folder / name).stat().st_size,
        "modificationTime": timestamp_ms,
        "dataChange": True,
        "stats": json.dumps(stats),
    }
    lines = [json.dumps({"commitInfo": info}), json.dumps({"add": add})]
    with open(folder / "_delta_log" / f"{version:020d}.json", "x") as commit:
        commit.write("\n".join(lines) + "\n")


def _tiny_rows(version: int) -> pa.Table:
    return pa.table({"id": pa.array([version], pa.int64()), "note": pa.array([f"v{version}"])})


# -- built once -----------------------------------------------------------------------------


def _built(folder: Path, params: dict[str, int]) -> bool:
    marker = folder / MARKER
    return marker.exists() and json.loads(marker.read_text()) == params


def _fresh(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)


def _mark(folder: Path, params: dict[str, int]) -> None:
    (folder / MARKER).write_text(json.dumps(params))


def _data_files(path: str) -> int:
    return sum(1 for _ in Path(path).rglob("*.parquet") if "_delta_log" not in _.parts)
