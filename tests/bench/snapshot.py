"""Snapshots: ``apply_changes_from_snapshot`` of a 10M-row snapshot (100k with ``--quick``)
into a target holding the previous one, 1% of its keys changed, 0.1% deleted and 0.1% new,
beside what a user writes without this package:

- ours: ``apply_changes_from_snapshot`` (type 1) into a copy of its target and state,
  built once by applying the previous snapshot (not timed);
- hand-written: the target read by Spark (its Parquet files, as delta-rs lists them), a full
  outer join with the snapshot on the key, the rows that differ (NULL-safely) collected to
  the client as Arrow, and delta-rs' MERGE of them into a copy of a target holding the
  previous snapshot (keys gone deleted, the others upserted).

And the diff alone, written to the ``noop`` sink: ``snapshot_changes`` of the two snapshots
beside Spark's own ``exceptAll`` both ways (what changed, without pairing or checks). The
figures are ours ÷ theirs in seconds (lower is better), medians of interleaved repetitions,
and the peak resident memory of any one of the server's Python processes during ours.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from spark_cdc import apply_changes_from_snapshot, snapshot_changes

from tests.bench.apply import fresh
from tests.bench.common import Bench, Figure, interleaved, medians, paired_spread, seconds
from tests.bench.worker_memory import Sampler

BENCHMARK = "snapshot"
ROWS, QUICK_ROWS = 10_000_000, 100_000
CHANGED, DELETED, NEW = 0.01, 0.001, 0.001
STATUSES = np.array(["new", "paid", "shipped", "refunded"])
VALUES = ("status", "amount", "region", "note")


def _snapshot(ids: np.ndarray, rng: np.random.Generator) -> pa.Table:
    count = len(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "status": pa.array(STATUSES[rng.integers(0, len(STATUSES), count)]),
            "amount": pa.array(rng.random(count) * 100),
            "region": pa.array(np.where(ids % 2 == 0, "north", "south")),
            "note": pa.array(["bench"] * count, pa.string()),
        }
    )


def snapshots(bench: Bench, rows: int) -> tuple[str, str]:
    """The previous snapshot and the next one, Parquet folders (made once)."""
    folder = bench.work / f"snapshots_{rows}"
    first, second = folder / "1", folder / "2"
    if not (folder / "_complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        first.mkdir(parents=True)
        second.mkdir(parents=True)
        rng = np.random.default_rng(7)
        old = _snapshot(np.arange(rows), rng)
        pq.write_table(old, first / "part.parquet")
        changed = rng.choice(rows, size=int(rows * (CHANGED + DELETED)), replace=False)
        gone = np.zeros(rows, bool)
        gone[changed[: int(rows * DELETED)]] = True
        updated = np.zeros(rows, bool)
        updated[changed[int(rows * DELETED) :]] = True
        other = _snapshot(np.arange(rows), rng)

        def values(name: str) -> pa.Array:
            kept, drawn = (t.column(name).to_numpy(zero_copy_only=False) for t in (old, other))
            return pa.array(np.where(updated, drawn, kept))

        new = old.set_column(1, "status", values("status")).set_column(
            2, "amount", values("amount")
        )
        new = new.filter(pa.array(~gone))
        added = _snapshot(np.arange(rows, rows + int(rows * NEW)), rng)
        pq.write_table(pa.concat_tables([new, added]), second / "part.parquet")
        (folder / "_complete").touch()
    return str(first), str(second)


def ours_base(bench: Bench, rows: int, first: str) -> Path:
    base = bench.work / f"snapshot_ours_{rows}"
    if not (base / "_bench_complete").exists():
        shutil.rmtree(base, ignore_errors=True)
        apply_changes_from_snapshot(
            str(base / "target"),
            _once(bench, first, 1),
            ["id"],
            state_location=str(base / "state"),
            spark=bench.spark,
        )
        (base / "_bench_complete").touch()
    return base


def hand_base(bench: Bench, rows: int, first: str) -> Path:
    base = bench.work / f"snapshot_hand_{rows}"
    if not (base / "_bench_complete").exists():
        shutil.rmtree(base, ignore_errors=True)
        write_deltalake(str(base / "target"), pq.read_table(first))
        (base / "_bench_complete").touch()
    return base


def _once(bench: Bench, folder: str, version: int) -> Any:
    given = [(folder, version)]

    def next_snapshot(last: int | None) -> Any:
        if not given:
            return None
        path, number = given.pop()
        return bench.spark.read.parquet(path), number

    return next_snapshot


def hand_written(bench: Bench, target: str, snapshot: str) -> None:
    """The diff as a full outer join, and delta-rs' MERGE of it (module docstring)."""
    from pyspark.sql import functions as F

    table = DeltaTable(target)
    old = bench.spark.read.parquet(*table.file_uris()).alias("t")
    new = bench.spark.read.parquet(snapshot).alias("s")
    joined = old.join(new, F.col("t.id") == F.col("s.id"), "full_outer")
    same = F.lit(True)
    for name in VALUES:
        same = same & F.col(f"t.{name}").eqNullSafe(F.col(f"s.{name}"))
    differ = F.col("t.id").isNull() | F.col("s.id").isNull() | ~same
    diff = joined.filter(differ).select(
        F.coalesce(F.col("s.id"), F.col("t.id")).alias("id"),
        *[F.col(f"s.{name}").alias(name) for name in VALUES],
        F.col("s.id").isNull().alias("gone"),
    )
    changes = diff.toArrow()
    (
        table.merge(changes, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_delete("s.gone")
        .when_matched_update({name: f"s.{name}" for name in VALUES})
        .when_not_matched_insert({"id": "s.id", **{name: f"s.{name}" for name in VALUES}})
        .execute()
    )


def run(bench: Bench) -> list[Figure]:
    rows = QUICK_ROWS if bench.quick else ROWS
    first, second = snapshots(bench, rows)
    ours_at, hand_at = ours_base(bench, rows, first), hand_base(bench, rows, first)
    runs = bench.work / "snapshot_runs"
    peaks: list[float] = []

    def ours() -> float:
        copy = fresh(ours_at, runs / "ours")

        def applied() -> None:
            apply_changes_from_snapshot(
                str(copy / "target"),
                _once(bench, second, 2),
                ["id"],
                state_location=str(copy / "state"),
                spark=bench.spark,
            )

        if bench.server_pid is None:
            return seconds(applied)
        with Sampler(bench.server_pid) as sampler:
            took = seconds(applied)
        peaks.append(sampler.peak_kb / 1024)
        return took

    def hand() -> float:
        copy = fresh(hand_at, runs / "hand")
        return seconds(lambda: hand_written(bench, str(copy / "target"), second))

    def diff() -> float:
        before, after = bench.spark.read.parquet(first), bench.spark.read.parquet(second)
        changes = snapshot_changes(before, after, ["id"], 2)
        return seconds(lambda: changes.write.format("noop").mode("overwrite").save())

    def except_all() -> float:
        before, after = bench.spark.read.parquet(first), bench.spark.read.parquet(second)
        both = before.exceptAll(after).unionByName(after.exceptAll(before))
        return seconds(lambda: both.write.format("noop").mode("overwrite").save())

    interleaved({"ours": ours, "hand-written": hand}, 1)  # warm-up: the workers start
    peaks.clear()
    applying = interleaved({"ours": ours, "hand-written": hand}, bench.reps)
    diffing = interleaved({"snapshot_changes": diff, "exceptAll both ways": except_all}, bench.reps)
    shutil.rmtree(runs, ignore_errors=True)
    applied_s, diffed_s = medians(applying), medians(diffing)
    ratio = applied_s["ours"] / applied_s["hand-written"]
    diff_ratio = diffed_s["snapshot_changes"] / diffed_s["exceptAll both ways"]
    peak = max(peaks, default=0.0)
    case = (
        f"a {rows:,}-row snapshot into {rows:,} rows, {CHANGED:.0%} of keys changed, "
        f"{DELETED:.1%} deleted, {NEW:.1%} new"
    )
    return [
        Figure(
            BENCHMARK,
            f"apply_changes_from_snapshot, {case}",
            "ours/hand-written (seconds)",
            round(ratio, 3),
            target="≤ 0.8",
            met=ratio <= 0.8,
            medians={
                **{k: round(v, 2) for k, v in applied_s.items()},
                "peak MB (ours, any one Python process)": round(peak),
            },
            samples={k: [round(x, 2) for x in v] for k, v in applying.items()},
            spread=paired_spread(applying["ours"], applying["hand-written"]),
            notes=(
                f"ours {applied_s['ours']:.1f} s, the hand-written join and MERGE "
                f"{applied_s['hand-written']:.1f} s; peak memory of any one of the server's "
                f"Python processes during ours {peak:,.0f} MB (target ≤ 2,048)"
            ),
        ),
        Figure(
            BENCHMARK,
            f"snapshot_changes, {case}",
            "ours/exceptAll both ways (seconds)",
            round(diff_ratio, 3),
            target="≤ 1.0",
            met=diff_ratio <= 1.0,
            medians={k: round(v, 2) for k, v in diffed_s.items()},
            samples={k: [round(x, 2) for x in v] for k, v in diffing.items()},
            spread=paired_spread(diffing["snapshot_changes"], diffing["exceptAll both ways"]),
            notes=(
                f"snapshot_changes {diffed_s['snapshot_changes']:.1f} s (pairs updates, "
                f"checks keys), exceptAll both ways {diffed_s['exceptAll both ways']:.1f} s"
            ),
        ),
    ]
