"""First loads and full refreshes: ``apply_changes`` of a batch whose keys are all new into
a new Delta target (types 1 and 2), and ``full_refresh=True`` of a target holding those
rows, beside Spark's own ``df.write.parquet`` of the same rows (what any copy of the rows
costs at least). Rows: ``k long, v string, amount double, seq long``, one change per key,
read by both sides from the same Parquet folder (made once).

The figures are Spark's seconds ÷ ours (above 1: ours first), medians of interleaved
repetitions, and the peak resident memory of any one of the server's Python processes
during ours. Beside them, what the same exactness costs Spark itself (``exact``): each
key's changes counted by a window over the key (as a refused duplicate needs), its
newest kept (type 1) or each ended by its next (type 2), written as Parquet, and its
keys' state (key, sequence, count) read back and written as Parquet: no Delta log and no
Python process, the floor of a plan with a shuffle by key on this machine.

``--quick`` runs 200k rows; a full run 10M and 40M (the refresh at 40M).
``SPARK_CDC_BENCH_FIRST_LOAD_ROWS`` (a comma-separated list of sizes) runs others: 100M
is what this machine's memory could not refresh before the tasks wrote the files.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Window
from pyspark.sql import functions as F
from spark_cdc import apply_changes

from tests.bench.common import Bench, Figure, interleaved, medians, paired_spread, seconds
from tests.bench.worker_memory import Sampler

BENCHMARK = "first_load"
SIZES, QUICK_SIZES = (10_000_000, 40_000_000), (200_000,)
SIZES_ENV = "SPARK_CDC_BENCH_FIRST_LOAD_ROWS"
_FILE_ROWS = 2_000_000
TARGET = 0.7
EXACT = "Spark's exact plan"


def rows_folder(bench: Bench, rows: int) -> str:
    """``rows`` new keys as Parquet files (made once)."""
    folder = bench.work / f"first_load_{rows}"
    if not (folder / "_complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        rng = np.random.default_rng(11)
        for start in range(0, rows, _FILE_ROWS):
            keys = np.arange(start, min(rows, start + _FILE_ROWS), dtype=np.int64)
            table = pa.table(
                {
                    "k": keys,
                    "v": pa.array(np.char.add("value-", (keys % 9973).astype(str))),
                    "amount": rng.random(len(keys)) * 100,
                    "seq": np.ones(len(keys), np.int64),
                }
            )
            pq.write_table(table, folder / f"part-{start // _FILE_ROWS:05d}.parquet")
        (folder / "_complete").touch()
    return str(folder)


def run(bench: Bench) -> list[Figure]:
    sizes = QUICK_SIZES if bench.quick else SIZES
    if os.environ.get(SIZES_ENV):
        sizes = tuple(int(s) for s in os.environ[SIZES_ENV].split(","))
    figures = []
    for rows in sizes:
        source = rows_folder(bench, rows)
        figures += [_first_load(bench, rows, source, scd_type) for scd_type in (1, 2)]
        if rows == max(sizes):
            figures.append(_refresh(bench, rows, source))
    return figures


def _first_load(bench: Bench, rows: int, source: str, scd_type: int) -> Figure:
    out = bench.work / "first_load_runs"

    def ours() -> None:
        target = _emptied(out / "target")
        feed = bench.spark.read.parquet(source)
        apply_changes(feed, str(target), keys=["k"], sequence_by="seq", stored_as_scd_type=scd_type)

    case = f"a first load of {rows:,} new keys into a new target, type {scd_type}"
    return _compared(bench, case, source, ours, out, scd_type)


def _refresh(bench: Bench, rows: int, source: str) -> Figure:
    out = bench.work / "first_load_runs"
    target = out / "refreshed"
    if not (target / "_delta_log").exists():
        apply_changes(bench.spark.read.parquet(source), str(target), keys=["k"], sequence_by="seq")

    def ours() -> None:
        feed = bench.spark.read.parquet(source)
        apply_changes(feed, str(target), keys=["k"], sequence_by="seq", full_refresh=True)

    case = f"full_refresh=True of a {rows:,}-row target with the same rows, type 1"
    figure = _compared(bench, case, source, ours, out)
    shutil.rmtree(out, ignore_errors=True)
    return figure


def _compared(
    bench: Bench, case: str, source: str, ours: Callable[[], None], out: Path, scd_type: int = 1
) -> Figure:
    peaks: list[float] = []

    def timed_ours() -> float:
        if bench.server_pid is None:
            return seconds(ours)
        with Sampler(bench.server_pid) as sampler:
            took = seconds(ours)
        peaks.append(sampler.peak_kb / 1024)
        return took

    def parquet() -> float:
        target = _emptied(out / "parquet")
        feed = bench.spark.read.parquet(source)
        return seconds(lambda: feed.write.parquet(str(target)))

    def exact() -> float:
        target = _emptied(out / "exact")
        state = _emptied(out / "exact_state")
        spark = bench.spark
        keyed = Window.partitionBy("k")
        rows = spark.read.parquet(source).withColumn("changes", F.count("*").over(keyed))
        if scd_type == 1:  # the newest change of each key
            newest = F.row_number().over(keyed.orderBy(F.col("seq").desc()))
            rows = rows.withColumn("newest", newest).filter("newest = 1").drop("newest")
        else:  # every change, ended by the key's next
            rows = rows.withColumn("ended_by", F.lead("seq").over(keyed.orderBy("seq")))

        def write() -> None:
            rows.write.parquet(str(target))
            keys = spark.read.parquet(str(target)).select("k", "seq", "changes")
            keys.write.parquet(str(state))

        return seconds(write)

    runs = {"ours": timed_ours, "df.write.parquet": parquet, EXACT: exact}
    interleaved(runs, 1)  # warm-up: the workers start
    peaks.clear()
    samples = interleaved(runs, bench.reps)
    for made in ("parquet", "exact", "exact_state"):
        shutil.rmtree(out / made, ignore_errors=True)
    found = medians(samples)
    ratio = found["df.write.parquet"] / found["ours"]
    of_exact = found[EXACT] / found["ours"]
    peak = max(peaks, default=0.0)
    return Figure(
        BENCHMARK,
        case,
        "df.write.parquet/ours (seconds)",
        round(ratio, 3),
        target=f"≥ {TARGET}",
        met=ratio >= TARGET,
        medians={
            **{k: round(v, 2) for k, v in found.items()},
            "peak MB (ours, any one Python process)": round(peak),
            f"{EXACT}/ours": round(of_exact, 3),
        },
        samples={k: [round(x, 2) for x in v] for k, v in samples.items()},
        spread=paired_spread(samples["df.write.parquet"], samples["ours"]),
        notes=(
            f"ours {found['ours']:.1f} s, Spark's Parquet write {found['df.write.parquet']:.1f} "
            f"s, Spark's own exact plan {found[EXACT]:.1f} s ({of_exact:.2f} of ours); peak "
            f"memory of any one of the server's Python processes during ours {peak:,.0f} MB "
            "(target ≤ 2,048)"
        ),
    )


def _emptied(path: Path) -> Path:
    """``path`` with nothing at it, and the state a target there gets."""
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(f"{path}__apply_changes_state", ignore_errors=True)
    return path
