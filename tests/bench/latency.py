"""End-to-end latency of a post-processed Delta change feed: from a writer's commit returning
to the commit's rows reaching the sink of a running stream.

A Delta table is written live by delta-rs from this process, one small commit every
``COMMIT_EVERY`` seconds, cycling through an append (inserts), a copy-on-write UPDATE of one
row (carry-over pairs plus one update) and a copy-on-write DELETE of one row (carry-overs
plus one delete); ``time.time()`` is taken right after each commit returns. The stream is
``ChangelogReader(spark, streaming=True)`` with ``rowId=id``, ``computeUpdates`` and
``startingVersion=latest`` under ``trigger(processingTime=...)``.

The sink is a ``foreachBatch`` function. In Spark Connect it runs in a Python worker on the
server, on this machine, so its ``time.time()`` reads the same clock: for every micro-batch
it collects the ``_commit_version`` values present and appends (batch id, time the function
was called, time the rows were collected, versions) as one JSON line to a file the client
reads back. The arrival of a commit is the collection time of the first micro-batch holding
its rows, i.e. when a sink has them in hand; polling a file sink from the client would add
the polling period and a second job to every reading. Latency per commit is arrival minus
commit time, reported in trigger intervals (median; p90 and max alongside).

With ``postProcessing=source`` (the default, the targeted figure) the source resolves the
passes and a commit's rows leave in the micro-batch that reads it: the latency is the wait
for the next trigger plus that micro-batch. The client-built plan (``postProcessing=client``,
measured beside it) releases a commit once the watermark passes its timestamp, i.e. in the
micro-batch after the one that read it; whether Spark runs that no-data micro-batch at once
or at the next trigger tick is what the micro-batch log kept in the notes shows.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from spark_cdc import ChangelogReader

from tests.bench.common import Bench, Figure

BENCHMARK = "latency"
TRIGGERS = [2.0, 1.0]  # seconds
COMMIT_EVERY = 3.0  # seconds between the writer's commits
COMMITS = 25
QUICK_COMMITS = 3  # quick mode: the first trigger only, no warm-up commit
TARGET = 1.2  # trigger intervals, median, with the source resolving the passes
INITIAL_ROWS = 200
STARTUP_TIMEOUT = 120.0
ARRIVAL_TIMEOUT = 60.0
START_ATTEMPTS = 3
WARMUP = 2  # commits before the measured ones: the first data micro-batches start workers


@dataclass
class Arrival:
    batch: int
    called: float  # foreachBatch function entered
    collected: float  # the batch's rows collected
    versions: list[int]


def _rows(ids: range, tag: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "name": pa.array([f"{tag}{i}" for i in ids]),
            "amount": pa.array([float(i) for i in ids]),
        }
    )


def new_table(bench: Bench) -> str:
    """A fresh table: version 0 with ``INITIAL_ROWS`` rows in four files."""
    path = str(bench.folder("latency") / f"table_{uuid.uuid4().hex[:8]}")
    quarter = INITIAL_ROWS // 4
    for start in range(0, INITIAL_ROWS, quarter):
        mode = "append" if start else "error"
        write_deltalake(path, _rows(range(start, start + quarter), "a"), mode=mode)
    return path


def commit(path: str, step: int) -> None:
    """One small commit: an append, a copy-on-write update, or a copy-on-write delete."""
    kind = step % 3
    if kind == 0:
        first = 10_000 + step * 5
        write_deltalake(path, _rows(range(first, first + 5), "n"), mode="append")
    elif kind == 1:
        DeltaTable(path).update({"amount": f"amount + {step}"}, predicate=f"id = {step}")
    else:
        DeltaTable(path).delete(predicate=f"id = {INITIAL_ROWS - step}")


def recorder(log: str) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function (it runs on the server): one JSON line per micro-batch."""

    def record(batch: DataFrame, batch_id: int) -> None:
        import json
        import time

        called = time.time()
        versions = [r[0] for r in batch.select("_commit_version").distinct().collect()]
        collected = time.time()
        line = {"batch": batch_id, "called": called, "collected": collected}
        with open(log, "a") as out:
            out.write(json.dumps({**line, "versions": sorted(versions)}) + "\n")

    return record


