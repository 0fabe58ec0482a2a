"""Scheduled ``apply_changes`` runs: what a job that runs every hour with
``trigger(availableNow=True)`` (``spark-cdc apply --available-now``) costs, whole, beside the
hand-written ``foreachBatch`` MERGE job (``apply``'s) doing the same. A scheduled run pays
its stream's start-up every time: Spark starts the Python processes of a data source writer
inside its first trigger, a ``foreachBatch`` function's process before it. So the figure is
the whole run, from ``start()`` (``apply_changes(...)`` on our side, which plans the feed
and starts the stream) to the stream's end, hand-written ÷ ours in seconds: above 1 when
ours finishes first.

Each run copies its side's base target to a folder no earlier run used (not timed), and
reads its own changes files: ``MICRO_BATCHES`` of ``count`` changes each (as ``apply``'s:
90% updates of random keys, 5% deletes, 5% new keys), medians of interleaved repetitions.

The cases run twice: on the stock server (``SparkConnectServer``, where each stream with a
Python data source writer starts three Python daemons of its own), and, both sides again,
on a second server of the same settings whose sessions and streams share their Python
workers (``spark-cdc serve --shared-python-workers``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
from pyspark.sql import SparkSession
from spark_cdc.testing.local_server import start_local_server

from tests.bench import apply
from tests.bench.common import Bench, Figure, interleaved, medians, paired_spread, stream_seconds

BENCHMARK = "apply_scheduled"
# (target rows, changes a micro-batch, micro-batches): a small hourly job, issue 75's job,
# a medium one, and a backlog of five large micro-batches.
CASES = (
    (1_000_000, 10_000, 1),
    (2_000_000, 200_000, 3),
    (10_000_000, 100_000, 3),
    (10_000_000, 1_000_000, 5),
)
QUICK_CASES = ((100_000, 1_000, 1), (100_000, 10_000, 3))


SHARED = ", on a server sharing Python workers"


def run(bench: Bench) -> list[Figure]:
    cases = [(t, *case) for t in (1, 2) for case in (QUICK_CASES if bench.quick else CASES)]
    figures = [_case(bench, *case) for case in cases]
    with _sharing_workers(bench) as shared:
        figures += [_case(shared, *case, server=SHARED) for case in cases]
    return figures


@contextmanager
def _sharing_workers(bench: Bench) -> Iterator[Bench]:
    """``bench`` on a second server of its settings, whose streams share Python workers."""
    server = start_local_server(
        conf=bench.server_conf,
        log_path=bench.work / "server-shared-workers.log",
        shared_python_workers=True,
    )
    spark = None
    try:
        spark = SparkSession.builder.remote(server.url).create()
        yield replace(bench, spark=spark, server_pid=server.process.pid)
    finally:
        if spark is not None:
            spark.stop()
        server.stop()


def _changes(bench: Bench, target_rows: int, count: int, micro_batches: int) -> str:
    folder = bench.work / f"apply_scheduled_{target_rows}_{count}_x{micro_batches}"

    def updated(batch: int, rng: np.random.Generator) -> np.ndarray:
        return rng.choice(target_rows, size=int(count * 0.95), replace=False)

    return apply.change_files(folder, target_rows, count, updated, (count, 7), micro_batches)


def _case(
    bench: Bench, scd_type: int, target_rows: int, count: int, micro_batches: int, server: str = ""
) -> Figure:
    source = _changes(bench, target_rows, count, micro_batches)
    ours_base = apply.ours_base(bench, target_rows, scd_type)
    hand_base = apply.hand_base(bench, target_rows, scd_type)
    runs = bench.work / "apply_runs"

    def whole(start: Any) -> float:
        batches: list[list[float]] = []
        seconds = stream_seconds(start, batches)
        if len(batches[0]) != micro_batches:
            raise RuntimeError(f"expected {micro_batches} micro-batches, the run had {batches}")
        return seconds

    def ours() -> float:
        run = apply.fresh(ours_base, runs / "ours")
        return whole(apply.ours_stream(bench, source, run, scd_type))

    def hand() -> float:
        run = apply.fresh(hand_base, runs / "hand")
        return whole(apply.hand_stream(bench, source, run, scd_type))

    samples = interleaved({"ours": ours, "hand-written": hand}, bench.reps)
    shutil.rmtree(runs, ignore_errors=True)
    seconds = medians(samples)
    ratio = seconds["hand-written"] / seconds["ours"]
    case = (
        f"type {scd_type}, a scheduled run of {micro_batches} micro-batch"
        f"{'es' if micro_batches > 1 else ''} of {count:,} changes into {target_rows:,} rows"
        f"{server}"
    )
    return Figure(
        BENCHMARK,
        case,
        "hand-written/ours (seconds of the whole run, start-up included)",
        round(ratio, 3),
        target="≥ 1.0",
        met=ratio >= 1.0,
        medians={k: round(v, 2) for k, v in seconds.items()},
        samples={k: [round(x, 2) for x in v] for k, v in samples.items()},
        spread=paired_spread(samples["hand-written"], samples["ours"]),
        notes=(
            f"whole run: ours {seconds['ours']:.1f} s, hand-written {seconds['hand-written']:.1f} s"
        ),
    )