def read_log(log: Path) -> list[Arrival]:
    if not log.exists():
        return []
    return [Arrival(**json.loads(line)) for line in log.read_text().splitlines() if line]


def first_arrivals(arrivals: list[Arrival]) -> dict[int, float]:
    seen: dict[int, float] = {}
    for arrival in arrivals:
        for version in arrival.versions:
            seen.setdefault(version, arrival.collected)
    return seen


def _wait(condition: Callable[[], bool], timeout: float, query: Any) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        if query.exception() is not None:
            raise query.exception()  # type: ignore[misc]
        time.sleep(0.1)
    return False


def write_commits(path: str, steps: range) -> dict[int, float]:
    """Commit every ``COMMIT_EVERY`` s; the time right after each commit returned, by version."""
    committed: dict[int, float] = {}
    start = time.time()
    for n, step in enumerate(steps):
        time.sleep(max(0.0, start + n * COMMIT_EVERY - time.time()))
        commit(path, step)
        done = time.time()
        committed[DeltaTable(path).version()] = done
    return committed


def _arrive(log: Path, versions: dict[int, float], trigger: float, query: Any) -> None:
    done = lambda: set(versions) <= set(first_arrivals(read_log(log)))  # noqa: E731
    _wait(done, ARRIVAL_TIMEOUT + 10 * trigger, query)


def start_stream(bench: Bench, path: str, log: str, trigger: float, where: str) -> Any:
    """Start the post-processed stream into the recording sink. On a loaded machine the
    server may give up waiting for the ``foreachBatch`` Python worker to connect back;
    that is a start-up failure, not a measure, so the start is tried again."""
    for attempt in range(START_ATTEMPTS):
        reader = ChangelogReader(bench.spark, streaming=True)
        reader.options(rowId="id", computeUpdates=True, startingVersion="latest")
        reader.option("postProcessing", where)
        writer = (
            reader.changes(path)
            .writeStream.foreachBatch(recorder(log))
            .trigger(processingTime=f"{trigger:g} seconds")
            .option("checkpointLocation", f"{path}_checkpoint_{attempt}")
        )
        try:
            return writer.start()
        except PySparkException as error:
            if "connect back" not in str(error) or attempt == START_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def stream(
    bench: Bench, trigger: float, commits: int, warmup: int, where: str
) -> tuple[dict[int, float], list[Arrival], list[Any]]:
    """Run the stream while the writer commits: commit times of the measured commits (after
    ``warmup`` commits that start the stream's Python workers and state), arrivals, progress."""
    path = new_table(bench)
    log = Path(path + "_arrivals.jsonl")
    query = start_stream(bench, path, str(log), trigger, where)
    try:
        # "latest" is pinned by the first micro-batch: commit only after it ran.
        if not _wait(lambda: query.lastProgress is not None, STARTUP_TIMEOUT, query):
            raise TimeoutError("the stream made no first micro-batch")
        _arrive(log, write_commits(path, range(1, warmup + 1)), trigger, query)
        committed = write_commits(path, range(warmup + 1, warmup + 1 + commits))
        _arrive(log, committed, trigger, query)
        return committed, read_log(log), list(query.recentProgress)
    finally:
        query.stop()


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _span(progress: Any) -> tuple[float, float]:
    """A micro-batch's start and end, epoch seconds."""
    start = datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")).timestamp()
    return start, start + progress.durationMs["triggerExecution"] / 1000


def batches_to_release(
    committed: dict[int, float], arrivals: list[Arrival], progress: list[Any]
) -> Counter[int]:
    """Per commit, how many micro-batches after the one that read it (the first to start
    after the commit returned) its rows reached the sink: 1 is the watermark's minimum."""
    starts = sorted((_span(p)[0], p.batchId) for p in progress)
    released = {v: a.batch for a in reversed(arrivals) for v in a.versions}
    counts: Counter[int] = Counter()
    for version, at in committed.items():
        read = next((batch for start, batch in starts if start >= at), None)
        if read is not None and version in released:
            counts[released[version] - read] += 1
    return counts


def micro_batch_summary(
    committed: dict[int, float], arrivals: list[Arrival], progress: list[Any]
) -> str:
    """How the micro-batches went: how long they took, how soon a no-data micro-batch (the
    one that releases what the batch before it read) started after that batch ended, and
    how many micro-batches each commit waited for."""
    spans = [_span(p) for p in progress]
    durations = [end - start for start, end in spans]
    gaps = [
        spans[i][0] - spans[i - 1][1]
        for i in range(1, len(progress))
        if progress[i].numInputRows == 0 and progress[i - 1].numInputRows > 0
    ]
    gap = f"median {statistics.median(gaps):.2f} s" if gaps else "none seen"
    collect = statistics.median([a.collected - a.called for a in arrivals])
    waited = batches_to_release(committed, arrivals, progress)
    return (
        f"{len(progress)} micro-batches, median {statistics.median(durations):.2f} s "
        f"(max {max(durations):.2f} s); a no-data micro-batch after a data one started "
        f"{gap} after it ended; foreachBatch collect median {collect:.2f} s; "
        f"micro-batches from reading a commit to releasing it: {dict(sorted(waited.items()))}"
    )


def measure(
    bench: Bench, trigger: float, commits: int, warmup: int, where: str = "source"
) -> Figure:
    committed, arrivals, progress = stream(bench, trigger, commits, warmup, where)
    arrived = first_arrivals(arrivals)
    latencies = {v: arrived[v] - t for v, t in committed.items() if v in arrived}
    missing = sorted(set(committed) - set(latencies))
    values = list(latencies.values())
    median = statistics.median(values) if values else None
    in_intervals = None if median is None else median / trigger
    stats = {}
    if values:
        stats = {
            "median s": round(median, 3),
            "p90 s": round(_percentile(values, 0.9), 3),
            "max s": round(max(values), 3),
            "median intervals": round(median / trigger, 3),
            "p90 intervals": round(_percentile(values, 0.9) / trigger, 3),
            "max intervals": round(max(values) / trigger, 3),
        }
    targeted = where == "source"
    return Figure(
        benchmark=BENCHMARK,
        case=(
            f"postProcessing={where}, processingTime {trigger:g} s, "
            f"a commit every {COMMIT_EVERY:g} s"
        ),
        ratio_label="median latency (trigger intervals)",
        ratio=None if in_intervals is None else round(in_intervals, 3),
        target=f"≤ {TARGET:g}" if targeted else None,
        met=None
        if in_intervals is None or not targeted
        else in_intervals <= TARGET and not missing,
        medians=stats,
        samples={"latency s": [round(latencies[v], 3) for v in sorted(latencies)]},
        notes=(
            f"{len(committed)} commits after {warmup} warm-up ones (append / copy-on-write "
            "update / copy-on-write delete), "
            f"dropCarryovers + computeUpdates; arrival = foreachBatch collected the rows; "
            + (f"never arrived: versions {missing}; " if missing else "")
            + micro_batch_summary(committed, arrivals, progress)
        ),
    )


def run(bench: Bench) -> list[Figure]:
    if bench.quick:
        return [measure(bench, TRIGGERS[0], QUICK_COMMITS, warmup=0)]
    figures = [measure(bench, trigger, COMMITS, WARMUP) for trigger in TRIGGERS]
    # The client-built plan beside it: it holds each commit until the watermark passes it.
    return [*figures, measure(bench, TRIGGERS[-1], COMMITS, WARMUP, where="client")]
